/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Linear layers on the CPU through CBLAS; see dtrain_kernels.h.
 *
 * OpenBLAS runs single-threaded here (cpu_backend.c) and the pool splits
 * each matmul into one slice per thread: row blocks of the output for the
 * forward and for dinp, row blocks of dweight (with the matching dbias
 * columns) for the weight gradient.  OpenBLAS's own threads would spin
 * between calls and take the cores away from the pool's elementwise loops.
 *
 * fp16 (DTRAIN_PRECISION_FP16, emulated): the operands are rounded to IEEE
 * half precision (_Float16: round to nearest even, overflow to inf) into
 * copies first; CBLAS then multiplies them in fp32, as a GPU's fp16 GEMM
 * accumulates in fp32. */
#include "cpu_backend.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* n floats of x rounded to fp16 (and back), in a new buffer; NULL when out
 * of memory (the caller then computes in fp32). */
static float *round_fp16(const float *x, size_t n)
{
    float *r = x != NULL ? malloc((n + 1) * sizeof(float)) : NULL;
    for (size_t i = 0; r != NULL && i < n; i++)
        r[i] = (float)(_Float16)x[i];
    return r;
}

static int fp16(struct dtrain_kernels *k) { return dtrain_kernels_precision(k) == DTRAIN_PRECISION_FP16; }

struct matmul_args {
    float *out, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout;
    int N, IC, OC;
};

/* out rows [begin, end) = inp rows @ weight^T (+ bias) */
static void forward_rows(void *p, long begin, long end, int tid)
{
    const struct matmul_args *a = p;
    float beta = 0.0f;
    (void)tid;
    float *out = a->out + (size_t)begin * a->OC;
    if (a->bias != NULL) {
        for (long n = begin; n < end; n++)
            memcpy(a->out + (size_t)n * a->OC, a->bias, (size_t)a->OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(end - begin), a->OC, a->IC,
                1.0f, a->inp + (size_t)begin * a->IC, a->IC, a->weight, a->IC, beta, out, a->OC);
}

void cpu_matmul_forward(struct dtrain_kernels *k, float *out, const float *inp,
                        const float *weight, const float *bias, int N, int IC, int OC)
{
    struct matmul_args a = {.out = out, .inp = inp, .weight = weight, .bias = bias,
                            .N = N, .IC = IC, .OC = OC};
    float *ri = NULL, *rw = NULL;
    if (fp16(k) && (ri = round_fp16(inp, (size_t)N * IC)) != NULL && (rw = round_fp16(weight, (size_t)OC * IC)) != NULL) {
        a.inp = ri;
        a.weight = rw;
    }
    cpu_parallel(k, N, (size_t)IC * OC, forward_rows, &a);
    free(ri);
    free(rw);
}

struct backward_split {
    const struct matmul_args *a;
    int parts;
};

static void backward_parts(void *p, long begin, long end, int tid)
{
    const struct backward_split *s = p;
    const struct matmul_args *a = s->a;
    (void)tid;
    for (long part = begin; part < end; part++) {
        /* dinp rows [n0, n1) (=) dout rows @ weight */
        int n0 = (int)((long)a->N * part / s->parts), n1 = (int)((long)a->N * (part + 1) / s->parts);
        if (a->dinp != NULL && n1 > n0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, a->IC, a->OC,
                        1.0f, a->dout + (size_t)n0 * a->OC, a->OC, a->weight, a->IC,
                        0.0f, a->dinp + (size_t)n0 * a->IC, a->IC);
        /* dweight rows [o0, o1) += dout[:, o0:o1]^T @ inp; dbias[o0:o1] += column sums */
        int o0 = (int)((long)a->OC * part / s->parts), o1 = (int)((long)a->OC * (part + 1) / s->parts);
        if (o1 > o0) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, a->IC, a->N,
                        1.0f, a->dout + o0, a->OC, a->inp, a->IC,
                        1.0f, a->dweight + (size_t)o0 * a->IC, a->IC);
            if (a->dbias != NULL)
                for (int n = 0; n < a->N; n++) {
                    const float *d = a->dout + (size_t)n * a->OC;
                    for (int o = o0; o < o1; o++)
                        a->dbias[o] += d[o];
                }
        }
    }
}

void cpu_matmul_backward(struct dtrain_kernels *k, float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight,
                         int N, int IC, int OC)
{
    struct matmul_args a = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout,
                            .inp = inp, .weight = weight, .N = N, .IC = IC, .OC = OC};
    float *rd = NULL, *ri = NULL, *rw = NULL;
    if (fp16(k) && (rd = round_fp16(dout, (size_t)N * OC)) != NULL && (ri = round_fp16(inp, (size_t)N * IC)) != NULL &&
        (rw = round_fp16(weight, (size_t)OC * IC)) != NULL) {
        a.dout = rd; /* dbias sums the rounded gradient too, as the GEMM sees it */
        a.inp = ri;
        a.weight = rw;
    }
    /* one part per thread: the split changes no output element's sum */
    struct backward_split s = {.a = &a, .parts = dtrain_kernels_threads(k)};
    cpu_parallel(k, s.parts, (size_t)N * IC * OC / (size_t)s.parts, backward_parts, &s);
    free(rd);
    free(ri);
    free(rw);
}
