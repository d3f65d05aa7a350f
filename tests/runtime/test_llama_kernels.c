/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The Llama-family kernels on the cpu backend (dtrain_kernels.h): RMS norm,
 * rotary position embedding, SwiGLU, grouped-query attention and the
 * optional position embedding.  Each forward against a double-precision
 * reference written here, each backward against that reference's analytic
 * gradient and against central finite differences of its forward (the
 * loss is sum(out * R), so dout = R).  Accumulating outputs are pre-filled
 * with 0.5, overwritten ones with 1000 ("+=" and "=").  Then bf16 operands
 * (the fp32 result rounded, bit for bit) and 1 against 3 threads. */
#include "dtrain_kernels.h"
#include "gradcheck.h"
#include "ref_double.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-3   /* max |float analytic - double FD| / max |FD| */
#define FWD_TOL 1e-5
#define ACC 0.5f
#define GARBAGE 1000.0f

static double *dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    if (p == NULL)
        abort();
    return p;
}

/* max |backend - ref| (inf on a NaN) */
static double max_diff(struct dtrain_kernels *k, const float *dev, const double *ref, size_t n, double minus)
{
    double *h = dalloc(n), m = 0;
    from_backend(k, h, dev, n, minus);
    for (size_t i = 0; i < n; i++)
        m = isnan(h[i]) ? INFINITY : fmax(m, fabs(h[i] - ref[i]));
    free(h);
    return m;
}

static double max_abs(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* ------------------------------------------------------------------ RMS norm */

struct rms_ctx { double *x, *w, *r, *out; double eps; int N, C; };

static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, double eps, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++)
            ss += xr[c] * xr[c];
        double s = 1.0 / sqrt(ss / C + eps);
        if (rstd != NULL)
            rstd[n] = s;
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = xr[c] * s * w[c];
    }
}

