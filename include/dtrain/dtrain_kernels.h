/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain kernels: one interface, several backends.
 *
 * Every numerical operation of the GPT-2 (and Llama-family) trainer goes
 * through this header: memory, the layers' forward and backward passes, the loss, the optimizer
 * update and the reductions.  A backend ("cpu": C loops on a small pthread
 * pool plus CBLAS; "cuda": CUDA kernels and cuBLASLt, kernels/cuda/) fills in a table of operations
 * (dtrain_kernels_backend.h); the runtime only ever calls the functions
 * below, so it runs unchanged on any backend.
 *
 * Memory.  Tensors live in backend memory: get it from dtrain_k_alloc() and
 * move data with dtrain_k_upload()/dtrain_k_download().  On the CPU backend
 * backend memory is host memory, but callers must not rely on that.
 *
 * Shapes.  N is a number of rows (B*T token positions), C the model width,
 * OC/IC a matmul's output/input width, NH the number of attention heads
 * held here and HS the head size.  Every tensor is dense and row-major.
 *
 * Types.  Parameters, their gradients, the optimizer state, the residual
 * stream, the layer and RMS norms and the loss are fp32 (float *).  The
 * operands of the matmuls, attention, GELU, RoPE and SwiGLU are typed
 * (struct dtrain_tensor: fp32 or bf16), so that a model can store the activations inside each block's
 * two branches (qkv, attention output, fc, GELU output and their
 * gradients: the bulk of its memory) in the type dtrain_kernels_act_dtype()
 * names: bf16 in bf16 precision, where they are matmul operands anyway.
 * A typed operand read in bf16 is widened exactly; a typed result is
 * computed in fp32 and rounded to its type once (to nearest even).
 * The functions take explicit pointers and sizes and no model structure, so
 * a tensor-parallel rank can run a column slice of a matmul (fewer OC) or a
 * row slice (fewer IC), and a pipeline stage any subset of layers.
 *
 * Gradient conventions (say it once, hold it everywhere):
 *  - parameter gradients (dweight, dbias, dwte, dwpe) ACCUMULATE (+=), so
 *    micro-batches can be summed before an update;
 *  - input gradients marked "(=)" are OVERWRITTEN; those marked "(+=)"
 *    accumulate (layer norm's dinp adds into the residual stream's gradient).
 * A residual connection has no kernel: its backward is the identity, which
 * the model realises by adding every branch's input gradient into one
 * residual-gradient buffer.
 *
 * Determinism.  For one backend, one thread count and the same inputs every
 * function gives bit-identical results: reductions use a fixed chunking and
 * a fixed summation order, never "whichever thread finishes first".
 *
 * Threads.  A kernels instance owns its threads; two instances share nothing
 * except what the BLAS library keeps process-wide (OpenBLAS's thread count).
 * Calls on one instance must come from one thread at a time. */
#ifndef DTRAIN_KERNELS_H
#define DTRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_kernels; /* opaque: one backend instance */

/* Element types of typed tensors. */
enum dtrain_dtype {
    DTRAIN_F32 = 0,  /* IEEE binary32 */
    DTRAIN_BF16 = 1, /* bfloat16: the upper 16 bits of a binary32 */
};

/* Bytes of one element (4, 2) and the type's name ("f32", "bf16"). */
size_t dtrain_dtype_size(enum dtrain_dtype t);
const char *dtrain_dtype_name(enum dtrain_dtype t);

/* A typed view of backend memory: data holds elements of dtype.  Passed by
 * value; an input's data is only read (the struct has no const variant). */
struct dtrain_tensor {
    void *data;
    enum dtrain_dtype dtype;
};

static inline struct dtrain_tensor dtrain_tensor_of(enum dtrain_dtype t, const void *data)
{
    struct dtrain_tensor x;
    x.data = (void *)(uintptr_t)data;
    x.dtype = t;
    return x;
}

static inline struct dtrain_tensor dtrain_tensor_f32(const float *data)
{
    return dtrain_tensor_of(DTRAIN_F32, data);
}

/* bf16 from and to fp32 on the host (the backends' rule): round to nearest
 * even, a NaN stays a (quiet) NaN; widening is exact. */
static inline uint16_t dtrain_bf16_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    /* a select, not a branch, so that loops of it vectorize (a NaN kept quiet) */
    uint32_t nearest = u + 0x7fffu + ((u >> 16) & 1u), quiet = u | 0x00400000u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u ? quiet : nearest) >> 16);
}

