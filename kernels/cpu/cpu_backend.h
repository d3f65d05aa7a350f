/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CPU backend's instance and the operations each file implements.
 * Internal to kernels/cpu; see dtrain_kernels.h for what each does. */
#ifndef DTRAIN_CPU_BACKEND_H
#define DTRAIN_CPU_BACKEND_H

#include "dtrain_kernels_backend.h"
#include "cpu_pool.h"

struct cpu_kernels {
    struct dtrain_kernels base; /* first: the dispatcher casts to it */
    struct cpu_pool *pool;
    float *round_scratch; /* bf16/fp16: the rounded matmul operands (cpu_matmul.c); grows, never shrinks */
    size_t round_cap;     /* floats in round_scratch */
    struct cpu_onednn *onednn; /* bf16 matmuls through oneDNN (cpu_onednn.c); NULL: on fp32 GEMMs */
    char bf16_line[320];  /* what runs the bf16 matmuls, in words ("" in fp32 and fp16) */
    float *typed_scratch; /* fp32 views of bf16 operands (cpu_typed.c); grows, never shrinks */
    size_t typed_cap;     /* floats in typed_scratch */
    float *nf4_scratch;   /* a dequantised tile of an NF4 weight (cpu_nf4.c); grows, never shrinks */
    size_t nf4_cap;       /* floats in nf4_scratch */
    int failed;           /* a scratch could not grow: every later typed call does nothing (cpu_kernels_fail) */
    char error[128];
};

/* Record that the instance cannot go on and why (failed, error: what the
 * caller reports). */
void cpu_kernels_fail(struct dtrain_kernels *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline struct cpu_pool *cpu_pool_of(struct dtrain_kernels *k)
{
    return ((struct cpu_kernels *)k)->pool;
}

/* Below this much work (in multiply-adds, roughly) a loop runs on the
 * calling thread: waking a worker would cost more than it saves. */
#define CPU_MIN_PARALLEL_WORK 32768

/* Run fn over n items, each of about `cost` work, on the pool or inline.
 * Either way each item's result is the same. */
static inline void cpu_parallel(struct dtrain_kernels *k, long n, size_t cost,
                                cpu_pool_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if ((size_t)n * cost < CPU_MIN_PARALLEL_WORK)
        fn(arg, 0, n, 0);
    else
        cpu_pool_for(cpu_pool_of(k), n, fn, arg);
}

/* Elements per item of elementwise loops, and columns per item of column
 * reductions: fixed, so every sum is taken in the same order. */
#define CPU_ELEMS_PER_ITEM 4096
#define CPU_COLS_PER_ITEM 16

/* cpu_layers.c */
void cpu_encoder_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                         const float *wte, const float *wpe, int B, int T, int C);
void cpu_encoder_backward(struct dtrain_kernels *k, float *dwte, float *dwpe,
                          const float *dout, const int32_t *tokens, int B, int T, int C);
void cpu_layernorm_forward(struct dtrain_kernels *k, float *out, float *mean, float *rstd,
                           const float *inp, const float *weight, const float *bias, int N, int C);
void cpu_layernorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int N, int C);
void cpu_gelu_forward(struct dtrain_kernels *k, float *out, const float *inp, size_t n);
void cpu_gelu_backward(struct dtrain_kernels *k, float *dinp, const float *inp,
                       const float *dout, size_t n);
/* The same on bf16 tensors, computed in fp32 a chunk at a time in cache
 * and rounded once (out may alias inp, dinp dout) */
void cpu_gelu_forward_bf16(struct dtrain_kernels *k, uint16_t *out, const uint16_t *inp, size_t n);
void cpu_gelu_backward_bf16(struct dtrain_kernels *k, uint16_t *dinp, const uint16_t *inp, const uint16_t *dout,
                            size_t n);
void cpu_axpby_strided(struct dtrain_kernels *k, float *out, int ldo, const float *in, int ldi, float alpha,
    float beta, int N, int n);
void cpu_residual_forward(struct dtrain_kernels *k, float *out, const float *a,
                          const float *b, size_t n);

/* cpu_matmul.c */
/* exact: which operands hold bf16 values already (widened bf16 tensors), so
 * that bf16 precision need not round them again */
