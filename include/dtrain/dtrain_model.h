/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: the transformer families the trainer knows, as one interface.
 *
 * A model is a config (struct dtrain_model_config) of one family:
 *  - GPT-2 (llm.c's train_gpt2.c, nanoGPT): learned token and position
 *    embeddings; L pre-LayerNorm blocks of causal multi-head attention and
 *    a 4x MLP with GELU (tanh); a final LayerNorm; the LM head tied to the
 *    token embedding; biases everywhere.
 *  - Llama (Llama 2/3, Mistral and most decoders since): token embedding;
 *    per block RMSNorm -> attention with rotary position embeddings and
 *    grouped-query attention (KVH key/value heads shared by NH/KVH query
 *    heads each), no biases -> residual; RMSNorm -> SwiGLU MLP (gate, up,
 *    down; any width F) -> residual; a final RMSNorm; an output head tied
 *    to the token embedding or not.
 * Both store their parameters in one flat fp32 vector of the same tensor
 * slots (enum dtrain_model_tensor, llm.c's order); a family leaves the
 * slots it lacks empty (Llama: no wpe, no biases; GPT-2: no separate head).
 * What differs is behind the functions below (sizes, initialisation,
 * FLOPs, the block, the norms), each dispatching on the family in one
 * place (runtime/model/dtrain_model.c), so that the trainer never does.
 *
 * Shapes: B batch rows, T positions, N = B*T, C width, NH heads, KVH
 * key/value heads, HS = C/NH, F MLP width, V vocabulary, Vp padded
 * vocabulary (rows of wte), maxT rows of wpe.
 * Errors: functions returning int give 0, or a negative dtrain_status with
 * one line in err (no program prefix). */
#ifndef DTRAIN_MODEL_H
#define DTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_kernels.h"
#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dtrain_model_family {
    DTRAIN_FAMILY_GPT2 = 0, /* a zeroed config's: every config written before Llama is GPT-2 */
    DTRAIN_FAMILY_LLAMA = 1,
};
#define DTRAIN_MODEL_FAMILIES 2
/* "gpt2", "llama" (the config's and checkpoints' words); NULL out of range. */
const char *dtrain_model_family_name(int family);
/* The family of a name; -1 for an unknown one. */
int dtrain_model_family_of(const char *name);

struct dtrain_model_config {
    int max_seq_len;       /* maxT: positions the model knows (rows of wpe) */
    int vocab_size;        /* V: token ids are 0..V-1 */
    int padded_vocab_size; /* Vp >= V: rows of wte; rows V..Vp-1 never see a target */
    int num_layers;        /* L */
    int num_heads;         /* NH; channels % num_heads == 0 */
    int channels;          /* C */
    /* The family's own fields; all 0 in a GPT-2 config. */
    enum dtrain_model_family family;
    int num_kv_heads;      /* Llama: KVH, dividing NH (0: NH) */
    int intermediate_size; /* Llama: F of the SwiGLU MLP (0: GPT-2's 4C) */
    int untied_head;       /* Llama: 1 when the output head has weights of its own */
    float norm_eps;        /* Llama: RMSNorm's epsilon (GPT-2: LayerNorm's 1e-5) */
    float rope_theta;      /* Llama: RoPE's base */
    /* Llama 3's RoPE frequency scaling ("rope_type": "llama3"); factor 0: none */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_positions;
};

/* One line's words for the model, e.g. "L=4 C=64 NH=4 V=256 (padded 256)
 * maxT=32" (GPT-2) or "llama L=4 C=64 NH=4 KVH=2 F=90 V=200 (padded 256)
 * maxT=64, untied head"; truncated to len. */
void dtrain_model_describe(const struct dtrain_model_config *c, char *buf, size_t len);

/* The effective KVH (NH for GPT-2) and F (4C for GPT-2) of c. */
int dtrain_model_kv_heads(const struct dtrain_model_config *c);
int dtrain_model_mlp_width(const struct dtrain_model_config *c);
/* RoPE's HS/2 inverse frequencies of a Llama config (fp32, Hugging Face's
 * computation, Llama 3 scaling applied when set) into inv_freq. */
void dtrain_model_rope_inv_freq(const struct dtrain_model_config *c, float *inv_freq);

/* Limits on each dimension, so that every size fits comfortably in size_t. */
#define DTRAIN_MODEL_MAX_LAYERS 1024
#define DTRAIN_MODEL_MAX_CHANNELS 65536
#define DTRAIN_MODEL_MAX_VOCAB (1 << 24)
#define DTRAIN_MODEL_MAX_SEQ (1 << 20)

/* Check a shape: every field positive and within the limits, C % NH == 0,
 * Vp >= V; Llama: NH % KVH == 0, an even head size, eps and theta
 * positive; GPT-2: its family fields 0.  DTRAIN_ERR_INPUT with a line naming the problem. */
int dtrain_model_config_check(const struct dtrain_model_config *c, char *err, size_t errlen);

/* The default padded vocabulary: V rounded up to a multiple of 128 (llm.c). */
int dtrain_model_pad_vocab(int vocab_size);

/* Parameter tensors, in llm.c's order (its model files store them so), then
 * the untied head.  Shapes are GPT-2's; Llama's differ where noted, and a
 * tensor the family lacks has no elements. */
enum dtrain_model_tensor {
    DTRAIN_MODEL_WTE,      /* (Vp, C) */
    DTRAIN_MODEL_WPE,      /* (maxT, C); Llama: none */
    DTRAIN_MODEL_LN1W,     /* (L, C) */
    DTRAIN_MODEL_LN1B,     /* (L, C); Llama: none, nor any other bias */
    DTRAIN_MODEL_QKVW,     /* (L, 3C, C); Llama: (L, (NH+2KVH)*HS, C), q, k, v rows */
    DTRAIN_MODEL_QKVB,     /* (L, 3C) */
    DTRAIN_MODEL_ATTPROJW, /* (L, C, C) */
    DTRAIN_MODEL_ATTPROJB, /* (L, C) */
    DTRAIN_MODEL_LN2W,     /* (L, C) */
    DTRAIN_MODEL_LN2B,     /* (L, C) */
    DTRAIN_MODEL_FCW,      /* (L, 4C, C); Llama: (L, 2F, C), gate rows then up rows */
    DTRAIN_MODEL_FCB,      /* (L, 4C) */
    DTRAIN_MODEL_FCPROJW,  /* (L, C, 4C); Llama: (L, C, F), the down projection */
    DTRAIN_MODEL_FCPROJB,  /* (L, C) */
    DTRAIN_MODEL_LNFW,     /* (C) */
    DTRAIN_MODEL_LNFB,     /* (C) */
    DTRAIN_MODEL_LMHEAD,   /* (Vp, C): an untied head; none when tied (GPT-2) */
    DTRAIN_MODEL_NUM_TENSORS
};

const char *dtrain_model_tensor_name(enum dtrain_model_tensor t);
/* Elements of each tensor, and their offsets in the flat vector. */
void dtrain_model_tensor_sizes(const struct dtrain_model_config *c,
                              size_t sizes[DTRAIN_MODEL_NUM_TENSORS]);
size_t dtrain_model_tensor_offset(const struct dtrain_model_config *c, enum dtrain_model_tensor t);
size_t dtrain_model_param_count(const struct dtrain_model_config *c);

/* Model FLOPs of one training step (forward + backward = 3x forward) on B x T
 * tokens: 2 per multiply-add of every matmul (QKV, projection, MLP: two
 * or, Llama, three matrices, LM head)
 * plus attention's scores and weighted sum over the full T x T, the usual
 * count behind MFU figures.  The optimizer and elementwise work are not counted. */
double dtrain_model_flops_per_step(const struct dtrain_model_config *c, int B, int T);

/* Initialisation of a flat host parameter vector (all P of them), GPT-2's:
 * normal(0, 0.02) for wte rows 0..V-1, wpe, QKV and fc weights,
 * normal(0, 0.02/sqrt(2L)) for the two residual projections, LN weights 1,
 * everything else (biases, wte padding rows) 0; Llama's (Hugging Face's):
 * normal(0, 0.02) for every matrix (the projections and the untied head's
 * rows 0..V-1 included), norm weights 1.  Element i of tensor t gets
 * a value that depends only on (seed, t, i), so a shard can initialise its
 * slice alone and match the whole model. */
void dtrain_model_init_params(const struct dtrain_model_config *c, uint64_t seed, float *params);

/* DTRAIN_ERR_INPUT with a line naming `what` ("input", "target") and the
 * position when a token id of tokens (n, host) is outside [0, V). */
int dtrain_model_check_tokens(const int32_t *tokens, size_t n, int V, const char *what,
                             char *err, size_t errlen);

/* A Hugging Face model folder (config.json and model.safetensors or its
 * sharded index; LlamaForCausalLM, MistralForCausalLM, GPT2LMHeadModel):
 * its config into *c and all its parameters into *params (malloc'd,
 * dtrain_model_param_count(c) floats: the caller frees them; NULL on
 * error).  DTRAIN_ERR_INPUT for a folder that is not such a model,
 * DTRAIN_ERR_SYSTEM for one that cannot be read. */
int dtrain_model_load_hf(const char *dir, struct dtrain_model_config *c, float **params, char *err, size_t errlen);

/* ------------------------------------------------------------------ one block */

/* The family's norm over the last axis of inp (N,C): GPT-2's LayerNorm
 * (dtrain_k_layernorm_*: bias, mean and rstd), Llama's RMSNorm
 * (dtrain_k_rmsnorm_*, eps from the config: mean and the bias unused).
 * Backward: dinp, dweight (and dbias) accumulate (+=). */
void dtrain_model_norm_forward(struct dtrain_kernels *k, const struct dtrain_model_config *c, float *out,
                               float *mean, float *rstd, const float *inp, const float *weight, const float *bias,
                               int N, int C);
void dtrain_model_norm_backward(struct dtrain_kernels *k, const struct dtrain_model_config *c, float *dinp,
                                float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, const float *mean, const float *rstd, int N, int C);

struct dtrain_block_shape {
    int B, T;          /* batch rows, positions */
    int C;             /* model width (layer norms, residual stream) */
    int NH, HS;        /* attention heads held here, head size */
    int F;             /* MLP width held here (GPT-2: 4C on one rank) */
    int add_row_bias;  /* add the projections' biases (1; on TP only one rank does) */
    int KVH;           /* key/value heads held here (0: NH, as GPT-2) */
    enum dtrain_model_family family;
    float norm_eps;               /* Llama: RMSNorm's */
    const float *rope_inv_freq;   /* Llama: (HS/2), backend memory (dtrain_model_rope_inv_freq) */
};

/* LoRA (PEFT's LoraLayer, no dropout) on a block's linears: a targeted
 * linear's output columns [col0, col0 + cols) of its matmul get
 * + scaling * (x A^T) B^T, with A (rank, in) and B (cols, rank) of this
 * rank's slice (tensor parallel: a column-parallel linear's B holds its
 * output rows, a row-parallel one's A its input columns).  The base weight
 * stays behind its one matmul; backward adds the adapters' gradients to dA
 * and dB (+=) and their share of the input gradient. */
enum dtrain_block_linear { DTRAIN_LINEAR_QKV, DTRAIN_LINEAR_ATTPROJ, DTRAIN_LINEAR_FC, DTRAIN_LINEAR_FCPROJ };

struct dtrain_block_adapter {
    enum dtrain_block_linear linear;
    int col0, cols; /* the output columns it adds to, of the matmul's local width */
    int in;         /* its input width (local) */
    const float *A, *B;
    float *dA, *dB; /* NULL in forward-only use */
};

#define DTRAIN_BLOCK_ADAPTERS 7 /* q, k, v, o, gate, up, down */

struct dtrain_block_lora {
    int rank;
    float scaling; /* alpha / rank */
    int n;
    struct dtrain_block_adapter ad[DTRAIN_BLOCK_ADAPTERS];
    /* backend scratch: h and g (N, rank) each, u (N, the widest cols or in) */
    float *h, *g, *u;
};

struct dtrain_block_weights {
    const float *ln1w, *ln1b;         /* (C) */
    const float *qkvw, *qkvb;         /* (QKV, C), (QKV): q rows, k rows, v rows; QKV = (NH+2*KVH)*HS */
    const float *attprojw, *attprojb; /* (C, NH*HS), (C) */
    const float *ln2w, *ln2b;         /* (C) */
    const float *fcw, *fcb;           /* (F, C), (F); Llama: (2F, C), gate rows then up rows */
    const float *fcprojw, *fcprojb;   /* (C, F), (C) */
    const struct dtrain_block_lora *lora; /* NULL: none; else the base is frozen (its gradients may be NULL) */
    /* NULL: the linears' weights are the fp32 ones above; else (a frozen
     * base, with lora) the four linears' weights in NF4, indexed by enum
     * dtrain_block_linear, and qkvw, attprojw, fcw, fcprojw unused. */
    const struct dtrain_nf4 *nf4;
};

struct dtrain_block_grads {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

/* What forward keeps for backward.  The branches' inner activations (qkv,
 * atty, fch, fch_gelu, and the scratch's dqkv, datty, dfc) are of type act
 * (dtrain_kernels_act_dtype: bf16 in bf16 precision); the rest is fp32.
 * Llama: ln1/ln2 are the RMSNorm outputs (the means unused), qkv holds q
 * and k after RoPE, fch the gate and up halves (N,2F), fch_gelu SwiGLU's
 * output (N,F). */
struct dtrain_block_acts {
    enum dtrain_dtype act;
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    void *qkv;                        /* (N, QKV) */
    void *atty;                       /* (N, NH*HS) attention output */
    float *att;                       /* dtrain_k_attention_saved(k, B, T, NH, KVH, HS) floats */
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
    void *dqkv;   /* (N, QKV) */
    void *datty;  /* (N, NH*HS) */
    void *dfc;    /* (N,F); Llama (N,3F): SwiGLU's input gradient (N,2F), then its output's (N,F) */
    float *att;   /* dtrain_k_attention_scratch(k, B, T, NH, KVH, HS) floats */
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

/* y (N,C) = block(x (N,C)) (sequence parallel: (Nl,C) each, above), the
 * block of s->family.  Keeps what backward needs in acts.  y must not
 * alias x. */
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

#ifdef __cplusplus
}
#endif

#endif