static double rms_loss(void *p)
{
    struct rms_ctx *c = p;
    ref_rmsnorm(c->out, NULL, c->x, c->w, c->eps, c->N, c->C);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_rmsnorm(struct dtrain_kernels *k, int N, int C)
{
    size_t NC = (size_t)N * C;
    struct rms_ctx c = {dalloc(NC), dalloc(C), dalloc(NC), dalloc(NC), 1e-5, N, C};
    fill_uniform(c.x, NC, 100, 2.0);
    fill_uniform(c.w, C, 101, 0.5);
    for (int i = 0; i < C; i++)
        c.w[i] += 1.0;
    fill_uniform(c.r, NC, 102, 1.0);
    double *rstd_ref = dalloc(N), *dx_ref = dalloc(NC), *dw_ref = dalloc(C);
    ref_rmsnorm(c.out, rstd_ref, c.x, c.w, c.eps, N, C);
    /* analytic: dx = s (w dy - x s^2 mean(w dy x)), dw = sum_n x s dy */
    for (int n = 0; n < N; n++) {
        const double *x = c.x + (size_t)n * C, *dy = c.r + (size_t)n * C;
        double s = rstd_ref[n], m = 0;
        for (int i = 0; i < C; i++)
            m += c.w[i] * dy[i] * x[i];
        m /= C;
        for (int i = 0; i < C; i++) {
            dx_ref[(size_t)n * C + i] = s * (c.w[i] * dy[i] - x[i] * s * s * m);
            dw_ref[i] += x[i] * s * dy[i];
        }
    }
    float *x = to_backend(k, c.x, NC), *w = to_backend(k, c.w, C), *dout = to_backend(k, c.r, NC);
    float *out = backend_filled(k, NC, GARBAGE), *rstd = backend_filled(k, N, GARBAGE);
    dtrain_k_rmsnorm_forward(k, out, rstd, x, w, (float)c.eps, N, C);
    double e_out = max_diff(k, out, c.out, NC, 0), e_rstd = max_diff(k, rstd, rstd_ref, N, 0) / max_abs(rstd_ref, N);
    ok(e_out < FWD_TOL && e_rstd < 1e-6, "rmsnorm forward (N %d, C %d): out and rstd match the reference (%.1e, %.1e)",
       N, C, e_out, e_rstd);

    float *dx = backend_filled(k, NC, ACC), *dw = backend_filled(k, C, ACC);
    dtrain_k_rmsnorm_backward(k, dx, dw, dout, x, w, rstd, N, C);
    double ex = max_diff(k, dx, dx_ref, NC, ACC) / max_abs(dx_ref, NC);
    double ew = max_diff(k, dw, dw_ref, C, ACC) / max_abs(dw_ref, C);
    ok(ex < 1e-5 && ew < 1e-5, "rmsnorm backward (+=) matches the analytic double gradient (%.1e, %.1e)", ex, ew);
    double *ax = dalloc(NC), *aw = dalloc(C);
    from_backend(k, ax, dx, NC, ACC);
    from_backend(k, aw, dw, C, ACC);
    double fx = fd_max_rel_error(rms_loss, &c, c.x, NC, ax), fw = fd_max_rel_error(rms_loss, &c, c.w, C, aw);
    ok(fx < TOL, "rmsnorm backward dinp (+=) vs finite differences: rel error %.2e", fx);
    ok(fw < TOL, "rmsnorm backward dweight (+=) vs finite differences: rel error %.2e", fw);
    free(ax); free(aw); free(rstd_ref); free(dx_ref); free(dw_ref);
    free(c.x); free(c.w); free(c.r); free(c.out);
    float *bufs[] = {x, w, dout, out, rstd, dx, dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dtrain_k_free(k, bufs[i]);
}

/* ------------------------------------------------------------------ RoPE */

/* Llama's frequencies, computed in float as a caller would */
static float *inv_freq_host(int HS)
{
    float *f = malloc((size_t)HS / 2 * sizeof(float));
    if (f == NULL)
        abort();
    for (int i = 0; i < HS / 2; i++)
        f[i] = (float)(1.0 / pow(10000.0, 2.0 * i / HS));
    return f;
}

struct rope_ctx { double *x, *r, *out; const float *freq; int B, T, NH, KVH, HS; double sign; };

/* rotate the q and k heads of x (double) into out; the angle is the
 * kernel's fp32 product, its cos and sin in double */
static void ref_rope(double *out, const double *x, const float *freq, int B, int T, int NH, int KVH, int HS,
                     double sign)
{
    size_t row = (size_t)(NH + 2 * KVH) * HS;
    memcpy(out, x, (size_t)B * T * row * sizeof(double));
    for (int n = 0; n < B * T; n++)
        for (int h = 0; h < NH + KVH; h++)
            for (int i = 0; i < HS / 2; i++) {
                double a = (double)((float)(n % T) * freq[i]);
                double cs = cos(a), sn = sign * sin(a);
                const double *xi = x + n * row + (size_t)h * HS;
                double *o = out + n * row + (size_t)h * HS;
                o[i] = xi[i] * cs - xi[i + HS / 2] * sn;
                o[i + HS / 2] = xi[i + HS / 2] * cs + xi[i] * sn;
            }
}

static double rope_loss(void *p)
{
    struct rope_ctx *c = p;
    ref_rope(c->out, c->x, c->freq, c->B, c->T, c->NH, c->KVH, c->HS, 1.0);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * (c->NH + 2 * c->KVH) * c->HS);
}

static void test_rope(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS, int fd)
{
    size_t n = (size_t)B * T * (NH + 2 * KVH) * HS;
    float *freq = inv_freq_host(HS);
    struct rope_ctx c = {dalloc(n), dalloc(n), dalloc(n), freq, B, T, NH, KVH, HS, 1.0};
    fill_uniform(c.x, n, 110, 1.5);
    fill_uniform(c.r, n, 111, 1.0);
    float *dfreq = dtrain_k_alloc(k, (size_t)HS / 2 * sizeof(float));
    dtrain_k_upload(k, dfreq, freq, (size_t)HS / 2 * sizeof(float));
    float *x = to_backend(k, c.x, n), *d = to_backend(k, c.r, n);
    double *xf = dalloc(n), *rf = dalloc(n); /* the float inputs, in double */
    from_backend(k, xf, x, n, 0);
    from_backend(k, rf, d, n, 0);
    dtrain_k_rope_forward(k, dtrain_tensor_f32(x), dfreq, B, T, NH, KVH, HS);
    ref_rope(c.out, xf, freq, B, T, NH, KVH, HS, 1.0);
    double e = max_diff(k, x, c.out, n, 0);
    /* the values untouched, bit for bit */
    double *hx = dalloc(n);
    from_backend(k, hx, x, n, 0);
    int v_same = 1;
    size_t row = (size_t)(NH + 2 * KVH) * HS;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (size_t i = (size_t)(NH + KVH) * HS; i < row; i++)
            v_same &= hx[r * row + i] == xf[r * row + i];
    ok(e < 1e-5, "rope forward (B %d T %d NH %d KVH %d HS %d) matches the reference: %.1e", B, T, NH, KVH, HS, e);
    ok(v_same, "rope forward leaves the values untouched");
    dtrain_k_rope_backward(k, dtrain_tensor_f32(d), dfreq, B, T, NH, KVH, HS);
    double *g = dalloc(n);
    ref_rope(g, rf, freq, B, T, NH, KVH, HS, -1.0);
    e = max_diff(k, d, g, n, 0);
    ok(e < 1e-5, "rope backward: the inverse rotation of dqkv in place (%.1e)", e);
    /* forward then backward gives the input back */
    dtrain_k_rope_backward(k, dtrain_tensor_f32(x), dfreq, B, T, NH, KVH, HS);
    e = max_diff(k, x, xf, n, 0);
    ok(e < 1e-5, "rope backward undoes rope forward (%.1e)", e);
    if (fd) {
        from_backend(k, g, d, n, 0);
        double fe = fd_max_rel_error(rope_loss, &c, c.x, n, g);
        ok(fe < TOL, "rope backward dqkv vs finite differences: rel error %.2e", fe);
    }
    free(g); free(hx); free(xf); free(rf); free(c.x); free(c.r); free(c.out); free(freq);
    dtrain_k_free(k, dfreq); dtrain_k_free(k, x); dtrain_k_free(k, d);
}

/* ------------------------------------------------------------------ SwiGLU */

struct swiglu_ctx { double *x, *r, *out; int N, F; };

static void ref_swiglu(double *out, const double *x, int N, int F)
{
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            double g = x[(size_t)n * 2 * F + i], u = x[(size_t)n * 2 * F + F + i];
            out[(size_t)n * F + i] = g / (1.0 + exp(-g)) * u;
        }
}

