/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-gpu: tokens/s and MFU of GPT-2 124M training steps on one
 * GPU (the cuda kernels through the runtime's model and optimizer), against
 * the bf16 cuBLASLt GEMM rate measured in the same run; then each kernel at
 * those shapes, timed alone, so that a slow one stands out.
 *
 *   dtrain-bench-gpu [--batch B] [--steps N] [--warmup N] [--gemm-n N]
 *                    [--precision bf16|fp32] [--no-kernels]
 *
 * Shape: L=12, C=768, NH=12, V=50257 padded to 50304, T=1024 (GPT-2 small),
 * B=16 by default.  A step is forward (with the loss), backward, the global
 * gradient norm and the AdamW update, as dtrain-train runs it; its FLOPs
 * are dtrain_model_flops_per_step() (matmuls and attention's full T x T,
 * 3x forward).  MFU here = achieved FLOP/s / the rate of an n x n x n bf16
 * GEMM (n = 8192), the best of its measurements before, halfway through
 * and after the steps (the limit: over 100% it was measured low, and the
 * verdict says INVALID: bench_verdict).  Target: TARGET_MFU (50%) on an
 * H100/H200-class GPU.  In bf16 precision the model
 * stores the blocks' inner activations (qkv, attention output, fc, GELU
 * output, their gradients) as bf16 typed tensors, which the cuda kernels
 * read and write as they are (no conversion passes), and att holds only
 * the flash attention's log-sum-exps (dtrain_k_attention_saved); the
 * kernel timings below use the same types.  Prints "no CUDA device" and
 * exits 77 (the automake code for "skipped") without a GPU. */
#include "bench_util.h"
#include "dtrain_cuda.h"
#include "dtrain_gpt2.h"
#include "dtrain_kernels.h"
#include "dtrain_optim.h"
#include "dtrain_parse.h"
#include "dtrain_rng.h"
#include "dtrain_clock.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "dtrain-bench-gpu"
#define TARGET_MFU 0.50
#define EXIT_SKIP 77

struct options {
    int batch, steps, warmup, gemm_n, kernels;
    enum dtrain_kernels_precision precision;
};

static int parse_options(int argc, char **argv, struct options *o)
{
    char err[256];
    for (int i = 1; i < argc; i++) {
        long v;
        int *dst = NULL;
        long min = 1, max = 100000;
        if (strcmp(argv[i], "--no-kernels") == 0) {
            o->kernels = 0;
            continue;
        }
        if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "bf16") == 0)
                o->precision = DTRAIN_PRECISION_BF16;
            else if (strcmp(argv[i], "fp32") == 0)
                o->precision = DTRAIN_PRECISION_FP32;
            else {
                fprintf(stderr, PROG ": --precision '%s': use bf16 or fp32\n", argv[i]);
                return -1;
            }
            continue;
        }
        if (strcmp(argv[i], "--batch") == 0) { dst = &o->batch; max = 1024; }
        else if (strcmp(argv[i], "--steps") == 0) dst = &o->steps;
        else if (strcmp(argv[i], "--warmup") == 0) { dst = &o->warmup; min = 0; }
        else if (strcmp(argv[i], "--gemm-n") == 0) { dst = &o->gemm_n; min = 256; max = 32768; }
        if (dst == NULL || i + 1 >= argc) {
            fprintf(stderr, PROG ": usage: " PROG " [--batch B] [--steps N] [--warmup N] [--gemm-n N] "
                    "[--precision bf16|fp32] [--no-kernels]\n");
            return -1;
        }
        const char *flag = argv[i++];
        if (dtrain_parse_int(argv[i], min, max, flag, &v, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            return -1;
        }
        *dst = (int)v;
    }
    return 0;
}

/* ------------------------------------------------------------------ kernels alone */

/* Device buffers for timing kernels at the model's shapes. */
struct arena {
    struct dtrain_kernels *k;
    float *buf[8];
    int32_t *tokens;
};

/* n floats of uniform [-1, 1) numbers, tiled from one host block */
static float *random_device(struct dtrain_kernels *k, size_t n)
{
    const size_t block = (size_t)1 << 20;
    float *d = dtrain_k_alloc(k, n * sizeof(float)), *h = malloc(block * sizeof(float));
    if (d == NULL || h == NULL) {
        dtrain_k_free(k, d);
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < block; i++)
        h[i] = (float)(2.0 * dtrain_rng_uniform(42, 1, i) - 1.0);
    for (size_t off = 0; off < n; off += block)
        dtrain_k_upload(k, d + off, h, (n - off < block ? n - off : block) * sizeof(float));
    free(h);
    return d;
}

