/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The model families: names, config checks, the flat parameter layout,
 * initialisation, FLOPs and RoPE's frequencies; see dtrain_model.h.  The
 * one place besides the blocks (dtrain_block.c) that knows which family
 * has what. */
#include "dtrain_model.h"
#include "dtrain_rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const tensor_names[DTRAIN_MODEL_NUM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lmhead",
};

const char *dtrain_model_tensor_name(enum dtrain_model_tensor t)
{
    return (t >= 0 && t < DTRAIN_MODEL_NUM_TENSORS) ? tensor_names[t] : "?";
}

static const char *const family_names[DTRAIN_MODEL_FAMILIES] = {"gpt2", "llama"};

const char *dtrain_model_family_name(int family)
{
    return family >= 0 && family < DTRAIN_MODEL_FAMILIES ? family_names[family] : NULL;
}

int dtrain_model_family_of(const char *name)
{
    for (int f = 0; name != NULL && f < DTRAIN_MODEL_FAMILIES; f++)
        if (strcmp(name, family_names[f]) == 0)
            return f;
    return -1;
}

int dtrain_model_kv_heads(const struct dtrain_model_config *c)
{
    return c->family == DTRAIN_FAMILY_LLAMA && c->num_kv_heads > 0 ? c->num_kv_heads : c->num_heads;
}

int dtrain_model_mlp_width(const struct dtrain_model_config *c)
{
    return c->family == DTRAIN_FAMILY_LLAMA ? c->intermediate_size : 4 * c->channels;
}

void dtrain_model_describe(const struct dtrain_model_config *c, char *buf, size_t len)
{
    if (c->family == DTRAIN_FAMILY_GPT2)
        snprintf(buf, len, "L=%d C=%d NH=%d V=%d (padded %d) maxT=%d", c->num_layers, c->channels, c->num_heads,
                 c->vocab_size, c->padded_vocab_size, c->max_seq_len);
    else
        snprintf(buf, len, "%s L=%d C=%d NH=%d KVH=%d F=%d V=%d (padded %d) maxT=%d%s",
                 dtrain_model_family_name(c->family), c->num_layers, c->channels, c->num_heads,
                 dtrain_model_kv_heads(c), dtrain_model_mlp_width(c), c->vocab_size, c->padded_vocab_size,
                 c->max_seq_len, c->untied_head ? ", untied head" : "");
}

