/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One task's placement as environment variables, and back: the one place
 * where every variable of doc/environment.md is written (the SPANK plugin's
 * task_init and dtrain-launch both encode with it; dtrain-launch decodes the
 * plugin's with it).  Pure code: no getenv/setenv, no Slurm.
 *
 *   struct dtrain_coords   where a task runs (rank, coordinates, node, GPUs,
 *                          rendezvous)
 *   struct dtrain_env_list a bounded list of NAME=VALUE pairs
 *
 * encode(coords) -> list  adds (or replaces) every placement variable:
 *   the DTRAIN_* coordinates, the framework names of PyTorch/torchrun,
 *   Megatron-LM and DeepSpeed (RANK, LOCAL_RANK, WORLD_SIZE,
 *   LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK,
 *   ROLE_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT, MASTER_ADDR, MASTER_PORT;
 *   DTRAIN_PORTS, the block of ports from MASTER_PORT on)
 *   and the GPU variables (CUDA_VISIBLE_DEVICES; for AMD GPUs also
 *   ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES).  Empty strings and port 0 mean "not known": the
 *   variable is then left out.
 * decode(getter) -> coords reads back what encode wrote (the getter is
 *   getenv, or a lookup in a list); the required names must be there. */
#ifndef DTRAIN_PLACEMENT_ENV_H
#define DTRAIN_PLACEMENT_ENV_H

#include <stddef.h>

#include "dtrain_grid_pos.h"
#include "dtrain_status.h"

#define DTRAIN_ENV_LIST_MAX 48
#define DTRAIN_ENV_VALUE_MAX 4112   /* a 1023-byte folder, 64 GPU tokens of 64 bytes */
#define DTRAIN_COORDS_BUSID_MAX 32
#define DTRAIN_COORDS_CPUS_MAX 512
#define DTRAIN_COORDS_VISIBLE_MAX 4096
#define DTRAIN_COORDS_ADDR_MAX 256

struct dtrain_env_var {
    const char *name; /* a static string: one of dtrain_env.h's names */
    char value[DTRAIN_ENV_VALUE_MAX];
};

struct dtrain_env_list {
    int count;
    struct dtrain_env_var var[DTRAIN_ENV_LIST_MAX];
};

/* Set name (a static string) to the formatted value, replacing an earlier
 * value.  Returns 0, or -1 when the list is full or the value does not fit. */
int dtrain_env_list_set(struct dtrain_env_list *env, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The value of name in env, or NULL. */
const char *dtrain_env_list_get(const struct dtrain_env_list *env, const char *name);

struct dtrain_coords {
    DTRAIN_GRID_POS_MEMBERS;         /* T, P, D, world size, rank, coordinates */
    int local_rank, local_size;      /* index on the node, tasks on the node (0: unknown) */
    int node, nnodes;                /* NODE_RANK/GROUP_RANK, nodes of the step (0: unknown) */
    int restart_count;               /* SLURM_RESTART_COUNT of the job, 0 when never requeued */
    int cuda_device;                 /* index of the task's GPU in cuda_visible; -1: no GPU */
    char placed_by[16];              /* "spank" or "launcher" */
    char gpu_busid[DTRAIN_COORDS_BUSID_MAX];      /* "" no GPU (or GPUs left as Slurm set them) */
    char gpu_visibility[8];          /* "all" or "one"; "" when GPUs are not placed */
    char cpus[DTRAIN_COORDS_CPUS_MAX];            /* "" not bound */
    char cuda_visible[DTRAIN_COORDS_VISIBLE_MAX]; /* CUDA_VISIBLE_DEVICES; "" left as it is */
    /* AMD GPUs: ROCR_VISIBLE_DEVICES (ROCr agent indices, or Slurm's GRES
     * values); "" for NVIDIA or no GPU.  When set, cuda_visible holds HIP's
     * indices after ROCr's filter (0..n-1), written to HIP_VISIBLE_DEVICES
     * and CUDA_VISIBLE_DEVICES alike. */
    char rocr_visible[DTRAIN_COORDS_VISIBLE_MAX];
    char master_addr[DTRAIN_COORDS_ADDR_MAX];     /* "" unknown */
    int master_port;                 /* 0 unknown */
    int master_ports;                /* ports claimed from master_port on (DTRAIN_PORTS=P-Q); 0 unknown */
};

/* Add the variables of c to env.  Returns 0, or -1 when one does not fit. */
int dtrain_placement_env_encode(const struct dtrain_coords *c, struct dtrain_env_list *env);

typedef const char *(*dtrain_env_getter)(const char *name, void *ctx);

/* Read coords back (every field encode writes).  The coordinates, sizes and
 * local rank are required; the others default to "unknown".  Returns
 * DTRAIN_OK, or DTRAIN_ERR_INPUT with one line in err naming the variable
 * (missing or malformed). */
enum dtrain_status dtrain_placement_env_decode(dtrain_env_getter get, void *ctx, struct dtrain_coords *c, char *err,
                                               size_t errlen);

/* The CUDA device a task of a placed step uses, among count devices:
 * DTRAIN_CUDA_DEVICE (LOCAL_RANK with --dtrain-gpu-visibility=all, 0 with
 * one; a value outside 0..count-1 is 0), or -1 when it is unset: the
 * caller keeps the device the process already chose (cudaSetDevice by a
 * framework or a test; device 0 when nothing chose). */
int dtrain_task_cuda_device(int count);

/* Getters for decode: the process environment (ctx unused), a list. */
const char *dtrain_env_getter_process(const char *name, void *ctx);
const char *dtrain_env_getter_list(const char *name, void *ctx);

#endif
