/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Embedding, layer norm, GELU and residual on the CPU; see dtrain_kernels.h. */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <math.h>
#include <string.h>

static long div_up(long a, long b) { return (a + b - 1) / b; }

/* ------------------------------------------------------------- encoder */

struct encoder_args {
    float *out, *dwte, *dwpe;
    const float *wte, *wpe, *dout;
    const int32_t *tokens;
    int B, T, C;
};

/* rows bt in [begin, end): out[bt] = wte[token] + wpe[t] (no wpe: wte[token]) */
static void encoder_forward_rows(void *p, long begin, long end, int tid)
{
    const struct encoder_args *a = p;
    (void)tid;
    for (long bt = begin; bt < end; bt++) {
        long t = bt % a->T;
        const float *wte_row = a->wte + (size_t)a->tokens[bt] * a->C;
        float *o = a->out + (size_t)bt * a->C;
        if (a->wpe == NULL) {
            memcpy(o, wte_row, (size_t)a->C * sizeof(float));
            continue;
        }
        const float *wpe_row = a->wpe + (size_t)t * a->C;
        for (int c = 0; c < a->C; c++)
            o[c] = wte_row[c] + wpe_row[c];
    }
}

void cpu_encoder_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                         const float *wte, const float *wpe, int B, int T, int C)
{
    struct encoder_args a = {.out = out, .wte = wte, .wpe = wpe, .tokens = tokens,
                             .B = B, .T = T, .C = C};
    cpu_parallel(k, (long)B * T, (size_t)C, encoder_forward_rows, &a);
}

/* Column blocks [begin, end) of CPU_COLS_PER_ITEM: every row adds its slice
 * in row order, so two tokens landing on one wte row never race. */
static void encoder_backward_cols(void *p, long begin, long end, int tid)
{
    const struct encoder_args *a = p;
    (void)tid;
    int c0 = (int)(begin * CPU_COLS_PER_ITEM);
    int c1 = (int)(end * CPU_COLS_PER_ITEM);
    if (c1 > a->C)
        c1 = a->C;
    long BT = (long)a->B * a->T;
    for (long bt = 0; bt < BT; bt++) {
        long t = bt % a->T;
        const float *d = a->dout + (size_t)bt * a->C;
        float *dwte_row = a->dwte + (size_t)a->tokens[bt] * a->C;
        cpu_add_into(dwte_row + c0, d + c0, c1 - c0);
        if (a->dwpe != NULL)
            cpu_add_into(a->dwpe + (size_t)t * a->C + c0, d + c0, c1 - c0);
    }
}

void cpu_encoder_backward(struct dtrain_kernels *k, float *dwte, float *dwpe,
                          const float *dout, const int32_t *tokens, int B, int T, int C)
{
    struct encoder_args a = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .tokens = tokens,
                             .B = B, .T = T, .C = C};
    cpu_parallel(k, div_up(C, CPU_COLS_PER_ITEM), (size_t)B * T * CPU_COLS_PER_ITEM,
                 encoder_backward_cols, &a);
}

/* ------------------------------------------------------------- layer norm */

#define LAYERNORM_EPS 1e-5f

struct layernorm_args {
    float *out, *mean, *rstd, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout;
    const float *cmean, *crstd;
    int N, C;
};

/* One row: its mean and rstd, and out = (x - mean) * rstd * weight + bias.
 * The sums in lanes (cpu_math.h). */