static inline float dtrain_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* How a backend computes: the arithmetic inside the heavy operations, and
 * (bf16) the type a model stores its blocks' inner activations in. */
enum dtrain_kernels_precision {
    DTRAIN_PRECISION_DEFAULT = 0, /* the backend's own: fp32 on cpu, bf16 on cuda */
    DTRAIN_PRECISION_FP32 = 1,    /* fp32 arithmetic everywhere */
    DTRAIN_PRECISION_BF16 = 2,    /* mixed: matmul and attention operands rounded to bf16,
                                   * products accumulated in fp32; elementwise work, the
                                   * loss and the optimizer (fp32 master weights) in fp32;
                                   * the blocks' inner activations stored in bf16 */
    DTRAIN_PRECISION_FP16 = 3,    /* mixed (emulated on cpu, fp16 GEMMs on cuda): matmul operands (inputs,
                                   * weights, output gradients) rounded to IEEE fp16, round to
                                   * nearest even, above 65504 to inf; products accumulated in
                                   * fp32, everything else fp32.  The trainer scales the loss
                                   * (dynamic loss scaling) so that small gradients survive */
};

struct dtrain_kernels_options {
    int threads; /* CPU: threads for own loops and for BLAS (>= 1); 0: 1 */
    enum dtrain_kernels_precision precision; /* 0: the backend's default */
};

/* Names of the backends built into this library, e.g. "cpu". */
const char *const *dtrain_kernels_backends(void);

/* Create an instance of the backend `name` ("cpu", "cuda").  Returns
 * DTRAIN_OK, or with one line in err DTRAIN_ERR_INPUT (unknown backend,
 * bad option, a precision the backend lacks) or DTRAIN_ERR_SYSTEM (out of
 * memory, "no CUDA device"). */
enum dtrain_status dtrain_kernels_create(const char *name, const struct dtrain_kernels_options *opt,
                                         struct dtrain_kernels **out, char *err, size_t errlen);
void dtrain_kernels_destroy(struct dtrain_kernels *k);
const char *dtrain_kernels_name(const struct dtrain_kernels *k);
int dtrain_kernels_threads(const struct dtrain_kernels *k);
/* The precision the instance computes in (never DTRAIN_PRECISION_DEFAULT),
 * and its name ("fp32", "bf16"). */
enum dtrain_kernels_precision dtrain_kernels_precision(const struct dtrain_kernels *k);
const char *dtrain_kernels_precision_name(enum dtrain_kernels_precision p);
/* The type a model stores the typed activations in (see Types above):
 * DTRAIN_BF16 in bf16 precision, else DTRAIN_F32 (fp16 precision keeps
 * them fp32: its range needs the loss scale, which only gradients get). */
enum dtrain_dtype dtrain_kernels_act_dtype(const struct dtrain_kernels *k);

/* Errors.  The operations below return nothing: a backend that runs them
 * asynchronously (cuda) records its first failure (a launch that failed, a
 * device fault, out of device memory), skips the work after it and keeps
 * the error.  Returns DTRAIN_OK (0) when none happened, else
 * DTRAIN_ERR_SYSTEM with one line in err.
 * Calling it after dtrain_k_sync() covers everything queued before.  The
 * CPU backend fails only when it cannot grow its scratch for bf16 operands. */
