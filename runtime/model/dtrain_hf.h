/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, internal: Hugging Face model folders (--init-hf, --save-hf):
 * safetensors files, the sharded index, and config.json.
 *
 * A safetensors file is untrusted input: an 8-byte little-endian header
 * length (at most 100 MB, as the safetensors crate), a JSON header
 *   {"__metadata__": {str: str}, NAME: {"dtype", "shape", "data_offsets": [b, e]}, ...}
 * and the data.  Opening checks all of it (dtype F32, BF16 or F16, shape
 * of non-negative integers whose element count fits a size_t, e - b equal
 * to count * dtype size, the ranges tiling the data exactly as the crate
 * requires, names unique); the data is read with pread() when a tensor is
 * asked for.  Every failure is DTRAIN_ERR_INPUT (a bad file) or
 * DTRAIN_ERR_SYSTEM (memory, I/O) with one line naming the file and, where
 * there is one, the tensor.
 *
 * The writer writes what Python's safetensors.torch.save_file writes, byte
 * for byte: tensors ordered by dtype (F32 before BF16) then name, compact
 * header JSON padded with spaces to a multiple of 8, through dtrain_io.h
 * (a new temporary file beside it, fsync, rename; never over a link or a
 * non-regular file).  Host byte order must be little-endian, as the file's. */
#ifndef DTRAIN_HF_H
#define DTRAIN_HF_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_status.h"

#define DTRAIN_HF_MAX_RANK 8
/* The crate's bound on the header length. */
#define DTRAIN_ST_MAX_HEADER (100u * 1000u * 1000u)

enum dtrain_hf_dtype {
    DTRAIN_HF_F32 = 0,
    DTRAIN_HF_BF16 = 1,
    DTRAIN_HF_F16 = 2,
};

/* "F32", "BF16", "F16"; bytes of one element (4, 2, 2). */
const char *dtrain_hf_dtype_name(enum dtrain_hf_dtype t);
size_t dtrain_hf_dtype_size(enum dtrain_hf_dtype t);

/* One tensor of a file's header. */
struct dtrain_hf_tensor {
    const char *name;
    enum dtrain_hf_dtype dtype;
    int rank;
    int64_t shape[DTRAIN_HF_MAX_RANK];
    size_t count;          /* elements: the shape's product (1 for rank 0) */
    uint64_t begin, end;   /* byte range in the data (after the header) */
};

/* ---- one safetensors file ---- */

struct dtrain_st_file;

enum dtrain_status dtrain_st_open(const char *path, struct dtrain_st_file **out, char *err, size_t errlen);
void dtrain_st_close(struct dtrain_st_file *f);
/* The tensors in the header's order; NULL past the end. */
size_t dtrain_st_count(const struct dtrain_st_file *f);
const struct dtrain_hf_tensor *dtrain_st_tensor(const struct dtrain_st_file *f, size_t i);
const struct dtrain_hf_tensor *dtrain_st_find(const struct dtrain_st_file *f, const char *name);
/* A "__metadata__" value, or NULL. */
const char *dtrain_st_metadata(const struct dtrain_st_file *f, const char *key);
/* Read tensor `name` into out (count float32s), BF16 and F16 widened
 * exactly.  rank/shape: the shape the caller needs (shape NULL: any);
 * otherwise the line "FILE: tensor X has shape [a, b], the model needs [c, d]". */
enum dtrain_status dtrain_st_read_f32(struct dtrain_st_file *f, const char *name, int rank,
                                      const int64_t *shape, float *out, char *err, size_t errlen);

/* ---- writing ---- */

struct dtrain_hf_out_tensor {
    const char *name;
    enum dtrain_hf_dtype dtype; /* DTRAIN_HF_F32 or DTRAIN_HF_BF16 (rounded to nearest even) */
    int rank;
    int64_t shape[DTRAIN_HF_MAX_RANK];
    const float *data;          /* the shape's product of float32s */
};

/* Write tensors[0..n) as the safetensors file `path`, with "__metadata__"
 * from meta_kv (key, value, key, value, ..., NULL; NULL: none). */
enum dtrain_status dtrain_st_write(const char *path, const struct dtrain_hf_out_tensor *tensors, size_t n,
                                   const char *const *meta_kv, char *err, size_t errlen);

/* ---- a model folder ---- */

