/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The node-local checkpoint tier: the peers that keep each other's
 * shards, the copies, the commit by each node's lowest rank, and the
 * resume from either tier; see dtrain_shard_ckpt.h. */
#include "sckpt_internal.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"
#include "dtrain_ckpt_async.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCAL_CANDIDATES 16 /* complete steps each rank reports from its node's folder */

/* ------------------------------------------------------------ peers */

struct by_node { int32_t node, rank; };

static int cmp_node(const void *a, const void *b)
{
    const struct by_node *x = a, *y = b;
    return x->node != y->node ? (x->node < y->node ? -1 : 1) : (x->rank < y->rank ? -1 : x->rank > y->rank);
}

int dtrain_sckpt_peers(dtrain_comm *world, long node, struct dtrain_sckpt_peers *out, char *err, size_t errlen)
{
    int rank = world != NULL ? dtrain_comm_rank(world) : 0, size = world != NULL ? dtrain_comm_size(world) : 1;
    int32_t mine = (int32_t)node;
    int32_t *nodes = malloc((size_t)size * sizeof *nodes);
    struct by_node *order = malloc((size_t)size * sizeof *order);
    int rc = DTRAIN_ERR_SYSTEM;
    *out = (struct dtrain_sckpt_peers){-1, -1, rank, 1, 0, NULL};
    if (nodes == NULL || order == NULL) {
        dtrain_snprintf(err, errlen, "out of memory for %d ranks' nodes", size);
        goto out;
    }
    if ((rc = sckpt_gather_ints(world, &mine, 1, nodes, "checkpoint: the ranks' nodes", err, errlen)) != DTRAIN_OK)
        goto out;
    for (int r = 0; r < size; r++)
        order[r] = (struct by_node){nodes[r], r};
    qsort(order, (size_t)size, sizeof *order, cmp_node);
    int most = 0, pos = 0;
    out->nodes = 0;
    for (int i = 0, run = 0; i < size; i++) {
        if (i == 0 || order[i].node != order[i - 1].node) {
            out->nodes++;
            run = 0;
        }
        if (++run > most)
            most = run;
        if (order[i].rank == rank)
            pos = i;
    }
    for (int i = 0; i < size; i++)
        if (order[i].node == mine) {
            out->leader = order[i].rank; /* the first of its node in (node, rank) order */
            break;
        }
    if (out->nodes > 1) {
        out->peer = order[(pos + most) % size].rank;
        out->src = order[(pos - most % size + size) % size].rank;
        for (int i = 0; i < size; i++)
            if (order[(i + most) % size].node == order[i].node)
                out->same_node = 1;
    }
    rc = DTRAIN_OK;
out:
    free(nodes);
    free(order);
    return rc;
}

/* ------------------------------------------------------------ the copies' communicator */

static int bcast_from(dtrain_comm *world, void *buf, size_t bytes, int root, const char *what, char *err,
                      size_t errlen)
{
    if (world == NULL)
        return DTRAIN_OK;
    return dtrain_pcomm_status(world, dtrain_comm_broadcast(world, buf, bytes, root), what, err, errlen);
}

int dtrain_sckpt_swap_copies(dtrain_comm *c, int peer, int src, const void *mine, size_t len, void **theirs,
                             size_t *theirs_cap, size_t *theirs_len, char *why, size_t whylen)
{
    uint64_t out = len, in = 0;
    *theirs_len = 0;
    if (dtrain_comm_sendrecv(c, &out, sizeof out, peer, &in, sizeof in, src) != DTRAIN_OK) {
        dtrain_snprintf(why, whylen, "the peer copy's size: %s", dtrain_comm_error_message(c));
        return EIO;
    }
    if (in > *theirs_cap) { /* the room is kept for the next checkpoint's copy */
        free(*theirs);
        *theirs_cap = 0;
        if (in > SIZE_MAX - 1 || (*theirs = malloc((size_t)in)) == NULL) {
            *theirs = NULL;
            dtrain_comm_abort(c); /* the sender cannot be left waiting on the link */
            dtrain_snprintf(why, whylen, "out of memory for rank %d's checkpoint copy (%llu bytes)", src,
                            (unsigned long long)in);
            return ENOMEM;
        }
        *theirs_cap = (size_t)in;
    }
    if (dtrain_comm_sendrecv(c, mine, len, peer, *theirs, (size_t)in, src) != DTRAIN_OK) {
        dtrain_snprintf(why, whylen, "the peer copy: %s", dtrain_comm_error_message(c));
        return EIO;
    }
    *theirs_len = (size_t)in;
    return 0;
}

/* ------------------------------------------------------------ copies */

/* A whole file into memory (never a blocking open). */
static int read_whole(const char *path, void **bytes, size_t *len, char *why, size_t whylen)
{
    off_t size = 0;
    int fd = dtrain_open_regular(path, O_RDONLY, "checkpoint file", &size, why, whylen);
    *bytes = NULL;
    *len = 0;
    if (fd < 0)
        return ENOENT;
    unsigned char *buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        close(fd);
        dtrain_snprintf(why, whylen, "out of memory for %s (%lld bytes)", path, (long long)size);
        return ENOMEM;
    }
    size_t got = 0;
    while (got < (size_t)size) {
        ssize_t n = read(fd, buf + got, (size_t)size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            dtrain_snprintf(why, whylen, "cannot read %s: %s", path, strerror(e));
            free(buf);
            close(fd);
            return e;
        }
        got += (size_t)n;
    }
    close(fd);
    *bytes = buf;
    *len = got;
    return 0;
}

/* bytes as folder/name (temporary name, fsync, rename), folder created
 * (sckpt_open_step_dir: never written through a link). */
