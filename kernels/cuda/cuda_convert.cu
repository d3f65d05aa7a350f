/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Small helpers of the matmuls: bf16 copies, random fill, bias broadcast
 * and the bias gradient; see cuda_backend.h. */
#include "cuda_backend.h"

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

__global__ void to_fp16_kernel(__half *dst, const float *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2half_rn(src[i]); /* round to nearest even, beyond the range to inf */
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

__global__ void fill_bias_kernel(float *c, const float *bias, int m, int n, int ldc)
{
    size_t total = (size_t)m * n, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        size_t col = i / (size_t)m, row = i % (size_t)m;
        c[col * (size_t)ldc + row] = bias[row];
    }
}

/* partials[chunk][o] = sum of dout[n][o] over the chunk's rows, in order */
__global__ void bias_partials_kernel(float *partials, const float *dout, int N, int OC, int rows)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (o >= OC)
        return;
    int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float s = 0.0f;
    for (int n = n0; n < n1; n++)
        s += dout[(size_t)n * OC + o];
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

extern "C" int cuda_fill_bias(struct cuda_kernels *ck, void *c, const float *bias, int m, int n, int ldc)
{
    if (ck->failed)
        return -1;
    fill_bias_kernel<<<cuda_blocks((size_t)m * n, 256), 256, 0, ck->stream>>>((float *)c, bias, m, n, ldc);
    return cuda_check_launch(ck, "bias broadcast");
}

extern "C" size_t cuda_bias_backward_partials(int N, int OC)
{
    int rows = bias_rows(N);
    return (size_t)((N + rows - 1) / rows) * (size_t)OC;
}

extern "C" void cuda_bias_backward(struct cuda_kernels *ck, float *dbias, const float *dout, int N, int OC,
                                   float *partials)
{
    if (ck->failed || N <= 0 || OC <= 0)
        return;
    int rows = bias_rows(N), chunks = (N + rows - 1) / rows;
    dim3 grid((unsigned)((OC + 255) / 256), (unsigned)chunks);
    bias_partials_kernel<<<grid, 256, 0, ck->stream>>>(partials, dout, N, OC, rows);
    if (cuda_check_launch(ck, "bias gradient") != 0)
        return;
    bias_sum_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, ck->stream>>>(dbias, partials, chunks, OC);
    (void)cuda_check_launch(ck, "bias gradient");
}
