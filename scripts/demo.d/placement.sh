#!/bin/bash
# The demo's batch script: the options given to sbatch (--dtrain-tp/pp)
# reach this srun through Slurm's SPANK option forwarding; the plugin places
# every task and exports its coordinates and GPU.
echo "batch step on $(hostname): DTRAIN_TP=${DTRAIN_TP:-unset} (the batch step gets no placement)"
srun --mpi=pmi2 bash -c 'printf "rank %2s node %s local %s  tp %s pp %s dp %s  GPU %s (CUDA_VISIBLE_DEVICES=%s)\n" \
  "$DTRAIN_RANK" "$SLURM_NODEID" "$DTRAIN_LOCAL_RANK" "$DTRAIN_TP_RANK" "$DTRAIN_PP_RANK" "$DTRAIN_DP_RANK" \
  "$DTRAIN_GPU" "$CUDA_VISIBLE_DEVICES"' | sort -n -k2
