/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: the part of the model one rank of a T x P x D job holds.
 *
 * Megatron's split, for tensor-parallel rank r of T and pipeline stage s of P:
 *  - stage s holds the blocks [s*L/P, (s+1)*L/P); stage 0 also the token and
 *    position embeddings, stage P-1 the final LayerNorm and the LM head,
 *    which reads the tied token embedding: with P > 1 the last stage keeps
 *    its own copy of wte, kept identical to stage 0's (their gradients are
 *    summed before the update);
 *  - column-parallel QKV and fc: rank r holds heads [r*NH/T, (r+1)*NH/T)
 *    (their q rows), key/value heads [r*KVH/T, (r+1)*KVH/T) (their k and v
 *    rows: with grouped-query attention each kv head's query heads are on
 *    its rank) and fc rows [r*F/T, (r+1)*F/T) (Llama: those of gate and
 *    those of up), with the matching bias entries;
 *  - row-parallel attention and MLP projections: the same columns of
 *    attprojw (C, C) and fcprojw (C, 4C); their biases are whole on every
 *    rank (rank 0 adds them);
 *  - vocabulary-parallel wte and an untied head (lmhead, on the last
 *    stage instead of its copy of wte): rows [r*Vp/T, (r+1)*Vp/T);
 *  - layer norms, wpe, the projection biases and lnf are replicated over TP.
 * Data-parallel ranks hold the same shard.
 *
 * Virtual stages (interleaved 1F1B, V > 1): the L layers are cut into P*V
 * chunks of L/(P*V) layers; chunk c of stage s holds virtual stage s + c*P,
 * the layers [(s + c*P)*L/(P*V), (s + c*P + 1)*L/(P*V)).  Stage 0 keeps the
 * embeddings (its chunk 0 reads them), stage P-1 the head (after its chunk
 * V-1).  Locally the chunks' layers follow one another, chunk 0 first.
 *
 * Local layout: llm.c's tensor order (enum dtrain_model_tensor), each tensor
 * as this rank's slice, the stage's layers one after the other; tensors the
 * stage does not hold are empty.  On one rank (T = P = 1) it is exactly the
 * whole model's flat vector.  Pure arithmetic: no allocation, no state. */
#ifndef DTRAIN_SHARD_H
#define DTRAIN_SHARD_H

#include <stddef.h>

#include "dtrain_model.h"
#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_shard {
    struct dtrain_model_config model;
    int tp, pp;                  /* T, P */
    int tp_rank, pp_rank;
    int layer_begin, layer_end;  /* this stage's (V > 1: its chunk 0's) blocks [l0, l1) */
    int virtual_stages;          /* V: chunks of layers on this stage (1: plain pipeline) */
    int layers;                  /* local layers: V * (l1 - l0) */
    int has_embedding;           /* stage 0: wte (for the embedding) and wpe */
    int has_head;                /* stage P-1: lnf and wte (for the head) */
    int heads;                   /* NH/T: attention heads held here */
    int kv_heads;                /* KVH/T: key/value heads held here (GPT-2: heads) */
    int head_size;               /* C/NH */
    int attn_width;              /* heads * head_size = C/T */
    int qkv_width;               /* (heads + 2*kv_heads) * head_size: rows of QKV held here */
    int mlp_width;               /* F/T (GPT-2: 4C/T) */
    int fc_rows;                 /* rows of fc held here: mlp_width (Llama: gate and up, 2*mlp_width) */
    int vocab_rows;              /* Vp/T: rows of wte held here */
    int vocab_begin;             /* first of them: tp_rank * vocab_rows */
    size_t size[DTRAIN_MODEL_NUM_TENSORS];   /* local elements of each tensor */
    size_t offset[DTRAIN_MODEL_NUM_TENSORS]; /* and their offsets in the local vector */
    size_t count;                /* local parameters */
};

/* The shard of (tp_rank, pp_rank) in a T x P layout of model.  Refuses
 * (DTRAIN_ERR_INPUT, one line saying what to change) a shape that does not
 * split: NH, KVH, F or Vp not divisible by T, fewer layers than stages. */
int dtrain_shard_plan(const struct dtrain_model_config *model, int tp, int pp, int tp_rank,
                      int pp_rank, struct dtrain_shard *out, char *err, size_t errlen);
