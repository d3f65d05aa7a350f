/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The environment the plugin gives a task (doc/environment.md), computed as
 * a plain list of name=value pairs so that it can be checked without Slurm.
 *
 * dtrain_task_env_options(): what every step of a dtrain job gets, the batch
 * step included (the option values, no placement).
 * dtrain_task_env_placement(): adds one task's placement over it, through
 * the one encoder of common/dtrain_placement_env.h.
 * dtrain_visible_devices(): CUDA_VISIBLE_DEVICES for --dtrain-gpu-visibility. */
#ifndef DTRAIN_SPANK_TASKENV_H
#define DTRAIN_SPANK_TASKENV_H

#include <stddef.h>

#include "dtrain_placement_env.h"
#include "dtrain_plan.h"
#include "options.h"

#define DTRAIN_TASK_ENV_VALUE_MAX DTRAIN_ENV_VALUE_MAX

/* Where one task runs, as the remote context worked it out. */
struct dtrain_task_where {
    const struct dtrain_shape *shape;           /* the plan's shape, D filled in */
    const struct dtrain_task_placement *task;   /* this task's entry in the plan */
    int local_world_size;                       /* tasks of this step on this node */
    const char *cuda_visible; /* CUDA_VISIBLE_DEVICES (dtrain_visible_devices); NULL: no GPU */
    const char *rocr_visible; /* AMD GPUs: ROCR_VISIBLE_DEVICES (cuda_visible then HIP's 0..n-1); NULL else */
    int cuda_device;          /* the task's GPU's index in cuda_visible */
    const char *gpu_visibility; /* "all" or "one"; NULL: no GPU */
    const char *cpus;         /* the CPUs the task was bound to; NULL: not bound */
    const char *master_addr;  /* the step's rendezvous; NULL / 0: none */
    int master_port;          /* the first port of the step's block */
    int master_ports;         /* ports in the block (DTRAIN_PORTS); 0 none */
    int restart_count;        /* SLURM_RESTART_COUNT, 0 when unset */
};

/* Start env with the option values.  allow_pcie: the effective setting
 * (user option and site policy).  Returns 0, or -1 when a value does not fit. */
int dtrain_task_env_options(struct dtrain_env_list *env, const struct dtrain_options *opts, int allow_pcie);

/* Add (or replace) the placement variables of one task. Returns 0 or -1. */
int dtrain_task_env_placement(struct dtrain_env_list *env, const struct dtrain_task_where *where);

/* The value of `name` in env, or NULL. */
const char *dtrain_task_env_get(const struct dtrain_env_list *env, const char *name);

/* 1 when the task's command is a per-node launcher that starts its own
 * workers and overrides the placement: torchrun, python -m
 * torch.distributed.run / .launch, deepspeed (also after dtrain-launch --). */
int dtrain_argv_spawns_workers(int argc, char *const argv[]);

/* 1 when the task's command is dtrain's own trainer, which never reads
 * MASTER_ADDR/MASTER_PORT: dtrain-launch without "-- PROGRAM" (the trainer,
 * --print, --json, --job-exit) or dtrain-train.  Anything else (a script
 * that runs dtrain-launch included) may be a framework: 0. */
int dtrain_argv_runs_own_trainer(int argc, char *const argv[]);

/* 1 when the task's command is `dtrain-launch --node-report` (the step
 * dtrain-launch --supervise runs to learn where the job's nodes are). */
int dtrain_argv_node_report(int argc, char *const argv[]);

/* 1 when this process's environment asks for that step
 * (DTRAIN_NODE_REPORT=1): srun's checks of the job's shape are skipped. */
int dtrain_env_node_report(void);

/* The line a refused per-node launcher gets (no "dtrain: " prefix). */
#define DTRAIN_SPAWN_REFUSAL \
    "%s starts its own workers, which dtrain cannot place (it would override RANK, LOCAL_RANK and the GPU " \
    "of each): run the workers as the step's tasks instead, one per GPU: srun --ntasks-per-node=GPUS_PER_NODE " \
    "python train.py (every variable torchrun sets is set; doc/frameworks.md)"

#define DTRAIN_GPU_TOKEN_MAX 64

/* CUDA_VISIBLE_DEVICES (or, for AMD GPUs, ROCR_VISIBLE_DEVICES) of local
 * task `local` of a node whose K tasks have the GPUs task_gpu[0..K-1]
 * (indices in the node's ngpus GPUs, -1 none).  tokens[g]: the value the
 * vendor's runtime knows GPU g by (Slurm's GRES value, else the GPU's
 * vendor_index), NULL for "g".
 * all = 0: only the task's GPU, *device = 0.  all = 1: every GPU, the
 * tasks' GPUs first in local-rank order, then the rest in index order, so
 * that device LOCAL_RANK is the task's planned GPU; *device = its position.
 * Returns 0, -1 when the task has no GPU, -2 when out is too small. */
int dtrain_visible_devices(const int *task_gpu, int ntasks, int ngpus, const char (*tokens)[DTRAIN_GPU_TOKEN_MAX],
                           int all, int local, char *out, size_t outlen, int *device);

/* "0,1,...,n-1" for the n entries of the list `visible`: HIP's indices once
 * ROCr has filtered to `visible`.  Returns 0, -2 when out is too small. */
int dtrain_hip_indices(const char *visible, char *out, size_t outlen);

#endif
