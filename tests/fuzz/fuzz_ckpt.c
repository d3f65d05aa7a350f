/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: a sharded checkpoint as a resume reads it.  The input is a
 * manifest.json, then for each shard a line "--shard--" and the shard's
 * bytes; they are written as step 1 of a checkpoint folder, which is then
 * read as dtrain-train --resume does: the model from the newest manifest
 * (dtrain_sckpt_read_model), the manifest checked against the run's
 * config (sckpt_read_manifest: counts, layout, shard entries), each shard
 * verified (header against the manifest, checksum) and read into the
 * pieces of a whole model (shard headers and run tables; also when the
 * checksum is wrong, so that mutated tables are parsed).  The config is
 * the one tests/fuzz/corpus/ckpt/step1 was written with:
 *   dtrain-train --layers 1 --channels 4 --heads 1 --vocab-size 16
 *     --padded-vocab-size 16 --max-seq-len 4 --batch 1 --seq 4 --steps 1
 * (defaults otherwise; a token file of ids below 16), so that mutations
 * of a real checkpoint get past the comparison with the config; small
 * (5 KB), so that the suite's pass gets through its executions. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_train.h"
#include "fuzz_files.h"
#include "ckpt/sckpt_internal.h"

#define SEPARATOR "\n--shard--\n"
#define MAX_SHARDS 8

static const uint8_t *find(const uint8_t *p, const uint8_t *end, const char *s)
{
    size_t n = strlen(s);
    for (; (size_t)(end - p) >= n; p++)
        if (memcmp(p, s, n) == 0)
            return p;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_tmpdir();
    char step[256], file[320], why[1024];
    if (dir == NULL || sckpt_step_path(step, sizeof step, dir, 1, "") != 0)
        return 0;
    struct dtrain_train_config cfg;
    dtrain_train_config_defaults(&cfg);
    cfg.model = (struct dtrain_model_config){.max_seq_len = 4, .vocab_size = 16, .padded_vocab_size = 16,
                                            .num_layers = 1, .num_heads = 1, .channels = 4};
    cfg.batch = 1;
    cfg.seq = 4;
    cfg.steps = 1;

    /* The folder: manifest.json and shard-NNNNN.bin from the input. */
    sckpt_remove_step_dir(step);
    if (sckpt_make_dirs(step) != 0)
        return 0;
    const uint8_t *end = data + size, *part = data;
    int nshards = -1;
    while (part != NULL && nshards < MAX_SHARDS) {
        const uint8_t *sep = find(part, end, SEPARATOR);
        const uint8_t *stop = sep != NULL ? sep : end;
        char name[32];
        if (nshards < 0)
            snprintf(name, sizeof name, "%s", DTRAIN_SCKPT_MANIFEST);
        else
            sckpt_shard_name(name, sizeof name, nshards);
        snprintf(file, sizeof file, "%s/%s", step, name);
        if (fuzz_write(file, part, (size_t)(stop - part)) != 0)
            return 0;
        nshards++;
        part = sep != NULL ? sep + strlen(SEPARATOR) : NULL;
    }

    struct dtrain_model_config model;
    (void)dtrain_sckpt_read_model(dir, &model, why, sizeof why);
    struct manifest m;
    if (sckpt_read_manifest(step, 1, &cfg, &m, why, sizeof why) != GOOD)
        return 0;
    uint64_t bytes = 0;
    for (long r = 0; r < m.layout.world_size && r < MAX_SHARDS; r++)
        (void)sckpt_shard_verify(step, r, &m, &bytes, why, sizeof why);
    size_t n = (size_t)m.nparams;
    float *params = malloc((n + 1) * sizeof *params), *mo = malloc((n + 1) * sizeof *mo),
          *v = malloc((n + 1) * sizeof *v);
    /* Read even when a checksum differs: a shard may change between the
     * check and the read, and the run tables are parsed only here. */
    if (m.layout.world_size <= MAX_SHARDS && params != NULL && mo != NULL && v != NULL) {
        struct dtrain_sckpt_piece pieces[2] = {{0, n / 2, params, mo, v},
                                               {n / 2, n - n / 2, params + n / 2, NULL, v + n / 2}};
        (void)sckpt_load_pieces(step, &m, pieces, 2, &bytes, NULL, why, sizeof why);
    }
    free(params);
    free(mo);
    free(v);
    free(m.shards);
    return 0;
}
