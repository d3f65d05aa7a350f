/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The fault-tolerant loop's policies; see dtrain_policy.h. */
#include "dtrain_policy.h"
#include "dtrain_parallel.h"
#include "dtrain_fault.h"

#include <stdint.h>

void dtrain_policy_signal_counts(int pending, int32_t *term, int32_t *usr1)
{
    *term = pending & DTRAIN_SIGNAL_TERM ? 1 : 0;
    *usr1 = pending & DTRAIN_SIGNAL_USR1 ? 1 : 0;
}

enum dtrain_verdict dtrain_policy_signals(int64_t term, int64_t usr1)
{
    return term == 0 && usr1 == 0 ? DTRAIN_VERDICT_GO_ON : DTRAIN_VERDICT_CHECKPOINT_AND_STOP;
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
