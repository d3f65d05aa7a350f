/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Every kernel's forward against a double-precision reference, and every
 * backward against central finite differences of that reference (double,
 * step 1e-5).  The loss of a layer is sum(out * R) for a fixed random R, so
 * dout = R.  Accumulating outputs are pre-filled with 0.5 and overwritten
 * ones with 1000, which checks the "+=" and "=" conventions of
 * dtrain_kernels.h as well.  Then the same kernels on 1 and 3 threads at a
 * size that uses the pool: the CPU backend's own loops must agree bit for
 * bit. */
#include "dtrain_kernels.h"
#include "gradcheck.h"
#include "ref_double.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-3   /* max |float analytic - double FD| / max |FD| */
#define FWD_TOL 1e-5
#define ACC 0.5f    /* pre-fill of accumulating outputs */
#define GARBAGE 1000.0f /* pre-fill of overwritten outputs */

static double *dalloc(size_t n)
{
    double *p = calloc(n, sizeof(double));
    if (p == NULL)
        abort();
    return p;
}

static double max_abs_diff_f(struct dtrain_kernels *k, const float *dev, const double *ref, size_t n)
{
    double *h = dalloc(n), m = 0;
    from_backend(k, h, dev, n, 0.0);
    for (size_t i = 0; i < n; i++)
        if (fabs(h[i] - ref[i]) > m || isnan(h[i]))
            m = isnan(h[i]) ? INFINITY : fabs(h[i] - ref[i]);
    free(h);
    return m;
}

/* ------------------------------------------------------------------ encoder */

