/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Data parallelism's private header: the state the files of dtrain_dp
 * share (dtrain_dp.c: creation and the step; dp_bucket.c: the buckets and
 * the reducer thread; dp_zero.c: ZeRO's shares and stage 3's gathered
 * units; dp_prefetch.c: stage 3's gather ahead). */
#ifndef DTRAIN_DP_INTERNAL_H
#define DTRAIN_DP_INTERNAL_H

#include "dtrain_dp.h"
#include "dtrain_pcomm.h"
#include "dtrain_stage.h"
#include "dtrain_clock.h"

#include <pthread.h>
#include <stddef.h>

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
    int host_params;    /* stage 3, --offload-params cpu: master is pinned host memory, */
    float *gather_src;  /* uploaded share by share here (backend memory) before its all-gather */
    size_t gather_floats; /* its size: the largest share */
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

/* dp_bucket.c: one bucket, the reducer thread, building the buckets */
void dp_pack(struct dtrain_kernels *k, const struct bucket *b, const float *vec, float *buf);
void dp_unpack(struct dtrain_kernels *k, const struct bucket *b, const float *buf, float *vec);
float *dp_share_grad(const struct dtrain_dp *dp, const struct bucket *b);
void dp_zero_padding(struct dtrain_dp *dp, const struct bucket *b);
int dp_reduce_bucket(struct dtrain_dp *dp, struct bucket *b, char *err, size_t errlen);
void *dp_reducer_main(void *arg);
int dp_build_norm_spans(struct dtrain_dp *dp);
int dp_build_buckets(struct dtrain_dp *dp, size_t bucket_floats);

/* dp_zero.c: stage 3's slots and gathers */
int dp_z3_slot_of(const struct dtrain_dp *dp, int u);
int dp_z3_build(struct dtrain_dp *dp);
int dp_z3_gather(struct dtrain_dp *dp, const struct bucket *b, float *out, char *err, size_t errlen);

/* dp_prefetch.c: stage 3's gather ahead */
void *dp_prefetcher_main(void *arg);
int dp_pf_wait(struct dtrain_dp *dp, char *err, size_t errlen);
int dp_pf_drain(struct dtrain_dp *dp, char *err, size_t errlen);
void dp_pf_try(struct dtrain_dp *dp);
int dp_pf_record(struct dtrain_dp *dp, int u, char *err, size_t errlen);

#endif
