/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-pipeline: the measured 1F1B pipeline bubble against the
 * ideal (P-1)/(m+P-1), and that of interleaved 1F1B (V virtual stages per
 * stage, --virtual) next to plain 1F1B at the same P and m.
 *
 * P stages (T = D = 1) run as local processes (bench_parallel.h) on a model
 * whose stages cost about the same (L = 8 blocks of C = 256, a small
 * vocabulary); each micro-batch is one sequence of 64 tokens (--seq), so a step of
 * m micro-batches does m times the work of one.  Per step, each stage
 * times its forwards and backwards (compute) and the pipeline's span (the
 * longest stage's schedule from first action to last); a stage's bubble is
 * 1 - compute / span, the time it had nothing to do.  Medians over the
 * measured steps; the figure is the mean over the stages.
 *
 * Two ways to say it: as a fraction of the step (bubble / span; ideal
 * (P-1)/(V*m+P-1)), and relative to the ideal, bubble-free time (bubble /
 * compute = span / compute - 1; ideal (P-1)/(V*m), Megatron's figure for
 * the interleaved schedule, (P-1)/m for plain 1F1B).  V = 1 is plain 1F1B;
 * V > 1 runs only where m is a multiple of P (Megatron's condition).
 *
 *   dtrain-bench-pipeline [--stages P] [--micro 1,2,4,8] [--virtual 1,2] [--seq T] [--steps N] [--warmup N]
 *                         [--repeat N]
 *
 * --seq sets the tokens of a micro-batch (default 64): the schedule's
 * point-to-point sends cost about the same whatever the compute, so longer
 * micro-batches show the schedule's own bubble with less of the transfers
 * in it (V = 2 makes twice the sends).
 *
 * Each (P, m) runs --repeat times (default 3) and the least disturbed run
 * (lowest median step time) is shown: the machine may be shared.
 *
 * Stages beyond the CPUs this process may use time-share them and their
 * idle time fills with the others' work: the default is P = 2, and P = 4
 * too when 4 CPUs are there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_parallel.h"
#include "dtrain_blas.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pipeline.h"

#define MAX_MICRO 16

static int parse_list(const char *text, int *out, int max)
{
    int n = 0;
    char buf[128], err[128];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (n == max || dtrain_parse_int(tok, 1, 64, "--micro", &v, err, sizeof err) != 0)
            return -1;
        out[n++] = (int)v;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (dtrain_blas_select("dtrain-bench-pipeline", argv) != 0) /* the kernels the trainer would run */
        return 2;
    int stages[2] = {2, 4}, nstages = bench_cpus() >= 4 ? 2 : 1;
    int micro[MAX_MICRO] = {1, 2, 4, 8}, nmicro = 4, steps = 5, warmup = 2, repeats = 3;
    int virt[MAX_MICRO] = {1, 2}, nvirt = 2, seq = 64;
    char err[512];
    for (int i = 1; i < argc; i++) {
        long v;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (val == NULL) {
            fprintf(stderr, "dtrain-bench-pipeline: %s needs a value\n", a);
            return 2;
        }
        i++;
        int good;
        if (strcmp(a, "--stages") == 0) {
            good = dtrain_parse_int(val, 1, 8, a, &v, err, sizeof err) == 0;
            stages[0] = (int)v;
            nstages = 1;
        } else if (strcmp(a, "--micro") == 0) {
            good = (nmicro = parse_list(val, micro, MAX_MICRO)) > 0;
        } else if (strcmp(a, "--virtual") == 0) {
            good = (nvirt = parse_list(val, virt, MAX_MICRO)) > 0;
        } else if (strcmp(a, "--seq") == 0) {
            good = dtrain_parse_int(val, 8, 1024, a, &v, err, sizeof err) == 0;
            seq = (int)v;
        } else if (strcmp(a, "--steps") == 0) {
            good = dtrain_parse_int(val, 1, 64, a, &v, err, sizeof err) == 0;
            steps = (int)v;
        } else if (strcmp(a, "--warmup") == 0) {
            good = dtrain_parse_int(val, 0, 64, a, &v, err, sizeof err) == 0;
            warmup = (int)v;
        } else if (strcmp(a, "--repeat") == 0) {
            good = dtrain_parse_int(val, 1, 64, a, &v, err, sizeof err) == 0;
            repeats = (int)v;
        } else {
            good = 0;
        }
        if (!good) {
            fprintf(stderr, "dtrain-bench-pipeline: bad option %s %s (usage: [--stages P] [--micro 1,2,4,8] "
                            "[--virtual 1,2] [--seq T] [--steps N] [--warmup N] [--repeat N])\n", a, val);
            return 2;
        }
    }
    char dir[] = "/tmp/dtrain-bench-pipeline-XXXXXX", path[128];
    if (mkdtemp(dir) == NULL) {
        perror("dtrain-bench-pipeline: mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    if (bench_tokens(path, 200000, 1, err, sizeof err) != 0) {
        fprintf(stderr, "dtrain-bench-pipeline: %s\n", err);
        return 1;
    }
    struct dtrain_train_config cfg;
    dtrain_train_config_defaults(&cfg);
    snprintf(cfg.data, sizeof cfg.data, "%s", path);
    cfg.model = (struct dtrain_model_config){.max_seq_len = seq, .vocab_size = 256, .padded_vocab_size = 256,
                                            .num_layers = 8, .num_heads = 4, .channels = 256};
    cfg.seq = seq;
    cfg.threads = 1;
    cfg.log_every = 0;
    if (dtrain_train_config_finish(&cfg, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, "dtrain-bench-pipeline: %s\n", err);
        return 1;
    }
    printf("1F1B bubble: L=8 C=256 NH=4 V=256, micro-batches of 1 x %d tokens, 1 thread per stage, %d CPUs; "
           "medians of %d steps after %d, best of %d runs\n", seq, bench_cpus(), steps, warmup, repeats);
    printf("bubble of the step: ideal (P-1)/(V*m+P-1), measured 1 - compute/span; relative to the ideal time: "
           "ideal (P-1)/(V*m), measured span/compute - 1 (means over the stages)\n");
    printf("%3s %3s %3s %10s %10s %8s %9s %9s %9s   %s\n", "P", "m", "V", "step ms", "span ms", "ideal", "measured",
           "ideal/id", "meas/id", "per stage: compute ms / bubble");
    int rc = 0;
    for (int si = 0; si < nstages; si++) {
        int P = stages[si];
        for (int mi = 0; mi < nmicro; mi++) {
            int m = micro[mi];
            for (int vi = 0; vi < nvirt; vi++) {
                int V = virt[vi];
                if (V > 1 && (P < 2 || m % P != 0 || cfg.model.num_layers % (P * V) != 0))
                    continue; /* interleaving needs m a multiple of P, P*V dividing the layers */
                struct bench_rank ranks[8];
                cfg.batch = m;
                cfg.micro_batches = m;
                cfg.virtual_stages = V;
                if (bench_run(&cfg, 1, P, 1, warmup, steps, repeats, ranks, err, sizeof err) != 0) {
                    fprintf(stderr, "dtrain-bench-pipeline: P=%d m=%d V=%d: %s\n", P, m, V, err);
                    rc = 1;
                    continue;
                }
                double span = 0.0, sum = 0.0, rel = 0.0;
                for (int s = 0; s < P; s++)
                    if (ranks[s].compute_ms + ranks[s].wait_ms > span)
                        span = ranks[s].compute_ms + ranks[s].wait_ms;
                char detail[256] = "";
                size_t used = 0;
                for (int s = 0; s < P; s++) {
                    double bubble = 1.0 - ranks[s].compute_ms / span;
                    sum += bubble;
                    rel += span / ranks[s].compute_ms - 1.0;
                    int w = snprintf(detail + used, sizeof detail - used, "%s%.1f / %.3f", s ? ", " : "",
                                     ranks[s].compute_ms, bubble);
                    if (w > 0 && (size_t)w < sizeof detail - used)
                        used += (size_t)w;
                }
                double measured = sum / P, ideal = dtrain_pipe_bubble_v(P, V, m);
                printf("%3d %3d %3d %10.1f %10.1f %8.3f %9.3f %9.3f %9.3f   %s\n", P, m, V, ranks[0].step_ms, span,
                       ideal, measured, (double)(P - 1) / ((double)V * m), rel / P, detail);
                fflush(stdout);
            }
        }
    }
    unlink(path);
    rmdir(dir);
    return rc;
}