static int write_file(const char *folder, const char *name, const void *bytes, size_t len, char *why, size_t whylen)
{
    char path[DTRAIN_PATH_MAX];
    if (dtrain_snprintf(path, sizeof path, "%s/%s", folder, name) != 0) {
        dtrain_snprintf(why, whylen, "checkpoint folder path too long: %.80s...", folder);
        return ENAMETOOLONG;
    }
    int fd = sckpt_open_step_dir(folder, why, whylen);
    if (fd < 0)
        return errno ? errno : EIO;
    struct dtrain_out_file o;
    errno = 0;
    int e = 0;
    if (dtrain_out_openat(&o, fd, path, why, whylen) != DTRAIN_OK) {
        e = errno ? errno : EIO;
    } else {
        dtrain_out_write(&o, bytes, len);
        e = o.write_errno;
        if (dtrain_out_commit(&o, why, whylen) != DTRAIN_OK)
            e = e ? e : (o.write_errno ? o.write_errno : EIO);
        else
            e = 0;
    }
    close(fd);
    return e;
}

/* One rank reads a file into memory (or writes one from it) while every
 * rank waits in rounds (dtrain_ckpt_io_rounds): a slow disk there keeps
 * the others out of the transfers, which then move bytes in memory, and
 * no rank waits inside a send, a receive or a broadcast for another's
 * disk past --comm-timeout. */
struct file_io {
    int active;                 /* this rank does the I/O; the others only wait */
    int write;                  /* write buf into folder/name; else read folder/name into buf */
    const char *folder, *name;
    void *buf;                  /* read: malloc'd here (the caller frees it) */
    size_t len;
    long delay_ms;              /* fault injection: a slow read */
    int err;                    /* 0, or the errno */
    char *why;
    size_t whylen;
};

static void file_io_run(void *p)
{
    struct file_io *f = p;
    char file[DTRAIN_PATH_MAX];
    if (!f->active)
        return;
    if (f->write) {
        f->err = write_file(f->folder, f->name, f->buf, f->len, f->why, f->whylen);
        return;
    }
    sckpt_hold_ms(f->delay_ms);
    if (dtrain_snprintf(file, sizeof file, "%s/%s", f->folder, f->name) != 0) {
        dtrain_snprintf(f->why, f->whylen, "path too long: %.80s/%s", f->folder, f->name);
        f->err = ENAMETOOLONG;
        return;
    }
    f->err = read_whole(file, &f->buf, &f->len, f->why, f->whylen);
}

/* f's I/O on the rank whose f->active is set, every rank of world waiting: the comm status */
static int file_in_rounds(dtrain_comm *world, struct file_io *f, char *err, size_t errlen)
{
    return dtrain_ckpt_io_rounds(world, file_io_run, f,
                                 f->write ? "resume: waiting for a node-local file's write"
                                          : "resume: waiting for a node-local file's read",
                                 err, errlen);
}

int dtrain_sckpt_write_copy(const char *dir, uint64_t step, int rank, const void *bytes, size_t len, char *why,
                            size_t whylen)
{
    char folder[DTRAIN_PATH_MAX], name[32];
    if (sckpt_step_path(folder, sizeof folder, dir, step, ".tmp") != 0) {
        dtrain_snprintf(why, whylen, "checkpoint folder path too long: %.80s...", dir);
        return ENAMETOOLONG;
    }
    sckpt_shard_name(name, sizeof name, rank);
    int e = write_file(folder, name, bytes, len, why, whylen);
    if (e == 0 && sckpt_fsync_dir(folder) != 0) {
        e = errno;
        dtrain_snprintf(why, whylen, "cannot sync %s: %s", folder, strerror(e));
    }
    return e;
}

/* ------------------------------------------------------------ commit */

