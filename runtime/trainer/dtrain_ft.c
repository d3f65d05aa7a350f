/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The fault-tolerant training loop; see dtrain_ft.h. */
#include "dtrain_ft.h"
#include "ckpt/dtrain_ckpt_async.h"
#include "parallel/dtrain_dp.h"
#include "dtrain_env.h"
#include "dtrain_grow.h"
#include "ft/dtrain_inject.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"
#include "parallel/dtrain_shard.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_traffic.h"
#include "ft/dtrain_watchdog.h"
#include "ft/dtrain_heartbeat.h"
#include "comm/bootstrap/bootstrap_id.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The stop flags travel summed over the world with the step's loss: a
 * SIGTERM counts 1, a SIGUSR1 this much, so both counts survive the sum
 * (worlds are below 2^20). */
#define USR1_WEIGHT 2097152.0

#define GRACE_S 2.0 /* the watchdog's wait for the loop to unwind after an abort */

struct ft {
    struct dtrain_ptrainer *t;
    const struct dtrain_train_config *cfg;
    const struct dtrain_bootstrap *bs;
    dtrain_comm *world;
    struct dtrain_fault *fault;
    struct dtrain_watchdog *wd;
    struct dtrain_inject inject;
    const char *prog;
    FILE *progress;
    const char *dir;                 /* checkpoint folder, NULL: none */
    const char *local;               /* the node-local tier's folder (--ckpt-local-dir), NULL: none */
    char local_buf[DTRAIN_PATH_MAX];
    struct dtrain_sckpt_peers peers; /* who keeps a copy of whose node-local shard */
    const char *resume;              /* resume from here (--resume), NULL: from dir */
    const char *last_dir;            /* the folder of last_ckpt */
    struct dtrain_sckpt_layout layout;
    struct dtrain_ft_pieces pieces;
    long restart;
    long nan_left;                   /* injected NaN attempts still to come */
    long nan_armed;                  /* the last step a nan fault was armed at */
    long last_ckpt;                  /* step of the newest checkpoint written or loaded, -1 */
    struct dtrain_ckpt_async async;  /* the checkpoint being written in the background (--ckpt-async) */
    struct dtrain_ft_summary *sum;
    const struct dtrain_comms *comms;
    int traffic;                     /* DTRAIN_VERBOSE=1: the bytes per group and step (dtrain_traffic.h) */
    long traffic_first;              /* the first step this process runs */
    struct dtrain_group_links links; /* the plugin's DTRAIN_GROUP_LINKS, for predicted times */
    int have_links;
};

