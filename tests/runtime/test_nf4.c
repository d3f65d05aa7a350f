/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The NF4 format of frozen weights and the cpu kernels of the NF4 base
 * linear (dtrain_kernels.h, "NF4 frozen weights").
 *
 *  - the 16 levels are bitsandbytes' create_normal_map(0.9677083), computed
 *    here from the normal quantile (bisection on erfc), not copied;
 *  - quantise then dequantise: every weight within the format's bound
 *    HALF_GAP * c_b + s_g / 2 (+ fp32 rounding), every block's scale
 *    within s_g / 2, on normal weights, uniform weights with outliers, odd
 *    sizes (a short last block, several scale groups) and the weights of
 *    a GPT-2 model dtrain initialises (constant layer-norm weights, zero
 *    biases);
 *  - the forward and the input gradient against a double-precision matmul
 *    of the dequantised weights (within fp32 rounding), with several tiles,
 *    a bias, bf16 operands and 1 or 3 threads. */
#include "dtrain_model.h"
#include "dtrain_kernels.h"
#include "tap.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xmalloc(size_t n)
{
    void *p = malloc(n > 0 ? n : 1);
    if (p == NULL) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    return p;
}

/* ------------------------------------------------------------------ random */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform01(void) /* (0, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}

static double normal01(void)
{
    return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01());
}

/* ------------------------------------------------------------------ levels */

