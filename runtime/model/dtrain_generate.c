/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Generation with a KV cache; see dtrain_generate.h.  Shapes in comments:
 * C channels, NH heads of hs = C/NH, L layers, t the position. */
#include "dtrain_generate.h"
#include "dtrain_rng.h"
#include "dtrain_status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dtrain_gen {
    struct dtrain_model_config c;
    const float *t[DTRAIN_MODEL_NUM_TENSORS]; /* each tensor in params */
    float *kcache, *vcache;  /* (L, maxT, C) each */
    float *x, *ln, *qkv, *att, *atto, *fc, *scores; /* one position's activations */
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
    for (int i = 0; i < DTRAIN_MODEL_NUM_TENSORS; i++)
        g->t[i] = params + dtrain_model_tensor_offset(c, (enum dtrain_model_tensor)i);
    size_t C = (size_t)c->channels, cache = (size_t)c->num_layers * c->max_seq_len * C;
    g->kcache = malloc(cache * sizeof(float));
    g->vcache = malloc(cache * sizeof(float));
    g->x = malloc(C * sizeof(float));
    g->ln = malloc(C * sizeof(float));
    g->qkv = malloc(3 * C * sizeof(float));
    g->att = malloc(C * sizeof(float));
    g->atto = malloc(C * sizeof(float));
    g->fc = malloc(4 * C * sizeof(float));
    g->scores = malloc((size_t)c->max_seq_len * sizeof(float));
    if (!g->kcache || !g->vcache || !g->x || !g->ln || !g->qkv || !g->att || !g->atto || !g->fc || !g->scores) {
        dtrain_gen_destroy(g);
        goto oom;
    }
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
    free(g);
}

void dtrain_gen_reset(struct dtrain_gen *g) { g->pos = 0; }
int dtrain_gen_position(const struct dtrain_gen *g) { return g->pos; }

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

int dtrain_gen_step(struct dtrain_gen *g, int32_t token, float *logits, char *err, size_t errlen)
{
    const struct dtrain_model_config *c = &g->c;
    const int C = c->channels, NH = c->num_heads, hs = C / NH, T = c->max_seq_len, pos = g->pos;
    if (token < 0 || token >= c->vocab_size) {
        snprintf(err, errlen, "token id %ld is outside the model's vocabulary 0..%d", (long)token, c->vocab_size - 1);
        return DTRAIN_ERR_INPUT;
    }
    if (pos >= T) {
        snprintf(err, errlen, "the model knows %d positions (max_seq_len): no room for another token", T);
        return DTRAIN_ERR_INPUT;
    }
    /* x (C) = wte[token] + wpe[pos] */
    const float *wte = g->t[DTRAIN_MODEL_WTE] + (size_t)token * C, *wpe = g->t[DTRAIN_MODEL_WPE] + (size_t)pos * C;
    for (int i = 0; i < C; i++)
        g->x[i] = wte[i] + wpe[i];
    const float scale = 1.0f / sqrtf((float)hs);
    for (int l = 0; l < c->num_layers; l++) {
        size_t lc = (size_t)l * C;
        /* attention: ln1 -> qkv (3C) -> this position's k, v into the cache */
        layernorm(g->ln, g->x, g->t[DTRAIN_MODEL_LN1W] + lc, g->t[DTRAIN_MODEL_LN1B] + lc, C);
        matvec(g->qkv, g->t[DTRAIN_MODEL_QKVW] + lc * 3 * C, g->t[DTRAIN_MODEL_QKVB] + 3 * lc, g->ln, C, 3 * C);
        float *K = g->kcache + (size_t)l * T * C, *V = g->vcache + (size_t)l * T * C;
        memcpy(K + (size_t)pos * C, g->qkv + C, (size_t)C * sizeof(float));
        memcpy(V + (size_t)pos * C, g->qkv + 2 * C, (size_t)C * sizeof(float));
        for (int h = 0; h < NH; h++) {
            /* scores (pos+1) = softmax(q_h . k_h[t] / sqrt(hs)), t <= pos */
            const float *q = g->qkv + h * hs;
            float maxv = -INFINITY, sum = 0.0f;
            for (int t = 0; t <= pos; t++) {
                const float *k = K + (size_t)t * C + h * hs;
                float s = 0.0f;
                for (int i = 0; i < hs; i++)
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
            float inv = 1.0f / sum, *o = g->att + h * hs;
            for (int i = 0; i < hs; i++)
                o[i] = 0.0f;
            for (int t = 0; t <= pos; t++) {
                const float *v = V + (size_t)t * C + h * hs;
                float a = g->scores[t] * inv;
                for (int i = 0; i < hs; i++)
                    o[i] += a * v[i];
            }
        }
        matvec(g->atto, g->t[DTRAIN_MODEL_ATTPROJW] + lc * C, g->t[DTRAIN_MODEL_ATTPROJB] + lc, g->att, C, C);
        for (int i = 0; i < C; i++)
            g->x[i] += g->atto[i];
        /* MLP: ln2 -> fc (4C) -> GELU -> proj (C) */
        layernorm(g->ln, g->x, g->t[DTRAIN_MODEL_LN2W] + lc, g->t[DTRAIN_MODEL_LN2B] + lc, C);
        matvec(g->fc, g->t[DTRAIN_MODEL_FCW] + lc * 4 * C, g->t[DTRAIN_MODEL_FCB] + 4 * lc, g->ln, C, 4 * C);
        for (int i = 0; i < 4 * C; i++)
            g->fc[i] = gelu(g->fc[i]);
        matvec(g->atto, g->t[DTRAIN_MODEL_FCPROJW] + lc * 4 * C, g->t[DTRAIN_MODEL_FCPROJB] + lc, g->fc, 4 * C, C);
        for (int i = 0; i < C; i++)
            g->x[i] += g->atto[i];
    }
    /* head: lnf -> logits (Vp) = wte @ lnf (padding rows are 0) */
    layernorm(g->ln, g->x, g->t[DTRAIN_MODEL_LNFW], g->t[DTRAIN_MODEL_LNFB], C);
    matvec(logits, g->t[DTRAIN_MODEL_WTE], NULL, g->ln, C, c->padded_vocab_size);
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
