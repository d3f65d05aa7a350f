/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Linear layers on the CPU through CBLAS; see dtrain_kernels.h.
 *
 * OpenBLAS runs single-threaded here (cpu_backend.c) and the pool splits
 * each matmul into one slice per thread: row blocks of the output for the
 * forward and for dinp, row blocks of dweight (with the matching dbias
 * columns) for the weight gradient.  OpenBLAS's own threads would spin
 * between calls and take the cores away from the pool's elementwise loops.
 *
 * bf16 and fp16 precision: the operands (inp, weight, dout) are rounded
 * (to nearest even) into scratch, kept in fp32 slots: to bf16, or to IEEE
 * half (fp16_round: 65520 and above to inf, which dynamic loss scaling detects).
 * The product of two such values is exact in fp32, so an fp32 GEMM on the
 * rounded operands computes what a bf16/fp16 GEMM with fp32 accumulation
 * (AMX, the GPU's tensor cores) does, up to the order of the sums: the
 * numbers of the CUDA backend's bf16 matmuls, at fp32 speed.  Outputs,
 * biases, dbias and gradients stay fp32.
 *
 * bf16 on CPUs with AMX-BF16 / AVX512-BF16 (cpu_onednn.c): the operands are
 * converted to bf16 (the same rounding; a bf16 tensor goes as it is,
 * cpu_matmul_*_bits) and each thread's slice runs as one oneDNN matmul with
 * fp32 accumulation; the weight gradient reads its slice of dout's columns
 * transposed in place (a strided source), or, where oneDNN cannot build
 * that, from a transposed copy (OC x N). */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* x rounded to the nearest bf16 (ties to even), in an fp32; NaN stays NaN. */
static inline float bf16_round(float x)
{
    return dtrain_bf16_to_f32(dtrain_bf16_from_f32(x));
}

/* x rounded to the nearest IEEE half (ties to even), in an fp32: 10
 * fraction bits, subnormals in steps of 2^-24, 65520 and above to inf.
 * Written out rather than (_Float16)x, which not every compiler takes on
 * x86-64 (clang 14 does not). */
static inline float fp16_round(float x)
{
    float a = fabsf(x);
    if (!(a < 65520.0f)) /* NaN, inf, and what rounds past 65504 */
        return a >= 65520.0f ? copysignf(INFINITY, x) : x;
    int e;
    frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    float step = e - 11 < -24 ? 0x1p-24f : ldexpf(1.0f, e - 11);
    return copysignf(nearbyintf(a / step) * step, x); /* nearbyintf: ties to even */
}

/* Up to three operands rounded in one pass of the pool (one fork-join):
 * item i belongs to the first operand whose items reach past i. */
#define ROUND_MAX 3
struct round_args {
    float *dst[ROUND_MAX];
    const float *src[ROUND_MAX];
    size_t n[ROUND_MAX];
    long first[ROUND_MAX + 1]; /* operand j's items are [first[j], first[j + 1]) */
    int count;
    int fp16; /* 1: to IEEE half; 0: to bf16 */
};

static void round_items(void *p, long begin, long end, int tid)
{
    const struct round_args *a = p;
    (void)tid;
    for (int j = 0; j < a->count; j++) {
        long b = begin > a->first[j] ? begin : a->first[j], e = end < a->first[j + 1] ? end : a->first[j + 1];
        if (b >= e)
            continue;
        size_t i0 = (size_t)(b - a->first[j]) * CPU_ELEMS_PER_ITEM, i1 = (size_t)(e - a->first[j]) * CPU_ELEMS_PER_ITEM;
        if (i1 > a->n[j])
            i1 = a->n[j];
        float *dst = a->dst[j];
        const float *src = a->src[j];
        if (a->fp16)
            for (size_t i = i0; i < i1; i++)
                dst[i] = fp16_round(src[i]);
        else
            cpu_bf16_round_span(dst + i0, src + i0, i1 - i0);
    }
}

/* x's bf16 bits (bf16_round's upper half) */
static inline uint16_t bf16_bits(float x)
{
    float r = bf16_round(x);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}

/* oneDNN's operands: bf16 bits, or f32 bf16-rounded values when forced on a
 * CPU where oneDNN has no bf16 matmul (cpu_onednn.c) */
struct convert_args {
    void *dst;
    const float *src;
    size_t n;
    int bf16;
    int rows, cols; /* transposed: src is rows x cols, dst cols x rows, one item per src column */
};

static void convert_items(void *p, long begin, long end, int tid)
{
    const struct convert_args *a = p;
    (void)tid;
    size_t i0 = (size_t)begin * CPU_ELEMS_PER_ITEM, i1 = (size_t)end * CPU_ELEMS_PER_ITEM;
    if (i1 > a->n)
        i1 = a->n;
    if (a->bf16)
        cpu_bf16_narrow_span((uint16_t *)a->dst + i0, a->src + i0, i1 - i0);
    else
        cpu_bf16_round_span((float *)a->dst + i0, a->src + i0, i1 - i0);
}

/* Columns per item of the transposed conversion: a cache line of src per
 * row read, instead of one float per line (a column at a time re-read
 * every line 16 times once src outgrew the cache). */
#define CONVERT_T_COLS 16

static void convert_columns(void *p, long begin, long end, int tid)
{
    const struct convert_args *a = p;
    (void)tid;
    for (long blk = begin; blk < end; blk++) {
        int c0 = (int)blk * CONVERT_T_COLS, c1 = c0 + CONVERT_T_COLS < a->cols ? c0 + CONVERT_T_COLS : a->cols;
        for (int r = 0; r < a->rows; r++) {
            const float *row = a->src + (size_t)r * a->cols;
            for (int c = c0; c < c1; c++) {
                size_t o = (size_t)c * a->rows + r;
                if (a->bf16)
                    ((uint16_t *)a->dst)[o] = bf16_bits(row[c]);
                else
                    ((float *)a->dst)[o] = bf16_round(row[c]);
            }
        }
    }
}

static void onednn_convert(struct dtrain_kernels *k, void *dst, const float *src, size_t n)
{
    struct convert_args a = {.dst = dst, .src = src, .n = n,
                             .bf16 = cpu_onednn_bf16(((struct cpu_kernels *)k)->onednn)};
    cpu_parallel(k, (long)((n + CPU_ELEMS_PER_ITEM - 1) / CPU_ELEMS_PER_ITEM), CPU_ELEMS_PER_ITEM, convert_items, &a);
}

/* dst (cols x rows) = src (rows x cols) transposed, converted */
static void onednn_convert_t(struct dtrain_kernels *k, void *dst, const float *src, int rows, int cols)
{
    struct convert_args a = {.dst = dst, .src = src, .rows = rows, .cols = cols,
                             .bf16 = cpu_onednn_bf16(((struct cpu_kernels *)k)->onednn)};
    cpu_parallel(k, (cols + CONVERT_T_COLS - 1) / CONVERT_T_COLS, (size_t)rows * CONVERT_T_COLS, convert_columns, &a);
}

/* bytes of n oneDNN operand elements, rounded up to a cache line */
static size_t onednn_bytes(struct dtrain_kernels *k, size_t n)
{
    size_t e = cpu_onednn_bf16(((struct cpu_kernels *)k)->onednn) ? 2 : 4;
    return (n * e + 63) & ~(size_t)63;
}

/* Room for `floats` rounded operands in the instance's scratch; NULL in
 * fp32 precision (nothing to round), or when out of memory (the caller then
 * computes in fp32 rather than fail). */
static float *operand_scratch(struct dtrain_kernels *k, size_t floats)
{
    struct cpu_kernels *ck = (struct cpu_kernels *)k;
    if (dtrain_kernels_precision(k) == DTRAIN_PRECISION_FP32)
        return NULL;
    if (floats > ck->round_cap) {
        size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
        float *p = aligned_alloc(64, bytes);
        if (p == NULL)
            return NULL;
        free(ck->round_scratch);
        ck->round_scratch = p;
        ck->round_cap = bytes / sizeof(float);
    }
    return ck->round_scratch;
}

/* dst[j][0..n[j]) = src[j] rounded to the instance's precision, j < count, on the pool */
static void round_operands(struct dtrain_kernels *k, float *const *dst, const float *const *src, const size_t *n,
                           int count)
{
    struct round_args a = {.count = count, .fp16 = dtrain_kernels_precision(k) == DTRAIN_PRECISION_FP16};
    for (int j = 0; j < count; j++) {
        a.dst[j] = dst[j];
        a.src[j] = src[j];
        a.n[j] = n[j];
        a.first[j + 1] = a.first[j] + (long)((n[j] + CPU_ELEMS_PER_ITEM - 1) / CPU_ELEMS_PER_ITEM);
    }
    cpu_parallel(k, a.first[count], CPU_ELEMS_PER_ITEM, round_items, &a);
}

struct matmul_args {
    float *out, *dinp, *dweight, *dbias;
    uint16_t *out_bits, *dinp_bits; /* not NULL: oneDNN writes that result as bf16, not out (dinp) */
    const float *inp, *weight, *bias, *dout;
    const float *dbias_dout; /* dout as given: dbias sums it in fp32 (the rounding is for GEMM operands only) */
    const uint16_t *dbias_dout_bits; /* or, not NULL, dout's bf16 bits, summed widened */
    int N, IC, OC;
    /* oneDNN (NULL: CBLAS): its operands, esize bytes each; dout_t is dout transposed (OC x N) */
    struct cpu_onednn *dnn;
    const char *dnn_inp, *dnn_weight, *dnn_dout, *dnn_dout_t;
    size_t esize;
};

/* out rows [begin, end) = inp rows @ weight^T (+ bias) */
static void forward_rows(void *p, long begin, long end, int tid)
{
    const struct matmul_args *a = p;
    if (a->out_bits != NULL) { /* the bias added by oneDNN, the f32 sum rounded once */
        cpu_onednn_gemm(a->dnn, tid, (int)(end - begin), a->OC, a->IC, a->dnn_inp + (size_t)begin * a->IC * a->esize,
                        0, a->dnn_weight, 1, 0, a->bias, a->out_bits + (size_t)begin * a->OC, 1);
        return;
    }
    float beta = 0.0f;
    float *out = a->out + (size_t)begin * a->OC;
    if (a->bias != NULL) {
        for (long n = begin; n < end; n++)
            memcpy(a->out + (size_t)n * a->OC, a->bias, (size_t)a->OC * sizeof(float));
        beta = 1.0f;
    }
    if (a->dnn != NULL) {
        cpu_onednn_gemm(a->dnn, tid, (int)(end - begin), a->OC, a->IC, a->dnn_inp + (size_t)begin * a->IC * a->esize,
                        0, a->dnn_weight, 1, a->bias != NULL, NULL, out, 0);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(end - begin), a->OC, a->IC,
                1.0f, a->inp + (size_t)begin * a->IC, a->IC, a->weight, a->IC, beta, out, a->OC);
}

int cpu_matmul_takes_bits(struct dtrain_kernels *k)
{
    struct cpu_onednn *dnn = ((struct cpu_kernels *)k)->onednn;
    return dnn != NULL && cpu_onednn_bf16(dnn) && cpu_onednn_atrans(dnn) &&
           dtrain_kernels_precision(k) == DTRAIN_PRECISION_BF16;
}

int cpu_matmul_writes_bits(struct dtrain_kernels *k)
{
    return cpu_matmul_takes_bits(k) && cpu_onednn_bits_out(((struct cpu_kernels *)k)->onednn);
}

/* exact & CPU_MATMUL_INP_BF16: inp holds bf16 values already (a widened bf16
 * tensor): in bf16 precision it is used as it is, rounding it again would
 * change nothing. */
void cpu_matmul_forward(struct dtrain_kernels *k, float *out, uint16_t *out_bits, const float *inp,
                        const uint16_t *inp_bits, const float *weight, const float *bias, int N, int IC, int OC,
                        unsigned exact)
{
    struct matmul_args a = {.out = out, .inp = inp, .weight = weight, .bias = bias,
                            .N = N, .IC = IC, .OC = OC};
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC;
    struct cpu_onednn *dnn = ((struct cpu_kernels *)k)->onednn;
    size_t bi = dnn != NULL && inp_bits == NULL ? onednn_bytes(k, ni) : 0, bw = dnn != NULL ? onednn_bytes(k, nw) : 0;
    float *r = operand_scratch(k, dnn != NULL ? (bi + bw) / sizeof(float) : ni + nw);
    if (r == NULL && (inp_bits != NULL || out_bits != NULL)) { /* no fp32 view to fall back on */
        cpu_kernels_fail(k, "out of memory for the bf16 matmul operands");
        return;
    }
    if (r != NULL && dnn != NULL) {
        char *c = (char *)r;
        if (inp_bits == NULL)
            onednn_convert(k, c, inp, ni);
        onednn_convert(k, c + bi, weight, nw);
        a.dnn = dnn;
        a.out_bits = out_bits;
        a.dnn_inp = inp_bits != NULL ? (const char *)inp_bits : c;
        a.dnn_weight = c + bi;
        a.esize = cpu_onednn_bf16(dnn) ? 2 : 4;
    } else if (r != NULL) {
        int keep_inp = (exact & CPU_MATMUL_INP_BF16) && dtrain_kernels_precision(k) == DTRAIN_PRECISION_BF16;
        float *dst[2] = {r + ni, r};
        const float *src[2] = {weight, inp};
        const size_t n[2] = {nw, ni};
        round_operands(k, dst, src, n, keep_inp ? 1 : 2);
        a.inp = keep_inp ? inp : r;
        a.weight = r + ni;
    }
    cpu_parallel(k, N, (size_t)IC * OC, forward_rows, &a);
}

struct backward_split {
    const struct matmul_args *a;
    int parts;
};

static void backward_parts(void *p, long begin, long end, int tid)
{
    const struct backward_split *s = p;
    const struct matmul_args *a = s->a;
    for (long part = begin; part < end; part++) {
        if (a->dnn != NULL) {
            /* dinp rows [n0, n1) = dout rows @ weight; dweight rows [o0, o1) += dout_t rows @ inp */
            int n0 = (int)((long)a->N * part / s->parts), n1 = (int)((long)a->N * (part + 1) / s->parts);
            int o0 = (int)((long)a->OC * part / s->parts), o1 = (int)((long)a->OC * (part + 1) / s->parts);
            void *dinp = a->dinp_bits != NULL ? (void *)(a->dinp_bits + (size_t)n0 * a->IC)
                         : a->dinp != NULL    ? (void *)(a->dinp + (size_t)n0 * a->IC)
                                              : NULL;
            if (dinp != NULL)
                cpu_onednn_gemm(a->dnn, tid, n1 - n0, a->IC, a->OC, a->dnn_dout + (size_t)n0 * a->OC * a->esize, 0,
                                a->dnn_weight, 0, 0, NULL, dinp, a->dinp_bits != NULL);
            if (a->dweight != NULL && a->dnn_dout_t != NULL)
                cpu_onednn_gemm(a->dnn, tid, o1 - o0, a->IC, a->N, a->dnn_dout_t + (size_t)o0 * a->N * a->esize, 0,
                                a->dnn_inp, 0, 1, NULL, a->dweight + (size_t)o0 * a->IC, 0);
            else if (a->dweight != NULL) /* dout's columns o0..o1 read in place, transposed */
                cpu_onednn_gemm(a->dnn, tid, o1 - o0, a->IC, a->N, a->dnn_dout + (size_t)o0 * a->esize, a->OC,
                                a->dnn_inp, 0, 1, NULL, a->dweight + (size_t)o0 * a->IC, 0);
            if (a->dbias != NULL && o1 > o0 && a->dbias_dout_bits != NULL)
                for (int n = 0; n < a->N; n++)
                    cpu_add_bf16_into(a->dbias + o0, a->dbias_dout_bits + (size_t)n * a->OC + o0, o1 - o0);
            else if (a->dbias != NULL && o1 > o0)
                for (int n = 0; n < a->N; n++)
                    cpu_add_into(a->dbias + o0, a->dbias_dout + (size_t)n * a->OC + o0, o1 - o0);
            continue;
        }
        /* dinp rows [n0, n1) (=) dout rows @ weight */
        int n0 = (int)((long)a->N * part / s->parts), n1 = (int)((long)a->N * (part + 1) / s->parts);
        if (a->dinp != NULL && n1 > n0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, a->IC, a->OC,
                        1.0f, a->dout + (size_t)n0 * a->OC, a->OC, a->weight, a->IC,
                        0.0f, a->dinp + (size_t)n0 * a->IC, a->IC);
        /* dweight rows [o0, o1) += dout[:, o0:o1]^T @ inp; dbias[o0:o1] += column sums */
        int o0 = (int)((long)a->OC * part / s->parts), o1 = (int)((long)a->OC * (part + 1) / s->parts);
        if (o1 > o0) {
            if (a->dweight != NULL)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, a->IC, a->N,
                            1.0f, a->dout + o0, a->OC, a->inp, a->IC,
                            1.0f, a->dweight + (size_t)o0 * a->IC, a->IC);
            if (a->dbias != NULL)
                for (int n = 0; n < a->N; n++)
                    cpu_add_into(a->dbias + o0, a->dbias_dout + (size_t)n * a->OC + o0, o1 - o0);
        }
    }
}