enum dtrain_status dtrain_kernels_error(struct dtrain_kernels *k, char *err, size_t errlen);

/* ------------------------------------------------------------------ memory */

/* bytes of zeroed backend memory, aligned to 64 bytes; NULL when out of
 * memory (or bytes == 0). */
void *dtrain_k_alloc(struct dtrain_kernels *k, size_t bytes);
void dtrain_k_free(struct dtrain_kernels *k, void *p); /* NULL is fine */
void dtrain_k_upload(struct dtrain_kernels *k, void *dst, const void *host_src, size_t bytes);
void dtrain_k_download(struct dtrain_kernels *k, void *host_dst, const void *src, size_t bytes);
void dtrain_k_zero(struct dtrain_kernels *k, void *p, size_t bytes);
/* bytes from backend memory src to backend memory dst (may overlap), in
 * order with the other operations on k. */
void dtrain_k_copy(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes);
/* Wait until every operation queued on k has finished (no-op on the CPU). */
void dtrain_k_sync(struct dtrain_kernels *k);

/* 1 when backend memory is host memory that the host may read and write
 * directly (the cpu backend), 0 when it must be moved (a GPU's). */
int dtrain_kernels_host_memory(const struct dtrain_kernels *k);
/* Host memory that upload and download move fastest (pinned on a GPU,
 * plain on the CPU), for staging buffers; NULL when out of memory. */
void *dtrain_k_host_alloc(struct dtrain_kernels *k, size_t bytes);
void dtrain_k_host_free(struct dtrain_kernels *k, void *p); /* NULL is fine */
/* The queue k's operations run on (a cudaStream_t), so that a GPU
 * communicator can run in order with them; NULL on the CPU. */
void *dtrain_k_stream(struct dtrain_kernels *k);

/* ------------------------------------------------------------------ layers */

/* Token + position embedding.
 * out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T) int32 in [0, V);
 * wte (V,C), wpe (maxT,C) with T <= maxT; wpe NULL: no position embedding
 * (rotary models), out = wte[tokens[b,t]]. */
void dtrain_k_encoder_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                              const float *wte, const float *wpe, int B, int T, int C);
/* dwte (V,C) += scatter of dout (B,T,C) by token; dwpe (maxT,C) += sum over
 * b, skipped when dwpe is NULL. */
void dtrain_k_encoder_backward(struct dtrain_kernels *k, float *dwte, float *dwpe,
                               const float *dout, const int32_t *tokens, int B, int T, int C);

/* Layer norm over the last axis (eps 1e-5, biased variance).
 * out (N,C) may not alias inp (N,C); mean, rstd (N) are kept for backward;
 * weight, bias (C). */
void dtrain_k_layernorm_forward(struct dtrain_kernels *k, float *out, float *mean, float *rstd,
                                const float *inp, const float *weight, const float *bias,
                                int N, int C);
/* dinp (N,C) (+=), dweight, dbias (C) (+=), from dout (N,C) and the forward's
 * inp, weight, mean, rstd. */
void dtrain_k_layernorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight,
                                 float *dbias, const float *dout, const float *inp,
                                 const float *weight, const float *mean, const float *rstd,
                                 int N, int C);

/* Linear layer: out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC);
 * bias may be NULL (no bias: the LM head, or a row-parallel rank that is not
 * the one adding the bias).  out and inp typed, each fp32 or bf16. */
void dtrain_k_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                             const float *weight, const float *bias, int N, int IC, int OC);
/* dinp (N,IC) (=) dout @ weight, skipped when dinp.data is NULL;
 * dweight (OC,IC) += dout^T @ inp, skipped when dweight is NULL (a frozen
 * weight: LoRA's base); dbias (OC) += column sums of dout,
 * skipped when dbias is NULL.  dinp, dout, inp typed, each fp32 or bf16. */
void dtrain_k_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, float *dweight,
                              float *dbias, struct dtrain_tensor dout, struct dtrain_tensor inp,
                              const float *weight, int N, int IC, int OC);

