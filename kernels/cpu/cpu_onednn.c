/* SPDX-License-Identifier: GPL-2.0-or-later */
/* bf16 matmuls through oneDNN on the CPU; see cpu_backend.h.
 *
 * Used for precision bf16 when this CPU has bf16 instructions (AMX-BF16 or
 * AVX512-BF16) and oneDNN builds a bf16 matmul here; elsewhere bf16 runs on
 * fp32 GEMMs of operands rounded to bf16 (cpu_matmul.c), which computes the
 * same numbers.  DTRAIN_CPU_ONEDNN=off always takes that fallback;
 * DTRAIN_CPU_ONEDNN=force takes oneDNN even without bf16 instructions, with
 * f32 operands holding the bf16-rounded values where oneDNN has no bf16
 * matmul for the CPU (oneDNN 2.6 on AVX2): the same calls, layouts and
 * accumulation, so the oneDNN path is tested on any x86 CPU.
 *
 * The thread pool splits each matmul as for OpenBLAS (cpu_matmul.c) and
 * every pool thread runs its slice as one single-threaded oneDNN call: its
 * own stream, primitives and scratchpad (nothing shared between threads),
 * its OpenMP team set to 1 (Debian's oneDNN threads with OpenMP, whose
 * spinning workers would take the cores from the pool).  The primitives
 * are cached per thread by shape; the same shape on the same thread runs
 * the same kernel, so the same inputs give the same bits. */
#include "cpu_backend.h"
#include "dtrain_blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DTRAIN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

/* distinct slice shapes per thread: 4 matmuls per layer plus the head, 3
 * GEMM forms each, and a slice one row longer on some threads */
#define CACHE_MAX 64

struct prim {
    int M, N, K, btrans, accumulate;
    int bias;   /* 1: a bias of N f32 added to the product (DNNL_ARG_BIAS) */
    int c_bf16; /* 1: C in bf16, rounded once from the f32 sum; 0: f32 */
    int lda; /* 0: A dense M x K; else A stored transposed, K rows of lda elements */
    dnnl_primitive_t p;
    void *scratch; /* user scratchpad: nothing shared with another thread */
};

struct per_thread {
    dnnl_stream_t stream;
    struct prim cache[CACHE_MAX];
    int n;
    int next; /* the entry replaced when full */
};

struct cpu_onednn {
    dnnl_engine_t engine;
    int threads;
    int bf16; /* 1: bf16 operands; 0: f32 operands (forced without bf16 matmuls) */
    int failed_said;
    int atrans; /* 1: matmuls on a transposed A (lda > 0) build here */
    int bits_out; /* 1: the bf16 C forms (with and without a bias) build here */
    struct per_thread *t;
    char impl[96]; /* oneDNN's implementation of a probe matmul, e.g. "brg:avx512_core_amx" */
};

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "other";
    }
}

/* oneDNN 3 (Debian 13 and later) made memory descriptors opaque handles
 * that are created and destroyed, folded the operation descriptor into
 * dnnl_matmul_primitive_desc_create and gave the sum post-op a zero point
 * and a type; 2 (Debian 12: 2.6) fills structs.  The calls below differ
 * only there: md_ref is what a descriptor query returns in each. */
#if DNNL_VERSION_MAJOR >= 3
typedef const_dnnl_memory_desc_t md_ref;
#else
typedef const dnnl_memory_desc_t *md_ref;
#endif

/* C[M x N] (+)= A[M x K] @ B (+ bias), B stored K x N (btrans 0) or N x K
 * (btrans 1); A dense row-major, or (lda > 0) stored transposed with rows
 * of lda elements (strides 1 and lda); operands of the instance's type, C
 * f32 or (c_bf16) bf16. */
