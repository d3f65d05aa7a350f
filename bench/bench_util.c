/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Timing helpers and verdicts of the benchmarks; see bench_util.h. */
#include "bench_util.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_best(const double *v, int n)
{
    double best = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] > best)
            best = v[i];
    return best;
}

int bench_over_limit(double ratio)
{
    return !isfinite(ratio) || ratio > 1.0 || ratio < 0.0;
}

const char *bench_verdict(double ratio, double target)
{
    if (bench_over_limit(ratio))
        return BENCH_INVALID;
    return ratio >= target ? "met" : "NOT met";
}

const char *bench_verdict_speedup(double ratio, double target)
{
    return ratio >= target ? "met" : "NOT met";
}

const char *bench_verdict_overhead(double overhead, double ceiling)
{
    if (!(overhead >= -ceiling))
        return BENCH_INVALID_OVERHEAD;
    return overhead <= ceiling ? "met" : "NOT met";
}
