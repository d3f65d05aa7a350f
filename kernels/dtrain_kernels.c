/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Backend selection and dispatch; see dtrain_kernels.h. */
#include "dtrain_kernels_backend.h"

#include <stdio.h>
#include <string.h>

static const struct dtrain_kernel_ops *const backend_table[] = {
    &dtrain_kernels_cpu_ops,
#ifdef DTRAIN_HAVE_CUDA
    &dtrain_kernels_cuda_ops,
#endif
};

static const char *const backend_names[] = {
    "cpu",
#ifdef DTRAIN_HAVE_CUDA
    "cuda",
#endif
    NULL,
};

#ifdef DTRAIN_HAVE_CUDA
#define BACKEND_LIST "cpu, cuda"
#else
#define BACKEND_LIST "cpu"
#endif

const char *const *dtrain_kernels_backends(void)
{
    return backend_names;
}

enum dtrain_status dtrain_kernels_create(const char *name, const struct dtrain_kernels_options *opt,
                                         struct dtrain_kernels **out, char *err, size_t errlen)
{
    struct dtrain_kernels_options defaults = {.threads = 1};
    *out = NULL;
    if (opt == NULL)
        opt = &defaults;
    for (size_t i = 0; i < sizeof backend_table / sizeof backend_table[0]; i++) {
        const struct dtrain_kernel_ops *ops = backend_table[i];
        if (strcmp(name, ops->name) != 0)
            continue;
        struct dtrain_kernels_options resolved = *opt;
        switch (opt->precision) {
        case DTRAIN_PRECISION_DEFAULT:
            resolved.precision = ops->default_bf16 ? DTRAIN_PRECISION_BF16 : DTRAIN_PRECISION_FP32;
            break;
        case DTRAIN_PRECISION_FP32:
            break;
        case DTRAIN_PRECISION_BF16:
            if (!ops->bf16) {
                snprintf(err, errlen, "the %s kernels compute in fp32 only: use precision fp32",
                         ops->name);
                return DTRAIN_ERR_INPUT;
            }
            break;
        case DTRAIN_PRECISION_FP16:
            if (!ops->fp16) {
                snprintf(err, errlen, "the %s kernels do not compute in fp16 (it is emulated on the cpu "
                         "kernels only): use precision %s", ops->name, ops->bf16 ? "bf16 or fp32" : "fp32");
                return DTRAIN_ERR_INPUT;
            }
            break;
        default:
            snprintf(err, errlen, "unknown precision %d (use fp32, bf16 or fp16)", (int)opt->precision);
            return DTRAIN_ERR_INPUT;
        }
        enum dtrain_status rc = ops->create(&resolved, out, err, errlen);
        if (rc != DTRAIN_OK)
            return rc;
        (*out)->precision = resolved.precision;
        return DTRAIN_OK;
    }
    snprintf(err, errlen, "unknown kernel backend '%.32s' (this build has: " BACKEND_LIST ")", name);
    return DTRAIN_ERR_INPUT;
}

void dtrain_kernels_destroy(struct dtrain_kernels *k)
{
    if (k != NULL)
        k->ops->destroy(k);
}

const char *dtrain_kernels_name(const struct dtrain_kernels *k) { return k->ops->name; }
int dtrain_kernels_threads(const struct dtrain_kernels *k) { return k->threads; }

enum dtrain_kernels_precision dtrain_kernels_precision(const struct dtrain_kernels *k)
{
    return k->precision;
}

const char *dtrain_kernels_precision_name(enum dtrain_kernels_precision p)
{
    switch (p) {
    case DTRAIN_PRECISION_FP32: return "fp32";
    case DTRAIN_PRECISION_BF16: return "bf16";
    case DTRAIN_PRECISION_FP16: return "fp16";
    default: return "default";
    }
}

enum dtrain_dtype dtrain_kernels_act_dtype(const struct dtrain_kernels *k)
{
    return k->precision == DTRAIN_PRECISION_BF16 ? DTRAIN_BF16 : DTRAIN_F32;
}

size_t dtrain_dtype_size(enum dtrain_dtype t) { return t == DTRAIN_BF16 ? 2 : 4; }

const char *dtrain_dtype_name(enum dtrain_dtype t) { return t == DTRAIN_BF16 ? "bf16" : "f32"; }

enum dtrain_status dtrain_kernels_error(struct dtrain_kernels *k, char *err, size_t errlen)
{
    if (k->ops->error == NULL)
        return DTRAIN_OK;
    return k->ops->error(k, err, errlen);
}

