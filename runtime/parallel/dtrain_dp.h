/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: data parallelism for one rank's shard: the gradient
 * all-reduce in buckets, overlapped with the backward pass, optionally
 * ZeRO stages 1, 2 and 3, the rank's share of the global gradient norm, and the update.
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
 * ZeRO stage 1.  Each bucket is padded to a multiple of D and
 * reduce-scattered instead of all-reduced: DP rank d keeps the d-th 1/D of
 * every bucket's summed gradient and the AdamW moments of exactly those
 * elements (1/D of the optimizer state); dtrain_dp_update runs AdamW on
 * that share and all-gathers the updated parameters.  AdamW being
 * element-wise, the result is the unsharded update's.  Stage 1 keeps a
 * padded gradient and parameter buffer per bucket (a second copy of the
 * local vector each).
 *
 * ZeRO stage 2.  The same reduce-scatter, bucket by bucket as backward
 * finishes them (in the reducer thread with overlap), but a bucket keeps
 * only the rank's share of the summed gradient (share floats); packing,
 * the reduce-scatter and the parameter all-gather go through one scratch
 * buffer of the largest bucket.  The results are stage 1's bit for bit
 * (the same sums, the same update); what changes is the memory
 * (dtrain_dp_memory).  The backward still accumulates the micro-batches'
 * gradients in the stage's one local gradient vector: that vector is not
 * sharded (see doc/parallel.md).
 *
 * ZeRO stage 3 (FSDP).  The parameters are sharded too: one unit per
 * bucket (the head's LayerNorm, each layer, wpe, wte), padded to a multiple
 * of D; DP rank d keeps the d-th share of every unit's parameters (the fp32
 * master copy, dtrain_dp_params_upload/download), of its summed gradient
 * and of its AdamW moments, and no full local vector.  The stage asks for a
 * unit's weights just before it uses them (dtrain_dp_acquire: an
 * all-gather of the shares into one of two buffers, wte's and one for any
 * other unit, which is all the full weights a rank holds at a time) and
 * gives them back right after (dtrain_dp_release): forward, then again in
 * backward.  A backward's release reduce-scatters the unit's gradient of
 * that micro-batch and adds this rank's part to its share; wte's gradient
 * alone stays whole over the step (its buffer, where the embedding and
 * the head add to it and the tied copies are swapped) and is
 * reduce-scattered in dtrain_dp_finish.  The update is AdamW on the
 * shares, with nothing to gather after it.
 *
 * ZeRO-3 prefetch (opt->prefetch, host-memory kernels, D > 1).  The gather
 * of the unit the stage will ask for next runs in a prefetcher thread
 * while the stage computes with the one it holds: into a third buffer of
 * the largest non-wte unit (a layer while a layer is held), or wte's own
 * buffer once wte is given back; at most one gather is ahead.  "Next" is
 * the previous step's order of acquires (every step of a run repeats the
 * pipeline schedule's order, whatever P, V and m), so the first step
 * gathers synchronously and records it; a step that departs from it stops
 * prefetching at the first difference (the gather ahead is waited for and
 * dropped).  The comm layer has no non-blocking collective and a
 * communicator takes calls from one thread at a time: the main thread
 * waits for the gather in flight before each of its own calls on the DP
 * communicator (a unit's reduce-scatter, the wte one, the checkpoint's
 * gather), so every rank of the group calls the same collectives in the
 * same order (the decisions depend only on that order, the same on every
 * rank).  The gathers are the same, only earlier: the results are the
 * synchronous ones bit for bit.  Outside dtrain_dp_begin_step ..
 * dtrain_dp_finish (validation) nothing is prefetched.  GPU kernels take
 * calls from one thread: there the gathers stay in order on the kernels'
 * stream (prefetch off).
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

struct dtrain_stage_unit; /* dtrain_stage.h */

