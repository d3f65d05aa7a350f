/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: token files and the order of batches.
 *
 * A token file has llm.c's layout: 256 little-endian int32 (magic 20240520,
 * version 1, token count, the rest 0), then the tokens as little-endian
 * uint16 (GPT-2's); or llm.c's larger-vocabulary variant, magic 20240801
 * version 7, uint32 tokens (llama-3's).  The data is one file, or a glob
 * of them (llm.c's shards, `fineweb_train_*.bin`): the files in byte order
 * of their names, read as one stream of tokens (a batch may span two).
 * Each file is memory-mapped; dtrain_tokens_open() checks every header
 * against its file's size and finds the largest token id, so a file that
 * does not fit the model's vocabulary is refused, by name, before training
 * starts.
 *
 * Batch k (k = 0, 1, ...) of B x T tokens starts at token s*B*T of the data:
 * inputs are the B*T tokens from there, targets the same shifted by one.
 * The file holds nb = (count - 1) / (B*T) such batches.  In sequential order
 * s = k mod nb (so batch k uses tokens k*B*T .. k*B*T + B*T while it fits,
 * then the order wraps to the start); in shuffled order s is a seeded
 * permutation of 0..nb-1, a new one each pass over the file.  The order is a
 * pure function of (k, seed): a checkpoint only needs k, and a data-parallel
 * rank reads only its rows of batch k (dtrain_tokens_rows), whatever D is. */
#ifndef DTRAIN_DATA_H
#define DTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_TOKENS_MAGIC 20240520
#define DTRAIN_TOKENS_VERSION 1
#define DTRAIN_TOKENS_HEADER_INTS 256
#define DTRAIN_TOKENS32_MAGIC 20240801 /* llm.c's llama-3 files: uint32 tokens */
#define DTRAIN_TOKENS32_VERSION 7
#define DTRAIN_TOKENS_MAX_COUNT 2147483647L /* the header's count is an int32 (per file) */

enum dtrain_data_order {
    DTRAIN_ORDER_SEQUENTIAL = 0,
    DTRAIN_ORDER_SHUFFLED = 1,
};

struct dtrain_tokens; /* opaque: an open, checked token file */

/* Open and check a token file, or every file a glob pattern (with * ? or
 * [) matches.  DTRAIN_ERR_INPUT, with one line naming the file, when one
 * is missing, unreadable, of the wrong magic or version, or its size does
 * not match the header's count; or when the pattern matches nothing. */
int dtrain_tokens_open(const char *path, struct dtrain_tokens **out, char *err, size_t errlen);
void dtrain_tokens_close(struct dtrain_tokens *tok);
size_t dtrain_tokens_count(const struct dtrain_tokens *tok);
/* The largest token id in the data (-1 when empty), the file holding it,
 * and how many files the data has. */
int dtrain_tokens_max_id(const struct dtrain_tokens *tok);
const char *dtrain_tokens_max_id_file(const struct dtrain_tokens *tok);
int dtrain_tokens_files(const struct dtrain_tokens *tok);

/* Hold out the last `fraction` (0 < fraction < 1) of tok's tokens for
 * validation: tok keeps the head, *val is a view of the tail that shares
 * tok's mapping (close it before tok).  DTRAIN_ERR_INPUT when either part
 * would be empty. */
int dtrain_tokens_split(struct dtrain_tokens *tok, double fraction, struct dtrain_tokens **val,
                        char *err, size_t errlen);

/* Write tokens (n <= DTRAIN_TOKENS_MAX_COUNT) as a token file: uint16
 * (magic 20240520 version 1), or uint32 (magic 20240801 version 7, for a
 * vocabulary larger than 65536 such as llama-3's). */
int dtrain_tokens_write(const char *path, const uint16_t *tokens, size_t n,
                        char *err, size_t errlen);
int dtrain_tokens_write32(const char *path, const uint32_t *tokens, size_t n,
                          char *err, size_t errlen);

/* Number of distinct B x T batches in the file; DTRAIN_ERR_INPUT (with a
 * line saying how many tokens are needed) when there is not even one. */
int dtrain_tokens_batches(const struct dtrain_tokens *tok, int B, int T, uint64_t *nbatches,
                          char *err, size_t errlen);

/* Fill inputs and targets (nrows*T each) with rows row0 .. row0+nrows-1
 * of batch k: only those tokens are read.  B and T must have passed
 * dtrain_tokens_batches(). */
void dtrain_tokens_rows(const struct dtrain_tokens *tok, int B, int T, enum dtrain_data_order order, uint64_t seed,
                        uint64_t k, int row0, int nrows, int32_t *inputs, int32_t *targets);

/* The whole batch k: dtrain_tokens_rows(..., 0, B, ...). */
void dtrain_tokens_batch(const struct dtrain_tokens *tok, int B, int T,
                         enum dtrain_data_order order, uint64_t seed, uint64_t k,
                         int32_t *inputs, int32_t *targets);

#ifdef __cplusplus
}
#endif

#endif
