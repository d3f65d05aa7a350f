/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: data parallelism for one rank's shard: the gradient
 * all-reduce in buckets, overlapped with the backward pass, optionally
 * ZeRO-1, the rank's share of the global gradient norm, and the update.
 *
 * Buckets.  The shard's gradient units (dtrain_shard.h: head, layers top
 * down, wpe; wte alone) are grouped, in the order backward finishes them,
 * into buckets of about bucket_floats.  A bucket is packed into one
 * contiguous buffer (PyTorch DDP's bucket views), reduced over the DP group
 * and unpacked.  When the last micro-batch's backward has finished every
 * unit of a bucket (dtrain_dp_unit_ready), the bucket goes to a reducer
 * thread while backward goes on with the layers below (overlap = 1), or
 * waits for dtrain_dp_finish (overlap = 0).  Every rank of a DP group has
 * the same shard layout, so the same buckets in the same order.
 *
 * ZeRO-1.  Each bucket is padded to a multiple of D and reduce-scattered
 * instead of all-reduced: DP rank d keeps the d-th 1/D of every bucket's
 * summed gradient and the AdamW moments of exactly those elements (1/D of
 * the optimizer state); dtrain_dp_update runs AdamW on that share and
 * all-gathers the updated parameters.  AdamW being element-wise, the
 * result is the unsharded update's.
 *
 * Norm.  dtrain_dp_norm_sumsq is this rank's share of the sum of squares
 * of the reduced gradient: each parameter of the whole model counted once
 * over the job (TP-replicated tensors on TP rank 0, the tied wte on stage
 * 0, and without ZeRO DP rank 0 only, since all DP ranks then hold the
 * same sums).  The caller adds the shares over the world.
 *
 * With D = 1 and no ZeRO nothing is packed or sent; dtrain_dp_update is
 * then AdamW on the whole local vector, as the single-process trainer does. */
#ifndef DTRAIN_DP_H
#define DTRAIN_DP_H

#include <stddef.h>

#include "dtrain_comm.h"
#include "dtrain_optim.h"
#include "dtrain_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_dp; /* opaque */

struct dtrain_dp_options {
    int zero1;            /* shard the optimizer state */
    int overlap;          /* reduce buckets in a thread during backward */
    size_t bucket_floats; /* aim for buckets of about this many floats (>= 1) */
};

/* comm: the DP group (size D; NULL means D = 1).  params, grads: the
 * stage's local vectors (shard->count floats), which must outlive dp. */
int dtrain_dp_create(struct dtrain_kernels *k, dtrain_comm *comm, const struct dtrain_shard *shard,
                     float *params, float *grads, const struct dtrain_dp_options *opt,
                     struct dtrain_dp **out, char *err, size_t errlen);
/* Stops the reducer thread (aborting the DP communicator first if a
 * reduction is stuck on it). */
void dtrain_dp_destroy(struct dtrain_dp *dp);

int dtrain_dp_buckets(const struct dtrain_dp *dp);
/* Floats of AdamW state (m and v) this rank keeps: 2 * its share. */
size_t dtrain_dp_optimizer_floats(const struct dtrain_dp *dp);

/* The AdamW moments this rank keeps, as runs of the local parameter vector
 * (checkpoints save and load them): without ZeRO-1 one run, the whole
 * vector; with ZeRO-1, bucket by bucket, the parts of the local vector that
 * this rank's share [d*share, (d+1)*share) of the bucket covers (padding
 * left out).  fn gets each run's local offset and length and its m and v
 * (backend memory, writable); a non-zero return stops the walk and is
 * returned, else 0. */
typedef int (*dtrain_dp_state_fn)(void *ctx, size_t offset, size_t count, float *m, float *v);
int dtrain_dp_for_each_state(struct dtrain_dp *dp, dtrain_dp_state_fn fn, void *ctx);

/* A new step: no unit is ready. */
void dtrain_dp_begin_step(struct dtrain_dp *dp);
/* Unit u's gradient is final on this rank (call once per unit per step, in
 * any order); full buckets are reduced in bucket order. */
void dtrain_dp_unit_ready(struct dtrain_dp *dp, int u);
/* Wait until every bucket has been reduced (all units must be ready).
 * Returns the first failure of the step's reductions. */
int dtrain_dp_finish(struct dtrain_dp *dp, char *err, size_t errlen);

/* This rank's share of the squared global gradient norm (see above). */
double dtrain_dp_norm_sumsq(struct dtrain_dp *dp);

/* AdamW with the clip factor grad_scale; with ZeRO-1 also the all-gather
 * of the updated parameters. */
int dtrain_dp_update(struct dtrain_dp *dp, const struct dtrain_optim_config *c, long step,
                     double lr, float grad_scale, char *err, size_t errlen);

/* Time (seconds) the main thread spent in dtrain_dp_finish waiting for the
 * reducer during the last step: reduction not hidden behind backward. */
double dtrain_dp_exposed_seconds(const struct dtrain_dp *dp);

#ifdef __cplusplus
}
#endif

#endif
