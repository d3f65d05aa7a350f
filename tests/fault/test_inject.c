/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fault injection specs (runtime/ft/dtrain_inject.h) and the restart budget
 * (common/dtrain_fault.h): what parses, what is refused with which line,
 * when a fault is due, and the exit code of a fault for each
 * SLURM_RESTART_COUNT / DTRAIN_MAX_RESTARTS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_env.h"
#include "dtrain_exit.h"
#include "dtrain_fault.h"
#include "ft/dtrain_inject.h"
#include "tap.h"

static void env(const char *name, const char *value)
{
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

int main(void)
{
    struct dtrain_inject in;
    char err[512];

    ok(dtrain_inject_parse("", &in, err, sizeof err) == 0 && in.n == 0, "an empty spec: no faults");
    ok(dtrain_inject_parse(NULL, &in, err, sizeof err) == 0 && in.n == 0, "no spec: no faults");
    int rc = dtrain_inject_parse("kill:rank=1:step=12,hang:rank=0:step=3:restart=any,nan:rank=2:step=5:count=4,"
                                 "corrupt:rank=3:restart=1,nospace:rank=0:step=8,delay:rank=1:step=0:ms=50:count=10",
                                 &in, err, sizeof err);
    ok(rc == 0 && in.n == 6, "six faults of every kind parse (%s)", rc == 0 ? "ok" : err);
    ok(dtrain_inject_due(&in, DTRAIN_INJECT_KILL, 1, 12, 0) && !dtrain_inject_due(&in, DTRAIN_INJECT_KILL, 1, 11, 0) &&
       !dtrain_inject_due(&in, DTRAIN_INJECT_KILL, 0, 12, 0), "kill is due on rank 1 at step 12 only");
    ok(!dtrain_inject_due(&in, DTRAIN_INJECT_KILL, 1, 12, 1), "kill does not fire in the requeued run (restart 1)");
    ok(dtrain_inject_due(&in, DTRAIN_INJECT_HANG, 0, 3, 0) && dtrain_inject_due(&in, DTRAIN_INJECT_HANG, 0, 3, 5),
       "restart=any fires in every run");
    const struct dtrain_inject_fault *nan = dtrain_inject_find(&in, DTRAIN_INJECT_NAN, 2, 5, 0);
    ok(nan != NULL && nan->count == 4 && dtrain_inject_find(&in, DTRAIN_INJECT_NAN, 2, 6, 0) == NULL,
       "nan starts at its step with its count of attempts");
    ok(dtrain_inject_due(&in, DTRAIN_INJECT_CORRUPT, 3, 0, 1) && !dtrain_inject_due(&in, DTRAIN_INJECT_CORRUPT, 3, 0, 0),
       "corrupt:restart=1 is due before the first resume of the requeued run only");
    ok(dtrain_inject_due(&in, DTRAIN_INJECT_NOSPACE, 0, 8, 0), "nospace is due at its step");
    ok(dtrain_inject_delay_ms(&in, 1, 0, 0) == 50 && dtrain_inject_delay_ms(&in, 1, 9, 0) == 50 &&
       dtrain_inject_delay_ms(&in, 1, 10, 0) == 0 && dtrain_inject_delay_ms(&in, 0, 5, 0) == 0,
       "delay: 50 ms before steps 0..9 on rank 1, nothing else");
    ok(dtrain_inject_parse("slowckpt:rank=2:step=4:ms=300", &in, err, sizeof err) == 0 &&
       dtrain_inject_ms(&in, DTRAIN_INJECT_SLOWCKPT, 2, 4, 0) == 300 &&
       dtrain_inject_ms(&in, DTRAIN_INJECT_SLOWCKPT, 2, 5, 0) == 0 && dtrain_inject_delay_ms(&in, 2, 4, 0) == 0,
       "slowckpt: rank 2's background write of step 4 waits 300 ms, and it is not a step delay");

    static const struct { const char *spec, *says; } bad[] = {
        {"explode:rank=1", "unknown fault 'explode'"},
        {"kill:step=3", "kill needs rank=R"},
        {"kill:rank=1", "kill needs step=S"},
        {"corrupt:rank=1:step=2", "corrupt takes no step=S"},
        {"kill:rank=1:step=2:count=3", "count= is for nan and delay only"},
        {"delay:rank=1:step=2", "delay needs ms=M"},
        {"slowckpt:rank=1:step=2", "slowckpt needs ms=M"},
        {"kill:rank=1:step=2:ms=5", "ms= is for delay, slowckpt and slowload only"},
        {"kill:rank=-1:step=2", "rank"},
        {"kill:rank=1:step=x", "step"},
        {"kill:rank=1:rank=2:step=1", "'rank' is given twice"},
        {"kill:rank=1:step=1:when=now", "'when=now' is not rank=, step=, count=, ms= or restart="},
        {"nan:rank=0:step=1:count=0", "count"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rc = dtrain_inject_parse(bad[k].spec, &in, err, sizeof err);
        ok(rc == -1 && strstr(err, bad[k].says) != NULL && strstr(err, "KIND:rank=R") != NULL,
           "'%s' is refused with the syntax: %s", bad[k].spec, err);
    }
    char many[1024] = "";
    for (int k = 0; k <= DTRAIN_INJECT_MAX; k++)
        strcat(many, k ? ",kill:rank=0:step=1" : "kill:rank=0:step=1");
    ok(dtrain_inject_parse(many, &in, err, sizeof err) == -1 && strstr(err, "more than") != NULL,
       "more than %d faults are refused", DTRAIN_INJECT_MAX);

    /* ---- the restart budget */
    struct dtrain_restarts r;
    char why[256];
    static const struct { const char *count, *max; int code; const char *says; } budget[] = {
        {NULL, NULL, DTRAIN_EXIT_REQUEUE, "requeue, restart 1"},
        {"2", NULL, DTRAIN_EXIT_REQUEUE, "requeue, restart 3"},
        {NULL, "3", DTRAIN_EXIT_REQUEUE, "restart 1 of at most 3"},
        {"2", "3", DTRAIN_EXIT_REQUEUE, "restart 3 of at most 3"},
        {"3", "3", DTRAIN_EXIT_FAILURE, "not requeued: the job was already restarted 3 times (--dtrain-max-restarts=3)"},
        {"0", "0", DTRAIN_EXIT_FAILURE, "already restarted 0 times"},
        {"5", "1", DTRAIN_EXIT_FAILURE, "restarted 5 times"},
    };
    for (size_t k = 0; k < sizeof budget / sizeof budget[0]; k++) {
        env(DTRAIN_ENV_RESTART_COUNT, budget[k].count);
        env("DTRAIN_MAX_RESTARTS", budget[k].max);
        rc = dtrain_restarts_read(&r, err, sizeof err);
        int code = rc == 0 ? dtrain_restarts_exit(&r, why, sizeof why) : -1;
        ok(code == budget[k].code && strstr(why, budget[k].says) != NULL,
           "restarts %s, at most %s: exit %d (%s)", budget[k].count ? budget[k].count : "unset",
           budget[k].max ? budget[k].max : "unset", code, why);
    }
    /* in-job restarts (dtrain-launch --supervise) count with Slurm's requeues, in one budget */
    static const struct { const char *count, *in_job, *max; int code; const char *says; } injob[] = {
        {NULL, "0", "3", DTRAIN_EXIT_REQUEUE, "restart 1 of at most 3"},
        {"1", "1", "3", DTRAIN_EXIT_REQUEUE, "restart 3 of at most 3"},
        {NULL, "3", "3", DTRAIN_EXIT_FAILURE, "not requeued: the job was already restarted 3 times"},
        {"2", "1", "3", DTRAIN_EXIT_FAILURE, "already restarted 3 times"},
        {"4", "2", NULL, DTRAIN_EXIT_REQUEUE, "restart 7"},
    };
    for (size_t k = 0; k < sizeof injob / sizeof injob[0]; k++) {
        env(DTRAIN_ENV_RESTART_COUNT, injob[k].count);
        env(DTRAIN_ENV_INJOB_RESTARTS, injob[k].in_job);
        env("DTRAIN_MAX_RESTARTS", injob[k].max);
        rc = dtrain_restarts_read(&r, err, sizeof err);
        int code = rc == 0 ? dtrain_restarts_exit(&r, why, sizeof why) : -1;
        ok(code == injob[k].code && strstr(why, injob[k].says) != NULL && strstr(why, "requeue, ") == NULL &&
           r.supervised == 1, "requeues %s + in-job %s, at most %s: exit %d (%s)",
           injob[k].count ? injob[k].count : "unset", injob[k].in_job, injob[k].max ? injob[k].max : "unset", code,
           why);
    }
    env(DTRAIN_ENV_INJOB_RESTARTS, "-2");
    ok(dtrain_restarts_read(&r, err, sizeof err) == -1 && strstr(err, "DTRAIN_INJOB_RESTARTS") != NULL,
       "a malformed DTRAIN_INJOB_RESTARTS is refused: %s", err);
    env(DTRAIN_ENV_INJOB_RESTARTS, NULL);
    env(DTRAIN_ENV_RESTART_COUNT, "x1");
    ok(dtrain_restarts_read(&r, err, sizeof err) == -1 && strstr(err, "SLURM_RESTART_COUNT") != NULL,
       "a malformed SLURM_RESTART_COUNT is refused: %s", err);
    env(DTRAIN_ENV_RESTART_COUNT, NULL);
    env("DTRAIN_MAX_RESTARTS", "-1");
    ok(dtrain_restarts_read(&r, err, sizeof err) == -1 && strstr(err, "--dtrain-max-restarts") != NULL,
       "a malformed DTRAIN_MAX_RESTARTS is refused: %s", err);

    /* ---- one fault line per process, the same code for every report */
    env("DTRAIN_MAX_RESTARTS", "1");
    env(DTRAIN_ENV_RESTART_COUNT, "1");
    struct dtrain_fault f;
    char log[] = "/tmp/dtrain-test-inject-XXXXXX";
    int fd = mkstemp(log);
    env(DTRAIN_ENV_FAULT_LOG, fd >= 0 ? log : NULL);
    rc = dtrain_fault_init(&f, "test", 3, err, sizeof err);
    int first = dtrain_fault_report(&f, 7, "a peer died");
    int second = dtrain_fault_report(&f, 7, "the watchdog saw it too");
    ok(rc == 0 && first == DTRAIN_EXIT_FAILURE && second == first, "past the budget both reports give exit 1");
    char line[1024] = "";
    FILE *lf = fd >= 0 ? fdopen(fd, "r") : NULL;
    int lines = 0;
    while (lf != NULL && fgets(line, sizeof line, lf) != NULL)
        lines++;
    ok(lines == 1 && strstr(line, "\"event\": \"detect\"") != NULL && strstr(line, "\"rank\": 3") != NULL &&
       strstr(line, "a peer died") != NULL, "the timeline got one detect event: %s", line);
    if (lf != NULL)
        fclose(lf);
    unlink(log);
    return tap_done();
}
