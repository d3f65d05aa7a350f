/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The one trainer on a GPU (include/dtrain/dtrain_parallel.h), against
 * the same run on the cpu kernels in one process (dtrain_train.h):
 *   - (T,P,D) = (2,2,1) and (1,2,2): 4 processes sharing one GPU, the cpu
 *     comm backend, every tensor-parallel (vocabulary-parallel kernels
 *     included), pipeline, tied-embedding and data-parallel call staged
 *     through pinned host memory (dtrain_pcomm.h), in fp32: every step's
 *     loss within 1e-4 relative of the CPU's (fp32 on two backends: the
 *     GEMMs sum in other orders), and the job's checkpoint of the last step
 *     (host copies of GPU memory) resumed by one CPU process gives the CPU
 *     run's next loss within 1e-4;
 *   - (2,2,1) the same way in bf16 precision, where the blocks' inner
 *     activations are bf16 tensors through the tensor-parallel and
 *     pipeline stages: losses within 2e-2 of the (fp32) CPU's, the bound
 *     of tests/gpu/test_cuda_train's later losses;
 *   - (1,1,1) on the nccl comm backend (ids from ncclGetUniqueId, every
 *     group split off WORLD, calls on the kernels' stream), fp32 and bf16:
 *     losses within 1e-4 (fp32) and 2e-2 (bf16, tests/gpu/test_cuda_train's
 *     bound) of the CPU's;
 *   - with two devices or more (a two-GPU machine, the GPU stand-in's
 *     eight): (2,1,1), (1,2,1) and (1,1,2) on the nccl comm backend, one
 *     device per rank (DTRAIN_CUDA_DEVICE = rank, as the plugin sets it):
 *     the data paths of TP, PP and DP through NCCL, fp32 losses within 1e-4
 *     of the CPU's, and bf16 at (2,1,1) within 2e-2; with eight, (2,2,2)
 *     too;
 *   - a Llama (GQA: 4 query heads on 2 key/value heads, so that each of 2
 *     tensor-parallel ranks holds one kv head; MLP width 100, untied head,
 *     Llama 3 RoPE scaling) with sequence parallelism: (2,2,1) on one GPU
 *     staged, fp32 within 1e-4 and bf16 within 2e-2 of its CPU run, and
 *     with two devices or more (2,1,1) on nccl in fp32.
 * Ranks are local processes (tests/parallel/local_boot.h, the launcher's
 * id code).  Skipped without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "dtrain_data.h"
#include "trainer/dtrain_ft.h"
#include "dtrain_parallel.h"
#include "dtrain_train.h"
#include "gpu_pair.h"
#include "local_boot.h"
#include "tap.h"

#define STEPS 6

struct job {
    struct dtrain_train_config cfg;
    int nccl;            /* 1x1x1 on the nccl backend */
    char save_dir[512];  /* checkpoint after the last step, or "" */
};

struct area {
    int ok;
    char err[512];
    float loss[STEPS];
};

static int train_rank(struct dtrain_bootstrap *bs, const struct job *j, struct area *a)
{
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    struct dtrain_comm_options o;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = 60000;
    if (dtrain_comm_init_all(bs, &o, &comms, NULL, a->err, sizeof a->err) != DTRAIN_OK)
        return 3;
    int rc = dtrain_ptrainer_create(&j->cfg, bs, &comms, &t, a->err, sizeof a->err);
    for (int s = 0; rc == DTRAIN_OK && s < STEPS; s++) {
        struct dtrain_pstep_result r;
        rc = dtrain_ptrainer_step(t, &r, a->err, sizeof a->err);
        a->loss[s] = r.base.loss;
    }
    if (rc == DTRAIN_OK && j->save_dir[0] != '\0')
        rc = dtrain_ft_save(t, &j->cfg, bs, comms.group[DTRAIN_GROUP_WORLD], j->save_dir, a->err, sizeof a->err);
    a->ok = rc == DTRAIN_OK;
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return a->ok ? 0 : 1;
}

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct job *j = ctx;
    if (j->nccl) { /* a device per rank, as the plugin places a step's tasks */
        char dev[16];
        snprintf(dev, sizeof dev, "%d", bs->local_rank);
        setenv("DTRAIN_CUDA_DEVICE", dev, 1);
    }
    return train_rank(bs, ctx, result);
}

static double rel(float a, float b)
{
    return fabs((double)a - b) / fabs((double)b);
}

static double worst(const float *a, const float *b, int n)
{
    double w = 0.0;
    for (int i = 0; i < n; i++)
        w = fmax(w, isfinite(a[i]) ? rel(a[i], b[i]) : INFINITY);
    return w;
}

