#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# Run as a job step's task: one line with what the dtrain plugin set for this
# task (key=value, "-" when unset) and the CPUs the task may run on.
# cuda= is the task's own GPU: the entry DTRAIN_CUDA_DEVICE of
# CUDA_VISIBLE_DEVICES (all of it with --dtrain-gpu-visibility=one);
# visible= the whole list.
own=-
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  own=$(echo "$CUDA_VISIBLE_DEVICES" | cut -d, -f$(( ${DTRAIN_CUDA_DEVICE:-0} + 1 )))
fi
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
echo "node=${SLURMD_NODENAME:--} procid=${SLURM_PROCID:--} rank=${RANK:--} local_rank=${LOCAL_RANK:--}" \
  "world=${WORLD_SIZE:--} local_world=${LOCAL_WORLD_SIZE:--} dtrain_rank=${DTRAIN_RANK:--}" \
  "dtrain_world=${DTRAIN_WORLD_SIZE:--} dtrain_local_rank=${DTRAIN_LOCAL_RANK:--}" \
  "T=${DTRAIN_TP:--} P=${DTRAIN_PP:--} D=${DTRAIN_DP:--} tp=${DTRAIN_TP_RANK:--} pp=${DTRAIN_PP_RANK:--}" \
  "dp=${DTRAIN_DP_RANK:--} cuda=$own visible=${CUDA_VISIBLE_DEVICES:--} device=${DTRAIN_CUDA_DEVICE:--} order=${CUDA_DEVICE_ORDER:--} gpu=${DTRAIN_GPU:--}" \
  "node_rank=${NODE_RANK:--} group_rank=${GROUP_RANK:--} nnodes=${DTRAIN_NNODES:--}" \
  "master=${MASTER_ADDR:--}:${MASTER_PORT:--} ports=${DTRAIN_PORTS:--} restart_count=${TORCHELASTIC_RESTART_COUNT:--} vis=${DTRAIN_GPU_VISIBILITY:--}" \
  "cpus=${DTRAIN_CPUS:--} allowed=$cpus by=${DTRAIN_PLACED_BY:--} ckpt=${DTRAIN_CKPT_DIR:--}" \
  "restarts=${DTRAIN_MAX_RESTARTS:--} verbose=${DTRAIN_VERBOSE:--} pcie=${DTRAIN_ALLOW_PCIE:--}" \
  "nvd=${DTRAIN_NVLINK_DOMAIN:--} ppd=${DTRAIN_PP_IN_DOMAIN:--}" \
  "rank0=${DTRAIN_RANK0_NODE:--} norder=${DTRAIN_NODE_ORDER:--} nodeid=${SLURM_NODEID:--}" \
  "rocr=${ROCR_VISIBLE_DEVICES:--} hip=${HIP_VISIBLE_DEVICES:--}"