/* DIR/model.safetensors, or DIR/model.safetensors.index.json
 * ({"metadata": {...}, "weight_map": {tensor: file}}) whose files are
 * plain names in DIR (no '/', not "." or ".."), each opened once; every
 * tensor of the map must be in its file and every tensor of the files in
 * the map.  One object that finds any tensor wherever it is. */
struct dtrain_hf_dir;

enum dtrain_status dtrain_hf_dir_open(const char *dir, struct dtrain_hf_dir **out, char *err, size_t errlen);
void dtrain_hf_dir_close(struct dtrain_hf_dir *d);
/* All tensors, file after file (so a caller can refuse unexpected ones). */
size_t dtrain_hf_dir_count(const struct dtrain_hf_dir *d);
const struct dtrain_hf_tensor *dtrain_hf_dir_tensor(const struct dtrain_hf_dir *d, size_t i);
const struct dtrain_hf_tensor *dtrain_hf_dir_find(const struct dtrain_hf_dir *d, const char *name);
/* dtrain_st_read_f32 in whichever file holds `name`; a missing tensor is
 * "DIR: no tensor X". */
enum dtrain_status dtrain_hf_dir_read_f32(struct dtrain_hf_dir *d, const char *name, int rank,
                                          const int64_t *shape, float *out, char *err, size_t errlen);

/* Write DIR/model.safetensors (metadata {"format": "pt"}, as
 * save_pretrained), or, when the data is above max_shard_bytes (0: never),
 * DIR/model-0000K-of-0000N.safetensors shards in the given order plus
 * DIR/model.safetensors.index.json.  DIR must exist. */
enum dtrain_status dtrain_hf_dir_write(const char *dir, const struct dtrain_hf_out_tensor *tensors, size_t n,
                                       uint64_t max_shard_bytes, char *err, size_t errlen);

/* ---- config.json ---- */

enum dtrain_hf_arch {
    DTRAIN_HF_LLAMA = 1,   /* LlamaForCausalLM, "llama" */
    DTRAIN_HF_MISTRAL = 2, /* MistralForCausalLM, "mistral" without a sliding window: Llama's model */
    DTRAIN_HF_GPT2 = 3,    /* GPT2LMHeadModel, "gpt2" */
};

enum dtrain_hf_rope {
    DTRAIN_HF_ROPE_DEFAULT = 0,
    DTRAIN_HF_ROPE_LLAMA3 = 1, /* factor, low/high_freq_factor, original_max_positions */
};

#define DTRAIN_HF_MAX_EOS 8

/* The fields dtrain's models use; GPT-2's names map to Llama's
 * (n_embd = hidden_size, n_layer, n_head, n_positions, layer_norm_epsilon). */
struct dtrain_hf_config {
    enum dtrain_hf_arch arch;
    int hidden_size;
    int intermediate_size;   /* GPT-2: n_inner, or 4 * n_embd */
    int num_layers;
    int num_heads;
    int num_kv_heads;        /* GPT-2: num_heads */
    int head_dim;            /* hidden_size / num_heads */
    int vocab_size;
    int max_positions;
    double norm_eps;         /* rms_norm_eps, or GPT-2's layer_norm_epsilon */
    int tie_word_embeddings; /* default 0 for Llama, 1 for GPT-2 */
    /* RoPE (Llama, Mistral) */
    double rope_theta;
    enum dtrain_hf_rope rope_type;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_positions;
    /* token ids, -1 when absent */
    long bos_token_id;
    int n_eos;
    long eos_token_id[DTRAIN_HF_MAX_EOS];
    char dtype[16];          /* "float32", "bfloat16", "float16", or "" */
};

/* Parse DIR/config.json (dtrain_hf_config_parse: the text).  Refused with
 * one line: an unknown architecture, a rope type other than default and
 * llama3, a hidden_act other than silu (GPT-2: activation_function
 * gelu_new), biases in a Llama, a sliding window, values out of range.
 * Accepts both transformers 5's "rope_parameters" and the older top-level
 * rope_theta/rope_scaling. */
enum dtrain_status dtrain_hf_config_read(const char *dir, struct dtrain_hf_config *c, char *err, size_t errlen);
enum dtrain_status dtrain_hf_config_parse(const char *text, size_t len, const char *what,
                                          struct dtrain_hf_config *c, char *err, size_t errlen);
/* DIR/config.json as save_pretrained writes it (indent 2, keys sorted),
 * for the fields above; transformers' AutoConfig loads it. */
enum dtrain_status dtrain_hf_config_write(const char *dir, const struct dtrain_hf_config *c, char *err,
                                          size_t errlen);

#endif