/* Causal multi-head self-attention (no projection), grouped-query when
 * KVH < NH.
 * qkv (B,T,(NH+2*KVH)*HS): per position, the queries of heads 0..NH-1,
 * then the keys of kv heads 0..KVH-1, then their values (with KVH == NH
 * llm.c's and nanoGPT's layout).  Query head h attends with kv head
 * h / (NH/KVH) (Hugging Face's repeat_kv); NH % KVH == 0 (the caller
 * checks).  With KVH == NH the results are those of plain multi-head
 * attention, bit for bit.
 * out (B,T,NH*HS); att: what backward needs besides qkv and out, of
 * dtrain_k_attention_saved() floats: softmax(q.k/sqrt(HS)) (B,NH,T,T) over
 * keys <= query, 0 above the diagonal, on the cpu backend and the exact
 * cuda path; each row's log-sum-exp (B,NH,T) on cuda's flash path, which
 * never writes the T x T matrix.  Only attention_backward reads att.
 * qkv, out (and backward's dout, dqkv) share one type, fp32 or bf16. */
void dtrain_k_attention_forward(struct dtrain_kernels *k, struct dtrain_tensor out, float *att,
                                struct dtrain_tensor qkv, int B, int T, int NH, int KVH, int HS);
/* Floats of att the forward keeps for batches up to B x T (the caller
 * allocates it; a smaller batch fits in it). */
size_t dtrain_k_attention_saved(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
/* Floats of scratch memory attention_backward needs for this shape (the
 * caller allocates it once, with dtrain_k_alloc, and may reuse it). */
size_t dtrain_k_attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
/* dqkv (B,T,(NH+2*KVH)*HS) (=) from dout (B,T,NH*HS) and the forward's qkv,
 * out and att; a kv head's gradient is the sum over the query heads that
 * use it (in head order); scratch as sized by dtrain_k_attention_scratch. */
void dtrain_k_attention_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, float *scratch,
                                 struct dtrain_tensor dout, struct dtrain_tensor qkv, struct dtrain_tensor out,
                                 const float *att, int B, int T, int NH, int KVH, int HS);

/* GELU, tanh approximation: out (n) = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
 * out may alias inp; out and inp share one type. */
void dtrain_k_gelu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                           size_t n);
/* dinp (n) (=) gelu'(inp) * dout; dinp may alias dout; the three share one type. */
void dtrain_k_gelu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                            struct dtrain_tensor dout, size_t n);

/* RMS norm over the last axis (Hugging Face's LlamaRMSNorm, fp32):
 * rstd (N) = 1 / sqrt(mean_c(inp[n,c]^2) + eps), kept for backward;
 * out (N,C) = inp * rstd * weight (C); out may not alias inp. */
void dtrain_k_rmsnorm_forward(struct dtrain_kernels *k, float *out, float *rstd, const float *inp,
                              const float *weight, float eps, int N, int C);
/* dinp (N,C) (+=), dweight (C) (+=), from dout (N,C) and the forward's inp,
 * weight, rstd. */
void dtrain_k_rmsnorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, const float *dout,
                               const float *inp, const float *weight, const float *rstd, int N, int C);

/* Rotary position embedding (Hugging Face's rotate-half convention), in
 * place on the NH query heads and KVH key heads of a packed qkv (the
 * layout of dtrain_k_attention_forward, B*T rows); the values untouched.
 * Row n has position t = n % T; for i < HS/2, a = (float)t * inv_freq[i]
 * in fp32, c = cos a, s = sin a, and the pair (x[i], x[i+HS/2]) becomes
 * (x[i] c - x[i+HS/2] s, x[i+HS/2] c + x[i] s).  inv_freq (HS/2) is in
 * backend memory (the caller computes it, any frequency scaling included);
 * HS even.  qkv fp32 or bf16 (computed in fp32, rounded once). */
