/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A GPT-2 training step on one GPU against the same step on the CPU.
 *
 * One small model (L=2, C=128, NH=2 so the head size is 64 and bf16 takes
 * the flash attention kernels, V=1000 padded to 1024, B=4, T=128), the same
 * initial parameters and batches on both backends, through the runtime's
 * model (dtrain_gpt2.h) and optimizer (dtrain_optim.h):
 *   - the first forward's loss,
 *   - every parameter tensor's gradient (largest difference over largest
 *     CPU value, per tensor; the worst tensor is named),
 *   - the parameters after one AdamW update (mean |difference| in units of
 *     the learning rate: an element whose gradient is ~0 may take a step
 *     of +-lr on one side and not the other, so the largest is no measure),
 *   - the losses of 8 further steps on fresh batches.
 * In fp32 and in bf16 precision, each with its thresholds.  Fresh random
 * parameters and batches each run (seed printed).  Skipped without a CUDA
 * device. */
#include "dtrain_gpt2.h"
#include "dtrain_optim.h"
#include "dtrain_rng.h"
#include "gpu_pair.h"
#include "tap.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct thresholds {
    const char *name;
    enum dtrain_kernels_precision precision;
    double loss, grad, update, later_loss;
};

static const struct thresholds THR[] = {
    {"fp32", DTRAIN_PRECISION_FP32, 1e-5, 2e-4, 1e-3, 1e-4},
    {"bf16", DTRAIN_PRECISION_BF16, 1e-2, 6e-2, 5e-2, 2e-2},
};

#define STEPS 8

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (p == NULL) {
        printf("Bail out! out of host memory\n");
        exit(1);
    }
    return p;
}

static int cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

static void batch(uint64_t seed, uint64_t k, int V, size_t n, int32_t *inputs, int32_t *targets)
{
    for (size_t i = 0; i < n; i++) {
        inputs[i] = (int32_t)(dtrain_rng_bits(seed, 1000 + 2 * k, i) % (uint64_t)V);
        targets[i] = (int32_t)(dtrain_rng_bits(seed, 1001 + 2 * k, i) % (uint64_t)V);
    }
}

struct side {
    struct dtrain_kernels *k;
    struct dtrain_gpt2 *model;
    struct dtrain_adamw *opt;
};

static void side_open(struct side *s, const char *backend, const struct dtrain_kernels_options *kopt,
                      const struct dtrain_model_config *cfg, int B, int T, const float *params)
{
    char err[256];
    if (dtrain_kernels_create(backend, kopt, &s->k, err, sizeof err) != 0 ||
        dtrain_gpt2_create(s->k, cfg, B, T, &s->model, err, sizeof err) != DTRAIN_OK ||
        dtrain_adamw_create(s->k, dtrain_gpt2_num_params(s->model), &s->opt, err, sizeof err) != DTRAIN_OK) {
        printf("Bail out! %s: %s\n", backend, err);
        exit(1);
    }
    dtrain_gpt2_set_params(s->model, params);
}

static void side_close(struct side *s)
{
    dtrain_adamw_destroy(s->opt);
    dtrain_gpt2_destroy(s->model);
    dtrain_kernels_destroy(s->k);
}

/* forward + backward of one batch; returns the loss */
static float side_grad(struct side *s, const int32_t *in, const int32_t *tg, int B, int T)
{
    char err[256];
    float loss = NAN;
    dtrain_gpt2_zero_grad(s->model);
    if (dtrain_gpt2_forward(s->model, in, tg, B, T, &loss, err, sizeof err) != DTRAIN_OK ||
        dtrain_gpt2_backward(s->model, err, sizeof err) != DTRAIN_OK) {
        printf("Bail out! %s: %s\n", dtrain_kernels_name(s->k), err);
        exit(1);
    }
    return loss;
}

static void side_update(struct side *s, const struct dtrain_optim_config *oc, long step)
{
    dtrain_adamw_update(s->opt, dtrain_gpt2_params(s->model), dtrain_gpt2_grads(s->model), oc, step,
                        dtrain_lr_at(oc, step), 1.0f);
}