static dnnl_status_t make_prim(struct cpu_onednn *d, struct prim *e)
{
    dnnl_dims_t sd = {e->M, e->K}, wd = {e->K, e->N}, dd = {e->M, e->N}, bd = {1, e->N}, sstrides = {1, e->lda};
    dnnl_data_type_t ty = d->bf16 ? dnnl_bf16 : dnnl_f32, cty = e->c_bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_format_tag_t wtag = e->btrans ? dnnl_ba : dnnl_ab;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st;
    e->p = NULL;
    e->scratch = NULL;
#if DNNL_VERSION_MAJOR >= 3
    dnnl_memory_desc_t src = NULL, wei = NULL, dst = NULL, bia = NULL;
    if ((st = e->lda > 0 ? dnnl_memory_desc_create_with_strides(&src, 2, sd, ty, sstrides)
                         : dnnl_memory_desc_create_with_tag(&src, 2, sd, ty, dnnl_ab)) != dnnl_success ||
        (st = dnnl_memory_desc_create_with_tag(&wei, 2, wd, ty, wtag)) != dnnl_success ||
        (st = dnnl_memory_desc_create_with_tag(&dst, 2, dd, cty, dnnl_ab)) != dnnl_success ||
        (e->bias && (st = dnnl_memory_desc_create_with_tag(&bia, 2, bd, dnnl_f32, dnnl_ab)) != dnnl_success))
        goto out;
#else
    dnnl_memory_desc_t src, wei, dst, bia;
    dnnl_matmul_desc_t md;
    if ((st = e->lda > 0 ? dnnl_memory_desc_init_by_strides(&src, 2, sd, ty, sstrides)
                         : dnnl_memory_desc_init_by_tag(&src, 2, sd, ty, dnnl_ab)) != dnnl_success ||
        (st = dnnl_memory_desc_init_by_tag(&wei, 2, wd, ty, wtag)) != dnnl_success ||
        (st = dnnl_memory_desc_init_by_tag(&dst, 2, dd, cty, dnnl_ab)) != dnnl_success ||
        (e->bias && (st = dnnl_memory_desc_init_by_tag(&bia, 2, bd, dnnl_f32, dnnl_ab)) != dnnl_success) ||
        (st = dnnl_matmul_desc_init(&md, &src, &wei, e->bias ? &bia : NULL, &dst)) != dnnl_success)
        goto out;
#endif
    if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success)
        goto out;
    if (e->accumulate) { /* C = A B + 1.0 * C, the sum in fp32 */
        if ((st = dnnl_post_ops_create(&ops)) != dnnl_success ||
#if DNNL_VERSION_MAJOR >= 3
            (st = dnnl_post_ops_append_sum(ops, 1.0f, 0, dnnl_data_type_undef)) != dnnl_success ||
#else
            (st = dnnl_post_ops_append_sum(ops, 1.0f)) != dnnl_success ||
#endif
            (st = dnnl_primitive_attr_set_post_ops(attr, ops)) != dnnl_success)
            goto out;
    }
#if DNNL_VERSION_MAJOR >= 3
    if ((st = dnnl_matmul_primitive_desc_create(&pd, d->engine, src, wei, bia, dst, attr)) != dnnl_success)
        goto out;
#else
    if ((st = dnnl_primitive_desc_create(&pd, &md, attr, d->engine, NULL)) != dnnl_success)
        goto out;
#endif
    md_ref smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = smd != NULL ? dnnl_memory_desc_get_size(smd) : 0;
    if (bytes > 0 && (e->scratch = aligned_alloc(64, (bytes + 63) & ~(size_t)63)) == NULL) {
        st = dnnl_out_of_memory;
        goto out;
    }
    if ((st = dnnl_primitive_create(&e->p, pd)) != dnnl_success) {
        free(e->scratch);
        e->scratch = NULL;
        e->p = NULL;
    }
out:
#if DNNL_VERSION_MAJOR >= 3
    if (src != NULL)
        dnnl_memory_desc_destroy(src);
    if (wei != NULL)
        dnnl_memory_desc_destroy(wei);
    if (dst != NULL)
        dnnl_memory_desc_destroy(dst);
    if (bia != NULL)
        dnnl_memory_desc_destroy(bia);
