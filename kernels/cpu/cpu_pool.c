/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fork-join pool with a static partition; see cpu_pool.h. */
#include "cpu_pool.h"
#include "dtrain_clock.h"
#include "dtrain_spin.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* How long a thread spins for the next job (a worker) or for the workers'
 * shares (the caller) before it sleeps on a condition variable.  A step runs a few hundred jobs with
 * little serial work between them, and waking a sleeping thread costs a
 * futex call and an inter-processor interrupt each time (more on a virtual
 * machine); the spin is bounded so that a pool left idle sleeps at once,
 * and none when the pool has more threads than the CPUs it may run on
 * (a spinning thread would take the CPU the one it waits for needs). */
#define POOL_SPIN_NS 50000L

struct cpu_pool {
    int threads;
    long spin_ns;                /* spin before sleeping: POOL_SPIN_NS, or 0 */
    pthread_t *workers;          /* threads-1 of them */
    int started;                 /* workers successfully created */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;      /* a new job (or stop) */
    pthread_cond_t done_cv;      /* pending reached 0 */
    _Atomic unsigned long generation; /* bumped for every job, after fn, arg and n are set */
    atomic_int pending;          /* workers still on the current job */
    atomic_int stop;
    int sleepers;                /* workers in pthread_cond_wait (under mu) */
    int caller_sleeps;           /* the caller in pthread_cond_wait (under mu) */
    cpu_pool_fn fn;
    void *arg;
    long n;
};

struct worker_start {
    struct cpu_pool *pool;
    int tid;
};

/* A spin's deadline: now + spin_ns (0 when the pool does not spin). */
static int64_t spin_deadline(const struct cpu_pool *pool)
{
    return pool->spin_ns > 0 ? dtrain_clock_ns() + pool->spin_ns : 0;
}

/* One round of a spin: 32 pauses; 0 once the deadline has passed. */
static int spin_round(int64_t deadline)
{
    if (deadline == 0)
        return 0;
    for (int i = 0; i < 32; i++)
        dtrain_cpu_relax();
    return dtrain_clock_ns() < deadline;
}

/* Thread tid's share of [0, n): near-equal contiguous ranges. */
static void run_share(cpu_pool_fn fn, void *arg, long n, int threads, int tid)
{
    long begin = n * tid / threads, end = n * (tid + 1) / threads;
    if (begin < end)
        fn(arg, begin, end, tid);
}

/* The generation after `seen`, once there is one (0 when the pool stops). */
static unsigned long next_job(struct cpu_pool *pool, unsigned long seen)
{
    unsigned long g;
    int64_t deadline = spin_deadline(pool);
    do {
        if ((g = atomic_load_explicit(&pool->generation, memory_order_acquire)) != seen)
            return g;
        if (atomic_load_explicit(&pool->stop, memory_order_relaxed))
            return 0;
    } while (spin_round(deadline));
    pthread_mutex_lock(&pool->mu);
    pool->sleepers++;
    while ((g = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
           !atomic_load_explicit(&pool->stop, memory_order_relaxed))
        pthread_cond_wait(&pool->work_cv, &pool->mu);
    pool->sleepers--;
    pthread_mutex_unlock(&pool->mu);
    return atomic_load_explicit(&pool->stop, memory_order_relaxed) ? 0 : g;
}

static void *worker_main(void *p)
{
    struct worker_start *ws = p;
    struct cpu_pool *pool = ws->pool;
    int tid = ws->tid;
    free(ws);
    unsigned long seen = 0;
    while ((seen = next_job(pool, seen)) != 0) {
        run_share(pool->fn, pool->arg, pool->n, pool->threads, tid);
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->mu);
            if (pool->caller_sleeps)
                pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

/* More threads than the CPUs this process may run on: no spinning. */
static int oversubscribed(int threads)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    return threads > CPU_COUNT(&set);
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
    pool->spin_ns = oversubscribed(threads) ? 0 : POOL_SPIN_NS;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, 0);
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
    atomic_store(&pool->stop, 1);
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
    /* The job's fields, then the generation that publishes them (release);
     * a worker that checked the generation under mu before this bump is
     * waiting on work_cv by the time the caller holds mu to wake it. */
    pool->fn = fn;
    pool->arg = arg;
    pool->n = n;
    atomic_store_explicit(&pool->pending, pool->threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_mutex_lock(&pool->mu);
    if (pool->sleepers > 0)
        pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->mu);

    run_share(fn, arg, n, pool->threads, 0);

    int64_t deadline = spin_deadline(pool);
    do {
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0)
            return;
    } while (spin_round(deadline));
    pthread_mutex_lock(&pool->mu);
    pool->caller_sleeps = 1;
    while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0)
        pthread_cond_wait(&pool->done_cv, &pool->mu);
    pool->caller_sleeps = 0;
    pthread_mutex_unlock(&pool->mu);
}
