/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Softmax + cross-entropy on the CPU, in place; see dtrain_kernels.h. */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <math.h>
#include <string.h>

struct xent_args {
    float *rows, *losses;
    const int32_t *targets;
    float dloss;
    int V, Vp;
};

static void xent_forward_rows(void *p, long begin, long end, int tid)
{
    const struct xent_args *a = p;
    (void)tid;
    for (long n = begin; n < end; n++) {
        float *row = a->rows + (size_t)n * a->Vp;
        float target_logit = row[a->targets[n]];
        float maxv = cpu_max_of(row, a->V);
        cpu_exp_shifted(row, a->V, maxv);
        float sum = cpu_sum_lanes(row, a->V);
        /* -log(e^(x_t - max) / sum), without the rounding of log(p). */
        a->losses[n] = logf(sum) - (target_logit - maxv);
        cpu_scale(row, a->V, 1.0f / sum);
        if (a->Vp > a->V)
            memset(row + a->V, 0, (size_t)(a->Vp - a->V) * sizeof(float));
    }
}

void cpu_softmax_xent_forward(struct dtrain_kernels *k, float *logits_probs, float *losses,
                              const int32_t *targets, int N, int V, int Vp)
{
    struct xent_args a = {.rows = logits_probs, .losses = losses, .targets = targets,
                          .V = V, .Vp = Vp};
    cpu_parallel(k, N, (size_t)Vp * 8, xent_forward_rows, &a);
}

static void xent_backward_rows(void *p, long begin, long end, int tid)
{
    const struct xent_args *a = p;
    (void)tid;
    for (long n = begin; n < end; n++) {
        float *row = a->rows + (size_t)n * a->Vp;
        for (int i = 0; i < a->V; i++)
            row[i] *= a->dloss;
        row[a->targets[n]] -= a->dloss;
        if (a->Vp > a->V)
            memset(row + a->V, 0, (size_t)(a->Vp - a->V) * sizeof(float));
    }
}

void cpu_softmax_xent_backward(struct dtrain_kernels *k, float *probs_dlogits,
                               const int32_t *targets, float dloss, int N, int V, int Vp)
{
    struct xent_args a = {.rows = probs_dlogits, .targets = targets, .dloss = dloss,
                          .V = V, .Vp = Vp};
    cpu_parallel(k, N, (size_t)Vp, xent_backward_rows, &a);
}
