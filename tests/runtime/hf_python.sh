#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# model/dtrain_hf.h against the real Python packages (the venv of
# tests/frameworks/torch-venv: torch, transformers 5.25, safetensors; SKIP
# without it, never PASS), through tests/runtime/hf_probe:
#  - files written by safetensors.torch.save_file (F32, BF16, F16: every
#    16-bit pattern, inf, NaN, subnormals) read by dtrain bit for bit;
#  - dtrain's copy: the same bytes as save_file of the same tensors, and
#    equal values through safetensors.safe_open (a BF16 signalling NaN
#    made quiet, dtrain_bf16_from_f32's rule);
#  - config.json of LlamaConfig(...).save_pretrained() (GQA, untied,
#    llama3 rope) and GPT2Config().save_pretrained() parsed right, and
#    dtrain's config.json loaded by AutoConfig with equal fields;
#  - a tiny LlamaForCausalLM saved sharded, read through the index,
#    written sharded by dtrain and loaded by from_pretrained: equal weights.
set -u
. "$top_srcdir/tests/tap.sh"
probe=$top_builddir/tests/runtime/hf_probe
python=$("$top_srcdir/tests/frameworks/torch-venv" --check 2>/dev/null) || skip_all "no torch venv (tests/frameworks/torch-venv)"
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-hf-python-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore OMP_NUM_THREADS=1

py() { "$python" - "$work" "$@" 2>>"$work/py.err"; }

mkdir -p "$work/a" "$work/gpt2" "$work/b"
check "Python writes the fixtures (save_file F32/BF16/F16, LlamaConfig, GPT2Config)" py <<'PY'
import sys, torch
from safetensors.torch import save_file
from transformers import LlamaConfig, GPT2Config
w = sys.argv[1]
g = torch.Generator().manual_seed(1)
all16 = torch.arange(65536, dtype=torch.int32).to(torch.int16)
t = {
    "model.embed_tokens.weight": torch.randn(7, 5, generator=g),
    "special": torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, 3.4e38]),
    "scalar": torch.tensor(2.5),
    "empty": torch.zeros(0, 3),
    "bf16.all": all16.view(torch.bfloat16).reshape(256, 256).clone(),
    "bf16.rand": torch.randn(3, 4, 2, generator=g).to(torch.bfloat16),
    "f16.all": all16.view(torch.float16).clone(),
}
save_file(t, f"{w}/a/model.safetensors", metadata={"format": "pt"})
LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=1000, max_position_embeddings=512, rms_norm_eps=1e-5,
            tie_word_embeddings=False, bos_token_id=5, eos_token_id=[6, 7],
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 128}).save_pretrained(f"{w}/a")
GPT2Config().save_pretrained(f"{w}/gpt2")
PY

"$probe" tensors "$work/a" >"$work/a.txt" 2>"$work/probe.err"
check "hf_probe reads every tensor of save_file's file ($(cat "$work/probe.err"))" test -s "$work/a.txt"
check "every value read bit for bit: F32 (inf, NaN, subnormal), BF16 and F16 (all 65536 patterns), rank 0, empty" py <<'PY'
import sys, torch
from safetensors import safe_open
w = sys.argv[1]
got = {}
for line in open(f"{w}/a.txt"):
    f = line.split()
    got[f[0]] = (f[1], f[2], [int(x, 16) for x in f[3:]])
names = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
with safe_open(f"{w}/a/model.safetensors", "pt") as f:
    assert sorted(f.keys()) == sorted(got), (sorted(f.keys()), sorted(got))
    for k in f.keys():
        t = f.get_tensor(k)
        dtype, shape, bits = got[k]
        assert names[dtype] == t.dtype, k
        assert shape == (",".join(map(str, t.shape)) or "-"), (k, shape, t.shape)
        want = t.float().reshape(-1).view(torch.int32).tolist()
        want = [x & 0xffffffff for x in want]
        bad = [i for i, (a, b) in enumerate(zip(bits, want)) if a != b]
        assert len(bits) == len(want) and not bad, (k, len(bad), bad[:3])
PY

check "hf_probe copies the folder (F16 as F32)" "$probe" copy "$work/a" "$work/b" 0
check "dtrain's model.safetensors has the bytes save_file writes for the same tensors, and safe_open reads equal values" py <<'PY'
import sys, torch
from safetensors import safe_open
from safetensors.torch import save_file
w = sys.argv[1]
src = {}
with safe_open(f"{w}/a/model.safetensors", "pt") as f:
    for k in f.keys():
        t = f.get_tensor(k)
        if t.dtype == torch.bfloat16:  # dtrain's rounding makes a signalling NaN quiet
            t = torch.where(t.isnan(), (t.view(torch.int16) | 0x40).view(torch.bfloat16), t)
        src[k] = t.float() if t.dtype == torch.float16 else t
