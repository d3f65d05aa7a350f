/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Sharded checkpoints: the commit protocol (save) and the resume policy;
 * the files are sckpt_folder.c, sckpt_manifest.c and sckpt_shard.c (see
 * sckpt_internal.h and dtrain_shard_ckpt.h). */
#include "sckpt_internal.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"
#include "dtrain_ckpt_async.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ agreement */

/* Every rank's n int32 values into all[size * n] (the comm's control
 * plane).  world NULL: one rank. */
int sckpt_gather_ints(dtrain_comm *world, const int32_t *mine, int n, int32_t *all, const char *what,
                      char *err, size_t errlen)
{
    if (world == NULL) {
        memcpy(all, mine, (size_t)n * sizeof *mine);
        return DTRAIN_OK;
    }
    int rc = dtrain_comm_all_gather_bytes(world, mine, all, (size_t)n * sizeof *mine);
    return dtrain_pcomm_status(world, rc, what, err, errlen);
}

int sckpt_gather_flags(dtrain_comm *world, int size, int flag, int32_t **all, const char *what, char *err,
                       size_t errlen)
{
    int32_t mine = flag != 0;
    if ((*all = malloc((size_t)size * sizeof **all)) == NULL) {
        dtrain_snprintf(err, errlen, "%s: out of memory for %d ranks' flags", what, size);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = sckpt_gather_ints(world, &mine, 1, *all, what, err, errlen);
    if (rc != DTRAIN_OK) {
        free(*all);
        *all = NULL;
    }
    return rc;
}

int sckpt_bcast(dtrain_comm *world, void *buf, size_t bytes, const char *what, char *err, size_t errlen)
{
    if (world == NULL)
        return DTRAIN_OK;
    return dtrain_pcomm_status(world, dtrain_comm_broadcast(world, buf, bytes, 0), what, err, errlen);
}

int dtrain_sckpt_write_shard(const char *dir, const struct dtrain_train_config *cfg,
                             const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                             const struct dtrain_sckpt_piece *pieces, size_t npieces, int fail_write,
                             struct dtrain_sckpt_written *w)
{
    return sckpt_write_shard_kept(dir, cfg, layout, step, data_batches, pieces, npieces, fail_write, NULL, w);
}

int sckpt_write_shard_kept(const char *dir, const struct dtrain_train_config *cfg,
                           const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                           const struct dtrain_sckpt_piece *pieces, size_t npieces, int fail_write,
                           struct sckpt_image *img, struct dtrain_sckpt_written *w)
{
    double t0 = dtrain_clock_s();
    const struct dtrain_sckpt_layout *L = layout;
    const uint64_t nparams = sckpt_nparams(cfg);
    char tmp[DTRAIN_PATH_MAX], path[DTRAIN_PATH_MAX], name[32];
    struct record rec = {0};
    int tmp_fd = -1;
    memset(w, 0, sizeof *w);
    for (size_t i = 0; i < npieces; i++) {
        const struct dtrain_sckpt_piece *p = &pieces[i];
        if (p->params == NULL || p->m == NULL || p->v == NULL || p->count == 0 || p->whole > nparams ||
            p->count > nparams - p->whole || (i > 0 && p->whole < pieces[i - 1].whole + pieces[i - 1].count)) {
            dtrain_snprintf(w->why, sizeof w->why, "run %zu of rank %d is empty, out of order or outside the model",
                            i, L->rank);
            w->invalid = 1;
            w->error = EINVAL;
            return DTRAIN_ERR_SYSTEM;
        }
    }
    sckpt_shard_name(name, sizeof name, L->rank);
    if (sckpt_step_path(tmp, sizeof tmp, dir, step, ".tmp") != 0 ||
        dtrain_snprintf(path, sizeof path, "%s/%s", tmp, name) != 0) {
        rec.error = ENAMETOOLONG;
        dtrain_snprintf(w->why, sizeof w->why, "checkpoint folder path too long: %.80s...", dir);
    } else if ((tmp_fd = sckpt_open_step_dir(tmp, w->why, sizeof w->why)) < 0) {
        rec.error = errno ? errno : EIO;
    } else if (sckpt_write_shard(tmp_fd, path, L, step, data_batches, nparams, pieces, npieces, fail_write, img, &rec,
                                 w->why, sizeof w->why) == DTRAIN_OK) {
        if (fsync(tmp_fd) != 0) {
            rec.error = errno;
            dtrain_snprintf(w->why, sizeof w->why, "cannot sync %s: %s", tmp, strerror(errno));
        }
    }
    if (tmp_fd >= 0)
        close(tmp_fd);
    w->error = rec.error;
    w->bytes = rec.bytes;
    w->floats = rec.floats;
    w->checksum = rec.checksum;
    w->seconds = dtrain_clock_s() - t0;
    return rec.error == 0 ? DTRAIN_OK : DTRAIN_ERR_SYSTEM;
}

int dtrain_sckpt_commit(const char *dir, const struct dtrain_train_config *cfg,
                        const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                        const struct dtrain_sckpt_scaler *scaler, dtrain_comm *world, int keep,
                        const struct dtrain_sckpt_written *w, struct dtrain_sckpt_stats *st, char *err, size_t errlen)
{
    double t0 = dtrain_clock_s();
    const struct dtrain_sckpt_layout *L = layout;
    char tmp[DTRAIN_PATH_MAX], final[DTRAIN_PATH_MAX];
    struct record mine = {w->error, 0, w->error == 0 ? w->bytes : 0, w->floats, w->checksum};
    struct record *all = NULL;
    int rc;
    memset(st, 0, sizeof *st);
    st->bytes = mine.bytes;
    st->failed_here = mine.error != 0;
    if (sckpt_step_path(tmp, sizeof tmp, dir, step, ".tmp") != 0 || sckpt_step_path(final, sizeof final, dir, step, "") != 0)
        mine.error = mine.error ? mine.error : ENAMETOOLONG;

    /* The barrier: every rank's outcome on every rank. */
    all = malloc((size_t)L->world_size * sizeof *all);
    if (all == NULL) {
        dtrain_snprintf(err, errlen, "out of memory for %d checkpoint records", L->world_size);
        return DTRAIN_ERR_SYSTEM;
    }
    rc = sckpt_gather_ints(world, (const int32_t *)(const void *)&mine, RECORD_INTS, (int32_t *)(void *)all,
                     "checkpoint: gathering the shards' outcomes", err, errlen);
    if (rc != DTRAIN_OK)
        goto out;

    struct { int32_t rc, pad; char msg[504]; } outcome = {DTRAIN_OK, 0, ""};
    if (L->rank == 0) {
        int failed = 0, first = -1;
        for (int r = 0; r < L->world_size; r++)
            if (all[r].error != 0 && failed++ == 0)
                first = r;
        if (failed > 0) {
            outcome.rc = DTRAIN_ERR_SYSTEM;
            dtrain_snprintf(outcome.msg, sizeof outcome.msg, "checkpoint of step %" PRIu64 " not written: rank %d "
                     "could not write its shard (%s)%s", step, first, strerror(all[first].error),
                     failed > 1 ? ", and other ranks too" : "");
            sckpt_remove_step_dir(tmp);
        } else {
            outcome.rc = sckpt_commit(dir, tmp, final, cfg, L, step, data_batches, scaler, all, outcome.msg, sizeof outcome.msg);
            if (outcome.rc == DTRAIN_OK && keep != DTRAIN_SCKPT_PRUNE_LATER)
                sckpt_prune(dir, keep);
            else if (outcome.rc != DTRAIN_OK)
                sckpt_remove_step_dir(tmp);
        }
        for (int r = 0; r < L->world_size; r++)
            st->total_bytes += all[r].bytes;
    }
    if ((rc = sckpt_bcast(world, &outcome, sizeof outcome, "checkpoint: the outcome", err, errlen)) != DTRAIN_OK)
        goto out;
    rc = outcome.rc;
    if (rc != DTRAIN_OK && mine.error != 0) /* the failing rank says what failed here */
        dtrain_snprintf(err, errlen, "checkpoint of step %" PRIu64 " not written: rank %d: %s", step, L->rank, w->why);
    else if (rc != DTRAIN_OK)
        dtrain_snprintf(err, errlen, "%s", outcome.msg);
out:
    free(all);
    st->seconds = dtrain_clock_s() - t0;
    return rc;
}

/* This rank's shard of a save (dtrain_sckpt_save's step 1). */
struct shard_write {
    const char *dir;
    const struct dtrain_train_config *cfg;
    const struct dtrain_sckpt_layout *layout;
    uint64_t step, data_batches;
    const struct dtrain_sckpt_piece *pieces;
    size_t npieces;
    int fail_write;
    struct dtrain_sckpt_written *w;
};

static void shard_write(void *p)
{
    const struct shard_write *j = p;
    dtrain_sckpt_write_shard(j->dir, j->cfg, j->layout, j->step, j->data_batches, j->pieces, j->npieces,
                             j->fail_write, j->w);
}

int dtrain_sckpt_save(const char *dir, const struct dtrain_train_config *cfg,
                      const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                      const struct dtrain_sckpt_scaler *scaler, dtrain_comm *world,
                      const struct dtrain_sckpt_piece *pieces, size_t npieces,
                      int keep, int fail_write, struct dtrain_sckpt_stats *st, char *err, size_t errlen)
{
    struct dtrain_sckpt_written w;
    /* written while the ranks wait for each other in rounds: the commit's
     * gather below waits for no rank's disk */
    struct shard_write job = {dir, cfg, layout, step, data_batches, pieces, npieces, fail_write, &w};
    int rc = dtrain_ckpt_io_rounds(world, shard_write, &job, "checkpoint: waiting for the ranks' writes", err,
                                   errlen);
    if (rc != DTRAIN_OK) {
        memset(st, 0, sizeof *st);
        return rc;
    }
    if (w.invalid) { /* a caller's bug, said before any collective as before */
        memset(st, 0, sizeof *st);
        dtrain_snprintf(err, errlen, "checkpoint: %s", w.why);
        return DTRAIN_ERR_SYSTEM;
    }
    rc = dtrain_sckpt_commit(dir, cfg, layout, step, data_batches, scaler, world, keep > 0 ? keep : 1, &w, st, err,
                             errlen);
    st->seconds += w.seconds;
    return rc;
}

const char *sckpt_verdict_text(int v)
{
    switch (v) {
    case DAMAGED_MANIFEST: return "its manifest is unreadable or malformed";
    case DAMAGED_MISSING: return "a shard file is missing";
    case DAMAGED_SIZE: return "a shard file has another size than the manifest says";
    case DAMAGED_HEADER: return "a shard file's header does not match the manifest";
    case DAMAGED_CHECKSUM: return "a shard file's checksum does not match the manifest";
    case DAMAGED_READ: return "a shard file could not be read";
    case DAMAGED_COVERAGE: return "its shards do not cover the model";
    case NO_MEMORY: return "out of memory while reading it";
    default: return "it is unusable";
    }
}

/* ------------------------------------------------------------ resuming */

/* One candidate: manifest, verification of this rank's files, agreement,
 * loading, agreement.  Returns the agreed verdict; *bad_shard is the
 * first shard found damaged (-1 when none). */
void sckpt_resume_found(struct dtrain_sckpt_resumed *out, const struct manifest *m, const char *path,
                        const char *tier)
{
    out->found = 1;
    out->loaded_partly = 0;
    out->step = m->step;
    out->data_batches = m->data_batches;
    out->writer = m->layout;
    out->scaler = m->scaler;
    out->tier = tier;
    snprintf(out->path, sizeof out->path, "%s", path);
}

/* This rank's verification of a candidate: its manifest, then the shards
 * r = rank, rank + size, ... (every byte read, its checksum). */
struct verify {
    const char *path;
    uint64_t step;
    const struct dtrain_train_config *cfg;
    int rank, size;
    long delay_ms;
    struct manifest *m;
    uint64_t *bytes;
    int32_t *mine;
    FILE *msgs;
    const char *prog;
    char *why;
    size_t whylen;
};

static void verify_mine(void *p)
{
    struct verify *c = p;
    sckpt_hold_ms(c->delay_ms);
    c->mine[0] = sckpt_read_manifest(c->path, c->step, c->cfg, c->m, c->why, c->whylen);
    for (long r = c->rank; c->mine[0] == GOOD && r < c->m->layout.world_size; r += c->size) {
        int v = sckpt_shard_verify(c->path, r, c->m, c->bytes, c->why, c->whylen);
        if (v != GOOD) {
            c->mine[0] = v;
            c->mine[1] = (int32_t)r;
            if (c->msgs != NULL)
                fprintf(c->msgs, "%s: rank %d: checkpoint %s is damaged: %s\n", c->prog, c->rank, c->path, c->why);
        }
    }
}

static int try_candidate(const char *path, uint64_t step, const struct dtrain_train_config *cfg,
                         dtrain_comm *world, int rank, int size, const struct dtrain_sckpt_group *group,
                         const struct dtrain_sckpt_piece *pieces, size_t n,
                         FILE *msgs, const char *prog, struct manifest *m, int *bad_shard,
                         struct dtrain_sckpt_stats *st, int *loaded, char *why, size_t whylen, int *comm_rc,
                         char *err, size_t errlen)
{
    int32_t mine[2] = {GOOD, -1};
    int32_t *all = malloc((size_t)size * 2 * sizeof *all);
    int agreed = GOOD;
    *bad_shard = -1;
    *comm_rc = DTRAIN_OK;
    if (all == NULL) {
        *comm_rc = DTRAIN_ERR_SYSTEM;
        dtrain_snprintf(err, errlen, "out of memory");
        return NO_MEMORY;
    }
    /* read in a thread while the ranks wait for each other in rounds: the
     * agreement below waits for no rank's disk */
    struct verify job = {path, step, cfg, rank, size, group != NULL ? group->read_delay_ms : 0, m, &st->bytes, mine,
                         msgs, prog, why, whylen};
    if ((*comm_rc = dtrain_ckpt_io_rounds(world, verify_mine, &job, "resume: waiting for the ranks' checks", err,
                                          errlen)) != DTRAIN_OK)
        goto out;
    for (int phase = 0; phase < 2; phase++) {
        if ((*comm_rc = sckpt_gather_ints(world, mine, 2, all, "resume: agreeing on the checkpoint", err, errlen)) !=
            DTRAIN_OK)
            goto out;
        agreed = GOOD;
        for (int r = 0; r < size && agreed == GOOD; r++) {
            if (all[2 * r] != GOOD) {
                agreed = all[2 * r];
                *bad_shard = all[2 * r + 1];
            }
        }
        if (agreed == INCOMPATIBLE && mine[0] != INCOMPATIBLE) { /* every rank says the same line */
            free(m->shards);
            sckpt_read_manifest(path, step, cfg, m, why, whylen);
        }
        if (agreed != GOOD || phase == 1)
            break;
        *loaded = 1;
        mine[0] = sckpt_load_group(path, m, group, world, pieces, n, st, why, whylen, comm_rc, err, errlen);
        if (*comm_rc != DTRAIN_OK)
            goto out;
        if (mine[0] != GOOD && msgs != NULL)
            fprintf(msgs, "%s: rank %d: checkpoint %s: %s\n", prog, rank, path, why);
    }
out:
    free(all);
    return agreed;
}

int sckpt_resume_one(const char *dir, uint64_t step, const char *next, const struct dtrain_train_config *cfg,
                     dtrain_comm *world, const struct dtrain_sckpt_group *group,
                     const struct dtrain_sckpt_piece *pieces, size_t npieces, FILE *msgs,
                     const char *prog, struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st, char *err,
                     size_t errlen)
{
    int rank = world != NULL ? dtrain_comm_rank(world) : 0, size = world != NULL ? dtrain_comm_size(world) : 1;
    char path[DTRAIN_PATH_MAX], why[768] = "";
    struct manifest m;
    int bad_shard, comm_rc;
    if (sckpt_step_path(path, sizeof path, dir, step, "") != 0) {
        dtrain_snprintf(err, errlen, "checkpoint folder path too long: %.80s...", dir);
        return DTRAIN_ERR_INPUT;
    }
    int v = try_candidate(path, step, cfg, world, rank, size, group, pieces, npieces, msgs, prog, &m, &bad_shard, st,
                          &out->loaded_partly, why, sizeof why, &comm_rc, err, errlen);
    if (comm_rc != DTRAIN_OK) {
        free(m.shards);
        return comm_rc;
    }
    if (v == GOOD) {
        sckpt_resume_found(out, &m, path, "shared");
        free(m.shards);
        return DTRAIN_OK;
    }
    free(m.shards);
    if (v == INCOMPATIBLE) {
        dtrain_snprintf(err, errlen, "%s", why);
        return DTRAIN_ERR_INPUT;
    }
    out->damaged++;
    if (rank == 0) {
        char damaged[DTRAIN_PATH_MAX], shard[48] = "";
        if (bad_shard >= 0)
            snprintf(shard, sizeof shard, " (shard-%05d.bin)", bad_shard);
        if (msgs != NULL) {
            fprintf(msgs, "%s: checkpoint %s is damaged: %s%s; %s\n", prog, path, sckpt_verdict_text(v), shard, next);
            if (v == DAMAGED_MANIFEST)
                fprintf(msgs, "%s: %s\n", prog, why);
            fflush(msgs);
        }
        /* kept for a look, out of the way of later saves and resumes */
        if (sckpt_step_path(damaged, sizeof damaged, dir, step, ".damaged") == 0) {
            sckpt_remove_step_dir(damaged);
            rename(path, damaged);
        }
    }
    return DTRAIN_OK;
}

int sckpt_shared_list(const char *dir, dtrain_comm *world, uint64_t *steps, int *count, char *err, size_t errlen)
{
    int rank = world != NULL ? dtrain_comm_rank(world) : 0, rc;
    struct { int32_t count, pad; uint64_t steps[MAX_CANDIDATES]; char msg[DTRAIN_PATH_MAX + 512]; } list;
    memset(&list, 0, sizeof list);
    if (rank == 0) {
        /* a stranger's folder is neither tidied nor read */
        long n = sckpt_check_trusted(dir, "checkpoint folder", NULL, 0, list.msg, sizeof list.msg) != 0 ? -2 : 0;
        if (n == 0) {
            sckpt_remove_partial(dir);
            n = sckpt_list_steps(dir, "", list.steps, MAX_CANDIDATES);
            if (n < 0)
                snprintf(list.msg, sizeof list.msg, "cannot read checkpoint folder %.200s: %s", dir, strerror(errno));
            else if (sckpt_check_trusted(dir, "checkpoint folder", list.steps, n < MAX_CANDIDATES ? n : MAX_CANDIDATES,
                                         list.msg, sizeof list.msg) != 0)
                n = -2;
        }
        list.count = (int32_t)(n < 0 ? -1 : n < MAX_CANDIDATES ? n : MAX_CANDIDATES);
    }
    if ((rc = sckpt_bcast(world, &list, sizeof list, "resume: the list of checkpoints", err, errlen)) != DTRAIN_OK)
        return rc;
    if (list.count < 0) {
        dtrain_snprintf(err, errlen, "%s", list.msg);
        return DTRAIN_ERR_INPUT;
    }
    memcpy(steps, list.steps, sizeof list.steps);
    *count = list.count;
    return DTRAIN_OK;
}

int dtrain_sckpt_resume(const char *dir, const struct dtrain_train_config *cfg, dtrain_comm *world,
                        const struct dtrain_sckpt_piece *pieces, size_t npieces, FILE *msgs,
                        const char *prog, struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st,
                        char *err, size_t errlen)
{
    return dtrain_sckpt_resume_group(dir, cfg, world, NULL, pieces, npieces, msgs, prog, out, st, err, errlen);
}

int dtrain_sckpt_resume_group(const char *dir, const struct dtrain_train_config *cfg, dtrain_comm *world,
                              const struct dtrain_sckpt_group *group, const struct dtrain_sckpt_piece *pieces,
                              size_t npieces, FILE *msgs, const char *prog, struct dtrain_sckpt_resumed *out,
                              struct dtrain_sckpt_stats *st, char *err, size_t errlen)
{
    double t0 = dtrain_clock_s();
    uint64_t steps[MAX_CANDIDATES];
    int count = 0, rc;
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    /* Rank 0 tidies up and says which checkpoints there are. */
    if ((rc = sckpt_shared_list(dir, world, steps, &count, err, errlen)) != DTRAIN_OK)
        goto out;
    for (int i = 0; i < count; i++) {
        char next[96] = "there is no older one";
        if (i + 1 < count)
            snprintf(next, sizeof next, "falling back to step %" PRIu64, steps[i + 1]);
        if ((rc = sckpt_resume_one(dir, steps[i], next, cfg, world, group, pieces, npieces, msgs, prog, out, st, err,
                                   errlen)) != DTRAIN_OK || out->found)
            goto out;
    }
    rc = DTRAIN_OK;
out:
    st->seconds = dtrain_clock_s() - t0;
    return rc;
}
