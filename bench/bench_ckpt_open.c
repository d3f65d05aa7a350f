/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-ckpt-open: how many shard files one rank opens to load its
 * part of a sharded checkpoint, against the world size, without launching
 * the ranks.  For W = 64, 512 and 4096 ranks (T=8 P=8, D = W/64, ZeRO off:
 * DP rank 0 of each (tp, pp) writes its slice, the others an empty shard)
 * it writes every rank's real shard of a small GPT (16 layers, 64 channels)
 * with the checkpoint code (dtrain_sckpt_write_shard, then the manifest as
 * rank 0 commits it), reads the manifest once, and loads every rank's
 * pieces (its (tp, pp) slice: sckpt_load_pieces, the code a resume runs),
 * counting the shards each opens.  Baseline: a load opened every shard of
 * the world (W per rank), empty ones too; now those that hold runs (the
 * manifest's floats > 0).  Verification is split across the ranks apart
 * (shard i by rank i mod W: 1 per rank).
 * Usage: dtrain-bench-ckpt-open [DIR]  (default: a fresh folder in /dev/shm,
 * else /tmp; removed afterwards). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dtrain_shard.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_train.h"
#include "sckpt_internal.h"

struct runs {
    struct dtrain_sckpt_piece *p;
    size_t n, cap;
    int owned_only; /* save: the runs this rank owns (in_norm); load: all */
    float *buf;     /* params, m and v of the slice, zeros */
};

static void add_run(void *ctx, const struct dtrain_shard_run *run)
{
    struct runs *r = ctx;
    if (r->owned_only && !run->in_norm)
        return;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        struct dtrain_sckpt_piece *more = realloc(r->p, cap * sizeof *more);
        if (more == NULL)
            exit(1);
        r->p = more;
        r->cap = cap;
    }
    r->p[r->n++] = (struct dtrain_sckpt_piece){run->whole, run->count, r->buf + run->local, r->buf + run->local,
                                               r->buf + run->local};
}

static int by_whole(const void *a, const void *b)
{
    const struct dtrain_sckpt_piece *x = a, *y = b;
    return x->whole < y->whole ? -1 : x->whole > y->whole;
}

