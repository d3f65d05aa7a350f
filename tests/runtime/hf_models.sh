#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Hugging Face models trained by dtrain against PyTorch and transformers
# (the venv of tests/frameworks/torch-venv; SKIP without it, never PASS),
# through hf_train (one process, cpu backend) and hf_models.py:
#  - a LlamaForCausalLM (GQA 4 heads / 2 kv heads, untied head, MLP width
#    90, Llama 3 RoPE scaling) and a GPT2LMHeadModel from save_pretrained,
#    loaded by --init-hf: the first loss within 1e-5 of PyTorch's, every
#    tensor's gradient within 1e-4 relative, 20 AdamW steps' losses within
#    1e-4 of torch.optim.AdamW's; the trained model written by --save-hf's
#    writer loads in from_pretrained with no missing or unexpected key and
#    gives dtrain's loss on batch 0 within 1e-5;
#  - dtrain-train --init-hf ... --save-hf: hf_train's losses (to the 6
#    digits compared), and a folder transformers loads; --model-config (random
#    weights of the architecture); a Llama checkpoint resumed gives the
#    unbroken run's losses bit for bit;
#  - GPT-2 imported from Hugging Face and exported to llm.c's file trains
#    the same as from the folder (the llm.c path agrees);
#  - wrong folders refused with exit 2 and one line: a missing tensor, a
#    tensor of another shape, an unknown tensor, kv heads not dividing the
#    heads; --save-llmc of a Llama; two model sources.
set -u
. "$top_srcdir/tests/tap.sh"
python=$("$top_srcdir/tests/frameworks/torch-venv" --check 2>/dev/null) || skip_all "no torch venv (tests/frameworks/torch-venv)"
hf_train=$top_builddir/tests/runtime/hf_train
train=$top_builddir/runtime/dtrain-train
d=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-hf-models-XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ref() { "$python" "$top_srcdir/tests/runtime/hf_models.py" "$@" 2>>"$d/py.err"; }
steps=20 B=8 T=16 lr=1e-3 wd=0.1

# figure NAME FILE: the value hf_models.py printed for NAME
figure() { awk -v n="$1" '$1 == n { print $2 }' "$2"; }
# below VALUE LIMIT: VALUE is a number under LIMIT
below() { awk -v v="$1" -v l="$2" 'BEGIN { exit !(v != "" && v != "inf" && v + 0 < l + 0) }'; }

for arch in llama gpt2; do
  w=$d/$arch
  mkdir -p "$w"
  check "$arch: transformers makes a random model (save_pretrained) and a token file" \
    ref make "$arch" "$w/hf" "$w/tokens.bin"
  check "$arch: hf_train trains it from --init-hf ($steps steps) and saves gradients and the model" \
    sh -c '"$1" "$2/hf" "$2/tokens.bin" "$3" "$4" "$5" "$6" "$7" "$2" >"$2/hf_train.out" 2>"$2/hf_train.err"' \
    _ "$hf_train" "$w" "$steps" "$B" "$T" "$lr" "$wd"
  [ -s "$w/hf_train.err" ] && sed 's/^/# /' "$w/hf_train.err"
  ref check "$w/hf" "$w/tokens.bin" "$w" "$steps" "$B" "$T" "$lr" "$wd" >"$w/figures"
  v=$(figure first_loss "$w/figures"); check "$arch: the first loss is PyTorch's within 1e-5 (|diff| $v)" below "$v" 1e-5
  v=$(figure grad "$w/figures"); check "$arch: every tensor's gradient is PyTorch's within 1e-4 relative (worst $v)" below "$v" 1e-4
  v=$(figure losses "$w/figures"); check "$arch: $steps AdamW steps' losses are torch.optim.AdamW's within 1e-4 (worst $v)" below "$v" 1e-4
  v=$(figure load_issues "$w/figures"); check "$arch: the saved model loads in from_pretrained with no missing, unexpected or mismatched key ($v)" [ "$v" = 0 ]
  v=$(figure final_loss "$w/figures"); check "$arch: the saved model gives dtrain's loss within 1e-5 in transformers (|diff| $v)" below "$v" 1e-5
done

# dtrain-train on the same model: the CLI's flags, the same code
w=$d/llama
cli=(--data "$w/tokens.bin" --batch "$B" --seq "$T" --lr "$lr" --weight-decay "$wd" --grad-clip 0
  --schedule constant --order sequential --threads 1 --log-every 0)
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
check "dtrain-train --init-hf --save-hf: exit 0" \
  "$train" --init-hf "$w/hf" "${cli[@]}" --steps 3 --metrics "$d/cli.jsonl" --save-hf "$d/cli-out"
check "dtrain-train --init-hf: hf_train's losses (to 6 significant digits)" \
  [ "$(losses "$d/cli.jsonl" | awk '{ printf "%.6g\n", $1 }')" = "$(awk '$1 == "loss" && $2 < 3 { printf "%.6g\n", $3 }' "$w/hf_train.out")" ]
