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
 *
 * ZeRO (stages 1-3): for D = 8, 64 and 512 at T=2 P=2 every DP rank d
 * writes the d-th 1/D of each run its (tp, pp) slice owns (the trainer
 * cuts 1/D of every bucket instead: the same spread, each rank's part in
 * every D-th of the slice), so every shard holds runs and a rank's slice
 * lies in all D shards of its (tp, pp).  Baseline: the load as it was
 * (sckpt_load_pieces with the trainer's pieces for one rank: its slice's
 * parameters and its share of the moments): W shards opened.  Now: the DP
 * group's load (sckpt_read_group_part, the read of
 * dtrain_sckpt_resume_group), run for every member of one DP group: the
 * shards each opens and the bytes each reads, and what each receives from
 * the others afterwards (their parts, one broadcast each).  The three
 * stages load the same pieces (dtrain_ft_pieces: the slice's parameters,
 * the rank's share of the moments; stage 3 keeps only its share of the
 * parameters after the upload), so one row stands for all three.
 * Usage: dtrain-bench-ckpt-open [DIR]  (default: a fresh folder in /dev/shm,
 * else /tmp; removed afterwards). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "parallel/dtrain_shard.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_train.h"
#include "ckpt/sckpt_internal.h"
#include "dtrain_clock.h"

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
static int slice_runs(const struct dtrain_model_config *model, int T, int P, int tp, int pp, int owned_only,
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
    double t0 = dtrain_clock_s();
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
    double secs = dtrain_clock_s() - t0;
    free(m.shards);
    printf("%6d %4d %4d %4d | %8d %12.1f %8llu | %8.0fx | %10.3f\n", W, T, P, D, W, (double)total / W,
           (unsigned long long)most, (double)W / ((double)total / W), secs * 1e3 / W);
    return 0;
}

/* The d-th 1/D of each owned run of rank (tp, pp)'s slice: its ZeRO part. */
static int zero_part(const struct runs *owned, int D, int d, struct runs *out)
{
    memset(out, 0, sizeof *out);
    out->p = malloc((owned->n + 1) * sizeof *out->p);
    if (out->p == NULL)
        return -1;
    for (size_t i = 0; i < owned->n; i++) {
        const struct dtrain_sckpt_piece *r = &owned->p[i];
        uint64_t lo = r->count * (uint64_t)d / (uint64_t)D, hi = r->count * (uint64_t)(d + 1) / (uint64_t)D;
        if (hi > lo)
            out->p[out->n++] = (struct dtrain_sckpt_piece){r->whole + lo, hi - lo, r->params + lo, r->m + lo,
                                                          r->v + lo};
    }
    return 0;
}

/* One ZeRO world of T=2 P=2 and D DP ranks: write, commit, then load as
 * before (one rank) and as a DP group (every member of rank 0's group). */
