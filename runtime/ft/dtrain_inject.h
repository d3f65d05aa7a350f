/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: fault injection, for testing the fault-tolerance path.
 *
 * A spec (the DTRAIN_INJECT environment variable, the fault.inject config
 * key or --inject) is a comma-separated list of faults, each
 * KIND:key=value:key=value...
 *
 *   kill:rank=R:step=S       rank R sends itself SIGKILL as step S starts (a crash)
 *   hang:rank=R:step=S       rank R stops in the first forward of step S and never goes on
 *                            (a hung device: the main thread sleeps, deaf to everything but
 *                            SIGKILL; the watchdog thread and its heartbeat live on)
 *   nan:rank=R:step=S[:count=N]  rank R's share of the loss is NaN in the first N attempts
 *                            from step S on (a skipped step is tried again with the next
 *                            batch; after a rollback to before S it is not injected again)
 *   corrupt:rank=R           before resuming, rank R damages its shard of the newest
 *                            complete checkpoint (one byte of the payload flipped)
 *   nospace:rank=R:step=S    rank R's shard of the checkpoint at step S fails to
 *                            write as on a full disk (ENOSPC)
 *   slowckpt:rank=R:step=S:ms=M  rank R's write of the checkpoint at step S waits M ms
 *                            before it starts (a slow disk: with --ckpt-async a fault
 *                            while a write is in flight; the others wait for it)
 *   slowload:rank=R:ms=M     rank R's reads of each checkpoint it resumes or rolls back
 *                            from wait M ms before they start (a slow disk; the others
 *                            wait for it)
 *   delay:rank=R:step=S:ms=M[:count=N]  rank R's first forward of each of the steps
 *                            S..S+N-1 takes M ms longer (a slow device: its compute time,
 *                            so it is a straggler; tests also use it to leave time for an
 *                            outside fault: keep M below the communicator timeout)
 *
 * Every fault also takes restart=N (default 0) or restart=any: it fires
 * only in the run whose SLURM_RESTART_COUNT is N (unset counts as 0), so
 * that the requeued job runs clean; "any" fires in every run.  A step is
 * the 0-based index of the training step (the metrics' "step").
 * No allocation, no global state. */
#ifndef DTRAIN_INJECT_H
#define DTRAIN_INJECT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_INJECT_ENV "DTRAIN_INJECT"
#define DTRAIN_INJECT_MAX 16 /* faults in one spec */

enum dtrain_inject_kind {
    DTRAIN_INJECT_KILL = 0,
    DTRAIN_INJECT_HANG,
    DTRAIN_INJECT_NAN,
    DTRAIN_INJECT_CORRUPT,
    DTRAIN_INJECT_NOSPACE,
    DTRAIN_INJECT_DELAY,
    DTRAIN_INJECT_SLOWCKPT,
    DTRAIN_INJECT_SLOWLOAD,
};

struct dtrain_inject_fault {
    enum dtrain_inject_kind kind;
    int rank;
    long step;    /* -1 for corrupt */
    long count;   /* nan: attempts, delay: steps; else 1 */
    long ms;      /* delay, slowckpt, slowload: milliseconds */
    long restart; /* -1: any run */
};

struct dtrain_inject {
    int n;
    struct dtrain_inject_fault faults[DTRAIN_INJECT_MAX];
};

/* Parse a spec ("" or NULL: no faults).  Returns 0, or -1 with one line in
 * err naming the bad part and the accepted syntax. */
int dtrain_inject_parse(const char *spec, struct dtrain_inject *out, char *err, size_t errlen);

/* 1 when a fault of this kind is due on this rank at this step in the run
 * of this restart count (step is ignored for corrupt). */
int dtrain_inject_due(const struct dtrain_inject *in, enum dtrain_inject_kind kind, int rank, long step,
                      long restart);

/* The fault of this kind on this rank that starts exactly at `step` in
 * this run (nan: the caller counts its attempts), or NULL. */
const struct dtrain_inject_fault *dtrain_inject_find(const struct dtrain_inject *in, enum dtrain_inject_kind kind,
                                                     int rank, long step, long restart);

/* delay: the milliseconds rank's step is slowed by, 0 when none (kind
 * DTRAIN_INJECT_DELAY; dtrain_inject_ms: of any kind with ms=). */
long dtrain_inject_delay_ms(const struct dtrain_inject *in, int rank, long step, long restart);
long dtrain_inject_ms(const struct dtrain_inject *in, enum dtrain_inject_kind kind, int rank, long step,
                      long restart);

/* "kill", "hang", ... */
const char *dtrain_inject_kind_name(enum dtrain_inject_kind kind);

/* ------------------------------------------------------------ hooks into a run
 * (the loop arms them at each step, the trainer's step calls them; the
 * messages "PROG: inject: ..." to stderr and the fault events are said
 * here) */

struct dtrain_fault; /* dtrain_fault.h */

/* The step's hooks (dtrain_ptrainer_step_ctl calls them; NULL: none). */
struct dtrain_inject_hooks {
    void (*first_forward)(void *ctx); /* as the step's first forward begins: a slow or hung device */
    int (*poison_loss)(void *ctx);    /* 1: this rank's share of the step's loss is NaN */
    void *ctx;
};

/* One rank's injection over a run (caller-owned, no allocation). */
struct dtrain_inject_run {
    struct dtrain_inject spec;
    int rank;
    long restart;                /* SLURM_RESTART_COUNT of this run */
    const char *prog;
    struct dtrain_fault *fault;  /* the events */
    long nan_left;               /* injected NaN attempts still to come */
    long nan_armed;              /* the last step a nan fault was armed at, -1 */
    long delay_ms;               /* this step's: its first forward takes this much longer */
    int hang;                    /* this step's: its first forward never ends */
    int poison;                  /* this step's: the rank's share of the loss is NaN */
};
void dtrain_inject_run_init(struct dtrain_inject_run *r, const struct dtrain_inject *spec, int rank, long restart,
                            const char *prog, struct dtrain_fault *fault);
/* As step begins: kill now (SIGKILL); arm the step's nan, delay and hang. */
void dtrain_inject_step_begin(struct dtrain_inject_run *r, long step);
/* The hooks that carry r's step faults into the step (valid while r lives). */
struct dtrain_inject_hooks dtrain_inject_hooks_of(struct dtrain_inject_run *r);
/* The checkpoint of step: 1: this rank's shard fails to write (nospace);
 * the ms its write waits before it starts (slowckpt). */
int dtrain_inject_ckpt_nospace(const struct dtrain_inject_run *r, long step);
long dtrain_inject_ckpt_slow_ms(const struct dtrain_inject_run *r, long step);
/* The ms this rank's reads of a checkpoint to load (at step at) wait (slowload). */
long dtrain_inject_load_slow_ms(const struct dtrain_inject_run *r, long at);
/* Before resuming from dir: damage this rank's shard of the newest checkpoint (corrupt). */
void dtrain_inject_corruption(const struct dtrain_inject_run *r, const char *dir);

/* corrupt: flip one byte in the middle of the file.  0, or -1 with one
 * line in err. */
int dtrain_inject_corrupt_file(const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
