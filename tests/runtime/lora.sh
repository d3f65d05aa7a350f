#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# LoRA (doc/runtime.md "LoRA") against the real peft, transformers and
# PyTorch (the venv of tests/frameworks/torch-venv; SKIP without it or
# without peft, never PASS), through dtrain-train and lora.py, for a tiny
# Llama (every linear targeted) and a tiny GPT-2 (c_attn, c_proj, c_fc):
#  - peft saves the base and an adapter initialisation with a non-zero B;
#    dtrain-train --init-hf --init-lora trains 20 steps and its losses are
#    peft + torch.optim.AdamW's within 1e-4 relative;
#  - the frozen base written by --save-hf is the base bit for bit;
#  - peft loads dtrain's --save-lora folder: the trained adapters are
#    peft's within 1e-5, its loss on batch 0 is dtrain's validation loss
#    within 1e-5; --merge-lora's folder loads in transformers with no
#    missing or unexpected key and gives peft's logits within 1e-5;
#  - checkpoints (--checkpoint: the adapters and their AdamW moments): 10
#    steps, then the same folder continued to 20, write the adapters of the
#    unbroken run bit for bit; a run without LoRA or of another rank
#    refuses that folder;
#  - bad input refused with exit 2 and one line: rank 0 with LoRA options,
#    a rank above a layer's side, an unknown target, a folder of another
#    rank, of other targets, of another base, --merge-lora without
#    --lora-rank.
set -u
. "$top_srcdir/tests/tap.sh"
train=$top_builddir/runtime/dtrain-train
d=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-lora-XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
python=$("$top_srcdir/tests/frameworks/torch-venv" --check 2>/dev/null) || skip_all "no torch venv (tests/frameworks/torch-venv)"
"$python" -c 'import peft' 2>/dev/null || skip_all "no peft in the torch venv (tests/frameworks/torch-venv installs it)"
ref() { "$python" "$top_srcdir/tests/runtime/lora.py" "$@" 2>>"$d/py.err"; }
steps=20 B=8 T=16 lr=1e-3 wd=0.1

# figure ARCH NAME: the value lora.py printed
figure() { awk -v a="$1" -v n="$2" '$1 == a && $2 == n { print $3 }' "$d/figures"; }
below() { awk -v v="$1" -v l="$2" 'BEGIN { exit !(v != "" && v != "inf" && v + 0 < l + 0) }'; }
refused() { # NAME NEEDLE ARGS...: exit 2, one line holding NEEDLE
  local name=$1 needle=$2; shift 2
  "$@" >"$d/out" 2>"$d/err"; local rc=$?
  check "$name: exit 2 and one line ($(head -c 200 "$d/err"))" \
    sh -c '[ "$1" = 2 ] && [ "$(wc -l <"$2")" = 1 ] && grep -q -- "$3" "$2"' _ "$rc" "$d/err" "$needle"
}

check "peft saves tiny Llama and GPT-2 bases and adapter initialisations with a non-zero B" ref make "$d"
for arch in llama gpt2; do
  w=$d/$arch
  case $arch in llama) targets=q,k,v,o,gate,up,down ;; gpt2) targets=c_attn,c_proj,c_fc ;; esac
  cli=(--init-hf "$w/base" --init-lora "$w/adapter0" --lora-rank 4 --lora-alpha 8 --lora-targets "$targets"
       --data "$w/tokens.bin" --steps $steps --batch $B --seq $T --lr $lr --weight-decay $wd --threads 1 --log-every 0)
  check "$arch: dtrain-train --init-hf --init-lora trains $steps steps, --save-lora and --save-hf (frozen base)" \
    "$train" "${cli[@]}" --metrics "$w/metrics.jsonl" --val-data "$w/tokens.bin" --val-batches 1 \
    --save-lora "$w/adapter1" --save-hf "$w/base_out"
  check "$arch: the same with --merge-lora --save-hf" "$train" "${cli[@]}" --merge-lora --save-hf "$w/merged"
