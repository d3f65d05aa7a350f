#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# LoRA in the 3D-parallel trainer against the real peft (the venv of
# tests/frameworks/torch-venv; SKIP without it or without peft, never PASS):
# the tiny Llama and GPT-2 of tests/runtime/lora.py (peft's adapter
# initialisation with a non-zero B, every linear targeted) trained 20 steps
# by lora_run (the trainer on T*P*D local processes, local_boot.h) at
# (T,P,D) = (2,1,2), (1,2,2) and (2,1,2) with sequence parallelism: every
# step's loss within 1e-4 (relative) of peft + torch.optim.AdamW's, and the
# adapters gathered from the ranks and written by --save-lora (TP shards of
# B for column-parallel linears and of A for row-parallel ones, pipeline
# stages' layers) loaded by peft within 1e-4 of peft's trained ones; the
# (2,1,2) run's checkpoint (--checkpoint: the adapters and their AdamW
# moments, as runs of the whole model's adapter vector) resumed by one
# process (dtrain-train --init-hf BASE --resume DIR) for 4 more steps gives
# peft's losses of those steps within 1e-4.
set -u
. "$abs_top_srcdir/tests/tap.sh"
run=$abs_top_builddir/tests/parallel/lora_run
d=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-lora-layouts-XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
python=$("$abs_top_srcdir/tests/frameworks/torch-venv" --check 2>/dev/null) || skip_all "no torch venv (tests/frameworks/torch-venv)"
"$python" -c 'import peft' 2>/dev/null || skip_all "no peft in the torch venv (tests/frameworks/torch-venv installs it)"
ref() { "$python" "$abs_top_srcdir/tests/runtime/lora.py" "$@" 2>>"$d/py.err"; }
steps=20 more=4 B=8 T=16 lr=1e-3 wd=0.1 tol=1e-4
figure() { awk -v a="$1" -v l="$2" -v n="$3" '$1 == a && $2 == l && $3 == n { print $4 }' "$d/figures"; }
below() { awk -v v="$1" -v l="$2" 'BEGIN { exit !(v != "" && v != "inf" && v + 0 < l + 0) }'; }

check "peft saves tiny Llama and GPT-2 bases and adapter initialisations with a non-zero B" ref make "$d"
layouts="212 122 212sp"
for arch in llama gpt2; do
  w=$d/$arch
  case $arch in llama) targets=q,k,v,o,gate,up,down ;; gpt2) targets=c_attn,c_proj,c_fc ;; esac
  for l in $layouts; do
    extra=(); [ "$l" = 212sp ] && extra=(--sequence-parallel 1)
    [ "$l" = 212 ] && extra=(--checkpoint "$w/ckpt")
    check "$arch: lora_run ${l:0:1} ${l:1:1} ${l:2:1}${extra[*]:+ ${extra[*]}} trains $steps steps and writes --save-lora" \
      sh -c '"$@" >"$0.losses" 2>"$0.err"' "$w/$l" "$run" "${l:0:1}" "${l:1:1}" "${l:2:1}" \
      --init-hf "$w/base" --init-lora "$w/adapter0" --lora-rank 4 --lora-alpha 8 --lora-targets "$targets" \
      --data "$w/tokens.bin" --steps $steps --batch $B --seq $T --lr $lr --weight-decay $wd --threads 1 \
      --log-every 0 --save-lora "$w/$l.lora" "${extra[@]}"
    [ -s "$w/$l.err" ] && sed 's/^/# /' "$w/$l.err"
  done
  check "$arch: dtrain-train resumes the (2,1,2) checkpoint with --init-hf for $more more steps" \
    "$abs_top_builddir/runtime/dtrain-train" --init-hf "$w/base" --resume "$w/ckpt" --lora-rank 4 --lora-alpha 8 \
    --lora-targets "$targets" --data "$w/tokens.bin" --steps $((steps + more)) --batch $B --seq $T --lr $lr \
    --weight-decay $wd --threads 1 --log-every 0 --metrics "$w/resume.jsonl"
done
ref layouts "$d" $((steps + more)) $B $T $lr $wd $steps $layouts resume >"$d/figures"
for arch in llama gpt2; do
  for l in $layouts; do
    v=$(figure $arch $l losses); check "$arch ($l): $steps steps' losses are peft's within $tol relative (worst $v)" below "$v" $tol
    v=$(figure $arch $l adapters); check "$arch ($l): peft loads the gathered adapters, peft's trained ones within $tol ($v)" below "$v" $tol
  done
  v=$(figure $arch resume losses)
  check "$arch: the resumed steps $steps..$((steps + more - 1)) give peft's losses within $tol (worst $v)" below "$v" $tol
done
done_testing
