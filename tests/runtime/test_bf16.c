/* SPDX-License-Identifier: GPL-2.0-or-later */
/* bf16 precision on the cpu backend (cpu_matmul.c): operands rounded to
 * bf16 with ties to even, then fp32 GEMMs, which is exact emulation of a
 * bf16 GEMM with fp32 accumulation: checked on values whose rounding is
 * known by hand and against a double-precision GEMM of the rounded
 * operands; dbias stays the fp32 sum of dout; same inputs, same bits.
 * The same checks on the oneDNN path (kernels/cpu/cpu_onednn.c), forced
 * with DTRAIN_CPU_ONEDNN=force where the CPU has no bf16 instructions (then
 * oneDNN multiplies f32 operands holding the bf16 values), and training:
 * the losses of 12 steps in bf16 (both paths) within 2% of fp32's, the two
 * bf16 paths within 0.1% of each other, and the same bits twice. */
#include "dtrain_blas.h"
#include "dtrain_gpt2.h"
#include "dtrain_kernels.h"
#include "dtrain_optim.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* bf16 rounding written out for the test: to the nearest multiple of the
 * bf16 ulp, ties to even, in double (no bit tricks, unlike the kernel). */
static float ref_bf16(float x)
{
    if (x == 0.0f || !isfinite(x))
        return x;
    int e;
    frexp(x, &e);                   /* |x| in [2^(e-1), 2^e) */
    double ulp = ldexp(1.0, e - 8); /* 8 significant bits */
    double q = x / ulp, f = floor(q), r = q - f;
    if (r > 0.5 || (r == 0.5 && fmod(f, 2.0) != 0.0))
        f += 1.0;
    return (float)(f * ulp);
}

