/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ZeRO-Offload on a GPU (--offload-optimizer cpu, --offload-params cpu;
 * doc/runtime.md), against the same run with the state on the device, in
 * fp32, as local processes sharing one GPU (the cpu comm backend, staged
 * through pinned host memory; tests/parallel/local_boot.h):
 *   - (1,1,1), (1,1,2) ZeRO-1 and ZeRO-3 with --offload-optimizer cpu, and
 *     (1,1,2) ZeRO-3 with --offload-params cpu too: every step's loss
 *     within 1e-5 relative of the resident run's (the CPU backend's AdamW
 *     against the CUDA kernel, the same formula: the compilers contract
 *     other multiply-adds into FMAs; the stand-in gives them bit for
 *     bit), and rank 0's memory report: no
 *     optimizer bytes on the device, the pinned-host bytes the formula's
 *     within 1% (ZeRO shares' padding), the device model state within 5%.
 * A small model and few steps: the GPU stand-in runs kernels on the CPU.
 * Skipped without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrain_data.h"
#include "dtrain_parallel.h"
#include "dtrain_train.h"
#include "gpu_pair.h"
#include "local_boot.h"
#include "tap.h"

#define STEPS 4
#define LOSS_RTOL 1e-5

struct area {
    int ok;
    char err[512];
    float loss[STEPS];
    struct dtrain_ptrainer_memory mem;
};

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct dtrain_train_config *c = ctx;
    struct area *a = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    struct dtrain_comm_options o;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = 60000;
    if (dtrain_comm_init_all(bs, &o, &comms, NULL, a->err, sizeof a->err) != DTRAIN_OK)
        return 3;
    int rc = dtrain_ptrainer_create(c, bs, &comms, &t, a->err, sizeof a->err);
    if (rc == DTRAIN_OK)
        dtrain_ptrainer_memory(t, &a->mem);
    for (int s = 0; rc == DTRAIN_OK && s < STEPS; s++) {
        struct dtrain_pstep_result r;
        rc = dtrain_ptrainer_step(t, &r, a->err, sizeof a->err);
        a->loss[s] = r.base.loss;
    }
    a->ok = rc == DTRAIN_OK;
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return a->ok ? 0 : 1;
}

static double rel(size_t got, size_t want)
{
    return want == 0 ? (got == 0 ? 0.0 : 1.0) : fabs((double)got - (double)want) / (double)want;
}

/* One run of D ranks; rank 0's area in *out.  0 or -1. */
static int run(const struct dtrain_train_config *c, int D, struct area *out, char *why, size_t whylen)
{
    struct area all[LOCAL_BOOT_MAX_WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD];
    memset(all, 0, sizeof all);
    int rc = local_boot_run(1, 1, D, rank_main, (void *)c, sizeof all[0], all, codes, 300, why, whylen);
    for (int r = 0; r < D; r++)
        if (!all[r].ok)
            snprintf(why, whylen, "rank %d (exit %d): %s", r, codes[r], all[r].err);
    *out = all[0];
    return rc == 0 && all[0].ok ? 0 : -1;
}

int main(void)
{
    char why[512], top[] = "/tmp/dtrain-test-cuda-offload-XXXXXX";
    if (gpu_devices_in_child(why, sizeof why) == 0)
        return gpu_skip_all(why);
    if (mkdtemp(top) == NULL) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    char data[600];
    snprintf(data, sizeof data, "%s/data.bin", top);
    static const char text[] = "the optimizer state may live anywhere, the losses stay; ";
    size_t n = 8000;
    uint16_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; tok != NULL && i < n; i++)
        tok[i] = (unsigned char)text[i % (sizeof text - 1)];
    if (tok == NULL || dtrain_tokens_write(data, tok, n, why, sizeof why) != DTRAIN_OK) {
        printf("Bail out! token file: %s\n", why);
        return 1;
    }
    free(tok);

    struct dtrain_train_config base;
    dtrain_train_config_defaults(&base);
    snprintf(base.data, sizeof base.data, "%s", data);
    snprintf(base.backend, sizeof base.backend, "cuda");
    base.precision = DTRAIN_PRECISION_FP32;
    base.model = (struct dtrain_model_config){.max_seq_len = 16, .vocab_size = 256, .padded_vocab_size = 256,
                                             .num_layers = 2, .num_heads = 2, .channels = 32};
    base.batch = 4;
    base.seq = 16;
    base.steps = STEPS;
    base.optim.lr = 1e-2;
    base.optim.weight_decay = 0.01;
    base.optim.grad_clip = 1.0;
    base.threads = 1;
    base.log_every = 0;
    base.bucket_mb = 0.02;
    if (dtrain_train_config_finish(&base, why, sizeof why) != DTRAIN_OK) {
        printf("Bail out! config: %s\n", why);
        return 1;
    }
    static const struct {
        int D, zero, params;
    } runs[] = {{1, 0, 0}, {2, 1, 0}, {2, 3, 0}, {2, 3, 1}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        struct dtrain_train_config res = base, off = base;
        res.zero_stage = off.zero_stage = runs[i].zero;
        snprintf(off.offload_optimizer, sizeof off.offload_optimizer, "cpu");
        if (runs[i].params)
            snprintf(off.offload_params, sizeof off.offload_params, "cpu");
        char name[128];
        snprintf(name, sizeof name, "(1,1,%d) ZeRO stage %d, --offload-optimizer cpu%s", runs[i].D, runs[i].zero,
                 runs[i].params ? " --offload-params cpu" : "");
        struct area a, b;
        int rc = run(&res, runs[i].D, &a, why, sizeof why);
        if (rc == 0)
            rc = run(&off, runs[i].D, &b, why, sizeof why);
        if (!ok(rc == 0, "%s: it and the resident run train %d steps (%s)", name, STEPS, rc == 0 ? "ok" : why))
            continue;
        double w = 0.0;
        for (int s = 0; s < STEPS; s++) {
            double d = fabs((double)a.loss[s] - b.loss[s]) / fabs((double)a.loss[s]);
            w = d > w ? d : w;
        }
        ok(w <= LOSS_RTOL, "%s: every step's loss within %g of the resident run's (worst %.2e, last %.6f)", name,
           LOSS_RTOL, w, b.loss[STEPS - 1]);
        const struct dtrain_ptrainer_memory *m = &b.mem;
        ok(m->optimizer == 0 && a.mem.optimizer > 0 && m->nvme == 0 && rel(m->pinned_host, m->pinned_host_formula) <= 0.01 &&
           rel(m->model_state, m->model_state_formula) <= 0.05 && m->model_state < a.mem.model_state,
           "%s: rank 0's memory: device optimizer 0 (resident %zu), pinned host %zu (formula %zu), device model "
           "state %zu (formula %zu, resident %zu)", name, a.mem.optimizer, m->pinned_host, m->pinned_host_formula,
           m->model_state, m->model_state_formula, a.mem.model_state);
    }
    unlink(data);
    rmdir(top);
    return tap_done();
}