struct enc_ctx { double *wte, *wpe, *r, *out; int32_t *tok; int B, T, C; };
static double enc_loss(void *p)
{
    struct enc_ctx *c = p;
    ref_encoder(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void test_encoder(struct dtrain_kernels *k)
{
    int B = 2, T = 5, C = 8, V = 7, maxT = 6;
    size_t N = (size_t)B * T, NC = N * C;
    int32_t tok[10] = {3, 1, 3, 0, 6, 6, 2, 3, 1, 5}; /* repeats: scatter must add up */
    struct enc_ctx c = {dalloc((size_t)V * C), dalloc((size_t)maxT * C), dalloc(NC), dalloc(NC),
                        tok, B, T, C};
    fill_uniform(c.wte, (size_t)V * C, 1, 1.0);
    fill_uniform(c.wpe, (size_t)maxT * C, 2, 1.0);
    fill_uniform(c.r, NC, 3, 1.0);
    float *wte = to_backend(k, c.wte, (size_t)V * C), *wpe = to_backend(k, c.wpe, (size_t)maxT * C);
    float *out = dtrain_k_alloc(k, NC * sizeof(float)), *dout = to_backend(k, c.r, NC);
    int32_t *dtok = dtrain_k_alloc(k, sizeof tok);
    dtrain_k_upload(k, dtok, tok, sizeof tok);
    dtrain_k_encoder_forward(k, out, dtok, wte, wpe, B, T, C);
    enc_loss(&c);
    ok(max_abs_diff_f(k, out, c.out, NC) < FWD_TOL, "encoder forward matches the reference");

    float *dwte = backend_filled(k, (size_t)V * C, ACC), *dwpe = backend_filled(k, (size_t)maxT * C, ACC);
    dtrain_k_encoder_backward(k, dwte, dwpe, dout, dtok, B, T, C);
    double *a = dalloc((size_t)V * C), *b = dalloc((size_t)maxT * C);
    from_backend(k, a, dwte, (size_t)V * C, ACC);
    from_backend(k, b, dwpe, (size_t)maxT * C, ACC);
    double e1 = fd_max_rel_error(enc_loss, &c, c.wte, (size_t)V * C, a);
    double e2 = fd_max_rel_error(enc_loss, &c, c.wpe, (size_t)maxT * C, b);
    ok(e1 < TOL, "encoder backward dwte (+=) vs finite differences: rel error %.2e", e1);
    ok(e2 < TOL, "encoder backward dwpe (+=) vs finite differences: rel error %.2e", e2);
    free(a); free(b); free(c.wte); free(c.wpe); free(c.r); free(c.out);
    dtrain_k_free(k, wte); dtrain_k_free(k, wpe); dtrain_k_free(k, out); dtrain_k_free(k, dout);
    dtrain_k_free(k, dtok); dtrain_k_free(k, dwte); dtrain_k_free(k, dwpe);
}

/* ------------------------------------------------------------------ layer norm */

struct ln_ctx { double *x, *w, *b, *r, *out; int N, C; };
static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    ref_layernorm(c->out, c->x, c->w, c->b, c->N, c->C);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_layernorm(struct dtrain_kernels *k, int N, int C)
{
    size_t NC = (size_t)N * C;
    struct ln_ctx c = {dalloc(NC), dalloc(C), dalloc(C), dalloc(NC), dalloc(NC), N, C};
    fill_uniform(c.x, NC, 10, 2.0);
    fill_uniform(c.w, C, 11, 0.5);
    for (int i = 0; i < C; i++)
        c.w[i] += 1.0;
    fill_uniform(c.b, C, 12, 0.5);
    fill_uniform(c.r, NC, 13, 1.0);
    float *x = to_backend(k, c.x, NC), *w = to_backend(k, c.w, C), *b = to_backend(k, c.b, C);
    float *out = dtrain_k_alloc(k, NC * sizeof(float)), *mean = dtrain_k_alloc(k, N * sizeof(float));
    float *rstd = dtrain_k_alloc(k, N * sizeof(float)), *dout = to_backend(k, c.r, NC);
    dtrain_k_layernorm_forward(k, out, mean, rstd, x, w, b, N, C);
    ln_loss(&c);
    ok(max_abs_diff_f(k, out, c.out, NC) < FWD_TOL, "layernorm forward matches the reference (C %d)", C);

    float *dx = backend_filled(k, NC, ACC), *dw = backend_filled(k, C, ACC), *db = backend_filled(k, C, ACC);
    dtrain_k_layernorm_backward(k, dx, dw, db, dout, x, w, mean, rstd, N, C);
    double *ax = dalloc(NC), *aw = dalloc(C), *ab = dalloc(C);
    from_backend(k, ax, dx, NC, ACC);
    from_backend(k, aw, dw, C, ACC);
    from_backend(k, ab, db, C, ACC);
    double ex = fd_max_rel_error(ln_loss, &c, c.x, NC, ax);
    double ew = fd_max_rel_error(ln_loss, &c, c.w, C, aw);
    double eb = fd_max_rel_error(ln_loss, &c, c.b, C, ab);
    ok(ex < TOL, "layernorm backward dinp (+=), C %d: rel error %.2e", C, ex);
    ok(ew < TOL, "layernorm backward dweight (+=), C %d: rel error %.2e", C, ew);
    ok(eb < TOL, "layernorm backward dbias (+=), C %d: rel error %.2e", C, eb);
    free(ax); free(aw); free(ab); free(c.x); free(c.w); free(c.b); free(c.r); free(c.out);
    dtrain_k_free(k, x); dtrain_k_free(k, w); dtrain_k_free(k, b); dtrain_k_free(k, out);
    dtrain_k_free(k, mean); dtrain_k_free(k, rstd); dtrain_k_free(k, dout);
    dtrain_k_free(k, dx); dtrain_k_free(k, dw); dtrain_k_free(k, db);
}

/* ------------------------------------------------------------------ matmul */

struct mm_ctx { double *x, *w, *bias, *r, *out; int N, IC, OC; };
static double mm_loss(void *p)
{
    struct mm_ctx *c = p;
    ref_matmul(c->out, c->x, c->w, c->bias, c->N, c->IC, c->OC);
    return dot_d(c->out, c->r, (size_t)c->N * c->OC);
}

static void test_matmul(struct dtrain_kernels *k, int with_bias)
{
    int N = 7, IC = 6, OC = 5;
    size_t NI = (size_t)N * IC, NO = (size_t)N * OC, WI = (size_t)OC * IC;
    struct mm_ctx c = {dalloc(NI), dalloc(WI), with_bias ? dalloc(OC) : NULL, dalloc(NO),
                       dalloc(NO), N, IC, OC};
    fill_uniform(c.x, NI, 20, 1.0);
    fill_uniform(c.w, WI, 21, 1.0);
    if (with_bias)
        fill_uniform(c.bias, OC, 22, 1.0);
    fill_uniform(c.r, NO, 23, 1.0);
    float *x = to_backend(k, c.x, NI), *w = to_backend(k, c.w, WI);
    float *bias = with_bias ? to_backend(k, c.bias, OC) : NULL;
    float *out = backend_filled(k, NO, GARBAGE), *dout = to_backend(k, c.r, NO);
    dtrain_k_matmul_forward(k, dtrain_tensor_f32(out), dtrain_tensor_f32(x), w, bias, N, IC, OC);
    mm_loss(&c);
    ok(max_abs_diff_f(k, out, c.out, NO) < FWD_TOL, "matmul forward %s bias matches the reference",
       with_bias ? "with" : "without");

    float *dx = backend_filled(k, NI, GARBAGE), *dw = backend_filled(k, WI, ACC);
    float *db = with_bias ? backend_filled(k, OC, ACC) : NULL;
    dtrain_k_matmul_backward(k, dtrain_tensor_f32(dx), dw, db, dtrain_tensor_f32(dout), dtrain_tensor_f32(x), w, N, IC, OC);
    double *ax = dalloc(NI), *aw = dalloc(WI), *ab = dalloc(OC);
    from_backend(k, ax, dx, NI, 0.0);
    from_backend(k, aw, dw, WI, ACC);
    double ex = fd_max_rel_error(mm_loss, &c, c.x, NI, ax);
    double ew = fd_max_rel_error(mm_loss, &c, c.w, WI, aw);
    ok(ex < TOL, "matmul backward dinp (=) %s bias: rel error %.2e", with_bias ? "with" : "without", ex);
    ok(ew < TOL, "matmul backward dweight (+=) %s bias: rel error %.2e", with_bias ? "with" : "without", ew);
    if (with_bias) {
        from_backend(k, ab, db, OC, ACC);
        double eb = fd_max_rel_error(mm_loss, &c, c.bias, OC, ab);
        ok(eb < TOL, "matmul backward dbias (+=): rel error %.2e", eb);
        /* dinp NULL skips the input gradient and still accumulates dweight */
        dtrain_k_matmul_backward(k, dtrain_tensor_f32(NULL), dw, NULL, dtrain_tensor_f32(dout), dtrain_tensor_f32(x), w, N, IC, OC);
        double *aw2 = dalloc(WI), worst = 0;
        from_backend(k, aw2, dw, WI, ACC);
        for (size_t i = 0; i < WI; i++)
            worst = fmax(worst, fabs(aw2[i] - 2 * aw[i]));
        ok(worst < 1e-4, "matmul backward with dinp NULL accumulates dweight again");
        free(aw2);
    }
    free(ax); free(aw); free(ab); free(c.x); free(c.w); free(c.bias); free(c.r); free(c.out);
    dtrain_k_free(k, x); dtrain_k_free(k, w); dtrain_k_free(k, bias); dtrain_k_free(k, out);
    dtrain_k_free(k, dout); dtrain_k_free(k, dx); dtrain_k_free(k, dw); dtrain_k_free(k, db);
}

/* ------------------------------------------------------------------ attention */

struct att_ctx { double *qkv, *r, *out; int B, T, NH, HS; };
static double att_loss(void *p)
{
    struct att_ctx *c = p;
    ref_attention(c->out, c->qkv, c->B, c->T, c->NH, c->HS);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * c->NH * c->HS);
}

static void test_attention(struct dtrain_kernels *k)
{
    int B = 2, T = 5, NH = 2, HS = 4, C = NH * HS;
    size_t NQ = (size_t)B * T * 3 * C, NO = (size_t)B * T * C, NA = (size_t)B * NH * T * T;
    struct att_ctx c = {dalloc(NQ), dalloc(NO), dalloc(NO), B, T, NH, HS};
    fill_uniform(c.qkv, NQ, 30, 1.5);
    fill_uniform(c.r, NO, 31, 1.0);
    float *qkv = to_backend(k, c.qkv, NQ), *out = backend_filled(k, NO, GARBAGE);
    float *att = dtrain_k_alloc(k, NA * sizeof(float)), *dout = to_backend(k, c.r, NO);
    dtrain_k_attention_forward(k, dtrain_tensor_f32(out), att, dtrain_tensor_f32(qkv), B, T, NH, NH, HS);
    att_loss(&c);
    ok(max_abs_diff_f(k, out, c.out, NO) < FWD_TOL, "attention forward matches the reference");
    double *ha = dalloc(NA), worst = 0;
    from_backend(k, ha, att, NA, 0.0);
    for (size_t row = 0; row < (size_t)B * NH * T; row++) {
        size_t t = row % T;
        double s = 0;
        for (size_t u = 0; u <= t; u++)
            s += ha[row * T + u];
        worst = fmax(worst, fabs(s - 1.0));
    }
    ok(worst < 1e-5, "attention rows are probabilities over keys <= query (max |sum-1| %.1e)", worst);

    double upper = 0;
    for (size_t row = 0; row < (size_t)B * NH * T; row++)
        for (size_t u = row % T + 1; u < (size_t)T; u++)
            upper = fmax(upper, fabs(ha[row * T + u]));
    ok(upper == 0.0, "attention weights above the diagonal are 0");
    float *dq = backend_filled(k, NQ, GARBAGE);
    float *scratch = backend_filled(k, dtrain_k_attention_scratch(k, B, T, NH, NH, HS), GARBAGE);
    dtrain_k_attention_backward(k, dtrain_tensor_f32(dq), scratch, dtrain_tensor_f32(dout), dtrain_tensor_f32(qkv), dtrain_tensor_f32(out), att, B, T, NH, NH, HS);
    dtrain_k_free(k, scratch);
    double *a = dalloc(NQ);
    from_backend(k, a, dq, NQ, 0.0);
    double e = fd_max_rel_error(att_loss, &c, c.qkv, NQ, a);
    ok(e < TOL, "attention backward dqkv (=) vs finite differences: rel error %.2e", e);
    free(a); free(ha); free(c.qkv); free(c.r); free(c.out);
    dtrain_k_free(k, qkv); dtrain_k_free(k, out); dtrain_k_free(k, att); dtrain_k_free(k, dout);
    dtrain_k_free(k, dq);
}

/* ------------------------------------------------------------------ GELU, residual */

struct gelu_ctx { double *x, *r, *out; size_t n; };
static double gelu_loss(void *p)
{
    struct gelu_ctx *c = p;
    ref_gelu(c->out, c->x, c->n);
    return dot_d(c->out, c->r, c->n);
}

static void test_gelu_residual(struct dtrain_kernels *k)
{
    size_t n = 40;
    struct gelu_ctx c = {dalloc(n), dalloc(n), dalloc(n), n};
    fill_uniform(c.x, n, 40, 4.0);
    c.x[0] = 30.0;  /* far tails: tanh saturates without NaN */
    c.x[1] = -30.0;
    fill_uniform(c.r, n, 41, 1.0);
    float *x = to_backend(k, c.x, n), *out = backend_filled(k, n, GARBAGE), *dout = to_backend(k, c.r, n);
    dtrain_k_gelu_forward(k, dtrain_tensor_f32(out), dtrain_tensor_f32(x), n);
    gelu_loss(&c);
    ok(max_abs_diff_f(k, out, c.out, n) < FWD_TOL * 10, "gelu forward matches the reference");
    /* in place: dinp aliases dout */
    dtrain_k_gelu_backward(k, dtrain_tensor_f32(dout), dtrain_tensor_f32(x), dtrain_tensor_f32(dout), n);
    double *a = dalloc(n);
    from_backend(k, a, dout, n, 0.0);
    double e = fd_max_rel_error(gelu_loss, &c, c.x, n, a);
    ok(e < TOL, "gelu backward (=, in place) vs finite differences: rel error %.2e", e);

    double *ref = dalloc(n);
    for (size_t i = 0; i < n; i++)
        ref[i] = (double)(float)c.x[i] + (double)(float)c.r[i];
    float *r = to_backend(k, c.r, n);
    dtrain_k_residual_forward(k, x, x, r, n); /* out aliases a */
    ok(max_abs_diff_f(k, x, ref, n) < 1e-5, "residual forward adds (in place)");
    free(a); free(ref); free(c.x); free(c.r); free(c.out);
    dtrain_k_free(k, x); dtrain_k_free(k, out); dtrain_k_free(k, dout); dtrain_k_free(k, r);
}

/* ------------------------------------------------------------------ softmax + cross-entropy */

struct xent_ctx { double *logits; int32_t *targets; int N, V, Vp; };
static double xent_loss(void *p)
{
    struct xent_ctx *c = p;
    return ref_xent_mean(c->logits, c->targets, c->N, c->V, c->Vp);
}

static void test_softmax_xent(struct dtrain_kernels *k)
{
    int N = 6, V = 11, Vp = 16;
    size_t NV = (size_t)N * Vp;
    int32_t targets[6] = {0, 10, 3, 3, 7, 1};
    struct xent_ctx c = {dalloc(NV), targets, N, V, Vp};
    fill_uniform(c.logits, NV, 50, 3.0);
    c.logits[5] = 80.0; /* a large logit: the max shift keeps expf finite */
    float *rows = to_backend(k, c.logits, NV), *losses = dtrain_k_alloc(k, N * sizeof(float));
    int32_t *dt = dtrain_k_alloc(k, sizeof targets);
    dtrain_k_upload(k, dt, targets, sizeof targets);
    dtrain_k_softmax_xent_forward(k, rows, losses, dt, N, V, Vp);
    double *hl = dalloc(N), mean = 0;
    from_backend(k, hl, losses, N, 0.0);
    for (int i = 0; i < N; i++)
        mean += hl[i] / N;
    double ref = xent_loss(&c);
    ok(fabs(mean - ref) < 1e-5 * fmax(1.0, ref), "softmax+xent forward: mean loss %.6f vs %.6f", mean, ref);
    double *p = dalloc(NV), worst = 0, pad = 0;
    from_backend(k, p, rows, NV, 0.0);
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int i = 0; i < V; i++)
            s += p[(size_t)n * Vp + i];
        for (int i = V; i < Vp; i++)
            pad = fmax(pad, fabs(p[(size_t)n * Vp + i]));
        worst = fmax(worst, fabs(s - 1));
    }
    ok(worst < 1e-5 && pad == 0.0, "softmax rows sum to 1, padding columns are 0");
    dtrain_k_softmax_xent_backward(k, rows, dt, 1.0f / N, N, V, Vp);
    from_backend(k, p, rows, NV, 0.0);
    double e = fd_max_rel_error(xent_loss, &c, c.logits, NV, p);
    ok(e < TOL, "softmax+xent backward (in place, dloss 1/N) vs finite differences: rel error %.2e", e);
    free(hl); free(p); free(c.logits);
    dtrain_k_free(k, rows); dtrain_k_free(k, losses); dtrain_k_free(k, dt);
}