static float uniform(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)(*s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* A layer of the trainer's shapes, forward and backward, on k16 (bf16);
 * `path` names it in the test points. */
static void layer_checks(struct dtrain_kernels *k16, struct dtrain_kernels *k32, const char *path)
{
    /* a layer of the trainer's shapes, forward and backward */
    enum { N = 96, IC = 80, OC = 72 };
    float *inp = malloc(sizeof(float) * N * IC), *wt = malloc(sizeof(float) * OC * IC), *bias = malloc(sizeof(float) * OC);
    float *dout = malloc(sizeof(float) * N * OC), *o1 = malloc(sizeof(float) * N * OC), *o2 = malloc(sizeof(float) * N * OC);
    float *dinp = calloc(N * IC, sizeof(float)), *dw = calloc(OC * IC, sizeof(float)), *db = calloc(OC, sizeof(float));
    unsigned s = 7;
    for (int i = 0; i < N * IC; i++) inp[i] = uniform(&s);
    for (int i = 0; i < OC * IC; i++) wt[i] = uniform(&s) * 0.1f;
    for (int i = 0; i < OC; i++) bias[i] = uniform(&s);
    for (int i = 0; i < N * OC; i++) dout[i] = uniform(&s);
    dtrain_k_matmul_forward(k16, dtrain_tensor_f32(o1), dtrain_tensor_f32(inp), wt, bias, N, IC, OC);
    double worst = 0.0, diff32 = 0.0;
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++) {
            double ref = bias[oc], scale = fabs(bias[oc]);
            for (int ic = 0; ic < IC; ic++) {
                double p = (double)ref_bf16(inp[n * IC + ic]) * ref_bf16(wt[oc * IC + ic]);
                ref += p;
                scale += fabs(p);
            }
            double e = fabs(o1[n * OC + oc] - ref) / scale;
            if (e > worst) worst = e;
        }
    ok(worst < 1e-6, "%s: forward = a GEMM of the bf16-rounded operands with fp32 accumulation (relative %.2g)", path, worst);
    dtrain_k_matmul_forward(k32, dtrain_tensor_f32(o2), dtrain_tensor_f32(inp), wt, bias, N, IC, OC);
    for (int i = 0; i < N * OC; i++)
        diff32 = fmax(diff32, fabs(o1[i] - o2[i]));
    ok(diff32 > 1e-4 && diff32 < 5e-2, "%s: and differs from fp32 by what bf16 rounding gives (max %.3g)", path, diff32);
    dtrain_k_matmul_forward(k16, dtrain_tensor_f32(o2), dtrain_tensor_f32(inp), wt, bias, N, IC, OC);
    ok(memcmp(o1, o2, sizeof(float) * N * OC) == 0, "%s: same inputs, same bits", path);
    /* a bf16 result (which oneDNN writes itself where it can) is the fp32
     * result of the same inputs rounded once, bit for bit */
    uint16_t *o16 = malloc(sizeof(uint16_t) * N * OC), *dinp16 = malloc(sizeof(uint16_t) * N * IC);
    dtrain_k_matmul_forward(k16, dtrain_tensor_of(DTRAIN_BF16, o16), dtrain_tensor_f32(inp), wt, bias, N, IC, OC);
    int bad16 = -1;
    for (int i = 0; i < N * OC && bad16 < 0; i++)
        if (o16[i] != dtrain_bf16_from_f32(o1[i]))
            bad16 = i;
    ok(bad16 < 0, "%s: forward into a bf16 tensor = the fp32 result rounded to bf16, bit for bit (%s)", path,
       bad16 < 0 ? "every element" : "differs");
    if (bad16 >= 0)
        diag("element %d: 0x%04x, the fp32 result %a rounds to 0x%04x", bad16, o16[bad16], (double)o1[bad16],
             dtrain_bf16_from_f32(o1[bad16]));

    dtrain_k_matmul_backward(k16, dtrain_tensor_f32(dinp), dw, db, dtrain_tensor_f32(dout), dtrain_tensor_f32(inp), wt, N, IC, OC);
    double wi = 0.0, ww = 0.0, wb = 0.0;
    for (int n = 0; n < N; n++)
        for (int ic = 0; ic < IC; ic++) {
            double ref = 0.0, scale = 0.0;
            for (int oc = 0; oc < OC; oc++) {
                double p = (double)ref_bf16(dout[n * OC + oc]) * ref_bf16(wt[oc * IC + ic]);
                ref += p; scale += fabs(p);
            }
            wi = fmax(wi, fabs(dinp[n * IC + ic] - ref) / scale);
        }
    for (int oc = 0; oc < OC; oc++) {
        for (int ic = 0; ic < IC; ic++) {
            double ref = 0.0, scale = 0.0;
            for (int n = 0; n < N; n++) {
                double p = (double)ref_bf16(dout[n * OC + oc]) * ref_bf16(inp[n * IC + ic]);
                ref += p; scale += fabs(p);
            }
            ww = fmax(ww, fabs(dw[oc * IC + ic] - ref) / scale);
        }
        double ref = 0.0, scale = 0.0;
        for (int n = 0; n < N; n++) {
            ref += dout[n * OC + oc];
            scale += fabs(dout[n * OC + oc]);
        }
        wb = fmax(wb, fabs(db[oc] - ref) / scale);
    }
    ok(wi < 1e-6 && ww < 1e-6, "%s: backward: dinp and dweight from the rounded operands (relative %.2g, %.2g)", path, wi, ww);
    ok(wb < 1e-6, "%s: dbias: the fp32 sum of dout, unrounded (relative %.2g)", path, wb);
    float *dinp2 = calloc(N * IC, sizeof(float)), *dw2 = calloc(OC * IC, sizeof(float)), *db2 = calloc(OC, sizeof(float));
    dtrain_k_matmul_backward(k16, dtrain_tensor_f32(dinp2), dw2, db2, dtrain_tensor_f32(dout), dtrain_tensor_f32(inp), wt, N, IC, OC);
    ok(memcmp(dinp, dinp2, sizeof(float) * N * IC) == 0 && memcmp(dw, dw2, sizeof(float) * OC * IC) == 0 &&
       memcmp(db, db2, sizeof(float) * OC) == 0, "%s: backward: same inputs, same bits", path);
    memset(dw2, 0, sizeof(float) * OC * IC);
    memset(db2, 0, sizeof(float) * OC);
    dtrain_k_matmul_backward(k16, dtrain_tensor_of(DTRAIN_BF16, dinp16), dw2, db2, dtrain_tensor_f32(dout),
                             dtrain_tensor_f32(inp), wt, N, IC, OC);
    bad16 = -1;
    for (int i = 0; i < N * IC && bad16 < 0; i++)
        if (dinp16[i] != dtrain_bf16_from_f32(dinp[i]))
            bad16 = i;
    ok(bad16 < 0 && memcmp(dw, dw2, sizeof(float) * OC * IC) == 0 && memcmp(db, db2, sizeof(float) * OC) == 0,
       "%s: backward into a bf16 dinp = the fp32 dinp rounded, bit for bit; dweight and dbias the same bits", path);
    if (bad16 >= 0)
        diag("dinp element %d: 0x%04x, the fp32 result %a rounds to 0x%04x", bad16, dinp16[bad16],
             (double)dinp[bad16], dtrain_bf16_from_f32(dinp[bad16]));
    /* a bf16 dout (the model's dqkv and dfc, whose matmuls have biases):
     * dinp, dweight and dbias the bits of the same call on its values
     * widened to fp32 */
    uint16_t *dout16 = malloc(sizeof(uint16_t) * N * OC);
    float *doutw = malloc(sizeof(float) * N * OC), *dinp3 = calloc(N * IC, sizeof(float));
    float *dw3 = calloc(OC * IC, sizeof(float)), *db3 = calloc(OC, sizeof(float));
    for (int i = 0; i < N * OC; i++) {
        dout16[i] = dtrain_bf16_from_f32(dout[i]);
        doutw[i] = dtrain_bf16_to_f32(dout16[i]);
    }
    memset(dw2, 0, sizeof(float) * OC * IC);
    memset(db2, 0, sizeof(float) * OC);
    dtrain_k_matmul_backward(k16, dtrain_tensor_f32(dinp2), dw2, db2, dtrain_tensor_f32(doutw), dtrain_tensor_f32(inp),
                             wt, N, IC, OC);
    dtrain_k_matmul_backward(k16, dtrain_tensor_f32(dinp3), dw3, db3, dtrain_tensor_of(DTRAIN_BF16, dout16),
                             dtrain_tensor_f32(inp), wt, N, IC, OC);
    ok(memcmp(dinp2, dinp3, sizeof(float) * N * IC) == 0 && memcmp(dw2, dw3, sizeof(float) * OC * IC) == 0 &&
       memcmp(db2, db3, sizeof(float) * OC) == 0,
       "%s: backward from a bf16 dout: dinp, dweight and dbias the bits of its values widened", path);
    free(dout16); free(doutw); free(dinp3); free(dw3); free(db3);
    free(dinp2); free(dw2); free(db2); free(o16); free(dinp16);

    free(inp); free(wt); free(bias); free(dout); free(o1); free(o2); free(dinp); free(dw); free(db);
}

