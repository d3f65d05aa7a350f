/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-llama: tokens/s and MFU of a Llama shape next to a GPT-2
 * shape of about the same parameter count, trained by the one-process
 * trainer (dtrain_trainer_step: next batch, forward, backward, clip, AdamW;
 * what dtrain-train runs) on the CPU backend, fp32.
 *
 *   dtrain-bench-llama [--threads N] [--steps N] [--warmup N] [--runs N] [--sgemm-n N]
 *
 * The shapes (T=128, B=8, V=4096, L=4, C=256, NH=4 both):
 *   GPT-2: 4x MLP with GELU, LayerNorm, learned positions, tied head.
 *   Llama: GQA with KVH=2, SwiGLU of width F=768 (3C), RMSNorm, RoPE, tied
 *          head.  With KVH=2 the QKV matrix is 2C x C instead of 3C x C and
 *          F=3C gives the MLP's three matrices what GPT-2's two 4C ones
 *          have: the same matrices' parameters and the same model FLOPs;
 *          what differs is wpe and the biases (about 1% of the parameters).
 * FLOPs are dtrain_model_flops_per_step() (matmuls and attention, forward +
 * backward = 3x forward).  MFU is the achieved FLOP/s over the best sgemm
 * rate of this CPU measured in the same run (bench_sgemm.h, as
 * dtrain-bench-train), its rounds before, between and after the runs: the
 * physical limit of these kernels here, so an MFU over 100% is a broken
 * measurement, reported as such (bench_over_limit, BENCH_INVALID).
 *
 * Runs alternate, GPT-2 then Llama, --runs times each (a fresh trainer per
 * run; a slow spell on the shared machine hits both); a run's figure is
 * the median step of its --steps after --warmup, each shape's figure its
 * best run.  Defaults: 2 threads, 3 runs of 3 steps after 1 warm-up, a
 * 1024^3 sgemm: under a minute on 2 loaded cores.  The tokens are random (the speed does not depend on them),
 * written to a token file in a temporary folder removed at the end. */
#include "bench_sgemm.h"
#include "bench_util.h"
#include "dtrain_blas.h"
#include "dtrain_data.h"
#include "dtrain_model.h"
#include "dtrain_parse.h"
#include "dtrain_rng.h"
#include "dtrain_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "dtrain-bench-llama"
#define B 8
#define T 128
#define MAX_RUNS 100

struct options {
    int threads, steps, warmup, runs, sgemm_n;
};

