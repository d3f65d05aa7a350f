/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Data parallelism: bucketed, overlapped gradient reduction, ZeRO, the
 * norm share and the update; see dtrain_dp.h. */
#include "dtrain_dp.h"
#include "dtrain_pcomm.h"
#include "dtrain_stage.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct span {
    size_t offset, count;
};

struct bucket {
    int first_unit, units;
    struct dtrain_shard_range *ranges; /* local ranges, in unit order (in dp->ranges) */
    int nranges;
    size_t packed;        /* floats of the ranges */
    size_t share;         /* ZeRO: ceil(packed / D), this rank's part; else packed */
    float *grad;          /* packed gradients, share * D floats (padding stays 0); stage 2: the share only */
    float *param;         /* stage 1: packed parameters, share * D floats */
    size_t state_offset;  /* ZeRO: where this bucket's share starts in the moments */
    struct span *norm;    /* ZeRO: parts of this rank's share that count in the norm (in dp->spans) */
    int nnorm;
    int pending;          /* units of this step not ready yet */
};

/* ZeRO-3: a buffer for one unit's full weights and gradient at a time. */
struct z3_slot {
    float *param, *grad; /* padded unit floats each (kernels' memory) */
    size_t floats;
    int unit;            /* held now, -1: none */
    int grads;           /* the holder writes gradients */
};

struct dtrain_dp {
    struct dtrain_kernels *k;
    dtrain_comm *comm;  /* NULL when D = 1 */
    struct dtrain_pcomm pc; /* comm on the kernels' memory */
    int size, rank;     /* D, this rank */
    int zero1;          /* ZeRO stage 1 or 2: the optimizer state is sharded */
    int stage2;         /* and a bucket keeps only its share of the gradient */
    int stage3;         /* and of the parameters: one unit per bucket, gathered on use (see z3_*) */
    float *master;      /* stage 3: the parameter shares, laid out as the moments (state_offset) */
    struct z3_slot z3[2]; /* stage 3: the gathered units, wte's (0) and one other (1) */
    struct dtrain_shard views[4]; /* stage 3: a unit's tensors in a gathered buffer, by unit kind */
    double z3_seconds;  /* stage 3: this step's time in the gathers and reduce-scatters (all exposed) */
    double z3_gather;   /* stage 3: the part of it in gathers and waits for a prefetched one */
    double z3_gather_step; /* the last finished step's */
    /* stage 3 prefetch (dtrain_dp.h): the order of acquires of the last
     * step (seq[0], the prediction) and of this one (seq[1]); the unit
     * gathered ahead (pf_unit, into pf_dest) and the one predicted next but
     * not issued yet (pf_next: wte's buffer is still held) */
    int prefetch, in_step, seq_ok, pos;
    int *seq[2];
    int seq_len[2], seq_cap[2];
    float *spare;       /* the third buffer: z3[1].floats */
    int pf_unit, pf_next, pf_count, pf_count_step;
    float *pf_dest;
    int overlap, local; /* local: D = 1 without ZeRO, nothing to reduce */
    float *scratch;     /* stage 2: the largest bucket, padded (packing, reduce-scatter, all-gather) */
    size_t scratch_floats;
    const struct dtrain_shard *shard;
    float *params, *grads;
    struct bucket *buckets;
    int nbuckets;
    struct dtrain_shard_range *ranges; /* every unit's ranges, in unit order */
    struct span *spans;                /* ZeRO: the buckets' norm spans */
    int *unit_bucket;   /* unit -> bucket */
    char *unit_ready;   /* this step */
    int nunits;
    int next_bucket;    /* the next bucket to hand over, in order */
    struct span *norm;  /* without ZeRO: merged in-norm ranges of the local vector */
    int nnorm;
    struct dtrain_adamw *adamw; /* moments of the whole local vector, or of the shares */
    double exposed;

