/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Data parallelism: ZeRO's shares of the optimizer state, and stage 3's
 * sharded parameters (the slots a unit is gathered into, acquire and
 * release); see dtrain_dp.h. */
#include "dp_internal.h"

#include <stdio.h>
#include <string.h>

/* ZeRO: every run of the local vector inside this rank's shares, with its
 * place in the moments (and, stage 3, in the parameter shares). */
typedef int (*share_fn)(struct dtrain_dp *dp, void *ctx, size_t offset, size_t count, size_t state);

static int for_each_share(struct dtrain_dp *dp, share_fn fn, void *ctx)
{
    for (int i = 0; i < dp->nbuckets; i++) {
        const struct bucket *b = &dp->buckets[i];
        size_t lo = (size_t)dp->rank * b->share, hi = lo + b->share, at = 0;
        for (int j = 0; j < b->nranges; j++) {
            size_t s = at, e = at + b->ranges[j].count;
            at = e;
            if (e <= lo || s >= hi)
                continue;
            size_t from = s > lo ? s : lo, to = e < hi ? e : hi;
            int rc = fn(dp, ctx, b->ranges[j].offset + (from - s), to - from, b->state_offset + (from - lo));
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

struct state_walk {
    dtrain_dp_state_fn fn;
    void *ctx;
};

static int state_run(struct dtrain_dp *dp, void *ctx, size_t offset, size_t count, size_t state)
{
    struct state_walk *w = ctx;
    (void)dp;
    return w->fn(w->ctx, offset, count, state);
}

int dtrain_dp_for_each_state(struct dtrain_dp *dp, dtrain_dp_state_fn fn, void *ctx)
{
    if (!dp->zero1)
        return fn(ctx, 0, dp->shard->count, 0);
    struct state_walk w = {fn, ctx};
    return for_each_share(dp, state_run, &w);
}

struct dtrain_adamw *dtrain_dp_adamw(struct dtrain_dp *dp) { return dp->adamw; }

/* ------------------------------------------------------------ ZeRO-3: sharded parameters */

int dtrain_dp_sharded_params(const struct dtrain_dp *dp) { return dp->stage3; }

static int share_upload(struct dtrain_dp *dp, void *ctx, size_t offset, size_t count, size_t state)
{
    if (dp->host_params)
        memcpy(dp->master + state, (const float *)ctx + offset, count * sizeof(float));
    else
        dtrain_k_upload(dp->k, dp->master + state, (const float *)ctx + offset, count * sizeof(float));
    return 0;
}

static int share_download(struct dtrain_dp *dp, void *ctx, size_t offset, size_t count, size_t state)
{
    if (dp->host_params)
        memcpy((float *)ctx + offset, dp->master + state, count * sizeof(float));
    else
        dtrain_k_download(dp->k, (float *)ctx + offset, dp->master + state, count * sizeof(float));
    return 0;
}

void dtrain_dp_params_upload(struct dtrain_dp *dp, const float *local)
{
    for_each_share(dp, share_upload, (void *)local);
    dtrain_k_sync(dp->k);
}

void dtrain_dp_params_download(struct dtrain_dp *dp, float *local)
{
    for_each_share(dp, share_download, local);
}

/* Unit b's full weights into out (an all-gather of the shares). */
int dp_z3_gather(struct dtrain_dp *dp, const struct bucket *b, float *out, char *err, size_t errlen)
{
    const float *src = dp->master + b->state_offset;
    if (dp->host_params) { /* --offload-params cpu: the share goes up first */
        dtrain_k_upload(dp->k, dp->gather_src, src, b->share * sizeof(float));
        src = dp->gather_src;
    }
    return dtrain_pcomm_all_gather(&dp->pc, src, out, b->share,
                                   "ZeRO-3 all-gather of a unit's parameters", err, errlen);
}


/* Stage 3: the slot of a unit (wte alone in slot 0: the embedding and the
 * head each use it together with another unit). */
int dp_z3_slot_of(const struct dtrain_dp *dp, int u)
{
    int layer;
    return dtrain_shard_unit_kind(dp->shard, u, &layer) == DTRAIN_UNIT_WTE ? 0 : 1;
}

/* Stage 3: where a unit's tensors lie once gathered (packed in the order
 * of its ranges: dtrain_shard_unit_ranges), as a shard layout with one
 * layer whose other tensors are empty. */
static void z3_view(const struct dtrain_dp *dp, int u, struct dtrain_shard *v)
{
    struct dtrain_shard_range r[DTRAIN_SHARD_UNIT_RANGES];
    int layer, n = dtrain_shard_unit_ranges(dp->shard, u, r);
    enum dtrain_shard_unit_kind kind = dtrain_shard_unit_kind(dp->shard, u, &layer);
    static const int first[] = {[DTRAIN_UNIT_HEAD] = DTRAIN_MODEL_LNFW, [DTRAIN_UNIT_LAYER] = DTRAIN_MODEL_LN1W,
                                [DTRAIN_UNIT_WPE] = DTRAIN_MODEL_WPE, [DTRAIN_UNIT_WTE] = DTRAIN_MODEL_WTE};
    *v = *dp->shard;
    memset(v->size, 0, sizeof v->size);
    memset(v->offset, 0, sizeof v->offset);
    v->layers = v->virtual_stages = 1;
    v->layer_end = v->layer_begin + 1;
    v->count = 0;
    for (int i = 0; i < n; i++) { /* the unit's ranges are its tensors, in tensor order */
        v->offset[first[kind] + i] = v->count;
        v->size[first[kind] + i] = r[i].count;
        v->count += r[i].count;
    }
}

/* Stage 3: the parameter shares and the two slots' buffers. */
int dp_z3_build(struct dtrain_dp *dp)
{
    size_t state = 0;
    for (int i = 0; i < dp->nbuckets; i++) {
        struct bucket *b = &dp->buckets[i];
        struct z3_slot *z = &dp->z3[dp_z3_slot_of(dp, b->first_unit)];
        size_t padded = b->share * (size_t)dp->size;
        if (padded > z->floats)
            z->floats = padded;
        int layer;
        z3_view(dp, b->first_unit, &dp->views[dtrain_shard_unit_kind(dp->shard, b->first_unit, &layer)]);
        state += b->share;
    }
    if (dp->host_params) { /* --offload-params cpu */
        for (int i = 0; i < dp->nbuckets; i++)
            if (dp->buckets[i].share > dp->gather_floats)
                dp->gather_floats = dp->buckets[i].share;
        if ((dp->master = dtrain_k_host_alloc(dp->k, (state + 1) * sizeof(float))) == NULL ||
            (dp->gather_src = dtrain_k_alloc(dp->k, dp->gather_floats * sizeof(float))) == NULL)
            return -1;
        memset(dp->master, 0, (state + 1) * sizeof(float));
    } else {
        if ((dp->master = dtrain_k_alloc(dp->k, (state + 1) * sizeof(float))) == NULL)
            return -1;
        dtrain_k_zero(dp->k, dp->master, (state + 1) * sizeof(float)); /* the padding stays 0 */
    }
    for (int i = 0; i < 2; i++) {
        struct z3_slot *z = &dp->z3[i];
        if (z->floats == 0)
            continue;
        z->param = dtrain_k_alloc(dp->k, z->floats * sizeof(float));
        z->grad = dtrain_k_alloc(dp->k, z->floats * sizeof(float));
        if (z->param == NULL || z->grad == NULL)
            return -1;
    }
    if (dp->prefetch && dp->z3[1].floats > 0 && (dp->spare = dtrain_k_alloc(dp->k, dp->z3[1].floats * sizeof(float))) == NULL)
        return -1;
    return 0;
}

int dtrain_dp_params_gather(struct dtrain_dp *dp, float *local, char *err, size_t errlen)
{
    int rc = dp_pf_drain(dp, err, errlen); /* a failed step's gather ahead (none after dtrain_dp_finish) */
    if (rc != DTRAIN_OK)
        return rc;
    for (int i = 0; i < dp->nbuckets; i++) {
        const struct bucket *b = &dp->buckets[i];
        struct z3_slot *z = &dp->z3[dp_z3_slot_of(dp, b->first_unit)];
        rc = dp_z3_gather(dp, b, z->param, err, errlen);
        if (rc != DTRAIN_OK)
            return rc;
        size_t at = 0;
        for (int j = 0; j < b->nranges; j++) {
            dtrain_k_download(dp->k, local + b->ranges[j].offset, z->param + at, b->ranges[j].count * sizeof(float));
            at += b->ranges[j].count;
        }
    }
    return DTRAIN_OK;
}

int dtrain_dp_acquire(struct dtrain_dp *dp, int unit, int grads, struct dtrain_stage_unit *out, char *err,
                      size_t errlen)
{
    if (!dp->stage3 || unit < 0 || unit >= dp->nunits) {
        snprintf(err, errlen, "ZeRO-3: unit %d asked for outside stage 3's %d units", unit, dp->nunits);
        return DTRAIN_ERR_SYSTEM;
    }
    int layer, wte = dp_z3_slot_of(dp, unit) == 0;
    struct z3_slot *z = &dp->z3[wte ? 0 : 1];
    const struct bucket *b = &dp->buckets[dp->unit_bucket[unit]];
    if (z->unit >= 0) {
        snprintf(err, errlen, "ZeRO-3: unit %d asked for while unit %d holds its buffer", unit, z->unit);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = DTRAIN_OK;
    if (dp->in_step && dp->prefetch && (rc = dp_pf_record(dp, unit, err, errlen)) != DTRAIN_OK)
        return rc;
    if (dp->pf_unit == unit) { /* gathered ahead: wait for it if it is still on its way */
        if ((rc = dp_pf_drain(dp, err, errlen)) != DTRAIN_OK)
            return rc;
        if (dp->pf_dest != z->param) { /* the third buffer: it becomes the slot's */
            dp->spare = z->param;
            z->param = dp->pf_dest;
        }
    } else {
        /* not predicted (the first step, validation, another order): the
         * gather ahead, if any, is dropped, then this one, now */
        if ((rc = dp_pf_drain(dp, err, errlen)) != DTRAIN_OK)
            return rc;
        double t0 = dtrain_clock_s();
        rc = dp_z3_gather(dp, b, z->param, err, errlen);
        dp->z3_seconds += dtrain_clock_s() - t0;
        dp->z3_gather += dtrain_clock_s() - t0;
        if (rc != DTRAIN_OK)
            return rc;
    }
    /* wte's gradient accumulates over the step (zeroed in begin_step) */
    if (grads && !wte)
        dtrain_k_zero(dp->k, z->grad, z->floats * sizeof(float));
    z->unit = unit;
    z->grads = grads;
    out->layout = &dp->views[dtrain_shard_unit_kind(dp->shard, unit, &layer)];
    out->params = z->param;
    out->grads = grads ? z->grad : NULL;
    out->layer = 0;
    dp_pf_try(dp); /* the next unit's gather while the stage computes with this one */
    return DTRAIN_OK;
}

int dtrain_dp_release(struct dtrain_dp *dp, int unit, char *err, size_t errlen)
{
    struct z3_slot *z = &dp->z3[dp_z3_slot_of(dp, unit)];
    if (z->unit != unit) {
        snprintf(err, errlen, "ZeRO-3: unit %d given back but not held", unit);
        return DTRAIN_ERR_SYSTEM;
    }
    z->unit = -1;
    if (!z->grads || z == &dp->z3[0]) {
        dp_pf_try(dp); /* wte's buffer may be the one the next gather waited for */
        return DTRAIN_OK; /* wte: reduced once, in dtrain_dp_finish */
    }
    /* this micro-batch's gradient of the unit: summed over the DP group into
     * this rank's share (in place), added to the share's sum so far; the
     * gather ahead first (one call at a time on the communicator) */
    struct bucket *b = &dp->buckets[dp->unit_bucket[unit]];
    float *mine = z->grad + (size_t)dp->rank * b->share;
    int rc = dp_pf_wait(dp, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    double t0 = dtrain_clock_s();
    rc = dtrain_pcomm_reduce_scatter(&dp->pc, z->grad, mine, b->share, "ZeRO-3 reduce-scatter of a unit's "
                                     "gradient", err, errlen);
    dp->z3_seconds += dtrain_clock_s() - t0;
    if (rc == DTRAIN_OK)
        dtrain_k_residual_forward(dp->k, b->grad, b->grad, mine, b->share);
    dp_pf_try(dp);
    return rc;
}

float *dtrain_dp_wte_grads(struct dtrain_dp *dp, float *grads)
{
    if (!dp->stage3)
        return dtrain_shard_tensor(dp->shard, grads, DTRAIN_MODEL_WTE);
    return dtrain_shard_unit_of(dp->shard, DTRAIN_UNIT_WTE, 0) >= 0 ? dp->z3[0].grad : NULL;
}