#endif
    if (pd != NULL)
        dnnl_primitive_desc_destroy(pd);
    if (ops != NULL)
        dnnl_post_ops_destroy(ops);
    if (attr != NULL)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

static void free_prim(struct prim *e)
{
    if (e->p != NULL)
        dnnl_primitive_destroy(e->p);
    free(e->scratch);
    e->p = NULL;
    e->scratch = NULL;
}

/* oneDNN's implementation name of a primitive's descriptor */
static void impl_of(struct cpu_onednn *d, struct prim *e, char *buf, size_t len)
{
    const_dnnl_primitive_desc_t pd = NULL;
    const char *name = NULL;
    snprintf(buf, len, "?");
    if (dnnl_primitive_get_primitive_desc(e->p, &pd) == dnnl_success &&
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name != NULL)
        snprintf(buf, len, "%s", name);
    (void)d;
}

void cpu_onednn_destroy(struct cpu_onednn *d)
{
    if (d == NULL)
        return;
    for (int i = 0; d->t != NULL && i < d->threads; i++) {
        for (int j = 0; j < d->t[i].n; j++)
            free_prim(&d->t[i].cache[j]);
        if (d->t[i].stream != NULL)
            dnnl_stream_destroy(d->t[i].stream);
    }
    free(d->t);
    if (d->engine != NULL)
        dnnl_engine_destroy(d->engine);
    free(d);
}

/* A probe of the three GEMM forms cpu_matmul.c uses; 0 when all build. */
static int probe(struct cpu_onednn *d)
{
    struct prim forms[3] = {{.M = 37, .N = 53, .K = 64, .btrans = 1, .accumulate = 1},
                            {.M = 37, .N = 64, .K = 53, .btrans = 0, .accumulate = 0},
                            {.M = 53, .N = 64, .K = 37, .btrans = 0, .accumulate = 1}};
    int rc = 0;
    for (int i = 0; i < 3; i++) {
        if (make_prim(d, &forms[i]) != dnnl_success)
            rc = -1;
        else if (i == 0)
            impl_of(d, &forms[i], d->impl, sizeof d->impl);
        free_prim(&forms[i]);
    }
    /* the weight gradient's form with dout read transposed in place; without
     * it cpu_matmul.c converts dout transposed first */
    struct prim at = {.M = 53, .N = 64, .K = 37, .btrans = 0, .accumulate = 1, .lda = 61};
    d->atrans = make_prim(d, &at) == dnnl_success;
    free_prim(&at);
    /* bf16 results written as bf16 (the forward with its bias, dinp):
     * without them cpu_typed.c rounds an f32 result into its tensor */
    struct prim bits[2] = {{.M = 37, .N = 53, .K = 64, .btrans = 1, .bias = 1, .c_bf16 = 1},
                           {.M = 37, .N = 64, .K = 53, .btrans = 0, .c_bf16 = 1}};
    d->bits_out = d->bf16;
    for (int i = 0; i < 2; i++) {
        if (d->bits_out && make_prim(d, &bits[i]) != dnnl_success)
            d->bits_out = 0;
        free_prim(&bits[i]);
    }
    return rc;
}

