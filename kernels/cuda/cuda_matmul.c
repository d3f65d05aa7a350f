/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Linear layers through cuBLASLt; see dtrain_kernels.h.
 *
 * cuBLASLt is column-major; a row-major (R, C) matrix is a column-major
 * (C, R) one.  So, with W (OC, IC), inp (N, IC), dout (N, OC) row-major:
 *   out^T  (OC x N) = op_T(W) inp^T          m=OC n=N  k=IC, bias epilogue
 *   dinp^T (IC x N) = W^T dout^T             m=IC n=N  k=OC
 *   dW^T   (IC x OC) += inp^T op_T(dout^T)   m=IC n=OC k=N,  beta = 1
 * where each "X^T" is simply X's memory read column-major.
 *
 * Typed operands (inp, dout, out, dinp: fp32 or bf16; the weights, their
 * gradients and the bias are fp32):
 *
 * fp32 precision: fp32 operands, fp32 compute (no TF32), as the CPU does;
 * a bf16 input is widened into an fp32 copy in scratch, a bf16 result is
 * computed into fp32 scratch and rounded once into its tensor (simple
 * rather than fast: bf16 activations come with bf16 precision).
 * bf16 precision: a bf16 input is the cuBLASLt operand as it is; an fp32
 * one (and the weights) is first rounded to a bf16 copy in scratch (one
 * pass each).  The product runs on the tensor cores with fp32
 * accumulation (CUBLAS_COMPUTE_32F) and is written in the result's type,
 * rounded once; the bias is added in the epilogue in fp32.  cuBLASLt
 * takes the bias vector in D's type (cublasLt.h,
 * CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: the only exceptions are integer and
 * fp8 kernels; an fp32 bias with a bf16 D is not documented), so a bf16
 * result takes a bf16 copy of the bias (OC elements, in scratch): that
 * rounds the bias once more than the CPU does, by at most half a bf16 ulp
 * of the bias.  dbias sums a bf16 dout in fp32.
 * fp16 precision: as bf16 with fp16 copies of every operand (round to
 * nearest even, inf beyond 65504: what the cpu kernels emulate; the
 * trainer's loss scaling keeps gradients in range); a bf16 result is
 * computed in fp32 scratch and rounded, as in fp32 precision.
 *
 * A plan (descriptors, layouts and the heuristic's algorithm) is made once
 * per shape and kept: asking the heuristic costs more than a small GEMM. */
#include "cuda_backend.h"
#include "dtrain_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_CACHE_SIZE 64

struct gemm_key {
    int m, n, k, lda, ldb, ldc;
    int transa, transb;
    int ab_type, cd_type;   /* cudaDataType_t */
    int bias;               /* bias epilogue */
    int accumulate;         /* beta = 1 */
    unsigned align[4];      /* A, B, C, bias pointer alignment in bytes */
};

struct gemm_plan {
    struct gemm_key key;
    int used;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

struct cuda_gemm_cache {
    struct gemm_plan plan[GEMM_CACHE_SIZE];
    int next; /* round-robin victim */
};

int cuda_gemm_cache_create(struct cuda_gemm_cache **out)
{
    *out = calloc(1, sizeof **out);
    return *out == NULL ? -1 : 0;
}

static void plan_release(struct gemm_plan *p)
{
    if (p->desc != NULL)
        (void)cublasLtMatmulDescDestroy(p->desc);
    if (p->a != NULL)
        (void)cublasLtMatrixLayoutDestroy(p->a);
    if (p->b != NULL)
        (void)cublasLtMatrixLayoutDestroy(p->b);
    if (p->c != NULL)
        (void)cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

void cuda_gemm_cache_destroy(struct cuda_gemm_cache *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < GEMM_CACHE_SIZE; i++)
        plan_release(&c->plan[i]);
    free(c);
}

/* Largest power of two, at most 256, that divides the address. */
static unsigned alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && a % al != 0)
        al /= 2;
    return al;
}

static int lt_check(struct cuda_kernels *ck, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return cuda_fail(ck, "cuBLASLt %s: %s", what, cublasLtGetStatusString(s));
}

static int plan_make(struct cuda_kernels *ck, struct gemm_plan *p, const struct gemm_key *key)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = key->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cudaDataType_t bias_type = (cudaDataType_t)key->cd_type; /* cuBLASLt's bias type: D's (see above) */
    int rows_a = key->transa ? key->k : key->m, cols_a = key->transa ? key->m : key->k;
    int rows_b = key->transb ? key->n : key->k, cols_b = key->transb ? key->k : key->n;
    uint64_t ws = ck->lt_workspace_bytes;
    int found = 0, rc = -1;
    cublasLtMatmulHeuristicResult_t result;

    memset(p, 0, sizeof *p);
    p->key = *key;
    if (lt_check(ck, cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc") ||
        lt_check(ck, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
                 "transa") ||
        lt_check(ck, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
                 "transb") ||
        lt_check(ck, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                 "epilogue"))
        goto out;
    if (key->bias &&
        lt_check(ck, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                    sizeof bias_type), "bias type"))
        goto out;
    if (lt_check(ck, cublasLtMatrixLayoutCreate(&p->a, (cudaDataType_t)key->ab_type, (uint64_t)rows_a,
                                                (uint64_t)cols_a, key->lda), "layout A") ||
        lt_check(ck, cublasLtMatrixLayoutCreate(&p->b, (cudaDataType_t)key->ab_type, (uint64_t)rows_b,
                                                (uint64_t)cols_b, key->ldb), "layout B") ||
        lt_check(ck, cublasLtMatrixLayoutCreate(&p->c, (cudaDataType_t)key->cd_type, (uint64_t)key->m,
                                                (uint64_t)key->n, key->ldc), "layout C"))
        goto out;
    if (lt_check(ck, cublasLtMatmulPreferenceCreate(&pref), "preference") ||
        lt_check(ck, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                          sizeof ws), "workspace") ||
        lt_check(ck, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                          &key->align[0], sizeof key->align[0]), "align A") ||
        lt_check(ck, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                          &key->align[1], sizeof key->align[1]), "align B") ||
        lt_check(ck, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                          &key->align[2], sizeof key->align[2]), "align C") ||
        lt_check(ck, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                          &key->align[2], sizeof key->align[2]), "align D"))
        goto out;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(ck->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                                      &result, &found);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        /* not a fault: the caller may try without the bias epilogue */
        rc = 1;
        goto out;
    }
    p->algo = result.algo;
    p->used = 1;
    rc = 0;
