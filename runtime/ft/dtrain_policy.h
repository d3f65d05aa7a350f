/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, internal: the fault-tolerant loop's policies (trainer/
 * dtrain_loop.c carries out their verdicts).  Each decides from figures
 * that are the same on every rank (sums over the world, the straggler
 * verdict), so every rank reaches the same verdict.
 *
 *   stop signals     SIGTERM, SIGINT, SIGUSR1 on any rank: checkpoint and stop
 *   stragglers       a new straggler with --straggler-drain: checkpoint and stop
 *   non-finite loss  skip the step up to --nonfinite-skips in a row, then roll
 *                    back (at most DTRAIN_FT_MAX_ROLLBACKS), else diverged
 *   fp16 overflow    skip the step (the scaler backed off; not a fault) */
#ifndef DTRAIN_POLICY_H
#define DTRAIN_POLICY_H

#include <stdint.h>

enum dtrain_verdict {
    DTRAIN_VERDICT_GO_ON = 0,
    DTRAIN_VERDICT_SKIP,                /* no update: the batch is consumed, the step is not */
    DTRAIN_VERDICT_ROLL_BACK,           /* to the last checkpoint */
    DTRAIN_VERDICT_CHECKPOINT_AND_STOP, /* every rank checkpoints and the run stops (requeue) */
    DTRAIN_VERDICT_DIVERGED,            /* stop with an error */
};

#define DTRAIN_FT_MAX_ROLLBACKS 3

/* Stop signals.  The counts travel summed over the world with the step's
 * loss (dtrain_pstep_control.term, .usr1): this rank's pending signals
 * (dtrain_signals_pending) as its counts (0 or 1 each), and the sums, the
 * numbers of ranks that got SIGTERM (or SIGINT) and SIGUSR1, decide. */
void dtrain_policy_signal_counts(int pending, int32_t *term, int32_t *usr1);
enum dtrain_verdict dtrain_policy_signals(int64_t term, int64_t usr1);

/* A straggler verdict (dtrain_ptrainer_straggler: is_new, the same on
 * every rank) under --straggler-drain (drain). */
struct dtrain_straggler;
enum dtrain_verdict dtrain_policy_straggler(const struct dtrain_straggler *g, int drain);

/* A step whose loss or norm was not finite, the in_a_row-th in a row:
 * skip (up to skips) or roll back; then, before rolling back, whether
 * there is a checkpoint to roll back to and rollbacks left (else diverged). */
enum dtrain_verdict dtrain_policy_nonfinite(long in_a_row, long skips);
enum dtrain_verdict dtrain_policy_rollback(int have_checkpoint, int rollbacks);

/* fp16: the scaled gradients overflowed (the scaler halved the scale). */
enum dtrain_verdict dtrain_policy_overflow(void);

#endif