static double swiglu_loss(void *p)
{
    struct swiglu_ctx *c = p;
    ref_swiglu(c->out, c->x, c->N, c->F);
    return dot_d(c->out, c->r, (size_t)c->N * c->F);
}

static void test_swiglu(struct dtrain_kernels *k, int N, int F)
{
    size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
    struct swiglu_ctx c = {dalloc(ni), dalloc(no), dalloc(no), N, F};
    fill_uniform(c.x, ni, 120, 6.0); /* gates far into both tails */
    fill_uniform(c.r, no, 121, 1.0);
    double *g = dalloc(ni);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            double gt = c.x[(size_t)n * 2 * F + i], u = c.x[(size_t)n * 2 * F + F + i], dy = c.r[(size_t)n * F + i];
            double sg = 1.0 / (1.0 + exp(-gt));
            g[(size_t)n * 2 * F + i] = dy * u * sg * (1.0 + gt * (1.0 - sg));
            g[(size_t)n * 2 * F + F + i] = dy * gt * sg;
        }
    float *x = to_backend(k, c.x, ni), *dout = to_backend(k, c.r, no);
    float *out = backend_filled(k, no, GARBAGE), *dx = backend_filled(k, ni, GARBAGE);
    double *xf = dalloc(ni);
    from_backend(k, xf, x, ni, 0);
    double *outf = dalloc(no);
    ref_swiglu(outf, xf, N, F);
    dtrain_k_swiglu_forward(k, dtrain_tensor_f32(out), dtrain_tensor_f32(x), N, F);
    double e = max_diff(k, out, outf, no, 0) / max_abs(outf, no);
    ok(e < 1e-6, "swiglu forward (N %d, F %d) matches the reference: rel %.1e", N, F, e);
    dtrain_k_swiglu_backward(k, dtrain_tensor_f32(dx), dtrain_tensor_f32(x), dtrain_tensor_f32(dout), N, F);
    e = max_diff(k, dx, g, ni, 0) / max_abs(g, ni);
    ok(e < 1e-5, "swiglu backward (=) matches the analytic double gradient: rel %.1e", e);
    double *a = dalloc(ni);
    from_backend(k, a, dx, ni, 0);
    double fe = fd_max_rel_error(swiglu_loss, &c, c.x, ni, a);
    ok(fe < TOL, "swiglu backward dinp vs finite differences: rel error %.2e", fe);
    free(a); free(g); free(xf); free(outf); free(c.x); free(c.r); free(c.out);
    dtrain_k_free(k, x); dtrain_k_free(k, dout); dtrain_k_free(k, out); dtrain_k_free(k, dx);
}