/* ------------------------------------------------------------------ AdamW, sum of squares */

static void test_adamw(struct dtrain_kernels *k)
{
    size_t n = 50;
    double *p = dalloc(n), *g = dalloc(n), *m = dalloc(n), *v = dalloc(n);
    fill_uniform(p, n, 60, 1.0);
    float *dp = to_backend(k, p, n), *dm = backend_filled(k, n, 0.0f), *dv = backend_filled(k, n, 0.0f);
    struct dtrain_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                  .weight_decay = 0.1f, .grad_scale = 0.5f};
    for (int step = 1; step <= 3; step++) {
        fill_uniform(g, n, 61 + (uint64_t)step, 1.0);
        float *dg = to_backend(k, g, n);
        a.step = step;
        dtrain_k_adamw_update(k, dp, dg, dm, dv, n, &a);
        dtrain_k_free(k, dg);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)(float)g[i] * 0.5;
            m[i] = 0.9 * m[i] + 0.1 * gi;
            v[i] = 0.95 * v[i] + 0.05 * gi * gi;
            double mh = m[i] / (1 - pow(0.9, step)), vh = v[i] / (1 - pow(0.95, step));
            p[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * p[i]);
        }
    }
    ok(max_abs_diff_f(k, dp, p, n) < 1e-5, "AdamW: 3 steps with bias correction, weight decay and grad scale match the formula");
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)(float)p[i] * (float)p[i];
    double got = dtrain_k_sumsq(k, dp, n);
    ok(fabs(got - s) < 1e-4 * s, "sum of squares: %.6f vs %.6f", got, s);
    free(p); free(g); free(m); free(v);
    dtrain_k_free(k, dp); dtrain_k_free(k, dm); dtrain_k_free(k, dv);
}