out:
    if (pref != NULL)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    if (rc != 0)
        plan_release(p);
    return rc;
}

/* The plan for key: cached, or made (0), 1 when cuBLASLt has no algorithm
 * for it, -1 after cuda_fail. */
static int plan_get(struct cuda_kernels *ck, const struct gemm_key *key, struct gemm_plan **out)
{
    struct cuda_gemm_cache *c = ck->gemm;
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) {
        if (c->plan[i].used && memcmp(&c->plan[i].key, key, sizeof *key) == 0) {
            *out = &c->plan[i];
            return 0;
        }
    }
    struct gemm_plan *p = &c->plan[c->next];
    c->next = (c->next + 1) % GEMM_CACHE_SIZE;
    plan_release(p);
    int rc = plan_make(ck, p, key);
    if (rc == 0)
        *out = p;
    return rc;
}

/* D = C = alpha op(A) op(B) + beta C, with an optional bias epilogue; the
 * bias is of C's type. */
static int gemm(struct cuda_kernels *ck, int transa, int transb, int m, int n, int k, const void *A,
                int lda, const void *B, int ldb, void *C, int ldc, cudaDataType_t ab_type,
                cudaDataType_t cd_type, int accumulate, const void *bias, const char *what)
{
    struct gemm_key key;
    struct gemm_plan *plan = NULL;
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    memset(&key, 0, sizeof key);
    key = (struct gemm_key){.m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                            .transa = transa, .transb = transb, .ab_type = (int)ab_type,
                            .cd_type = (int)cd_type, .bias = bias != NULL, .accumulate = accumulate,
                            .align = {alignment(A), alignment(B), alignment(C),
                                      bias != NULL ? alignment(bias) : 256}};
    int rc = plan_get(ck, &key, &plan);
    if (rc == 1 && bias != NULL) {
        /* no bias epilogue for this shape: C = bias, then accumulate onto
         * it (one rounding of a bf16 C either way: beta C is read in fp32) */
        if (cuda_fill_bias(ck, C, bias, cd_type == CUDA_R_16BF ? DTRAIN_BF16 : DTRAIN_F32, m, n, ldc) != 0)
            return -1;
        return gemm(ck, transa, transb, m, n, k, A, lda, B, ldb, C, ldc, ab_type, cd_type, 1, NULL, what);
    }
    if (rc == 1)
        return cuda_fail(ck, "cuBLASLt has no algorithm for the %s GEMM m=%d n=%d k=%d", what, m, n, k);
    if (rc != 0)
        return -1;
    if (bias != NULL &&
        lt_check(ck, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                    sizeof bias), "bias pointer"))
        return -1;
    return lt_check(ck, cublasLtMatmul(ck->lt, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, C, plan->c,
                                       C, plan->c, &plan->algo, ck->lt_workspace, ck->lt_workspace_bytes,
                                       ck->stream), what);
}

