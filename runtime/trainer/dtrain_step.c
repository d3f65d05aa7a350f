/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The step of the parallel trainer: this rank's 1F1B schedule, the tied
 * embedding, the data-parallel reduction and the update; see
 * dtrain_parallel.h (dtrain_ptrainer_step). */
#include "dtrain_ptrainer.h"
#include "parallel/dtrain_dp.h"
#include "parallel/dtrain_lora.h"
#include "parallel/dtrain_stage.h"
#include "parallel/dtrain_tp.h"
#include "ft/dtrain_watchdog.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void unit_done(void *ctx, int unit)
{
    if (ctx != NULL) /* LoRA: no data-parallel reduction of the frozen base */
        dtrain_dp_unit_ready(ctx, unit);
}

/* A pipeline neighbour's activation or gradient: the peer is the other
 * member of the 2-member PP_NEXT / PP_PREV communicator. */
static int p2p(struct dtrain_pcomm *c, int send, float *buf, size_t floats, const char *what, char *err,
               size_t errlen)
{
    int peer = 1 - dtrain_comm_rank(c->c);
    return send ? dtrain_pcomm_send(c, buf, floats, peer, what, err, errlen)
                : dtrain_pcomm_recv(c, buf, floats, peer, what, err, errlen);
}

/* This DP rank's rows of batch k (m micro-batches of b rows from row
 * dp_rank*m*b), in their places of the global batch's buffers; the other
 * rows are never read. */
void dtrain_ptrainer_read_rows(struct dtrain_ptrainer *t, const struct dtrain_tokens *data,
                               enum dtrain_data_order order, uint64_t seed, uint64_t k)
{
    int rows = t->cfg.micro_batches * t->micro_rows, row0 = t->layout.dp_rank * rows;
    size_t at = (size_t)row0 * t->cfg.seq;
    dtrain_tokens_rows(data, t->cfg.batch, t->cfg.seq, order, seed, k, row0, rows, t->inputs + at, t->targets + at);
}

/* A transfer to the next stage (to_next) or from/to the previous one.  With
 * V = 1 over the 2-member PP_NEXT / PP_PREV communicators; with V > 1 over
 * the PP group to stage s+1 or s-1 mod P (the wrap from the last stage to
 * stage 0 is a link too). */
int dtrain_ptrainer_transfer(struct dtrain_ptrainer *t, int send, int to_next, float *buf, size_t floats,
                             const char *what, char *err, size_t errlen)
{
    int P = t->layout.pp, s = t->layout.pp_rank;
    if (t->cfg.virtual_stages == 1)
        return p2p(to_next ? &t->next : &t->prev, send, buf, floats, what, err, errlen);
    int peer = to_next ? (s + 1) % P : (s + P - 1) % P;
    return send ? dtrain_pcomm_send(&t->pp, buf, floats, peer, what, err, errlen)
                : dtrain_pcomm_recv(&t->pp, buf, floats, peer, what, err, errlen);
}

void dtrain_ptrainer_set_watchdog(struct dtrain_ptrainer *t, struct dtrain_watchdog *w)
{
    t->wd = w;
}

static const char *const action_names[] = {
    [DTRAIN_PIPE_RECV_ACT] = "pipeline receive of the activation", [DTRAIN_PIPE_SEND_ACT] = "pipeline send of the activation",
    [DTRAIN_PIPE_RECV_GRAD] = "pipeline receive of the gradient", [DTRAIN_PIPE_SEND_GRAD] = "pipeline send of the gradient",
    [DTRAIN_PIPE_FORWARD] = "forward", [DTRAIN_PIPE_BACKWARD] = "backward",
};

void dtrain_ptrainer_set_inject(struct dtrain_ptrainer *t, const struct dtrain_inject_hooks *h)
{
    t->inject = h != NULL ? *h : (struct dtrain_inject_hooks){0};
}

/* Run this stage's 1F1B list (interleaved with V > 1: each action names its
 * chunk, 0 with V = 1) for the step's micro-batches. */
