/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo, part 4: what a plan's groups move per training step
 * (dtrain-topo --explain): the step's bytes per group, each group's
 * slowest link and the predicted time.
 *
 * The bytes: dtrain_step_bytes.h (common/).
 * Each group's slowest link comes from node 0's model (NVLink/XGMI GB/s,
 * else PCIe at pcie_gbps) or, when the group leaves a node, the network at
 * net_gbps (a multi-node NVLink domain counts as NVLink: a TP group larger
 * than a node, a PP group kept in a domain).  Time = bytes per rank /
 * bandwidth, with no overlap with compute: an upper bound of what the step
 * waits for.  And the picture of a node's islands and TP groups.  Pure
 * functions, no global state. */
#ifndef DTRAIN_EXPLAIN_H
#define DTRAIN_EXPLAIN_H

#include <stdio.h>

#include "dtrain_plan.h"
#include "dtrain_step_bytes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GB/s per GPU assumed when nothing says otherwise (dtrain-topo --net-gbps
 * --pcie-gbps, the plugin's site keys net_gbps pcie_gbps): a 200 Gb/s NIC
 * per GPU, a PCIe 4.0 x16 link. */
#define DTRAIN_EXPLAIN_NET_GBPS_DEFAULT 25
#define DTRAIN_EXPLAIN_PCIE_GBPS_DEFAULT 25
#define DTRAIN_EXPLAIN_GBPS_MAX 100000

struct dtrain_explain {
    double params;                               /* 12*L*H^2 + 13*L*H + Vp*H + maxT*H + 2H */
    double bytes[DTRAIN_EXPLAIN_GROUPS];         /* sent per rank per step, the busiest stage's group */
    int stage[DTRAIN_EXPLAIN_GROUPS];            /* that stage */
    struct dtrain_group_links links;             /* rank 0's groups' slowest links (homogeneous nodes) */
    double seconds[DTRAIN_EXPLAIN_GROUPS];       /* bytes / bandwidth */
    double total_seconds;
};

/* Fill `out` for `plan` (its shape) on nodes like `node0`; pp_in_domain:
 * the plan keeps PP groups inside a multi-node NVLink domain
 * (policy.pp_in_domain), so PP sends between nodes run at NVLink rate.
 * Returns DTRAIN_OK, or DTRAIN_ERR_INPUT with one line in err (a size out of range, layers not divisible by P). */
enum dtrain_status dtrain_explain_plan(const dtrain_plan *plan, const dtrain_topo *node0,
                                       const struct dtrain_model_size *m, double net_gbps, double pcie_gbps,
                                       int pp_in_domain, struct dtrain_explain *out, char *err, size_t errlen);

/* The slowest link of each group of `rank` (TP, PP, DP, WORLD), in `plan`:
 * a whole plan or one node's share (dtrain_plan_place_node; the SPANK
 * plugin's).  A group member on a node the plan lacks counts as placed like
 * the member of its local rank on rank's node (the planner's nodes are
 * alike), so a node's share gives the whole plan's answer.  Links
 * as for dtrain_explain_plan.  Returns DTRAIN_OK, or DTRAIN_ERR_INPUT when
 * the plan does not hold rank. */
enum dtrain_status dtrain_explain_rank_links(const dtrain_plan *plan, const dtrain_topo *node, int rank,
                                             double net_gbps, double pcie_gbps, int pp_in_domain,
                                             struct dtrain_group_links *out);

/* The node's islands as boxes, each GPU with the local TP group that holds
 * it (g<k>), of plan's node `node` (a node the plan has; plan NULL: the
 * islands only), each line starting with prefix (e.g. "dtrain: node7: "):
 * dtrain-topo --picture, and the plugin under --dtrain-verbose. */
void dtrain_plan_picture(FILE *out, const char *prefix, const dtrain_topo *topo, const dtrain_plan *plan, int node);

#ifdef __cplusplus
}
#endif
#endif
