/* The single-process trainer: kernels, model, optimizer and data together,
 * the step, checkpoints and the training loop; see dtrain_train.h. */
#include "dtrain_train.h"
#include "dtrain_ckpt.h"
#include "dtrain_llmc.h"
#include "dtrain_metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dtrain_trainer {
    struct dtrain_train_config cfg;
    struct dtrain_kernels *k;
    struct dtrain_gpt2 *model;
    struct dtrain_adamw *opt;
    struct dtrain_tokens *data;
    long step;                /* steps done */
    uint64_t data_batches;    /* batches consumed: the next batch index */
    int32_t *inputs, *targets; /* host, B*T each */
    double flops_per_step;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host copies of params, m and v (3 * n floats), for checkpoints. */
static float *host_triple(size_t n, char *err, size_t errlen)
{
    float *p = malloc(3 * n * sizeof(float));
    if (p == NULL)
        snprintf(err, errlen, "out of memory for a host copy of %zu parameters", n);
    return p;
}

static int resume_from(struct dtrain_trainer *t, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    struct dtrain_ckpt_meta meta;
    size_t n = dtrain_gpt2_num_params(t->model);
    int rc;
    if ((rc = dtrain_ckpt_read_meta(c->resume, &meta, err, errlen)) != DTRAIN_OK)
        return rc;
    if (meta.shard_offset != 0 || meta.shard_count != n) {
        snprintf(err, errlen, "checkpoint %s holds a shard (parameters %llu..%llu of %zu); "
                 "a single process needs the whole model", c->resume,
                 (unsigned long long)meta.shard_offset,
                 (unsigned long long)(meta.shard_offset + meta.shard_count), n);
        return DTRAIN_ERR_INPUT;
    }
    if (meta.batch != c->batch || meta.seq != c->seq) {
        snprintf(err, errlen, "checkpoint %s was written with batch %d x %d; resume with "
                 "--batch %d --seq %d", c->resume, meta.batch, meta.seq, meta.batch, meta.seq);
        return DTRAIN_ERR_INPUT;
    }
    if (meta.data_order != (int)c->data_order ||
        (c->data_order == DTRAIN_ORDER_SHUFFLED && meta.data_seed != c->data_seed)) {
        snprintf(err, errlen, "checkpoint %s was written with data order %s (seed %llu); resume "
                 "with the same --order and --data-seed", c->resume,
                 meta.data_order == DTRAIN_ORDER_SHUFFLED ? "shuffled" : "sequential",
                 (unsigned long long)meta.data_seed);
        return DTRAIN_ERR_INPUT;
    }
    float *host = host_triple(n, err, errlen);
    if (host == NULL)
        return DTRAIN_ERR_SYSTEM;
    rc = dtrain_ckpt_load(c->resume, &meta, host, host + n, host + 2 * n, err, errlen);
    if (rc == DTRAIN_OK) {
        dtrain_gpt2_set_params(t->model, host);
        dtrain_k_upload(t->k, dtrain_adamw_m(t->opt), host + n, n * sizeof(float));
        dtrain_k_upload(t->k, dtrain_adamw_v(t->opt), host + 2 * n, n * sizeof(float));
        t->step = (long)meta.step;
        t->data_batches = meta.data_batches;
    }
    free(host);
    return rc;
}

static int init_params(struct dtrain_trainer *t, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    size_t n = dtrain_gpt2_num_params(t->model);
    int rc = DTRAIN_OK;
    if (c->resume[0] != '\0')
        return resume_from(t, err, errlen);
    float *host = malloc(n * sizeof(float));
    if (host == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of %zu parameters", n);
        return DTRAIN_ERR_SYSTEM;
    }
    if (c->init_llmc[0] != '\0')
        rc = dtrain_llmc_load(c->init_llmc, &c->model, host, err, errlen);
    else
        dtrain_gpt2_init_params(&c->model, c->seed, host);
    if (rc == DTRAIN_OK)
        dtrain_gpt2_set_params(t->model, host);
    free(host);
    return rc;
}