/* Operand staging of one matmul call.  Sizes are measured first (base
 * NULL), then the pieces carved from one scratch block. */
struct stage {
    void *base;
    size_t used;
};

static void *stage_take(struct stage *st, size_t bytes)
{
    return cuda_carve(st->base, &st->used, bytes);
}

/* The instance's 16-bit operand (n elements) for an input: the tensor
 * itself when it is bf16 on a bf16 instance (no conversion pass), else a
 * copy in scratch. */
static const void *half_operand(struct cuda_kernels *ck, struct stage *st, struct dtrain_tensor t, size_t n)
{
    if (t.dtype == DTRAIN_BF16 && ck->bf16)
        return t.data;
    void *copy = stage_take(st, n * 2);
    if (st->base == NULL)
        return NULL;
    return cuda_to_half_typed(ck, copy, t, n) == 0 ? copy : NULL;
}

/* An fp32 operand (n elements) for an input: the tensor itself when fp32,
 * else a widened copy in scratch. */
static const float *f32_operand(struct cuda_kernels *ck, struct stage *st, struct dtrain_tensor t, size_t n)
{
    if (t.dtype == DTRAIN_F32)
        return t.data;
    float *copy = stage_take(st, n * sizeof(float));
    if (st->base == NULL)
        return NULL;
    return cuda_widen_bf16(ck, copy, t.data, n) == 0 ? copy : NULL;
}

/* Where a result goes and in which cuBLASLt type: into the tensor itself
 * when its type is one the GEMM can write (fp32 always, bf16 on a bf16
 * instance), else into fp32 scratch for result_store to round. */
static int result_direct(const struct cuda_kernels *ck, struct dtrain_tensor t)
{
    return t.dtype == DTRAIN_F32 || ck->bf16;
}

static void *result_target(struct cuda_kernels *ck, struct stage *st, struct dtrain_tensor t, size_t n,
                           cudaDataType_t *type)
{
    *type = t.dtype == DTRAIN_BF16 && result_direct(ck, t) ? CUDA_R_16BF : CUDA_R_32F;
    if (result_direct(ck, t))
        return t.data;
    return stage_take(st, n * sizeof(float));
}

static int result_store(struct cuda_kernels *ck, struct dtrain_tensor t, const void *target, size_t n)
{
    if (target == t.data)
        return 0;
    return cuda_to_bf16(ck, t.data, target, n);
}