struct timer {
    cudaStream_t stream;
    cudaEvent_t start, stop;
    int failed; /* an event call failed */
};

static void event_ok(struct timer *t, cudaError_t e)
{
    if (e != cudaSuccess && !t->failed) {
        fprintf(stderr, PROG ": CUDA events: %s\n", cudaGetErrorString(e));
        t->failed = 1;
    }
}

/* ms of one call of the statement, the median of `reps` (<= 32) after one
 * warm-up, timed with events on the kernels' stream */
#define TIME_MS(t, reps, result, ...)                                                         \
    do {                                                                                      \
        double ms_[32];                                                                       \
        for (int r_ = -1; r_ < (reps); r_++) {                                                \
            float m_ = 0.0f;                                                                  \
            event_ok((t), cudaEventRecord((t)->start, (t)->stream));                          \
            __VA_ARGS__;                                                                      \
            event_ok((t), cudaEventRecord((t)->stop, (t)->stream));                           \
            event_ok((t), cudaEventSynchronize((t)->stop));                                   \
            event_ok((t), cudaEventElapsedTime(&m_, (t)->start, (t)->stop));                  \
            if (r_ >= 0)                                                                      \
                ms_[r_] = m_;                                                                 \
        }                                                                                     \
        (result) = bench_median(ms_, (reps));                                                       \
    } while (0)

struct row {
    const char *name;
    double per_step; /* calls per training step */
    double ms;
    double flop;     /* per call, 0 for memory-bound kernels */
    double bytes;    /* per call, least traffic */
};

static void print_row(const struct row *r)
{
    if (r->flop > 0)
        printf("  %-30s %8.3f ms x %5.0f = %8.2f ms  %7.1f TFLOP/s\n", r->name, r->ms, r->per_step,
               r->ms * r->per_step, r->flop / (r->ms * 1e-3) * 1e-12);
    else
        printf("  %-30s %8.3f ms x %5.0f = %8.2f ms  %7.0f GB/s\n", r->name, r->ms, r->per_step,
               r->ms * r->per_step, r->bytes / (r->ms * 1e-3) * 1e-9);
}

