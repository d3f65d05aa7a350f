/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A Llama model trained on one GPU against the same run on the CPU, through
 * the trainer (dtrain_train.h: the one trainer's pipeline stage, as
 * dtrain-train runs it), as tests/gpu/test_cuda_train does for GPT-2.
 *
 * One small Llama (L=2, C=128, NH=4 query heads sharing KVH=2 key/value
 * heads, head size 32 so that bf16 takes the flash attention kernels, an
 * MLP width F=200 that is not a multiple of 64, an untied head, Llama 3
 * RoPE scaling whose original context (16 positions) is inside the run's
 * T=64, V=1000 padded to 1024, B=4), the same initial parameters and token
 * file on both backends:
 *   - the first step's loss,
 *   - every parameter tensor's gradient (largest difference over largest
 *     CPU value, per tensor; the worst tensor is named),
 *   - the parameters after that step's AdamW update (mean |difference| in
 *     units of the learning rate),
 *   - the losses of 8 further steps.
 * In fp32 (the exact attention kernels) and in bf16 (flash), with
 * tests/gpu/test_cuda_train's thresholds.  Fresh random tokens each run
 * (seed printed).  Skipped without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_data.h"
#include "dtrain_rng.h"
#include "dtrain_train.h"
#include "gpu_pair.h"
#include "tap.h"

struct thresholds {
    const char *name;
    enum dtrain_kernels_precision precision;
    double loss, grad, update, later_loss;
};

/* tests/gpu/test_cuda_train's */
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

static struct dtrain_trainer *trainer(const struct dtrain_train_config *c)
{
    char err[512];
    struct dtrain_trainer *t = NULL;
    if (dtrain_trainer_create(c, &t, err, sizeof err) != DTRAIN_OK) {
        printf("Bail out! %s trainer: %s\n", c->backend, err);
        exit(1);
    }
    return t;
}

static float step(struct dtrain_trainer *t, const char *backend)
{
    char err[512];
    struct dtrain_step_result r;
    if (dtrain_trainer_step(t, &r, err, sizeof err) != DTRAIN_OK) {
        printf("Bail out! %s step: %s\n", backend, err);
        exit(1);
    }
    return r.loss;
}

static void host_copy(struct dtrain_trainer *t, int grads, float *whole)
{
    char err[512];
    int rc = grads ? dtrain_trainer_grads(t, whole, err, sizeof err) : dtrain_trainer_params(t, whole, err, sizeof err);
    if (rc != DTRAIN_OK) {
        printf("Bail out! %s: %s\n", grads ? "gradients" : "parameters", err);
        exit(1);
    }
}

static void run(const struct dtrain_train_config *cpu_cfg, const struct thresholds *thr)
{
    struct dtrain_train_config gpu_cfg = *cpu_cfg;
    snprintf(gpu_cfg.backend, sizeof gpu_cfg.backend, "cuda");
    gpu_cfg.precision = thr->precision;
    struct dtrain_trainer *cpu = trainer(cpu_cfg), *gpu = trainer(&gpu_cfg);
    const struct dtrain_model_config *m = &cpu_cfg->model;
    size_t n = dtrain_trainer_num_params(cpu);
    float *gc = xmalloc(n * sizeof(float)), *gg = xmalloc(n * sizeof(float));

    float lc = step(cpu, "cpu"), lg = step(gpu, "cuda");
    double e = isfinite(lg) ? fabs((double)lg - lc) / fabs((double)lc) : INFINITY;
    ok(e <= thr->loss, "[%s] first loss %.6f vs CPU %.6f: relative error %.1e (threshold %.0e)", thr->name, lg, lc,
       e, thr->loss);

    host_copy(cpu, 1, gc);
    host_copy(gpu, 1, gg);
    size_t sizes[DTRAIN_MODEL_NUM_TENSORS], off = 0;
    double worst = 0.0;
    int worst_t = 0;
    dtrain_model_tensor_sizes(m, sizes);
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        if (sizes[t] == 0) /* a slot Llama leaves empty */
            continue;
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

    host_copy(cpu, 0, gc);
    host_copy(gpu, 0, gg);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += isfinite(gg[i]) ? fabs((double)gg[i] - gc[i]) : INFINITY;
    double upd = sum / (double)n / cpu_cfg->optim.lr;
    ok(upd <= thr->update, "[%s] parameters after AdamW: mean difference %.2e lr (threshold %.0e)", thr->name, upd,
       thr->update);

    double worst_loss = 0.0;
    for (long s = 1; s <= STEPS; s++) {
        lc = step(cpu, "cpu");
        lg = step(gpu, "cuda");
        e = isfinite(lg) ? fabs((double)lg - lc) / fabs((double)lc) : INFINITY;
        diag("[%s] step %ld: loss %.6f, CPU %.6f", thr->name, s, lg, lc);
        worst_loss = e > worst_loss || isnan(e) ? e : worst_loss;
    }
    ok(worst_loss <= thr->later_loss, "[%s] losses of %d more steps: worst relative error %.1e (threshold %.0e)",
       thr->name, STEPS, worst_loss, thr->later_loss);

    dtrain_trainer_destroy(gpu);
    dtrain_trainer_destroy(cpu);
    free(gc);
    free(gg);
}

int main(void)
{
    char why[512], top[] = "/tmp/dtrain-test-cuda-llama-XXXXXX";
    if (!gpu_available(why, sizeof why))
        return gpu_skip_all(why);
    uint64_t seed = gpu_test_seed();
    if (mkdtemp(top) == NULL) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }

    struct dtrain_train_config c;
    dtrain_train_config_defaults(&c);
    c.model = (struct dtrain_model_config){
        .max_seq_len = 128, .vocab_size = 1000, .padded_vocab_size = 1024, .num_layers = 2, .num_heads = 4,
        .channels = 128, .family = DTRAIN_FAMILY_LLAMA, .num_kv_heads = 2, .intermediate_size = 200,
        .untied_head = 1, .norm_eps = 1e-5f, .rope_theta = 500000.0f, .rope_factor = 8.0f,
        .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f, .rope_original_max_positions = 16};
    c.batch = 4;
    c.seq = 64;
    c.steps = STEPS + 1;
    c.seed = seed;
    c.optim.lr = 1e-3;
    c.optim.beta2 = 0.95;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c.threads = cpus > 0 ? (int)cpus : 1;

    /* random tokens, enough for every step's batch */
    size_t ntok = (size_t)(STEPS + 2) * c.batch * c.seq + 1;
    uint16_t *tok = xmalloc(ntok * sizeof *tok);
    for (size_t i = 0; i < ntok; i++)
        tok[i] = (uint16_t)(dtrain_rng_bits(seed, 7, i) % (uint64_t)c.model.vocab_size);
    snprintf(c.data, sizeof c.data, "%s/data.bin", top);
    if (dtrain_tokens_write(c.data, tok, ntok, why, sizeof why) != DTRAIN_OK) {
        printf("Bail out! token file: %s\n", why);
        return 1;
    }
    free(tok);
    if (dtrain_train_config_finish(&c, why, sizeof why) != DTRAIN_OK) {
        printf("Bail out! config: %s\n", why);
        return 1;
    }

    for (size_t i = 0; i < sizeof THR / sizeof THR[0]; i++)
        run(&c, &THR[i]);

    unlink(c.data);
    rmdir(top);
    return tap_done();
}