static int run_schedule(struct dtrain_ptrainer *t, double *loss_sum,
                        double *wait, double *compute, char *err, size_t errlen)
{
    int injected = 0;
    double scale = t->scaler.on ? t->scaler.scale : 1.0;
    const struct dtrain_bootstrap *L = &t->layout;
    struct dtrain_stage *st = t->stage;
    size_t act = dtrain_stage_act_floats(st);
    int T = t->cfg.seq, m = t->cfg.micro_batches;
    float dloss = (float)(scale / (double)((long)t->cfg.batch * T)); /* fp16: the scaled loss's */
    int rc = DTRAIN_OK;
    for (long a = 0; a < t->nactions && rc == DTRAIN_OK; a++) {
        const struct dtrain_pipe_action *x = &t->actions[a];
        double t0 = dtrain_clock_s();
        size_t row = ((size_t)L->dp_rank * m + (size_t)x->micro) * t->micro_rows * T;
        double part = 0.0;
        dtrain_watchdog_action(t->wd, action_names[x->op], x->micro);
        if (x->op == DTRAIN_PIPE_FORWARD && !injected++ && t->inject.first_forward != NULL)
            t->inject.first_forward(t->inject.ctx); /* fault injection: a slow or hung device */
        switch (x->op) {
        case DTRAIN_PIPE_RECV_ACT:
            rc = dtrain_ptrainer_transfer(t, 0, 0, dtrain_stage_chunk_input(st, x->slot, x->chunk), act,
                          "pipeline: receive activation", err, errlen);
            break;
        case DTRAIN_PIPE_SEND_ACT:
            rc = dtrain_ptrainer_transfer(t, 1, 1, dtrain_stage_chunk_output(st, x->slot, x->chunk), act,
                          "pipeline: send activation", err, errlen);
            break;
        case DTRAIN_PIPE_RECV_GRAD:
            rc = dtrain_ptrainer_transfer(t, 0, 1, dtrain_stage_chunk_grad(st, x->slot), act, "pipeline: receive gradient", err,
                          errlen);
            break;
        case DTRAIN_PIPE_SEND_GRAD:
            rc = dtrain_ptrainer_transfer(t, 1, 0, dtrain_stage_chunk_grad(st, x->slot), act, "pipeline: send gradient", err,
                          errlen);
            break;
        case DTRAIN_PIPE_FORWARD:
            if (x->chunk == 0) /* where the micro-batch enters the stage */
                rc = dtrain_stage_set_tokens(st, x->slot, t->inputs + row, t->targets + row, err, errlen);
            if (rc == DTRAIN_OK)
                rc = dtrain_stage_forward_chunk(st, x->slot, x->chunk, &part, err, errlen);
            *loss_sum += part;
            break;
        case DTRAIN_PIPE_BACKWARD:
            /* the last micro-batch's backward of a chunk finishes its
             * gradients: hand them to data parallelism unit by unit */
            rc = dtrain_stage_backward_chunk(st, x->slot, x->chunk, dloss, x->micro == m - 1 ? unit_done : NULL,
                                             t->dp, err, errlen);
            break;
        }
        double dt = dtrain_clock_s() - t0;
        if (x->op == DTRAIN_PIPE_FORWARD || x->op == DTRAIN_PIPE_BACKWARD)
            *compute += dt;
        else
            *wait += dt;
    }
    return rc;
}

/* P > 1: stage 0 and the last stage hold twin copies of wte; they swap
 * their gradients (sendrecv over the PP group) and each adds the other's
 * (a + b == b + a: both get the same bits) before the data-parallel
 * reduction, which is then the same on both, as is the update. */
static int tie_embedding(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_shard *s = &t->shard;
    size_t n = s->size[DTRAIN_MODEL_WTE];
    if (s->pp == 1 || n == 0 || s->model.untied_head) /* untied: the last stage has no wte */
        return DTRAIN_OK;
    float *g = dtrain_dp_wte_grads(t->dp, dtrain_stage_grads(t->stage));
    int other = s->has_embedding ? s->pp - 1 : 0;
    int rc = dtrain_pcomm_sendrecv(&t->pp, g, n, other, t->tie, n, other, "tied embedding: gradient exchange", err,
                                   errlen);
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(t->k, g, g, t->tie, n); /* g += tie, element by element */
    return DTRAIN_OK;
}

int dtrain_ptrainer_step(struct dtrain_ptrainer *t, struct dtrain_pstep_result *r,
                         char *err, size_t errlen)
{
    return dtrain_ptrainer_step_ctl(t, NULL, r, err, errlen);
}

static int kernels_ok(struct dtrain_ptrainer *t, char *err, size_t errlen);

/* This rank's part of the step up to the reduced gradients: its rows, the
 * schedule, the tied embedding and the data-parallel reduction, then the
 * kernels' error (they run asynchronously on a GPU: a failed one, a
 * launch, a device fault, out of memory, is known only now, before its
 * loss and gradients are trusted). */
