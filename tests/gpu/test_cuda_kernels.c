/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Every CUDA kernel against the CPU kernel, in fp32, bf16 and fp16 precision.
 *
 * Fresh random inputs each run (the seed is printed), outputs the kernel
 * overwrites poisoned with NaN, outputs it adds into pre-filled with the
 * same random values on both sides.  The error of an output is its largest
 * |gpu - cpu| over the largest |cpu| (gpu_pair.h); each check has a
 * threshold for its precision:
 *   exact fp32 work (elementwise, AdamW)                  1e-6
 *   fp32 sums (layer norm, loss, embedding gradient)      2e-5
 *   matmuls and attention in fp32                          5e-5
 *   matmuls in bf16 (operands rounded to 8 bits)           2e-2
 *   matmuls in fp16 (operands rounded to 11 bits)          3e-3 (attention stays fp32 there)
 *   attention in bf16 (scores, probabilities rounded)      3e-2 forward, 5e-2 backward
 * Typed operands (fp32 and bf16 tensors, the model's combinations) run
 * against the cpu backend in the same precision (gpu_pair_open_matched):
 * both sides read the same bf16 inputs and round the operands the same
 * way, so what is left is the order of fp32 sums and a bf16 result's one
 * rounding:
 *   a bf16 result (matmul, exact attention, GELU)           1e-2: one bf16 ulp is at most
 *       2^-7 = 7.8e-3 of the largest |cpu|, and the sums' order moves a result across
 *       a rounding boundary by one ulp at most
 *   an fp32 result of bf16 operands                         5e-5 in fp32, 2e-4 in bf16/fp16:
 *       the same exact products summed in another order (on the tensor cores)
 *   flash attention (bf16 precision)                        the bf16 attention thresholds:
 *       it rounds P and dS to bf16, the cpu does not; the inputs' rounding, which both
 *       sides now share, is traded for the result's (2^-7)
 * The kernels that claim bit-identical results run twice and must agree.
 * Without a CUDA device the whole file is skipped. */
#include "dtrain_kernels.h"
#include "gpu_pair.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DTRAIN_HAVE_CUDA
#include "dtrain_cuda.h"

struct tolerances {
    const char *name;
    double exact, sums, matmul, attn_fwd, attn_bwd;
    double typed_f32, typed_bf16; /* typed operands, against the cpu in the same precision */
};

static const struct tolerances TOL_FP32 = {"fp32", 1e-6, 2e-5, 5e-5, 5e-5, 5e-5, 5e-5, 1e-2};
static const struct tolerances TOL_BF16 = {"bf16", 1e-6, 2e-5, 2e-2, 3e-2, 5e-2, 2e-4, 1e-2};
static const struct tolerances TOL_FP16 = {"fp16", 1e-6, 2e-5, 3e-3, 5e-5, 5e-5, 2e-4, 1e-2};

/* ok() on an error against its threshold, naming both */
#define CHECK_ERR(err, thr, tol, ...)                                                         \
    do {                                                                                      \
        double e_ = (err), t_ = (thr);                                                        \
        char what_[160];                                                                      \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                           \
        ok(e_ <= t_, "[%s] %s: error %.2e (threshold %.0e)", (tol)->name, what_, e_, t_);     \
    } while (0)

/* ------------------------------------------------------------------ encoder */

static void test_encoder(struct gpu_pair *p, const struct tolerances *tol)
{
    int B = 4, T = 64, C = 256, V = 300, maxT = 80; /* 256 positions over 300 tokens: repeats */
    size_t N = (size_t)B * T;
    struct mirror_i32 tok = mirror_tokens(p, N, V);
    struct mirror wte = mirror_random(p, (size_t)V * C, 1.0f), wpe = mirror_random(p, (size_t)maxT * C, 1.0f);
    struct mirror out = mirror_poisoned(p, N * C), dout = mirror_random(p, N * C, 1.0f);
    dtrain_k_encoder_forward(p->cpu, out.cpu, tok.cpu, wte.cpu, wpe.cpu, B, T, C);
    dtrain_k_encoder_forward(p->gpu, out.gpu, tok.gpu, wte.gpu, wpe.gpu, B, T, C);
    CHECK_ERR(mirror_error(p, &out), tol->exact, tol, "encoder forward (B=%d T=%d C=%d)", B, T, C);

    struct mirror dwte = mirror_random(p, (size_t)V * C, 0.5f), dwpe = mirror_random(p, (size_t)maxT * C, 0.5f);
    float *dwte0 = gpu_clone(p, dwte.gpu, dwte.n), *dwpe0 = gpu_clone(p, dwpe.gpu, dwpe.n);
    dtrain_k_encoder_backward(p->cpu, dwte.cpu, dwpe.cpu, dout.cpu, tok.cpu, B, T, C);
    dtrain_k_encoder_backward(p->gpu, dwte.gpu, dwpe.gpu, dout.gpu, tok.gpu, B, T, C);
    CHECK_ERR(mirror_error(p, &dwte), tol->sums, tol, "encoder backward dwte (+=, repeated tokens)");
    CHECK_ERR(mirror_error(p, &dwpe), tol->sums, tol, "encoder backward dwpe (+=)");
    dtrain_k_encoder_backward(p->gpu, dwte0, dwpe0, dout.gpu, tok.gpu, B, T, C);
    ok(gpu_same_bits(p, dwte0, dwte.gpu, dwte.n) && gpu_same_bits(p, dwpe0, dwpe.gpu, dwpe.n),
       "[%s] encoder backward gives the same bits twice", tol->name);
    dtrain_k_free(p->gpu, dwte0);
    dtrain_k_free(p->gpu, dwpe0);
    mirror_free(p, &dwte); mirror_free(p, &dwpe); mirror_free(p, &out); mirror_free(p, &dout);
    mirror_free(p, &wte); mirror_free(p, &wpe); mirror_i32_free(p, &tok);
}

/* ------------------------------------------------------------------ layer norm */

static void test_layernorm(struct gpu_pair *p, const struct tolerances *tol, int N, int C)
{
    size_t NC = (size_t)N * C;
    struct mirror inp = mirror_random(p, NC, 2.0f), w = mirror_random(p, (size_t)C, 1.0f);
    struct mirror b = mirror_random(p, (size_t)C, 1.0f), out = mirror_poisoned(p, NC);
    struct mirror mean = mirror_poisoned(p, (size_t)N), rstd = mirror_poisoned(p, (size_t)N);
    dtrain_k_layernorm_forward(p->cpu, out.cpu, mean.cpu, rstd.cpu, inp.cpu, w.cpu, b.cpu, N, C);
    dtrain_k_layernorm_forward(p->gpu, out.gpu, mean.gpu, rstd.gpu, inp.gpu, w.gpu, b.gpu, N, C);
    CHECK_ERR(mirror_error(p, &out), tol->sums, tol, "layernorm forward out (N=%d C=%d)", N, C);
    CHECK_ERR(mirror_error(p, &mean), tol->sums, tol, "layernorm forward mean (N=%d C=%d)", N, C);
    CHECK_ERR(mirror_error(p, &rstd), tol->sums, tol, "layernorm forward rstd (N=%d C=%d)", N, C);

    struct mirror dout = mirror_random(p, NC, 1.0f), dinp = mirror_random(p, NC, 0.5f);
    struct mirror dw = mirror_random(p, (size_t)C, 0.5f), db = mirror_random(p, (size_t)C, 0.5f);
    float *dinp0 = gpu_clone(p, dinp.gpu, NC), *dw0 = gpu_clone(p, dw.gpu, (size_t)C);
    float *db0 = gpu_clone(p, db.gpu, (size_t)C);
    dtrain_k_layernorm_backward(p->cpu, dinp.cpu, dw.cpu, db.cpu, dout.cpu, inp.cpu, w.cpu, mean.cpu, rstd.cpu, N, C);
    dtrain_k_layernorm_backward(p->gpu, dinp.gpu, dw.gpu, db.gpu, dout.gpu, inp.gpu, w.gpu, mean.gpu, rstd.gpu, N, C);
    CHECK_ERR(mirror_error(p, &dinp), tol->sums, tol, "layernorm backward dinp (+=) (N=%d C=%d)", N, C);
    CHECK_ERR(mirror_error(p, &dw), tol->sums, tol, "layernorm backward dweight (+=) (N=%d C=%d)", N, C);
    CHECK_ERR(mirror_error(p, &db), tol->sums, tol, "layernorm backward dbias (+=) (N=%d C=%d)", N, C);
    dtrain_k_layernorm_backward(p->gpu, dinp0, dw0, db0, dout.gpu, inp.gpu, w.gpu, mean.gpu, rstd.gpu, N, C);
    ok(gpu_same_bits(p, dinp0, dinp.gpu, NC) && gpu_same_bits(p, dw0, dw.gpu, (size_t)C) &&
       gpu_same_bits(p, db0, db.gpu, (size_t)C), "[%s] layernorm backward gives the same bits twice", tol->name);
    dtrain_k_free(p->gpu, dinp0); dtrain_k_free(p->gpu, dw0); dtrain_k_free(p->gpu, db0);
    mirror_free(p, &inp); mirror_free(p, &w); mirror_free(p, &b); mirror_free(p, &out); mirror_free(p, &mean);
    mirror_free(p, &rstd); mirror_free(p, &dout); mirror_free(p, &dinp); mirror_free(p, &dw); mirror_free(p, &db);
}

/* ------------------------------------------------------------------ matmul */

static void test_matmul(struct gpu_pair *p, const struct tolerances *tol, int N, int IC, int OC, int with_bias,
                        int with_dinp)
{
    struct mirror inp = mirror_random(p, (size_t)N * IC, 1.0f), w = mirror_random(p, (size_t)OC * IC, 1.0f);
    struct mirror bias = mirror_random(p, (size_t)OC, 1.0f), out = mirror_poisoned(p, (size_t)N * OC);
    dtrain_k_matmul_forward(p->cpu, dtrain_tensor_f32(out.cpu), dtrain_tensor_f32(inp.cpu), w.cpu, with_bias ? bias.cpu : NULL, N, IC, OC);
    dtrain_k_matmul_forward(p->gpu, dtrain_tensor_f32(out.gpu), dtrain_tensor_f32(inp.gpu), w.gpu, with_bias ? bias.gpu : NULL, N, IC, OC);
    CHECK_ERR(mirror_error(p, &out), tol->matmul, tol, "matmul forward N=%d IC=%d OC=%d%s", N, IC, OC,
              with_bias ? " + bias" : "");

    struct mirror dout = mirror_random(p, (size_t)N * OC, 1.0f), dinp = mirror_poisoned(p, (size_t)N * IC);
    struct mirror dw = mirror_random(p, (size_t)OC * IC, 0.5f), db = mirror_random(p, (size_t)OC, 0.5f);
    float *dw0 = gpu_clone(p, dw.gpu, dw.n), *db0 = gpu_clone(p, db.gpu, db.n);
    dtrain_k_matmul_backward(p->cpu, dtrain_tensor_f32(with_dinp ? dinp.cpu : NULL), dw.cpu, with_bias ? db.cpu : NULL, dtrain_tensor_f32(dout.cpu),
                             dtrain_tensor_f32(inp.cpu), w.cpu, N, IC, OC);
    dtrain_k_matmul_backward(p->gpu, dtrain_tensor_f32(with_dinp ? dinp.gpu : NULL), dw.gpu, with_bias ? db.gpu : NULL, dtrain_tensor_f32(dout.gpu),
                             dtrain_tensor_f32(inp.gpu), w.gpu, N, IC, OC);
    if (with_dinp)
        CHECK_ERR(mirror_error(p, &dinp), tol->matmul, tol, "matmul backward dinp (=) N=%d IC=%d OC=%d", N, IC, OC);
    CHECK_ERR(mirror_error(p, &dw), tol->matmul, tol, "matmul backward dweight (+=) N=%d IC=%d OC=%d", N, IC, OC);
    CHECK_ERR(mirror_error(p, &db), with_bias ? tol->sums : 0.0, tol, "matmul backward dbias %s",
              with_bias ? "(+=)" : "untouched when NULL");
    dtrain_k_matmul_backward(p->gpu, dtrain_tensor_f32(NULL), dw0, with_bias ? db0 : NULL, dtrain_tensor_f32(dout.gpu), dtrain_tensor_f32(inp.gpu), w.gpu, N, IC, OC);
    ok(gpu_same_bits(p, dw0, dw.gpu, dw.n) && gpu_same_bits(p, db0, db.gpu, db.n),
       "[%s] matmul backward gives the same bits twice", tol->name);
    dtrain_k_free(p->gpu, dw0); dtrain_k_free(p->gpu, db0);
    mirror_free(p, &inp); mirror_free(p, &w); mirror_free(p, &bias); mirror_free(p, &out);
    mirror_free(p, &dout); mirror_free(p, &dinp); mirror_free(p, &dw); mirror_free(p, &db);
}

/* ------------------------------------------------------------------ NF4 base linear */

static void nf4_bail(const char *what)
{
    printf("Bail out! %s\n", what);
    exit(1);
}

/* The NF4 weight of a mirror's host values, uploaded to both sides. */
struct nf4_mirror {
    struct dtrain_nf4 cpu, gpu;
};

static struct nf4_mirror nf4_mirror_of(struct gpu_pair *p, const float *w, int OC, int IC)
{
    size_t bytes = dtrain_nf4_bytes(OC, IC);
    struct nf4_mirror m = {{dtrain_k_alloc(p->cpu, bytes), OC, IC}, {dtrain_k_alloc(p->gpu, bytes), OC, IC}};
    if (m.cpu.data == NULL || m.gpu.data == NULL || dtrain_nf4_quantize(m.cpu.data, w, OC, IC) != 0)
        nf4_bail("cannot make an NF4 weight");
    dtrain_k_upload(p->gpu, m.gpu.data, m.cpu.data, bytes);
    return m;
}

/* The cpu kernels compute in fp32 whatever the precision; the cuda ones in
 * theirs: the tolerance of a plain matmul against the fp32 cpu.  A bf16
 * result adds its rounding (typed_bf16). */
static void test_nf4(struct gpu_pair *p, const struct tolerances *tol, int N, int IC, int OC, enum dtrain_dtype t,
                     int with_bias)
{
    const char *nt = dtrain_dtype_name(t);
    double thr = t == DTRAIN_BF16 ? tol->matmul + tol->typed_bf16 : tol->matmul;
    struct mirror w = mirror_random(p, (size_t)OC * IC, 0.05f), bias = mirror_random(p, (size_t)OC, 1.0f);
    struct nf4_mirror q = nf4_mirror_of(p, w.cpu, OC, IC);
    struct tmirror inp = tmirror_random(p, t, (size_t)N * IC, 1.0f), out = tmirror_poisoned(p, t, (size_t)N * OC);
    dtrain_k_nf4_matmul_forward(p->cpu, tmirror_cpu(&out), tmirror_cpu(&inp), q.cpu, with_bias ? bias.cpu : NULL, N);
    dtrain_k_nf4_matmul_forward(p->gpu, tmirror_gpu(&out), tmirror_gpu(&inp), q.gpu, with_bias ? bias.gpu : NULL, N);
    CHECK_ERR(tmirror_error(p, &out), thr, tol, "NF4 matmul forward %s N=%d IC=%d OC=%d%s", nt, N, IC, OC,
              with_bias ? " + bias" : "");
    struct tmirror dout = tmirror_random(p, t, (size_t)N * OC, 1.0f), dinp = tmirror_poisoned(p, t, (size_t)N * IC);
    dtrain_k_nf4_matmul_backward(p->cpu, tmirror_cpu(&dinp), tmirror_cpu(&dout), q.cpu, N);
    dtrain_k_nf4_matmul_backward(p->gpu, tmirror_gpu(&dinp), tmirror_gpu(&dout), q.gpu, N);
    CHECK_ERR(tmirror_error(p, &dinp), thr, tol, "NF4 matmul backward dinp (=) %s N=%d IC=%d OC=%d", nt, N, IC, OC);
    tmirror_free(p, &inp); tmirror_free(p, &out); tmirror_free(p, &dout); tmirror_free(p, &dinp);
    dtrain_k_free(p->cpu, q.cpu.data); dtrain_k_free(p->gpu, q.gpu.data);
    mirror_free(p, &w); mirror_free(p, &bias);
}

/* In fp32, inp = the identity makes out = dequant(w)^T exactly (each sum
 * one product by 1 and zeros): the device's dequantisation is the host's
 * bit for bit. */
static void test_nf4_exact(struct gpu_pair *p, int IC, int OC)
{
    struct mirror w = mirror_random(p, (size_t)OC * IC, 1.0f);
    struct nf4_mirror q = nf4_mirror_of(p, w.cpu, OC, IC);
    float *eye = calloc((size_t)IC * IC, sizeof *eye), *deq = malloc((size_t)OC * IC * sizeof *deq);
    float *got = malloc((size_t)IC * OC * sizeof *got);
    float *eye_gpu = dtrain_k_alloc(p->gpu, (size_t)IC * IC * sizeof *eye), *out = dtrain_k_alloc(p->gpu, (size_t)IC * OC * sizeof *got);
    if (eye == NULL || deq == NULL || got == NULL || eye_gpu == NULL || out == NULL)
        nf4_bail("out of memory");
    for (int i = 0; i < IC; i++)
        eye[(size_t)i * IC + i] = 1.0f;
    dtrain_k_upload(p->gpu, eye_gpu, eye, (size_t)IC * IC * sizeof *eye);
    dtrain_k_nf4_matmul_forward(p->gpu, dtrain_tensor_f32(out), dtrain_tensor_f32(eye_gpu), q.gpu, NULL, IC);
    dtrain_k_download(p->gpu, got, out, (size_t)IC * OC * sizeof *got);
    dtrain_nf4_dequantize(deq, q.cpu.data, OC, IC);
    size_t diff = 0;
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < IC; i++)
            diff += memcmp(&deq[(size_t)o * IC + i], &got[(size_t)i * OC + o], sizeof(float)) != 0;
    ok(diff == 0, "[fp32] NF4: the device's dequantised %d x %d weights are the host's bit for bit (%zu differ)", OC,
       IC, diff);
    free(eye); free(deq); free(got);
    dtrain_k_free(p->gpu, eye_gpu); dtrain_k_free(p->gpu, out);
    dtrain_k_free(p->cpu, q.cpu.data); dtrain_k_free(p->gpu, q.gpu.data);
    mirror_free(p, &w);
}

