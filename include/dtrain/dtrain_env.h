/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Names of the environment variables of dtrain's placement contract.
 *
 * The SPANK plugin exports them for every task (task_init); dtrain-launch
 * recomputes the same values when the plugin is absent.  Frameworks may use
 * them without dtrain's runtime.  doc/environment.md describes each one. */
#ifndef DTRAIN_ENV_H
#define DTRAIN_ENV_H

#define DTRAIN_ENV_TP            "DTRAIN_TP"          /* tensor-parallel size T */
#define DTRAIN_ENV_PP            "DTRAIN_PP"          /* pipeline-parallel size P */
#define DTRAIN_ENV_DP            "DTRAIN_DP"          /* data-parallel size D */
#define DTRAIN_ENV_TP_RANK       "DTRAIN_TP_RANK"     /* 0..T-1 */
#define DTRAIN_ENV_PP_RANK       "DTRAIN_PP_RANK"     /* 0..P-1 */
#define DTRAIN_ENV_DP_RANK       "DTRAIN_DP_RANK"     /* 0..D-1 */
#define DTRAIN_ENV_RANK          "DTRAIN_RANK"        /* tp + T*(dp + D*pp) = SLURM_PROCID */
#define DTRAIN_ENV_WORLD_SIZE    "DTRAIN_WORLD_SIZE"  /* T*P*D */
#define DTRAIN_ENV_LOCAL_RANK    "DTRAIN_LOCAL_RANK"  /* task index on this node */
#define DTRAIN_ENV_GPU           "DTRAIN_GPU"         /* PCI bus id of this task's GPU, or empty */
#define DTRAIN_ENV_CPUS          "DTRAIN_CPUS"        /* CPU list the task is bound to (cpulist) */
#define DTRAIN_ENV_CKPT_DIR      "DTRAIN_CKPT_DIR"    /* --dtrain-ckpt-dir */
#define DTRAIN_ENV_CKPT_LOCAL_DIR "DTRAIN_CKPT_LOCAL_DIR" /* node-local checkpoint tier (site: e.g. a TaskProlog) */
#define DTRAIN_ENV_MAX_RESTARTS  "DTRAIN_MAX_RESTARTS"/* --dtrain-max-restarts */
#define DTRAIN_ENV_SPARES        "DTRAIN_SPARES"      /* --dtrain-spares: the job's last N nodes hold no ranks */
#define DTRAIN_ENV_INJOB_RESTARTS "DTRAIN_INJOB_RESTARTS" /* steps restarted in this run of the job (dtrain-launch --supervise) */
#define DTRAIN_ENV_STRAGGLER     "DTRAIN_STRAGGLER"   /* "report" or "drain" (--dtrain-straggler) */
#define DTRAIN_ENV_VERBOSE       "DTRAIN_VERBOSE"     /* 1 with --dtrain-verbose */
#define DTRAIN_ENV_ALLOW_PCIE    "DTRAIN_ALLOW_PCIE"  /* 1 with --dtrain-allow-pcie */
#define DTRAIN_ENV_PLACED_BY     "DTRAIN_PLACED_BY"   /* "spank" or "launcher": who computed the placement */
#define DTRAIN_ENV_NODE_RANK     "DTRAIN_NODE_RANK"   /* the node's index in the step, 0..N-1 */
#define DTRAIN_ENV_NNODES        "DTRAIN_NNODES"      /* nodes of the step */
#define DTRAIN_ENV_GPU_VISIBILITY "DTRAIN_GPU_VISIBILITY" /* "all" or "one" (--dtrain-gpu-visibility) */
#define DTRAIN_ENV_CUDA_DEVICE   "DTRAIN_CUDA_DEVICE" /* the task's GPU as a CUDA device index */
#define DTRAIN_ENV_NVLINK_DOMAIN "DTRAIN_NVLINK_DOMAIN" /* "<cluster uuid>/<clique id>" (NVML), "slurm-block/<block>" or "slurm-ring/<ring>" (nvlink_domain_source=block|ring): set when a TP group holds several nodes of one multi-node NVLink domain, or with --dtrain-pp-in-domain */
#define DTRAIN_ENV_GROUP_LINKS "DTRAIN_GROUP_LINKS" /* the slowest link of each of the task's groups, "TP=450:NVLink,PP=25:network,DP=450:NVLink,WORLD=25:network" (dtrain_step_bytes.h): the plugin's, for --dtrain-verbose's predicted times */
#define DTRAIN_ENV_RANK0_NODE "DTRAIN_RANK0_NODE" /* Slurm's name of the node that holds task 0 (MASTER_ADDR's node), from the step's layout: set by the plugin in srun for a step of several nodes */
#define DTRAIN_ENV_NODE_ORDER "DTRAIN_NODE_ORDER" /* where the step's node order comes from: "slurm", "switch-rank", "block-rank", "topology" or "hostfile" (dtrain_tree.h): set by the plugin in srun */
#define DTRAIN_ENV_LEAF_EDGES "DTRAIN_LEAF_EDGES" /* "CROSS RING OWN": DP ring edges across leaf switches in the order in force, all, and in dtrain's own order; dtrain-launch hands it to its trainer on rank 0 with --dtrain-verbose */
#define DTRAIN_ENV_PORTS "DTRAIN_PORTS" /* "LO-HI": the step's block of claimed ports, LO = MASTER_PORT (site key ports_per_step; Megatron-LM's in-process restart uses MASTER_PORT+1 and +2) */
#define DTRAIN_ENV_EXPEDITED_REQUEUE "DTRAIN_EXPEDITED_REQUEUE" /* "0" when the site key expedited_requeue=no: dtrain-launch never keeps Slurm's expedited requeue (launcher/expedite.h) */
#define DTRAIN_ENV_PP_IN_DOMAIN "DTRAIN_PP_IN_DOMAIN" /* "1" with --dtrain-pp-in-domain: dtrain-launch checks that each PP group's members share DTRAIN_NVLINK_DOMAIN */
#define DTRAIN_ENV_NODE_REPORT "DTRAIN_NODE_REPORT" /* "1" in the step dtrain-launch --supervise runs to learn where the job's nodes are (dtrain-launch --node-report): the plugin places nothing and gives each task its node's DTRAIN_NVLINK_DOMAIN */