void dtrain_k_rope_forward(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq,
                           int B, int T, int NH, int KVH, int HS);
/* In place on dqkv (same layout): the inverse rotation (s -> -s) of the
 * query and key gradients, which is the gradient through the forward. */
void dtrain_k_rope_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, const float *inv_freq,
                            int B, int T, int NH, int KVH, int HS);

/* SwiGLU: inp (N,2F) holds per row [gate (F) | up (F)];
 * out (N,F) = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
 * out and inp share one type, fp32 or bf16; out may not alias inp. */
void dtrain_k_swiglu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                             int N, int F);
/* dinp (N,2F) (=) from dout (N,F) and the forward's inp: [dgate | dup]
 * with dup = dout silu(gate), dgate = dout up silu'(gate); the three share
 * one type; dinp may not alias inp or dout. */
void dtrain_k_swiglu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                              struct dtrain_tensor dout, int N, int F);

/* Strided scale-and-add over N rows of n columns: out[i*ldo + j] =
 * beta * out[i*ldo + j] + alpha * in[i*ldi + j] (beta 0: out is not read).
 * LoRA's column blocks of a fused matmul (q, k, v of QKV; gate, up of fc)
 * and its scaling alpha/r.  out may not overlap in unless they are the same
 * array with ldo == ldi. */
void dtrain_k_axpby_strided(struct dtrain_kernels *k, float *out, int ldo, const float *in, int ldi, float alpha,
                            float beta, int N, int n);

/* Residual connection: out (n) = a + b; out may alias a or b. */
void dtrain_k_residual_forward(struct dtrain_kernels *k, float *out, const float *a,
                               const float *b, size_t n);

/* Softmax + cross-entropy over the first V of Vp columns, in place.
 * On entry logits (N,Vp), on return the probabilities (the Vp-V padding
 * columns set to 0); losses (N) = -log p[target]; targets (N) in [0, V). */
void dtrain_k_softmax_xent_forward(struct dtrain_kernels *k, float *logits_probs, float *losses,
                                   const int32_t *targets, int N, int V, int Vp);
/* In place: probs (N,Vp) become dlogits (=) = (p - onehot(target)) * dloss,
 * padding columns 0.  dloss is d(total loss)/d(each position's loss), e.g.
 * 1/N for a mean over N positions. */
void dtrain_k_softmax_xent_backward(struct dtrain_kernels *k, float *probs_dlogits,
                                    const int32_t *targets, float dloss, int N, int V, int Vp);

/* ------------------------------------------------------------------ vocabulary parallel
 *
 * A tensor-parallel rank holds wte rows and logit columns v0 .. v0+Vl-1 of
 * the vocabulary; the first nv of its columns are real (< V), the rest
 * padding.  The collectives between the steps are the caller's
 * (runtime/parallel/dtrain_tp.h).
 *
 * Embedding: out (B,T,C) (=) = wte_local[token - v0] for a token held
 * here, else 0, plus wpe[t] when add_wpe (one rank adds it; the sum over
 * the ranks is then the whole lookup, bit for bit); wpe NULL: nothing
 * added (rotary models).  Backward: dwte_local (+=) the rows of dout of
 * the tokens held here, dwpe (+=) the sum over b, rows in order, skipped
 * when dwpe is NULL.
 *
 * Cross-entropy, forward in three steps:
 *   1. xent_vp_rowmax: row_max (N) = max over the nv real local columns
 *      (-inf when nv = 0);  -- all-gather row_max into all_max (size * N) --
 *   2. xent_vp_exp: m = max over all_max; logits become exp(x - m), the
 *      padding 0; sums[n] = the local sum, sums[N + n] = the target's
 *      x - m when the target is here, else 0;  -- all-reduce the 2N sums --
 *   3. xent_vp_finish: losses (N) = log(sums[n]) - sums[N + n]; logits
 *      become the probabilities.
 * Backward, in place: dlogits (=) = (p - onehot) * dloss, padding 0. */
