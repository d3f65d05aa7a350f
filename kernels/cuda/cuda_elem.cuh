/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Element types of the typed operands (dtrain_kernels.h, "Types") in the
 * CUDA kernels: float and __nv_bfloat16, read widened to fp32 (exact) and
 * written rounded from fp32 to nearest even (the CPU's
 * dtrain_bf16_from_f32), so that a kernel templated on the type does its
 * arithmetic in fp32 either way.  Internal to kernels/cuda. */
#ifndef DTRAIN_CUDA_ELEM_CUH
#define DTRAIN_CUDA_ELEM_CUH

#include <cuda_bf16.h>

__device__ inline float elem_to_f32(float x) { return x; }
__device__ inline float elem_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ inline T elem_from_f32(float x);
template <> __device__ inline float elem_from_f32<float>(float x) { return x; }
template <> __device__ inline __nv_bfloat16 elem_from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

#endif