static int one_zero_world(const char *base, const struct dtrain_train_config *cfg, int D)
{
    const int T = 2, P = 2, W = T * P * D;
    const uint64_t step = 1;
    char dir[512], tmp[DTRAIN_PATH_MAX], final[DTRAIN_PATH_MAX], err[512], why[512];
    snprintf(dir, sizeof dir, "%s/z%d", base, W);
    if (mkdir(dir, 0700) != 0 || sckpt_step_path(tmp, sizeof tmp, dir, step, ".tmp") != 0 ||
        sckpt_step_path(final, sizeof final, dir, step, "") != 0)
        return -1;
    struct record *all = calloc((size_t)W, sizeof *all);
    struct runs owned[4], slice;
    if (all == NULL)
        return -1;
    for (int tp = 0; tp < T; tp++)
        for (int pp = 0; pp < P; pp++)
            if (slice_runs(&cfg->model, T, P, tp, pp, 1, &owned[tp + T * pp]) != 0)
                return -1;
    struct dtrain_sckpt_layout L = {.pos = dtrain_grid_pos_of(T, P, D, 0), .zero1 = 1, .virtual_stages = 1};
    for (int r = 0; r < W; r++) {
        struct dtrain_sckpt_layout me = {.pos = dtrain_grid_pos_of(T, P, D, r), .zero1 = 1, .virtual_stages = 1};
        struct runs part;
        if (zero_part(&owned[me.tp_rank + T * me.pp_rank], D, me.dp_rank, &part) != 0)
            return -1;
        struct dtrain_sckpt_written w;
        if (dtrain_sckpt_write_shard(dir, cfg, &me, step, 0, part.p, part.n, 0, &w) != DTRAIN_OK) {
            fprintf(stderr, "dtrain-bench-ckpt-open: rank %d: %s\n", r, w.why);
            return -1;
        }
        all[r] = (struct record){w.error, 0, w.bytes, w.floats, w.checksum};
        free(part.p);
    }
    if (sckpt_commit(dir, tmp, final, cfg, &L, step, 0, NULL, all, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, "dtrain-bench-ckpt-open: %s\n", err);
        return -1;
    }
    free(all);
    struct manifest m;
    if (sckpt_read_manifest(final, step, cfg, &m, why, sizeof why) != GOOD) {
        fprintf(stderr, "dtrain-bench-ckpt-open: %s\n", why);
        return -1;
    }
    /* before: rank 0 (tp 0, pp 0, dp 0) with the trainer's pieces: the
     * slice's parameters, its share of the moments */
    if (slice_runs(&cfg->model, T, P, 0, 0, 0, &slice) != 0)
        return -1;
    struct runs share;
    if (zero_part(&slice, D, 0, &share) != 0)
        return -1;
    size_t nb = slice.n + share.n;
    struct dtrain_sckpt_piece *before = malloc((nb + 1) * sizeof *before);
    if (before == NULL) /* (the pieces share the slice's one buffer: the values are not looked at) */
        return -1;
    for (size_t i = 0; i < slice.n; i++)
        before[i] = (struct dtrain_sckpt_piece){slice.p[i].whole, slice.p[i].count, slice.p[i].params, NULL, NULL};
    for (size_t i = 0; i < share.n; i++)
        before[slice.n + i] = (struct dtrain_sckpt_piece){share.p[i].whole, share.p[i].count, NULL, share.p[i].m,
                                                          share.p[i].v};
    uint64_t b_opened = 0, b_bytes = 0;
    if (sckpt_load_pieces(final, &m, before, nb, &b_bytes, &b_opened, why, sizeof why) != GOOD) {
        fprintf(stderr, "dtrain-bench-ckpt-open: before: %s\n", why);
        return -1;
    }
    /* now: every member of the DP group of (tp 0, pp 0) reads its part of the slice */
    uint64_t most_open = 0, most_bytes = 0, sum_part = 0, *part = calloc((size_t)D, 8);
    if (part == NULL)
        return -1;
    for (int d = 0; d < D; d++) {
        struct sckpt_segs filled = {0};
        uint64_t opened = 0, bytes = 0;
        if (sckpt_read_group_part(final, &m, d, D, slice.p, slice.n, &filled, &bytes, &opened, why, sizeof why) !=
            GOOD) {
            fprintf(stderr, "dtrain-bench-ckpt-open: member %d: %s\n", d, why);
            return -1;
        }
        part[d] = 16 * filled.n + 12 * filled.floats;
        sum_part += part[d];
        most_open = opened > most_open ? opened : most_open;
        most_bytes = bytes > most_bytes ? bytes : most_bytes;
        free(filled.s);
    }
    uint64_t most_recv = 0;
    for (int d = 0; d < D; d++)
        most_recv = sum_part - part[d] > most_recv ? sum_part - part[d] : most_recv;
    printf("%6d %4d %4d %4d | %8llu %8llu %7.0fx | %10llu %10llu %7.1fx | %11llu\n", W, T, P, D,
           (unsigned long long)b_opened, (unsigned long long)most_open, (double)b_opened / (double)most_open,
           (unsigned long long)b_bytes, (unsigned long long)most_bytes, (double)b_bytes / (double)most_bytes,
           (unsigned long long)most_recv);
    free(part);
    free(before);
    free(share.p);
    free(slice.p);
    free(slice.buf);
    for (int i = 0; i < T * P; i++) {
        free(owned[i].p);
        free(owned[i].buf);
    }
    free(m.shards);
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
    cfg.model = (struct dtrain_model_config){.num_layers = 16, .channels = 64, .num_heads = 8, .vocab_size = 256,
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
           "> 0); verification is split across the ranks apart (1 shard each).\n\n");
    printf("dtrain-bench-ckpt-open: ZeRO stages 1-3 (every DP rank's shard holds 1/D of its slice): shards opened "
           "and bytes read per rank\n");
    printf("%6s %4s %4s %4s | %8s %8s %8s | %10s %10s %8s | %11s\n", "ranks", "T", "P", "D", "opened", "now max",
           "less", "bytes read", "now max", "less", "DP recv max");
    static const int dps[] = {8, 64, 512};
    for (size_t i = 0; i < sizeof dps / sizeof dps[0] && rc == 0; i++)
        rc = one_zero_world(base, &cfg, dps[i]);
    printf("opened / bytes read = one rank's load as it was (every shard its slice is in: all W); now max = the\n"
           "most any member of a DP group opens and reads in the group load (dtrain_sckpt_resume_group); DP recv\n"
           "max = the most bytes a member then receives from the others (their parts: the slice's parameters and\n"
           "moments, 12 bytes a value, plus 16 bytes a run).\n");
    nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc == 0 ? 0 : 1;
}