/* ------------------------------------------------------------------ GQA attention */

struct gqa_ctx { double *qkv, *wide, *r, *out; int B, T, NH, KVH, HS; };

/* Hugging Face's repeat_kv: the (NH+2*KVH)-head layout widened to 3*NH heads */
static void repeat_kv(double *wide, const double *qkv, int B, int T, int NH, int KVH, int HS)
{
    size_t row = (size_t)(NH + 2 * KVH) * HS, C = (size_t)NH * HS;
    int group = NH / KVH;
    for (size_t n = 0; n < (size_t)B * T; n++) {
        const double *in = qkv + n * row;
        double *o = wide + n * 3 * C;
        memcpy(o, in, C * sizeof(double));
        for (int h = 0; h < NH; h++) {
            memcpy(o + C + (size_t)h * HS, in + C + (size_t)(h / group) * HS, (size_t)HS * sizeof(double));
            memcpy(o + 2 * C + (size_t)h * HS, in + C + (size_t)(KVH + h / group) * HS, (size_t)HS * sizeof(double));
        }
    }
}

static double gqa_loss(void *p)
{
    struct gqa_ctx *c = p;
    repeat_kv(c->wide, c->qkv, c->B, c->T, c->NH, c->KVH, c->HS);
    ref_attention(c->out, c->wide, c->B, c->T, c->NH, c->HS);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * c->NH * c->HS);
}

