/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The frozen NF4 base linear on the CPU (dtrain_kernels.h, "NF4 frozen
 * weights"): a tile of the weight is dequantised into the instance's
 * scratch (at most CPU_NF4_TILE_FLOATS floats, so the weight stays at
 * ~0.5 byte a weight) and multiplied with CBLAS, the pool splitting the
 * rows of the result as cpu_matmul.c does.  fp32 arithmetic in every
 * precision: rounding 4-bit weights to bf16 would only add an error.
 *
 * Forward: tiles of weight rows, out[:, o0:o1] = inp @ tile^T (each output
 * element one dot product over IC, as the plain matmul).  Input gradient:
 * tiles of weight columns, dinp[:, c0:c1] = dout @ tile (each element one
 * dot product over OC), so no tile adds into another's result. */
#include "cpu_backend.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPU_NF4_TILE_FLOATS ((size_t)1 << 18) /* 1 MiB of dequantised weights */

/* Room for `floats` dequantised weights; NULL (error recorded) when out of memory. */
static float *nf4_scratch(struct dtrain_kernels *k, size_t floats)
{
    struct cpu_kernels *ck = (struct cpu_kernels *)k;
    if (floats > ck->nf4_cap) {
        size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
        float *p = aligned_alloc(64, bytes);
        if (p == NULL) {
            cpu_kernels_fail(k, "out of memory for %zu bytes of NF4 dequantisation scratch", bytes);
            return NULL;
        }
        free(ck->nf4_scratch);
        ck->nf4_scratch = p;
        ck->nf4_cap = bytes / sizeof(float);
    }
    return ck->nf4_scratch;
}

struct nf4_args {
    struct dtrain_nf4 w;
    float *tile;
    int r0, nr, c0, nc; /* the tile's rows and columns of w */
    /* the GEMM on it */
    float *y;
    const float *x, *bias;
    int ldx, ldy;
};

/* tile rows [begin, end) dequantised */
static void dequant_rows(void *p, long begin, long end, int tid)
{
    const struct nf4_args *a = p;
    (void)tid;
    dtrain_nf4_dequantize_tile(a->tile + (size_t)begin * (size_t)a->nc, a->w.data, a->w.rows, a->w.cols,
                               a->r0 + (int)begin, (int)(end - begin), a->c0, a->nc);
}

static void dequant(struct dtrain_kernels *k, struct nf4_args *a)
{
    cpu_parallel(k, a->nr, (size_t)a->nc, dequant_rows, a);
}

/* forward: y rows [begin, end), columns r0..r0+nr-1 = x rows @ tile^T (+ bias) */
static void forward_rows(void *p, long begin, long end, int tid)
{
    const struct nf4_args *a = p;
    float beta = 0.0f;
    float *y = a->y + (size_t)begin * (size_t)a->ldy + (size_t)a->r0;
    (void)tid;
    if (a->bias != NULL) {
        for (long n = begin; n < end; n++)
            memcpy(y + (size_t)(n - begin) * (size_t)a->ldy, a->bias + a->r0, (size_t)a->nr * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(end - begin), a->nr, a->nc, 1.0f,
                a->x + (size_t)begin * (size_t)a->ldx, a->ldx, a->tile, a->nc, beta, y, a->ldy);
}

/* input gradient: y rows [begin, end), columns c0..c0+nc-1 = x rows @ tile */
static void backward_rows(void *p, long begin, long end, int tid)
{
    const struct nf4_args *a = p;
    (void)tid;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(end - begin), a->nc, a->nr, 1.0f,
                a->x + (size_t)begin * (size_t)a->ldx, a->ldx, a->tile, a->nc, 0.0f,
                a->y + (size_t)begin * (size_t)a->ldy + (size_t)a->c0, a->ldy);
}

void cpu_nf4_matmul_forward(struct dtrain_kernels *k, float *out, const float *inp, struct dtrain_nf4 w,
                            const float *bias, int N)
{
    int OC = w.rows, IC = w.cols;
    if (N <= 0 || OC <= 0 || IC <= 0)
        return;
    size_t per = CPU_NF4_TILE_FLOATS / (size_t)IC;
    int tr = per < 1 ? 1 : per > (size_t)OC ? OC : (int)per;
    float *tile = nf4_scratch(k, (size_t)tr * (size_t)IC);
    if (tile == NULL)
        return;
    for (int o0 = 0; o0 < OC; o0 += tr) {
        struct nf4_args a = {.w = w, .tile = tile, .r0 = o0, .nr = o0 + tr <= OC ? tr : OC - o0, .c0 = 0, .nc = IC,
                             .y = out, .x = inp, .bias = bias, .ldx = IC, .ldy = OC};
        dequant(k, &a);
        cpu_parallel(k, N, (size_t)a.nr * (size_t)IC, forward_rows, &a);
    }
}

void cpu_nf4_matmul_backward(struct dtrain_kernels *k, float *dinp, const float *dout, struct dtrain_nf4 w, int N)
{
    int OC = w.rows, IC = w.cols;
    if (N <= 0 || OC <= 0 || IC <= 0)
        return;
    size_t per = CPU_NF4_TILE_FLOATS / (size_t)OC;
    int tc = per < 1 ? 1 : per > (size_t)IC ? IC : (int)per;
    float *tile = nf4_scratch(k, (size_t)tc * (size_t)OC);
    if (tile == NULL)
        return;
    for (int c0 = 0; c0 < IC; c0 += tc) {
        struct nf4_args a = {.w = w, .tile = tile, .r0 = 0, .nr = OC, .c0 = c0, .nc = c0 + tc <= IC ? tc : IC - c0,
                             .y = dinp, .x = dout, .ldx = OC, .ldy = IC};
        dequant(k, &a);
        cpu_parallel(k, N, (size_t)a.nc * (size_t)OC, backward_rows, &a);
    }
}
