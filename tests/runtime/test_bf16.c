/* SPDX-License-Identifier: GPL-2.0-or-later */
/* bf16 precision on the cpu backend (cpu_matmul.c): operands rounded to
 * bf16 with ties to even, then fp32 GEMMs, which is exact emulation of a
 * bf16 GEMM with fp32 accumulation: checked on values whose rounding is
 * known by hand and against a double-precision GEMM of the rounded
 * operands; dbias stays the fp32 sum of dout; same inputs, same bits. */
#include "dtrain_kernels.h"
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

int main(void)
{
    char err[256] = "";
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
    dtrain_k_matmul_forward(k16, out, x, &w, NULL, 3, 1, 1);
    ok(out[0] == 1.0f && out[1] == 1.0f && out[2] == 1.0f + 0x1p-6f,
       "rounding to nearest, ties to even: %a %a %a", out[0], out[1], out[2]);
    dtrain_k_matmul_forward(k32, out, x, &w, NULL, 3, 1, 1);
    ok(out[0] == x[0] && out[2] == x[2], "fp32 keeps the same values unrounded");

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
    dtrain_k_matmul_forward(k16, o1, inp, wt, bias, N, IC, OC);
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
    ok(worst < 1e-6, "forward = a GEMM of the bf16-rounded operands with fp32 accumulation (relative %.2g)", worst);
    dtrain_k_matmul_forward(k32, o2, inp, wt, bias, N, IC, OC);
    for (int i = 0; i < N * OC; i++)
        diff32 = fmax(diff32, fabs(o1[i] - o2[i]));
    ok(diff32 > 1e-4 && diff32 < 5e-2, "and differs from fp32 by what bf16 rounding gives (max %.3g)", diff32);
    dtrain_k_matmul_forward(k16, o2, inp, wt, bias, N, IC, OC);
    ok(memcmp(o1, o2, sizeof(float) * N * OC) == 0, "same inputs, same bits");

    dtrain_k_matmul_backward(k16, dinp, dw, db, dout, inp, wt, N, IC, OC);
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
    ok(wi < 1e-6 && ww < 1e-6, "backward: dinp and dweight from the rounded operands (relative %.2g, %.2g)", wi, ww);
    ok(wb < 1e-6, "dbias: the fp32 sum of dout, unrounded (relative %.2g)", wb);

    free(inp); free(wt); free(bias); free(dout); free(o1); free(o2); free(dinp); free(dw); free(db);
    dtrain_kernels_destroy(k16);
    dtrain_kernels_destroy(k32);
    return tap_done();
}