/* 12 training steps of a small GPT-2 on 2 threads; losses[12] and the
 * final parameters (malloc'd, *np floats).  onednn: DTRAIN_CPU_ONEDNN. */
static int train(enum dtrain_kernels_precision p, const char *onednn, float *losses, float **params, size_t *np,
                 char *line, size_t linelen)
{
    struct dtrain_model_config cfg = {.max_seq_len = 32, .vocab_size = 96, .padded_vocab_size = 128,
                                     .num_layers = 2, .num_heads = 2, .channels = 64};
    enum { B = 4, T = 32, STEPS = 12 };
    struct dtrain_kernels *k = NULL;
    struct dtrain_gpt2 *m = NULL;
    struct dtrain_adamw *opt = NULL;
    char err[256];
    int rc = -1;
    int32_t in[B * T], tg[B * T];
    *params = NULL;
    if (onednn != NULL)
        setenv("DTRAIN_CPU_ONEDNN", onednn, 1);
    else
        unsetenv("DTRAIN_CPU_ONEDNN");
    struct dtrain_kernels_options o = {.threads = 2, .precision = p};
    if (dtrain_kernels_create("cpu", &o, &k, err, sizeof err) != 0 ||
        dtrain_gpt2_create(k, &cfg, B, T, &m, err, sizeof err) != 0 ||
        dtrain_adamw_create(k, dtrain_gpt2_num_params(m), &opt, err, sizeof err) != 0)
        goto out;
    dtrain_cpu_bf16_describe(k, line, linelen);
    *np = dtrain_gpt2_num_params(m);
    if ((*params = malloc(*np * sizeof(float))) == NULL)
        goto out;
    dtrain_model_init_params(&cfg, 42, *params);
    dtrain_gpt2_set_params(m, *params);
    struct dtrain_optim_config oc = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                     .schedule = DTRAIN_LR_CONSTANT, .total_steps = STEPS};
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < B * T; i++) { /* a learnable pattern: the next token is (3 t + 1) mod V */
            in[i] = (int32_t)((i * 7 + s * 13) % cfg.vocab_size);
            tg[i] = (int32_t)((3 * in[i] + 1) % cfg.vocab_size);
        }
        if (dtrain_gpt2_forward(m, in, tg, B, T, &losses[s], err, sizeof err) != 0)
            goto out;
        dtrain_gpt2_zero_grad(m);
        if (dtrain_gpt2_backward(m, err, sizeof err) != 0)
            goto out;
        double norm2 = dtrain_k_sumsq(k, dtrain_gpt2_grads(m), *np);
        dtrain_adamw_update(opt, dtrain_gpt2_params(m), dtrain_gpt2_grads(m), &oc, s, oc.lr,
                            dtrain_clip_scale(&oc, norm2));
    }
    dtrain_gpt2_get_params(m, *params);
    rc = 0;
