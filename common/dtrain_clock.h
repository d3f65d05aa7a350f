/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The monotonic clock (CLOCK_MONOTONIC), for durations, deadlines and
 * timeouts (never for dates): the one place every part reads it.  Header
 * only, so that any part (the SPANK plugin, the tests, the benchmarks)
 * takes it without linking more. */
#ifndef DTRAIN_CLOCK_H
#define DTRAIN_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an arbitrary start (the same for every process of the
 * host). */
static inline int64_t dtrain_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The same in seconds, microseconds and milliseconds (whole ones rounded
 * down). */
static inline double dtrain_clock_s(void) { return 1e-9 * (double)dtrain_clock_ns(); }
static inline int64_t dtrain_clock_us(void) { return dtrain_clock_ns() / 1000; }
static inline int64_t dtrain_clock_ms(void) { return dtrain_clock_ns() / 1000000; }

#endif