static int check_range(const char *what, int v, int max, char *err, size_t errlen)
{
    if (v < 1 || v > max) {
        snprintf(err, errlen, "model %s is %d: use 1 to %d", what, v, max);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

static int check_positive(const char *what, double v, char *err, size_t errlen)
{
    if (!(v > 0) || !isfinite(v)) {
        snprintf(err, errlen, "model %s is %g: it must be a positive number", what, v);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

static int check_llama(const struct dtrain_model_config *c, char *err, size_t errlen)
{
    int NH = c->num_heads, KVH = dtrain_model_kv_heads(c);
    if (check_range("num_kv_heads", KVH, NH, err, errlen) ||
        check_range("intermediate_size", c->intermediate_size, 4 * DTRAIN_MODEL_MAX_CHANNELS, err, errlen) ||
        check_positive("norm_eps", c->norm_eps, err, errlen) || check_positive("rope_theta", c->rope_theta, err, errlen))
        return DTRAIN_ERR_INPUT;
    if (NH % KVH != 0) {
        snprintf(err, errlen, "model num_kv_heads %d does not divide num_heads %d: grouped-query attention "
                 "shares each key/value head among an equal number of query heads", KVH, NH);
        return DTRAIN_ERR_INPUT;
    }
    if ((c->channels / NH) % 2 != 0) {
        snprintf(err, errlen, "model head size %d is odd: rotary embeddings rotate pairs of channels",
                 c->channels / NH);
        return DTRAIN_ERR_INPUT;
    }
    if (c->rope_factor != 0 &&
        (check_positive("rope_scaling factor", c->rope_factor, err, errlen) ||
         check_positive("rope_scaling low_freq_factor", c->rope_low_freq_factor, err, errlen) ||
         check_positive("rope_scaling high_freq_factor", c->rope_high_freq_factor, err, errlen) ||
         check_range("rope_scaling original_max_position_embeddings", c->rope_original_max_positions,
                     DTRAIN_MODEL_MAX_SEQ, err, errlen)))
        return DTRAIN_ERR_INPUT;
    if (c->rope_factor != 0 && !(c->rope_high_freq_factor > c->rope_low_freq_factor)) {
        snprintf(err, errlen, "model rope_scaling high_freq_factor %g is not above low_freq_factor %g",
                 c->rope_high_freq_factor, c->rope_low_freq_factor);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

int dtrain_model_config_check(const struct dtrain_model_config *c, char *err, size_t errlen)
{
    if (check_range("max_seq_len", c->max_seq_len, DTRAIN_MODEL_MAX_SEQ, err, errlen) ||
        check_range("vocab_size", c->vocab_size, DTRAIN_MODEL_MAX_VOCAB, err, errlen) ||
        check_range("padded_vocab_size", c->padded_vocab_size, DTRAIN_MODEL_MAX_VOCAB, err, errlen) ||
        check_range("num_layers", c->num_layers, DTRAIN_MODEL_MAX_LAYERS, err, errlen) ||
        check_range("num_heads", c->num_heads, DTRAIN_MODEL_MAX_CHANNELS, err, errlen) ||
        check_range("channels", c->channels, DTRAIN_MODEL_MAX_CHANNELS, err, errlen))
        return DTRAIN_ERR_INPUT;
    if (c->channels % c->num_heads != 0) {
        snprintf(err, errlen, "model channels %d is not a multiple of num_heads %d: "
                 "choose C = NH * head size", c->channels, c->num_heads);
        return DTRAIN_ERR_INPUT;
    }
    if (c->padded_vocab_size < c->vocab_size) {
        snprintf(err, errlen, "model padded_vocab_size %d is smaller than vocab_size %d",
                 c->padded_vocab_size, c->vocab_size);
        return DTRAIN_ERR_INPUT;
    }
    switch (c->family) {
    case DTRAIN_FAMILY_GPT2:
        if (c->num_kv_heads != 0 || c->intermediate_size != 0 || c->untied_head != 0) {
            snprintf(err, errlen, "a GPT-2 model has neither grouped-query attention, another MLP width nor "
                     "an untied head: leave num_kv_heads, intermediate_size and untied_head out");
            return DTRAIN_ERR_INPUT;
        }
        return DTRAIN_OK;
    case DTRAIN_FAMILY_LLAMA:
        return check_llama(c, err, errlen);
    }
    snprintf(err, errlen, "model family %d is unknown: use gpt2 or llama", (int)c->family);
    return DTRAIN_ERR_INPUT;
}

int dtrain_model_check_tokens(const int32_t *tokens, size_t n, int V, const char *what,
                             char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) {
            snprintf(err, errlen, "%s token %ld at position %zu is outside the vocabulary 0..%d",
                     what, (long)tokens[i], i, V - 1);
            return DTRAIN_ERR_INPUT;
        }
    }
    return DTRAIN_OK;
}

int dtrain_model_pad_vocab(int vocab_size)
{
    return (vocab_size + 127) / 128 * 128;
}

void dtrain_model_tensor_sizes(const struct dtrain_model_config *c,
                              size_t sizes[DTRAIN_MODEL_NUM_TENSORS])
{
    size_t C = (size_t)c->channels, L = (size_t)c->num_layers, HS = C / (size_t)c->num_heads;
    size_t QKV = ((size_t)c->num_heads + 2 * (size_t)dtrain_model_kv_heads(c)) * HS;
    size_t F = (size_t)dtrain_model_mlp_width(c);
    int gpt2 = c->family == DTRAIN_FAMILY_GPT2;
    size_t FCR = gpt2 ? F : 2 * F, bias = gpt2 ? 1 : 0; /* fc rows: Llama's gate and up */
    sizes[DTRAIN_MODEL_WTE] = (size_t)c->padded_vocab_size * C;
    sizes[DTRAIN_MODEL_WPE] = gpt2 ? (size_t)c->max_seq_len * C : 0;
    sizes[DTRAIN_MODEL_LN1W] = L * C;
    sizes[DTRAIN_MODEL_LN1B] = bias * L * C;
    sizes[DTRAIN_MODEL_QKVW] = L * QKV * C;
    sizes[DTRAIN_MODEL_QKVB] = bias * L * QKV;
    sizes[DTRAIN_MODEL_ATTPROJW] = L * C * C;
    sizes[DTRAIN_MODEL_ATTPROJB] = bias * L * C;
    sizes[DTRAIN_MODEL_LN2W] = L * C;
    sizes[DTRAIN_MODEL_LN2B] = bias * L * C;
    sizes[DTRAIN_MODEL_FCW] = L * FCR * C;
    sizes[DTRAIN_MODEL_FCB] = bias * L * FCR;
    sizes[DTRAIN_MODEL_FCPROJW] = L * C * F;
    sizes[DTRAIN_MODEL_FCPROJB] = bias * L * C;
    sizes[DTRAIN_MODEL_LNFW] = C;
    sizes[DTRAIN_MODEL_LNFB] = bias * C;
    sizes[DTRAIN_MODEL_LMHEAD] = c->untied_head ? (size_t)c->padded_vocab_size * C : 0;
}

size_t dtrain_model_tensor_offset(const struct dtrain_model_config *c, enum dtrain_model_tensor t)
{
    size_t sizes[DTRAIN_MODEL_NUM_TENSORS], off = 0;
    dtrain_model_tensor_sizes(c, sizes);
    for (int i = 0; i < (int)t && i < DTRAIN_MODEL_NUM_TENSORS; i++)
        off += sizes[i];
    return off;
}

size_t dtrain_model_param_count(const struct dtrain_model_config *c)
{
    return dtrain_model_tensor_offset(c, DTRAIN_MODEL_NUM_TENSORS);
}

double dtrain_model_flops_per_step(const struct dtrain_model_config *c, int B, int T)
{
    double N = (double)B * T, C = c->channels, L = c->num_layers, HS = C / c->num_heads;
    double QKV = (c->num_heads + 2.0 * dtrain_model_kv_heads(c)) * HS, F = dtrain_model_mlp_width(c);
    double FCR = c->family == DTRAIN_FAMILY_GPT2 ? F : 2 * F;
    /* per token: QKV, the attention projection, the MLP's matrices, the head */
    double matmuls = 2.0 * N * (L * (QKV * C + C * C + FCR * C + C * F) + C * c->padded_vocab_size);
    double attention = L * 4.0 * B * (double)T * T * C;
    return 3.0 * (matmuls + attention);
}

/* Element i of tensor t: normal(0, std) by (seed, t, i); rows at or past
 * `real` elements (the vocabulary's padding) 0. */
static void init_normal(float *p, size_t n, size_t real, double std, uint64_t seed, int t)
{
    for (size_t i = 0; i < n; i++)
        p[i] = i < real ? (float)(std * dtrain_rng_normal(seed, (uint64_t)t, i)) : 0.0f;
}

void dtrain_model_init_params(const struct dtrain_model_config *c, uint64_t seed, float *params)
{
    size_t sizes[DTRAIN_MODEL_NUM_TENSORS];
    dtrain_model_tensor_sizes(c, sizes);
    double std = 0.02;
    /* GPT-2 scales the residual projections down (nanoGPT); Llama does not (Hugging Face) */
    double proj_std = c->family == DTRAIN_FAMILY_GPT2 ? 0.02 / sqrt(2.0 * c->num_layers) : std;
    size_t real_rows = (size_t)c->vocab_size * c->channels;
    float *p = params;
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        size_t n = sizes[t];
        switch (t) {
        case DTRAIN_MODEL_WTE:
        case DTRAIN_MODEL_LMHEAD:
            init_normal(p, n, real_rows, std, seed, t);
            break;
        case DTRAIN_MODEL_WPE:
        case DTRAIN_MODEL_QKVW:
        case DTRAIN_MODEL_FCW:
            init_normal(p, n, n, std, seed, t);
            break;
        case DTRAIN_MODEL_ATTPROJW:
        case DTRAIN_MODEL_FCPROJW:
            init_normal(p, n, n, proj_std, seed, t);
            break;
        case DTRAIN_MODEL_LN1W:
        case DTRAIN_MODEL_LN2W:
        case DTRAIN_MODEL_LNFW:
            for (size_t i = 0; i < n; i++)
                p[i] = 1.0f;
            break;
        default:
            memset(p, 0, n * sizeof(float));
            break;
        }
        p += n;
    }
}

void dtrain_model_rope_inv_freq(const struct dtrain_model_config *c, float *inv_freq)
{
    int HS = c->channels / c->num_heads;
    for (int i = 0; i < HS / 2; i++) {
        /* Hugging Face: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32 */
        float f = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)HS);
        if (c->rope_factor != 0) { /* Llama 3: long wavelengths slowed by factor, a smooth ramp between */
            float old = (float)c->rope_original_max_positions;
            float low_wavelen = old / c->rope_low_freq_factor, high_wavelen = old / c->rope_high_freq_factor;
            float wavelen = (float)(2 * 3.14159265358979323846) / f;
            float scaled = wavelen > low_wavelen ? f / c->rope_factor : f;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                float smooth = (old / wavelen - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                scaled = (1 - smooth) * scaled / c->rope_factor + smooth * scaled;
            }
            f = scaled;
        }
        inv_freq[i] = f;
    }
}