static void test_gqa(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    int C = NH * HS;
    size_t NQ = (size_t)B * T * (NH + 2 * KVH) * HS, NW = (size_t)B * T * 3 * C, NO = (size_t)B * T * C;
    struct gqa_ctx c = {dalloc(NQ), dalloc(NW), dalloc(NO), dalloc(NO), B, T, NH, KVH, HS};
    fill_uniform(c.qkv, NQ, 130 + KVH, 1.5);
    fill_uniform(c.r, NO, 131, 1.0);
    float *qkv = to_backend(k, c.qkv, NQ), *dout = to_backend(k, c.r, NO);
    float *out = backend_filled(k, NO, GARBAGE), *dq = backend_filled(k, NQ, GARBAGE);
    float *att = dtrain_k_alloc(k, dtrain_k_attention_saved(k, B, T, NH, KVH, HS) * sizeof(float));
    float *scr = backend_filled(k, dtrain_k_attention_scratch(k, B, T, NH, KVH, HS), GARBAGE);
    dtrain_k_attention_forward(k, dtrain_tensor_f32(out), att, dtrain_tensor_f32(qkv), B, T, NH, KVH, HS);
    gqa_loss(&c);
    double e = max_diff(k, out, c.out, NO, 0);
    ok(e < FWD_TOL, "GQA attention forward (NH %d, KVH %d) matches attention on repeated kv heads: %.1e", NH, KVH, e);
    dtrain_k_attention_backward(k, dtrain_tensor_f32(dq), scr, dtrain_tensor_f32(dout), dtrain_tensor_f32(qkv),
                                dtrain_tensor_f32(out), att, B, T, NH, KVH, HS);
    double *a = dalloc(NQ);
    from_backend(k, a, dq, NQ, 0);
    double fe = fd_max_rel_error(gqa_loss, &c, c.qkv, NQ, a);
    ok(fe < TOL, "GQA attention backward dqkv (=, kv heads summed over their queries) vs finite differences: %.2e", fe);

    /* against the multi-head kernel on the widened qkv: dq equal, dk/dv the group sums */
    float *wide = to_backend(k, c.wide, NW), *wout = dtrain_k_alloc(k, NO * 4), *wd = dtrain_k_alloc(k, NW * 4);
    float *watt = dtrain_k_alloc(k, dtrain_k_attention_saved(k, B, T, NH, NH, HS) * sizeof(float));
    float *wscr = dtrain_k_alloc(k, dtrain_k_attention_scratch(k, B, T, NH, NH, HS) * sizeof(float));
    repeat_kv(c.wide, c.qkv, B, T, NH, KVH, HS);
    float *hw = malloc(NW * sizeof(float));
    for (size_t i = 0; i < NW; i++)
        hw[i] = (float)c.wide[i];
    dtrain_k_upload(k, wide, hw, NW * sizeof(float));
    dtrain_k_attention_forward(k, dtrain_tensor_f32(wout), watt, dtrain_tensor_f32(wide), B, T, NH, NH, HS);
    dtrain_k_attention_backward(k, dtrain_tensor_f32(wd), wscr, dtrain_tensor_f32(dout), dtrain_tensor_f32(wide),
                                dtrain_tensor_f32(wout), watt, B, T, NH, NH, HS);
    double *wo = dalloc(NO), *wg = dalloc(NW), *sum = dalloc(NQ);
    from_backend(k, wo, wout, NO, 0);
    from_backend(k, wg, wd, NW, 0);
    size_t row = (size_t)(NH + 2 * KVH) * HS;
    for (size_t n = 0; n < (size_t)B * T; n++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HS; i++) {
                int kv = h / (NH / KVH);
                sum[n * row + (size_t)h * HS + i] = wg[n * 3 * C + (size_t)h * HS + i];
                sum[n * row + C + (size_t)kv * HS + i] += wg[n * 3 * C + C + (size_t)h * HS + i];
                sum[n * row + C + (size_t)(KVH + kv) * HS + i] += wg[n * 3 * C + 2 * C + (size_t)h * HS + i];
            }
    double eo = max_diff(k, out, wo, NO, 0), eg = max_diff(k, dq, sum, NQ, 0) / max_abs(sum, NQ);
    ok(eo < 1e-6 && eg < 1e-5, "GQA attention = multi-head attention on repeated kv heads, gradients summed (%.1e, %.1e)",
       eo, eg);
    free(hw); free(wo); free(wg); free(sum); free(a);
    free(c.qkv); free(c.wide); free(c.r); free(c.out);
    float *bufs[] = {qkv, dout, out, dq, att, scr, wide, wout, wd, watt, wscr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dtrain_k_free(k, bufs[i]);
}

/* ------------------------------------------------------------------ no position embedding */

static void test_no_wpe(struct dtrain_kernels *k)
{
    int B = 2, T = 5, C = 8, V = 7;
    size_t NC = (size_t)B * T * C;
    int32_t tok[10] = {3, 1, 3, 0, 6, 6, 2, 3, 1, 5};
    double *hw = dalloc((size_t)V * C), *hd = dalloc(NC), *want = dalloc(NC);
    fill_uniform(hw, (size_t)V * C, 140, 1.0);
    fill_uniform(hd, NC, 141, 1.0);
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int c = 0; c < C; c++)
            want[bt * C + c] = (float)hw[(size_t)tok[bt] * C + c];
    float *wte = to_backend(k, hw, (size_t)V * C), *dout = to_backend(k, hd, NC);
    float *zero_wpe = backend_filled(k, (size_t)T * C, 0), *out = backend_filled(k, NC, GARBAGE);
    int32_t *dtok = dtrain_k_alloc(k, sizeof tok);
    dtrain_k_upload(k, dtok, tok, sizeof tok);
    dtrain_k_encoder_forward(k, out, dtok, wte, NULL, B, T, C);
    ok(max_diff(k, out, want, NC, 0) == 0, "encoder forward without wpe: the wte rows exactly");
    dtrain_k_embedding_vp_forward(k, out, dtok, wte, NULL, B, T, C, 0, V, 1);
    ok(max_diff(k, out, want, NC, 0) == 0, "vocabulary-parallel embedding without wpe (add_wpe 1): the wte rows");
    float *dw1 = backend_filled(k, (size_t)V * C, ACC), *dw2 = backend_filled(k, (size_t)V * C, ACC);
    float *dwpe = backend_filled(k, (size_t)T * C, ACC);
    dtrain_k_encoder_backward(k, dw1, NULL, dout, dtok, B, T, C);
    dtrain_k_encoder_backward(k, dw2, dwpe, dout, dtok, B, T, C);
    double *a = dalloc((size_t)V * C);
    from_backend(k, a, dw2, (size_t)V * C, 0);
    ok(max_diff(k, dw1, a, (size_t)V * C, 0) == 0, "encoder backward with dwpe NULL: the same dwte");
    dtrain_k_embedding_vp_backward(k, dw1, NULL, dout, dtok, B, T, C, 0, V);
    dtrain_k_embedding_vp_backward(k, dw2, dwpe, dout, dtok, B, T, C, 0, V);
    from_backend(k, a, dw2, (size_t)V * C, 0);
    ok(max_diff(k, dw1, a, (size_t)V * C, 0) == 0, "vocabulary-parallel embedding backward with dwpe NULL: the same dwte");
    free(hw); free(hd); free(want); free(a);
    float *bufs[] = {wte, dout, zero_wpe, out, dw1, dw2, dwpe};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dtrain_k_free(k, bufs[i]);
    dtrain_k_free(k, dtok);
}

