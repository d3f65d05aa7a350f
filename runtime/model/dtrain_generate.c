/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Generation with a KV cache; see dtrain_generate.h.  Shapes in comments:
 * C channels, NH query heads and KVH key/value heads of HS = C/NH each
 * (GPT-2: KVH = NH), KV = KVH*HS, QKV = (NH + 2 KVH) HS, F the MLP width,
 * L layers, t the position. */
#include "dtrain_generate.h"
#include "dtrain_rng.h"
#include "dtrain_status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dtrain_gen {
    struct dtrain_model_config c;
    int NH, KVH, HS, QKV, F, FCR; /* FCR: fc's rows (GPT-2 F; Llama 2F, gate then up) */
    const float *t[DTRAIN_MODEL_NUM_TENSORS]; /* each tensor in params; NULL: the family lacks it */
    float *kcache, *vcache;  /* (L, maxT, KV) each */
    float *x, *ln, *qkv, *att, *atto, *fc, *scores; /* one position's activations */
    float *inv_freq; /* Llama: RoPE's (HS/2) */
    int pos;
};

int dtrain_gen_create(const struct dtrain_model_config *c, const float *params, struct dtrain_gen **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    int rc = dtrain_model_config_check(c, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    struct dtrain_gen *g = calloc(1, sizeof *g);
    if (g == NULL)
        goto oom;
    g->c = *c;
    g->NH = c->num_heads;
    g->KVH = dtrain_model_kv_heads(c);
    g->HS = c->channels / c->num_heads;
    g->QKV = (g->NH + 2 * g->KVH) * g->HS;
    g->F = dtrain_model_mlp_width(c);
    g->FCR = c->family == DTRAIN_FAMILY_LLAMA ? 2 * g->F : g->F;
    size_t sizes[DTRAIN_MODEL_NUM_TENSORS];
    dtrain_model_tensor_sizes(c, sizes);
    for (int i = 0; i < DTRAIN_MODEL_NUM_TENSORS; i++)
        g->t[i] = sizes[i] == 0 ? NULL : params + dtrain_model_tensor_offset(c, (enum dtrain_model_tensor)i);
    size_t C = (size_t)c->channels, cache = (size_t)c->num_layers * c->max_seq_len * g->KVH * g->HS;
    g->kcache = malloc(cache * sizeof(float));
    g->vcache = malloc(cache * sizeof(float));
    g->x = malloc(C * sizeof(float));
    g->ln = malloc(C * sizeof(float));
    g->qkv = malloc((size_t)g->QKV * sizeof(float));
    g->att = malloc(C * sizeof(float));
    g->atto = malloc(C * sizeof(float));
    g->fc = malloc((size_t)g->FCR * sizeof(float));
    g->scores = malloc((size_t)c->max_seq_len * sizeof(float));
    g->inv_freq = malloc((size_t)(g->HS / 2 + 1) * sizeof(float));
    if (!g->kcache || !g->vcache || !g->x || !g->ln || !g->qkv || !g->att || !g->atto || !g->fc || !g->scores ||
        !g->inv_freq) {
        dtrain_gen_destroy(g);
        goto oom;
    }
    if (c->family == DTRAIN_FAMILY_LLAMA)
        dtrain_model_rope_inv_freq(c, g->inv_freq);
    *out = g;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for the generator's KV cache");
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_gen_destroy(struct dtrain_gen *g)
{
    if (g == NULL)
        return;
    free(g->kcache);
    free(g->vcache);
    free(g->x);
    free(g->ln);
    free(g->qkv);
    free(g->att);
    free(g->atto);
    free(g->fc);
    free(g->scores);
    free(g->inv_freq);
    free(g);
}

void dtrain_gen_reset(struct dtrain_gen *g) { g->pos = 0; }
int dtrain_gen_position(const struct dtrain_gen *g) { return g->pos; }

/* Tensor t from element off on; NULL when the family lacks t (Llama's
 * biases), which matvec and norm take as none. */
static const float *at(const struct dtrain_gen *g, enum dtrain_model_tensor t, size_t off)
{
    return g->t[t] != NULL ? g->t[t] + off : NULL;
}

/* out (C) = layernorm(x) * w + b, as the kernels' (eps 1e-5) */
static void layernorm(float *out, const float *x, const float *w, const float *b, int C)
{
    float m = 0.0f, var = 0.0f;
    for (int c = 0; c < C; c++)
        m += x[c];
    m /= (float)C;
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        var += d * d;
    }
    var /= (float)C;
    float s = 1.0f / sqrtf(var + 1e-5f);
    for (int c = 0; c < C; c++)
        out[c] = (x[c] - m) * s * w[c] + b[c];
}

/* out (C) = x / sqrt(mean(x^2) + eps) * w (Hugging Face's LlamaRMSNorm) */
static void rmsnorm(float *out, const float *x, const float *w, float eps, int C)
{
    float ms = 0.0f;
    for (int c = 0; c < C; c++)
        ms += x[c] * x[c];
    float s = 1.0f / sqrtf(ms / (float)C + eps);
    for (int c = 0; c < C; c++)
        out[c] = x[c] * s * w[c];
}

/* g->ln = the family's norm of g->x: weight tensor w, bias tensor b, row r */
static void norm(struct dtrain_gen *g, enum dtrain_model_tensor w, enum dtrain_model_tensor b, size_t r)
{
    int C = g->c.channels;
    if (g->c.family == DTRAIN_FAMILY_LLAMA)
        rmsnorm(g->ln, g->x, at(g, w, r * C), g->c.norm_eps, C);
    else
        layernorm(g->ln, g->x, at(g, w, r * C), at(g, b, r * C), C);
}

/* out (OC) = W (OC, IC) @ x (IC) + b (OC; NULL: none) */
static void matvec(float *out, const float *W, const float *b, const float *x, int IC, int OC)
{
    for (int o = 0; o < OC; o++) {
        const float *w = W + (size_t)o * IC;
        float s = b != NULL ? b[o] : 0.0f;
        for (int i = 0; i < IC; i++)
            s += w[i] * x[i];
        out[o] = s;
    }
}

static float gelu(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* Llama: the NH query heads and KVH key heads of g->qkv (adjacent, from
 * its start) rotated to position pos, Hugging Face's rotate-half pairs
 * (i, i + HS/2), as dtrain_k_rope_forward's. */
static void rope(struct dtrain_gen *g, int pos)
{
    int half = g->HS / 2;
    for (int i = 0; i < half; i++) {
        float angle = (float)pos * g->inv_freq[i], c = cosf(angle), s = sinf(angle);
        for (int h = 0; h < g->NH + g->KVH; h++) {
            float *x = g->qkv + (size_t)h * g->HS, x1 = x[i], x2 = x[i + half];
            x[i] = x1 * c - x2 * s;
            x[i + half] = x2 * c + x1 * s;
        }
    }
}

/* Layer l's attention at pos: this position's k and v (after g->qkv's q
 * rows) into the cache, then g->att (NH*HS) = each query head's softmax
 * (q . k[t] / sqrt(HS)), t <= pos, over the v[t] of its key/value head
 * (query head h uses head h / (NH/KVH): grouped-query attention). */
static void attend(struct dtrain_gen *g, int l, int pos)
{
    const int HS = g->HS, KV = g->KVH * HS, group = g->NH / g->KVH;
    float *K = g->kcache + (size_t)l * g->c.max_seq_len * KV, *V = g->vcache + (size_t)l * g->c.max_seq_len * KV;
    memcpy(K + (size_t)pos * KV, g->qkv + g->NH * HS, (size_t)KV * sizeof(float));
    memcpy(V + (size_t)pos * KV, g->qkv + g->NH * HS + KV, (size_t)KV * sizeof(float));
    const float scale = 1.0f / sqrtf((float)HS);
    for (int h = 0; h < g->NH; h++) {
        const float *q = g->qkv + h * HS;
        const size_t kvh = (size_t)(h / group) * HS;
        float maxv = -INFINITY, sum = 0.0f;
        for (int t = 0; t <= pos; t++) {
            const float *k = K + (size_t)t * KV + kvh;
            float s = 0.0f;
            for (int i = 0; i < HS; i++)
                s += q[i] * k[i];
            s *= scale;
            g->scores[t] = s;
            if (s > maxv)
                maxv = s;
        }
        for (int t = 0; t <= pos; t++) {
            g->scores[t] = expf(g->scores[t] - maxv);
            sum += g->scores[t];
        }
        float inv = 1.0f / sum, *o = g->att + h * HS;
        for (int i = 0; i < HS; i++)
            o[i] = 0.0f;
        for (int t = 0; t <= pos; t++) {
            const float *v = V + (size_t)t * KV + kvh;
            float a = g->scores[t] * inv;
            for (int i = 0; i < HS; i++)
                o[i] += a * v[i];
        }
    }
}

/* The MLP's nonlinearity on g->fc, leaving its F outputs at its start:
 * GPT-2 GELU (tanh), Llama SwiGLU silu(gate) * up. */
static void activate(struct dtrain_gen *g)
{
    float *fc = g->fc;
    if (g->c.family == DTRAIN_FAMILY_LLAMA) {
        for (int i = 0; i < g->F; i++)
            fc[i] = fc[i] / (1.0f + expf(-fc[i])) * fc[g->F + i];
    } else {
        for (int i = 0; i < g->F; i++)
            fc[i] = gelu(fc[i]);
    }
}

int dtrain_gen_step(struct dtrain_gen *g, int32_t token, float *logits, char *err, size_t errlen)
{
    const struct dtrain_model_config *c = &g->c;
    const int C = c->channels, T = c->max_seq_len, pos = g->pos, QKV = g->QKV, F = g->F, FCR = g->FCR;
    if (token < 0 || token >= c->vocab_size) {
        snprintf(err, errlen, "token id %ld is outside the model's vocabulary 0..%d", (long)token, c->vocab_size - 1);
        return DTRAIN_ERR_INPUT;
    }
    if (pos >= T) {
        snprintf(err, errlen, "the model knows %d positions (max_seq_len): no room for another token", T);
        return DTRAIN_ERR_INPUT;
    }
    /* x (C) = wte[token] (+ wpe[pos]: GPT-2's learned positions) */
    const float *wte = g->t[DTRAIN_MODEL_WTE] + (size_t)token * C, *wpe = at(g, DTRAIN_MODEL_WPE, (size_t)pos * C);
    for (int i = 0; i < C; i++)
        g->x[i] = wpe != NULL ? wte[i] + wpe[i] : wte[i];
    for (int l = 0; l < c->num_layers; l++) {
        size_t lc = (size_t)l * C;
        /* attention: norm 1 -> qkv (QKV) (-> Llama: RoPE on q and k) -> attend -> proj (C) */
        norm(g, DTRAIN_MODEL_LN1W, DTRAIN_MODEL_LN1B, (size_t)l);
        matvec(g->qkv, at(g, DTRAIN_MODEL_QKVW, (size_t)l * QKV * C), at(g, DTRAIN_MODEL_QKVB, (size_t)l * QKV),
               g->ln, C, QKV);
        if (c->family == DTRAIN_FAMILY_LLAMA)
            rope(g, pos);
        attend(g, l, pos);
        matvec(g->atto, at(g, DTRAIN_MODEL_ATTPROJW, lc * C), at(g, DTRAIN_MODEL_ATTPROJB, lc), g->att, C, C);
        for (int i = 0; i < C; i++)
            g->x[i] += g->atto[i];
        /* MLP: norm 2 -> fc (FCR) -> GELU or SwiGLU (F) -> proj (C) */
        norm(g, DTRAIN_MODEL_LN2W, DTRAIN_MODEL_LN2B, (size_t)l);
        matvec(g->fc, at(g, DTRAIN_MODEL_FCW, (size_t)l * FCR * C), at(g, DTRAIN_MODEL_FCB, (size_t)l * FCR),
               g->ln, C, FCR);
        activate(g);
        matvec(g->atto, at(g, DTRAIN_MODEL_FCPROJW, lc * F), at(g, DTRAIN_MODEL_FCPROJB, lc), g->fc, F, C);
        for (int i = 0; i < C; i++)
            g->x[i] += g->atto[i];
    }
    /* head: final norm -> logits (Vp) = head @ it, the untied head or wte
     * (padding rows are 0) */
    norm(g, DTRAIN_MODEL_LNFW, DTRAIN_MODEL_LNFB, 0);
    const float *head = g->t[DTRAIN_MODEL_LMHEAD] != NULL ? g->t[DTRAIN_MODEL_LMHEAD] : g->t[DTRAIN_MODEL_WTE];
    matvec(logits, head, NULL, g->ln, C, c->padded_vocab_size);
    g->pos++;
    return DTRAIN_OK;
}
int32_t dtrain_gen_sample(const float *logits, int V, double temperature, int top_k, uint64_t seed, uint64_t index)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best])
            best = v;
    if (!(temperature > 0.0) || top_k == 1)
        return best;
    double maxl = logits[best], sum = 0.0;
    double u = dtrain_rng_uniform(seed, DTRAIN_GEN_STREAM, index);
    int k = top_k > 0 && top_k < V ? top_k : V;
    /* keep[v]: v among the k largest, ties to the lower id (O(V k) at most) */
    unsigned char *keep = malloc((size_t)V);
    if (keep == NULL)
        return best;
    if (k == V) {
        memset(keep, 1, (size_t)V);
    } else {
        memset(keep, 0, (size_t)V);
        for (int n = 0; n < k; n++) {
            int pick = -1;
            for (int v = 0; v < V; v++)
                if (!keep[v] && (pick < 0 || logits[v] > logits[pick]))
                    pick = v;
            if (pick < 0)
                break; /* cannot happen: k < V leaves one */
            keep[pick] = 1;
        }
    }
    for (int v = 0; v < V; v++)
        if (keep[v])
            sum += exp(((double)logits[v] - maxl) / temperature);
    double target = u * sum, acc = 0.0;
    int32_t chosen = best;
    for (int v = 0; v < V; v++) {
        if (!keep[v])
            continue;
        acc += exp(((double)logits[v] - maxl) / temperature);
        chosen = v;
        if (acc > target)
            break;
    }
    free(keep);
    return chosen;
}

