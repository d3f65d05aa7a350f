/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Timing helpers every benchmark in bench/ uses (the clock is
 * common/dtrain_clock.h's): the median, the figure benchmarks report
 * because it is the one least moved by other work on the machine; and the
 * verdicts every benchmark prints next to its targets (doc/runtime.md,
 * "Benchmark"). */
#ifndef DTRAIN_BENCH_UTIL_H
#define DTRAIN_BENCH_UTIL_H

/* The median of v[n] (n >= 1; v is sorted in place). */
double bench_median(double *v, int n);

/* The highest of v[n] (n >= 1): the best of several measurements of a
 * limit (other work on the machine only ever slows a measurement down). */
double bench_best(const double *v, int n);

/* The verdict on a ratio of a physical or measured limit (the best sgemm
 * rate, memcpy), the limit being the best of its measurements before,
 * between and after the work: "met" (ratio >= target), "NOT met", or,
 * over 1 (or not a number), BENCH_INVALID: nothing runs faster than its
 * limit, so the limit was measured low and the ratio says nothing. */
/* 1 when a ratio of a limit cannot be: over 1, below 0 or not a number. */
int bench_over_limit(double ratio);
#define BENCH_INVALID "INVALID: over 100% of the measured limit, the limit was measured low; rerun on a quiet machine"
const char *bench_verdict(double ratio, double target);

/* The verdict on a ratio between two of our own configurations measured
 * interleaved (a speedup, bf16 over fp32): not capped; "met" when
 * ratio >= target, else "NOT met" (also when it is not a number). */
const char *bench_verdict_speedup(double ratio, double target);

/* The verdict on an overhead (a ratio minus 1, e.g. +0.04 for 4% slower)
 * against its ceiling: "met" when overhead <= ceiling, else "NOT met";
 * BENCH_INVALID_OVERHEAD when the work with the extra cost ran more than
 * the ceiling faster than without it (or it is not a number): the
 * baseline was measured slow, and "met" would be a false claim. */
#define BENCH_INVALID_OVERHEAD "INVALID: faster than without the extra work, the baseline was measured slow; rerun on a quiet machine"
const char *bench_verdict_overhead(double overhead, double ceiling);

#endif