void *dtrain_k_alloc(struct dtrain_kernels *k, size_t bytes) { return k->ops->alloc(k, bytes); }
void dtrain_k_free(struct dtrain_kernels *k, void *p) { k->ops->free(k, p); }
void dtrain_k_upload(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes)
{
    k->ops->upload(k, dst, src, bytes);
}
void dtrain_k_download(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes)
{
    k->ops->download(k, dst, src, bytes);
}
void dtrain_k_zero(struct dtrain_kernels *k, void *p, size_t bytes) { k->ops->zero(k, p, bytes); }
void dtrain_k_copy(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes)
{
    k->ops->copy(k, dst, src, bytes);
}
int dtrain_kernels_host_memory(const struct dtrain_kernels *k) { return k->ops->host_memory; }
void *dtrain_k_host_alloc(struct dtrain_kernels *k, size_t bytes) { return k->ops->host_alloc(k, bytes); }
void dtrain_k_host_free(struct dtrain_kernels *k, void *p)
{
    if (p != NULL)
        k->ops->host_free(k, p);
}
void *dtrain_k_stream(struct dtrain_kernels *k) { return k->ops->stream != NULL ? k->ops->stream(k) : NULL; }
void dtrain_k_sync(struct dtrain_kernels *k) { k->ops->sync(k); }

void dtrain_k_encoder_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                              const float *wte, const float *wpe, int B, int T, int C)
{
    k->ops->encoder_forward(k, out, tokens, wte, wpe, B, T, C);
}

void dtrain_k_encoder_backward(struct dtrain_kernels *k, float *dwte, float *dwpe,
                               const float *dout, const int32_t *tokens, int B, int T, int C)
{
    k->ops->encoder_backward(k, dwte, dwpe, dout, tokens, B, T, C);
}

void dtrain_k_layernorm_forward(struct dtrain_kernels *k, float *out, float *mean, float *rstd,
                                const float *inp, const float *weight, const float *bias,
                                int N, int C)
{
    k->ops->layernorm_forward(k, out, mean, rstd, inp, weight, bias, N, C);
}

void dtrain_k_layernorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight,
                                 float *dbias, const float *dout, const float *inp,
                                 const float *weight, const float *mean, const float *rstd,
                                 int N, int C)
{
    k->ops->layernorm_backward(k, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void dtrain_k_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                             const float *weight, const float *bias, int N, int IC, int OC)
{
    k->ops->matmul_forward(k, out, inp, weight, bias, N, IC, OC);
}

void dtrain_k_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, float *dweight,
                              float *dbias, struct dtrain_tensor dout, struct dtrain_tensor inp,
                              const float *weight, int N, int IC, int OC)
{
    k->ops->matmul_backward(k, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

void dtrain_k_attention_forward(struct dtrain_kernels *k, struct dtrain_tensor out, float *att,
                                struct dtrain_tensor qkv, int B, int T, int NH, int KVH, int HS)
{
    k->ops->attention_forward(k, out, att, qkv, B, T, NH, KVH, HS);
}

size_t dtrain_k_attention_saved(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    return k->ops->attention_saved(k, B, T, NH, KVH, HS);
}

size_t dtrain_k_attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    return k->ops->attention_scratch(k, B, T, NH, KVH, HS);
}

void dtrain_k_attention_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, float *scratch,
                                 struct dtrain_tensor dout, struct dtrain_tensor qkv, struct dtrain_tensor out,
                                 const float *att, int B, int T, int NH, int KVH, int HS)
{
    k->ops->attention_backward(k, dqkv, scratch, dout, qkv, out, att, B, T, NH, KVH, HS);
}

void dtrain_k_gelu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                           size_t n)
{
    k->ops->gelu_forward(k, out, inp, n);
}

void dtrain_k_gelu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                            struct dtrain_tensor dout, size_t n)
{
    k->ops->gelu_backward(k, dinp, inp, dout, n);
}

void dtrain_k_rmsnorm_forward(struct dtrain_kernels *k, float *out, float *rstd, const float *inp,
                              const float *weight, float eps, int N, int C)
{
    k->ops->rmsnorm_forward(k, out, rstd, inp, weight, eps, N, C);
}

void dtrain_k_rmsnorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, const float *dout,
                               const float *inp, const float *weight, const float *rstd, int N, int C)
{
    k->ops->rmsnorm_backward(k, dinp, dweight, dout, inp, weight, rstd, N, C);
}