/* ------------------------------------------------------------------ bf16 */

static void *upload_new(struct dtrain_kernels *k, const void *host, size_t bytes)
{
    void *p = dtrain_k_alloc(k, bytes);
    if (p == NULL)
        abort();
    dtrain_k_upload(k, p, host, bytes);
    return p;
}

/* n bf16 results at dev are the n fp32 results at ref rounded, bit for bit */
static int same_rounded(struct dtrain_kernels *k, const void *dev, const void *ref32, size_t n)
{
    uint16_t *got = malloc(n * sizeof *got);
    float *want = malloc(n * sizeof *want);
    int same = got != NULL && want != NULL;
    if (same) {
        dtrain_k_download(k, got, dev, n * sizeof *got);
        dtrain_k_download(k, want, ref32, n * sizeof *want);
        for (size_t i = 0; i < n && same; i++)
            same = got[i] == dtrain_bf16_from_f32(want[i]);
    }
    free(got);
    free(want);
    return same;
}

static void test_bf16(struct dtrain_kernels *k)
{
    int B = 2, T = 6, NH = 4, KVH = 2, HS = 8, N = B * T, F = 24;
    size_t nq = (size_t)N * (NH + 2 * KVH) * HS, ni = (size_t)N * 2 * F, no = (size_t)N * F;
    size_t nmax = nq > ni ? nq : ni;
    double *tmp = dalloc(nmax);
    uint16_t *h16 = malloc(nmax * 2);
    float *hw = malloc(nmax * 4), *freq = inv_freq_host(HS);
    fill_uniform(tmp, nmax, 150, 4.0);
    for (size_t i = 0; i < nmax; i++) {
        h16[i] = dtrain_bf16_from_f32((float)tmp[i]);
        hw[i] = dtrain_bf16_to_f32(h16[i]);
    }
    void *x16 = upload_new(k, h16, nmax * 2), *xw = upload_new(k, hw, nmax * 4), *df = upload_new(k, freq, (size_t)HS * 2);
    void *a16 = upload_new(k, h16, nmax * 2), *a32 = upload_new(k, hw, nmax * 4);
    dtrain_k_rope_forward(k, dtrain_tensor_of(DTRAIN_BF16, a16), df, B, T, NH, KVH, HS);
    dtrain_k_rope_forward(k, dtrain_tensor_f32(a32), df, B, T, NH, KVH, HS);
    ok(same_rounded(k, a16, a32, nq), "rope forward on bf16 qkv: the fp32 result rounded, bit for bit");
    dtrain_k_upload(k, a16, h16, nmax * 2);
    dtrain_k_upload(k, a32, hw, nmax * 4);
    dtrain_k_rope_backward(k, dtrain_tensor_of(DTRAIN_BF16, a16), df, B, T, NH, KVH, HS);
    dtrain_k_rope_backward(k, dtrain_tensor_f32(a32), df, B, T, NH, KVH, HS);
    ok(same_rounded(k, a16, a32, nq), "rope backward on bf16 dqkv: the same rule");
    dtrain_k_swiglu_forward(k, dtrain_tensor_of(DTRAIN_BF16, a16), dtrain_tensor_of(DTRAIN_BF16, x16), N, F);
    dtrain_k_swiglu_forward(k, dtrain_tensor_f32(a32), dtrain_tensor_f32(xw), N, F);
    ok(same_rounded(k, a16, a32, no), "swiglu forward, bf16 in and out: the same rule");
    void *d16 = dtrain_k_alloc(k, ni * 2), *d32 = dtrain_k_alloc(k, ni * 4);
    dtrain_k_swiglu_backward(k, dtrain_tensor_of(DTRAIN_BF16, d16), dtrain_tensor_of(DTRAIN_BF16, x16),
                             dtrain_tensor_of(DTRAIN_BF16, x16), N, F);
    dtrain_k_swiglu_backward(k, dtrain_tensor_f32(d32), dtrain_tensor_f32(xw), dtrain_tensor_f32(xw), N, F);
    ok(same_rounded(k, d16, d32, ni), "swiglu backward, bf16 dout, inp and dinp: the same rule");
    /* GQA attention on bf16 */
    size_t na = dtrain_k_attention_saved(k, B, T, NH, KVH, HS), nout = (size_t)N * NH * HS;
    float *att16 = dtrain_k_alloc(k, na * 4), *att32 = dtrain_k_alloc(k, na * 4);
    float *scr = dtrain_k_alloc(k, dtrain_k_attention_scratch(k, B, T, NH, KVH, HS) * 4);
    void *o16 = dtrain_k_alloc(k, nout * 2), *o32 = dtrain_k_alloc(k, nout * 4);
    dtrain_k_attention_forward(k, dtrain_tensor_of(DTRAIN_BF16, o16), att16, dtrain_tensor_of(DTRAIN_BF16, x16),
                               B, T, NH, KVH, HS);
    dtrain_k_attention_forward(k, dtrain_tensor_f32(o32), att32, dtrain_tensor_f32(xw), B, T, NH, KVH, HS);
    ok(same_rounded(k, o16, o32, nout), "GQA attention forward on bf16: the same rule");
    dtrain_k_attention_backward(k, dtrain_tensor_of(DTRAIN_BF16, a16), scr, dtrain_tensor_of(DTRAIN_BF16, x16),
                                dtrain_tensor_of(DTRAIN_BF16, x16), dtrain_tensor_of(DTRAIN_BF16, o16), att16,
                                B, T, NH, KVH, HS);
    dtrain_k_attention_backward(k, dtrain_tensor_f32(a32), scr, dtrain_tensor_f32(xw), dtrain_tensor_f32(xw),
                                dtrain_tensor_f32(o32), att32, B, T, NH, KVH, HS);
    ok(same_rounded(k, a16, a32, nq), "GQA attention backward on bf16: the same rule");
    char err[128];
    ok(dtrain_kernels_error(k, err, sizeof err) == 0, "no kernel error after the bf16 calls");
    void *bufs[] = {x16, xw, df, a16, a32, d16, d32, att16, att32, scr, o16, o32};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dtrain_k_free(k, bufs[i]);
    free(tmp); free(h16); free(hw); free(freq);
}

