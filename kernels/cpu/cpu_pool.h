/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A small fork-join thread pool for the CPU kernels.
 *
 * cpu_pool_for(pool, n, fn, arg) splits [0, n) into one contiguous range per
 * thread (a static partition: range i always goes to thread i) and returns
 * when every range is done; the calling thread runs range 0.  Kernels only
 * give a range work whose result does not depend on which thread runs it,
 * so results are the same from run to run.
 *
 * A job of one item runs on the caller, as range 0.  Idle workers spin
 * briefly for the next job, then sleep on a condition variable (cpu_pool.c
 * says how long and when they do not spin).  Not reentrant:
 * fn must not call cpu_pool_for, and one thread at a time drives a pool. */
#ifndef DTRAIN_CPU_POOL_H
#define DTRAIN_CPU_POOL_H

struct cpu_pool;

/* fn handles items [begin, end); tid is 0..threads-1. */
typedef void (*cpu_pool_fn)(void *arg, long begin, long end, int tid);

/* A pool of `threads` threads in all (threads-1 workers plus the caller).
 * Returns 0, or an errno value. */
int cpu_pool_create(int threads, struct cpu_pool **out);
void cpu_pool_destroy(struct cpu_pool *pool);
int cpu_pool_threads(const struct cpu_pool *pool);
void cpu_pool_for(struct cpu_pool *pool, long n, cpu_pool_fn fn, void *arg);

#endif
