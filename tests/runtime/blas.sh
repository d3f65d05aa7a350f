#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-train's choice of GEMM kernels as a program (dtrain_blas.h): the
# header line, a site's OPENBLAS_CORETYPE kept with a warning, a switch by
# executing again (DTRAIN_BLAS_CORE=name), the way back when OpenBLAS does
# not take the core asked for, and exit 2 for a core this CPU cannot run.
# Then --precision bf16 on the cpu backend: the loss within the bf16
# tolerance (1% relative at every step of 30) of fp32's, not equal to it,
# and the same bits on a second run.
# The automatic switch needs a CPU that OpenBLAS does not know; its
# decision is tested in test_blas.c with CPUs described by hand.
set -u
. "$top_srcdir/tests/tap.sh"
train="$top_builddir/runtime/dtrain-train"
tokenize="$top_builddir/runtime/dtrain-tokenize"
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-blas-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
for i in $(seq 100); do echo "a small corpus line $i"; done >"$work/text.txt"
"$tokenize" "$work/text.txt" "$work/data.bin" >/dev/null || { fail "tokenize"; done_testing; }
args=(--data "$work/data.bin" --layers 1 --channels 32 --heads 2 --vocab-size 256 --max-seq-len 16
      --seq 16 --batch 2 --steps 2 --threads 1)
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
# the best OpenBLAS core of this CPU and a slower one it can run, as dtrain_blas.c chooses
family=$(sed -n 's/^cpu family[[:space:]]*: *\([0-9]*\).*/\1/p' /proc/cpuinfo | head -1)
if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512cd; then
    # Cooperlake's SGEMM kernels are SkylakeX's: SkylakeX is the best on AVX-512 BF16 too;
    # AMD's family 25 (Zen 4, AVX-512 in two halves): its AVX2 Zen kernels
    best=SkylakeX; if has avx512_bf16; then above=""; else above=Cooperlake; fi
    if grep -q AuthenticAMD /proc/cpuinfo && [ "$family" = 25 ]; then best=Zen; fi
elif has avx2 && has fma; then
    if grep -q AuthenticAMD /proc/cpuinfo; then best=Zen; else best=Haswell; fi; above=SkylakeX
elif has avx; then best=Sandybridge; above=Haswell
else best=Prescott; above=Sandybridge
fi
diag "this CPU's best OpenBLAS core: $best"

unset OPENBLAS_CORETYPE DTRAIN_BLAS_CORE DTRAIN_BLAS_SWITCHED
"$train" "${args[@]}" >"$work/out" 2>"$work/err"
check "a plain run exits 0" test $? -eq 0
line=$(grep 'kernels cpu:' "$work/out")
diag "$line"
check "the header names the library and the kernels running" grep -q "dtrain-train: kernels cpu: OpenBLAS .*, .* kernels (" "$work/out"
check "nothing on stderr" test ! -s "$work/err"

# OpenBLAS's own choice (DTRAIN_BLAS_CORE=keep): the best core, or on a CPU
# it does not know its generic Prescott (dtrain then switches, saying it in
# the header only)
DTRAIN_BLAS_CORE=keep "$train" "${args[@]}" >"$work/out" 2>"$work/err"
own=$(sed -n "s/.*kernels cpu: .*, \([A-Za-z0-9]*\) kernels (chosen by OpenBLAS.*/\1/p" "$work/out")
diag "OpenBLAS's own choice here: ${own:-not said}"
# a slower core this CPU runs that OpenBLAS does not pick by itself, so that
# DTRAIN_BLAS_CORE makes dtrain switch: Prescott, else Nehalem (both SSE3)
slow=Prescott; [ "$own" != Prescott ] || slow=Nehalem
if [ "$best" != Prescott ]; then
    OPENBLAS_CORETYPE=$slow "$train" "${args[@]}" >"$work/out" 2>"$work/err"
    rc=$?
    check "OPENBLAS_CORETYPE=$slow: the run goes on" test $rc -eq 0
    check "  one warning line naming the better kernels ($(cat "$work/err"))" \
        bash -c "[ \$(wc -l <'$work/err') -eq 1 ] && grep -q 'kept as set' '$work/err' && grep -q '$best' '$work/err'"
    check "  and the header says it runs $slow, a fallback" grep -q "$slow kernels (OPENBLAS_CORETYPE=$slow, a FALLBACK" "$work/out"
    ref=$(grep '^step     1' "$work/out" | cut -d'|' -f2)

    DTRAIN_BLAS_CORE=$slow "$train" "${args[@]}" >"$work/out" 2>"$work/err"
    check "DTRAIN_BLAS_CORE=$slow: the program executes again on them and runs" test $? -eq 0
    check "  the header says dtrain chose them" grep -q "$slow kernels (chosen by dtrain over OpenBLAS's" "$work/out"
    check "  the same loss as with OPENBLAS_CORETYPE=$slow ($ref)" test "$(grep '^step     1' "$work/out" | cut -d'|' -f2)" = "$ref"
