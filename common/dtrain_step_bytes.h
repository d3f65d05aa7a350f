/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What one training step of dtrain's trainer sends, group by group: the
 * model of dtrain-topo --explain (topo/dtrain_explain.h) and of the
 * trainer's own report under DTRAIN_VERBOSE (runtime/trainer/dtrain_traffic.h),
 * one formula for both.
 *
 * For a GPT-style model (L layers, hidden size C, N = b*S rows of a
 * micro-batch of b sequences of S tokens, m micro-batches per step and DP
 * rank, vocabulary V padded to Vp rows) on a T x P x D plan, every
 * collective dtrain's trainer makes in one step (runtime/parallel,
 * runtime/trainer), counted as the bytes a group's members send in all
 * (the sum over the members; X = N*C, one stage's nl = L/P layers):
 *   TP, per micro-batch: each layer forward 2 all-reduces of X (Megatron's
 *       g), backward 2 (f); sequence parallel instead forward 2 all-gathers
 *       + 2 reduce-scatters, backward 4 all-gathers (the residual gradient
 *       and the LayerNorm input again) + 2 reduce-scatters; full
 *       recomputation runs the forward's again.  Stage 0: the vocabulary-
 *       parallel embedding's all-reduce (SP: reduce-scatter forward,
 *       all-gather backward).  Last stage: the LM head's input-gradient
 *       all-reduce (SP: all-gather of the rows forward and again backward,
 *       reduce-scatter backward) and the vocabulary-parallel loss (an
 *       all-gather of the N row maxima, an all-reduce of 2N sums).  SP once
 *       per step (ZeRO-3: per micro-batch): the LayerNorm weight gradient
 *       sums, 4 all-reduces of C per layer, 2 on the last stage.
 *   PP: per micro-batch the N/T*C (SP) or N*C activation forward and its
 *       gradient back across each of the P*v - 1 chunk boundaries (v
 *       virtual stages); the tied embedding's gradient swap between stage 0
 *       and the last, Vp/T*C gradients each way.
 *   DP: one all-reduce of the rank's gradient vector (ZeRO-1/2: a reduce-
 *       scatter + all-gather of each bucket padded to a multiple of D, the
 *       same bytes plus < D floats per bucket, which is not modelled: it
 *       depends on the bucket split).  ZeRO-3: each unit (a layer, wpe, wte,
 *       the final LayerNorm) padded to a multiple of D, gathered for the
 *       forward and again for the backward of each micro-batch (wte by the
 *       embedding and by the head), every unit's gradient but wte's
 *       reduce-scattered at each backward, wte's once per step.
 *   WORLD: the loss and norm sums, an all-gather of k doubles.
 * Activations count act_bytes a value, gradients grad_bytes, the loss's
 * values and the sums 4 and 8.
 * A ring all-reduce of n floats over G members sends 2(G-1)n floats in all,
 * a reduce-scatter or all-gather of n per member (G-1)Gn, whatever the
 * split: dtrain's cpu backend counts exactly these (tests/comm/test_bytes.c,
 * tests/parallel/test_explain.c).  Per rank = group total / G.
 */
#ifndef DTRAIN_STEP_BYTES_H
#define DTRAIN_STEP_BYTES_H

#include <stddef.h>

#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_model_size {
    long layers, hidden, seq, vocab;
    long micro_batch, micro_batches; /* b sequences per micro-batch, m per step and DP rank */
    int act_bytes;                   /* 2 (bf16) or 4 (fp32: dtrain's trainer communicates fp32) */
    int grad_bytes;                  /* 4: fp32 gradients all-reduced */
    /* 0 in each: the default named */
    long padded_vocab;      /* Vp, wte rows (0: V rounded up to a multiple of T) */
    long max_seq;           /* wpe rows (0: seq) */
    int virtual_stages;     /* v chunks per pipeline stage (0: 1) */
    int sequence_parallel;  /* 1: Megatron's sequence parallelism */
    int zero_stage;         /* 0-3 */
    int recompute_full;     /* 1: full activation recomputation (its forward collectives again) */
    int step_sums;          /* doubles the step sums over WORLD (0: 4, the job's loop; 2 without control) */
    /* another model family than GPT-2 (0 in each: GPT-2's, the value named) */
    double layer_split;     /* a layer's parameters split over T (12C^2 + 7C) */
    double layer_whole;     /* a layer's parameters every TP rank holds whole (6C) */
    double final_norm;      /* the final norm's parameters (2C) */
    int norm_vectors;       /* C-vectors of a layer's norms, summed over TP under SP (4) */
    int no_wpe;             /* 1: no position embedding (Llama) */
    int untied_head;        /* 1: the last stage holds its own head, not a twin of wte */
};