/* ------------------------------------------------------------------ attention */

/* The rule of kernels/cuda/cuda_attention.cu: bf16 with a head size of
 * 16, 32, 64 or 128 (any T) takes the flash kernels, whose att holds each
 * row's log-sum-exp instead of the probabilities. */
static int flash_path(enum dtrain_kernels_precision prec, int HS)
{
    return prec == DTRAIN_PRECISION_BF16 && (HS == 16 || HS == 32 || HS == 64 || HS == 128);
}


/* attention backward's scratch on one side; bails out when out of memory */
static float *attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    float *s = dtrain_k_alloc(k, dtrain_k_attention_scratch(k, B, T, NH, KVH, HS) * sizeof(float));
    if (s == NULL) {
        printf("Bail out! out of memory for the attention scratch\n");
        exit(1);
    }
    return s;
}

/* KVH < NH: grouped-query attention */
static void test_attention(struct gpu_pair *p, const struct tolerances *tol, int B, int T, int NH, int KVH, int HS)
{
    size_t C = (size_t)NH * HS, N = (size_t)B * T, NA = (size_t)B * NH * T * T, CQ = (size_t)(NH + 2 * KVH) * HS;
    int flash = flash_path(dtrain_kernels_precision(p->gpu), HS);
    struct mirror qkv = mirror_random(p, N * CQ, 2.0f), out = mirror_poisoned(p, N * C);
    struct mirror att = mirror_poisoned(p, NA);
    dtrain_k_attention_forward(p->cpu, dtrain_tensor_f32(out.cpu), att.cpu, dtrain_tensor_f32(qkv.cpu), B, T, NH, KVH, HS);
    dtrain_k_attention_forward(p->gpu, dtrain_tensor_f32(out.gpu), att.gpu, dtrain_tensor_f32(qkv.gpu), B, T, NH, KVH, HS);
    CHECK_ERR(mirror_error(p, &out), tol->attn_fwd, tol, "attention forward out (B=%d T=%d NH=%d KVH=%d HS=%d, %s)", B,
              T, NH, KVH, HS, flash ? "flash" : "exact");
    if (!flash)
        CHECK_ERR(mirror_error(p, &att), tol->attn_fwd, tol, "attention forward att (B=%d T=%d NH=%d HS=%d)", B, T,
                  NH, HS);

    struct mirror dout = mirror_random(p, N * C, 1.0f), dqkv = mirror_poisoned(p, N * CQ);
    float *s_cpu = attention_scratch(p->cpu, B, T, NH, KVH, HS), *s_gpu = attention_scratch(p->gpu, B, T, NH, KVH, HS);
    dtrain_k_attention_backward(p->cpu, dtrain_tensor_f32(dqkv.cpu), s_cpu, dtrain_tensor_f32(dout.cpu), dtrain_tensor_f32(qkv.cpu), dtrain_tensor_f32(out.cpu), att.cpu, B, T, NH, KVH, HS);
    dtrain_k_attention_backward(p->gpu, dtrain_tensor_f32(dqkv.gpu), s_gpu, dtrain_tensor_f32(dout.gpu), dtrain_tensor_f32(qkv.gpu), dtrain_tensor_f32(out.gpu), att.gpu, B, T, NH, KVH, HS);
    CHECK_ERR(mirror_error(p, &dqkv), tol->attn_bwd, tol, "attention backward dqkv (=) (B=%d T=%d NH=%d KVH=%d HS=%d, %s)",
              B, T, NH, KVH, HS, flash ? "flash" : "exact");
    float *again = gpu_clone(p, dqkv.gpu, dqkv.n);
    dtrain_k_attention_backward(p->gpu, dtrain_tensor_f32(again), s_gpu, dtrain_tensor_f32(dout.gpu), dtrain_tensor_f32(qkv.gpu), dtrain_tensor_f32(out.gpu), att.gpu, B, T, NH, KVH, HS);
    ok(gpu_same_bits(p, again, dqkv.gpu, dqkv.n), "[%s] attention backward gives the same bits twice", tol->name);
    dtrain_k_free(p->gpu, again);
    dtrain_k_free(p->cpu, s_cpu);
    dtrain_k_free(p->gpu, s_gpu);
    mirror_free(p, &qkv); mirror_free(p, &out); mirror_free(p, &att); mirror_free(p, &dout); mirror_free(p, &dqkv);
}

