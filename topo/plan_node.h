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

#include "dtrain_topo.h"

enum plan_rel { PLAN_REL_NONE = 0, PLAN_REL_PP = 1, PLAN_REL_DP = 2 };

/* Search budget (recursive steps) of the exact TP-group search: beyond it
 * the best partition found so far is kept.  Counting steps, not time, keeps
 * the planner deterministic. */
#define PLAN_SEARCH_BUDGET 200000L

/* Fill gpu_of_local[0..K-1].  Returns DTRAIN_TOPO_OK (with *crossed = 1 when
 * allow_pcie had to let a TP group span islands), or DTRAIN_TOPO_ERR_REFUSED
 * with one line in err naming node `node_index`. */
int plan_node_gpus(const dtrain_topo *topo, int node_index, int T, int ngroups,
                   const unsigned char *rel, int allow_pcie,
                   int *gpu_of_local, int *crossed, char *err, size_t errlen);

/* How many TP groups of size T fit inside islands: sum of floor(size/T). */
int plan_island_capacity(const dtrain_topo *topo, int T);

#endif
