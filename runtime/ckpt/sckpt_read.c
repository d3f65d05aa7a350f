/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Reading a checkpoint folder without training (dtrain-generate): the
 * newest checkpoint whose shards verify, put together into the whole
 * model, changing nothing in the folder; see dtrain_shard_ckpt.h. */
#include "sckpt_internal.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_STEPS 64 /* candidates looked at, newest first */

/* The run settings a manifest records (what sckpt_read_manifest checks). */
static int read_run(const char *step_dir, struct dtrain_train_config *c, char *why, size_t whylen)
{
    char file[DTRAIN_PATH_MAX];
    json_error_t je;
    json_int_t v[6], batch, seq, data_seed, seed;
    const char *order;
    if (dtrain_snprintf(file, sizeof file, "%s/%s", step_dir, DTRAIN_SCKPT_MANIFEST) != 0) {
        dtrain_snprintf(why, whylen, "%s: path too long", step_dir);
        return -1;
    }
    /* never a blocking open (a FIFO put there) */
    int fd = dtrain_open_regular(file, O_RDONLY, "manifest", NULL, why, whylen);
    if (fd < 0)
        return -1;
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
    int rc = root != NULL &&
             json_unpack_ex(root, &je, 0, "{s:{s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:I, s:s, s:I, s:I}}",
                            "config", "model", "num_layers", &v[0], "channels", &v[1], "num_heads", &v[2],
                            "vocab_size", &v[3], "padded_vocab_size", &v[4], "max_seq_len", &v[5], "batch", &batch,
                            "seq", &seq, "data_order", &order, "data_seed", &data_seed, "seed", &seed) == 0 ? 0 : -1;
    for (int i = 0; rc == 0 && i < 6; i++)
        if (v[i] < 1 || v[i] > INT32_MAX)
            rc = -1;
    if (rc == 0 && (batch < 1 || batch > INT32_MAX || seq < 1 || seq > INT32_MAX))
        rc = -1;
    struct dtrain_model_config model;
    if (rc == 0 && sckpt_model_parse(json_object_get(json_object_get(root, "config"), "model"), &model) != 0)
        rc = -1;
    if (rc == 0) {
        dtrain_train_config_defaults(c);
        c->model = model;
        c->batch = (int)batch;
        c->seq = (int)seq;
        c->data_order = strcmp(order, "shuffled") == 0 ? DTRAIN_ORDER_SHUFFLED : DTRAIN_ORDER_SEQUENTIAL;
        c->data_seed = (uint64_t)data_seed;
        c->seed = (uint64_t)seed;
        char check[256];
        if (dtrain_model_config_check(&c->model, check, sizeof check) != DTRAIN_OK)
            rc = -1;
    }
    if (rc != 0)
        dtrain_snprintf(why, whylen, "%s: %s", file, root == NULL ? je.text : "no valid config in it");
    json_decref(root);
    return rc;
}

