/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo internals: choosing the GPU of every local task of one
 * node (the part of the planner that looks at the hardware).  Not installed.
 *
 * The node holds K = ngroups*T local tasks; local tasks g*T .. g*T+T-1 form
 * TP group slot g.  rel[a*ngroups+b] says how slots a and b talk outside
 * TP: PLAN_REL_PP (pipeline neighbours), PLAN_REL_DP (data-parallel peers)
 * or PLAN_REL_NONE. */
#ifndef DTRAIN_PLAN_NODE_H
#define DTRAIN_PLAN_NODE_H

#include <stddef.h>

#include "dtrain_plan.h"
#include "dtrain_topo.h"

enum plan_rel { PLAN_REL_NONE = 0, PLAN_REL_PP = 1, PLAN_REL_DP = 2 };

/* Search budget (recursive steps) of the exact TP-group search: beyond it
 * the best partition found so far is kept.  Counting steps, not time, keeps
 * the planner deterministic. */
#define PLAN_SEARCH_BUDGET 200000L

/* Stage 1 (the costly search; depends only on the node model, T, K and
 * allow_pcie, so callers reuse it across nodes): the best partitions of the
 * node's GPUs into ngroups TP groups of T.  Returns DTRAIN_OK with
 * *out (free with plan_groups_free) and *crossed = 1 when allow_pcie had to
 * let a TP group span islands, or DTRAIN_ERR_REFUSED with one line in
 * err naming node `node_index`, or DTRAIN_ERR_SYSTEM. */
struct plan_groups;
enum dtrain_status plan_node_groups(const dtrain_topo *topo, int node_index, int T, int ngroups, int allow_pcie,
                                    struct plan_groups **out, int *crossed, char *err, size_t errlen);
void plan_groups_free(struct plan_groups *groups);

/* Stage 2 (cheap): fill gpu_of_local[0..K-1] for a node whose TP-group
 * slots relate as `rel` says. */
void plan_node_assign(const struct plan_groups *groups, const unsigned char *rel, int *gpu_of_local);

/* Refuse a node with fewer GPUs than its K tasks (T per TP group), with
 * what to do: --cpu-only on a node without GPUs, a smaller T when a TP
 * group does not fit, else fewer tasks.  Returns DTRAIN_ERR_REFUSED. */
enum dtrain_status plan_refuse_gpu_count(const dtrain_topo *topo, int node_index, int T, int K, char *err,
                                         size_t errlen);

/* The CPUs of a node's K local tasks, into tasks[0..K-1].cpulist:
 * gpu_of_local[i] is task i's GPU, or gpu_of_local is NULL for CPU-only
 * tasks (plan_cpus.c says how).  0, or -1 on out of memory. */
int plan_node_cpus(const dtrain_topo *topo, int K, const int *gpu_of_local, enum dtrain_cpu_bind bind,
                   struct dtrain_task_placement *tasks);

/* How many TP groups of size T fit inside islands: sum of floor(size/T). */
int plan_island_capacity(const dtrain_topo *topo, int T);

#endif
