/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: a sharded checkpoint written in the background.
 *
 * The fault-tolerant loop (dtrain_loop.c, --ckpt-async) copies the rank's
 * state into host memory at a step boundary (the pieces, dtrain_ft.h) and
 * hands it to dtrain_ckpt_async_start: a thread of its own writes this
 * rank's shard into DIR/step-N.tmp (dtrain_sckpt_write_shard: files, and
 * on the node-local tier the peer copies over their own communicator,
 * peers->copy_comm, which no other thread calls: never one the main
 * thread uses, as a communicator takes one thread's calls at a time)
 * while the main thread trains on.  The writers swap the copies once
 * every one's shard is written, waiting for each other in rounds over
 * that communicator (dtrain_ckpt_io_rounds), never in the swap itself.
 * The collective half of the commit protocol
 * (dtrain_sckpt_commit: the gather of outcomes, rank 0's manifest and
 * rename) runs on the main thread, in dtrain_ckpt_async_finish, at a step
 * boundary where every rank calls it: the loop sums "my write is still
 * running" with the step's loss (dtrain_pstep_control.writing), so every
 * rank sees at the same step that every write is done, and the training
 * collectives and the commit's never run at once or out of order.
 * A crash between the two leaves step-N.tmp, which resume removes: the
 * checkpoint before is taken.
 *
 * The pieces' host memory must stay untouched until finish (or abandon)
 * returns: the loop downloads into it only for the next checkpoint, which
 * finishes the one in flight first.  One write in flight at a time.
 * No global state. */
#ifndef DTRAIN_CKPT_ASYNC_H
#define DTRAIN_CKPT_ASYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain_shard_ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A shard file's bytes kept in memory (sckpt_write_shard), with their room. */
struct sckpt_image {
    unsigned char *bytes;
    size_t len, cap;
};

struct dtrain_ckpt_async {
    int pending;                 /* 0: nothing; 1: this rank's shard being written; 2: the peer's copy */
    int threaded;                /* the stage runs in thread (else it was written in the foreground) */
    atomic_int done;             /* the thread has written (or failed) */
    pthread_t thread;
    /* the job, copied at start (the pieces are the caller's) */
    const char *dir;             /* the tier's folder */
    int local;                   /* the node-local tier: a copy to the peer, each node commits its folder */
    const struct dtrain_sckpt_peers *peers;
    const struct dtrain_train_config *cfg;
    struct dtrain_sckpt_layout layout;
    uint64_t step, data_batches;
    struct dtrain_sckpt_scaler scaler;
    const struct dtrain_sckpt_piece *pieces;
    size_t npieces;
    int fail_write;              /* fault injection: the write fails as on a full disk */
    long delay_ms;               /* fault injection: the thread sleeps this long before writing */
    struct dtrain_sckpt_written written; /* stage 1's outcome, valid once done */
    /* local, with a peer: this rank's file as written (sent to the peer),
     * and the peer's file it keeps; their room is kept from one
     * checkpoint to the next (freed by dtrain_ckpt_async_release) */
    struct sckpt_image mine;
    void *theirs;
    size_t theirs_cap, theirs_len;
    int copy_error;              /* local: the errno of sending or keeping a copy */
    int prune_keep;              /* > 0: the thread removes all but this many newest checkpoints */
    char copy_why[512];
};

/* Start writing this rank's shard of checkpoint `step` into dir in the
 * background (a's earlier write is first waited for without a commit:
 * the caller finishes it before).  local: dir is the node-local tier
 * (peers from dtrain_sckpt_peers; the shard is kept in memory for the
 * peer).  Returns 0; or 1 with one line in err when no thread could be
 * made: the shard was then written in the foreground.  Either way the
 * write is pending until finished, as on every other rank. */
int dtrain_ckpt_async_start(struct dtrain_ckpt_async *a, const char *dir, int local,
                            const struct dtrain_sckpt_peers *peers, const struct dtrain_train_config *cfg,
                            const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                            const struct dtrain_sckpt_scaler *scaler, const struct dtrain_sckpt_piece *pieces,
                            size_t npieces, int fail_write, long delay_ms, char *err, size_t errlen);

/* 1 while a write is pending and its thread still writing (this rank's
 * share of the loop's "writing" sum). */
int dtrain_ckpt_async_writing(struct dtrain_ckpt_async *a);

/* The collective of the next stage (every rank calls it at the same step
 * boundary, once every rank's stage is done): wait for this rank's write;
 * on the node-local tier without peers->copy_comm, after stage 1, send the
 * shard to the peer and receive the copy this rank keeps (over world, on
 * this thread) and start writing it in the background (*committed 0:
 * pending still; with copy_comm the writer has already swapped and
 * written the copies); else commit (dtrain_sckpt_commit or
 * _commit_local; *committed 1).  Returns as
 * dtrain_sckpt_save; *write_s: the background writes' wall time, st: the
 * commit's.  Nothing pending: DTRAIN_OK, *committed 0. */
int dtrain_ckpt_async_finish(struct dtrain_ckpt_async *a, dtrain_comm *world, int keep, int *committed,
                             struct dtrain_sckpt_stats *st, double *write_s, char *err, size_t errlen);

/* After a commit, the committing rank's thread removes the checkpoints
 * beyond keep (not collective: nothing waits for it but the next start,
 * this, abandon and release).  Wait for that (a resume or rollback lists
 * the folder next).  A write pending is not waited for. */
void dtrain_ckpt_async_wait(struct dtrain_ckpt_async *a);

/* Wait for the write without committing (the run is ending on a fault):
 * its step-N.tmp stays for resume to remove.  Not collective.  A writer
 * still swapping copies is stopped by aborting peers->copy_comm. */
void dtrain_ckpt_async_abandon(struct dtrain_ckpt_async *a);

/* Abandon, and free the memory a keeps between checkpoints (the run's end). */
void dtrain_ckpt_async_release(struct dtrain_ckpt_async *a);

/* Collective: wait until no member of c is busy.  Each member waits up to
 * a tenth of a second for busy(arg) to turn 0, then one all-reduce counts
 * the members still busy, again until none is.  So no member waits in a
 * communicator call for another's disk: a call that makes no progress for
 * --comm-timeout takes a slow disk for a hang, and requeues the job to
 * read or write the same checkpoint again.  idle(arg) (NULL: none) runs
 * each round once this member is not busy (the loop tells its watchdog it
 * waits for the others).  c NULL or of one member: busy waited for alone.
 * DTRAIN_OK, or the comm's failure (dtrain_pcomm_status; `what` names it). */
int dtrain_ckpt_wait_rounds(dtrain_comm *c, int (*busy)(void *), void (*idle)(void *), void *arg, const char *what,
                            char *err, size_t errlen);

/* Collective: fn(arg) (a checkpoint's file I/O) in a thread of its own,
 * taking no signals, while this thread waits for every member's in rounds
 * (above); without a thread, or with c NULL or of one member, fn runs
 * here.  Returns as dtrain_ckpt_wait_rounds once every fn has returned. */
int dtrain_ckpt_io_rounds(dtrain_comm *c, void (*fn)(void *), void *arg, const char *what, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
