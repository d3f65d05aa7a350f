/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Token files and batch order; see dtrain_data.h. */
#include "dtrain_data.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_rng.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files are little-endian; this code reads them natively"
#endif

#define HEADER_BYTES (DTRAIN_TOKENS_HEADER_INTS * sizeof(int32_t))

struct dtrain_tokens {
    void *map;                 /* NULL: a view into another's mapping (dtrain_tokens_split) */
    size_t map_bytes;
    const uint16_t *tokens;
    size_t count;
    int max_id;
};

int dtrain_tokens_open(const char *path, struct dtrain_tokens **out, char *err, size_t errlen)
{
    int rc = DTRAIN_ERR_INPUT;
    struct dtrain_tokens *tok = NULL;
    struct stat st;
    *out = NULL;
    /* Never a blocking open: a FIFO is refused at once. */
    int fd = dtrain_open_regular(path, O_RDONLY, "token file", NULL, err, errlen);
    if (fd < 0)
        return DTRAIN_ERR_INPUT;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
        goto out;
    }
    if ((size_t)st.st_size < HEADER_BYTES) {
        snprintf(err, errlen, "token file %s is truncated: %lld bytes, shorter than its "
                 "%zu-byte header", path, (long long)st.st_size, HEADER_BYTES);
        goto out;
    }
    tok = calloc(1, sizeof *tok);
    if (tok == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    tok->map_bytes = (size_t)st.st_size;
    tok->map = mmap(NULL, tok->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (tok->map == MAP_FAILED) {
        tok->map = NULL;
        snprintf(err, errlen, "cannot map token file %s: %s", path, strerror(errno));
        goto out;
    }
    int32_t header[DTRAIN_TOKENS_HEADER_INTS];
    memcpy(header, tok->map, sizeof header);
    if (header[0] != DTRAIN_TOKENS_MAGIC) {
        snprintf(err, errlen, "%s is not a token file: magic %ld, expected %d (llm.c's layout)",
                 path, (long)header[0], DTRAIN_TOKENS_MAGIC);
        goto out;
    }
    if (header[1] != DTRAIN_TOKENS_VERSION) {
        snprintf(err, errlen, "token file %s has version %ld; only version %d is supported",
                 path, (long)header[1], DTRAIN_TOKENS_VERSION);
        goto out;
    }
    if (header[2] < 0) {
        snprintf(err, errlen, "token file %s has a negative token count %ld", path, (long)header[2]);
        goto out;
    }
    tok->count = (size_t)header[2];
    size_t expect = HEADER_BYTES + tok->count * sizeof(uint16_t);
    if (tok->map_bytes != expect) {
        snprintf(err, errlen, "token file %s is %s: its header says %zu tokens (%zu bytes), "
                 "the file has %zu bytes", path, tok->map_bytes < expect ? "truncated" : "too long",
                 tok->count, expect, tok->map_bytes);
        goto out;
    }
    tok->tokens = (const uint16_t *)((const char *)tok->map + HEADER_BYTES);
    tok->max_id = -1;
    for (size_t i = 0; i < tok->count; i++)
        if (tok->tokens[i] > tok->max_id)
            tok->max_id = tok->tokens[i];
    *out = tok;
    tok = NULL;
    rc = DTRAIN_OK;
out:
    dtrain_tokens_close(tok);
    close(fd);
    return rc;
}

void dtrain_tokens_close(struct dtrain_tokens *tok)
{
    if (tok == NULL)
        return;
    if (tok->map != NULL)
        munmap(tok->map, tok->map_bytes);
    free(tok);
}

int dtrain_tokens_split(struct dtrain_tokens *tok, double fraction, struct dtrain_tokens **val,
                        char *err, size_t errlen)
{
    size_t tail = (size_t)((double)tok->count * fraction);
    *val = NULL;
    if (!(fraction > 0.0 && fraction < 1.0) || tail == 0 || tail == tok->count) {
        snprintf(err, errlen, "holding out %g of %zu tokens for validation leaves %s empty: give a fraction "
                 "between 0 and 1 of a larger file (or --val-data FILE)", fraction, tok->count,
                 tail == 0 ? "the validation part" : "the training part");
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_tokens *v = calloc(1, sizeof *v);
    if (v == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    tok->count -= tail;
    v->tokens = tok->tokens + tok->count;
    v->count = tail;
    v->max_id = tok->max_id;
    *val = v;
    return DTRAIN_OK;
}

size_t dtrain_tokens_count(const struct dtrain_tokens *tok) { return tok->count; }
int dtrain_tokens_max_id(const struct dtrain_tokens *tok) { return tok->max_id; }

int dtrain_tokens_write(const char *path, const uint16_t *tokens, size_t n,
                        char *err, size_t errlen)
{
    if (n > (size_t)DTRAIN_TOKENS_MAX_COUNT) {
        snprintf(err, errlen, "%zu tokens do not fit a token file (at most %ld)", n,
                 DTRAIN_TOKENS_MAX_COUNT);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_out_file o;
    int32_t header[DTRAIN_TOKENS_HEADER_INTS] = {0};
    header[0] = DTRAIN_TOKENS_MAGIC;
    header[1] = DTRAIN_TOKENS_VERSION;
    header[2] = (int32_t)n;
    int rc = dtrain_out_open(&o, path, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_out_write(&o, header, sizeof header);
    dtrain_out_write(&o, tokens, n * sizeof(uint16_t));
    return dtrain_out_commit(&o, err, errlen);
}

int dtrain_tokens_batches(const struct dtrain_tokens *tok, int B, int T, uint64_t *nbatches,
                          char *err, size_t errlen)
{
    size_t per = (size_t)B * T;
    if (B < 1 || T < 1 || tok->count < per + 1) {
        snprintf(err, errlen, "the token file has %zu tokens; a batch of %d x %d needs at least %zu",
                 tok->count, B, T, per + 1);
        return DTRAIN_ERR_INPUT;
    }
    *nbatches = (tok->count - 1) / per;
    return DTRAIN_OK;
}

/* Stream id that keeps the shuffle's keys apart from other random draws. */
#define SHUFFLE_STREAM 0x5348554646ULL

void dtrain_tokens_batch(const struct dtrain_tokens *tok, int B, int T,
                         enum dtrain_data_order order, uint64_t seed, uint64_t k,
                         int32_t *inputs, int32_t *targets)
{
    size_t per = (size_t)B * T;
    uint64_t nb = (tok->count - 1) / per;
    uint64_t slot = k % nb;
    if (order == DTRAIN_ORDER_SHUFFLED)
        slot = dtrain_rng_permute(slot, nb, dtrain_rng_bits(seed, SHUFFLE_STREAM, k / nb));
    const uint16_t *src = tok->tokens + slot * per;
    for (size_t i = 0; i < per; i++) {
        inputs[i] = src[i];
        targets[i] = src[i + 1];
    }
}