/* ------------------------------------------------------------------ threads */

/* Run every elementwise/reduction kernel at a size that uses the pool and
 * return a checksum-free copy of all outputs, for bit comparison. */
static float *run_big(struct dtrain_kernels *k, size_t *count)
{
    int B = 4, T = 64, NH = 4, HS = 16, C = NH * HS, V = 300, Vp = 320, N = B * T;
    size_t NC = (size_t)N * C, NQ = 3 * NC, NA = (size_t)B * NH * T * T, NV = (size_t)N * Vp;
    size_t total = 3 * NC + 2 * C + NQ + NC + NV + N + (size_t)V * C + (size_t)T * C + 4 * NC + 1 + 3 * NC;
    float *res = malloc(total * sizeof(float)), *o = res;
    double *tmp = dalloc(NV > 4 * NC ? NV : 4 * NC);
    int32_t *tok = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        tok[i] = (i * 7919) % V;
    int32_t *dtok = dtrain_k_alloc(k, (size_t)N * sizeof(int32_t));
    dtrain_k_upload(k, dtok, tok, (size_t)N * sizeof(int32_t));
#define GET(dev, n) (dtrain_k_download(k, o, dev, (n) * sizeof(float)), o += (n))
    fill_uniform(tmp, NC, 70, 1.0);
    float *x = to_backend(k, tmp, NC), *dy = to_backend(k, tmp, NC);
    fill_uniform(tmp, C, 71, 1.0);
    float *w = to_backend(k, tmp, C), *b = to_backend(k, tmp, C);
    float *ln = dtrain_k_alloc(k, NC * 4), *mean = dtrain_k_alloc(k, N * 4), *rstd = dtrain_k_alloc(k, N * 4);
    float *dx = backend_filled(k, NC, 0), *dw = backend_filled(k, C, 0), *db = backend_filled(k, C, 0);
    dtrain_k_layernorm_forward(k, ln, mean, rstd, x, w, b, N, C);
    dtrain_k_layernorm_backward(k, dx, dw, db, dy, x, w, mean, rstd, N, C);
    GET(ln, NC); GET(dx, NC); GET(dw, (size_t)C); GET(db, (size_t)C);
    fill_uniform(tmp, NQ, 72, 1.0);
    float *qkv = to_backend(k, tmp, NQ), *out = dtrain_k_alloc(k, NC * 4), *att = dtrain_k_alloc(k, NA * 4);
    float *dqkv = dtrain_k_alloc(k, NQ * 4);
    float *scratch = dtrain_k_alloc(k, dtrain_k_attention_scratch(k, B, T, NH, NH, HS) * 4);
    dtrain_k_attention_forward(k, dtrain_tensor_f32(out), att, dtrain_tensor_f32(qkv), B, T, NH, NH, HS);
    dtrain_k_attention_backward(k, dtrain_tensor_f32(dqkv), scratch, dtrain_tensor_f32(dy), dtrain_tensor_f32(qkv), dtrain_tensor_f32(out), att, B, T, NH, NH, HS);
    dtrain_k_free(k, scratch);
    GET(out, NC); GET(dqkv, NQ);
    fill_uniform(tmp, NV, 73, 4.0);
    float *logits = to_backend(k, tmp, NV), *losses = dtrain_k_alloc(k, N * 4);
    dtrain_k_softmax_xent_forward(k, logits, losses, dtok, N, V, Vp);
    GET(losses, (size_t)N);
    dtrain_k_softmax_xent_backward(k, logits, dtok, 1.0f / N, N, V, Vp);
    GET(logits, NV);
    float *dwte = backend_filled(k, (size_t)V * C, 0), *dwpe = backend_filled(k, (size_t)T * C, 0);
    dtrain_k_encoder_backward(k, dwte, dwpe, dy, dtok, B, T, C);
    GET(dwte, (size_t)V * C); GET(dwpe, (size_t)T * C);
    fill_uniform(tmp, 4 * NC, 74, 3.0);
    float *h = to_backend(k, tmp, 4 * NC), *gl = dtrain_k_alloc(k, 4 * NC * 4);
    dtrain_k_gelu_forward(k, dtrain_tensor_f32(gl), dtrain_tensor_f32(h), 4 * NC);
    dtrain_k_gelu_backward(k, dtrain_tensor_f32(h), dtrain_tensor_f32(h), dtrain_tensor_f32(gl), 4 * NC);
    GET(h, 4 * NC);
    *o++ = (float)dtrain_k_sumsq(k, gl, 4 * NC);
    float *mm = backend_filled(k, 3 * NC, 0);
    struct dtrain_adamw_args a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                                  .weight_decay = 0.01f, .step = 1, .grad_scale = 1.0f};
    float *vv = backend_filled(k, 3 * NC, 0);
    dtrain_k_adamw_update(k, qkv, dqkv, mm, vv, 3 * NC, &a);
    GET(qkv, 3 * NC);
