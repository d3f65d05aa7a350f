/* dtrain-health: run one probe with a time bound.
 *
 * A probe (NVML queries, statvfs on a network filesystem, hwloc, sysfs
 * reads) can block forever when the hardware or a server is sick, and a
 * prolog that hangs keeps the job and the node stuck.  So every probe runs
 * in a forked child, in its own process group, writing its answer into
 * memory shared with the parent.  The parent waits at most timeout_ms; past
 * that it kills the child's process group with SIGKILL and reports which
 * step the child was in (the "stage" the probe announced before each call
 * that may block).  A child stuck in the kernel (state D) cannot be reaped:
 * it is left to init rather than waited for.
 *
 * No global state; the parent must be single-threaded when it calls
 * health_run_bounded (it forks). */
#ifndef DTRAIN_HEALTH_BOUNDED_H
#define DTRAIN_HEALTH_BOUNDED_H

#include <stddef.h>

#define HEALTH_STAGE_LEN 160

/* What the probe is doing now, e.g. "nvmlDeviceGetTotalEccErrors on GPU 2".
 * Lives in the shared memory, so the parent can read it after a timeout. */
struct health_stage {
    char text[HEALTH_STAGE_LEN];
};

/* Announce the next step (printf-style; truncated to fit). */
void health_stage_set(struct health_stage *stage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A probe: fills `out` (outsize bytes, zeroed before the call) from `arg`.
 * It runs in the child; whatever it returns, `out` is what the parent gets. */
typedef void (*health_probe_fn)(const void *arg, void *out, struct health_stage *stage);

enum health_bounded_status {
    HEALTH_BOUNDED_OK = 0,       /* the probe finished; out holds its answer */
    HEALTH_BOUNDED_TIMEOUT = 1,  /* killed after timeout_ms; why names the stage */
    HEALTH_BOUNDED_FAILED = 2,   /* could not fork, or the child died (signal, exit) */
};

/* Run probe(arg, out) in a child, at most timeout_ms milliseconds.  On
 * HEALTH_BOUNDED_OK, out holds the answer; otherwise out is left zeroed
 * and `why` holds one line ("did not finish within 500 ms (stuck in
 * nvmlInit_v2)", "crashed with signal 11 in ..."). */
enum health_bounded_status health_run_bounded(health_probe_fn probe, const void *arg,
                                              void *out, size_t outsize, int timeout_ms,
                                              char *why, size_t whylen);

#endif