void dtrain_k_embedding_vp_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                                   const float *wte_local, const float *wpe, int B, int T, int C, int v0, int Vl,
                                   int add_wpe);
void dtrain_k_embedding_vp_backward(struct dtrain_kernels *k, float *dwte_local, float *dwpe, const float *dout,
                                    const int32_t *tokens, int B, int T, int C, int v0, int Vl);
void dtrain_k_xent_vp_rowmax(struct dtrain_kernels *k, float *row_max, const float *logits, int N, int Vl, int nv);
void dtrain_k_xent_vp_exp(struct dtrain_kernels *k, float *logits, float *sums, const float *all_max, int size,
                          const int32_t *targets, int v0, int N, int Vl, int nv);
void dtrain_k_xent_vp_finish(struct dtrain_kernels *k, float *logits, float *losses, const float *sums, int N,
                             int Vl, int nv);
void dtrain_k_xent_vp_backward(struct dtrain_kernels *k, float *probs_dlogits, const int32_t *targets, int v0,
                               float dloss, int N, int Vl, int nv);

/* ------------------------------------------------------------------ NF4 frozen weights
 *
 * A frozen weight (OC,IC) stored in 4-bit NormalFloat, QLoRA's format
 * (Dettmers et al. 2023, section 3 and appendix E; bitsandbytes'
 * quantize_4bit with quant_type "nf4", blocksize 64, compress_statistics):
 *  - the row-major weights, flattened, in blocks of DTRAIN_NF4_BLOCK (64;
 *    the last may be short); block b's absmax c_b = max |w| over it;
 *  - each weight is the index (0..15) of the NF4 level nearest w / c_b,
 *    computed as w * (1 / c_b) in fp32 (bitsandbytes' order; a tie goes
 *    to the lower level; a block of zeros codes 7, the level 0);
 *    two codes a byte, the even element in the HIGH nibble (bitsandbytes');
 *  - double quantisation of the scales: offset = the mean of all c_b;
 *    per group of DTRAIN_NF4_SCALE_BLOCK (256) consecutive blocks an fp32
 *    scale s = max |c_b - offset| / 127, and each c_b stored as the int8
 *    q_b = round(( c_b - offset) / s) in [-127, 127] (0 when s is 0);
 *    dequantised c'_b = q_b * s + offset (two fp32 roundings, no FMA).
 *    bitsandbytes quantises c_b - offset with its 8-bit dynamic map
 *    instead; linear int8 is chosen here because its error has one plain
 *    bound, |c_b - c'_b| <= s / 2 (+ fp32 rounding), that a test can hold
 *    each block to; the paper's point (the scales cost 8.5 bits per 256,
 *    not 32) is the same.  The codes are chosen with the exact c_b (as
 *    bitsandbytes does); a weight dequantises as level[code] * c'_b.
 * Per weight the error is at most (the largest gap between neighbouring
 * levels / 2) * c_b + |c_b - c'_b| (|level| <= 1): DTRAIN_NF4_HALF_GAP
 * c_b + s/2, plus fp32 rounding.
 *
 * Memory (dtrain_nf4_bytes): n = OC*IC weights, nb = ceil(n/64) blocks,
 * ng = ceil(nb/256) groups: ceil(n/2) code bytes + nb scale bytes + 4 ng
 * + 4 bytes, each of the four parts rounded up to 64 bytes: about
 * 0.5 + 1/64 + 4/16384 = 0.5159 bytes a weight (4.127 bits).
 *
 * Layout of the buffer (one allocation, moved as bytes; every part
 * starts 64-byte aligned): offset (one float), the ng group scales
 * (float), the nb int8 q_b, the codes. */
#define DTRAIN_NF4_BLOCK 64
#define DTRAIN_NF4_SCALE_BLOCK 256
/* The 16 levels, ascending (bitsandbytes' create_normal_map(0.9677083),
 * to fp32): level 7 is 0, 0 and 15 are -1 and 1. */
