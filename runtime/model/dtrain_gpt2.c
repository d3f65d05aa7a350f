/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The whole GPT-2 model: its passes built from the stage pieces; see
 * dtrain_gpt2.h. */
#include "dtrain_gpt2.h"
#include "dtrain_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the model */

/* Per-layer activations are laid out layer after layer in each array. */
struct gpt2_acts {
    enum dtrain_dtype act;             /* of qkv, atty, fch, fch_gelu and the scratch's d* (dtrain_gpt2.h) */
    float *res;                        /* (L+1, N, C): res[0] embedding, res[l+1] block l's output */
    float *ln1, *ln1_mean, *ln1_rstd;  /* (L,N,C), (L,N), (L,N) */
    void *qkv, *atty;                  /* (L,N,3C), (L,N,C) */
    float *att, *res2;                 /* (L, dtrain_k_attention_saved), (L,N,C) */
    float *ln2, *ln2_mean, *ln2_rstd;
    void *fch, *fch_gelu;              /* (L,N,4C) */
    float *lnf, *lnf_mean, *lnf_rstd;  /* (N,C), (N), (N) */
    float *logits;                     /* (N,Vp): logits -> probs -> dlogits, in place */
    float *losses;                     /* (N) */
    float *dres;                       /* (N,C) residual-stream gradient */
    struct dtrain_block_scratch scratch;
};

struct dtrain_gpt2 {
    struct dtrain_kernels *k;
    struct dtrain_model_config cfg;
    int cap_B, cap_T;       /* capacity of the activations */
    int B, T;               /* shape of the current batch */
    int have_targets;       /* the last forward had targets */
    size_t nparams;
    float *params, *grads;  /* flat, backend memory */
    float *tensor[DTRAIN_MODEL_NUM_TENSORS];
    float *gtensor[DTRAIN_MODEL_NUM_TENSORS];
    void *act_memory;
    struct gpt2_acts acts;
    int32_t *inputs, *targets; /* (N), backend memory */
    float *host_losses;        /* (N) host copy of the losses */
};

/* The next `count` elements of `size` bytes after *used bytes of base
 * (NULL when only measuring), each tensor kept 64-byte aligned; carve:
 * floats. */
static void *carve_typed(void *base, size_t *used, size_t count, size_t size)
{
    void *p = base != NULL ? (char *)base + *used : NULL;
    *used += (count * size + 63) & ~(size_t)63;
    return p;
}

static float *carve(void *base, size_t *used, size_t count) { return carve_typed(base, used, count, sizeof(float)); }

/* Lay out (or, with base NULL, measure) the activations; returns bytes used. */
static size_t layout_acts(struct dtrain_kernels *k, const struct dtrain_model_config *c, int B, int T,
                          void *base, struct gpt2_acts *a)
{
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t N = (size_t)B * T;
    size_t used = 0, es = dtrain_dtype_size(dtrain_kernels_act_dtype(k));
    a->act = dtrain_kernels_act_dtype(k);
    a->res = carve(base, &used, (L + 1) * N * C);
    a->ln1 = carve(base, &used, L * N * C);
    a->ln1_mean = carve(base, &used, L * N);
    a->ln1_rstd = carve(base, &used, L * N);
    a->qkv = carve_typed(base, &used, L * N * 3 * C, es);
    a->atty = carve_typed(base, &used, L * N * C, es);
    a->att = carve(base, &used, L * dtrain_k_attention_saved(k, B, T, (int)NH, (int)NH, (int)(C / NH)));
    a->res2 = carve(base, &used, L * N * C);
    a->ln2 = carve(base, &used, L * N * C);
    a->ln2_mean = carve(base, &used, L * N);
    a->ln2_rstd = carve(base, &used, L * N);
    a->fch = carve_typed(base, &used, L * N * 4 * C, es);
    a->fch_gelu = carve_typed(base, &used, L * N * 4 * C, es);
    a->lnf = carve(base, &used, N * C);
    a->lnf_mean = carve(base, &used, N);
    a->lnf_rstd = carve(base, &used, N);
    a->logits = carve(base, &used, N * (size_t)c->padded_vocab_size);
    a->losses = carve(base, &used, N);
    a->dres = carve(base, &used, N * C);
    a->scratch.dln = carve(base, &used, N * C);
    a->scratch.dqkv = carve_typed(base, &used, N * 3 * C, es);
    a->scratch.datty = carve_typed(base, &used, N * C, es);
    a->scratch.dfc = carve_typed(base, &used, N * 4 * C, es);
    a->scratch.att = carve(base, &used, dtrain_k_attention_scratch(k, B, T, (int)NH, (int)NH, (int)(C / NH)));
    return used;
}

