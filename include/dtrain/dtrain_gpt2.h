/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: the GPT-2 model (llm.c's train_gpt2.c, nanoGPT).
 *
 * Learned token and position embeddings; L pre-LayerNorm blocks of causal
 * multi-head attention and a 4x MLP with GELU (tanh); a final LayerNorm; the
 * LM head tied to the token embedding; biases everywhere.  fp32.
 *
 * Two levels:
 *  - dtrain_block_forward/backward run ONE transformer block from explicit
 *    pointers and sizes.  A tensor-parallel rank passes its column slice of
 *    QKV and fc (NH local heads, F local MLP width) and its row slice of the
 *    projections, plus an all-reduce hook; a pipeline stage runs any subset.
 *  - struct dtrain_gpt2 owns a whole model on one kernels instance: flat
 *    parameters and gradients in llm.c's tensor order, activations for one
 *    batch shape, and the stage pieces (embedding, blocks l0..l1-1, head)
 *    that dtrain_gpt2_forward/backward chain together.
 *
 * Shapes: B batch rows, T positions, N = B*T, C width, NH heads, HS = C/NH,
 * F = 4C, V vocabulary, Vp padded vocabulary (rows of wte), maxT rows of wpe.
 * Errors: functions returning int give 0, or a negative dtrain_status with
 * one line in err (no program prefix). */
#ifndef DTRAIN_GPT2_H
#define DTRAIN_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_kernels.h"
#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_gpt2_config {
    int max_seq_len;       /* maxT: positions the model knows (rows of wpe) */
    int vocab_size;        /* V: token ids are 0..V-1 */
    int padded_vocab_size; /* Vp >= V: rows of wte; rows V..Vp-1 never see a target */
    int num_layers;        /* L */
    int num_heads;         /* NH; channels % num_heads == 0 */
    int channels;          /* C */
};

/* Limits on each dimension, so that every size fits comfortably in size_t. */
#define DTRAIN_GPT2_MAX_LAYERS 1024
#define DTRAIN_GPT2_MAX_CHANNELS 65536
#define DTRAIN_GPT2_MAX_VOCAB (1 << 24)
#define DTRAIN_GPT2_MAX_SEQ (1 << 20)

/* Check a shape: every field positive and within the limits, C % NH == 0,
 * Vp >= V.  DTRAIN_ERR_INPUT with a line naming the problem. */
int dtrain_gpt2_config_check(const struct dtrain_gpt2_config *c, char *err, size_t errlen);

/* The default padded vocabulary: V rounded up to a multiple of 128 (llm.c). */
int dtrain_gpt2_pad_vocab(int vocab_size);

/* Parameter tensors, in llm.c's order (its model files store them so). */
enum dtrain_gpt2_tensor {
    DTRAIN_GPT2_WTE,      /* (Vp, C) */
    DTRAIN_GPT2_WPE,      /* (maxT, C) */
    DTRAIN_GPT2_LN1W,     /* (L, C) */
    DTRAIN_GPT2_LN1B,     /* (L, C) */
    DTRAIN_GPT2_QKVW,     /* (L, 3C, C) */
    DTRAIN_GPT2_QKVB,     /* (L, 3C) */
    DTRAIN_GPT2_ATTPROJW, /* (L, C, C) */
    DTRAIN_GPT2_ATTPROJB, /* (L, C) */
    DTRAIN_GPT2_LN2W,     /* (L, C) */
    DTRAIN_GPT2_LN2B,     /* (L, C) */
    DTRAIN_GPT2_FCW,      /* (L, 4C, C) */
    DTRAIN_GPT2_FCB,      /* (L, 4C) */
    DTRAIN_GPT2_FCPROJW,  /* (L, C, 4C) */
    DTRAIN_GPT2_FCPROJB,  /* (L, C) */
    DTRAIN_GPT2_LNFW,     /* (C) */
    DTRAIN_GPT2_LNFB,     /* (C) */
    DTRAIN_GPT2_NUM_TENSORS
};

const char *dtrain_gpt2_tensor_name(enum dtrain_gpt2_tensor t);
/* Elements of each tensor, and their offsets in the flat vector. */
void dtrain_gpt2_tensor_sizes(const struct dtrain_gpt2_config *c,
                              size_t sizes[DTRAIN_GPT2_NUM_TENSORS]);
size_t dtrain_gpt2_tensor_offset(const struct dtrain_gpt2_config *c, enum dtrain_gpt2_tensor t);
size_t dtrain_gpt2_param_count(const struct dtrain_gpt2_config *c);

/* Model FLOPs of one training step (forward + backward = 3x forward) on B x T
 * tokens: 2 per multiply-add of every matmul (QKV, projection, MLP, LM head)
 * plus attention's scores and weighted sum over the full T x T, the usual
 * count behind MFU figures.  The optimizer and elementwise work are not counted. */
