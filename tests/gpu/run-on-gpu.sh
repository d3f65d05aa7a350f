#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The one command for a machine with a GPU (doc/gpu.md): every CUDA kernel
# against the CPU kernel, a one-GPU training step against the CPU (GPT-2 and
# Llama), the nccl comm backend, the CLI choice of backend, then GPT-2 124M
# tokens/s and MFU against the bf16 cuBLASLt GEMM rate measured in the same
# run.  Under 8 minutes on an H100/H200 (about 2 with the bundle already
# built): every step's time limit is cut to what is left of
# DTRAIN_GPU_BUDGET (450 s from the first test) less a reserve for the
# benchmark, so that a slow step fails (timed out) rather than running the
# whole over.
#
#   tests/gpu/run-on-gpu.sh --prepare   on a build machine with the CUDA toolkit
#                                       (and dtrain's build dependencies): build
#                                       with --with-cuda --without-onednn into
#                                       build-gpu/ and make build-gpu/bundle/, the
#                                       programs (stripped) and the non-system
#                                       libraries they need; fails when the bundle
#                                       is over 60 MiB (a device run carries 64)
#   tests/gpu/run-on-gpu.sh             on the GPU machine, from a copy of the
#                                       tree holding build-gpu/bundle (carried:
#                                       the device tool's carry ["build-gpu/bundle"]);
#                                       without a bundle it tries to build there
#   tests/gpu/run-on-gpu.sh --two-gpus  the same, then, with two or more GPUs,
#                                       the nccl data paths over two devices (DP,
#                                       TP, PP: test_nccl and test_cuda_parallel's
#                                       two-device points) and the 124M benchmark
#
# GPU machines lent to a session have the CUDA driver, cudart, cuBLASLt and
# NCCL (from the toolkit or the Python wheels) but not dtrain's build
# dependencies (Slurm, hwloc, jansson, OpenBLAS), hence the bundle.  The
# output also goes to $OUT/run-on-gpu.log when $OUT is set (the device
# tool's folder of files to bring back).  Exit status 0 when every test
# passed.  Environment: DTRAIN_TEST_SEED repeats a run's random inputs;
# DTRAIN_GPU_BATCH (16) is the benchmark's batch; DTRAIN_GPU_SANITIZE=1 runs
# the kernel tests under compute-sanitizer (memcheck; minutes more).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build="$top/build-gpu"
bundle="$build/bundle"
prog=run-on-gpu.sh

say() { printf '%s: %s\n' "$prog" "$*"; }
die() { say "$*" >&2; exit 1; }

# ------------------------------------------------------------------ build

build_tree() {
    if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]; then
        (cd "$top" && ./autogen.sh) >"$build.autogen.log" 2>&1 || die "autogen.sh failed (see $build.autogen.log)"
    fi
    mkdir -p "$build" || die "cannot create $build"
    if [ ! -f "$build/Makefile" ]; then
        # without oneDNN: the GPU run does not use it, and it is 40 MB of the bundle
        (cd "$build" && "$top/configure" --with-cuda --without-onednn >configure.out 2>&1) ||
            { tail -3 "$build/configure.out" >&2; die "configure --with-cuda failed (see $build/configure.out)"; }
    fi
    local jobs
    jobs=$(nproc 2>/dev/null || echo 2)
    [ "$jobs" -gt 16 ] && jobs=16
    make -C "$build" -j"$jobs" >"$build/make.out" 2>&1 || { tail -20 "$build/make.out" >&2; die "make failed"; }
    # the test programs, without running the suite
    make -C "$build/tests/gpu" -j"$jobs" check TESTS= >>"$build/make.out" 2>&1 ||
        { tail -20 "$build/make.out" >&2; die "building tests/gpu failed"; }
}

# real_binary DIR NAME: the ELF file behind libtool's wrapper script
real_binary() {
    if [ -f "$1/.libs/$2" ]; then echo "$1/.libs/$2"; else echo "$1/$2"; fi
}

