/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CUDA backend: device, stream, cuBLASLt handle, memory, errors, and
 * the table of operations; see cuda_backend.h. */
#include "cuda_backend.h"
#include "dtrain_cuda.h"
#include "dtrain_placement_env.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuBLASLt's workspace: 32 MiB is what NVIDIA recommends for Hopper. */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)

int cuda_fail(struct cuda_kernels *ck, const char *fmt, ...)
{
    if (ck->failed)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ck->error, sizeof ck->error, fmt, ap);
    va_end(ap);
    ck->failed = 1;
    fprintf(stderr, "dtrain: cuda: %s\n", ck->error);
    return -1;
}

int cuda_check(struct cuda_kernels *ck, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    return cuda_fail(ck, "%s: %s", what, cudaGetErrorString(e));
}

int cuda_check_launch(struct cuda_kernels *ck, const char *what)
{
    return cuda_check(ck, cudaGetLastError(), what);
}

void *cuda_scratch(struct cuda_kernels *ck, size_t bytes)
{
    if (ck->failed)
        return NULL;
    if (bytes <= ck->scratch_bytes && ck->scratch != NULL)
        return ck->scratch;
    /* Stream-ordered: work queued before still sees the old block. */
    size_t want = bytes + bytes / 4;
    if (ck->scratch != NULL &&
        cuda_check(ck, cudaFreeAsync(ck->scratch, ck->stream), "freeing scratch") != 0)
        return NULL;
    ck->scratch = NULL;
    ck->scratch_bytes = 0;
    if (cuda_check(ck, cudaMallocAsync(&ck->scratch, want, ck->stream), "scratch memory") != 0)
        return NULL;
    ck->scratch_bytes = want;
    return ck->scratch;
}

int dtrain_cuda_device_count(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        if (why != NULL)
            snprintf(why, whylen, "no CUDA device (%s)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees none");
        /* a failed query leaves a sticky "last error" behind; clear it */
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

static void cuda_destroy(struct dtrain_kernels *k)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->stream != NULL)
        (void)cudaStreamSynchronize(ck->stream);
    if (ck->scratch != NULL)
        (void)cudaFree(ck->scratch);
    cuda_gemm_cache_destroy(ck->gemm);
    if (ck->lt != NULL)
        (void)cublasLtDestroy(ck->lt);
    if (ck->lt_workspace != NULL)
        (void)cudaFree(ck->lt_workspace);
    if (ck->sumsq_parts != NULL)
        (void)cudaFree(ck->sumsq_parts);
    if (ck->sumsq_host != NULL)
        (void)cudaFreeHost(ck->sumsq_host);
    if (ck->stream != NULL)
        (void)cudaStreamDestroy(ck->stream);
    free(ck);
}

static enum dtrain_status cuda_create(const struct dtrain_kernels_options *opt, struct dtrain_kernels **out,
                                      char *err, size_t errlen)
{
    const char *what = NULL;
    cudaError_t e = cudaSuccess;
    *out = NULL;
    if (dtrain_cuda_device_count(err, errlen) == 0)
        return DTRAIN_ERR_SYSTEM;
    struct cuda_kernels *ck = calloc(1, sizeof *ck);
    if (ck == NULL) {
        snprintf(err, errlen, "out of memory creating the CUDA kernels");
        return DTRAIN_ERR_SYSTEM;
    }
    ck->base.ops = &dtrain_kernels_cuda_ops;
    ck->base.threads = 1;
    ck->bf16 = opt->precision == DTRAIN_PRECISION_BF16;
    ck->fp16 = opt->precision == DTRAIN_PRECISION_FP16;
    /* The task's GPU: device DTRAIN_CUDA_DEVICE of CUDA_VISIBLE_DEVICES as
     * the SPANK plugin set them (LOCAL_RANK with --dtrain-gpu-visibility=all,
     * 0 with one), else the device the process already chose. */
    int device = dtrain_task_cuda_device(dtrain_cuda_device_count(NULL, 0));
    if (device >= 0 && (e = cudaSetDevice(device)) != cudaSuccess) {
        what = "cudaSetDevice";
        goto fail_cuda;
    }
    if ((e = cudaGetDevice(&ck->device)) != cudaSuccess) {
        what = "cudaGetDevice";
        goto fail_cuda;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, ck->device)) != cudaSuccess) {
        what = "cudaGetDeviceProperties";
        goto fail_cuda;
    }
    if (prop.major < 8) {
        snprintf(err, errlen, "CUDA device %d (%s) is sm_%d%d: the cuda kernels need sm_80 or "
                 "newer (bf16 tensor cores)", ck->device, prop.name, prop.major, prop.minor);
        goto fail;
    }
    ck->sm_count = prop.multiProcessorCount;
    ck->smem_optin = prop.sharedMemPerBlockOptin;
    if ((e = cudaStreamCreateWithFlags(&ck->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        what = "cudaStreamCreate";
        goto fail_cuda;
    }
    ck->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    if ((e = cudaMalloc(&ck->lt_workspace, ck->lt_workspace_bytes)) != cudaSuccess) {
        what = "cuBLASLt workspace";
        goto fail_cuda;
    }
    if ((e = cudaMalloc((void **)&ck->sumsq_parts, CUDA_SUMSQ_PARTS * sizeof(double))) != cudaSuccess) {
        what = "sumsq partials";
        goto fail_cuda;
    }
    if ((e = cudaMallocHost((void **)&ck->sumsq_host, sizeof(double))) != cudaSuccess) {
        what = "pinned host memory";
        goto fail_cuda;
    }
    cublasStatus_t s = cublasLtCreate(&ck->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasLtCreate: %s", cublasLtGetStatusString(s));
        goto fail;
    }
    if (cuda_gemm_cache_create(&ck->gemm) != 0) {
        snprintf(err, errlen, "out of memory creating the CUDA kernels");
        goto fail;
    }
    *out = &ck->base;
    return DTRAIN_OK;
fail_cuda:
    snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
fail:
    cuda_destroy(&ck->base);
    return DTRAIN_ERR_SYSTEM;
}

static void *cuda_alloc(struct dtrain_kernels *k, size_t bytes)
{
    struct cuda_kernels *ck = cuda_of(k);
    void *p = NULL;
    if (bytes == 0 || bytes > SIZE_MAX - 256)
        return NULL;
    /* Out of memory is the caller's to report (NULL), not a sticky fault. */
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    /* zeroed, and ordered before anything queued on the stream later */
    if (cuda_check(ck, cudaMemsetAsync(p, 0, bytes, ck->stream), "zeroing new memory") != 0 ||
        cuda_check(ck, cudaStreamSynchronize(ck->stream), "zeroing new memory") != 0) {
        (void)cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free(struct dtrain_kernels *k, void *p)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (p == NULL)
        return;
    /* cudaFree waits for the device; work queued on p has finished after it */
    (void)cuda_check(ck, cudaFree(p), "cudaFree");
}

static void cuda_upload(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || bytes == 0)
        return;
    /* synchronous: the caller may reuse src at once */
    if (cuda_check(ck, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ck->stream),
                   "upload") == 0)
        (void)cuda_check(ck, cudaStreamSynchronize(ck->stream), "upload");
}