double dtrain_gpt2_flops_per_step(const struct dtrain_gpt2_config *c, int B, int T);

/* GPT-2 initialisation of a flat host parameter vector (all P of them):
 * normal(0, 0.02) for wte rows 0..V-1, wpe, QKV and fc weights,
 * normal(0, 0.02/sqrt(2L)) for the two residual projections, LN weights 1,
 * everything else (biases, wte padding rows) 0.  Element i of tensor t gets
 * a value that depends only on (seed, t, i), so a shard can initialise its
 * slice alone and match the whole model. */
void dtrain_gpt2_init_params(const struct dtrain_gpt2_config *c, uint64_t seed, float *params);

/* ------------------------------------------------------------------ one block */

struct dtrain_block_shape {
    int B, T;          /* batch rows, positions */
    int C;             /* model width (layer norms, residual stream) */
    int NH, HS;        /* attention heads held here, head size */
    int F;             /* MLP width held here (4C on one rank) */
    int add_row_bias;  /* add the projections' biases (1; on TP only one rank does) */
};

struct dtrain_block_weights {
    const float *ln1w, *ln1b;         /* (C) */
    const float *qkvw, *qkvb;         /* (3*NH*HS, C), (3*NH*HS): q rows, k rows, v rows */
    const float *attprojw, *attprojb; /* (C, NH*HS), (C) */
    const float *ln2w, *ln2b;         /* (C) */
    const float *fcw, *fcb;           /* (F, C), (F) */
    const float *fcprojw, *fcprojb;   /* (C, F), (C) */
};

struct dtrain_block_grads {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

/* What forward keeps for backward.  The branches' inner activations (qkv,
 * atty, fch, fch_gelu, and the scratch's dqkv, datty, dfc) are of type act
 * (dtrain_kernels_act_dtype: bf16 in bf16 precision); the rest is fp32. */
struct dtrain_block_acts {
    enum dtrain_dtype act;
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    void *qkv;                        /* (N, 3*NH*HS) */
    void *atty;                       /* (N, NH*HS) attention output */
    float *att;                       /* dtrain_k_attention_saved(k, B, T, NH, HS) floats */
    float *res2;                      /* (N,C) x + attention branch */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
    void *fch, *fch_gelu;             /* (N,F) */
    /* Sequence parallelism (the hook's reduce_scatter set): ln1, ln2, res2
     * and the four statistics hold this rank's Nl = N/size rows only; two
     * (N,C) buffers shared by every layer (and backward) take the gathered
     * LayerNorm output (the column-parallel matmul's input) and the
     * row-parallel matmul's partial sums / the gathered residual gradient. */
    float *seq_in, *seq_out;          /* (N,C), (N,C) */
};

/* Backward's temporaries; one set serves every block in turn.  dqkv, datty
 * and dfc are of the acts' type act. */
struct dtrain_block_scratch {
    float *dln;   /* (N,C) */
    void *dqkv;   /* (N, 3*NH*HS) */
    void *datty;  /* (N, NH*HS) */
    void *dfc;    /* (N,F) */
    float *att;   /* dtrain_k_attention_scratch(k, B, T, NH, HS) floats */
};

/* Tensor-parallel hook: sum buf (n floats, backend memory) over the ranks of
 * the TP group, in place.  NULL (or a NULL function) on one rank.  Returns
 * DTRAIN_OK, or a status (returned by the block as is) with one line in
 * err.
 *
 * Sequence parallelism (Megatron-LM's, reduce_scatter and all_gather set):
 * the residual stream x, y and everything row-wise (the layer norms, the
 * residual adds) hold this rank's share of the N rows, rows
 * [rank*N/size, (rank+1)*N/size); all_gather (in: n floats of each rank ->
 * out: size*n, rank-major) runs before each column-parallel matmul instead
 * of f's identity, reduce_scatter (in: size*n partial sums -> out: the
 * rank's n summed) after each row-parallel one instead of g's all-reduce;
 * backward the converse (all-gather of the output gradient of the
 * row-parallel matmul, reduce-scatter of the input gradient of the
 * column-parallel one).  The LayerNorm weight gradients are then the rank's
 * rows' share: the caller sums them over the group. */
struct dtrain_tp_hook {
    enum dtrain_status (*allreduce_sum)(void *ctx, float *buf, size_t n, char *err, size_t errlen);
    enum dtrain_status (*all_gather)(void *ctx, const float *in, float *out, size_t n, char *err, size_t errlen);
    enum dtrain_status (*reduce_scatter)(void *ctx, const float *in, float *out, size_t n, char *err,
                                         size_t errlen);
    int size;          /* ranks of the group */
    void *ctx;
};

/* y (N,C) = block(x (N,C)) (sequence parallel: (Nl,C) each, above).  Keeps
 * what backward needs in acts.  y must not alias x. */
int dtrain_block_forward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                         const struct dtrain_block_weights *w, const struct dtrain_block_acts *a,
                         const float *x, float *y, const struct dtrain_tp_hook *tp,
                         char *err, size_t errlen);

