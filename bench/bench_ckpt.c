/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-ckpt: the step-time overhead of checkpointing every N steps
 * in the fault-tolerant loop (dtrain_ft.h), against the same run without
 * checkpoints, measured in the same run: none, synchronous (the shared
 * folder, the step blocks for the whole write), in the background
 * (--ckpt-async), and the node-local tier with peer copies, synchronous
 * and in the background (two nodes: the ranks' bs->node and
 * SLURMD_NODENAME set as Slurm would, the stand-in for a multi-node step;
 * the copies and the training's collectives travel over TCP between the
 * two "nodes": these are measured against none on two nodes).
 *
 * W ranks (local processes with real communicators: tests/parallel/
 * local_boot.h) train a GPT-2 (T=1 P=1 D=W, ZeRO-1) for S steps.  A run's
 * step time is (time of the last step - time of the first) / (S - 1) from
 * its metrics file: every periodic checkpoint's cost lands in the steps
 * (the final one, after the last step, is outside).  The modes run in
 * turn, --repeat times; each mode's median.
 *
 *   bench/dtrain-bench-ckpt [--ranks W] [--layers L] [--channels C] [--steps S] [--every N] [--repeat R] [--dir DIR]
 *
 * Prints each mode's step time (median), the checkpoint size, and the
 * overhead against none: the median of each round's overhead against that
 * round's run without checkpoints (the modes interleaved, so a slow spell
 * hits all), the rounds' range beside it, and for the background modes
 * whether the median is under the 5% target. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_parallel.h"
#include "bench_util.h"
#include "dtrain_blas.h"
#include "dtrain_fault.h"
#include "trainer/dtrain_ft.h"
#include "dtrain_parse.h"
#include "local_boot.h"

#define PROG "dtrain-bench-ckpt"
#define TARGET_OVERHEAD 0.05 /* a checkpoint in the background: under 5% of the step time */

/* The node-local modes run on two "nodes" (TCP between them), so they are
 * measured against none on two nodes. */
enum mode { NONE, SYNC, ASYNC, NONE2, LOCAL_SYNC, LOCAL_ASYNC, MODES };
static const char *const mode_names[MODES] = {
    "none", "synchronous, shared folder", "background, shared folder", "none, 2 nodes",
    "synchronous, node-local + peer copy", "background, node-local + peer copy",
};

struct job {
    struct dtrain_train_config cfg;
    int nodes;
};

struct result {
    int ok;
    char err[256];
    struct dtrain_ft_summary sum;
};

static int rank_main(struct dtrain_bootstrap *bs, void *area, void *ctx)
{
    const struct job *j = ctx;
    struct result *res = area;
    struct dtrain_comms comms;
    struct dtrain_comm_options o;
    struct dtrain_ptrainer *t = NULL;
    struct dtrain_fault fault;
    atomic_int abort_flag;
    atomic_init(&abort_flag, 0);
    if (j->nodes > 0) {
        char name[32];
        bs->node = bs->rank * j->nodes / bs->world_size;
        snprintf(name, sizeof name, "node%d", bs->node);
        setenv("SLURMD_NODENAME", name, 1);
    }
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = 600000;
    o.abort_flag = &abort_flag;
    if (dtrain_comm_init_all(bs, &o, &comms, NULL, res->err, sizeof res->err) != DTRAIN_OK)
        return 1;
    int rc = dtrain_fault_init(&fault, PROG, bs->rank, res->err, sizeof res->err) == 0 ? DTRAIN_OK : DTRAIN_ERR_INPUT;
    if (rc == DTRAIN_OK)
        rc = dtrain_ptrainer_create(&j->cfg, bs, &comms, &t, res->err, sizeof res->err);
    FILE *quiet = fopen("/dev/null", "w");
    if (rc == DTRAIN_OK)
        rc = dtrain_ft_run(t, &j->cfg, bs, &comms, &abort_flag, &fault, quiet, &res->sum, res->err, sizeof res->err);
    if (quiet != NULL)
        fclose(quiet);
    res->ok = rc == DTRAIN_OK;
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return rc == DTRAIN_OK ? 0 : 1;
}

