/* SPDX-License-Identifier: GPL-2.0-or-later */
/* For backend implementors only: the table of operations behind
 * dtrain_kernels.h.
 *
 * A backend defines one `struct dtrain_kernel_ops` and a create function
 * that returns its own instance structure, whose FIRST member is a
 * `struct dtrain_kernels` pointing at that table.  dtrain_kernels.c
 * dispatches every dtrain_k_*() call through the table; each entry has the
 * meaning documented for the function of the same name in dtrain_kernels.h.
 * The CUDA backend (kernels/cuda/) is in the list of dtrain_kernels.c under
 * DTRAIN_HAVE_CUDA.
 *
 * Precision: create() gets options whose precision is already resolved
 * (never DEFAULT) and only one the backend lists in `bf16`; the dispatcher
 * stores it in the instance's head.  `error` may be NULL (never fails). */
#ifndef DTRAIN_KERNELS_BACKEND_H
#define DTRAIN_KERNELS_BACKEND_H

#include "dtrain_kernels.h"

struct dtrain_kernel_ops {
    const char *name;
    int bf16;         /* 1: the backend computes in DTRAIN_PRECISION_BF16 too */
    int default_bf16; /* 1: and DTRAIN_PRECISION_DEFAULT is bf16 */
    int fp16;         /* 1: the backend computes in DTRAIN_PRECISION_FP16 too */
    int host_memory; /* 1: backend memory is host memory (the host may read and write it) */
    enum dtrain_status (*create)(const struct dtrain_kernels_options *opt, struct dtrain_kernels **out,
                                 char *err, size_t errlen);
    void (*destroy)(struct dtrain_kernels *k);

    void *(*alloc)(struct dtrain_kernels *k, size_t bytes);
    void (*free)(struct dtrain_kernels *k, void *p);
    void (*upload)(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes);
    void (*download)(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes);
    void (*copy)(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes); /* backend to backend */
    void (*zero)(struct dtrain_kernels *k, void *p, size_t bytes);
    void (*sync)(struct dtrain_kernels *k);
    void *(*host_alloc)(struct dtrain_kernels *k, size_t bytes); /* host memory fast to move (pinned) */
    void (*host_free)(struct dtrain_kernels *k, void *p);
    void *(*stream)(struct dtrain_kernels *k);                   /* NULL: none */

    void (*encoder_forward)(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                            const float *wte, const float *wpe, int B, int T, int C);
    void (*encoder_backward)(struct dtrain_kernels *k, float *dwte, float *dwpe,
                             const float *dout, const int32_t *tokens, int B, int T, int C);
    void (*layernorm_forward)(struct dtrain_kernels *k, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias,
                              int N, int C);
    void (*layernorm_backward)(struct dtrain_kernels *k, float *dinp, float *dweight,
                               float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd,
                               int N, int C);
    void (*matmul_forward)(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                           const float *weight, const float *bias, int N, int IC, int OC);
    void (*matmul_backward)(struct dtrain_kernels *k, struct dtrain_tensor dinp, float *dweight,
                            float *dbias, struct dtrain_tensor dout, struct dtrain_tensor inp,
                            const float *weight, int N, int IC, int OC);
    void (*attention_forward)(struct dtrain_kernels *k, struct dtrain_tensor out, float *att,
                              struct dtrain_tensor qkv, int B, int T, int NH, int KVH, int HS);
    size_t (*attention_saved)(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
    size_t (*attention_scratch)(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
    void (*attention_backward)(struct dtrain_kernels *k, struct dtrain_tensor dqkv, float *scratch,
                               struct dtrain_tensor dout, struct dtrain_tensor qkv, struct dtrain_tensor out,
                               const float *att, int B, int T, int NH, int KVH, int HS);
    void (*gelu_forward)(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp, size_t n);
    void (*gelu_backward)(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                          struct dtrain_tensor dout, size_t n);
    void (*rmsnorm_forward)(struct dtrain_kernels *k, float *out, float *rstd, const float *inp,
                            const float *weight, float eps, int N, int C);
    void (*rmsnorm_backward)(struct dtrain_kernels *k, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int N, int C);
    void (*rope_forward)(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq,
                         int B, int T, int NH, int KVH, int HS);
    void (*rope_backward)(struct dtrain_kernels *k, struct dtrain_tensor dqkv, const float *inv_freq,
                          int B, int T, int NH, int KVH, int HS);
    void (*swiglu_forward)(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                           int N, int F);
    void (*swiglu_backward)(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                            struct dtrain_tensor dout, int N, int F);
    void (*axpby_strided)(struct dtrain_kernels *k, float *out, int ldo, const float *in, int ldi, float alpha,
                          float beta, int N, int n);
    void (*residual_forward)(struct dtrain_kernels *k, float *out, const float *a,
                             const float *b, size_t n);
    void (*softmax_xent_forward)(struct dtrain_kernels *k, float *logits_probs, float *losses,
                                 const int32_t *targets, int N, int V, int Vp);
    void (*softmax_xent_backward)(struct dtrain_kernels *k, float *probs_dlogits,
                                  const int32_t *targets, float dloss, int N, int V, int Vp);
    void (*embedding_vp_forward)(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                                 const float *wte_local, const float *wpe, int B, int T, int C, int v0, int Vl,
                                 int add_wpe);
    void (*embedding_vp_backward)(struct dtrain_kernels *k, float *dwte_local, float *dwpe, const float *dout,
                                  const int32_t *tokens, int B, int T, int C, int v0, int Vl);
    void (*xent_vp_rowmax)(struct dtrain_kernels *k, float *row_max, const float *logits, int N, int Vl, int nv);
    void (*xent_vp_exp)(struct dtrain_kernels *k, float *logits, float *sums, const float *all_max, int size,
                        const int32_t *targets, int v0, int N, int Vl, int nv);
    void (*xent_vp_finish)(struct dtrain_kernels *k, float *logits, float *losses, const float *sums, int N,
                           int Vl, int nv);
    void (*xent_vp_backward)(struct dtrain_kernels *k, float *probs_dlogits, const int32_t *targets, int v0,
                             float dloss, int N, int Vl, int nv);
    void (*adamw_update)(struct dtrain_kernels *k, float *params, const float *grads,
                         float *m, float *v, size_t n, const struct dtrain_adamw_args *a);
    void (*nf4_matmul_forward)(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                               struct dtrain_nf4 w, const float *bias, int N);
    void (*nf4_matmul_backward)(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor dout,
                                struct dtrain_nf4 w, int N);
    double (*sumsq)(struct dtrain_kernels *k, const float *x, size_t n);
    enum dtrain_status (*error)(struct dtrain_kernels *k, char *err, size_t errlen);
};

/* The common head of every backend instance. */
struct dtrain_kernels {
    const struct dtrain_kernel_ops *ops;
    int threads;
    enum dtrain_kernels_precision precision; /* set by the dispatcher */
};

/* Backends built into the library. */
extern const struct dtrain_kernel_ops dtrain_kernels_cpu_ops;
#ifdef DTRAIN_HAVE_CUDA
extern const struct dtrain_kernel_ops dtrain_kernels_cuda_ops;
#endif

#endif
