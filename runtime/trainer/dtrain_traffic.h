/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain (internal): what one step of the trainer sends per group,
 * predicted and measured, for DTRAIN_VERBOSE=1 (--dtrain-verbose in the
 * job; the plugin exports it) and tests/parallel/test_explain.c.
 *
 * Predicted: the model of common/dtrain_step_bytes.h (the same as
 * dtrain-topo --explain), for the run's config and layout.  Measured: the
 * payload bytes this rank's communicators sent (dtrain_comm_get_stats),
 * TP from the TP group, PP from the pipeline group and the two neighbour
 * pairs, DP from the DP group, WORLD from WORLD, differenced over a step.
 * A group's members' measured bytes add up to the prediction (exactly, but
 * ZeRO-1/2's bucket padding; doc/topology.md).  The link a group crosses,
 * as this rank's communicator sees it: shared memory or TCP (cpu backend),
 * NCCL (GPU).  The predicted time: those bytes over the slowest link of
 * each group that the plugin passes (dtrain_explain_seconds, as
 * dtrain-topo --explain). */
#ifndef DTRAIN_TRAFFIC_H
#define DTRAIN_TRAFFIC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain_bootstrap.h"
#include "dtrain_comm.h"
#include "dtrain_step_bytes.h"
#include "dtrain_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model size of c with T-way TP and D-way DP; step_sums: the doubles a step sums over
 * WORLD (4 in dtrain_ft_run's loop, 2 with dtrain_ptrainer_step). */
void dtrain_traffic_model(const struct dtrain_train_config *c, int T, int D, int step_sums,
                          struct dtrain_model_size *m);

/* Bytes this rank has sent so far, per group kind (enum dtrain_explain_group). */
void dtrain_traffic_sample(const struct dtrain_comms *comms, uint64_t sent[DTRAIN_EXPLAIN_GROUPS]);

/* "shared memory", "TCP", "shared memory + TCP", "NCCL" or "-" (no link):
 * what this rank's communicators of kind g run over. */
const char *dtrain_traffic_link(const struct dtrain_comms *comms, enum dtrain_explain_group g);

/* The slowest links of this rank's groups that the SPANK plugin passed
 * (DTRAIN_GROUP_LINKS, from the node's topology and the site's net_gbps,
 * pcie_gbps).  Returns 1 and fills links; 0 when the variable is unset (the
 * plugin did not place the step); -1 with one line in err when it is
 * malformed. */
int dtrain_traffic_links(struct dtrain_group_links *links, char *err, size_t errlen);

/* Rank 0's lines before the first step: per group kind, the predicted
 * bytes of its own group (in all and per member) and the transport; with
 * links (NULL: unknown), each group's slowest link and its predicted time,
 * and their sum. */
void dtrain_traffic_explain(FILE *out, const char *prog, const struct dtrain_train_config *c,
                            const struct dtrain_bootstrap *bs, const struct dtrain_comms *comms, int step_sums,
                            const struct dtrain_group_links *links);

/* One line of a rank after step `step`: measured bytes per group kind
 * (now - before) next to the predicted per-member average of its groups,
 * the step's measured waits and, with links, the predicted times. */
void dtrain_traffic_report(FILE *out, const char *prog, const struct dtrain_train_config *c,
                           const struct dtrain_bootstrap *bs, const struct dtrain_group_links *links,
                           int step_sums, long step,
                           const uint64_t before[DTRAIN_EXPLAIN_GROUPS], const uint64_t now[DTRAIN_EXPLAIN_GROUPS],
                           double pipe_wait_ms, double tp_comm_ms, double dp_exposed_ms);

#ifdef __cplusplus
}
#endif
#endif