int dtrain_gpt2_create(struct dtrain_kernels *k, const struct dtrain_model_config *c, int B, int T,
                       struct dtrain_gpt2 **out, char *err, size_t errlen)
{
    int rc;
    *out = NULL;
    if ((rc = dtrain_model_config_check(c, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->family != DTRAIN_FAMILY_GPT2) {
        snprintf(err, errlen, "the whole-model reference is GPT-2 only; a %s model trains through the stage "
                 "(dtrain_ptrainer)", dtrain_model_family_name(c->family));
        return DTRAIN_ERR_INPUT;
    }
    if (B < 1 || T < 1 || T > c->max_seq_len || (size_t)B * T > (size_t)1 << 31) {
        snprintf(err, errlen, "batch shape B=%d T=%d impossible: need B >= 1 and 1 <= T <= "
                 "max_seq_len %d", B, T, c->max_seq_len);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_gpt2 *m = calloc(1, sizeof *m);
    if (m == NULL)
        goto oom;
    m->k = k;
    m->cfg = *c;
    m->cap_B = B;
    m->cap_T = T;
    m->nparams = dtrain_model_param_count(c);
    m->params = dtrain_k_alloc(k, m->nparams * sizeof(float));
    m->grads = dtrain_k_alloc(k, m->nparams * sizeof(float));
    if (m->params == NULL || m->grads == NULL)
        goto oom;
    size_t sizes[DTRAIN_MODEL_NUM_TENSORS], off = 0;
    dtrain_model_tensor_sizes(c, sizes);
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        m->tensor[t] = m->params + off;
        m->gtensor[t] = m->grads + off;
        off += sizes[t];
    }
    m->act_memory = dtrain_k_alloc(k, layout_acts(k, c, B, T, NULL, &m->acts));
    m->inputs = dtrain_k_alloc(k, (size_t)B * T * sizeof(int32_t));
    m->targets = dtrain_k_alloc(k, (size_t)B * T * sizeof(int32_t));
    m->host_losses = malloc((size_t)B * T * sizeof(float));
    if (m->act_memory == NULL || m->inputs == NULL || m->targets == NULL || m->host_losses == NULL)
        goto oom;
    layout_acts(k, c, B, T, m->act_memory, &m->acts);
    *out = m;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for a model of %zu parameters with batch %d x %d",
             dtrain_model_param_count(c), B, T);
    dtrain_gpt2_destroy(m);
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_gpt2_destroy(struct dtrain_gpt2 *m)
{
    if (m == NULL)
        return;
    dtrain_k_free(m->k, m->params);
    dtrain_k_free(m->k, m->grads);
    dtrain_k_free(m->k, m->act_memory);
    dtrain_k_free(m->k, m->inputs);
    dtrain_k_free(m->k, m->targets);
    free(m->host_losses);
    free(m);
}

const struct dtrain_model_config *dtrain_gpt2_get_config(const struct dtrain_gpt2 *m) { return &m->cfg; }
size_t dtrain_gpt2_num_params(const struct dtrain_gpt2 *m) { return m->nparams; }
float *dtrain_gpt2_params(struct dtrain_gpt2 *m) { return m->params; }
float *dtrain_gpt2_grads(struct dtrain_gpt2 *m) { return m->grads; }

void dtrain_gpt2_set_params(struct dtrain_gpt2 *m, const float *host)
{
    dtrain_k_upload(m->k, m->params, host, m->nparams * sizeof(float));
}

void dtrain_gpt2_get_params(struct dtrain_gpt2 *m, float *host)
{
    dtrain_k_download(m->k, host, m->params, m->nparams * sizeof(float));
}

void dtrain_gpt2_zero_grad(struct dtrain_gpt2 *m)
{
    dtrain_k_zero(m->k, m->grads, m->nparams * sizeof(float));
}

float *dtrain_gpt2_residual(struct dtrain_gpt2 *m, int l)
{
    return m->acts.res + (size_t)l * m->B * m->T * m->cfg.channels;
}

float *dtrain_gpt2_residual_grad(struct dtrain_gpt2 *m)
{
    return m->acts.dres;
}


int dtrain_gpt2_upload_tokens(struct dtrain_gpt2 *m, const int32_t *inputs,
                              const int32_t *targets, int B, int T, char *err, size_t errlen)
{
    int rc;
    if (B < 1 || T < 1 || B > m->cap_B || T > m->cap_T) {
        snprintf(err, errlen, "batch %d x %d does not fit the model's %d x %d", B, T,
                 m->cap_B, m->cap_T);
        return DTRAIN_ERR_INPUT;
    }
    size_t n = (size_t)B * T;
    if ((rc = dtrain_model_check_tokens(inputs, n, m->cfg.vocab_size, "input", err, errlen)) != DTRAIN_OK)
        return rc;
    if (targets != NULL &&
        (rc = dtrain_model_check_tokens(targets, n, m->cfg.vocab_size, "target", err, errlen)) != DTRAIN_OK)
        return rc;
    /* The activations are laid out for B x T: layout_acts with the real
     * shape, inside the memory sized for the capacity. */
    if (B != m->B || T != m->T) {
        layout_acts(m->k, &m->cfg, B, T, m->act_memory, &m->acts);
        m->B = B;
        m->T = T;
    }
    dtrain_k_upload(m->k, m->inputs, inputs, n * sizeof(int32_t));
    if (targets != NULL)
        dtrain_k_upload(m->k, m->targets, targets, n * sizeof(int32_t));
    m->have_targets = targets != NULL;
    return DTRAIN_OK;
}

void dtrain_gpt2_embed_forward(struct dtrain_gpt2 *m)
{
    dtrain_k_encoder_forward(m->k, m->acts.res, m->inputs, m->tensor[DTRAIN_MODEL_WTE],
                             m->tensor[DTRAIN_MODEL_WPE], m->B, m->T, m->cfg.channels);
}

static void block_views(struct dtrain_gpt2 *m, int l, struct dtrain_block_shape *s,
                        struct dtrain_block_weights *w, struct dtrain_block_grads *g,
                        struct dtrain_block_acts *a)
{
    size_t C = (size_t)m->cfg.channels, N = (size_t)m->B * m->T, NH = (size_t)m->cfg.num_heads;
    size_t L = (size_t)l;
    s->B = m->B;
    s->T = m->T;
    s->C = (int)C;
    s->NH = (int)NH;
    s->HS = (int)(C / NH);
    s->F = (int)(4 * C);
    s->add_row_bias = 1;
    s->KVH = (int)NH;
    s->family = DTRAIN_FAMILY_GPT2;
    s->norm_eps = 0;
    s->rope_inv_freq = NULL;
    /* the block tensors ln1w..fcprojb, in enum order, and their size per layer */
    const size_t per_layer[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C,
                                  4 * C * C, C};
    const float *wt[12];
    float *gt[12];
    for (int i = 0; i < 12; i++) {
        wt[i] = m->tensor[DTRAIN_MODEL_LN1W + i] + L * per_layer[i];
        gt[i] = m->gtensor[DTRAIN_MODEL_LN1W + i] + L * per_layer[i];
    }
    *w = (struct dtrain_block_weights){wt[0], wt[1], wt[2], wt[3], wt[4], wt[5],
                                       wt[6], wt[7], wt[8], wt[9], wt[10], wt[11], NULL, NULL};
    if (g != NULL)
        *g = (struct dtrain_block_grads){gt[0], gt[1], gt[2], gt[3], gt[4], gt[5],
                                         gt[6], gt[7], gt[8], gt[9], gt[10], gt[11]};
    const struct gpt2_acts *ma = &m->acts;
    size_t es = dtrain_dtype_size(ma->act);
    a->act = ma->act;
    a->ln1 = ma->ln1 + L * N * C;
    a->ln1_mean = ma->ln1_mean + L * N;
    a->ln1_rstd = ma->ln1_rstd + L * N;
    a->qkv = (char *)ma->qkv + L * N * 3 * C * es;
    a->atty = (char *)ma->atty + L * N * C * es;
    a->att = ma->att + L * dtrain_k_attention_saved(m->k, m->B, m->T, (int)NH, (int)NH, (int)(C / NH));
    a->res2 = ma->res2 + L * N * C;
    a->ln2 = ma->ln2 + L * N * C;
    a->ln2_mean = ma->ln2_mean + L * N;
    a->ln2_rstd = ma->ln2_rstd + L * N;
    a->fch = (char *)ma->fch + L * N * 4 * C * es;
    a->fch_gelu = (char *)ma->fch_gelu + L * N * 4 * C * es;
}

static int check_layers(const struct dtrain_gpt2 *m, int l0, int l1, char *err, size_t errlen)
{
    if (l0 < 0 || l1 > m->cfg.num_layers || l0 > l1) {
        snprintf(err, errlen, "layer range [%d, %d) is not inside [0, %d)", l0, l1,
                 m->cfg.num_layers);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

int dtrain_gpt2_blocks_forward(struct dtrain_gpt2 *m, int l0, int l1, char *err, size_t errlen)
{
    int rc = check_layers(m, l0, l1, err, errlen);
    for (int l = l0; rc == DTRAIN_OK && l < l1; l++) {
        struct dtrain_block_shape s;
        struct dtrain_block_weights w;
        struct dtrain_block_acts a;
        block_views(m, l, &s, &w, NULL, &a);
        rc = dtrain_block_forward(m->k, &s, &w, &a, dtrain_gpt2_residual(m, l),
                                  dtrain_gpt2_residual(m, l + 1), NULL, err, errlen);
    }
    return rc;
}

float dtrain_gpt2_head_forward(struct dtrain_gpt2 *m)
{
    int N = m->B * m->T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    struct gpt2_acts *a = &m->acts;
    dtrain_k_layernorm_forward(m->k, a->lnf, a->lnf_mean, a->lnf_rstd,
                               dtrain_gpt2_residual(m, m->cfg.num_layers),
                               m->tensor[DTRAIN_MODEL_LNFW], m->tensor[DTRAIN_MODEL_LNFB], N, C);
    dtrain_k_matmul_forward(m->k, dtrain_tensor_f32(a->logits), dtrain_tensor_f32(a->lnf),
                            m->tensor[DTRAIN_MODEL_WTE], NULL, N, C, Vp);
    if (!m->have_targets)
        return NAN;
    dtrain_k_softmax_xent_forward(m->k, a->logits, a->losses, m->targets, N, V, Vp);
    /* the losses are few: sum them on the host, in double, in order */
    float *losses = m->host_losses;
    dtrain_k_download(m->k, losses, a->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += losses[i];
    return (float)(sum / N);
}

void dtrain_gpt2_head_backward(struct dtrain_gpt2 *m, float dloss)
{
    int N = m->B * m->T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    struct gpt2_acts *a = &m->acts;
    dtrain_k_softmax_xent_backward(m->k, a->logits, m->targets, dloss, N, V, Vp);
    dtrain_k_matmul_backward(m->k, dtrain_tensor_f32(a->scratch.dln), m->gtensor[DTRAIN_MODEL_WTE], NULL,
                             dtrain_tensor_f32(a->logits), dtrain_tensor_f32(a->lnf), m->tensor[DTRAIN_MODEL_WTE],
                             N, C, Vp);
    dtrain_k_zero(m->k, a->dres, (size_t)N * C * sizeof(float));
    dtrain_k_layernorm_backward(m->k, a->dres, m->gtensor[DTRAIN_MODEL_LNFW],
                                m->gtensor[DTRAIN_MODEL_LNFB], a->scratch.dln,
                                dtrain_gpt2_residual(m, m->cfg.num_layers),
                                m->tensor[DTRAIN_MODEL_LNFW], a->lnf_mean, a->lnf_rstd, N, C);
}

int dtrain_gpt2_blocks_backward(struct dtrain_gpt2 *m, int l0, int l1, char *err, size_t errlen)
{
    int rc = check_layers(m, l0, l1, err, errlen);
    for (int l = l1 - 1; rc == DTRAIN_OK && l >= l0; l--) {
        struct dtrain_block_shape s;
        struct dtrain_block_weights w;
        struct dtrain_block_grads g;
        struct dtrain_block_acts a;
        block_views(m, l, &s, &w, &g, &a);
        rc = dtrain_block_backward(m->k, &s, &w, &g, &a, &m->acts.scratch,
                                   dtrain_gpt2_residual(m, l), m->acts.dres, NULL, err, errlen);
    }
    return rc;
}

void dtrain_gpt2_embed_backward(struct dtrain_gpt2 *m)
{
    dtrain_k_encoder_backward(m->k, m->gtensor[DTRAIN_MODEL_WTE], m->gtensor[DTRAIN_MODEL_WPE],
                              m->acts.dres, m->inputs, m->B, m->T, m->cfg.channels);
}

int dtrain_gpt2_forward(struct dtrain_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                        int B, int T, float *mean_loss, char *err, size_t errlen)
{
    int rc = dtrain_gpt2_upload_tokens(m, inputs, targets, B, T, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_gpt2_embed_forward(m);
    if ((rc = dtrain_gpt2_blocks_forward(m, 0, m->cfg.num_layers, err, errlen)) != DTRAIN_OK)
        return rc;
    float loss = dtrain_gpt2_head_forward(m);
    if (targets != NULL && mean_loss != NULL)
        *mean_loss = loss;
    return DTRAIN_OK;
}

int dtrain_gpt2_backward(struct dtrain_gpt2 *m, char *err, size_t errlen)
{
    int rc;
    if (!m->have_targets) {
        snprintf(err, errlen, "backward needs a forward with targets first");
        return DTRAIN_ERR_INPUT;
    }
    dtrain_gpt2_head_backward(m, 1.0f / (float)(m->B * m->T));
    if ((rc = dtrain_gpt2_blocks_backward(m, 0, m->cfg.num_layers, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_gpt2_embed_backward(m);
    return DTRAIN_OK;
}
