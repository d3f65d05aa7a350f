/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Vocabulary-parallel embedding and cross-entropy on the CPU: the loops a
 * tensor-parallel rank runs on its columns between the collectives (see
 * dtrain_kernels.h).  One thread, rows in order: the sums are the whole
 * lookup's and the whole softmax's, bit for bit where the doc says so. */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <math.h>
#include <string.h>

void cpu_embedding_vp_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens, const float *wte_local,
                              const float *wpe, int B, int T, int C, int v0, int Vl, int add_wpe)
{
    (void)k;
    for (long bt = 0; bt < (long)B * T; bt++) {
        long row = (long)tokens[bt] - v0;
        const float *w = (row >= 0 && row < Vl) ? wte_local + (size_t)row * C : NULL;
        const float *p = add_wpe && wpe != NULL ? wpe + (size_t)(bt % T) * C : NULL;
        float *o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++)
            o[c] = (w != NULL && p != NULL) ? w[c] + p[c] : w != NULL ? w[c] : p != NULL ? p[c] : 0.0f;
    }
}

void cpu_embedding_vp_backward(struct dtrain_kernels *k, float *dwte_local, float *dwpe, const float *dout,
                               const int32_t *tokens, int B, int T, int C, int v0, int Vl)
{
    (void)k;
    /* rows in order, as the whole lookup's backward adds them */
    for (long bt = 0; bt < (long)B * T; bt++) {
        long row = (long)tokens[bt] - v0;
        const float *d = dout + (size_t)bt * C;
        if (dwpe != NULL) {
            float *dp = dwpe + (size_t)(bt % T) * C;
            for (int c = 0; c < C; c++)
                dp[c] += d[c];
        }
        if (row >= 0 && row < Vl) {
            float *dw = dwte_local + (size_t)row * C;
            for (int c = 0; c < C; c++)
                dw[c] += d[c];
        }
    }
}

void cpu_xent_vp_rowmax(struct dtrain_kernels *k, float *row_max, const float *logits, int N, int Vl, int nv)
{
    (void)k;
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * Vl;
        row_max[n] = cpu_max_of(row, nv);
    }
}

void cpu_xent_vp_exp(struct dtrain_kernels *k, float *logits, float *sums, const float *all_max, int size,
                     const int32_t *targets, int v0, int N, int Vl, int nv)
{
    (void)k;
    float *sum = sums, *target = sums + N;
    for (int n = 0; n < N; n++) {
        float m = -INFINITY;
        for (int r = 0; r < size; r++)
            if (all_max[(size_t)r * N + n] > m)
                m = all_max[(size_t)r * N + n];
        float *row = logits + (size_t)n * Vl;
        long t = (long)targets[n] - v0;
        target[n] = (t >= 0 && t < nv) ? row[t] - m : 0.0f;
        cpu_exp_shifted(row, nv, m);
        float s = cpu_sum_lanes(row, nv);
        if (Vl > nv)
            memset(row + nv, 0, (size_t)(Vl - nv) * sizeof(float));
        sum[n] = s;
    }
}

void cpu_xent_vp_finish(struct dtrain_kernels *k, float *logits, float *losses, const float *sums, int N, int Vl,
                        int nv)
{
    (void)k;
    const float *sum = sums, *target = sums + N;
    for (int n = 0; n < N; n++) {
        /* -log(e^(x_t - max) / sum), as the whole softmax computes it */
        losses[n] = logf(sum[n]) - target[n];
        float inv = 1.0f / sum[n], *row = logits + (size_t)n * Vl;
        for (int i = 0; i < nv; i++)
            row[i] *= inv;
    }
}

void cpu_xent_vp_backward(struct dtrain_kernels *k, float *probs_dlogits, const int32_t *targets, int v0,
                          float dloss, int N, int Vl, int nv)
{
    (void)k;
    for (int n = 0; n < N; n++) {
        float *row = probs_dlogits + (size_t)n * Vl;
        for (int i = 0; i < nv; i++)
            row[i] *= dloss;
        long t = (long)targets[n] - v0;
        if (t >= 0 && t < nv)
            row[t] -= dloss;
        if (Vl > nv)
            memset(row + nv, 0, (size_t)(Vl - nv) * sizeof(float));
    }
}
