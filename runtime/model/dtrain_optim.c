/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AdamW, schedules, clipping; see dtrain_optim.h. */
#include "dtrain_optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct dtrain_adamw {
    struct dtrain_kernels *k;
    size_t n;
    float *m, *v;
};

double dtrain_lr_at(const struct dtrain_optim_config *c, long step)
{
    if (c->schedule == DTRAIN_LR_CONSTANT)
        return c->lr;
    if (step < c->warmup_steps)
        return c->lr * (double)(step + 1) / (double)c->warmup_steps;
    long span = c->total_steps - c->warmup_steps - 1;
    double ratio = span > 0 ? (double)(step - c->warmup_steps) / (double)span : 1.0;
    if (ratio > 1.0)
        ratio = 1.0;
    return c->min_lr + 0.5 * (1.0 + cos(M_PI * ratio)) * (c->lr - c->min_lr);
}

float dtrain_clip_scale(const struct dtrain_optim_config *c, double norm)
{
    if (c->grad_clip <= 0.0 || !(norm > c->grad_clip))
        return 1.0f;
    return (float)(c->grad_clip / norm);
}

int dtrain_adamw_create(struct dtrain_kernels *k, size_t n, struct dtrain_adamw **out,
                        char *err, size_t errlen)
{
    struct dtrain_adamw *o = calloc(1, sizeof *o);
    *out = NULL;
    if (o == NULL)
        goto oom;
    o->k = k;
    o->n = n;
    o->m = dtrain_k_alloc(k, n * sizeof(float));
    o->v = dtrain_k_alloc(k, n * sizeof(float));
    if (o->m == NULL || o->v == NULL)
        goto oom;
    *out = o;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for the AdamW state of %zu parameters", n);
    dtrain_adamw_destroy(o);
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_adamw_destroy(struct dtrain_adamw *o)
{
    if (o == NULL)
        return;
    dtrain_k_free(o->k, o->m);
    dtrain_k_free(o->k, o->v);
    free(o);
}

size_t dtrain_adamw_size(const struct dtrain_adamw *o) { return o->n; }
float *dtrain_adamw_m(struct dtrain_adamw *o) { return o->m; }
float *dtrain_adamw_v(struct dtrain_adamw *o) { return o->v; }

void dtrain_adamw_update_range(struct dtrain_adamw *o, size_t offset, size_t n, float *params,
                               const float *grads, const struct dtrain_optim_config *c, long step,
                               double lr, float grad_scale)
{
    struct dtrain_adamw_args a = {
        .lr = (float)lr, .beta1 = (float)c->beta1, .beta2 = (float)c->beta2,
        .eps = (float)c->eps, .weight_decay = (float)c->weight_decay,
        .step = step + 1, .grad_scale = grad_scale,
    };
    if (offset > o->n || n > o->n - offset)
        return; /* a caller's bug; never write past the moments */
    dtrain_k_adamw_update(o->k, params, grads, o->m + offset, o->v + offset, n, &a);
}

void dtrain_adamw_update(struct dtrain_adamw *o, float *params, const float *grads,
                         const struct dtrain_optim_config *c, long step, double lr,
                         float grad_scale)
{
    dtrain_adamw_update_range(o, 0, o->n, params, grads, c, step, lr, grad_scale);
}
