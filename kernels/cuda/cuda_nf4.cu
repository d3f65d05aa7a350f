/* SPDX-License-Identifier: GPL-2.0-or-later */
/* NF4 weights dequantised on the device into a dense tile of the
 * matmuls' operand type (fp32, bf16 or fp16), for cuda_matmul.c's NF4
 * base linear.  The arithmetic is kernels/dtrain_nf4.c's: the block's
 * scale q * s + offset rounded twice (__fmul_rn, __fadd_rn: nvcc would
 * otherwise fuse them into one FMA), then level * scale; so the fp32 tile
 * is the host's dequantised weights bit for bit. */
#include "cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

__constant__ float nf4_levels[16] = DTRAIN_NF4_LEVELS;

template <typename T> __device__ inline T nf4_out(float x);
template <> __device__ inline float nf4_out<float>(float x) { return x; }
template <> __device__ inline __nv_bfloat16 nf4_out<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ inline __half nf4_out<__half>(float x) { return __float2half_rn(x); }

/* dst (nr, nc), dense: rows r0.., columns c0.. of the (?, cols) weight */
template <typename T>
__global__ void nf4_dequant_kernel(T *dst, const unsigned char *base, size_t scale2_at, size_t qscale_at,
                                   size_t codes_at, int cols, int r0, int nr, int c0, int nc)
{
    const float *scale2 = (const float *)(base + scale2_at);
    const signed char *qscale = (const signed char *)(base + qscale_at);
    const unsigned char *codes = base + codes_at;
    const float offset = *(const float *)base;
    size_t total = (size_t)nr * (size_t)nc, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        size_t r = t / (size_t)nc, c = t % (size_t)nc;
        size_t i = (size_t)(r0 + (int)r) * (size_t)cols + (size_t)c0 + c;
        size_t b = i / DTRAIN_NF4_BLOCK;
        float s = __fadd_rn(__fmul_rn((float)qscale[b], scale2[b / DTRAIN_NF4_SCALE_BLOCK]), offset);
        unsigned byte = codes[i / 2];
        unsigned code = (i & 1) ? byte & 15u : byte >> 4;
        dst[t] = nf4_out<T>(__fmul_rn(nf4_levels[code], s));
    }
}

} // namespace

extern "C" int cuda_nf4_dequantize(struct cuda_kernels *ck, void *dst, cudaDataType_t type, struct dtrain_nf4 w,
                                   int r0, int nr, int c0, int nc)
{
    struct dtrain_nf4_layout l;
    dtrain_nf4_layout(w.rows, w.cols, &l);
    size_t total = (size_t)nr * (size_t)nc;
    unsigned grid = cuda_blocks(total, 256);
    const unsigned char *base = (const unsigned char *)w.data;
    if (type == CUDA_R_16BF)
        nf4_dequant_kernel<<<grid, 256, 0, ck->stream>>>((__nv_bfloat16 *)dst, base, l.scale2_at, l.qscale_at,
                                                         l.codes_at, w.cols, r0, nr, c0, nc);
    else if (type == CUDA_R_16F)
        nf4_dequant_kernel<<<grid, 256, 0, ck->stream>>>((__half *)dst, base, l.scale2_at, l.qscale_at, l.codes_at,
                                                         w.cols, r0, nr, c0, nc);
    else
        nf4_dequant_kernel<<<grid, 256, 0, ck->stream>>>((float *)dst, base, l.scale2_at, l.qscale_at, l.codes_at,
                                                         w.cols, r0, nr, c0, nc);
    return cuda_check_launch(ck, "NF4 dequantisation");
}