/* On entry dres (N,C) holds dL/dy; on return dL/dx (the residual stream's
 * gradient is updated in place).  Parameter gradients accumulate into g. */
int dtrain_block_backward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                          const struct dtrain_block_weights *w, const struct dtrain_block_grads *g,
                          const struct dtrain_block_acts *a, const struct dtrain_block_scratch *sc,
                          const float *x, float *dres, const struct dtrain_tp_hook *tp,
                          char *err, size_t errlen);

/* ------------------------------------------------------------------ the model */

struct dtrain_gpt2; /* opaque */

/* A model on k with room for batches up to B x T (T <= max_seq_len):
 * parameters (zero), gradients (zero), activations.  The kernels instance
 * must outlive the model. */
int dtrain_gpt2_create(struct dtrain_kernels *k, const struct dtrain_gpt2_config *c, int B, int T,
                       struct dtrain_gpt2 **out, char *err, size_t errlen);
void dtrain_gpt2_destroy(struct dtrain_gpt2 *m);

const struct dtrain_gpt2_config *dtrain_gpt2_get_config(const struct dtrain_gpt2 *m);
size_t dtrain_gpt2_num_params(const struct dtrain_gpt2 *m);
/* Flat parameter and gradient vectors (backend memory), llm.c's order. */
float *dtrain_gpt2_params(struct dtrain_gpt2 *m);
float *dtrain_gpt2_grads(struct dtrain_gpt2 *m);

/* Copy all parameters from / to a host vector of dtrain_gpt2_num_params floats. */
void dtrain_gpt2_set_params(struct dtrain_gpt2 *m, const float *host);
void dtrain_gpt2_get_params(struct dtrain_gpt2 *m, float *host);

/* Forward on B x T tokens (host arrays of B*T ids in [0, V)); with targets,
 * *mean_loss is the mean cross-entropy (else untouched; targets may be NULL).
 * DTRAIN_ERR_INPUT for a token out of range or a shape over the capacity. */
int dtrain_gpt2_forward(struct dtrain_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                        int B, int T, float *mean_loss, char *err, size_t errlen);
/* Zero the parameter gradients. */
void dtrain_gpt2_zero_grad(struct dtrain_gpt2 *m);
/* Backward of the last forward (which must have had targets); gradients of
 * the mean loss accumulate into dtrain_gpt2_grads(). */
int dtrain_gpt2_backward(struct dtrain_gpt2 *m, char *err, size_t errlen);

/* DTRAIN_ERR_INPUT with a line naming `what` ("input", "target") and the
 * position when a token id of tokens (n, host) is outside [0, V). */
int dtrain_gpt2_check_tokens(const int32_t *tokens, size_t n, int V, const char *what,
                             char *err, size_t errlen);

/* The stage pieces behind forward/backward (a pipeline stage runs some):
 * embed: residual 0 from the uploaded inputs;  blocks [l0, l1): residual l0
 * -> residual l1;  head: final LN, logits, loss.  Backward runs them in
 * reverse: head_backward fills the residual gradient of layer L,
 * blocks_backward carries it down to l0, embed_backward uses residual 0's. */
int dtrain_gpt2_upload_tokens(struct dtrain_gpt2 *m, const int32_t *inputs,
                              const int32_t *targets, int B, int T, char *err, size_t errlen);
void dtrain_gpt2_embed_forward(struct dtrain_gpt2 *m);
int dtrain_gpt2_blocks_forward(struct dtrain_gpt2 *m, int l0, int l1, char *err, size_t errlen);
float dtrain_gpt2_head_forward(struct dtrain_gpt2 *m);
void dtrain_gpt2_head_backward(struct dtrain_gpt2 *m, float dloss);
int dtrain_gpt2_blocks_backward(struct dtrain_gpt2 *m, int l0, int l1, char *err, size_t errlen);
void dtrain_gpt2_embed_backward(struct dtrain_gpt2 *m);
/* The residual stream entering block l (l == L: leaving the last block),
 * (B,T,C) backend memory: where a pipeline stage receives or sends. */
float *dtrain_gpt2_residual(struct dtrain_gpt2 *m, int l);
/* The residual stream's gradient buffer (B,T,C) that backward carries. */
float *dtrain_gpt2_residual_grad(struct dtrain_gpt2 *m);

#ifdef __cplusplus
}
#endif

#endif