int dtrain_trainer_create(const struct dtrain_train_config *c, struct dtrain_trainer **out,
                          char *err, size_t errlen)
{
    int rc;
    uint64_t nbatches;
    *out = NULL;
    struct dtrain_trainer *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    t->cfg = *c;
    if (c->micro_batches != 1 || c->zero1) {
        snprintf(err, errlen, "%s is for the parallel trainer: run `srun --mpi=pmi2 dtrain-launch ...` "
                 "(one process trains one micro-batch, without ZeRO-1)",
                 c->micro_batches != 1 ? "parallel.micro_batches" : "parallel.zero1");
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    if (c->ckpt_dir[0] != '\0' || c->inject[0] != '\0') {
        snprintf(err, errlen, "%s is for the parallel trainer's sharded checkpoints and faults: run `srun --mpi=pmi2 "
                 "dtrain-launch ...` (dtrain-train writes one checkpoint file: --checkpoint, --checkpoint-every)",
                 c->ckpt_dir[0] != '\0' ? "fault.ckpt_dir" : "fault.inject");
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    struct dtrain_kernels_options kopt = {.threads = c->threads, .precision = c->precision};
    if (dtrain_kernels_create(c->backend, &kopt, &t->k, err, errlen) != 0) {
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    if ((rc = dtrain_tokens_open(c->data, &t->data, err, errlen)) != DTRAIN_OK)
        goto fail;
    if ((rc = dtrain_tokens_batches(t->data, c->batch, c->seq, &nbatches, err, errlen)) != DTRAIN_OK)
        goto fail;
    if (dtrain_tokens_max_id(t->data) >= c->model.vocab_size) {
        snprintf(err, errlen, "token file %s holds token id %d, outside the model's vocabulary "
                 "0..%d: use a larger model.vocab_size", c->data, dtrain_tokens_max_id(t->data),
                 c->model.vocab_size - 1);
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    if ((rc = dtrain_gpt2_create(t->k, &c->model, c->batch, c->seq, &t->model, err, errlen)) != DTRAIN_OK)
        goto fail;
    if ((rc = dtrain_adamw_create(t->k, dtrain_gpt2_num_params(t->model), &t->opt, err, errlen)) != DTRAIN_OK)
        goto fail;
    t->inputs = malloc((size_t)c->batch * c->seq * sizeof(int32_t));
    t->targets = malloc((size_t)c->batch * c->seq * sizeof(int32_t));
    if (t->inputs == NULL || t->targets == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    if ((rc = init_params(t, err, errlen)) != DTRAIN_OK)
        goto fail;
    t->flops_per_step = dtrain_gpt2_flops_per_step(&c->model, c->batch, c->seq);
    *out = t;
    return DTRAIN_OK;
fail:
    dtrain_trainer_destroy(t);
    return rc;
}

void dtrain_trainer_destroy(struct dtrain_trainer *t)
{
    if (t == NULL)
        return;
    free(t->inputs);
    free(t->targets);
    dtrain_adamw_destroy(t->opt);
    dtrain_gpt2_destroy(t->model);
    dtrain_tokens_close(t->data);
    dtrain_kernels_destroy(t->k);
    free(t);
}

long dtrain_trainer_steps_done(const struct dtrain_trainer *t) { return t->step; }
struct dtrain_gpt2 *dtrain_trainer_model(struct dtrain_trainer *t) { return t->model; }

int dtrain_trainer_step(struct dtrain_trainer *t, struct dtrain_step_result *r,
                        char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    int B = c->batch, T = c->seq, rc;
    float loss = 0.0f;
    double t0 = now_seconds();

    dtrain_tokens_batch(t->data, B, T, c->data_order, c->data_seed, t->data_batches,
                        t->inputs, t->targets);
    if ((rc = dtrain_gpt2_forward(t->model, t->inputs, t->targets, B, T, &loss, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_gpt2_zero_grad(t->model);
    if ((rc = dtrain_gpt2_backward(t->model, err, errlen)) != DTRAIN_OK)
        return rc;
    float *grads = dtrain_gpt2_grads(t->model);
    size_t n = dtrain_gpt2_num_params(t->model);
    double norm = sqrt(dtrain_k_sumsq(t->k, grads, n));
    if (!isfinite(loss) || !isfinite(norm)) {
        snprintf(err, errlen, "step %ld: the %s is not finite: training diverged (lower the "
                 "learning rate or set grad_clip)", t->step, isfinite(loss) ? "gradient norm" : "loss");
        return DTRAIN_ERR_SYSTEM;
    }
    double lr = dtrain_lr_at(&c->optim, t->step);
    dtrain_adamw_update(t->opt, dtrain_gpt2_params(t->model), grads, &c->optim, t->step, lr,
                        dtrain_clip_scale(&c->optim, norm));
    dtrain_k_sync(t->k);
    double seconds = now_seconds() - t0;

    r->step = t->step;
    r->loss = loss;
    r->lr = lr;
    r->grad_norm = norm;
    r->ms = 1e3 * seconds;
    r->tokens_per_s = (double)B * T / seconds;
    r->gflops = t->flops_per_step / seconds * 1e-9;
    t->step++;
    t->data_batches++;
    return DTRAIN_OK;
}

int dtrain_trainer_save_checkpoint(struct dtrain_trainer *t, const char *path,
                                   char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    size_t n = dtrain_gpt2_num_params(t->model);
    float *host = host_triple(n, err, errlen);
    if (host == NULL)
        return DTRAIN_ERR_SYSTEM;
    dtrain_gpt2_get_params(t->model, host);
    dtrain_k_download(t->k, host + n, dtrain_adamw_m(t->opt), n * sizeof(float));
    dtrain_k_download(t->k, host + 2 * n, dtrain_adamw_v(t->opt), n * sizeof(float));
    struct dtrain_ckpt_meta meta = {
        .model = c->model, .batch = c->batch, .seq = c->seq, .data_order = (int)c->data_order,
        .step = (uint64_t)t->step, .data_batches = t->data_batches, .seed = c->seed,
        .data_seed = c->data_seed, .nparams = n, .shard_offset = 0, .shard_count = n,
    };
    int rc = dtrain_ckpt_save(path, &meta, host, host + n, host + 2 * n, err, errlen);
    free(host);
    return rc;
}

int dtrain_trainer_save_llmc(struct dtrain_trainer *t, const char *path, char *err, size_t errlen)
{
    size_t n = dtrain_gpt2_num_params(t->model);
    float *host = malloc(n * sizeof(float));
    if (host == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of %zu parameters", n);
        return DTRAIN_ERR_SYSTEM;
    }
    dtrain_gpt2_get_params(t->model, host);
    int rc = dtrain_llmc_save(path, &t->cfg.model, host, err, errlen);
    free(host);
    return rc;
}

static void write_metrics(FILE *f, const struct dtrain_step_result *r)
{
    fprintf(f, "{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
            "\"ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops\": %.3f, \"time\": %.3f}\n",
            r->step, (double)r->loss, r->lr, r->grad_norm, r->ms, r->tokens_per_s, r->gflops,
            dtrain_metrics_wall_clock());
    fflush(f);
}

int dtrain_trainer_run(struct dtrain_trainer *t, FILE *progress, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    FILE *metrics = NULL;
    struct dtrain_prom prom;
    int rc = DTRAIN_OK;
    if (c->prom_textfile[0] != '\0' && (rc = dtrain_prom_init(&prom, c->prom_textfile, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->metrics[0] != '\0') {
        /* a resumed run continues the file it was writing */
        metrics = fopen(c->metrics, c->resume[0] != '\0' ? "a" : "w");
        if (metrics == NULL) {
            snprintf(err, errlen, "cannot create metrics file %s: %s", c->metrics, strerror(errno));
            return DTRAIN_ERR_INPUT;
        }
    }
    while (t->step < c->steps) {
        struct dtrain_step_result r;
        if ((rc = dtrain_trainer_step(t, &r, err, errlen)) != DTRAIN_OK)
            goto out;
        if (progress != NULL && c->log_every > 0 &&
            (r.step % c->log_every == 0 || t->step == c->steps)) {
            fprintf(progress, "step %5ld/%ld | loss %.6f | lr %.3e | norm %.4f | %8.2f ms | "
                    "%8.0f tok/s | %7.2f GFLOP/s\n", r.step, c->steps, (double)r.loss, r.lr,
                    r.grad_norm, r.ms, r.tokens_per_s, r.gflops);
            fflush(progress);
        }
        if (metrics != NULL) {
            write_metrics(metrics, &r);
            if (ferror(metrics)) {
                snprintf(err, errlen, "cannot write metrics file %s", c->metrics);
                rc = DTRAIN_ERR_SYSTEM;
                goto out;
            }
        }
        if (c->prom_textfile[0] != '\0' &&
            (rc = dtrain_prom_update(&prom, &r, c->steps, t->step == c->steps, err, errlen)) != DTRAIN_OK)
            goto out;
        if (c->checkpoint[0] != '\0' && c->checkpoint_every > 0 && t->step < c->steps &&
            t->step % c->checkpoint_every == 0 &&
            (rc = dtrain_trainer_save_checkpoint(t, c->checkpoint, err, errlen)) != DTRAIN_OK)
            goto out;
    }
    if (c->checkpoint[0] != '\0' &&
        (rc = dtrain_trainer_save_checkpoint(t, c->checkpoint, err, errlen)) != DTRAIN_OK)
        goto out;
    if (c->save_llmc[0] != '\0' &&
        (rc = dtrain_trainer_save_llmc(t, c->save_llmc, err, errlen)) != DTRAIN_OK)
        goto out;
out:
    if (metrics != NULL && fclose(metrics) != 0 && rc == DTRAIN_OK) {
        snprintf(err, errlen, "cannot write metrics file %s", c->metrics);
        rc = DTRAIN_ERR_SYSTEM;
    }
    return rc;
}
