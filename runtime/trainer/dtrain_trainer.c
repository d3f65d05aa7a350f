/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The single-process trainer API: the parallel trainer on a 1x1x1
 * bootstrap of its own; see dtrain_train.h. */
#include "dtrain_train.h"
#include "dtrain_fault.h"
#include "dtrain_ft.h"
#include "dtrain_llmc.h"
#include "dtrain_parallel.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PROG "dtrain-train"

struct dtrain_trainer {
    struct dtrain_train_config cfg; /* dtrain_train_config_single_process's */
    struct dtrain_bootstrap bs;
    struct dtrain_comms comms;
    atomic_int abort_flag;
    struct dtrain_fault fault;
    struct dtrain_ptrainer *pt;
};

int dtrain_trainer_create(const struct dtrain_train_config *c, struct dtrain_trainer **out,
                          char *err, size_t errlen)
{
    int rc;
    char why[512];
    *out = NULL;
    struct dtrain_trainer *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    t->cfg = *c;
    if ((rc = dtrain_train_config_single_process(&t->cfg, err, errlen)) != DTRAIN_OK)
        goto fail;
    dtrain_bootstrap_local(&t->bs);
    if (dtrain_fault_init(&t->fault, PROG, 0, err, errlen) != 0) {
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    struct dtrain_comm_options opts;
    dtrain_comm_options_defaults(&opts);
    atomic_init(&t->abort_flag, 0);
    opts.abort_flag = &t->abort_flag;
    if (dtrain_comm_init_all(&t->bs, &opts, &t->comms, NULL, why, sizeof why) != DTRAIN_OK) {
        snprintf(err, errlen, "a communicator of one process: %s", why);
        rc = DTRAIN_ERR_SYSTEM;
        goto fail;
    }
    if ((rc = dtrain_ptrainer_create(&t->cfg, &t->bs, &t->comms, &t->pt, err, errlen)) != DTRAIN_OK)
        goto fail;
    if (c->resume[0] != '\0' &&
        (rc = dtrain_ft_load(t->pt, &t->cfg, &t->bs, t->comms.group[DTRAIN_GROUP_WORLD], c->resume, PROG, err,
                             errlen)) != DTRAIN_OK)
        goto fail;
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
    dtrain_ptrainer_destroy(t->pt);
    dtrain_comm_destroy_all(&t->comms);
    free(t);
}

long dtrain_trainer_steps_done(const struct dtrain_trainer *t) { return dtrain_ptrainer_steps_done(t->pt); }

size_t dtrain_trainer_num_params(const struct dtrain_trainer *t) { return dtrain_model_param_count(&t->cfg.model); }

int dtrain_trainer_params(struct dtrain_trainer *t, float *whole, char *err, size_t errlen)
{
    return dtrain_ptrainer_gather_params(t->pt, whole, err, errlen);
}

int dtrain_trainer_grads(struct dtrain_trainer *t, float *whole, char *err, size_t errlen)
{
    /* one process: the shard is the whole model, in its order */
    return dtrain_ptrainer_local_grads(t->pt, whole, err, errlen);
}

int dtrain_trainer_step(struct dtrain_trainer *t, struct dtrain_step_result *r, char *err, size_t errlen)
{
    struct dtrain_pstep_result pr;
    int rc = dtrain_ptrainer_step(t->pt, &pr, err, errlen);
    if (rc == DTRAIN_OK)
        *r = pr.base;
    return rc;
}

int dtrain_trainer_save_checkpoint(struct dtrain_trainer *t, const char *dir, char *err, size_t errlen)
{
    return dtrain_ft_save(t->pt, &t->cfg, &t->bs, t->comms.group[DTRAIN_GROUP_WORLD], dir, err, errlen);
}

int dtrain_trainer_save_llmc(struct dtrain_trainer *t, const char *path, char *err, size_t errlen)
{
    size_t n = dtrain_trainer_num_params(t);
    float *whole = malloc(n * sizeof(float));
    if (whole == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of %zu parameters", n);
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = dtrain_trainer_params(t, whole, err, errlen);
    if (rc == DTRAIN_OK)
        rc = dtrain_llmc_save(path, &t->cfg.model, whole, err, errlen);
    free(whole);
    return rc;
}

int dtrain_trainer_run(struct dtrain_trainer *t, FILE *progress, char *err, size_t errlen)
{
    struct dtrain_ft_summary sum;
    int rc = dtrain_ft_run(t->pt, &t->cfg, &t->bs, &t->comms, &t->abort_flag, &t->fault, progress, &sum, err,
                           errlen);
    return rc;
}
