/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Causal multi-head attention on the CPU; see dtrain_kernels.h.
 *
 * One parallel item is one (batch row, head) pair in forward, one (batch
 * row, kv head) pair in backward (its query heads in order, the kv
 * gradients summed by sgemm's beta = 1): each item's outputs are disjoint
 * from every other item's.  Its matrix products run as single-threaded
 * sgemm calls on strided views of qkv (leading dimension (NH+2*KVH)*HS):
 *   forward:  S = Q K^T * scale (T x T), row softmax over keys <= query
 *             (0 above the diagonal), out = P V
 *   backward: dP = dout V^T, dV = P^T dout,
 *             dS = P * (dP - rowsum(P * dP)) * scale,
 *             dQ = dS K, dK = dS^T Q
 * The products skip what the causal mask makes zero: the T rows (queries)
 * and T columns (keys) are cut into blocks of ATT_BLOCK, and a product over
 * keys stops at the end of its query block's diagonal block, one over
 * queries starts at its key block's.  The entries left out are exact zeros
 * of P and dS: each sum keeps its nonzero terms, rounded as the BLAS kernel
 * orders them for the shorter shape (within a rounding of the whole
 * square's, not its bits). */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Rows (or columns) per block of the causal products: small enough that the
 * triangle skips most of the masked half, large enough that each sgemm
 * still runs near its best rate (T = 128: 3 of 4 blocks; T = 1024: 136 of
 * 256, and the attention 35% faster on 2 AVX2 cores). */
#define ATT_BLOCK 64

/* Width of the block prefix that covers row/column `t`'s causal range. */
static inline int causal_end(int t, int T)
{
    int end = (t / ATT_BLOCK + 1) * ATT_BLOCK;
    return end < T ? end : T;
}

/* Rows (columns) of the block that starts at t0: ATT_BLOCK, the last one fewer. */
static inline int block_len(int t0, int T)
{
    return T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK;
}

struct attention_args {
    float *out, *att, *dqkv, *scratch;
    const float *qkv, *catt, *dout;
    int B, T, NH, KVH, HS;
};

static void attention_forward_items(void *p, long begin, long end, int tid)
{
    const struct attention_args *a = p;
    (void)tid;
    int T = a->T, NH = a->NH, HS = a->HS, C = NH * HS, C3 = (NH + 2 * a->KVH) * HS;
    int group = NH / a->KVH;
    float scale = 1.0f / sqrtf((float)HS);
    for (long item = begin; item < end; item++) {
        long b = item / NH, h = item % NH;
        const float *q = a->qkv + (size_t)b * T * C3 + (size_t)h * HS;
        const float *kh = a->qkv + (size_t)b * T * C3 + C + (size_t)(h / group) * HS;
        const float *vh = kh + (size_t)a->KVH * HS;
        float *att = a->att + (size_t)item * T * T;
        float *o = a->out + (size_t)b * T * C + (size_t)h * HS;
        for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
            /* query rows t0..t0+m-1 against keys 0..keys-1 */
            int m = block_len(t0, T), keys = causal_end(t0, T);
            float *s = att + (size_t)t0 * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, keys, HS,
                        scale, q + (size_t)t0 * C3, C3, kh, C3, 0.0f, s, T);
            for (int t = t0; t < t0 + m; t++) {
                float *row = att + (size_t)t * T;
                float maxv = cpu_max_of(row, t + 1);
                cpu_exp_shifted(row, t + 1, maxv);
                float sum = cpu_sum_lanes(row, t + 1);
                cpu_scale(row, t + 1, 1.0f / sum);
                memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, keys,
                        1.0f, s, T, vh, C3, 0.0f, o + (size_t)t0 * C, C);
        }
    }
}

void cpu_attention_forward(struct dtrain_kernels *k, float *out, float *att, const float *qkv,
                           int B, int T, int NH, int KVH, int HS)
{
    struct attention_args a = {.out = out, .att = att, .qkv = qkv,
                               .B = B, .T = T, .NH = NH, .KVH = KVH, .HS = HS};
    cpu_parallel(k, (long)B * NH, (size_t)T * T * HS, attention_forward_items, &a);
}