done
ref check "$d" $steps $B $T $lr $wd >"$d/figures"
[ -s "$d/py.err" ] && grep -v "Loading\|Writing" "$d/py.err" | tail -5 | sed 's/^/# /'
for arch in llama gpt2; do
  v=$(figure $arch losses); check "$arch: $steps steps' losses are peft + AdamW's within 1e-4 relative (worst $v)" below "$v" 1e-4
  v=$(figure $arch base); check "$arch: the frozen base is bit for bit unchanged" test "$v" = 1
  v=$(figure $arch adapters); check "$arch: peft loads dtrain's adapters: peft's trained values within 1e-5 ($v)" below "$v" 1e-5
  v=$(figure $arch val); check "$arch: peft with dtrain's adapters gives dtrain's loss within 1e-5 ($v)" below "$v" 1e-5
  v=$(figure $arch logits); check "$arch: --merge-lora's model gives peft's logits within 1e-5 ($v)" below "$v" 1e-5
  v=$(figure $arch load_issues); check "$arch: --merge-lora's model loads with no missing or unexpected key" test "$v" = 0
done

w=$d/llama
cli=(--init-hf "$w/base" --init-lora "$w/adapter0" --lora-rank 4 --lora-alpha 8 --lora-targets q,k,v,o,gate,up,down
     --data "$w/tokens.bin" --batch $B --seq $T --lr $lr --weight-decay $wd --threads 1 --log-every 0)
check "llama: 10 steps with --checkpoint, then 20 from that folder" \
  sh -c '"$@" --steps 10 --checkpoint "$0/ck" >/dev/null 2>&1 && "$@" --steps 20 --checkpoint "$0/ck" --save-lora "$0/resumed" >/dev/null 2>&1' \
  "$w" "$train" "${cli[@]}"
check "llama: the resumed run's adapters are the unbroken run's bit for bit" \
  cmp "$w/resumed/adapter_model.safetensors" "$w/adapter1/adapter_model.safetensors"
refused "a LoRA checkpoint resumed without LoRA" "with LoRA, this run is without" "$train" --init-hf "$w/base" \
  --data "$w/tokens.bin" --batch $B --seq $T --threads 1 --log-every 0 --steps 30 --checkpoint "$w/ck"
refused "a LoRA checkpoint resumed with another rank" "rank 4" "$train" --init-hf "$w/base" --lora-rank 2 \
  --lora-targets q,k,v,o,gate,up,down --data "$w/tokens.bin" --batch $B --seq $T --threads 1 --log-every 0 \
  --steps 30 --resume "$w/ck"
cli=(--init-hf "$w/base" --data "$w/tokens.bin" --steps 1 --batch 2 --seq 8 --threads 1 --log-every 0)
refused "--lora-targets without --lora-rank" "needs LoRA" "$train" "${cli[@]}" --lora-targets q --lora-rank 0
refused "--merge-lora without --lora-rank" "--merge-lora needs LoRA" "$train" "${cli[@]}" --merge-lora --save-hf "$d/m"
refused "a rank above a layer's side" "--lora-rank 65" "$train" "${cli[@]}" --lora-rank 65
refused "an unknown target" "'c_attn' is not a linear of a llama model" "$train" "${cli[@]}" --lora-rank 2 --lora-targets q,c_attn
refused "--init-lora of another rank" "rank r" "$train" "${cli[@]}" --lora-rank 2 --lora-alpha 8 \
  --lora-targets q,k,v,o,gate,up,down --init-lora "$w/adapter0"
refused "--init-lora of other targets" "target_modules" "$train" "${cli[@]}" --lora-rank 4 --lora-alpha 8 \
  --lora-targets q,v --init-lora "$w/adapter0"
refused "--init-lora of another base (GPT-2's adapter on the Llama)" "target_modules" "$train" "${cli[@]}" \
  --lora-rank 4 --lora-alpha 8 --lora-targets q,k,v,o,gate,up,down --init-lora "$d/gpt2/adapter0"
refused "--init-lora of another base (a narrower GPT-2)" "shape" "$train" --init-hf "$d/gpt2/base" \
  --data "$w/tokens.bin" --steps 1 --batch 2 --seq 8 --threads 1 --log-every 0 --lora-rank 4 --lora-alpha 8 \
  --lora-targets c_attn,c_proj,c_fc --init-lora "$d/gpt2/adapter_other"
refused "an --init-lora folder without a config" "adapter_config.json" "$train" "${cli[@]}" --lora-rank 4 \
  --init-lora "$d"
done_testing
