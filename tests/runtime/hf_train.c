/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A Hugging Face model trained by the one-process trainer, for
 * hf_models.sh, which checks every figure against PyTorch and transformers:
 *   hf_train MODEL_DIR TOKENS STEPS B T LR WD OUT_DIR [PRECISION]
 * from MODEL_DIR (--init-hf), STEPS AdamW steps (constant LR, no clipping)
 * on TOKENS in sequential order; prints "loss STEP VALUE" per step; writes
 * the first step's gradients as a Hugging Face folder OUT_DIR/grads (the
 * same tensor names as the weights), the trained model as OUT_DIR/final
 * (--save-hf's writer), and "val VALUE": the loss on batch 0 of that
 * folder read back by a new trainer (--init-hf of dtrain's own output). */
#include "dtrain_train.h"
#include "model/dtrain_hf_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const char *err)
{
    fprintf(stderr, "hf_train: %s: %s\n", what, err);
    return 1;
}

int main(int argc, char **argv)
{
    char err[512], path[DTRAIN_PATH_MAX];
    struct dtrain_train_config c;
    struct dtrain_trainer *t = NULL;
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: hf_train MODEL_DIR TOKENS STEPS B T LR WD OUT_DIR [fp32|bf16]\n");
        return 2;
    }
    dtrain_train_config_defaults(&c);
    snprintf(c.init_hf, sizeof c.init_hf, "%s", argv[1]);
    snprintf(c.data, sizeof c.data, "%s", argv[2]);
    c.steps = atol(argv[3]);
    c.batch = atoi(argv[4]);
    c.seq = atoi(argv[5]);
    c.optim.lr = atof(argv[6]);
    c.optim.weight_decay = atof(argv[7]);
    c.optim.grad_clip = 0;
    c.optim.schedule = DTRAIN_LR_CONSTANT;
    c.data_order = DTRAIN_ORDER_SEQUENTIAL;
    c.threads = 1;
    c.log_every = 0;
    if (argc == 10 && strcmp(argv[9], "bf16") == 0)
        c.precision = DTRAIN_PRECISION_BF16;
    if (dtrain_train_config_finish(&c, err, sizeof err) != DTRAIN_OK)
        return fail("config", err);
    if (dtrain_trainer_create(&c, &t, err, sizeof err) != DTRAIN_OK)
        return fail("create", err);
    size_t n = dtrain_trainer_num_params(t);
    float *buf = malloc(n * sizeof(float));
    int rc = buf == NULL;
    for (long s = 0; rc == 0 && s < c.steps; s++) {
        struct dtrain_step_result r;
        if (dtrain_trainer_step(t, &r, err, sizeof err) != DTRAIN_OK) {
            rc = fail("step", err);
            break;
        }
        printf("loss %ld %.9g\n", s, r.loss);
        if (s == 0) {
            snprintf(path, sizeof path, "%s/grads", argv[8]);
            if (dtrain_trainer_grads(t, buf, err, sizeof err) != DTRAIN_OK ||
                dtrain_hf_save(path, &c.model, buf, err, sizeof err) != DTRAIN_OK)
                rc = fail("gradients", err);
        }
    }
    snprintf(path, sizeof path, "%s/final", argv[8]);
    if (rc == 0 && (dtrain_trainer_params(t, buf, err, sizeof err) != DTRAIN_OK ||
                    dtrain_hf_save(path, &c.model, buf, err, sizeof err) != DTRAIN_OK))
        rc = fail("final model", err);
    free(buf);
    dtrain_trainer_destroy(t);
    t = NULL;
    /* the saved folder, read back: step 0's loss is batch 0's before any update */
    struct dtrain_step_result r;
    snprintf(c.init_hf, sizeof c.init_hf, "%s", path);
    memset(&c.model, 0, sizeof c.model);
    c.steps = 1;
    if (rc == 0 && (dtrain_train_config_finish(&c, err, sizeof err) != DTRAIN_OK ||
                    dtrain_trainer_create(&c, &t, err, sizeof err) != DTRAIN_OK ||
                    dtrain_trainer_step(t, &r, err, sizeof err) != DTRAIN_OK))
        rc = fail("the saved model", err);
    if (rc == 0)
        printf("val %.9g\n", r.loss);
    dtrain_trainer_destroy(t);
    return rc;
}
