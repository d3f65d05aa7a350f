#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The demo's batch script (scripts/demo submits it with sbatch --dtrain-tp=2
# --dtrain-pp=2 --dtrain-ckpt-dir=... --dtrain-max-restarts=...).
#
# The sbatch options reach the srun below through Slurm's SPANK option
# forwarding: the plugin places every task (rank, T/P/D coordinates, GPU of
# the 8-GPU node it runs on) and dtrain-launch bootstraps the communicators
# and trains in-process.  Checkpoints go to DTRAIN_CKPT_DIR (set by
# --dtrain-ckpt-dir); a requeued run finds the newest one there and resumes.
#
# Environment (from scripts/demo, through sbatch --export):
#   DEMO_DIR      where the config, the metrics and the outputs live
#   DEMO_CONFIG   the trainer's JSON config
# Each run of the job (SLURM_RESTART_COUNT = 0, 1, ...) writes its own
# metrics file, DEMO_DIR/metrics.RUN.jsonl, so that the steps a resumed run
# does again stay visible next to the ones it replaces.
set -u
run=${SLURM_RESTART_COUNT:-0}
echo "demo: job $SLURM_JOB_ID, run $run (SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-unset}) on $SLURM_JOB_NODELIST;" \
     "DTRAIN_TP=$DTRAIN_TP DTRAIN_PP=$DTRAIN_PP, checkpoints in $DTRAIN_CKPT_DIR"
if [ "$run" = 0 ]; then
  # Where the plugin placed each task (its environment, doc/environment.md).
  srun bash -c 'echo "demo: rank $DTRAIN_RANK on $SLURMD_NODENAME: tp $DTRAIN_TP_RANK dp $DTRAIN_DP_RANK pp $DTRAIN_PP_RANK," \
    "GPU $DTRAIN_GPU (CUDA device ${DTRAIN_CUDA_DEVICE:-0} of CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES), placed by $DTRAIN_PLACED_BY"' | sort -n -k3
fi
# One thread per rank: 8 ranks share this machine's cores.
export OPENBLAS_NUM_THREADS=1
srun --mpi=pmi2 dtrain-launch "$DEMO_CONFIG" --metrics "$DEMO_DIR/metrics.$run.jsonl"
rc=$?
# The job's exit code: dtrain-launch --job-exit turns a fault (a rank that
# exited 75, or one killed by a signal) into 75 while restarts remain, so
# that slurm.conf's RequeueExit=75 requeues the job; see dtrain-launch(1).
dtrain-launch --job-exit "$rc"
code=$?
echo "demo: run $run: srun exit $rc, job exit $code"
exit $code