/* The runs of rank (tp, pp)'s slice: owned ones for its shard, all to load. */
static int slice_runs(const struct dtrain_gpt2_config *model, int T, int P, int tp, int pp, int owned_only,
                      struct runs *out)
{
    struct dtrain_shard s;
    char err[256];
    memset(out, 0, sizeof *out);
    if (dtrain_shard_plan_v(model, T, P, 1, tp, pp, &s, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, "dtrain-bench-ckpt-open: %s\n", err);
        return -1;
    }
    out->owned_only = owned_only;
    out->buf = calloc(s.count + 1, sizeof(float));
    if (out->buf == NULL)
        return -1;
    dtrain_shard_for_each_run(&s, add_run, out);
    qsort(out->p, out->n, sizeof *out->p, by_whole);
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One world of W ranks: write, commit, load everyone's part. */
static int one_world(const char *base, const struct dtrain_train_config *cfg, int W)
{
    const int T = 8, P = 8, D = W / (T * P);
    const uint64_t step = 1;
    char dir[512], tmp[DTRAIN_PATH_MAX], final[DTRAIN_PATH_MAX], err[512];
    snprintf(dir, sizeof dir, "%s/w%d", base, W);
    if (mkdir(dir, 0700) != 0 || sckpt_step_path(tmp, sizeof tmp, dir, step, ".tmp") != 0 ||
        sckpt_step_path(final, sizeof final, dir, step, "") != 0)
        return -1;
    struct record *all = calloc((size_t)W, sizeof *all);
    if (all == NULL)
        return -1;
    struct dtrain_sckpt_layout L = {.pos = dtrain_grid_pos_of(T, P, D, 0), .virtual_stages = 1};
    for (int r = 0; r < W; r++) {
        struct dtrain_sckpt_layout me = {.pos = dtrain_grid_pos_of(T, P, D, r), .virtual_stages = 1};
        int tp = me.tp_rank, dp = me.dp_rank, pp = me.pp_rank;
        struct runs save = {0};
        if (dp == 0 && slice_runs(&cfg->model, T, P, tp, pp, 1, &save) != 0)
            return -1;
        struct dtrain_sckpt_written w;
        if (dtrain_sckpt_write_shard(dir, cfg, &me, step, 0, save.p, save.n, 0, &w) != DTRAIN_OK) {
            fprintf(stderr, "dtrain-bench-ckpt-open: rank %d: %s\n", r, w.why);
            return -1;
        }
        all[r] = (struct record){w.error, 0, w.bytes, w.floats, w.checksum};
        free(save.p);
        free(save.buf);
    }
    if (sckpt_commit(dir, tmp, final, cfg, &L, step, 0, NULL, all, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, "dtrain-bench-ckpt-open: %s\n", err);
        return -1;
    }
    free(all);
    struct manifest m;
    char why[512];
    if (sckpt_read_manifest(final, step, cfg, &m, why, sizeof why) != GOOD) {
        fprintf(stderr, "dtrain-bench-ckpt-open: %s\n", why);
        return -1;
    }
    /* every rank's part, as a resume on the same layout loads it */
    uint64_t most = 0, total = 0, bytes = 0;
    double t0 = now_s();
    for (int r = 0; r < W; r++) {
        const struct dtrain_grid_pos at = dtrain_grid_pos_of(T, P, D, r);
        int tp = at.tp_rank, pp = at.pp_rank;
        struct runs load;
        uint64_t opened = 0;
        if (slice_runs(&cfg->model, T, P, tp, pp, 0, &load) != 0)
            return -1;
        int v = sckpt_load_pieces(final, &m, load.p, load.n, &bytes, &opened, why, sizeof why);
        free(load.p);
        free(load.buf);
        if (v != GOOD) {
            fprintf(stderr, "dtrain-bench-ckpt-open: rank %d: %s\n", r, why);
            return -1;
        }
        total += opened;
        if (opened > most)
            most = opened;
    }
    double secs = now_s() - t0;
    free(m.shards);
    printf("%6d %4d %4d %4d | %8d %12.1f %8llu | %8.0fx | %10.3f\n", W, T, P, D, W, (double)total / W,
           (unsigned long long)most, (double)W / ((double)total / W), secs * 1e3 / W);
    return 0;
}

int main(int argc, char **argv)
{
    char base[256];
    const char *root = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    if (argc > 1)
        snprintf(base, sizeof base, "%s/dtrain-bench-ckpt-open.XXXXXX", argv[1]);
    else
        snprintf(base, sizeof base, "%s/dtrain-bench-ckpt-open.XXXXXX", root);
    if (mkdtemp(base) == NULL) {
        perror("dtrain-bench-ckpt-open: mkdtemp");
        return 2;
    }
    struct dtrain_train_config cfg;
    dtrain_train_config_defaults(&cfg);
    cfg.model = (struct dtrain_gpt2_config){.num_layers = 16, .channels = 64, .num_heads = 8, .vocab_size = 256,
                                            .padded_vocab_size = 256, .max_seq_len = 16};
    cfg.batch = 1;
    cfg.seq = 16;
    printf("dtrain-bench-ckpt-open: shard files opened per rank to load its part (GPT 16 layers x 64 channels, "
           "ZeRO off)\n");
    printf("%6s %4s %4s %4s | %8s %12s %8s | %9s | %10s\n", "ranks", "T", "P", "D", "before", "now (mean)",
           "now max", "less", "ms/rank");
    static const int worlds[] = {64, 512, 4096};
    int rc = 0;
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0] && rc == 0; i++)
        rc = one_world(base, &cfg, worlds[i]);
    printf("before = every shard of the world (baseline); now = the shards that hold runs (the manifest's floats\n"
           "> 0); verification is split across the ranks apart (1 shard each).\n");
    nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc == 0 ? 0 : 1;
}
