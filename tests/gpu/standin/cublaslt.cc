// SPDX-License-Identifier: GPL-2.0-or-later
/* GPU stand-in: cuBLASLt on the CPU.  The descriptors, the heuristic's
 * refusals (type combinations, alignments) and cublasLtMatmul as the real
 * library behaves with CUBLAS_COMPUTE_32F: operands widened to fp32,
 * accumulated in fp32 (OpenBLAS sgemm: no TF32), epilogue (bias, GELU,
 * RELU) in fp32, the result rounded once to D's type (round to nearest
 * even).  The product runs on the stream's thread, after the call
 * returns, and reads device memory only: a host pointer there is an illegal
 * address on a real GPU, a device fault here. */
#include "standin.h"

#include <cblas.h>
#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

namespace {

const uint64_t kMagic = 0x646c74616c676f31ull; /* marks an algo we made */

struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t order = CUBLASLT_ORDER_COL;
    int32_t batch = 1;
};

struct Desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int32_t bias_type = -1; /* -1: D's type, as the real default */
};

struct Pref {
    uint64_t workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256}; /* A, B, C, D */
};

struct Context {
    int device;
};

Layout *L(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout *>(l); }
Desc *D(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc *>(d); }
Pref *P(cublasLtMatmulPreference_t p) { return reinterpret_cast<Pref *>(p); }

size_t type_size(int t)
{
    switch (t) {
    case CUDA_R_32F:
        return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
        return 2;
    default:
        return 0;
    }
}

template <class T> cublasStatus_t set(void *field, const void *buf, size_t size)
{
    if (buf == nullptr || size != sizeof(T))
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

float bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);         /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float f16_to_f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to beyond 65504: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal: subnormal or 0 */
        float af;
        memcpy(&af, &a, 4);
        /* the multiple of 2^-24 nearest af, ties to even (nearbyint) */
        float q = std::nearbyint(af * 16777216.0f);
        return (uint16_t)(sign | (uint16_t)q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (uint16_t)((r - 0x38000000u) >> 13));
}

float load(int type, const void *p, size_t i)
{
    switch (type) {
    case CUDA_R_32F:
        return ((const float *)p)[i];
    case CUDA_R_16BF:
        return bf16_to_f(((const uint16_t *)p)[i]);
    default:
        return f16_to_f(((const uint16_t *)p)[i]);
    }
}

void store(int type, void *p, size_t i, float v)
{
    switch (type) {
    case CUDA_R_32F:
        ((float *)p)[i] = v;
        break;
    case CUDA_R_16BF:
        ((uint16_t *)p)[i] = f_to_bf16(v);
        break;
    default:
        ((uint16_t *)p)[i] = f_to_f16(v);
        break;
    }
}

/* The bytes a column-major rows x cols matrix with leading dimension ld spans. */
size_t extent(const Layout *l)
{
    if (l->rows == 0 || l->cols == 0)
        return 0;
    return ((size_t)(l->cols - 1) * (size_t)l->ld + (size_t)l->rows) * type_size(l->type);
}

/* The checks of the heuristic: INVALID_VALUE for inconsistent shapes,
 * NOT_SUPPORTED for what the library has no kernel for. */