int dtrain_sckpt_inspect(const char *dir, uint64_t step, int verify, struct dtrain_sckpt_info *out, char *err,
                         size_t errlen)
{
    char path[DTRAIN_PATH_MAX];
    struct manifest m;
    memset(out, 0, sizeof *out);
    if (sckpt_step_path(path, sizeof path, dir, step, "") != 0) {
        dtrain_snprintf(err, errlen, "checkpoint folder path too long: %.80s...", dir);
        return DTRAIN_ERR_INPUT;
    }
    snprintf(out->path, sizeof out->path, "%s", path);
    out->step = step;
    if (read_run(path, &out->run, out->why, sizeof out->why) != 0 ||
        sckpt_read_manifest(path, step, &out->run, &m, out->why, sizeof out->why) != GOOD) {
        out->state = DTRAIN_SCKPT_BAD_MANIFEST;
        return DTRAIN_OK;
    }
    out->data_batches = m.data_batches;
    out->nparams = m.nparams;
    out->writer = m.layout;
    int n = m.layout.world_size;
    out->shards = calloc((size_t)n, sizeof *out->shards);
    if (out->shards == NULL) {
        free(m.shards);
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    out->nshards = n;
    out->state = verify ? DTRAIN_SCKPT_VERIFIED : DTRAIN_SCKPT_UNCHECKED;
    for (int r = 0; r < n; r++) {
        struct dtrain_sckpt_shard_info *sh = &out->shards[r];
        sh->bytes = m.shards[r].bytes;
        sh->floats = m.shards[r].floats;
        sh->checksum = m.shards[r].checksum;
        out->bytes += sh->bytes;
        if (verify) {
            uint64_t read = 0;
            sh->verified = sckpt_shard_verify(path, r, &m, &read, sh->why, sizeof sh->why) == GOOD ? 1 : -1;
            if (sh->verified < 0)
                out->state = DTRAIN_SCKPT_DAMAGED;
        }
    }
    free(m.shards);
    return DTRAIN_OK;
}

void dtrain_sckpt_info_free(struct dtrain_sckpt_info *info)
{
    free(info->shards);
    info->shards = NULL;
    info->nshards = 0;
}

int dtrain_sckpt_load_model(const char *dir, uint64_t step, struct dtrain_sckpt_model *out, char *err,
                            size_t errlen)
{
    uint64_t steps[MAX_STEPS];
    struct stat st;
    memset(out, 0, sizeof *out);
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        dtrain_snprintf(err, errlen, "checkpoint %s is a file, not a folder of step-N checkpoints", dir);
        return DTRAIN_ERR_INPUT;
    }
    long n = 1;
    if (step == DTRAIN_SCKPT_NEWEST) {
        n = sckpt_list_steps(dir, "", steps, MAX_STEPS);
        if (n < 0) {
            dtrain_snprintf(err, errlen, "cannot read checkpoint folder %s", dir);
            return DTRAIN_ERR_INPUT;
        }
        if (n == 0) {
            dtrain_snprintf(err, errlen, "checkpoint folder %s holds no complete checkpoint (step-N with a %s)", dir,
                            DTRAIN_SCKPT_MANIFEST);
            return DTRAIN_ERR_INPUT;
        }
        if (n > MAX_STEPS)
            n = MAX_STEPS;
    } else {
        steps[0] = step;
    }
    char why[768] = "";
    for (long i = 0; i < n; i++) {
        char path[DTRAIN_PATH_MAX];
        struct dtrain_train_config c;
        struct manifest m;
        uint64_t bytes = 0;
        if (sckpt_step_path(path, sizeof path, dir, steps[i], "") != 0) {
            dtrain_snprintf(err, errlen, "checkpoint folder path too long: %.80s...", dir);
            return DTRAIN_ERR_INPUT;
        }
        if (read_run(path, &c, why, sizeof why) != 0)
            continue;
        int v = sckpt_read_manifest(path, steps[i], &c, &m, why, sizeof why);
        for (long r = 0; v == GOOD && r < m.layout.world_size; r++)
            v = sckpt_shard_verify(path, r, &m, &bytes, why, sizeof why);
        size_t count = dtrain_model_param_count(&c.model);
        float *params = v == GOOD ? malloc(count * sizeof(float)) : NULL;
        if (v == GOOD && params == NULL) {
            free(m.shards);
            dtrain_snprintf(err, errlen, "out of memory for the %zu parameters of %s", count, path);
            return DTRAIN_ERR_SYSTEM;
        }
        if (v == GOOD) {
            struct dtrain_sckpt_piece all = {0, count, params, NULL, NULL};
            v = sckpt_load_pieces(path, &m, &all, 1, &bytes, NULL, why, sizeof why);
        }
        if (v == GOOD) {
            out->model = c.model;
            out->params = params;
            out->step = m.step;
            out->writer = m.layout;
            out->bytes = bytes;
            out->skipped = (int)i;
            snprintf(out->path, sizeof out->path, "%s", path);
            free(m.shards);
            return DTRAIN_OK;
        }
        free(params);
        free(m.shards);
    }
    if (step == DTRAIN_SCKPT_NEWEST)
        dtrain_snprintf(err, errlen, "no good checkpoint in %s (the newest that failed: %s)", dir, why);
    else
        dtrain_snprintf(err, errlen, "checkpoint step %" PRIu64 " of %s is not usable: %s", step, dir, why);
    return DTRAIN_ERR_INPUT;
}
