/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The Llama-family layers on the CPU: RMS norm, rotary position embedding
 * and SwiGLU (fp32 arithmetic; cpu_typed.c adds the bf16 operands); see
 * dtrain_kernels.h.  Parallel over rows; each row's sums run in fixed
 * lanes in a fixed order, so results do not depend on the thread count. */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <math.h>

static long div_up(long a, long b) { return (a + b - 1) / b; }

/* ------------------------------------------------------------- RMS norm */

struct rmsnorm_args {
    float *out, *rstd, *dinp, *dweight;
    const float *inp, *weight, *dout, *crstd;
    float eps;
    int N, C;
};

CPU_VECTOR_LOOP static void rmsnorm_row(float *restrict o, const float *restrict x, const float *restrict w,
                                        float s, int C)
{
    for (int c = 0; c < C; c++)
        o[c] = x[c] * s * w[c];
}

static void rmsnorm_forward_rows(void *p, long begin, long end, int tid)
{
    const struct rmsnorm_args *a = p;
    (void)tid;
    int C = a->C;
    for (long n = begin; n < end; n++) {
        const float *x = a->inp + (size_t)n * C;
        float ms = cpu_dot_lanes(x, x, C) / (float)C;
        float s = 1.0f / sqrtf(ms + a->eps);
        rmsnorm_row(a->out + (size_t)n * C, x, a->weight, s, C);
        a->rstd[n] = s;
    }
}

void cpu_rmsnorm_forward(struct dtrain_kernels *k, float *out, float *rstd, const float *inp,
                         const float *weight, float eps, int N, int C)
{
    struct rmsnorm_args a = {.out = out, .rstd = rstd, .inp = inp, .weight = weight, .eps = eps,
                             .N = N, .C = C};
    cpu_parallel(k, N, (size_t)C * 3, rmsnorm_forward_rows, &a);
}

/* dx += (dnorm - norm * mean(dnorm * norm)) * rstd, norm = x * rstd,
 * dnorm = weight * dout: the layer norm's gradient without the mean terms. */
CPU_VECTOR_LOOP static float rmsnorm_dnorm_norm(const float *x, const float *w, const float *dy, float s, int C)
{
    float lane[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= C; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++)
            lane[j] += w[i + j] * dy[i + j] * (x[i + j] * s);
    for (; i < C; i++)
        lane[0] += w[i] * dy[i] * (x[i] * s);
    float sum = lane[0];
    for (int j = 1; j < CPU_LANES; j++)
        sum += lane[j];
    return sum;
}

CPU_VECTOR_LOOP static void rmsnorm_dinp_row(float *restrict dx, const float *restrict x, const float *restrict w,
                                             const float *restrict dy, float s, float m, int C)
{
    for (int c = 0; c < C; c++)
        dx[c] += (w[c] * dy[c] - x[c] * s * m) * s;
}

static void rmsnorm_backward_rows(void *p, long begin, long end, int tid)
{
    const struct rmsnorm_args *a = p;
    (void)tid;
    int C = a->C;
    for (long n = begin; n < end; n++) {
        const float *x = a->inp + (size_t)n * C;
        const float *dy = a->dout + (size_t)n * C;
        float s = a->crstd[n];
        float m = rmsnorm_dnorm_norm(x, a->weight, dy, s, C) / (float)C;
        rmsnorm_dinp_row(a->dinp + (size_t)n * C, x, a->weight, dy, s, m, C);
    }
}

/* dweight for column blocks [begin, end), summing rows in order. */
static void rmsnorm_backward_cols(void *p, long begin, long end, int tid)
{
    const struct rmsnorm_args *a = p;
    (void)tid;
    int C = a->C;
    int c0 = (int)(begin * CPU_COLS_PER_ITEM);
    int c1 = (int)(end * CPU_COLS_PER_ITEM);
    if (c1 > C)
        c1 = C;
    for (long n = 0; n < a->N; n++) {
        const float *x = a->inp + (size_t)n * C;
        const float *dy = a->dout + (size_t)n * C;
        float s = a->crstd[n];
        for (int c = c0; c < c1; c++)
            a->dweight[c] += x[c] * s * dy[c];
    }
}

void cpu_rmsnorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int N, int C)
{
    struct rmsnorm_args a = {.dinp = dinp, .dweight = dweight, .dout = dout, .inp = inp, .weight = weight,
                             .crstd = rstd, .N = N, .C = C};
    cpu_parallel(k, N, (size_t)C * 5, rmsnorm_backward_rows, &a);
    cpu_parallel(k, div_up(C, CPU_COLS_PER_ITEM), (size_t)N * CPU_COLS_PER_ITEM * 2,
                 rmsnorm_backward_cols, &a);
}