enum dtrain_explain_group { DTRAIN_EXPLAIN_TP = 0, DTRAIN_EXPLAIN_PP, DTRAIN_EXPLAIN_DP, DTRAIN_EXPLAIN_WORLD,
                            DTRAIN_EXPLAIN_GROUPS };

/* Bytes the members of one group of kind g send in all in one step (the
 * sum over the members; per member: divide by the group's size), for T x
 * P x D: the TP or DP group of pipeline stage `stage` (0..P-1; they differ:
 * stage 0 has the embedding, the last the head), a pipeline (stage
 * ignored), or WORLD.  Exact for the trainer's collectives on dtrain's
 * comm layer, but ZeRO-1/2's bucket padding (< D floats a bucket, in each
 * of the reduce-scatter and the all-gather).  -1 for a size out of range. */
double dtrain_explain_group_bytes(const struct dtrain_model_size *m, int T, int P, int D,
                                  enum dtrain_explain_group g, int stage);
/* Parameters (floats) of one rank of pipeline stage `stage` (its TP slice). */
double dtrain_explain_stage_params(const struct dtrain_model_size *m, int T, int P, int stage);
/* Members of a group of kind g in a T x P x D grid: T, P, D or T*P*D. */
int dtrain_explain_group_size(enum dtrain_explain_group g, int T, int P, int D);
/* "TP", "PP", "DP", "WORLD". */
const char *dtrain_explain_group_name(enum dtrain_explain_group g);

/* The slowest link each of one rank's groups crosses: what dtrain-topo
 * --explain shows, and what the SPANK plugin, which knows the node's
 * links, hands the trainer in DTRAIN_GROUP_LINKS (doc/environment.md) so
 * that --dtrain-verbose can predict each group's time in the job.  A
 * group of one member has gbps 0 and kind "-". */
#define DTRAIN_LINK_KIND_MAX 32
#define DTRAIN_GROUP_LINKS_TEXT_MAX 256
struct dtrain_group_links {
    double gbps[DTRAIN_EXPLAIN_GROUPS];                     /* GB/s */
    char kind[DTRAIN_EXPLAIN_GROUPS][DTRAIN_LINK_KIND_MAX]; /* "NVLink", "XGMI", "NVLink domain", "PCIe", "network", ... */
};

/* DTRAIN_LEAF_EDGES, "CROSS RING OWN", which dtrain-launch hands its
 * trainer with --dtrain-verbose on a switch tree: the DP ring edges across
 * leaf switches in the node order in force, all ring edges, and those
 * across in dtrain's own order (dtrain_tree.h).  Each edge carries one DP
 * member's bytes a step.  Parse: 0, or -1. */
#define DTRAIN_LEAF_EDGES_MAX 64
int dtrain_leaf_edges_parse(const char *text, long *cross, long *ring, long *cross_own);

/* Seconds a member's bytes take over a link of gbps GB/s, with no overlap
 * with compute (an upper bound of what a step waits for); 0 without a link. */
double dtrain_explain_seconds(double bytes, double gbps);

/* As text, "TP=450:NVLink,PP=25:network,DP=450:NVLink,WORLD=25:network"
 * (a group of one: "TP=-").  Returns 0, or -1 when it does not fit in len. */
int dtrain_group_links_format(const struct dtrain_group_links *l, char *buf, size_t len);
/* Read what dtrain_group_links_format writes: the four kinds once each, in
 * that order; GB/s a decimal number in (0, 1e6]; a kind of 1 to 31
 * letters, digits, spaces and "/+-_.".  Returns DTRAIN_OK, or
 * DTRAIN_ERR_INPUT with one line in err. */
enum dtrain_status dtrain_group_links_parse(const char *text, struct dtrain_group_links *l, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