/* the standard normal quantile: bisection on Phi(x) = erfc(-x / sqrt 2) / 2 */
static double norm_ppf(double p)
{
    double lo = -10.0, hi = 10.0;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* bitsandbytes' create_normal_map(offset=0.9677083, use_extra_value=True):
 * 8 positive values Q(p) at p = linspace(offset, 0.5, 9)[:-1], 7 negative
 * -Q(p) at p = linspace(offset, 0.5, 8)[:-1], and 0; sorted, divided by
 * the largest (Q(offset)). */
static void test_levels(void)
{
    const double offset = 0.9677083;
    double v[16];
    int n = 0;
    for (int i = 0; i < 7; i++)
        v[n++] = -norm_ppf(offset - i * (offset - 0.5) / 7.0);
    v[n++] = 0.0;
    for (int i = 7; i >= 0; i--)
        v[n++] = norm_ppf(offset - i * (offset - 0.5) / 8.0);
    /* v is ascending: -Q(offset) .. 0 .. Q(offset) */
    double top = norm_ppf(offset), worst = 0.0, half_gap = 0.0;
    for (int i = 0; i < 16; i++) {
        double want = v[i] / top;
        worst = fmax(worst, fabs(want - (double)dtrain_nf4_levels[i]));
    }
    for (int i = 0; i < 15; i++)
        half_gap = fmax(half_gap, 0.5 * ((double)dtrain_nf4_levels[i + 1] - dtrain_nf4_levels[i]));
    diag("NF4 levels: largest difference from the normal-quantile definition %.2e", worst);
    /* 2e-6: torch builds the probabilities in fp32 (a step of 6e-8 in p
     * moves Q(p)/Q(offset) by at most 5e-7) */
    ok(worst <= 2e-6, "the 16 NF4 levels are bitsandbytes' create_normal_map (largest difference %.2e)", worst);
    ok(dtrain_nf4_levels[7] == 0.0f && dtrain_nf4_levels[0] == -1.0f && dtrain_nf4_levels[15] == 1.0f,
       "level 7 is exactly 0, levels 0 and 15 exactly -1 and 1");
    ok(fabs(half_gap - (double)DTRAIN_NF4_HALF_GAP) <= 1e-7,
       "DTRAIN_NF4_HALF_GAP is half the largest gap between levels (%.8f)", half_gap);
}

/* ------------------------------------------------------------------ round trip */

struct bound_stats {
    double worst_ratio;     /* largest error / its bound */
    double worst_rel;       /* largest |w - deq| / c_b */
    double worst_scale_rel; /* largest |c_b - c'_b| / c_b */
    double rms_rel;         /* root mean square of (w - deq) / c_b */
};

/* Quantise w (rows, cols), dequantise, hold every weight to the bound. */
static int round_trip(const float *w, int rows, int cols, const char *what, struct bound_stats *st)
{
    struct dtrain_nf4_layout l;
    dtrain_nf4_layout(rows, cols, &l);
    unsigned char *buf = xmalloc(l.bytes);
    float *deq = xmalloc(l.n * sizeof *deq);
    if (!ok(dtrain_nf4_quantize(buf, w, rows, cols) == 0, "%s: quantised", what)) {
        free(buf);
        free(deq);
        return -1;
    }
    dtrain_nf4_dequantize(deq, buf, rows, cols);
    float offset;
    memcpy(&offset, buf + l.offset_at, sizeof offset);
    const float *scale2 = (const float *)(buf + l.scale2_at);
    const int8_t *qscale = (const int8_t *)(buf + l.qscale_at);
    size_t bad = 0, bad_scale = 0;
    double sq = 0.0;
    memset(st, 0, sizeof *st);
    for (size_t b = 0; b < l.blocks; b++) {
        size_t i0 = b * DTRAIN_NF4_BLOCK, i1 = i0 + DTRAIN_NF4_BLOCK < l.n ? i0 + DTRAIN_NF4_BLOCK : l.n;
        double c = 0.0;
        for (size_t i = i0; i < i1; i++)
            c = fmax(c, fabs((double)w[i]));
        double s = scale2[b / DTRAIN_NF4_SCALE_BLOCK];
        double cq = (double)qscale[b] * s + offset;
        /* fp32 rounding: of w / c, of q * s + offset and of level * c' */
        double slack = 8.0 * FLT_EPSILON * (c + fabs((double)offset) + 127.0 * s);
        double scale_bound = s / 2.0 + slack;
        if (fabs(c - cq) > scale_bound)
            bad_scale++;
        if (c > 0)
            st->worst_scale_rel = fmax(st->worst_scale_rel, fabs(c - cq) / c);
        double bound = (double)DTRAIN_NF4_HALF_GAP * c + scale_bound;
        for (size_t i = i0; i < i1; i++) {
            double e = fabs((double)w[i] - (double)deq[i]);
            if (e > bound)
                bad++;
            if (bound > 0)
                st->worst_ratio = fmax(st->worst_ratio, e / bound);
            if (c > 0) {
                st->worst_rel = fmax(st->worst_rel, e / c);
                sq += (e / c) * (e / c);
            }
        }
    }
    st->rms_rel = sqrt(sq / (double)l.n);
    diag("%s: %zu weights in %zu bytes (%.4f a weight); error / bound at most %.3f; |w - deq| / c_b at most %.4f, "
         "rms %.4f; |c_b - c'_b| / c_b at most %.2e",
         what, l.n, l.bytes, (double)l.bytes / (double)l.n, st->worst_ratio, st->worst_rel, st->rms_rel,
         st->worst_scale_rel);
    ok(bad_scale == 0, "%s: every block's double-quantised scale within s/2 (%zu outside)", what, bad_scale);
    ok(bad == 0, "%s: every weight within HALF_GAP * c_b + s/2 (%zu outside, worst at %.3f of the bound)", what, bad,
       st->worst_ratio);
    free(buf);
    free(deq);
    return 0;
}

static void test_round_trips(void)
{
    struct bound_stats st;
    int rows = 300, cols = 100; /* 469 blocks: two scale groups */
    size_t n = (size_t)rows * cols;
    float *w = xmalloc(n * sizeof *w);

    for (size_t i = 0; i < n; i++)
        w[i] = (float)(0.02 * normal01());
    round_trip(w, rows, cols, "normal weights (std 0.02, 300 x 100)", &st);
    ok(st.rms_rel < 0.1, "normal weights: rms error %.4f of the block's absmax", st.rms_rel);

    for (size_t i = 0; i < n; i++)
        w[i] = (float)(2.0 * uniform01() - 1.0) * (i % 997 == 0 ? 50.0f : 1.0f); /* an outlier in some blocks */
    round_trip(w, rows, cols, "uniform weights with outliers x50", &st);

    /* scales far apart in one group: a block of tiny weights among large ones */
    for (size_t i = 0; i < n; i++)
        w[i] = (float)normal01() * (i / DTRAIN_NF4_BLOCK % 7 == 0 ? 1e-4f : 1.0f);
    round_trip(w, rows, cols, "blocks of 1e-4 among blocks of 1", &st);

    round_trip(w, 7, 9, "63 weights (one short block)", &st);
    round_trip(w, 1, 1, "one weight", &st);
    memset(w, 0, 200 * sizeof *w);
    round_trip(w, 2, 100, "zeros", &st);
    free(w);

    /* the memory formula: ~0.516 byte a weight on a large matrix */
    struct dtrain_nf4_layout l;
    dtrain_nf4_layout(4096, 4096, &l);
    size_t want = 64 + ((l.groups * 4 + 63) & ~(size_t)63) + ((l.blocks + 63) & ~(size_t)63) + l.n / 2;
    ok(l.bytes == want && dtrain_nf4_bytes(4096, 4096) == want && l.blocks == l.n / 64 && l.groups == l.blocks / 256,
       "4096 x 4096: %zu bytes, %.4f a weight (formula %zu)", l.bytes, (double)l.bytes / (double)l.n, want);
    ok(fabs((double)l.bytes / (double)l.n - (0.5 + 1.0 / 64 + 4.0 / 16384)) < 1e-4,
       "the bytes a weight are 0.5 + 1/64 + 4/16384 on a large matrix");
}

/* The weights of a GPT-2 model dtrain initialises with its seed, as one
 * vector: normal matrices (std 0.02, the residual projections scaled),
 * layer-norm weights of 1, zero biases. */
static void test_model_weights(void)
{
    const struct dtrain_model_config cfg = {
        .max_seq_len = 64, .vocab_size = 500, .padded_vocab_size = 512,
        .num_layers = 2, .num_heads = 4, .channels = 128,
    };
    size_t n = dtrain_model_param_count(&cfg);
    float *w = xmalloc(n * sizeof *w);
    dtrain_model_init_params(&cfg, 1337, w);
    struct bound_stats st;
    char what[128];
    snprintf(what, sizeof what, "a GPT-2 model's initialised weights (L=2 C=128, %zu, seed 1337)", n);
    round_trip(w, 1, (int)n, what, &st);
    ok(st.worst_rel > 0.0, "the model's weights are not all exactly representable (a real test)");
    free(w);
}

/* ------------------------------------------------------------------ kernels */

/* the largest |got - want| / (sum over the dot product of |x||w|) */
static double dot_error(const float *got, const double *want, const double *mag, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (mag[i] > 0 ? mag[i] : 1.0);
        if (!(e == e))
            return INFINITY;
        worst = fmax(worst, e);
    }
    return worst;
}

