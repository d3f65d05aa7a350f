#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# bench/llmc.sh: dtrain's one-process CPU trainer against llm.c's CPU
# reference trainer (karpathy/llm.c's train_gpt2.c), side by side on the
# same GPT-2 model file, the same tokens, B and T, 2 threads each.
#
#   bench/llmc.sh [--llmc DIR] [--build DIR] [--runs N] [--steps N] [--bf16]
#
# DIR (--llmc, else $LLMC_DIR) is a copy of llm.c (git clone
# https://github.com/karpathy/llm.c); without one the script says so and
# exits 0, nothing measured.  llm.c is not part of dtrain and nothing in DIR
# is changed: its train_gpt2.c is copied into a temporary folder, where its
# batch size and sequence length (fixed in its main) are set to B and T, its
# step count to --steps, and built as its Makefile builds it (CC, default
# gcc, -Ofast -march=native -fopenmp -DOMP; LLMC_CFLAGS overrides), and run
# there with the files it reads at fixed paths: gpt2_124M.bin (the model,
# written by dtrain-train --save-llmc) and dev/data/tinyshakespeare/
# tiny_shakespeare_{train,val}.bin (dtrain-tokenize's llm.c token file).
#
# Model: L=4 C=256 NH=4 V=Vp=4096 maxT=T=128, B=8.  Runs alternate (llm.c,
# dtrain, llm.c, ...) so a machine growing busier affects both alike; each
# run's figure is the median tokens/s of its steps after the first (16
# steps by default: a process's first steps run slower while its memory is
# first touched, and a short run's median would still hold them), the
# figure printed the best run's.  llm.c: OMP_NUM_THREADS=2; dtrain:
# dtrain-train --threads 2 --backend cpu.  --bf16 adds dtrain's
# --precision bf16 to each round.  Target: dtrain >= 5x llm.c.
set -uo pipefail
prog=llmc.sh
top=$(cd "$(dirname "$0")/.." && pwd)
build=${DTRAIN_BUILD:-$top/build} llmc=${LLMC_DIR:-} runs=3 steps=16 bf16=0
L=4 C=256 NH=4 V=4096 T=128 B=8 THREADS=2 TARGET=5
die() { echo "$prog: $1" >&2; exit "${2:-1}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --llmc) [ $# -ge 2 ] || die "--llmc needs llm.c's folder" 2; llmc=$2; shift 2 ;;
    --build) [ $# -ge 2 ] || die "--build needs a folder" 2; build=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]?$ ]] || die "--runs needs a count from 1 to 99" 2; runs=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]?$ ]] && [ "$2" -ge 3 ] || die "--steps needs a count from 3 to 99" 2
      steps=$2; shift 2 ;;
    --bf16) bf16=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;/^# SPDX-License-Identifier:/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see $0 --help)" 2 ;;
  esac
done
if [ -z "$llmc" ]; then
  echo "$prog: not measured: llm.c's folder is needed (git clone https://github.com/karpathy/llm.c; then LLMC_DIR=DIR or --llmc DIR)"
  exit 0
fi
[ -f "$llmc/train_gpt2.c" ] && [ -d "$llmc/llmc" ] || die "$llmc: not llm.c's folder (no train_gpt2.c and llmc/ there)" 2
train=$build/runtime/dtrain-train tokenize=$build/runtime/dtrain-tokenize
[ -x "$train" ] && [ -x "$tokenize" ] || die "$train is not built: configure and make in $build first (or give --build DIR)" 2
cc=${CC:-gcc}
command -v "$cc" >/dev/null 2>&1 || die "needs a C compiler ($cc; set CC)" 2

dir=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-llmc.XXXXXX") || die "cannot make a temporary folder"
trap 'rm -rf -- "$dir"' EXIT
llmc=$(cd "$llmc" && pwd)

# llm.c's trainer, B, T and the step count set in a copy of its main
sed -e "s/^\( *int B = \)4;/\1$B;/" -e "s/^\( *int T = \)64;/\1$T;/" -e "s/step <= 40;/step <= $steps;/" \
  "$llmc/train_gpt2.c" >"$dir/train_gpt2.c"
for pat in "int B = $B;" "int T = $T;" "step <= $steps;"; do
  grep -qF "$pat" "$dir/train_gpt2.c" || die "$llmc/train_gpt2.c: its main is not the one this script knows (cannot set '$pat')"
