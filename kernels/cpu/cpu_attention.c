/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Causal multi-head attention on the CPU; see dtrain_kernels.h.
 *
 * One parallel item is one (batch row, head) pair, whose outputs are
 * disjoint from every other item's.  Its matrix products run as single-
 * threaded sgemm calls on strided views of qkv (leading dimension 3C):
 *   forward:  S = Q K^T * scale (T x T), row softmax over keys <= query
 *             (0 above the diagonal), out = P V
 *   backward: dP = dout V^T, dV = P^T dout,
 *             dS = P * (dP - rowsum(P * dP)) * scale,
 *             dQ = dS K, dK = dS^T Q
 * The full T x T products do twice the causal work, at sgemm speed. */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

struct attention_args {
    float *out, *att, *dqkv, *scratch;
    const float *qkv, *catt, *dout;
    int B, T, NH, HS;
};

static void attention_forward_items(void *p, long begin, long end, int tid)
{
    const struct attention_args *a = p;
    (void)tid;
    int T = a->T, NH = a->NH, HS = a->HS, C = NH * HS, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (long item = begin; item < end; item++) {
        long b = item / NH, h = item % NH;
        const float *q = a->qkv + (size_t)b * T * C3 + (size_t)h * HS;
        float *att = a->att + (size_t)item * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS,
                    scale, q, C3, q + C, C3, 0.0f, att, T);
        for (int t = 0; t < T; t++) {
            float *row = att + (size_t)t * T;
            float maxv = cpu_max_of(row, t + 1);
            cpu_exp_shifted(row, t + 1, maxv);
            float sum = cpu_sum_in_order(row, t + 1);
            cpu_scale(row, t + 1, 1.0f / sum);
            memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T,
                    1.0f, att, T, q + 2 * C, C3, 0.0f,
                    a->out + (size_t)b * T * C + (size_t)h * HS, C);
    }
}

void cpu_attention_forward(struct dtrain_kernels *k, float *out, float *att, const float *qkv,
                           int B, int T, int NH, int HS)
{
    struct attention_args a = {.out = out, .att = att, .qkv = qkv,
                               .B = B, .T = T, .NH = NH, .HS = HS};
    cpu_parallel(k, (long)B * NH, (size_t)T * T * HS, attention_forward_items, &a);
}

size_t cpu_attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int HS)
{
    (void)B; (void)NH; (void)HS;
    return (size_t)dtrain_kernels_threads(k) * T * T; /* one T x T block per thread */
}

static void attention_backward_items(void *p, long begin, long end, int tid)
{
    const struct attention_args *a = p;
    int T = a->T, NH = a->NH, HS = a->HS, C = NH * HS, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    float *ds = a->scratch + (size_t)tid * T * T;
    for (long item = begin; item < end; item++) {
        long b = item / NH, h = item % NH;
        const float *q = a->qkv + (size_t)b * T * C3 + (size_t)h * HS;
        float *dq = a->dqkv + (size_t)b * T * C3 + (size_t)h * HS;
        const float *att = a->catt + (size_t)item * T * T;
        const float *dy = a->dout + (size_t)b * T * C + (size_t)h * HS;
        /* dP = dout V^T, dV = P^T dout */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS,
                    1.0f, dy, C, q + 2 * C, C3, 0.0f, ds, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T,
                    1.0f, att, T, dy, C, 0.0f, dq + 2 * C, C3);
        /* dS = P * (dP - rowsum(P * dP)) * scale, 0 above the diagonal */
        for (int t = 0; t < T; t++) {
            const float *prow = att + (size_t)t * T;
            float *row = ds + (size_t)t * T;
            float pd = 0.0f;
            for (int u = 0; u <= t; u++)
                pd += prow[u] * row[u];
            for (int u = 0; u <= t; u++)
                row[u] = prow[u] * (row[u] - pd) * scale;
            memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
        }
        /* dQ = dS K, dK = dS^T Q */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T,
                    1.0f, ds, T, q + C, C3, 0.0f, dq, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T,
                    1.0f, ds, T, q, C3, 0.0f, dq + C, C3);
    }
}

void cpu_attention_backward(struct dtrain_kernels *k, float *dqkv, float *scratch,
                            const float *dout, const float *qkv, const float *att,
                            int B, int T, int NH, int HS)
{
    struct attention_args a = {.dqkv = dqkv, .scratch = scratch, .dout = dout, .qkv = qkv,
                               .catt = att, .B = B, .T = T, .NH = NH, .HS = HS};
    cpu_parallel(k, (long)B * NH, (size_t)T * T * HS * 2, attention_backward_items, &a);
}
