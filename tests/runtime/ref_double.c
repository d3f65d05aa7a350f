/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Double-precision reference layers; see ref_double.h. */
#include "ref_double.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_encoder(double *out, const int32_t *tokens, const double *wte, const double *wpe,
                 int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[((size_t)b * T + t) * C + c] =
                    wte[(size_t)tokens[b * T + t] * C + c] + wpe[(size_t)t * C + c];
}

void ref_layernorm(double *out, const double *inp, const double *w, const double *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[c] - m) * (x[c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = (x[c] - m) * s * w[c] + b[c];
    }
}

void ref_matmul(double *out, const double *inp, const double *w, const double *bias,
                int N, int IC, int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < IC; i++)
                s += inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
}

void ref_attention(double *out, const double *qkv, int B, int T, int NH, int HS)
{
    int C = NH * HS;
    double *p = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
                double maxv = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + ((size_t)b * T + u) * 3 * C + C + (size_t)h * HS;
                    double s = 0;
                    for (int i = 0; i < HS; i++)
                        s += q[i] * k[i];
                    p[u] = s / sqrt((double)HS);
                    if (p[u] > maxv)
                        maxv = p[u];
                }
                for (int u = 0; u <= t; u++) {
                    p[u] = exp(p[u] - maxv);
                    sum += p[u];
                }
                double *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int i = 0; i < HS; i++) {
                    double s = 0;
                    for (int u = 0; u <= t; u++)
                        s += p[u] / sum * qkv[((size_t)b * T + u) * 3 * C + 2 * C + (size_t)h * HS + i];
                    o[i] = s;
                }
            }
    free(p);
}

void ref_gelu(double *out, const double *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}

double ref_xent_mean(const double *logits, const int32_t *targets, int N, int V, int Vp)
{
    double total = 0;
    for (int n = 0; n < N; n++) {
        const double *row = logits + (size_t)n * Vp;
        double maxv = -INFINITY, sum = 0;
        for (int i = 0; i < V; i++)
            if (row[i] > maxv)
                maxv = row[i];
        for (int i = 0; i < V; i++)
            sum += exp(row[i] - maxv);
        total += log(sum) + maxv - row[targets[n]];
    }
    return total / N;
}

double ref_gpt2_loss(const struct dtrain_model_config *c, const double *params,
                     const int32_t *inputs, const int32_t *targets, int B, int T)
{
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T;
    int V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t NC = (size_t)N * C;
    const double *p[DTRAIN_MODEL_NUM_TENSORS];
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++)
        p[t] = params + dtrain_model_tensor_offset(c, (enum dtrain_model_tensor)t);
    double *x = malloc(NC * sizeof(double)), *ln = malloc(NC * sizeof(double));
    double *qkv = malloc(3 * NC * sizeof(double)), *att = malloc(NC * sizeof(double));
    double *proj = malloc(NC * sizeof(double)), *fc = malloc(4 * NC * sizeof(double));
    double *fcg = malloc(4 * NC * sizeof(double));
    double *logits = malloc((size_t)N * Vp * sizeof(double));
    ref_encoder(x, inputs, p[DTRAIN_MODEL_WTE], p[DTRAIN_MODEL_WPE], B, T, C);
    for (int l = 0; l < L; l++) {
        size_t lc = (size_t)l * C, cc = (size_t)C * C;
        ref_layernorm(ln, x, p[DTRAIN_MODEL_LN1W] + lc, p[DTRAIN_MODEL_LN1B] + lc, N, C);
        ref_matmul(qkv, ln, p[DTRAIN_MODEL_QKVW] + 3 * l * cc, p[DTRAIN_MODEL_QKVB] + 3 * lc, N, C, 3 * C);
        ref_attention(att, qkv, B, T, NH, C / NH);
        ref_matmul(proj, att, p[DTRAIN_MODEL_ATTPROJW] + l * cc, p[DTRAIN_MODEL_ATTPROJB] + lc, N, C, C);
        for (size_t i = 0; i < NC; i++)
            x[i] += proj[i];
        ref_layernorm(ln, x, p[DTRAIN_MODEL_LN2W] + lc, p[DTRAIN_MODEL_LN2B] + lc, N, C);
        ref_matmul(fc, ln, p[DTRAIN_MODEL_FCW] + 4 * l * cc, p[DTRAIN_MODEL_FCB] + 4 * lc, N, C, 4 * C);
        ref_gelu(fcg, fc, 4 * NC);
        ref_matmul(proj, fcg, p[DTRAIN_MODEL_FCPROJW] + 4 * l * cc, p[DTRAIN_MODEL_FCPROJB] + lc, N, 4 * C, C);
        for (size_t i = 0; i < NC; i++)
            x[i] += proj[i];
    }
    ref_layernorm(ln, x, p[DTRAIN_MODEL_LNFW], p[DTRAIN_MODEL_LNFB], N, C);
    ref_matmul(logits, ln, p[DTRAIN_MODEL_WTE], NULL, N, C, Vp);
    double loss = ref_xent_mean(logits, targets, N, V, Vp);
    free(x); free(ln); free(qkv); free(att); free(proj); free(fc); free(fcg); free(logits);
    return loss;
}
