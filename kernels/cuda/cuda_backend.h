/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CUDA backend's instance and the operations each file implements.
 * Internal to kernels/cuda; see dtrain_kernels.h for what each operation
 * does and dtrain_cuda.h for the CUDA-only extras.
 *
 * One instance = one device, one stream, one cuBLASLt handle.  Every
 * operation is queued on the stream and returns at once; download, sumsq
 * and sync wait for it.  The first failure (a launch error, a device fault,
 * out of memory) is recorded; from then on operations do nothing and
 * dtrain_kernels_error() reports it.
 *
 * Shared by C (cuda_backend.c, cuda_matmul.c) and CUDA C++ (*.cu): plain C
 * types only, and C linkage for every function. */
#ifndef DTRAIN_CUDA_BACKEND_H
#define DTRAIN_CUDA_BACKEND_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "dtrain_kernels_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_gemm_cache; /* cuda_matmul.c: cuBLASLt plans per shape */

struct cuda_kernels {
    struct dtrain_kernels base; /* first: the dispatcher casts to it */
    int device;
    int bf16;                   /* DTRAIN_PRECISION_BF16 */
    int fp16;                   /* DTRAIN_PRECISION_FP16: matmul operands in fp16, attention in fp32 */
    int sm_count;
    size_t smem_optin;          /* shared memory a block may opt in to */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;         /* cuBLASLt's workspace */
    size_t lt_workspace_bytes;
    struct cuda_gemm_cache *gemm;
    void *scratch;              /* grow-only temporaries of one operation, stream-ordered */
    size_t scratch_bytes;
    double *sumsq_parts;        /* device: partial sums of sumsq */
    double *sumsq_host;         /* pinned host: its result */
    int failed;                 /* first error recorded */
    char error[256];
};

static inline struct cuda_kernels *cuda_of(struct dtrain_kernels *k)
{
    return (struct cuda_kernels *)k;
}

/* Record the first error (printf message, no newline) and print it once to
 * stderr as "dtrain: cuda: ...".  Returns -1. */
int cuda_fail(struct cuda_kernels *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 0 when e is cudaSuccess, else cuda_fail("WHAT: reason") and -1. */
int cuda_check(struct cuda_kernels *ck, cudaError_t e, const char *what);
/* After a launch: cuda_check(cudaGetLastError()). */
int cuda_check_launch(struct cuda_kernels *ck, const char *what);
/* At least `bytes` of device scratch for the operation being queued (valid
 * until the next call of this function), or NULL after cuda_fail. */
void *cuda_scratch(struct cuda_kernels *ck, size_t bytes);

/* Carve a 256-byte aligned piece of `bytes` from a scratch region: *used
 * grows; with base NULL it only measures. */
static inline void *cuda_carve(void *base, size_t *used, size_t bytes)
{
    void *p = base != NULL ? (char *)base + *used : NULL;
    *used += (bytes + 255) & ~(size_t)255;
    return p;
}

/* 1 when the tensors (NULL data ignored) share one element type; else
 * cuda_fail("WHAT: ...") and 0.  The interface has the operands of
 * attention and GELU share one type. */
static inline int cuda_one_dtype(struct cuda_kernels *ck, const struct dtrain_tensor *t, int n, const char *what)
{
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (t[i].data == NULL)
            continue;
        if (first < 0)
            first = i;
        else if (t[i].dtype != t[first].dtype) {
            cuda_fail(ck, "%s: operands of types %s and %s (they must share one)", what,
                      dtrain_dtype_name(t[first].dtype), dtrain_dtype_name(t[i].dtype));
            return 0;
        }
    }
    return 1;
}

/* Grid size for n items of `per_block`, capped for grid-stride loops. */
static inline unsigned cuda_blocks(size_t n, unsigned per_block)
{
    size_t b = (n + per_block - 1) / per_block;
    return b == 0 ? 1u : b > 65535u * 32u ? 65535u * 32u : (unsigned)b;
}

/* cuda_matmul.c */
int cuda_gemm_cache_create(struct cuda_gemm_cache **out);
void cuda_gemm_cache_destroy(struct cuda_gemm_cache *c);
void cuda_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                         const float *weight, const float *bias, int N, int IC, int OC);
void cuda_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, float *dweight, float *dbias,
                          struct dtrain_tensor dout, struct dtrain_tensor inp, const float *weight,
                          int N, int IC, int OC);

/* cuda_convert.cu: fp32 -> bf16 copies (n elements, round to nearest
 * even); bf16 -> fp32 (exact); uniform [-1, 1) bf16 numbers from a seed;
 * the columns (n, of m rows, ld ldc) of C set to bias, both of type t; and
 * the column sums of dout (N, OC, fp32 or bf16) added in fp32 to dbias in
 * a fixed order, through `partials` (cuda_bias_backward_partials floats).
 * The int-returning ones give 0, or -1 after cuda_fail. */
