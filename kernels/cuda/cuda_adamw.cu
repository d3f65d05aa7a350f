/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fused AdamW update and the sum of squares on the GPU; see dtrain_kernels.h.
 *
 * AdamW works on the fp32 master weights in place, one pass over params,
 * grads, m and v.  The sum of squares is split into CUDA_SUMSQ_PARTS fixed
 * slices (whatever the device), each summed in double by a fixed tree, and
 * the slices are added in order: the same bits every run. */
#include "cuda_backend.h"

#include <math.h>

namespace {

constexpr int SUMSQ_THREADS = 256;

struct adamw_consts {
    float lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2;
};

__global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n,
                             adamw_consts c)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float g = grads[i] * c.grad_scale;
        float mi = c.beta1 * m[i] + (1.0f - c.beta1) * g;
        float vi = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
        float m_hat = mi / c.bc1, v_hat = vi / c.bc2;
        m[i] = mi;
        v[i] = vi;
        float p = params[i];
        params[i] = p - c.lr * (m_hat / (sqrtf(v_hat) + c.eps) + c.weight_decay * p);
    }
}

/* The block's sum of v (double) in thread 0, by a fixed tree. */
__device__ double block_sum_double(double v)
{
    __shared__ double shared[SUMSQ_THREADS];
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = SUMSQ_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    return shared[0];
}

__global__ void sumsq_parts_kernel(double *parts, const float *x, size_t n)
{
    size_t part = blockIdx.x;
    size_t i0 = n * part / CUDA_SUMSQ_PARTS, i1 = n * (part + 1) / CUDA_SUMSQ_PARTS;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += SUMSQ_THREADS)
        s += (double)x[i] * (double)x[i];
    s = block_sum_double(s);
    if (threadIdx.x == 0)
        parts[part] = s;
}

__global__ void sumsq_total_kernel(double *parts)
{
    double s = 0.0;
    for (int p = threadIdx.x; p < CUDA_SUMSQ_PARTS; p += SUMSQ_THREADS)
        s += parts[p];
    s = block_sum_double(s);
    if (threadIdx.x == 0)
        parts[0] = s;
}

} // namespace

extern "C" void cuda_adamw_update(struct dtrain_kernels *k, float *params, const float *grads, float *m, float *v,
                                  size_t n, const struct dtrain_adamw_args *a)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || n == 0)
        return;
    /* the bias corrections exactly as the CPU kernel computes them */
    adamw_consts c = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->grad_scale,
                      1.0f - powf(a->beta1, (float)a->step), 1.0f - powf(a->beta2, (float)a->step)};
    adamw_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>(params, grads, m, v, n, c);
    (void)cuda_check_launch(ck, "adamw");
}

extern "C" double cuda_sumsq(struct dtrain_kernels *k, const float *x, size_t n)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed)
        return NAN;
    if (n == 0)
        return 0.0;
    sumsq_parts_kernel<<<CUDA_SUMSQ_PARTS, SUMSQ_THREADS, 0, ck->stream>>>(ck->sumsq_parts, x, n);
    if (cuda_check_launch(ck, "sumsq") != 0)
        return NAN;
    sumsq_total_kernel<<<1, SUMSQ_THREADS, 0, ck->stream>>>(ck->sumsq_parts);
    if (cuda_check_launch(ck, "sumsq") != 0 ||
        cuda_check(ck, cudaMemcpyAsync(ck->sumsq_host, ck->sumsq_parts, sizeof(double), cudaMemcpyDeviceToHost,
                                       ck->stream), "sumsq") != 0 ||
        cuda_check(ck, cudaStreamSynchronize(ck->stream), "sumsq") != 0)
        return NAN;
    return *ck->sumsq_host;
}
