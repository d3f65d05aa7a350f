/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: what one rank computes of a T x P x D job: its pipeline
 * stage's part of the model (dtrain_shard.h), tensor-parallel over its TP
 * group (dtrain_tp.h), for one micro-batch at a time.
 *
 * The stage owns the local parameters and gradients (the shard's layout),
 * the activations of up to `slots` micro-batches in flight (1F1B keeps
 * several on early stages, dtrain_pipeline.h) and one residual-gradient
 * buffer that backward carries down the stage:
 * (for one chunk of the stage, below; V = 1: the whole stage)
 *   forward(slot):  [stage 0: embedding -> input(slot)]  blocks l0..l1-1
 *                   -> output(slot)  [last stage: final LN, logits of this
 *                   rank's vocabulary columns, cross-entropy]
 *   backward(slot): [last stage: head backward -> grad]  or grad holds what
 *                   the next stage sent;  blocks l1-1..l0;  grad is then the
 *                   gradient of input(slot)  [stage 0: embedding backward]
 * Parameter gradients accumulate over micro-batches (dtrain_kernels.h).
 *
 * Activation recomputation (enum dtrain_recompute).  none: every layer's
 * activations of every slot are kept from forward to backward.  full: a
 * slot keeps only the residual stream entering each layer (and the head's);
 * the layers' activations live in one set for the stage, overwritten layer
 * after layer in forward, and backward runs layer i's forward again from
 * its input (tensor-parallel all-reduces included) just before its
 * backward.  selective: only attention's probabilities (B,NH,T,T per layer,
 * the term quadratic in T) are not kept: one buffer for the stage, and
 * backward recomputes layer i's softmax from its kept qkv.  The kernels
 * being deterministic, the recomputed values are the forward's bits, so
 * every mode gives the same results bit for bit (tests/parallel/test_train).
 * With T = P = 1 and one micro-batch this is exactly dtrain_gpt2's forward
 * and backward, operation for operation.
 *
 * Sequence parallelism (dtrain_tp_set_sequence_parallel before
 * dtrain_stage_create; T must divide the positions): the residual stream
 * and the row-wise activations hold this rank's N/T rows (dtrain_tp.h);
 * chunk inputs, outputs and gradients are those rows (act_floats below),
 * so pipeline neighbours exchange N/T rows between equal TP ranks; the
 * embedding reduce-scatters, the head all-gathers the final LN's rows.
 * The LayerNorm weight gradients are summed over the TP group when the
 * unit is handed on (a non-NULL done, below). */
#ifndef DTRAIN_STAGE_H
#define DTRAIN_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_shard.h"
#include "dtrain_tp.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_stage; /* opaque */

enum dtrain_recompute {
    DTRAIN_RECOMPUTE_NONE = 0,
    DTRAIN_RECOMPUTE_SELECTIVE = 1, /* attention probabilities */
    DTRAIN_RECOMPUTE_FULL = 2,      /* every layer from its input */
};
#define DTRAIN_RECOMPUTE_MODES 3
/* "none", "selective", "full" (the config's words); NULL out of range. */
const char *dtrain_recompute_name(int mode);

/* A stage for micro-batches of B x T tokens with `slots` of them in flight.
 * k, shard and tp must outlive it.  Parameters and gradients start at 0. */
int dtrain_stage_create(struct dtrain_kernels *k, const struct dtrain_shard *shard,
                        struct dtrain_tp *tp, int B, int T, int slots, enum dtrain_recompute recompute,
                        struct dtrain_stage **out, char *err, size_t errlen);

/* Bytes of backend memory the stage allocated: parameters, gradients, and
 * activations (every slot's plus the shared backward buffers: all of it is
 * allocated up front, so this is the peak). */
struct dtrain_stage_memory {
    size_t param_bytes, grad_bytes, activation_bytes;
};
void dtrain_stage_memory(const struct dtrain_stage *st, struct dtrain_stage_memory *m);
void dtrain_stage_destroy(struct dtrain_stage *st);

/* ZeRO-3 (dtrain_dp.h): the stage's weights come from a source, unit by
 * unit (dtrain_shard_unit_*), asked for just before each use and given back
 * right after.  A unit's tensors are found with dtrain_shard_tensor /
 * dtrain_shard_block_weights(layout, params, layer) and _grads on grads. */
struct dtrain_stage_unit {
    const struct dtrain_shard *layout;
    float *params, *grads; /* grads: NULL unless asked for */
    int layer;
};
struct dtrain_stage_source {
    int (*acquire)(void *ctx, int unit, int grads, struct dtrain_stage_unit *out, char *err, size_t errlen);
    int (*release)(void *ctx, int unit, char *err, size_t errlen);
    void *ctx;
};
/* Use src from now on: the stage's own parameter and gradient vectors are
 * freed (dtrain_stage_params and _grads are then NULL, their bytes 0). */
void dtrain_stage_set_source(struct dtrain_stage *st, const struct dtrain_stage_source *src);

/* LoRA (dtrain_lora.h): the stage's weights are the frozen base and l's
 * adapters the trained ones.  Backward then computes no gradient of the
 * base (its weight-gradient matmuls skipped, the embedding's backward
 * skipped, the norms' into a scratch discarded): the stage's gradient
 * vector is freed (dtrain_stage_grads NULL).  l must outlive the stage. */
struct dtrain_lora;
int dtrain_stage_set_lora(struct dtrain_stage *st, struct dtrain_lora *l, char *err, size_t errlen);

/* QLoRA's base (--base-dtype nf4; after dtrain_stage_set_lora and once the
 * base weights are in dtrain_stage_params): every local block linear's
 * weight (qkv, attproj, fc, fcproj: this rank's shard of it) quantised to
 * NF4 on the host, the NF4 buffers uploaded, and the stage's parameter
 * vector replaced by one without those weights (the fp32 copies freed:
 * dtrain_stage_params then holds the other tensors only, in the shard's
 * order, and is no longer of the shard's layout).  The block's base
 * matmuls then use dtrain_k_nf4_matmul_*.  DTRAIN_ERR_INPUT for a weight
 * that is not finite, DTRAIN_ERR_SYSTEM out of memory. */
int dtrain_stage_quantize_base(struct dtrain_stage *st, char *err, size_t errlen);

size_t dtrain_stage_num_params(const struct dtrain_stage *st);
float *dtrain_stage_params(struct dtrain_stage *st); /* backend memory, the shard's layout (NF4 base: see above) */
float *dtrain_stage_grads(struct dtrain_stage *st);
void dtrain_stage_zero_grad(struct dtrain_stage *st);

/* Give slot its micro-batch's tokens (host, B*T each, ids in [0, V)):
 * stage 0 reads inputs, the last stage targets (either may be NULL where
 * not read).  DTRAIN_ERR_INPUT for an id outside the vocabulary. */
int dtrain_stage_set_tokens(struct dtrain_stage *st, int slot, const int32_t *inputs,
                            const int32_t *targets, char *err, size_t errlen);

/* Chunks (V = shard->virtual_stages; 1 without interleaving, chunk 0 is
 * then the whole stage).  Chunk c runs the stage's local layers
 * [c*L/V, (c+1)*L/V) of its L; chunk 0 of stage 0 starts from the
 * embedding, chunk V-1 of the last stage ends with the head.
 *
 * The residual stream entering chunk c (where the previous stage's
 * activation is received) and leaving it (what is sent on), (B,T,C): the
 * output of chunk c and the input of chunk c+1 share their place (the
 * output is sent right after its forward, the input arrives later).  The
 * residual gradient of slot's micro-batch (received from the next stage
 * before a backward; after it, the gradient to send back): with V = 1 one
 * buffer for the stage, with V > 1 one per slot, since a gradient may
 * arrive while another micro-batch's backward runs. */
float *dtrain_stage_chunk_input(struct dtrain_stage *st, int slot, int chunk);
float *dtrain_stage_chunk_output(struct dtrain_stage *st, int slot, int chunk);
float *dtrain_stage_chunk_grad(struct dtrain_stage *st, int slot);
size_t dtrain_stage_act_floats(const struct dtrain_stage *st); /* B*T*C (sequence parallel: B*T*C / TP size) */

/* Forward of chunk c of slot's micro-batch.  After the last stage's last
 * chunk *loss_sum is the sum of its B*T losses (in double, in order);
 * elsewhere 0. */
int dtrain_stage_forward_chunk(struct dtrain_stage *st, int slot, int chunk, double *loss_sum, char *err,
                               size_t errlen);

/* Called during backward when a gradient unit (dtrain_shard_unit_*) has
 * received this micro-batch's contribution: the head, each layer, wpe. */
typedef void (*dtrain_stage_unit_done)(void *ctx, int unit);

/* Backward of chunk c of slot's micro-batch; dloss = d(step loss)/d(each
 * position's loss), e.g. 1/(global batch tokens).  done may be NULL; it is
 * given for the step's last micro-batch only (its units are then final):
 * with sequence parallelism the stage then first sums each unit's
 * LayerNorm weight gradients over the TP group. */
int dtrain_stage_backward_chunk(struct dtrain_stage *st, int slot, int chunk, float dloss,
                                dtrain_stage_unit_done done, void *ctx, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
