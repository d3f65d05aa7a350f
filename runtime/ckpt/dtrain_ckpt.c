/* Training checkpoints; see dtrain_ckpt.h. */
#include "dtrain_ckpt.h"
#include "dtrain_data.h"
#include "dtrain_io.h"

#include <stdio.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints are little-endian; this code writes them natively"
#endif

#define FNV_OFFSET DTRAIN_CKPT_CHECKSUM_INIT
#define FNV_PRIME 0x100000001b3ULL

uint64_t dtrain_ckpt_checksum(uint64_t h, const void *data, size_t words)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < words; i++) {
        uint32_t w;
        memcpy(&w, p + 4 * i, 4); /* any alignment; compiles to a load */
        h = (h ^ w) * FNV_PRIME;
    }
    return h;
}

static uint64_t checksum_words(uint64_t h, const float *x, size_t n)
{
    return dtrain_ckpt_checksum(h, x, n);
}

/* Header fields at fixed offsets; put/get copy native little-endian values. */
enum {
    OFF_MAGIC = 0, OFF_VERSION = 8, OFF_HEADER_BYTES = 12,
    OFF_MODEL = 16,          /* 6 x i32: maxT V Vp L NH C */
    OFF_BATCH = 40, OFF_SEQ = 44, OFF_ORDER = 48,
    OFF_STEP = 56, OFF_DATA_BATCHES = 64, OFF_SEED = 72, OFF_DATA_SEED = 80,
    OFF_NPARAMS = 88, OFF_SHARD_OFFSET = 96, OFF_SHARD_COUNT = 104, OFF_CHECKSUM = 112,
};

static void put32(unsigned char *h, size_t off, int32_t v) { memcpy(h + off, &v, 4); }
static void put64(unsigned char *h, size_t off, uint64_t v) { memcpy(h + off, &v, 8); }
static int32_t get32(const unsigned char *h, size_t off) { int32_t v; memcpy(&v, h + off, 4); return v; }
static uint64_t get64(const unsigned char *h, size_t off) { uint64_t v; memcpy(&v, h + off, 8); return v; }