/* ------------------------------------------------------------------ Llama layers */

/* Llama's RoPE frequencies for head size HS, on both sides */
static struct mirror rope_freq(struct gpu_pair *p, int HS)
{
    struct mirror f = mirror_random(p, (size_t)HS / 2, 1.0f);
    float *h = malloc((size_t)HS / 2 * sizeof(float));
    if (h == NULL)
        abort();
    for (int i = 0; i < HS / 2; i++)
        h[i] = (float)(1.0 / pow(500000.0, 2.0 * i / HS));
    dtrain_k_upload(p->cpu, f.cpu, h, (size_t)HS / 2 * sizeof(float));
    dtrain_k_upload(p->gpu, f.gpu, h, (size_t)HS / 2 * sizeof(float));
    free(h);
    return f;
}

/* RMS norm, RoPE and SwiGLU in fp32 (the RoPE of long rows: angles far
 * past 2 pi; cosf and sinf within an ulp or two on either side). */
static void test_llama(struct gpu_pair *p, const struct tolerances *tol, int N, int C, int T, int NH, int KVH,
                       int HS, int F)
{
    struct mirror x = mirror_random(p, (size_t)N * C, 2.0f), w = mirror_random(p, (size_t)C, 1.0f);
    struct mirror y = mirror_poisoned(p, (size_t)N * C), rstd = mirror_poisoned(p, (size_t)N);
    dtrain_k_rmsnorm_forward(p->cpu, y.cpu, rstd.cpu, x.cpu, w.cpu, 1e-5f, N, C);
    dtrain_k_rmsnorm_forward(p->gpu, y.gpu, rstd.gpu, x.gpu, w.gpu, 1e-5f, N, C);
    CHECK_ERR(mirror_error(p, &y), tol->sums, tol, "rmsnorm forward out (N=%d C=%d)", N, C);
    CHECK_ERR(mirror_error(p, &rstd), tol->sums, tol, "rmsnorm forward rstd");
    struct mirror dy = mirror_random(p, (size_t)N * C, 1.0f), dx = mirror_random(p, (size_t)N * C, 0.5f);
    struct mirror dw = mirror_random(p, (size_t)C, 0.5f);
    float *dx0 = gpu_clone(p, dx.gpu, dx.n), *dw0 = gpu_clone(p, dw.gpu, dw.n);
    dtrain_k_rmsnorm_backward(p->cpu, dx.cpu, dw.cpu, dy.cpu, x.cpu, w.cpu, rstd.cpu, N, C);
    dtrain_k_rmsnorm_backward(p->gpu, dx.gpu, dw.gpu, dy.gpu, x.gpu, w.gpu, rstd.gpu, N, C);
    CHECK_ERR(mirror_error(p, &dx), tol->sums, tol, "rmsnorm backward dinp (+=)");
    CHECK_ERR(mirror_error(p, &dw), tol->sums, tol, "rmsnorm backward dweight (+=)");
    dtrain_k_rmsnorm_backward(p->gpu, dx0, dw0, dy.gpu, x.gpu, w.gpu, rstd.gpu, N, C);
    ok(gpu_same_bits(p, dx0, dx.gpu, dx.n) && gpu_same_bits(p, dw0, dw.gpu, dw.n),
       "[%s] rmsnorm backward gives the same bits twice", tol->name);
    dtrain_k_free(p->gpu, dx0); dtrain_k_free(p->gpu, dw0);

    int B = N / T;
    size_t nq = (size_t)B * T * (NH + 2 * KVH) * HS;
    struct mirror f = rope_freq(p, HS), q = mirror_random(p, nq, 2.0f);
    dtrain_k_rope_forward(p->cpu, dtrain_tensor_f32(q.cpu), f.cpu, B, T, NH, KVH, HS);
    dtrain_k_rope_forward(p->gpu, dtrain_tensor_f32(q.gpu), f.gpu, B, T, NH, KVH, HS);
    CHECK_ERR(mirror_error(p, &q), tol->sums, tol, "rope forward (B=%d T=%d NH=%d KVH=%d HS=%d)", B, T, NH, KVH, HS);
    dtrain_k_rope_backward(p->cpu, dtrain_tensor_f32(q.cpu), f.cpu, B, T, NH, KVH, HS);
    dtrain_k_rope_backward(p->gpu, dtrain_tensor_f32(q.gpu), f.gpu, B, T, NH, KVH, HS);
    CHECK_ERR(mirror_error(p, &q), tol->sums, tol, "rope backward");

    struct mirror h = mirror_random(p, (size_t)N * 2 * F, 6.0f), o = mirror_poisoned(p, (size_t)N * F);
    struct mirror d = mirror_random(p, (size_t)N * F, 1.0f), dh = mirror_poisoned(p, (size_t)N * 2 * F);
    dtrain_k_swiglu_forward(p->cpu, dtrain_tensor_f32(o.cpu), dtrain_tensor_f32(h.cpu), N, F);
    dtrain_k_swiglu_forward(p->gpu, dtrain_tensor_f32(o.gpu), dtrain_tensor_f32(h.gpu), N, F);
    CHECK_ERR(mirror_error(p, &o), fmax(tol->exact, 5e-6), tol, "swiglu forward (N=%d F=%d)", N, F);
    dtrain_k_swiglu_backward(p->cpu, dtrain_tensor_f32(dh.cpu), dtrain_tensor_f32(h.cpu), dtrain_tensor_f32(d.cpu), N, F);
    dtrain_k_swiglu_backward(p->gpu, dtrain_tensor_f32(dh.gpu), dtrain_tensor_f32(h.gpu), dtrain_tensor_f32(d.gpu), N, F);
    CHECK_ERR(mirror_error(p, &dh), fmax(tol->exact, 5e-6), tol, "swiglu backward (=)");
    struct mirror *all[] = {&x, &w, &y, &rstd, &dy, &dx, &dw, &f, &q, &h, &o, &d, &dh};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mirror_free(p, all[i]);
}

