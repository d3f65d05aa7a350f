/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Run probes with a time bound, several at once (dtrain-health's probes;
 * the SPANK plugin's topology discovery inside slurmstepd).
 *
 * A probe (NVML queries, statvfs on a network filesystem, hwloc, sysfs
 * reads) can block forever when the hardware or a server is sick, and a
 * prolog that hangs keeps the job and the node stuck; hwloc given a hostile
 * XML file may crash, and must not take slurmstepd with it.  So every probe runs
 * in a forked child, in its own process group, writing its answer into
 * memory shared with the parent.  The parent waits at most the probe's
 * timeout; past that it kills the child's process group with SIGKILL and
 * reports which step the child was in (the "stage" the probe announced
 * before each call that may block).  A child stuck in the kernel (state D)
 * cannot be reaped: it is left to init rather than waited for.
 *
 * Probes started together run at the same time, so a run takes as long as
 * its slowest probe, not the sum.  The parent should be single-threaded
 * (it forks); from a threaded parent (slurmstepd) the child may deadlock on
 * a lock another thread held, which the time bound then ends.  A parent
 * whose other code reaps any child (waitpid(-1)) still gets the answer: the
 * child marks it complete in the shared memory before it exits.  No global
 * state. */
#ifndef DTRAIN_BOUNDED_H
#define DTRAIN_BOUNDED_H

#include <stddef.h>
#include <sys/types.h>

#define DTRAIN_STAGE_LEN 160
#define DTRAIN_WHY_LEN 256

/* What the probe is doing now, e.g. "nvmlDeviceGetTotalEccErrors on GPU 2".
 * Lives in the shared memory, so the parent can read it after a timeout. */
struct dtrain_stage {
    char text[DTRAIN_STAGE_LEN];
    volatile int done; /* set by the child once the probe returned */
};

/* Announce the next step (printf-style; truncated to fit). */
void dtrain_stage_set(struct dtrain_stage *stage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A probe: fills `out` (zeroed before the call) from `arg`.  It runs in
 * the child, which has a copy of the parent's memory as it was at the
 * start, so `arg` may point at the caller's locals. */
typedef void (*dtrain_probe_fn)(const void *arg, void *out, struct dtrain_stage *stage);

/* Called in the parent when the probe gave no answer (timeout, crash):
 * fill `out` with the failure; `ctx` is what was given at the start (what
 * the probe was looking at), `why` says what happened. */
typedef void (*dtrain_probe_failed_fn)(void *out, const void *ctx, const char *why);

enum dtrain_bounded_status {
    DTRAIN_BOUNDED_OK = 0,       /* the probe finished; out holds its answer */
    DTRAIN_BOUNDED_TIMEOUT = 1,  /* killed after its timeout; why names the stage */
    DTRAIN_BOUNDED_FAILED = 2,   /* could not fork, or the child died (signal, exit) */
};

/* One probe in flight.  Set by dtrain_probe_start, read after the wait:
 * status, why ("did not finish within 500 ms (stuck in nvmlInit_v2)",
 * "crashed with signal 11 in ...") and elapsed_ms. */
struct dtrain_probe {
    enum dtrain_bounded_status status;
    char why[DTRAIN_WHY_LEN];
    double elapsed_ms;
    /* private */
    pid_t pid;
    int fd;
    void *shared;
    size_t shared_len;
    void *out;
    size_t outsize;
    int timeout_ms;
    double start_ms;
    dtrain_probe_failed_fn failed;
    const void *failed_ctx;
    int busy;
};

/* Start probe(arg, out) in a child.  `out` and `ctx` must stay valid until
 * the wait; `failed` may be NULL. */
void dtrain_probe_start(struct dtrain_probe *p, dtrain_probe_fn probe, const void *arg, void *out,
                        size_t outsize, int timeout_ms, dtrain_probe_failed_fn failed, const void *ctx);

/* Wait for the started probes together, each within its own timeout.  On
 * return every probe's out holds its answer, or (status != OK) is zeroed
 * and then filled by its `failed` function.  NULL entries are ignored. */
void dtrain_probe_wait_all(struct dtrain_probe *const *probes, int n);
/* The same for one started probe. */
void dtrain_probe_wait(struct dtrain_probe *probe);

/* Start one probe and wait for it.  Returns its status; why (if not NULL)
 * gets the probe's why. */
enum dtrain_bounded_status dtrain_run_bounded(dtrain_probe_fn probe, const void *arg, void *out,
                                              size_t outsize, int timeout_ms, char *why, size_t whylen);

#endif