int dtrain_ckpt_save(const char *path, const struct dtrain_ckpt_meta *meta, const float *params,
                     const float *m, const float *v, char *err, size_t errlen)
{
    unsigned char h[DTRAIN_CKPT_HEADER_BYTES] = {0};
    struct dtrain_out_file o;
    size_t n = (size_t)meta->shard_count;
    const struct dtrain_gpt2_config *c = &meta->model;
    memcpy(h + OFF_MAGIC, DTRAIN_CKPT_MAGIC, 8);
    put32(h, OFF_VERSION, DTRAIN_CKPT_VERSION);
    put32(h, OFF_HEADER_BYTES, DTRAIN_CKPT_HEADER_BYTES);
    int32_t shape[6] = {c->max_seq_len, c->vocab_size, c->padded_vocab_size,
                        c->num_layers, c->num_heads, c->channels};
    for (int i = 0; i < 6; i++)
        put32(h, OFF_MODEL + 4 * (size_t)i, shape[i]);
    put32(h, OFF_BATCH, meta->batch);
    put32(h, OFF_SEQ, meta->seq);
    put32(h, OFF_ORDER, meta->data_order);
    put64(h, OFF_STEP, meta->step);
    put64(h, OFF_DATA_BATCHES, meta->data_batches);
    put64(h, OFF_SEED, meta->seed);
    put64(h, OFF_DATA_SEED, meta->data_seed);
    put64(h, OFF_NPARAMS, meta->nparams);
    put64(h, OFF_SHARD_OFFSET, meta->shard_offset);
    put64(h, OFF_SHARD_COUNT, meta->shard_count);
    uint64_t sum = checksum_words(FNV_OFFSET, params, n);
    sum = checksum_words(sum, m, n);
    sum = checksum_words(sum, v, n);
    put64(h, OFF_CHECKSUM, sum);

    int rc = dtrain_out_open(&o, path, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_out_write(&o, h, sizeof h);
    dtrain_out_write(&o, params, n * sizeof(float));
    dtrain_out_write(&o, m, n * sizeof(float));
    dtrain_out_write(&o, v, n * sizeof(float));
    return dtrain_out_commit(&o, err, errlen);
}

/* Open, read the header into meta and check it; *f is left at the payload. */
static int open_checked(const char *path, struct dtrain_ckpt_meta *meta, uint64_t *sum, FILE **f,
                        char *err, size_t errlen)
{
    unsigned char h[DTRAIN_CKPT_HEADER_BYTES];
    size_t size;
    int rc = dtrain_in_open(path, "checkpoint", f, &size, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    rc = DTRAIN_ERR_INPUT;
    if (size < sizeof h || fread(h, sizeof h, 1, *f) != 1) {
        snprintf(err, errlen, "checkpoint %s is truncated: %zu bytes, shorter than its %d-byte "
                 "header", path, size, DTRAIN_CKPT_HEADER_BYTES);
        goto fail;
    }
    if (memcmp(h + OFF_MAGIC, DTRAIN_CKPT_MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s is not a dtrain checkpoint (bad magic)", path);
        goto fail;
    }
    if (get32(h, OFF_VERSION) != DTRAIN_CKPT_VERSION ||
        get32(h, OFF_HEADER_BYTES) != DTRAIN_CKPT_HEADER_BYTES) {
        snprintf(err, errlen, "checkpoint %s has version %ld; this dtrain reads version %d",
                 path, (long)get32(h, OFF_VERSION), DTRAIN_CKPT_VERSION);
        goto fail;
    }
    memset(meta, 0, sizeof *meta);
    struct dtrain_gpt2_config *c = &meta->model;
    c->max_seq_len = get32(h, OFF_MODEL);
    c->vocab_size = get32(h, OFF_MODEL + 4);
    c->padded_vocab_size = get32(h, OFF_MODEL + 8);
    c->num_layers = get32(h, OFF_MODEL + 12);
    c->num_heads = get32(h, OFF_MODEL + 16);
    c->channels = get32(h, OFF_MODEL + 20);
    meta->batch = get32(h, OFF_BATCH);
    meta->seq = get32(h, OFF_SEQ);
    meta->data_order = get32(h, OFF_ORDER);
    meta->step = get64(h, OFF_STEP);
    meta->data_batches = get64(h, OFF_DATA_BATCHES);
    meta->seed = get64(h, OFF_SEED);
    meta->data_seed = get64(h, OFF_DATA_SEED);
    meta->nparams = get64(h, OFF_NPARAMS);
    meta->shard_offset = get64(h, OFF_SHARD_OFFSET);
    meta->shard_count = get64(h, OFF_SHARD_COUNT);
    *sum = get64(h, OFF_CHECKSUM);
    char why[256];
    if (dtrain_gpt2_config_check(c, why, sizeof why) != DTRAIN_OK) {
        snprintf(err, errlen, "checkpoint %s has an impossible shape: %s", path, why);
        goto fail;
    }
    if (meta->batch < 1 || meta->seq < 1 || meta->seq > c->max_seq_len ||
        (meta->data_order != DTRAIN_ORDER_SEQUENTIAL && meta->data_order != DTRAIN_ORDER_SHUFFLED) ||
        meta->nparams != dtrain_gpt2_param_count(c) || meta->shard_offset > meta->nparams ||
        meta->shard_count > meta->nparams - meta->shard_offset) {
        snprintf(err, errlen, "checkpoint %s has an inconsistent header (batch shape, data "
                 "order or parameter counts)", path);
        goto fail;
    }
    size_t expect = DTRAIN_CKPT_HEADER_BYTES + 3 * (size_t)meta->shard_count * sizeof(float);
    if (size != expect) {
        snprintf(err, errlen, "checkpoint %s is %s: its header needs %zu bytes, the file has %zu",
                 path, size < expect ? "truncated" : "too long", expect, size);
        goto fail;
    }
    return DTRAIN_OK;
fail:
    fclose(*f);
    *f = NULL;
    return rc;
}

int dtrain_ckpt_read_meta(const char *path, struct dtrain_ckpt_meta *meta,
                          char *err, size_t errlen)
{
    FILE *f;
    uint64_t sum;
    int rc = open_checked(path, meta, &sum, &f, err, errlen);
    if (rc == DTRAIN_OK)
        fclose(f);
    return rc;
}

int dtrain_ckpt_load(const char *path, struct dtrain_ckpt_meta *meta, float *params, float *m,
                     float *v, char *err, size_t errlen)
{
    FILE *f;
    uint64_t want, sum = FNV_OFFSET;
    int rc = open_checked(path, meta, &want, &f, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    size_t n = (size_t)meta->shard_count;
    float *dst[3] = {params, m, v};
    for (int i = 0; i < 3; i++) {
        if (fread(dst[i], sizeof(float), n, f) != n) {
            snprintf(err, errlen, "cannot read checkpoint %s (file changed while reading?)", path);
            fclose(f);
            return DTRAIN_ERR_INPUT;
        }
        sum = checksum_words(sum, dst[i], n);
    }
    fclose(f);
    if (sum != want) {
        snprintf(err, errlen, "checkpoint %s is corrupt: its checksum does not match its contents",
                 path);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}
