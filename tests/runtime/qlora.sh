#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# --base-dtype nf4 (QLoRA's base, doc/runtime.md "LoRA"), without PyTorch:
# nf4_base writes a tiny random Llama and the same with every block
# linear's weight replaced by its own NF4 quantise-dequantise;
#  - LoRA on every linear at (1,1,1), 10 steps: the nf4 run on the base
#    gives the fp32 run on the dequantised base's losses within 1e-5
#    relative (the same weights, dequantised inside the matmul; measured
#    0, bit for bit, on the cpu backend), and other losses than the fp32
#    base's, so the wiring is checked, not the format (test_nf4's);
#  - --memory-report: model_state_bytes equals its formula and is below
#    the fp32 base's;
#  - refused with exit 2 and one line: nf4 without --lora-rank, with
#    --save-hf, with --save-llmc, an unknown --base-dtype.
set -u
. "$top_srcdir/tests/tap.sh"
train=$top_builddir/runtime/dtrain-train
d=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-qlora-XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

losses() { sed -n 's/.*"loss": \([^,}]*\).*/\1/p' "$1"; }
field() { sed -n "s/.*\"$1\": \\([0-9]*\\).*/\\1/p" <<<"$2"; }
refused() { # NAME NEEDLE ARGS...: exit 2, one line holding NEEDLE
  local name=$1 needle=$2; shift 2
  "$@" >"$d/out" 2>"$d/err"; local rc=$?
  check "$name: exit 2 and one line ($(head -c 200 "$d/err"))" \
    sh -c '[ "$1" = 2 ] && [ "$(wc -l <"$2")" = 1 ] && grep -q -- "$3" "$2"' _ "$rc" "$d/err" "$needle"
}

check "nf4_base writes the base, its dequantised twin and tokens" "$top_builddir/tests/runtime/nf4_base" "$d"
cli=(--data "$d/tokens.bin" --steps 10 --batch 4 --seq 16 --lr 1e-3 --threads 1 --log-every 0
     --lora-rank 4 --lora-alpha 8 --lora-targets q,k,v,o,gate,up,down --memory-report)
check "--base-dtype nf4 trains 10 steps on the base" \
  sh -c '"$@" >"$0/nf4.out" 2>&1' "$d" "$train" "${cli[@]}" --init-hf "$d/base" --base-dtype nf4 --metrics "$d/nf4.jsonl"
check "--base-dtype fp32 trains 10 steps on the dequantised base" \
  sh -c '"$@" >"$0/ref.out" 2>&1' "$d" "$train" "${cli[@]}" --init-hf "$d/dequant" --metrics "$d/ref.jsonl"
worst=$(paste <(losses "$d/nf4.jsonl") <(losses "$d/ref.jsonl") |
        awk '{ r = $1 - $2; if (r < 0) r = -r; r /= ($2 < 0 ? -$2 : $2); if (r > w) w = r; n++ }
             END { if (n != 10) print "inf"; else printf "%.3g\n", w }')
check "the nf4 run's 10 losses are the dequantised fp32 run's within 1e-5 relative (worst $worst)" \
  awk -v v="$worst" 'BEGIN { exit !(v != "inf" && v + 0 < 1e-5) }'
"$train" "${cli[@]}" --init-hf "$d/base" --metrics "$d/fp32.jsonl" >/dev/null 2>&1
fp32=$(losses "$d/fp32.jsonl") nf4=$(losses "$d/nf4.jsonl")
check "... and the fp32 run on the base itself gives other losses (the NF4 base is not the fp32 one)" \
  test "$(wc -l <<<"$fp32")" = 10 -a "$fp32" != "$nf4"
nf4=$(grep '"memory"' "$d/nf4.out") ref=$(grep '"memory"' "$d/ref.out")
ms=$(field model_state_bytes "$nf4") mf=$(field model_state_formula_bytes "$nf4") rs=$(field model_state_bytes "$ref")
check "--memory-report: nf4 model state $ms = its formula $mf, below the fp32 base's $rs" \
  test -n "$ms" -a -n "$rs" -a "$ms" = "$mf" -a "${ms:-0}" -lt "${rs:-0}"
echo "# model_state_bytes: nf4 $ms, fp32 $rs"

base=(--init-hf "$d/base" --data "$d/tokens.bin" --steps 1 --batch 2 --seq 8 --threads 1 --log-every 0)
refused "--base-dtype nf4 without --lora-rank" "needs LoRA" "$train" "${base[@]}" --base-dtype nf4
refused "--base-dtype nf4 with --save-hf" "--save-hf with --base-dtype nf4" "$train" "${base[@]}" --lora-rank 2 \
  --base-dtype nf4 --save-hf "$d/out_hf"
refused "--base-dtype nf4 with --save-llmc" "--save-llmc with --base-dtype nf4" "$train" "${base[@]}" --lora-rank 2 \
  --base-dtype nf4 --save-llmc "$d/out.bin"
refused "an unknown --base-dtype" "base" "$train" "${base[@]}" --lora-rank 2 --base-dtype nf8
check "the refused runs made no output" test ! -e "$d/out_hf" -a ! -e "$d/out.bin"
done_testing
