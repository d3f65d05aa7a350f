/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Evaluation of the parallel trainer: validation, samples during
 * training, the parameter gather and the llm.c export; see
 * dtrain_parallel.h. */
#include "dtrain_ptrainer.h"
#include "parallel/dtrain_lora.h"
#include "parallel/dtrain_dp.h"
#include "dtrain_generate.h"
#include "dtrain_llmc.h"
#include "model/dtrain_hf_model.h"
#include "parallel/dtrain_stage.h"

#include <math.h>
#include <stdlib.h>

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
        dtrain_ptrainer_read_rows(t, t->val, DTRAIN_ORDER_SEQUENTIAL, 0, (uint64_t)j);
        for (int micro = 0; micro < m && rc == DTRAIN_OK; micro++) {
            size_t row = ((size_t)L->dp_rank * m + (size_t)micro) * t->micro_rows * T;
            rc = dtrain_stage_set_tokens(t->stage, 0, t->inputs + row, t->targets + row, err, errlen);
            /* chunk after chunk round the pipeline (V = 1: once through):
             * one chain of sends and receives, no cycle */
            for (int c = 0; c < V && rc == DTRAIN_OK; c++) {
                double part = 0.0;
                if (L->pp_rank > 0 || c > 0)
                    rc = dtrain_ptrainer_transfer(t, 0, 0, dtrain_stage_chunk_input(t->stage, 0, c), act,
                                  "validation: receive activation", err, errlen);
                if (rc == DTRAIN_OK)
                    rc = dtrain_stage_forward_chunk(t->stage, 0, c, &part, err, errlen);
                if (rc == DTRAIN_OK && (L->pp_rank < L->pp - 1 || c < V - 1))
                    rc = dtrain_ptrainer_transfer(t, 1, 1, dtrain_stage_chunk_output(t->stage, 0, c), act,
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
    const struct dtrain_model_config *m = &t->cfg.model;
    size_t n = dtrain_model_param_count(m);
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
    int rc = DTRAIN_OK, z3 = t->dp != NULL && dtrain_dp_sharded_params(t->dp);
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

/* LoRA: the whole model's adapters from every rank (a collective). */
static int gather_lora(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_bootstrap *L = &t->layout;
    return dtrain_lora_gather(t->lora, t->comms->group[DTRAIN_GROUP_WORLD], L->tp, L->pp, L->dp, err, errlen);
}

/* The whole model gathered on rank 0 and written there: to the llm.c file
 * or the Hugging Face folder. */
static int save_whole(struct dtrain_ptrainer *t, int hf, char *err, size_t errlen)
{
    size_t n = dtrain_model_param_count(&t->cfg.model);
    float *whole = t->layout.rank == 0 ? malloc(n * sizeof(float)) : NULL;
    if (t->layout.rank == 0 && whole == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of the %zu parameters", n);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = dtrain_ptrainer_gather_params(t, whole, err, errlen);
    if (rc == DTRAIN_OK && hf && t->lora != NULL && t->cfg.merge_lora)
        rc = gather_lora(t, err, errlen);
    if (rc == DTRAIN_OK && t->layout.rank == 0 && hf && t->lora != NULL && t->cfg.merge_lora)
        dtrain_lora_merge(t->lora, whole); /* --merge-lora: the adapters into the base */
    if (rc == DTRAIN_OK && t->layout.rank == 0)
        rc = hf ? dtrain_hf_save(t->cfg.save_hf, &t->cfg.model, whole, err, errlen)
                : dtrain_llmc_save(t->cfg.save_llmc, &t->cfg.model, whole, err, errlen);
    free(whole);
    return rc;
}

int dtrain_ptrainer_finish(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    int rc;
    if (t->cfg.save_llmc[0] != '\0' && (rc = save_whole(t, 0, err, errlen)) != DTRAIN_OK)
        return rc;
    if (t->cfg.save_hf[0] != '\0' && (rc = save_whole(t, 1, err, errlen)) != DTRAIN_OK)
        return rc;
    if (t->lora != NULL && t->cfg.save_lora[0] != '\0' && (rc = gather_lora(t, err, errlen)) != DTRAIN_OK)
        return rc;
    if (t->lora != NULL && t->cfg.save_lora[0] != '\0' && t->layout.rank == 0 &&
        (rc = dtrain_lora_save_peft(t->lora, t->cfg.save_lora, t->cfg.init_hf[0] ? t->cfg.init_hf : NULL, err,
                                    errlen)) != DTRAIN_OK)
        return rc;
    return dtrain_report_close(t, err, errlen);
}