static void cuda_download(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (bytes == 0)
        return;
    if (ck->failed) {
        /* never hand back stale bytes as results */
        memset(dst, 0xff, bytes);
        return;
    }
    if (cuda_check(ck, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ck->stream),
                   "download") != 0 ||
        cuda_check(ck, cudaStreamSynchronize(ck->stream), "download") != 0)
        memset(dst, 0xff, bytes);
}

static void cuda_copy(struct dtrain_kernels *k, void *dst, const void *src, size_t bytes)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || bytes == 0)
        return;
    const char *d = dst, *s = src;
    if (d < s + bytes && s < d + bytes && d != s) {
        /* cudaMemcpyAsync leaves overlapping regions undefined: through scratch */
        void *tmp = cuda_scratch(ck, bytes);
        if (tmp == NULL)
            return;
        if (cuda_check(ck, cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, ck->stream), "copy") != 0)
            return;
        src = tmp;
    }
    (void)cuda_check(ck, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ck->stream), "copy");
}

static void *cuda_host_alloc(struct dtrain_kernels *k, size_t bytes)
{
    void *p = NULL;
    (void)k;
    if (bytes == 0 || cudaMallocHost(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of pinned memory is the caller's to report */
        return NULL;
    }
    return p;
}

static void cuda_host_free(struct dtrain_kernels *k, void *p)
{
    (void)cuda_check(cuda_of(k), cudaFreeHost(p), "cudaFreeHost");
}

static void cuda_zero(struct dtrain_kernels *k, void *p, size_t bytes)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || bytes == 0)
        return;
    (void)cuda_check(ck, cudaMemsetAsync(p, 0, bytes, ck->stream), "zero");
}

static void cuda_sync(struct dtrain_kernels *k)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed)
        return;
    (void)cuda_check(ck, cudaStreamSynchronize(ck->stream), "sync");
}

static enum dtrain_status cuda_error(struct dtrain_kernels *k, char *err, size_t errlen)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (!ck->failed) {
        /* a fault of work already finished shows up here without a sync */
        cudaError_t e = cudaStreamQuery(ck->stream);
        if (e != cudaSuccess && e != cudaErrorNotReady)
            (void)cuda_check(ck, e, "device");
    }
    if (!ck->failed)
        return DTRAIN_OK;
    snprintf(err, errlen, "%s", ck->error);
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_cuda_device_name(struct dtrain_kernels *k, char *out, size_t outlen)
{
    struct cuda_kernels *ck = cuda_of(k);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ck->device) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(out, outlen, "CUDA device %d", ck->device);
        return;
    }
    snprintf(out, outlen, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
}

void *dtrain_cuda_stream(struct dtrain_kernels *k)
{
    return cuda_of(k)->stream;
}

const struct dtrain_kernel_ops dtrain_kernels_cuda_ops = {
    .name = "cuda",
    .bf16 = 1,
    .default_bf16 = 1,
    .fp16 = 1,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .sync = cuda_sync,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stream = dtrain_cuda_stream,
    .encoder_forward = cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .attention_forward = cuda_attention_forward,
    .attention_saved = cuda_attention_saved,
    .attention_scratch = cuda_attention_scratch,
    .attention_backward = cuda_attention_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .axpby_strided = cuda_axpby_strided,
    .residual_forward = cuda_residual_forward,
    .softmax_xent_forward = cuda_softmax_xent_forward,
    .softmax_xent_backward = cuda_softmax_xent_backward,
    .embedding_vp_forward = cuda_embedding_vp_forward,
    .embedding_vp_backward = cuda_embedding_vp_backward,
    .xent_vp_rowmax = dtrain_cuda_xent_vp_rowmax,
    .xent_vp_exp = dtrain_cuda_xent_vp_exp,
    .xent_vp_finish = dtrain_cuda_xent_vp_finish,
    .xent_vp_backward = dtrain_cuda_xent_vp_backward,
    .adamw_update = cuda_adamw_update,
    .sumsq = cuda_sumsq,
    .nf4_matmul_forward = cuda_nf4_matmul_forward,
    .nf4_matmul_backward = cuda_nf4_matmul_backward,
    .error = cuda_error,
};
