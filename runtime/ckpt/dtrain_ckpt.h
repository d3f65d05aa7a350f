/* libdtrain: training checkpoints (dtrain's own format, version 1).
 *
 * One file holds what a run needs to continue bit-identically: the model
 * shape, the batch shape, the step, the data position, the seeds (every
 * random draw in dtrain is a pure function of a seed and a counter, so the
 * seeds are the whole RNG state), and a slice of the flat parameter vector
 * with its AdamW moments m and v.  A single-process checkpoint holds the
 * whole vector (offset 0, count = all parameters); a sharded checkpoint
 * (a later issue) writes one file per shard plus a manifest.
 *
 * Layout, little-endian:
 *   512-byte header: "DTRNCKPT", u32 version, u32 header bytes,
 *     i32 maxT V Vp L NH C, i32 B T, u32 data order,
 *     u64 step, data batches consumed, seed, data seed,
 *     u64 parameters in the model, shard offset, shard count,
 *     u64 checksum of the payload (64-bit FNV-1a over its 32-bit words),
 *     zeros;
 *   payload: params[count], m[count], v[count], fp32.
 * Files are written to a temporary name and renamed into place. */
#ifndef DTRAIN_CKPT_H
#define DTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_CKPT_MAGIC "DTRNCKPT"
#define DTRAIN_CKPT_VERSION 1
#define DTRAIN_CKPT_HEADER_BYTES 512

struct dtrain_ckpt_meta {
    struct dtrain_gpt2_config model;
    int batch, seq;            /* B, T of the run */
    int data_order;            /* enum dtrain_data_order */
    uint64_t step;             /* optimizer updates done */
    uint64_t data_batches;     /* batches consumed: the next batch index */
    uint64_t seed;             /* model initialisation */
    uint64_t data_seed;        /* shuffled order */
    uint64_t nparams;          /* parameters in the whole model */
    uint64_t shard_offset;     /* first parameter in this file */
    uint64_t shard_count;      /* parameters in this file */
};

/* Write params, m, v (shard_count floats each, host memory). */
int dtrain_ckpt_save(const char *path, const struct dtrain_ckpt_meta *meta, const float *params,
                     const float *m, const float *v, char *err, size_t errlen);

/* Read and check the header (magic, version, shape, size of the file). */
int dtrain_ckpt_read_meta(const char *path, struct dtrain_ckpt_meta *meta,
                          char *err, size_t errlen);

/* Read the payload into params, m, v (meta->shard_count floats each, as
 * returned by dtrain_ckpt_read_meta) and verify its checksum. */
int dtrain_ckpt_load(const char *path, struct dtrain_ckpt_meta *meta, float *params, float *m,
                     float *v, char *err, size_t errlen);

/* The checksum of the format (64-bit FNV-1a over little-endian 32-bit
 * words): start from DTRAIN_CKPT_CHECKSUM_INIT and feed `words` words at
 * a time.  Sharded checkpoints (dtrain_shard_ckpt.h) use it too. */
#define DTRAIN_CKPT_CHECKSUM_INIT 0xcbf29ce484222325ULL
uint64_t dtrain_ckpt_checksum(uint64_t h, const void *data, size_t words);

#ifdef __cplusplus
}
#endif

#endif
