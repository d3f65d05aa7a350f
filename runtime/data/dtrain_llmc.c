/* SPDX-License-Identifier: GPL-2.0-or-later */
/* llm.c model files; see dtrain_llmc.h. */
#include "dtrain_llmc.h"
#include "dtrain_io.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llm.c model files are little-endian; this code reads them natively"
#endif

#define HEADER_BYTES (DTRAIN_LLMC_HEADER_INTS * sizeof(int32_t))

/* Open, read and check the header; on success *f is positioned at the parameters. */
static int open_checked(const char *path, struct dtrain_model_config *cfg, FILE **f,
                        char *err, size_t errlen)
{
    int32_t h[DTRAIN_LLMC_HEADER_INTS];
    size_t size;
    int rc = dtrain_in_open(path, "llm.c model file", f, &size, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    rc = DTRAIN_ERR_INPUT;
    if (size < HEADER_BYTES || fread(h, sizeof h, 1, *f) != 1) {
        snprintf(err, errlen, "llm.c model file %s is truncated: %zu bytes, shorter than its "
                 "%zu-byte header", path, size, HEADER_BYTES);
        goto fail;
    }
    if (h[0] != DTRAIN_LLMC_MAGIC) {
        snprintf(err, errlen, "%s is not an llm.c model file: magic %ld, expected %d",
                 path, (long)h[0], DTRAIN_LLMC_MAGIC);
        goto fail;
    }
    if (h[1] != DTRAIN_LLMC_VERSION) {
        snprintf(err, errlen, "llm.c model file %s has version %ld; only version %d "
                 "(fp32, padded vocabulary) is supported", path, (long)h[1], DTRAIN_LLMC_VERSION);
        goto fail;
    }
    memset(cfg, 0, sizeof *cfg); /* a GPT-2: the family's own fields 0 */
    cfg->max_seq_len = h[2];
    cfg->vocab_size = h[3];
    cfg->num_layers = h[4];
    cfg->num_heads = h[5];
    cfg->channels = h[6];
    cfg->padded_vocab_size = h[7];
    char why[256];
    if (dtrain_model_config_check(cfg, why, sizeof why) != DTRAIN_OK) {
        snprintf(err, errlen, "llm.c model file %s has an impossible shape: %s", path, why);
        goto fail;
    }
    size_t expect = HEADER_BYTES + dtrain_model_param_count(cfg) * sizeof(float);
    if (size != expect) {
        snprintf(err, errlen, "llm.c model file %s is %s: its shape needs %zu bytes, the file "
                 "has %zu", path, size < expect ? "truncated" : "too long", expect, size);
        goto fail;
    }
    return DTRAIN_OK;
fail:
    fclose(*f);
    *f = NULL;
    return rc;
}

int dtrain_llmc_read_config(const char *path, struct dtrain_model_config *cfg,
                            char *err, size_t errlen)
{
    FILE *f;
    int rc = open_checked(path, cfg, &f, err, errlen);
    if (rc == DTRAIN_OK)
        fclose(f);
    return rc;
}

int dtrain_llmc_load(const char *path, const struct dtrain_model_config *expect, float *params,
                     char *err, size_t errlen)
{
    struct dtrain_model_config got;
    FILE *f;
    int rc = open_checked(path, &got, &f, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (memcmp(&got, expect, sizeof got) != 0) {
        snprintf(err, errlen, "llm.c model file %s has shape maxT=%d V=%d Vp=%d L=%d NH=%d C=%d, "
                 "the model is maxT=%d V=%d Vp=%d L=%d NH=%d C=%d", path,
                 got.max_seq_len, got.vocab_size, got.padded_vocab_size, got.num_layers,
                 got.num_heads, got.channels, expect->max_seq_len, expect->vocab_size,
                 expect->padded_vocab_size, expect->num_layers, expect->num_heads, expect->channels);
        fclose(f);
        return DTRAIN_ERR_INPUT;
    }
    size_t n = dtrain_model_param_count(expect);
    if (fread(params, sizeof(float), n, f) != n) {
        snprintf(err, errlen, "cannot read the parameters of %s (file changed while reading?)", path);
        rc = DTRAIN_ERR_INPUT;
    }
    fclose(f);
    return rc;
}

int dtrain_llmc_save(const char *path, const struct dtrain_model_config *cfg, const float *params,
                     char *err, size_t errlen)
{
    struct dtrain_out_file o;
    int32_t h[DTRAIN_LLMC_HEADER_INTS] = {0};
    int rc = dtrain_model_config_check(cfg, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (cfg->family != DTRAIN_FAMILY_GPT2) {
        snprintf(err, errlen, "llm.c's model file holds GPT-2 models only: save a %s model with --save-hf DIR",
                 dtrain_model_family_name(cfg->family));
        return DTRAIN_ERR_INPUT;
    }
    h[0] = DTRAIN_LLMC_MAGIC;
    h[1] = DTRAIN_LLMC_VERSION;
    h[2] = cfg->max_seq_len;
    h[3] = cfg->vocab_size;
    h[4] = cfg->num_layers;
    h[5] = cfg->num_heads;
    h[6] = cfg->channels;
    h[7] = cfg->padded_vocab_size;
    if ((rc = dtrain_out_open(&o, path, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_out_write(&o, h, sizeof h);
    dtrain_out_write(&o, params, dtrain_model_param_count(cfg) * sizeof(float));
    return dtrain_out_commit(&o, err, errlen);
}
