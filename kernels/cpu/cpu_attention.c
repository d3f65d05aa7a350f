/* Causal multi-head attention on the CPU; see dtrain_kernels.h.
 * One parallel item is one (batch row, head) pair: its outputs are disjoint
 * from every other item's, so items need no synchronisation. */
#include "cpu_backend.h"

#include <math.h>
#include <string.h>

struct attention_args {
    float *out, *att, *dqkv;
    const float *qkv, *catt, *dout;
    int B, T, NH, HS;
};

static inline float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static inline void axpy(float *y, float alpha, const float *x, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

static void attention_forward_items(void *p, long begin, long end, int tid)
{
    const struct attention_args *a = p;
    (void)tid;
    int T = a->T, NH = a->NH, HS = a->HS;
    size_t C = (size_t)NH * HS, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (long item = begin; item < end; item++) {
        long b = item / NH, h = item % NH;
        const float *base = a->qkv + (size_t)b * T * C3 + (size_t)h * HS;
        for (int t = 0; t < T; t++) {
            const float *q = base + (size_t)t * C3;
            float *row = a->att + (((size_t)b * NH + h) * T + t) * T;
            float maxv = -INFINITY;
            for (int t2 = 0; t2 <= t; t2++) {
                float s = dot(q, base + (size_t)t2 * C3 + C, HS) * scale;
                row[t2] = s;
                if (s > maxv)
                    maxv = s;
            }
            float sum = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                float e = expf(row[t2] - maxv);
                row[t2] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
            float *o = a->out + ((size_t)b * T + t) * C + (size_t)h * HS;
            memset(o, 0, (size_t)HS * sizeof(float));
            for (int t2 = 0; t2 <= t; t2++) {
                row[t2] *= inv;
                axpy(o, row[t2], base + (size_t)t2 * C3 + 2 * C, HS);
            }
        }
    }
}

void cpu_attention_forward(struct dtrain_kernels *k, float *out, float *att, const float *qkv,
                           int B, int T, int NH, int HS)
{
    struct attention_args a = {.out = out, .att = att, .qkv = qkv,
                               .B = B, .T = T, .NH = NH, .HS = HS};
    cpu_parallel(k, (long)B * NH, (size_t)T * T * HS, attention_forward_items, &a);
}

/* For one query row t, with p = att[t][.] and o = sum p[t2] v[t2]:
 *   datt[t2]    = dout . v[t2]
 *   dv[t2]     += p[t2] dout
 *   dpre[t2]    = p[t2] (datt[t2] - sum_j p[j] datt[j])   (softmax backward)
 *   dq          = scale * sum dpre[t2] k[t2]
 *   dk[t2]     += scale * dpre[t2] q
 * The sum over j is taken first, recomputing datt, so no scratch is needed. */
static void attention_backward_items(void *p, long begin, long end, int tid)
{
    const struct attention_args *a = p;
    (void)tid;
    int T = a->T, NH = a->NH, HS = a->HS;
    size_t C = (size_t)NH * HS, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (long item = begin; item < end; item++) {
        long b = item / NH, h = item % NH;
        const float *base = a->qkv + (size_t)b * T * C3 + (size_t)h * HS;
        float *dbase = a->dqkv + (size_t)b * T * C3 + (size_t)h * HS;
        for (int t = 0; t < T; t++) {
            memset(dbase + (size_t)t * C3 + C, 0, (size_t)HS * sizeof(float));
            memset(dbase + (size_t)t * C3 + 2 * C, 0, (size_t)HS * sizeof(float));
        }
        for (int t = 0; t < T; t++) {
            const float *q = base + (size_t)t * C3;
            float *dq = dbase + (size_t)t * C3;
            const float *row = a->catt + (((size_t)b * NH + h) * T + t) * T;
            const float *dy = a->dout + ((size_t)b * T + t) * C + (size_t)h * HS;
            float pd = 0.0f;
            for (int t2 = 0; t2 <= t; t2++)
                pd += row[t2] * dot(dy, base + (size_t)t2 * C3 + 2 * C, HS);
            memset(dq, 0, (size_t)HS * sizeof(float));
            for (int t2 = 0; t2 <= t; t2++) {
                const float *k2 = base + (size_t)t2 * C3 + C;
                const float *v2 = base + (size_t)t2 * C3 + 2 * C;
                float datt = dot(dy, v2, HS);
                axpy(dbase + (size_t)t2 * C3 + 2 * C, row[t2], dy, HS);
                float dpre = row[t2] * (datt - pd) * scale;
                axpy(dq, dpre, k2, HS);
                axpy(dbase + (size_t)t2 * C3 + C, dpre, q, HS);
            }
        }
    }
}

void cpu_attention_backward(struct dtrain_kernels *k, float *dqkv, const float *dout,
                            const float *qkv, const float *att, int B, int T, int NH, int HS)
{
    struct attention_args a = {.dqkv = dqkv, .dout = dout, .qkv = qkv, .catt = att,
                               .B = B, .T = T, .NH = NH, .HS = HS};
    cpu_parallel(k, (long)B * NH, (size_t)T * T * HS * 2, attention_backward_items, &a);
}