CPU_VECTOR_LOOP static void layernorm_row(float *restrict o, float *mean, float *rstd, const float *restrict x,
                                          const float *restrict w, const float *restrict b, int C)
{
    float m = cpu_sum_lanes(x, C) / (float)C;
    float lane[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= C; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++)
            lane[j] += (x[i + j] - m) * (x[i + j] - m);
    for (; i < C; i++)
        lane[0] += (x[i] - m) * (x[i] - m);
    float var = lane[0];
    for (int j = 1; j < CPU_LANES; j++)
        var += lane[j];
    var /= (float)C;
    float s = 1.0f / sqrtf(var + LAYERNORM_EPS);
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

static void layernorm_forward_rows(void *p, long begin, long end, int tid)
{
    const struct layernorm_args *a = p;
    (void)tid;
    int C = a->C;
    for (long n = begin; n < end; n++)
        layernorm_row(a->out + (size_t)n * C, &a->mean[n], &a->rstd[n], a->inp + (size_t)n * C, a->weight,
                      a->bias, C);
}

void cpu_layernorm_forward(struct dtrain_kernels *k, float *out, float *mean, float *rstd,
                           const float *inp, const float *weight, const float *bias, int N, int C)
{
    struct layernorm_args a = {.out = out, .mean = mean, .rstd = rstd, .inp = inp,
                               .weight = weight, .bias = bias, .N = N, .C = C};
    cpu_parallel(k, N, (size_t)C * 4, layernorm_forward_rows, &a);
}

/* dinp for one row:
 * dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),
 * with norm = (x - mean) * rstd and dnorm = weight * dout; the two means'
 * sums in lanes (cpu_math.h). */
CPU_VECTOR_LOOP static void layernorm_dinp_row(float *restrict dx, const float *restrict x,
                                               const float *restrict dy, const float *restrict w, float m,
                                               float s, int C)
{
    float lane[CPU_LANES] = {0}, lane_norm[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= C; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++) {
            float dnorm = w[i + j] * dy[i + j];
            lane[j] += dnorm;
            lane_norm[j] += dnorm * (x[i + j] - m) * s;
        }
    for (; i < C; i++) {
        float dnorm = w[i] * dy[i];
        lane[0] += dnorm;
        lane_norm[0] += dnorm * (x[i] - m) * s;
    }
    float dnorm_mean = lane[0], dnorm_norm_mean = lane_norm[0];
    for (int j = 1; j < CPU_LANES; j++) {
        dnorm_mean += lane[j];
        dnorm_norm_mean += lane_norm[j];
    }
    dnorm_mean /= (float)C;
    dnorm_norm_mean /= (float)C;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s;
        float dnorm = w[c] * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

static void layernorm_backward_rows(void *p, long begin, long end, int tid)
{
    const struct layernorm_args *a = p;
    (void)tid;
    int C = a->C;
    for (long n = begin; n < end; n++)
        layernorm_dinp_row(a->dinp + (size_t)n * C, a->inp + (size_t)n * C, a->dout + (size_t)n * C, a->weight,
                           a->cmean[n], a->crstd[n], C);
}

/* One row's share of dweight and dbias, n columns (restrict and cloned:
 * vector code; each column's sum keeps its order). */
CPU_VECTOR_LOOP static void layernorm_dweight_row(float *restrict dw, float *restrict db, const float *restrict x,
                                                  const float *restrict dy, float m, float s, int n)
{
    for (int c = 0; c < n; c++) {
        dw[c] += (x[c] - m) * s * dy[c];
        db[c] += dy[c];
    }
}

/* dweight, dbias for column blocks [begin, end), summing rows in order. */
static void layernorm_backward_cols(void *p, long begin, long end, int tid)
{
    const struct layernorm_args *a = p;
    (void)tid;
    int C = a->C;
    int c0 = (int)(begin * CPU_COLS_PER_ITEM);
    int c1 = (int)(end * CPU_COLS_PER_ITEM);
    if (c1 > C)
        c1 = C;
    for (long n = 0; n < a->N; n++)
        layernorm_dweight_row(a->dweight + c0, a->dbias + c0, a->inp + (size_t)n * C + c0,
                              a->dout + (size_t)n * C + c0, a->cmean[n], a->crstd[n], c1 - c0);
}

void cpu_layernorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int N, int C)
{
    struct layernorm_args a = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout,
                               .inp = inp, .weight = weight, .cmean = mean, .crstd = rstd,
                               .N = N, .C = C};
    cpu_parallel(k, N, (size_t)C * 6, layernorm_backward_rows, &a);
    cpu_parallel(k, div_up(C, CPU_COLS_PER_ITEM), (size_t)N * CPU_COLS_PER_ITEM * 2,
                 layernorm_backward_cols, &a);
}

/* ------------------------------------------------------------- GELU, residual */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE 0.044715f

/* tanh(u) = 1 - 2 / (exp(2u) + 1) with cpu_expf (cpu_math.h), which the
 * compiler vectorizes: the absolute error (~1e-7) is all GELU needs; exp(2u)
 * held at e^88 for large u still gives 1. */
static inline float fast_tanhf(float u)
{
    return 1.0f - 2.0f / (cpu_expf(2.0f * u) + 1.0f);
}

struct elementwise_args {
    float *out;
    const float *x, *y;
    size_t n;
};

static void elems_range(const struct elementwise_args *a, long begin, long end,
                        size_t *i0, size_t *i1)
{
    *i0 = (size_t)begin * CPU_ELEMS_PER_ITEM;
    *i1 = (size_t)end * CPU_ELEMS_PER_ITEM;
    if (*i1 > a->n)
        *i1 = a->n;
}

/* out and x may be the same array (in place), so they are not restrict:
 * the compiler checks for overlap once per call. */
CPU_VECTOR_LOOP static void gelu_forward_span(float *out, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + fast_tanhf(GELU_SCALE * (v + GELU_CUBE * v * v * v)));
    }
}

static void gelu_forward_elems(void *p, long begin, long end, int tid)
{
    const struct elementwise_args *a = p;
    size_t i0, i1;
    (void)tid;
    elems_range(a, begin, end, &i0, &i1);
    gelu_forward_span(a->out + i0, a->x + i0, i1 - i0);
}

void cpu_gelu_forward(struct dtrain_kernels *k, float *out, const float *inp, size_t n)
{
    struct elementwise_args a = {.out = out, .x = inp, .n = n};
    cpu_parallel(k, (long)div_up((long)n, CPU_ELEMS_PER_ITEM), CPU_ELEMS_PER_ITEM * 16,
                 gelu_forward_elems, &a);
}