static void test_kernels(int threads, int N, int IC, int OC, enum dtrain_dtype t)
{
    struct dtrain_kernels_options opt = {.threads = threads};
    struct dtrain_kernels *k = NULL;
    char err[256] = "";
    if (!ok(dtrain_kernels_create("cpu", &opt, &k, err, sizeof err) == DTRAIN_OK, "cpu kernels (%s)", err))
        return;
    const char *nt = dtrain_dtype_name(t);
    size_t nw = (size_t)OC * IC, es = dtrain_dtype_size(t);
    float *w = xmalloc(nw * sizeof *w), *deq = xmalloc(nw * sizeof *deq), *bias = xmalloc((size_t)OC * sizeof *bias);
    float *x = xmalloc((size_t)N * IC * sizeof *x), *dy = xmalloc((size_t)N * OC * sizeof *dy);
    for (size_t i = 0; i < nw; i++)
        w[i] = (float)(0.05 * normal01());
    for (int i = 0; i < OC; i++)
        bias[i] = (float)normal01();
    for (size_t i = 0; i < (size_t)N * IC; i++)
        x[i] = (float)normal01();
    for (size_t i = 0; i < (size_t)N * OC; i++)
        dy[i] = (float)normal01();
    /* bf16 operands: the values the kernel reads */
    void *xt = xmalloc((size_t)N * IC * es), *dyt = xmalloc((size_t)N * OC * es);
    void *yt = xmalloc((size_t)N * OC * es), *dxt = xmalloc((size_t)N * IC * es);
    for (size_t i = 0; i < (size_t)N * IC; i++) {
        if (t == DTRAIN_BF16) {
            ((uint16_t *)xt)[i] = dtrain_bf16_from_f32(x[i]);
            x[i] = dtrain_bf16_to_f32(((uint16_t *)xt)[i]);
        } else
            ((float *)xt)[i] = x[i];
    }
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        if (t == DTRAIN_BF16) {
            ((uint16_t *)dyt)[i] = dtrain_bf16_from_f32(dy[i]);
            dy[i] = dtrain_bf16_to_f32(((uint16_t *)dyt)[i]);
        } else
            ((float *)dyt)[i] = dy[i];
    }
    struct dtrain_nf4 q = {xmalloc(dtrain_nf4_bytes(OC, IC)), OC, IC};
    if (dtrain_nf4_quantize(q.data, w, OC, IC) != 0)
        ok(0, "quantise");
    dtrain_nf4_dequantize(deq, q.data, OC, IC);
    memset(yt, 0xff, (size_t)N * OC * es); /* NaN: a forgotten element shows */
    memset(dxt, 0xff, (size_t)N * IC * es);
    dtrain_k_nf4_matmul_forward(k, dtrain_tensor_of(t, yt), dtrain_tensor_of(t, xt), q, bias, N);
    dtrain_k_nf4_matmul_backward(k, dtrain_tensor_of(t, dxt), dtrain_tensor_of(t, dyt), q, N);
    ok(dtrain_kernels_error(k, err, sizeof err) == DTRAIN_OK, "no kernel error (%s)", err);

    double *want = xmalloc((size_t)N * (IC > OC ? IC : OC) * sizeof *want);
    double *mag = xmalloc((size_t)N * (IC > OC ? IC : OC) * sizeof *mag);
    float *got = xmalloc((size_t)N * (IC > OC ? IC : OC) * sizeof *got);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o], a = fabs((double)bias[o]);
            for (int i = 0; i < IC; i++) {
                s += (double)x[(size_t)n * IC + i] * deq[(size_t)o * IC + i];
                a += fabs((double)x[(size_t)n * IC + i] * deq[(size_t)o * IC + i]);
            }
            want[(size_t)n * OC + o] = s;
            mag[(size_t)n * OC + o] = a;
            got[(size_t)n * OC + o] = t == DTRAIN_BF16 ? dtrain_bf16_to_f32(((uint16_t *)yt)[(size_t)n * OC + o])
                                                       : ((float *)yt)[(size_t)n * OC + o];
        }
    /* fp32: sums of IC products within IC * 2^-24 of their magnitude (a loose
     * 4e-6 here); bf16: plus the result's rounding, 2^-8 of |y| <= mag */
    double thr = t == DTRAIN_BF16 ? 4.0e-3 : 1e-5;
    double e = dot_error(got, want, mag, (size_t)N * OC);
    ok(e <= thr, "forward %s N=%d IC=%d OC=%d, %d thread(s): error %.2e of the dot products' magnitude (threshold %.0e)",
       nt, N, IC, OC, threads, e, thr);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double s = 0.0, a = 0.0;
            for (int o = 0; o < OC; o++) {
                s += (double)dy[(size_t)n * OC + o] * deq[(size_t)o * IC + i];
                a += fabs((double)dy[(size_t)n * OC + o] * deq[(size_t)o * IC + i]);
            }
            want[(size_t)n * IC + i] = s;
            mag[(size_t)n * IC + i] = a;
            got[(size_t)n * IC + i] = t == DTRAIN_BF16 ? dtrain_bf16_to_f32(((uint16_t *)dxt)[(size_t)n * IC + i])
                                                       : ((float *)dxt)[(size_t)n * IC + i];
        }
    e = dot_error(got, want, mag, (size_t)N * IC);
    ok(e <= thr, "input gradient %s N=%d IC=%d OC=%d, %d thread(s): error %.2e (threshold %.0e)", nt, N, IC, OC,
       threads, e, thr);
    free(w); free(deq); free(bias); free(x); free(dy); free(xt); free(dyt); free(yt); free(dxt);
    free(want); free(mag); free(got); free(q.data);
    dtrain_kernels_destroy(k);
}

int main(void)
{
    test_levels();
    test_round_trips();
    test_model_weights();
    /* 1000 x 300: two row tiles forward, two column tiles backward (1 MiB each) */
    test_kernels(1, 37, 1000, 300, DTRAIN_F32);
    test_kernels(3, 37, 1000, 300, DTRAIN_F32);
    test_kernels(3, 16, 50, 33, DTRAIN_BF16); /* odd sizes, bf16 operands */
    return tap_done();
}
