/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Data parallelism: ZeRO-3 prefetch, the gather of the next unit ahead
 * of its acquire, in the order the last step asked for them; see
 * dtrain_dp.h. */
#include "dp_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ ZeRO-3 prefetch */

/* The prefetcher thread: the gather handed over, one at a time. */
void *dp_prefetcher_main(void *arg)
{
    struct dtrain_dp *dp = arg;
    pthread_mutex_lock(&dp->lock);
    for (;;) {
        while (!dp->stop && !dp->pf_busy)
            pthread_cond_wait(&dp->work, &dp->lock);
        if (!dp->pf_busy)
            break; /* stop, nothing in flight */
        const struct bucket *b = dp->pf_bucket;
        float *out = dp->pf_out;
        pthread_mutex_unlock(&dp->lock);
        char why[512] = "";
        int rc = dp_z3_gather(dp, b, out, why, sizeof why);
        pthread_mutex_lock(&dp->lock);
        dp->pf_status = rc;
        snprintf(dp->pf_why, sizeof dp->pf_why, "%s", why);
        dp->pf_busy = 0;
        pthread_cond_broadcast(&dp->done);
    }
    pthread_mutex_unlock(&dp->lock);
    return NULL;
}

/* Wait for the gather ahead (if any) to finish: the DP communicator is
 * free for the main thread.  Its result (a failure's line in err); the
 * unit stays in pf_unit for the caller to take or drop. */
int dp_pf_wait(struct dtrain_dp *dp, char *err, size_t errlen)
{
    if (dp->pf_unit < 0)
        return DTRAIN_OK;
    double t0 = dtrain_clock_s();
    pthread_mutex_lock(&dp->lock);
    while (dp->pf_busy)
        pthread_cond_wait(&dp->done, &dp->lock);
    int rc = dp->pf_status;
    if (rc != DTRAIN_OK)
        snprintf(err, errlen, "%s", dp->pf_why);
    pthread_mutex_unlock(&dp->lock);
    double waited = dtrain_clock_s() - t0;
    dp->z3_seconds += waited;
    dp->z3_gather += waited;
    return rc;
}

/* Wait for the gather ahead and drop it. */
int dp_pf_drain(struct dtrain_dp *dp, char *err, size_t errlen)
{
    int rc = dp_pf_wait(dp, err, errlen);
    dp->pf_unit = -1;
    return rc;
}

/* Where a gather ahead of unit u goes: a non-wte unit into the third
 * buffer (the slot's own holds the unit in use, or nothing), wte into its
 * own buffer once that is free; NULL: not now. */
static float *pf_buffer(const struct dtrain_dp *dp, int u)
{
    if (dp_z3_slot_of(dp, u) == 1)
        return dp->spare;
    return dp->z3[0].unit < 0 ? dp->z3[0].param : NULL;
}

/* Hand the predicted next unit's gather to the thread when its buffer is
 * free and none is ahead. */
void dp_pf_try(struct dtrain_dp *dp)
{
    if (!dp->in_step || dp->pf_unit >= 0 || dp->pf_next < 0)
        return;
    float *out = pf_buffer(dp, dp->pf_next);
    if (out == NULL)
        return;
    pthread_mutex_lock(&dp->lock);
    dp->pf_bucket = &dp->buckets[dp->unit_bucket[dp->pf_next]];
    dp->pf_out = out;
    dp->pf_busy = 1;
    dp->pf_status = DTRAIN_OK;
    pthread_cond_signal(&dp->work);
    pthread_mutex_unlock(&dp->lock);
    dp->pf_unit = dp->pf_next;
    dp->pf_dest = out;
    dp->pf_next = -1;
    dp->pf_count++;
}

/* The acquire of unit u in this step's order: recorded, and checked
 * against the last step's; then the prediction of the next one. */
int dp_pf_record(struct dtrain_dp *dp, int u, char *err, size_t errlen)
{
    if (dp->seq_len[1] == dp->seq_cap[1]) {
        int cap = dp->seq_cap[1] > 0 ? 2 * dp->seq_cap[1] : 4 * dp->nunits + 8;
        int *grown = realloc(dp->seq[1], (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            snprintf(err, errlen, "ZeRO-3 prefetch: out of memory for the order of %d units", cap);
            return DTRAIN_ERR_SYSTEM;
        }
        dp->seq[1] = grown;
        dp->seq_cap[1] = cap;
    }
    dp->seq[1][dp->seq_len[1]++] = u;
    if (dp->seq_ok && (dp->pos >= dp->seq_len[0] || dp->seq[0][dp->pos] != u))
        dp->seq_ok = 0; /* not the last step's order: no more prediction this step */
    dp->pos++;
    dp->pf_next = dp->seq_ok && dp->pos < dp->seq_len[0] ? dp->seq[0][dp->pos] : -1;
    return DTRAIN_OK;
}