    /* the reducer thread */
    int sync_ready;      /* lock, work and done exist */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    int queued, reduced; /* buckets handed over / finished this step */
    int stop;
    int status;          /* first failure of the step, DTRAIN_OK while none */
    char why[512];
    /* the prefetcher thread (stage 3; under lock): one gather at a time */
    int pf_busy;         /* a gather handed over and not finished */
    const struct bucket *pf_bucket;
    float *pf_out;
    int pf_status;
    char pf_why[512];
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ one bucket */

/* Copies within the kernels' memory (a GPU's on the cuda kernels). */
static void pack(struct dtrain_kernels *k, const struct bucket *b, const float *vec, float *buf)
{
    size_t at = 0;
    for (int i = 0; i < b->nranges; i++) {
        dtrain_k_copy(k, buf + at, vec + b->ranges[i].offset, b->ranges[i].count * sizeof(float));
        at += b->ranges[i].count;
    }
}

static void unpack(struct dtrain_kernels *k, const struct bucket *b, const float *buf, float *vec)
{
    size_t at = 0;
    for (int i = 0; i < b->nranges; i++) {
        dtrain_k_copy(k, vec + b->ranges[i].offset, buf + at, b->ranges[i].count * sizeof(float));
        at += b->ranges[i].count;
    }
}

/* ZeRO: this rank's share of bucket b's summed gradient. */
static float *share_grad(const struct dtrain_dp *dp, const struct bucket *b)
{
    return dp->stage2 ? b->grad : b->grad + (size_t)dp->rank * b->share;
}

/* Stage 2: bucket b's padding in the shared scratch (the scratch held a
 * larger bucket before): zero, so that the padded tail is the same as in
 * stage 1's own buffers. */
static void zero_padding(struct dtrain_dp *dp, const struct bucket *b)
{
    size_t padded = b->share * (size_t)dp->size;
    if (padded > b->packed)
        dtrain_k_zero(dp->k, dp->scratch + b->packed, (padded - b->packed) * sizeof(float));
}

/* Sum bucket b over the DP group: in the gradients (all-reduce), or into
 * this rank's share of b->grad (ZeRO: reduce-scatter). */
static int reduce_bucket(struct dtrain_dp *dp, struct bucket *b, char *err, size_t errlen)
{
    /* stage 2 packs into the scratch and keeps only its share of the sum */
    float *packed = dp->stage2 && dp->comm != NULL ? dp->scratch : b->grad;
    pack(dp->k, b, dp->grads, packed);
    if (packed == dp->scratch)
        zero_padding(dp, b);
    if (dp->comm == NULL)
        return DTRAIN_OK; /* ZeRO on D = 1: the share is the bucket */
    int rc;
    if (dp->zero1)
        return dtrain_pcomm_reduce_scatter(&dp->pc, packed, share_grad(dp, b), b->share,
                                           "data-parallel reduce-scatter", err, errlen);
    if ((rc = dtrain_pcomm_allreduce(&dp->pc, b->grad, b->packed, "data-parallel all-reduce", err, errlen)) !=
        DTRAIN_OK)
        return rc;
    unpack(dp->k, b, b->grad, dp->grads);
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ the reducer thread */

static void *prefetcher_main(void *arg); /* ZeRO-3 prefetch, below */

static void *reducer_main(void *arg)
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
        int rc = failed ? DTRAIN_OK : reduce_bucket(dp, b, why, sizeof why);
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
static int build_norm_spans(struct dtrain_dp *dp)
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
static int build_buckets(struct dtrain_dp *dp, size_t bucket_floats)
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

/* Stage 3: the slot of a unit (wte alone in slot 0: the embedding and the
 * head each use it together with another unit). */
static int z3_slot_of(const struct dtrain_dp *dp, int u)
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
    static const int first[] = {[DTRAIN_UNIT_HEAD] = DTRAIN_GPT2_LNFW, [DTRAIN_UNIT_LAYER] = DTRAIN_GPT2_LN1W,
                                [DTRAIN_UNIT_WPE] = DTRAIN_GPT2_WPE, [DTRAIN_UNIT_WTE] = DTRAIN_GPT2_WTE};
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
static int z3_build(struct dtrain_dp *dp)
{
    size_t state = 0;
    for (int i = 0; i < dp->nbuckets; i++) {
        struct bucket *b = &dp->buckets[i];
        struct z3_slot *z = &dp->z3[z3_slot_of(dp, b->first_unit)];
        size_t padded = b->share * (size_t)dp->size;
        if (padded > z->floats)
            z->floats = padded;
        int layer;
        z3_view(dp, b->first_unit, &dp->views[dtrain_shard_unit_kind(dp->shard, b->first_unit, &layer)]);
        state += b->share;
    }
    if ((dp->master = dtrain_k_alloc(dp->k, (state + 1) * sizeof(float))) == NULL)
        return -1;
    dtrain_k_zero(dp->k, dp->master, (state + 1) * sizeof(float)); /* the padding stays 0 */
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
    if (build_buckets(dp, dp->stage3 ? 1 : opt->bucket_floats > 0 ? opt->bucket_floats : 1) != 0 ||
        build_norm_spans(dp) != 0 || (dp->stage3 && z3_build(dp) != 0))
        goto oom;
    size_t state = shard->count;
    if (dp->zero1) {
        state = 0;
        for (int i = 0; i < dp->nbuckets; i++)
            state += dp->buckets[i].share;
    }
    if ((rc = dtrain_adamw_create(k, state, &dp->adamw, err, errlen)) != DTRAIN_OK)
        goto fail;
    if (dp->overlap || dp->prefetch) {
        int e = pthread_create(&dp->thread, NULL, dp->prefetch ? prefetcher_main : reducer_main, dp);
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
        dtrain_k_free(dp->k, dp->master);
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
    m->optimizer_bytes = dtrain_dp_optimizer_floats(dp) * sizeof(float);
    m->comm_bytes = comm * sizeof(float);
    m->param_bytes = m->unit_grad_bytes = 0;
    if (dp->stage3) {
        m->param_bytes = (dtrain_adamw_size(dp->adamw) + dp->z3[0].floats + dp->z3[1].floats +
                          (dp->spare != NULL ? dp->z3[1].floats : 0)) * sizeof(float);
        m->unit_grad_bytes = (dp->z3[0].floats + dp->z3[1].floats) * sizeof(float);
        m->comm_bytes = 0; /* the gathers go into the slots, counted with the parameters */
    }
}

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
    return w->fn(w->ctx, offset, count, dtrain_adamw_m(dp->adamw) + state, dtrain_adamw_v(dp->adamw) + state);
}

int dtrain_dp_for_each_state(struct dtrain_dp *dp, dtrain_dp_state_fn fn, void *ctx)
{
    if (!dp->zero1)
        return fn(ctx, 0, dp->shard->count, dtrain_adamw_m(dp->adamw), dtrain_adamw_v(dp->adamw));
    struct state_walk w = {fn, ctx};
    return for_each_share(dp, state_run, &w);
}

/* ------------------------------------------------------------ ZeRO-3: sharded parameters */

int dtrain_dp_sharded_params(const struct dtrain_dp *dp) { return dp->stage3; }

static int share_upload(struct dtrain_dp *dp, void *ctx, size_t offset, size_t count, size_t state)
{
    dtrain_k_upload(dp->k, dp->master + state, (const float *)ctx + offset, count * sizeof(float));
    return 0;
}

static int share_download(struct dtrain_dp *dp, void *ctx, size_t offset, size_t count, size_t state)
{
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
static int z3_gather(struct dtrain_dp *dp, const struct bucket *b, float *out, char *err, size_t errlen)
{
    return dtrain_pcomm_all_gather(&dp->pc, dp->master + b->state_offset, out, b->share,
                                   "ZeRO-3 all-gather of a unit's parameters", err, errlen);
}

/* ------------------------------------------------------------ ZeRO-3 prefetch */

/* The prefetcher thread: the gather handed over, one at a time. */
static void *prefetcher_main(void *arg)
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
        int rc = z3_gather(dp, b, out, why, sizeof why);
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
static int pf_wait(struct dtrain_dp *dp, char *err, size_t errlen)
{
    if (dp->pf_unit < 0)
        return DTRAIN_OK;
    double t0 = now_seconds();
    pthread_mutex_lock(&dp->lock);
    while (dp->pf_busy)
        pthread_cond_wait(&dp->done, &dp->lock);
    int rc = dp->pf_status;
    if (rc != DTRAIN_OK)
        snprintf(err, errlen, "%s", dp->pf_why);
    pthread_mutex_unlock(&dp->lock);
    double waited = now_seconds() - t0;
    dp->z3_seconds += waited;
    dp->z3_gather += waited;
    return rc;
}

/* Wait for the gather ahead and drop it. */
static int pf_drain(struct dtrain_dp *dp, char *err, size_t errlen)
{
    int rc = pf_wait(dp, err, errlen);
    dp->pf_unit = -1;
    return rc;
}

/* Where a gather ahead of unit u goes: a non-wte unit into the third
 * buffer (the slot's own holds the unit in use, or nothing), wte into its
 * own buffer once that is free; NULL: not now. */
static float *pf_buffer(const struct dtrain_dp *dp, int u)
{
    if (z3_slot_of(dp, u) == 1)
        return dp->spare;
    return dp->z3[0].unit < 0 ? dp->z3[0].param : NULL;
}

/* Hand the predicted next unit's gather to the thread when its buffer is
 * free and none is ahead. */
static void pf_try(struct dtrain_dp *dp)
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
static int pf_record(struct dtrain_dp *dp, int u, char *err, size_t errlen)
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

int dtrain_dp_params_gather(struct dtrain_dp *dp, float *local, char *err, size_t errlen)
{
    int rc = pf_drain(dp, err, errlen); /* a failed step's gather ahead (none after dtrain_dp_finish) */
    if (rc != DTRAIN_OK)
        return rc;
    for (int i = 0; i < dp->nbuckets; i++) {
        const struct bucket *b = &dp->buckets[i];
        struct z3_slot *z = &dp->z3[z3_slot_of(dp, b->first_unit)];
        rc = z3_gather(dp, b, z->param, err, errlen);
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
    int layer, wte = z3_slot_of(dp, unit) == 0;
    struct z3_slot *z = &dp->z3[wte ? 0 : 1];
    const struct bucket *b = &dp->buckets[dp->unit_bucket[unit]];
    if (z->unit >= 0) {
        snprintf(err, errlen, "ZeRO-3: unit %d asked for while unit %d holds its buffer", unit, z->unit);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = DTRAIN_OK;
    if (dp->in_step && dp->prefetch && (rc = pf_record(dp, unit, err, errlen)) != DTRAIN_OK)
        return rc;
    if (dp->pf_unit == unit) { /* gathered ahead: wait for it if it is still on its way */
        if ((rc = pf_drain(dp, err, errlen)) != DTRAIN_OK)
            return rc;
        if (dp->pf_dest != z->param) { /* the third buffer: it becomes the slot's */
            dp->spare = z->param;
            z->param = dp->pf_dest;
        }
    } else {
        /* not predicted (the first step, validation, another order): the
         * gather ahead, if any, is dropped, then this one, now */
        if ((rc = pf_drain(dp, err, errlen)) != DTRAIN_OK)
            return rc;
        double t0 = now_seconds();
        rc = z3_gather(dp, b, z->param, err, errlen);
        dp->z3_seconds += now_seconds() - t0;
        dp->z3_gather += now_seconds() - t0;
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
    pf_try(dp); /* the next unit's gather while the stage computes with this one */
    return DTRAIN_OK;
}

int dtrain_dp_release(struct dtrain_dp *dp, int unit, char *err, size_t errlen)
{
    struct z3_slot *z = &dp->z3[z3_slot_of(dp, unit)];
    if (z->unit != unit) {
        snprintf(err, errlen, "ZeRO-3: unit %d given back but not held", unit);
        return DTRAIN_ERR_SYSTEM;
    }
    z->unit = -1;
    if (!z->grads || z == &dp->z3[0]) {
        pf_try(dp); /* wte's buffer may be the one the next gather waited for */
        return DTRAIN_OK; /* wte: reduced once, in dtrain_dp_finish */
    }
    /* this micro-batch's gradient of the unit: summed over the DP group into
     * this rank's share (in place), added to the share's sum so far; the
     * gather ahead first (one call at a time on the communicator) */
    struct bucket *b = &dp->buckets[dp->unit_bucket[unit]];
    float *mine = z->grad + (size_t)dp->rank * b->share;
    int rc = pf_wait(dp, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    double t0 = now_seconds();
    rc = dtrain_pcomm_reduce_scatter(&dp->pc, z->grad, mine, b->share, "ZeRO-3 reduce-scatter of a unit's "
                                     "gradient", err, errlen);
    dp->z3_seconds += now_seconds() - t0;
    if (rc == DTRAIN_OK)
        dtrain_k_residual_forward(dp->k, b->grad, b->grad, mine, b->share);
    pf_try(dp);
    return rc;
}

float *dtrain_dp_wte_grads(struct dtrain_dp *dp, float *grads)
{
    if (!dp->stage3)
        return dtrain_shard_tensor(dp->shard, grads, DTRAIN_GPT2_WTE);
    return dtrain_shard_unit_of(dp->shard, DTRAIN_UNIT_WTE, 0) >= 0 ? dp->z3[0].grad : NULL;
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
        (void)pf_drain(dp, why, sizeof why); /* a failed step's gather ahead: its error is the comm's, sticky */
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
            pf_try(dp); /* the step's first unit, while the pipeline waits or the data loads */
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
        int rc = pf_drain(dp, err, errlen); /* nothing is ahead at the end of an order the step kept */
        dp->in_step = 0;
        dp->pf_next = -1;
        dp->pf_count_step = dp->pf_count;
        dp->z3_gather_step = dp->z3_gather;
        dp->exposed = dp->z3_seconds;
        if (u < 0 || rc != DTRAIN_OK)
            return rc;
        double t0 = now_seconds();
        const struct bucket *b = &dp->buckets[dp->unit_bucket[u]];
        rc = dtrain_pcomm_reduce_scatter(&dp->pc, dp->z3[0].grad, b->grad, b->share,
                                         "ZeRO-3 reduce-scatter of the wte gradient", err, errlen);
        dp->exposed = dp->z3_seconds + (now_seconds() - t0);
        return rc;
    }
    if (dp->next_bucket < dp->nbuckets) {
        snprintf(err, errlen, "data-parallel bucket %d of %d was never complete: a gradient unit was "
                 "not reported ready", dp->next_bucket, dp->nbuckets);
        return DTRAIN_ERR_SYSTEM;
    }
    double t0 = now_seconds();
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
            rc = reduce_bucket(dp, &dp->buckets[i], err, errlen);
    }
    dp->exposed = now_seconds() - t0;
    return rc;
}

double dtrain_dp_norm_sumsq(struct dtrain_dp *dp)
{
    double sum = 0.0;
    if (dp->zero1) {
        for (int i = 0; i < dp->nbuckets; i++) {
            const struct bucket *b = &dp->buckets[i];
            const float *mine = share_grad(dp, b);
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
        return DTRAIN_OK;
    }
    if (dp->stage3) { /* AdamW on the shares, which are the parameters: nothing to gather */
        for (int i = 0; i < dp->nbuckets; i++) {
            struct bucket *b = &dp->buckets[i];
            dtrain_adamw_update_range(dp->adamw, b->state_offset, b->share, dp->master + b->state_offset, b->grad,
                                      c, step, lr, grad_scale);
        }
        return DTRAIN_OK;
    }
    for (int i = 0; i < dp->nbuckets; i++) {
        struct bucket *b = &dp->buckets[i];
        size_t at = (size_t)dp->rank * b->share;
        float *param = dp->stage2 ? dp->scratch : b->param; /* stage 2: the reductions are over */
        pack(dp->k, b, dp->params, param);
        if (param == dp->scratch)
            zero_padding(dp, b);
        dtrain_adamw_update_range(dp->adamw, b->state_offset, b->share, param + at, share_grad(dp, b),
                                  c, step, lr, grad_scale);
        if (dp->comm != NULL) {
            int rc = dtrain_pcomm_all_gather(&dp->pc, param + at, param, b->share,
                                             "ZeRO all-gather of the parameters", err, errlen);
            if (rc != DTRAIN_OK)
                return rc;
        }
        unpack(dp->k, b, param, dp->params);
    }
    return DTRAIN_OK;
}
