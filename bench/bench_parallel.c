/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Timed runs of the parallel trainer on local processes; see bench_parallel.h. */
#include "bench_parallel.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_data.h"
#include "dtrain_parse.h"
#include "dtrain_rng.h"
#include "local_boot.h"

#define MAX_STEPS 64

struct job {
    const struct dtrain_train_config *cfg;
    int warmup, steps;
};

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct job *j = ctx;
    struct bench_rank *r = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    double step[MAX_STEPS], compute[MAX_STEPS], wait[MAX_STEPS], exposed[MAX_STEPS], gather[MAX_STEPS];
    r->pp_rank = bs->pp_rank;
    if (local_boot_comms(bs, 60000, 0, &comms, NULL, r->err, sizeof r->err) != DTRAIN_OK)
        return 3;
    int rc = dtrain_ptrainer_create(j->cfg, bs, &comms, &t, r->err, sizeof r->err);
    if (rc == DTRAIN_OK)
        dtrain_ptrainer_memory(t, &r->mem);
    for (int s = 0; rc == DTRAIN_OK && s < j->warmup + j->steps; s++) {
        struct dtrain_pstep_result x;
        rc = dtrain_ptrainer_step(t, &x, r->err, sizeof r->err);
        if (s >= j->warmup) {
            step[s - j->warmup] = x.base.ms;
            compute[s - j->warmup] = x.compute_ms;
            wait[s - j->warmup] = x.pipe_wait_ms;
            exposed[s - j->warmup] = x.dp_exposed_ms;
            gather[s - j->warmup] = x.dp_gather_ms;
            r->prefetched = x.dp_prefetched;
        }
        r->last_loss = x.base.loss;
    }
    if (rc == DTRAIN_OK) {
        r->step_ms = bench_median(step, j->steps);
        r->compute_ms = bench_median(compute, j->steps);
        r->wait_ms = bench_median(wait, j->steps);
        r->exposed_ms = bench_median(exposed, j->steps);
        r->gather_ms = bench_median(gather, j->steps);
        r->ok = 1;
    }
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return r->ok ? 0 : 1;
}

int bench_run(const struct dtrain_train_config *cfg, int tp, int pp, int dp, int warmup, int steps, int repeats,
              struct bench_rank *ranks, char *err, size_t errlen)
{
    int codes[LOCAL_BOOT_MAX_WORLD], world = tp * pp * dp;
    struct bench_rank run[LOCAL_BOOT_MAX_WORLD];
    struct job j = {cfg, warmup, steps};
    if (steps < 1 || steps > MAX_STEPS || warmup < 0 || repeats < 1 || world > LOCAL_BOOT_MAX_WORLD) {
        snprintf(err, errlen, "steps %d (1 to %d), repeats %d, %d ranks (at most %d)", steps, MAX_STEPS, repeats,
                 world, LOCAL_BOOT_MAX_WORLD);
        return -1;
    }
    for (int i = 0; i < repeats; i++) {
        memset(run, 0, sizeof run);
        if (local_boot_run(tp, pp, dp, rank_main, &j, sizeof run[0], run, codes, 600, err, errlen) != 0) {
            for (int r = 0; r < world; r++)
                if (run[r].err[0]) {
                    snprintf(err, errlen, "rank %d: %s", r, run[r].err);
                    break;
                }
            return -1;
        }
        if (i == 0 || run[0].step_ms < ranks[0].step_ms)
            memcpy(ranks, run, sizeof run[0] * (size_t)world);
    }
    return 0;
}

int bench_tokens(const char *path, size_t n, unsigned seed, char *err, size_t errlen)
{
    uint16_t *tok = malloc(n * sizeof *tok);
    if (tok == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        tok[i] = (uint16_t)(dtrain_rng_bits(seed, 0, i) & 0xff);
    int rc = dtrain_tokens_write(path, tok, n, err, errlen);
    free(tok);
    return rc == DTRAIN_OK ? 0 : -1;
}

int bench_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

int bench_parse_opt(const char *prog, const char *name, const char *text, long min, long max, long *out)
{
    char err[256];
    if (dtrain_parse_int(text, min, max, name, out, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return -1;
    }
    return 0;
}
