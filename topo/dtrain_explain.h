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
 * waits for.  Pure functions, no global state. */
#ifndef DTRAIN_EXPLAIN_H
#define DTRAIN_EXPLAIN_H

#include "dtrain_plan.h"
#include "dtrain_step_bytes.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_explain {
    double params;                               /* 12*L*H^2 + 13*L*H + Vp*H + maxT*H + 2H */
    double bytes[DTRAIN_EXPLAIN_GROUPS];         /* sent per rank per step, the busiest stage's group */
    int stage[DTRAIN_EXPLAIN_GROUPS];            /* that stage */
    double gbps[DTRAIN_EXPLAIN_GROUPS];          /* its slowest link, GB/s (0: the group has one rank) */
    char link[DTRAIN_EXPLAIN_GROUPS][64];        /* "NVLink (node)", "network", "PCIe", "-" */
    double seconds[DTRAIN_EXPLAIN_GROUPS];       /* bytes / bandwidth */
    double total_seconds;
};

/* Fill `out` for `plan` (its shape) on nodes like `node0`; pp_in_domain:
 * the plan keeps PP groups inside a multi-node NVLink domain
 * (policy.pp_in_domain), so PP sends between nodes run at NVLink rate.  Returns 0, or -1
 * with one line in err (a size out of range, layers not divisible by P). */
int dtrain_explain_plan(const dtrain_plan *plan, const dtrain_topo *node0, const struct dtrain_model_size *m,
                        double net_gbps, double pcie_gbps, int pp_in_domain, struct dtrain_explain *out, char *err,
                        size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
