/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Warp and block reductions of fixed shape for the CUDA kernels: the same
 * inputs give the same bits on every run (a warp's butterfly, then the
 * warps' results added in order).  Internal to kernels/cuda. */
#ifndef DTRAIN_CUDA_REDUCE_CUH
#define DTRAIN_CUDA_REDUCE_CUH

#include <math.h>

/* The sum / max of v over the warp, in every lane. */
__device__ inline float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The block's sum (or max) of v, in every thread.  Every thread of the
 * block calls it; blockDim.x is a multiple of 32. */
__device__ inline float block_reduce(float v, bool is_max)
{
    __shared__ float shared[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* shared may still be read by the previous call */
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    float r = is_max ? -INFINITY : 0.0f;
    for (int w = 0; w < warps; w++)
        r = is_max ? fmaxf(r, shared[w]) : r + shared[w];
    return r;
}

#endif
