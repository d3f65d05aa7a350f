/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo, part 4: what a plan's groups move per training step
 * (dtrain-topo --explain).
 *
 * For a GPT-style model (layers, hidden size, sequence, vocabulary) trained
 * with micro-batches of b sequences, m per step and DP rank, and a plan:
 *   TP: per layer and micro-batch, 2 all-reduces of the b*S*H activations
 *       forward and 2 backward (Megatron's column/row-parallel pair);
 *   PP: per micro-batch, the b*S*H activation to the next stage forward and
 *       its gradient back, at every stage boundary;
 *   DP: one all-reduce of the rank's gradient shard, params/(T*P) values
 *       (ZeRO-1's reduce-scatter + all-gather move the same bytes).
 * A ring all-reduce of n bytes over G ranks sends 2(G-1)/G * n per rank.
 * Each group's slowest link comes from node 0's model (NVLink/XGMI GB/s,
 * else PCIe at pcie_gbps) or, when the group leaves a node, the network at
 * net_gbps (a multi-node NVLink domain counts as NVLink: a TP group larger
 * than a node, a PP group kept in a domain).  Time = bytes /
 * bandwidth, with no overlap with compute: an upper bound of what the step
 * waits for.  Pure function, no global state. */
#ifndef DTRAIN_EXPLAIN_H
#define DTRAIN_EXPLAIN_H

#include "dtrain_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_model_size {
    long layers, hidden, seq, vocab;
    long micro_batch, micro_batches; /* b sequences per micro-batch, m per step and DP rank */
    int act_bytes;                   /* 2 (bf16) or 4 (fp32) */
    int grad_bytes;                  /* 4: fp32 gradients all-reduced */
};

enum dtrain_explain_group { DTRAIN_EXPLAIN_TP = 0, DTRAIN_EXPLAIN_PP, DTRAIN_EXPLAIN_DP, DTRAIN_EXPLAIN_GROUPS };

struct dtrain_explain {
    double params;                               /* 12*L*H^2 + V*H (+ S*H positions) */
    double bytes[DTRAIN_EXPLAIN_GROUPS];         /* sent per rank per step */
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
