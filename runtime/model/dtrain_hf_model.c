/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Hugging Face model folders as dtrain models: the config and the tensor
 * names of each family; see dtrain_hf_model.h. */
#include "model/dtrain_hf_model.h"
#include "model/dtrain_hf.h"
#include "dtrain_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_BYTES (1 << 20)

/* ------------------------------------------------------------------ config */

static enum dtrain_status from_hf(const struct dtrain_hf_config *h, const char *path,
                                  struct dtrain_model_config *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->max_seq_len = h->max_positions;
    m->vocab_size = h->vocab_size;
    m->padded_vocab_size = dtrain_model_pad_vocab(h->vocab_size);
    m->num_layers = h->num_layers;
    m->num_heads = h->num_heads;
    m->channels = h->hidden_size;
    if (h->arch == DTRAIN_HF_GPT2) {
        /* dtrain's GPT-2 is llm.c's: 4C MLP, LayerNorm eps 1e-5, tied head */
        if (h->intermediate_size != 4 * h->hidden_size || !h->tie_word_embeddings ||
            (h->norm_eps != 0 && (float)h->norm_eps != 1e-5f)) {
            snprintf(err, errlen, "%s: a GPT-2 with n_inner %d, layer_norm_epsilon %g and tie_word_embeddings %d; "
                     "dtrain's GPT-2 has n_inner 4*n_embd (%d), epsilon 1e-5 and a tied head",
                     path, h->intermediate_size, h->norm_eps, h->tie_word_embeddings, 4 * h->hidden_size);
            return DTRAIN_ERR_INPUT;
        }
    } else {
        m->family = DTRAIN_FAMILY_LLAMA;
        m->num_kv_heads = h->num_kv_heads;
        m->intermediate_size = h->intermediate_size;
        m->untied_head = !h->tie_word_embeddings;
        m->norm_eps = (float)h->norm_eps;
        m->rope_theta = (float)h->rope_theta;
        if (h->rope_type == DTRAIN_HF_ROPE_LLAMA3) {
            m->rope_factor = (float)h->rope_factor;
            m->rope_low_freq_factor = (float)h->rope_low_freq_factor;
            m->rope_high_freq_factor = (float)h->rope_high_freq_factor;
            m->rope_original_max_positions = h->rope_original_max_positions;
        }
    }
    char why[256];
    if (dtrain_model_config_check(m, why, sizeof why) != DTRAIN_OK) {
        snprintf(err, errlen, "%s: %s", path, why);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

enum dtrain_status dtrain_hf_read_model_config(const char *path, struct dtrain_model_config *out, char *err,
                                               size_t errlen)
{
    struct dtrain_hf_config h;
    struct stat st;
    enum dtrain_status rc;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = dtrain_hf_config_read(path, &h, err, errlen);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (dtrain_read_regular(path, "Hugging Face config", CONFIG_MAX_BYTES, &text, &len, err, errlen) != 0)
            return errno == ENOMEM ? DTRAIN_ERR_SYSTEM : DTRAIN_ERR_INPUT;
        rc = dtrain_hf_config_parse(text, len, path, &h, err, errlen);
        free(text);
    }
    return rc != DTRAIN_OK ? rc : from_hf(&h, path, out, err, errlen);
}

static void to_hf(const struct dtrain_model_config *m, struct dtrain_hf_config *h)
{
    memset(h, 0, sizeof *h);
    int llama = m->family == DTRAIN_FAMILY_LLAMA;
    h->arch = llama ? DTRAIN_HF_LLAMA : DTRAIN_HF_GPT2;
    h->hidden_size = m->channels;
    h->intermediate_size = dtrain_model_mlp_width(m);
    h->num_layers = m->num_layers;
    h->num_heads = m->num_heads;
    h->num_kv_heads = dtrain_model_kv_heads(m);
    h->head_dim = m->channels / m->num_heads;
    h->vocab_size = m->vocab_size;
    h->max_positions = m->max_seq_len;
    h->norm_eps = llama ? m->norm_eps : 1e-5;
    h->tie_word_embeddings = !m->untied_head;
    h->rope_theta = m->rope_theta;
    h->rope_type = m->rope_factor != 0 ? DTRAIN_HF_ROPE_LLAMA3 : DTRAIN_HF_ROPE_DEFAULT;
    h->rope_factor = m->rope_factor;
    h->rope_low_freq_factor = m->rope_low_freq_factor;
    h->rope_high_freq_factor = m->rope_high_freq_factor;
    h->rope_original_max_positions = m->rope_original_max_positions;
    h->bos_token_id = -1;
    h->n_eos = 0;
    snprintf(h->dtype, sizeof h->dtype, "float32");
}

/* ------------------------------------------------------------------ tensors */

/* One Hugging Face tensor and where it lies in the flat vector: rows x cols
 * as stored in the file (Conv1D: transposed, i.e. dtrain's (cols, rows)),
 * starting at element `at`, rows `stride` elements apart there. */
struct hf_entry {
    char name[96];
    int rank;
    int64_t shape[2];
    size_t at;
    int transposed;
};

/* Tensors per layer: Llama 9, GPT-2 12; plus the embeddings and head. */
#define MAX_PER_LAYER 12
#define MAX_OUTSIDE 5

static void add(struct hf_entry *e, size_t *n, const char *name, int rank, int64_t r, int64_t c, size_t at, int tr)
{
    struct hf_entry *x = &e[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->rank = rank;
    x->shape[0] = r;
    x->shape[1] = c;
    x->at = at;
    x->transposed = tr;
}

/* Every tensor of m's Hugging Face checkpoint, in the order save_pretrained
 * lists them. */
static size_t entries(const struct dtrain_model_config *m, struct hf_entry *e)
{
    size_t off[DTRAIN_MODEL_NUM_TENSORS], n = 0;
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++)
        off[t] = dtrain_model_tensor_offset(m, (enum dtrain_model_tensor)t);
    int64_t C = m->channels, V = m->vocab_size, HS = C / m->num_heads, NH = m->num_heads;
    int64_t KVH = dtrain_model_kv_heads(m), F = dtrain_model_mlp_width(m), QKV = (NH + 2 * KVH) * HS;
    char name[96];
    if (m->family == DTRAIN_FAMILY_LLAMA) {
        add(e, &n, "model.embed_tokens.weight", 2, V, C, off[DTRAIN_MODEL_WTE], 0);
        for (int64_t l = 0; l < m->num_layers; l++) {
            size_t L = (size_t)l;
#define LNAME(s) (snprintf(name, sizeof name, "model.layers.%lld." s, (long long)l), name)
            add(e, &n, LNAME("input_layernorm.weight"), 1, C, 0, off[DTRAIN_MODEL_LN1W] + L * C, 0);
            size_t q = off[DTRAIN_MODEL_QKVW] + L * (size_t)(QKV * C);
            add(e, &n, LNAME("self_attn.q_proj.weight"), 2, NH * HS, C, q, 0);
            add(e, &n, LNAME("self_attn.k_proj.weight"), 2, KVH * HS, C, q + (size_t)(NH * HS * C), 0);
            add(e, &n, LNAME("self_attn.v_proj.weight"), 2, KVH * HS, C, q + (size_t)((NH + KVH) * HS * C), 0);
            add(e, &n, LNAME("self_attn.o_proj.weight"), 2, C, C, off[DTRAIN_MODEL_ATTPROJW] + L * C * C, 0);
            add(e, &n, LNAME("post_attention_layernorm.weight"), 1, C, 0, off[DTRAIN_MODEL_LN2W] + L * C, 0);
            size_t g = off[DTRAIN_MODEL_FCW] + L * (size_t)(2 * F * C);
            add(e, &n, LNAME("mlp.gate_proj.weight"), 2, F, C, g, 0);
            add(e, &n, LNAME("mlp.up_proj.weight"), 2, F, C, g + (size_t)(F * C), 0);
            add(e, &n, LNAME("mlp.down_proj.weight"), 2, C, F, off[DTRAIN_MODEL_FCPROJW] + L * (size_t)(C * F), 0);
#undef LNAME
        }
        add(e, &n, "model.norm.weight", 1, C, 0, off[DTRAIN_MODEL_LNFW], 0);
        if (m->untied_head)
            add(e, &n, "lm_head.weight", 2, V, C, off[DTRAIN_MODEL_LMHEAD], 0);
        return n;
    }
    add(e, &n, "transformer.wte.weight", 2, V, C, off[DTRAIN_MODEL_WTE], 0);
    add(e, &n, "transformer.wpe.weight", 2, m->max_seq_len, C, off[DTRAIN_MODEL_WPE], 0);
    for (int64_t l = 0; l < m->num_layers; l++) {
        size_t L = (size_t)l;
#define HNAME(s) (snprintf(name, sizeof name, "transformer.h.%lld." s, (long long)l), name)
        add(e, &n, HNAME("ln_1.weight"), 1, C, 0, off[DTRAIN_MODEL_LN1W] + L * C, 0);
        add(e, &n, HNAME("ln_1.bias"), 1, C, 0, off[DTRAIN_MODEL_LN1B] + L * C, 0);
        /* Conv1D stores (in, out): dtrain's (out, in) transposed */
        add(e, &n, HNAME("attn.c_attn.weight"), 2, C, 3 * C, off[DTRAIN_MODEL_QKVW] + L * 3 * C * C, 1);
        add(e, &n, HNAME("attn.c_attn.bias"), 1, 3 * C, 0, off[DTRAIN_MODEL_QKVB] + L * 3 * C, 0);
        add(e, &n, HNAME("attn.c_proj.weight"), 2, C, C, off[DTRAIN_MODEL_ATTPROJW] + L * C * C, 1);
        add(e, &n, HNAME("attn.c_proj.bias"), 1, C, 0, off[DTRAIN_MODEL_ATTPROJB] + L * C, 0);
        add(e, &n, HNAME("ln_2.weight"), 1, C, 0, off[DTRAIN_MODEL_LN2W] + L * C, 0);
        add(e, &n, HNAME("ln_2.bias"), 1, C, 0, off[DTRAIN_MODEL_LN2B] + L * C, 0);
        add(e, &n, HNAME("mlp.c_fc.weight"), 2, C, 4 * C, off[DTRAIN_MODEL_FCW] + L * 4 * C * C, 1);
        add(e, &n, HNAME("mlp.c_fc.bias"), 1, 4 * C, 0, off[DTRAIN_MODEL_FCB] + L * 4 * C, 0);
        add(e, &n, HNAME("mlp.c_proj.weight"), 2, 4 * C, C, off[DTRAIN_MODEL_FCPROJW] + L * 4 * C * C, 1);
        add(e, &n, HNAME("mlp.c_proj.bias"), 1, C, 0, off[DTRAIN_MODEL_FCPROJB] + L * C, 0);
#undef HNAME
    }
    add(e, &n, "transformer.ln_f.weight", 1, C, 0, off[DTRAIN_MODEL_LNFW], 0);
    add(e, &n, "transformer.ln_f.bias", 1, C, 0, off[DTRAIN_MODEL_LNFB], 0);
    return n;
}

static struct hf_entry *all_entries(const struct dtrain_model_config *m, size_t *n, char *err, size_t errlen)
{
    struct hf_entry *e = calloc((size_t)m->num_layers * MAX_PER_LAYER + MAX_OUTSIDE, sizeof *e);
    if (e == NULL) {
        snprintf(err, errlen, "out of memory for the tensor list of %d layers", m->num_layers);
        return NULL;
    }
    *n = entries(m, e);
    return e;
}

static size_t elems(const struct hf_entry *x)
{
    return (size_t)x->shape[0] * (size_t)(x->rank == 2 ? x->shape[1] : 1);
}

/* Tensors a file may hold besides the model's: the tied head (the same
 * weights again) and GPT-2's attention masks of older transformers. */
static int ignorable(const struct dtrain_model_config *m, const char *name)
{
    size_t n = strlen(name);
    if (strcmp(name, "lm_head.weight") == 0 && !m->untied_head)
        return 1;
    return m->family == DTRAIN_FAMILY_GPT2 &&
           ((n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
            (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0));
}

static int known(const struct hf_entry *e, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0)
            return 1;
    return 0;
}

enum dtrain_status dtrain_hf_load_params(const char *dir, const struct dtrain_model_config *m, float *whole,
                                         char *err, size_t errlen)
{
    size_t n = 0, most = 0;
    struct dtrain_hf_dir *d = NULL;
    float *buf = NULL;
    struct hf_entry *e = all_entries(m, &n, err, errlen);
    enum dtrain_status rc = e == NULL ? DTRAIN_ERR_SYSTEM : dtrain_hf_dir_open(dir, &d, err, errlen);
    if (rc != DTRAIN_OK)
        goto out;
    for (size_t i = 0; i < dtrain_hf_dir_count(d); i++) {
        const char *name = dtrain_hf_dir_tensor(d, i)->name;
        if (!known(e, n, name) && !ignorable(m, name)) {
            snprintf(err, errlen, "%s: tensor %s is not part of a %s model of this shape (%d layers): give the "
                     "folder of a matching model", dir, name, dtrain_model_family_name(m->family), m->num_layers);
            rc = DTRAIN_ERR_INPUT;
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++)
        most = elems(&e[i]) > most ? elems(&e[i]) : most;
    if ((buf = malloc(most * sizeof(float))) == NULL) {
        snprintf(err, errlen, "out of memory for a tensor of %zu floats", most);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    memset(whole, 0, dtrain_model_param_count(m) * sizeof(float)); /* the vocabulary's padding rows */
    for (size_t i = 0; i < n; i++) {
        const struct hf_entry *x = &e[i];
        if ((rc = dtrain_hf_dir_read_f32(d, x->name, x->rank, x->shape, buf, err, errlen)) != DTRAIN_OK)
            goto out;
        if (!x->transposed) {
            memcpy(whole + x->at, buf, elems(x) * sizeof(float));
            continue;
        }
        size_t R = (size_t)x->shape[0], K = (size_t)x->shape[1]; /* file (R, K) -> dtrain (K, R) */
        for (size_t r = 0; r < R; r++)
            for (size_t k = 0; k < K; k++)
                whole[x->at + k * R + r] = buf[r * K + k];
    }
out:
    free(buf);
    free(e);
    dtrain_hf_dir_close(d);
    return rc;
}

int dtrain_model_load_hf(const char *dir, struct dtrain_model_config *c, float **params, char *err, size_t errlen)
{
    *params = NULL;
    enum dtrain_status rc = dtrain_hf_read_model_config(dir, c, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    size_t n = dtrain_model_param_count(c);
    if ((*params = malloc(n * sizeof(float))) == NULL) {
        snprintf(err, errlen, "out of memory for %zu parameters", n);
        return DTRAIN_ERR_SYSTEM;
    }
    if ((rc = dtrain_hf_load_params(dir, c, *params, err, errlen)) != DTRAIN_OK) {
        free(*params);
        *params = NULL;
    }
    return rc;
}

enum dtrain_status dtrain_hf_save(const char *dir, const struct dtrain_model_config *m, const float *whole,
                                  char *err, size_t errlen)
{
    size_t n = 0;
    struct hf_entry *e = all_entries(m, &n, err, errlen);
    struct dtrain_hf_out_tensor *out = e != NULL ? calloc(n, sizeof *out) : NULL;
    float *copies = NULL;
    size_t transposed = 0;
    enum dtrain_status rc = DTRAIN_OK;
    if (e == NULL || out == NULL) {
        snprintf(err, errlen, "out of memory for the tensor list of %d layers", m->num_layers);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        transposed += e[i].transposed ? elems(&e[i]) : 0;
    if (transposed > 0 && (copies = malloc(transposed * sizeof(float))) == NULL) {
        snprintf(err, errlen, "out of memory for %zu transposed weights", transposed);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    float *c = copies;
    for (size_t i = 0; i < n; i++) {
        const struct hf_entry *x = &e[i];
        out[i] = (struct dtrain_hf_out_tensor){.name = x->name, .dtype = DTRAIN_HF_F32, .rank = x->rank,
                                               .data = whole + x->at};
        out[i].shape[0] = x->shape[0];
        out[i].shape[1] = x->shape[1];
        if (x->transposed) {
            size_t R = (size_t)x->shape[0], K = (size_t)x->shape[1];
            for (size_t r = 0; r < R; r++)
                for (size_t k = 0; k < K; k++)
                    c[r * K + k] = whole[x->at + k * R + r];
            out[i].data = c;
            c += R * K;
        }
    }
    struct dtrain_hf_config h;
    to_hf(m, &h);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make the folder %s: %s", dir, strerror(errno));
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    if ((rc = dtrain_hf_config_write(dir, &h, err, errlen)) == DTRAIN_OK)
        rc = dtrain_hf_dir_write(dir, out, n, 0, err, errlen);
out:
    free(copies);
    free(out);
    free(e);
    return rc;
}
