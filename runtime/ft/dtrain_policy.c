/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The fault-tolerant loop's policies; see dtrain_policy.h. */
#include "dtrain_policy.h"
#include "dtrain_parallel.h"
#include "dtrain_fault.h"

#include <math.h>

/* The stop flags travel summed over the world with the step's loss: a
 * SIGTERM counts 1, a SIGUSR1 this much, so both counts survive the sum
 * (worlds are below 2^20). */
#define USR1_WEIGHT 2097152.0

double dtrain_policy_signal_flags(int pending)
{
    return (pending & DTRAIN_SIGNAL_TERM ? 1.0 : 0.0) + (pending & DTRAIN_SIGNAL_USR1 ? USR1_WEIGHT : 0.0);
}

enum dtrain_verdict dtrain_policy_signals(double flags, long *term, long *usr1)
{
    *usr1 = (long)floor(flags / USR1_WEIGHT);
    *term = (long)fmod(flags, USR1_WEIGHT);
    return *term == 0 && *usr1 == 0 ? DTRAIN_VERDICT_GO_ON : DTRAIN_VERDICT_CHECKPOINT_AND_STOP;
}

enum dtrain_verdict dtrain_policy_straggler(const struct dtrain_straggler *g, int drain)
{
    return g->is_new && drain ? DTRAIN_VERDICT_CHECKPOINT_AND_STOP : DTRAIN_VERDICT_GO_ON;
}

enum dtrain_verdict dtrain_policy_nonfinite(long in_a_row, long skips)
{
    return in_a_row <= skips ? DTRAIN_VERDICT_SKIP : DTRAIN_VERDICT_ROLL_BACK;
}

enum dtrain_verdict dtrain_policy_rollback(int have_checkpoint, int rollbacks)
{
    return have_checkpoint && rollbacks < DTRAIN_FT_MAX_ROLLBACKS ? DTRAIN_VERDICT_ROLL_BACK : DTRAIN_VERDICT_DIVERGED;
}

enum dtrain_verdict dtrain_policy_overflow(void)
{
    return DTRAIN_VERDICT_SKIP;
}