/* Framework names (PyTorch, Megatron, JAX). */
#define DTRAIN_ENV_FW_RANK             "RANK"
#define DTRAIN_ENV_FW_LOCAL_RANK       "LOCAL_RANK"
#define DTRAIN_ENV_FW_WORLD_SIZE       "WORLD_SIZE"
#define DTRAIN_ENV_FW_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"
#define DTRAIN_ENV_FW_NODE_RANK        "NODE_RANK"         /* PyTorch Lightning, torchrun --node-rank */
#define DTRAIN_ENV_FW_GROUP_RANK       "GROUP_RANK"        /* torchrun: the agent (node) rank */
#define DTRAIN_ENV_FW_GROUP_WORLD_SIZE "GROUP_WORLD_SIZE"  /* torchrun: nodes */
#define DTRAIN_ENV_FW_ROLE_RANK        "ROLE_RANK"         /* torchrun: rank within the role */
#define DTRAIN_ENV_FW_ROLE_WORLD_SIZE  "ROLE_WORLD_SIZE"
#define DTRAIN_ENV_FW_RESTART_COUNT    "TORCHELASTIC_RESTART_COUNT" /* = SLURM_RESTART_COUNT */
#define DTRAIN_ENV_FW_MASTER_ADDR      "MASTER_ADDR"       /* env:// rendezvous: the step's first node */
#define DTRAIN_ENV_FW_MASTER_PORT      "MASTER_PORT"       /* env:// rendezvous: rank 0's store port */
#define DTRAIN_ENV_CUDA_VISIBLE        "CUDA_VISIBLE_DEVICES"
#define DTRAIN_ENV_CUDA_ORDER          "CUDA_DEVICE_ORDER"  /* set to PCI_BUS_ID */
/* AMD GPUs: ROCr filters agents first (its agent indices), then HIP
 * numbers what is left from 0 (HIP_VISIBLE_DEVICES, and CUDA_VISIBLE_DEVICES,
 * which HIP reads as the same). */
#define DTRAIN_ENV_ROCR_VISIBLE        "ROCR_VISIBLE_DEVICES"
#define DTRAIN_ENV_HIP_VISIBLE         "HIP_VISIBLE_DEVICES"

#endif