int dtrain_ft_config_from_env(struct dtrain_train_config *c, char *err, size_t errlen)
{
    const char *dir = getenv(DTRAIN_ENV_CKPT_DIR), *inject = getenv(DTRAIN_INJECT_ENV);
    if (c->ckpt_dir[0] == '\0' && dir != NULL && dtrain_snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%s", dir) != 0) {
        snprintf(err, errlen, "%s is longer than %zu bytes", DTRAIN_ENV_CKPT_DIR, sizeof c->ckpt_dir - 1);
        return DTRAIN_ERR_INPUT;
    }
    const char *strag = getenv(DTRAIN_ENV_STRAGGLER);
    if (strag != NULL && strag[0] != '\0') {
        if (strcmp(strag, "report") != 0 && strcmp(strag, "drain") != 0) {
            snprintf(err, errlen, "%s='%.32s': use report or drain (sbatch --dtrain-straggler=report|drain)",
                     DTRAIN_ENV_STRAGGLER, strag);
            return DTRAIN_ERR_INPUT;
        }
        if (c->straggler_steps == 0)
            c->straggler_steps = DTRAIN_FT_STRAGGLER_STEPS;
        c->straggler_drain = c->straggler_drain || strcmp(strag, "drain") == 0;
    }
    if (c->straggler_drain && c->straggler_steps == 0)
        c->straggler_steps = DTRAIN_FT_STRAGGLER_STEPS;
    if (c->straggler_drain && c->ckpt_dir[0] == '\0' && getenv(DTRAIN_ENV_CKPT_DIR) == NULL) {
        snprintf(err, errlen, "straggler drain needs a checkpoint folder to restart from and to hand the drain request "
                 "to dtrain-launch --job-exit (--ckpt-dir or sbatch --dtrain-ckpt-dir)");
        return DTRAIN_ERR_INPUT;
    }
    if (c->inject[0] == '\0' && inject != NULL && dtrain_snprintf(c->inject, sizeof c->inject, "%s", inject) != 0) {
        snprintf(err, errlen, "%s is longer than %zu bytes", DTRAIN_INJECT_ENV, sizeof c->inject - 1);
        return DTRAIN_ERR_INPUT;
    }
    const char *local = getenv(DTRAIN_ENV_CKPT_LOCAL_DIR);
    if (c->ckpt_local_dir[0] == '\0' && local != NULL &&
        dtrain_snprintf(c->ckpt_local_dir, sizeof c->ckpt_local_dir, "%s", local) != 0) {
        snprintf(err, errlen, "%s is longer than %zu bytes", DTRAIN_ENV_CKPT_LOCAL_DIR, sizeof c->ckpt_local_dir - 1);
        return DTRAIN_ERR_INPUT;
    }
    if (c->ckpt_local_dir[0] != '\0' && c->ckpt_dir[0] == '\0') {
        snprintf(err, errlen, "--ckpt-local-dir (or %s) needs --ckpt-dir (or %s): the shared tier, written at the end "
                 "and when stopping", DTRAIN_ENV_CKPT_LOCAL_DIR, DTRAIN_ENV_CKPT_DIR);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_inject in;
    return dtrain_inject_parse(c->inject, &in, err, errlen) == 0 ? DTRAIN_OK : DTRAIN_ERR_INPUT;
}

/* The node-local folder with "%n" replaced by this node's name
 * (SLURMD_NODENAME, else the host name) and "%%" by "%". */
static int local_dir_of(const char *spec, char *out, size_t len, char *err, size_t errlen)
{
    char host[256] = "";
    const char *n = getenv("SLURMD_NODENAME");
    if (n != NULL && n[0] != '\0')
        snprintf(host, sizeof host, "%s", n);
    else if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
        snprintf(host, sizeof host, "localhost");
    if (dtrain_expand_node(spec, host, out, len) != 0) {
        snprintf(err, errlen, "--ckpt-local-dir %.80s: longer than %zu bytes once %%n is replaced", spec, len - 1);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ what a checkpoint holds of this rank */

/* The writing job's layout and this rank's place in it, as checkpoints record it. */
static struct dtrain_sckpt_layout layout_of(const struct dtrain_bootstrap *bs, const struct dtrain_train_config *cfg)
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

/* The moments the rank keeps, run by run, in backend memory (dev) and
 * their host copies (host), which the checkpoint pieces point into. */
struct state_copy {
    float *dev_m, *dev_v, *host_m, *host_v;
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
static int add_state(void *ctx, size_t off, size_t count, float *dev_m, float *dev_v)
{
    struct state_ctx *c = ctx;
    const struct runs *r = c->runs;
    struct dtrain_ft_pieces *o = c->out;
    struct state_copy *more = realloc(o->state, (o->nstate + 1) * sizeof *more);
    if (more == NULL)
        return -1;
    o->state = more;
    struct state_copy *sc = &o->state[o->nstate];
    *sc = (struct state_copy){dev_m, dev_v, malloc((count + 1) * sizeof(float)), malloc((count + 1) * sizeof(float)),
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

int dtrain_ft_pieces(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg,
                     const struct dtrain_bootstrap *bs, struct dtrain_ft_pieces *out, char *err, size_t errlen)
{
    const struct dtrain_shard *s = dtrain_ptrainer_shard(t);
    struct runs runs = {0};
    struct pieces save = {0}, load = {0};
    memset(out, 0, sizeof *out);
    out->k = dtrain_ptrainer_kernels(t);
    out->dev_params = dtrain_ptrainer_params(t);
    out->dp = dtrain_ptrainer_dp(t);
    out->nparams = s->count;
    float *params = out->host_params = malloc((s->count + 1) * sizeof(float));
    if (params == NULL)
        goto oom;
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
    if (dtrain_dp_for_each_state(dtrain_ptrainer_dp(t), add_state, &ctx) != 0)
        goto oom;
    if (save.n > 0)
        qsort(save.p, save.n, sizeof *save.p, by_whole);
    out->save = save.p;
    out->nsave = save.n;
    out->load = load.p;
    out->nload = load.n;
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

void dtrain_ft_pieces_download(struct dtrain_ft_pieces *p)
{
    if (p->dev_params == NULL) /* ZeRO-3: the shares this rank writes */
        dtrain_dp_params_download(p->dp, p->host_params);
    else
        dtrain_k_download(p->k, p->host_params, p->dev_params, p->nparams * sizeof(float));
    for (size_t i = 0; i < p->nstate; i++) {
        dtrain_k_download(p->k, p->state[i].host_m, p->state[i].dev_m, p->state[i].count * sizeof(float));
        dtrain_k_download(p->k, p->state[i].host_v, p->state[i].dev_v, p->state[i].count * sizeof(float));
    }
}

void dtrain_ft_pieces_upload(struct dtrain_ft_pieces *p)
{
    if (p->dev_params == NULL) /* ZeRO-3: the shares of the whole local vector read */
        dtrain_dp_params_upload(p->dp, p->host_params);
    else
        dtrain_k_upload(p->k, p->dev_params, p->host_params, p->nparams * sizeof(float));
    for (size_t i = 0; i < p->nstate; i++) {
        dtrain_k_upload(p->k, p->state[i].dev_m, p->state[i].host_m, p->state[i].count * sizeof(float));
        dtrain_k_upload(p->k, p->state[i].dev_v, p->state[i].host_v, p->state[i].count * sizeof(float));
    }
    dtrain_k_sync(p->k);
}

struct dtrain_sckpt_group dtrain_ft_pieces_group(const struct dtrain_ft_pieces *p)
{
    return (struct dtrain_sckpt_group){p->dp_comm, p->slice, p->nslice};
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
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------ checkpoints */

static int is_root(const struct ft *f) { return f->bs->rank == 0; }

/* The checkpoint folder holds this step already (written, or resumed from). */
static int saved_in_dir(const struct ft *f, long step)
{
    return f->last_ckpt == step && f->last_dir == f->dir;
}

/* ... or in the node-local tier. */
static int saved_in_tiers(const struct ft *f, long step)
{
    return saved_in_dir(f, step) || (f->last_ckpt == step && f->local != NULL && f->last_dir == f->local);
}

/* A checkpoint of dir's outcome, committed (rc) after write_s seconds of
 * writing (in the background: async) and st's of the commit: counted and
 * said. */
static void checkpoint_done(struct ft *f, const char *dir, long step, int rc, int async, double write_s,
                            const struct dtrain_sckpt_stats *st, const char *err)
{
    const char *tier = dir == f->local ? "node-local" : "";
    if (rc == DTRAIN_OK) {
        f->last_ckpt = step;
        f->last_dir = dir;
        f->sum->checkpoints++;
        f->sum->ckpt_write_s = write_s + st->seconds;
        f->sum->ckpt_bytes = st->total_bytes;
        if (is_root(f)) {
            char when[160] = "";
            snprintf(when, sizeof when, "%s%s", dir == f->local ? (f->peers.peer >= 0 ? ", node-local, each shard "
                     "also on a peer's node" : ", node-local, no copy on another node") : "",
                     async ? ", written in the background" : "");
            if (async)
                snprintf(when + strlen(when), sizeof when - strlen(when), ", committed after step %ld",
                         dtrain_ptrainer_steps_done(f->t));
            fprintf(f->progress, "%s: checkpoint of step %ld written to %s/step-%08ld (%.2f MB, %.3f s%s)\n", f->prog,
                    step, dir, step, 1e-6 * (double)st->total_bytes, write_s + st->seconds, when);
            fflush(f->progress);
            char what[64];
            snprintf(what, sizeof what, "%llu bytes in %.6f s", (unsigned long long)st->total_bytes,
                     write_s + st->seconds);
            dtrain_fault_event(f->fault, "ckpt_write", step, what);
        }
    } else if (rc == DTRAIN_ERR_SYSTEM) {
        f->sum->checkpoint_failures++;
        char kept[64] = "there is no checkpoint yet";
        if (f->last_ckpt >= 0)
            snprintf(kept, sizeof kept, "the newest checkpoint stays step %ld", f->last_ckpt);
        if (is_root(f) || st->failed_here) /* the summary, or what failed here */
            fprintf(stderr, "%s: warning: %s%s%s; %s\n", f->prog, err, async ? " (background write)" : "",
                    tier[0] ? " (node-local tier)" : "", kept);
    }
}

/* The write in flight, if any, one stage on: waited for, then its copy
 * sent to the peer (node-local) or committed.  A collective: every rank
 * calls it at the same step boundary.  drain: every stage, to the commit. */
static int finish_async(struct ft *f, int drain, char *err, size_t errlen)
{
    int rc = DTRAIN_OK, committed = 0;
    while (f->async.pending && !committed) {
        long step = (long)f->async.step, at = dtrain_ptrainer_steps_done(f->t);
        const char *dir = f->async.dir;
        struct dtrain_sckpt_stats st;
        double write_s;
        dtrain_watchdog_beat(f->wd, "finishing a checkpoint", at);
        rc = dtrain_ckpt_async_finish(&f->async, f->world, f->cfg->ckpt_keep, &committed, &st, &write_s, err,
                                      errlen);
        dtrain_watchdog_beat(f->wd, "training", at);
        if (committed || rc != DTRAIN_OK) {
            checkpoint_done(f, dir, step, rc, f->cfg->ckpt_async, write_s, &st, err);
            break;
        }
        if (!drain)
            break;
    }
    return rc;
}

/* Write the checkpoint of the present step into the node-local tier
 * (local) or the shared folder.  async: start it in the background (after
 * finishing the one in flight), else write and commit it now. */
static int save_checkpoint(struct ft *f, int async, int local, char *err, size_t errlen)
{
    long step = dtrain_ptrainer_steps_done(f->t);
    struct dtrain_sckpt_stats st;
    int rc, nospace = dtrain_inject_due(&f->inject, DTRAIN_INJECT_NOSPACE, f->bs->rank, step, f->restart);
    if ((rc = finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    if (nospace) {
        fprintf(stderr, "%s: inject: rank %d fails its checkpoint write of step %ld (no space)\n", f->prog,
                f->bs->rank, step);
        dtrain_fault_event(f->fault, "inject", step, "nospace");
    }
    dtrain_watchdog_beat(f->wd, "writing a checkpoint", step);
    dtrain_ft_pieces_download(&f->pieces);
    struct dtrain_sckpt_scaler scaler;
    dtrain_ptrainer_scaler(f->t, &scaler);
    local = local && f->local != NULL;
    if (async || local) {
        long slow = async ? dtrain_inject_ms(&f->inject, DTRAIN_INJECT_SLOWCKPT, f->bs->rank, step, f->restart) : 0;
        if (slow > 0) {
            fprintf(stderr, "%s: inject: rank %d's background write of the checkpoint of step %ld waits %ld ms\n",
                    f->prog, f->bs->rank, step, slow);
            dtrain_fault_event(f->fault, "inject", step, "slowckpt");
        }
        if (dtrain_ckpt_async_start(&f->async, local ? f->local : f->dir, local, &f->peers, f->cfg, &f->layout,
                                    (uint64_t)step, dtrain_ptrainer_data_batches(f->t), &scaler, f->pieces.save,
                                    f->pieces.nsave, nospace, slow, err, errlen) != 0)
            fprintf(stderr, "%s: warning: rank %d: %s\n", f->prog, f->bs->rank, err);
        dtrain_watchdog_beat(f->wd, "training", step);
        /* synchronous on the node-local tier: the same stages, waited for now */
        return async ? DTRAIN_OK : finish_async(f, 1, err, errlen);
    }
    rc = dtrain_sckpt_save(f->dir, f->cfg, &f->layout, (uint64_t)step, dtrain_ptrainer_data_batches(f->t),
                           &scaler, f->world, f->pieces.save, f->pieces.nsave, f->cfg->ckpt_keep, nospace, &st, err,
                           errlen);
    dtrain_watchdog_beat(f->wd, "training", step);
    checkpoint_done(f, f->dir, step, rc, 0, 0.0, &st, err);
    return rc;
}

/* Load the newest good checkpoint of dir (at start, or to roll back).
 * required: finding none there is an error (--resume DIR). */
static int load_checkpoint(struct ft *f, const char *dir, int rollback, int required, char *err, size_t errlen)
{
    struct dtrain_sckpt_resumed res;
    struct dtrain_sckpt_stats st;
    long at = dtrain_ptrainer_steps_done(f->t);
    dtrain_watchdog_beat(f->wd, "loading a checkpoint", at);
    dtrain_fault_event(f->fault, "load_begin", at, rollback ? "rollback" : "resume");
    /* the run's own folders: either tier, the newest complete checkpoint */
    int tiers = f->local != NULL && (dir == f->dir || dir == f->local);
    if (tiers)
        dir = f->dir;
    const struct dtrain_sckpt_group group = dtrain_ft_pieces_group(&f->pieces);
    int rc = tiers ? dtrain_sckpt_resume_tiers(f->dir, f->local, &f->peers, f->cfg, f->world, &group, f->pieces.load,
                                               f->pieces.nload, stderr, f->prog, &res, &st, err, errlen)
                   : dtrain_sckpt_resume_group(dir, f->cfg, f->world, &group, f->pieces.load, f->pieces.nload, stderr,
                                               f->prog, &res, &st, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (!res.found && (rollback || res.loaded_partly)) {
        snprintf(err, errlen, "%s: no good checkpoint in %s%s", rollback ? "cannot roll back" : "cannot resume",
                 dir, res.loaded_partly ? " (a damaged one was read in part: the model is not usable)" : "");
        return DTRAIN_ERR_SYSTEM;
    }
    if (!res.found && res.damaged > 0) {
        /* storage that damages every checkpoint would make every requeue start over */
        snprintf(err, errlen, "every checkpoint in %s is damaged (kept as step-N.damaged): not starting over from "
                 "step 0; move the folder away (or give another --ckpt-dir) to train from the beginning", dir);
        return DTRAIN_ERR_INPUT;
    }
    if (!res.found && required) {
        snprintf(err, errlen, "--resume %s: no checkpoint there (a folder of step-N checkpoints, as --checkpoint "
                 "writes)", dir);
        return DTRAIN_ERR_INPUT;
    }
    if (res.found) {
        dtrain_ft_pieces_upload(&f->pieces);
        f->last_dir = tiers && strcmp(res.tier, "node-local") == 0 ? f->local : dir;
        dtrain_ptrainer_set_position(f->t, (long)res.step, res.data_batches);
        dtrain_ptrainer_set_scaler(f->t, &res.scaler);
        f->last_ckpt = (long)res.step;
        f->sum->load_s = st.seconds;
        f->sum->load_bytes = st.bytes;
        if (!rollback)
            f->sum->resumed_step = (long)res.step;
        char what[96];
        snprintf(what, sizeof what, "%llu bytes in %.6f s", (unsigned long long)st.bytes, st.seconds);
        dtrain_fault_event(f->fault, "load_end", (long)res.step, what);
        if (is_root(f)) {
            const struct dtrain_sckpt_layout *w = &res.writer;
            char vs[48] = "";
            if (w->virtual_stages > 1)
                snprintf(vs, sizeof vs, ", %d virtual stages", w->virtual_stages);
            fprintf(f->progress, "%s: %s %s (written by T=%d P=%d D=%d, ZeRO-1 %s%s): step %" PRIu64 ", data batch %"
                    PRIu64 "; rank 0 read %.2f MB in %.3f s%s%s%s\n", f->prog, rollback ? "rolled back to" : "resumed from",
                    res.path, w->tp, w->pp, w->dp, w->zero1 ? "on" : "off", vs, res.step, res.data_batches,
                    1e-6 * (double)st.bytes, st.seconds, tiers ? " (" : "", tiers ? res.tier : "", tiers ? " tier)" : "");
            fflush(f->progress);
        }
    } else if (is_root(f)) {
        fprintf(f->progress, "%s: no checkpoint in %s%s%s yet: starting from step 0\n", f->prog, dir,
                tiers ? " or " : "", tiers ? f->local : "");
        fflush(f->progress);
    }
    return dtrain_ptrainer_metrics_from(f->t, dtrain_ptrainer_steps_done(f->t), err, errlen);
}

/* ------------------------------------------------------------ injected faults */

/* Kill now; delay and hang are the step's (its first forward: a slow or
 * hung device, dtrain_pstep_control). */
static void inject_step_faults(struct ft *f, long step, struct dtrain_pstep_control *ctl)
{
    int rank = f->bs->rank;
    ctl->delay_ms = dtrain_inject_delay_ms(&f->inject, rank, step, f->restart);
    if (dtrain_inject_due(&f->inject, DTRAIN_INJECT_KILL, rank, step, f->restart)) {
        fprintf(stderr, "%s: inject: rank %d kills itself (SIGKILL) at step %ld\n", f->prog, rank, step);
        fflush(NULL);
        dtrain_fault_event(f->fault, "inject", step, "kill");
        raise(SIGKILL);
    }
    if (dtrain_inject_due(&f->inject, DTRAIN_INJECT_HANG, rank, step, f->restart)) {
        fprintf(stderr, "%s: inject: rank %d hangs in the first forward of step %ld\n", f->prog, rank, step);
        fflush(NULL);
        dtrain_fault_event(f->fault, "inject", step, "hang");
        ctl->hang = 1;
    }
}

/* Before resuming: damage this rank's shard of the newest checkpoint. */
static void inject_corruption(struct ft *f)
{
    char path[DTRAIN_PATH_MAX], why[512];
    uint64_t newest;
    int rank = f->bs->rank;
    if (!dtrain_inject_due(&f->inject, DTRAIN_INJECT_CORRUPT, rank, 0, f->restart) ||
        dtrain_sckpt_list(f->dir, &newest, 1, why, sizeof why) < 1)
        return;
    if (dtrain_snprintf(path, sizeof path, "%s/step-%08" PRIu64 "/shard-%05d.bin", f->dir, newest, rank) != 0 ||
        dtrain_inject_corrupt_file(path, why, sizeof why) != 0) {
        fprintf(stderr, "%s: inject: rank %d: %s\n", f->prog, rank, why);
        return;
    }
    fprintf(stderr, "%s: inject: rank %d corrupted %s\n", f->prog, rank, path);
    dtrain_fault_event(f->fault, "inject", (long)newest, "corrupt");
}

/* ------------------------------------------------------------ heartbeats */

/* The address this rank's neighbours reach it on: with the cpu backend,
 * the one its kernel routes to the world leader from (the interface the
 * job's sockets use); else (nccl) that of NCCL_SOCKET_IFNAME, else the
 * first up non-loopback interface (dtrain_comm_addr_pick). */
static int heartbeat_addr(const struct dtrain_bootstrap *bs, char *addr, size_t len, char *err, size_t errlen)
{
    struct dtrain_cpu_id id;
    if (dtrain_cpu_id_parse(bs->groups[DTRAIN_GROUP_WORLD].id, &id) == 0) {
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)}, me;
        socklen_t mlen = sizeof me;
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ok = 0;
        if (fd >= 0 && inet_pton(AF_INET, id.addr, &to.sin_addr) == 1 &&
            connect(fd, (struct sockaddr *)&to, sizeof to) == 0 && /* a UDP connect sends nothing */
            getsockname(fd, (struct sockaddr *)&me, &mlen) == 0 && inet_ntop(AF_INET, &me.sin_addr, addr, (socklen_t)len))
            ok = 1;
        if (fd >= 0)
            close(fd);
        if (ok)
            return 0;
    }
    return dtrain_comm_addr_pick(getenv("NCCL_SOCKET_IFNAME"), addr, len, err, errlen);
}

/* Open this rank's heartbeat and learn its ring neighbours' addresses
 * (a collective over the world: two exchanges with rank - 1 and rank + 1),
 * then hand it to the watchdog.  Ranks alone, or --hang-detect 0: none.
 * A rank that cannot open its socket says so and sends port 0 (its
 * neighbours then neither send to it nor judge it): the exchange stays
 * matched and the run goes on with the communicator timeout for it. */
static int start_heartbeat(struct ft *f, char *err, size_t errlen)
{
    const struct dtrain_bootstrap *bs = f->bs;
    int n = bs->world_size, me = bs->rank, rc;
    if (f->cfg->hang_detect <= 0 || n < 2)
        return DTRAIN_OK;
    char addr[INET_ADDRSTRLEN], why[256];
    struct dtrain_hb *hb = NULL;
    uint32_t ip = 0;
    uint16_t port = 0;
    if (heartbeat_addr(bs, addr, sizeof addr, why, sizeof why) != 0 ||
        dtrain_hb_open(addr, me, f->fault->node, getenv(DTRAIN_ENV_GPU),
                       dtrain_hb_token(bs->groups[DTRAIN_GROUP_WORLD].id), &hb, why, sizeof why) != 0)
        fprintf(stderr, "%s: rank %d: no heartbeats (--hang-detect): %s; its hangs are found by the communicator "
                "timeout\n", f->prog, me, why);
    else
        dtrain_hb_address(hb, &ip, &port);
    /* floats hold integers below 2^24 exactly: the address in 16-bit halves */
    float mine[3] = {(float)(ip >> 16), (float)(ip & 0xffffu), (float)port}, got[2][3];
    struct dtrain_pcomm pc;
    struct dtrain_kernels *k = f->pieces.k;
    float *dev = NULL;
    if ((rc = dtrain_pcomm_init(&pc, k, f->world, err, errlen)) != DTRAIN_OK) {
        dtrain_hb_close(hb);
        return rc;
    }
    rc = DTRAIN_ERR_SYSTEM;
    if ((dev = dtrain_k_alloc(k, 9 * sizeof(float))) == NULL) {
        snprintf(err, errlen, "out of memory for the heartbeat addresses");
        goto out;
    }
    dtrain_k_upload(k, dev, mine, sizeof mine);
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    /* to the next, from the previous; then to the previous, from the next */
    if ((rc = dtrain_pcomm_sendrecv(&pc, dev, 3, next, dev + 3, 3, prev, "heartbeat addresses", err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_pcomm_sendrecv(&pc, dev, 3, prev, dev + 6, 3, next, "heartbeat addresses", err, errlen)) != DTRAIN_OK)
        goto out;
    dtrain_k_download(k, got, dev + 3, sizeof got);
    if (hb != NULL) {
        if (got[0][2] > 0)
            dtrain_hb_set_peer(hb, 0, prev, (uint32_t)got[0][0] << 16 | (uint32_t)got[0][1], (uint16_t)got[0][2]);
        if (next != prev && got[1][2] > 0)
            dtrain_hb_set_peer(hb, 1, next, (uint32_t)got[1][0] << 16 | (uint32_t)got[1][1], (uint16_t)got[1][2]);
        dtrain_watchdog_set_heartbeat(f->wd, hb);
        hb = NULL;
    }
out:
    dtrain_hb_close(hb);
    dtrain_k_free(k, dev);
    dtrain_pcomm_release(&pc);
    return rc;
}

/* ------------------------------------------------------------ the loop */

static int barrier(struct ft *f, const char *what, char *err, size_t errlen)
{
    return dtrain_pcomm_status(f->world, dtrain_comm_barrier(f->world), what, err, errlen);
}

/* After a step: the stop signals the ranks saw together.  Returns
 * DTRAIN_ERR_FAULT (with the reason) when the run must stop. */
static int stop_requested(struct ft *f, double flags, char *err, size_t errlen)
{
    long usr1 = (long)floor(flags / USR1_WEIGHT), term = (long)fmod(flags, USR1_WEIGHT);
    if (term == 0 && usr1 == 0)
        return DTRAIN_OK;
    long step = dtrain_ptrainer_steps_done(f->t);
    /* a Ctrl-C here counts as a SIGTERM in the sum; the rank that got it says SIGINT */
    int bits = (term ? DTRAIN_SIGNAL_TERM : 0) | (usr1 ? DTRAIN_SIGNAL_USR1 : 0) |
               (dtrain_signals_pending() & DTRAIN_SIGNAL_INT), rc;
    char saved[DTRAIN_PATH_MAX + 64] = "no checkpoint folder: nothing saved";
    dtrain_fault_event(f->fault, "signal", step, dtrain_signals_name(bits));
    /* the ranks leave together: nobody's links close while another is still
     * in the checkpoint's collectives (as at the end of dtrain_ft_run) */
    dtrain_watchdog_pause(f->wd);
    if (f->dir != NULL) {
        /* the write in flight is finished first (its commit is this boundary's) */
        if ((rc = finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
            return rc;
        rc = saved_in_dir(f, step) ? DTRAIN_OK : save_checkpoint(f, 0, 0, err, errlen);
        if (rc == DTRAIN_ERR_FAULT)
            return rc;
        snprintf(saved, sizeof saved, rc == DTRAIN_OK ? "checkpoint of step %ld written" :
                 "the checkpoint of step %ld failed (the run resumes from the one before)", step);
    }
    if ((rc = barrier(f, "stopping", err, errlen)) != DTRAIN_OK)
        return rc;
    snprintf(err, errlen, "stopping on %s (received by %ld rank%s): %s", dtrain_signals_name(bits),
             term + usr1, term + usr1 == 1 ? "" : "s", saved);
    return DTRAIN_ERR_FAULT;
}

/* After a logged step: the straggler verdict (the same on every rank,
 * dtrain_ptrainer_straggler).  The straggler itself says so on one line
 * (it knows its node and GPU) and records a "straggler" event.  With
 * drain every rank checkpoints this step, the straggler leaves the drain
 * request in the checkpoint folder (DTRAIN_DRAIN_REQUEST: its node and the
 * reason, for dtrain-launch --job-exit) and the run stops as on a fault
 * (DTRAIN_ERR_FAULT: exit 75, requeue). */
static int straggler(struct ft *f, char *err, size_t errlen)
{
    struct dtrain_straggler g;
    dtrain_ptrainer_straggler(f->t, &g);
    if (!g.is_new)
        return DTRAIN_OK;
    long step = dtrain_ptrainer_steps_done(f->t) - 1;
    const char *gpu = getenv(DTRAIN_ENV_GPU);
    char line[600];
    snprintf(line, sizeof line, "straggler: rank %d (node %s, GPU %s): compute %.1f ms a step, %.0f%% above the "
             "median %.1f ms of the %d ranks for %ld steps in a row (margin %.0f%%)", g.rank, f->fault->node,
             gpu != NULL && gpu[0] != '\0' ? gpu : "none", g.compute_ms, 100.0 * g.excess, g.median_ms,
             f->bs->world_size, g.steps, 100.0 * f->cfg->straggler_margin);
    if (f->bs->rank == g.rank) {
        fprintf(stderr, "%s: %s: %s\n", f->prog, line, f->cfg->straggler_drain ? "draining its node and restarting "
                "without it" : "reported");
        fflush(stderr);
        dtrain_fault_event(f->fault, "straggler", step, line);
    }
    if (!f->cfg->straggler_drain)
        return DTRAIN_OK;
    int rc;
    dtrain_watchdog_pause(f->wd); /* as for a stop signal: the ranks leave together */
    long done = step + 1;
    /* the write in flight is finished first (its commit is this boundary's) */
    if (f->dir != NULL && (rc = finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    if (f->dir != NULL && !saved_in_dir(f, done) && (rc = save_checkpoint(f, 0, 0, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    if (f->bs->rank == g.rank && f->dir != NULL) {
        struct dtrain_out_file o;
        char path[DTRAIN_PATH_MAX + 32], text[700], why[512];
        int n = snprintf(text, sizeof text, "%s\t%s\n", f->fault->node, line);
        if (dtrain_snprintf(path, sizeof path, "%s/" DTRAIN_DRAIN_REQUEST, f->dir) != 0 ||
            dtrain_out_open(&o, path, why, sizeof why) != DTRAIN_OK) {
            fprintf(stderr, "%s: rank %d: cannot leave the drain request: %s\n", f->prog, f->bs->rank, why);
        } else {
            dtrain_out_write(&o, text, n > 0 && (size_t)n < sizeof text ? (size_t)n : strlen(text));
            if (dtrain_out_commit(&o, why, sizeof why) != DTRAIN_OK)
                fprintf(stderr, "%s: rank %d: cannot leave the drain request: %s\n", f->prog, f->bs->rank, why);
        }
    }
    if ((rc = barrier(f, "stopping for a straggler", err, errlen)) != DTRAIN_OK)
        return rc;
    snprintf(err, errlen, "%s: its node is to be drained (dtrain-launch --job-exit) and the job restarted without it",
             line);
    return DTRAIN_ERR_FAULT;
}

/* A step whose loss or norm was not finite (every rank skipped it). */
static int nonfinite(struct ft *f, const struct dtrain_pstep_result *r, long *in_a_row, char *err, size_t errlen)
{
    const long skips = f->cfg->nonfinite_skips;
    (*in_a_row)++;
    f->sum->steps_skipped++;
    if (*in_a_row <= skips) {
        if (is_root(f)) {
            fprintf(stderr, "%s: step %ld: the %s is not finite (loss %g, norm %g): step skipped, its batch "
                    "consumed (%ld of at most %ld in a row)\n", f->prog, r->base.step,
                    isfinite(r->base.loss) ? "gradient norm" : "loss", (double)r->base.loss, r->base.grad_norm,
                    *in_a_row, skips);
        }
        return DTRAIN_OK;
    }
    int rc = finish_async(f, 1, err, errlen); /* the rollback reads the host copy the writer reads */
    if (rc == DTRAIN_ERR_FAULT)
        return rc;
    if (f->last_dir == NULL || f->last_ckpt < 0) {
        snprintf(err, errlen, "step %ld: training diverged: %ld steps in a row had a non-finite loss or gradient "
                 "and there is no checkpoint to roll back to (lower the learning rate, set grad_clip, or give "
                 "--ckpt-dir)", r->base.step, *in_a_row);
        return DTRAIN_ERR_SYSTEM;
    }
    if (f->sum->rollbacks == DTRAIN_FT_MAX_ROLLBACKS) {
        snprintf(err, errlen, "step %ld: training diverged again after %d rollbacks to the last checkpoint "
                 "(lower the learning rate or set grad_clip)", r->base.step, DTRAIN_FT_MAX_ROLLBACKS);
        return DTRAIN_ERR_SYSTEM;
    }
    if (is_root(f))
        fprintf(stderr, "%s: step %ld: %ld steps in a row with a non-finite loss or gradient: rolling back to the "
                "checkpoint of step %ld\n", f->prog, r->base.step, *in_a_row, f->last_ckpt);
    f->sum->rollbacks++;
    *in_a_row = 0;
    return load_checkpoint(f, f->last_dir, 1, 0, err, errlen);
}

/* After a step: the validation loss every val_every steps and after the
 * last, into the step's result (its progress and metrics lines). */
static int validate_if_due(struct ft *f, struct dtrain_pstep_result *r, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = f->cfg;
    long done = dtrain_ptrainer_steps_done(f->t);
    if (dtrain_ptrainer_val_batches(f->t) == 0 || !((c->val_every > 0 && done % c->val_every == 0) || done == c->steps))
        return DTRAIN_OK;
    dtrain_watchdog_beat(f->wd, "validating", done);
    int rc = dtrain_ptrainer_validate(f->t, &r->base.val_loss, err, errlen);
    r->base.has_val_loss = rc == DTRAIN_OK;
    dtrain_watchdog_beat(f->wd, "training", done);
    return rc;
}

static int train(struct ft *f, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = f->cfg;
    long in_a_row = 0;
    int first_after_resume = f->sum->resumed_step >= 0, rc;
    while (dtrain_ptrainer_steps_done(f->t) < c->steps) {
        long step = dtrain_ptrainer_steps_done(f->t);
        dtrain_watchdog_beat(f->wd, "training", step);
        int sig = dtrain_signals_pending();
        const struct dtrain_inject_fault *nan = dtrain_inject_find(&f->inject, DTRAIN_INJECT_NAN, f->bs->rank, step,
                                                                   f->restart);
        if (nan != NULL && step > f->nan_armed) {
            f->nan_left = nan->count;
            f->nan_armed = step;
        }
        struct dtrain_pstep_control ctl = {
            .flags = (sig & DTRAIN_SIGNAL_TERM ? 1.0 : 0.0) + (sig & DTRAIN_SIGNAL_USR1 ? USR1_WEIGHT : 0.0),
            .writing = dtrain_ckpt_async_writing(&f->async),
            .poison_loss = f->nan_left > 0,
        };
        inject_step_faults(f, step, &ctl);
        if (ctl.poison_loss) {
            f->nan_left--;
            fprintf(stderr, "%s: inject: rank %d's loss is NaN at step %ld\n", f->prog, f->bs->rank, step);
            dtrain_fault_event(f->fault, "inject", step, "nan");
        }
        struct dtrain_pstep_result r;
        uint64_t sent0[DTRAIN_EXPLAIN_GROUPS], sent1[DTRAIN_EXPLAIN_GROUPS];
        if (f->traffic)
            dtrain_traffic_sample(f->comms, sent0);
        if ((rc = dtrain_ptrainer_step_ctl(f->t, &ctl, &r, err, errlen)) != DTRAIN_OK)
            return rc;
        /* every rank: its run's first step and each step that has a progress line */
        if (f->traffic && (step == f->traffic_first || (c->log_every > 0 && step % c->log_every == 0))) {
            dtrain_traffic_sample(f->comms, sent1);
            dtrain_traffic_report(stderr, f->prog, c, f->bs, f->have_links ? &f->links : NULL, 4, step, sent0, sent1,
                                  r.pipe_wait_ms, r.tp_comm_ms, r.dp_exposed_ms);
        }
        /* every rank's background write was done before this step: every
         * rank commits it here, between two steps' collectives */
        if (f->async.pending && ctl.writing == 0.0 && (rc = finish_async(f, 0, err, errlen)) == DTRAIN_ERR_FAULT)
            return rc;
        if (ctl.skipped) {
            if ((rc = nonfinite(f, &r, &in_a_row, err, errlen)) != DTRAIN_OK)
                return rc;
        } else if (r.overflow) {
            /* fp16: the scaled gradients overflowed; the scaler backed off (not a fault) */
            if (is_root(f) && c->log_every > 0)
                fprintf(f->progress, "%s: step %ld: gradient overflow at loss scale %g (fp16): step skipped, its "
                        "batch consumed, scale now %g\n", f->prog, r.base.step, r.loss_scale, r.loss_scale / 2);
        } else {
            in_a_row = 0;
            if ((rc = validate_if_due(f, &r, err, errlen)) != DTRAIN_OK)
                return rc;
            long after = dtrain_ptrainer_steps_done(f->t);
            /* metrics files (fsync) and sampling are not the step's work: outside it for the heartbeat */
            dtrain_watchdog_beat(f->wd, "writing the metrics", after);
            if ((rc = dtrain_ptrainer_log_step(f->t, f->progress, &r, err, errlen)) != DTRAIN_OK ||
                (rc = straggler(f, err, errlen)) != DTRAIN_OK)
                return rc;
            dtrain_watchdog_beat(f->wd, "sampling", after);
            if (c->sample_every > 0 && after % c->sample_every == 0 &&
                (rc = dtrain_ptrainer_sample(f->t, is_root(f) ? f->progress : NULL, err, errlen)) != DTRAIN_OK)
                return rc;
            if (first_after_resume) {
                dtrain_fault_event(f->fault, "first_step", r.base.step, NULL);
                first_after_resume = 0;
            }
        }
        if ((rc = stop_requested(f, ctl.flags, err, errlen)) != DTRAIN_OK)
            return rc;
        long done = dtrain_ptrainer_steps_done(f->t);
        /* with a node-local tier, the shared folder every ckpt_shared_every steps */
        int local = f->local != NULL && !(c->ckpt_shared_every > 0 && done % c->ckpt_shared_every == 0);
        if (f->dir != NULL && c->checkpoint_every > 0 && done % c->checkpoint_every == 0 && !saved_in_tiers(f, done) &&
            done < c->steps && (rc = save_checkpoint(f, c->ckpt_async, local, err, errlen)) == DTRAIN_ERR_FAULT)
            return rc;
    }
    if (f->dir != NULL && (rc = finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    if (f->dir != NULL && !saved_in_dir(f, c->steps) && (rc = save_checkpoint(f, 0, 0, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    return DTRAIN_OK;
}

int dtrain_ft_run(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg,
                  const struct dtrain_bootstrap *bs, const struct dtrain_comms *comms, atomic_int *abort_flag,
                  struct dtrain_fault *fault, FILE *progress, struct dtrain_ft_summary *sum, char *err,
                  size_t errlen)
{
    struct ft f = {
        .t = t, .cfg = cfg, .bs = bs, .world = comms->group[DTRAIN_GROUP_WORLD], .fault = fault,
        .prog = fault->prog, .progress = progress != NULL ? progress : stdout,
        .dir = cfg->ckpt_dir[0] != '\0' ? cfg->ckpt_dir : NULL,
        .resume = cfg->resume[0] != '\0' ? cfg->resume : NULL,
        .layout = layout_of(bs, cfg),
        .restart = fault->restarts.count, .nan_armed = -1, .last_ckpt = -1, .sum = sum, .comms = comms,
    };
    const char *verbose = getenv(DTRAIN_ENV_VERBOSE);
    f.traffic = verbose != NULL && strcmp(verbose, "1") == 0;
    int rc, signals = 0;
    memset(sum, 0, sizeof *sum);
    sum->resumed_step = -1;
    if (dtrain_inject_parse(cfg->inject, &f.inject, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    if (cfg->ckpt_local_dir[0] != '\0') {
        if (f.dir == NULL) {
            snprintf(err, errlen, "--ckpt-local-dir needs --ckpt-dir (the shared tier, written at the end and when "
                     "stopping)");
            return DTRAIN_ERR_INPUT;
        }
        if ((rc = local_dir_of(cfg->ckpt_local_dir, f.local_buf, sizeof f.local_buf, err, errlen)) != DTRAIN_OK)
            return rc;
        f.local = f.local_buf;
        /* every rank's node folder writable, or every rank stops now (exit 2), not at the first checkpoint */
        int bad = dtrain_out_check_dir(f.local, "node-local checkpoint folder (--ckpt-local-dir)", err, errlen) !=
                  DTRAIN_OK;
        double mine = bad, any = 0.0;
        if ((rc = dtrain_pcomm_sum_doubles(f.world, &mine, &any, 1, "checking the node-local folders", err,
                                           errlen)) != DTRAIN_OK)
            return rc;
        if (any > 0.0) {
            if (!bad)
                snprintf(err, errlen, "%.0f rank%s cannot write its node-local checkpoint folder (--ckpt-local-dir "
                         "%s): see their lines", any, any > 1 ? "s" : "", cfg->ckpt_local_dir);
            return DTRAIN_ERR_INPUT;
        }
        /* collective: every rank has the same config */
        if ((rc = dtrain_sckpt_peers(f.world, bs->node, &f.peers, err, errlen)) != DTRAIN_OK)
            return rc;
        if (is_root(&f) && (f.peers.nodes < 2 || f.peers.same_node))
            fprintf(stderr, "%s: warning: --ckpt-local-dir: %s: a node's lost disk can lose a node-local checkpoint "
                    "(the shared tier, --ckpt-dir, is the fallback)\n", f.prog, f.peers.nodes < 2 ?
                    "every rank is on one node, so no shard has a copy on another node" :
                    "the nodes hold uneven numbers of ranks, so some shards' copies are on their own node");
    }
    if ((rc = dtrain_ft_pieces(t, cfg, bs, &f.pieces, err, errlen)) != DTRAIN_OK)
        return rc;
    rc = DTRAIN_ERR_SYSTEM;
    if (dtrain_signals_install(err, errlen) != 0)
        goto out;
    signals = 1;
    struct dtrain_watchdog_options wo = {
        .abort_flag = abort_flag, .comms = comms, .fault = fault,
        .stall_s = cfg->watchdog > 0 ? cfg->watchdog : 2.0 * cfg->comm_timeout, .grace_s = GRACE_S,
        .hang_s = cfg->hang_detect,
    };
    if (dtrain_watchdog_start(&wo, &f.wd, err, errlen) != 0)
        goto out;
    if ((rc = start_heartbeat(&f, err, errlen)) != DTRAIN_OK)
        goto out;
    dtrain_ptrainer_set_watchdog(t, f.wd);
    /* a trainer that has trained already (dtrain_trainer.h's) goes on from where it is */
    if ((f.dir != NULL || f.resume != NULL) && dtrain_ptrainer_steps_done(t) == 0) {
        if (f.dir != NULL)
            inject_corruption(&f);
        /* the same folder named twice is the folder: last_dir then says so */
        const char *from = f.resume != NULL && (f.dir == NULL || strcmp(f.resume, f.dir) != 0) ? f.resume : f.dir;
        if ((rc = barrier(&f, "before resuming", err, errlen)) != DTRAIN_OK ||
            (rc = load_checkpoint(&f, from, 0, f.resume != NULL, err, errlen)) != DTRAIN_OK)
            goto out;
    } else if ((rc = dtrain_ptrainer_metrics_from(t, dtrain_ptrainer_steps_done(t), err, errlen)) != DTRAIN_OK) {
        goto out;
    }
    f.traffic_first = dtrain_ptrainer_steps_done(t);
    if (f.traffic) {
        char why[256];
        int lrc = dtrain_traffic_links(&f.links, why, sizeof why);
        f.have_links = lrc == 1;
        if (lrc < 0 && is_root(&f))
            fprintf(stderr, "%s: warning: %s ignored (no predicted times): %s\n", f.prog, DTRAIN_ENV_GROUP_LINKS, why);
    }
    if (f.traffic && is_root(&f))
        dtrain_traffic_explain(f.progress, f.prog, cfg, bs, comms, 4, f.have_links ? &f.links : NULL);
    if ((rc = train(&f, err, errlen)) != DTRAIN_OK)
        goto out;
    /* Ranks that finish first close their links, which a peer's watchdog
     * would take for a fault.  Each rank stops its watchdog before a last
     * barrier: no rank leaves the barrier before every rank has entered it,
     * so every watchdog is off before any link closes. */
    dtrain_ptrainer_set_watchdog(t, NULL);
    dtrain_watchdog_stop(f.wd);
    f.wd = NULL;
    if ((rc = barrier(&f, "at the end of the run", err, errlen)) == DTRAIN_OK)
        rc = dtrain_ptrainer_finish(t, err, errlen);
    if (rc == DTRAIN_OK)
        dtrain_ptrainer_summary(t, f.progress, f.prog, f.dir);
out:
    if (rc == DTRAIN_ERR_FAULT && abort_flag != NULL)
        atomic_store(abort_flag, 1); /* stop every communicator of the process now */
    dtrain_ptrainer_set_watchdog(t, NULL);
    dtrain_ckpt_async_abandon(&f.async); /* a fault: its step-N.tmp stays for resume to remove */
    dtrain_watchdog_stop(f.wd);
    if (signals)
        dtrain_signals_restore();
    dtrain_ft_pieces_free(&f.pieces);
    return rc;
}

/* ------------------------------------------------------------ one checkpoint, outside the loop */

int dtrain_ft_save(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg, const struct dtrain_bootstrap *bs,
                   dtrain_comm *world, const char *dir, char *err, size_t errlen)
{
    struct dtrain_ft_pieces p;
    struct dtrain_sckpt_stats st;
    const struct dtrain_sckpt_layout layout = layout_of(bs, cfg);
    int rc = dtrain_ft_pieces(t, cfg, bs, &p, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_ft_pieces_download(&p);
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
    if (rc == DTRAIN_OK) {
        dtrain_ft_pieces_upload(&p);
        dtrain_ptrainer_set_position(t, (long)res.step, res.data_batches);
        dtrain_ptrainer_set_scaler(t, &res.scaler);
    }
    dtrain_ft_pieces_free(&p);
    return rc;
}
