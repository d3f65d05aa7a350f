/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CPU kernels' fork-join pool (kernels/cpu/cpu_pool.h): every item of
 * every job runs once, on the thread the static partition gives it, whether
 * the workers are spinning for the next job (jobs back to back), asleep
 * (a pause past the spin between jobs) or the caller waits asleep for a
 * slow worker; and the pool stops cleanly from either state.  A lost
 * wake-up shows as a hang: alarm() ends the test then. */
#include "cpu_pool.h"
#include "tap.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ITEMS 64

struct job {
    int threads;
    long n;
    int runs[MAX_ITEMS];       /* times item i ran in this job */
    int wrong_tid;             /* items run by another thread than their range's */
    long slow_worker_ns;       /* workers sleep this long in their share */
};

static void sleep_ns(long ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void mark(void *p, long begin, long end, int tid)
{
    struct job *j = p;
    if (j->slow_worker_ns > 0 && tid != 0)
        sleep_ns(j->slow_worker_ns);
    for (long i = begin; i < end; i++) {
        j->runs[i]++;
        /* the partition cpu_pool.h promises: range t is [n*t/threads, n*(t+1)/threads),
         * a job of one item the caller's */
        if (j->n == 1 ? tid != 0 : i < j->n * tid / j->threads || i >= j->n * (tid + 1) / j->threads)
            __atomic_fetch_add(&j->wrong_tid, 1, __ATOMIC_RELAXED);
    }
}

/* `jobs` jobs of 1..MAX_ITEMS items, `pause_ns` between them; the jobs whose items did not each run once */
static int run_jobs(struct cpu_pool *pool, int threads, int jobs, long pause_ns, long slow_worker_ns, int *wrong_tid)
{
    int bad = 0;
    *wrong_tid = 0;
    for (int j = 0; j < jobs; j++) {
        struct job job = {.threads = threads, .n = 1 + (j * 7) % MAX_ITEMS, .slow_worker_ns = slow_worker_ns};
        cpu_pool_for(pool, job.n, mark, &job);
        for (long i = 0; i < job.n; i++)
            bad += job.runs[i] != 1;
        *wrong_tid += job.wrong_tid;
        if (pause_ns > 0)
            sleep_ns(pause_ns);
    }
    return bad;
}

int main(void)
{
    alarm(120);
    const int counts[] = {1, 2, 3, 4, 8};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        int threads = counts[c], wrong = 0;
        struct cpu_pool *pool = NULL;
        if (!ok(cpu_pool_create(threads, &pool) == 0 && pool != NULL, "%d threads: pool created", threads))
            continue;
        ok(cpu_pool_threads(pool) == threads, "%d threads: cpu_pool_threads says so", threads);
        ok(run_jobs(pool, threads, 20000, 0, 0, &wrong) == 0 && wrong == 0,
           "%d threads: 20000 jobs back to back: each item once, on its range's thread (%d elsewhere)", threads, wrong);
        ok(run_jobs(pool, threads, 100, 300000, 0, &wrong) == 0 && wrong == 0,
           "%d threads: 100 jobs 0.3 ms apart (workers asleep between them): each item once", threads);
        ok(run_jobs(pool, threads, 50, 0, 1000000, &wrong) == 0 && wrong == 0,
           "%d threads: 50 jobs whose workers take 1 ms (the caller waits asleep): each item once", threads);
        ok(run_jobs(pool, threads, 1000, 0, 0, &wrong) == 0 && wrong == 0,
           "%d threads: back to back again after sleeping: each item once", threads);
        cpu_pool_destroy(pool); /* the workers spinning for a next job (a hang: the alarm) */
        if (ok(cpu_pool_create(threads, &pool) == 0, "%d threads: a second pool created", threads)) {
            ok(run_jobs(pool, threads, 10, 0, 0, &wrong) == 0 && wrong == 0, "%d threads: 10 jobs on it", threads);
            sleep_ns(5000000);
            cpu_pool_destroy(pool); /* the workers asleep */
        }
    }
    struct cpu_pool *pool = NULL;
    ok(cpu_pool_create(0, &pool) != 0 && pool == NULL, "0 threads: refused");
    return tap_done();
}