size_t cpu_attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    (void)B; (void)NH; (void)KVH; (void)HS;
    return (size_t)dtrain_kernels_threads(k) * T * T; /* one T x T block per thread */
}

/* item = (b, kv head): its query heads in order, the first writing the kv
 * head's dK and dV (beta 0), the others adding to them (beta 1); with
 * KVH == NH each item is one head, as in plain multi-head attention. */
static void attention_backward_items(void *p, long begin, long end, int tid)
{
    const struct attention_args *a = p;
    int T = a->T, NH = a->NH, KVH = a->KVH, HS = a->HS, C = NH * HS, C3 = (NH + 2 * KVH) * HS;
    int group = NH / KVH;
    float scale = 1.0f / sqrtf((float)HS);
    float *ds = a->scratch + (size_t)tid * T * T;
    for (long item = begin; item < end; item++) {
        long b = item / KVH, kvh = item % KVH;
        const float *kh = a->qkv + (size_t)b * T * C3 + C + (size_t)kvh * HS;
        const float *vh = kh + (size_t)KVH * HS;
        float *dk = a->dqkv + (size_t)b * T * C3 + C + (size_t)kvh * HS;
        float *dv = dk + (size_t)KVH * HS;
        for (int g = 0; g < group; g++) {
            long h = kvh * group + g;
            float beta = g == 0 ? 0.0f : 1.0f;
            const float *q = a->qkv + (size_t)b * T * C3 + (size_t)h * HS;
            float *dq = a->dqkv + (size_t)b * T * C3 + (size_t)h * HS;
            const float *att = a->catt + ((size_t)b * NH + h) * T * T;
            const float *dy = a->dout + (size_t)b * T * C + (size_t)h * HS;
            /* per query block: dP = dout V^T over its keys, then
             * dS = P * (dP - rowsum(P * dP)) * scale, 0 above the diagonal
             * (to its block's end, all the products below read) */
            for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
                int m = block_len(t0, T), keys = causal_end(t0, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, keys, HS,
                            1.0f, dy + (size_t)t0 * C, C, vh, C3, 0.0f, ds + (size_t)t0 * T, T);
                for (int t = t0; t < t0 + m; t++) {
                    const float *prow = att + (size_t)t * T;
                    float *row = ds + (size_t)t * T;
                    float pd = cpu_dot_lanes(prow, row, t + 1);
                    for (int u = 0; u <= t; u++)
                        row[u] = prow[u] * (row[u] - pd) * scale;
                    memset(row + t + 1, 0, (size_t)(keys - t - 1) * sizeof(float));
                }
                /* dQ = dS K over the block's keys */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, keys,
                            1.0f, ds + (size_t)t0 * T, T, kh, C3, 0.0f, dq + (size_t)t0 * C3, C3);
            }
            /* per key block: dV = P^T dout, dK = dS^T Q over the queries
             * from the block's first on */
            for (int u0 = 0; u0 < T; u0 += ATT_BLOCK) {
                int n = block_len(u0, T), queries = T - u0;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, HS, queries,
                            1.0f, att + (size_t)u0 * T + u0, T, dy + (size_t)u0 * C, C,
                            beta, dv + (size_t)u0 * C3, C3);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, HS, queries,
                            1.0f, ds + (size_t)u0 * T + u0, T, q + (size_t)u0 * C3, C3,
                            beta, dk + (size_t)u0 * C3, C3);
            }
        }
    }
}

void cpu_attention_backward(struct dtrain_kernels *k, float *dqkv, float *scratch,
                            const float *dout, const float *qkv, const float *att,
                            int B, int T, int NH, int KVH, int HS)
{
    struct attention_args a = {.dqkv = dqkv, .scratch = scratch, .dout = dout, .qkv = qkv,
                               .catt = att, .B = B, .T = T, .NH = NH, .KVH = KVH, .HS = HS};
    cpu_parallel(k, (long)B * KVH, (size_t)T * T * HS * 2 * (NH / KVH), attention_backward_items, &a);
}