#ifdef __cplusplus
extern "C" {
#endif

struct dtrain_dp; /* opaque */

struct dtrain_dp_options {
    int zero_stage;       /* 0: none, 1: shard the optimizer state, 2: and the reduced gradients, 3: and the parameters */
    int overlap;          /* reduce buckets in a thread during backward */
    size_t bucket_floats; /* aim for buckets of about this many floats (>= 1) */
    int prefetch;         /* stage 3: gather the next unit in a thread while the current one computes */
    struct dtrain_offload offload; /* where the AdamW state lives (dtrain_optim.h; zeroed: backend memory) */
    int offload_params;   /* stage 3 with offload.kind CPU on a device backend: the parameter shares in pinned
                           * host memory, uploaded share by share to be gathered (--offload-params cpu) */
};

/* comm: the DP group (size D; NULL means D = 1).  params, grads: the
 * stage's local vectors (shard->count floats), which must outlive dp
 * (stage 3: NULL, dp holds the shares). */
int dtrain_dp_create(struct dtrain_kernels *k, dtrain_comm *comm, const struct dtrain_shard *shard,
                     float *params, float *grads, const struct dtrain_dp_options *opt,
                     struct dtrain_dp **out, char *err, size_t errlen);
/* Stops the reducer thread (aborting the DP communicator first if a
 * reduction is stuck on it). */
void dtrain_dp_destroy(struct dtrain_dp *dp);

int dtrain_dp_buckets(const struct dtrain_dp *dp);
/* The DP group dp reduces over (NULL when D = 1). */
dtrain_comm *dtrain_dp_comm(const struct dtrain_dp *dp);
/* Floats of AdamW state (m and v) this rank keeps: 2 * its share. */
size_t dtrain_dp_optimizer_floats(const struct dtrain_dp *dp);
/* Where they live (--offload-optimizer). */
enum dtrain_offload_kind dtrain_dp_offload(const struct dtrain_dp *dp);

/* Bytes of backend memory dp holds (allocated in dtrain_dp_create):
 * reduced gradients kept (stage 2: the shares; else the bucket buffers),
 * AdamW moments, and communication buffers (stage 1's parameter buckets,
 * stage 2's scratch). */
struct dtrain_dp_memory {
    size_t grad_bytes, optimizer_bytes, comm_bytes;
    size_t param_bytes;     /* stage 3: the parameter shares and the two gathered units' weights (prefetch:
                             * and the third buffer, of the largest unit but wte); else 0 */
    size_t unit_grad_bytes; /* stage 3: the two units' gradient buffers; else 0 */
    /* ZeRO-Offload: the AdamW state outside backend memory (optimizer_bytes
     * then counts only what is left in it: 0) */
    size_t pinned_host_bytes, nvme_bytes;
};
void dtrain_dp_memory(const struct dtrain_dp *dp, struct dtrain_dp_memory *m);

/* The AdamW moments this rank keeps, as runs of the local parameter vector
 * (checkpoints save and load them): without ZeRO one run, the whole
 * vector; with ZeRO (stage 1, 2 or 3), bucket by bucket, the parts of the local vector that
 * this rank's share [d*share, (d+1)*share) of the bucket covers (padding
 * left out).  fn gets each run's local offset and length and the place of
 * its moments in the optimizer state (`state`: read and write them with
 * dtrain_adamw_state_read/_write on dtrain_dp_adamw, wherever they live); a
 * non-zero return stops the walk and is returned, else 0. */
typedef int (*dtrain_dp_state_fn)(void *ctx, size_t offset, size_t count, size_t state);
int dtrain_dp_for_each_state(struct dtrain_dp *dp, dtrain_dp_state_fn fn, void *ctx);
/* The optimizer of this rank's parameters (or of its ZeRO share). */
struct dtrain_adamw *dtrain_dp_adamw(struct dtrain_dp *dp);

/* ZeRO-3.  1 when dp holds the parameters (stage 3).  Upload: this rank's
 * shares from a host copy of the local vector (the shard's layout);
 * download: the shares into their places of one (the rest untouched);
 * gather: the whole local vector (a collective over the DP group). */
int dtrain_dp_sharded_params(const struct dtrain_dp *dp);
void dtrain_dp_params_upload(struct dtrain_dp *dp, const float *local);
void dtrain_dp_params_download(struct dtrain_dp *dp, float *local);
int dtrain_dp_params_gather(struct dtrain_dp *dp, float *local, char *err, size_t errlen);
/* The stage's source of weights (dtrain_stage_source): unit's full weights
 * (a collective over the DP group) and, with grads, its gradient buffer
 * (zeroed; wte's keeps the step's sum); then, given back, its gradient
 * reduce-scattered into this rank's share (a collective, but for wte). */
int dtrain_dp_acquire(struct dtrain_dp *dp, int unit, int grads, struct dtrain_stage_unit *out, char *err,
                      size_t errlen);
int dtrain_dp_release(struct dtrain_dp *dp, int unit, char *err, size_t errlen);
/* The local wte gradient the tied copies swap (P > 1): in grads, or with
 * stage 3 dp's wte buffer; NULL when the stage holds no wte. */
float *dtrain_dp_wte_grads(struct dtrain_dp *dp, float *grads);

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

/* AdamW with the clip factor grad_scale; with ZeRO also the all-gather
 * of the updated parameters. */
int dtrain_dp_update(struct dtrain_dp *dp, const struct dtrain_optim_config *c, long step,
                     double lr, float grad_scale, char *err, size_t errlen);

/* Time (seconds) the main thread spent in dtrain_dp_finish waiting for the
 * reducer during the last step: reduction not hidden behind backward.
 * Stage 3: the step's time in its gathers (synchronous ones, and waits for
 * a prefetched one) and reduce-scatters. */
double dtrain_dp_exposed_seconds(const struct dtrain_dp *dp);
/* Stage 3: the part of that in the parameter gathers (else 0). */
double dtrain_dp_gather_seconds(const struct dtrain_dp *dp);
/* 1 when stage 3 prefetches (dtrain_dp_options.prefetch, host-memory
 * kernels, D > 1); then dtrain_dp_prefetched counts the gathers of the last
 * step that ran ahead in the thread. */
int dtrain_dp_prefetching(const struct dtrain_dp *dp);
int dtrain_dp_prefetched(const struct dtrain_dp *dp);

#ifdef __cplusplus
}
#endif

#endif
