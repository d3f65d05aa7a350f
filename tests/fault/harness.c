/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Shared helpers of the fault-tolerance unit tests; see harness.h. */
#include "harness.h"
#include "dtrain_data.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int harness_setup(const char *name, char *dir, size_t dirlen, struct dtrain_train_config *cfg, char *err,
                  size_t errlen)
{
    snprintf(dir, dirlen, "/tmp/dtrain-test-%s-XXXXXX", name);
    if (mkdtemp(dir) == NULL) {
        snprintf(err, errlen, "cannot make a temporary folder");
        return -1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    size_t ntok = 20000;
    uint16_t *tok = malloc(ntok * sizeof *tok);
    if (tok == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* words in a varying order: a loss that falls, gradients that differ per batch */
    const char *words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. "};
    for (size_t i = 0, w = 0; i < ntok; w++)
        for (const char *c = words[(w * 7 + w / 9) % 9]; *c && i < ntok; c++)
            tok[i++] = (uint16_t)(unsigned char)*c;
    int rc = dtrain_tokens_write(path, tok, ntok, err, errlen);
    free(tok);
    if (rc != DTRAIN_OK)
        return -1;
    dtrain_train_config_defaults(cfg);
    snprintf(cfg->data, sizeof cfg->data, "%s", path);
    cfg->model = (struct dtrain_model_config){.max_seq_len = 16, .vocab_size = 256, .padded_vocab_size = 256,
                                             .num_layers = 2, .num_heads = 4, .channels = 32};
    cfg->batch = 8;
    cfg->seq = 16;
    cfg->optim.lr = 1e-2;
    cfg->optim.grad_clip = 1.0;
    cfg->optim.weight_decay = 0.01;
    cfg->threads = 1;
    cfg->log_every = 0;
    cfg->comm_timeout = 20;
    return dtrain_train_config_finish(cfg, err, errlen) == DTRAIN_OK ? 0 : -1;
}

void harness_cleanup(const char *dir)
{
    if (strncmp(dir, "/tmp/dtrain-test-", 17) == 0 && strchr(dir, '\'') == NULL)
        harness_sh("rm -rf '%s'", dir);
}

int harness_read_whole(const char *dir, const struct dtrain_train_config *cfg, float **params, float **m,
                       float **v, struct dtrain_sckpt_resumed *res, char *err, size_t errlen)
{
    size_t n = dtrain_model_param_count(&cfg->model);
    *params = calloc(n, sizeof(float));
    *m = calloc(n, sizeof(float));
    *v = calloc(n, sizeof(float));
    if (*params == NULL || *m == NULL || *v == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    struct dtrain_sckpt_piece whole = {0, n, *params, *m, *v};
    struct dtrain_sckpt_stats st;
    FILE *quiet = fopen("/dev/null", "w");
    int rc = dtrain_sckpt_resume(dir, cfg, NULL, &whole, 1, quiet, "test", res, &st, err, errlen);
    if (quiet != NULL)
        fclose(quiet);
    return rc;
}

int harness_same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

int harness_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}