#define DTRAIN_NF4_LEVELS                                                                              \
    {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f, \
     -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,  \
     0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,           \
     0.7229568362236023f, 1.0f}
/* Half the largest gap between neighbouring levels (-0.69619 - -1) / 2). */
#define DTRAIN_NF4_HALF_GAP 0.15190359950065613f

extern const float dtrain_nf4_levels[16];

/* A frozen NF4 weight: data holds dtrain_nf4_bytes(rows, cols) bytes of the
 * layout above, in backend memory for the dtrain_k_nf4_* kernels or in host
 * memory for the dtrain_nf4_* host functions.  rows = OC, cols = IC. */
struct dtrain_nf4 {
    void *data;
    int rows, cols;
};

/* Where each part of the buffer starts (bytes from data), and its size. */
struct dtrain_nf4_layout {
    size_t n, blocks, groups;                       /* weights, absmax blocks, scale groups */
    size_t offset_at, scale2_at, qscale_at, codes_at; /* byte offsets of the parts */
    size_t bytes;                                   /* the whole buffer */
};
void dtrain_nf4_layout(int rows, int cols, struct dtrain_nf4_layout *out);
size_t dtrain_nf4_bytes(int rows, int cols);

/* Quantise w (rows,cols), fp32 host memory, into the host buffer dst of
 * dtrain_nf4_bytes(rows, cols) bytes.  Returns 0, or -1 when a weight is
 * not finite (dst then undefined). */
int dtrain_nf4_quantize(void *dst, const float *w, int rows, int cols);
/* dst (nr,nc) (=) the dequantised weights of rows r0..r0+nr-1, columns
 * c0..c0+nc-1 of the host NF4 buffer src (rows,cols); dense, row-major. */
void dtrain_nf4_dequantize_tile(float *dst, const void *src, int rows, int cols, int r0, int nr, int c0, int nc);
/* dst (rows,cols) (=) every weight dequantised. */
void dtrain_nf4_dequantize(float *dst, const void *src, int rows, int cols);

/* The frozen base linear, dequantising w on the fly (no fp32 copy of the
 * whole weight: the cpu backend a tile of rows or columns at a time, the
 * cuda backend into a bounded workspace):
 * out (N,OC) (=) inp (N,IC) @ dequant(w)^T + bias (OC, may be NULL), with
 * OC = w.rows, IC = w.cols; out and inp typed, fp32 or bf16.
 * The cpu backend computes in fp32 whatever the precision (the weights
 * are 4-bit already); cuda in its precision, as dtrain_k_matmul_forward. */
void dtrain_k_nf4_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                                 struct dtrain_nf4 w, const float *bias, int N);
/* Its input gradient: dinp (N,IC) (=) dout (N,OC) @ dequant(w); no weight
 * gradient (the base is frozen).  dinp and dout typed, fp32 or bf16. */
void dtrain_k_nf4_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor dout,
                                  struct dtrain_nf4 w, int N);

/* ------------------------------------------------------------------ optimizer */

struct dtrain_adamw_args {
    float lr, beta1, beta2, eps, weight_decay;
    long step;        /* 1-based update count, for bias correction */
    float grad_scale; /* multiplies every gradient first (clipping); 1 = none */
};

/* AdamW (decoupled weight decay, bias-corrected moments) on n parameters:
 * g = grad_scale*grads; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * params -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * params).
 * Works on any slice of the flat parameter vector (ZeRO shards). */
void dtrain_k_adamw_update(struct dtrain_kernels *k, float *params, const float *grads,
                           float *m, float *v, size_t n, const struct dtrain_adamw_args *a);

/* Sum of squares of x (n), accumulated in double in a fixed order: the
 * global gradient norm is sqrt of the sum over all slices. */
double dtrain_k_sumsq(struct dtrain_kernels *k, const float *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif
