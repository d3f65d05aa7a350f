/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A minimal TAP producer for dtrain's C unit tests.
 *
 * Each check prints "ok N - ..." or "not ok N - ..."; tap_done() prints the
 * plan "1..N" and returns the exit status.  automake's tap-driver.sh turns
 * the lines into the counts that tests/run-suite sums.  A skipped check
 * prints "ok N # SKIP reason", which the driver counts as skipped, never
 * as passed. */
#ifndef DTRAIN_TAP_H
#define DTRAIN_TAP_H

#include <stdarg.h>
#include <stdio.h>

struct tap_state { int n; int failed; };
static struct tap_state tap_state_;

static inline void tap_vreport(int pass, const char *file, int line, const char *fmt, va_list ap)
{
    tap_state_.n++;
    if (!pass)
        tap_state_.failed++;
    printf("%sok %d - ", pass ? "" : "not ", tap_state_.n);
    vprintf(fmt, ap);
    printf("\n");
    if (!pass)
        printf("# failed at %s:%d\n", file, line);
    fflush(stdout);
}

static inline int tap_report(int pass, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int tap_report(int pass, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_vreport(pass, file, line, fmt, ap);
    va_end(ap);
    return pass;
}

/* ok(cond, "what is checked %d", x): one test point. Returns cond. */
#define ok(cond, ...) tap_report(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* skip("why"): one skipped test point. */
static inline void skip(const char *reason)
{
    tap_state_.n++;
    printf("ok %d # SKIP %s\n", tap_state_.n, reason);
    fflush(stdout);
}

/* diag("..."): a comment line, shown in the test log. */
#define diag(...) (printf("# "), printf(__VA_ARGS__), printf("\n"), fflush(stdout))

/* Print the plan; the test's exit status (0 when all passed). */
static inline int tap_done(void)
{
    printf("1..%d\n", tap_state_.n);
    return tap_state_.failed ? 1 : 0;
}

#endif
