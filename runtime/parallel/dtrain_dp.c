/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Data parallelism: creation, a step (the buckets handed over, the
 * finish, the norm share) and the update; see dtrain_dp.h.  The buckets
 * are in dp_bucket.c, ZeRO's shares and stage 3 in dp_zero.c, stage 3's
 * prefetch in dp_prefetch.c. */
#include "dp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dtrain_dp_create(struct dtrain_kernels *k, dtrain_comm *comm, const struct dtrain_shard *shard,
                     float *params, float *grads, const struct dtrain_dp_options *opt,
                     struct dtrain_dp **out, char *err, size_t errlen)
{
    int rc = DTRAIN_ERR_SYSTEM;
    *out = NULL;
    struct dtrain_dp *dp = calloc(1, sizeof *dp);
    if (dp == NULL)
        goto oom;
    dp->k = k;
    dp->size = comm != NULL ? dtrain_comm_size(comm) : 1;
    dp->comm = dp->size > 1 ? comm : NULL;
    dp->rank = dp->comm != NULL ? dtrain_comm_rank(comm) : 0;
    dp->zero1 = opt->zero_stage >= 1;
    dp->stage2 = opt->zero_stage >= 2;
    dp->stage3 = opt->zero_stage >= 3;
    dp->host_params = dp->stage3 && opt->offload_params;
    struct dtrain_offload where = opt->offload;
    where.params_on_host = dp->host_params;
    dp->local = dp->comm == NULL && !dp->zero1;
    dp->z3[0].unit = dp->z3[1].unit = -1;
    dp->pf_unit = dp->pf_next = -1;
    /* the prefetcher, like the reducer below, on host memory only */
    dp->prefetch = opt->prefetch && dp->stage3 && dp->comm != NULL && dtrain_kernels_host_memory(k);
    /* The reducer thread packs and reduces while the main thread runs the
     * backward: only on host memory, where the copies are plain memcpy.  A
     * GPU's kernels take calls from one thread; there the buckets are
     * reduced after the backward, in the main thread. */
    dp->overlap = opt->overlap && !dp->local && dp->comm != NULL && dtrain_kernels_host_memory(k) && !dp->stage3;
    dp->shard = shard;
    dp->params = params;
    dp->grads = grads;
    dp->nunits = dtrain_shard_units(shard);
    dp->status = DTRAIN_OK;
    if (pthread_mutex_init(&dp->lock, NULL) != 0)
        goto oom;
    if (pthread_cond_init(&dp->work, NULL) != 0) {
        pthread_mutex_destroy(&dp->lock);
        goto oom;
    }
    if (pthread_cond_init(&dp->done, NULL) != 0) {
        pthread_cond_destroy(&dp->work);
        pthread_mutex_destroy(&dp->lock);
        goto oom;
    }
    dp->sync_ready = 1;
    if ((rc = dtrain_pcomm_init(&dp->pc, k, dp->comm, err, errlen)) != DTRAIN_OK)
        goto fail;
    /* stage 3: one unit per bucket, the unit a layer's weights are gathered by */
    if (dp_build_buckets(dp, dp->stage3 ? 1 : opt->bucket_floats > 0 ? opt->bucket_floats : 1) != 0 ||
        dp_build_norm_spans(dp) != 0 || (dp->stage3 && dp_z3_build(dp) != 0))
        goto oom;
    size_t state = shard->count;
    if (dp->zero1) {
        state = 0;
        for (int i = 0; i < dp->nbuckets; i++)
            state += dp->buckets[i].share;
    }
    if (dp->host_params && (opt->offload.kind != DTRAIN_OFFLOAD_CPU || dtrain_kernels_host_memory(k))) {
        snprintf(err, errlen, "--offload-params cpu needs --zero-stage 3, --offload-optimizer cpu and a device "
                 "backend");
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    if ((rc = dtrain_adamw_create_offload(k, state, &where, &dp->adamw, err, errlen)) != DTRAIN_OK)
        goto fail;
    if (dp->overlap || dp->prefetch) {
        int e = pthread_create(&dp->thread, NULL, dp->prefetch ? dp_prefetcher_main : dp_reducer_main, dp);
        if (e != 0) {
            snprintf(err, errlen, "cannot start the %s thread: %s", dp->prefetch ? "ZeRO-3 prefetcher" :
                     "gradient reducer", strerror(e));
            rc = DTRAIN_ERR_SYSTEM;
            goto fail;
        }
        dp->thread_started = 1;
    }
    *out = dp;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for the data-parallel buckets of %zu parameters", shard->count);
    rc = DTRAIN_ERR_SYSTEM;
fail:
    dtrain_dp_destroy(dp);
    return rc;
}

void dtrain_dp_destroy(struct dtrain_dp *dp)
{
    if (dp == NULL)
        return;
    if (dp->thread_started) {
        pthread_mutex_lock(&dp->lock);
        dp->stop = 1;
        int busy = dp->reduced < dp->queued || dp->pf_busy;
        pthread_cond_broadcast(&dp->work);
        pthread_mutex_unlock(&dp->lock);
        if (busy) /* a reduction may wait on peers that will never come */
            dtrain_comm_abort(dp->comm);
        pthread_join(dp->thread, NULL);
    }
    if (dp->sync_ready) {
        pthread_cond_destroy(&dp->done);
        pthread_cond_destroy(&dp->work);
        pthread_mutex_destroy(&dp->lock);
    }
    for (int i = 0; dp->buckets != NULL && i < dp->nbuckets; i++) {
        dtrain_k_free(dp->k, dp->buckets[i].grad);
        dtrain_k_free(dp->k, dp->buckets[i].param);
    }
    if (dp->k != NULL) {
        dtrain_k_free(dp->k, dp->scratch);
        if (dp->host_params)
            dtrain_k_host_free(dp->k, dp->master);
        else
            dtrain_k_free(dp->k, dp->master);
        dtrain_k_free(dp->k, dp->gather_src);
        dtrain_k_free(dp->k, dp->spare);
        for (int i = 0; i < 2; i++) {
            dtrain_k_free(dp->k, dp->z3[i].param);
            dtrain_k_free(dp->k, dp->z3[i].grad);
        }
    }
    dtrain_adamw_destroy(dp->adamw);
    dtrain_pcomm_release(&dp->pc);
    free(dp->buckets);
    free(dp->ranges);
    free(dp->spans);
    free(dp->unit_bucket);
    free(dp->unit_ready);
    free(dp->norm);
    free(dp->seq[0]);
    free(dp->seq[1]);
    free(dp);
}

int dtrain_dp_buckets(const struct dtrain_dp *dp) { return dp->nbuckets; }

dtrain_comm *dtrain_dp_comm(const struct dtrain_dp *dp) { return dp->comm; }

size_t dtrain_dp_optimizer_floats(const struct dtrain_dp *dp)
{
    return 2 * dtrain_adamw_size(dp->adamw);
}

enum dtrain_offload_kind dtrain_dp_offload(const struct dtrain_dp *dp) { return dtrain_adamw_offload(dp->adamw); }

double dtrain_dp_exposed_seconds(const struct dtrain_dp *dp) { return dp->exposed; }
double dtrain_dp_gather_seconds(const struct dtrain_dp *dp) { return dp->stage3 ? dp->z3_gather_step : 0.0; }
int dtrain_dp_prefetching(const struct dtrain_dp *dp) { return dp->prefetch; }
int dtrain_dp_prefetched(const struct dtrain_dp *dp) { return dp->pf_count_step; }

void dtrain_dp_memory(const struct dtrain_dp *dp, struct dtrain_dp_memory *m)
{
    size_t grad = 0, comm = dp->scratch_floats * (dp->scratch != NULL);
    for (int i = 0; i < dp->nbuckets && !dp->local; i++) {
        const struct bucket *b = &dp->buckets[i];
        size_t padded = dp->zero1 ? b->share * (size_t)dp->size : b->packed;
        grad += dp->stage2 ? b->share : padded;
        comm += b->param != NULL ? padded : 0;
    }
    m->grad_bytes = grad * sizeof(float);
    struct dtrain_adamw_bytes ab;
    dtrain_adamw_bytes(dp->adamw, &ab);
    m->optimizer_bytes = ab.device;
    m->pinned_host_bytes = ab.pinned_host;
    m->nvme_bytes = ab.nvme;
    m->comm_bytes = comm * sizeof(float);
    m->param_bytes = m->unit_grad_bytes = 0;
    if (dp->stage3) {
        size_t shares = dtrain_adamw_size(dp->adamw), staging = dp->gather_src != NULL ? dp->gather_floats : 0;
        m->param_bytes = ((dp->host_params ? staging : shares) + dp->z3[0].floats + dp->z3[1].floats +
                          (dp->spare != NULL ? dp->z3[1].floats : 0)) * sizeof(float);
        if (dp->host_params) /* the shares (and their padding float) in pinned host memory */
            m->pinned_host_bytes += (shares + 1) * sizeof(float);
        m->unit_grad_bytes = (dp->z3[0].floats + dp->z3[1].floats) * sizeof(float);
        m->comm_bytes = 0; /* the gathers go into the slots, counted with the parameters */
    }
}

/* ------------------------------------------------------------ a step */

void dtrain_dp_begin_step(struct dtrain_dp *dp)
{
    for (int i = 0; i < dp->nbuckets; i++)
        dp->buckets[i].pending = dp->buckets[i].units;
    memset(dp->unit_ready, 0, (size_t)dp->nunits);
    dp->next_bucket = 0;
    if (dp->stage3) { /* the shares sum the micro-batches' reduce-scatters */
        char why[512];
        (void)dp_pf_drain(dp, why, sizeof why); /* a failed step's gather ahead: its error is the comm's, sticky */
        dp->z3[0].unit = dp->z3[1].unit = -1; /* none held (a failed step may have left one) */
        dp->z3_seconds = dp->z3_gather = 0.0;
        dp->pf_count = 0;
        if (dp->prefetch) { /* the last step's order predicts this one's */
            int *t = dp->seq[0], cap = dp->seq_cap[0];
            dp->seq[0] = dp->seq[1];
            dp->seq_cap[0] = dp->seq_cap[1];
            dp->seq_len[0] = dp->seq_len[1];
            dp->seq[1] = t;
            dp->seq_cap[1] = cap;
            dp->seq_len[1] = 0;
            dp->in_step = 1;
            dp->seq_ok = 1;
            dp->pos = 0;
            dp->pf_next = dp->seq_len[0] > 0 ? dp->seq[0][0] : -1;
            dp_pf_try(dp); /* the step's first unit, while the pipeline waits or the data loads */
        }
        for (int i = 0; i < dp->nbuckets; i++)
            dtrain_k_zero(dp->k, dp->buckets[i].grad, dp->buckets[i].share * sizeof(float));
        if (dp->z3[0].grad != NULL)
            dtrain_k_zero(dp->k, dp->z3[0].grad, dp->z3[0].floats * sizeof(float));
    }
    pthread_mutex_lock(&dp->lock);
    dp->queued = dp->reduced = 0;
    dp->status = DTRAIN_OK;
    dp->why[0] = '\0';
    pthread_mutex_unlock(&dp->lock);
}

void dtrain_dp_unit_ready(struct dtrain_dp *dp, int u)
{
    if (dp->local || dp->stage3 || u < 0 || u >= dp->nunits || dp->unit_ready[u])
        return; /* stage 3 reduces each unit when the stage gives it back */
    dp->unit_ready[u] = 1;
    dp->buckets[dp->unit_bucket[u]].pending--;
    int first = dp->next_bucket;
    while (dp->next_bucket < dp->nbuckets && dp->buckets[dp->next_bucket].pending == 0)
        dp->next_bucket++;
    if (dp->overlap && dp->next_bucket > first) {
        pthread_mutex_lock(&dp->lock);
        dp->queued = dp->next_bucket;
        pthread_cond_signal(&dp->work);
        pthread_mutex_unlock(&dp->lock);
    }
}

int dtrain_dp_finish(struct dtrain_dp *dp, char *err, size_t errlen)
{
    dp->exposed = 0.0;
    if (dp->local)
        return DTRAIN_OK;
    if (dp->stage3) { /* what is left: wte, summed over the step's micro-batches (and the tie) */
        int u = dtrain_shard_unit_of(dp->shard, DTRAIN_UNIT_WTE, 0);
        int rc = dp_pf_drain(dp, err, errlen); /* nothing is ahead at the end of an order the step kept */
        dp->in_step = 0;
        dp->pf_next = -1;
        dp->pf_count_step = dp->pf_count;
        dp->z3_gather_step = dp->z3_gather;
        dp->exposed = dp->z3_seconds;
        if (u < 0 || rc != DTRAIN_OK)
            return rc;
        double t0 = dtrain_clock_s();
        const struct bucket *b = &dp->buckets[dp->unit_bucket[u]];
        rc = dtrain_pcomm_reduce_scatter(&dp->pc, dp->z3[0].grad, b->grad, b->share,
                                         "ZeRO-3 reduce-scatter of the wte gradient", err, errlen);
        dp->exposed = dp->z3_seconds + (dtrain_clock_s() - t0);
        return rc;
    }
    if (dp->next_bucket < dp->nbuckets) {
        snprintf(err, errlen, "data-parallel bucket %d of %d was never complete: a gradient unit was "
                 "not reported ready", dp->next_bucket, dp->nbuckets);
        return DTRAIN_ERR_SYSTEM;
    }
    double t0 = dtrain_clock_s();
    int rc = DTRAIN_OK;
    if (dp->overlap) {
        pthread_mutex_lock(&dp->lock);
        while (dp->reduced < dp->nbuckets)
            pthread_cond_wait(&dp->done, &dp->lock);
        rc = dp->status;
        if (rc != DTRAIN_OK)
            snprintf(err, errlen, "%s", dp->why);
        pthread_mutex_unlock(&dp->lock);
    } else {
        for (int i = 0; i < dp->nbuckets && rc == DTRAIN_OK; i++)
            rc = dp_reduce_bucket(dp, &dp->buckets[i], err, errlen);
    }
    dp->exposed = dtrain_clock_s() - t0;
    return rc;
}

double dtrain_dp_norm_sumsq(struct dtrain_dp *dp)
{
    double sum = 0.0;
    if (dp->zero1) {
        for (int i = 0; i < dp->nbuckets; i++) {
            const struct bucket *b = &dp->buckets[i];
            const float *mine = dp_share_grad(dp, b);
            for (int j = 0; j < b->nnorm; j++)
                sum += dtrain_k_sumsq(dp->k, mine + b->norm[j].offset, b->norm[j].count);
        }
        return sum;
    }
    if (dp->rank != 0)
        return 0.0; /* every DP rank holds the same sums: rank 0 counts them */
    for (int j = 0; j < dp->nnorm; j++)
        sum += dtrain_k_sumsq(dp->k, dp->grads + dp->norm[j].offset, dp->norm[j].count);
    return sum;
}

int dtrain_dp_update(struct dtrain_dp *dp, const struct dtrain_optim_config *c, long step,
                     double lr, float grad_scale, char *err, size_t errlen)
{
    if (!dp->zero1) {
        dtrain_adamw_update(dp->adamw, dp->params, dp->grads, c, step, lr, grad_scale);
        return dtrain_adamw_error(dp->adamw, err, errlen);
    }
    if (dp->stage3) { /* AdamW on the shares, which are the parameters: nothing to gather */
        for (int i = 0; i < dp->nbuckets; i++) {
            struct bucket *b = &dp->buckets[i];
            dtrain_adamw_update_range(dp->adamw, b->state_offset, b->share, dp->master + b->state_offset, b->grad,
                                      c, step, lr, grad_scale);
        }
        return dtrain_adamw_error(dp->adamw, err, errlen);
    }
    for (int i = 0; i < dp->nbuckets; i++) {
        struct bucket *b = &dp->buckets[i];
        size_t at = (size_t)dp->rank * b->share;
        float *param = dp->stage2 ? dp->scratch : b->param; /* stage 2: the reductions are over */
        dp_pack(dp->k, b, dp->params, param);
        if (param == dp->scratch)
            dp_zero_padding(dp, b);
        dtrain_adamw_update_range(dp->adamw, b->state_offset, b->share, param + at, dp_share_grad(dp, b),
                                  c, step, lr, grad_scale);
        int rc = dtrain_adamw_error(dp->adamw, err, errlen);
        if (rc != DTRAIN_OK)
            return rc;
        if (dp->comm != NULL) {
            rc = dtrain_pcomm_all_gather(&dp->pc, param + at, param, b->share,
                                             "ZeRO all-gather of the parameters", err, errlen);
            if (rc != DTRAIN_OK)
                return rc;
        }
        dp_unpack(dp->k, b, param, dp->params);
    }
    return DTRAIN_OK;
}