/* One call's operands: what the GEMMs read and write. */
struct operands {
    const void *x, *d, *w, *bias; /* input, output gradient, weights, bias (of the result's type) */
    void *y;                      /* the result (out or dinp) as the GEMM writes it */
    cudaDataType_t ab, cd;        /* their cuBLASLt types */
    float *partials;              /* of the bias gradient */
    void *extra;                  /* the caller's own scratch (the NF4 weight tile) */
};

/* Stages a call's operands: with st->base NULL only measures the scratch
 * (nothing queued), then, carving from st->base, converts.  A NULL tensor
 * is skipped. */
static void stage_operands(struct cuda_kernels *ck, struct stage *st, struct operands *o, struct dtrain_tensor y,
                           struct dtrain_tensor x, struct dtrain_tensor d, const float *weight, const float *bias,
                           size_t ny, size_t nx, size_t nd, size_t nw, size_t npart, int OC, size_t extra)
{
    int half = ck->bf16 || ck->fp16;
    memset(o, 0, sizeof *o);
    o->ab = ck->fp16 ? CUDA_R_16F : ck->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    o->cd = CUDA_R_32F;
    o->partials = stage_take(st, npart * sizeof(float));
    o->extra = extra > 0 ? stage_take(st, extra) : NULL;
    if (x.data != NULL)
        o->x = half ? half_operand(ck, st, x, nx) : (const void *)f32_operand(ck, st, x, nx);
    if (d.data != NULL)
        o->d = half ? half_operand(ck, st, d, nd) : (const void *)f32_operand(ck, st, d, nd);
    if (weight != NULL)
        o->w = half ? half_operand(ck, st, dtrain_tensor_f32(weight), nw) : (const void *)weight;
    if (y.data != NULL)
        o->y = result_target(ck, st, y, ny, &o->cd);
    o->bias = bias;
    if (bias != NULL && o->cd == CUDA_R_16BF) {
        void *b16 = stage_take(st, (size_t)OC * 2);
        o->bias = b16;
        if (st->base != NULL)
            (void)cuda_to_bf16(ck, b16, bias, (size_t)OC);
    }
}

/* Both passes of stage_operands; 0, or -1 after cuda_fail. */
static int operands_of(struct cuda_kernels *ck, struct operands *o, struct dtrain_tensor y, struct dtrain_tensor x,
                       struct dtrain_tensor d, const float *weight, const float *bias, size_t ny, size_t nx,
                       size_t nd, size_t nw, size_t npart, int OC, size_t extra)
{
    struct stage st = {NULL, 0};
    stage_operands(ck, &st, o, y, x, d, weight, bias, ny, nx, nd, nw, npart, OC, extra);
    if (st.used == 0)
        return ck->failed ? -1 : 0;
    if ((st.base = cuda_scratch(ck, st.used)) == NULL)
        return -1;
    st.used = 0;
    stage_operands(ck, &st, o, y, x, d, weight, bias, ny, nx, nd, nw, npart, OC, extra);
    return ck->failed ? -1 : 0;
}

static const struct dtrain_tensor NO_TENSOR = {NULL, DTRAIN_F32};

void cuda_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                         const float *weight, const float *bias, int N, int IC, int OC)
{
    struct cuda_kernels *ck = cuda_of(k);
    struct operands o;
    if (ck->failed || N <= 0 || IC <= 0 || OC <= 0)
        return;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    if (operands_of(ck, &o, out, inp, NO_TENSOR, weight, bias, no, ni, 0, nw, 0, OC, 0) != 0)
        return;
    if (gemm(ck, 1, 0, OC, N, IC, o.w, IC, o.x, IC, o.y, OC, o.ab, o.cd, 0, o.bias, "matmul forward") == 0)
        (void)result_store(ck, out, o.y, no);
}

