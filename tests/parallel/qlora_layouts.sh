#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# --base-dtype nf4 (QLoRA's base) in the 3D-parallel trainer, without
# PyTorch: a random tiny GPT-2 (its biases too), LoRA on c_attn, c_proj and
# c_fc, 10 steps, by lora_run (T*P*D local processes):
#  - (1,2,1): each stage quantises its whole layers' matrices, as one
#    process does: dtrain-train's (1,1,1) losses within 1e-5 relative;
#  - (2,1,2): each TP rank quantises its own shard of every linear (other
#    blocks and scales than the whole matrix's), so the base differs by
#    NF4's rounding: the (1,1,1) losses within 1e-3 relative (the
#    measured difference is printed).
set -u
. "$abs_top_srcdir/tests/tap.sh"
run=$abs_top_builddir/tests/parallel/lora_run
train=$abs_top_builddir/runtime/dtrain-train
d=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-qlora-layouts-XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cat "$abs_top_srcdir"/doc/*.md >"$d/corpus.txt"
"$abs_top_builddir/runtime/dtrain-tokenize" "$d/corpus.txt" "$d/tokens.bin" >/dev/null 2>&1
cli=(--data "$d/tokens.bin" --layers 2 --channels 64 --heads 4 --vocab-size 256 --padded-vocab-size 256
     --max-seq-len 16 --seq 16 --batch 8 --steps 10 --lr 1e-3 --seed 7 --threads 1 --log-every 0
     --lora-rank 4 --lora-targets c_attn,c_proj,c_fc --base-dtype nf4)
worst() { # FILE-A FILE-B: the largest relative difference of the 10 losses ("inf" when not 10 each)
  paste "$1" "$2" | awk '{ r = $1 - $2; if (r < 0) r = -r; r /= ($2 < 0 ? -$2 : $2); if (r > w) w = r; n++ }
                         END { if (n != 10) print "inf"; else printf "%.3g\n", w }'
}
below() { awk -v v="$1" -v l="$2" 'BEGIN { exit !(v != "inf" && v + 0 < l + 0) }'; }

check "dtrain-train --base-dtype nf4 trains 10 steps at (1,1,1)" \
  sh -c '"$@" >/dev/null 2>&1' _ "$train" "${cli[@]}" --metrics "$d/111.jsonl"
sed -n 's/.*"loss": \([^,}]*\).*/\1/p' "$d/111.jsonl" >"$d/111"
for l in 121 212; do
  check "lora_run ${l:0:1} ${l:1:1} ${l:2:1} --base-dtype nf4 trains 10 steps" \
    sh -c '"$@" 2>"$0.err" | awk '\''$1 == "loss" { print $3 }'\'' >"$0"' "$d/$l" "$run" ${l:0:1} ${l:1:1} ${l:2:1} "${cli[@]}"
  [ -s "$d/$l.err" ] && sed 's/^/# /' "$d/$l.err"
done
v=$(worst "$d/121" "$d/111"); check "(1,2,1): the (1,1,1) losses within 1e-5 relative (worst $v)" below "$v" 1e-5
v=$(worst "$d/212" "$d/111"); check "(2,1,2), shards quantised per rank: the (1,1,1) losses within 1e-3 relative (worst $v)" below "$v" 1e-3
done_testing
