/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CPU backend: host memory, a thread pool, OpenBLAS. */
#include "cpu_backend.h"
#include "dtrain_blas.h"
#include "dtrain_hugemem.h"

#include <cblas.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS declares this in its cblas.h; other CBLAS headers do not. */
void openblas_set_num_threads(int num_threads);

#define CPU_MAX_THREADS 1024

static enum dtrain_status cpu_create(const struct dtrain_kernels_options *opt, struct dtrain_kernels **out,
                                     char *err, size_t errlen)
{
    int threads = opt->threads > 0 ? opt->threads : 1;
    if (threads > CPU_MAX_THREADS) {
        snprintf(err, errlen, "threads: %d is too many (use 1 to %d)", threads, CPU_MAX_THREADS);
        return DTRAIN_ERR_INPUT;
    }
    struct cpu_kernels *ck = calloc(1, sizeof *ck);
    if (ck == NULL) {
        snprintf(err, errlen, "out of memory creating the CPU kernels");
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = cpu_pool_create(threads, &ck->pool);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start %d threads: %s", threads, strerror(rc));
        free(ck);
        return DTRAIN_ERR_SYSTEM;
    }
    ck->base.ops = &dtrain_kernels_cpu_ops;
    ck->base.threads = threads;
    if (opt->precision == DTRAIN_PRECISION_BF16) {
        const char *mode = getenv("DTRAIN_CPU_ONEDNN");
        if (mode != NULL && (mode[0] == '\0' || strcmp(mode, "auto") == 0))
            mode = NULL;
        if (mode != NULL && strcmp(mode, "off") != 0 && strcmp(mode, "force") != 0) {
            snprintf(err, errlen, "DTRAIN_CPU_ONEDNN=%.40s: give auto (oneDNN's bf16 matmuls on CPUs with "
                     "AMX-BF16 or AVX512-BF16), off or force", mode);
            cpu_pool_destroy(ck->pool);
            free(ck);
            return DTRAIN_ERR_INPUT;
        }
        if (cpu_onednn_create(threads, mode, &ck->onednn, ck->bf16_line, sizeof ck->bf16_line) != 0) {
            snprintf(err, errlen, "out of memory creating oneDNN's matmuls");
            cpu_pool_destroy(ck->pool);
            free(ck);
            return DTRAIN_ERR_SYSTEM;
        }
        /* one line per process, from one process per node, as the BLAS check */
        static int said;
        const char *local = getenv("SLURM_LOCALID");
        if ((local == NULL || strcmp(local, "0") == 0) && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "dtrain: cpu bf16 matmuls: %s\n", ck->bf16_line);
    }
    /* The pool splits every matmul itself (cpu_matmul.c), so OpenBLAS runs
     * one thread per call.  This setting is process-wide in OpenBLAS. */
    openblas_set_num_threads(1);
    *out = &ck->base;
    return 0;
}

static void cpu_destroy(struct dtrain_kernels *k)
{
    struct cpu_kernels *ck = (struct cpu_kernels *)k;
    cpu_pool_destroy(ck->pool);
    cpu_onednn_destroy(ck->onednn);
    free(ck->round_scratch);
    free(ck->typed_scratch);
    free(ck->nf4_scratch);
    free(ck);
}

static enum dtrain_status cpu_error(struct dtrain_kernels *k, char *err, size_t errlen)
{
    const struct cpu_kernels *ck = (const struct cpu_kernels *)k;
    if (!ck->failed)
        return DTRAIN_OK;
    snprintf(err, errlen, "%s", ck->error);
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_cpu_bf16_describe(const struct dtrain_kernels *k, char *buf, size_t len)
{
    const struct cpu_kernels *ck = (const struct cpu_kernels *)k;
    snprintf(buf, len, "%s", k != NULL && k->ops == &dtrain_kernels_cpu_ops ? ck->bf16_line : "");
}

/* Zeroed and 64-byte aligned (dtrain_hugemem.h): untouched memory costs no
 * RAM (a frozen base's gradient vector, freed when LoRA is set, is never
 * written), and big tensors sit on huge pages, which the GEMMs' packing
 * and the comm backend's direct reads of a peer's tensors walk faster. */
static void *cpu_alloc(struct dtrain_kernels *k, size_t bytes)
{
    (void)k;
    return dtrain_hugemem_alloc(bytes);
}

static void cpu_free(struct dtrain_kernels *k, void *p)
{
    (void)k;
    dtrain_hugemem_free(p);
}

static void cpu_copy(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes)
{
    (void)k;
    if (bytes > 0)
        memmove(dst, src, bytes);
}

static void cpu_zero(struct dtrain_kernels *k, void *p, size_t bytes)
{
    (void)k;
    if (bytes > 0)
        memset(p, 0, bytes);
}

static void cpu_sync(struct dtrain_kernels *k)
{
    (void)k;
}

static void *cpu_host_alloc(struct dtrain_kernels *k, size_t bytes)
{
    return cpu_alloc(k, bytes);
}

const struct dtrain_kernel_ops dtrain_kernels_cpu_ops = {
    .name = "cpu",
    .fp16 = 1,
    .host_memory = 1,
    .bf16 = 1, /* bf16 operands emulated exactly on fp32 GEMMs (cpu_matmul.c) */
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_typed_matmul_forward,
    .matmul_backward = cpu_typed_matmul_backward,
    .attention_forward = cpu_typed_attention_forward,
    .attention_saved = cpu_attention_saved,
    .attention_scratch = cpu_attention_scratch,
    .attention_backward = cpu_typed_attention_backward,
    .gelu_forward = cpu_typed_gelu_forward,
    .gelu_backward = cpu_typed_gelu_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_typed_rope_forward,
    .rope_backward = cpu_typed_rope_backward,
    .swiglu_forward = cpu_typed_swiglu_forward,
    .swiglu_backward = cpu_typed_swiglu_backward,
    .axpby_strided = cpu_axpby_strided,
    .residual_forward = cpu_residual_forward,
    .embedding_vp_forward = cpu_embedding_vp_forward,
    .embedding_vp_backward = cpu_embedding_vp_backward,
    .xent_vp_rowmax = cpu_xent_vp_rowmax,
    .xent_vp_exp = cpu_xent_vp_exp,
    .xent_vp_finish = cpu_xent_vp_finish,
    .xent_vp_backward = cpu_xent_vp_backward,
    .softmax_xent_forward = cpu_softmax_xent_forward,
    .softmax_xent_backward = cpu_softmax_xent_backward,
    .adamw_update = cpu_adamw_update,
    .sumsq = cpu_sumsq,
    .nf4_matmul_forward = cpu_typed_nf4_matmul_forward,
    .nf4_matmul_backward = cpu_typed_nf4_matmul_backward,
    .error = cpu_error,
};

void cpu_kernels_fail(struct dtrain_kernels *k, const char *fmt, ...)
{
    struct cpu_kernels *ck = (struct cpu_kernels *)k;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ck->error, sizeof ck->error, fmt, ap);
    va_end(ap);
    ck->failed = 1;
}