else
    skip_test "this CPU's best kernels are OpenBLAS's generic ones: no fallback to show"
fi

DTRAIN_BLAS_CORE=Athlon "$train" "${args[@]}" >"$work/out" 2>"$work/err"
check "DTRAIN_BLAS_CORE=Athlon (a core this OpenBLAS does not build): the run goes on" test $? -eq 0
check "  one line saying OpenBLAS did not take it and the program went back ($(cat "$work/err"))" \
    bash -c "[ \$(wc -l <'$work/err') -eq 1 ] && grep -q 'going back to' '$work/err'"
check "  the header says OpenBLAS's own choice runs" grep -q "OpenBLAS's choice: its Athlon kernels did not pass" "$work/out"

expect2() {
    local desc=$1 needle=$2; shift 2
    env "$@" "$train" "${args[@]}" >"$work/out" 2>"$work/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "^dtrain-train: .*$needle" "$work/err" &&
       ! grep -q '^step' "$work/out"; then
        pass "$desc: $(cat "$work/err")"
    else
        fail "$desc (exit $rc): $(cat "$work/err")"
    fi
}
expect2 "DTRAIN_BLAS_CORE=Pentium9: exit 2, one line" "not an OpenBLAS core" DTRAIN_BLAS_CORE=Pentium9
expect2 "both DTRAIN_BLAS_CORE and OPENBLAS_CORETYPE: exit 2" "both set" DTRAIN_BLAS_CORE=Prescott OPENBLAS_CORETYPE=Prescott
if [ -n "$above" ]; then
    expect2 "OPENBLAS_CORETYPE=$above, beyond this CPU: exit 2 before any GEMM" "SIGILL" OPENBLAS_CORETYPE=$above
    expect2 "DTRAIN_BLAS_CORE=$above, beyond this CPU: exit 2" "lacks it" DTRAIN_BLAS_CORE=$above
else
    skip_test "this CPU runs every OpenBLAS core: no core beyond it to refuse"
    skip_test "this CPU runs every OpenBLAS core: no core beyond it to refuse"
fi
losses() { grep '^step' "$1" | cut -d'|' -f2 | awk '{print $2}'; }
bargs=(--data "$work/data.bin" --layers 2 --channels 64 --heads 2 --vocab-size 256 --max-seq-len 32
       --seq 32 --batch 4 --steps 30 --threads 2)
"$train" "${bargs[@]}" --precision fp32 >"$work/fp32" 2>&1 &&
"$train" "${bargs[@]}" --precision bf16 >"$work/bf16a" 2>&1 &&
"$train" "${bargs[@]}" --precision bf16 >"$work/bf16b" 2>&1
check "fp32 and two bf16 runs of 30 steps on the cpu backend" test $? -eq 0
paste <(losses "$work/fp32") <(losses "$work/bf16a") >"$work/pair"
check "30 losses each" test "$(wc -l <"$work/pair")" -eq 30
worst=$(awk '{d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d} END {printf "%.3g", w}' "$work/pair")
check "bf16's loss within 1% of fp32's at every step (worst $worst)" \
    awk -v w="$worst" 'BEGIN {exit !(w <= 0.01)}'
check "and not equal to it: the operands are rounded" awk -v w="$worst" 'BEGIN {exit !(w > 0)}'
check "bf16 is deterministic: the second run's losses are the same bits" \
    cmp -s <(losses "$work/bf16a") <(losses "$work/bf16b")
check "the trainer says in one line what runs its bf16 matmuls" \
    test "$(grep -Ec '^dtrain: cpu bf16 matmuls: (oneDNN|fp32 GEMMs on operands rounded to bf16)' "$work/bf16a")" -eq 1