int cpu_onednn_create(int threads, const char *mode, struct cpu_onednn **out, char *line, size_t len)
{
    struct dtrain_cpu_features f;
    *out = NULL;
    line[0] = '\0';
    int force = mode != NULL && strcmp(mode, "force") == 0;
    if (mode != NULL && strcmp(mode, "off") == 0) {
        snprintf(line, len, "fp32 GEMMs on operands rounded to bf16 (DTRAIN_CPU_ONEDNN=off)");
        return 0;
    }
    dtrain_cpu_features_read(&f);
    int has_bf16 = f.amx_bf16 || f.avx512_bf16;
    if (!has_bf16 && !force) {
        snprintf(line, len, "fp32 GEMMs on operands rounded to bf16 (this CPU has no AMX-BF16 or AVX512-BF16 "
                 "for oneDNN's bf16 matmuls)");
        return 0;
    }
    struct cpu_onednn *d = calloc(1, sizeof *d);
    if (d == NULL || (d->t = calloc((size_t)threads, sizeof *d->t)) == NULL) {
        free(d);
        return -1;
    }
    d->threads = threads;
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
        d->engine = NULL;
        cpu_onednn_destroy(d);
        snprintf(line, len, "fp32 GEMMs on operands rounded to bf16 (oneDNN has no CPU engine here)");
        return 0;
    }
    for (int i = 0; i < threads; i++)
        if (dnnl_stream_create(&d->t[i].stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
            d->t[i].stream = NULL;
            cpu_onednn_destroy(d);
            return -1;
        }
    const dnnl_version_t *v = dnnl_version();
    const char *isa = isa_name(dnnl_get_effective_cpu_isa());
    d->bf16 = 1;
    if (probe(d) == 0) {
        snprintf(line, len, "oneDNN %d.%d.%d matmuls, bf16 operands, fp32 accumulation (%s, ISA %s%s)", v->major,
                 v->minor, v->patch, d->impl, isa, has_bf16 ? "" : "; forced: DTRAIN_CPU_ONEDNN=force");
        *out = d;
        return 0;
    }
    d->bf16 = 0;
    if (force && probe(d) == 0) {
        snprintf(line, len, "oneDNN %d.%d.%d matmuls on f32 operands rounded to bf16, fp32 accumulation (%s, ISA "
                 "%s; DTRAIN_CPU_ONEDNN=force: oneDNN has no bf16 matmul for this CPU)", v->major, v->minor,
                 v->patch, d->impl, isa);
        *out = d;
        return 0;
    }
    snprintf(line, len, "fp32 GEMMs on operands rounded to bf16 (oneDNN %d.%d.%d builds no bf16 matmul here, "
             "ISA %s)", v->major, v->minor, v->patch, isa);
    cpu_onednn_destroy(d);
    return 0;
}

int cpu_onednn_bf16(const struct cpu_onednn *d)
{
    return d->bf16;
}

int cpu_onednn_atrans(const struct cpu_onednn *d)
{
    return d->atrans;
}

int cpu_onednn_bits_out(const struct cpu_onednn *d)
{
    return d->bits_out;
}

static float elem(const void *p, size_t i, int bf16)
{
    if (!bf16)
        return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The same product in loops: only when oneDNN refused a shape the probe
 * did not (it said so); slow, but right, and the same bits every time. */
static void gemm_loops(int M, int N, int K, const void *A, int lda, const void *B, int btrans, int accumulate,
                       const float *bias, void *C, int c_bf16, int bf16)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += elem(A, lda > 0 ? (size_t)k * lda + m : (size_t)m * K + k, bf16) *
                       elem(B, btrans ? (size_t)n * K + k : (size_t)k * N + n, bf16);
            acc = bias != NULL ? acc + bias[n] : acc;
            size_t i = (size_t)m * N + n;
            if (c_bf16)
                ((uint16_t *)C)[i] = dtrain_bf16_from_f32(acc);
            else
                ((float *)C)[i] = accumulate ? ((float *)C)[i] + acc : acc;
        }
}