out:
    if (rc != 0)
        diag("training in %s (DTRAIN_CPU_ONEDNN=%s): %s", dtrain_kernels_precision_name(p), onednn ? onednn : "",
             err);
    dtrain_adamw_destroy(opt);
    dtrain_gpt2_destroy(m);
    dtrain_kernels_destroy(k);
    unsetenv("DTRAIN_CPU_ONEDNN");
    return rc;
}

static void training_checks(void)
{
    enum { STEPS = 12 };
    float l32[STEPS], lfb[STEPS], ldn[STEPS], ldn2[STEPS];
    float *p32 = NULL, *pfb = NULL, *pdn = NULL, *pdn2 = NULL;
    size_t n = 0;
    char line[320] = "", fbline[320] = "";
    if (!ok(train(DTRAIN_PRECISION_FP32, NULL, l32, &p32, &n, line, sizeof line) == 0 &&
            train(DTRAIN_PRECISION_BF16, "off", lfb, &pfb, &n, fbline, sizeof fbline) == 0,
            "training 12 steps in fp32 and in bf16 on fp32 GEMMs (%s)", fbline))
        goto out;
    double worst = 0.0;
    for (int s = 0; s < STEPS; s++)
        worst = fmax(worst, fabs(lfb[s] - l32[s]) / l32[s]);
    ok(worst < 0.02 && l32[STEPS - 1] < l32[0] - 0.1f,
       "bf16 on fp32 GEMMs: every step's loss within 2%% of fp32's (worst %.2g%%; fp32 %.4f -> %.4f)",
       100 * worst, l32[0], l32[STEPS - 1]);
    if (train(DTRAIN_PRECISION_BF16, "force", ldn, &pdn, &n, line, sizeof line) != 0) {
        ok(0, "training in bf16 on the oneDNN path");
        goto out;
    }
    if (strncmp(line, "oneDNN", 6) != 0) {
        skip("no oneDNN path: built without oneDNN");
        skip("no oneDNN path: built without oneDNN");
        skip("no oneDNN path: built without oneDNN");
        goto out;
    }
    diag("oneDNN path: %s", line);
    double wdn = 0.0, wfb = 0.0;
    for (int s = 0; s < STEPS; s++) {
        wdn = fmax(wdn, fabs(ldn[s] - l32[s]) / l32[s]);
        wfb = fmax(wfb, fabs(ldn[s] - lfb[s]) / lfb[s]);
    }
    ok(wdn < 0.02, "bf16 through oneDNN: every step's loss within 2%% of fp32's (worst %.2g%%)", 100 * wdn);
    ok(wfb < 1e-3, "and within 0.1%% of bf16 on fp32 GEMMs (the same rounded operands; worst %.2g%%)", 100 * wfb);
    ok(train(DTRAIN_PRECISION_BF16, "force", ldn2, &pdn2, &n, line, sizeof line) == 0 &&
       memcmp(ldn, ldn2, sizeof ldn) == 0 && memcmp(pdn, pdn2, n * sizeof(float)) == 0,
       "bf16 through oneDNN: the same run twice gives the same losses and parameters, bit for bit");
out:
    free(p32); free(pfb); free(pdn); free(pdn2);
}