int cuda_to_bf16(struct cuda_kernels *ck, void *dst, const float *src, size_t n);
int cuda_widen_bf16(struct cuda_kernels *ck, float *dst, const void *src, size_t n);
/* fp32 -> fp16 (round to nearest even); cuda_to_half: the matmuls' 16-bit
 * operand type of the instance (fp16 when ck->fp16, else bf16);
 * cuda_to_half_typed: the same from an fp32 or bf16 tensor. */
int cuda_to_fp16(struct cuda_kernels *ck, void *dst, const float *src, size_t n);
int cuda_to_half(struct cuda_kernels *ck, void *dst, const float *src, size_t n);
int cuda_to_half_typed(struct cuda_kernels *ck, void *dst, struct dtrain_tensor src, size_t n);
int cuda_fill_uniform_bf16(struct cuda_kernels *ck, void *dst, size_t n, unsigned long long seed);
int cuda_fill_bias(struct cuda_kernels *ck, void *c, const void *bias, enum dtrain_dtype t, int m, int n, int ldc);
void cuda_bias_backward(struct cuda_kernels *ck, float *dbias, struct dtrain_tensor dout, int N, int OC,
                        float *partials);
size_t cuda_bias_backward_partials(int N, int OC); /* floats of scratch it needs */

/* cuda_matmul.c: the frozen NF4 base linear (dtrain_kernels.h) */
void cuda_nf4_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                             struct dtrain_nf4 w, const float *bias, int N);
void cuda_nf4_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor dout,
                              struct dtrain_nf4 w, int N);
/* cuda_nf4.cu: dst (nr, nc), dense, of type (CUDA_R_32F, _16BF or _16F) = rows
 * r0.., columns c0.. of w dequantised; 0, or -1 after cuda_fail */
int cuda_nf4_dequantize(struct cuda_kernels *ck, void *dst, cudaDataType_t type, struct dtrain_nf4 w,
                        int r0, int nr, int c0, int nc);

/* cuda_layers.cu */
void cuda_embedding_vp_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                               const float *wte_local, const float *wpe, int B, int T, int C, int v0, int Vl,
                               int add_wpe);
void cuda_embedding_vp_backward(struct dtrain_kernels *k, float *dwte_local, float *dwpe, const float *dout,
                                const int32_t *tokens, int B, int T, int C, int v0, int Vl);
void cuda_encoder_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                          const float *wte, const float *wpe, int B, int T, int C);
void cuda_encoder_backward(struct dtrain_kernels *k, float *dwte, float *dwpe,
                           const float *dout, const int32_t *tokens, int B, int T, int C);
void cuda_layernorm_forward(struct dtrain_kernels *k, float *out, float *mean, float *rstd,
                            const float *inp, const float *weight, const float *bias, int N, int C);
void cuda_layernorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C);
void cuda_gelu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp, size_t n);
void cuda_gelu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                        struct dtrain_tensor dout, size_t n);
void cuda_axpby_strided(struct dtrain_kernels *k, float *out, int ldo, const float *in, int ldi, float alpha,
    float beta, int N, int n);
void cuda_residual_forward(struct dtrain_kernels *k, float *out, const float *a,
                           const float *b, size_t n);

/* cuda_attention.cu */
void cuda_attention_forward(struct dtrain_kernels *k, struct dtrain_tensor out, float *att,
                            struct dtrain_tensor qkv, int B, int T, int NH, int KVH, int HS);
size_t cuda_attention_saved(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
size_t cuda_attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS);
void cuda_attention_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, float *scratch,
                             struct dtrain_tensor dout, struct dtrain_tensor qkv, struct dtrain_tensor out,
                             const float *att, int B, int T, int NH, int KVH, int HS);

/* cuda_layers.cu, too: RMS norm, RoPE, SwiGLU */
void cuda_rmsnorm_forward(struct dtrain_kernels *k, float *out, float *rstd, const float *inp,
                          const float *weight, float eps, int N, int C);
void cuda_rmsnorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int N, int C);
void cuda_rope_forward(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq,
                       int B, int T, int NH, int KVH, int HS);
void cuda_rope_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, const float *inv_freq,
                        int B, int T, int NH, int KVH, int HS);
void cuda_swiglu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp, int N, int F);
void cuda_swiglu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                          struct dtrain_tensor dout, int N, int F);

/* cuda_loss.cu */
void cuda_softmax_xent_forward(struct dtrain_kernels *k, float *logits_probs, float *losses,
                               const int32_t *targets, int N, int V, int Vp);
void cuda_softmax_xent_backward(struct dtrain_kernels *k, float *probs_dlogits,
                                const int32_t *targets, float dloss, int N, int V, int Vp);

/* cuda_adamw.cu */
void cuda_adamw_update(struct dtrain_kernels *k, float *params, const float *grads, float *m,
                       float *v, size_t n, const struct dtrain_adamw_args *a);
double cuda_sumsq(struct dtrain_kernels *k, const float *x, size_t n);
#define CUDA_SUMSQ_PARTS 1024 /* fixed partial sums, whatever the device */

#ifdef __cplusplus
}
#endif

#endif
