/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What dtrain-bench-pipeline and dtrain-bench-layouts share: a T x P x D
 * run of the parallel trainer as local processes (tests/parallel/
 * local_boot.h: ids made with the launcher's code, real communicators),
 * timed step by step, and a synthetic token file. */
#ifndef DTRAIN_BENCH_PARALLEL_H
#define DTRAIN_BENCH_PARALLEL_H

#include <stddef.h>

#include "bench_util.h"
#include "dtrain_parallel.h"

/* One rank's figures over the measured steps. */
struct bench_rank {
    int ok;
    char err[256];
    int pp_rank;
    double step_ms;     /* median step time */
    double compute_ms;  /* median time in forward and backward */
    double wait_ms;     /* median time blocked in pipeline sends and receives */
    double exposed_ms;  /* median wait for gradient buckets after backward */
    double gather_ms;   /* ZeRO-3: median time of that in parameter gathers */
    int prefetched;     /* ZeRO-3: gathers that ran ahead in the last step */
    float last_loss;
    struct dtrain_ptrainer_memory mem; /* its memory (dtrain_ptrainer_memory) */
};

/* Run `warmup` then `steps` steps of cfg in layout T x P x D (cfg.steps is
 * ignored), `repeats` times, and keep the run whose rank 0 had the lowest
 * median step time (the one least disturbed by other work on the machine);
 * ranks[world] receives that run's figures.  Returns 0, or -1 with one line
 * in err. */
int bench_run(const struct dtrain_train_config *cfg, int tp, int pp, int dp, int warmup, int steps, int repeats,
              struct bench_rank *ranks, char *err, size_t errlen);

/* A token file of n random byte tokens (a pure function of seed) at path. */
int bench_tokens(const char *path, size_t n, unsigned seed, char *err, size_t errlen);

/* CPUs this process may run on. */
int bench_cpus(void);

/* An option's whole number in [min, max] into *out: 0, or -1 after one
 * line "prog: what is wrong" on stderr. */
int bench_parse_opt(const char *prog, const char *name, const char *text, long min, long max, long *out);

#endif
