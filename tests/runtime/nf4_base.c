/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The inputs of qlora.sh (--base-dtype nf4), without PyTorch:
 *   nf4_base OUT_DIR
 * writes OUT_DIR/base, a tiny random Llama (L=2 C=64 NH=4 KVH=2 F=96,
 * V=256, untied head) as a Hugging Face folder; OUT_DIR/dequant, the same
 * with every block linear's weight (each layer's q/k/v, o, gate/up, down
 * matrix) replaced by its own NF4 quantise-dequantise on the host, the
 * rest unchanged: the fp32 base a run with --base-dtype nf4 must
 * reproduce at (1,1,1), where each rank's shard of a linear is the whole
 * matrix; and OUT_DIR/tokens.bin, 4096 pseudo-random tokens. */
#include "dtrain_data.h"
#include "dtrain_kernels.h"
#include "dtrain_model.h"
#include "model/dtrain_hf_model.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    char err[512] = "", path[4096];
    if (argc != 2) {
        fprintf(stderr, "usage: nf4_base OUT_DIR\n");
        return 2;
    }
    struct dtrain_model_config m = {.max_seq_len = 64, .vocab_size = 256, .padded_vocab_size = 256,
                                    .num_layers = 2, .num_heads = 4, .channels = 64,
                                    .family = DTRAIN_FAMILY_LLAMA, .num_kv_heads = 2, .intermediate_size = 96,
                                    .untied_head = 1, .norm_eps = 1e-5f, .rope_theta = 10000.0f};
    size_t size[DTRAIN_MODEL_NUM_TENSORS], off[DTRAIN_MODEL_NUM_TENSORS], n = 0;
    dtrain_model_tensor_sizes(&m, size);
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        off[t] = n;
        n += size[t];
    }
    float *whole = malloc(n * sizeof(float));
    uint16_t *tokens = malloc(4096 * sizeof(uint16_t));
    if (whole == NULL || tokens == NULL)
        return 1;
    dtrain_model_init_params(&m, 1234, whole);
    snprintf(path, sizeof path, "%s/base", argv[1]);
    int rc = dtrain_hf_save(path, &m, whole, err, sizeof err);
    /* the linears (L, rows, cols): q/k/v and gate/up have C columns, o and down C rows */
    static const struct { enum dtrain_model_tensor t; int c_is_cols; } lin[4] = {
        {DTRAIN_MODEL_QKVW, 1}, {DTRAIN_MODEL_ATTPROJW, 0}, {DTRAIN_MODEL_FCW, 1}, {DTRAIN_MODEL_FCPROJW, 0}};
    for (int j = 0; j < 4 && rc == DTRAIN_OK; j++) {
        size_t per = size[lin[j].t] / (size_t)m.num_layers;
        int rows = lin[j].c_is_cols ? (int)(per / (size_t)m.channels) : m.channels;
        int cols = (int)(per / (size_t)rows);
        void *q = malloc(dtrain_nf4_bytes(rows, cols));
        for (int l = 0; q != NULL && l < m.num_layers; l++) {
            float *w = whole + off[lin[j].t] + (size_t)l * per;
            if (dtrain_nf4_quantize(q, w, rows, cols) != 0)
                rc = DTRAIN_ERR_INPUT;
            dtrain_nf4_dequantize(w, q, rows, cols);
        }
        if (q == NULL)
            rc = DTRAIN_ERR_SYSTEM;
        free(q);
    }
    snprintf(path, sizeof path, "%s/dequant", argv[1]);
    if (rc == DTRAIN_OK)
        rc = dtrain_hf_save(path, &m, whole, err, sizeof err);
    uint64_t x = 88172645463325252ull; /* xorshift64 */
    for (int i = 0; i < 4096; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tokens[i] = (uint16_t)(x % 256);
    }
    snprintf(path, sizeof path, "%s/tokens.bin", argv[1]);
    if (rc == DTRAIN_OK)
        rc = dtrain_tokens_write(path, tokens, 4096, err, sizeof err);
    if (rc != DTRAIN_OK)
        fprintf(stderr, "nf4_base: %s\n", err[0] != '\0' ? err : "a weight is not finite");
    free(whole);
    free(tokens);
    return rc == DTRAIN_OK ? 0 : 1;
}