static int parse_options(int argc, char **argv, struct options *o)
{
    char err[256];
    for (int i = 1; i < argc; i++) {
        long v;
        int *dst = NULL;
        long min = 1, max = 100000;
        if (strcmp(argv[i], "--threads") == 0) { dst = &o->threads; max = 1024; }
        else if (strcmp(argv[i], "--steps") == 0) dst = &o->steps;
        else if (strcmp(argv[i], "--warmup") == 0) { dst = &o->warmup; min = 0; }
        else if (strcmp(argv[i], "--runs") == 0) { dst = &o->runs; max = MAX_RUNS; }
        else if (strcmp(argv[i], "--sgemm-n") == 0) { dst = &o->sgemm_n; min = 64; max = 16384; }
        if (dst == NULL || i + 1 >= argc) {
            fprintf(stderr, PROG ": usage: " PROG " [--threads N] [--steps N] [--warmup N] [--runs N] "
                    "[--sgemm-n N]\n");
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

struct shape {
    const char *name;
    struct dtrain_model_config model;
    double run_ms[MAX_RUNS]; /* each run's median step */
    double best_ms;
};

/* One run: a fresh trainer on the token file, warm-up steps, then the
 * median wall time of `steps` steps (dtrain_step_result.ms). */
static int run_once(const struct options *o, const char *data, struct shape *s, double *ms)
{
    char err[512] = "";
    struct dtrain_train_config c;
    struct dtrain_trainer *t = NULL;
    double *step_ms = calloc((size_t)o->steps, sizeof(double));
    int rc = -1;
    if (step_ms == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return -1;
    }
    dtrain_train_config_defaults(&c);
    snprintf(c.data, sizeof c.data, "%s", data);
    snprintf(c.backend, sizeof c.backend, "cpu");
    c.model = s->model;
    c.batch = B;
    c.seq = T;
    c.steps = o->warmup + o->steps;
    c.threads = o->threads;
    c.log_every = 0; /* no progress lines, and no GEMM measurement of the trainer's own (the peak is ours) */
    if (dtrain_train_config_finish(&c, err, sizeof err) != DTRAIN_OK ||
        dtrain_trainer_create(&c, &t, err, sizeof err) != DTRAIN_OK)
        goto out;
    for (int i = 0; i < o->warmup + o->steps; i++) {
        struct dtrain_step_result r;
        if (dtrain_trainer_step(t, &r, err, sizeof err) != DTRAIN_OK)
            goto out;
        if (i >= o->warmup)
            step_ms[i - o->warmup] = r.ms;
    }
    *ms = bench_median(step_ms, o->steps);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, PROG ": %s: %s\n", s->name, err);
    dtrain_trainer_destroy(t);
    free(step_ms);
    return rc;
}

/* A token file of random ids below V in a new temporary folder. */
static int write_tokens(char *dir, size_t dirlen, char *path, size_t pathlen, int V)
{
    char err[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, dirlen, "%s/dtrain-bench-llama.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror(PROG ": mkdtemp");
        return -1;
    }
    snprintf(path, pathlen, "%s/tokens.bin", dir);
    size_t n = 4 * (size_t)B * T + 1; /* 4 batches; the sequential order wraps */
    uint16_t *tok = malloc(n * sizeof *tok);
    if (tok == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        rmdir(dir);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        tok[i] = (uint16_t)(dtrain_rng_bits(7, 0, i) % (uint64_t)V);
    int rc = dtrain_tokens_write(path, tok, n, err, sizeof err);
    free(tok);
    if (rc != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        unlink(path);
        rmdir(dir);
        return -1;
    }
    return 0;
}

/* "12.3 %", or the invalid measurement said as such (above the physical limit). */
static const char *mfu_text(double mfu, char *buf, size_t len)
{
    if (bench_over_limit(mfu))
        snprintf(buf, len, "INVALID (%.1f %%)", 100.0 * mfu);
    else
        snprintf(buf, len, "%.1f %%", 100.0 * mfu);
    return buf;
}

int main(int argc, char **argv)
{
    int child_rc;
    if (bench_sgemm_child(argc, argv, &child_rc))
        return child_rc;
    if (dtrain_blas_select(PROG, argv) != 0) /* the kernels the trainer would run */
        return 2;
    struct options o = {.threads = 2, .steps = 3, .warmup = 1, .runs = 3, .sgemm_n = 1024};
    if (parse_options(argc, argv, &o) != 0)
        return 2;
    struct shape shapes[2] = {
        {.name = "GPT-2",
         .model = {.max_seq_len = T, .vocab_size = 4096, .padded_vocab_size = 4096, .num_layers = 4,
                   .num_heads = 4, .channels = 256}},
        {.name = "Llama",
         .model = {.max_seq_len = T, .vocab_size = 4096, .padded_vocab_size = 4096, .num_layers = 4,
                   .num_heads = 4, .channels = 256, .family = DTRAIN_FAMILY_LLAMA, .num_kv_heads = 2,
                   .intermediate_size = 768, .untied_head = 0, .norm_eps = 1e-5f, .rope_theta = 10000.0f}},
    };
    char dir[DTRAIN_PATH_MAX - 32], data[DTRAIN_PATH_MAX]; /* data: dir + "/tokens.bin" */
    if (write_tokens(dir, sizeof dir, data, sizeof data, shapes[0].model.vocab_size) != 0)
        return 1;
    struct bench_sgemm_baseline sgemm;
    int rc = 1;
    if (bench_sgemm_baseline_start(&sgemm, PROG, o.sgemm_n, o.threads) != 0)
        goto out;
    /* A B A B ...: both shapes see the same spells of load, and so does the baseline between them */
    for (int r = 0; r < o.runs; r++) {
        for (int i = 0; i < 2; i++)
            if (run_once(&o, data, &shapes[i], &shapes[i].run_ms[r]) != 0)
                goto out;
        if (r + 1 < o.runs && bench_sgemm_baseline_again(&sgemm, PROG) != 0)
            goto out;
    }
    if (bench_sgemm_baseline_finish(&sgemm, PROG) != 0)
        goto out;

    double params[2], flops_tok[2], tok_s[2], gflops[2], mfu[2];
    for (int i = 0; i < 2; i++) {
        struct shape *s = &shapes[i];
        s->best_ms = s->run_ms[0];
        for (int r = 1; r < o.runs; r++)
            if (s->run_ms[r] < s->best_ms)
                s->best_ms = s->run_ms[r];
        params[i] = (double)dtrain_model_param_count(&s->model);
        flops_tok[i] = dtrain_model_flops_per_step(&s->model, B, T) / (B * T);
        tok_s[i] = B * T / (s->best_ms * 1e-3);
        gflops[i] = flops_tok[i] * tok_s[i] * 1e-9;
        mfu[i] = gflops[i] / sgemm.gflops;
    }
    const struct dtrain_model_config *g = &shapes[0].model, *l = &shapes[1].model;
    printf(PROG ": one-process trainer (dtrain_trainer_step), cpu fp32, %d threads, T=%d B=%d V=%d; "
           "runs interleaved GPT-2, Llama x %d, each the median of %d steps after %d warm-up; best run\n",
           o.threads, T, B, g->vocab_size, o.runs, o.steps, o.warmup);
    printf("%-22s %-26s %-26s %s\n", "", "GPT-2", "Llama", "Llama/GPT-2");
    char gs[64], ls[64];
    snprintf(gs, sizeof gs, "L=%d C=%d NH=%d", g->num_layers, g->channels, g->num_heads);
    snprintf(ls, sizeof ls, "L=%d C=%d NH=%d KVH=%d F=%d", l->num_layers, l->channels, l->num_heads,
             dtrain_model_kv_heads(l), dtrain_model_mlp_width(l));
    printf("%-22s %-26s %-26s\n", "shape", gs, ls);
    snprintf(gs, sizeof gs, "GELU 4C=%d, LayerNorm", dtrain_model_mlp_width(g));
    snprintf(ls, sizeof ls, "SwiGLU, RMSNorm, RoPE");
    printf("%-22s %-26s %-26s\n", "MLP, norm", gs, ls);
    printf("%-22s %-26s %-26s\n", "LM head", "tied", l->untied_head ? "untied" : "tied");
    printf("%-22s %-26.0f %-26.0f %.3f\n", "parameters", params[0], params[1], params[1] / params[0]);
    printf("%-22s %-26.2f %-26.2f %.3f\n", "model MFLOP/token", flops_tok[0] * 1e-6, flops_tok[1] * 1e-6,
           flops_tok[1] / flops_tok[0]);
    for (int i = 0; i < 2; i++) {
        char runs[128] = "";
        size_t used = 0;
        for (int r = 0; r < o.runs && used < sizeof runs; r++)
            used += (size_t)snprintf(runs + used, sizeof runs - used, "%s%.1f", r ? " " : "",
                                     shapes[i].run_ms[r]);
        printf("%-22s %s\n", i == 0 ? "step ms, GPT-2 runs" : "step ms, Llama runs", runs);
    }
    printf("%-22s %-26.2f %-26.2f %.3f\n", "step ms (best run)", shapes[0].best_ms, shapes[1].best_ms,
           shapes[1].best_ms / shapes[0].best_ms);
    printf("%-22s %-26.0f %-26.0f %.3f\n", "tokens/s", tok_s[0], tok_s[1], tok_s[1] / tok_s[0]);
    printf("%-22s %-26.2f %-26.2f %.3f\n", "achieved GFLOP/s", gflops[0], gflops[1], gflops[1] / gflops[0]);
    bench_sgemm_baseline_print(&sgemm);
    char m0[96], m1[96];
    if (bench_over_limit(mfu[0]) || bench_over_limit(mfu[1]))
        printf("%-22s %-26s %-26s %s\n", "MFU (of baseline)", mfu_text(mfu[0], m0, sizeof m0),
               mfu_text(mfu[1], m1, sizeof m1), BENCH_INVALID);
    else
        printf("%-22s %-26s %-26s %.3f\n", "MFU (of baseline)", mfu_text(mfu[0], m0, sizeof m0),
               mfu_text(mfu[1], m1, sizeof m1), mfu[1] / mfu[0]);
    rc = 0;
out:
    unlink(data);
    rmdir(dir);
    return rc;
}