int main(void)
{
    char err[256] = "", line[320] = "";
    unsetenv("DTRAIN_CPU_ONEDNN");
    struct dtrain_kernels *k16 = NULL, *k32 = NULL;
    struct dtrain_kernels_options o16 = {.threads = 2, .precision = DTRAIN_PRECISION_BF16};
    struct dtrain_kernels_options o32 = {.threads = 2, .precision = DTRAIN_PRECISION_FP32};
    if (!ok(dtrain_kernels_create("cpu", &o16, &k16, err, sizeof err) == 0 &&
            dtrain_kernels_precision(k16) == DTRAIN_PRECISION_BF16, "cpu kernels in bf16: %s", err) ||
        !ok(dtrain_kernels_create("cpu", &o32, &k32, err, sizeof err) == 0, "cpu kernels in fp32"))
        return tap_done();
    struct dtrain_kernels_options od = {.threads = 1};
    struct dtrain_kernels *kd = NULL;
    ok(dtrain_kernels_create("cpu", &od, &kd, err, sizeof err) == 0 &&
       dtrain_kernels_precision(kd) == DTRAIN_PRECISION_FP32, "the cpu default stays fp32");
    dtrain_kernels_destroy(kd);

    /* by hand: 1 + 2^-9 -> 1 (below half an ulp), 1 + 2^-8 -> 1 (a tie, to even),
     * 1 + 3 * 2^-8 -> 1 + 2^-6 (a tie, to even upwards) */
    float x[3] = {1.0f + 0x1p-9f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f}, w = 1.0f, out[3];
    dtrain_k_matmul_forward(k16, dtrain_tensor_f32(out), dtrain_tensor_f32(x), &w, NULL, 3, 1, 1);
    ok(out[0] == 1.0f && out[1] == 1.0f && out[2] == 1.0f + 0x1p-6f,
       "rounding to nearest, ties to even: %a %a %a", out[0], out[1], out[2]);
    dtrain_k_matmul_forward(k32, dtrain_tensor_f32(out), dtrain_tensor_f32(x), &w, NULL, 3, 1, 1);
    ok(out[0] == x[0] && out[2] == x[2], "fp32 keeps the same values unrounded");
    dtrain_cpu_bf16_describe(k16, line, sizeof line);
    diag("bf16 matmuls by default here: %s", line);
    layer_checks(k16, k32, "default");

    /* the oneDNN path, forced where the CPU has no bf16 instructions */
    struct dtrain_kernels *kf = NULL;
    setenv("DTRAIN_CPU_ONEDNN", "force", 1);
    if (ok(dtrain_kernels_create("cpu", &o16, &kf, err, sizeof err) == 0, "DTRAIN_CPU_ONEDNN=force: %s", err)) {
        dtrain_cpu_bf16_describe(kf, line, sizeof line);
        diag("forced: %s", line);
        if (strncmp(line, "oneDNN", 6) == 0) {
            dtrain_k_matmul_forward(kf, dtrain_tensor_f32(out), dtrain_tensor_f32(x), &w, NULL, 3, 1, 1);
            ok(out[0] == 1.0f && out[1] == 1.0f && out[2] == 1.0f + 0x1p-6f,
               "oneDNN: rounding to nearest, ties to even: %a %a %a", out[0], out[1], out[2]);
            layer_checks(kf, k32, "oneDNN");
        } else {
            for (int i = 0; i < 10; i++)
                skip("no oneDNN path: built without oneDNN");
        }
        dtrain_kernels_destroy(kf);
        kf = NULL;
    }
    setenv("DTRAIN_CPU_ONEDNN", "sometimes", 1);
    ok(dtrain_kernels_create("cpu", &o16, &kf, err, sizeof err) != 0 && strstr(err, "DTRAIN_CPU_ONEDNN=sometimes") &&
       strstr(err, "auto") && strstr(err, "force"), "DTRAIN_CPU_ONEDNN=sometimes is refused in one line: %s", err);
    dtrain_kernels_destroy(kf);
    unsetenv("DTRAIN_CPU_ONEDNN");

    training_checks();
    dtrain_kernels_destroy(k16);
    dtrain_kernels_destroy(k32);
    return tap_done();
}