/* ------------------------------------------------------------------ threads */

/* every new kernel at a size that uses the pool; all outputs concatenated */
static float *run_big(struct dtrain_kernels *k, size_t *count)
{
    int B = 4, T = 64, NH = 8, KVH = 2, HS = 16, C = NH * HS, N = B * T, F = 3 * C;
    size_t NC = (size_t)N * C, NQ = (size_t)N * (NH + 2 * KVH) * HS, NI = (size_t)N * 2 * F, NF = (size_t)N * F;
    size_t total = 2 * NC + N + C + 2 * NQ + NC + NQ + NF + NI;
    float *res = malloc(total * sizeof(float)), *o = res;
    double *tmp = dalloc(NI > NQ ? NI : NQ);
    float *freq = inv_freq_host(HS);
#define GET(dev, n) (dtrain_k_download(k, o, dev, (n) * sizeof(float)), o += (n))
    fill_uniform(tmp, NC, 160, 2.0);
    float *x = to_backend(k, tmp, NC), *dy = to_backend(k, tmp, NC);
    fill_uniform(tmp, C, 161, 1.0);
    float *w = to_backend(k, tmp, C);
    float *y = dtrain_k_alloc(k, NC * 4), *rstd = dtrain_k_alloc(k, N * 4);
    float *dx = backend_filled(k, NC, 0), *dw = backend_filled(k, C, 0);
    dtrain_k_rmsnorm_forward(k, y, rstd, x, w, 1e-6f, N, C);
    dtrain_k_rmsnorm_backward(k, dx, dw, dy, x, w, rstd, N, C);
    GET(y, NC); GET(dx, NC); GET(rstd, (size_t)N); GET(dw, (size_t)C);
    fill_uniform(tmp, NQ, 162, 1.0);
    float *qkv = to_backend(k, tmp, NQ), *dqkv = dtrain_k_alloc(k, NQ * 4), *df = dtrain_k_alloc(k, (size_t)HS * 2);
    dtrain_k_upload(k, df, freq, (size_t)HS * 2);
    dtrain_k_rope_forward(k, dtrain_tensor_f32(qkv), df, B, T, NH, KVH, HS);
    GET(qkv, NQ);
    float *att = dtrain_k_alloc(k, dtrain_k_attention_saved(k, B, T, NH, KVH, HS) * 4);
    float *scr = dtrain_k_alloc(k, dtrain_k_attention_scratch(k, B, T, NH, KVH, HS) * 4);
    dtrain_k_attention_forward(k, dtrain_tensor_f32(y), att, dtrain_tensor_f32(qkv), B, T, NH, KVH, HS);
    dtrain_k_attention_backward(k, dtrain_tensor_f32(dqkv), scr, dtrain_tensor_f32(dy), dtrain_tensor_f32(qkv),
                                dtrain_tensor_f32(y), att, B, T, NH, KVH, HS);
    dtrain_k_rope_backward(k, dtrain_tensor_f32(dqkv), df, B, T, NH, KVH, HS);
    GET(dqkv, NQ); GET(y, NC);
    GET(qkv, NQ);
    fill_uniform(tmp, NI, 163, 4.0);
    float *h = to_backend(k, tmp, NI), *sw = dtrain_k_alloc(k, NF * 4), *dh = dtrain_k_alloc(k, NI * 4);
    dtrain_k_swiglu_forward(k, dtrain_tensor_f32(sw), dtrain_tensor_f32(h), N, F);
    dtrain_k_swiglu_backward(k, dtrain_tensor_f32(dh), dtrain_tensor_f32(h), dtrain_tensor_f32(sw), N, F);
    GET(sw, NF); GET(dh, NI);
#undef GET
    *count = (size_t)(o - res);
    float *bufs[] = {x, dy, w, y, rstd, dx, dw, qkv, dqkv, df, att, scr, h, sw, dh};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dtrain_k_free(k, bufs[i]);
    free(tmp); free(freq);
    return res;
}