cublasStatus_t check(const Desc *d, const Layout *a, const Layout *b, const Layout *c, const Layout *dd,
                     const uint32_t align[4])
{
    if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dd == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m = dd->rows, n = dd->cols;
    uint64_t k = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t am = d->transa == CUBLAS_OP_N ? a->rows : a->cols;
    uint64_t bk = d->transb == CUBLAS_OP_N ? b->rows : b->cols;
    uint64_t bn = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != m || bk != k || bn != n || c->rows != m || c->cols != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (const Layout *l : {a, b, c, dd})
        if (l->ld < (int64_t)l->rows || l->ld < 1)
            return CUBLAS_STATUS_INVALID_VALUE;
    if (d->transa > CUBLAS_OP_T || d->transb > CUBLAS_OP_T)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->order != CUBLASLT_ORDER_COL || b->order != CUBLASLT_ORDER_COL || c->order != CUBLASLT_ORDER_COL ||
        dd->order != CUBLASLT_ORDER_COL || a->batch != 1 || b->batch != 1 || c->batch != 1 || dd->batch != 1)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* CUBLAS_COMPUTE_32F with fp32 scale: A = B type, C = D type, in
     * {32F/32F, 16F/16F, 16F/32F, 16BF/16BF, 16BF/32F} (cuBLASLt docs,
     * cublasLtMatmul's table of supported types) */
    bool c32 = d->compute == CUBLAS_COMPUTE_32F || d->compute == CUBLAS_COMPUTE_32F_PEDANTIC;
    if (!c32 || d->scale != CUDA_R_32F || a->type != b->type || c->type != dd->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    bool ok = (a->type == CUDA_R_32F && c->type == CUDA_R_32F) ||
              ((a->type == CUDA_R_16F || a->type == CUDA_R_16BF) && (c->type == a->type || c->type == CUDA_R_32F));
    if (!ok)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    switch (d->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_GELU:
        break;
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
        /* the bias is of D's type (BIAS_DATA_TYPE's documentation) */
        if (d->bias_type != -1 && d->bias_type != (int32_t)dd->type)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        break;
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED; /* aux and gradient epilogues: not in the stand-in */
    }
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* Every kernel needs element-aligned operands.  16-byte alignment of
     * fp16/bf16 pointers and leading dimensions is only the fast path
     * (cuBLAS docs, "Tensor Core Usage"): the library has slower kernels
     * for less, and the heuristic returns one for the alignment the
     * preference states.  The hard 16-byte rule is FP8's, not used here. */
    const Layout *ls[4] = {a, b, c, dd};
    for (int i = 0; i < 4; i++) {
        size_t es = type_size(ls[i]->type);
        if (align[i] < es)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

unsigned ptr_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned r = 1;
    while (r < 256 && (a & r) == 0)
        r <<= 1;
    return r;
}

/* The product, on the stream's thread. */
struct Job {
    Desc d;
    Layout a, b, c, dd;
    float alpha, beta;
    const void *A, *B, *C, *bias;
    void *Dp;

    void run() const
    {
        const Layout *ls[4] = {&a, &b, &c, &dd};
        const void *ps[4] = {A, B, C, Dp};
        const char *names[4] = {"A", "B", "C", "D"};
        for (int i = 0; i < 4; i++) {
            if (i == 2 && beta == 0.0f)
                continue; /* C is not read when beta is 0 */
            size_t bytes = extent(ls[i]);
            if (bytes > 0 && !standin_is_device(ps[i], bytes)) {
                standin_device_fault(cudaErrorIllegalAddress,
                                     "cublasLtMatmul: %s (%p, %zu bytes) is not device memory", names[i], ps[i],
                                     bytes);
                return;
            }
        }
        bool has_bias = (d.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
        size_t m = dd.rows, n = dd.cols;
        if (has_bias && !standin_is_device(bias, m * type_size(dd.type))) {
            standin_device_fault(cudaErrorIllegalAddress, "cublasLtMatmul: the bias (%p, %zu elements) is not device memory",
                                 bias, m);
            return;
        }
        size_t k = d.transa == CUBLAS_OP_N ? a.cols : a.rows;
        std::vector<float> acc(m * n, 0.0f);
        if (k > 0 && alpha != 0.0f) {
            /* widened copies, packed (ld = rows) */
            std::vector<float> fa(a.rows * a.cols), fb(b.rows * b.cols);
            for (size_t j = 0; j < a.cols; j++)
                for (size_t i = 0; i < a.rows; i++)
                    fa[j * a.rows + i] = load(a.type, A, j * (size_t)a.ld + i);
            for (size_t j = 0; j < b.cols; j++)
                for (size_t i = 0; i < b.rows; i++)
                    fb[j * b.rows + i] = load(b.type, B, j * (size_t)b.ld + i);
            cblas_sgemm(CblasColMajor, d.transa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                        d.transb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, alpha, fa.data(),
                        (int)a.rows, fb.data(), (int)b.rows, 0.0f, acc.data(), (int)m);
        }
        bool gelu = (d.epilogue & CUBLASLT_EPILOGUE_GELU) != 0, relu = (d.epilogue & CUBLASLT_EPILOGUE_RELU) != 0;
        for (size_t j = 0; j < n; j++) {
            for (size_t i = 0; i < m; i++) {
                float v = acc[j * m + i];
                if (beta != 0.0f)
                    v += beta * load(c.type, C, j * (size_t)c.ld + i);
                if (has_bias)
                    v += load(dd.type, bias, i);
                if (relu)
                    v = v > 0.0f ? v : 0.0f;
                if (gelu) /* the tanh approximation, as cuBLASLt's GELU epilogue */
                    v = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
                store(dd.type, Dp, j * (size_t)dd.ld + i, v);
            }
        }
    }
};

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    if (handle == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    Context *c = new Context;
    c->device = standin_current_device();
    *handle = reinterpret_cast<cublasLtHandle_t>(c);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    if (handle == nullptr)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete reinterpret_cast<Context *>(handle);
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    }
    return "unknown error";
}

size_t cublasLtGetVersion(void)
{
    return 120800;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if (layout == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (type_size(type) == 0)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    Layout *l = new Layout;
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    delete L(layout);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size)
{
    Layout *l = L(layout);
    if (l == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
        uint32_t t;
        cublasStatus_t s = set<uint32_t>(&t, buf, size);
        if (s == CUBLAS_STATUS_SUCCESS)
            l->type = (cudaDataType)t;
        return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set<int32_t>(&l->order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set<uint64_t>(&l->rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set<uint64_t>(&l->cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD: return set<int64_t>(&l->ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set<int32_t>(&l->batch, buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type)
{
    if (desc == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    Desc *d = new Desc;
    d->compute = compute;
    d->scale = scale_type;
    *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    delete D(desc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    Desc *d = D(desc);
    if (d == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: {
        int32_t v;
        cublasStatus_t s = set<int32_t>(&v, buf, size);
        if (s == CUBLAS_STATUS_SUCCESS)
            d->compute = (cublasComputeType_t)v;
        return s;
    }
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: {
        int32_t v;
        cublasStatus_t s = set<int32_t>(&v, buf, size);
        if (s == CUBLAS_STATUS_SUCCESS)
            d->scale = (cudaDataType_t)v;
        return s;
    }
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set<int32_t>(&d->pointer_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set<int32_t>(&d->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set<int32_t>(&d->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set<uint32_t>(&d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set<const void *>(&d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set<int32_t>(&d->bias_type, buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE; /* not used by dtrain */
    }
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              void *buf, size_t size, size_t *written)
{
    Desc *d = D(desc);
    if (d == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    const void *src;
    size_t n = 4;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: src = &d->transa; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: src = &d->transb; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: src = &d->epilogue; break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: src = &d->bias_type; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: src = &d->bias; n = sizeof d->bias; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (written)
        *written = n;
    if (buf == nullptr && size == 0 && written != nullptr)
        return CUBLAS_STATUS_SUCCESS;
    if (buf == nullptr || size < n)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, src, n);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    if (pref == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    delete P(pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size)
{
    Pref *p = P(pref);
    if (p == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t scratch32;
    uint64_t scratch64;
    float scratchf;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set<uint64_t>(&p->workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set<uint32_t>(&p->align[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set<uint32_t>(&p->align[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set<uint32_t>(&p->align[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set<uint32_t>(&p->align[3], buf, size);
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return set<uint32_t>(&scratch32, buf, size);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return set<uint64_t>(&scratch64, buf, size);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return set<float>(&scratchf, buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    if (handle == nullptr)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (pref == nullptr || requested <= 0 || results == nullptr || returned == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    const Pref *p = P(pref);
    cublasStatus_t s = check(D(desc), L(Adesc), L(Bdesc), L(Cdesc), L(Ddesc), p->align);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    memset(&results[0], 0, sizeof results[0]);
    /* the algorithm remembers the alignments it was chosen for */
    results[0].algo.data[0] = kMagic;
    for (int i = 0; i < 4; i++)
        results[0].algo.data[1 + i] = p->align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *Dp,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream)
{
    (void)workspace;
    (void)workspace_bytes;
    if (handle == nullptr)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (alpha == nullptr || beta == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* without an algorithm the library picks one for the actual pointers */
    uint32_t align[4] = {ptr_align(A), ptr_align(B), ptr_align(C), ptr_align(Dp)};
    if (algo != nullptr) {
        if (algo->data[0] != kMagic)
            return CUBLAS_STATUS_INVALID_VALUE;
        for (int i = 0; i < 4; i++) {
            /* a pointer less aligned than the algorithm was chosen for */
            if (align[i] < algo->data[1 + i])
                return CUBLAS_STATUS_NOT_SUPPORTED;
            align[i] = (uint32_t)algo->data[1 + i];
        }
    }
    cublasStatus_t s = check(D(desc), L(Adesc), L(Bdesc), L(Cdesc), L(Ddesc), align);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    auto job = std::make_shared<Job>();
    job->d = *D(desc); /* the descriptor as it is now (the bias pointer) */
    job->a = *L(Adesc);
    job->b = *L(Bdesc);
    job->c = *L(Cdesc);
    job->dd = *L(Ddesc);
    job->alpha = *(const float *)alpha; /* host pointer mode: read at the call */
    job->beta = *(const float *)beta;
    job->A = A;
    job->B = B;
    job->C = C;
    job->Dp = Dp;
    job->bias = job->d.bias;
    if ((job->d.epilogue & CUBLASLT_EPILOGUE_BIAS) && job->bias == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    cudaError_t e = standin_enqueue(stream, [job] { job->run(); });
    if (e != cudaSuccess)
        return e == cudaErrorInvalidResourceHandle ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
