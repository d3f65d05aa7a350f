/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What a checkpoint holds of this rank: the mapping from the parallel
 * trainer's state (parameters, AdamW moments) to checkpoint pieces, and one
 * checkpoint outside the loop; see dtrain_ft.h. */
#include "dtrain_ft.h"
#include "parallel/dtrain_dp.h"
#include "parallel/dtrain_lora.h"
#include "dtrain_grow.h"
#include "parallel/dtrain_shard.h"

#include <stdlib.h>
#include <string.h>

/* The writing job's layout and this rank's place in it, as checkpoints record it. */
struct dtrain_sckpt_layout dtrain_ft_layout(const struct dtrain_bootstrap *bs, const struct dtrain_train_config *cfg)
{
    return (struct dtrain_sckpt_layout){
        .pos = bs->pos, .zero1 = cfg->zero_stage >= 1, .virtual_stages = cfg->virtual_stages};
}

struct runs {
    struct dtrain_shard_run *r;
    size_t n, cap;
    int oom;
};

static void add_run(void *ctx, const struct dtrain_shard_run *run)
{
    struct runs *l = ctx;
    if (l->oom)
        return;
    if (dtrain_grow((void **)&l->r, &l->cap, l->n, sizeof *l->r, 256) != 0) {
        l->oom = 1;
        return;
    }
    l->r[l->n++] = *run;
}

struct pieces {
    struct dtrain_sckpt_piece *p;
    size_t n, cap;
};

static int add_piece(struct pieces *l, struct dtrain_sckpt_piece piece)
{
    if (dtrain_grow((void **)&l->p, &l->cap, l->n, sizeof *l->p, 256) != 0)
        return -1;
    l->p[l->n++] = piece;
    return 0;
}

/* The moments the rank keeps, run by run: their place in the optimizer
 * state (wherever it lives: dtrain_adamw_state_read) and their host copies
 * (host), which the checkpoint pieces point into. */
struct state_copy {
    size_t state;
    float *host_m, *host_v;
    size_t count;
};

struct state_ctx {
    const struct runs *runs;
    float *params;        /* host copy of the local parameters */
    int owner;            /* this rank writes the moments it keeps (ZeRO-1, or DP rank 0) */
    struct pieces *save, *load;
    struct dtrain_ft_pieces *out; /* its state copies */
};

/* One run of moments [off, off + count) of the local vector: a host copy
 * of it, split along the shard's runs into whole-vector pieces. */
static int add_state(void *ctx, size_t off, size_t count, size_t state)
{
    struct state_ctx *c = ctx;
    const struct runs *r = c->runs;
    struct dtrain_ft_pieces *o = c->out;
    struct state_copy *more = realloc(o->state, (o->nstate + 1) * sizeof *more);
    if (more == NULL)
        return -1;
    o->state = more;
    struct state_copy *sc = &o->state[o->nstate];
    *sc = (struct state_copy){state, malloc((count + 1) * sizeof(float)), malloc((count + 1) * sizeof(float)),
                              count};
    o->nstate++; /* freed with the pieces even when a malloc failed */
    if (sc->host_m == NULL || sc->host_v == NULL)
        return -1;
    float *m = sc->host_m, *v = sc->host_v;
    size_t a = 0, b = r->n;
    while (a < b) { /* the first shard run ending after off */
        size_t mid = a + (b - a) / 2;
        if (r->r[mid].local + r->r[mid].count <= off)
            a = mid + 1;
        else
            b = mid;
    }
    for (size_t k = a; k < r->n && r->r[k].local < off + count; k++) {
        const struct dtrain_shard_run *run = &r->r[k];
        size_t from = run->local > off ? run->local : off;
        size_t to = run->local + run->count < off + count ? run->local + run->count : off + count;
        struct dtrain_sckpt_piece p = {run->whole + (from - run->local), to - from, NULL, m + (from - off),
                                       v + (from - off)};
        if (add_piece(c->load, p) != 0)
            return -1;
        p.params = c->params + from;
        if (c->owner && run->in_norm && add_piece(c->save, p) != 0)
            return -1;
    }
    return 0;
}

static int by_whole(const void *a, const void *b)
{
    const struct dtrain_sckpt_piece *x = a, *y = b;
    return x->whole < y->whole ? -1 : x->whole > y->whole;
}

