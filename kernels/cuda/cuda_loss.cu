/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Softmax + cross-entropy on the GPU, in place; see dtrain_kernels.h, and
 * its vocabulary-parallel pieces, see dtrain_cuda.h.
 *
 * One block per row.  Block reductions have a fixed shape (each thread's
 * strided sum, a warp butterfly, the warp results added in order), so a
 * row's sums are the same bits every run. */
#include "cuda_backend.h"
#include "cuda_reduce.cuh"
#include "dtrain_cuda.h"

#include <math.h>

namespace {

constexpr int XENT_THREADS = 512;

__global__ void xent_forward_kernel(float *logits, float *losses, const int32_t *targets, int V, int Vp)
{
    float *row = logits + (size_t)blockIdx.x * Vp;
    float target_logit = row[targets[blockIdx.x]];
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        m = fmaxf(m, row[i]);
    m = block_reduce(m, true);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(row[i] - m);
        row[i] = e;
        s += e;
    }
    s = block_reduce(s, false);
    if (threadIdx.x == 0)
        losses[blockIdx.x] = logf(s) - (target_logit - m);
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x)
        row[i] = i < V ? row[i] * inv : 0.0f;
}

/* dlogits = (p - onehot(target)) * dloss over the first nv columns; the
 * target is column t (outside [0, nv): not here); the rest 0. */
__global__ void xent_backward_kernel(float *rows, const int32_t *targets, int v0, float dloss, int Vl, int nv,
                                     size_t total)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        size_t n = i / (size_t)Vl;
        int col = (int)(i % (size_t)Vl);
        if (col >= nv) {
            rows[i] = 0.0f;
            continue;
        }
        float d = rows[i] * dloss;
        if (col == targets[n] - v0)
            d -= dloss;
        rows[i] = d;
    }
}

__global__ void vp_rowmax_kernel(float *row_max, const float *logits, int Vl, int nv)
{
    const float *row = logits + (size_t)blockIdx.x * Vl;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < nv; i += blockDim.x)
        m = fmaxf(m, row[i]);
    m = block_reduce(m, true);
    if (threadIdx.x == 0)
        row_max[blockIdx.x] = m;
}

__global__ void vp_exp_kernel(float *logits, float *sums, const float *all_max, int size, const int32_t *targets,
                              int v0, int N, int Vl, int nv)
{
    int n = blockIdx.x;
    float *row = logits + (size_t)n * Vl;
    float m = -INFINITY;
    for (int r = 0; r < size; r++)
        m = fmaxf(m, all_max[(size_t)r * N + n]);
    int t = targets[n] - v0;
    float target_shifted = (t >= 0 && t < nv) ? row[t] - m : 0.0f;
    __syncthreads(); /* every thread has read row[t] before it changes */
    float s = 0.0f;
    for (int i = threadIdx.x; i < Vl; i += blockDim.x) {
        float e = i < nv ? expf(row[i] - m) : 0.0f;
        row[i] = e;
        s += e;
    }
    s = block_reduce(s, false);
    if (threadIdx.x == 0) {
        sums[n] = s;
        sums[N + n] = target_shifted;
    }
}

__global__ void vp_finish_kernel(float *logits, float *losses, const float *sums, int N, int Vl, int nv)
{
    int n = blockIdx.x;
    float *row = logits + (size_t)n * Vl;
    float s = sums[n];
    if (threadIdx.x == 0)
        losses[n] = logf(s) - sums[N + n];
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < nv; i += blockDim.x)
        row[i] *= inv;
}

} // namespace

extern "C" void cuda_softmax_xent_forward(struct dtrain_kernels *k, float *logits_probs, float *losses,
                                          const int32_t *targets, int N, int V, int Vp)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0)
        return;
    xent_forward_kernel<<<(unsigned)N, XENT_THREADS, 0, ck->stream>>>(logits_probs, losses, targets, V, Vp);
    (void)cuda_check_launch(ck, "cross-entropy forward");
}

extern "C" void cuda_softmax_xent_backward(struct dtrain_kernels *k, float *probs_dlogits, const int32_t *targets,
                                           float dloss, int N, int V, int Vp)
{
    struct cuda_kernels *ck = cuda_of(k);
    size_t total = (size_t)N * Vp;
    if (ck->failed || total == 0)
        return;
    xent_backward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(probs_dlogits, targets, 0, dloss, Vp, V,
                                                                          total);
    (void)cuda_check_launch(ck, "cross-entropy backward");
}

extern "C" void dtrain_cuda_xent_vp_rowmax(struct dtrain_kernels *k, float *row_max, const float *logits, int N,
                                           int Vl, int nv)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0)
        return;
    vp_rowmax_kernel<<<(unsigned)N, XENT_THREADS, 0, ck->stream>>>(row_max, logits, Vl, nv);
    (void)cuda_check_launch(ck, "vocabulary-parallel cross-entropy (row maxima)");
}

extern "C" void dtrain_cuda_xent_vp_exp(struct dtrain_kernels *k, float *logits, float *sums, const float *all_max,
                                        int size, const int32_t *targets, int v0, int N, int Vl, int nv)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0)
        return;
    vp_exp_kernel<<<(unsigned)N, XENT_THREADS, 0, ck->stream>>>(logits, sums, all_max, size, targets, v0, N, Vl,
                                                               nv);
    (void)cuda_check_launch(ck, "vocabulary-parallel cross-entropy (exponentials)");
}

extern "C" void dtrain_cuda_xent_vp_finish(struct dtrain_kernels *k, float *logits, float *losses,
                                           const float *sums, int N, int Vl, int nv)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0)
        return;
    vp_finish_kernel<<<(unsigned)N, XENT_THREADS, 0, ck->stream>>>(logits, losses, sums, N, Vl, nv);
    (void)cuda_check_launch(ck, "vocabulary-parallel cross-entropy (probabilities)");
}

extern "C" void dtrain_cuda_xent_vp_backward(struct dtrain_kernels *k, float *probs_dlogits,
                                             const int32_t *targets, int v0, float dloss, int N, int Vl, int nv)
{
    struct cuda_kernels *ck = cuda_of(k);
    size_t total = (size_t)N * Vl;
    if (ck->failed || total == 0)
        return;
    xent_backward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(probs_dlogits, targets, v0, dloss, Vl,
                                                                          nv, total);
    (void)cuda_check_launch(ck, "vocabulary-parallel cross-entropy backward");
}