/* d/dx = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
CPU_VECTOR_LOOP static void gelu_backward_span(float *dinp, const float *x, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float th = fast_tanhf(GELU_SCALE * (v + GELU_CUBE * v * v * v));
        float local = 0.5f * (1.0f + th) +
                      0.5f * v * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * v * v);
        dinp[i] = local * dout[i];
    }
}

static void gelu_backward_elems(void *p, long begin, long end, int tid)
{
    const struct elementwise_args *a = p;
    size_t i0, i1;
    (void)tid;
    elems_range(a, begin, end, &i0, &i1);
    gelu_backward_span(a->out + i0, a->x + i0, a->y + i0, i1 - i0);
}

void cpu_gelu_backward(struct dtrain_kernels *k, float *dinp, const float *inp,
                       const float *dout, size_t n)
{
    struct elementwise_args a = {.out = dinp, .x = inp, .y = dout, .n = n};
    cpu_parallel(k, (long)div_up((long)n, CPU_ELEMS_PER_ITEM), CPU_ELEMS_PER_ITEM * 20,
                 gelu_backward_elems, &a);
}

/* GELU on bf16 tensors: each item's elements a chunk at a time, widened
 * into cache, the fp32 span applied, rounded back once: the fp32 kernel's
 * values rounded (cpu_typed.c's rule), without writing and reading fp32
 * copies of the tensors.  A chunk is read whole before it is written, so
 * out may alias inp (dinp dout). */
#define GELU_BF16_CHUNK 512

struct gelu_bf16_args {
    uint16_t *out;
    const uint16_t *x, *dout;
    size_t n;
};

static void gelu_bf16_elems(void *p, long begin, long end, int tid)
{
    const struct gelu_bf16_args *a = p;
    float x[GELU_BF16_CHUNK], y[GELU_BF16_CHUNK], d[GELU_BF16_CHUNK];
    size_t i0 = (size_t)begin * CPU_ELEMS_PER_ITEM, i1 = (size_t)end * CPU_ELEMS_PER_ITEM;
    (void)tid;
    if (i1 > a->n)
        i1 = a->n;
    for (size_t i = i0; i < i1; i += GELU_BF16_CHUNK) {
        size_t len = i1 - i < GELU_BF16_CHUNK ? i1 - i : GELU_BF16_CHUNK;
        cpu_bf16_widen_span(x, a->x + i, len);
        if (a->dout != NULL) {
            cpu_bf16_widen_span(d, a->dout + i, len);
            gelu_backward_span(y, x, d, len);
        } else {
            gelu_forward_span(y, x, len);
        }
        cpu_bf16_narrow_span(a->out + i, y, len);
    }
}

void cpu_gelu_forward_bf16(struct dtrain_kernels *k, uint16_t *out, const uint16_t *inp, size_t n)
{
    struct gelu_bf16_args a = {.out = out, .x = inp, .n = n};
    cpu_parallel(k, (long)div_up((long)n, CPU_ELEMS_PER_ITEM), CPU_ELEMS_PER_ITEM * 16, gelu_bf16_elems, &a);
}

void cpu_gelu_backward_bf16(struct dtrain_kernels *k, uint16_t *dinp, const uint16_t *inp, const uint16_t *dout,
                            size_t n)
{
    struct gelu_bf16_args a = {.out = dinp, .x = inp, .dout = dout, .n = n};
    cpu_parallel(k, (long)div_up((long)n, CPU_ELEMS_PER_ITEM), CPU_ELEMS_PER_ITEM * 20, gelu_bf16_elems, &a);
}

struct axpby_args {
    float *out;
    const float *in;
    int ldo, ldi, n;
    float alpha, beta;
};

static void axpby_rows(void *p, long begin, long end, int tid)
{
    const struct axpby_args *a = p;
    (void)tid;
    for (long r = begin; r < end; r++) {
        float *o = a->out + (size_t)r * a->ldo;
        const float *x = a->in + (size_t)r * a->ldi;
        if (a->beta == 0.0f)
            for (int j = 0; j < a->n; j++)
                o[j] = a->alpha * x[j];
        else
            for (int j = 0; j < a->n; j++)
                o[j] = a->beta * o[j] + a->alpha * x[j];
    }
}

void cpu_axpby_strided(struct dtrain_kernels *k, float *out, int ldo, const float *in, int ldi, float alpha,
                       float beta, int N, int n)
{
    struct axpby_args a = {.out = out, .in = in, .ldo = ldo, .ldi = ldi, .n = n, .alpha = alpha, .beta = beta};
    if (N > 0 && n > 0)
        cpu_parallel(k, N, (size_t)n, axpby_rows, &a);
}

static void residual_elems(void *p, long begin, long end, int tid)
{
    const struct elementwise_args *a = p;
    size_t i0, i1;
    (void)tid;
    elems_range(a, begin, end, &i0, &i1);
    for (size_t i = i0; i < i1; i++)
        a->out[i] = a->x[i] + a->y[i];
}

void cpu_residual_forward(struct dtrain_kernels *k, float *out, const float *a_in,
                          const float *b_in, size_t n)
{
    struct elementwise_args a = {.out = out, .x = a_in, .y = b_in, .n = n};
    cpu_parallel(k, (long)div_up((long)n, CPU_ELEMS_PER_ITEM), CPU_ELEMS_PER_ITEM,
                 residual_elems, &a);
}
