/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-layouts: each layout's step time against (1,1,1) at equal
 * total work.
 *
 * The same model (L=4 C=256 NH=4 V=256), the same global batch (8 x 64
 * tokens) and the same optimizer in every layout; each rank runs its
 * kernels on 1 thread (bench_parallel.h: local processes, real
 * communicators).  For each layout: rank 0's median step time and its
 * time in forward and backward (compute: with T > 1 it includes the
 * tensor-parallel all-reduces; the rest of the step is the pipeline's
 * waits, the gradient reduction and the update), the speedup
 * over (1,1,1) = t(1,1,1) / t(layout), and the speedup the machine allows,
 * min(ranks x (1 - the pipeline's ideal bubble), CPUs), so that the last
 * column, speedup / allowed, says how much the split itself costs
 * (communication, the tensor-parallel all-reduces, the bubble's excess).
 *
 *   dtrain-bench-layouts [--steps N] [--warmup N] [--zero-stage 0|1|2] [--dp-overlap 0|1] [--repeat N]
 *
 * Each layout runs --repeat times (default 3) and the least disturbed run
 * (lowest median step time) is shown: the machine may be shared.  (1,1,1),
 * the baseline, runs again after the others and its faster run divides the
 * speedups (rows printed at the end); speedup / allowed over 1 means the
 * baseline was measured slow, and says INVALID (bench_over_limit).
 *
 * More ranks than CPUs time-share them: on a 2-CPU machine the allowed
 * speedup of any layout is 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_parallel.h"
#include "bench_util.h"
#include "dtrain_blas.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pipeline.h"

struct layout {
    int tp, pp, dp, micro;
};

int main(int argc, char **argv)
{
    if (dtrain_blas_select("dtrain-bench-layouts", argv) != 0) /* the kernels the trainer would run */
        return 2;
    int steps = 5, warmup = 2, zero = 0, overlap = 1, repeats = 3;
    char err[512];
    for (int i = 1; i < argc; i++) {
        long v;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int good = val != NULL;
        i++;
        if (good && strcmp(a, "--steps") == 0) {
            good = dtrain_parse_int(val, 1, 64, a, &v, err, sizeof err) == 0;
            steps = (int)v;
        } else if (good && strcmp(a, "--warmup") == 0) {
            good = dtrain_parse_int(val, 0, 64, a, &v, err, sizeof err) == 0;
            warmup = (int)v;
        } else if (good && strcmp(a, "--zero-stage") == 0) {
            good = dtrain_parse_int(val, 0, 2, a, &v, err, sizeof err) == 0;
            zero = (int)v;
        } else if (good && strcmp(a, "--repeat") == 0) {
            good = dtrain_parse_int(val, 1, 64, a, &v, err, sizeof err) == 0;
            repeats = (int)v;
        } else if (good && strcmp(a, "--dp-overlap") == 0) {
            good = dtrain_parse_bool(val, a, &overlap, err, sizeof err) == 0;
        } else {
            good = 0;
        }
        if (!good) {
            fprintf(stderr, "dtrain-bench-layouts: bad option %s (usage: [--steps N] [--warmup N] [--zero-stage 0|1|2] "
                            "[--dp-overlap 0|1] [--repeat N])\n", a);
            return 2;
        }
    }
    char dir[] = "/tmp/dtrain-bench-layouts-XXXXXX", path[128];
    if (mkdtemp(dir) == NULL) {
        perror("dtrain-bench-layouts: mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    if (bench_tokens(path, 200000, 2, err, sizeof err) != 0) {
        fprintf(stderr, "dtrain-bench-layouts: %s\n", err);
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
    cfg.zero_stage = zero;
    cfg.dp_overlap = overlap;
    if (dtrain_train_config_finish(&cfg, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, "dtrain-bench-layouts: %s\n", err);
        return 1;
    }
    int cpus = bench_cpus();
    printf("layouts at equal work: L=4 C=256 NH=4 V=256, global batch 8 x 64, 1 thread per rank, ZeRO stage %d, "
           "DP overlap %s, %d CPUs; medians of %d steps after %d, best of %d runs\n", zero,
           overlap ? "on" : "off", cpus, steps, warmup, repeats);
    printf("%-12s %3s %6s %10s %11s %9s %9s %9s\n", "(T,P,D)", "m", "ranks", "step ms", "compute ms", "speedup",
           "allowed", "ratio");
    const struct layout layouts[] = {
        {1, 1, 1, 1}, {2, 1, 1, 1}, {1, 2, 1, 4}, {1, 1, 2, 1}, {2, 2, 1, 4}, {2, 2, 2, 2}, {1, 1, 8, 1},
    };
    enum { NLAYOUTS = sizeof layouts / sizeof layouts[0] };
    double ms[NLAYOUTS + 1] = {0}, compute_ms[NLAYOUTS] = {0};
    int rc = 0, invalid = 0;
    /* every layout, then (1,1,1) again: the baseline before and after the others */
    for (size_t i = 0; i <= NLAYOUTS; i++) {
        const struct layout *L = &layouts[i < NLAYOUTS ? i : 0];
        struct bench_rank ranks[8];
        cfg.micro_batches = L->micro;
        if (bench_run(&cfg, L->tp, L->pp, L->dp, warmup, steps, repeats, ranks, err, sizeof err) != 0) {
            fprintf(stderr, "dtrain-bench-layouts: (%d,%d,%d): %s\n", L->tp, L->pp, L->dp, err);
            rc = 1;
            continue;
        }
        ms[i] = ranks[0].step_ms;
        if (i < NLAYOUTS)
            compute_ms[i] = ranks[0].compute_ms;
    }
    double base = ms[NLAYOUTS] > 0.0 && (ms[0] <= 0.0 || ms[NLAYOUTS] < ms[0]) ? ms[NLAYOUTS] : ms[0];
    for (size_t i = 0; i < NLAYOUTS; i++) {
        const struct layout *L = &layouts[i];
        if (ms[i] <= 0.0 || base <= 0.0)
            continue;
        int world = L->tp * L->pp * L->dp;
        double busy = world * (1.0 - dtrain_pipe_bubble(L->pp, L->micro)); /* ranks at work, on average */
        double allowed = busy < cpus ? busy : cpus, ratio = base / ms[i] / allowed;
        char name[32], ratio_text[16];
        snprintf(name, sizeof name, "(%d,%d,%d)", L->tp, L->pp, L->dp);
        if (bench_over_limit(ratio))
            snprintf(ratio_text, sizeof ratio_text, "INVALID");
        else
            snprintf(ratio_text, sizeof ratio_text, "%.2f", ratio);
        invalid |= bench_over_limit(ratio);
        printf("%-12s %3d %6d %10.1f %11.1f %8.2fx %8.2fx %9s\n", name, L->micro, world, ms[i], compute_ms[i],
               base / ms[i], allowed, ratio_text);
    }
    printf("baseline (1,1,1): the faster of %.1f ms (first) and %.1f ms (again, last)%s%s\n", ms[0], ms[NLAYOUTS],
           invalid ? "; ratio over 1 (speedup above the allowed): " : "", invalid ? BENCH_INVALID : "");
    unlink(path);
    rmdir(dir);
    return rc;
}