check "  and nothing of it in fp32" bash -c "! grep -q 'cpu bf16 matmuls' '$work/fp32'"
# bf16 stores the blocks' inner activations in bf16 (dtrain_kernels_act_dtype): per layer
# qkv 3C, attention output C, fc 4C, GELU output 4C per position, and once the backward's
# dqkv 3C, datty C, dfc 4C; 2 bytes fewer each (N*C is a multiple of 32: no padding moves)
act_bytes() { "$train" "${bargs[@]}" --steps 1 --precision "$1" --memory-report 1 2>&1 |
              sed -n 's/^{"memory": {"rank": 0,.*"activations_bytes": \([0-9]*\),.*/\1/p'; }
a32=$(act_bytes fp32) a16=$(act_bytes bf16)
L=2 C=64 N=$((4 * 32))
check "bf16 activations: $((a32 - a16)) bytes fewer than fp32's $a32, 2 x (L*N*12C + N*8C) = $((2 * (L * N * 12 * C + N * 8 * C)))" \
    test -n "$a32" -a -n "$a16" -a "$((a32 - a16))" -eq "$((2 * (L * N * 12 * C + N * 8 * C)))"
# The benchmark's candidates and both precisions (speed is not checked: benchmarks say it)
bench="$top_builddir/bench/dtrain-bench-train"
"$bench" --steps 1 --warmup 0 --sgemm-n 128 >"$work/bench" 2>&1
check "dtrain-bench-train runs (1 step, sgemm 128)" test $? -eq 0
check "  it names the kernels running" grep -q "^GEMM kernels  *OpenBLAS" "$work/bench"
check "  and measures OpenBLAS's $best kernels as a candidate in a child" \
    grep -Eq "^  candidate OpenBLAS $best +[0-9.]+ GFLOP/s" "$work/bench"
check "  never a core this CPU cannot run" bash -c "! grep -q 'candidate OpenBLAS ${above:-none} ' '$work/bench'"
check "  and bf16 next to fp32" grep -q "^tokens/s bf16 .*x fp32" "$work/bench"
check "  and what runs the bf16 matmuls" grep -Eq "^bf16 matmuls  *(oneDNN|fp32 GEMMs)" "$work/bench"
check "  and how busy the threads were" grep -Eq "^CPU busy fp32  *[0-9.]+ %" "$work/bench"
check "  and the fp32 step's parts: matmuls at a share of the best sgemm, attention, the rest" \
    bash -c "grep -Eq '^  matmuls +[0-9.]+ ms  \([0-9.]+ GFLOP at [0-9.]+ GFLOP/s = [0-9]+ % of these kernels. [0-9]+x[0-9]+ rate, [0-9]+ % of the best sgemm\)' '$work/bench' &&
             grep -Eq '^  attention +[0-9.]+ ms' '$work/bench' && grep -Eq '^  the rest +-?[0-9.]+ ms' '$work/bench'"
check "  and the limit the GEMMs set, in tokens/s" \
    grep -Eq "^  limit +[0-9]+ tokens/s with the matmuls at these kernels' [0-9]+x[0-9]+ rate .*; [0-9]+ with nothing but the matmuls" "$work/bench"
# Llama next to GPT-2 through the one-process trainer, on the same baseline
TMPDIR="$work" "$top_builddir/bench/dtrain-bench-llama" --runs 1 --steps 1 --warmup 0 --sgemm-n 128 \
    >"$work/bench-llama" 2>&1
check "dtrain-bench-llama runs (1 run, 1 step, sgemm 128)" test $? -eq 0
check "  tokens/s of both and their ratio" grep -Eq "^tokens/s +[0-9]+ +[0-9]+ +[0-9.]+$" "$work/bench-llama"
check "  MFU of both, or the measurement said invalid" \
    grep -Eq "^MFU \(of baseline\) +([0-9.]+ %|INVALID)" "$work/bench-llama"
check "  the two shapes' parameters within 5% of each other" \
    awk '/^parameters / { ok = $4 > 0.95 && $4 < 1.05 } END { exit !ok }' "$work/bench-llama"
check "  its token file removed" bash -c "! ls -d '$work'/dtrain-bench-llama.* 2>/dev/null"
done_testing
