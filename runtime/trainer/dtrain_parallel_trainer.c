/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The 3D-parallel trainer: one rank's stage, its 1F1B schedule, the tied
 * embedding, data parallelism, the step and the loop; see dtrain_parallel.h. */
#include "dtrain_parallel.h"
#include "dtrain_dp.h"
#include "dtrain_llmc.h"
#include "dtrain_metrics.h"
#include "dtrain_file.h"
#include "dtrain_pcomm.h"
#include "dtrain_pipeline.h"
#include "dtrain_shard.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_stage.h"
#include "dtrain_tp.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct dtrain_ptrainer {
    struct dtrain_train_config cfg;
    struct dtrain_bootstrap layout; /* sizes and ranks (no ids kept) */
    const struct dtrain_comms *comms;
    struct dtrain_kernels *k;
    struct dtrain_tokens *data;
    struct dtrain_shard shard;
    struct dtrain_tp *tp;
    struct dtrain_stage *stage;
    struct dtrain_dp *dp;
    struct dtrain_pipe_action *actions;
    long nactions;
    int micro_rows;              /* b = B / (D*m) */
    int32_t *inputs, *targets;   /* host: the global batch, B*T each */
    float *tie;                  /* P > 1, stages holding wte: the other end's wte gradient (kernels' memory) */
    struct dtrain_pcomm prev, next, pp; /* the pipeline's communicators on the kernels' memory */
    FILE *metrics;               /* rank 0, with --metrics */
    struct dtrain_prom prom;     /* rank 0, with --prom-textfile (prom_on) */
    int prom_on;
    long step;
    uint64_t data_batches;
    double flops_per_step;       /* of the whole job */
    struct dtrain_sckpt_scaler scaler; /* fp16: dynamic loss scaling (on 0 otherwise) */
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dtrain_parallel_check(const struct dtrain_train_config *c, int tp, int pp, int dp,
                          char *err, size_t errlen)
{
    struct dtrain_shard s;
    int rc;
    if (tp < 1 || pp < 1 || dp < 1) {
        snprintf(err, errlen, "layout T=%d P=%d D=%d: each must be at least 1", tp, pp, dp);
        return DTRAIN_ERR_INPUT;
    }
    if ((rc = dtrain_shard_plan(&c->model, tp, pp, 0, 0, &s, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->precision == DTRAIN_PRECISION_FP16 && strcmp(c->backend, "cpu") != 0) {
        snprintf(err, errlen, "--precision fp16 is emulated on the cpu kernels only (the %s kernels have no fp16 "
                 "GEMMs here): use --backend cpu, or --precision bf16 on %s", c->backend, c->backend);
        return DTRAIN_ERR_INPUT;
    }
    if (c->zero_stage == 3) {
        snprintf(err, errlen, "--zero-stage 3 (sharded parameters, FSDP) is not built in this version: use "
                 "--zero-stage 2 (gradients and AdamW state sharded over the D ranks)");
        return DTRAIN_ERR_INPUT;
    }
    long split = (long)dp * c->micro_batches;
    if (c->batch % split != 0) {
        snprintf(err, errlen, "batch %d does not split into D=%d data-parallel ranks x %d micro-batches: "
                 "make --batch a multiple of %ld (or change --micro-batches)", c->batch, dp,
                 c->micro_batches, split);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

/* The whole model from the seed or the llm.c file, this rank's slice of it. */
static int init_params(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    size_t n = dtrain_gpt2_param_count(&t->cfg.model);
    float *whole = malloc(n * sizeof(float)), *local = malloc((t->shard.count + 1) * sizeof(float));
    int rc = DTRAIN_OK;
    if (whole == NULL || local == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of the %zu parameters", n);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    if (t->cfg.init_llmc[0] != '\0')
        rc = dtrain_llmc_load(t->cfg.init_llmc, &t->cfg.model, whole, err, errlen);
    else
        dtrain_gpt2_init_params(&t->cfg.model, t->cfg.seed, whole);
    if (rc == DTRAIN_OK) {
        dtrain_shard_scatter(&t->shard, whole, local);
        dtrain_k_upload(t->k, dtrain_stage_params(t->stage), local, t->shard.count * sizeof(float));
    }
out:
    free(whole);
    free(local);
    return rc;
}

int dtrain_ptrainer_create(const struct dtrain_train_config *c, const struct dtrain_bootstrap *bs,
                           const struct dtrain_comms *comms, struct dtrain_ptrainer **out,
                           char *err, size_t errlen)
{
    int rc;
    uint64_t nbatches;
    *out = NULL;
    if ((rc = dtrain_parallel_check(c, bs->tp, bs->pp, bs->dp, err, errlen)) != DTRAIN_OK)
        return rc;
    struct dtrain_ptrainer *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    t->cfg = *c;
    t->layout = *bs;
    t->comms = comms;
    int B = c->batch, T = c->seq, m = c->micro_batches;
    t->micro_rows = B / (bs->dp * m);
    if ((rc = dtrain_shard_plan(&c->model, bs->tp, bs->pp, bs->tp_rank, bs->pp_rank, &t->shard,
                                err, errlen)) != DTRAIN_OK)
        goto fail;
    struct dtrain_kernels_options kopt = {.threads = c->threads, .precision = c->precision};
    if (dtrain_kernels_create(c->backend, &kopt, &t->k, err, errlen) != 0) {
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    if ((rc = dtrain_pcomm_init(&t->prev, t->k, comms->group[DTRAIN_GROUP_PP_PREV], err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_pcomm_init(&t->next, t->k, comms->group[DTRAIN_GROUP_PP_NEXT], err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_pcomm_init(&t->pp, t->k, comms->group[DTRAIN_GROUP_PP], err, errlen)) != DTRAIN_OK)
        goto fail;
    if ((rc = dtrain_tokens_open(c->data, &t->data, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_tokens_batches(t->data, B, T, &nbatches, err, errlen)) != DTRAIN_OK)
        goto fail;
    if (dtrain_tokens_max_id(t->data) >= c->model.vocab_size) {
        snprintf(err, errlen, "token file %s holds token id %d, outside the model's vocabulary 0..%d: use a "
                 "larger model.vocab_size", c->data, dtrain_tokens_max_id(t->data), c->model.vocab_size - 1);
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    int slots;
    t->actions = malloc(DTRAIN_PIPE_MAX_ACTIONS(m) * sizeof *t->actions);
    if (t->actions == NULL ||
        (t->nactions = dtrain_pipe_schedule(bs->pp, bs->pp_rank, m, t->actions, DTRAIN_PIPE_MAX_ACTIONS(m),
                                            &slots)) < 0) {
        snprintf(err, errlen, "out of memory for the pipeline schedule of %d micro-batches", m);
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    int N = t->micro_rows * T;
    if ((rc = dtrain_tp_create(t->k, comms->group[DTRAIN_GROUP_TP], c->model.vocab_size, t->shard.vocab_rows,
                               t->shard.vocab_begin, N, &t->tp, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_stage_create(t->k, &t->shard, t->tp, t->micro_rows, T, slots,
                                  (enum dtrain_recompute)c->recompute, &t->stage, err, errlen)) != DTRAIN_OK)
        goto fail;
    struct dtrain_dp_options dopt = {
        .zero_stage = c->zero_stage, .overlap = c->dp_overlap,
        .bucket_floats = (size_t)(c->bucket_mb * 1e6 / sizeof(float)) + 1,
    };
    if ((rc = dtrain_dp_create(t->k, comms->group[DTRAIN_GROUP_DP], &t->shard, dtrain_stage_params(t->stage),
                               dtrain_stage_grads(t->stage), &dopt, &t->dp, err, errlen)) != DTRAIN_OK)
        goto fail;
    t->inputs = malloc((size_t)B * T * sizeof(int32_t));
    t->targets = malloc((size_t)B * T * sizeof(int32_t));
    size_t wte = t->shard.size[DTRAIN_GPT2_WTE];
    if (bs->pp > 1 && wte > 0)
        t->tie = dtrain_k_alloc(t->k, wte * sizeof(float));
    if (t->inputs == NULL || t->targets == NULL || (bs->pp > 1 && wte > 0 && t->tie == NULL)) {
        snprintf(err, errlen, "out of memory");
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    if ((rc = init_params(t, err, errlen)) != DTRAIN_OK)
        goto fail;
    /* here, so that a bad path is refused with every rank's agreement; not
     * truncated yet: a resumed run keeps the lines of the steps before it
     * (dtrain_ptrainer_metrics_from) */
    if (bs->rank == 0 && c->metrics[0] != '\0') {
        /* Never a blocking open, only a regular file (checked on the fd:
         * the path may have changed since the config's check). */
        int fd = dtrain_open_regular(c->metrics, O_RDWR | O_CREAT | O_APPEND, "metrics file", NULL, err, errlen);
        if (fd >= 0 && (t->metrics = fdopen(fd, "a+")) == NULL) {
            snprintf(err, errlen, "cannot open metrics file %s: %s", c->metrics, strerror(errno));
            close(fd);
        }
        if (t->metrics == NULL) {
            rc = DTRAIN_ERR_INPUT;
            goto fail;
        }
    }
    if (bs->rank == 0 && c->prom_textfile[0] != '\0') {
        if ((rc = dtrain_prom_init(&t->prom, c->prom_textfile, err, errlen)) != DTRAIN_OK)
            goto fail;
        t->prom_on = 1;
    }
    t->flops_per_step = dtrain_gpt2_flops_per_step(&c->model, B, T);
    if (dtrain_kernels_precision(t->k) == DTRAIN_PRECISION_FP16)
        t->scaler = (struct dtrain_sckpt_scaler){1, c->loss_scale, 0, 0};
    if (c->memory_report)
        dtrain_ptrainer_memory_line(t, stdout);
    *out = t;
    return DTRAIN_OK;
fail:
    dtrain_ptrainer_destroy(t);
    return rc;
}

void dtrain_ptrainer_destroy(struct dtrain_ptrainer *t)
{
    if (t == NULL)
        return;
    dtrain_dp_destroy(t->dp);
    dtrain_stage_destroy(t->stage);
    dtrain_tp_destroy(t->tp);
    free(t->actions);
    free(t->inputs);
    free(t->targets);
    if (t->k != NULL)
        dtrain_k_free(t->k, t->tie);
    dtrain_pcomm_release(&t->prev);
    dtrain_pcomm_release(&t->next);
    dtrain_pcomm_release(&t->pp);
    if (t->metrics != NULL)
        fclose(t->metrics);
    dtrain_tokens_close(t->data);
    dtrain_kernels_destroy(t->k);
    free(t);
}

long dtrain_ptrainer_steps_done(const struct dtrain_ptrainer *t) { return t->step; }

uint64_t dtrain_ptrainer_data_batches(const struct dtrain_ptrainer *t) { return t->data_batches; }

void dtrain_ptrainer_set_position(struct dtrain_ptrainer *t, long step, uint64_t data_batches)
{
    t->step = step;
    t->data_batches = data_batches;
}

const struct dtrain_shard *dtrain_ptrainer_shard(const struct dtrain_ptrainer *t) { return &t->shard; }

struct dtrain_dp *dtrain_ptrainer_dp(struct dtrain_ptrainer *t) { return t->dp; }

struct dtrain_kernels *dtrain_ptrainer_kernels(struct dtrain_ptrainer *t) { return t->k; }

float *dtrain_ptrainer_params(struct dtrain_ptrainer *t) { return dtrain_stage_params(t->stage); }

size_t dtrain_ptrainer_local_params(struct dtrain_ptrainer *t, const float **params)
{
    *params = dtrain_stage_params(t->stage);
    return t->shard.count;
}

void dtrain_ptrainer_memory(const struct dtrain_ptrainer *t, struct dtrain_ptrainer_memory *m)
{
    struct dtrain_stage_memory sm;
    struct dtrain_dp_memory dm;
    dtrain_stage_memory(t->stage, &sm);
    dtrain_dp_memory(t->dp, &dm);
    size_t n = t->shard.count, D = (size_t)t->layout.dp, f = sizeof(float);
    int stage = t->cfg.zero_stage, local = D == 1 && stage == 0;
    m->params = sm.param_bytes;
    m->grads = sm.grad_bytes;
    m->reduced_grads = dm.grad_bytes;
    m->optimizer = dm.optimizer_bytes;
    m->activations = sm.activation_bytes;
    m->comm = dm.comm_bytes + (t->tie != NULL ? t->shard.size[DTRAIN_GPT2_WTE] * f : 0);
    m->model_state = m->params + m->grads + m->reduced_grads + m->optimizer;
    m->model_state_formula = 4 * n + 4 * n + (local ? 0 : stage >= 2 ? 4 * n / D : 4 * n) +
                             (stage >= 1 ? 8 * n / D : 8 * n);
    (void)f;
}

void dtrain_ptrainer_memory_line(const struct dtrain_ptrainer *t, FILE *out)
{
    static const char *const modes[] = {"none", "selective", "full"};
    struct dtrain_ptrainer_memory m;
    dtrain_ptrainer_memory(t, &m);
    const struct dtrain_bootstrap *L = &t->layout;
    fprintf(out, "{\"memory\": {\"rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"dp_rank\": %d, "
            "\"zero_stage\": %d, \"recompute\": \"%s\", \"local_params\": %zu, \"params_bytes\": %zu, "
            "\"grads_bytes\": %zu, \"reduced_grads_bytes\": %zu, \"optimizer_bytes\": %zu, "
            "\"activations_bytes\": %zu, \"comm_bytes\": %zu, \"model_state_bytes\": %zu, "
            "\"model_state_formula_bytes\": %zu}}\n", L->rank, L->tp_rank, L->pp_rank, L->dp_rank,
            t->cfg.zero_stage, modes[t->cfg.recompute], t->shard.count, m.params, m.grads, m.reduced_grads,
            m.optimizer, m.activations, m.comm, m.model_state, m.model_state_formula);
    fflush(out);
}

void dtrain_ptrainer_scaler(const struct dtrain_ptrainer *t, struct dtrain_sckpt_scaler *s) { *s = t->scaler; }

void dtrain_ptrainer_set_scaler(struct dtrain_ptrainer *t, const struct dtrain_sckpt_scaler *s)
{
    if (t->scaler.on && s->on)
        t->scaler = *s;
}

/* ------------------------------------------------------------ the step */

static void unit_done(void *ctx, int unit)
{
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

/* Run this stage's 1F1B list for the step's micro-batches. */
static int run_schedule(struct dtrain_ptrainer *t, double *loss_sum, double *wait, double *compute,
                        char *err, size_t errlen)
{
    double scale = t->scaler.on ? t->scaler.scale : 1.0;
    const struct dtrain_bootstrap *L = &t->layout;
    struct dtrain_pcomm *prev = &t->prev, *next = &t->next;
    size_t act = dtrain_stage_act_floats(t->stage);
    int T = t->cfg.seq, m = t->cfg.micro_batches;
    float dloss = (float)(scale / (double)((long)t->cfg.batch * T)); /* fp16: the scaled loss's */
    int rc = DTRAIN_OK;
    for (long a = 0; a < t->nactions && rc == DTRAIN_OK; a++) {
        const struct dtrain_pipe_action *x = &t->actions[a];
        double t0 = now_seconds();
        size_t row = ((size_t)L->dp_rank * m + (size_t)x->micro) * t->micro_rows * T;
        double part = 0.0;
        switch (x->op) {
        case DTRAIN_PIPE_RECV_ACT:
            rc = p2p(prev, 0, dtrain_stage_input(t->stage, x->slot), act, "pipeline: receive activation", err, errlen);
            break;
        case DTRAIN_PIPE_SEND_ACT:
            rc = p2p(next, 1, dtrain_stage_output(t->stage, x->slot), act, "pipeline: send activation", err, errlen);
            break;
        case DTRAIN_PIPE_RECV_GRAD:
            rc = p2p(next, 0, dtrain_stage_grad(t->stage), act, "pipeline: receive gradient", err, errlen);
            break;
        case DTRAIN_PIPE_SEND_GRAD:
            rc = p2p(prev, 1, dtrain_stage_grad(t->stage), act, "pipeline: send gradient", err, errlen);
            break;
        case DTRAIN_PIPE_FORWARD:
            rc = dtrain_stage_set_tokens(t->stage, x->slot, t->inputs + row, t->targets + row, err, errlen);
            if (rc == DTRAIN_OK)
                rc = dtrain_stage_forward(t->stage, x->slot, &part, err, errlen);
            *loss_sum += part;
            break;
        case DTRAIN_PIPE_BACKWARD:
            /* the last micro-batch's backward finishes the gradients: hand
             * them to data parallelism unit by unit */
            rc = dtrain_stage_backward(t->stage, x->slot, dloss, x->micro == m - 1 ? unit_done : NULL, t->dp,
                                       err, errlen);
            break;
        }
        double dt = now_seconds() - t0;
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
    size_t n = s->size[DTRAIN_GPT2_WTE];
    if (s->pp == 1 || n == 0)
        return DTRAIN_OK;
    float *g = dtrain_shard_tensor(s, dtrain_stage_grads(t->stage), DTRAIN_GPT2_WTE);
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

int dtrain_ptrainer_step_ctl(struct dtrain_ptrainer *t, struct dtrain_pstep_control *ctl,
                             struct dtrain_pstep_result *r, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    const struct dtrain_shard *s = &t->shard;
    int rc;
    double t0 = now_seconds(), wait = 0.0, compute = 0.0, loss_sum = 0.0;

    dtrain_tokens_batch(t->data, c->batch, c->seq, c->data_order, c->data_seed, t->data_batches,
                        t->inputs, t->targets);
    dtrain_stage_zero_grad(t->stage);
    dtrain_dp_begin_step(t->dp);
    if ((rc = run_schedule(t, &loss_sum, &wait, &compute, err, errlen)) != DTRAIN_OK)
        return rc;
    if ((rc = tie_embedding(t, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_dp_unit_ready(t->dp, dtrain_shard_unit_of(s, DTRAIN_UNIT_WTE, 0));
    if ((rc = dtrain_dp_finish(t->dp, err, errlen)) != DTRAIN_OK)
        return rc;

    /* The loss (TP rank 0 of the last stage of each pipeline) and the norm
     * shares, added over the world in rank order: every rank gets the same. */
    double mine[3] = {s->has_head && s->tp_rank == 0 ? loss_sum : 0.0, dtrain_dp_norm_sumsq(t->dp),
                      ctl != NULL ? ctl->flags : 0.0}, all[3];
    if (ctl != NULL && ctl->poison_loss)
        mine[0] = NAN; /* fault injection */
    if ((rc = dtrain_pcomm_sum_doubles(t->comms->group[DTRAIN_GROUP_WORLD], mine, all, ctl != NULL ? 3 : 2,
                                       "loss and gradient norm", err, errlen)) != DTRAIN_OK)
        return rc;
    float loss = (float)(all[0] / ((double)c->batch * c->seq));
    double scale = t->scaler.on ? t->scaler.scale : 1.0;
    double norm = sqrt(all[1]) / scale; /* of the unscaled gradients */
    r->loss_scale = scale;
    r->overflow = 0;
    if (t->scaler.on && isfinite(loss) && !isfinite(norm)) {
        /* fp16 overflow (every rank saw the same sums): no update, back off */
        t->scaler.scale = scale / 2;
        t->scaler.good_steps = 0;
        t->scaler.overflow_steps++;
        if (ctl != NULL)
            ctl->flags = all[2];
        r->base.step = t->step;
        r->base.loss = loss;
        r->base.grad_norm = norm;
        r->overflow = 1;
        r->overflow_steps = (long)t->scaler.overflow_steps;
        t->data_batches++;
        return DTRAIN_OK;
    }
    if (ctl != NULL) {
        ctl->flags = all[2];
        ctl->skipped = !isfinite(loss) || !isfinite(norm);
    }
    if (ctl != NULL && ctl->skipped) {
        /* no update: every rank saw the same sums, so every rank skips */
        memset(r, 0, sizeof *r);
        r->base.step = t->step;
        r->base.loss = loss;
        r->base.grad_norm = norm;
        t->data_batches++;
        return DTRAIN_OK;
    }
    if (!isfinite(loss) || !isfinite(norm)) {
        snprintf(err, errlen, "step %ld: the %s is not finite: training diverged (lower the learning rate "
                 "or set grad_clip)", t->step, isfinite(loss) ? "gradient norm" : "loss");
        return DTRAIN_ERR_SYSTEM;
    }
    double lr = dtrain_lr_at(&c->optim, t->step);
    /* the clip factor and, with fp16, the unscaling in one factor */
    if ((rc = dtrain_dp_update(t->dp, &c->optim, t->step, lr, (float)(dtrain_clip_scale(&c->optim, norm) / scale),
                               err, errlen)) != DTRAIN_OK)
        return rc;
    if (t->scaler.on && ++t->scaler.good_steps >= (uint64_t)c->loss_scale_window) {
        t->scaler.scale = scale * 2;
        t->scaler.good_steps = 0;
    }
    r->overflow_steps = (long)t->scaler.overflow_steps;
    dtrain_k_sync(t->k);
    double seconds = now_seconds() - t0;

    r->base.step = t->step;
    r->base.loss = loss;
    r->base.lr = lr;
    r->base.grad_norm = norm;
    r->base.ms = 1e3 * seconds;
    r->base.tokens_per_s = (double)c->batch * c->seq / seconds;
    r->base.gflops = t->flops_per_step / seconds * 1e-9;
    r->pipe_wait_ms = 1e3 * wait;
    r->compute_ms = 1e3 * compute;
    r->dp_exposed_ms = 1e3 * dtrain_dp_exposed_seconds(t->dp);
    t->step++;
    t->data_batches++;
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ gathering, the loop */

int dtrain_ptrainer_gather_params(struct dtrain_ptrainer *t, float *whole, char *err, size_t errlen)
{
    const struct dtrain_bootstrap *L = &t->layout;
    dtrain_comm *world = t->comms->group[DTRAIN_GROUP_WORLD];
    int rc = DTRAIN_OK;
    if (L->rank != 0 && L->dp_rank != 0)
        return DTRAIN_OK;
    /* this rank's shard, from backend memory */
    float *local = malloc((t->shard.count + 1) * sizeof(float));
    if (local == NULL) {
        snprintf(err, errlen, "gathering the model: out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    dtrain_k_download(t->k, local, dtrain_stage_params(t->stage), t->shard.count * sizeof(float));
    if (L->rank != 0) {
        rc = dtrain_pcomm_status(world, dtrain_comm_send(world, local, t->shard.count * sizeof(float), 0),
                                 "gathering the model: send", err, errlen);
        free(local);
        return rc;
    }
    dtrain_shard_gather(&t->shard, local, whole);
    free(local);
    /* the other stages' and TP ranks' shards of DP replica 0 */
    for (int pp = 0; pp < L->pp && rc == DTRAIN_OK; pp++) {
        for (int tp = 0; tp < L->tp && rc == DTRAIN_OK; tp++) {
            int from = tp + L->tp * L->dp * pp; /* dp = 0 */
            if (from == 0)
                continue;
            struct dtrain_shard s;
            if ((rc = dtrain_shard_plan(&t->cfg.model, L->tp, L->pp, tp, pp, &s, err, errlen)) != DTRAIN_OK)
                break;
            float *buf = malloc((s.count + 1) * sizeof(float));
            if (buf == NULL) {
                snprintf(err, errlen, "gathering the model: out of memory");
                return DTRAIN_ERR_SYSTEM;
            }
            rc = dtrain_pcomm_status(world, dtrain_comm_recv(world, buf, s.count * sizeof(float), from),
                                     "gathering the model: receive", err, errlen);
            if (rc == DTRAIN_OK)
                dtrain_shard_gather(&s, buf, whole);
            free(buf);
        }
    }
    return rc;
}

static int save_llmc(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    size_t n = dtrain_gpt2_param_count(&t->cfg.model);
    float *whole = t->layout.rank == 0 ? malloc(n * sizeof(float)) : NULL;
    if (t->layout.rank == 0 && whole == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of the %zu parameters", n);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = dtrain_ptrainer_gather_params(t, whole, err, errlen);
    if (rc == DTRAIN_OK && t->layout.rank == 0)
        rc = dtrain_llmc_save(t->cfg.save_llmc, &t->cfg.model, whole, err, errlen);
    free(whole);
    return rc;
}

static void write_metrics(const struct dtrain_ptrainer *t, FILE *f, const struct dtrain_pstep_result *r)
{
    fprintf(f, "{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.3f, "
            "\"tokens_per_s\": %.1f, \"gflops\": %.3f, \"pipe_wait_ms\": %.3f, \"dp_exposed_ms\": %.3f, ",
            r->base.step, (double)r->base.loss, r->base.lr, r->base.grad_norm, r->base.ms,
            r->base.tokens_per_s, r->base.gflops, r->pipe_wait_ms, r->dp_exposed_ms);
    if (t->scaler.on)
        fprintf(f, "\"loss_scale\": %.9g, \"overflow_steps\": %ld, ", r->loss_scale, r->overflow_steps);
    if (t->cfg.memory_report) { /* rank 0's memory (--memory-report) */
        struct dtrain_ptrainer_memory m;
        dtrain_ptrainer_memory(t, &m);
        fprintf(f, "\"model_state_bytes\": %zu, \"activations_bytes\": %zu, \"comm_bytes\": %zu, ",
                m.model_state, m.activations, m.comm);
    }
    fprintf(f, "\"time\": %.3f}\n", dtrain_metrics_wall_clock());
    fflush(f);
}

int dtrain_ptrainer_metrics_from(struct dtrain_ptrainer *t, long step, char *err, size_t errlen)
{
    struct stat st;
    if (t->metrics == NULL || fstat(fileno(t->metrics), &st) != 0 || !S_ISREG(st.st_mode))
        return DTRAIN_OK; /* a pipe or terminal: nothing to cut */
    /* keep the lines of steps before `step`: they start with {"step": N */
    char line[1024];
    long keep = 0, n;
    rewind(t->metrics);
    while (fgets(line, sizeof line, t->metrics) != NULL && strchr(line, '\n') != NULL &&
           sscanf(line, "{\"step\": %ld,", &n) == 1 && n < step)
        keep = ftell(t->metrics);
    if (fflush(t->metrics) != 0 || ftruncate(fileno(t->metrics), keep) != 0 || fseek(t->metrics, 0, SEEK_END) != 0) {
        snprintf(err, errlen, "cannot rewrite metrics file %s: %s", t->cfg.metrics, strerror(errno));
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

int dtrain_ptrainer_log_step(struct dtrain_ptrainer *t, FILE *progress, const struct dtrain_pstep_result *r,
                             char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    if (t->layout.rank == 0 && progress != NULL && c->log_every > 0 &&
        (r->base.step % c->log_every == 0 || r->base.step + 1 == c->steps)) {
        fprintf(progress, "step %5ld/%ld | loss %.6f | lr %.3e | norm %.4f | %8.2f ms | %8.0f tok/s | "
                "%7.2f GFLOP/s\n", r->base.step, c->steps, (double)r->base.loss, r->base.lr, r->base.grad_norm,
                r->base.ms, r->base.tokens_per_s, r->base.gflops);
        fflush(progress);
    }
    if (t->metrics != NULL) {
        write_metrics(t, t->metrics, r);
        if (ferror(t->metrics)) {
            snprintf(err, errlen, "cannot write metrics file %s", c->metrics);
            return DTRAIN_ERR_SYSTEM;
        }
    }
    if (t->prom_on)
        return dtrain_prom_update(&t->prom, &r->base, c->steps, r->base.step + 1 == c->steps, err, errlen);
    return DTRAIN_OK;
}

int dtrain_ptrainer_finish(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    int rc;
    if (c->save_llmc[0] != '\0' && (rc = save_llmc(t, err, errlen)) != DTRAIN_OK)
        return rc;
    if (t->metrics != NULL) {
        int bad = fclose(t->metrics) != 0;
        t->metrics = NULL;
        if (bad) {
            snprintf(err, errlen, "cannot write metrics file %s", c->metrics);
            return DTRAIN_ERR_SYSTEM;
        }
    }
    return DTRAIN_OK;
}
