/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: the two binary files a run reads, from one input written to a
 * file: as a token file (dtrain_tokens_open: header, count against the
 * size, largest id; then batches of it) and as an llm.c model file
 * (dtrain_llmc_read_config: header, shape, size; then the parameters). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtrain_data.h"
#include "dtrain_llmc.h"
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_tmpdir();
    char path[128], err[1024];
    if (dir == NULL)
        return 0;
    snprintf(path, sizeof path, "%s/input.bin", dir);
    if (fuzz_write(path, data, size) != 0)
        return 0;

    struct dtrain_tokens *tok = NULL;
    if (dtrain_tokens_open(path, &tok, err, sizeof err) == DTRAIN_OK) {
        uint64_t nb = 0;
        int32_t in[16], tg[16];
        for (int bt = 1; bt <= 4; bt++)
            if (dtrain_tokens_batches(tok, bt, 4 / bt == 0 ? 1 : 4 / bt, &nb, err, sizeof err) == DTRAIN_OK)
                for (uint64_t k = 0; k < 3; k++)
                    dtrain_tokens_batch(tok, bt, 4 / bt == 0 ? 1 : 4 / bt, (enum dtrain_data_order)(k & 1),
                                        7, k * nb, in, tg);
        (void)dtrain_tokens_max_id(tok);
        dtrain_tokens_close(tok);
    }

    struct dtrain_model_config cfg;
    if (dtrain_llmc_read_config(path, &cfg, err, sizeof err) == DTRAIN_OK) {
        size_t n = dtrain_model_param_count(&cfg);
        float *params = n <= (1u << 22) ? malloc(n * sizeof *params) : NULL;
        if (params != NULL)
            (void)dtrain_llmc_load(path, &cfg, params, err, sizeof err);
        free(params);
    }
    return 0;
}