/* The same with V virtual stages per stage (V = 1: dtrain_shard_plan);
 * refuses V < 1, and V > 1 unless P >= 2 and P*V divides the layers. */
int dtrain_shard_plan_v(const struct dtrain_model_config *model, int tp, int pp, int virtual_stages,
                        int tp_rank, int pp_rank, struct dtrain_shard *out, char *err, size_t errlen);
/* The model's layer index of local layer i. */
int dtrain_shard_global_layer(const struct dtrain_shard *s, int i);

/* Local parameters of one block (one layer), and the block's shape for a
 * micro-batch of B x T. */
size_t dtrain_shard_layer_size(const struct dtrain_shard *s);
void dtrain_shard_block_shape(const struct dtrain_shard *s, int B, int T,
                              struct dtrain_block_shape *shape);
/* Views of local layer i (0 <= i < layers) inside a local
 * parameter (or gradient) vector. */
void dtrain_shard_block_weights(const struct dtrain_shard *s, const float *params, int i,
                                struct dtrain_block_weights *w);
void dtrain_shard_block_grads(const struct dtrain_shard *s, float *grads, int i,
                              struct dtrain_block_grads *g);
/* A tensor's local slice (NULL when the stage does not hold it). */
float *dtrain_shard_tensor(const struct dtrain_shard *s, float *vec, enum dtrain_model_tensor t);

/* Copy this rank's slice out of a whole model vector (llm.c order), and put
 * it back into one. */
void dtrain_shard_scatter(const struct dtrain_shard *s, const float *whole, float *local);
void dtrain_shard_gather(const struct dtrain_shard *s, const float *local, float *whole);

/* 1 when this rank's copy of tensor t counts in the global gradient norm:
 * every TP rank's slice of a split tensor; a replicated tensor on TP rank 0
 * only; the head's copy of wte (P > 1) not at all (stage 0's counts). */
int dtrain_shard_in_norm(const struct dtrain_shard *s, enum dtrain_model_tensor t);

/* Every contiguous run of the local vector with its place in the whole
 * vector (llm.c order), in local order: `local` and `whole` offsets and
 * `count` elements; in_norm as dtrain_shard_in_norm of its tensor, which
 * makes each element of the whole model "owned" by exactly one (tp, pp)
 * shard (sharded checkpoints write each element once). */
struct dtrain_shard_run {
    size_t local, whole, count;
    int in_norm;
};
typedef void (*dtrain_shard_run_fn)(void *ctx, const struct dtrain_shard_run *run);
void dtrain_shard_for_each_run(const struct dtrain_shard *s, dtrain_shard_run_fn fn, void *ctx);

/* ------------------------------------------------------------ gradient units
 * The groups of local gradients in the order backward finishes them, the
 * data-parallel buckets' building blocks:
 *   the head's lnf (last stage), layer l1-1, ..., layer l0, wpe (stage 0),
 *   and last, alone, wte (whenever held: it is final only after the last
 *   micro-batch's embedding backward, or the tie with the other stage). */

struct dtrain_shard_range {
    size_t offset, count; /* in the local vector */
    int in_norm;          /* dtrain_shard_in_norm of its tensor */
};

#define DTRAIN_SHARD_UNIT_RANGES 12 /* a block's tensors: the most ranges of a unit */

enum dtrain_shard_unit_kind { DTRAIN_UNIT_HEAD, DTRAIN_UNIT_LAYER, DTRAIN_UNIT_WPE, DTRAIN_UNIT_WTE };

int dtrain_shard_units(const struct dtrain_shard *s);
/* Kind of unit u and, for a layer, its local index (else -1). */
enum dtrain_shard_unit_kind dtrain_shard_unit_kind(const struct dtrain_shard *s, int u, int *layer);
/* The unit of a kind (layer: local index i); -1 when the stage has none. */
int dtrain_shard_unit_of(const struct dtrain_shard *s, enum dtrain_shard_unit_kind kind, int i);
/* Ranges of unit u into r (room for DTRAIN_SHARD_UNIT_RANGES); returns how many. */
int dtrain_shard_unit_ranges(const struct dtrain_shard *s, int u, struct dtrain_shard_range *r);

#ifdef __cplusplus
}
#endif

#endif
