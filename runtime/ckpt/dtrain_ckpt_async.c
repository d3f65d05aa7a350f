/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A sharded checkpoint written in the background; see dtrain_ckpt_async.h. */
#include "dtrain_ckpt_async.h"
#include "sckpt_internal.h"
#include "dtrain_io.h"
#include "parallel/dtrain_pcomm.h"
#include "dtrain_clock.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void sckpt_hold_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Stage 1's write of this rank's shard (kept in memory for a peer copy). */
static void write_own(void *p)
{
    struct dtrain_ckpt_async *a = p;
    const int copies = a->local && a->peers->peer >= 0;
    sckpt_hold_ms(a->delay_ms); /* fault injection: a slow disk */
    sckpt_write_shard_kept(a->dir, a->cfg, &a->layout, a->step, a->data_batches, a->pieces, a->npieces,
                           a->fail_write, copies ? &a->mine : NULL, &a->written);
}

/* The writer takes only the CPU time training leaves idle: on a machine
 * whose cores all train, a writer at equal priority preempts a rank, and
 * its peers wait in the step's collectives.  SCHED_IDLE (Linux, per
 * thread, no privilege needed to lower it): a training thread that wakes
 * takes the core at once, where at nice 19 it could wait for the writer's
 * time slice (the shared folder's background overhead, 5 runs each,
 * alternated: median +5.4% at nice 19, +2.1% at SCHED_IDLE,
 * doc/fault-tolerance.md).  Where SCHED_IDLE is refused, nice 19. */
static void yield_cpu_to_training(void)
{
    struct sched_param none = {0};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) != 0)
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
}

static void *writer_main(void *arg)
{
    struct dtrain_ckpt_async *a = arg;
    if (a->threaded)
        yield_cpu_to_training();
    if (a->prune_keep > 0) { /* after a commit: the older checkpoints removed (freeing their pages takes ms) */
        sckpt_prune(a->dir, a->prune_keep);
        a->prune_keep = 0;
        atomic_store(&a->done, 1);
        return NULL;
    }
    if (a->pending == 2) { /* the peer's copy */
        if (a->theirs_len > 0 && a->copy_error == 0)
            a->copy_error = dtrain_sckpt_write_copy(a->dir, a->step, a->peers->src, a->theirs, a->theirs_len,
                                                    a->copy_why, sizeof a->copy_why);
        atomic_store(&a->done, 1);
        return NULL;
    }
    /* with a peer, the file's bytes stay in memory for its copy */
    const int copies = a->local && a->peers->peer >= 0;
    if (copies && a->peers->copy_comm != NULL) {
        /* the copies over their own communicator, here: the main thread
         * trains on (every rank's writer calls this once per checkpoint).
         * The writers first wait for each other's shards in rounds over
         * that communicator: one swapping while its peer still writes
         * would wait in a communicator call for the peer's disk, and a
         * slow one would time the swap out. */
        char why[512];
        int e = 0;
        if (dtrain_ckpt_io_rounds(a->peers->copy_comm, write_own, a, "the writers' shards", why, sizeof why) !=
            DTRAIN_OK)
            e = EIO;
        else if (a->written.error != 0)
            a->mine.len = 0; /* no copy of a shard that was not written */
        if (e == 0)
            e = dtrain_sckpt_swap_copies(a->peers->copy_comm, a->peers->peer, a->peers->src, a->mine.bytes,
                                         a->mine.len, &a->theirs, &a->theirs_cap, &a->theirs_len, why, sizeof why);
        if (e != 0 && a->copy_error == 0) {
            a->copy_error = e;
            snprintf(a->copy_why, sizeof a->copy_why, "%s", why);
        }
        if (a->theirs_len > 0 && a->copy_error == 0)
            a->copy_error = dtrain_sckpt_write_copy(a->dir, a->step, a->peers->src, a->theirs, a->theirs_len,
                                                    a->copy_why, sizeof a->copy_why);
    } else {
        write_own(a);
        if (copies && a->written.error != 0)
            a->mine.len = 0; /* the copies go over world at a step boundary (dtrain_ckpt_async_finish) */
    }
    atomic_store(&a->done, 1);
    return NULL;
}

