/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AdamW update and sum of squares on the CPU; see dtrain_kernels.h. */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <math.h>

struct adamw_range_args {
    float *params, *m, *v;
    const float *grads;
    size_t n;
    const struct dtrain_adamw_args *opt;
    float bc1, bc2; /* 1 - beta^t */
};

/* Elements [0, n) of the four arrays (distinct: restrict lets the loop
 * vectorize; sqrtf inlines as the kernels are built with -fno-math-errno). */
CPU_VECTOR_LOOP static void adamw_span(float *restrict params, float *restrict m_state, float *restrict v_state,
                                       const float *restrict grads, size_t n, const struct dtrain_adamw_args *o,
                                       float bc1, float bc2)
{
    const float grad_scale = o->grad_scale, beta1 = o->beta1, beta2 = o->beta2, lr = o->lr, eps = o->eps,
                weight_decay = o->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float m = beta1 * m_state[i] + (1.0f - beta1) * g;
        float v = beta2 * v_state[i] + (1.0f - beta2) * g * g;
        float m_hat = m / bc1, v_hat = v / bc2;
        m_state[i] = m;
        v_state[i] = v;
        params[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params[i]);
    }
}

static void adamw_elems(void *p, long begin, long end, int tid)
{
    const struct adamw_range_args *a = p;
    (void)tid;
    size_t i0 = (size_t)begin * CPU_ELEMS_PER_ITEM, i1 = (size_t)end * CPU_ELEMS_PER_ITEM;
    if (i1 > a->n)
        i1 = a->n;
    if (i0 < i1)
        adamw_span(a->params + i0, a->m + i0, a->v + i0, a->grads + i0, i1 - i0, a->opt, a->bc1, a->bc2);
}

void cpu_adamw_update(struct dtrain_kernels *k, float *params, const float *grads, float *m,
                      float *v, size_t n, const struct dtrain_adamw_args *a)
{
    struct adamw_range_args r = {.params = params, .grads = grads, .m = m, .v = v, .n = n,
                                 .opt = a,
                                 .bc1 = 1.0f - powf(a->beta1, (float)a->step),
                                 .bc2 = 1.0f - powf(a->beta2, (float)a->step)};
    long items = (long)((n + CPU_ELEMS_PER_ITEM - 1) / CPU_ELEMS_PER_ITEM);
    cpu_parallel(k, items, CPU_ELEMS_PER_ITEM * 8, adamw_elems, &r);
}

/* The sum is split into SUMSQ_PARTS fixed slices whatever the thread count,
 * each summed in lanes (cpu_math.h), and the slices are added in order. */
#define SUMSQ_PARTS 64

struct sumsq_args {
    const float *x;
    size_t n;
    double part[SUMSQ_PARTS];
};

/* the sum of x[i]^2 in double, in lanes */
CPU_VECTOR_LOOP static double sumsq_lanes(const float *x, size_t n)
{
    double lane[CPU_LANES] = {0};
    size_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++)
            lane[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++)
        lane[0] += (double)x[i] * x[i];
    double s = lane[0];
    for (int j = 1; j < CPU_LANES; j++)
        s += lane[j];
    return s;
}

static void sumsq_parts(void *p, long begin, long end, int tid)
{
    struct sumsq_args *a = p;
    (void)tid;
    for (long part = begin; part < end; part++) {
        size_t i0 = a->n * (size_t)part / SUMSQ_PARTS, i1 = a->n * (size_t)(part + 1) / SUMSQ_PARTS;
        a->part[part] = sumsq_lanes(a->x + i0, i1 - i0);
    }
}

double cpu_sumsq(struct dtrain_kernels *k, const float *x, size_t n)
{
    struct sumsq_args a = {.x = x, .n = n};
    cpu_parallel(k, SUMSQ_PARTS, n / SUMSQ_PARTS + 1, sumsq_parts, &a);
    double s = 0.0;
    for (int part = 0; part < SUMSQ_PARTS; part++)
        s += a.part[part];
    return s;
}