void cpu_onednn_gemm(struct cpu_onednn *d, int tid, int M, int N, int K, const void *A, int lda, const void *B,
                     int btrans, int accumulate, const float *bias, void *C, int c_bf16)
{
    if (M <= 0 || N <= 0)
        return;
    struct per_thread *t = &d->t[tid];
    struct prim *e = NULL;
    for (int i = 0; i < t->n && e == NULL; i++) {
        struct prim *c = &t->cache[i];
        if (c->M == M && c->N == N && c->K == K && c->btrans == btrans && c->accumulate == accumulate &&
            c->lda == lda && c->bias == (bias != NULL) && c->c_bf16 == c_bf16)
            e = c;
    }
    omp_set_num_threads(1); /* this thread's own team (an ICV of the calling thread) */
    if (e == NULL) {
        if (t->n < CACHE_MAX)
            e = &t->cache[t->n++];
        else {
            e = &t->cache[t->next];
            t->next = (t->next + 1) % CACHE_MAX;
            free_prim(e);
        }
        *e = (struct prim){.M = M, .N = N, .K = K, .btrans = btrans, .accumulate = accumulate, .lda = lda,
                           .bias = bias != NULL, .c_bf16 = c_bf16};
        make_prim(d, e);
    }
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL, mbias = NULL;
    int done = 0;
    if (e->p != NULL && K > 0) {
        const_dnnl_primitive_desc_t pd = NULL;
        dnnl_primitive_get_primitive_desc(e->p, &pd);
        md_ref sm = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        md_ref wm = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        md_ref dm = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        md_ref scm = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        md_ref bm = bias != NULL ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1) : NULL;
        if (dnnl_memory_create(&ma, sm, d->engine, (void *)A) == dnnl_success &&
            dnnl_memory_create(&mb, wm, d->engine, (void *)B) == dnnl_success &&
            dnnl_memory_create(&mc, dm, d->engine, C) == dnnl_success &&
            (bias == NULL || dnnl_memory_create(&mbias, bm, d->engine, (void *)bias) == dnnl_success) &&
            (e->scratch == NULL || dnnl_memory_create(&ms, scm, d->engine, e->scratch) == dnnl_success)) {
            dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
            int nargs = 3;
            if (ms != NULL)
                args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms};
            if (mbias != NULL)
                args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mbias};
            done = dnnl_primitive_execute(e->p, t->stream, nargs, args) == dnnl_success &&
                   dnnl_stream_wait(t->stream) == dnnl_success;
        }
    }
    if (ma != NULL) dnnl_memory_destroy(ma);
    if (mb != NULL) dnnl_memory_destroy(mb);
    if (mc != NULL) dnnl_memory_destroy(mc);
    if (ms != NULL) dnnl_memory_destroy(ms);
    if (mbias != NULL) dnnl_memory_destroy(mbias);
    if (!done) {
        if (K > 0 && !__atomic_exchange_n(&d->failed_said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "dtrain: cpu bf16: oneDNN refused a %d x %d x %d matmul: that shape runs in plain "
                    "loops (slow)\n", M, N, K);
        gemm_loops(M, N, K, A, lda, B, btrans, accumulate, bias, C, c_bf16, d->bf16);
    }
}

#else /* no oneDNN at build time */

int cpu_onednn_create(int threads, const char *mode, struct cpu_onednn **out, char *line, size_t len)
{
    (void)threads;
    *out = NULL;
    snprintf(line, len, "fp32 GEMMs on operands rounded to bf16 (built without oneDNN%s)",
             mode != NULL && strcmp(mode, "force") == 0 ? ": DTRAIN_CPU_ONEDNN=force has nothing to force" : "");
    return 0;
}

void cpu_onednn_destroy(struct cpu_onednn *d)
{
    (void)d;
}

int cpu_onednn_bf16(const struct cpu_onednn *d)
{
    (void)d;
    return 0;
}

int cpu_onednn_atrans(const struct cpu_onednn *d)
{
    (void)d;
    return 0;
}

int cpu_onednn_bits_out(const struct cpu_onednn *d)
{
    (void)d;
    return 0;
}

void cpu_onednn_gemm(struct cpu_onednn *d, int tid, int M, int N, int K, const void *A, int lda, const void *B,
                     int btrans, int accumulate, const float *bias, void *C, int c_bf16)
{
    (void)d; (void)tid; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)btrans; (void)accumulate;
    (void)bias; (void)C; (void)c_bf16;
}

#endif