check "dtrain-train --save-hf wrote config.json and model.safetensors" [ -s "$d/cli-out/config.json" -a -s "$d/cli-out/model.safetensors" ]
check "dtrain-train --model-config config.json: random weights of the architecture, exit 0" \
  "$train" --model-config "$w/hf/config.json" "${cli[@]}" --steps 2 --metrics "$d/random.jsonl"
"$train" --init-hf "$w/hf" "${cli[@]}" --steps 4 --metrics "$d/whole.jsonl" >/dev/null 2>&1
"$train" --init-hf "$w/hf" "${cli[@]}" --steps 2 --checkpoint "$d/ck" >/dev/null 2>&1
check "a Llama run resumed from its checkpoint (dtrain-train --checkpoint): exit 0" \
  "$train" --model-config "$w/hf/config.json" "${cli[@]}" --steps 4 --checkpoint "$d/ck" --metrics "$d/resumed.jsonl"
check "the resumed steps 2 and 3 have the unbroken run's losses bit for bit" \
  [ "$(losses "$d/resumed.jsonl")" = "$(losses "$d/whole.jsonl" | tail -n 2)" -a -n "$(losses "$d/resumed.jsonl")" ]

# GPT-2: Hugging Face in, llm.c out, the same training either way
g=$d/gpt2
gcli=(--data "$g/tokens.bin" --batch "$B" --seq "$T" --threads 1 --log-every 0 --steps 3)
check "GPT-2 from Hugging Face exported to an llm.c file (--steps 0 --save-llmc)" \
  "$train" --init-hf "$g/hf" --data "$g/tokens.bin" --batch "$B" --seq "$T" --steps 0 --save-llmc "$d/gpt2.bin"
"$train" --init-hf "$g/hf" "${gcli[@]}" --metrics "$d/g-hf.jsonl" >/dev/null 2>&1
"$train" --init-llmc "$d/gpt2.bin" "${gcli[@]}" --metrics "$d/g-llmc.jsonl" >/dev/null 2>&1
check "GPT-2: --init-hf and --init-llmc of its export train to the same losses bit for bit" \
  [ "$(losses "$d/g-hf.jsonl")" = "$(losses "$d/g-llmc.jsonl")" -a "$(losses "$d/g-hf.jsonl" | wc -l)" = 3 ]

# refused: exit 2 and one line naming the problem
refused() { # NAME NEEDLE ARGS...: exit 2, one line holding NEEDLE
  local name=$1 needle=$2; shift 2
  "$@" >"$d/out" 2>"$d/err"; local rc=$?
  check "$name: exit 2 and one line ($(head -c 200 "$d/err"))" \
    [ "$rc" = 2 -a "$(wc -l <"$d/err")" = 1 ] && grep -q -- "$needle" "$d/err"
}
edit() { # DIR PYTHON-STATEMENTS: a copy of the llama folder changed by the statements (t: the tensors)
  mkdir -p "$1" && cp "$w/hf/config.json" "$1/" && "$python" - "$w/hf" "$1" "$2" <<'PY' 2>>"$d/py.err"
import sys
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1] + "/model.safetensors")
exec(sys.argv[3])
save_file(t, sys.argv[2] + "/model.safetensors", metadata={"format": "pt"})
PY
}
edit "$d/missing" 'del t["model.layers.1.mlp.up_proj.weight"]'
refused "a folder without a tensor" "model.layers.1.mlp.up_proj.weight" "$train" --init-hf "$d/missing" "${cli[@]}" --steps 1
edit "$d/shape" 't["model.layers.0.self_attn.k_proj.weight"] = t["model.layers.0.self_attn.q_proj.weight"].clone()'
refused "a tensor of another shape" "shape" "$train" --init-hf "$d/shape" "${cli[@]}" --steps 1
edit "$d/extra" 't["model.layers.9.mlp.up_proj.weight"] = t["model.layers.1.mlp.up_proj.weight"].clone()'
refused "an unknown tensor" "model.layers.9.mlp.up_proj.weight" "$train" --init-hf "$d/extra" "${cli[@]}" --steps 1
mkdir -p "$d/kv3" && sed 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' "$w/hf/config.json" >"$d/kv3/config.json"
refused "3 kv heads for 4 heads" "key" "$train" --model-config "$d/kv3/config.json" "${cli[@]}" --steps 1
refused "--save-llmc of a Llama" "GPT-2 models only" "$train" --init-hf "$w/hf" "${cli[@]}" --steps 1 --save-llmc "$d/l.bin"
refused "--init-hf with --init-llmc" "not both" "$train" --init-hf "$w/hf" --init-llmc "$d/gpt2.bin" "${cli[@]}" --steps 1
[ -s "$d/py.err" ] && grep -v "Writing model shards\|Loading weights" "$d/py.err" | head -5 | sed 's/^/# python: /'
done_testing