with safe_open(f"{w}/b/model.safetensors", "pt") as f:
    assert f.metadata() == {"format": "pt"}
    assert sorted(f.keys()) == sorted(src)
    for k in f.keys():
        a, b = src[k], f.get_tensor(k)
        assert a.dtype == b.dtype and a.shape == b.shape, k
        assert torch.equal(a.reshape(-1).view(torch.int16 if a.element_size() == 2 else torch.int32),
                           b.reshape(-1).view(torch.int16 if b.element_size() == 2 else torch.int32)), k
save_file(src, f"{w}/py.safetensors", metadata={"format": "pt"})
assert open(f"{w}/py.safetensors", "rb").read() == open(f"{w}/b/model.safetensors", "rb").read()
PY

"$probe" config "$work/a" >"$work/a.cfg" 2>"$work/probe.err"
check "LlamaConfig.save_pretrained's config.json parsed: GQA, untied, llama3 rope, eos list ($(cat "$work/probe.err"))" \
  diff -u - "$work/a.cfg" <<'EOF2'
arch=1
hidden_size=64
intermediate_size=176
num_layers=3
num_heads=8
num_kv_heads=2
head_dim=8
vocab_size=1000
max_positions=512
norm_eps=1.0000000000000001e-05
tie_word_embeddings=0
rope_theta=500000
rope_type=1
rope_factor=32
rope_low_freq_factor=1
rope_high_freq_factor=4
rope_original_max_positions=128
bos_token_id=5
dtype=
eos=6,7
EOF2
"$probe" config "$work/gpt2" >"$work/gpt2.cfg" 2>"$work/probe.err"
check "GPT2Config().save_pretrained's config.json parsed: 768 wide, 12 layers, tied, eps 1e-5 ($(cat "$work/probe.err"))" \
  diff -u - "$work/gpt2.cfg" <<'EOF2'
arch=3
hidden_size=768
intermediate_size=3072
num_layers=12
num_heads=12
num_kv_heads=12
head_dim=64
vocab_size=50257
max_positions=1024
norm_eps=1.0000000000000001e-05
tie_word_embeddings=1
rope_theta=0
rope_type=0
rope_factor=0
rope_low_freq_factor=0
rope_high_freq_factor=0
rope_original_max_positions=0
bos_token_id=50256
dtype=
eos=50256
EOF2
mkdir -p "$work/gpt2b"
check "dtrain's config.json loaded by AutoConfig.from_pretrained with the fields of the original (Llama, GPT-2)" py <<'PY'
import sys, shutil
from transformers import AutoConfig
w = sys.argv[1]
a, b = AutoConfig.from_pretrained(f"{w}/a"), AutoConfig.from_pretrained(f"{w}/b")
assert type(a) is type(b), (type(a), type(b))
for k in ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
          "rope_parameters", "bos_token_id", "eos_token_id", "hidden_act", "attention_bias", "mlp_bias"]:
    assert getattr(a, k) == getattr(b, k), (k, getattr(a, k), getattr(b, k))
PY
# GPT-2: dtrain writes the config of a folder whose weights are a copy of a's
mkdir -p "$work/g1" && cp "$work/a/model.safetensors" "$work/g1/" && cp "$work/gpt2/config.json" "$work/g1/"
check "hf_probe copies a GPT-2 folder" "$probe" copy "$work/g1" "$work/gpt2b" 0
check "dtrain's GPT-2 config.json loaded by AutoConfig with GPT2Config()'s fields" py <<'PY'
import sys
from transformers import AutoConfig, GPT2Config
w = sys.argv[1]
a, b = GPT2Config(), AutoConfig.from_pretrained(f"{w}/gpt2b")
assert type(b).__name__ == "GPT2Config"
for k in ["n_embd", "n_layer", "n_head", "n_positions", "n_inner", "vocab_size", "layer_norm_epsilon",
          "activation_function", "tie_word_embeddings", "bos_token_id", "eos_token_id"]:
    assert getattr(a, k) == getattr(b, k), (k, getattr(a, k), getattr(b, k))
PY

mkdir -p "$work/m" "$work/m2"
check "Python saves a tiny LlamaForCausalLM in 6 shards" py <<'PY'
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
w = sys.argv[1]
torch.manual_seed(0)
c = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
LlamaForCausalLM(c).save_pretrained(f"{w}/m", max_shard_size="20KB")
PY
check "dtrain reads it through model.safetensors.index.json and writes it in shards of 30000 bytes" \
  "$probe" copy "$work/m" "$work/m2" 30000
check "LlamaForCausalLM.from_pretrained loads dtrain's sharded folder: every weight equal" py <<'PY'
import sys, os, json, torch
from transformers import LlamaForCausalLM
w = sys.argv[1]
idx = json.load(open(f"{w}/m2/model.safetensors.index.json"))
assert len(set(idx["weight_map"].values())) > 1, idx
assert not os.path.exists(f"{w}/m2/model.safetensors")
a = LlamaForCausalLM.from_pretrained(f"{w}/m").state_dict()
b = LlamaForCausalLM.from_pretrained(f"{w}/m2").state_dict()
assert a.keys() == b.keys()
for k in a:
    assert torch.equal(a[k], b[k]), k
PY
[ "$TAP_FAILED" -eq 0 ] || sed 's/^/# /' "$work/py.err" | tail -n 30
done_testing
