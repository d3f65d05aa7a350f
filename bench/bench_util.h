/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Timing helpers every benchmark in bench/ uses (the clock is
 * common/dtrain_clock.h's): the median, the figure benchmarks report
 * because it is the one least moved by other work on the machine. */
#ifndef DTRAIN_BENCH_UTIL_H
#define DTRAIN_BENCH_UTIL_H

/* The median of v[n] (n >= 1; v is sorted in place). */
double bench_median(double *v, int n);

#endif
