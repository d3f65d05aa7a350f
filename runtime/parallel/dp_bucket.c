/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Data parallelism: the gradient buckets (packing, the reduction of one
 * bucket), the reducer thread that overlaps them with the backward, and
 * building the buckets and the norm spans; see dtrain_dp.h. */
#include "dp_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ one bucket */

/* Copies within the kernels' memory (a GPU's on the cuda kernels). */
void dp_pack(struct dtrain_kernels *k, const struct bucket *b, const float *vec, float *buf)
{
    size_t at = 0;
    for (int i = 0; i < b->nranges; i++) {
        dtrain_k_copy(k, buf + at, vec + b->ranges[i].offset, b->ranges[i].count * sizeof(float));
        at += b->ranges[i].count;
    }
}

void dp_unpack(struct dtrain_kernels *k, const struct bucket *b, const float *buf, float *vec)
{
    size_t at = 0;
    for (int i = 0; i < b->nranges; i++) {
        dtrain_k_copy(k, vec + b->ranges[i].offset, buf + at, b->ranges[i].count * sizeof(float));
        at += b->ranges[i].count;
    }
}

/* ZeRO: this rank's share of bucket b's summed gradient. */
float *dp_share_grad(const struct dtrain_dp *dp, const struct bucket *b)
{
    return dp->stage2 ? b->grad : b->grad + (size_t)dp->rank * b->share;
}

/* Stage 2: bucket b's padding in the shared scratch (the scratch held a
 * larger bucket before): zero, so that the padded tail is the same as in
 * stage 1's own buffers. */
void dp_zero_padding(struct dtrain_dp *dp, const struct bucket *b)
{
    size_t padded = b->share * (size_t)dp->size;
    if (padded > b->packed)
        dtrain_k_zero(dp->k, dp->scratch + b->packed, (padded - b->packed) * sizeof(float));
}

/* Sum bucket b over the DP group: in the gradients (all-reduce), or into
 * this rank's share of b->grad (ZeRO: reduce-scatter). */
int dp_reduce_bucket(struct dtrain_dp *dp, struct bucket *b, char *err, size_t errlen)
{
    /* stage 2 packs into the scratch and keeps only its share of the sum */
    float *packed = dp->stage2 && dp->comm != NULL ? dp->scratch : b->grad;
    dp_pack(dp->k, b, dp->grads, packed);
    if (packed == dp->scratch)
        dp_zero_padding(dp, b);
    if (dp->comm == NULL)
        return DTRAIN_OK; /* ZeRO on D = 1: the share is the bucket */
    int rc;
    if (dp->zero1)
        return dtrain_pcomm_reduce_scatter(&dp->pc, packed, dp_share_grad(dp, b), b->share,
                                           "data-parallel reduce-scatter", err, errlen);
    if ((rc = dtrain_pcomm_allreduce(&dp->pc, b->grad, b->packed, "data-parallel all-reduce", err, errlen)) !=
        DTRAIN_OK)
        return rc;
    dp_unpack(dp->k, b, b->grad, dp->grads);
    return DTRAIN_OK;
}


/* ------------------------------------------------------------ the reducer thread */
void *dp_reducer_main(void *arg)
{
    struct dtrain_dp *dp = arg;
    pthread_mutex_lock(&dp->lock);
    for (;;) {
        while (!dp->stop && dp->reduced == dp->queued)
            pthread_cond_wait(&dp->work, &dp->lock);
        if (dp->reduced == dp->queued)
            break; /* stop, nothing left */
        struct bucket *b = &dp->buckets[dp->reduced];
        int failed = dp->status != DTRAIN_OK;
        pthread_mutex_unlock(&dp->lock);
        char why[512] = "";
        /* after a failure the communicator is broken: skip the rest */
        int rc = failed ? DTRAIN_OK : dp_reduce_bucket(dp, b, why, sizeof why);
        pthread_mutex_lock(&dp->lock);
        if (rc != DTRAIN_OK && dp->status == DTRAIN_OK) {
            dp->status = rc;
            snprintf(dp->why, sizeof dp->why, "%s", why);
        }
        dp->reduced++;
        pthread_cond_broadcast(&dp->done);
    }
    pthread_mutex_unlock(&dp->lock);
    return NULL;
}

/* ------------------------------------------------------------ building */

static void span_add(struct span *s, int *n, size_t offset, size_t count)
{
    if (count == 0)
        return;
    if (*n > 0 && s[*n - 1].offset + s[*n - 1].count == offset) {
        s[*n - 1].count += count; /* adjacent: one longer span */
        return;
    }
    s[(*n)++] = (struct span){offset, count};
}