void cuda_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, float *dweight, float *dbias,
                          struct dtrain_tensor dout, struct dtrain_tensor inp, const float *weight, int N, int IC,
                          int OC)
{
    struct cuda_kernels *ck = cuda_of(k);
    struct operands o;
    if (ck->failed || N <= 0 || IC <= 0 || OC <= 0)
        return;
    size_t nd = (size_t)N * OC, ni = (size_t)N * IC, nw = (size_t)OC * IC;
    size_t npart = dbias != NULL ? cuda_bias_backward_partials(N, OC) : 0;
    /* the weights only for dinp */
    if (operands_of(ck, &o, dinp, inp, dout, dinp.data != NULL ? weight : NULL, NULL, ni, ni, nd, nw, npart, OC, 0) != 0)
        return;
    if (dinp.data != NULL &&
        (gemm(ck, 0, 0, IC, N, OC, o.w, IC, o.d, OC, o.y, IC, o.ab, o.cd, 0, NULL, "matmul backward (dinp)") != 0 ||
         result_store(ck, dinp, o.y, ni) != 0))
        return;
    if (dweight != NULL && gemm(ck, 0, 1, IC, OC, N, o.x, IC, o.d, OC, dweight, IC, o.ab, CUDA_R_32F, 1, NULL,
                                "matmul backward (dweight)") != 0)
        return;
    if (dbias != NULL)
        cuda_bias_backward(ck, dbias, dout, N, OC, o.partials);
}

/* ------------------------------------------------------------------ NF4 base linear
 *
 * The weight is dequantised a tile at a time (at most CUDA_NF4_TILE_ELEMS
 * weights; most layers fit in one) into scratch in the GEMM's operand type
 * (fp32, or bf16 / fp16 in those precisions: the level times the scale
 * rounded once), then the tile's GEMM runs as the plain matmul's.  Forward
 * tiles are rows of w (columns of out), input-gradient tiles columns of w
 * (columns of dinp): every result element is one GEMM's sum, no tile adds
 * into another's. */
#define CUDA_NF4_TILE_ELEMS ((size_t)1 << 24)

static int nf4_tile(size_t other, int dim)
{
    size_t per = CUDA_NF4_TILE_ELEMS / other;
    return per < 1 ? 1 : per > (size_t)dim ? dim : (int)per;
}

static size_t cd_size(cudaDataType_t t) { return t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 4; }

void cuda_nf4_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                             struct dtrain_nf4 w, const float *bias, int N)
{
    struct cuda_kernels *ck = cuda_of(k);
    struct operands o;
    int OC = w.rows, IC = w.cols;
    if (ck->failed || N <= 0 || IC <= 0 || OC <= 0)
        return;
    size_t ni = (size_t)N * IC, no = (size_t)N * OC;
    int tr = nf4_tile((size_t)IC, OC);
    size_t ab_size = ck->bf16 || ck->fp16 ? 2 : 4;
    if (operands_of(ck, &o, out, inp, NO_TENSOR, NULL, bias, no, ni, 0, 0, 0, OC, (size_t)tr * IC * ab_size) != 0)
        return;
    for (int o0 = 0; o0 < OC; o0 += tr) {
        int nr = o0 + tr <= OC ? tr : OC - o0;
        const void *b = o.bias != NULL ? (const char *)o.bias + (size_t)o0 * cd_size(o.cd) : NULL;
        if (cuda_nf4_dequantize(ck, o.extra, o.ab, w, o0, nr, 0, IC) != 0 ||
            gemm(ck, 1, 0, nr, N, IC, o.extra, IC, o.x, IC, (char *)o.y + (size_t)o0 * cd_size(o.cd), OC, o.ab, o.cd,
                 0, b, "NF4 matmul forward") != 0)
            return;
    }
    (void)result_store(ck, out, o.y, no);
}

