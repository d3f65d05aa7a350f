/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Elementwise math for the CPU kernels' hot loops, written so that the
 * compiler vectorizes them.
 *
 * cpu_expf(x)  e^x within 2 ulp for x in [-87.3, 88] (Cephes' expf: x = n ln2
 *              + r, a degree-6 polynomial in r, 2^n from the exponent bits),
 *              without branches or library calls, so a loop of it becomes
 *              SIMD code; glibc's expf is a call per element.  Inputs below
 *              -87.3 give about 1e-38 (not 0 or a subnormal), above 88 give
 *              e^88 (not inf): the kernels take e^x of x <= 0 (softmax) or
 *              of GELU's tanh argument, where either is the same.  NaN stays
 *              NaN.  The same bits on every CPU and libm.
 *
 * CPU_VECTOR_LOOP  on a function of such loops: built for AVX-512, AVX2
 *              and plain x86-64, the best one chosen when the library loads
 *              (GCC's target_clones).  The clones give the same bits: the
 *              kernels are compiled as ISO C (no FMA contraction) and the
 *              only reductions are in fixed lanes (below), whose order the
 *              compiler keeps. */
#ifndef DTRAIN_CPU_MATH_H
#define DTRAIN_CPU_MATH_H

#include "dtrain_kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CPU_VECTOR_LOOP __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_VECTOR_LOOP
#endif

static inline float cpu_expf(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer, kept in the low bits */
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.33654f ? -87.33654f : x;
    float kf = x * 1.44269504088896341f + magic;
    uint32_t kbits;
    memcpy(&kbits, &kf, sizeof kbits);
    kf -= magic;                    /* n = round(x / ln2), in [-126, 127] */
    float r = x - kf * 0.693359375f; /* ln2 in two parts: r exact to a few ulp */
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t scale_bits = (kbits << 23) + 0x3f800000u; /* 2^n: the low bits of kbits hold n */
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}

/* row[i] = e^(row[i] - shift) for i < n: softmax's exponentials, apart
 * from its sum so that the loop vectorizes (the sum keeps its order). */
CPU_VECTOR_LOOP static inline void cpu_exp_shifted(float *row, int n, float shift)
{
    for (int i = 0; i < n; i++)
        row[i] = cpu_expf(row[i] - shift);
}

/* Sums of rows in CPU_LANES fixed lanes: element i goes to lane i % 8
 * (the last n % 8 to lane 0), then the lanes are added in lane order.  Each
 * lane keeps its order, so the compiler vectorizes the loop without
 * reassociating anything: the same bits on every clone, thread count and
 * CPU, where one running sum is a chain of dependent adds (layer norm's
 * forward on 1024 x 256 took 3.6 times as long). */
#define CPU_LANES 8

/* The sum of row[0..n) in lanes. */
CPU_VECTOR_LOOP static inline float cpu_sum_lanes(const float *row, int n)
{
    float lane[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++)
            lane[j] += row[i + j];
    for (; i < n; i++)
        lane[0] += row[i];
    float s = lane[0];
    for (int j = 1; j < CPU_LANES; j++)
        s += lane[j];
    return s;
}

/* The sum of x[i] * y[i] for i < n in lanes. */
CPU_VECTOR_LOOP static inline float cpu_dot_lanes(const float *x, const float *y, int n)
{
    float lane[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++)
            lane[j] += x[i + j] * y[i + j];
    for (; i < n; i++)
        lane[0] += x[i] * y[i];
    float s = lane[0];
    for (int j = 1; j < CPU_LANES; j++)
        s += lane[j];
    return s;
}

/* The largest of row[0..n) (-inf when n is 0; NaNs are passed over, as a
 * loop of `if (row[i] > m) m = row[i]` does), in 8 lanes so that it
 * vectorizes: the maximum of a set does not depend on the order it is
 * taken in (a +0 and a -0 may come out either way; x - 0 is x for both). */
CPU_VECTOR_LOOP static inline float cpu_max_of(const float *row, int n)
{
    float lane[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] = row[i + j] > lane[j] ? row[i + j] : lane[j];
    for (; i < n; i++)
        lane[0] = row[i] > lane[0] ? row[i] : lane[0];
    float m = lane[0];
    for (int j = 1; j < 8; j++)
        m = lane[j] > m ? lane[j] : m;
    return m;
}

/* row[i] *= scale for i < n */
CPU_VECTOR_LOOP static inline void cpu_scale(float *row, int n, float scale)
{
    for (int i = 0; i < n; i++)
        row[i] *= scale;
}

/* dst[i] = src[i] rounded to bf16, kept in an fp32 (dst may be src) */
CPU_VECTOR_LOOP static inline void cpu_bf16_round_span(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)dtrain_bf16_from_f32(src[i]) << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}

/* dst[i] = src[i]'s bf16 bits (dtrain_bf16_from_f32) */
CPU_VECTOR_LOOP static inline void cpu_bf16_narrow_span(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dtrain_bf16_from_f32(src[i]);
}

/* dst[i] = the bf16 src[i] as an fp32 (exact) */
CPU_VECTOR_LOOP static inline void cpu_bf16_widen_span(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}

/* acc[i] += src[i] for i < n (distinct arrays) */
CPU_VECTOR_LOOP static inline void cpu_add_into(float *restrict acc, const float *restrict src, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] += src[i];
}

/* acc[i] += the bf16 src[i] widened, for i < n: cpu_add_into of the
 * widened values, the same sums */
CPU_VECTOR_LOOP static inline void cpu_add_bf16_into(float *restrict acc, const uint16_t *restrict src, int n)
{
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        float x;
        memcpy(&x, &u, sizeof x);
        acc[i] += x;
    }
}

#endif