int dtrain_generate(struct dtrain_gen *g, const int32_t *prompt, int n, int max_new, double temperature,
                    int top_k, uint64_t seed, int32_t *out, int *nout, char *err, size_t errlen)
{
    const struct dtrain_model_config *c = &g->c;
    float *logits = malloc((size_t)c->padded_vocab_size * sizeof(float));
    int rc = DTRAIN_OK;
    *nout = 0;
    if (logits == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    if (n < 1 || n > c->max_seq_len) {
        snprintf(err, errlen, "a prompt of %d tokens: give 1 to %d (the model's max_seq_len)", n, c->max_seq_len);
        free(logits);
        return DTRAIN_ERR_INPUT;
    }
    dtrain_gen_reset(g);
    for (int i = 0; i < n && rc == DTRAIN_OK; i++)
        rc = dtrain_gen_step(g, prompt[i], logits, err, errlen);
    /* each new token: sampled from the last logits, then fed (one forward step) */
    for (int i = 0; rc == DTRAIN_OK && i < max_new; i++) {
        int32_t next = dtrain_gen_sample(logits, c->vocab_size, temperature, top_k, seed, (uint64_t)i);
        out[(*nout)++] = next;
        if (i + 1 < max_new && g->pos < c->max_seq_len)
            rc = dtrain_gen_step(g, next, logits, err, errlen);
        else if (i + 1 < max_new)
            break; /* maxT reached: the model has no further position */
    }
    free(logits);
    return rc;
}