#undef GET
    *count = (size_t)(o - res);
    float *bufs[] = {x, dy, w, b, ln, mean, rstd, dx, dw, db, qkv, out, att, dqkv, logits, losses,
                     dwte, dwpe, h, gl, mm, vv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dtrain_k_free(k, bufs[i]);
    dtrain_k_free(k, dtok);
    free(tok);
    free(tmp);
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
       "layer norm, attention, softmax, embedding, GELU, sum of squares, AdamW: 1 and 3 threads give identical bits");
    float *again = run_big(k3, &n3);
    ok(memcmp(r3, again, n3 * sizeof(float)) == 0, "3 threads: identical bits run to run");
    free(r1); free(r3); free(again);
    dtrain_kernels_destroy(k1);
    dtrain_kernels_destroy(k3);
}

/* Typed operands (dtrain_kernels.h "Types"): on the cpu backend a bf16
 * result is the fp32 result of the widened inputs rounded once, bit for
 * bit, in either precision; checked for each typed operation. */
static uint16_t *bf16_copy(const float *x, size_t n)
{
    uint16_t *h = malloc(n * sizeof *h);
    if (h == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        h[i] = dtrain_bf16_from_f32(x[i]);
    return h;
}

/* the widened values of a bf16 array */
static float *widened(const uint16_t *h, size_t n)
{
    float *x = malloc(n * sizeof *x);
    if (x == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        x[i] = dtrain_bf16_to_f32(h[i]);
    return x;
}

/* n bf16 results in the backend at dev are the fp32 results at ref rounded */
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

static void *upload_new(struct dtrain_kernels *k, const void *host, size_t bytes)
{
    void *p = dtrain_k_alloc(k, bytes);
    if (p == NULL)
        abort();
    dtrain_k_upload(k, p, host, bytes);
    return p;
}

static void test_typed(struct dtrain_kernels *k)
{
    const char *prec = dtrain_kernels_precision_name(dtrain_kernels_precision(k));
    int B = 2, T = 7, NH = 2, HS = 8, C = NH * HS, N = B * T, OC = 3 * C;
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C, na = dtrain_k_attention_saved(k, B, T, NH, NH, HS);
    double *tmp = dalloc(no > nw ? no : nw);
    float *hx = malloc(no * sizeof(float)), *hw = malloc(nw * sizeof(float));
    if (hx == NULL || hw == NULL)
        abort();
    fill_uniform(tmp, no, 90, 2.0);
    for (size_t i = 0; i < no; i++)
        hx[i] = (float)tmp[i];
    fill_uniform(tmp, nw, 91, 0.5);
    for (size_t i = 0; i < nw; i++)
        hw[i] = (float)tmp[i];
    uint16_t *hx16 = bf16_copy(hx, no);
    float *hx_w = widened(hx16, no); /* what a bf16 input holds */
    void *x16 = upload_new(k, hx16, no * 2), *xw = upload_new(k, hx_w, no * 4), *w = upload_new(k, hw, nw * 4);
    void *o16 = dtrain_k_alloc(k, no * 2), *o32 = dtrain_k_alloc(k, no * 4), *d16 = dtrain_k_alloc(k, no * 2);
    void *d32 = dtrain_k_alloc(k, no * 4), *att16 = dtrain_k_alloc(k, na * 4), *att32 = dtrain_k_alloc(k, na * 4);
    void *dw = dtrain_k_alloc(k, nw * 4), *scr = dtrain_k_alloc(k, dtrain_k_attention_scratch(k, B, T, NH, NH, HS) * 4);
    struct dtrain_tensor X16 = dtrain_tensor_of(DTRAIN_BF16, x16), XW = dtrain_tensor_f32(xw);

    /* matmul: inp (N,C) bf16 -> out (N,3C) bf16, against fp32 on the widened input */
    dtrain_k_matmul_forward(k, dtrain_tensor_of(DTRAIN_BF16, o16), X16, w, NULL, N, C, OC);
    dtrain_k_matmul_forward(k, dtrain_tensor_f32(o32), XW, w, NULL, N, C, OC);
    ok(same_rounded(k, o16, o32, no), "[%s] matmul forward, bf16 in and out: the fp32 result rounded, bit for bit", prec);
    /* backward: dout (N,3C) bf16 -> dinp (N,C) bf16 */
    dtrain_k_matmul_backward(k, dtrain_tensor_of(DTRAIN_BF16, d16), dw, NULL, X16, X16, w, N, C, OC);
    dtrain_k_matmul_backward(k, dtrain_tensor_f32(d32), dw, NULL, XW, XW, w, N, C, OC);
    ok(same_rounded(k, d16, d32, ni), "[%s] matmul backward, bf16 dout, inp and dinp: the same rule", prec);
    /* attention: qkv (N,3C) bf16 -> out (N,C) bf16; backward with a bf16 dout */
    dtrain_k_attention_forward(k, dtrain_tensor_of(DTRAIN_BF16, o16), att16, X16, B, T, NH, NH, HS);
    dtrain_k_attention_forward(k, dtrain_tensor_f32(o32), att32, XW, B, T, NH, NH, HS);
    ok(same_rounded(k, o16, o32, ni), "[%s] attention forward, bf16 qkv and out: the same rule", prec);
    dtrain_k_attention_backward(k, dtrain_tensor_of(DTRAIN_BF16, d16), scr, X16, X16,
                                dtrain_tensor_of(DTRAIN_BF16, o16), att16, B, T, NH, NH, HS);
    dtrain_k_attention_backward(k, dtrain_tensor_f32(d32), scr, XW, XW, dtrain_tensor_f32(o32), att32, B, T, NH, NH, HS);
    ok(same_rounded(k, d16, d32, no), "[%s] attention backward, bf16 dout, qkv and dqkv: the same rule", prec);
    /* GELU in place on bf16, and its backward with dinp aliasing dout */
    dtrain_k_copy(k, o16, x16, no * 2);
    dtrain_k_gelu_forward(k, dtrain_tensor_of(DTRAIN_BF16, o16), dtrain_tensor_of(DTRAIN_BF16, o16), no);
    dtrain_k_gelu_forward(k, dtrain_tensor_f32(o32), XW, no);
    ok(same_rounded(k, o16, o32, no), "[%s] GELU forward in place on bf16: the same rule", prec);
    dtrain_k_copy(k, d16, x16, no * 2);
    dtrain_k_gelu_backward(k, dtrain_tensor_of(DTRAIN_BF16, d16), X16, dtrain_tensor_of(DTRAIN_BF16, d16), no);
    dtrain_k_gelu_backward(k, dtrain_tensor_f32(d32), XW, XW, no);
    ok(same_rounded(k, d16, d32, no), "[%s] GELU backward, dinp aliasing dout, bf16: the same rule", prec);
    char err[128];
    ok(dtrain_kernels_error(k, err, sizeof err) == 0, "[%s] no kernel error after the typed calls", prec);
    void *bufs[] = {x16, xw, w, o16, o32, d16, d32, att16, att32, dw, scr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dtrain_k_free(k, bufs[i]);
    free(tmp); free(hx); free(hw); free(hx16); free(hx_w);
}

static void test_act_dtype(void)
{
    char err[256] = "";
    const enum dtrain_kernels_precision p[3] = {DTRAIN_PRECISION_FP32, DTRAIN_PRECISION_BF16, DTRAIN_PRECISION_FP16};
    const enum dtrain_dtype want[3] = {DTRAIN_F32, DTRAIN_BF16, DTRAIN_F32};
    for (int i = 0; i < 3; i++) {
        struct dtrain_kernels *k = NULL;
        struct dtrain_kernels_options opt = {.threads = 1, .precision = p[i]};
        if (!ok(dtrain_kernels_create("cpu", &opt, &k, err, sizeof err) == 0, "create cpu kernels in %s",
                dtrain_kernels_precision_name(p[i])))
            continue;
        ok(dtrain_kernels_act_dtype(k) == want[i], "%s precision stores activations in %s",
           dtrain_kernels_precision_name(p[i]), dtrain_dtype_name(want[i]));
        if (p[i] == DTRAIN_PRECISION_BF16)
            test_typed(k);
        dtrain_kernels_destroy(k);
    }
    uint16_t h[5] = {dtrain_bf16_from_f32(1.0f), dtrain_bf16_from_f32(1.00390625f), dtrain_bf16_from_f32(1.01171875f),
                     dtrain_bf16_from_f32(-0.0f), dtrain_bf16_from_f32(NAN)};
    ok(h[0] == 0x3f80 && h[1] == 0x3f80 && h[2] == 0x3f82 && h[3] == 0x8000 && (h[4] & 0x7fc0) == 0x7fc0,
       "bf16 rounding: to nearest, ties to even (1+2^-8 -> 1, 1+3*2^-8 -> 1+2^-6), -0 kept, NaN quiet");
}

int main(void)
{
    char err[256] = "";
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options opt = {.threads = 2};
    if (!ok(dtrain_kernels_create("cpu", &opt, &k, err, sizeof err) == 0, "create cpu kernels%s%s", *err ? ": " : "", err))
        return tap_done();
    ok(dtrain_kernels_create("tpu", &opt, &(struct dtrain_kernels *){NULL}, err, sizeof err) != 0 &&
       strstr(err, "unknown kernel backend") != NULL, "an unknown backend is refused: %s", err);
    test_encoder(k);
    test_layernorm(k, 6, 8);
    test_layernorm(k, 5, 21); /* the row sums' lanes (8) and a tail of 5 */
    test_matmul(k, 1);
    test_matmul(k, 0);
    test_attention(k);
    test_gelu_residual(k);
    test_softmax_xent(k);
    test_adamw(k);
    test_typed(k);
    dtrain_kernels_destroy(k);
    test_act_dtype();
    test_threads();
    return tap_done();
}
