/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: a Hugging Face model folder as --init-hf reads it.  The input
 * is written as DIR/model.safetensors and opened (header length, JSON
 * header, dtypes, shapes, offsets), every tensor read as float32; the same
 * bytes are then parsed as a config.json (dtrain_hf_config_parse) and as
 * a model.safetensors.index.json beside that file (shard names, the map
 * against the shard's tensors). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_files.h"
#include "model/dtrain_hf.h"

/* Tensors larger than this are not read (the header is still checked). */
#define MAX_READ (1u << 20)

static void read_all(struct dtrain_hf_dir *d)
{
    char why[512];
    for (size_t i = 0; i < dtrain_hf_dir_count(d); i++) {
        const struct dtrain_hf_tensor *t = dtrain_hf_dir_tensor(d, i);
        if (t->count > MAX_READ)
            continue;
        float *v = malloc((t->count + 1) * sizeof *v);
        if (v != NULL)
            (void)dtrain_hf_dir_read_f32(d, t->name, t->rank, t->shape, v, why, sizeof why);
        free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_tmpdir();
    char one[256], two[256], file[320], why[512];
    if (dir == NULL)
        return 0;
    snprintf(one, sizeof one, "%s/one", dir);
    snprintf(two, sizeof two, "%s/two", dir);
    mkdir(one, 0755);
    mkdir(two, 0755);
    snprintf(file, sizeof file, "%s/model.safetensors", one);
    if (fuzz_write(file, data, size) != 0)
        return 0;
    struct dtrain_hf_dir *d = NULL;
    if (dtrain_hf_dir_open(one, &d, why, sizeof why) == DTRAIN_OK)
        read_all(d);
    dtrain_hf_dir_close(d);

    struct dtrain_hf_config c;
    (void)dtrain_hf_config_parse((const char *)data, size, "config.json", &c, why, sizeof why);

    /* the input as an index whose shards are copies of the input */
    snprintf(file, sizeof file, "%s/model.safetensors.index.json", two);
    if (fuzz_write(file, data, size) != 0)
        return 0;
    snprintf(file, sizeof file, "%s/shard.safetensors", two);
    if (fuzz_write(file, data, size) != 0)
        return 0;
    d = NULL;
    if (dtrain_hf_dir_open(two, &d, why, sizeof why) == DTRAIN_OK)
        read_all(d);
    dtrain_hf_dir_close(d);
    return 0;
}