static void test_threads(void)
{
    char err[256] = "";
    struct dtrain_kernels *k1 = NULL, *k3 = NULL;
    struct dtrain_kernels_options o1 = {.threads = 1}, o3 = {.threads = 3};
    if (dtrain_kernels_create("cpu", &o1, &k1, err, sizeof err) != 0 ||
        dtrain_kernels_create("cpu", &o3, &k3, err, sizeof err) != 0) {
        ok(0, "create kernels: %s", err);
        return;
    }
    size_t n1, n3;
    float *r1 = run_big(k1, &n1), *r3 = run_big(k3, &n3);
    ok(n1 == n3 && memcmp(r1, r3, n1 * sizeof(float)) == 0,
       "rmsnorm, rope, GQA attention, swiglu: 1 and 3 threads give identical bits");
    float *again = run_big(k3, &n3);
    ok(memcmp(r3, again, n3 * sizeof(float)) == 0, "3 threads: identical bits run to run");
    free(r1); free(r3); free(again);
    dtrain_kernels_destroy(k1);
    dtrain_kernels_destroy(k3);
}

int main(void)
{
    char err[256] = "";
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options opt = {.threads = 2};
    if (!ok(dtrain_kernels_create("cpu", &opt, &k, err, sizeof err) == 0, "create cpu kernels%s%s", *err ? ": " : "", err))
        return tap_done();
    test_rmsnorm(k, 6, 13);
    test_rmsnorm(k, 3, 40);
    test_rope(k, 2, 5, 4, 2, 8, 1);
    test_rope(k, 1, 300, 2, 1, 128, 0); /* large angles, more than one chunk of frequencies */
    test_swiglu(k, 5, 7);
    test_swiglu(k, 3, 37);
    test_gqa(k, 2, 5, 4, 2, 4);
    test_gqa(k, 2, 5, 4, 1, 4);
    test_gqa(k, 1, 4, 2, 2, 4);
    /* more than one block of the causal products (cpu: 64), the last one short */
    test_gqa(k, 1, 130, 2, 1, 2);
    test_gqa(k, 2, 129, 2, 2, 2);
    test_no_wpe(k);
    dtrain_kernels_destroy(k);
    struct dtrain_kernels_options ob = {.threads = 2, .precision = DTRAIN_PRECISION_BF16};
    if (ok(dtrain_kernels_create("cpu", &ob, &k, err, sizeof err) == 0, "create cpu kernels in bf16")) {
        test_bf16(k);
        dtrain_kernels_destroy(k);
    }
    test_threads();
    return tap_done();
}