void cpu_matmul_backward(struct dtrain_kernels *k, float *dinp, uint16_t *dinp_bits, float *dweight, float *dbias,
                         const float *dout, const uint16_t *dout_bits, const float *inp,
                         const uint16_t *inp_bits, const float *weight, int N, int IC, int OC, unsigned exact)
{
    struct matmul_args a = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout,
                            .dbias_dout = dout, .inp = inp, .weight = weight, .N = N, .IC = IC, .OC = OC};
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, nd = (size_t)N * OC;
    struct cpu_onednn *dnn = ((struct cpu_kernels *)k)->onednn;
    /* dout transposed for the weight gradient only where oneDNN cannot
     * read it transposed in place */
    int dout_t = dnn != NULL && !cpu_onednn_atrans(dnn); /* then no bits came (cpu_matmul_takes_bits) */
    size_t bi = dnn != NULL && inp_bits == NULL ? onednn_bytes(k, ni) : 0, bw = dnn != NULL ? onednn_bytes(k, nw) : 0;
    size_t bd = dnn != NULL && dout_bits == NULL ? onednn_bytes(k, nd) : 0;
    float *r = operand_scratch(k, dnn != NULL ? (bi + bw + (dout_t ? 2 : 1) * bd) / sizeof(float) : ni + nw + nd);
    if (r == NULL && (inp_bits != NULL || dout_bits != NULL || dinp_bits != NULL)) { /* no fp32 view to fall back on */
        cpu_kernels_fail(k, "out of memory for the bf16 matmul operands");
        return;
    }
    if (r != NULL && dnn != NULL) {
        char *c = (char *)r;
        if (inp_bits == NULL)
            onednn_convert(k, c, inp, ni);
        onednn_convert(k, c + bi, weight, nw);
        if (dout_bits == NULL)
            onednn_convert(k, c + bi + bw, dout, nd);
        if (dout_t)
            onednn_convert_t(k, c + bi + bw + bd, dout, N, OC);
        a.dnn = dnn;
        a.dinp_bits = dinp_bits;
        a.dbias_dout_bits = dout_bits;
        a.dnn_inp = inp_bits != NULL ? (const char *)inp_bits : c;
        a.dnn_weight = c + bi;
        a.dnn_dout = dout_bits != NULL ? (const char *)dout_bits : c + bi + bw;
        a.dnn_dout_t = dout_t ? c + bi + bw + bd : NULL;
        a.esize = cpu_onednn_bf16(dnn) ? 2 : 4;
    } else if (r != NULL) {
        int bf16 = dtrain_kernels_precision(k) == DTRAIN_PRECISION_BF16;
        int keep_inp = bf16 && (exact & CPU_MATMUL_INP_BF16), keep_dout = bf16 && (exact & CPU_MATMUL_DOUT_BF16);
        float *dst[3] = {r + ni};
        const float *src[3] = {weight};
        size_t n[3] = {nw};
        int count = 1;
        if (!keep_inp) {
            dst[count] = r;
            src[count] = inp;
            n[count++] = ni;
        }
        if (!keep_dout) {
            dst[count] = r + ni + nw;
            src[count] = dout;
            n[count++] = nd;
        }
        round_operands(k, dst, src, n, count);
        a.inp = keep_inp ? inp : r;
        a.weight = r + ni;
        a.dout = keep_dout ? dout : r + ni + nw;
    }
    /* one part per thread: the split changes no output element's sum */
    struct backward_split s = {.a = &a, .parts = dtrain_kernels_threads(k)};
    cpu_parallel(k, s.parts, (size_t)N * IC * OC / (size_t)s.parts, backward_parts, &s);
}