/* RoPE and SwiGLU on bf16 operands. */
static void test_llama_typed(struct gpu_pair *p, const struct tolerances *tol, int B, int T, int NH, int KVH, int HS,
                             int N, int F)
{
    const enum dtrain_dtype bf = DTRAIN_BF16;
    size_t nq = (size_t)B * T * (NH + 2 * KVH) * HS;
    struct mirror f = rope_freq(p, HS);
    struct tmirror q = tmirror_random(p, bf, nq, 2.0f);
    dtrain_k_rope_forward(p->cpu, tmirror_cpu(&q), f.cpu, B, T, NH, KVH, HS);
    dtrain_k_rope_forward(p->gpu, tmirror_gpu(&q), f.gpu, B, T, NH, KVH, HS);
    CHECK_ERR(tmirror_error(p, &q), tol->typed_bf16, tol, "typed rope forward bf16 (B=%d T=%d NH=%d KVH=%d HS=%d)", B,
              T, NH, KVH, HS);
    dtrain_k_rope_backward(p->cpu, tmirror_cpu(&q), f.cpu, B, T, NH, KVH, HS);
    dtrain_k_rope_backward(p->gpu, tmirror_gpu(&q), f.gpu, B, T, NH, KVH, HS);
    CHECK_ERR(tmirror_error(p, &q), tol->typed_bf16, tol, "typed rope backward bf16");
    struct tmirror h = tmirror_random(p, bf, (size_t)N * 2 * F, 6.0f), o = tmirror_poisoned(p, bf, (size_t)N * F);
    struct tmirror d = tmirror_random(p, bf, (size_t)N * F, 1.0f), dh = tmirror_poisoned(p, bf, (size_t)N * 2 * F);
    dtrain_k_swiglu_forward(p->cpu, tmirror_cpu(&o), tmirror_cpu(&h), N, F);
    dtrain_k_swiglu_forward(p->gpu, tmirror_gpu(&o), tmirror_gpu(&h), N, F);
    CHECK_ERR(tmirror_error(p, &o), tol->typed_bf16, tol, "typed swiglu forward bf16 (N=%d F=%d)", N, F);
    dtrain_k_swiglu_backward(p->cpu, tmirror_cpu(&dh), tmirror_cpu(&h), tmirror_cpu(&d), N, F);
    dtrain_k_swiglu_backward(p->gpu, tmirror_gpu(&dh), tmirror_gpu(&h), tmirror_gpu(&d), N, F);
    CHECK_ERR(tmirror_error(p, &dh), tol->typed_bf16, tol, "typed swiglu backward bf16 (=)");
    mirror_free(p, &f);
    tmirror_free(p, &q); tmirror_free(p, &h); tmirror_free(p, &o); tmirror_free(p, &d); tmirror_free(p, &dh);
}

