/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-memory: what ZeRO, activation recomputation and sequence
 * parallelism save, and what they cost, each against its baseline measured
 * in the same run.
 *
 * Part 1, ZeRO stages 0, 1, 2, 3 at (T,P,D) = (1,1,4): each rank's model-state
 * bytes (parameters, accumulated gradients, reduced gradients kept, AdamW
 * moments: dtrain_ptrainer_memory, the bytes the trainer allocated on the
 * kernel backend) against the formula of dtrain_parallel.h (fp32, n local
 * parameters: 4n + 4n + 4n + 8n at stage 0, 4n + 4n + 4n + 8n/D at stage 1,
 * 4n + 4n + 4n/D + 8n/D at stage 2, 16n/D + 8 bytes a parameter of wte
 * and of the largest other unit (their gathered weights and gradients) at
 * stage 3, and with its prefetch 4 bytes more of the largest other unit),
 * the largest rank's ratio, rank 0's median step time against stage 0's,
 * and its median data-parallel communication not hidden behind backward
 * (DP ms; stage 3: its reduce-scatters and the time it waited for
 * parameter gathers, "gather ms", with the units gathered ahead in a step).
 * Stage 3 runs twice: with the prefetch (the default: the next unit's
 * gather in a thread while the current one computes) and without
 * ("3 sync", --zero-prefetch 0).
 *
 * Part 2, recompute none, selective, full at (1,1,1) and (1,2,1) m=4 (the
 * pipeline keeps up to P micro-batches in flight on stage 0): rank 0's
 * activation bytes (all allocated up front: the peak) and its median step
 * time, each against none's.
 *
 * Part 3, sequence parallelism off and on at (T,P,D) = (2,1,1) and
 * (4,1,1): rank 0's activation bytes and median step time, each against
 * the same layout without it.
 *
 *   dtrain-bench-memory [--steps N] [--warmup N] [--repeat N]
 *
 * The model is L=4 C=256 NH=4 V=256, global batch 8 x 64, 1 thread per rank
 * (bench_parallel.h: local processes, real communicators). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_parallel.h"
#include "dtrain_blas.h"
#include "dtrain_parse.h"

/* One row of an activations table: rank 0's peak activation bytes and step
 * time, and both against the table's first row (is_base: this is it). */
