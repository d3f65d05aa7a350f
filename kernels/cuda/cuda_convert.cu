/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Small helpers of the matmuls and of the typed operands: bf16 and fp16
 * copies, bf16 widened to fp32, random fill, bias broadcast and the bias
 * gradient; see cuda_backend.h. */
#include "cuda_backend.h"
#include "cuda_elem.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

/* Rows of dout summed by one block of the bias gradient: 64, more when
 * the chunks would not fit a grid's y dimension.  The chunking depends on
 * N only, so the sums come out the same on every device. */
inline int bias_rows(int N)
{
    int rows = 64;
    while ((N + rows - 1) / rows > 65535)
        rows *= 2;
    return rows;
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* Four at a time when both pointers allow 16-byte loads. */
__global__ void to_bf16_vec4_kernel(__nv_bfloat162 *dst, const float4 *src, size_t n4)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = src[i];
        dst[2 * i] = __floats2bfloat162_rn(v.x, v.y);
        dst[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

/* fp32 or bf16 (widened exactly) to fp16 */
template <typename T> __global__ void to_fp16_kernel(__half *dst, const T *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2half_rn(elem_to_f32(src[i])); /* round to nearest even, beyond the range to inf */
}

__global__ void widen_bf16_kernel(float *dst, const __nv_bfloat16 *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __bfloat162float(src[i]);
}

/* splitmix64 of (seed, i): a counter-based generator, no state */
__device__ inline unsigned long long mix64(unsigned long long x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16 *dst, size_t n, unsigned long long seed)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long r = mix64(seed * 0x100000001b3ull + i);
        float u = (float)(r >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
        dst[i] = __float2bfloat16_rn(2.0f * u - 1.0f);
    }
}

template <typename T> __global__ void fill_bias_kernel(T *c, const T *bias, int m, int n, int ldc)
{
    size_t total = (size_t)m * n, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        size_t col = i / (size_t)m, row = i % (size_t)m;
        c[col * (size_t)ldc + row] = bias[row];
    }
}

/* partials[chunk][o] = sum of dout[n][o] over the chunk's rows, in order,
 * in fp32 whatever dout's type */
template <typename T>
__global__ void bias_partials_kernel(float *partials, const T *dout, int N, int OC, int rows)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (o >= OC)
        return;
    int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float s = 0.0f;
    for (int n = n0; n < n1; n++)
        s += elem_to_f32(dout[(size_t)n * OC + o]);
    partials[(size_t)chunk * OC + o] = s;
}

__global__ void bias_sum_kernel(float *dbias, const float *partials, int chunks, int OC)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC)
        return;
    float s = 0.0f;
    for (int c = 0; c < chunks; c++)
        s += partials[(size_t)c * OC + o];
    dbias[o] += s;
}

} // namespace

extern "C" int cuda_to_bf16(struct cuda_kernels *ck, void *dst, const float *src, size_t n)
{
    if (ck->failed)
        return -1;
    if (n == 0)
        return 0;
    if (n % 4 == 0 && (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0)
        to_bf16_vec4_kernel<<<cuda_blocks(n / 4, 256), 256, 0, ck->stream>>>(
            (__nv_bfloat162 *)dst, (const float4 *)src, n / 4);
    else
        to_bf16_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>((__nv_bfloat16 *)dst, src, n);
    return cuda_check_launch(ck, "bf16 conversion");
}

extern "C" int cuda_to_fp16(struct cuda_kernels *ck, void *dst, const float *src, size_t n)
{
    if (ck->failed)
        return -1;
    if (n == 0)
        return 0;
    to_fp16_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>((__half *)dst, src, n);
    return cuda_check_launch(ck, "fp16 conversion");
}

extern "C" int cuda_widen_bf16(struct cuda_kernels *ck, float *dst, const void *src, size_t n)
{
    if (ck->failed)
        return -1;
    if (n == 0)
        return 0;
    widen_bf16_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>(dst, (const __nv_bfloat16 *)src, n);
    return cuda_check_launch(ck, "bf16 widening");
}

extern "C" int cuda_to_half_typed(struct cuda_kernels *ck, void *dst, struct dtrain_tensor src, size_t n)
{
    if (ck->failed)
        return -1;
    if (src.dtype == DTRAIN_F32)
        return cuda_to_half(ck, dst, (const float *)src.data, n);
    if (n == 0)
        return 0;
    if (!ck->fp16) /* bf16 already: the callers use it in place; a copy for completeness */
        return cuda_check(ck, cudaMemcpyAsync(dst, src.data, n * 2, cudaMemcpyDeviceToDevice, ck->stream),
                          "bf16 copy");
    to_fp16_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>((__half *)dst, (const __nv_bfloat16 *)src.data, n);
    return cuda_check_launch(ck, "fp16 conversion");
}

extern "C" int cuda_to_half(struct cuda_kernels *ck, void *dst, const float *src, size_t n)
{
    return ck->fp16 ? cuda_to_fp16(ck, dst, src, n) : cuda_to_bf16(ck, dst, src, n);
}

extern "C" int cuda_fill_uniform_bf16(struct cuda_kernels *ck, void *dst, size_t n, unsigned long long seed)
{
    if (ck->failed)
        return -1;
    fill_uniform_bf16_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>((__nv_bfloat16 *)dst, n, seed);
    return cuda_check_launch(ck, "random fill");
}

extern "C" int cuda_fill_bias(struct cuda_kernels *ck, void *c, const void *bias, enum dtrain_dtype t, int m, int n,
                              int ldc)
{
    if (ck->failed)
        return -1;
    if (t == DTRAIN_BF16)
        fill_bias_kernel<<<cuda_blocks((size_t)m * n, 256), 256, 0, ck->stream>>>(
            (__nv_bfloat16 *)c, (const __nv_bfloat16 *)bias, m, n, ldc);
    else
        fill_bias_kernel<<<cuda_blocks((size_t)m * n, 256), 256, 0, ck->stream>>>((float *)c, (const float *)bias, m,
                                                                                   n, ldc);
    return cuda_check_launch(ck, "bias broadcast");
}

extern "C" size_t cuda_bias_backward_partials(int N, int OC)
{
    int rows = bias_rows(N);
    return (size_t)((N + rows - 1) / rows) * (size_t)OC;
}

extern "C" void cuda_bias_backward(struct cuda_kernels *ck, float *dbias, struct dtrain_tensor dout, int N, int OC,
                                   float *partials)
{
    if (ck->failed || N <= 0 || OC <= 0)
        return;
    int rows = bias_rows(N), chunks = (N + rows - 1) / rows;
    dim3 grid((unsigned)((OC + 255) / 256), (unsigned)chunks);
    if (dout.dtype == DTRAIN_BF16)
        bias_partials_kernel<<<grid, 256, 0, ck->stream>>>(partials, (const __nv_bfloat16 *)dout.data, N, OC, rows);
    else
        bias_partials_kernel<<<grid, 256, 0, ck->stream>>>(partials, (const float *)dout.data, N, OC, rows);
    if (cuda_check_launch(ck, "bias gradient") != 0)
        return;
    bias_sum_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, ck->stream>>>(dbias, partials, chunks, OC);
    (void)cuda_check_launch(ck, "bias gradient");
}