void cuda_nf4_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor dout,
                              struct dtrain_nf4 w, int N)
{
    struct cuda_kernels *ck = cuda_of(k);
    struct operands o;
    int OC = w.rows, IC = w.cols;
    if (ck->failed || N <= 0 || IC <= 0 || OC <= 0)
        return;
    size_t nd = (size_t)N * OC, ni = (size_t)N * IC;
    int tc = nf4_tile((size_t)OC, IC);
    size_t ab_size = ck->bf16 || ck->fp16 ? 2 : 4;
    if (operands_of(ck, &o, dinp, NO_TENSOR, dout, NULL, NULL, ni, 0, nd, 0, 0, OC, (size_t)tc * OC * ab_size) != 0)
        return;
    for (int c0 = 0; c0 < IC; c0 += tc) {
        int nc = c0 + tc <= IC ? tc : IC - c0;
        /* the tile (OC, nc) row-major is column-major (nc, OC): dinp^T rows c0.. = tile dout^T */
        if (cuda_nf4_dequantize(ck, o.extra, o.ab, w, 0, OC, c0, nc) != 0 ||
            gemm(ck, 0, 0, nc, N, OC, o.extra, nc, o.d, OC, (char *)o.y + (size_t)c0 * cd_size(o.cd), IC, o.ab, o.cd,
                 0, NULL, "NF4 matmul backward (dinp)") != 0)
            return;
    }
    (void)result_store(ck, dinp, o.y, ni);
}

/* ------------------------------------------------------------------ GEMM rate */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int dtrain_cuda_gemm_bf16_tflops(struct dtrain_kernels *k, int n, int reps, double *tflops, char *err,
                                 size_t errlen)
{
    struct cuda_kernels *ck = cuda_of(k);
    void *a = NULL, *b = NULL, *c = NULL;
    cudaEvent_t start = NULL, stop = NULL;
    double *rate = NULL;
    size_t nn = (size_t)n * n;
    int rc = -1;
    if (n < 16 || reps < 1) {
        snprintf(err, errlen, "GEMM rate: n %d and reps %d must be at least 16 and 1", n, reps);
        return -1;
    }
    if (ck->failed) {
        snprintf(err, errlen, "%s", ck->error);
        return -1;
    }
    rate = calloc((size_t)reps, sizeof *rate);
    if (rate == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (cudaMalloc(&a, nn * 2) != cudaSuccess || cudaMalloc(&b, nn * 2) != cudaSuccess ||
        cudaMalloc(&c, nn * 2) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "out of device memory for three %d x %d bf16 matrices", n, n);
        goto out;
    }
    if (cuda_fill_uniform_bf16(ck, a, nn, 1) != 0 || cuda_fill_uniform_bf16(ck, b, nn, 2) != 0 ||
        cuda_check(ck, cudaEventCreate(&start), "cudaEventCreate") != 0 ||
        cuda_check(ck, cudaEventCreate(&stop), "cudaEventCreate") != 0)
        goto fault;
    for (int r = -3; r < reps; r++) { /* three untimed warm-up runs */
        float ms = 0.0f;
        if (cuda_check(ck, cudaEventRecord(start, ck->stream), "cudaEventRecord") != 0 ||
            gemm(ck, 0, 0, n, n, n, a, n, b, n, c, n, CUDA_R_16BF, CUDA_R_16BF, 0, NULL, "bf16 rate") != 0 ||
            cuda_check(ck, cudaEventRecord(stop, ck->stream), "cudaEventRecord") != 0 ||
            cuda_check(ck, cudaEventSynchronize(stop), "cudaEventSynchronize") != 0 ||
            cuda_check(ck, cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime") != 0)
            goto fault;
        if (r >= 0)
            rate[r] = 2.0 * (double)n * (double)n * (double)n / ((double)ms * 1e-3) * 1e-12;
    }
    qsort(rate, (size_t)reps, sizeof *rate, cmp_double);
    *tflops = reps % 2 ? rate[reps / 2] : 0.5 * (rate[reps / 2 - 1] + rate[reps / 2]);
    rc = 0;
    goto out;
fault:
    snprintf(err, errlen, "%s", ck->error);
out:
    if (start != NULL)
        (void)cudaEventDestroy(start);
    if (stop != NULL)
        (void)cudaEventDestroy(stop);
    (void)cudaFree(a);
    (void)cudaFree(b);
    (void)cudaFree(c);
    free(rate);
    return rc;
}