/* ------------------------------------------------------------------ elementwise */

static void test_elementwise(struct gpu_pair *p, const struct tolerances *tol)
{
    size_t n = ((size_t)1 << 20) + 3;
    struct mirror x = mirror_random(p, n, 4.0f), y = mirror_random(p, n, 1.0f), out = mirror_poisoned(p, n);
    dtrain_k_gelu_forward(p->cpu, dtrain_tensor_f32(out.cpu), dtrain_tensor_f32(x.cpu), n);
    dtrain_k_gelu_forward(p->gpu, dtrain_tensor_f32(out.gpu), dtrain_tensor_f32(x.gpu), n);
    CHECK_ERR(mirror_error(p, &out), tol->exact, tol, "gelu forward (n=%zu)", n);
    struct mirror dinp = mirror_poisoned(p, n);
    dtrain_k_gelu_backward(p->cpu, dtrain_tensor_f32(dinp.cpu), dtrain_tensor_f32(x.cpu), dtrain_tensor_f32(y.cpu), n);
    dtrain_k_gelu_backward(p->gpu, dtrain_tensor_f32(dinp.gpu), dtrain_tensor_f32(x.gpu), dtrain_tensor_f32(y.gpu), n);
    /* the cpu kernels' tanh is good to ~1e-7 absolute (cpu_layers.c), and the
     * derivative scales its error by up to ~2|x|: measured 1.1e-6 on the GPU
     * stand-in against tanhf */
    CHECK_ERR(mirror_error(p, &dinp), fmax(tol->exact, 5e-6), tol, "gelu backward (n=%zu)", n);
    struct mirror r = mirror_poisoned(p, n);
    dtrain_k_residual_forward(p->cpu, r.cpu, x.cpu, y.cpu, n);
    dtrain_k_residual_forward(p->gpu, r.gpu, x.gpu, y.gpu, n);
    CHECK_ERR(mirror_error(p, &r), tol->exact, tol, "residual forward (n=%zu)", n);
    dtrain_k_residual_forward(p->cpu, x.cpu, x.cpu, y.cpu, n);
    dtrain_k_residual_forward(p->gpu, x.gpu, x.gpu, y.gpu, n);
    CHECK_ERR(mirror_error(p, &x), tol->exact, tol, "residual forward in place");
    /* dtrain_k_copy promises overlapping regions (as memmove), forwards and
     * backwards; cudaMemcpyAsync alone does not */
    dtrain_k_copy(p->cpu, x.cpu + 1000, x.cpu, (n - 1000) * sizeof(float));
    dtrain_k_copy(p->gpu, x.gpu + 1000, x.gpu, (n - 1000) * sizeof(float));
    CHECK_ERR(mirror_error(p, &x), 0.0, tol, "copy onto an overlapping region after it");
    dtrain_k_copy(p->cpu, x.cpu, x.cpu + 3, (n - 3) * sizeof(float));
    dtrain_k_copy(p->gpu, x.gpu, x.gpu + 3, (n - 3) * sizeof(float));
    CHECK_ERR(mirror_error(p, &x), 0.0, tol, "copy onto an overlapping region before it");
    mirror_free(p, &x); mirror_free(p, &y); mirror_free(p, &out); mirror_free(p, &dinp); mirror_free(p, &r);
}

/* ------------------------------------------------------------------ loss */

static void test_xent(struct gpu_pair *p, const struct tolerances *tol, int N, int V, int Vp)
{
    struct mirror logits = mirror_random(p, (size_t)N * Vp, 8.0f), losses = mirror_poisoned(p, (size_t)N);
    struct mirror_i32 tgt = mirror_tokens(p, (size_t)N, V);
    dtrain_k_softmax_xent_forward(p->cpu, logits.cpu, losses.cpu, tgt.cpu, N, V, Vp);
    dtrain_k_softmax_xent_forward(p->gpu, logits.gpu, losses.gpu, tgt.gpu, N, V, Vp);
    CHECK_ERR(mirror_error(p, &losses), tol->sums, tol, "cross-entropy losses (N=%d V=%d Vp=%d)", N, V, Vp);
    /* p = e / sum over V terms: the CPU adds them in order, the GPU in a
     * tree, and the in-order sum's rounding grows like sqrt(V) (measured
     * on the GPU stand-in: 5.2e-5 at V=50257, 1.5e-6 at V=1000) */
    CHECK_ERR(mirror_error(p, &logits), tol->sums * fmax(1.0, sqrt(V / 1000.0)), tol,
              "cross-entropy probabilities, padding 0");
    dtrain_k_softmax_xent_backward(p->cpu, logits.cpu, tgt.cpu, 1.0f / N, N, V, Vp);
    dtrain_k_softmax_xent_backward(p->gpu, logits.gpu, tgt.gpu, 1.0f / N, N, V, Vp);
    CHECK_ERR(mirror_error(p, &logits), tol->sums, tol, "cross-entropy backward dlogits (=)");
    mirror_free(p, &logits); mirror_free(p, &losses); mirror_i32_free(p, &tgt);
}

/* The vocabulary-parallel pieces on one GPU: the vocabulary split into
 * `parts` slices (the last one with padding), the all-gather and all-reduce
 * done here on the host, the result against the CPU's whole-row kernel. */
