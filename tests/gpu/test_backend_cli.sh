#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-train --backend / --precision as a user meets them: a backend or a
# precision that does not exist are refused (exit 2, one line); --backend
# cuda without a CUDA device fails with one line saying "no CUDA device";
# with a device, a tiny model trains on the GPU in fp32, bf16 and fp16 and
# its first loss matches the CPU's (relative 1e-4 in fp32, 2e-2 in bf16,
# 2e-3 against the cpu kernels' fp16 emulation), and LoRA on an fp32 and on an
# NF4 base gives the CPU's losses within 1e-4.
set -u
. "$top_srcdir/tests/tap.sh"
train="$top_builddir/runtime/dtrain-train"
tokenize="$top_builddir/runtime/dtrain-tokenize"
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-gpu-cli-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# expect_fail CODE NEEDLE DESC CMD...: exit CODE, one "dtrain-train: " line holding NEEDLE
expect_fail() {
    local code=$1 needle=$2 desc=$3; shift 3
    "$@" >"$work/out" 2>"$work/err"
    local rc=$? msg
    msg=$(cat "$work/err")
    if [ "$rc" -eq "$code" ] && [ "$(wc -l <"$work/err")" -eq 1 ] &&
       [[ "$msg" == "dtrain-train: "* ]] && [[ "$msg" == *"$needle"* ]]; then
        pass "$desc: $msg"
    else
        fail "$desc (exit $rc): $msg"
    fi
}

# first_loss FILE: the loss of the first progress line
first_loss() { sed -n 's/^step *0\/[0-9]* | loss \([0-9.]*\) .*/\1/p' "$1" | head -1; }

for i in $(seq 300); do echo "a GPU and a CPU should agree on every loss, line $i"; done >"$work/text.txt"
"$tokenize" "$work/text.txt" "$work/data.bin" >/dev/null || { fail "dtrain-tokenize"; done_testing; }
model="--layers 2 --channels 64 --heads 2 --max-seq-len 64 --batch 4 --seq 64 --steps 3 --data $work/data.bin"

expect_fail 2 "is not a kernel backend of this build" "--backend tpu is refused" $train $model --backend tpu
expect_fail 2 "is not one of fp32, bf16, fp16" "--precision fp8 is refused" $train $model --precision fp8

if ! $train --help | grep -q -- '--backend'; then
    fail "dtrain-train --help lists --backend"