static int time_kernels(struct dtrain_kernels *k, const struct dtrain_model_config *cfg, int B, int T)
{
    const int reps = 5;
    size_t C = (size_t)cfg->channels, N = (size_t)B * T, L = (size_t)cfg->num_layers;
    int NH = cfg->num_heads, HS = cfg->channels / NH, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t P = dtrain_model_param_count(cfg);
    struct timer t = {.stream = (cudaStream_t)dtrain_cuda_stream(k)};
    float *x = random_device(k, N * 4 * C), *y = random_device(k, N * 4 * C), *z = random_device(k, N * 4 * C);
    float *w = random_device(k, 4 * C * C), *dw = random_device(k, 4 * C * C), *bias = random_device(k, 4 * C);
    float *wte = random_device(k, (size_t)Vp * C), *dwte = random_device(k, (size_t)Vp * C);
    float *logits = random_device(k, N * (size_t)Vp), *stats = random_device(k, 2 * N);
    float *att = dtrain_k_alloc(k, dtrain_k_attention_saved(k, B, T, NH, NH, HS) * sizeof(float));
    size_t ns = dtrain_k_attention_scratch(k, B, T, NH, NH, HS);
    float *scratch = dtrain_k_alloc(k, ns * sizeof(float));
    float *params = random_device(k, P), *grads = random_device(k, P);
    float *m = dtrain_k_alloc(k, P * sizeof(float)), *v = dtrain_k_alloc(k, P * sizeof(float));
    int32_t *tokens = dtrain_k_alloc(k, N * sizeof(int32_t));
    int rc = -1;
    if (!x || !y || !z || !w || !dw || !bias || !wte || !dwte || !logits || !stats || !att || !scratch ||
        !params || !grads || !m || !v || !tokens || cudaEventCreate(&t.start) != cudaSuccess ||
        cudaEventCreate(&t.stop) != cudaSuccess) {
        fprintf(stderr, PROG ": out of device memory for the kernel timings (skipped)\n");
        goto out;
    }
    int32_t *ht = malloc(N * sizeof(int32_t));
    if (ht == NULL) {
        fprintf(stderr, PROG ": out of host memory for the kernel timings\n");
        goto out;
    }
    for (size_t i = 0; i < N; i++)
        ht[i] = (int32_t)(dtrain_rng_bits(3, 1, i) % (uint64_t)V);
    dtrain_k_upload(k, tokens, ht, N * sizeof(int32_t));
    free(ht);

    struct dtrain_adamw_args aa = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .step = 1,
                                   .grad_scale = 1.0f};
    double Nd = (double)N, Cd = (double)C, f4 = 4.0;
    struct row rows[] = {
        {"matmul fwd qkv      C->3C", (double)L, 0, 2 * Nd * Cd * 3 * Cd, 0},
        {"matmul bwd qkv", (double)L, 0, 4 * Nd * Cd * 3 * Cd, 0},
        {"matmul fwd attproj  C->C", (double)L, 0, 2 * Nd * Cd * Cd, 0},
        {"matmul bwd attproj", (double)L, 0, 4 * Nd * Cd * Cd, 0},
        {"matmul fwd fc       C->4C", (double)L, 0, 2 * Nd * Cd * f4 * Cd, 0},
        {"matmul bwd fc", (double)L, 0, 4 * Nd * Cd * f4 * Cd, 0},
        {"matmul fwd fcproj   4C->C", (double)L, 0, 2 * Nd * Cd * f4 * Cd, 0},
        {"matmul bwd fcproj", (double)L, 0, 4 * Nd * Cd * f4 * Cd, 0},
        {"matmul fwd lm head  C->Vp", 1, 0, 2 * Nd * Cd * Vp, 0},
        {"matmul bwd lm head", 1, 0, 4 * Nd * Cd * Vp, 0},
        {"attention fwd", (double)L, 0, 4.0 * B * (double)T * T * Cd, 0},
        {"attention bwd", (double)L, 0, 8.0 * B * (double)T * T * Cd, 0},
        {"layernorm fwd", 2 * (double)L + 1, 0, 0, 8 * Nd * Cd},
        {"layernorm bwd", 2 * (double)L + 1, 0, 0, 16 * Nd * Cd},
        {"gelu fwd", (double)L, 0, 0, 8 * Nd * f4 * Cd},
        {"gelu bwd", (double)L, 0, 0, 12 * Nd * f4 * Cd},
        {"residual", 2 * (double)L, 0, 0, 12 * Nd * Cd},
        {"cross-entropy fwd", 1, 0, 0, 8 * Nd * Vp},
        {"cross-entropy bwd", 1, 0, 0, 8 * Nd * Vp},
        {"encoder fwd", 1, 0, 0, 8 * Nd * Cd},
        {"encoder bwd", 1, 0, 0, 12 * Nd * Cd},
        {"adamw", 1, 0, 0, 28.0 * (double)P},
        {"sumsq (grad norm)", 1, 0, 0, 4.0 * (double)P},
    };
    int i = 0;
    /* each operand of the type the block gives it (dtrain_block.c): the
     * inner activations (qkv, atty, fch, fch_gelu, their gradients) of the
     * kernels' activation type, the LN outputs and residual-stream sums fp32 */
    enum dtrain_dtype act = dtrain_kernels_act_dtype(k);