#define CPU_MATMUL_INP_BF16 1u
#define CPU_MATMUL_DOUT_BF16 2u
/* inp_bits (and dout_bits), where cpu_matmul_takes_bits, may be the bf16
 * tensors' own bits: they stand for inp (dout), whose fp32 view need not be
 * filled then (dbias sums dout's bits widened); NULL otherwise.
 * out_bits (dinp_bits), where cpu_matmul_writes_bits, may be the bf16
 * result tensor: oneDNN writes the result there, rounded once from its
 * f32 sum (the bias added first), and out (dinp) is not written. */
void cpu_matmul_forward(struct dtrain_kernels *k, float *out, uint16_t *out_bits, const float *inp,
                        const uint16_t *inp_bits, const float *weight, const float *bias, int N, int IC, int OC,
                        unsigned exact);
void cpu_matmul_backward(struct dtrain_kernels *k, float *dinp, uint16_t *dinp_bits, float *dweight, float *dbias,
                         const float *dout, const uint16_t *dout_bits, const float *inp,
                         const uint16_t *inp_bits, const float *weight, int N, int IC, int OC, unsigned exact);
/* 1: bf16 matmuls run on oneDNN's bf16 operands here (and it reads dout
 * transposed in place), so a bf16 tensor can go to them as it is rather
 * than widened and rounded again */
int cpu_matmul_takes_bits(struct dtrain_kernels *k);
/* 1: besides, oneDNN writes bf16 results itself (cpu_onednn_bits_out) */
int cpu_matmul_writes_bits(struct dtrain_kernels *k);

/* cpu_onednn.c: bf16 matmuls through oneDNN.  mode: DTRAIN_CPU_ONEDNN
 * (NULL or "auto": when the CPU has bf16 instructions, "off", "force").
 * *out stays NULL when oneDNN is not used; line says what runs either way.
 * Returns -1 only when out of memory. */
struct cpu_onednn;
int cpu_onednn_create(int threads, const char *mode, struct cpu_onednn **out, char *line, size_t len);
void cpu_onednn_destroy(struct cpu_onednn *d);
/* 1: operands in bf16 (uint16_t); 0: f32 holding bf16-rounded values (forced) */
int cpu_onednn_bf16(const struct cpu_onednn *d);
/* On pool thread tid: C[M x N] (+ accumulate ? C : 0) = A[M x K] @ B (+
 * bias[N], f32, when not NULL), with B stored K x N (btrans 0) or N x K
 * (btrans 1); A dense (lda 0) or stored transposed, K rows of lda elements,
 * A[m][k] at k * lda + m (the weight gradient's dout^T, read in place: only
 * where cpu_onednn_atrans); row-major, A and B in the type cpu_onednn_bf16
 * says, C in f32, or (c_bf16, only where cpu_onednn_bits_out, not with
 * accumulate) bf16: the f32 sum rounded once, to nearest even. */
void cpu_onednn_gemm(struct cpu_onednn *d, int tid, int M, int N, int K, const void *A, int lda, const void *B,
                     int btrans, int accumulate, const float *bias, void *C, int c_bf16);
/* 1: oneDNN built the transposed-A form (lda > 0) at creation */
int cpu_onednn_atrans(const struct cpu_onednn *d);
/* 1: oneDNN built the bf16-C forms (a bias, none) at creation */
int cpu_onednn_bits_out(const struct cpu_onednn *d);

/* cpu_attention.c */
void cpu_attention_forward(struct dtrain_kernels *k, float *out, float *att, const float *qkv,
                           int B, int T, int NH, int KVH, int HS);
size_t cpu_attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
void cpu_attention_backward(struct dtrain_kernels *k, float *dqkv, float *scratch,
                            const float *dout, const float *qkv, const float *att,
                            int B, int T, int NH, int KVH, int HS);

/* cpu_llama.c: RMS norm (fp32), and the fp32 arithmetic of RoPE and SwiGLU */
void cpu_rmsnorm_forward(struct dtrain_kernels *k, float *out, float *rstd, const float *inp,
                         const float *weight, float eps, int N, int C);