static int by_off(const void *a, const void *b)
{
    const struct dtrain_ft_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* More separate ranges than this: the save's parameters are downloaded
 * whole (a GPU copy per range costs microseconds of its own). */
#define MAX_SAVED_RANGES 64

/* out->saved: the local parameter ranges the save pieces read, merged. */
static int saved_ranges(struct dtrain_ft_pieces *out)
{
    struct dtrain_ft_range *r = malloc((out->nsave + 1) * sizeof *r);
    if (r == NULL)
        return -1;
    for (size_t i = 0; i < out->nsave; i++)
        r[i] = (struct dtrain_ft_range){(size_t)(out->save[i].params - out->host_params), out->save[i].count};
    qsort(r, out->nsave, sizeof *r, by_off);
    size_t n = 0;
    for (size_t i = 0; i < out->nsave; i++) {
        if (n > 0 && r[n - 1].off + r[n - 1].count >= r[i].off) {
            size_t end = r[i].off + r[i].count;
            if (end > r[n - 1].off + r[n - 1].count)
                r[n - 1].count = end - r[n - 1].off;
        } else {
            r[n++] = r[i];
        }
    }
    if (n > MAX_SAVED_RANGES) {
        r[0] = (struct dtrain_ft_range){0, out->nparams};
        n = 1;
    }
    out->saved = r;
    out->nsaved = n;
    return 0;
}

int dtrain_ft_pieces(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg,
                     const struct dtrain_bootstrap *bs, struct dtrain_ft_pieces *out, char *err, size_t errlen)
{
    const struct dtrain_shard *s = dtrain_ptrainer_shard(t);
    struct runs runs = {0};
    struct pieces save = {0}, load = {0};
    memset(out, 0, sizeof *out);
    struct dtrain_lora *lora = dtrain_ptrainer_lora(t);
    out->k = dtrain_ptrainer_kernels(t);
    /* LoRA: the adapters and their moments, as runs of the whole model's
     * adapter vector (the frozen base comes from --init-hf again) */
    out->dev_params = lora != NULL ? dtrain_lora_params(lora) : dtrain_ptrainer_params(t);
    out->dp = dtrain_ptrainer_dp(t);
    out->nparams = lora != NULL ? dtrain_lora_count(lora) : s->count;
    float *params = out->host_params = malloc((out->nparams + 1) * sizeof(float));
    if (params == NULL)
        goto oom;
    if (lora != NULL)
        dtrain_lora_for_each_run(lora, add_run, &runs);
    else
        dtrain_shard_for_each_run(s, add_run, &runs);
    if (runs.oom)
        goto oom;
    for (size_t i = 0; i < runs.n; i++)
        if (add_piece(&load, (struct dtrain_sckpt_piece){runs.r[i].whole, runs.r[i].count,
                                                        params + runs.r[i].local, NULL, NULL}) != 0)
            goto oom;
    /* the slice the DP group loads between them: the shard's runs */
    if ((out->slice = malloc((load.n + 1) * sizeof *out->slice)) == NULL)
        goto oom;
    memcpy(out->slice, load.p, load.n * sizeof *out->slice);
    out->nslice = load.n;
    out->dp_comm = cfg->zero_stage >= 1 ? dtrain_dp_comm(out->dp) : NULL;
    struct state_ctx ctx = {&runs, params, cfg->zero_stage >= 1 || bs->dp_rank == 0, &save, &load, out};
    out->adamw = lora != NULL ? dtrain_lora_adamw(lora) : dtrain_dp_adamw(out->dp);
    if (lora != NULL ? add_state(&ctx, 0, out->nparams, 0) != 0 : dtrain_dp_for_each_state(out->dp, add_state, &ctx) != 0)
        goto oom;
    if (save.n > 0)
        qsort(save.p, save.n, sizeof *save.p, by_whole);
    out->save = save.p;
    out->nsave = save.n;
    out->load = load.p;
    out->nload = load.n;
    save.p = load.p = NULL; /* out's now: freed with it */
    if (saved_ranges(out) != 0)
        goto oom;
    free(runs.r);
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for the checkpoint's list of %zu runs and its host copy", runs.n);
    free(runs.r);
    free(save.p);
    free(load.p);
    dtrain_ft_pieces_free(out);
    return DTRAIN_ERR_SYSTEM;
}

int dtrain_ft_pieces_download(struct dtrain_ft_pieces *p, char *err, size_t errlen)
{
    int rc = DTRAIN_OK;
    if (p->dev_params == NULL) /* ZeRO-3: the shares this rank writes */
        dtrain_dp_params_download(p->dp, p->host_params);
    else
        for (size_t i = 0; i < p->nsaved; i++)
            dtrain_k_download(p->k, p->host_params + p->saved[i].off, p->dev_params + p->saved[i].off,
                              p->saved[i].count * sizeof(float));
    for (size_t i = 0; i < p->nstate && rc == DTRAIN_OK && p->nsave > 0; i++) /* moments, where it writes them */
        rc = dtrain_adamw_state_read(p->adamw, p->state[i].state, p->state[i].count, p->state[i].host_m,
                                     p->state[i].host_v, err, errlen);
    return rc;
}

int dtrain_ft_pieces_upload(struct dtrain_ft_pieces *p, char *err, size_t errlen)
{
    int rc = DTRAIN_OK;
    if (p->dev_params == NULL) /* ZeRO-3: the shares of the whole local vector read */
        dtrain_dp_params_upload(p->dp, p->host_params);
    else
        dtrain_k_upload(p->k, p->dev_params, p->host_params, p->nparams * sizeof(float));
    for (size_t i = 0; i < p->nstate && rc == DTRAIN_OK; i++)
        rc = dtrain_adamw_state_write(p->adamw, p->state[i].state, p->state[i].count, p->state[i].host_m,
                                      p->state[i].host_v, err, errlen);
    dtrain_k_sync(p->k);
    return rc;
}

struct dtrain_sckpt_group dtrain_ft_pieces_group(const struct dtrain_ft_pieces *p)
{
    return (struct dtrain_sckpt_group){p->dp_comm, p->slice, p->nslice, 0};
}

void dtrain_ft_pieces_free(struct dtrain_ft_pieces *p)
{
    free(p->save);
    free(p->slice);
    free(p->load);
    free(p->host_params);
    for (size_t i = 0; i < p->nstate; i++) {
        free(p->state[i].host_m);
        free(p->state[i].host_v);
    }
    free(p->state);
    free(p->saved);
    memset(p, 0, sizeof *p);
}


/* ------------------------------------------------------------ one checkpoint, outside the loop */

int dtrain_ft_save(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg, const struct dtrain_bootstrap *bs,
                   dtrain_comm *world, const char *dir, char *err, size_t errlen)
{
    struct dtrain_ft_pieces p;
    struct dtrain_sckpt_stats st;
    const struct dtrain_sckpt_layout layout = dtrain_ft_layout(bs, cfg);
    int rc = dtrain_ft_pieces(t, cfg, bs, &p, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if ((rc = dtrain_ft_pieces_download(&p, err, errlen)) != DTRAIN_OK) {
        dtrain_ft_pieces_free(&p);
        return rc;
    }
    struct dtrain_sckpt_scaler scaler;
    dtrain_ptrainer_scaler(t, &scaler);
    rc = dtrain_sckpt_save(dir, cfg, &layout, (uint64_t)dtrain_ptrainer_steps_done(t),
                           dtrain_ptrainer_data_batches(t), &scaler, world, p.save, p.nsave, cfg->ckpt_keep, 0, &st, err, errlen);
    dtrain_ft_pieces_free(&p);
    return rc;
}

int dtrain_ft_load(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg, const struct dtrain_bootstrap *bs,
                   dtrain_comm *world, const char *dir, const char *prog, char *err, size_t errlen)
{
    struct dtrain_ft_pieces p;
    struct dtrain_sckpt_resumed res;
    struct dtrain_sckpt_stats st;
    int rc = dtrain_ft_pieces(t, cfg, bs, &p, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    const struct dtrain_sckpt_group group = dtrain_ft_pieces_group(&p);
    rc = dtrain_sckpt_resume_group(dir, cfg, world, &group, p.load, p.nload, stderr, prog, &res, &st, err, errlen);
    if (rc == DTRAIN_OK && !res.found) {
        snprintf(err, errlen, "--resume %s: no good checkpoint there (a folder of step-N checkpoints, as --checkpoint "
                 "writes)", dir);
        rc = DTRAIN_ERR_INPUT;
    }
    if (rc == DTRAIN_OK)
        rc = dtrain_ft_pieces_upload(&p, err, errlen);
    if (rc == DTRAIN_OK) {
        dtrain_ptrainer_set_position(t, (long)res.step, res.data_batches);
        dtrain_ptrainer_set_scaler(t, &res.scaler);
    }
    dtrain_ft_pieces_free(&p);
    return rc;
}
