/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The 3D-parallel trainer: the layout check, creation (one rank's stage,
 * schedule, tensor and data parallelism, data), the accessors and the
 * memory report; see dtrain_parallel.h and, for the other files of the
 * trainer, dtrain_ptrainer.h. */
#include "dtrain_ptrainer.h"
#include "parallel/dtrain_dp.h"
#include "parallel/dtrain_lora.h"
#include "dtrain_llmc.h"
#include "model/dtrain_hf_model.h"
#include "parallel/dtrain_stage.h"
#include "parallel/dtrain_tp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_N 512       /* the start-up GEMM that measures a peak: N x N x N */
#define GEMM_MIN_S 0.2   /* timed for at least this long */

/* ZeRO-3 shards each gradient unit (a layer, wpe, wte, the final
 * LayerNorm) over the D ranks: each must hold at least D parameters on
 * every stage (TP rank 0's shard has the sizes of every TP rank's). */
static int zero3_check(const struct dtrain_train_config *c, int tp, int pp, int dp, char *err, size_t errlen)
{
    for (int s = 0; s < pp; s++) {
        struct dtrain_shard sh;
        struct dtrain_shard_range r[DTRAIN_SHARD_UNIT_RANGES];
        int rc = dtrain_shard_plan_v(&c->model, tp, pp, c->virtual_stages, 0, s, &sh, err, errlen);
        if (rc != DTRAIN_OK)
            return rc;
        for (int u = 0; u < dtrain_shard_units(&sh); u++) {
            size_t n = 0;
            for (int i = dtrain_shard_unit_ranges(&sh, u, r) - 1; i >= 0; i--)
                n += r[i].count;
            if (n < (size_t)dp) {
                snprintf(err, errlen, "--zero-stage 3 shards each layer (and wte, wpe, the final LayerNorm) over "
                         "the D=%d data-parallel ranks, but stage %d has one of %zu parameters per tensor-parallel "
                         "rank: use fewer data-parallel ranks or --zero-stage 2", dp, s, n);
                return DTRAIN_ERR_INPUT;
            }
        }
    }
    return DTRAIN_OK;
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
    int V = c->virtual_stages;
    if (V > 1 && (pp < 2 || c->model.num_layers % (pp * V) != 0 || c->micro_batches % pp != 0)) {
        snprintf(err, errlen, "--virtual-stages %d needs P >= 2 (here %d), P*V dividing the %d layers and "
                 "--micro-batches a multiple of P (here %d): change --virtual-stages, --micro-batches or the "
                 "layout", V, pp, c->model.num_layers, c->micro_batches);
        return DTRAIN_ERR_INPUT;
    }
    if (c->zero_stage == 3 && (rc = zero3_check(c, tp, pp, dp, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->sequence_parallel && (tp < 2 || c->seq % tp != 0)) {
        snprintf(err, errlen, "--sequence-parallel needs a tensor-parallel size T > 1 dividing --seq (here T=%d, "
                 "--seq %d): set T with dtrain-launch --tp or sbatch --dtrain-tp, make --seq a multiple of it, "
                 "or --sequence-parallel 0",
                 tp, c->seq);
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

struct identity_runs {
    size_t count;
    int same; /* every run at the same offset locally as in the whole model */
};

static void check_identity_run(void *ctx, const struct dtrain_shard_run *run)
{
    struct identity_runs *id = ctx;
    id->same &= run->local == run->whole;
    id->count += run->count;
}

/* The trainer's parameters when they are the whole model, in its order, in
 * host memory (the cpu backend, one rank, ZeRO-3 off), else NULL. */
static float *params_in_place(struct dtrain_ptrainer *t, size_t n)
{
    struct identity_runs id = {0, 1};
    if (!dtrain_kernels_host_memory(t->k) || t->shard.count != n || (t->dp != NULL && dtrain_dp_sharded_params(t->dp)))
        return NULL;
    dtrain_shard_for_each_run(&t->shard, check_identity_run, &id);
    return id.same && id.count == n ? dtrain_stage_params(t->stage) : NULL;
}

/* The whole model from the seed, the Hugging Face folder or the llm.c file,
 * this rank's slice of it.  Where the trainer holds the whole model in host
 * memory it is written there directly: the two host copies would add 8
 * bytes a parameter to the peak at start-up (bench/bench_fit.c found the
 * peak there, not in training). */
static int init_params(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    size_t n = dtrain_model_param_count(&t->cfg.model);
    float *in_place = params_in_place(t, n);
    float *whole = in_place != NULL ? in_place : malloc(n * sizeof(float));
    float *local = in_place != NULL ? NULL : malloc((t->shard.count + 1) * sizeof(float));
    int rc = DTRAIN_OK;
    if (whole == NULL || (in_place == NULL && local == NULL)) {
        snprintf(err, errlen, "out of memory for a host copy of the %zu parameters", n);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    if (t->cfg.init_hf[0] != '\0')
        rc = dtrain_hf_load_params(t->cfg.init_hf, &t->cfg.model, whole, err, errlen);
    else if (t->cfg.init_llmc[0] != '\0')
        rc = dtrain_llmc_load(t->cfg.init_llmc, &t->cfg.model, whole, err, errlen);
    else
        dtrain_model_init_params(&t->cfg.model, t->cfg.seed, whole);
    if (rc == DTRAIN_OK && in_place == NULL) {
        dtrain_shard_scatter(&t->shard, whole, local);
        if (t->dp != NULL && dtrain_dp_sharded_params(t->dp)) /* ZeRO-3: this rank's shares */
            dtrain_dp_params_upload(t->dp, local);
        else
            dtrain_k_upload(t->k, dtrain_stage_params(t->stage), local, t->shard.count * sizeof(float));
    }
    if (rc == DTRAIN_OK && t->cfg.base_dtype == DTRAIN_BASE_NF4) /* QLoRA: the linears' weights to NF4 */
        rc = dtrain_stage_quantize_base(t->stage, err, errlen);
out:
    if (in_place == NULL)
        free(whole);
    free(local);
    return rc;
}

/* The validation data: --val-data, or the tail of the training data
 * (--val-fraction, which the training batches then leave alone). */
static int open_val(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    uint64_t nb, tb;
    int rc;
    const char *what = c->val_data;
    if (c->val_fraction > 0.0) {
        what = "the held-out part of the training data";
        if ((rc = dtrain_tokens_split(t->data, c->val_fraction, &t->val, err, errlen)) != DTRAIN_OK)
            return rc;
        if (dtrain_tokens_batches(t->data, c->batch, c->seq, &tb, err, errlen) != DTRAIN_OK) {
            snprintf(err, errlen, "--val-fraction %g leaves %zu training tokens, fewer than one batch of %d x %d "
                     "needs: lower it", c->val_fraction, dtrain_tokens_count(t->data), c->batch, c->seq);
            return DTRAIN_ERR_INPUT;
        }
    } else if (c->val_data[0] != '\0') {
        if ((rc = dtrain_tokens_open(c->val_data, &t->val, err, errlen)) != DTRAIN_OK)
            return rc;
        if (dtrain_tokens_max_id(t->val) >= c->model.vocab_size) {
            snprintf(err, errlen, "validation token file %s holds token id %d, outside the model's vocabulary "
                     "0..%d", dtrain_tokens_max_id_file(t->val), dtrain_tokens_max_id(t->val), c->model.vocab_size - 1);
            return DTRAIN_ERR_INPUT;
        }
    } else {
        return DTRAIN_OK;
    }
    char why[256];
    if (dtrain_tokens_batches(t->val, c->batch, c->seq, &nb, why, sizeof why) != DTRAIN_OK) {
        snprintf(err, errlen, "validation data (%s): %s", what, why);
        return DTRAIN_ERR_INPUT;
    }
    t->val_batches = (uint64_t)c->val_batches < nb ? c->val_batches : (int)nb;
    return DTRAIN_OK;
}

/* The backend's GEMM rate (dtrain_k_matmul_forward of GEMM_N^3 in the
 * run's precision, input and output of the activations' type, as the
 * blocks' matmuls), FLOP/s, or 0 when the buffers cannot be had. */
static double measure_gemm(struct dtrain_kernels *k)
{
    size_t bytes = (size_t)GEMM_N * GEMM_N * sizeof(float);
    float *a = dtrain_k_alloc(k, bytes), *w = dtrain_k_alloc(k, bytes), *out = dtrain_k_alloc(k, bytes);
    enum dtrain_dtype act = dtrain_kernels_act_dtype(k);
    double rate = 0.0;
    if (a != NULL && w != NULL && out != NULL) {
        dtrain_k_zero(k, a, bytes);
        dtrain_k_zero(k, w, bytes);
        dtrain_k_matmul_forward(k, dtrain_tensor_of(act, out), dtrain_tensor_of(act, a), w, NULL, GEMM_N, GEMM_N,
                                GEMM_N); /* warm-up */
        dtrain_k_sync(k);
        double t0 = dtrain_clock_s(), dt = 0.0;
        long reps = 0;
        while (dt < GEMM_MIN_S && reps < 1000) {
            dtrain_k_matmul_forward(k, dtrain_tensor_of(act, out), dtrain_tensor_of(act, a), w, NULL, GEMM_N,
                                    GEMM_N, GEMM_N);
            dtrain_k_sync(k);
            reps++;
            dt = dtrain_clock_s() - t0;
        }
        rate = 2.0 * GEMM_N * GEMM_N * (double)GEMM_N * (double)reps / dt;
    }
    dtrain_k_free(k, a);
    dtrain_k_free(k, w);
    dtrain_k_free(k, out);
    return rate;
}

double dtrain_ptrainer_peak_flops(const struct dtrain_ptrainer *t, int *measured)
{
    *measured = t->peak_measured;
    return t->peak_flops;
}

/* --rank-metrics DIR: this rank's file; with it or straggler detection,
 * what gathers every rank's times. */

static int z3_acquire(void *ctx, int unit, int grads, struct dtrain_stage_unit *out, char *err, size_t errlen)
{
    return dtrain_dp_acquire(ctx, unit, grads, out, err, errlen);
}

static int z3_release(void *ctx, int unit, char *err, size_t errlen)
{
    return dtrain_dp_release(ctx, unit, err, errlen);
}

/* The training data (its token ids inside the vocabulary) and the validation data. */
static int open_data(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    uint64_t nbatches;
    int rc;
    if ((rc = dtrain_tokens_open(c->data, &t->data, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_tokens_batches(t->data, c->batch, c->seq, &nbatches, err, errlen)) != DTRAIN_OK)
        return rc;
    if (dtrain_tokens_max_id(t->data) >= c->model.vocab_size) {
        snprintf(err, errlen, "token file %s holds token id %d, outside the model's vocabulary 0..%d: use a "
                 "larger model.vocab_size", dtrain_tokens_max_id_file(t->data), dtrain_tokens_max_id(t->data),
                 c->model.vocab_size - 1);
        return DTRAIN_ERR_INPUT;
    }
    return open_val(t, err, errlen);
}

/* The pipeline schedule, tensor parallelism, the stage and data parallelism
 * (ZeRO-3: the stage's weights are dp's shares, gathered on use). */
/* LoRA: the adapters (PEFT's default, or --init-lora's) on the frozen
 * stage; no data-parallel object, the base having no gradients (the
 * adapters' all-reduce is dtrain_lora_reduce's).  This version trains at
 * fp32 without ZeRO. */
static int build_lora(struct dtrain_ptrainer *t, int N, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    struct dtrain_lora_spec spec;
    int rc;
    if (c->zero_stage != 0 || dtrain_kernels_act_dtype(t->k) != DTRAIN_F32) {
        snprintf(err, errlen, "LoRA trains at fp32 precision without ZeRO in this version: drop --zero-stage "
                 "or --precision, or --lora-rank");
        return DTRAIN_ERR_INPUT;
    }
    if ((rc = dtrain_pcomm_init(&t->lora_dp, t->k, t->comms->group[DTRAIN_GROUP_DP], err, errlen)) != DTRAIN_OK)
        return rc;
    if ((rc = dtrain_lora_spec_make(&c->model, c->lora_rank, c->lora_alpha, c->lora_targets, &spec, err, errlen)) !=
            DTRAIN_OK ||
        (rc = dtrain_lora_create(t->k, &t->shard, &spec, N, c->seed, &t->lora, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_stage_set_lora(t->stage, t->lora, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->init_lora[0] != '\0')
        return dtrain_lora_load_peft(t->lora, c->init_lora, err, errlen);
    return DTRAIN_OK;
}

static int build_stage(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    const struct dtrain_bootstrap *bs = &t->layout;
    const struct dtrain_comms *comms = t->comms;
    int rc, T = c->seq, m = c->micro_batches;
    int slots;
    size_t maxa = DTRAIN_PIPE_MAX_ACTIONS_V(m, c->virtual_stages);
    t->actions = malloc(maxa * sizeof *t->actions);
    if (t->actions == NULL ||
        (t->nactions = dtrain_pipe_schedule_v(bs->pp, c->virtual_stages, bs->pp_rank, m, t->actions, maxa,
                                              &slots)) < 0) {
        snprintf(err, errlen, "out of memory for the pipeline schedule of %d micro-batches", m);
        return DTRAIN_ERR_SYSTEM;
    }
    int N = t->micro_rows * T;
    if ((rc = dtrain_tp_create(t->k, comms->group[DTRAIN_GROUP_TP], c->model.vocab_size, t->shard.vocab_rows,
                               t->shard.vocab_begin, N, &t->tp, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_tp_set_sequence_parallel(t->tp, c->sequence_parallel, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_stage_create(t->k, &t->shard, t->tp, t->micro_rows, T, slots,
                                  (enum dtrain_recompute)c->recompute, &t->stage, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->lora_rank > 0)
        return build_lora(t, N, err, errlen);
    struct dtrain_dp_options dopt = {
        .zero_stage = c->zero_stage, .overlap = c->dp_overlap, .prefetch = c->zero_prefetch,
        .bucket_floats = (size_t)(c->bucket_mb * 1e6 / sizeof(float)) + 1,
    };
    if ((rc = dtrain_offload_parse(c->offload_optimizer, &dopt.offload, err, errlen)) != DTRAIN_OK)
        return rc;
    dopt.offload_params = strcmp(c->offload_params, "cpu") == 0;
    int z3 = c->zero_stage >= 3; /* the stage's weights are dp's shares, gathered on use */
    if ((rc = dtrain_dp_create(t->k, comms->group[DTRAIN_GROUP_DP], &t->shard, z3 ? NULL : dtrain_stage_params(t->stage),
                               z3 ? NULL : dtrain_stage_grads(t->stage), &dopt, &t->dp, err, errlen)) != DTRAIN_OK)
        return rc;
    if (z3) {
        struct dtrain_stage_source src = {z3_acquire, z3_release, t->dp};
        dtrain_stage_set_source(t->stage, &src);
    }
    return DTRAIN_OK;
}

int dtrain_ptrainer_create(const struct dtrain_train_config *c, const struct dtrain_bootstrap *bs,
                           const struct dtrain_comms *comms, struct dtrain_ptrainer **out,
                           char *err, size_t errlen)
{
    int rc;
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
    int B = c->batch, T = c->seq;
    t->micro_rows = B / (bs->dp * c->micro_batches);
    if ((rc = dtrain_shard_plan_v(&c->model, bs->tp, bs->pp, c->virtual_stages, bs->tp_rank, bs->pp_rank,
                                  &t->shard, err, errlen)) != DTRAIN_OK)
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
    if ((rc = open_data(t, err, errlen)) != DTRAIN_OK || (rc = build_stage(t, err, errlen)) != DTRAIN_OK)
        goto fail;
    t->inputs = malloc((size_t)B * T * sizeof(int32_t));
    t->targets = malloc((size_t)B * T * sizeof(int32_t));
    size_t wte = t->shard.model.untied_head ? 0 : t->shard.size[DTRAIN_MODEL_WTE]; /* a tied twin's */
    if (bs->pp > 1 && wte > 0)
        t->tie = dtrain_k_alloc(t->k, wte * sizeof(float));
    if (t->inputs == NULL || t->targets == NULL || (bs->pp > 1 && wte > 0 && t->tie == NULL)) {
        snprintf(err, errlen, "out of memory");
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    if ((rc = init_params(t, err, errlen)) != DTRAIN_OK)
        goto fail;
    if ((rc = dtrain_report_open(t, err, errlen)) != DTRAIN_OK)
        goto fail;
    t->flops_per_step = dtrain_model_flops_per_step(&c->model, B, T);
    if (dtrain_kernels_precision(t->k) == DTRAIN_PRECISION_FP16)
        t->scaler = (struct dtrain_sckpt_scaler){1, c->loss_scale, 0, 0};
    if (c->memory_report)
        dtrain_ptrainer_memory_line(t, stdout);
    t->last_val = t->best_val = NAN;
    t->peak_flops = c->peak_flops;
    if (t->peak_flops == 0.0 && bs->rank == 0 && (c->log_every > 0 || t->metrics != NULL || t->prom_on)) {
        t->peak_flops = measure_gemm(t->k);
        t->peak_measured = 1;
    }
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
    if (t->lora != NULL)
        dtrain_pcomm_release(&t->lora_dp);
    dtrain_lora_destroy(t->lora);
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
    if (t->rank_file != NULL)
        fclose(t->rank_file);
    free(t->host_times);
    free(t->compute_sum);
    free(t->slow_run);
    free(t->sorted);
    dtrain_tokens_close(t->val); /* before data: it may be a view of it */
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

struct dtrain_lora *dtrain_ptrainer_lora(struct dtrain_ptrainer *t) { return t->lora; }

struct dtrain_kernels *dtrain_ptrainer_kernels(struct dtrain_ptrainer *t) { return t->k; }

float *dtrain_ptrainer_params(struct dtrain_ptrainer *t) { return dtrain_stage_params(t->stage); }

int dtrain_ptrainer_local_params(struct dtrain_ptrainer *t, float *local, char *err, size_t errlen)
{
    if (t->dp != NULL && dtrain_dp_sharded_params(t->dp))
        return dtrain_dp_params_gather(t->dp, local, err, errlen);
    if (t->cfg.base_dtype == DTRAIN_BASE_NF4) { /* the config refuses the saves that would ask */
        snprintf(err, errlen, "the base is held in NF4 (--base-dtype nf4): its fp32 weights are gone");
        return DTRAIN_ERR_INPUT;
    }
    dtrain_k_download(t->k, local, dtrain_stage_params(t->stage), t->shard.count * sizeof(float));
    return DTRAIN_OK;
}

int dtrain_ptrainer_local_grads(struct dtrain_ptrainer *t, float *local, char *err, size_t errlen)
{
    if (t->cfg.zero_stage >= 2) {
        snprintf(err, errlen, "with ZeRO stage %d each rank keeps only its share of the gradients", t->cfg.zero_stage);
        return DTRAIN_ERR_INPUT;
    }
    dtrain_k_download(t->k, local, dtrain_stage_grads(t->stage), t->shard.count * sizeof(float));
    return DTRAIN_OK;
}

/* The most parameters of one gradient unit but wte. */
static size_t largest_unit(const struct dtrain_shard *s)
{
    struct dtrain_shard_range r[DTRAIN_SHARD_UNIT_RANGES];
    size_t most = 0;
    for (int u = 0; u < dtrain_shard_units(s); u++) {
        int layer, n = dtrain_shard_unit_ranges(s, u, r);
        size_t sum = 0;
        for (int i = 0; i < n; i++)
            sum += r[i].count;
        if (dtrain_shard_unit_kind(s, u, &layer) != DTRAIN_UNIT_WTE && sum > most)
            most = sum;
    }
    return most;
}

/* --base-dtype nf4: the block linears' weights held here (elements), and
 * their NF4 bytes, dtrain_nf4_bytes of each layer's (rows, cols) shard. */
static size_t nf4_weights(const struct dtrain_shard *s)
{
    return s->size[DTRAIN_MODEL_QKVW] + s->size[DTRAIN_MODEL_ATTPROJW] + s->size[DTRAIN_MODEL_FCW] +
           s->size[DTRAIN_MODEL_FCPROJW];
}

static size_t nf4_base_bytes(const struct dtrain_shard *s)
{
    int C = s->model.channels;
    return (size_t)s->layers * (dtrain_nf4_bytes(s->qkv_width, C) + dtrain_nf4_bytes(C, s->attn_width) +
                                dtrain_nf4_bytes(s->fc_rows, C) + dtrain_nf4_bytes(C, s->mlp_width));
}

void dtrain_ptrainer_memory(const struct dtrain_ptrainer *t, struct dtrain_ptrainer_memory *m)
{
    struct dtrain_stage_memory sm;
    struct dtrain_dp_memory dm = {0};
    dtrain_stage_memory(t->stage, &sm);
    if (t->dp != NULL)
        dtrain_dp_memory(t->dp, &dm);
    else if (t->lora != NULL) { /* LoRA: the adapters' gradients and moments (the base has none) */
        sm.grad_bytes = dtrain_lora_count(t->lora) * sizeof(float);
        dm.optimizer_bytes = 2 * dtrain_lora_count(t->lora) * sizeof(float);
    }
    size_t n = t->shard.count, D = (size_t)t->layout.dp, f = sizeof(float);
    int stage = t->cfg.zero_stage, local = D == 1 && stage == 0;
    m->params = sm.param_bytes + dm.param_bytes; /* ZeRO-3: the stage holds none, dp the shares */
    m->grads = sm.grad_bytes + dm.unit_grad_bytes;
    m->reduced_grads = dm.grad_bytes;
    m->optimizer = dm.optimizer_bytes;
    m->activations = sm.activation_bytes;
    m->comm = dm.comm_bytes + (t->tie != NULL ? t->shard.size[DTRAIN_MODEL_WTE] * f : 0);
    m->model_state = m->params + m->grads + m->reduced_grads + m->optimizer;
    m->model_state_formula = 4 * n + 4 * n + (local ? 0 : stage >= 2 ? 4 * n / D : 4 * n) +
                             (stage >= 1 ? 8 * n / D : 8 * n);
    if (t->lora != NULL) /* the frozen base, the adapters' gradients and moments */
        m->model_state_formula = 4 * n + 12 * dtrain_lora_count(t->lora);
    if (t->lora != NULL && t->cfg.base_dtype == DTRAIN_BASE_NF4) /* QLoRA: the linears' weights in NF4 */
        m->model_state_formula = 4 * (n - nf4_weights(&t->shard)) + nf4_base_bytes(&t->shard) +
                                 12 * dtrain_lora_count(t->lora);
    if (stage >= 3) /* shares of everything, and the weights and gradient of wte and of the largest other unit
                     * (prefetch: and a third buffer of its weights) */
        m->model_state_formula = 16 * n / D + 2 * f * (t->shard.size[DTRAIN_MODEL_WTE] + largest_unit(&t->shard)) +
                                 (t->dp != NULL && dtrain_dp_prefetching(t->dp) ? f * largest_unit(&t->shard) : 0);
    /* ZeRO-Offload (doc/runtime.md): the moments S = n (ZeRO: n/D) leave
     * the device; pinned host: CPU 12 S (m, v, master) + the staging
     * buffers; NVMe: files of 8 S, staging buffers of `chunk` floats each */
    enum dtrain_offload_kind where = t->dp != NULL ? dtrain_dp_offload(t->dp) : DTRAIN_OFFLOAD_NONE;
    size_t S = stage >= 1 ? n / D : n, chunk = DTRAIN_OFFLOAD_CHUNK < S ? DTRAIN_OFFLOAD_CHUNK : S;
    int device = !dtrain_kernels_host_memory(t->k);
    m->pinned_host = dm.pinned_host_bytes;
    m->nvme = dm.nvme_bytes;
    m->pinned_host_formula = m->nvme_formula = 0;
    if (where != DTRAIN_OFFLOAD_NONE) {
        m->model_state_formula -= 2 * f * S;
        if (stage >= 3 && strcmp(t->cfg.offload_params, "cpu") == 0) { /* the shares leave, the largest is staged */
            size_t unit = largest_unit(&t->shard) > t->shard.size[DTRAIN_MODEL_WTE] ? largest_unit(&t->shard)
                                                                                  : t->shard.size[DTRAIN_MODEL_WTE];
            m->model_state_formula = m->model_state_formula - f * S + f * ((unit + D - 1) / D);
        }
        m->pinned_host_formula = where == DTRAIN_OFFLOAD_CPU ? 3 * f * S + f * chunk
                                                             : (device ? 4 : 2) * f * chunk;
        m->nvme_formula = where == DTRAIN_OFFLOAD_NVME ? 2 * f * S : 0;
    }
}

void dtrain_ptrainer_memory_line(const struct dtrain_ptrainer *t, FILE *out)
{
    struct dtrain_ptrainer_memory m;
    dtrain_ptrainer_memory(t, &m);
    const struct dtrain_bootstrap *L = &t->layout;
    char offload[256] = ""; /* only with --offload-optimizer: the line stays as it was without */
    enum dtrain_offload_kind where = t->dp != NULL ? dtrain_dp_offload(t->dp) : DTRAIN_OFFLOAD_NONE;
    if (where != DTRAIN_OFFLOAD_NONE)
        snprintf(offload, sizeof offload, ", \"offload_optimizer\": \"%s\", \"pinned_host_bytes\": %zu, "
                 "\"pinned_host_formula_bytes\": %zu, \"nvme_bytes\": %zu, \"nvme_formula_bytes\": %zu",
                 dtrain_offload_name(where), m.pinned_host, m.pinned_host_formula, m.nvme, m.nvme_formula);
    fprintf(out, "{\"memory\": {\"rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"dp_rank\": %d, "
            "\"zero_stage\": %d, \"recompute\": \"%s\", \"sequence_parallel\": %d, \"virtual_stages\": %d, \"local_params\": %zu, \"params_bytes\": %zu, "
            "\"grads_bytes\": %zu, \"reduced_grads_bytes\": %zu, \"optimizer_bytes\": %zu, "
            "\"activations_bytes\": %zu, \"comm_bytes\": %zu, \"model_state_bytes\": %zu, "
            "\"model_state_formula_bytes\": %zu%s}}\n", L->rank, L->tp_rank, L->pp_rank, L->dp_rank,
            t->cfg.zero_stage, dtrain_recompute_name(t->cfg.recompute), t->cfg.sequence_parallel, t->cfg.virtual_stages, t->shard.count, m.params, m.grads, m.reduced_grads,
            m.optimizer, m.activations, m.comm, m.model_state, m.model_state_formula, offload);
    fflush(out);
}

void dtrain_ptrainer_scaler(const struct dtrain_ptrainer *t, struct dtrain_sckpt_scaler *s) { *s = t->scaler; }

void dtrain_ptrainer_set_scaler(struct dtrain_ptrainer *t, const struct dtrain_sckpt_scaler *s)
{
    if (t->scaler.on && s->on)
        t->scaler = *s;
}