/* Run stage a->pending in a thread that takes no signals (SIGTERM and
 * friends stay the main thread's: the loop's stop flags; no write is cut
 * short by EINTR); without a thread, here.  0, or 1 with err set. */
static int run_stage(struct dtrain_ckpt_async *a, char *err, size_t errlen)
{
    atomic_store(&a->done, 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    a->threaded = 1; /* before the thread reads it */
    int e = pthread_create(&a->thread, NULL, writer_main, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        a->threaded = 0;
        snprintf(err, errlen, "cannot start the checkpoint writer thread (%s): written in the foreground",
                 strerror(e));
        writer_main(a);
        return 1;
    }
    return 0;
}

int dtrain_ckpt_async_start(struct dtrain_ckpt_async *a, const char *dir, int local,
                            const struct dtrain_sckpt_peers *peers, const struct dtrain_train_config *cfg,
                            const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                            const struct dtrain_sckpt_scaler *scaler, const struct dtrain_sckpt_piece *pieces,
                            size_t npieces, int fail_write, long delay_ms, char *err, size_t errlen)
{
    dtrain_ckpt_async_abandon(a);
    a->dir = dir;
    a->local = local && peers != NULL;
    a->peers = peers;
    a->cfg = cfg;
    a->layout = *layout;
    a->step = step;
    a->data_batches = data_batches;
    if (scaler != NULL)
        a->scaler = *scaler;
    else
        memset(&a->scaler, 0, sizeof a->scaler);
    a->pieces = pieces;
    a->npieces = npieces;
    a->fail_write = fail_write;
    a->delay_ms = delay_ms;
    memset(&a->written, 0, sizeof a->written);
    a->copy_error = 0;
    a->copy_why[0] = '\0';
    a->pending = 1;
    return run_stage(a, err, errlen);
}

int dtrain_ckpt_async_writing(struct dtrain_ckpt_async *a)
{
    return a->pending && !atomic_load(&a->done);
}

static void join(struct dtrain_ckpt_async *a)
{
    if (a->threaded)
        pthread_join(a->thread, NULL);
    a->threaded = 0;
}

/* Stage 1 -> 2 of the node-local tier: this rank's file to its peer, the
 * copy it keeps from its src (sizes first; 0: none comes). */
static int exchange(struct dtrain_ckpt_async *a, dtrain_comm *world, char *err, size_t errlen)
{
    char why[512];
    int e = dtrain_sckpt_swap_copies(world, a->peers->peer, a->peers->src, a->mine.bytes, a->mine.len, &a->theirs,
                                     &a->theirs_cap, &a->theirs_len, why, sizeof why);
    if (e == 0)
        return DTRAIN_OK;
    /* the comm failed, or the peer's send could not be taken off the link
     * (no memory: the comm is aborted, the peer's call fails too) */
    snprintf(err, errlen, "checkpoint: %s", why);
    return DTRAIN_ERR_FAULT;
}

int dtrain_ckpt_async_finish(struct dtrain_ckpt_async *a, dtrain_comm *world, int keep, int *committed,
                             struct dtrain_sckpt_stats *st, double *write_s, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    *committed = 0;
    *write_s = 0.0;
    if (!a->pending)
        return DTRAIN_OK;
    join(a);
    *write_s = a->written.seconds;
    if (a->pending == 1 && a->local && a->peers->peer >= 0 && a->peers->copy_comm == NULL) {
        int rc = exchange(a, world, err, errlen);
        if (rc != DTRAIN_OK) {
            a->pending = 0;
            return rc;
        }
        a->pending = 2;
        char why[256];
        if (run_stage(a, why, sizeof why) != 0)
            fprintf(stderr, "dtrain: rank %d: %s\n", a->layout.rank, why);
        return DTRAIN_OK;
    }
    a->pending = 0;
    *committed = 1;
    int rc;
    if (a->local)
        rc = dtrain_sckpt_commit_local(a->dir, a->cfg, &a->layout, a->step, a->data_batches, &a->scaler, world,
                                       DTRAIN_SCKPT_PRUNE_LATER, a->peers, &a->written, a->copy_error, a->copy_why,
                                       st, err, errlen);
    else
        rc = dtrain_sckpt_commit(a->dir, a->cfg, &a->layout, a->step, a->data_batches, &a->scaler, world,
                                 DTRAIN_SCKPT_PRUNE_LATER, &a->written, st, err, errlen);
    /* the rank that committed removes the older checkpoints, in the thread */
    if (rc == DTRAIN_OK && (a->local ? a->peers->leader : 0) == a->layout.rank) {
        char why[256];
        a->prune_keep = keep > 0 ? keep : 1;
        if (run_stage(a, why, sizeof why) != 0)
            fprintf(stderr, "dtrain: rank %d: %s\n", a->layout.rank, why);
    }
    return rc;
}

void dtrain_ckpt_async_wait(struct dtrain_ckpt_async *a)
{
    if (!a->pending)
        join(a);
}

void dtrain_ckpt_async_abandon(struct dtrain_ckpt_async *a)
{
    /* a writer still swapping copies with a peer that is gone: stop it now
     * rather than after the comm timeout (the run is ending) */
    if (a->pending && a->threaded && !atomic_load(&a->done) && a->local && a->peers->copy_comm != NULL)
        dtrain_comm_abort(a->peers->copy_comm);
    join(a); /* a write, or the tidying after a commit */
    a->pending = 0;
}

#define ROUND_S 0.1 /* a member's wait between two counts: far under any --comm-timeout (1 s or more) */

int dtrain_ckpt_wait_rounds(dtrain_comm *c, int (*busy)(void *), void (*idle)(void *), void *arg, const char *what,
                            char *err, size_t errlen)
{
    const int alone = c == NULL || dtrain_comm_size(c) <= 1;
    for (;;) {
        double t0 = dtrain_clock_s();
        while (busy(arg) && (alone || dtrain_clock_s() - t0 < ROUND_S)) {
            struct timespec nap = {0, 1000000L};
            nanosleep(&nap, NULL);
        }
        int64_t busy_members = busy(arg);
        if (alone)
            return DTRAIN_OK;
        if (!busy_members && idle != NULL)
            idle(arg);
        int rc = dtrain_pcomm_status(c, dtrain_comm_sum_int64(c, &busy_members, 1), what, err, errlen);
        if (rc != DTRAIN_OK || busy_members == 0)
            return rc;
    }
}

struct io_job {
    void (*fn)(void *);
    void *arg;
    atomic_int done;
};

static void *io_main(void *p)
{
    struct io_job *j = p;
    j->fn(j->arg);
    atomic_store(&j->done, 1);
    return NULL;
}

static int io_busy(void *p)
{
    return !atomic_load(&((struct io_job *)p)->done);
}

int dtrain_ckpt_io_rounds(dtrain_comm *c, void (*fn)(void *), void *arg, const char *what, char *err, size_t errlen)
{
    struct io_job j = {fn, arg, 0};
    pthread_t thread;
    sigset_t all, old;
    int e = -1;
    if (c != NULL && dtrain_comm_size(c) > 1) {
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        e = pthread_create(&thread, NULL, io_main, &j);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (e != 0)
        io_main(&j);
    int rc = dtrain_ckpt_wait_rounds(c, io_busy, NULL, &j, what, err, errlen);
    if (e == 0)
        pthread_join(thread, NULL); /* on a failed count too: fn's memory is the caller's */
    return rc;
}

void dtrain_ckpt_async_release(struct dtrain_ckpt_async *a)
{
    dtrain_ckpt_async_abandon(a);
    free(a->mine.bytes);
    free(a->theirs);
    a->mine = (struct sckpt_image){0};
    a->theirs = NULL;
    a->theirs_cap = a->theirs_len = 0;
}
