/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: AdamW, learning-rate schedules and gradient clipping.
 *
 * The optimizer state is the two moment vectors m and v, each as long as
 * the parameter slice it updates (the whole model here; a ZeRO-1 shard
 * later).  The global gradient norm is split into a local sum of squares
 * (dtrain_k_sumsq) and the clip factor, so a data-parallel caller can
 * all-reduce the sum in between. */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include <stddef.h>

#include "dtrain_kernels.h"
#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dtrain_lr_schedule {
    DTRAIN_LR_CONSTANT = 0, /* lr at every step */
    DTRAIN_LR_COSINE = 1,   /* linear warm-up to lr, then cosine down to min_lr at the last step */
};

struct dtrain_optim_config {
    double lr, beta1, beta2, eps, weight_decay;
    double grad_clip;        /* clip the global gradient norm to this; 0: no clipping */
    enum dtrain_lr_schedule schedule;
    long warmup_steps;       /* cosine: steps 0..warmup-1 ramp up linearly */
    double min_lr;           /* cosine: the rate at the last step */
    long total_steps;        /* cosine: the run's length */
};

/* The learning rate of 0-based step `step`. */
double dtrain_lr_at(const struct dtrain_optim_config *c, long step);

/* The factor that clips a gradient of global norm `norm` (1 when no clipping
 * applies: clipping off, or norm <= grad_clip). */
float dtrain_clip_scale(const struct dtrain_optim_config *c, double norm);

struct dtrain_adamw; /* opaque: m and v for n parameters, in backend memory */

int dtrain_adamw_create(struct dtrain_kernels *k, size_t n, struct dtrain_adamw **out,
                        char *err, size_t errlen);
void dtrain_adamw_destroy(struct dtrain_adamw *o);
size_t dtrain_adamw_size(const struct dtrain_adamw *o);
float *dtrain_adamw_m(struct dtrain_adamw *o);
float *dtrain_adamw_v(struct dtrain_adamw *o);

/* Update params from grads (n floats each, backend memory) at 0-based step
 * `step` with learning rate lr and gradient factor grad_scale. */
void dtrain_adamw_update(struct dtrain_adamw *o, float *params, const float *grads,
                         const struct dtrain_optim_config *c, long step, double lr,
                         float grad_scale);

/* The same on the slice [offset, offset + n) of the moments: params and
 * grads point at that slice's n values (a ZeRO-1 shard, packed anywhere). */
void dtrain_adamw_update_range(struct dtrain_adamw *o, size_t offset, size_t n, float *params,
                               const float *grads, const struct dtrain_optim_config *c, long step,
                               double lr, float grad_scale);

#ifdef __cplusplus
}
#endif

#endif
