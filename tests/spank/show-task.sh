#!/bin/sh
# Run as a job step's task: one line with what the dtrain plugin set for this
# task (key=value, "-" when unset) and the CPUs the task may run on.
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
echo "node=${SLURMD_NODENAME:--} procid=${SLURM_PROCID:--} rank=${RANK:--} local_rank=${LOCAL_RANK:--}" \
  "world=${WORLD_SIZE:--} local_world=${LOCAL_WORLD_SIZE:--} dtrain_rank=${DTRAIN_RANK:--}" \
  "dtrain_world=${DTRAIN_WORLD_SIZE:--} dtrain_local_rank=${DTRAIN_LOCAL_RANK:--}" \
  "T=${DTRAIN_TP:--} P=${DTRAIN_PP:--} D=${DTRAIN_DP:--} tp=${DTRAIN_TP_RANK:--} pp=${DTRAIN_PP_RANK:--}" \
  "dp=${DTRAIN_DP_RANK:--} cuda=${CUDA_VISIBLE_DEVICES:--} order=${CUDA_DEVICE_ORDER:--} gpu=${DTRAIN_GPU:--}" \
  "cpus=${DTRAIN_CPUS:--} allowed=$cpus by=${DTRAIN_PLACED_BY:--} ckpt=${DTRAIN_CKPT_DIR:--}" \
  "restarts=${DTRAIN_MAX_RESTARTS:--} verbose=${DTRAIN_VERBOSE:--} pcie=${DTRAIN_ALLOW_PCIE:--}"
