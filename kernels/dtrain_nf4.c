/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The NF4 format of frozen weights on the host: layout, quantisation and
 * dequantisation (dtrain_kernels.h, "NF4 frozen weights").  The cpu and
 * cuda kernels dequantise with the same arithmetic (nf4_block_scale here,
 * its twin in kernels/cuda/cuda_nf4.cu), so both see the same weights bit
 * for bit. */
#include "dtrain_kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

const float dtrain_nf4_levels[16] = DTRAIN_NF4_LEVELS;

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

void dtrain_nf4_layout(int rows, int cols, struct dtrain_nf4_layout *out)
{
    struct dtrain_nf4_layout l;
    l.n = rows > 0 && cols > 0 ? (size_t)rows * (size_t)cols : 0;
    l.blocks = (l.n + DTRAIN_NF4_BLOCK - 1) / DTRAIN_NF4_BLOCK;
    l.groups = (l.blocks + DTRAIN_NF4_SCALE_BLOCK - 1) / DTRAIN_NF4_SCALE_BLOCK;
    l.offset_at = 0;
    l.scale2_at = 64;
    l.qscale_at = l.scale2_at + round64(l.groups * sizeof(float));
    l.codes_at = l.qscale_at + round64(l.blocks);
    l.bytes = l.codes_at + round64((l.n + 1) / 2);
    *out = l;
}

size_t dtrain_nf4_bytes(int rows, int cols)
{
    struct dtrain_nf4_layout l;
    dtrain_nf4_layout(rows, cols, &l);
    return l.bytes;
}

/* The code of x = w / c: how many midpoints between neighbouring levels
 * lie below x (a tie goes down, as bitsandbytes' dQuantizeNF4). */
static unsigned nf4_code(float x)
{
    unsigned code = 0;
    for (int i = 0; i < 15; i++)
        code += x > (dtrain_nf4_levels[i] + dtrain_nf4_levels[i + 1]) * 0.5f;
    return code;
}

int dtrain_nf4_quantize(void *dst, const float *w, int rows, int cols)
{
    struct dtrain_nf4_layout l;
    dtrain_nf4_layout(rows, cols, &l);
    unsigned char *base = dst;
    float *scale2 = (float *)(base + l.scale2_at);
    int8_t *qscale = (int8_t *)(base + l.qscale_at);
    unsigned char *codes = base + l.codes_at;
    memset(dst, 0, l.bytes);

    /* pass 1: the offset, the mean of every block's absmax */
    double sum = 0.0;
    for (size_t b = 0; b < l.blocks; b++) {
        size_t i0 = b * DTRAIN_NF4_BLOCK, i1 = i0 + DTRAIN_NF4_BLOCK < l.n ? i0 + DTRAIN_NF4_BLOCK : l.n;
        float c = 0.0f;
        for (size_t i = i0; i < i1; i++) {
            if (!isfinite(w[i]))
                return -1;
            c = fmaxf(c, fabsf(w[i]));
        }
        sum += c;
    }
    float offset = l.blocks > 0 ? (float)(sum / (double)l.blocks) : 0.0f;
    memcpy(base + l.offset_at, &offset, sizeof offset);

    /* pass 2, a group of 256 blocks at a time: the group's scale, the int8
     * scales, and the codes (chosen with the exact absmax, as bitsandbytes) */
    for (size_t g = 0; g < l.groups; g++) {
        float absmax[DTRAIN_NF4_SCALE_BLOCK];
        size_t b0 = g * DTRAIN_NF4_SCALE_BLOCK;
        size_t nb = b0 + DTRAIN_NF4_SCALE_BLOCK < l.blocks ? DTRAIN_NF4_SCALE_BLOCK : l.blocks - b0;
        float dev = 0.0f;
        for (size_t j = 0; j < nb; j++) {
            size_t i0 = (b0 + j) * DTRAIN_NF4_BLOCK, i1 = i0 + DTRAIN_NF4_BLOCK < l.n ? i0 + DTRAIN_NF4_BLOCK : l.n;
            float c = 0.0f;
            for (size_t i = i0; i < i1; i++)
                c = fmaxf(c, fabsf(w[i]));
            absmax[j] = c;
            dev = fmaxf(dev, fabsf(c - offset));
        }
        float s = dev / 127.0f;
        scale2[g] = s;
        for (size_t j = 0; j < nb; j++) {
            long q = s > 0.0f ? lrintf((absmax[j] - offset) / s) : 0;
            qscale[b0 + j] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
            size_t i0 = (b0 + j) * DTRAIN_NF4_BLOCK, i1 = i0 + DTRAIN_NF4_BLOCK < l.n ? i0 + DTRAIN_NF4_BLOCK : l.n;
            float inv = absmax[j] > 0.0f ? 1.0f / absmax[j] : 0.0f; /* a block of zeros: code 7 (level 0) */
            for (size_t i = i0; i < i1; i++) {
                unsigned code = nf4_code(w[i] * inv);
                codes[i / 2] |= (unsigned char)(i % 2 == 0 ? code << 4 : code);
            }
        }
    }
    return 0;
}

/* c'_b = q_b * s + offset: two roundings, never one FMA (ISO C contracts
 * none), as the cuda kernel's __fmul_rn / __fadd_rn. */
static inline float nf4_block_scale(const int8_t *qscale, const float *scale2, float offset, size_t b)
{
    float t = (float)qscale[b] * scale2[b / DTRAIN_NF4_SCALE_BLOCK];
    return t + offset;
}

void dtrain_nf4_dequantize_tile(float *dst, const void *src, int rows, int cols, int r0, int nr, int c0, int nc)
{
    struct dtrain_nf4_layout l;
    dtrain_nf4_layout(rows, cols, &l);
    const unsigned char *base = src;
    const float *scale2 = (const float *)(base + l.scale2_at);
    const int8_t *qscale = (const int8_t *)(base + l.qscale_at);
    const unsigned char *codes = base + l.codes_at;
    float offset;
    memcpy(&offset, base + l.offset_at, sizeof offset);
    for (int r = 0; r < nr; r++) {
        size_t i = (size_t)(r0 + r) * (size_t)cols + (size_t)c0, end = i + (size_t)nc;
        float *out = dst + (size_t)r * (size_t)nc;
        while (i < end) {
            size_t b = i / DTRAIN_NF4_BLOCK, stop = (b + 1) * DTRAIN_NF4_BLOCK < end ? (b + 1) * DTRAIN_NF4_BLOCK : end;
            float c = nf4_block_scale(qscale, scale2, offset, b);
            for (; i < stop; i++) {
                unsigned byte = codes[i / 2];
                *out++ = dtrain_nf4_levels[i % 2 == 0 ? byte >> 4 : byte & 15u] * c;
            }
        }
    }
}

void dtrain_nf4_dequantize(float *dst, const void *src, int rows, int cols)
{
    dtrain_nf4_dequantize_tile(dst, src, rows, cols, 0, rows, 0, cols);
}
