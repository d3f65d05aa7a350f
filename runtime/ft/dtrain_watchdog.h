/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: the watchdog thread of a training process.
 *
 * The training loop can only notice a fault when a call returns; a rank
 * stuck in computation, or one whose peers died while it computes, needs a
 * second thread.  Every poll interval the watchdog
 *   - asks every communicator for an asynchronous error
 *     (dtrain_comm_get_async_error: a peer that closed its links, i.e.
 *     died or gave up);
 *   - checks the heartbeat: the loop calls dtrain_watchdog_beat() at each
 *     step and around checkpoints; no beat for stall_s seconds is a hang.
 * On either it reports the fault (dtrain_fault_report: the one line), sets
 * the process's abort flag, which every communicator watches (calls in
 * flight fail with cause DTRAIN_COMM_EABORTED within tens of ms, so the
 * loop unwinds), and if the main thread has not stopped the watchdog
 * grace_s seconds later (it is stuck outside the comm layer) ends the
 * process with the fault's exit code (_exit: the process is wedged).
 *
 * Ranks that finish first close their links, which a peer's watchdog would
 * take for a fault: each rank stops (or pauses) its watchdog and then
 * enters a last barrier; nobody leaves the barrier before every rank has
 * entered it, so every watchdog is off before any link closes.
 * dtrain_watchdog_pause() / _resume() switch the polling off and on (the
 * heartbeat check too).
 *
 * Fast hang detection (dtrain_heartbeat.h): with hang_s > 0 and a
 * heartbeat handed over (dtrain_watchdog_set_heartbeat), every poll also
 * sends this rank's state to its ring neighbours and judges theirs; the
 * poll interval is then at most hang_s / 5.  The state is the loop's beat
 * (phase, step), the trainer's action (dtrain_watchdog_action), whether a
 * call of one of `comms` is in flight and their progress
 * (dtrain_comm_get_stats: started, calls, bytes). */
#ifndef DTRAIN_WATCHDOG_H
#define DTRAIN_WATCHDOG_H

#include <stdatomic.h>
#include <stddef.h>

#include "dtrain_comm.h"
#include "dtrain_fault.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_watchdog_options {
    atomic_int *abort_flag;           /* set on a fault (the communicators' abort flag) */
    const struct dtrain_comms *comms; /* polled for asynchronous errors; NULL: none */
    struct dtrain_fault *fault;       /* the process's fault state: the line, the exit code */
    double stall_s;                   /* no heartbeat for this long is a hang; 0: not checked */
    double grace_s;                   /* after the abort, how long the main thread may take to stop us */
    double poll_s;                    /* between looks; 0: 0.2 s */
    double hang_s;                    /* heartbeat verdicts after this long (dtrain_heartbeat.h); 0: none */
};

struct dtrain_hb;

struct dtrain_watchdog; /* opaque */

int dtrain_watchdog_start(const struct dtrain_watchdog_options *o, struct dtrain_watchdog **out, char *err,
                          size_t errlen);
/* The loop is alive; `phase` (a string that lives as long as the
 * watchdog, e.g. a literal) names what it does next, for the fault line;
 * step is the step it works on. */
void dtrain_watchdog_beat(struct dtrain_watchdog *w, const char *phase, long step);
/* The trainer's present action inside a step (a literal, e.g. "forward";
 * micro: its micro-batch, -1 none), for the heartbeat and the fault line;
 * cleared by the next beat. */
void dtrain_watchdog_action(struct dtrain_watchdog *w, const char *action, int micro);
/* Hand over the heartbeat (its peers set); the watchdog owns it from
 * now on and closes it when stopped (after a last "leaving" datagram). */
void dtrain_watchdog_set_heartbeat(struct dtrain_watchdog *w, struct dtrain_hb *hb);
void dtrain_watchdog_pause(struct dtrain_watchdog *w);
void dtrain_watchdog_resume(struct dtrain_watchdog *w);
/* 1 once the watchdog has reported a fault. */
int dtrain_watchdog_fired(const struct dtrain_watchdog *w);
/* Stop and join the thread; NULL is fine. */
void dtrain_watchdog_stop(struct dtrain_watchdog *w);

#ifdef __cplusplus
}
#endif

#endif
