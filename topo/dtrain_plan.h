/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo, part 2: the placement planner, a pure function.
 *
 * Given the job shape (T, P, D, nodes, tasks per node), one node model per
 * node and a policy, it gives every task its global rank, its coordinates
 * and, on GPU nodes, its GPU and CPUs.  Same input, same plan: no clock, no
 * randomness, no global state.
 *
 * Rank order (DESIGN.md, Megatron's default): TP fastest, then DP, then PP:
 *     rank = tp + T*(dp + D*pp)
 * Tasks are distributed in blocks: node n holds ranks n*K .. n*K+K-1 (K tasks
 * per node), so with K % T == 0 a TP group never leaves a node (in a
 * multi-node NVLink domain, T may be a multiple of K instead: the group
 * then holds T/K consecutive nodes of one domain).  Inside a node
 * the planner chooses which GPU each local task gets: every TP group on one
 * NVLink/XGMI island, the fastest pairs first; then PP neighbours and DP peers
 * on the best links left. */
#ifndef DTRAIN_PLAN_H
#define DTRAIN_PLAN_H

#include "dtrain_grid_pos.h"
#include "dtrain_topo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_PLAN_MAX_DIM 65536       /* T, P, D each at most this */
#define DTRAIN_PLAN_MAX_WORLD 1048576   /* T*P*D at most this */

struct dtrain_shape {
    int tp;             /* T >= 1 */
    int pp;             /* P >= 1 */
    int dp;             /* D >= 1, or 0: derive D = world / (T*P) */
    int nnodes;         /* >= 1 */
    int tasks_per_node; /* K >= 1; world = nnodes * K */
};

/* Which CPUs a task gets (topo/plan_cpus.c says exactly how). */
enum dtrain_cpu_bind {
    DTRAIN_CPU_BIND_CORES = 0, /* whole cores, none shared, of one NUMA node (its GPU's) when counts allow */
    DTRAIN_CPU_BIND_NUMA = 1,  /* the whole NUMA node (a GPU's local CPUs), shared by the tasks there */
};

struct dtrain_policy {
    int allow_pcie; /* TP groups may span islands (PCIe); the plan then carries a warning */
    int cpu_only;   /* place ranks without GPUs (gpu = -1); CPUs split evenly among local tasks */
    /* GPUs in one multi-node NVLink domain on this cluster (site key
     * nvlink_domain_gpus; GB200 NVL72: 72), 0 none.  With it a TP group may
     * be larger than a node (T a multiple of the tasks per node, T at most
     * this and dividing it): it then holds T/K whole consecutive nodes, which
     * must report one NVLink domain (dtrain_topo_nvlink_domain). */
    int nvlink_domain_gpus;
    /* Keep each pipeline group inside one NVLink domain (--dtrain-pp-in-domain):
     * every node needs a domain, and the nodes of a PP group the same one
     * (dtrain_plan_check_pp_domain is the check without node models). */
    int pp_in_domain;
    /* The domain of every node given, instead of NVML's fabric membership
     * (a Slurm topology/block block the site declares an NVLink domain:
     * the plugin, which knows its own node only); NULL: NVML's. */
    const char *node_domain;
    enum dtrain_cpu_bind cpu_bind; /* cores (the zero value) or numa */
};

struct dtrain_task_placement {
    DTRAIN_GRID_POS_MEMBERS; /* its position (pos): rank = Slurm task id = PMI2 rank, coordinates */
    int node;        /* 0..nnodes-1 */
    int local_rank;  /* 0..K-1 */
    int gpu;         /* index in the node's model, -1 with cpu_only */
    char gpu_busid[DTRAIN_TOPO_BUSID_LEN]; /* "" with cpu_only */
    char cpulist[DTRAIN_TOPO_CPULIST_LEN]; /* this task's CPUs (policy.cpu_bind): whole cores near its GPU */
};

typedef struct dtrain_plan dtrain_plan;

/* Plan the job.  nodes[i] is node i's model (the same pointer may be passed
 * for every node of a homogeneous job).  Returns DTRAIN_OK, or
 * DTRAIN_ERR_REFUSED with one line in err saying what is wrong and what
 * would work (e.g. "T=8 is larger than the largest NVLink island (4 GPUs):
 * use --dtrain-tp=4 or less, or --dtrain-allow-pcie"), or another error. */
enum dtrain_status dtrain_plan_place_tasks(const struct dtrain_shape *shape,
                                           const dtrain_topo *const *nodes,
                                           const struct dtrain_policy *policy,
                                           dtrain_plan **out, char *err, size_t errlen);

/* The same plan, for node `node`'s tasks only (ranks node*K .. node*K+K-1;
 * dtrain_plan_task() gives NULL for others): what a node needs, in memory
 * and time independent of the number of nodes.  nodes[] must still hold
 * every node (entries other than `node` and, for node-spanning TP groups,
 * its group's first node, or with pp_in_domain its PP groups' nodes, are
 * not read). */
enum dtrain_status dtrain_plan_place_node(const struct dtrain_shape *shape, const dtrain_topo *const *nodes,
                                          const struct dtrain_policy *policy, int node, dtrain_plan **out, char *err,
                                          size_t errlen);

void dtrain_plan_free(dtrain_plan *plan);

const struct dtrain_shape *dtrain_plan_shape(const dtrain_plan *plan); /* D filled in */
int dtrain_plan_world_size(const dtrain_plan *plan);
const struct dtrain_task_placement *dtrain_plan_task(const dtrain_plan *plan, int rank); /* NULL outside the plan */
/* A warning the caller should print (PCIe fallback), or NULL. */
const char *dtrain_plan_warning(const dtrain_plan *plan);

/* Check a shape without node models (what sbatch can know): T, P, D ranges,
 * T*P dividing world, T*P*D == world when D is given, T dividing K, or,
 * with domain_gpus > 0 (policy.nvlink_domain_gpus), T larger than K inside
 * a multi-node NVLink domain: K dividing T, T at most domain_gpus and
 * dividing it.  Same return convention as dtrain_plan_place_tasks.  ntasks
 * or tasks_per_node may be 0 when unknown; those checks are then skipped. */
enum dtrain_status dtrain_plan_check_shape(int tp, int pp, int dp, long ntasks, long tasks_per_node, int domain_gpus,
                                           char *err, size_t errlen);

/* With --dtrain-pp-in-domain, what sbatch can know: the nodes that pipeline
 * groups join (rank r with r + T*D, r + 2*T*D, ... of the rank order, K per
 * node) must fit a domain of domain_gpus GPUs.  Refuses (one line, the
 * largest P that fits) when they cannot, or when the site declares no
 * domain (domain_gpus 0); ntasks or tasks_per_node 0: only the latter. */
enum dtrain_status dtrain_plan_check_pp_domain(int tp, int pp, long ntasks, long tasks_per_node, int domain_gpus,
                                               char *err, size_t errlen);

/* With Slurm's blocks or rings as the NVLink domains
 * (nvlink_domain_source=block|ring, Slurm 24.11+ --segment): whether a job
 * of ntasks (tasks_per_node each) asking for --segment=segment (0: none)
 * keeps every TP group of several nodes, and with pp_in_domain every
 * pipeline group, inside one domain of domain_gpus GPUs.  Slurm puts each
 * segment of S nodes inside one base block (ring), and a job no larger than
 * one without --segment; the nodes of a block are consecutive in the node
 * order (Slurm 26.05's topology layout, BlockAsNodeRank, or blocks of
 * consecutive names), so a set of node positions stays in one domain when
 * it lies in one window [kS, (k+1)S).  Refuses with one line ending in
 * "use --segment=S" (or, for a job no larger than a domain, "leave
 * --segment out") when it does not: for unit "block" the smallest S that
 * works (Slurm packs segments into base blocks), for "ring" the largest
 * (Slurm 26.05 gives each segment a ring of its own, read in
 * eval_nodes_ring.c).  Unknown sizes: DTRAIN_OK. */
enum dtrain_status dtrain_plan_check_segment(int tp, int pp, int pp_in_domain, long ntasks, long tasks_per_node,
                                             int domain_gpus, long segment, const char *unit, char *err,
                                             size_t errlen);

/* Coordinates <-> rank: dtrain_rank_of / dtrain_coords_of of dtrain_grid_pos.h. */

#ifdef __cplusplus
}
#endif
#endif
