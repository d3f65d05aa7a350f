#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-generate --hf against transformers (the venv of
# tests/frameworks/torch-venv; SKIP without it, never PASS): small random
# models of hf_models.py make (Llama: GQA 4 heads / 2 kv heads, untied
# head, MLP width 90, Llama 3 RoPE scaling; GPT-2), their weights made
# sharper (times 4: the initialisation's near-uniform logits would leave
# ties that rounding decides), saved by save_pretrained; greedy
# generation gives the ids of transformers' greedy generate (eager
# attention, float32, no end-of-text stop) after a prompt that reaches
# past RoPE's original context, and each step's top two logits are apart
# (the comparison is meaningful).  A checkpoint of a Llama run (lr 1e-30:
# the same weights) generates the same ids; a folder of an architecture dtrain
# does not know is refused with exit 2 and one line.
set -u
. "$top_srcdir/tests/tap.sh"
generate="$top_builddir/runtime/dtrain-generate"
train="$top_builddir/runtime/dtrain-train"
python=$("$top_srcdir/tests/frameworks/torch-venv" --check 2>/dev/null) || skip_all "no torch venv (tests/frameworks/torch-venv)"
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-hf-generate-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore OMP_NUM_THREADS=1

prompt=5,17,42,99,3,150,7,64,128,1,33,77,190,2,56,81,120,9,44,166,23,98,140,11,60,175,30,88,4,199
# ref ARCH: ARCH's folder made and sharpened, and transformers' greedy ids into $work/ARCH.want
ref() {
    "$python" "$top_srcdir/tests/runtime/hf_models.py" make "$1" "$work/$1" "$work/$1.tok" 2>>"$work/py.err" &&
    "$python" - "$work/$1" "$prompt" >"$work/$1.want" 2>>"$work/py.err" <<'PY'
import sys, torch, transformers
torch.set_num_threads(1)
d, prompt = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
m = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
with torch.no_grad():
    for p in m.parameters():
        p.mul_(4.0)
m.save_pretrained(d)
m.eval()
m.generation_config.eos_token_id = None
m.generation_config.pad_token_id = 0
x = torch.tensor([prompt])
with torch.no_grad():
    out = m.generate(x, do_sample=False, max_new_tokens=20, output_logits=True, return_dict_in_generate=True)
ids = out.sequences[0, len(prompt):].tolist()
assert len(ids) == 20, ids
gap = min((l[0].topk(2).values[0] - l[0].topk(2).values[1]).item() for l in out.logits)
print(" ".join(map(str, ids)))
print("gap", gap, file=sys.stderr)
assert gap > 1e-3, f"top two logits {gap} apart: too close to compare"
PY
}
# same DESC WANT ARGS...: dtrain-generate ARGS gives the ids of WANT
same() {
    local desc=$1 want=$2
    shift 2
    "$generate" "$@" --prompt-tokens "$prompt" --temperature 0 --tokens --max-tokens 20 >"$work/got" 2>"$work/err"
    local rc=$?
    if [ $rc -eq 0 ] && [ -s "$want" ] && cmp -s "$want" "$work/got"; then
        pass "$desc: $(cat "$work/got")"
    else
        fail "$desc (exit $rc): want '$(cat "$want" 2>/dev/null)', got '$(cat "$work/got")' $(tail -n 2 "$work/err")"
    fi
}

for arch in llama gpt2; do
    check "transformers makes a random $arch and generates 20 tokens greedily" ref "$arch"
done
same "Llama (GQA, untied, llama3 RoPE): dtrain-generate --hf gives transformers' greedy ids" \
    "$work/llama.want" --hf "$work/llama"
same "GPT-2: dtrain-generate --hf gives transformers' greedy ids" "$work/gpt2.want" --hf "$work/gpt2"

# a checkpoint of a Llama run carries the family in its manifest; an lr of
# 1e-30 (dtrain-train wants one above 0) moves no weight by half an ulp
"$train" --init-hf "$work/llama" --data "$work/llama.tok" --batch 1 --seq 16 --steps 1 --lr 1e-30 \
    --weight-decay 0 --threads 1 --checkpoint "$work/ck" >"$work/tout" 2>&1 || diag "$(tail -n 3 "$work/tout")"
same "a checkpoint of a Llama run (dtrain-train --init-hf, lr 1e-30): the same ids" "$work/llama.want" \
    --checkpoint "$work/ck"

mkdir -p "$work/bert"
printf '{"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 64}\n' >"$work/bert/config.json"
"$generate" --hf "$work/bert" --prompt-tokens 1,2 >"$work/out" 2>"$work/err"
rc=$?
check "a folder of an unknown architecture is refused: exit 2 and one line ($(head -c 200 "$work/err"))" \
    sh -c "[ $rc -eq 2 ] && [ \"\$(wc -l <'$work/err')\" -eq 1 ] && grep -q '^dtrain-generate: ' '$work/err' && \
           [ ! -s '$work/out' ]"
"$generate" --hf "$work/llama" --model "$work/x.bin" >/dev/null 2>"$work/err"
rc=$?
check "--hf with --model is refused: exit 2 and one line" \
    sh -c "[ $rc -eq 2 ] && [ \"\$(wc -l <'$work/err')\" -eq 1 ] && grep -q -- '--hf' '$work/err'"
[ "$TAP_FAILED" -eq 0 ] || sed 's/^/# /' "$work/py.err" | tail -n 30
done_testing