#define ACT(p) dtrain_tensor_of(act, (p))
#define F32(p) dtrain_tensor_f32(p)
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_forward(k, ACT(y), F32(x), w, bias, (int)N, (int)C, 3 * (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_backward(k, F32(z), dw, bias, ACT(y), F32(x), w, (int)N, (int)C, 3 * (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_forward(k, F32(y), ACT(x), w, bias, (int)N, (int)C, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_backward(k, ACT(z), dw, bias, F32(y), ACT(x), w, (int)N, (int)C, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_forward(k, ACT(y), F32(x), w, bias, (int)N, (int)C, 4 * (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_backward(k, F32(z), dw, bias, ACT(y), F32(x), w, (int)N, (int)C, 4 * (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_forward(k, F32(y), ACT(x), w, bias, (int)N, 4 * (int)C, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_backward(k, ACT(z), dw, bias, F32(y), ACT(x), w, (int)N, 4 * (int)C, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_forward(k, F32(logits), F32(x), wte, NULL, (int)N, (int)C, Vp)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_matmul_backward(k, F32(z), dwte, NULL, F32(logits), F32(x), wte, (int)N, (int)C, Vp)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_attention_forward(k, ACT(y), att, ACT(x), B, T, NH, NH, HS)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_attention_backward(k, ACT(z), scratch, ACT(y), ACT(x), ACT(y), att, B, T, NH, NH, HS)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_layernorm_forward(k, y, stats, stats + N, x, w, bias, (int)N, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_layernorm_backward(k, z, dw, bias, y, x, w, stats, stats + N, (int)N, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_gelu_forward(k, ACT(y), ACT(x), N * 4 * C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_gelu_backward(k, ACT(z), ACT(x), ACT(y), N * 4 * C)); i++;
#undef ACT
#undef F32
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_residual_forward(k, y, x, z, N * C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_softmax_xent_forward(k, logits, stats, tokens, (int)N, V, Vp)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_softmax_xent_backward(k, logits, tokens, 1.0f / (float)N, (int)N, V, Vp)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_encoder_forward(k, y, tokens, wte, w, B, T, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_encoder_backward(k, dwte, dw, x, tokens, B, T, (int)C)); i++;
    TIME_MS(&t, reps, rows[i].ms, dtrain_k_adamw_update(k, params, grads, m, v, P, &aa)); i++;
    TIME_MS(&t, reps, rows[i].ms, (void)dtrain_k_sumsq(k, grads, P)); i++;

    char err[256];
    if (t.failed)
        goto out;
    if (dtrain_kernels_error(k, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": kernel timings: %s\n", err);
        goto out;
    }
    double total = 0.0, mm = 0.0;
    printf("each kernel alone (median of %d, CUDA events), calls per step, and its share:\n", reps);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        print_row(&rows[r]);
        total += rows[r].ms * rows[r].per_step;
        if (r < 10)
            mm += rows[r].ms * rows[r].per_step;
    }
    printf("  %-30s %29.2f ms  (matmuls %.2f ms, the rest %.2f ms)\n", "sum over one step", total, mm, total - mm);
    rc = 0;
out:
    if (t.start != NULL)
        cudaEventDestroy(t.start);
    if (t.stop != NULL)
        cudaEventDestroy(t.stop);
    float *all[] = {x, y, z, w, dw, bias, wte, dwte, logits, stats, att, scratch, params, grads, m, v};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
        dtrain_k_free(k, all[j]);
    dtrain_k_free(k, tokens);
    return rc;
}

/* ------------------------------------------------------------------ training steps */

int main(int argc, char **argv)
{
    struct options o = {.batch = 16, .steps = 10, .warmup = 3, .gemm_n = 8192, .kernels = 1,
                        .precision = DTRAIN_PRECISION_BF16};
    struct dtrain_model_config cfg = {.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304,
                                     .num_layers = 12, .num_heads = 12, .channels = 768};
    const int T = 1024;
    struct dtrain_kernels *k = NULL;
    struct dtrain_gpt2 *model = NULL;
    struct dtrain_adamw *opt = NULL;
    float *host = NULL;
    int32_t *inputs = NULL, *targets = NULL;
    double *step_ms = NULL, *fwd_ms = NULL, *bwd_ms = NULL, *upd_ms = NULL;
    char err[512], device[160];
    int rc = 1;

    if (parse_options(argc, argv, &o) != 0)
        return 2;
    int B = o.batch;
    if (dtrain_cuda_device_count(err, sizeof err) == 0) {
        printf(PROG ": %s: nothing to measure\n", err);
        return EXIT_SKIP;
    }
    struct dtrain_kernels_options kopt = {.threads = 1, .precision = o.precision};
    if (dtrain_kernels_create("cuda", &kopt, &k, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    dtrain_cuda_device_name(k, device, sizeof device);
    double gemm_before, gemm_between = 0.0, gemm_after;
    if (dtrain_cuda_gemm_bf16_tflops(k, o.gemm_n, 10, &gemm_before, err, sizeof err) != 0)
        goto fail;
    if (dtrain_gpt2_create(k, &cfg, B, T, &model, err, sizeof err) != DTRAIN_OK ||
        dtrain_adamw_create(k, dtrain_gpt2_num_params(model), &opt, err, sizeof err) != DTRAIN_OK)
        goto fail;
    size_t n = dtrain_gpt2_num_params(model);
    host = malloc(n * sizeof(float));
    inputs = malloc((size_t)B * T * sizeof(int32_t));
    targets = malloc((size_t)B * T * sizeof(int32_t));
    step_ms = calloc((size_t)o.steps, sizeof(double));
    fwd_ms = calloc((size_t)o.steps, sizeof(double));
    bwd_ms = calloc((size_t)o.steps, sizeof(double));
    upd_ms = calloc((size_t)o.steps, sizeof(double));
    if (!host || !inputs || !targets || !step_ms || !fwd_ms || !bwd_ms || !upd_ms) {
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    dtrain_model_init_params(&cfg, 1337, host);
    dtrain_gpt2_set_params(model, host);
    struct dtrain_optim_config oc = {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                     .grad_clip = 1.0, .schedule = DTRAIN_LR_CONSTANT, .total_steps = o.steps};
    float loss = NAN;
    for (int s = -o.warmup; s < o.steps; s++) {
        uint64_t step = (uint64_t)(s + o.warmup);
        if (s == o.steps / 2 && dtrain_cuda_gemm_bf16_tflops(k, o.gemm_n, 10, &gemm_between, err, sizeof err) != 0)
            goto fail;
        for (int i = 0; i < B * T; i++) {
            inputs[i] = (int32_t)(dtrain_rng_bits(7, step, (uint64_t)i) % (uint64_t)cfg.vocab_size);
            targets[i] = (int32_t)(dtrain_rng_bits(8, step, (uint64_t)i) % (uint64_t)cfg.vocab_size);
        }
        double t0 = dtrain_clock_s();
        if (dtrain_gpt2_forward(model, inputs, targets, B, T, &loss, err, sizeof err) != DTRAIN_OK)
            goto fail;
        double t1 = dtrain_clock_s();
        dtrain_gpt2_zero_grad(model);
        if (dtrain_gpt2_backward(model, err, sizeof err) != DTRAIN_OK)
            goto fail;
        dtrain_k_sync(k);
        double t2 = dtrain_clock_s();
        double norm = sqrt(dtrain_k_sumsq(k, dtrain_gpt2_grads(model), n));
        dtrain_adamw_update(opt, dtrain_gpt2_params(model), dtrain_gpt2_grads(model), &oc, (long)step, oc.lr,
                            dtrain_clip_scale(&oc, norm));
        dtrain_k_sync(k);
        double t3 = dtrain_clock_s();
        if (dtrain_kernels_error(k, err, sizeof err) != 0)
            goto fail;
        if (s >= 0) {
            fwd_ms[s] = 1e3 * (t1 - t0);
            bwd_ms[s] = 1e3 * (t2 - t1);
            upd_ms[s] = 1e3 * (t3 - t2);
            step_ms[s] = 1e3 * (t3 - t0);
        }
    }
    if (dtrain_cuda_gemm_bf16_tflops(k, o.gemm_n, 10, &gemm_after, err, sizeof err) != 0)
        goto fail;
    double flops = dtrain_model_flops_per_step(&cfg, B, T);
    double best = step_ms[0];
    for (int s = 1; s < o.steps; s++)
        best = step_ms[s] < best ? step_ms[s] : best;
    double rates[3] = {gemm_before, gemm_between, gemm_after};
    double ms = bench_median(step_ms, o.steps), gemm = bench_best(rates, 3);
    double tflops = flops / (ms * 1e-3) * 1e-12, mfu = tflops / gemm;
    printf(PROG ": %s\n", device);
    printf(PROG ": GPT-2 L=%d C=%d NH=%d V=%d (Vp %d) T=%d B=%d, %zu parameters, %s, %d steps after %d warm-up\n",
           cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size, T, B, n,
           dtrain_kernels_precision_name(o.precision), o.steps, o.warmup);
    printf("loss                 %9.4f  (random tokens: about ln(V) = %.2f)\n", loss, log((double)cfg.vocab_size));
    printf("step (median)        %9.2f ms  (best %.2f ms; forward %.2f, backward %.2f, norm+update %.2f)\n", ms,
           best, bench_median(fwd_ms, o.steps), bench_median(bwd_ms, o.steps), bench_median(upd_ms, o.steps));
    printf("tokens/s             %9.0f\n", B * T / (ms * 1e-3));
    printf("model FLOP per step  %9.3f TFLOP\n", flops * 1e-12);
    printf("achieved             %9.1f TFLOP/s\n", tflops);
    printf("bf16 GEMM %dx%dx%d %6.1f TFLOP/s  (cuBLASLt, the best of before %.1f, between %.1f, after %.1f)\n",
           o.gemm_n, o.gemm_n, o.gemm_n, gemm, gemm_before, gemm_between, gemm_after);
    printf("MFU                  %9.1f %%  of the measured bf16 GEMM rate (target >= %.0f %%: %s)\n", 100.0 * mfu,
           100.0 * TARGET_MFU, bench_verdict(mfu, TARGET_MFU));
    fflush(stdout);
    if (o.kernels) {
        /* the model's memory is not needed any more */
        dtrain_adamw_destroy(opt);
        dtrain_gpt2_destroy(model);
        opt = NULL;
        model = NULL;
        if (time_kernels(k, &cfg, B, T) != 0)
            goto out;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, PROG ": %s\n", err);
out:
    free(host); free(inputs); free(targets);
    free(step_ms); free(fwd_ms); free(bwd_ms); free(upd_ms);
    dtrain_adamw_destroy(opt);
    dtrain_gpt2_destroy(model);
    dtrain_kernels_destroy(k);
    return rc;
}