int dtrain_sckpt_commit_local(const char *dir, const struct dtrain_train_config *cfg,
                              const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                              const struct dtrain_sckpt_scaler *scaler, dtrain_comm *world, int keep,
                              const struct dtrain_sckpt_peers *peers, const struct dtrain_sckpt_written *w,
                              int copy_error, const char *copy_why, struct dtrain_sckpt_stats *st, char *err,
                              size_t errlen)
{
    double t0 = dtrain_clock_s();
    const struct dtrain_sckpt_layout *L = layout;
    const int leader = peers->leader == L->rank;
    char tmp[DTRAIN_PATH_MAX], final[DTRAIN_PATH_MAX], msg[512] = "";
    struct record mine = {w->error ? w->error : copy_error, 0, w->error == 0 ? w->bytes : 0, w->floats, w->checksum};
    struct record *all = malloc((size_t)L->world_size * sizeof *all);
    int32_t *outcomes = malloc((size_t)L->world_size * sizeof *outcomes);
    int rc;
    memset(st, 0, sizeof *st);
    st->bytes = mine.bytes;
    st->failed_here = mine.error != 0;
    if (all == NULL || outcomes == NULL) {
        free(all);
        free(outcomes);
        dtrain_snprintf(err, errlen, "out of memory for %d checkpoint records", L->world_size);
        return DTRAIN_ERR_SYSTEM;
    }
    if (sckpt_step_path(tmp, sizeof tmp, dir, step, ".tmp") != 0 || sckpt_step_path(final, sizeof final, dir, step, "") != 0)
        mine.error = mine.error ? mine.error : ENAMETOOLONG;
    /* The barrier: every shard and every copy on disk, on every rank's word. */
    if ((rc = sckpt_gather_ints(world, (const int32_t *)(const void *)&mine, RECORD_INTS, (int32_t *)(void *)all,
                                "checkpoint: gathering the shards' outcomes", err, errlen)) != DTRAIN_OK)
        goto out;
    int failed = 0, first = -1;
    for (int r = 0; r < L->world_size; r++) {
        st->total_bytes += all[r].bytes;
        if (all[r].error != 0 && failed++ == 0)
            first = r;
    }
    int32_t committed = DTRAIN_OK;
    if (failed == 0 && leader) {
        committed = sckpt_commit(dir, tmp, final, cfg, L, step, data_batches, scaler, all, msg, sizeof msg);
        if (committed == DTRAIN_OK && keep != DTRAIN_SCKPT_PRUNE_LATER)
            sckpt_prune(dir, keep);
    }
    if (failed > 0 && leader)
        sckpt_remove_step_dir(tmp);
    /* every node's folder committed, or the run goes on from the one before */
    if ((rc = sckpt_gather_ints(world, &committed, 1, outcomes, "checkpoint: the nodes' commits", err, errlen)) !=
        DTRAIN_OK)
        goto out;
    int node_failed = -1;
    for (int r = 0; r < L->world_size && node_failed < 0; r++)
        if (outcomes[r] != DTRAIN_OK)
            node_failed = r;
    rc = DTRAIN_OK;
    if (failed > 0) {
        rc = DTRAIN_ERR_SYSTEM;
        if (mine.error != 0)
            dtrain_snprintf(err, errlen, "node-local checkpoint of step %" PRIu64 " not written: rank %d: %s", step,
                            L->rank, w->error ? w->why : copy_why);
        else
            dtrain_snprintf(err, errlen, "node-local checkpoint of step %" PRIu64 " not written: rank %d could not "
                            "write its shard or its peer's copy (%s)%s", step, first, strerror(all[first].error),
                            failed > 1 ? ", and other ranks too" : "");
    } else if (node_failed >= 0) {
        rc = DTRAIN_ERR_SYSTEM; /* the other nodes' folders stay: resume checks what each holds */
        if (committed != DTRAIN_OK)
            dtrain_snprintf(err, errlen, "node-local checkpoint of step %" PRIu64 " not committed on rank %d's node: "
                            "%s", step, L->rank, msg);
        else
            dtrain_snprintf(err, errlen, "node-local checkpoint of step %" PRIu64 " not committed on rank %d's node",
                            step, node_failed);
    }
out:
    free(all);
    free(outcomes);
    st->seconds = dtrain_clock_s() - t0;
    return rc;
}

/* ------------------------------------------------------------ resume */

enum copy_state { ABSENT = 0, HELD = 1, BAD = 2, OTHER_RUN = 3 };

/* Per rank, gathered: its own shard's state, its peer copy's, whose copy
 * it keeps, its node's manifest's, its node's leader. */
struct local_view {
    int32_t own, copy, src, manifest, leader, pad;
};
#define VIEW_INTS ((int)(sizeof(struct local_view) / sizeof(int32_t)))

static int copy_state(const char *path, long r, const struct manifest *m, uint64_t *bytes, char *why, size_t whylen)
{
    if (r < 0 || r >= m->layout.world_size)
        return ABSENT;
    int v = sckpt_shard_verify(path, r, m, bytes, why, whylen);
    return v == GOOD ? HELD : v == DAMAGED_MISSING ? ABSENT : BAD;
}

/* Send the file `name` of step folder `path` from rank `holder` to every
 * rank; the leaders write it into their node's `into` folder.  Reads and
 * writes in rounds (file_in_rounds).  Returns the comm status; *werr the
 * write's errno here (leaders). */
static int spread_file(dtrain_comm *world, int rank, int holder, int leader, const char *path, const char *name,
                       const char *into, long delay_ms, int *werr, char *why, size_t whylen, char *err,
                       size_t errlen)
{
    struct file_io rd = {.active = rank == holder, .folder = path, .name = name, .delay_ms = delay_ms, .why = why,
                         .whylen = whylen};
    void *buf = NULL;
    uint64_t size = 0;
    int rc;
    if ((rc = file_in_rounds(world, &rd, err, errlen)) != DTRAIN_OK)
        goto out;
    if (rank == holder) {
        buf = rd.buf;
        size = rd.err != 0 ? UINT64_MAX : rd.len; /* UINT64_MAX, said to every rank: this copy went away */
    }
    if ((rc = bcast_from(world, &size, sizeof size, holder, "resume: a node-local file's size", err, errlen)) !=
        DTRAIN_OK)
        goto out;
    if (size == UINT64_MAX) {
        *werr = EIO;
        dtrain_snprintf(why, whylen, "%s/%s could not be read again on rank %d", path, name, holder);
        goto out;
    }
    if (rank != holder && (buf = malloc((size_t)size + 1)) == NULL) {
        dtrain_snprintf(err, errlen, "out of memory for %s (%" PRIu64 " bytes)", name, size);
        rc = DTRAIN_ERR_SYSTEM; /* every rank must take part in the broadcast: this one cannot */
        goto out;
    }
    if ((rc = bcast_from(world, buf, (size_t)size, holder, "resume: a node-local file", err, errlen)) != DTRAIN_OK)
        goto out;
    struct file_io wr = {.active = leader && *werr == 0, .write = 1, .folder = into, .name = name, .buf = buf,
                         .len = (size_t)size, .why = why, .whylen = whylen};
    rc = file_in_rounds(world, &wr, err, errlen);
    if (rc == DTRAIN_OK && wr.active)
        *werr = wr.err;
out:
    free(buf);
    return rc;
}

#define NEED_MAX 16 /* shards a rank may lack (more on some rank: every file goes to every node) */