/* The CPU reference: one process, cpu kernels; losses of steps 0..n-1. */
static int cpu_run(const struct dtrain_train_config *c, int n, float *loss, char *err, size_t errlen)
{
    struct dtrain_trainer *t = NULL;
    struct dtrain_step_result r;
    int rc = dtrain_trainer_create(c, &t, err, errlen);
    for (int s = 0; rc == DTRAIN_OK && s < n; s++) {
        rc = dtrain_trainer_step(t, &r, err, errlen);
        loss[s] = r.loss;
    }
    dtrain_trainer_destroy(t);
    return rc;
}

/* T x P x D ranks of j on the cuda kernels (nccl: a device per rank, else
 * one GPU, staged); the worst relative difference of rank 0's losses from
 * ref, infinite when a rank failed (its error printed). */
static double gpu_run(const struct job *j, int T, int P, int D, const float *ref, const char *what)
{
    struct area all[LOCAL_BOOT_MAX_WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD];
    char why[512] = "";
    memset(all, 0, sizeof all);
    int rc = j->nccl ? local_boot_run_backend(DTRAIN_COMM_NCCL, T, P, D, rank_main, (void *)j, sizeof all[0], all,
                                              codes, 600, why, sizeof why)
                     : local_boot_run(T, P, D, rank_main, (void *)j, sizeof all[0], all, codes, 300, why, sizeof why);
    for (int r = 0; r < T * P * D; r++)
        if (!all[r].ok)
            diag("%s rank %d (exit %d): %s", what, r, codes[r], all[r].err);
    if (rc != 0) {
        diag("%s: %s", what, why);
        return INFINITY;
    }
    diag("%s: first and last losses %.7f, %.7f; the CPU's %.7f, %.7f", what, (double)all[0].loss[0],
         (double)all[0].loss[STEPS - 1], (double)ref[0], (double)ref[STEPS - 1]);
    return worst(all[0].loss, ref, STEPS);
}