elif $train $model --backend cuda --threads 1 >"$work/gpu.out" 2>"$work/gpu.err"; then
    pass "dtrain-train --backend cuda trains 3 steps on the GPU"
    $train $model --threads 2 >"$work/cpu.out" 2>&1 || fail "the same run on the CPU"
    $train $model --backend cuda --precision fp32 >"$work/fp32.out" 2>&1 || fail "--precision fp32 on the GPU"
    cpu=$(first_loss "$work/cpu.out") bf16=$(first_loss "$work/gpu.out") fp32=$(first_loss "$work/fp32.out")
    diag "first losses: cpu $cpu, cuda bf16 $bf16, cuda fp32 $fp32"
    check "cuda fp32 first loss $fp32 is the CPU's $cpu within 1e-4" \
        awk -v a="$fp32" -v b="$cpu" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b <= 1e-4) }'
    check "cuda bf16 first loss $bf16 is the CPU's $cpu within 2e-2" \
        awk -v a="$bf16" -v b="$cpu" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b <= 2e-2) }'
    # fp16: cuBLASLt fp16 GEMMs against the cpu kernels' emulation (the same
    # operand rounding; only the order of the fp32 sums differs, which can
    # flip an operand's rounding: 2e-3, four fp16 ulps, on the first loss);
    # a scale of 1e9 overflows fp16 in the first backwards, so steps are
    # skipped and the scale halved on the GPU as on the CPU
    f16="--precision fp16 --loss-scale 1e9 --loss-scale-window 2"
    $train $model --backend cuda $f16 >"$work/f16g.out" 2>&1 || fail "--precision fp16 on the GPU"
    $train $model --threads 2 $f16 >"$work/f16c.out" 2>&1 || fail "--precision fp16 on the CPU"
    fg=$(first_loss "$work/f16g.out") fc=$(first_loss "$work/f16c.out")
    check "cuda fp16 first loss $fg is the CPU fp16 emulation's $fc within 2e-3" \
        awk -v a="$fg" -v b="$fc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b <= 2e-3) }'
    og=$(grep -c 'gradient overflow at loss scale' "$work/f16g.out") oc=$(grep -c 'gradient overflow at loss scale' "$work/f16c.out")
    check "cuda fp16 with --loss-scale 1e9 skips overflowing steps as the CPU does ($og and $oc)" \
        test "$og" -ge 1 -a "$og" = "$oc"
    # the one trainer's checkpoints from GPU memory (host copies, sharded format),
    # resumed on the GPU and on the CPU: the same step 3 within fp32's 1e-4
    step3() { sed -n 's/^step *3\/[0-9]* | loss \([0-9.]*\) .*/\1/p' "$1" | head -1; }
    $train $model --backend cuda --precision fp32 --checkpoint "$work/gck" >"$work/gck.out" 2>&1
    check "dtrain-train --backend cuda --checkpoint writes a sharded checkpoint of step 3" \
        test -f "$work/gck/step-00000003/manifest.json" -a -f "$work/gck/step-00000003/shard-00000.bin"
    resume="--data $work/data.bin --batch 4 --seq 64 --steps 5 --resume $work/gck"
    $train $resume --backend cuda --precision fp32 >"$work/gres.out" 2>&1 || fail "--resume on the GPU"
    $train $resume --threads 2 >"$work/cres.out" 2>&1 || fail "--resume of the GPU's checkpoint on the CPU"
    g3=$(step3 "$work/gres.out") c3=$(step3 "$work/cres.out")
    check "the GPU's checkpoint resumes on the GPU ($g3) and on the CPU ($c3) at step 3 within 1e-4" \
        awk -v a="$g3" -v b="$c3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b <= 1e-4) }'
    # LoRA on the frozen base, and on an NF4 base (QLoRA): the adapters'
    # kernels and the NF4 matmuls in the trainer, every step's loss the
    # CPU's within fp32's 1e-4
    losses() { sed -n 's/^step *[0-9]*\/[0-9]* | loss \([0-9.]*\) .*/\1/p' "$1"; }
    for base in fp32 nf4; do
        lora="--lora-rank 4 --lora-targets c_attn,c_proj,c_fc --base-dtype $base"
        $train $model $lora --backend cuda --precision fp32 >"$work/lg.out" 2>&1 || fail "LoRA ($base base) on the GPU"
        $train $model $lora --threads 2 >"$work/lc.out" 2>&1 || fail "LoRA ($base base) on the CPU"
        check "LoRA on a $base base: the GPU's 3 losses ($(losses "$work/lg.out" | tr '\n' ' ')) are the CPU's within 1e-4" \
            awk 'NR == FNR { c[FNR] = $1; next } { d = $1 - c[FNR]; if (d < 0) d = -d; if (!(c[FNR] > 0 && d / c[FNR] <= 1e-4)) bad = 1; n++ }
                 END { exit bad || n != 3 }' <(losses "$work/lc.out") <(losses "$work/lg.out")
    done
else
    rc=$?
    msg=$(cat "$work/gpu.err")
    if [ "${DTRAIN_GPU_REQUIRED:-0}" = 1 ]; then
        fail "--backend cuda (exit $rc) where a device must be (DTRAIN_GPU_REQUIRED=1): $msg"
    elif grep -q "no CUDA device" "$work/gpu.err" && [ "$(wc -l <"$work/gpu.err")" -eq 1 ]; then
        pass "--backend cuda without a CUDA device fails clearly (exit $rc): $msg"
        skip_test "no CUDA device: the first losses on the GPU"
        skip_test "no CUDA device: the first losses on the GPU in bf16"
        skip_test "no CUDA device: fp16 on the GPU against the cpu emulation"
        skip_test "no CUDA device: fp16 loss scaling on the GPU"
        skip_test "no CUDA device: a checkpoint from GPU memory"
        skip_test "no CUDA device: that checkpoint resumed on the GPU and on the CPU"
        skip_test "no CUDA device: LoRA on the GPU"
        skip_test "no CUDA device: LoRA on an NF4 base on the GPU"
    elif grep -q "configure with --with-cuda" "$work/gpu.err"; then
        pass "--backend cuda in a build without CUDA says how to get it: $msg"
    else
        fail "--backend cuda (exit $rc): $msg"
    fi
fi
done_testing