static void run(uint64_t seed, const struct thresholds *thr)
{
    struct dtrain_model_config cfg = {.max_seq_len = 128, .vocab_size = 1000, .padded_vocab_size = 1024,
                                     .num_layers = 2, .num_heads = 2, .channels = 128};
    const int B = 4, T = 128;
    size_t n = dtrain_model_param_count(&cfg), N = (size_t)B * T;
    float *params = xmalloc(n * sizeof(float)), *gc = xmalloc(n * sizeof(float));
    float *gg = xmalloc(n * sizeof(float));
    int32_t *in = xmalloc(N * sizeof(int32_t)), *tg = xmalloc(N * sizeof(int32_t));
    struct dtrain_optim_config oc = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0,
                                     .schedule = DTRAIN_LR_CONSTANT, .total_steps = STEPS + 1};
    struct dtrain_kernels_options cpu_opt = {.threads = cpu_count()};
    struct dtrain_kernels_options gpu_opt = {.threads = 1, .precision = thr->precision};
    struct side cpu, gpu;

    dtrain_model_init_params(&cfg, seed, params);
    side_open(&cpu, "cpu", &cpu_opt, &cfg, B, T, params);
    side_open(&gpu, "cuda", &gpu_opt, &cfg, B, T, params);

    batch(seed, 0, cfg.vocab_size, N, in, tg);
    float lc = side_grad(&cpu, in, tg, B, T), lg = side_grad(&gpu, in, tg, B, T);
    double e = fabs((double)lg - lc) / fabs((double)lc);
    ok(e <= thr->loss, "[%s] first loss %.6f vs CPU %.6f: relative error %.1e (threshold %.0e)", thr->name, lg, lc,
       e, thr->loss);

    dtrain_k_download(cpu.k, gc, dtrain_gpt2_grads(cpu.model), n * sizeof(float));
    dtrain_k_download(gpu.k, gg, dtrain_gpt2_grads(gpu.model), n * sizeof(float));
    size_t sizes[DTRAIN_MODEL_NUM_TENSORS], off = 0;
    double worst = 0.0;
    int worst_t = 0;
    dtrain_model_tensor_sizes(&cfg, sizes);
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        double diff = 0.0, ref = 0.0;
        for (size_t i = off; i < off + sizes[t]; i++) {
            double d = isfinite(gg[i]) ? fabs((double)gg[i] - gc[i]) : INFINITY;
            diff = d > diff ? d : diff;
            ref = fabs((double)gc[i]) > ref ? fabs((double)gc[i]) : ref;
        }
        double err_t = diff / (ref > 1e-30 ? ref : 1e-30);
        diag("[%s] gradient %-9s error %.2e", thr->name, dtrain_model_tensor_name((enum dtrain_model_tensor)t), err_t);
        if (!(err_t <= worst)) {
            worst = err_t;
            worst_t = t;
        }
        off += sizes[t];
    }
    ok(worst <= thr->grad, "[%s] every gradient tensor: worst error %.2e in %s (threshold %.0e)", thr->name, worst,
       dtrain_model_tensor_name((enum dtrain_model_tensor)worst_t), thr->grad);

    side_update(&cpu, &oc, 0);
    side_update(&gpu, &oc, 0);
    dtrain_gpt2_get_params(cpu.model, gc);
    dtrain_gpt2_get_params(gpu.model, gg);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += isfinite(gg[i]) ? fabs((double)gg[i] - gc[i]) : INFINITY;
    double upd = sum / (double)n / oc.lr;
    ok(upd <= thr->update, "[%s] parameters after AdamW: mean difference %.2e lr (threshold %.0e)", thr->name, upd,
       thr->update);

    double worst_loss = 0.0;
    for (long step = 1; step <= STEPS; step++) {
        batch(seed, (uint64_t)step, cfg.vocab_size, N, in, tg);
        lc = side_grad(&cpu, in, tg, B, T);
        lg = side_grad(&gpu, in, tg, B, T);
        side_update(&cpu, &oc, step);
        side_update(&gpu, &oc, step);
        e = isfinite(lg) ? fabs((double)lg - lc) / fabs((double)lc) : INFINITY;
        diag("[%s] step %ld: loss %.6f, CPU %.6f", thr->name, step, lg, lc);
        worst_loss = e > worst_loss || isnan(e) ? e : worst_loss;
    }
    ok(worst_loss <= thr->later_loss, "[%s] losses of %d more steps: worst relative error %.1e (threshold %.0e)",
       thr->name, STEPS, worst_loss, thr->later_loss);
    char err[256];
    dtrain_k_sync(gpu.k);
    int kerr = dtrain_kernels_error(gpu.k, err, sizeof err);
    ok(kerr == 0, "[%s] no CUDA error recorded%s%s", thr->name, kerr ? ": " : "", kerr ? err : "");

    side_close(&cpu);
    side_close(&gpu);
    free(params); free(gc); free(gg); free(in); free(tg);
}

int main(void)
{
    char why[256];
    if (!gpu_available(why, sizeof why)) {
        return gpu_skip_all(why);
    }
    uint64_t seed = gpu_test_seed();
    for (size_t i = 0; i < sizeof THR / sizeof THR[0]; i++)
        run(seed, &THR[i]);
    return tap_done();
}