/* ------------------------------------------------------------- RoPE */

struct rope_args {
    float *qkv;
    const float *inv_freq;
    int T, heads, HS, row, sign;
};

/* The pair (x[i], x[i+half]) of one head rotated by (c[i], s[i]). */
CPU_VECTOR_LOOP static void rope_head(float *restrict x, const float *restrict c, const float *restrict s, int n,
                                      int half)
{
    for (int i = 0; i < n; i++) {
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c[i] - x2 * s[i];
        x[i + half] = x2 * c[i] + x1 * s[i];
    }
}

#define ROPE_CHUNK 64 /* frequencies whose cos and sin one row holds at a time */

static void rope_rows(void *p, long begin, long end, int tid)
{
    const struct rope_args *a = p;
    int half = a->HS / 2;
    float c[ROPE_CHUNK], s[ROPE_CHUNK];
    (void)tid;
    for (long n = begin; n < end; n++) {
        float t = (float)(n % a->T);
        float *row = a->qkv + (size_t)n * a->row;
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            int m = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            for (int i = 0; i < m; i++) {
                float angle = t * a->inv_freq[i0 + i];
                c[i] = cosf(angle);
                s[i] = a->sign * sinf(angle);
            }
            for (int h = 0; h < a->heads; h++)
                rope_head(row + (size_t)h * a->HS + i0, c, s, m, half);
        }
    }
}

void cpu_rope(struct dtrain_kernels *k, float *qkv, const float *inv_freq, int B, int T, int NH, int KVH,
              int HS, int sign)
{
    /* the query heads and the key heads are adjacent: NH + KVH heads from the row's start */
    struct rope_args a = {.qkv = qkv, .inv_freq = inv_freq, .T = T, .heads = NH + KVH, .HS = HS,
                          .row = (NH + 2 * KVH) * HS, .sign = sign};
    cpu_parallel(k, (long)B * T, (size_t)(NH + KVH) * HS * 3, rope_rows, &a);
}

/* ------------------------------------------------------------- SwiGLU */

struct swiglu_args {
    float *out;
    const float *inp, *dout;
    int F;
};

CPU_VECTOR_LOOP static void swiglu_forward_row(float *restrict out, const float *restrict gate,
                                               const float *restrict up, int F)
{
    for (int i = 0; i < F; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + cpu_expf(-g)) * up[i];
    }
}

static void swiglu_forward_rows(void *p, long begin, long end, int tid)
{
    const struct swiglu_args *a = p;
    size_t F = (size_t)a->F;
    (void)tid;
    for (long n = begin; n < end; n++)
        swiglu_forward_row(a->out + n * F, a->inp + n * 2 * F, a->inp + n * 2 * F + F, a->F);
}

void cpu_swiglu_forward(struct dtrain_kernels *k, float *out, const float *inp, int N, int F)
{
    struct swiglu_args a = {.out = out, .inp = inp, .F = F};
    cpu_parallel(k, N, (size_t)F * 16, swiglu_forward_rows, &a);
}

/* sg = sigmoid(g): dup = dout g sg, dgate = dout up sg (1 + g (1 - sg)) */
CPU_VECTOR_LOOP static void swiglu_backward_row(float *restrict dgate, float *restrict dup,
                                                const float *restrict gate, const float *restrict up,
                                                const float *restrict dy, int F)
{
    for (int i = 0; i < F; i++) {
        float g = gate[i];
        float sg = 1.0f / (1.0f + cpu_expf(-g));
        dup[i] = dy[i] * g * sg;
        dgate[i] = dy[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
    }
}

static void swiglu_backward_rows(void *p, long begin, long end, int tid)
{
    const struct swiglu_args *a = p;
    size_t F = (size_t)a->F;
    (void)tid;
    for (long n = begin; n < end; n++) {
        float *d = a->out + n * 2 * F;
        const float *x = a->inp + n * 2 * F;
        swiglu_backward_row(d, d + F, x, x + F, a->dout + n * F, a->F);
    }
}

void cpu_swiglu_backward(struct dtrain_kernels *k, float *dinp, const float *inp, const float *dout, int N, int F)
{
    struct swiglu_args a = {.out = dinp, .inp = inp, .dout = dout, .F = F};
    cpu_parallel(k, N, (size_t)F * 20, swiglu_backward_rows, &a);
}
