/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One rank's pipeline stage: parameters, activations per slot, forward and
 * backward of a micro-batch; see dtrain_stage.h. */
#include "dtrain_stage.h"
#include "dtrain_lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One micro-batch's activations; per-layer arrays hold the stage's layers
 * one after the other (as dtrain_gpt2 lays out the whole model's).  With
 * sequence parallelism the row-wise arrays (res, ln1, ln2, res2, lnf and
 * their statistics, dres) hold the rank's Nl = N/T rows: the "(Nl..." below
 * (Nl = N without). */
struct slot {
    void *memory;
    float *res;                        /* (nl+1, Nl, C): res[0] input, res[nl] output */
    float *ln1, *ln1_mean, *ln1_rstd;  /* (nl,Nl,C), (nl,Nl), (nl,Nl) */
    void *qkv, *atty;                  /* act type: (nl,N,QKV), (nl,N,CL) */
    float *att, *res2;                 /* (nl, att_floats), (nl,Nl,C) */
    float *ln2, *ln2_mean, *ln2_rstd;
    void *fch, *fch_gelu;              /* act type: (nl,N,FCR), (nl,N,FL) (Llama: FCR = 2FL) */
    float *lnf, *lnf_mean, *lnf_rstd;  /* last stage: (Nl,C), (Nl), (Nl) */
    float *logits;                     /* last stage: (N,Vl) logits -> probs -> dlogits */
    float *losses;                     /* last stage: (N) */
    int32_t *inputs, *targets;         /* (N) */
    float *dres;                       /* V > 1: (Nl,C) this micro-batch's residual gradient */
};

struct dtrain_stage {
    struct dtrain_kernels *k;
    const struct dtrain_shard *sh;
    struct dtrain_tp *tp;
    int B, T, N, nl;
    int sp, Nl;                         /* sequence parallel; rows of the residual stream held here */
    int V, nlc;                         /* chunks (virtual stages) and layers per chunk */
    enum dtrain_recompute recompute;
    enum dtrain_dtype act;              /* the type of the typed activations (dtrain_kernels_act_dtype) */
    size_t act_size;                    /* its bytes per element */
    size_t att_floats;                  /* one layer's att (dtrain_k_attention_saved) */
    struct slot layer;                  /* selective: att of one layer; full: one layer's activations */
    void *layer_memory;
    float *recompute_out;               /* full: (N,C), the recomputed layer's output (discarded) */
    size_t activation_bytes;
    float *params, *grads;
    struct dtrain_stage_source src;     /* ZeRO-3: where the weights are (acquire NULL: params, grads) */
    int nslots;
    struct slot *slots;
    void *shared;                       /* dres and the backward scratch */
    float *dres;                        /* (Nl,C) */
    float *seq_in, *seq_out;            /* sequence parallel: (N,C) each, dtrain_block_acts */
    struct dtrain_block_scratch scratch;
    float *rope_inv_freq;               /* Llama: (HS/2) RoPE's frequencies (dtrain_model_rope_inv_freq) */
    float *host_losses;                 /* (N) */
    struct dtrain_lora *lora;           /* LoRA: the adapters; the base frozen (NULL: every weight trained) */
    float *frozen_norms;                /* LoRA: (6,C) the norms' weight gradients, discarded */
    const struct dtrain_shard *layout;  /* of params: sh, or nf4_layout */
    struct dtrain_shard nf4_layout;     /* NF4 base: sh without the block linears' weights */
    struct dtrain_nf4 *nf4;             /* NF4 base: (nl, 4) by enum dtrain_block_linear; NULL: fp32 */
    void *nf4_memory;                   /* their buffers, one allocation */
    size_t nf4_bytes;
};

/* The next `count` elements of `size` bytes after *used bytes of base (NULL
 * when measuring), each array 64-byte aligned; carve: floats. */
static void *carve_typed(void *base, size_t *used, size_t count, size_t size)
{
    void *p = base != NULL ? (char *)base + *used : NULL;
    *used += (count * size + 63) & ~(size_t)63;
    return p;
}

static float *carve(void *base, size_t *used, size_t count) { return carve_typed(base, used, count, sizeof(float)); }

/* count elements of the typed activations */
static void *carve_act(const struct dtrain_stage *st, void *base, size_t *used, size_t count)
{
    return carve_typed(base, used, count, st->act_size);
}

/* A slot's arrays; with recomputation the layers' arrays that are not kept
 * are left out (nl_acts layers of them, nl_att of att). */
static size_t layout_slot(const struct dtrain_stage *st, void *base, struct slot *s)
{
    const struct dtrain_shard *sh = st->sh;
    size_t nl = (size_t)st->nl, N = (size_t)st->N, Nl = (size_t)st->Nl, C = (size_t)sh->model.channels;
    size_t nl_acts = st->recompute == DTRAIN_RECOMPUTE_FULL ? 0 : nl;
    size_t nl_att = st->recompute == DTRAIN_RECOMPUTE_NONE ? nl : 0;
    size_t CL = (size_t)sh->attn_width, FL = (size_t)sh->mlp_width, used = 0;
    size_t QKV = (size_t)sh->qkv_width, FCR = (size_t)sh->fc_rows;
    size_t head = sh->has_head ? 1 : 0;
    s->res = carve(base, &used, (nl + 1) * Nl * C);
    s->ln1 = carve(base, &used, nl_acts * Nl * C);
    s->ln1_mean = carve(base, &used, nl_acts * Nl);
    s->ln1_rstd = carve(base, &used, nl_acts * Nl);
    s->qkv = carve_act(st, base, &used, nl_acts * N * QKV);
    s->atty = carve_act(st, base, &used, nl_acts * N * CL);
    s->att = carve(base, &used, nl_att * st->att_floats);
    s->res2 = carve(base, &used, nl_acts * Nl * C);
    s->ln2 = carve(base, &used, nl_acts * Nl * C);
    s->ln2_mean = carve(base, &used, nl_acts * Nl);
    s->ln2_rstd = carve(base, &used, nl_acts * Nl);
    s->fch = carve_act(st, base, &used, nl_acts * N * FCR);
    s->fch_gelu = carve_act(st, base, &used, nl_acts * N * FL);
    s->lnf = carve(base, &used, head * Nl * C);
    s->lnf_mean = carve(base, &used, head * Nl);
    s->lnf_rstd = carve(base, &used, head * Nl);
    s->logits = carve(base, &used, head * N * (size_t)sh->vocab_rows);
    s->losses = carve(base, &used, head * N);
    s->dres = carve(base, &used, st->V > 1 ? Nl * C : 0);
    return used;
}

/* The one layer's arrays that recomputation refills (st->layer): full,
 * every per-layer array of one layer and the discarded output; selective,
 * att of one layer. */
static size_t layout_layer(struct dtrain_stage *st, void *base)
{
    const struct dtrain_shard *sh = st->sh;
    size_t N = (size_t)st->N, Nl = (size_t)st->Nl, C = (size_t)sh->model.channels;
    size_t CL = (size_t)sh->attn_width, FL = (size_t)sh->mlp_width, used = 0;
    size_t QKV = (size_t)sh->qkv_width, FCR = (size_t)sh->fc_rows;
    struct slot *s = &st->layer;
    if (st->recompute == DTRAIN_RECOMPUTE_NONE)
        return 0;
    s->att = carve(base, &used, st->att_floats);
    if (st->recompute != DTRAIN_RECOMPUTE_FULL)
        return used;
    s->ln1 = carve(base, &used, Nl * C);
    s->ln1_mean = carve(base, &used, Nl);
    s->ln1_rstd = carve(base, &used, Nl);
    s->qkv = carve_act(st, base, &used, N * QKV);
    s->atty = carve_act(st, base, &used, N * CL);
    s->res2 = carve(base, &used, Nl * C);
    s->ln2 = carve(base, &used, Nl * C);
    s->ln2_mean = carve(base, &used, Nl);
    s->ln2_rstd = carve(base, &used, Nl);
    s->fch = carve_act(st, base, &used, N * FCR);
    s->fch_gelu = carve_act(st, base, &used, N * FL);
    st->recompute_out = carve(base, &used, Nl * C);
    return used;
}

static size_t layout_shared(struct dtrain_stage *st, void *base)
{
    const struct dtrain_shard *sh = st->sh;
    size_t N = (size_t)st->N, C = (size_t)sh->model.channels;
    size_t CL = (size_t)sh->attn_width, FCR = (size_t)sh->fc_rows, used = 0;
    st->dres = carve(base, &used, (size_t)st->Nl * C);
    st->seq_in = carve(base, &used, st->sp ? N * C : 0);
    st->seq_out = carve(base, &used, st->sp ? N * C : 0);
    st->scratch.dln = carve(base, &used, N * C);
    st->scratch.dqkv = carve_act(st, base, &used, N * (size_t)sh->qkv_width);
    st->scratch.datty = carve_act(st, base, &used, N * CL);
    /* Llama: SwiGLU's output gradient (N,FL) past its input's (dtrain_block_scratch) */
    st->scratch.dfc = carve_act(st, base, &used, N * (FCR + (FCR - (size_t)sh->mlp_width)));
    st->scratch.att = carve(base, &used, dtrain_k_attention_scratch(st->k, st->B, st->T, sh->heads, sh->kv_heads,
                                                                    sh->head_size));
    return used;
}

const char *dtrain_recompute_name(int mode)
{
    static const char *const names[DTRAIN_RECOMPUTE_MODES] = {"none", "selective", "full"};
    return mode >= 0 && mode < DTRAIN_RECOMPUTE_MODES ? names[mode] : NULL;
}

int dtrain_stage_create(struct dtrain_kernels *k, const struct dtrain_shard *shard,
                        struct dtrain_tp *tp, int B, int T, int slots, enum dtrain_recompute recompute,
                        struct dtrain_stage **out, char *err, size_t errlen)
{
    *out = NULL;
    if (B < 1 || T < 1 || T > shard->model.max_seq_len || (size_t)B * T > (size_t)1 << 31 || slots < 1) {
        snprintf(err, errlen, "micro-batch %d x %d with %d in flight is impossible (1 <= T <= max_seq_len %d)",
                 B, T, slots, shard->model.max_seq_len);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_stage *st = calloc(1, sizeof *st);
    if (st == NULL)
        goto oom;
    st->k = k;
    st->sh = shard;
    st->layout = shard;
    st->tp = tp;
    st->B = B;
    st->T = T;
    st->N = B * T;
    st->sp = dtrain_tp_sequence_parallel(tp);
    if (st->sp && T % dtrain_tp_size(tp) != 0) {
        snprintf(err, errlen, "sequence parallelism: the %d positions do not split over the %d tensor-parallel "
                 "ranks", T, dtrain_tp_size(tp));
        free(st);
        return DTRAIN_ERR_INPUT;
    }
    st->Nl = st->sp ? st->N / dtrain_tp_size(tp) : st->N;
    st->nl = shard->layers;
    st->V = shard->virtual_stages;
    st->nlc = st->nl / st->V;
    st->nslots = slots;
    st->recompute = recompute;
    st->act = dtrain_kernels_act_dtype(k);
    st->act_size = dtrain_dtype_size(st->act);
    st->att_floats = dtrain_k_attention_saved(k, B, T, shard->heads, shard->kv_heads, shard->head_size);
    size_t n = shard->count;
    st->params = dtrain_k_alloc(k, n * sizeof(float));
    st->grads = dtrain_k_alloc(k, n * sizeof(float));
    st->slots = calloc((size_t)slots, sizeof *st->slots);
    st->host_losses = malloc((size_t)st->N * sizeof(float));
    if (st->params == NULL || st->grads == NULL || st->slots == NULL || st->host_losses == NULL)
        goto oom;
    if (shard->model.family == DTRAIN_FAMILY_LLAMA) {
        float host[DTRAIN_MODEL_MAX_CHANNELS / 2];
        size_t bytes = (size_t)(shard->head_size / 2) * sizeof(float);
        dtrain_model_rope_inv_freq(&shard->model, host);
        if ((st->rope_inv_freq = dtrain_k_alloc(k, bytes)) == NULL)
            goto oom;
        dtrain_k_upload(k, st->rope_inv_freq, host, bytes);
    }
    st->shared = dtrain_k_alloc(k, layout_shared(st, NULL));
    if (st->shared == NULL)
        goto oom;
    st->activation_bytes = layout_shared(st, st->shared);
    size_t layer = layout_layer(st, NULL);
    if (layer > 0 && (st->layer_memory = dtrain_k_alloc(k, layer)) == NULL)
        goto oom;
    layout_layer(st, st->layer_memory);
    st->activation_bytes += layer;
    for (int i = 0; i < slots; i++) {
        struct slot *s = &st->slots[i];
        size_t bytes = layout_slot(st, NULL, s);
        st->activation_bytes += bytes;
        s->memory = dtrain_k_alloc(k, bytes);
        s->inputs = dtrain_k_alloc(k, (size_t)st->N * sizeof(int32_t));
        s->targets = dtrain_k_alloc(k, (size_t)st->N * sizeof(int32_t));
        if (s->memory == NULL || s->inputs == NULL || s->targets == NULL)
            goto oom;
        layout_slot(st, s->memory, s);
    }
    *out = st;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for a pipeline stage of %zu parameters with %d micro-batches "
             "of %d x %d in flight", shard->count, slots, B, T);
    dtrain_stage_destroy(st);
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_stage_destroy(struct dtrain_stage *st)
{
    if (st == NULL)
        return;
    for (int i = 0; st->slots != NULL && i < st->nslots; i++) {
        dtrain_k_free(st->k, st->slots[i].memory);
        dtrain_k_free(st->k, st->slots[i].inputs);
        dtrain_k_free(st->k, st->slots[i].targets);
    }
    free(st->slots);
    dtrain_k_free(st->k, st->shared);
    dtrain_k_free(st->k, st->layer_memory);
    dtrain_k_free(st->k, st->rope_inv_freq);
    dtrain_k_free(st->k, st->params);
    dtrain_k_free(st->k, st->grads);
    dtrain_k_free(st->k, st->frozen_norms);
    dtrain_k_free(st->k, st->nf4_memory);
    free(st->nf4);
    free(st->host_losses);
    free(st);
}

size_t dtrain_stage_num_params(const struct dtrain_stage *st) { return st->sh->count; }

int dtrain_stage_set_lora(struct dtrain_stage *st, struct dtrain_lora *l, char *err, size_t errlen)
{
    size_t bytes = 6 * (size_t)st->sh->model.channels * sizeof(float);
    if ((st->frozen_norms = dtrain_k_alloc(st->k, bytes)) == NULL) {
        snprintf(err, errlen, "out of memory for the frozen base's scratch");
        return DTRAIN_ERR_SYSTEM;
    }
    dtrain_k_zero(st->k, st->frozen_norms, bytes);
    st->lora = l;
    dtrain_k_free(st->k, st->grads);
    st->grads = NULL;
    return DTRAIN_OK;
}

/* Local layer i's weights, with the adapters when LoRA is on (bl holds them). */
static void layer_weights(struct dtrain_stage *st, const struct dtrain_stage_unit *u, int i,
                          struct dtrain_block_weights *w, struct dtrain_block_lora *bl)
{
    dtrain_shard_block_weights(u->layout, u->params, u->layer, w);
    if (st->lora != NULL) {
        dtrain_lora_block(st->lora, i, bl);
        w->lora = bl;
    }
    if (st->nf4 != NULL) { /* the linears' fp32 weights are gone (dtrain_stage_quantize_base) */
        w->nf4 = &st->nf4[(size_t)i * 4];
        w->qkvw = w->attprojw = w->fcw = w->fcprojw = NULL;
    }
}

/* The four block linears' weight tensors, by enum dtrain_block_linear. */
static const enum dtrain_model_tensor linear_weight[4] = {DTRAIN_MODEL_QKVW, DTRAIN_MODEL_ATTPROJW,
                                                          DTRAIN_MODEL_FCW, DTRAIN_MODEL_FCPROJW};

/* The NF4 buffers of every local layer's linears from the fp32 local
 * vector host (the shard's layout), into st->nf4 and st->nf4_memory. */
static int quantize_linears(struct dtrain_stage *st, const float *host, char *err, size_t errlen)
{
    const struct dtrain_shard *sh = st->sh;
    int C = sh->model.channels;
    int rows[4] = {sh->qkv_width, C, sh->fc_rows, C}, cols[4] = {C, sh->attn_width, C, sh->mlp_width};
    size_t layer_bytes = 0;
    for (int j = 0; j < 4; j++)
        layer_bytes += dtrain_nf4_bytes(rows[j], cols[j]);
    st->nf4_bytes = layer_bytes * (size_t)st->nl;
    st->nf4 = calloc((size_t)st->nl * 4 + 1, sizeof *st->nf4);
    st->nf4_memory = st->nf4_bytes > 0 ? dtrain_k_alloc(st->k, st->nf4_bytes) : NULL;
    /* host memory (the cpu backend): quantised in place, no staging copy */
    int in_place = dtrain_kernels_host_memory(st->k) && st->nf4_memory != NULL;
    char *codes = in_place ? st->nf4_memory : malloc(st->nf4_bytes + 1);
    int rc = DTRAIN_OK;
    if (codes == NULL || st->nf4 == NULL || (st->nf4_bytes > 0 && st->nf4_memory == NULL)) {
        snprintf(err, errlen, "out of memory for the NF4 base (%zu bytes)", st->nf4_bytes);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    size_t at = 0;
    for (int i = 0; i < st->nl; i++) {
        for (int j = 0; j < 4; j++) {
            const float *w = host + sh->offset[linear_weight[j]] + (size_t)i * rows[j] * cols[j];
            if (dtrain_nf4_quantize(codes + at, w, rows[j], cols[j]) != 0) {
                snprintf(err, errlen, "--base-dtype nf4: the base's layer %d holds a weight that is not finite",
                         sh->layer_begin + i);
                rc = DTRAIN_ERR_INPUT;
                goto out;
            }
            st->nf4[(size_t)i * 4 + j] = (struct dtrain_nf4){(char *)st->nf4_memory + at, rows[j], cols[j]};
            at += dtrain_nf4_bytes(rows[j], cols[j]);
        }
    }
    if (st->nf4_bytes > 0 && !in_place)
        dtrain_k_upload(st->k, st->nf4_memory, codes, st->nf4_bytes);
out:
    if (!in_place)
        free(codes);
    return rc;
}

int dtrain_stage_quantize_base(struct dtrain_stage *st, char *err, size_t errlen)
{
    const struct dtrain_shard *sh = st->sh;
    struct dtrain_shard *c = &st->nf4_layout;
    /* host memory: the parameters themselves are the host copy (the other
     * tensors are packed down in them, then copied to their own vector) */
    int in_place = dtrain_kernels_host_memory(st->k);
    float *host = in_place ? st->params : malloc((sh->count + 1) * sizeof(float)), *params = NULL;
    int rc = DTRAIN_OK;
    if (host == NULL) {
        snprintf(err, errlen, "out of memory for a host copy of the %zu base parameters", sh->count);
        return DTRAIN_ERR_SYSTEM;
    }
    if (!in_place)
        dtrain_k_download(st->k, host, st->params, sh->count * sizeof(float));
    if ((rc = quantize_linears(st, host, err, errlen)) != DTRAIN_OK)
        goto out;
    /* the other tensors, packed in the shard's order (its offsets without the linears' weights) */
    *c = *sh;
    for (int j = 0; j < 4; j++)
        c->size[linear_weight[j]] = 0;
    c->count = 0;
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        c->offset[t] = c->count;
        memmove(host + c->count, host + sh->offset[t], c->size[t] * sizeof(float));
        c->count += c->size[t];
    }
    if ((params = dtrain_k_alloc(st->k, c->count * sizeof(float))) == NULL) {
        snprintf(err, errlen, "out of memory for the %zu base parameters outside the linears", c->count);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    dtrain_k_upload(st->k, params, host, c->count * sizeof(float));
    dtrain_k_free(st->k, st->params);
    st->params = params;
    st->layout = c;
out:
    if (!in_place)
        free(host);
    return rc;
}

/* Layer gradients: the unit's, or with LoRA none of the base (the norms'
 * into the discarded scratch, the norm kernels always write theirs). */
static void layer_grads(struct dtrain_stage *st, const struct dtrain_stage_unit *u, struct dtrain_block_grads *g)
{
    size_t C = (size_t)st->sh->model.channels;
    float *z = st->frozen_norms;
    if (st->lora == NULL) {
        dtrain_shard_block_grads(u->layout, u->grads, u->layer, g);
        return;
    }
    *g = (struct dtrain_block_grads){.ln1w = z, .ln1b = z + C, .ln2w = z + 2 * C, .ln2b = z + 3 * C};
}

void dtrain_stage_set_source(struct dtrain_stage *st, const struct dtrain_stage_source *src)
{
    st->src = *src;
    dtrain_k_free(st->k, st->params);
    dtrain_k_free(st->k, st->grads);
    st->params = st->grads = NULL;
}

/* Unit (kind, i)'s tensors: the stage's own vectors, or its source's. */
static int unit_get(struct dtrain_stage *st, enum dtrain_shard_unit_kind kind, int i, int grads,
                    struct dtrain_stage_unit *u, char *err, size_t errlen)
{
    if (st->src.acquire == NULL) {
        *u = (struct dtrain_stage_unit){st->layout, st->params, st->grads, i};
        return DTRAIN_OK;
    }
    return st->src.acquire(st->src.ctx, dtrain_shard_unit_of(st->sh, kind, i), grads, u, err, errlen);
}

static int unit_put(struct dtrain_stage *st, enum dtrain_shard_unit_kind kind, int i, char *err, size_t errlen)
{
    if (st->src.release == NULL)
        return DTRAIN_OK;
    return st->src.release(st->src.ctx, dtrain_shard_unit_of(st->sh, kind, i), err, errlen);
}

/* The position embedding's unit (GPT-2), or none (Llama: p gets an empty
 * layout, whose wpe is NULL). */
static int wpe_get(struct dtrain_stage *st, int grads, struct dtrain_stage_unit *p, char *err, size_t errlen)
{
    if (dtrain_shard_unit_of(st->sh, DTRAIN_UNIT_WPE, 0) < 0) {
        *p = (struct dtrain_stage_unit){st->sh, NULL, NULL, -1}; /* dtrain_shard_tensor: NULL for an empty tensor */
        return DTRAIN_OK;
    }
    return unit_get(st, DTRAIN_UNIT_WPE, 0, grads, p, err, errlen);
}

static int wpe_put(struct dtrain_stage *st, char *err, size_t errlen)
{
    if (dtrain_shard_unit_of(st->sh, DTRAIN_UNIT_WPE, 0) < 0)
        return DTRAIN_OK;
    return unit_put(st, DTRAIN_UNIT_WPE, 0, err, errlen);
}

/* Where the LM head's weights are: the tied wte (a unit of its own), or an
 * untied head's lmhead (in the head unit, with the final norm). */
static enum dtrain_shard_unit_kind head_unit(const struct dtrain_shard *sh)
{
    return sh->size[DTRAIN_MODEL_LMHEAD] > 0 ? DTRAIN_UNIT_HEAD : DTRAIN_UNIT_WTE;
}

static enum dtrain_model_tensor head_tensor(const struct dtrain_shard *sh)
{
    return sh->size[DTRAIN_MODEL_LMHEAD] > 0 ? DTRAIN_MODEL_LMHEAD : DTRAIN_MODEL_WTE;
}

void dtrain_stage_memory(const struct dtrain_stage *st, struct dtrain_stage_memory *m)
{
    m->param_bytes = m->grad_bytes = st->params != NULL ? st->sh->count * sizeof(float) : 0;
    if (st->nf4 != NULL) /* NF4 base: the other tensors' fp32 and the linears' NF4 */
        m->param_bytes = st->layout->count * sizeof(float) + st->nf4_bytes;
    /* tokens of each slot count with the activations */
    m->activation_bytes = st->activation_bytes + (size_t)st->nslots * 2 * st->N * sizeof(int32_t);
}
float *dtrain_stage_params(struct dtrain_stage *st) { return st->params; }
float *dtrain_stage_grads(struct dtrain_stage *st) { return st->grads; }

void dtrain_stage_zero_grad(struct dtrain_stage *st)
{
    if (st->grads != NULL) /* with a source, its gradient buffers are its own */
        dtrain_k_zero(st->k, st->grads, st->sh->count * sizeof(float));
}

int dtrain_stage_set_tokens(struct dtrain_stage *st, int slot, const int32_t *inputs,
                            const int32_t *targets, char *err, size_t errlen)
{
    int rc, V = st->sh->model.vocab_size;
    struct slot *s = &st->slots[slot];
    size_t bytes = (size_t)st->N * sizeof(int32_t);
    if (st->sh->has_embedding) {
        if ((rc = dtrain_model_check_tokens(inputs, (size_t)st->N, V, "input", err, errlen)) != DTRAIN_OK)
            return rc;
        dtrain_k_upload(st->k, s->inputs, inputs, bytes);
    }
    if (st->sh->has_head) {
        if ((rc = dtrain_model_check_tokens(targets, (size_t)st->N, V, "target", err, errlen)) != DTRAIN_OK)
            return rc;
        dtrain_k_upload(st->k, s->targets, targets, bytes);
    }
    return DTRAIN_OK;
}

/* Chunk c's input is the residual entering its first layer, its output the
 * one leaving its last: res[c*nlc] and res[(c+1)*nlc].  The output of chunk
 * c and the input of chunk c+1 share res[(c+1)*nlc]: the output is sent on
 * right after the forward and never read again (backward reads each
 * layer's input), the input arrives later (it goes round the pipeline). */
float *dtrain_stage_chunk_input(struct dtrain_stage *st, int slot, int chunk)
{
    return st->slots[slot].res + (size_t)chunk * st->nlc * st->Nl * st->sh->model.channels;
}

float *dtrain_stage_chunk_output(struct dtrain_stage *st, int slot, int chunk)
{
    return dtrain_stage_chunk_input(st, slot, chunk + 1);
}

float *dtrain_stage_chunk_grad(struct dtrain_stage *st, int slot)
{
    return st->V > 1 ? st->slots[slot].dres : st->dres;
}
size_t dtrain_stage_act_floats(const struct dtrain_stage *st) { return (size_t)st->Nl * st->sh->model.channels; }

/* Local layer i's activations inside slot s (full recomputation: the
 * stage's one set; selective: att is the stage's). */
static void layer_acts(const struct dtrain_stage *st, const struct slot *s, int i, struct dtrain_block_acts *a)
{
    const struct dtrain_shard *sh = st->sh;
    if (st->recompute == DTRAIN_RECOMPUTE_FULL) {
        s = &st->layer;
        i = 0;
    }
    size_t l = (size_t)i, N = (size_t)st->N, Nl = (size_t)st->Nl, C = (size_t)sh->model.channels;
    size_t CL = (size_t)sh->attn_width, FL = (size_t)sh->mlp_width, es = st->act_size;
    size_t QKV = (size_t)sh->qkv_width, FCR = (size_t)sh->fc_rows;
    a->act = st->act;
    a->ln1 = s->ln1 + l * Nl * C;
    a->ln1_mean = s->ln1_mean + l * Nl;
    a->ln1_rstd = s->ln1_rstd + l * Nl;
    a->qkv = (char *)s->qkv + l * N * QKV * es;
    a->atty = (char *)s->atty + l * N * CL * es;
    a->att = s->att + l * st->att_floats;
    a->res2 = s->res2 + l * Nl * C;
    a->ln2 = s->ln2 + l * Nl * C;
    a->ln2_mean = s->ln2_mean + l * Nl;
    a->ln2_rstd = s->ln2_rstd + l * Nl;
    a->fch = (char *)s->fch + l * N * FCR * es;
    a->fch_gelu = (char *)s->fch_gelu + l * N * FL * es;
    a->seq_in = st->seq_in;
    a->seq_out = st->seq_out;
    if (st->recompute == DTRAIN_RECOMPUTE_SELECTIVE)
        a->att = st->layer.att;
}

static int dtrain_stage_forward_layers(struct dtrain_stage *st, int slot, int c0, int c1, double *loss_sum,
                                       char *err, size_t errlen);
static int dtrain_stage_backward_layers(struct dtrain_stage *st, int slot, int c0, int c1, float dloss,
                                        dtrain_stage_unit_done done, void *ctx, char *err, size_t errlen);

static float *residual(const struct dtrain_stage *st, const struct slot *s, int i)
{
    return s->res + (size_t)i * st->Nl * st->sh->model.channels;
}

/* Sequence parallel: the LM head's input, the final LN's rows of every
 * rank, into seq_in (forward, and again before the head's backward: only
 * the rank's rows are kept). */
static int head_input(struct dtrain_stage *st, const struct slot *s, char *err, size_t errlen)
{
    if (!st->sp)
        return DTRAIN_OK;
    return dtrain_tp_all_gather(st->tp, s->lnf, st->seq_in, (size_t)st->Nl * st->sh->model.channels, err, errlen);
}

/* Sequence parallel, after a unit's backward when sp_sum_due says so (the
 * step's last micro-batch; ZeRO-3: every one): the LayerNorm weight
 * gradients hold this rank's rows' share; their
 * sum over the TP group (every rank the same bits, as the replicated
 * weights need) before data parallelism takes the unit.  n tensors of C. */
static int sum_norm_grads(struct dtrain_stage *st, float *const *g, int n, char *err, size_t errlen)
{
    int rc;
    for (int i = 0; i < n; i++)
        if ((rc = dtrain_tp_allreduce(st->tp, g[i], (size_t)st->sh->model.channels, err, errlen)) != DTRAIN_OK)
            return rc;
    return DTRAIN_OK;
}

/* Sequence parallel: sum the LayerNorm weight gradients over TP now?  At
 * the step's last micro-batch (done given), when DP takes the units; with
 * ZeRO-3 at every micro-batch, before unit_put reduce-scatters that
 * micro-batch's gradient over DP (the sums commute: same result). */
static int sp_sum_due(const struct dtrain_stage *st, dtrain_stage_unit_done done)
{
    return st->sp && st->lora == NULL && (done != NULL || st->src.acquire != NULL); /* LoRA: frozen norms */
}

int dtrain_stage_forward_chunk(struct dtrain_stage *st, int slot, int chunk, double *loss_sum, char *err,
                               size_t errlen)
{
    return dtrain_stage_forward_layers(st, slot, chunk, chunk + 1, loss_sum, err, errlen);
}

/* Chunks [c0, c1): the embedding before chunk 0, the head after chunk V-1. */
static int dtrain_stage_forward_layers(struct dtrain_stage *st, int slot, int c0, int c1, double *loss_sum,
                                       char *err, size_t errlen)
{
    const struct dtrain_shard *sh = st->sh;
    struct slot *s = &st->slots[slot];
    int C = sh->model.channels, N = st->N, rc;
    struct dtrain_stage_unit e, p;
    *loss_sum = 0.0;
    if (sh->has_embedding && c0 == 0) {
        if ((rc = unit_get(st, DTRAIN_UNIT_WTE, 0, 0, &e, err, errlen)) != DTRAIN_OK)
            return rc;
        if ((rc = wpe_get(st, 0, &p, err, errlen)) == DTRAIN_OK) {
            rc = dtrain_tp_embedding_forward(st->tp, s->res, st->seq_out, s->inputs,
                                             dtrain_shard_tensor(e.layout, e.params, DTRAIN_MODEL_WTE),
                                             dtrain_shard_tensor(p.layout, p.params, DTRAIN_MODEL_WPE),
                                             st->B, st->T, C, err, errlen);
            int put = wpe_put(st, err, errlen);
            rc = rc != DTRAIN_OK ? rc : put;
        }
        int put = unit_put(st, DTRAIN_UNIT_WTE, 0, err, errlen);
        if ((rc = rc != DTRAIN_OK ? rc : put) != DTRAIN_OK)
            return rc;
    }
    struct dtrain_block_shape shape;
    dtrain_shard_block_shape(sh, st->B, st->T, &shape);
    shape.rope_inv_freq = st->rope_inv_freq;
    for (int i = c0 * st->nlc; i < c1 * st->nlc; i++) {
        struct dtrain_block_weights w;
        struct dtrain_block_acts a;
        struct dtrain_stage_unit u;
        if ((rc = unit_get(st, DTRAIN_UNIT_LAYER, i, 0, &u, err, errlen)) != DTRAIN_OK)
            return rc;
        struct dtrain_block_lora bl;
        layer_weights(st, &u, i, &w, &bl);
        layer_acts(st, s, i, &a);
        rc = dtrain_block_forward(st->k, &shape, &w, &a, residual(st, s, i), residual(st, s, i + 1),
                                  dtrain_tp_block_hook(st->tp), err, errlen);
        int put = unit_put(st, DTRAIN_UNIT_LAYER, i, err, errlen);
        if ((rc = rc != DTRAIN_OK ? rc : put) != DTRAIN_OK)
            return rc;
    }
    if (!sh->has_head || c1 != st->V)
        return DTRAIN_OK;
    /* final LN (replicated; sequence parallel: the rank's rows), then f
     * (sequence parallel: the all-gather of the rows, the gather point) and
     * this rank's vocabulary columns */
    if ((rc = unit_get(st, DTRAIN_UNIT_HEAD, 0, 0, &p, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_model_norm_forward(st->k, &sh->model, s->lnf, s->lnf_mean, s->lnf_rstd, residual(st, s, st->nl),
                              dtrain_shard_tensor(p.layout, p.params, DTRAIN_MODEL_LNFW),
                              dtrain_shard_tensor(p.layout, p.params, DTRAIN_MODEL_LNFB), st->Nl, C);
    /* the head's weights: the tied wte (its own unit) or lmhead (the head unit, still held) */
    enum dtrain_shard_unit_kind hk = head_unit(sh);
    if ((hk == DTRAIN_UNIT_WTE && (rc = unit_put(st, DTRAIN_UNIT_HEAD, 0, err, errlen)) != DTRAIN_OK) ||
        (rc = head_input(st, s, err, errlen)) != DTRAIN_OK ||
        (hk == DTRAIN_UNIT_WTE && (rc = unit_get(st, DTRAIN_UNIT_WTE, 0, 0, &p, err, errlen)) != DTRAIN_OK)) {
        if (hk == DTRAIN_UNIT_HEAD)
            unit_put(st, DTRAIN_UNIT_HEAD, 0, err, errlen);
        return rc;
    }
    dtrain_k_matmul_forward(st->k, dtrain_tensor_f32(s->logits), dtrain_tensor_f32(st->sp ? st->seq_in : s->lnf),
                            dtrain_shard_tensor(p.layout, p.params, head_tensor(sh)), NULL, N, C, sh->vocab_rows);
    if ((rc = unit_put(st, hk, 0, err, errlen)) != DTRAIN_OK)
        return rc;
    if ((rc = dtrain_tp_xent_forward(st->tp, s->logits, s->losses, s->targets, N, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_download(st->k, st->host_losses, s->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += st->host_losses[i];
    *loss_sum = sum;
    return DTRAIN_OK;
}

int dtrain_stage_backward_chunk(struct dtrain_stage *st, int slot, int chunk, float dloss,
                                dtrain_stage_unit_done done, void *ctx, char *err, size_t errlen)
{
    return dtrain_stage_backward_layers(st, slot, chunk, chunk + 1, dloss, done, ctx, err, errlen);
}

/* Chunks c1-1 down to c0, on the slot's residual gradient
 * (dtrain_stage_chunk_grad). */
static int dtrain_stage_backward_layers(struct dtrain_stage *st, int slot, int c0, int c1, float dloss,
                                        dtrain_stage_unit_done done, void *ctx, char *err, size_t errlen)
{
    const struct dtrain_shard *sh = st->sh;
    struct slot *s = &st->slots[slot];
    int C = sh->model.channels, N = st->N, rc, put;
    float *dres = dtrain_stage_chunk_grad(st, slot);
    struct dtrain_stage_unit e, p;
    if (sh->has_head && c1 == st->V) {
        size_t NlC = (size_t)st->Nl * C;
        float *dln = st->sp ? st->seq_out : st->scratch.dln; /* the rank's rows of d(lnf) */
        enum dtrain_shard_unit_kind hk = head_unit(sh);
        dtrain_tp_xent_backward(st->tp, s->logits, s->targets, dloss, N);
        if ((rc = head_input(st, s, err, errlen)) != DTRAIN_OK ||
            (rc = unit_get(st, hk, 0, 1, &e, err, errlen)) != DTRAIN_OK)
            return rc;
        dtrain_k_matmul_backward(st->k, dtrain_tensor_f32(st->scratch.dln),
                                 st->lora != NULL ? NULL : dtrain_shard_tensor(e.layout, e.grads, head_tensor(sh)), NULL,
                                 dtrain_tensor_f32(s->logits), dtrain_tensor_f32(st->sp ? st->seq_in : s->lnf),
                                 dtrain_shard_tensor(e.layout, e.params, head_tensor(sh)), N, C, sh->vocab_rows);
        p = e; /* untied: the head unit stays held for the final norm */
        if (hk == DTRAIN_UNIT_WTE && (rc = unit_put(st, DTRAIN_UNIT_WTE, 0, err, errlen)) != DTRAIN_OK)
            return rc;
        /* f's backward: the partial input gradients of the column-parallel
         * logits summed (sequence parallel: each rank's rows of the sum) */
        rc = st->sp ? dtrain_tp_reduce_scatter(st->tp, st->scratch.dln, dln, NlC, err, errlen)
                    : dtrain_tp_allreduce(st->tp, st->scratch.dln, (size_t)N * C, err, errlen);
        if (rc == DTRAIN_OK && hk == DTRAIN_UNIT_WTE)
            rc = unit_get(st, DTRAIN_UNIT_HEAD, 0, 1, &p, err, errlen);
        if (rc != DTRAIN_OK) {
            if (hk == DTRAIN_UNIT_HEAD)
                unit_put(st, DTRAIN_UNIT_HEAD, 0, err, errlen);
            return rc;
        }
        dtrain_k_zero(st->k, dres, NlC * sizeof(float));
        float *lnfw, *lnfb;
        if (st->lora == NULL) {
            lnfw = dtrain_shard_tensor(p.layout, p.grads, DTRAIN_MODEL_LNFW);
            lnfb = dtrain_shard_tensor(p.layout, p.grads, DTRAIN_MODEL_LNFB);
        } else { /* frozen: into the scratch */
            lnfw = st->frozen_norms + 4 * (size_t)C;
            lnfb = sh->size[DTRAIN_MODEL_LNFB] > 0 ? st->frozen_norms + 5 * (size_t)C : NULL;
        }
        dtrain_model_norm_backward(st->k, &sh->model, dres, lnfw, lnfb, dln, residual(st, s, st->nl),
                                   dtrain_shard_tensor(p.layout, p.params, DTRAIN_MODEL_LNFW), s->lnf_mean,
                                   s->lnf_rstd, st->Nl, C);
        float *norms[2] = {lnfw, lnfb};
        rc = sp_sum_due(st, done) ? sum_norm_grads(st, norms, lnfb != NULL ? 2 : 1, err, errlen) : DTRAIN_OK;
        put = unit_put(st, DTRAIN_UNIT_HEAD, 0, err, errlen);
        if ((rc = rc != DTRAIN_OK ? rc : put) != DTRAIN_OK)
            return rc;
        if (done != NULL)
            done(ctx, dtrain_shard_unit_of(sh, DTRAIN_UNIT_HEAD, 0));
    }
    struct dtrain_block_shape shape;
    dtrain_shard_block_shape(sh, st->B, st->T, &shape);
    shape.rope_inv_freq = st->rope_inv_freq;
    for (int i = c1 * st->nlc - 1; i >= c0 * st->nlc; i--) {
        struct dtrain_block_weights w;
        struct dtrain_block_grads g;
        struct dtrain_block_acts a;
        struct dtrain_stage_unit u;
        if ((rc = unit_get(st, DTRAIN_UNIT_LAYER, i, 1, &u, err, errlen)) != DTRAIN_OK)
            return rc;
        struct dtrain_block_lora bl;
        layer_weights(st, &u, i, &w, &bl);
        layer_grads(st, &u, &g);
        layer_acts(st, s, i, &a);
        rc = DTRAIN_OK;
        /* recomputation: what forward did not keep, from what it kept */
        if (st->recompute == DTRAIN_RECOMPUTE_FULL)
            rc = dtrain_block_forward(st->k, &shape, &w, &a, residual(st, s, i), st->recompute_out,
                                      dtrain_tp_block_hook(st->tp), err, errlen);
        if (st->recompute == DTRAIN_RECOMPUTE_SELECTIVE) /* atty again into datty, overwritten below */
            dtrain_k_attention_forward(st->k, dtrain_tensor_of(a.act, st->scratch.datty), a.att,
                                       dtrain_tensor_of(a.act, a.qkv), st->B, st->T, shape.NH, shape.KVH, shape.HS);
        if (rc == DTRAIN_OK)
            rc = dtrain_block_backward(st->k, &shape, &w, &g, &a, &st->scratch, residual(st, s, i), dres,
                                       dtrain_tp_block_hook(st->tp), err, errlen);
        float *norms[4] = {g.ln1w, g.ln1b, g.ln2w, g.ln2b}, *rms_norms[2] = {g.ln1w, g.ln2w};
        int biases = sh->model.family == DTRAIN_FAMILY_GPT2; /* Llama's RMSNorms have none */
        if (rc == DTRAIN_OK && sp_sum_due(st, done))
            rc = sum_norm_grads(st, biases ? norms : rms_norms, biases ? 4 : 2, err, errlen);
        put = unit_put(st, DTRAIN_UNIT_LAYER, i, err, errlen);
        if ((rc = rc != DTRAIN_OK ? rc : put) != DTRAIN_OK)
            return rc;
        if (done != NULL)
            done(ctx, dtrain_shard_unit_of(sh, DTRAIN_UNIT_LAYER, i));
    }
    if (sh->has_embedding && c0 == 0 && st->lora == NULL) { /* LoRA: the embedding is frozen */
        /* sequence parallel: the converse of the embedding's reduce-scatter,
         * every rank's rows of the gradient */
        const float *dout = dres;
        if (st->sp) {
            if ((rc = dtrain_tp_all_gather(st->tp, dres, st->seq_out, (size_t)st->Nl * C, err, errlen)) != DTRAIN_OK)
                return rc;
            dout = st->seq_out;
        }
        if ((rc = unit_get(st, DTRAIN_UNIT_WTE, 0, 1, &e, err, errlen)) != DTRAIN_OK)
            return rc;
        if ((rc = wpe_get(st, 1, &p, err, errlen)) == DTRAIN_OK) {
            dtrain_tp_embedding_backward(st->tp, dtrain_shard_tensor(e.layout, e.grads, DTRAIN_MODEL_WTE),
                                         dtrain_shard_tensor(p.layout, p.grads, DTRAIN_MODEL_WPE), dout, s->inputs,
                                         st->B, st->T, C);
            rc = wpe_put(st, err, errlen);
        }
        put = unit_put(st, DTRAIN_UNIT_WTE, 0, err, errlen);
        if ((rc = rc != DTRAIN_OK ? rc : put) != DTRAIN_OK)
            return rc;
        if (done != NULL && dtrain_shard_unit_of(sh, DTRAIN_UNIT_WPE, 0) >= 0)
            done(ctx, dtrain_shard_unit_of(sh, DTRAIN_UNIT_WPE, 0));
    }
    return DTRAIN_OK;
}
