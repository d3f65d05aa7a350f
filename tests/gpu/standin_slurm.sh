#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The GPU path end to end on the GPU stand-in (tests/gpu/standin, a hardware
# stand-in: the CUDA runtime, cuBLASLt and NCCL on the CPU) under a real
# local Slurm: 2 slurmd on loopback, each node a saved 4-GPU HGX A100
# topology (a hardware stand-in) with DTRAIN_STANDIN_GPUS=4 devices, the
# dtrain SPANK plugin placing the tasks (CUDA_VISIBLE_DEVICES, the task's
# device).  For (T,P,D) in (2,1,1), (1,2,1), (1,1,2) and (2,2,2), a batch
# job `sbatch --dtrain-tp=T --dtrain-pp=P` runs `srun --mpi=pmi2
# dtrain-launch --backend cuda --comm-backend nccl` on a tiny model: the
# real kernels/cuda/*.cu and the nccl comm backend, one process per rank,
# ids from ncclGetUniqueId through PMI2, TP/PP/DP split off WORLD.  Every
# step's loss must be within 1e-4 (relative) of the same model on the cpu
# kernels in one process (dtrain-train --backend cpu): fp32 on two
# backends, the GEMMs summing in other orders.  Runs in the stand-in build
# only (configure --with-cuda=standin); elsewhere skipped.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
. "$abs_top_srcdir/tests/parallel/lib.sh"
grep -q 'define DTRAIN_CUDA_STANDIN 1' "$abs_top_builddir/config.h" 2>/dev/null ||
  skip_all "not the GPU stand-in's build (configure --with-cuda=standin)"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
train=$abs_top_builddir/runtime/dtrain-train
rtol=1e-4
steps=4
export DTRAIN_STANDIN_GPUS=4 # the fixture's GPUs on each node

start_gpu_cluster standin "max_tp=8"
# --hang-detect 120: the stand-in runs kernels as CPU fibers, 8 ranks on
# 2 cores; a rank busy a few seconds in a step is slow, not hung (the
# default 1 s made a loaded run requeue itself until its time limit)
trainer=(--data "$d/tokens.bin" --layers 2 --channels 64 --heads 4 --vocab-size 256 --padded-vocab-size 256
  --max-seq-len 32 --seq 32 --batch 8 --steps "$steps" --lr 3e-3 --weight-decay 0.01 --grad-clip 1
  --seed 11 --threads 1 --log-every 1 --precision fp32 --hang-detect 120)

# losses FILE: the "loss" of each metrics line, one a line.
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
# deviation BASE FILE: the largest relative loss deviation, or "missing".
deviation() {
  paste <(losses "$1") <(losses "$2") | awk -v n="$steps" '
    NF == 2 { k++; x = ($2 - $1) / $1; if (x < 0) x = -x; if (x > m) m = x }
    END { if (k != n) print "missing"; else printf "%.2e\n", m }'
}

OPENBLAS_NUM_THREADS=1 "$train" "${trainer[@]}" --backend cpu --metrics "$d/cpu.jsonl" >"$d/cpu.out" 2>&1
rc=$?
check "the reference: dtrain-train --backend cpu, one process, $steps steps (exit $rc)" \
  [ "$rc" -eq 0 -a "$(losses "$d/cpu.jsonl" | wc -l)" -eq "$steps" ]

#      name  T P nodes per-node micro-batches
for spec in "tp2 2 1 1 2 1" "pp2 1 2 1 2 2" "dp2 1 1 2 1 1" "tp2pp2dp2 2 2 2 4 2"; do
  set -- $spec
  name=$1 t=$2 p=$3 nodes=$4 per=$5 micro=$6
  world=$((nodes * per)) dp=$((nodes * per / (t * p)))
  {
    echo '#!/bin/bash'
    echo 'export OPENBLAS_NUM_THREADS=1'
    printf 'srun --mpi=pmi2 %q' "$launch"
    printf ' %q' --comm-backend nccl "${trainer[@]}" --backend cuda --micro-batches "$micro" \
      --metrics "$d/$name.jsonl"
    echo
  } >"$d/$name.sbatch"
  in_cluster "$d" timeout 400 sbatch --parsable --wait --dtrain-tp="$t" --dtrain-pp="$p" -N "$nodes" \
    --ntasks-per-node="$per" -o "$d/$name.out" "$d/$name.sbatch" >/dev/null 2>"$d/$name.err"
  rc=$?
  check "($t,$p,$dp) on the stand-in: sbatch --dtrain-tp=$t --dtrain-pp=$p -N$nodes --ntasks-per-node=$per, srun --mpi=pmi2 dtrain-launch --comm-backend nccl --backend cuda exits 0 (exit $rc)" \
    [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || sed 's/^/# /' "$d/$name.out" "$d/$name.err" | head -20
  dev=$(deviation "$d/cpu.jsonl" "$d/$name.jsonl")
  check "($t,$p,$dp) cuda + nccl on the stand-in: every step's loss within $rtol of the cpu kernels' (max relative deviation $dev)" \
    awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
done
done_testing