static int cmp_range(const void *a, const void *b)
{
    const struct dtrain_shard_range *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Without ZeRO: the in-norm parts of the local vector, sorted and merged
 * (one span for a whole model on one rank, as the single-process trainer
 * sums it). */
int dp_build_norm_spans(struct dtrain_dp *dp)
{
    size_t cap = (size_t)dp->nunits * DTRAIN_SHARD_UNIT_RANGES;
    struct dtrain_shard_range *all = malloc(cap * sizeof *all);
    dp->norm = malloc(cap * sizeof *dp->norm);
    if (all == NULL || dp->norm == NULL) {
        free(all);
        return -1;
    }
    size_t n = 0;
    for (int u = 0; u < dp->nunits; u++)
        n += (size_t)dtrain_shard_unit_ranges(dp->shard, u, all + n);
    qsort(all, n, sizeof *all, cmp_range);
    dp->nnorm = 0;
    for (size_t i = 0; i < n; i++)
        if (all[i].in_norm)
            span_add(dp->norm, &dp->nnorm, all[i].offset, all[i].count);
    free(all);
    return 0;
}

/* ZeRO: the in-norm parts of this rank's share [d*share, (d+1)*share) of
 * bucket space. */
static void build_share_norm(const struct dtrain_dp *dp, struct bucket *b)
{
    size_t lo = (size_t)dp->rank * b->share, hi = lo + b->share, at = 0;
    b->nnorm = 0;
    for (int i = 0; i < b->nranges; i++) {
        size_t s = at, e = at + b->ranges[i].count;
        at = e;
        if (!b->ranges[i].in_norm || e <= lo || s >= hi)
            continue;
        size_t from = s > lo ? s : lo, to = e < hi ? e : hi;
        span_add(b->norm, &b->nnorm, from - lo, to - from);
    }
}

/* Group the units into buckets: consecutive units up to about
 * bucket_floats each, wte always alone (so that its reduction is the same
 * on stage 0 and on the last stage, and its twin copies stay identical). */
int dp_build_buckets(struct dtrain_dp *dp, size_t bucket_floats)
{
    const struct dtrain_shard *sh = dp->shard;
    size_t cap = (size_t)dp->nunits * DTRAIN_SHARD_UNIT_RANGES;
    dp->buckets = calloc((size_t)dp->nunits, sizeof *dp->buckets);
    dp->unit_bucket = calloc((size_t)dp->nunits, sizeof *dp->unit_bucket);
    dp->unit_ready = calloc((size_t)dp->nunits, 1);
    dp->ranges = malloc(cap * sizeof *dp->ranges);
    dp->spans = malloc(cap * sizeof *dp->spans);
    if (dp->buckets == NULL || dp->unit_bucket == NULL || dp->unit_ready == NULL ||
        dp->ranges == NULL || dp->spans == NULL)
        return -1;
    struct bucket *cur = NULL;
    size_t used = 0;
    for (int u = 0; u < dp->nunits; u++) {
        int layer;
        int alone = dtrain_shard_unit_kind(sh, u, &layer) == DTRAIN_UNIT_WTE;
        if (cur == NULL || alone || cur->packed >= bucket_floats) {
            cur = &dp->buckets[dp->nbuckets++];
            cur->first_unit = u;
            cur->ranges = dp->ranges + used;
        }
        int nr = dtrain_shard_unit_ranges(sh, u, dp->ranges + used);
        for (int i = 0; i < nr; i++)
            cur->packed += dp->ranges[used + i].count;
        used += (size_t)nr;
        cur->nranges += nr;
        cur->units++;
        dp->unit_bucket[u] = (int)(cur - dp->buckets);
        if (alone)
            cur = NULL;
    }
    size_t state = 0, spans = 0;
    for (int i = 0; i < dp->nbuckets; i++) {
        struct bucket *b = &dp->buckets[i];
        b->share = dp->zero1 ? (b->packed + (size_t)dp->size - 1) / (size_t)dp->size : b->packed;
        size_t padded = dp->zero1 ? b->share * (size_t)dp->size : b->packed;
        if (padded > dp->scratch_floats)
            dp->scratch_floats = padded;
        if (dp->local)
            continue; /* D = 1 without ZeRO: nothing is packed */
        b->grad = dtrain_k_alloc(dp->k, (dp->stage2 ? b->share : padded) * sizeof(float));
        if (b->grad == NULL)
            return -1;
        if (dp->zero1) {
            if (!dp->stage2 && (b->param = dtrain_k_alloc(dp->k, padded * sizeof(float))) == NULL)
                return -1;
            b->state_offset = state;
            state += b->share;
            b->norm = dp->spans + spans;
            build_share_norm(dp, b);
            spans += (size_t)b->nnorm;
        }
    }
    if (dp->stage2 && !dp->stage3 && (dp->scratch = dtrain_k_alloc(dp->k, dp->scratch_floats * sizeof(float))) == NULL)
        return -1;
    return 0;
}
