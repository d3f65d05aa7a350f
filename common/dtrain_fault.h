/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain common: what every dtrain process does about a fault.
 *
 * The restart budget.  Slurm counts a job's restarts in
 * SLURM_RESTART_COUNT (unset on the first run); dtrain-launch --supervise
 * counts the steps it restarted inside this run of the job (on spare
 * nodes) in DTRAIN_INJOB_RESTARTS, which it sets for its steps and itself;
 * their sum is the count.  --dtrain-max-restarts reaches the tasks and the
 * batch script as DTRAIN_MAX_RESTARTS (unset: no bound).  A fault ends the
 * process with DTRAIN_EXIT_REQUEUE (75) while count < max, so that the
 * supervisor restarts the step or Slurm requeues the job (RequeueExit=75),
 * and with DTRAIN_EXIT_FAILURE (1) once the budget is spent, so that the
 * job ends FAILED with a line saying why.
 *
 * The fault line.  The first fatal fault of a process is reported on ONE
 * line, whichever thread sees it first (the training loop, the watchdog):
 *   PROG: fault: rank R on NODE (HOST): REASON: exit 75 (requeue, restart 1 of at most 3)
 * Later reports of the same process print nothing and return the same
 * exit code.
 *
 * The timeline.  With DTRAIN_FAULT_LOG=FILE in the environment, events
 * (fault injected, detected, checkpoint written or loaded, first step
 * after a resume...) are appended to FILE as JSON lines with the wall
 * clock: {"t": 1795941614.325, "event": "detect", "rank": 1, "node":
 * "node2", "step": 12, "what": "..."}.  bench/bench_fault.sh reads them.
 *
 * Signals.  SIGTERM (Slurm's preemption, scancel) and SIGUSR1 (sbatch
 * --signal) only set a flag here; the training loop reads it between steps,
 * the ranks agree on it, write a checkpoint and exit 75.  The flags are
 * process-wide, as signal dispositions are: one installation per process. */
#ifndef DTRAIN_FAULT_H
#define DTRAIN_FAULT_H

#include <stdatomic.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_ENV_RESTART_COUNT "SLURM_RESTART_COUNT"
#define DTRAIN_ENV_FAULT_LOG "DTRAIN_FAULT_LOG"
/* In the checkpoint folder after a straggler drain: "NODE<TAB>REASON\n",
 * written by the trainer (dtrain_ft.h) for dtrain-launch --job-exit, which
 * drains NODE and removes the file. */
#define DTRAIN_DRAIN_REQUEST "drain-request"

struct dtrain_restarts {
    long count;    /* requeues + in_job: the restarts so far */
    long requeues; /* SLURM_RESTART_COUNT, 0 when unset */
    long in_job;   /* DTRAIN_INJOB_RESTARTS, 0 when unset */
    int supervised; /* DTRAIN_INJOB_RESTARTS is set: dtrain-launch --supervise decides */
    long max;      /* DTRAIN_MAX_RESTARTS, -1 when unset (no bound) */
};

/* Read the variables.  Returns 0, or -1 with one line in err for a
 * malformed value. */
int dtrain_restarts_read(struct dtrain_restarts *r, char *err, size_t errlen);

/* The exit code of a fault (75 or 1) and, in why, what happens next:
 * "requeue, restart 2 of at most 3" ("restart 2 of at most 3" under
 * --supervise, which restarts in the job or requeues) or "not requeued:
 * the job was already restarted 3 times (--dtrain-max-restarts=3)". */
int dtrain_restarts_exit(const struct dtrain_restarts *r, char *why, size_t whylen);

/* One process's fault state: shared by its threads. */
struct dtrain_fault {
    const char *prog;        /* message prefix */
    int rank;                /* -1: not a rank (the batch script's helper) */
    char node[64];           /* SLURMD_NODENAME, or "-" */
    char host[64];           /* gethostname */
    struct dtrain_restarts restarts;
    char log_path[1024];     /* DTRAIN_FAULT_LOG, or "" */
    atomic_int reported;     /* 0 until the fault line is out */
    int exit_code;           /* of the reported fault */
};

/* Fill f for PROG and this rank from the environment.  Returns 0, or -1
 * with one line in err (a malformed restart variable). */
int dtrain_fault_init(struct dtrain_fault *f, const char *prog, int rank, char *err, size_t errlen);

/* Report a fatal fault (any thread): the one line above the first time,
 * a "detect" event in the timeline; returns the exit code (75 or 1). */
int dtrain_fault_report(struct dtrain_fault *f, long step, const char *reason);

/* Append an event to the timeline (nothing without DTRAIN_FAULT_LOG).
 * what may be NULL. */
void dtrain_fault_event(const struct dtrain_fault *f, const char *event, long step, const char *what);

/* The wall clock in seconds (the timeline's "t"). */
double dtrain_wall_seconds(void);

/* Signals: SIGTERM and SIGUSR1 set flags (SA_RESTART); SIGINT (Ctrl-C)
 * sets TERM and INT, so that an interactive run stops as a preempted one
 * does, with a checkpoint; a second SIGINT ends the process at once.
 * Previous handlers are kept for dtrain_signals_restore. */
enum { DTRAIN_SIGNAL_TERM = 1, DTRAIN_SIGNAL_USR1 = 2, DTRAIN_SIGNAL_INT = 4 };
int dtrain_signals_install(char *err, size_t errlen);
/* The DTRAIN_SIGNAL_* bits received since install. */
int dtrain_signals_pending(void);
void dtrain_signals_restore(void);
/* "SIGTERM", "SIGUSR1", "SIGTERM and SIGUSR1" for a set of bits
 * ("SIGINT" for TERM with INT). */
const char *dtrain_signals_name(int bits);

#ifdef __cplusplus
}
#endif

#endif