/* 1 when the node led by `leader` holds a verified shard s (a rank's own, or the copy a rank keeps). */
static int node_has(const struct local_view *all, int size, int leader, int s)
{
    for (int q = 0; q < size; q++)
        if (all[q].leader == leader && ((q == s && all[q].own == HELD) || (all[q].src == s && all[q].copy == HELD)))
            return 1;
    return 0;
}

/* 1 when that node's folder is sound (its manifest good, no file damaged):
 * what it lacks goes into it; else the folder is built anew in step-N.tmp. */
static int node_intact(const struct local_view *all, int size, int leader)
{
    if (all[leader].manifest != HELD)
        return 0;
    for (int q = 0; q < size; q++)
        if (all[q].leader == leader && (all[q].own == BAD || all[q].copy == BAD || all[q].manifest == BAD))
            return 0;
    return 1;
}

struct need {
    int32_t count, pad;       /* count > NEED_MAX: too many, < 0: no manifest to tell */
    int32_t shard[NEED_MAX];  /* shards this rank wants that its node lacks */
};
#define NEED_INTS ((int)(sizeof(struct need) / sizeof(int32_t)))

struct transfer { int32_t leader, shard, rank; };

static int cmp_transfer(const void *a, const void *b)
{
    const struct transfer *x = a, *y = b;
    if (x->leader != y->leader)
        return x->leader < y->leader ? -1 : 1;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The shards this rank wants in its node's folder that the node lacks:
 * its own, the copy it keeps, and those its load opens (sckpt_load_group:
 * the non-empty shards, of its DP group member's share). */
static void my_needs(const struct local_view *all, int rank, int size, const struct manifest *m,
                     const struct dtrain_sckpt_group *group, struct need *n)
{
    dtrain_comm *c = group != NULL ? group->comm : NULL;
    int members = c != NULL ? dtrain_comm_size(c) : 1, member = members > 1 ? dtrain_comm_rank(c) : 0;
    n->count = 0;
    for (int s = -2; s < size; s++) {
        int want = s == -2 ? rank : s == -1 ? all[rank].src : s;
        if (want < 0 || want >= size || (s >= 0 && (want == rank || want == all[rank].src)))
            continue;
        if (s >= 0 && (m->shards[want].floats == 0 || (members > 1 && sckpt_group_member_of(m, want, members) != member)))
            continue;
        if (node_has(all, size, all[rank].leader, want))
            continue;
        if (n->count == NEED_MAX) {
            n->count = NEED_MAX + 1;
            return;
        }
        n->shard[n->count++] = want;
    }
}

/* Shard s's file of node folder `path` from rank `from` to rank `to`,
 * which writes it into folder `into`: the read, the bytes (size first;
 * UINT64_MAX: it could not be read again) and the write, each rank of
 * world taking part in the read's and the write's rounds.  Returns the
 * comm status; on `to`, *werr the errno of what failed, *received the
 * bytes received. */
static int transfer_file(dtrain_comm *world, int rank, int from, int to, int s, const char *path, const char *into,
                         long delay_ms, int *werr, uint64_t *received, char *why, size_t whylen, char *err,
                         size_t errlen)
{
    char name[32];
    sckpt_shard_name(name, sizeof name, s);
    struct file_io rd = {.active = rank == from, .folder = path, .name = name, .delay_ms = delay_ms, .why = why,
                         .whylen = whylen};
    struct file_io wr = {.write = 1, .folder = into, .name = name, .why = why, .whylen = whylen};
    uint64_t size = 0;
    int rc = file_in_rounds(world, &rd, err, errlen);
    if (rc == DTRAIN_OK && rank == from) {
        size = rd.err != 0 ? UINT64_MAX : rd.len;
        rc = dtrain_pcomm_status(world, dtrain_comm_send(world, &size, sizeof size, to),
                                 "resume: a node-local file's size", err, errlen);
        if (rc == DTRAIN_OK && size != UINT64_MAX)
            rc = dtrain_pcomm_status(world, dtrain_comm_send(world, rd.buf, rd.len, to), "resume: a node-local file",
                                     err, errlen);
    } else if (rc == DTRAIN_OK && rank == to) {
        rc = dtrain_pcomm_status(world, dtrain_comm_recv(world, &size, sizeof size, from),
                                 "resume: a node-local file's size", err, errlen);
        if (rc == DTRAIN_OK && size == UINT64_MAX) {
            if (*werr == 0)
                dtrain_snprintf(why, whylen, "%s could not be read again on rank %d", name, from);
            *werr = *werr ? *werr : EIO;
        } else if (rc == DTRAIN_OK && (wr.buf = malloc((size_t)size + 1)) == NULL) {
            dtrain_snprintf(err, errlen, "out of memory for %s (%" PRIu64 " bytes)", name, size);
            rc = DTRAIN_ERR_SYSTEM; /* its sender waits: this rank cannot take part */
        } else if (rc == DTRAIN_OK) {
            rc = dtrain_pcomm_status(world, dtrain_comm_recv(world, wr.buf, (size_t)size, from),
                                     "resume: a node-local file", err, errlen);
            if (rc == DTRAIN_OK) {
                *received += size;
                wr.len = (size_t)size;
                wr.active = *werr == 0;
            }
        }
    }
    free(rd.buf);
    if (rc == DTRAIN_OK)
        rc = file_in_rounds(world, &wr, err, errlen);
    if (rc == DTRAIN_OK && wr.active)
        *werr = wr.err;
    free(wr.buf);
    return rc;
}

/* The verified files of the node led by `leader` linked into its new
 * folder tmp (made here): 0 or an errno. */
static int link_verified(const struct local_view *all, int size, int leader, const char *path, const char *tmp,
                         char *why, size_t whylen)
{
    int fd = sckpt_open_step_dir(tmp, why, whylen);
    if (fd < 0)
        return errno ? errno : EIO;
    close(fd);
    for (int q = -1; q < size; q++) {
        char name[32], from[DTRAIN_PATH_MAX], to[DTRAIN_PATH_MAX];
        for (int which = 0; which < 2; which++) {
            if (q < 0 ? which == 1 || all[leader].manifest != HELD
                      : all[q].leader != leader || (which == 0 ? all[q].own : all[q].copy) != HELD)
                continue;
            if (q < 0)
                dtrain_snprintf(name, sizeof name, "%s", DTRAIN_SCKPT_MANIFEST);
            else
                sckpt_shard_name(name, sizeof name, which == 0 ? q : all[q].src);
            if (dtrain_snprintf(from, sizeof from, "%s/%s", path, name) != 0 ||
                dtrain_snprintf(to, sizeof to, "%s/%s", tmp, name) != 0)
                return ENAMETOOLONG;
            if (linkat(AT_FDCWD, from, AT_FDCWD, to, 0) != 0 && errno != EEXIST) {
                int e = errno;
                dtrain_snprintf(why, whylen, "cannot link %s into %s: %s", from, tmp, strerror(e));
                return e;
            }
        }
    }
    return 0;
}

/* Each node gets only what its ranks lack (their own shards, the copies
 * they keep, the shards their loads open), point to point from a rank
 * that holds a good copy; the manifest (small) to every rank when a node
 * lost it.  A sound node folder takes the files in; any other is built
 * anew in tmp (its verified files linked).  *fallback: some rank lacks
 * more than NEED_MAX shards (the caller sends every file to every node).
 * Returns the comm status; *werr: this rank's write errno. */
static int fetch_lacking(dtrain_comm *world, int rank, int size, const struct local_view *all, const int *holder,
                         int manifest_holder, const char *path, const char *tmp, uint64_t step,
                         const struct dtrain_train_config *cfg, struct manifest *m,
                         const struct dtrain_sckpt_group *group, int *fallback, int *werr, uint64_t *received,
                         char *why, size_t whylen, char *err, size_t errlen)
{
    const int my_leader = all[rank].leader, leader = my_leader == rank;
    const char *dest = node_intact(all, size, my_leader) ? path : tmp;
    const long delay_ms = group != NULL ? group->read_delay_ms : 0;
    int rc = DTRAIN_OK, any_lacks = 0;
    struct need mine = {0, 0, {0}}, *needs = malloc((size_t)size * sizeof *needs);
    struct transfer *list = NULL;
    *fallback = 0;
    if (needs == NULL) {
        dtrain_snprintf(err, errlen, "out of memory for %d ranks' needs", size);
        return DTRAIN_ERR_SYSTEM;
    }
    for (int q = 0; q < size; q++)
        if (all[q].leader == q && all[q].manifest != HELD)
            any_lacks = 1;
    if (any_lacks) { /* the manifest, to the nodes that lost theirs */
        int32_t *ws = NULL;
        rc = spread_file(world, rank, manifest_holder, leader && all[rank].manifest != HELD, path,
                         DTRAIN_SCKPT_MANIFEST, dest, delay_ms, werr, why, whylen, err, errlen);
        if (rc == DTRAIN_OK) /* the leaders have written it before their nodes read it */
            rc = sckpt_gather_flags(world, size, *werr, &ws, "resume: the node-local manifests", err, errlen);
        free(ws);
        if (rc != DTRAIN_OK)
            goto out;
        if (all[rank].manifest != HELD) {
            free(m->shards);
            memset(m, 0, sizeof *m);
            if (sckpt_read_manifest(dest, step, cfg, m, why, whylen) != GOOD)
                mine.count = -1;
        }
    }
    if (mine.count == 0)
        my_needs(all, rank, size, m, group, &mine);
    if ((rc = sckpt_gather_ints(world, (const int32_t *)(const void *)&mine, NEED_INTS, (int32_t *)(void *)needs,
                                "resume: the shards each node lacks", err, errlen)) != DTRAIN_OK)
        goto out;
    size_t n = 0;
    for (int q = 0; q < size; q++) {
        if (needs[q].count < 0 && *werr == 0) {
            *werr = EIO; /* no manifest there: its node could not be put back */
            dtrain_snprintf(why, whylen, "rank %d's node has no readable manifest", q);
        }
        if (needs[q].count > NEED_MAX) {
            *fallback = 1;
            goto out;
        }
        n += needs[q].count > 0 ? (size_t)needs[q].count : 0;
    }
    if ((list = malloc((n + 1) * sizeof *list)) == NULL) {
        dtrain_snprintf(err, errlen, "out of memory for %zu transfers", n);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    n = 0;
    for (int q = 0; q < size; q++)
        for (int i = 0; i < needs[q].count; i++)
            list[n++] = (struct transfer){all[q].leader, needs[q].shard[i], q};
    /* one transfer per node and shard (its lowest rank wanting it receives),
     * in one order everywhere: blocking sends and receives cannot deadlock */
    qsort(list, n, sizeof *list, cmp_transfer);
    for (size_t i = 0; i < n && rc == DTRAIN_OK; i++) {
        if (i > 0 && list[i].leader == list[i - 1].leader && list[i].shard == list[i - 1].shard)
            continue;
        rc = transfer_file(world, rank, holder[list[i].shard], list[i].rank, list[i].shard, path, dest, delay_ms, werr,
                           received, why, whylen, err, errlen);
    }
out:
    free(list);
    free(needs);
    return rc;
}

/* This rank's look at its node's folder: the manifest, its own shard and
 * the copy it keeps, each verified (every byte read). */
struct local_look {
    const char *path;
    uint64_t step;
    const struct dtrain_train_config *cfg;
    const struct dtrain_sckpt_peers *peers;
    const struct dtrain_sckpt_group *group;
    int rank, size;
    struct manifest *m;
    struct local_view *me;
    struct dtrain_sckpt_stats *st;
    FILE *msgs;
    const char *prog;
    char *why;
    size_t whylen;
};

static void local_look(void *p)
{
    struct local_look *k = p;
    struct stat sb;
    if (k->group != NULL)
        sckpt_hold_ms(k->group->read_delay_ms);
    if (lstat(k->path, &sb) != 0)
        return;
    int v = sckpt_read_manifest(k->path, k->step, k->cfg, k->m, k->why, k->whylen);
    k->me->manifest = v == GOOD ? HELD : v == INCOMPATIBLE ? OTHER_RUN : BAD;
    if (v == GOOD && k->m->layout.world_size != k->size)
        k->me->manifest = ABSENT; /* another world: only the shared tier serves a new layout */
    if (k->me->manifest == HELD) {
        k->me->own = copy_state(k->path, k->rank, k->m, &k->st->bytes, k->why, k->whylen);
        k->me->copy = copy_state(k->path, k->peers->src, k->m, &k->st->bytes, k->why, k->whylen);
        if ((k->me->own == BAD || k->me->copy == BAD) && k->msgs != NULL)
            fprintf(k->msgs, "%s: rank %d: node-local checkpoint %s is damaged: %s\n", k->prog, k->rank, k->path,
                    k->why);
    }
}

/* Try the node-local tier at `step`: GOOD (loaded), or another verdict
 * (skipped, said on rank 0 with next); *rc the comm or input status. */
static int try_local(const char *local, uint64_t step, const char *next, const struct dtrain_sckpt_peers *peers,
                     const struct dtrain_train_config *cfg, dtrain_comm *world,
                     const struct dtrain_sckpt_group *group, const struct dtrain_sckpt_piece *pieces,
                     size_t npieces, FILE *msgs, const char *prog,
                     struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st, int *rc, char *err,
                     size_t errlen)
{
    int rank = world != NULL ? dtrain_comm_rank(world) : 0, size = world != NULL ? dtrain_comm_size(world) : 1;
    const int leader = peers->leader == rank;
    char path[DTRAIN_PATH_MAX], tmp[DTRAIN_PATH_MAX], damaged[DTRAIN_PATH_MAX], why[768] = "";
    struct manifest m;
    struct local_view me = {ABSENT, ABSENT, peers->src, ABSENT, peers->leader, 0};
    struct local_view *all = malloc((size_t)size * sizeof *all);
    int verdict = DAMAGED_MISSING, lacking = -1;
    memset(&m, 0, sizeof m);
    *rc = DTRAIN_OK;
    if (all == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        *rc = DTRAIN_ERR_SYSTEM;
        return NO_MEMORY;
    }
    if (sckpt_step_path(path, sizeof path, local, step, "") != 0 || sckpt_step_path(tmp, sizeof tmp, local, step, ".tmp") != 0 ||
        sckpt_step_path(damaged, sizeof damaged, local, step, ".damaged") != 0) {
        dtrain_snprintf(err, errlen, "node-local checkpoint folder path too long: %.80s...", local);
        *rc = DTRAIN_ERR_INPUT;
        free(all);
        return DAMAGED_MISSING;
    }
    /* read while the ranks wait for each other in rounds: the gather
     * below waits for no rank's disk */
    struct local_look look = {path, step, cfg, peers, group, rank, size, &m, &me, st, msgs, prog, why, sizeof why};
    if ((*rc = dtrain_ckpt_io_rounds(world, local_look, &look, "resume: waiting for the ranks' checks", err,
                                     errlen)) != DTRAIN_OK)
        goto out;
    if ((*rc = sckpt_gather_ints(world, (const int32_t *)(const void *)&me, VIEW_INTS, (int32_t *)(void *)all,
                                 "resume: the node-local copies", err, errlen)) != DTRAIN_OK)
        goto out;
    for (int r = 0; r < size; r++)
        if (all[r].manifest == OTHER_RUN) {
            dtrain_snprintf(err, errlen, "node-local checkpoint %s (on rank %d's node) belongs to another model, batch "
                            "shape, data order or seed: give another --ckpt-local-dir", path, r);
            *rc = DTRAIN_ERR_INPUT;
            verdict = INCOMPATIBLE;
            goto out;
        }
    /* who holds a good copy of each shard: itself, else the rank that keeps its copy */
    int *holder = malloc((size_t)size * sizeof *holder);
    if (holder == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        *rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    for (int r = 0; r < size; r++)
        holder[r] = all[r].own == HELD ? r : -1;
    for (int q = 0; q < size; q++)
        if (all[q].copy == HELD && all[q].src >= 0 && all[q].src < size && holder[all[q].src] < 0)
            holder[all[q].src] = q;
    int manifest_holder = -1;
    for (int r = 0; r < size && lacking < 0; r++)
        if (holder[r] < 0)
            lacking = r;
    for (int r = 0; r < size && manifest_holder < 0; r++)
        if (all[r].manifest == HELD)
            manifest_holder = r;
    int node_damaged = 0, any_bad = 0; /* a file of this node's (any node's) folder did not verify */
    for (int r = 0; r < size; r++) {
        int bad = all[r].own == BAD || all[r].copy == BAD || all[r].manifest == BAD;
        any_bad |= bad;
        if (all[r].leader == rank && bad)
            node_damaged = 1;
    }
    if (lacking >= 0 || manifest_holder < 0) {
        if (rank == 0 && msgs != NULL) {
            fprintf(msgs, "%s: node-local checkpoint of step %" PRIu64 " is incomplete: shard-%05d.bin has no good "
                    "copy on any node; %s\n", prog, step, lacking >= 0 ? lacking : 0, next);
            fflush(msgs);
        }
        if (leader && node_damaged) {
            sckpt_remove_step_dir(damaged);
            rename(path, damaged);
        }
        free(holder);
        verdict = any_bad ? DAMAGED_CHECKSUM : DAMAGED_MISSING;
        goto out;
    }
    /* Each node gets what its ranks lack (a lost or damaged file back,
     * the shards their loads open), sent to it alone; its folder, when
     * damaged or lost, is built anew in step-N.tmp and renamed over it. */
    int werr = 0, fallback = 0, rebuild = !node_intact(all, size, peers->leader);
    const long delay_ms = group != NULL ? group->read_delay_ms : 0;
    if (leader)
        sckpt_remove_step_dir(tmp);
    *rc = fetch_lacking(world, rank, size, all, holder, manifest_holder, path, tmp, step, cfg, &m, group, &fallback,
                        &werr, &st->received, why, sizeof why, err, errlen);
    if (*rc == DTRAIN_OK && fallback) {
        /* some rank lacks many: every node gets the whole checkpoint again */
        char name[32];
        rebuild = 1;
        werr = 0;
        if (leader)
            sckpt_remove_step_dir(tmp);
        for (int r = 0; r < size && *rc == DTRAIN_OK; r++) {
            sckpt_shard_name(name, sizeof name, r);
            *rc = spread_file(world, rank, holder[r], leader, path, name, tmp, delay_ms, &werr, why, sizeof why, err,
                              errlen);
        }
        if (*rc == DTRAIN_OK)
            *rc = spread_file(world, rank, manifest_holder, leader, path, DTRAIN_SCKPT_MANIFEST, tmp, delay_ms, &werr,
                              why, sizeof why, err, errlen);
    } else if (*rc == DTRAIN_OK) {
        /* every file received (and written by its node's ranks) before the
         * leaders sync and rename; a node's failed write fails its leader */
        int32_t *ws = NULL;
        *rc = sckpt_gather_flags(world, size, werr != 0, &ws, "resume: the node-local files received", err, errlen);
        for (int q = 0; *rc == DTRAIN_OK && leader && werr == 0 && q < size; q++)
            if (ws[q] != 0 && all[q].leader == rank) {
                werr = EIO;
                dtrain_snprintf(why, sizeof why, "rank %d could not write a file into %s", q, rebuild ? tmp : path);
            }
        free(ws);
        if (*rc == DTRAIN_OK && rebuild && leader && werr == 0)
            werr = link_verified(all, size, rank, path, tmp, why, sizeof why);
    }
    free(holder);
    if (*rc != DTRAIN_OK)
        goto out;
    if (leader && werr == 0 && sckpt_fsync_dir(rebuild ? tmp : path) != 0)
        werr = errno;
    if (leader && werr == 0 && rebuild) {
        if (node_damaged) {
            sckpt_remove_step_dir(damaged);
            if (rename(path, damaged) != 0 && errno != ENOENT)
                werr = errno;
        } else if (sckpt_remove_step_dir(path) != 0) {
            werr = errno;
        }
        if (werr == 0 && rename(tmp, path) != 0)
            werr = errno;
        if (werr == 0)
            sckpt_fsync_dir(local);
        if (werr != 0)
            dtrain_snprintf(why, sizeof why, "cannot put %s back together: %s", path, strerror(werr));
    }
    if (leader && werr != 0 && rebuild)
        sckpt_remove_step_dir(tmp);
    /* every node restored (or the shared tier is next), then every rank reads */
    int32_t mine[2] = {werr != 0 ? DAMAGED_READ : GOOD, 0}, *got = (int32_t *)(void *)all;
    /* the leaders have put their folders back before anyone reads */
    if ((*rc = sckpt_gather_ints(world, mine, 2, got, "resume: the node-local folders put back", err, errlen)) !=
        DTRAIN_OK)
        goto out;
    for (int r = 0; r < size; r++)
        if (got[2 * r] != GOOD)
            mine[0] = DAMAGED_READ;
    if (mine[0] == GOOD) {
        free(m.shards);
        mine[0] = sckpt_read_manifest(path, step, cfg, &m, why, sizeof why);
    }
    for (int phase = 0; phase < 2; phase++) {
        if ((*rc = sckpt_gather_ints(world, mine, 2, got, "resume: the node-local checkpoint", err, errlen)) !=
            DTRAIN_OK)
            goto out;
        verdict = GOOD;
        for (int r = 0; r < size && verdict == GOOD; r++)
            if (got[2 * r] != GOOD)
                verdict = got[2 * r];
        if (verdict != GOOD || phase == 1)
            break;
        out->loaded_partly = 1;
        mine[0] = sckpt_load_group(path, &m, group, world, pieces, npieces, st, why, sizeof why, rc, err, errlen);
        if (*rc != DTRAIN_OK)
            goto out;
    }
    if (verdict != GOOD) {
        if (mine[0] != GOOD && msgs != NULL)
            fprintf(msgs, "%s: rank %d: node-local checkpoint %s: %s\n", prog, rank, path, why);
        if (rank == 0 && msgs != NULL)
            fprintf(msgs, "%s: node-local checkpoint of step %" PRIu64 " could not be put back together: %s; %s\n", prog,
                    step, sckpt_verdict_text(verdict), next);
        goto out;
    }
    sckpt_resume_found(out, &m, path, "node-local");
out:
    free(m.shards);
    free(all);
    return verdict;
}

struct candidate { uint64_t step; int local, shared; };

static int cmp_candidate(const void *a, const void *b)
{
    uint64_t x = ((const struct candidate *)a)->step, y = ((const struct candidate *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void next_text(char *out, size_t len, const struct candidate *c, int n, int i, int local_done)
{
    if (!local_done && c[i].shared)
        snprintf(out, len, "falling back to the shared copy of step %" PRIu64, c[i].step);
    else if (i + 1 < n)
        snprintf(out, len, "falling back to step %" PRIu64 " (%s)", c[i + 1].step,
                 c[i + 1].local ? "node-local" : "shared");
    else
        snprintf(out, len, "there is no older one");
}

int dtrain_sckpt_resume_tiers(const char *shared, const char *local, const struct dtrain_sckpt_peers *peers,
                              const struct dtrain_train_config *cfg, dtrain_comm *world,
                              const struct dtrain_sckpt_group *group, const struct dtrain_sckpt_piece *pieces,
                              size_t npieces, FILE *msgs, const char *prog,
                              struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st, char *err,
                              size_t errlen)
{
    double t0 = dtrain_clock_s();
    int rank = world != NULL ? dtrain_comm_rank(world) : 0, size = world != NULL ? dtrain_comm_size(world) : 1;
    uint64_t shared_steps[MAX_CANDIDATES];
    int nshared = 0, rc;
    struct { int32_t count, pad; uint64_t steps[LOCAL_CANDIDATES]; } mine, *lists = NULL;
    struct candidate *c = NULL;
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    memset(&mine, 0, sizeof mine);
    /* each node's lowest rank tidies its folder (when it is trusted);
     * every rank lists it and checks what it lists (pad: 1 untrusted) */
    char untrusted[DTRAIN_PATH_MAX + 512] = "";
    const char *what = "node-local checkpoint folder (--ckpt-local-dir)";
    int trusted = sckpt_check_trusted(local, what, NULL, 0, untrusted, sizeof untrusted) == 0;
    if (trusted && peers->leader == rank)
        sckpt_remove_partial(local);
    long n = trusted ? sckpt_list_steps(local, "", mine.steps, LOCAL_CANDIDATES) : 0;
    if (n < 0 && msgs != NULL)
        fprintf(msgs, "%s: rank %d: cannot read node-local checkpoint folder %s: %s (its tier counts as empty)\n", prog,
                rank, local, strerror(errno));
    mine.count = (int32_t)(n < 0 ? 0 : n < LOCAL_CANDIDATES ? n : LOCAL_CANDIDATES);
    if (trusted && sckpt_check_trusted(local, what, mine.steps, mine.count, untrusted, sizeof untrusted) != 0)
        trusted = 0;
    mine.pad = !trusted;
    if ((rc = sckpt_shared_list(shared, world, shared_steps, &nshared, err, errlen)) != DTRAIN_OK)
        goto out;
    lists = malloc((size_t)size * sizeof *lists);
    c = malloc(((size_t)size * LOCAL_CANDIDATES + MAX_CANDIDATES) * sizeof *c);
    if (lists == NULL || c == NULL) {
        dtrain_snprintf(err, errlen, "out of memory for the checkpoints of %d ranks", size);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    if ((rc = sckpt_gather_ints(world, (const int32_t *)(const void *)&mine, (int)(sizeof mine / 4),
                                (int32_t *)(void *)lists, "resume: the node-local checkpoints", err, errlen)) !=
        DTRAIN_OK)
        goto out;
    for (int r = 0; r < size; r++) {
        if (!lists[r].pad)
            continue;
        if (!trusted)
            dtrain_snprintf(err, errlen, "%s", untrusted);
        else
            dtrain_snprintf(err, errlen, "the node-local checkpoint folder (--ckpt-local-dir) on rank %d's node is "
                            "not trusted: see its line", r);
        rc = DTRAIN_ERR_INPUT;
        goto out;
    }
    /* one candidate per step, newest first, with the tiers that have it */
    int nc = 0;
    for (int i = 0; i < nshared; i++)
        c[nc++] = (struct candidate){shared_steps[i], 0, 1};
    for (int r = 0; r < size; r++)
        for (int i = 0; i < lists[r].count && i < LOCAL_CANDIDATES; i++)
            c[nc++] = (struct candidate){lists[r].steps[i], 1, 0};
    qsort(c, (size_t)nc, sizeof *c, cmp_candidate);
    int k = 0;
    for (int i = 0; i < nc; i++) {
        if (k > 0 && c[k - 1].step == c[i].step) {
            c[k - 1].local |= c[i].local;
            c[k - 1].shared |= c[i].shared;
        } else {
            c[k++] = c[i];
        }
    }
    nc = k < MAX_CANDIDATES ? k : MAX_CANDIDATES;
    for (int i = 0; i < nc; i++) {
        char next[128];
        if (c[i].local) {
            next_text(next, sizeof next, c, nc, i, 0);
            int v = try_local(local, c[i].step, next, peers, cfg, world, group, pieces, npieces, msgs, prog, out, st, &rc,
                              err, errlen);
            if (rc != DTRAIN_OK || out->found)
                goto out;
            if (v != DAMAGED_MISSING) {
                out->damaged++;
                out->damaged_local++;
            }
        }
        if (c[i].shared) {
            next_text(next, sizeof next, c, nc, i, 1);
            if ((rc = sckpt_resume_one(shared, c[i].step, next, cfg, world, group, pieces, npieces, msgs, prog, out, st, err,
                                       errlen)) != DTRAIN_OK || out->found)
                goto out;
        }
    }
    rc = DTRAIN_OK;
out:
    free(lists);
    free(c);
    st->seconds = dtrain_clock_s() - t0;
    return rc;
}
