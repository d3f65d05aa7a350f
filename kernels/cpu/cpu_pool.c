/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fork-join pool with a static partition; see cpu_pool.h. */
#include "cpu_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct cpu_pool {
    int threads;
    pthread_t *workers;          /* threads-1 of them */
    int started;                 /* workers successfully created */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;      /* a new job (or stop) */
    pthread_cond_t done_cv;      /* pending reached 0 */
    unsigned long generation;    /* bumped for every job */
    int pending;                 /* workers still on the current job */
    int stop;
    cpu_pool_fn fn;
    void *arg;
    long n;
};

struct worker_start {
    struct cpu_pool *pool;
    int tid;
};

/* Thread tid's share of [0, n): near-equal contiguous ranges. */
static void run_share(cpu_pool_fn fn, void *arg, long n, int threads, int tid)
{
    long begin = n * tid / threads, end = n * (tid + 1) / threads;
    if (begin < end)
        fn(arg, begin, end, tid);
}

static void *worker_main(void *p)
{
    struct worker_start *ws = p;
    struct cpu_pool *pool = ws->pool;
    int tid = ws->tid;
    free(ws);
    unsigned long seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (pool->generation == seen && !pool->stop)
            pthread_cond_wait(&pool->work_cv, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->generation;
        cpu_pool_fn fn = pool->fn;
        void *arg = pool->arg;
        long n = pool->n;
        pthread_mutex_unlock(&pool->mu);
        run_share(fn, arg, n, pool->threads, tid);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->done_cv);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

int cpu_pool_create(int threads, struct cpu_pool **out)
{
    int rc = 0;
    *out = NULL;
    if (threads < 1)
        return EINVAL;
    struct cpu_pool *pool = calloc(1, sizeof *pool);
    if (pool == NULL)
        return ENOMEM;
    pool->threads = threads;
    if ((rc = pthread_mutex_init(&pool->mu, NULL)) != 0)
        goto fail_free;
    if ((rc = pthread_cond_init(&pool->work_cv, NULL)) != 0)
        goto fail_mutex;
    if ((rc = pthread_cond_init(&pool->done_cv, NULL)) != 0)
        goto fail_work_cv;
    if (threads > 1) {
        pool->workers = calloc((size_t)threads - 1, sizeof *pool->workers);
        if (pool->workers == NULL) {
            rc = ENOMEM;
            goto fail_done_cv;
        }
    }
    for (int t = 1; t < threads; t++) {
        struct worker_start *ws = malloc(sizeof *ws);
        if (ws == NULL) {
            rc = ENOMEM;
            goto fail_workers;
        }
        ws->pool = pool;
        ws->tid = t;
        if ((rc = pthread_create(&pool->workers[t - 1], NULL, worker_main, ws)) != 0) {
            free(ws);
            goto fail_workers;
        }
        pool->started++;
    }
    *out = pool;
    return 0;

fail_workers:
    cpu_pool_destroy(pool);
    return rc;
fail_done_cv:
    pthread_cond_destroy(&pool->done_cv);
fail_work_cv:
    pthread_cond_destroy(&pool->work_cv);
fail_mutex:
    pthread_mutex_destroy(&pool->mu);
fail_free:
    free(pool);
    return rc;
}

void cpu_pool_destroy(struct cpu_pool *pool)
{
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int t = 0; t < pool->started; t++)
        pthread_join(pool->workers[t], NULL);
    free(pool->workers);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->work_cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

int cpu_pool_threads(const struct cpu_pool *pool)
{
    return pool->threads;
}

void cpu_pool_for(struct cpu_pool *pool, long n, cpu_pool_fn fn, void *arg)
{
    if (n <= 0)
        return;
    /* One item per thread is the least worth waking a worker for. */
    if (pool->threads == 1 || n == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->n = n;
    pool->pending = pool->threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->mu);

    run_share(fn, arg, n, pool->threads, 0);

    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->done_cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