/* Mean step time (ms) from a metrics file's "time" fields; -1 when short. */
static double step_ms(const char *path, long steps)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    double first = -1, last = -1;
    long n = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "\"time\": ");
        if (p == NULL)
            continue;
        double t = strtod(p + 8, NULL);
        if (n++ == 0)
            first = t;
        last = t;
    }
    if (f != NULL)
        fclose(f);
    return n == steps && n > 1 ? 1e3 * (last - first) / (double)(n - 1) : -1.0;
}


int main(int argc, char **argv)
{
    if (dtrain_blas_select(PROG, argv) != 0) /* the kernels the trainer would run */
        return 2;
    long ranks = 2, layers = 4, channels = 256, steps = 31, every = 5, repeat = 3;
    const char *base = NULL;
    static const struct option longopts[] = {
        {"ranks", required_argument, NULL, 'r'}, {"layers", required_argument, NULL, 'l'},
        {"channels", required_argument, NULL, 'c'}, {"steps", required_argument, NULL, 's'},
        {"every", required_argument, NULL, 'e'}, {"repeat", required_argument, NULL, 'n'},
        {"dir", required_argument, NULL, 'd'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "r:l:c:s:e:n:d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r': if (bench_parse_opt(PROG, "--ranks", optarg, 2, LOCAL_BOOT_MAX_WORLD, &ranks) != 0) return 2; break;
        case 'l': if (bench_parse_opt(PROG, "--layers", optarg, 1, 96, &layers) != 0) return 2; break;
        case 'c': if (bench_parse_opt(PROG, "--channels", optarg, 64, 4096, &channels) != 0) return 2; break;
        case 's': if (bench_parse_opt(PROG, "--steps", optarg, 3, 100000, &steps) != 0) return 2; break;
        case 'e': if (bench_parse_opt(PROG, "--every", optarg, 1, 100000, &every) != 0) return 2; break;
        case 'n': if (bench_parse_opt(PROG, "--repeat", optarg, 1, 99, &repeat) != 0) return 2; break;
        case 'd': base = optarg; break;
        case 'h':
            printf("usage: " PROG " [--ranks W] [--layers L] [--channels C] [--steps S] [--every N] [--repeat R] "
                   "[--dir DIR]\nStep-time overhead of a checkpoint every N steps: none, synchronous, in the "
                   "background, node-local with peer copies (same run).\n");
            return 0;
        default:
            fprintf(stderr, PROG ": unknown option (see " PROG " --help)\n");
            return 2;
        }
    }
    if (ranks % 2 != 0) {
        fprintf(stderr, PROG ": --ranks must be even (the node-local modes put half the ranks on each of 2 nodes)\n");
        return 2;
    }
    char top[512], err[512], cmd[2000];
    snprintf(top, sizeof top, "%s/dtrain-bench-ckpt.XXXXXX", base != NULL ? base : "/tmp");
    if (mkdtemp(top) == NULL) {
        fprintf(stderr, PROG ": cannot make a folder in %s: %s\n", base != NULL ? base : "/tmp", strerror(errno));
        return 1;
    }
    struct job j = {0};
    dtrain_train_config_defaults(&j.cfg);
    snprintf(j.cfg.data, sizeof j.cfg.data, "%s/tokens.bin", top);
    if (bench_tokens(j.cfg.data, 1u << 20, 7, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    j.cfg.model = (struct dtrain_model_config){.max_seq_len = 64, .vocab_size = 256, .padded_vocab_size = 256,
                                              .num_layers = (int)layers, .num_heads = 4, .channels = (int)channels};
    j.cfg.batch = 4;
    j.cfg.seq = 64;
    j.cfg.steps = steps;
    j.cfg.threads = 1;
    j.cfg.log_every = 0;
    j.cfg.zero_stage = 1;
    j.cfg.comm_timeout = 600;
    j.cfg.ckpt_keep = 2;
    if (dtrain_train_config_finish(&j.cfg, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    double ms[MODES][99];
    unsigned long long bytes = 0;
    struct result res[LOCAL_BOOT_MAX_WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD];
    printf("checkpoint overhead: %ld ranks (T=1 P=1 D=%ld, ZeRO-1), model L=%ld C=%ld V=256, B=4 T=64, %ld steps, a "
           "checkpoint every %ld; folder %s; median of %ld\n", ranks, ranks, layers, channels, steps, every, top, repeat);
    fflush(stdout);
    for (long r = 0; r < repeat; r++) {
        for (int m = 0; m < MODES; m++) {
            struct job run = j;
            run.nodes = m >= NONE2 ? 2 : 0;
            run.cfg.checkpoint_every = m == NONE || m == NONE2 ? 0 : every;
            run.cfg.ckpt_async = m == ASYNC || m == LOCAL_ASYNC;
            if (m != NONE && m != NONE2)
                snprintf(run.cfg.ckpt_dir, sizeof run.cfg.ckpt_dir, "%s/shared", top);
            if (m >= LOCAL_SYNC)
                snprintf(run.cfg.ckpt_local_dir, sizeof run.cfg.ckpt_local_dir, "%s/local/%%n", top);
            snprintf(run.cfg.metrics, sizeof run.cfg.metrics, "%s/metrics.jsonl", top);
            memset(res, 0, sizeof res);
            if (local_boot_run(1, 1, (int)ranks, rank_main, &run, sizeof res[0], res, codes, 3600, err, sizeof err) != 0 ||
                !res[0].ok) {
                fprintf(stderr, PROG ": %s: %s%s%s\n", mode_names[m], err, res[0].err[0] ? ": " : "", res[0].err);
                return 1;
            }
            ms[m][r] = step_ms(run.cfg.metrics, steps);
            if (m == SYNC)
                bytes = res[0].sum.ckpt_bytes;
            if (ms[m][r] < 0) {
                fprintf(stderr, PROG ": %s: %s has not %ld steps with a time\n", mode_names[m], run.cfg.metrics, steps);
                return 1;
            }
            snprintf(cmd, sizeof cmd, "rm -rf '%s/shared' '%s/local' '%s/metrics.jsonl'", top, top, top);
            if (system(cmd) != 0)
                fprintf(stderr, PROG ": could not empty %s\n", top);
        }
    }
    /* Each round's overhead against the same round's run without
     * checkpoints (the modes of a round run back to back, so a slow spell
     * of the machine moves both): their median is the figure, their range
     * the noise around it. */
    double over[MODES][99];
    for (int m = 0; m < MODES; m++)
        for (long r = 0; r < repeat; r++)
            over[m][r] = ms[m][r] / ms[m >= NONE2 ? NONE2 : NONE][r] - 1.0;
    printf("  checkpoint: %.1f MB (parameters, m and v: 12 bytes per parameter, all shards)\n", 1e-6 * (double)bytes);
    for (int m = 0; m < MODES; m++) {
        double med = bench_median(ms[m], (int)repeat), ov = bench_median(over[m], (int)repeat);
        char verdict[192] = "", range[64] = ""; /* the background modes' target (doc/fault-tolerance.md) */
        if (m == ASYNC || m == LOCAL_ASYNC)
            snprintf(verdict, sizeof verdict, " (target <= %.0f%%: %s)", 100.0 * TARGET_OVERHEAD,
                     bench_verdict_overhead(ov, TARGET_OVERHEAD));
        if (repeat > 1 && m != NONE && m != NONE2) /* over[m] is sorted now (bench_median) */
            snprintf(range, sizeof range, " [rounds %+.1f%% to %+.1f%%]", 100.0 * over[m][0],
                     100.0 * over[m][repeat - 1]);
        printf("  %-38s %8.2f ms/step   overhead %+6.1f%%%s%s%s\n", mode_names[m], med, 100.0 * ov, range,
               m > NONE2 ? " (against none, 2 nodes)" : "", verdict);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    if (system(cmd) != 0)
        fprintf(stderr, PROG ": could not remove %s\n", top);
    return 0;
}
