/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The benchmarks' verdicts (bench/bench_util.h): a ratio of a measured
 * limit over 100% is INVALID, never "met"; a speedup between two of our
 * own configurations is not capped. */
#include "bench_util.c" /* the benchmarks build it in, no library to link */
#include "tap.h"

#include <math.h>
#include <string.h>

int main(void)
{
    ok(strcmp(bench_verdict(0.70, 0.60), "met") == 0, "70%% of the limit, target 60%%: met");
    ok(strcmp(bench_verdict(0.60, 0.60), "met") == 0, "exactly the target: met");
    ok(strcmp(bench_verdict(0.54, 0.60), "NOT met") == 0, "54%%, target 60%%: NOT met");
    ok(strcmp(bench_verdict(1.0, 0.60), "met") == 0, "100%% of the limit is possible: met");
    ok(strcmp(bench_verdict(1.445, 0.60), BENCH_INVALID) == 0 && strncmp(BENCH_INVALID, "INVALID", 7) == 0,
       "144.5%% of a measured limit (the issue's case): INVALID, not met");
    ok(strcmp(bench_verdict(NAN, 0.60), BENCH_INVALID) == 0 && strcmp(bench_verdict(INFINITY, 0.5), BENCH_INVALID) == 0,
       "no limit measured (NaN, infinite ratio): INVALID");
    ok(bench_over_limit(1.0001) && !bench_over_limit(1.0) && !bench_over_limit(0.0) && bench_over_limit(-0.1),
       "over the limit: above 1 or below 0");
    ok(strcmp(bench_verdict_speedup(2.6, 2.5), "met") == 0 && strcmp(bench_verdict_speedup(0.51, 0.9), "NOT met") == 0,
       "a speedup against its target");
    ok(strcmp(bench_verdict_speedup(4.4, 1.0), "met") == 0, "a speedup is not capped at 1");
    ok(strcmp(bench_verdict_overhead(0.04, 0.05), "met") == 0 && strcmp(bench_verdict_overhead(0.38, 0.05), "NOT met") == 0,
       "an overhead against its ceiling");
    ok(strcmp(bench_verdict_overhead(-0.03, 0.05), "met") == 0 &&
           strcmp(bench_verdict_overhead(-0.233, 0.05), BENCH_INVALID_OVERHEAD) == 0 &&
           strcmp(bench_verdict_overhead(NAN, 0.05), BENCH_INVALID_OVERHEAD) == 0,
       "an overhead of -3%% is noise (met); -23.3%% means the baseline was slow: INVALID, not met");
    double v[] = {3.0, 7.5, 1.0, 7.4};
    ok(bench_best(v, 4) == 7.5, "the best of several measurements of a limit: the highest");
    return tap_done();
}