static void test_xent_vocab_parallel(struct gpu_pair *p, const struct tolerances *tol, int N, int V, int parts)
{
    int Vl = (V + parts - 1) / parts, Vp = Vl * parts;
    size_t NV = (size_t)N * Vp;
    struct mirror logits = mirror_random(p, NV, 8.0f), losses = mirror_poisoned(p, (size_t)N);
    struct mirror_i32 tgt = mirror_tokens(p, (size_t)N, V);
    float *host = malloc(NV * sizeof(float)), *all_max = malloc((size_t)parts * N * sizeof(float));
    float *sums = calloc(2 * (size_t)N, sizeof(float)), *part_sums = malloc(2 * (size_t)N * sizeof(float));
    float **slice = calloc((size_t)parts, sizeof *slice), *row_slice = malloc((size_t)N * Vl * sizeof(float));
    float *d_rowmax = dtrain_k_alloc(p->gpu, (size_t)N * sizeof(float));
    float *d_allmax = dtrain_k_alloc(p->gpu, (size_t)parts * N * sizeof(float));
    float *d_sums = dtrain_k_alloc(p->gpu, 2 * (size_t)N * sizeof(float));
    if (!host || !all_max || !sums || !part_sums || !slice || !row_slice || !d_rowmax || !d_allmax || !d_sums) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    /* each rank's slice as its own (N, Vl) tensor */
    dtrain_k_download(p->gpu, host, logits.gpu, NV * sizeof(float));
    for (int r = 0; r < parts; r++) {
        for (int n = 0; n < N; n++)
            memcpy(row_slice + (size_t)n * Vl, host + (size_t)n * Vp + (size_t)r * Vl, (size_t)Vl * sizeof(float));
        if ((slice[r] = dtrain_k_alloc(p->gpu, (size_t)N * Vl * sizeof(float))) == NULL) {
            printf("Bail out! out of device memory\n");
            exit(1);
        }
        dtrain_k_upload(p->gpu, slice[r], row_slice, (size_t)N * Vl * sizeof(float));
    }
    /* 1. row maxima, all-gathered */
    for (int r = 0; r < parts; r++) {
        int nv = V - r * Vl < 0 ? 0 : V - r * Vl > Vl ? Vl : V - r * Vl;
        dtrain_cuda_xent_vp_rowmax(p->gpu, d_rowmax, slice[r], N, Vl, nv);
        dtrain_k_download(p->gpu, all_max + (size_t)r * N, d_rowmax, (size_t)N * sizeof(float));
    }
    dtrain_k_upload(p->gpu, d_allmax, all_max, (size_t)parts * N * sizeof(float));
    /* 2. exponentials and local sums, all-reduced */
    for (int r = 0; r < parts; r++) {
        int nv = V - r * Vl < 0 ? 0 : V - r * Vl > Vl ? Vl : V - r * Vl;
        dtrain_cuda_xent_vp_exp(p->gpu, slice[r], d_sums, d_allmax, parts, tgt.gpu, r * Vl, N, Vl, nv);
        dtrain_k_download(p->gpu, part_sums, d_sums, 2 * (size_t)N * sizeof(float));
        for (size_t i = 0; i < 2 * (size_t)N; i++)
            sums[i] += part_sums[i];
    }
    dtrain_k_upload(p->gpu, d_sums, sums, 2 * (size_t)N * sizeof(float));
    /* 3. probabilities and losses; then backward, each slice */
    for (int r = 0; r < parts; r++) {
        int nv = V - r * Vl < 0 ? 0 : V - r * Vl > Vl ? Vl : V - r * Vl;
        dtrain_cuda_xent_vp_finish(p->gpu, slice[r], losses.gpu, d_sums, N, Vl, nv);
    }
    /* the CPU: the whole rows */
    dtrain_k_softmax_xent_forward(p->cpu, logits.cpu, losses.cpu, tgt.cpu, N, V, Vp);
    CHECK_ERR(mirror_error(p, &losses), tol->sums, tol, "vocabulary-parallel losses (%d slices of %d, V=%d)", parts,
              Vl, V);
    /* gather the slices back into the GPU side of the mirror */
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0; r < parts; r++) {
            dtrain_k_download(p->gpu, row_slice, slice[r], (size_t)N * Vl * sizeof(float));
            for (int n = 0; n < N; n++)
                memcpy(host + (size_t)n * Vp + (size_t)r * Vl, row_slice + (size_t)n * Vl, (size_t)Vl * sizeof(float));
        }
        dtrain_k_upload(p->gpu, logits.gpu, host, NV * sizeof(float));
        CHECK_ERR(mirror_error(p, &logits), tol->sums, tol, "vocabulary-parallel %s",
                  pass == 0 ? "probabilities" : "backward dlogits");
        if (pass == 0) {
            for (int r = 0; r < parts; r++) {
                int nv = V - r * Vl < 0 ? 0 : V - r * Vl > Vl ? Vl : V - r * Vl;
                dtrain_cuda_xent_vp_backward(p->gpu, slice[r], tgt.gpu, r * Vl, 1.0f / N, N, Vl, nv);
            }
            dtrain_k_softmax_xent_backward(p->cpu, logits.cpu, tgt.cpu, 1.0f / N, N, V, Vp);
        }
    }
    for (int r = 0; r < parts; r++)
        dtrain_k_free(p->gpu, slice[r]);
    dtrain_k_free(p->gpu, d_rowmax); dtrain_k_free(p->gpu, d_allmax); dtrain_k_free(p->gpu, d_sums);
    free(row_slice); free(host); free(all_max); free(sums); free(part_sums); free(slice);
    mirror_free(p, &logits); mirror_free(p, &losses); mirror_i32_free(p, &tgt);
}

/* ------------------------------------------------------------------ optimizer */

static void test_adamw(struct gpu_pair *p, const struct tolerances *tol)
{
    size_t n = ((size_t)1 << 20) + 5;
    struct mirror params = mirror_random(p, n, 1.0f), grads = mirror_random(p, n, 0.1f);
    struct mirror m = mirror_random(p, n, 0.01f), v = mirror_random(p, n, 0.001f);
    struct mirror x = mirror_random(p, n, 1.0f);
    /* v >= 0, as in a real run */
    float *h = malloc(n * sizeof(float));
    if (h == NULL) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    dtrain_k_download(p->cpu, h, v.cpu, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = h[i] * h[i] * 1000.0f;
    dtrain_k_upload(p->cpu, v.cpu, h, n * sizeof(float));
    dtrain_k_upload(p->gpu, v.gpu, h, n * sizeof(float));
    free(h);
    struct dtrain_adamw_args a = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                  .step = 3, .grad_scale = 0.5f};
    dtrain_k_adamw_update(p->cpu, params.cpu, grads.cpu, m.cpu, v.cpu, n, &a);
    dtrain_k_adamw_update(p->gpu, params.gpu, grads.gpu, m.gpu, v.gpu, n, &a);
    CHECK_ERR(mirror_error(p, &params), tol->exact, tol, "adamw params (n=%zu)", n);
    CHECK_ERR(mirror_error(p, &m), tol->exact, tol, "adamw m");
    CHECK_ERR(mirror_error(p, &v), tol->exact, tol, "adamw v");

    double s_cpu = dtrain_k_sumsq(p->cpu, x.cpu, n), s_gpu = dtrain_k_sumsq(p->gpu, x.gpu, n);
    double s_again = dtrain_k_sumsq(p->gpu, x.gpu, n);
    double e = fabs(s_gpu - s_cpu) / s_cpu;
    ok(e <= 1e-9, "[%s] sumsq (double): %.9g vs CPU %.9g, relative error %.1e", tol->name, s_gpu, s_cpu, e);
    ok(s_again == s_gpu, "[%s] sumsq gives the same bits twice", tol->name);
    mirror_free(p, &params); mirror_free(p, &grads); mirror_free(p, &m); mirror_free(p, &v);
    mirror_free(p, &x);
}

/* ------------------------------------------------------------------ typed operands */

/* The threshold of a typed result of type t whose inputs both sides share. */
static double typed_tol(const struct tolerances *tol, enum dtrain_dtype t)
{
    return t == DTRAIN_BF16 ? tol->typed_bf16 : tol->typed_f32;
}

/* A GPU copy of n bytes (for repeat runs of a typed result). */
static void *gpu_clone_bytes(struct gpu_pair *p, const void *src, size_t bytes)
{
    void *d = dtrain_k_alloc(p->gpu, bytes);
    if (d == NULL) {
        printf("Bail out! out of device memory\n");
        exit(1);
    }
    dtrain_k_copy(p->gpu, d, src, bytes);
    return d;
}

static int gpu_same_bytes(struct gpu_pair *p, const void *a, const void *b, size_t bytes)
{
    unsigned char *x = malloc(bytes), *y = malloc(bytes);
    if (x == NULL || y == NULL) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    dtrain_k_download(p->gpu, x, a, bytes);
    dtrain_k_download(p->gpu, y, b, bytes);
    int same = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}

/* A matmul typed as the model's: out and dout of type to, inp and dinp of
 * type ti (qkv and fc: bf16 <- fp32; the projections: fp32 <- bf16). */
static void test_matmul_typed(struct gpu_pair *p, const struct tolerances *tol, int N, int IC, int OC,
                              enum dtrain_dtype to, enum dtrain_dtype ti, int with_bias)
{
    const char *nto = dtrain_dtype_name(to), *nti = dtrain_dtype_name(ti);
    struct tmirror inp = tmirror_random(p, ti, (size_t)N * IC, 1.0f), out = tmirror_poisoned(p, to, (size_t)N * OC);
    struct mirror w = mirror_random(p, (size_t)OC * IC, 1.0f), bias = mirror_random(p, (size_t)OC, 1.0f);
    dtrain_k_matmul_forward(p->cpu, tmirror_cpu(&out), tmirror_cpu(&inp), w.cpu, with_bias ? bias.cpu : NULL, N, IC,
                            OC);
    dtrain_k_matmul_forward(p->gpu, tmirror_gpu(&out), tmirror_gpu(&inp), w.gpu, with_bias ? bias.gpu : NULL, N, IC,
                            OC);
    CHECK_ERR(tmirror_error(p, &out), typed_tol(tol, to), tol, "typed matmul forward out %s <- inp %s, N=%d IC=%d OC=%d%s",
              nto, nti, N, IC, OC, with_bias ? " + bias" : "");

