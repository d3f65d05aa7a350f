/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: tensor parallelism (Megatron-LM) over a TP communicator.
 *
 * Inside a block (dtrain_block_forward/backward) the QKV and fc matmuls are
 * column-parallel (each rank computes its heads / its MLP columns) and the
 * two projections row-parallel (each rank a partial sum).  Megatron's
 * conjugate operators join them:
 *   f  before a column-parallel matmul: identity forward, all-reduce of the
 *      input gradient backward;
 *   g  after a row-parallel matmul: all-reduce forward, identity backward.
 * dtrain_tp_block_hook() is the hook the block calls at those four points;
 * dtrain_tp_allreduce() is the same operator for the LM head (an f before
 * the vocabulary-parallel logits) and the embedding (a g after it).
 *
 * Vocabulary-parallel embedding: rank r holds wte rows [v0, v0 + Vl),
 * v0 = r*Vl; a token outside them gives 0, rank 0 adds wpe, and the g
 * all-reduce gives every rank wte[token] + wpe[t], bit for bit what one
 * rank computes (the other terms are exact zeros).
 *
 * Vocabulary-parallel cross-entropy: each rank holds the logits of its
 * columns only (N, Vl); the full N x Vp logits are never gathered.  The
 * global max per row comes from an all-gather of the N local maxima, the
 * softmax denominator and the target's logit from one all-reduce of 2N
 * floats.  Padding columns (global index >= V) are never a target and get
 * probability and gradient 0, as in dtrain_k_softmax_xent_*.
 *
 * Sequence parallelism (dtrain_tp_set_sequence_parallel, Megatron-LM's):
 * the residual stream between the column- and row-parallel regions is
 * split over the TP ranks by rows, rank r holding rows [r*N/T, (r+1)*N/T)
 * of the (B,T,C) stream (with B = 1 exactly the sequence's positions; the
 * regions are row-wise, so which rows is immaterial to the result).  f
 * becomes an all-gather forward / reduce-scatter backward, g a
 * reduce-scatter forward / all-gather backward (the block hook's
 * all_gather and reduce_scatter, dtrain_gpt2.h); the embedding's g is a
 * reduce-scatter (the stage's scatter point), the LM head's f an
 * all-gather of the final LN's rows (its gather point); the loss is then
 * computed on all N rows by every rank, as without.
 *
 * With T = 1 every function is the plain kernel (dtrain_kernels.h) and no
 * communication happens.  With T > 1 the vocabulary-parallel pieces are
 * kernels too (dtrain_k_embedding_vp_*, dtrain_k_xent_vp_*) and the
 * collectives between them go through dtrain_pcomm.h, so every backend
 * runs them: all buffers, scratch and token arrays included, are the
 * kernels' memory. */
#ifndef DTRAIN_TP_H
#define DTRAIN_TP_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_comm.h"
#include "dtrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_tp; /* opaque */

/* comm: the TP group's communicator (its size is T; NULL means T = 1).
 * V: vocabulary; the rank holds Vl rows of wte from v0; max_rows: the most
 * token positions N of one call (for the cross-entropy's scratch). */
int dtrain_tp_create(struct dtrain_kernels *k, dtrain_comm *comm, int V, int Vl, int v0,
                     int max_rows, struct dtrain_tp **out, char *err, size_t errlen);
void dtrain_tp_destroy(struct dtrain_tp *tp);
int dtrain_tp_size(const struct dtrain_tp *tp);
int dtrain_tp_rank(const struct dtrain_tp *tp);

/* Seconds spent so far in this rank's TP communication calls (the
 * per-rank metrics; with NCCL the calls are queued on the stream and this
 * is their launch time, not the transfer). */
double dtrain_tp_comm_seconds(const struct dtrain_tp *tp);

/* Sequence parallelism on (1) or off (0, the default); on needs T > 1
 * (DTRAIN_ERR_INPUT otherwise).  The hook then carries the all-gather and
 * the reduce-scatter. */
int dtrain_tp_set_sequence_parallel(struct dtrain_tp *tp, int on, char *err, size_t errlen);
int dtrain_tp_sequence_parallel(const struct dtrain_tp *tp);

/* Sequence parallel: in (n) of every rank -> out (T*n), rank-major; and
 * in (T*n) partial sums -> out (n), the rank's share summed (out must not
 * overlap in, except as in + rank*n).  Counted in the TP comm time. */
int dtrain_tp_all_gather(struct dtrain_tp *tp, const float *in, float *out, size_t n, char *err, size_t errlen);
int dtrain_tp_reduce_scatter(struct dtrain_tp *tp, const float *in, float *out, size_t n, char *err,
                             size_t errlen);

/* The hook for dtrain_block_forward/backward; NULL when T = 1. */
const struct dtrain_tp_hook *dtrain_tp_block_hook(const struct dtrain_tp *tp);

/* buf (n) summed over the TP ranks, in place (every rank gets the same
 * bits).  No-op when T = 1. */
int dtrain_tp_allreduce(struct dtrain_tp *tp, float *buf, size_t n, char *err, size_t errlen);

/* out (B,T,C) = wte[tokens] + wpe[t] with this rank's wte rows (Vl, C).
 * Sequence parallel: the lookup goes to full (B,T,C), out gets this rank's
 * N/T rows (reduce-scatter); full is otherwise unused (may be NULL). */
int dtrain_tp_embedding_forward(struct dtrain_tp *tp, float *out, float *full, const int32_t *tokens,
                                const float *wte_local, const float *wpe, int B, int T, int C,
                                char *err, size_t errlen);
/* dwte_local (Vl,C) += dout rows of the tokens held here; dwpe (maxT,C) +=
 * sum over b (every rank: dout is the same on all, so is dwpe).  Sequence
 * parallel: dout is the whole (B,T,C) gradient (all-gathered by the
 * caller). */
void dtrain_tp_embedding_backward(struct dtrain_tp *tp, float *dwte_local, float *dwpe,
                                  const float *dout, const int32_t *tokens, int B, int T, int C);

/* In place: logits (N, Vl) of this rank's columns become probabilities;
 * losses (N) = -log p[target] on every rank; targets (N) in [0, V). */
int dtrain_tp_xent_forward(struct dtrain_tp *tp, float *logits_probs, float *losses,
                           const int32_t *targets, int N, char *err, size_t errlen);
/* In place: probs become dlogits = (p - onehot(target)) * dloss. */
void dtrain_tp_xent_backward(struct dtrain_tp *tp, float *probs_dlogits, const int32_t *targets,
                             float dloss, int N);

#ifdef __cplusplus
}
#endif

#endif