static int forward_backward(struct dtrain_ptrainer *t, double *loss_sum, double *wait, double *compute, char *err,
                            size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    int rc;
    dtrain_ptrainer_read_rows(t, t->data, c->data_order, c->data_seed, t->data_batches);
    dtrain_stage_zero_grad(t->stage);
    if (t->lora != NULL) { /* the adapters alone have gradients: no tied embedding, no DP buckets */
        dtrain_lora_zero_grad(t->lora);
        if ((rc = run_schedule(t, loss_sum, wait, compute, err, errlen)) != DTRAIN_OK)
            return rc;
        dtrain_watchdog_action(t->wd, "LoRA: adapter gradient reduction", -1);
        if ((rc = dtrain_lora_reduce(t->lora, t->tp, &t->lora_dp, err, errlen)) != DTRAIN_OK)
            return rc;
        return kernels_ok(t, err, errlen);
    }
    dtrain_dp_begin_step(t->dp);
    if ((rc = run_schedule(t, loss_sum, wait, compute, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_watchdog_action(t->wd, "tied-embedding gradient exchange", -1);
    if ((rc = tie_embedding(t, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_watchdog_action(t->wd, "data-parallel gradient reduction", -1);
    dtrain_dp_unit_ready(t->dp, dtrain_shard_unit_of(&t->shard, DTRAIN_UNIT_WTE, 0));
    if ((rc = dtrain_dp_finish(t->dp, err, errlen)) != DTRAIN_OK)
        return rc;
    return kernels_ok(t, err, errlen);
}

/* The kernels' error, known only after a sync on a GPU. */
static int kernels_ok(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    dtrain_k_sync(t->k);
    char kerr[256];
    if (dtrain_kernels_error(t->k, kerr, sizeof kerr) != 0) {
        snprintf(err, errlen, "step %ld: the %s kernels failed: %s", t->step, dtrain_kernels_name(t->k), kerr);
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

/* What every rank adds to the step's sums: one all-gather of 32 bytes a
 * rank (the traffic model's step sums, dtrain_step_bytes.c), the stop
 * counts and background writes as integers beside the doubles. */
struct step_sums {
    double loss, norm_sumsq;
    int32_t term, usr1;
    int64_t writing;
};
_Static_assert(sizeof(struct step_sums) == 4 * sizeof(double), "the step's sums are 32 bytes a rank");

/* The loss (TP rank 0 of the last stage of each pipeline), the norm shares
 * and the control counts, added over the world in rank order: every rank
 * gets the same (the doubles from 0.0 in rank order, as
 * dtrain_comm_sum_doubles_ordered adds, so the same bits). */
static int sum_over_world(struct dtrain_ptrainer *t, struct dtrain_pstep_control *ctl, double loss_sum,
                          double sums[2], char *err, size_t errlen)
{
    const struct dtrain_shard *s = &t->shard;
    dtrain_comm *world = t->comms->group[DTRAIN_GROUP_WORLD];
    sums[0] = s->has_head && s->tp_rank == 0 ? loss_sum : 0.0;
    sums[1] = t->lora != NULL ? dtrain_lora_sumsq(t->lora, t->layout.dp_rank) : dtrain_dp_norm_sumsq(t->dp);
    if (ctl == NULL)
        return dtrain_pcomm_sum_doubles(world, sums, sums, 2, "loss and gradient norm", err, errlen);
    struct step_sums mine = {sums[0], sums[1], ctl->term, ctl->usr1, ctl->writing};
    if (t->inject.poison_loss != NULL && t->inject.poison_loss(t->inject.ctx))
        mine.loss = NAN; /* fault injection */
    int n = dtrain_comm_size(world);
    struct step_sums *all = malloc((size_t)n * sizeof *all);
    if (all == NULL) {
        snprintf(err, errlen, "loss and gradient norm: out of memory for %d ranks' sums", n);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = dtrain_pcomm_status(world, dtrain_comm_all_gather_bytes(world, &mine, all, sizeof mine),
                                 "loss and gradient norm", err, errlen);
    if (rc == DTRAIN_OK) {
        double loss = 0.0, norm_sumsq = 0.0;
        int64_t term = 0, usr1 = 0, writing = 0;
        for (int r = 0; r < n; r++) {
            loss += all[r].loss;
            norm_sumsq += all[r].norm_sumsq;
            term += all[r].term;
            usr1 += all[r].usr1;
            writing += all[r].writing;
        }
        sums[0] = loss;
        sums[1] = norm_sumsq;
        ctl->term = (int32_t)term;
        ctl->usr1 = (int32_t)usr1;
        ctl->writing = writing;
    }
    free(all);
    return rc;
}

/* A step that makes no update (an fp16 overflow: overflow; a non-finite
 * loss or norm: skipped): every rank saw the same sums, so every rank
 * does the same; the batch is consumed, the step is not. */
static void no_update(struct dtrain_ptrainer *t, struct dtrain_pstep_result *r, float loss, double norm)
{
    r->base.step = t->step;
    r->base.loss = loss;
    r->base.grad_norm = norm;
    t->data_batches++;
}

/* The step's figures, after the update. */
static void fill_result(struct dtrain_ptrainer *t, struct dtrain_pstep_result *r, float loss, double lr, double norm,
                        double seconds, const double times[3])
{
    const struct dtrain_train_config *c = &t->cfg;
    r->base.step = t->step;
    r->base.loss = loss;
    r->base.lr = lr;
    r->base.grad_norm = norm;
    r->base.ms = 1e3 * seconds;
    r->base.tokens_per_s = (double)c->batch * c->seq / seconds;
    r->base.gflops = t->flops_per_step / seconds * 1e-9;
    r->base.has_val_loss = 0; /* the loop validates after the step, when due */
    r->base.mfu = dtrain_mfu(&t->peak_flops, t->peak_measured, t->flops_per_step / seconds / t->layout.world_size);
    char why[320];
    if (t->layout.rank == 0 &&
        dtrain_mfu_peak_warning(r->base.mfu, t->peak_measured, t->peak_flops, t->step, &t->peak_warned, why,
                                sizeof why)) {
        fprintf(stderr, "%s: warning: %s\n", t->prog != NULL ? t->prog : "dtrain", why);
        fflush(stderr);
    }
    r->pipe_wait_ms = 1e3 * times[0];
    r->compute_ms = 1e3 * times[1];
    r->tp_comm_ms = 1e3 * (dtrain_tp_comm_seconds(t->tp) - times[2]);
    r->dp_exposed_ms = t->dp != NULL ? 1e3 * dtrain_dp_exposed_seconds(t->dp) : 0.0;
    r->dp_gather_ms = t->dp != NULL ? 1e3 * dtrain_dp_gather_seconds(t->dp) : 0.0;
    r->dp_prefetched = t->dp != NULL ? dtrain_dp_prefetched(t->dp) : 0;
}

int dtrain_ptrainer_step_ctl(struct dtrain_ptrainer *t, struct dtrain_pstep_control *ctl,
                             struct dtrain_pstep_result *r, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    int rc;
    double t0 = dtrain_clock_s(), wait = 0.0, compute = 0.0, loss_sum = 0.0, tp0 = dtrain_tp_comm_seconds(t->tp);
    if (t->run_start == 0.0) {
        t->run_start = t0;
        t->first_step = t->step;
    }
    if ((rc = forward_backward(t, &loss_sum, &wait, &compute, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_watchdog_action(t->wd, "sum of the loss and gradient norm", -1);
    double all[2];
    if ((rc = sum_over_world(t, ctl, loss_sum, all, err, errlen)) != DTRAIN_OK)
        return rc;
    float loss = (float)(all[0] / ((double)c->batch * c->seq));
    double scale = t->scaler.on ? t->scaler.scale : 1.0;
    double norm = sqrt(all[1]) / scale; /* of the unscaled gradients */
    r->loss_scale = scale;
    r->overflow = 0;
    if (t->scaler.on && isfinite(loss) && !isfinite(norm)) {
        /* fp16 overflow: no update, back off */
        t->scaler.scale = scale / 2;
        t->scaler.good_steps = 0;
        t->scaler.overflow_steps++;
        r->overflow = 1;
        r->overflow_steps = (long)t->scaler.overflow_steps;
        no_update(t, r, loss, norm);
        return DTRAIN_OK;
    }
    if (ctl != NULL)
        ctl->skipped = !isfinite(loss) || !isfinite(norm);
    if (ctl != NULL && ctl->skipped) {
        memset(r, 0, sizeof *r);
        no_update(t, r, loss, norm);
        return DTRAIN_OK;
    }
    if (!isfinite(loss) || !isfinite(norm)) {
        snprintf(err, errlen, "step %ld: the %s is not finite: training diverged (lower the learning rate "
                 "or set grad_clip)", t->step, isfinite(loss) ? "gradient norm" : "loss");
        return DTRAIN_ERR_SYSTEM;
    }
    double lr = dtrain_lr_at(&c->optim, t->step);
    dtrain_watchdog_action(t->wd, "optimizer update", -1);
    /* the clip factor and, with fp16, the unscaling in one factor */
    float grad_scale = (float)(dtrain_clip_scale(&c->optim, norm) / scale);
    if (t->lora != NULL)
        dtrain_lora_update(t->lora, &c->optim, t->step, lr, grad_scale);
    else if ((rc = dtrain_dp_update(t->dp, &c->optim, t->step, lr, grad_scale, err, errlen)) != DTRAIN_OK)
        return rc;
    if (t->scaler.on && ++t->scaler.good_steps >= (uint64_t)c->loss_scale_window) {
        t->scaler.scale = scale * 2;
        t->scaler.good_steps = 0;
    }
    r->overflow_steps = (long)t->scaler.overflow_steps;
    dtrain_k_sync(t->k);
    const double times[3] = {wait, compute, tp0};
    fill_result(t, r, loss, lr, norm, dtrain_clock_s() - t0, times);
    t->step++;
    t->data_batches++;
    return DTRAIN_OK;
}
