/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A sharded checkpoint written in the background; see dtrain_ckpt_async.h. */
#include "dtrain_ckpt_async.h"
#include "dtrain_io.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void *writer_main(void *arg)
{
    struct dtrain_ckpt_async *a = arg;
    if (a->delay_ms > 0) {
        struct timespec ts = {a->delay_ms / 1000, (a->delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    dtrain_sckpt_write_shard(a->dir, a->cfg, &a->layout, a->step, a->data_batches, a->pieces, a->npieces,
                             a->fail_write, &a->written);
    atomic_store(&a->done, 1);
    return NULL;
}

int dtrain_ckpt_async_start(struct dtrain_ckpt_async *a, const char *dir, const struct dtrain_train_config *cfg,
                            const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                            const struct dtrain_sckpt_scaler *scaler, const struct dtrain_sckpt_piece *pieces,
                            size_t npieces, int fail_write, long delay_ms, char *err, size_t errlen)
{
    dtrain_ckpt_async_abandon(a);
    a->dir = dir;
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
    atomic_store(&a->done, 0);
    /* The writer takes no signals: SIGTERM and friends stay the main
     * thread's (the loop's stop flags), and no write is cut short by EINTR. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&a->thread, NULL, writer_main, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    a->pending = 1;
    a->threaded = e == 0;
    if (e != 0) {
        snprintf(err, errlen, "cannot start the checkpoint writer thread (%s): written in the foreground",
                 strerror(e));
        writer_main(a);
        return 1;
    }
    return 0;
}

int dtrain_ckpt_async_writing(struct dtrain_ckpt_async *a)
{
    return a->pending && !atomic_load(&a->done);
}

static void join(struct dtrain_ckpt_async *a)
{
    if (a->threaded)
        pthread_join(a->thread, NULL);
    a->pending = a->threaded = 0;
}

int dtrain_ckpt_async_finish(struct dtrain_ckpt_async *a, dtrain_comm *world, int keep,
                             struct dtrain_sckpt_stats *st, double *write_s, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    *write_s = 0.0;
    if (!a->pending)
        return DTRAIN_OK;
    join(a);
    *write_s = a->written.seconds;
    return dtrain_sckpt_commit(a->dir, a->cfg, &a->layout, a->step, a->data_batches, &a->scaler, world, keep,
                               &a->written, st, err, errlen);
}

void dtrain_ckpt_async_abandon(struct dtrain_ckpt_async *a)
{
    if (a->pending)
        join(a);
}