void dtrain_k_rope_forward(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq,
                           int B, int T, int NH, int KVH, int HS)
{
    k->ops->rope_forward(k, qkv, inv_freq, B, T, NH, KVH, HS);
}

void dtrain_k_rope_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, const float *inv_freq,
                            int B, int T, int NH, int KVH, int HS)
{
    k->ops->rope_backward(k, dqkv, inv_freq, B, T, NH, KVH, HS);
}

void dtrain_k_swiglu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                             int N, int F)
{
    k->ops->swiglu_forward(k, out, inp, N, F);
}

void dtrain_k_swiglu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                              struct dtrain_tensor dout, int N, int F)
{
    k->ops->swiglu_backward(k, dinp, inp, dout, N, F);
}

void dtrain_k_axpby_strided(struct dtrain_kernels *k, float *out, int ldo, const float *in, int ldi, float alpha,
                            float beta, int N, int n)
{
    k->ops->axpby_strided(k, out, ldo, in, ldi, alpha, beta, N, n);
}

void dtrain_k_residual_forward(struct dtrain_kernels *k, float *out, const float *a,
                               const float *b, size_t n)
{
    k->ops->residual_forward(k, out, a, b, n);
}

void dtrain_k_softmax_xent_forward(struct dtrain_kernels *k, float *logits_probs, float *losses,
                                   const int32_t *targets, int N, int V, int Vp)
{
    k->ops->softmax_xent_forward(k, logits_probs, losses, targets, N, V, Vp);
}

void dtrain_k_softmax_xent_backward(struct dtrain_kernels *k, float *probs_dlogits,
                                    const int32_t *targets, float dloss, int N, int V, int Vp)
{
    k->ops->softmax_xent_backward(k, probs_dlogits, targets, dloss, N, V, Vp);
}

void dtrain_k_embedding_vp_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                                   const float *wte_local, const float *wpe, int B, int T, int C, int v0, int Vl,
                                   int add_wpe)
{
    k->ops->embedding_vp_forward(k, out, tokens, wte_local, wpe, B, T, C, v0, Vl, add_wpe);
}

void dtrain_k_embedding_vp_backward(struct dtrain_kernels *k, float *dwte_local, float *dwpe, const float *dout,
                                    const int32_t *tokens, int B, int T, int C, int v0, int Vl)
{
    k->ops->embedding_vp_backward(k, dwte_local, dwpe, dout, tokens, B, T, C, v0, Vl);
}

void dtrain_k_xent_vp_rowmax(struct dtrain_kernels *k, float *row_max, const float *logits, int N, int Vl, int nv)
{
    k->ops->xent_vp_rowmax(k, row_max, logits, N, Vl, nv);
}

void dtrain_k_xent_vp_exp(struct dtrain_kernels *k, float *logits, float *sums, const float *all_max, int size,
                          const int32_t *targets, int v0, int N, int Vl, int nv)
{
    k->ops->xent_vp_exp(k, logits, sums, all_max, size, targets, v0, N, Vl, nv);
}

void dtrain_k_xent_vp_finish(struct dtrain_kernels *k, float *logits, float *losses, const float *sums, int N,
                             int Vl, int nv)
{
    k->ops->xent_vp_finish(k, logits, losses, sums, N, Vl, nv);
}

void dtrain_k_xent_vp_backward(struct dtrain_kernels *k, float *probs_dlogits, const int32_t *targets, int v0,
                               float dloss, int N, int Vl, int nv)
{
    k->ops->xent_vp_backward(k, probs_dlogits, targets, v0, dloss, N, Vl, nv);
}

void dtrain_k_adamw_update(struct dtrain_kernels *k, float *params, const float *grads,
                           float *m, float *v, size_t n, const struct dtrain_adamw_args *a)
{
    k->ops->adamw_update(k, params, grads, m, v, n, a);
}

double dtrain_k_sumsq(struct dtrain_kernels *k, const float *x, size_t n)
{
    return k->ops->sumsq(k, x, n);
}

void dtrain_k_nf4_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                                 struct dtrain_nf4 w, const float *bias, int N)
{
    k->ops->nf4_matmul_forward(k, out, inp, w, bias, N);
}

void dtrain_k_nf4_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor dout,
                                  struct dtrain_nf4 w, int N)
{
    k->ops->nf4_matmul_backward(k, dinp, dout, w, N);
}