    struct tmirror dout = tmirror_random(p, to, (size_t)N * OC, 1.0f), dinp = tmirror_poisoned(p, ti, (size_t)N * IC);
    struct mirror dw = mirror_random(p, (size_t)OC * IC, 0.5f), db = mirror_random(p, (size_t)OC, 0.5f);
    float *dw0 = gpu_clone(p, dw.gpu, dw.n), *db0 = gpu_clone(p, db.gpu, db.n);
    dtrain_k_matmul_backward(p->cpu, tmirror_cpu(&dinp), dw.cpu, with_bias ? db.cpu : NULL, tmirror_cpu(&dout),
                             tmirror_cpu(&inp), w.cpu, N, IC, OC);
    dtrain_k_matmul_backward(p->gpu, tmirror_gpu(&dinp), dw.gpu, with_bias ? db.gpu : NULL, tmirror_gpu(&dout),
                             tmirror_gpu(&inp), w.gpu, N, IC, OC);
    CHECK_ERR(tmirror_error(p, &dinp), typed_tol(tol, ti), tol, "typed matmul backward dinp %s (=) <- dout %s", nti, nto);
    CHECK_ERR(mirror_error(p, &dw), tol->typed_f32, tol, "typed matmul backward dweight (+=) <- dout %s, inp %s", nto,
              nti);
    CHECK_ERR(mirror_error(p, &db), with_bias ? tol->sums : 0.0, tol, "typed matmul backward dbias %s, dout %s",
              with_bias ? "(+=)" : "untouched when NULL", nto);
    dtrain_k_matmul_backward(p->gpu, dtrain_tensor_of(ti, NULL), dw0, with_bias ? db0 : NULL, tmirror_gpu(&dout),
                             tmirror_gpu(&inp), w.gpu, N, IC, OC);
    ok(gpu_same_bits(p, dw0, dw.gpu, dw.n) && gpu_same_bits(p, db0, db.gpu, db.n),
       "[%s] typed matmul backward (dout %s) gives the same bits twice", tol->name, nto);
    dtrain_k_free(p->gpu, dw0); dtrain_k_free(p->gpu, db0);
    tmirror_free(p, &inp); tmirror_free(p, &out); tmirror_free(p, &dout); tmirror_free(p, &dinp);
    mirror_free(p, &w); mirror_free(p, &bias); mirror_free(p, &dw); mirror_free(p, &db);
}

/* Attention on bf16 qkv, out, dout, dqkv (the model's in bf16 precision). */
static void test_attention_typed(struct gpu_pair *p, const struct tolerances *tol, int B, int T, int NH, int KVH,
                                 int HS)
{
    const enum dtrain_dtype bf = DTRAIN_BF16;
    size_t C = (size_t)NH * HS, N = (size_t)B * T, CQ = (size_t)(NH + 2 * KVH) * HS;
    int flash = flash_path(dtrain_kernels_precision(p->gpu), HS);
    size_t na_cpu = dtrain_k_attention_saved(p->cpu, B, T, NH, KVH, HS), na_gpu = dtrain_k_attention_saved(p->gpu, B, T, NH, KVH, HS);
    size_t want = (size_t)B * NH * T * (flash ? 1 : (size_t)T);
    ok(na_gpu == want, "[%s] attention_saved (B=%d T=%d NH=%d HS=%d, %s): %zu floats, want %zu", tol->name, B, T, NH,
       HS, flash ? "flash: the log-sum-exps" : "exact: the probabilities", na_gpu, want);
    struct tmirror qkv = tmirror_random(p, bf, N * CQ, 2.0f), out = tmirror_poisoned(p, bf, N * C);
    struct mirror att = mirror_poisoned(p, na_cpu > na_gpu ? na_cpu : na_gpu);
    dtrain_k_attention_forward(p->cpu, tmirror_cpu(&out), att.cpu, tmirror_cpu(&qkv), B, T, NH, KVH, HS);
    dtrain_k_attention_forward(p->gpu, tmirror_gpu(&out), att.gpu, tmirror_gpu(&qkv), B, T, NH, KVH, HS);
    CHECK_ERR(tmirror_error(p, &out), flash ? tol->attn_fwd : tol->typed_bf16, tol,
              "typed attention forward out bf16 <- qkv bf16 (B=%d T=%d NH=%d KVH=%d HS=%d, %s)", B, T, NH,
              KVH, HS,
              flash ? "flash" : "exact");
    if (!flash)
        CHECK_ERR(mirror_error(p, &att), tol->typed_f32, tol, "typed attention forward att (fp32 probabilities)");

    struct tmirror dout = tmirror_random(p, bf, N * C, 1.0f), dqkv = tmirror_poisoned(p, bf, N * CQ);
    float *s_cpu = attention_scratch(p->cpu, B, T, NH, KVH, HS), *s_gpu = attention_scratch(p->gpu, B, T, NH, KVH, HS);
    dtrain_k_attention_backward(p->cpu, tmirror_cpu(&dqkv), s_cpu, tmirror_cpu(&dout), tmirror_cpu(&qkv),
                                tmirror_cpu(&out), att.cpu, B, T, NH, KVH, HS);
    dtrain_k_attention_backward(p->gpu, tmirror_gpu(&dqkv), s_gpu, tmirror_gpu(&dout), tmirror_gpu(&qkv),
                                tmirror_gpu(&out), att.gpu, B, T, NH, KVH, HS);
    CHECK_ERR(tmirror_error(p, &dqkv), flash ? tol->attn_bwd : tol->typed_bf16, tol,
              "typed attention backward dqkv bf16 (=) (B=%d T=%d NH=%d KVH=%d HS=%d, %s)", B, T, NH,
              KVH, HS,
              flash ? "flash" : "exact");
    size_t bytes = dqkv.n * 2;
    void *again = gpu_clone_bytes(p, dqkv.gpu, bytes);
    dtrain_k_attention_backward(p->gpu, dtrain_tensor_of(bf, again), s_gpu, tmirror_gpu(&dout), tmirror_gpu(&qkv),
                                tmirror_gpu(&out), att.gpu, B, T, NH, KVH, HS);
    ok(gpu_same_bytes(p, again, dqkv.gpu, bytes), "[%s] typed attention backward gives the same bits twice",
       tol->name);
    dtrain_k_free(p->gpu, again);
    dtrain_k_free(p->cpu, s_cpu);
    dtrain_k_free(p->gpu, s_gpu);
    tmirror_free(p, &qkv); tmirror_free(p, &out); tmirror_free(p, &dout); tmirror_free(p, &dqkv);
    mirror_free(p, &att);
}

/* What att holds at GPT-2 124M's shape (B=8 T=1024 NH=12 HS=64): the flash
 * path's log-sum-exps, B*NH*T floats, not the B*NH*T*T probabilities. */
static void test_attention_saved(struct gpu_pair *p, const struct tolerances *tol)
{
    int B = 8, T = 1024, NH = 12, HS = 64;
    size_t got = dtrain_k_attention_saved(p->gpu, B, T, NH, NH, HS);
    size_t want = (size_t)B * NH * T * (flash_path(dtrain_kernels_precision(p->gpu), HS) ? 1 : (size_t)T);
    ok(got == want, "[%s] attention_saved at B=%d T=%d NH=%d HS=%d: %zu floats (want %zu)", tol->name, B, T, NH, HS,
       got, want);
}

