/* SPDX-License-Identifier: GPL-2.0-or-later */
/* model/dtrain_hf.h for hf_python.sh, which checks it against Python's
 * safetensors and transformers:
 *   hf_probe config DIR            the parsed config.json, key=value lines
 *   hf_probe tensors DIR           each tensor: name dtype shape, then the
 *                                  float32 bits of its values (hex)
 *   hf_probe copy SRC DST MAXBYTES SRC's tensors (F16 as F32) and config
 *                                  written to DST (sharded above MAXBYTES) */
#include "model/dtrain_hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *err)
{
    fprintf(stderr, "hf_probe: %s\n", err);
    return 2;
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc == 3 && strcmp(argv[1], "config") == 0) {
        struct dtrain_hf_config c;
        if (dtrain_hf_config_read(argv[2], &c, err, sizeof err) != DTRAIN_OK)
            return fail(err);
        printf("arch=%d\nhidden_size=%d\nintermediate_size=%d\nnum_layers=%d\nnum_heads=%d\nnum_kv_heads=%d\n"
               "head_dim=%d\nvocab_size=%d\nmax_positions=%d\nnorm_eps=%.17g\ntie_word_embeddings=%d\n"
               "rope_theta=%.17g\nrope_type=%d\nrope_factor=%.17g\nrope_low_freq_factor=%.17g\n"
               "rope_high_freq_factor=%.17g\nrope_original_max_positions=%d\nbos_token_id=%ld\ndtype=%s\neos=",
               c.arch, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim,
               c.vocab_size, c.max_positions, c.norm_eps, c.tie_word_embeddings, c.rope_theta, c.rope_type,
               c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_positions,
               c.bos_token_id, c.dtype);
        for (int i = 0; i < c.n_eos; i++)
            printf("%s%ld", i ? "," : "", c.eos_token_id[i]);
        printf("\n");
        return 0;
    }
    int copy = argc == 5 && strcmp(argv[1], "copy") == 0;
    if (!copy && !(argc == 3 && strcmp(argv[1], "tensors") == 0)) {
        fprintf(stderr, "usage: hf_probe config|tensors DIR, hf_probe copy SRC DST MAXBYTES\n");
        return 2;
    }
    struct dtrain_hf_dir *d;
    if (dtrain_hf_dir_open(argv[2], &d, err, sizeof err) != DTRAIN_OK)
        return fail(err);
    size_t n = dtrain_hf_dir_count(d);
    struct dtrain_hf_out_tensor *out = calloc(n + 1, sizeof *out);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct dtrain_hf_tensor *t = dtrain_hf_dir_tensor(d, i);
        float *v = malloc((t->count + 1) * sizeof *v);
        if (dtrain_hf_dir_read_f32(d, t->name, t->rank, t->shape, v, err, sizeof err) != DTRAIN_OK) {
            free(v);
            rc = fail(err);
            break;
        }
        out[i] = (struct dtrain_hf_out_tensor){t->name, t->dtype == DTRAIN_HF_BF16 ? DTRAIN_HF_BF16 : DTRAIN_HF_F32,
                                               t->rank, {0}, v};
        memcpy(out[i].shape, t->shape, sizeof t->shape);
        if (copy)
            continue;
        printf("%s %s", t->name, dtrain_hf_dtype_name(t->dtype));
        for (int k = 0; k < t->rank; k++)
            printf("%s%lld", k ? "," : " ", (long long)t->shape[k]);
        if (t->rank == 0)
            printf(" -");
        for (size_t k = 0; k < t->count; k++) {
            unsigned int bits;
            memcpy(&bits, &v[k], 4);
            printf(" %08x", bits);
        }
        printf("\n");
    }
    if (copy && rc == 0) {
        struct dtrain_hf_config c;
        if (dtrain_hf_dir_write(argv[3], out, n, strtoull(argv[4], NULL, 10), err, sizeof err) != DTRAIN_OK ||
            dtrain_hf_config_read(argv[2], &c, err, sizeof err) != DTRAIN_OK ||
            dtrain_hf_config_write(argv[3], &c, err, sizeof err) != DTRAIN_OK)
            rc = fail(err);
    }
    for (size_t i = 0; i < n; i++)
        free((void *)out[i].data);
    free(out);
    dtrain_hf_dir_close(d);
    return rc;
}