void cpu_rmsnorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int N, int C);
/* sign +1: forward rotation, -1: the inverse (backward) */
void cpu_rope(struct dtrain_kernels *k, float *qkv, const float *inv_freq, int B, int T, int NH, int KVH,
              int HS, int sign);
void cpu_swiglu_forward(struct dtrain_kernels *k, float *out, const float *inp, int N, int F);
void cpu_swiglu_backward(struct dtrain_kernels *k, float *dinp, const float *inp, const float *dout, int N, int F);

/* cpu_nf4.c: the frozen NF4 base linear on fp32 operands (dtrain_kernels.h) */
void cpu_nf4_matmul_forward(struct dtrain_kernels *k, float *out, const float *inp, struct dtrain_nf4 w,
                            const float *bias, int N);
void cpu_nf4_matmul_backward(struct dtrain_kernels *k, float *dinp, const float *dout, struct dtrain_nf4 w, int N);

/* cpu_typed.c: the typed entry points (the ops table's); the fp32
 * functions above do the arithmetic. */
void cpu_typed_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                              const float *weight, const float *bias, int N, int IC, int OC);
void cpu_typed_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, float *dweight, float *dbias,
                               struct dtrain_tensor dout, struct dtrain_tensor inp, const float *weight,
                               int N, int IC, int OC);
void cpu_typed_nf4_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                                  struct dtrain_nf4 w, const float *bias, int N);
void cpu_typed_nf4_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor dout,
                                   struct dtrain_nf4 w, int N);
void cpu_typed_attention_forward(struct dtrain_kernels *k, struct dtrain_tensor out, float *att,
                                 struct dtrain_tensor qkv, int B, int T, int NH, int KVH, int HS);
size_t cpu_attention_saved(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
void cpu_typed_attention_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, float *scratch,
                                  struct dtrain_tensor dout, struct dtrain_tensor qkv, struct dtrain_tensor out,
                                  const float *att, int B, int T, int NH, int KVH, int HS);
void cpu_typed_gelu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp, size_t n);
void cpu_typed_gelu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                             struct dtrain_tensor dout, size_t n);
void cpu_typed_rope_forward(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq,
                            int B, int T, int NH, int KVH, int HS);
void cpu_typed_rope_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, const float *inv_freq,
                             int B, int T, int NH, int KVH, int HS);
void cpu_typed_swiglu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                              int N, int F);
void cpu_typed_swiglu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                               struct dtrain_tensor dout, int N, int F);

/* cpu_loss.c */
/* cpu_vocab.c: the vocabulary-parallel pieces (dtrain_kernels.h) */
void cpu_embedding_vp_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens, const float *wte_local,
                              const float *wpe, int B, int T, int C, int v0, int Vl, int add_wpe);
void cpu_embedding_vp_backward(struct dtrain_kernels *k, float *dwte_local, float *dwpe, const float *dout,
                               const int32_t *tokens, int B, int T, int C, int v0, int Vl);
void cpu_xent_vp_rowmax(struct dtrain_kernels *k, float *row_max, const float *logits, int N, int Vl, int nv);
void cpu_xent_vp_exp(struct dtrain_kernels *k, float *logits, float *sums, const float *all_max, int size,
                     const int32_t *targets, int v0, int N, int Vl, int nv);
void cpu_xent_vp_finish(struct dtrain_kernels *k, float *logits, float *losses, const float *sums, int N, int Vl,
                        int nv);
void cpu_xent_vp_backward(struct dtrain_kernels *k, float *probs_dlogits, const int32_t *targets, int v0,
                          float dloss, int N, int Vl, int nv);

void cpu_softmax_xent_forward(struct dtrain_kernels *k, float *logits_probs, float *losses,
                              const int32_t *targets, int N, int V, int Vp);
void cpu_softmax_xent_backward(struct dtrain_kernels *k, float *probs_dlogits,
                               const int32_t *targets, float dloss, int N, int V, int Vp);

/* cpu_adamw.c */
void cpu_adamw_update(struct dtrain_kernels *k, float *params, const float *grads, float *m,
                      float *v, size_t n, const struct dtrain_adamw_args *a);
double cpu_sumsq(struct dtrain_kernels *k, const float *x, size_t n);

#endif