int main(void)
{
    char why[512], top[] = "/tmp/dtrain-test-cuda-parallel-XXXXXX";
    int devices = gpu_devices_in_child(why, sizeof why);
    if (devices == 0) {
        return gpu_skip_all(why);
    }
    if (mkdtemp(top) == NULL) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    /* the data: bytes of a repeated sentence */
    char data[600];
    snprintf(data, sizeof data, "%s/data.bin", top);
    static const char text[] = "a GPU and a CPU should agree on every loss of the same run; ";
    size_t n = 20000;
    uint16_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; tok != NULL && i < n; i++)
        tok[i] = (unsigned char)text[i % (sizeof text - 1)];
    if (tok == NULL || dtrain_tokens_write(data, tok, n, why, sizeof why) != DTRAIN_OK) {
        printf("Bail out! token file: %s\n", why);
        return 1;
    }
    free(tok);

    struct dtrain_train_config cpu;
    dtrain_train_config_defaults(&cpu);
    snprintf(cpu.data, sizeof cpu.data, "%s", data);
    /* small, because the stand-in runs every CUDA thread as a fiber on the
     * CPU: 4 layers (2 per stage), head size 32 (a flash-attention size) */
    cpu.model = (struct dtrain_model_config){.max_seq_len = 32, .vocab_size = 256, .padded_vocab_size = 256,
                                            .num_layers = 4, .num_heads = 2, .channels = 64};
    cpu.batch = 4; /* D = 2 data-parallel ranks x 2 micro-batches */
    cpu.seq = 32;
    cpu.steps = STEPS + 1;
    cpu.optim.lr = 1e-3;
    cpu.threads = 2;
    if (dtrain_train_config_finish(&cpu, why, sizeof why) != DTRAIN_OK) {
        printf("Bail out! config: %s\n", why);
        return 1;
    }
    float ref[STEPS + 1];
    ok(cpu_run(&cpu, STEPS + 1, ref, why, sizeof why) == DTRAIN_OK, "the CPU reference trains %d steps%s%s",
       STEPS + 1, *why ? ": " : "", why);

    /* ---- (2,2,1) and (1,2,2): 4 processes on one GPU, cpu comm backend, staged */
    static const int layouts[][3] = {{2, 2, 1}, {1, 2, 2}};
    int rc;
    double w;
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        int T = layouts[l][0], P = layouts[l][1], D = layouts[l][2];
        struct job j = {.cfg = cpu};
        snprintf(j.cfg.backend, sizeof j.cfg.backend, "cuda");
        j.cfg.precision = DTRAIN_PRECISION_FP32;
        j.cfg.micro_batches = 2;
        snprintf(j.save_dir, sizeof j.save_dir, "%s/ckpt%zu", top, l);
        struct area all[LOCAL_BOOT_MAX_WORLD];
        int codes[LOCAL_BOOT_MAX_WORLD];
        memset(all, 0, sizeof all);
        rc = local_boot_run(T, P, D, rank_main, &j, sizeof all[0], all, codes, 300, why, sizeof why);
        for (int r = 0; r < T * P * D; r++)
            if (!all[r].ok)
                diag("(%d,%d,%d) rank %d (exit %d): %s", T, P, D, r, codes[r], all[r].err);
        w = worst(all[0].loss, ref, STEPS);
        ok(rc == 0 && w <= 1e-4, "(%d,%d,%d) on one GPU, cpu comm backend (staged), fp32: every step's loss within "
           "1e-4 of the CPU's (worst %.2e)", T, P, D, w);
        struct dtrain_train_config back = cpu;
        snprintf(back.resume, sizeof back.resume, "%s", j.save_dir);
        struct dtrain_trainer *one = NULL;
        struct dtrain_step_result sr = {0};
        int good = rc == 0 && dtrain_trainer_create(&back, &one, why, sizeof why) == DTRAIN_OK &&
                   dtrain_trainer_steps_done(one) == STEPS &&
                   dtrain_trainer_step(one, &sr, why, sizeof why) == DTRAIN_OK;
        dtrain_trainer_destroy(one);
        ok(good && rel(sr.loss, ref[STEPS]) <= 1e-4, "(%d,%d,%d): its checkpoint (GPU memory through host copies) "
           "resumes on the CPU: step %d's loss %.6f, the CPU run's %.6f%s%s", T, P, D, STEPS, (double)sr.loss,
           (double)ref[STEPS], good ? "" : ": ", good ? "" : why);
    }

    /* ---- (2,2,1) in bf16: typed bf16 activations across the stages */
    {
        struct job j = {.cfg = cpu};
        snprintf(j.cfg.backend, sizeof j.cfg.backend, "cuda");
        j.cfg.precision = DTRAIN_PRECISION_BF16;
        j.cfg.micro_batches = 2;
        struct area all[LOCAL_BOOT_MAX_WORLD];
        int codes[LOCAL_BOOT_MAX_WORLD];
        memset(all, 0, sizeof all);
        rc = local_boot_run(2, 2, 1, rank_main, &j, sizeof all[0], all, codes, 300, why, sizeof why);
        for (int r = 0; r < 4; r++)
            if (!all[r].ok)
                diag("(2,2,1) bf16 rank %d (exit %d): %s", r, codes[r], all[r].err);
        w = worst(all[0].loss, ref, STEPS);
        ok(rc == 0 && w <= 2e-2, "(2,2,1) on one GPU, cpu comm backend (staged), bf16: every step's loss within "
           "2e-2 of the CPU's (worst %.2e)", w);
    }

    /* ---- (1,1,1) on nccl, fp32 and bf16 */
    static const struct { enum dtrain_kernels_precision p; const char *name; double tol; } prec[] = {
        {DTRAIN_PRECISION_FP32, "fp32", 1e-4}, {DTRAIN_PRECISION_BF16, "bf16", 2e-2},
    };
    for (size_t i = 0; i < sizeof prec / sizeof prec[0]; i++) {
        struct job jn = {.cfg = cpu, .nccl = 1};
        snprintf(jn.cfg.backend, sizeof jn.cfg.backend, "cuda");
        jn.cfg.precision = prec[i].p;
        /* in a child: this process must not start CUDA before it forks ranks */
        struct area a;
        int code = -1;
        memset(&a, 0, sizeof a);
        rc = local_boot_run_backend(DTRAIN_COMM_NCCL, 1, 1, 1, rank_main, &jn, sizeof a, &a, &code, 300, why,
                                    sizeof why);
        w = worst(a.loss, ref, STEPS);
        ok(rc == 0 && w <= prec[i].tol, "(1,1,1) on the nccl comm backend, %s: losses within %g of the CPU's "
           "(worst %.2e)%s%s", prec[i].name, prec[i].tol, w, rc == 0 ? "" : ": ", rc == 0 ? "" : a.err);
    }

    /* ---- nccl across devices: TP, PP and DP data paths */
    static const struct { int t, p, d; enum dtrain_kernels_precision prec; const char *name; double tol; } across[] = {
        {2, 1, 1, DTRAIN_PRECISION_FP32, "fp32", 1e-4}, {1, 2, 1, DTRAIN_PRECISION_FP32, "fp32", 1e-4},
        {1, 1, 2, DTRAIN_PRECISION_FP32, "fp32", 1e-4}, {2, 1, 1, DTRAIN_PRECISION_BF16, "bf16", 2e-2},
        {2, 2, 2, DTRAIN_PRECISION_FP32, "fp32", 1e-4},
    };
    for (size_t l = 0; l < sizeof across / sizeof across[0]; l++) {
        int T = across[l].t, P = across[l].p, D = across[l].d, world = T * P * D;
        if (devices < world) {
            char what[128];
            snprintf(what, sizeof what, "(%d,%d,%d) on nccl needs %d devices; this machine has %d", T, P, D, world,
                     devices);
            skip(what);
            continue;
        }
        struct job j = {.cfg = cpu, .nccl = 1};
        snprintf(j.cfg.backend, sizeof j.cfg.backend, "cuda");
        j.cfg.precision = across[l].prec;
        j.cfg.micro_batches = 2;
        struct area all[LOCAL_BOOT_MAX_WORLD];
        int codes[LOCAL_BOOT_MAX_WORLD];
        memset(all, 0, sizeof all);
        rc = local_boot_run_backend(DTRAIN_COMM_NCCL, T, P, D, rank_main, &j, sizeof all[0], all, codes, 600, why,
                                    sizeof why);
        for (int r = 0; r < world; r++)
            if (!all[r].ok)
                diag("(%d,%d,%d) nccl rank %d (exit %d): %s", T, P, D, r, codes[r], all[r].err);
        w = worst(all[0].loss, ref, STEPS);
        ok(rc == 0 && w <= across[l].tol, "(%d,%d,%d) on the nccl comm backend, a device per rank, %s: every step's "
           "loss within %g of the CPU's (worst %.2e)%s%s", T, P, D, across[l].name, across[l].tol, w,
           rc == 0 ? "" : ": ", rc == 0 ? "" : why);
    }

    /* ---- Llama: GQA kv heads sharded over TP, sequence parallel */
    struct dtrain_train_config llama = cpu;
    llama.model = (struct dtrain_model_config){
        .max_seq_len = 32, .vocab_size = 256, .padded_vocab_size = 256, .num_layers = 2, .num_heads = 4,
        .channels = 64, .family = DTRAIN_FAMILY_LLAMA, .num_kv_heads = 2, .intermediate_size = 100,
        .untied_head = 1, .norm_eps = 1e-5f, .rope_theta = 500000.0f, .rope_factor = 8.0f,
        .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f, .rope_original_max_positions = 16};
    float lref[STEPS];
    rc = dtrain_train_config_finish(&llama, why, sizeof why);
    if (rc == DTRAIN_OK)
        rc = cpu_run(&llama, STEPS, lref, why, sizeof why);
    ok(rc == DTRAIN_OK, "the Llama CPU reference trains %d steps%s%s", STEPS, rc == DTRAIN_OK ? "" : ": ",
       rc == DTRAIN_OK ? "" : why);
    static const struct { int t, p, d, nccl; enum dtrain_kernels_precision prec; const char *name; double tol; }
    lruns[] = {
        {2, 2, 1, 0, DTRAIN_PRECISION_FP32, "fp32", 1e-4}, {2, 2, 1, 0, DTRAIN_PRECISION_BF16, "bf16", 2e-2},
        {2, 1, 1, 1, DTRAIN_PRECISION_FP32, "fp32", 1e-4},
    };
    for (size_t l = 0; l < sizeof lruns / sizeof lruns[0]; l++) {
        int T = lruns[l].t, P = lruns[l].p, D = lruns[l].d, world = T * P * D;
        const char *how = lruns[l].nccl ? "on the nccl comm backend, a device per rank"
                                        : "on one GPU, cpu comm backend (staged)";
        char what[256];
        snprintf(what, sizeof what, "Llama (%d,%d,%d) sequence parallel %s, %s", T, P, D, how, lruns[l].name);
        if (lruns[l].nccl && devices < world) {
            char need[320];
            snprintf(need, sizeof need, "%s needs %d devices; this machine has %d", what, world, devices);
            skip(need);
            continue;
        }
        struct job j = {.cfg = llama, .nccl = lruns[l].nccl};
        snprintf(j.cfg.backend, sizeof j.cfg.backend, "cuda");
        j.cfg.precision = lruns[l].prec;
        j.cfg.micro_batches = 2;
        j.cfg.sequence_parallel = 1;
        w = rc == DTRAIN_OK ? gpu_run(&j, T, P, D, lref, what) : INFINITY;
        ok(w <= lruns[l].tol, "%s: every step's loss within %g of the CPU's (worst %.2e)", what, lruns[l].tol, w);
    }

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    if (system(cmd) != 0)
        diag("could not remove %s", top);
    return tap_done();
}
