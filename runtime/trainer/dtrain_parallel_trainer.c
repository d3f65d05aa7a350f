/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The 3D-parallel trainer: one rank's stage, its 1F1B schedule, the tied
 * embedding, data parallelism, the step and the loop; see dtrain_parallel.h. */
#include "dtrain_parallel.h"
#include "parallel/dtrain_dp.h"
#include "dtrain_generate.h"
#include "dtrain_llmc.h"
#include "dtrain_metrics.h"
#include "dtrain_file.h"
#include "parallel/dtrain_pcomm.h"
#include "parallel/dtrain_pipeline.h"
#include "parallel/dtrain_shard.h"
#include "dtrain_shard_ckpt.h"
#include "parallel/dtrain_stage.h"
#include "parallel/dtrain_tp.h"
#include "ft/dtrain_watchdog.h"

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
    struct dtrain_tokens *val;   /* validation data, NULL: none */
    int val_batches;             /* K: min(val_batches, batches the validation data holds) */
    struct dtrain_shard shard;
    struct dtrain_tp *tp;
    struct dtrain_stage *stage;
    struct dtrain_dp *dp;
    struct dtrain_pipe_action *actions;
    long nactions;
    struct dtrain_watchdog *wd;  /* told each action (NULL: none) */
    int micro_rows;              /* b = B / (D*m) */
    int32_t *inputs, *targets;   /* host: the global batch, B*T each */
    float *tie;                  /* P > 1, stages holding wte: the other end's wte gradient (kernels' memory) */
    struct dtrain_pcomm prev, next, pp; /* the pipeline's communicators on the kernels' memory */
    FILE *metrics;               /* rank 0, with --metrics */
    FILE *rank_file;             /* every rank, with --rank-metrics: DIR/rank-N.jsonl */
    char rank_path[DTRAIN_PATH_MAX + 32];
    struct dtrain_pcomm world;   /* with --rank-metrics: the gather of every rank's times */
    float *times;                /* kernels' memory, RANK_FIELDS x world */
    float *host_times;           /* host copy */
    double *compute_sum;         /* rank 0: each rank's compute ms summed over the logged steps */
    int gather;                  /* every logged step gathers every rank's times (rank metrics, stragglers) */
    long *slow_run;              /* with straggler_steps: each rank's steps in a row above the margin */
    double *sorted;              /* scratch: the own compute times, sorted for the median */
    struct dtrain_straggler strag;
    long logged;
    struct dtrain_prom prom;     /* rank 0, with --prom-textfile (prom_on) */
    int prom_on;
    long step;
    uint64_t data_batches;
    double flops_per_step;       /* of the whole job */
    struct dtrain_sckpt_scaler scaler; /* fp16: dynamic loss scaling (on 0 otherwise) */
    double peak_flops;           /* per device; 0: unknown (no progress or metrics to show MFU in) */
    int peak_measured;           /* 1: measured at start, 0: declared (--peak-flops) */
    /* rank 0's story of the run: since its first step */
    double run_start;            /* wall clock at the start of the first step of this process, 0: none yet */
    long first_step;             /* that step */
    double smooth_loss;          /* exponential moving average of the loss (SMOOTH_ALPHA) */
    float last_loss;
    double last_val, best_val;   /* NaN: none */
    long best_val_step;
};

#define GEMM_N 512       /* the start-up GEMM that measures a peak: N x N x N */
#define GEMM_MIN_S 0.2   /* timed for at least this long */
#define SMOOTH_ALPHA 0.1
#define RANK_FIELDS 4    /* gathered per rank and step: ms, compute, TP, pipeline wait */ /* weight of the newest step in the smoothed loss */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
        if (dtrain_dp_sharded_params(t->dp)) /* ZeRO-3: this rank's shares */
            dtrain_dp_params_upload(t->dp, local);
        else
            dtrain_k_upload(t->k, dtrain_stage_params(t->stage), local, t->shard.count * sizeof(float));
    }