done
# shellcheck disable=SC2086 # LLMC_CFLAGS is a list of flags
"$cc" ${LLMC_CFLAGS:--Ofast -march=native -fopenmp -DOMP} -Wno-unused-result -I"$llmc" \
  "$dir/train_gpt2.c" -lm -o "$dir/train_gpt2" 2>"$dir/cc.log" ||
  die "building llm.c's train_gpt2.c failed: $(head -3 "$dir/cc.log")"

# the tokens (this tree's docs, one token per byte) and the model
mkdir -p "$dir/dev/data/tinyshakespeare"
cat "$top"/doc/*.md "$top"/doc/*.1 >"$dir/text"
"$tokenize" "$dir/text" "$dir/dev/data/tinyshakespeare/tiny_shakespeare_train.bin" >/dev/null ||
  die "dtrain-tokenize failed"
cp "$dir/dev/data/tinyshakespeare/tiny_shakespeare_train.bin" "$dir/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
tokens=$dir/dev/data/tinyshakespeare/tiny_shakespeare_train.bin
shape=(--layers $L --channels $C --heads $NH --vocab-size $V --padded-vocab-size $V --max-seq-len $T
  --batch $B --seq $T --threads $THREADS --backend cpu --lr 1e-4 --weight-decay 0 --log-every 0)
"$train" "${shape[@]}" --data "$tokens" --steps 1 --save-llmc "$dir/gpt2_124M.bin" >"$dir/init.log" 2>&1 ||
  die "dtrain-train --save-llmc failed: $(tail -2 "$dir/init.log")"

# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# llm.c: "step N: train loss X (took Y ms)"; tokens/s of the steps after the first
run_llmc() {
  (cd "$dir" && OMP_NUM_THREADS=$THREADS ./train_gpt2 >"$dir/llmc.log" 2>&1) ||
    die "llm.c's train_gpt2 failed: $(tail -2 "$dir/llmc.log")"
  sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)$/\1 \2/p' "$dir/llmc.log" |
    awk -v bt=$((B * T)) '$1 > 0 {print bt * 1000 / $2}' | median
}
# dtrain: the metrics file's tokens_per_s of the steps after the first
run_dtrain() {
  rm -f "$dir/m.jsonl"
  "$train" "${shape[@]}" --precision "$1" --init-llmc "$dir/gpt2_124M.bin" --data "$tokens" --steps "$steps" \
    --metrics "$dir/m.jsonl" >"$dir/dtrain.log" 2>&1 || die "dtrain-train failed: $(tail -2 "$dir/dtrain.log")"
  grep -o '"tokens_per_s": [0-9.]*' "$dir/m.jsonl" | awk 'NR > 1 {print $2}' | median
}
best() { printf '%s\n' "$@" | sort -g | tail -1; }

echo "$prog: GPT-2 L=$L C=$C NH=$NH V=$V T=$T B=$B, $THREADS threads, best of $runs alternating runs of $steps steps;" \
  "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
lr=() fr=() br=()
for ((r = 0; r < runs; r++)); do
  x=$(run_llmc) || exit 1
  lr+=("$x")
  x=$(run_dtrain fp32) || exit 1
  fr+=("$x")
  if [ "$bf16" = 1 ]; then x=$(run_dtrain bf16) || exit 1; br+=("$x"); fi
  echo "  run $((r + 1)): llm.c ${lr[r]} tok/s, dtrain fp32 ${fr[r]} tok/s${br[r]:+, bf16 ${br[r]} tok/s}"
done
l=$(best "${lr[@]}") f=$(best "${fr[@]}")
awk -v l="$l" -v f="$f" -v t=$TARGET 'BEGIN {
  r = l > 0 ? f / l : 0
  printf "llm.c train_gpt2 %.0f tok/s, dtrain fp32 %.0f tok/s: %.2fx (target >= %gx: %s)\n", l, f, r, t, (r >= t ? "met" : "NOT met") }'
if [ "$bf16" = 1 ]; then
  b=$(best "${br[@]}")
  awk -v l="$l" -v f="$f" -v b="$b" 'BEGIN {
    printf "dtrain bf16 %.0f tok/s: %.2fx llm.c, %.2fx dtrain fp32\n", b, (l > 0 ? b / l : 0), (f > 0 ? b / f : 0) }'
fi
