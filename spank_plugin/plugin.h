/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain.so: the state of the plugin in one Slurm process, and the entry
 * points of each SPANK context.
 *
 * Slurm loads the plugin once per process: sbatch/salloc (allocator
 * context), srun (local), and one slurmstepd per job step (remote).  So the
 * one struct dtrain_plugin that dtrain_spank.c keeps is per step in
 * slurmstepd, and nothing is shared between steps or jobs.
 *
 *   dtrain_spank.c  SPANK entry points, option registration and callback,
 *                   dispatch to the files below
 *   allocator.c     sbatch/salloc (and srun first): refuse what cannot run,
 *                   before anything is queued
 *   local.c         srun: check again with the step's real size
 *   remote.c        slurmstepd: discover the node, plan the step, export
 *                   each task's environment and bind its CPUs
 *   options.c       the --dtrain-* options;  site_config.c  the site config
 *   submit.c        client-side checks;  taskenv.c  the task environment
 *   gres.c          GPUs from Slurm's GRES;  cpubind.c  CPU lists, binding
 *   rendezvous.c    MASTER_ADDR / MASTER_PORT and the first node's claim of the
 *                   step's block of ports */
#ifndef DTRAIN_SPANK_PLUGIN_H
#define DTRAIN_SPANK_PLUGIN_H

#include <stdint.h>

#include <slurm/spank.h>

#include "site_config.h"
#include "dtrain_plan.h"
#include "dtrain_topo.h"
#include "gres.h"
#include "options.h"
#include "rendezvous.h"
#include "taskenv.h"

#define DTRAIN_MSG_MAX 512

/* What the remote context does with the step it runs in. */
enum dtrain_step_mode {
    DTRAIN_STEP_IGNORED = 0, /* not a dtrain job, or the extern step */
    DTRAIN_STEP_OPTIONS,     /* batch or interactive step: option values, no placement */
    DTRAIN_STEP_PLACED,      /* every task gets its placement */
    DTRAIN_STEP_REPORT,      /* dtrain-launch --node-report: option values and the node's NVLink domain */
    DTRAIN_STEP_FAILED,      /* every task fails with `failure` */
};

struct dtrain_step {
    enum dtrain_step_mode mode;
    uint32_t nnodes, nodeid, local_tasks, total_tasks;
    /* This node's place in the step's task order: it holds task ids
     * node_pos*K .. node_pos*K+K-1.  SLURM_NODEID with --distribution=block
     * on Slurm before 26.05; another place when SLURM_HOSTFILE +
     * --distribution=arbitrary reorder the nodes (dtrain-topo
     * --switch-addrs: the switch tree order), or when Slurm 26.05 lays the
     * tasks out by leaf switch, block or ring position. */
    uint32_t node_pos;
    char node[DTRAIN_CONFIG_NODE_MAX];     /* Slurm's name of this node */
    int allow_pcie;                        /* effective: option and site policy */
    dtrain_topo *topo;                     /* this node */
    dtrain_topo *gres_topo;                /* topo restricted to the GRES GPUs and --dtrain-gpu-vendor, or NULL */
    struct dtrain_gres_gpus gres;
    /* What the GPU's vendor runtime knows each GPU of the placed model by
     * (Slurm's GRES value, else its vendor_index): CUDA_VISIBLE_DEVICES for
     * NVIDIA, ROCR_VISIBLE_DEVICES for AMD. */
    char gpu_token[DTRAIN_TOPO_MAX_GPUS][DTRAIN_GRES_TOKEN_MAX];
    int has_mig;                           /* some GPU is a MIG instance: tokens are UUIDs, visibility one */
    dtrain_plan *plan;
    char failure[DTRAIN_MSG_MAX];          /* one line, shown to the user by each node's first task */
    int failure_exit;                      /* DTRAIN_EXIT_* the tasks end with */
    int gpu_all;                           /* --dtrain-gpu-visibility (or the site's): 1 all, 0 one */
    int restart_count;                     /* the job's SLURM_RESTART_COUNT */
    char master_addr[DTRAIN_COORDS_ADDR_MAX]; /* the rendezvous; "" when unknown */
    char nvlink_domain[DTRAIN_TOPO_DOMAIN_LEN]; /* set when TP groups hold several nodes of one domain,
                                                  * or with --dtrain-pp-in-domain; a report step: the node's */
    int domain_unit;                       /* enum dtrain_tree_unit: nvlink_domain comes from Slurm's block or
                                            * ring, read in task_init; 0: not */
    /* DTRAIN_RANK0_NODE: the node holding task 0, as srun found it in the
     * step's layout (MASTER_ADDR's node); "" when srun did not say (the
     * step's first node must then hold rank 0). */
    char rank0_node[DTRAIN_CONFIG_NODE_MAX];
    int master_port;                       /* 0: none (dtrain's own trainer claims none) */
    int master_ports;                      /* the block's ports from master_port on (ports_per_step) */
    struct dtrain_rdv_claim port_claim;    /* the first node's claim on the block */
    struct dtrain_env_list env;            /* scratch for task_init */
};

struct dtrain_plugin {
    struct dtrain_site_config config;
    struct dtrain_options opts;
    struct dtrain_step step; /* remote context only */
};

/* allocator.c: sbatch, salloc, and srun's first check; allocates: 1 in
 * sbatch/salloc (the allocator context), where --dtrain-spares adds nodes */
int dtrain_allocator_post_opt(struct dtrain_plugin *plugin, int allocates);

/* local.c: srun, once the step exists */
int dtrain_local_user_init(struct dtrain_plugin *plugin, spank_t sp);

/* remote.c */
void dtrain_remote_option_error(struct dtrain_plugin *plugin, const char *msg);
int dtrain_remote_post_opt(struct dtrain_plugin *plugin, spank_t sp);
int dtrain_remote_task_init(struct dtrain_plugin *plugin, spank_t sp);
void dtrain_remote_exit(struct dtrain_plugin *plugin);

#endif