out:
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
        double t0 = now_seconds(), dt = 0.0;
        long reps = 0;
        while (dt < GEMM_MIN_S && reps < 1000) {
            dtrain_k_matmul_forward(k, dtrain_tensor_of(act, out), dtrain_tensor_of(act, a), w, NULL, GEMM_N,
                                    GEMM_N, GEMM_N);
            dtrain_k_sync(k);
            reps++;
            dt = now_seconds() - t0;
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
static int open_rank_metrics(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_bootstrap *bs = &t->layout;
    int rc;
    t->strag.rank = -1;
    if (t->cfg.rank_metrics[0] != '\0') {
        snprintf(t->rank_path, sizeof t->rank_path, "%s/rank-%05d.jsonl", t->cfg.rank_metrics, bs->rank);
        if ((t->rank_file = fopen(t->rank_path, "a+")) == NULL) {
            snprintf(err, errlen, "cannot create per-rank metrics file %s: %s", t->rank_path, strerror(errno));
            return DTRAIN_ERR_INPUT;
        }
    }
    if (t->rank_file == NULL && t->cfg.straggler_steps <= 0)
        return DTRAIN_OK;
    t->gather = 1;
    if ((rc = dtrain_pcomm_init(&t->world, t->k, t->comms->group[DTRAIN_GROUP_WORLD], err, errlen)) != DTRAIN_OK)
        return rc;
    size_t n = (size_t)RANK_FIELDS * bs->world_size;
    t->times = dtrain_k_alloc(t->k, n * sizeof(float));
    t->host_times = malloc(n * sizeof(float));
    t->compute_sum = calloc((size_t)bs->world_size, sizeof(double));
    t->slow_run = calloc((size_t)bs->world_size, sizeof(long));
    t->sorted = calloc((size_t)bs->world_size, sizeof(double));
    if (t->times == NULL || t->host_times == NULL || t->compute_sum == NULL || t->slow_run == NULL ||
        t->sorted == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

static int z3_acquire(void *ctx, int unit, int grads, struct dtrain_stage_unit *out, char *err, size_t errlen)
{
    return dtrain_dp_acquire(ctx, unit, grads, out, err, errlen);
}

static int z3_release(void *ctx, int unit, char *err, size_t errlen)
{
    return dtrain_dp_release(ctx, unit, err, errlen);
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
    if ((rc = dtrain_tokens_open(c->data, &t->data, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_tokens_batches(t->data, B, T, &nbatches, err, errlen)) != DTRAIN_OK)
        goto fail;
    if (dtrain_tokens_max_id(t->data) >= c->model.vocab_size) {
        snprintf(err, errlen, "token file %s holds token id %d, outside the model's vocabulary 0..%d: use a "
                 "larger model.vocab_size", dtrain_tokens_max_id_file(t->data), dtrain_tokens_max_id(t->data),
                 c->model.vocab_size - 1);
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    if ((rc = open_val(t, err, errlen)) != DTRAIN_OK)
        goto fail;
    int slots;
    size_t maxa = DTRAIN_PIPE_MAX_ACTIONS_V(m, c->virtual_stages);
    t->actions = malloc(maxa * sizeof *t->actions);
    if (t->actions == NULL ||
        (t->nactions = dtrain_pipe_schedule_v(bs->pp, c->virtual_stages, bs->pp_rank, m, t->actions, maxa,
                                              &slots)) < 0) {
        snprintf(err, errlen, "out of memory for the pipeline schedule of %d micro-batches", m);
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    int N = t->micro_rows * T;
    if ((rc = dtrain_tp_create(t->k, comms->group[DTRAIN_GROUP_TP], c->model.vocab_size, t->shard.vocab_rows,
                               t->shard.vocab_begin, N, &t->tp, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_tp_set_sequence_parallel(t->tp, c->sequence_parallel, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_stage_create(t->k, &t->shard, t->tp, t->micro_rows, T, slots,
                                  (enum dtrain_recompute)c->recompute, &t->stage, err, errlen)) != DTRAIN_OK)
        goto fail;
    struct dtrain_dp_options dopt = {
        .zero_stage = c->zero_stage, .overlap = c->dp_overlap, .prefetch = c->zero_prefetch,
        .bucket_floats = (size_t)(c->bucket_mb * 1e6 / sizeof(float)) + 1,
    };
    int z3 = c->zero_stage >= 3; /* the stage's weights are dp's shares, gathered on use */
    if ((rc = dtrain_dp_create(t->k, comms->group[DTRAIN_GROUP_DP], &t->shard, z3 ? NULL : dtrain_stage_params(t->stage),
                               z3 ? NULL : dtrain_stage_grads(t->stage), &dopt, &t->dp, err, errlen)) != DTRAIN_OK)
        goto fail;
    if (z3) {
        struct dtrain_stage_source src = {z3_acquire, z3_release, t->dp};
        dtrain_stage_set_source(t->stage, &src);
    }
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
    if ((rc = open_rank_metrics(t, err, errlen)) != DTRAIN_OK)
        goto fail;
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
    if (t->k != NULL)
        dtrain_k_free(t->k, t->times);
    free(t->host_times);
    free(t->compute_sum);
    free(t->slow_run);
    free(t->sorted);
    dtrain_pcomm_release(&t->world);
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

struct dtrain_kernels *dtrain_ptrainer_kernels(struct dtrain_ptrainer *t) { return t->k; }

float *dtrain_ptrainer_params(struct dtrain_ptrainer *t) { return dtrain_stage_params(t->stage); }

int dtrain_ptrainer_local_params(struct dtrain_ptrainer *t, float *local, char *err, size_t errlen)
{
    if (dtrain_dp_sharded_params(t->dp))
        return dtrain_dp_params_gather(t->dp, local, err, errlen);
    dtrain_k_download(t->k, local, dtrain_stage_params(t->stage), t->shard.count * sizeof(float));
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

void dtrain_ptrainer_memory(const struct dtrain_ptrainer *t, struct dtrain_ptrainer_memory *m)
{
    struct dtrain_stage_memory sm;
    struct dtrain_dp_memory dm;
    dtrain_stage_memory(t->stage, &sm);
    dtrain_dp_memory(t->dp, &dm);
    size_t n = t->shard.count, D = (size_t)t->layout.dp, f = sizeof(float);
    int stage = t->cfg.zero_stage, local = D == 1 && stage == 0;
    m->params = sm.param_bytes + dm.param_bytes; /* ZeRO-3: the stage holds none, dp the shares */
    m->grads = sm.grad_bytes + dm.unit_grad_bytes;
    m->reduced_grads = dm.grad_bytes;
    m->optimizer = dm.optimizer_bytes;
    m->activations = sm.activation_bytes;
    m->comm = dm.comm_bytes + (t->tie != NULL ? t->shard.size[DTRAIN_GPT2_WTE] * f : 0);
    m->model_state = m->params + m->grads + m->reduced_grads + m->optimizer;
    m->model_state_formula = 4 * n + 4 * n + (local ? 0 : stage >= 2 ? 4 * n / D : 4 * n) +
                             (stage >= 1 ? 8 * n / D : 8 * n);
    if (stage >= 3) /* shares of everything, and the weights and gradient of wte and of the largest other unit
                     * (prefetch: and a third buffer of its weights) */
        m->model_state_formula = 16 * n / D + 2 * f * (t->shard.size[DTRAIN_GPT2_WTE] + largest_unit(&t->shard)) +
                                 (dtrain_dp_prefetching(t->dp) ? f * largest_unit(&t->shard) : 0);
}

void dtrain_ptrainer_memory_line(const struct dtrain_ptrainer *t, FILE *out)
{
    struct dtrain_ptrainer_memory m;
    dtrain_ptrainer_memory(t, &m);
    const struct dtrain_bootstrap *L = &t->layout;
    fprintf(out, "{\"memory\": {\"rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"dp_rank\": %d, "
            "\"zero_stage\": %d, \"recompute\": \"%s\", \"sequence_parallel\": %d, \"virtual_stages\": %d, \"local_params\": %zu, \"params_bytes\": %zu, "
            "\"grads_bytes\": %zu, \"reduced_grads_bytes\": %zu, \"optimizer_bytes\": %zu, "
            "\"activations_bytes\": %zu, \"comm_bytes\": %zu, \"model_state_bytes\": %zu, "
            "\"model_state_formula_bytes\": %zu}}\n", L->rank, L->tp_rank, L->pp_rank, L->dp_rank,
            t->cfg.zero_stage, dtrain_recompute_name(t->cfg.recompute), t->cfg.sequence_parallel, t->cfg.virtual_stages, t->shard.count, m.params, m.grads, m.reduced_grads,
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

/* This DP rank's rows of batch k (m micro-batches of b rows from row
 * dp_rank*m*b), in their places of the global batch's buffers; the other
 * rows are never read. */
static void read_my_rows(struct dtrain_ptrainer *t, const struct dtrain_tokens *data, enum dtrain_data_order order,
                         uint64_t seed, uint64_t k)
{
    int rows = t->cfg.micro_batches * t->micro_rows, row0 = t->layout.dp_rank * rows;
    size_t at = (size_t)row0 * t->cfg.seq;
    dtrain_tokens_rows(data, t->cfg.batch, t->cfg.seq, order, seed, k, row0, rows, t->inputs + at, t->targets + at);
}

/* A transfer to the next stage (to_next) or from/to the previous one.  With
 * V = 1 over the 2-member PP_NEXT / PP_PREV communicators; with V > 1 over
 * the PP group to stage s+1 or s-1 mod P (the wrap from the last stage to
 * stage 0 is a link too). */
static int transfer(struct dtrain_ptrainer *t, int send, int to_next, float *buf, size_t floats, const char *what,
                    char *err, size_t errlen)
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

/* Fault injection in the step's first forward (dtrain_pstep_control). */
static void injected_slowness(const struct dtrain_pstep_control *ctl)
{
    if (ctl == NULL)
        return;
    if (ctl->delay_ms > 0)
        usleep((useconds_t)(ctl->delay_ms * 1000));
    while (ctl->hang)
        sleep(3600); /* deaf to signals but SIGKILL: the watchdog or Slurm must end it */
}

/* Run this stage's 1F1B list (interleaved with V > 1: each action names its
 * chunk, 0 with V = 1) for the step's micro-batches. */
static int run_schedule(struct dtrain_ptrainer *t, const struct dtrain_pstep_control *ctl, double *loss_sum,
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
        double t0 = now_seconds();
        size_t row = ((size_t)L->dp_rank * m + (size_t)x->micro) * t->micro_rows * T;
        double part = 0.0;
        dtrain_watchdog_action(t->wd, action_names[x->op], x->micro);
        if (x->op == DTRAIN_PIPE_FORWARD && !injected++)
            injected_slowness(ctl);
        switch (x->op) {
        case DTRAIN_PIPE_RECV_ACT:
            rc = transfer(t, 0, 0, dtrain_stage_chunk_input(st, x->slot, x->chunk), act,
                          "pipeline: receive activation", err, errlen);
            break;
        case DTRAIN_PIPE_SEND_ACT:
            rc = transfer(t, 1, 1, dtrain_stage_chunk_output(st, x->slot, x->chunk), act,
                          "pipeline: send activation", err, errlen);
            break;
        case DTRAIN_PIPE_RECV_GRAD:
            rc = transfer(t, 0, 1, dtrain_stage_chunk_grad(st, x->slot), act, "pipeline: receive gradient", err,
                          errlen);
            break;
        case DTRAIN_PIPE_SEND_GRAD:
            rc = transfer(t, 1, 0, dtrain_stage_chunk_grad(st, x->slot), act, "pipeline: send gradient", err,
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

int dtrain_ptrainer_step_ctl(struct dtrain_ptrainer *t, struct dtrain_pstep_control *ctl,
                             struct dtrain_pstep_result *r, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    const struct dtrain_shard *s = &t->shard;
    int rc;
    double t0 = now_seconds(), wait = 0.0, compute = 0.0, loss_sum = 0.0, tp0 = dtrain_tp_comm_seconds(t->tp);
    if (t->run_start == 0.0) {
        t->run_start = t0;
        t->first_step = t->step;
    }

    read_my_rows(t, t->data, c->data_order, c->data_seed, t->data_batches);
    dtrain_stage_zero_grad(t->stage);
    dtrain_dp_begin_step(t->dp);
    if ((rc = run_schedule(t, ctl, &loss_sum, &wait, &compute, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_watchdog_action(t->wd, "tied-embedding gradient exchange", -1);
    if ((rc = tie_embedding(t, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_watchdog_action(t->wd, "data-parallel gradient reduction", -1);
    dtrain_dp_unit_ready(t->dp, dtrain_shard_unit_of(s, DTRAIN_UNIT_WTE, 0));
    if ((rc = dtrain_dp_finish(t->dp, err, errlen)) != DTRAIN_OK)
        return rc;
    /* the kernels run asynchronously on a GPU: a failed one (a launch, a
     * device fault, out of memory) is known only now, before its loss and
     * gradients are trusted */
    dtrain_k_sync(t->k);
    char kerr[256];
    if (dtrain_kernels_error(t->k, kerr, sizeof kerr) != 0) {
        snprintf(err, errlen, "step %ld: the %s kernels failed: %s", t->step, dtrain_kernels_name(t->k), kerr);
        return DTRAIN_ERR_SYSTEM;
    }
    dtrain_watchdog_action(t->wd, "sum of the loss and gradient norm", -1);

    /* The loss (TP rank 0 of the last stage of each pipeline) and the norm
     * shares, added over the world in rank order: every rank gets the same. */
    double mine[4] = {s->has_head && s->tp_rank == 0 ? loss_sum : 0.0, dtrain_dp_norm_sumsq(t->dp),
                      ctl != NULL ? ctl->flags : 0.0, ctl != NULL ? ctl->writing : 0.0}, all[4];
    if (ctl != NULL && ctl->poison_loss)
        mine[0] = NAN; /* fault injection */
    if ((rc = dtrain_pcomm_sum_doubles(t->comms->group[DTRAIN_GROUP_WORLD], mine, all, ctl != NULL ? 4 : 2,
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
        if (ctl != NULL) {
            ctl->flags = all[2];
            ctl->writing = all[3];
        }
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
        ctl->writing = all[3];
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
    dtrain_watchdog_action(t->wd, "optimizer update", -1);
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
    r->base.has_val_loss = 0; /* the loop validates after the step, when due */
    r->base.mfu = t->peak_flops > 0.0 ? t->flops_per_step / seconds / (t->peak_flops * t->layout.world_size) : 0.0;
    r->pipe_wait_ms = 1e3 * wait;
    r->compute_ms = 1e3 * compute;
    r->tp_comm_ms = 1e3 * (dtrain_tp_comm_seconds(t->tp) - tp0);
    r->dp_exposed_ms = 1e3 * dtrain_dp_exposed_seconds(t->dp);
    r->dp_gather_ms = 1e3 * dtrain_dp_gather_seconds(t->dp);
    r->dp_prefetched = dtrain_dp_prefetched(t->dp);
    t->step++;
    t->data_batches++;
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ validation */

int dtrain_ptrainer_val_batches(const struct dtrain_ptrainer *t) { return t->val != NULL ? t->val_batches : 0; }

/* Forward only, micro-batch after micro-batch through the stages (each
 * receives from the one before and sends on: no cycle, so blocking sends
 * cannot deadlock), in slot 0, which no training micro-batch holds
 * between steps.  The rows of each batch are split over DP as in training;
 * the last stage's TP ranks compute the vocabulary-parallel loss. */
int dtrain_ptrainer_validate(struct dtrain_ptrainer *t, double *val_loss, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    const struct dtrain_bootstrap *L = &t->layout;
    const struct dtrain_shard *s = &t->shard;
    size_t act = dtrain_stage_act_floats(t->stage);
    int T = c->seq, m = c->micro_batches, V = c->virtual_stages, rc = DTRAIN_OK;
    double loss_sum = 0.0;
    *val_loss = NAN;
    if (t->val == NULL)
        return DTRAIN_OK;
    for (int j = 0; j < t->val_batches && rc == DTRAIN_OK; j++) {
        read_my_rows(t, t->val, DTRAIN_ORDER_SEQUENTIAL, 0, (uint64_t)j);
        for (int micro = 0; micro < m && rc == DTRAIN_OK; micro++) {
            size_t row = ((size_t)L->dp_rank * m + (size_t)micro) * t->micro_rows * T;
            rc = dtrain_stage_set_tokens(t->stage, 0, t->inputs + row, t->targets + row, err, errlen);
            /* chunk after chunk round the pipeline (V = 1: once through):
             * one chain of sends and receives, no cycle */
            for (int c = 0; c < V && rc == DTRAIN_OK; c++) {
                double part = 0.0;
                if (L->pp_rank > 0 || c > 0)
                    rc = transfer(t, 0, 0, dtrain_stage_chunk_input(t->stage, 0, c), act,
                                  "validation: receive activation", err, errlen);
                if (rc == DTRAIN_OK)
                    rc = dtrain_stage_forward_chunk(t->stage, 0, c, &part, err, errlen);
                if (rc == DTRAIN_OK && (L->pp_rank < L->pp - 1 || c < V - 1))
                    rc = transfer(t, 1, 1, dtrain_stage_chunk_output(t->stage, 0, c), act,
                                  "validation: send activation", err, errlen);
                loss_sum += part;
            }
        }
    }
    if (rc != DTRAIN_OK)
        return rc;
    /* summed over the world in rank order, as the training loss */
    double mine = s->has_head && s->tp_rank == 0 ? loss_sum : 0.0, all;
    if ((rc = dtrain_pcomm_sum_doubles(t->comms->group[DTRAIN_GROUP_WORLD], &mine, &all, 1, "validation loss",
                                       err, errlen)) != DTRAIN_OK)
        return rc;
    *val_loss = all / ((double)t->val_batches * c->batch * T);
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ samples during training */

#define SAMPLE_TOKENS 64

int dtrain_ptrainer_sample(struct dtrain_ptrainer *t, FILE *progress, char *err, size_t errlen)
{
    const struct dtrain_gpt2_config *m = &t->cfg.model;
    size_t n = dtrain_gpt2_param_count(m);
    int root = t->layout.rank == 0;
    float *whole = root ? malloc(n * sizeof(float)) : NULL;
    if (root && whole == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of the %zu parameters", n);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = dtrain_ptrainer_gather_params(t, whole, err, errlen); /* a collective */
    if (rc == DTRAIN_OK && root && progress != NULL) {
        struct dtrain_gen *g = NULL;
        int32_t prompt[1] = {m->vocab_size > 10 ? 10 : 0}, out[SAMPLE_TOKENS];
        int got = 0;
        rc = dtrain_gen_create(m, whole, &g, err, errlen);
        if (rc == DTRAIN_OK)
            rc = dtrain_generate(g, prompt, 1, SAMPLE_TOKENS, 0.8, 40, 1337, out, &got, err, errlen);
        dtrain_gen_destroy(g);
        if (rc == DTRAIN_OK) {
            fprintf(progress, "sample after step %ld: ", t->step);
            for (int i = 0; i < got; i++) {
                if (m->vocab_size > 256)
                    fprintf(progress, "%s%d", i ? " " : "", (int)out[i]);
                else /* bytes: ASCII as is, control bytes as a space, the rest '?' (one line of text) */
                    fputc(out[i] < 32 ? ' ' : out[i] < 127 ? (int)out[i] : '?', progress);
            }
            fputc('\n', progress);
            fflush(progress);
        }
    }
    free(whole);
    return rc;
}

/* ------------------------------------------------------------ gathering, the loop */

int dtrain_ptrainer_gather_params(struct dtrain_ptrainer *t, float *whole, char *err, size_t errlen)
{
    const struct dtrain_bootstrap *L = &t->layout;
    dtrain_comm *world = t->comms->group[DTRAIN_GROUP_WORLD];
    int rc = DTRAIN_OK, z3 = dtrain_dp_sharded_params(t->dp);
    if (L->rank != 0 && L->dp_rank != 0 && !z3)
        return DTRAIN_OK;
    /* this rank's shard, from backend memory (ZeRO-3: gathered over DP, every DP rank takes part) */
    float *local = malloc((t->shard.count + 1) * sizeof(float));
    if (local == NULL) {
        snprintf(err, errlen, "gathering the model: out of memory");
        return DTRAIN_ERR_SYSTEM; /* ZeRO-3: the DP peers then see a broken gather and fail too */
    }
    if ((rc = dtrain_ptrainer_local_params(t, local, err, errlen)) != DTRAIN_OK || (L->rank != 0 && L->dp_rank != 0)) {
        free(local);
        return rc;
    }
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
            if ((rc = dtrain_shard_plan_v(&t->cfg.model, L->tp, L->pp, t->cfg.virtual_stages, tp, pp, &s, err,
                                          errlen)) != DTRAIN_OK)
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

static void write_metrics(const struct dtrain_ptrainer *t, FILE *f, const struct dtrain_pstep_result *r,
                          const char *ranks)
{
    char val[64] = "";
    if (r->base.has_val_loss)
        snprintf(val, sizeof val, "\"val_loss\": %.9g, ", r->base.val_loss);
    fprintf(f, "{\"step\": %ld, \"loss\": %.9g, %s\"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.3f, "
            "\"tokens_per_s\": %.1f, \"gflops\": %.3f, \"mfu\": %.6f, \"pipe_wait_ms\": %.3f, \"dp_exposed_ms\": %.3f, ",
            r->base.step, (double)r->base.loss, val, r->base.lr, r->base.grad_norm, r->base.ms,
            r->base.tokens_per_s, r->base.gflops, r->base.mfu, r->pipe_wait_ms, r->dp_exposed_ms);
    if (t->scaler.on)
        fprintf(f, "\"loss_scale\": %.9g, \"overflow_steps\": %ld, ", r->loss_scale, r->overflow_steps);
    if (t->cfg.memory_report) { /* rank 0's memory (--memory-report) */
        struct dtrain_ptrainer_memory m;
        dtrain_ptrainer_memory(t, &m);
        fprintf(f, "\"model_state_bytes\": %zu, \"activations_bytes\": %zu, \"comm_bytes\": %zu, ",
                m.model_state, m.activations, m.comm);
    }
    fprintf(f, "%s\"time\": %.3f}\n", ranks, dtrain_metrics_wall_clock());
    fflush(f);
}

/* Keep the lines of steps before `step` (they start with {"step": N). */
static int cut_lines(FILE *f, long step, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        return DTRAIN_OK; /* a pipe or terminal: nothing to cut */
    char line[1024];
    long keep = 0, n;
    rewind(f);
    while (fgets(line, sizeof line, f) != NULL && strchr(line, '\n') != NULL &&
           sscanf(line, "{\"step\": %ld,", &n) == 1 && n < step)
        keep = ftell(f);
    if (fflush(f) != 0 || ftruncate(fileno(f), keep) != 0 || fseek(f, 0, SEEK_END) != 0) {
        snprintf(err, errlen, "cannot rewrite metrics file %s: %s", path, strerror(errno));
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

int dtrain_ptrainer_metrics_from(struct dtrain_ptrainer *t, long step, char *err, size_t errlen)
{
    int rc = cut_lines(t->metrics, step, t->cfg.metrics, err, errlen);
    if (rc == DTRAIN_OK)
        rc = cut_lines(t->rank_file, step, t->rank_path, err, errlen);
    return rc;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Stragglers from every rank's times of this step (the same on every
 * rank: they all hold the same gathered floats). */
static void find_straggler(struct dtrain_ptrainer *t)
{
    const struct dtrain_train_config *c = &t->cfg;
    int n = t->layout.world_size;
    struct dtrain_straggler *g = &t->strag;
    int was = g->rank;
    for (int q = 0; q < n; q++) {
        const float *x = t->host_times + (size_t)RANK_FIELDS * q;
        t->sorted[q] = (double)x[1] - (double)x[2]; /* own compute: TP communication is waiting */
    }
    qsort(t->sorted, (size_t)n, sizeof *t->sorted, by_value);
    double median = n % 2 ? t->sorted[n / 2] : 0.5 * (t->sorted[n / 2 - 1] + t->sorted[n / 2]);
    memset(g, 0, sizeof *g);
    g->rank = -1;
    for (int q = 0; q < n; q++) {
        const float *x = t->host_times + (size_t)RANK_FIELDS * q;
        double own = (double)x[1] - (double)x[2], excess = median > 0.0 ? own / median - 1.0 : 0.0;
        t->slow_run[q] = excess > c->straggler_margin ? t->slow_run[q] + 1 : 0;
        if (t->slow_run[q] >= c->straggler_steps && (g->rank < 0 || excess > g->excess))
            *g = (struct dtrain_straggler){q, 0, t->slow_run[q], own, median, excess};
    }
    g->is_new = g->rank >= 0 && g->rank != was;
}

/* --rank-metrics and straggler detection: every rank's times gathered,
 * the straggler verdict, this rank's line; rank 0 finds the slowest (most
 * compute) rank and the spread (a collective: every rank calls it for the
 * same steps). */
static int log_ranks(struct dtrain_ptrainer *t, const struct dtrain_pstep_result *r, char *summary, size_t slen,
                     char *err, size_t errlen)
{
    const struct dtrain_bootstrap *L = &t->layout;
    summary[0] = '\0';
    if (!t->gather)
        return DTRAIN_OK;
    float mine[RANK_FIELDS] = {(float)r->base.ms, (float)r->compute_ms, (float)r->tp_comm_ms, (float)r->pipe_wait_ms};
    float *slot = t->times + (size_t)RANK_FIELDS * L->rank;
    dtrain_k_upload(t->k, slot, mine, sizeof mine);
    int rc = dtrain_pcomm_all_gather(&t->world, slot, t->times, RANK_FIELDS, "per-rank metrics", err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_k_download(t->k, t->host_times, t->times, (size_t)RANK_FIELDS * L->world_size * sizeof(float));
    char strag[160] = "";
    if (t->cfg.straggler_steps > 0) {
        find_straggler(t);
        snprintf(strag, sizeof strag, "\"straggler_rank\": %d, ", t->strag.rank);
    }
    if (t->rank_file != NULL) {
        char slow[96] = "";
        if (t->cfg.straggler_steps > 0)
            snprintf(slow, sizeof slow, "\"slow_steps\": %ld, \"straggler\": %s, ", t->slow_run[L->rank],
                     t->strag.rank == L->rank ? "true" : "false");
        fprintf(t->rank_file, "{\"step\": %ld, \"rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"dp_rank\": %d, "
                "\"ms\": %.3f, \"compute_ms\": %.3f, \"tp_comm_ms\": %.3f, \"own_compute_ms\": %.3f, "
                "\"pipe_wait_ms\": %.3f, \"dp_exposed_ms\": %.3f, %s\"time\": %.3f}\n", r->base.step, L->rank,
                L->tp_rank, L->pp_rank, L->dp_rank, r->base.ms, r->compute_ms, r->tp_comm_ms,
                (double)mine[1] - (double)mine[2], r->pipe_wait_ms, r->dp_exposed_ms, slow,
                dtrain_metrics_wall_clock());
        if (fflush(t->rank_file) != 0 || ferror(t->rank_file)) {
            snprintf(err, errlen, "cannot write per-rank metrics file %s", t->rank_path);
            return DTRAIN_ERR_SYSTEM;
        }
    }
    if (t->prom_on)
        dtrain_prom_set_straggler(&t->prom, t->cfg.straggler_steps > 0, t->strag.rank, t->strag.excess);
    if (L->rank != 0)
        return DTRAIN_OK;
    if (t->rank_file == NULL) {
        snprintf(summary, slen, "%s", strag);
        return DTRAIN_OK;
    }
    int slow = 0, fast = 0;
    for (int q = 0; q < L->world_size; q++) {
        const float *x = t->host_times + (size_t)RANK_FIELDS * q;
        t->compute_sum[q] += x[1];
        if (x[1] > t->host_times[(size_t)RANK_FIELDS * slow + 1])
            slow = q;
        if (x[1] < t->host_times[(size_t)RANK_FIELDS * fast + 1])
            fast = q;
    }
    t->logged++;
    const float *s = t->host_times + (size_t)RANK_FIELDS * slow, *f = t->host_times + (size_t)RANK_FIELDS * fast;
    snprintf(summary, slen, "\"slowest_rank\": %d, \"slowest_compute_ms\": %.3f, \"fastest_rank\": %d, "
             "\"fastest_compute_ms\": %.3f, \"compute_spread_ms\": %.3f, %s", slow, (double)s[1], fast, (double)f[1],
             (double)(s[1] - f[1]), strag);
    return DTRAIN_OK;
}

void dtrain_ptrainer_straggler(const struct dtrain_ptrainer *t, struct dtrain_straggler *s)
{
    *s = t->strag;
}

int dtrain_ptrainer_log_step(struct dtrain_ptrainer *t, FILE *progress, const struct dtrain_pstep_result *r,
                             char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    int val = r->base.has_val_loss;
    long done = r->base.step + 1 - t->first_step; /* steps this process ran */
    t->smooth_loss = done <= 1 ? r->base.loss : SMOOTH_ALPHA * r->base.loss + (1.0 - SMOOTH_ALPHA) * t->smooth_loss;
    t->last_loss = r->base.loss;
    if (val) {
        t->last_val = r->base.val_loss;
        if (!(r->base.val_loss >= t->best_val)) {
            t->best_val = r->base.val_loss;
            t->best_val_step = r->base.step;
        }
    }
    if (t->layout.rank == 0 && progress != NULL && c->log_every > 0 &&
        (r->base.step % c->log_every == 0 || r->base.step + 1 == c->steps || val)) {
        char vl[64] = "", el[32], eta[32];
        double elapsed = now_seconds() - t->run_start;
        if (val)
            snprintf(vl, sizeof vl, " | val loss %.6f", r->base.val_loss);
        dtrain_format_duration(elapsed, el, sizeof el);
        dtrain_format_duration(done > 0 ? elapsed / (double)done * (double)(c->steps - r->base.step - 1) : 0.0, eta,
                               sizeof eta);
        char mfu[32] = "";
        if (t->peak_flops > 0.0)
            snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100.0 * r->base.mfu);
        fprintf(progress, "step %5ld/%ld | loss %.6f (smoothed %.4f)%s | lr %.3e | norm %.4f | %8.2f ms | "
                "%8.0f tok/s | %7.2f GFLOP/s%s | elapsed %s | ETA %s\n", r->base.step, c->steps,
                (double)r->base.loss, t->smooth_loss, vl, r->base.lr, r->base.grad_norm, r->base.ms,
                r->base.tokens_per_s, r->base.gflops, mfu, el, eta);
        fflush(progress);
    }
    char ranks[320];
    int rc = log_ranks(t, r, ranks, sizeof ranks, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (t->metrics != NULL) {
        write_metrics(t, t->metrics, r, ranks);
        if (ferror(t->metrics)) {
            snprintf(err, errlen, "cannot write metrics file %s", c->metrics);
            return DTRAIN_ERR_SYSTEM;
        }
    }
    if (t->prom_on)
        return dtrain_prom_update(&t->prom, &r->base, c->steps, r->base.step + 1 == c->steps || val, err, errlen);
    return DTRAIN_OK;
}

void dtrain_format_duration(double s, char *out, size_t outlen)
{
    long n = s > 0.0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (n < 60)
        snprintf(out, outlen, "%lds", n);
    else if (n < 3600)
        snprintf(out, outlen, "%ldm%02lds", n / 60, n % 60);
    else
        snprintf(out, outlen, "%ldh%02ldm", n / 3600, n % 3600 / 60);
}

void dtrain_ptrainer_summary(const struct dtrain_ptrainer *t, FILE *progress, const char *prog, const char *ckpt_dir)
{
    const struct dtrain_train_config *c = &t->cfg;
    char el[32], val[160] = "", kept[DTRAIN_PATH_MAX * 2 + 64] = "", *k = kept;
    size_t left = sizeof kept;
    if (t->layout.rank != 0 || progress == NULL)
        return;
    if (t->run_start == 0.0) {
        fprintf(progress, "%s: nothing to do: the run is at step %ld of %ld already\n", prog, t->step, c->steps);
        fflush(progress);
        return;
    }
    dtrain_format_duration(now_seconds() - t->run_start, el, sizeof el);
    if (!isnan(t->last_val))
        snprintf(val, sizeof val, ", val loss %.6f (best %.6f after step %ld)", t->last_val, t->best_val,
                 t->best_val_step);
    if (ckpt_dir != NULL && ckpt_dir[0] != '\0') {
        int n = snprintf(k, left, "; checkpoints in %s", ckpt_dir);
        k += n > 0 && (size_t)n < left ? n : 0, left -= n > 0 && (size_t)n < left ? (size_t)n : 0;
    }
    if (c->save_llmc[0] != '\0') {
        int n = snprintf(k, left, "; model %s", c->save_llmc);
        k += n > 0 && (size_t)n < left ? n : 0, left -= n > 0 && (size_t)n < left ? (size_t)n : 0;
    }
    if (c->metrics[0] != '\0') {
        int n = snprintf(k, left, "; metrics %s", c->metrics);
        k += n > 0 && (size_t)n < left ? n : 0, left -= n > 0 && (size_t)n < left ? (size_t)n : 0;
    }
    if (t->compute_sum != NULL && t->logged > 0) {
        int slow = 0, fast = 0;
        for (int q = 1; q < t->layout.world_size; q++) {
            slow = t->compute_sum[q] > t->compute_sum[slow] ? q : slow;
            fast = t->compute_sum[q] < t->compute_sum[fast] ? q : fast;
        }
        snprintf(k, left, "; slowest rank %d (compute %.2f ms a step), fastest %d (%.2f ms), per-rank files in %s",
                 slow, t->compute_sum[slow] / (double)t->logged, fast, t->compute_sum[fast] / (double)t->logged,
                 c->rank_metrics);
    }
    fprintf(progress, "%s: done: steps %ld..%ld of %ld in %s, final loss %.6f (smoothed %.4f)%s%s\n", prog,
            t->first_step, t->step - 1, c->steps, el, (double)t->last_loss, t->smooth_loss, val, kept);
    fflush(progress);
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