/* GELU on bf16 operands, forward and backward, and backward in place
 * (dinp = dout, as the model calls it). */
static void test_gelu_typed(struct gpu_pair *p, const struct tolerances *tol)
{
    const enum dtrain_dtype bf = DTRAIN_BF16;
    size_t n = ((size_t)1 << 20) + 3;
    struct tmirror x = tmirror_random(p, bf, n, 4.0f), y = tmirror_random(p, bf, n, 1.0f);
    struct tmirror out = tmirror_poisoned(p, bf, n), dinp = tmirror_poisoned(p, bf, n);
    dtrain_k_gelu_forward(p->cpu, tmirror_cpu(&out), tmirror_cpu(&x), n);
    dtrain_k_gelu_forward(p->gpu, tmirror_gpu(&out), tmirror_gpu(&x), n);
    CHECK_ERR(tmirror_error(p, &out), tol->typed_bf16, tol, "typed gelu forward bf16 (n=%zu)", n);
    dtrain_k_gelu_backward(p->cpu, tmirror_cpu(&dinp), tmirror_cpu(&x), tmirror_cpu(&y), n);
    dtrain_k_gelu_backward(p->gpu, tmirror_gpu(&dinp), tmirror_gpu(&x), tmirror_gpu(&y), n);
    CHECK_ERR(tmirror_error(p, &dinp), tol->typed_bf16, tol, "typed gelu backward bf16 (n=%zu)", n);
    dtrain_k_gelu_backward(p->cpu, tmirror_cpu(&y), tmirror_cpu(&x), tmirror_cpu(&y), n);
    dtrain_k_gelu_backward(p->gpu, tmirror_gpu(&y), tmirror_gpu(&x), tmirror_gpu(&y), n);
    CHECK_ERR(tmirror_error(p, &y), tol->typed_bf16, tol, "typed gelu backward bf16 in place (dinp = dout)");
    tmirror_free(p, &x); tmirror_free(p, &y); tmirror_free(p, &out); tmirror_free(p, &dinp);
}

/* The typed operations against the cpu in the same precision. */
static void run_typed(uint64_t seed, enum dtrain_kernels_precision prec, const struct tolerances *tol)
{
    const enum dtrain_dtype f32 = DTRAIN_F32, bf = DTRAIN_BF16;
    struct gpu_pair p = {.seed = seed + 16 + (uint64_t)prec};
    gpu_pair_open_matched(&p, prec);
    test_matmul_typed(&p, tol, 512, 768, 2304, bf, f32, 1);  /* QKV: bf16 out of the fp32 layer norm */
    test_matmul_typed(&p, tol, 512, 768, 768, f32, bf, 1);   /* attention projection: fp32 out of bf16 */
    test_matmul_typed(&p, tol, 512, 3072, 768, f32, bf, 1);  /* MLP projection */
    test_matmul_typed(&p, tol, 37, 50, 33, bf, bf, 1);       /* odd sizes, both bf16 */
    test_matmul_typed(&p, tol, 64, 128, 1000, bf, f32, 0);   /* no bias */
    test_attention_typed(&p, tol, 2, 256, 4, 4, 64);
    test_attention_typed(&p, tol, 2, 100, 3, 3, 32);            /* a partial last tile */
    test_attention_typed(&p, tol, 2, 48, 2, 2, 64);             /* T <= HS */
    test_attention_typed(&p, tol, 1, 40, 2, 2, 24);             /* exact in every precision */
    test_attention_saved(&p, tol);
    test_gelu_typed(&p, tol);
    test_attention_typed(&p, tol, 2, 100, 4, 2, 32);         /* grouped-query (flash in bf16) */
    test_attention_typed(&p, tol, 1, 40, 4, 1, 24);          /* grouped-query, exact */
    test_llama_typed(&p, tol, 2, 70, 4, 2, 64, 100, 200);
    ok(gpu_error(&p) == 0, "[%s] no CUDA error recorded (typed operands)", tol->name);
    gpu_pair_close(&p);
}

static void run_precision(uint64_t seed, enum dtrain_kernels_precision prec, const struct tolerances *tol)
{
    struct gpu_pair p = {.seed = seed + (uint64_t)prec};
    gpu_pair_open(&p, prec);
    ok(dtrain_kernels_precision(p.gpu) == prec, "[%s] the cuda instance computes in %s", tol->name,
       dtrain_kernels_precision_name(dtrain_kernels_precision(p.gpu)));
    test_encoder(&p, tol);
    test_layernorm(&p, tol, 512, 768);
    test_layernorm(&p, tol, 37, 100);
    test_matmul(&p, tol, 512, 768, 2304, 1, 1);  /* QKV of GPT-2 small */
    test_matmul(&p, tol, 512, 3072, 768, 1, 1);  /* MLP projection */
    test_matmul(&p, tol, 37, 50, 33, 1, 0);      /* odd sizes, unaligned rows; no dinp */
    test_matmul(&p, tol, 64, 128, 1000, 0, 1);   /* no bias (LM head) */
    test_nf4(&p, tol, 64, 320, 200, DTRAIN_F32, 1);  /* the NF4 base linear */
    test_nf4(&p, tol, 37, 50, 33, DTRAIN_BF16, 0);   /* odd sizes (a short last block), bf16 operands */
    if (prec == DTRAIN_PRECISION_FP32)
        test_nf4_exact(&p, 100, 70);
    test_attention(&p, tol, 2, 256, 4, 4, 64);      /* flash in bf16, 4 full tiles */
    test_attention(&p, tol, 2, 100, 3, 3, 32);      /* a partial last tile */
    test_attention(&p, tol, 1, 192, 2, 2, 128);
    test_attention(&p, tol, 2, 80, 2, 2, 16);
    test_attention(&p, tol, 1, 40, 2, 2, 24);       /* head size the flash kernels do not take */
    test_attention(&p, tol, 2, 48, 2, 2, 64);       /* T <= HS, one partial tile: flash in bf16 too */
    test_attention(&p, tol, 2, 100, 4, 2, 32);   /* grouped-query: flash in bf16 */
    test_attention(&p, tol, 2, 48, 8, 1, 64);    /* one kv head */
    test_attention(&p, tol, 1, 40, 4, 2, 24);    /* grouped-query, exact in every precision */
    test_llama(&p, tol, 512, 768, 128, 8, 2, 64, 1000);
    test_llama(&p, tol, 37, 100, 37, 2, 1, 16, 33);
    test_elementwise(&p, tol);
    test_xent(&p, tol, 64, 50257, 50304);        /* GPT-2's vocabulary */
    test_xent(&p, tol, 33, 1000, 1000);
    test_xent_vocab_parallel(&p, tol, 48, 1000, 3);
    test_adamw(&p, tol);
    ok(gpu_error(&p) == 0, "[%s] no CUDA error recorded", tol->name);
    gpu_pair_close(&p);
}

int main(void)
{
    char why[256];
    if (!gpu_available(why, sizeof why)) {
        return gpu_skip_all(why);
    }
    uint64_t seed = gpu_test_seed();
    run_precision(seed, DTRAIN_PRECISION_FP32, &TOL_FP32);
    run_precision(seed, DTRAIN_PRECISION_BF16, &TOL_BF16);
    run_precision(seed, DTRAIN_PRECISION_FP16, &TOL_FP16);
    run_typed(seed, DTRAIN_PRECISION_FP32, &TOL_FP32);
    run_typed(seed, DTRAIN_PRECISION_BF16, &TOL_BF16);
    run_typed(seed, DTRAIN_PRECISION_FP16, &TOL_FP16);
    return tap_done();
}

#else

int main(void)
{
    printf("1..0 # SKIP dtrain was configured without CUDA\n");
    return 0;
}

#endif