static void print_activations_row(const char *label, const struct bench_rank *r0, int is_base, double *base_act,
                                  double *base_ms)
{
    double act = (double)r0->mem.activations, ms = r0->step_ms;
    if (is_base) {
        *base_act = act;
        *base_ms = ms;
    }
    printf("%-10s %14.0f %8.3f %10.1f %7.2fx\n", label, act, act / *base_act, ms, ms / *base_ms);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (dtrain_blas_select("dtrain-bench-memory", argv) != 0) /* the kernels the trainer would run */
        return 2;
    int steps = 5, warmup = 2, repeats = 2;
    char err[512];
    for (int i = 1; i < argc; i++) {
        long v;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int good = val != NULL, *to = NULL;
        i++;
        if (good && strcmp(a, "--steps") == 0)
            to = &steps;
        else if (good && strcmp(a, "--warmup") == 0)
            to = &warmup;
        else if (good && strcmp(a, "--repeat") == 0)
            to = &repeats;
        good = to != NULL && dtrain_parse_int(val, to == &warmup ? 0 : 1, 64, a, &v, err, sizeof err) == 0;
        if (!good) {
            fprintf(stderr, "dtrain-bench-memory: bad option %s (usage: [--steps N] [--warmup N] [--repeat N])\n", a);
            return 2;
        }
        *to = (int)v;
    }
    char dir[] = "/tmp/dtrain-bench-memory-XXXXXX", path[128];
    if (mkdtemp(dir) == NULL) {
        perror("dtrain-bench-memory: mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    if (bench_tokens(path, 200000, 2, err, sizeof err) != 0) {
        fprintf(stderr, "dtrain-bench-memory: %s\n", err);
        return 1;
    }
    struct dtrain_train_config cfg;
    dtrain_train_config_defaults(&cfg);
    snprintf(cfg.data, sizeof cfg.data, "%s", path);
    cfg.model = (struct dtrain_model_config){.max_seq_len = 64, .vocab_size = 256, .padded_vocab_size = 256,
                                            .num_layers = 4, .num_heads = 4, .channels = 256};
    cfg.batch = 8;
    cfg.seq = 64;
    cfg.threads = 1;
    cfg.log_every = 0;
    if (dtrain_train_config_finish(&cfg, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, "dtrain-bench-memory: %s\n", err);
        return 1;
    }
    int rc = 0;
    struct bench_rank ranks[4];
    printf("ZeRO at (T,P,D)=(1,1,4): L=4 C=256 NH=4 V=256, global batch 8 x 64, 1 thread per rank, %d CPUs; "
           "medians of %d steps after %d, best of %d runs\n", bench_cpus(), steps, warmup, repeats);
    printf("%-7s %14s %14s %14s %14s %14s %8s %10s %8s %8s %9s %6s\n", "stage", "params B", "grads B", "reduced B",
           "AdamW B", "state B", "formula", "step ms", "vs 0", "DP ms", "gather ms", "ahead");
    double base = 0.0;
    for (int row = 0; row <= 4; row++) {
        struct dtrain_train_config c = cfg;
        int z = row < 4 ? row : 3; /* row 4: stage 3 without the prefetch */
        c.zero_stage = z;
        c.zero_prefetch = row < 4;
        if (bench_run(&c, 1, 1, 4, warmup, steps, repeats, ranks, err, sizeof err) != 0) {
            fprintf(stderr, "dtrain-bench-memory: ZeRO stage %d: %s\n", z, err);
            rc = 1;
            continue;
        }
        double worst = 0.0; /* the largest rank's measured / formula */
        for (int r = 0; r < 4; r++) {
            double x = (double)ranks[r].mem.model_state / (double)ranks[r].mem.model_state_formula;
            if (x > worst)
                worst = x;
        }
        const struct dtrain_ptrainer_memory *m = &ranks[0].mem;
        if (z == 0)
            base = ranks[0].step_ms;
        printf("%-7s %14zu %14zu %14zu %14zu %14zu %8.4f %10.1f %7.2fx %8.1f %9.1f %6d\n",
               row < 4 ? (const char *[]){"0", "1", "2", "3"}[row] : "3 sync", m->params, m->grads, m->reduced_grads,
               m->optimizer, m->model_state, worst, ranks[0].step_ms, ranks[0].step_ms / base, ranks[0].exposed_ms,
               ranks[0].gather_ms, ranks[0].prefetched);
        fflush(stdout);
    }
    static const char *const modes[] = {"none", "selective", "full"};
    static const struct { int pp, micro; } layouts[] = {{1, 1}, {2, 4}};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        printf("\nrecompute at (T,P,D)=(1,%d,1) m=%d (rank 0)\n%-10s %14s %8s %10s %8s\n", layouts[l].pp,
               layouts[l].micro, "mode", "activations B", "vs none", "step ms", "vs none");
        double base_act = 0.0, base_ms = 0.0;
        for (int mode = 0; mode < 3; mode++) {
            struct dtrain_train_config c = cfg;
            c.recompute = mode;
            c.micro_batches = layouts[l].micro;
            if (bench_run(&c, 1, layouts[l].pp, 1, warmup, steps, repeats, ranks, err, sizeof err) != 0) {
                fprintf(stderr, "dtrain-bench-memory: recompute %s: %s\n", modes[mode], err);
                rc = 1;
                continue;
            }
            print_activations_row(modes[mode], &ranks[0], mode == 0, &base_act, &base_ms);
        }
    }
    for (int tp = 2; tp <= 4; tp *= 2) {
        printf("\nsequence parallelism at (T,P,D)=(%d,1,1) (rank 0)\n%-10s %14s %8s %10s %8s\n", tp, "SP",
               "activations B", "vs off", "step ms", "vs off");
        double base_act = 0.0, base_ms = 0.0;
        for (int sp = 0; sp <= 1; sp++) {
            struct dtrain_train_config c = cfg;
            c.sequence_parallel = sp;
            if (bench_run(&c, tp, 1, 1, warmup, steps, repeats, ranks, err, sizeof err) != 0) {
                fprintf(stderr, "dtrain-bench-memory: T=%d sequence parallel %d: %s\n", tp, sp, err);
                rc = 1;
                continue;
            }
            print_activations_row(sp ? "on" : "off", &ranks[0], sp == 0, &base_act, &base_ms);
        }
    }
    unlink(path);
    rmdir(dir);
    return rc;
}
