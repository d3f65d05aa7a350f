/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Token files and batch order; see dtrain_data.h. */
#include "dtrain_data.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_rng.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
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

/* One mapped file of the data set. */
struct shard {
    char *path;
    void *map;
    size_t map_bytes;
    const unsigned char *tokens;
    int width;       /* bytes per token: 2 (GPT-2's uint16) or 4 (llama-3's uint32) */
    size_t count;
    size_t first;    /* index of its first token in the data set */
};

struct dtrain_tokens {
    struct shard *shards; /* glob order */
    int nshards;
    int owner;            /* 0: a view (dtrain_tokens_split) of another's shards */
    size_t base, count;   /* the window [base, base + count) of the concatenated tokens */
    int max_id;
    const char *max_path; /* the file holding max_id */
};

static void close_shard(struct shard *s)
{
    if (s->map != NULL)
        munmap(s->map, s->map_bytes);
    free(s->path);
}

/* Open, map and check one file: header, size, token width. */
static int open_shard(const char *path, struct shard *s, int *max_id, char *err, size_t errlen)
{
    int rc = DTRAIN_ERR_INPUT;
    struct stat st;
    memset(s, 0, sizeof *s);
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
    if ((s->path = strdup(path)) == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    s->map_bytes = (size_t)st.st_size;
    s->map = mmap(NULL, s->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        snprintf(err, errlen, "cannot map token file %s: %s", path, strerror(errno));
        goto out;
    }
    int32_t header[DTRAIN_TOKENS_HEADER_INTS];
    memcpy(header, s->map, sizeof header);
    if (header[0] == DTRAIN_TOKENS_MAGIC && header[1] == DTRAIN_TOKENS_VERSION) {
        s->width = 2;
    } else if (header[0] == DTRAIN_TOKENS32_MAGIC && header[1] == DTRAIN_TOKENS32_VERSION) {
        s->width = 4;
    } else if (header[0] == DTRAIN_TOKENS_MAGIC || header[0] == DTRAIN_TOKENS32_MAGIC) {
        snprintf(err, errlen, "token file %s has version %ld; supported are magic %d version %d (uint16 tokens) "
                 "and magic %d version %d (uint32 tokens)", path, (long)header[1], DTRAIN_TOKENS_MAGIC,
                 DTRAIN_TOKENS_VERSION, DTRAIN_TOKENS32_MAGIC, DTRAIN_TOKENS32_VERSION);
        goto out;
    } else {
        snprintf(err, errlen, "%s is not a token file: magic %ld, expected %d or %d (llm.c's layout)",
                 path, (long)header[0], DTRAIN_TOKENS_MAGIC, DTRAIN_TOKENS32_MAGIC);
        goto out;
    }
    if (header[2] < 0) {
        snprintf(err, errlen, "token file %s has a negative token count %ld", path, (long)header[2]);
        goto out;
    }
    s->count = (size_t)header[2];
    size_t expect = HEADER_BYTES + s->count * (size_t)s->width;
    if (s->map_bytes != expect) {
        snprintf(err, errlen, "token file %s is %s: its header says %zu tokens (%zu bytes), "
                 "the file has %zu bytes", path, s->map_bytes < expect ? "truncated" : "too long",
                 s->count, expect, s->map_bytes);
        goto out;
    }
    s->tokens = (const unsigned char *)s->map + HEADER_BYTES;
    long top = -1;
    if (s->width == 2) {
        const uint16_t *t = (const uint16_t *)s->tokens;
        for (size_t i = 0; i < s->count; i++)
            if (t[i] > top)
                top = t[i];
    } else {
        const uint32_t *t = (const uint32_t *)s->tokens;
        for (size_t i = 0; i < s->count; i++)
            if (t[i] > top)
                top = t[i];
    }
    if (top > INT32_MAX) {
        snprintf(err, errlen, "token file %s holds token id %ld, above any vocabulary", path, top);
        goto out;
    }
    *max_id = (int)top;
    rc = DTRAIN_OK;
out:
    close(fd);
    if (rc != DTRAIN_OK) {
        close_shard(s);
        memset(s, 0, sizeof *s);
    }
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dtrain_tokens_open(const char *path, struct dtrain_tokens **out, char *err, size_t errlen)
{
    int rc = DTRAIN_OK;
    glob_t g;
    int globbed = strpbrk(path, "*?[") != NULL;
    char *one[1] = {(char *)path};
    char **names = one;
    size_t n = 1;
    *out = NULL;
    if (globbed) {
        int grc = glob(path, GLOB_ERR, NULL, &g);
        if (grc == GLOB_NOMATCH) {
            snprintf(err, errlen, "no token file matches %s", path);
            return DTRAIN_ERR_INPUT;
        }
        if (grc != 0) {
            snprintf(err, errlen, "cannot list the token files of %s: %s", path,
                     grc == GLOB_NOSPACE ? "out of memory" : "a folder cannot be read");
            globfree(&g);
            return DTRAIN_ERR_INPUT;
        }
        names = g.gl_pathv;
        n = g.gl_pathc;
        qsort(names, n, sizeof *names, by_name); /* byte order, whatever the locale */
    }
    struct dtrain_tokens *tok = calloc(1, sizeof *tok);
    if (tok == NULL || (tok->shards = calloc(n, sizeof *tok->shards)) == NULL) {
        free(tok);
        snprintf(err, errlen, "out of memory");
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    tok->owner = 1;
    tok->max_id = -1;
    for (size_t i = 0; i < n; i++) {
        int top;
        if ((rc = open_shard(names[i], &tok->shards[i], &top, err, errlen)) != DTRAIN_OK)
            break;
        tok->nshards++;
        tok->shards[i].first = tok->count;
        tok->count += tok->shards[i].count;
        if (top > tok->max_id) {
            tok->max_id = top;
            tok->max_path = tok->shards[i].path;
        }
    }
    if (rc != DTRAIN_OK) {
        dtrain_tokens_close(tok);
        goto out;
    }
    *out = tok;
out:
    if (globbed)
        globfree(&g);
    return rc;
}

void dtrain_tokens_close(struct dtrain_tokens *tok)
{
    if (tok == NULL)
        return;
    if (tok->owner) {
        for (int i = 0; i < tok->nshards; i++)
            close_shard(&tok->shards[i]);
        free(tok->shards);
    }
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
    *v = *tok;
    v->owner = 0;
    tok->count -= tail;
    v->base = tok->base + tok->count;
    v->count = tail;
    *val = v;
    return DTRAIN_OK;
}

size_t dtrain_tokens_count(const struct dtrain_tokens *tok) { return tok->count; }
int dtrain_tokens_max_id(const struct dtrain_tokens *tok) { return tok->max_id; }
const char *dtrain_tokens_max_id_file(const struct dtrain_tokens *tok)
{
    return tok->max_path != NULL ? tok->max_path : "";
}
int dtrain_tokens_files(const struct dtrain_tokens *tok) { return tok->nshards; }

/* Tokens [at, at + n) of the window, as int32, across files. */
static void read_tokens(const struct dtrain_tokens *tok, size_t at, size_t n, int32_t *out)
{
    size_t g = tok->base + at;
    int lo = 0, hi = tok->nshards - 1;
    while (lo < hi) { /* the last file starting at or before g */
        int mid = lo + (hi - lo + 1) / 2;
        if (tok->shards[mid].first <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    for (int i = lo; n > 0 && i < tok->nshards; i++) {
        const struct shard *s = &tok->shards[i];
        if (g >= s->first + s->count)
            continue; /* an empty file */
        size_t off = g - s->first, take = s->count - off < n ? s->count - off : n;
        if (s->width == 2) {
            const uint16_t *t = (const uint16_t *)s->tokens + off;
            for (size_t j = 0; j < take; j++)
                out[j] = t[j];
        } else {
            const uint32_t *t = (const uint32_t *)s->tokens + off;
            for (size_t j = 0; j < take; j++)
                out[j] = (int32_t)t[j];
        }
        out += take;
        g += take;
        n -= take;
    }
}

/* The header of a file of n tokens of `width` bytes (2 or 4), then the tokens. */
static int tokens_write(const char *path, const void *tokens, size_t n, int width, char *err, size_t errlen)
{
    if (n > (size_t)DTRAIN_TOKENS_MAX_COUNT) {
        snprintf(err, errlen, "%zu tokens do not fit a token file (at most %ld)", n,
                 DTRAIN_TOKENS_MAX_COUNT);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_out_file o;
    int32_t header[DTRAIN_TOKENS_HEADER_INTS] = {0};
    header[0] = width == 2 ? DTRAIN_TOKENS_MAGIC : DTRAIN_TOKENS32_MAGIC;
    header[1] = width == 2 ? DTRAIN_TOKENS_VERSION : DTRAIN_TOKENS32_VERSION;
    header[2] = (int32_t)n;
    int rc = dtrain_out_open(&o, path, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_out_write(&o, header, sizeof header);
    dtrain_out_write(&o, tokens, n * (size_t)width);
    return dtrain_out_commit(&o, err, errlen);
}

int dtrain_tokens_write(const char *path, const uint16_t *tokens, size_t n,
                        char *err, size_t errlen)
{
    return tokens_write(path, tokens, n, 2, err, errlen);
}

int dtrain_tokens_write32(const char *path, const uint32_t *tokens, size_t n,
                          char *err, size_t errlen)
{
    return tokens_write(path, tokens, n, 4, err, errlen);
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

void dtrain_tokens_rows(const struct dtrain_tokens *tok, int B, int T, enum dtrain_data_order order, uint64_t seed,
                        uint64_t k, int row0, int nrows, int32_t *inputs, int32_t *targets)
{
    size_t per = (size_t)B * T;
    uint64_t nb = (tok->count - 1) / per;
    uint64_t slot = k % nb;
    if (order == DTRAIN_ORDER_SHUFFLED)
        slot = dtrain_rng_permute(slot, nb, dtrain_rng_bits(seed, SHUFFLE_STREAM, k / nb));
    size_t at = slot * per + (size_t)row0 * T, n = (size_t)nrows * T;
    read_tokens(tok, at, n, inputs);
    read_tokens(tok, at + 1, n, targets);
}

void dtrain_tokens_batch(const struct dtrain_tokens *tok, int B, int T,
                         enum dtrain_data_order order, uint64_t seed, uint64_t k,
                         int32_t *inputs, int32_t *targets)
{
    dtrain_tokens_rows(tok, B, T, order, seed, k, 0, B, inputs, targets);
}