make_bundle() {
    rm -rf "$bundle"
    mkdir -p "$bundle/lib" "$bundle/runtime" "$bundle/bench" "$bundle/tests/gpu" || die "cannot create $bundle"
    local f
    for f in test_cuda_backend test_cuda_kernels test_cuda_train test_cuda_llama test_cuda_parallel test_nccl; do
        cp "$(real_binary "$build/tests/gpu" "$f")" "$bundle/tests/gpu/$f" || die "no $f: build first"
    done
    cp "$(real_binary "$build/runtime" dtrain-train)" "$bundle/runtime/" &&
        cp "$(real_binary "$build/runtime" dtrain-tokenize)" "$bundle/runtime/" &&
        cp "$(real_binary "$build/bench" dtrain-bench-gpu)" "$bundle/bench/" || die "programs missing: build first"
    cp -P "$build"/runtime/.libs/libdtrain.so* "$bundle/lib/" || die "libdtrain.so missing"
    # Every shared library the programs load, except the C and C++ runtimes
    # (on any Linux) and CUDA's (found on the GPU machine: they must match
    # its driver).
    local lib path
    for f in "$bundle"/tests/gpu/* "$bundle"/runtime/* "$bundle"/bench/*; do
        LD_LIBRARY_PATH="$bundle/lib" ldd "$f"
    done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u | while read -r lib path; do
        case "$lib" in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
            libcuda*|libcublas*|libnccl*|libnvidia*|libdtrain*) ;;
            *) cp -L "$path" "$bundle/lib/$lib" || die "cannot copy $path" ;;
        esac
    done
    # symbols are most of the programs' size; the run needs none
    find "$bundle" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-unneeded {} + 2>/dev/null
    (cd "$top" && git rev-parse HEAD 2>/dev/null) >"$bundle/commit"
    local kib
    kib=$(du -sk "$bundle" | cut -f1)
    say "bundle: $((kib / 1024)) MiB in $bundle (libraries: $(ls "$bundle/lib" | tr '\n' ' '))"
    [ "$kib" -le $((60 * 1024)) ] ||
        die "the bundle is $((kib / 1024)) MiB, over the 60 MiB a GPU run can carry (64 MiB with the tree): see which library grew"
    # the device tool carries the tracked tree too
    local tree
    tree=$(cd "$top" && git ls-files -z 2>/dev/null | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
    [ $((kib + ${tree:-0})) -le $((64 * 1024)) ] ||
        die "the bundle ($((kib / 1024)) MiB) and the tree ($((${tree:-0} / 1024)) MiB) are over the 64 MiB a GPU run carries"
    say "with the tree: $(((kib + ${tree:-0}) / 1024)) MiB of the 64 a GPU run carries"
}

if [ "${1:-}" = "--prepare" ]; then
    command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || die "no nvcc: install the CUDA toolkit"
    build_tree
    make_bundle
    say "now, on the GPU machine: tests/gpu/run-on-gpu.sh (carry build-gpu/bundle, $(du -sh "$bundle" | cut -f1))"
    exit 0
fi
two_gpus=0
case "${1:-}" in
    "") ;;
    --two-gpus) two_gpus=1 ;;
    *) die "usage: $prog [--prepare | --two-gpus]" ;;
esac

# ------------------------------------------------------------------ run

log=/dev/null
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    log="$OUT/run-on-gpu.log"
fi
# everything to the log as well; the end waits for tee, so that the log
# has the summary (a process substitution is not waited for by itself)
exec {saved_out}>&1 {saved_err}>&2
exec > >(tee "$log") 2>&1
tee_pid=$!
finish_log() {
    exec 1>&"$saved_out" 2>&"$saved_err"
    wait "$tee_pid" 2>/dev/null
}
trap finish_log EXIT

start=$(date +%s)
say "started $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -n)"
# A machine that lists a GPU must be able to use it: from here on a test
# that reports "no CUDA device" is a failure, not a skip.
gpus=0
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L; then
    say "nvidia-smi finds no GPU: the tests will report SKIP"
else
    gpus=$(nvidia-smi -L | grep -c '^GPU ')
    export DTRAIN_GPU_REQUIRED=1 # the tests fail, not skip, when CUDA cannot use it
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
fi
if [ "$two_gpus" = 1 ] && [ "$gpus" -lt 2 ]; then
    die "--two-gpus: nvidia-smi lists $gpus GPU(s)"
fi
# One GPU by default (the 8-minute run); --two-gpus adds the nccl data
# paths between two devices (test_nccl's collectives, test_cuda_parallel's
# (2,1,1), (1,2,1), (1,1,2) on nccl), which run whenever two are visible.
if [ "$gpus" -gt 0 ]; then
    if [ "$two_gpus" = 1 ]; then export CUDA_VISIBLE_DEVICES=0,1; else export CUDA_VISIBLE_DEVICES=0; fi
    say "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
fi
if [ ! -x "$bundle/tests/gpu/test_cuda_kernels" ]; then
    say "no bundle in $bundle: building here"
    build_tree
    make_bundle
fi
say "bundle of commit $(cat "$bundle/commit" 2>/dev/null || echo '?'); tree at $(cd "$top" && git rev-parse HEAD 2>/dev/null || echo '?')"

# CUDA's libraries on this machine: the toolkit's, the loader's, or the
# NVIDIA Python wheels' (the NCCL of PyTorch images lives there).
cuda_dirs=""
for want in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
    dir=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
        [ -e "$d/$want" ] && { dir=$d; break; }
    done
    if [ -z "$dir" ] && ldconfig -p 2>/dev/null | grep -q "$want"; then
        dir=system
    fi
    if [ -z "$dir" ]; then
        hit=$(find /usr /opt /root -name "$want" -not -path '*/proc/*' 2>/dev/null | head -1)
        [ -n "$hit" ] && dir=$(dirname "$hit")
    fi
    if [ -z "$dir" ]; then
        say "warning: $want not found on this machine"
    elif [ "$dir" != system ]; then
        case ":$cuda_dirs:" in *":$dir:"*) ;; *) cuda_dirs="$cuda_dirs:$dir" ;; esac
    fi
done
export LD_LIBRARY_PATH="$bundle/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# cap_limit WANT RESERVE: WANT seconds, or fewer: what is left of the budget
# (counted from here: a bundle built above is not in it) less RESERVE, at
# least 10
budget=${DTRAIN_GPU_BUDGET:-450}
budget_start=$(date +%s)
bench_reserve=120
cap_limit() {
    local left=$(( budget_start + budget - $(date +%s) - $2 ))
    [ "$left" -lt 10 ] && left=10
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

failed=0
summary=""
# run_tap NAME LIMIT CMD...: a TAP program; its counts go into the summary
run_tap() {
    local name=$1 limit=$2; shift 2
    local out="$build/$name.tap" rc
    limit=$(cap_limit "$limit" "$bench_reserve")
    say "---- $name (at most $limit s)"
    timeout "$limit" "$@" >"$out" 2>&1
    rc=$?
    cat "$out"
    local pass fail skip
    pass=$(grep -c '^ok [0-9]* - ' "$out")
    skip=$(grep -c '^ok [0-9]* # SKIP\|^1\.\.0 # SKIP' "$out")
    fail=$(grep -c '^not ok' "$out")
    if [ "$gpus" -gt 0 ] && grep -q 'SKIP.*no CUDA device' "$out"; then
        failed=$((failed + 1))
        summary="$summary$name: FAILED: nvidia-smi lists $gpus GPU(s) but CUDA could not use one\n"
    elif [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ] || ! grep -q '^1\.\.[0-9]' "$out"; then
        failed=$((failed + 1))
        summary="$summary$name: FAILED (exit $rc): $pass passed, $fail failed, $skip skipped\n"
    else
        summary="$summary$name: $pass passed, $fail failed, $skip skipped\n"
    fi
}

mkdir -p "$build" || die "cannot write to $build"
run_tap test_cuda_backend 60 "$bundle/tests/gpu/test_cuda_backend"
if [ "${DTRAIN_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
    # out-of-bounds and misaligned accesses, uninitialised reads (slow)
    run_tap test_cuda_kernels 480 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$bundle/tests/gpu/test_cuda_kernels"
else
    run_tap test_cuda_kernels 240 "$bundle/tests/gpu/test_cuda_kernels"
fi
run_tap test_cuda_train 120 "$bundle/tests/gpu/test_cuda_train"
run_tap test_cuda_llama 120 "$bundle/tests/gpu/test_cuda_llama"
run_tap test_cuda_parallel 240 "$bundle/tests/gpu/test_cuda_parallel"
run_tap test_nccl 120 "$bundle/tests/gpu/test_nccl"
run_tap test_backend_cli 120 env top_srcdir="$top" top_builddir="$bundle" bash "$top/tests/gpu/test_backend_cli.sh"

blimit=$(cap_limit 240 0)
say "---- dtrain-bench-gpu (GPT-2 124M, at most $blimit s)"
timeout "$blimit" "$bundle/bench/dtrain-bench-gpu" --batch "${DTRAIN_GPU_BATCH:-16}" >"$build/bench.out" 2>&1
rc=$?
cat "$build/bench.out"
if [ "$rc" -eq 0 ]; then
    summary="${summary}dtrain-bench-gpu: $(grep -E '^(tokens/s|MFU)' "$build/bench.out" | tr -s ' ' | tr '\n' ';')\n"
elif [ "$rc" -eq 77 ] && [ "$gpus" -eq 0 ]; then
    summary="${summary}dtrain-bench-gpu: skipped (no CUDA device)\n"
else
    failed=$((failed + 1))
    summary="${summary}dtrain-bench-gpu: FAILED (exit $rc)\n"
fi

say "---- summary ($(( $(date +%s) - start )) s)"
printf '%b' "$summary"
[ "$failed" -eq 0 ] && say "nothing failed" || say "$failed failed"
[ "$failed" -eq 0 ]
