/* SPDX-License-Identifier: GPL-2.0-or-later */
/* LoRA adapters of one rank's shard; see dtrain_lora.h. */
#include "dtrain_lora.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "dtrain_rng.h"
#include "model/dtrain_hf.h"
#include "dtrain_pcomm.h"
#include "dtrain_tp.h"

#define LORA_CONFIG "adapter_config.json"
#define LORA_WEIGHTS "adapter_model.safetensors"
#define LORA_CONFIG_MAX (1u << 20)
#define LORA_PATH_MAX 4096
#define LORA_RNG_STREAM 0x4c6f5241u /* "LoRA": A's initialisation, apart from the model's streams */

/* Each target: its family, the linear it adapts, PEFT's module name (the
 * last part of the module path) and the path before it. */
static const struct {
    const char *name, *short_name;
    enum dtrain_model_family family;
    enum dtrain_block_linear linear;
    const char *module; /* printf format of the module path, %d the layer */
} targets[DTRAIN_LORA_NUM_TARGETS] = {
    [DTRAIN_LORA_Q] = {"q_proj", "q", DTRAIN_FAMILY_LLAMA, DTRAIN_LINEAR_QKV, "model.layers.%d.self_attn.q_proj"},
    [DTRAIN_LORA_K] = {"k_proj", "k", DTRAIN_FAMILY_LLAMA, DTRAIN_LINEAR_QKV, "model.layers.%d.self_attn.k_proj"},
    [DTRAIN_LORA_V] = {"v_proj", "v", DTRAIN_FAMILY_LLAMA, DTRAIN_LINEAR_QKV, "model.layers.%d.self_attn.v_proj"},
    [DTRAIN_LORA_O] = {"o_proj", "o", DTRAIN_FAMILY_LLAMA, DTRAIN_LINEAR_ATTPROJ, "model.layers.%d.self_attn.o_proj"},
    [DTRAIN_LORA_GATE] = {"gate_proj", "gate", DTRAIN_FAMILY_LLAMA, DTRAIN_LINEAR_FC, "model.layers.%d.mlp.gate_proj"},
    [DTRAIN_LORA_UP] = {"up_proj", "up", DTRAIN_FAMILY_LLAMA, DTRAIN_LINEAR_FC, "model.layers.%d.mlp.up_proj"},
    [DTRAIN_LORA_DOWN] = {"down_proj", "down", DTRAIN_FAMILY_LLAMA, DTRAIN_LINEAR_FCPROJ, "model.layers.%d.mlp.down_proj"},
    [DTRAIN_LORA_C_ATTN] = {"c_attn", NULL, DTRAIN_FAMILY_GPT2, DTRAIN_LINEAR_QKV, "transformer.h.%d.attn.c_attn"},
    [DTRAIN_LORA_ATTN_C_PROJ] = {"attn.c_proj", NULL, DTRAIN_FAMILY_GPT2, DTRAIN_LINEAR_ATTPROJ,
                                 "transformer.h.%d.attn.c_proj"},
    [DTRAIN_LORA_C_FC] = {"c_fc", NULL, DTRAIN_FAMILY_GPT2, DTRAIN_LINEAR_FC, "transformer.h.%d.mlp.c_fc"},
    [DTRAIN_LORA_MLP_C_PROJ] = {"mlp.c_proj", NULL, DTRAIN_FAMILY_GPT2, DTRAIN_LINEAR_FCPROJ,
                                "transformer.h.%d.mlp.c_proj"},
};

/* Target t's place in the local matmul: output columns [col0, col0+cols)
 * of the matmul's width, and its input width. */
static void target_cols(const struct dtrain_shard *s, enum dtrain_lora_target t, int *col0, int *cols, int *in)
{
    int HS = s->head_size, Q = s->heads * HS, KV = s->kv_heads * HS, C = s->model.channels, F = s->mlp_width;
    *col0 = 0;
    *in = C;
    switch (t) {
    case DTRAIN_LORA_Q: *cols = Q; break;
    case DTRAIN_LORA_K: *col0 = Q; *cols = KV; break;
    case DTRAIN_LORA_V: *col0 = Q + KV; *cols = KV; break;
    case DTRAIN_LORA_C_ATTN: *cols = s->qkv_width; break;
    case DTRAIN_LORA_O: case DTRAIN_LORA_ATTN_C_PROJ: *cols = C; *in = s->attn_width; break;
    case DTRAIN_LORA_GATE: case DTRAIN_LORA_C_FC: *cols = F; break;
    case DTRAIN_LORA_UP: *col0 = F; *cols = F; break;
    default: *cols = C; *in = F; break; /* down, mlp.c_proj */
    }
}

static int target_of(enum dtrain_model_family family, const char *name, unsigned *mask)
{
    if (family == DTRAIN_FAMILY_GPT2 && strcmp(name, "c_proj") == 0) { /* PEFT's suffix match: both */
        *mask |= 1u << DTRAIN_LORA_ATTN_C_PROJ | 1u << DTRAIN_LORA_MLP_C_PROJ;
        return 0;
    }
    for (int t = 0; t < DTRAIN_LORA_NUM_TARGETS; t++)
        if (targets[t].family == family &&
            (strcmp(name, targets[t].name) == 0 || (targets[t].short_name && strcmp(name, targets[t].short_name) == 0))) {
            *mask |= 1u << t;
            return 0;
        }
    return -1;
}

int dtrain_lora_spec_make(const struct dtrain_model_config *m, int rank, double alpha, const char *list,
                          struct dtrain_lora_spec *out, char *err, size_t errlen)
{
    const char *fam = m->family == DTRAIN_FAMILY_LLAMA ? "q,k,v,o,gate,up,down (or q_proj, ...)"
                                                       : "c_attn,c_proj,c_fc (or attn.c_proj, mlp.c_proj)";
    char buf[256], *save = NULL;
    memset(out, 0, sizeof *out);
    out->rank = rank;
    out->alpha = alpha > 0.0 ? alpha : rank;
    if (list[0] == '\0')
        list = m->family == DTRAIN_FAMILY_LLAMA ? "q,v" : "c_attn";
    snprintf(buf, sizeof buf, "%s", list);
    for (char *w = strtok_r(buf, ",", &save); w != NULL; w = strtok_r(NULL, ",", &save))
        if (target_of(m->family, w, &out->targets) != 0) {
            snprintf(err, errlen, "--lora-targets: '%s' is not a linear of a %s model: use %s", w,
                     dtrain_model_family_name(m->family), fam);
            return DTRAIN_ERR_INPUT;
        }
    if (out->targets == 0) {
        snprintf(err, errlen, "--lora-targets names no linear: use %s", fam);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_shard s;
    if (dtrain_shard_plan(m, 1, 1, 0, 0, &s, err, errlen) != DTRAIN_OK)
        return DTRAIN_ERR_INPUT;
    for (int t = 0; t < DTRAIN_LORA_NUM_TARGETS; t++) {
        int col0, cols, in;
        if (!(out->targets & 1u << t))
            continue;
        target_cols(&s, (enum dtrain_lora_target)t, &col0, &cols, &in);
        int side = cols < in ? cols : in;
        if (rank < 1 || rank > side) {
            snprintf(err, errlen, "--lora-rank %d: a rank is 1 to the smaller side of the layer (%s: %d x %d)", rank,
                     targets[t].name, cols, in);
            return DTRAIN_ERR_INPUT;
        }
    }
    return DTRAIN_OK;
}

struct adapter_place {
    enum dtrain_lora_target t;
    int col0, cols, in;
    size_t offset; /* of A in the layer; B follows */
};

/* The adapters of a shard: the same targets in the same order on every
 * shard, each of the shard's widths. */
struct lora_layout {
    int n; /* adapters per layer */
    struct adapter_place ad[DTRAIN_BLOCK_ADAPTERS];
    size_t per_layer, count;
    int widest; /* the largest cols or in */
};

struct dtrain_lora {
    struct dtrain_kernels *k;
    const struct dtrain_shard *sh;
    struct dtrain_shard whole_sh; /* the whole model (T = P = 1): PEFT's files, merging */
    struct dtrain_lora_spec spec;
    struct lora_layout lay, whole_lay;
    int n;                        /* lay.n */
    struct adapter_place *ad;     /* lay.ad */
    size_t per_layer, count;      /* lay's */
    float *params, *grads, *h, *g, *u;
    float *host;  /* count floats: staging of loads and saves */
    float *whole; /* whole_lay.count floats: the whole model's adapters (host) */
    struct dtrain_adamw *adamw;
};

static size_t a_size(const struct dtrain_lora *l, const struct adapter_place *p) { return (size_t)l->spec.rank * p->in; }
static size_t b_size(const struct dtrain_lora *l, const struct adapter_place *p) { return (size_t)p->cols * l->spec.rank; }

static void layout_of(const struct dtrain_shard *s, const struct dtrain_lora_spec *spec, struct lora_layout *lay)
{
    memset(lay, 0, sizeof *lay);
    lay->widest = 1;
    for (int t = 0; t < DTRAIN_LORA_NUM_TARGETS; t++) {
        if (!(spec->targets & 1u << t))
            continue;
        struct adapter_place *p = &lay->ad[lay->n++];
        p->t = (enum dtrain_lora_target)t;
        target_cols(s, p->t, &p->col0, &p->cols, &p->in);
        p->offset = lay->per_layer;
        lay->per_layer += (size_t)spec->rank * ((size_t)p->in + (size_t)p->cols);
        lay->widest = p->cols > lay->widest ? p->cols : lay->widest;
        lay->widest = p->in > lay->widest ? p->in : lay->widest;
    }
    lay->count = lay->per_layer * (size_t)s->layers;
}

/* Tensor parallel: a row-parallel linear's A holds input columns, a
 * column-parallel one's B output rows (Megatron's LoRA); the other matrix
 * is whole on every rank. */
static int row_parallel(enum dtrain_lora_target t)
{
    enum dtrain_block_linear lin = targets[t].linear;
    return lin == DTRAIN_LINEAR_ATTPROJ || lin == DTRAIN_LINEAR_FCPROJ;
}

/* The whole model's row of local row lr of a column-parallel B on TP rank
 * tp (GPT-2's c_attn: q, k and v rows of the rank's heads). */
static size_t whole_row(const struct dtrain_shard *s, enum dtrain_lora_target t, int lr, int cols)
{
    if (t == DTRAIN_LORA_C_ATTN) {
        int seg = cols / 3;
        return (size_t)(lr / seg) * s->model.channels + (size_t)s->tp_rank * seg + (size_t)(lr % seg);
    }
    return (size_t)s->tp_rank * cols + (size_t)lr;
}

/* Copy shard s's adapters (layout lay, vector local) to or from the whole
 * model's (wl, whole). */
static void slice(const struct dtrain_shard *s, const struct lora_layout *lay, const struct lora_layout *wl, int r,
                  float *local, float *whole, int to_local)
{
    for (int i = 0; i < s->layers; i++)
        for (int j = 0; j < lay->n; j++) {
            const struct adapter_place *p = &lay->ad[j], *w = &wl->ad[j];
            float *A = local + (size_t)i * lay->per_layer + p->offset, *B = A + (size_t)r * p->in;
            float *WA = whole + (size_t)dtrain_shard_global_layer(s, i) * wl->per_layer + w->offset;
            float *WB = WA + (size_t)r * w->in;
            size_t c0 = row_parallel(p->t) ? (size_t)s->tp_rank * p->in : 0;
            for (int q = 0; q < r; q++) {
                float *a = A + (size_t)q * p->in, *wa = WA + (size_t)q * w->in + c0;
                memcpy(to_local ? a : wa, to_local ? wa : a, (size_t)p->in * sizeof(float));
            }
            for (int o = 0; o < p->cols; o++) {
                float *b = B + (size_t)o * r;
                float *wb = WB + (row_parallel(p->t) ? (size_t)o : whole_row(s, p->t, o, p->cols)) * r;
                memcpy(to_local ? b : wb, to_local ? wb : b, (size_t)r * sizeof(float));
            }
        }
}

size_t dtrain_lora_whole_count(const struct dtrain_model_config *m, const struct dtrain_lora_spec *spec)
{
    struct dtrain_shard s;
    struct lora_layout lay;
    char err[256];
    if (spec->rank < 1 || dtrain_shard_plan(m, 1, 1, 0, 0, &s, err, sizeof err) != DTRAIN_OK)
        return 0;
    layout_of(&s, spec, &lay);
    return lay.count;
}

void dtrain_lora_target_names(const struct dtrain_lora_spec *spec, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int t = 0; t < DTRAIN_LORA_NUM_TARGETS && used < len; t++)
        if (spec->targets & 1u << t)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used > 0 ? "," : "", targets[t].name);
}

struct run_merge {
    dtrain_shard_run_fn fn;
    void *ctx;
    struct dtrain_shard_run cur; /* count 0: none yet */
};

static void run_add(struct run_merge *m, size_t local, size_t whole, size_t count, int own)
{
    struct dtrain_shard_run *c = &m->cur;
    if (c->count > 0 && c->local + c->count == local && c->whole + c->count == whole && c->in_norm == own) {
        c->count += count;
        return;
    }
    if (c->count > 0)
        m->fn(m->ctx, c);
    *c = (struct dtrain_shard_run){local, whole, count, own};
}

void dtrain_lora_for_each_run(const struct dtrain_lora *l, dtrain_shard_run_fn fn, void *ctx)
{
    const struct dtrain_shard *s = l->sh;
    const struct lora_layout *lay = &l->lay, *wl = &l->whole_lay;
    struct run_merge m = {fn, ctx, {0, 0, 0, 0}};
    size_t r = (size_t)l->spec.rank;
    for (int i = 0; i < s->layers; i++)
        for (int j = 0; j < lay->n; j++) {
            const struct adapter_place *p = &lay->ad[j], *w = &wl->ad[j];
            size_t A = (size_t)i * lay->per_layer + p->offset, B = A + r * p->in;
            size_t WA = (size_t)dtrain_shard_global_layer(s, i) * wl->per_layer + w->offset, WB = WA + r * w->in;
            int rp = row_parallel(p->t), lead = s->tp_rank == 0;
            size_t c0 = rp ? (size_t)s->tp_rank * p->in : 0;
            for (size_t q = 0; q < r; q++)
                run_add(&m, A + q * p->in, WA + q * w->in + c0, (size_t)p->in, rp || lead);
            for (int o = 0; o < p->cols; o++)
                run_add(&m, B + (size_t)o * r, WB + (rp ? (size_t)o : whole_row(s, p->t, o, p->cols)) * r, r,
                        !rp || lead);
        }
    if (m.cur.count > 0)
        fn(ctx, &m.cur);
}

int dtrain_lora_create(struct dtrain_kernels *k, const struct dtrain_shard *shard, const struct dtrain_lora_spec *spec,
                       int N, uint64_t seed, struct dtrain_lora **out, char *err, size_t errlen)
{
    struct dtrain_lora *l = calloc(1, sizeof *l);
    *out = NULL;
    if (l == NULL)
        goto oom;
    l->k = k;
    l->sh = shard;
    l->spec = *spec;
    if (dtrain_shard_plan(&shard->model, 1, 1, 0, 0, &l->whole_sh, err, errlen) != DTRAIN_OK) {
        dtrain_lora_destroy(l);
        return DTRAIN_ERR_INPUT;
    }
    layout_of(shard, spec, &l->lay);
    layout_of(&l->whole_sh, spec, &l->whole_lay);
    l->n = l->lay.n;
    l->ad = l->lay.ad;
    l->per_layer = l->lay.per_layer;
    l->count = l->lay.count;
    int widest = l->lay.widest;
    size_t bytes = l->count * sizeof(float), r = (size_t)N * spec->rank * sizeof(float);
    l->params = dtrain_k_alloc(k, bytes);
    l->grads = dtrain_k_alloc(k, bytes);
    l->h = dtrain_k_alloc(k, r);
    l->g = dtrain_k_alloc(k, r);
    l->u = dtrain_k_alloc(k, (size_t)N * widest * sizeof(float));
    l->host = malloc(bytes + sizeof(float));
    l->whole = malloc((l->whole_lay.count + 1) * sizeof(float));
    if (l->params == NULL || l->grads == NULL || l->h == NULL || l->g == NULL || l->u == NULL || l->host == NULL ||
        l->whole == NULL)
        goto oom;
    int rc = dtrain_adamw_create(k, l->count, &l->adamw, err, errlen);
    if (rc != DTRAIN_OK) {
        dtrain_lora_destroy(l);
        return rc;
    }
    /* PEFT's default: A kaiming_uniform(a=sqrt(5)), bound 1/sqrt(in); B 0;
     * drawn for the whole model, so that every layout starts the same */
    const struct lora_layout *wl = &l->whole_lay;
    memset(l->whole, 0, wl->count * sizeof(float));
    for (int i = 0; i < l->whole_sh.layers; i++)
        for (int j = 0; j < wl->n; j++) {
            const struct adapter_place *p = &wl->ad[j];
            float *A = l->whole + (size_t)i * wl->per_layer + p->offset;
            double bound = 1.0 / sqrt((double)p->in);
            for (size_t e = 0; e < a_size(l, p); e++)
                A[e] = (float)((2.0 * dtrain_rng_uniform(seed, LORA_RNG_STREAM + (uint64_t)(i * 16 + (int)p->t), e) - 1.0) *
                               bound);
        }
    slice(shard, &l->lay, wl, spec->rank, l->host, l->whole, 1);
    dtrain_k_upload(k, l->params, l->host, bytes);
    dtrain_lora_zero_grad(l);
    *out = l;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for LoRA adapters of rank %d", spec->rank);
    dtrain_lora_destroy(l);
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_lora_destroy(struct dtrain_lora *l)
{
    if (l == NULL)
        return;
    dtrain_k_free(l->k, l->params);
    dtrain_k_free(l->k, l->grads);
    dtrain_k_free(l->k, l->h);
    dtrain_k_free(l->k, l->g);
    dtrain_k_free(l->k, l->u);
    dtrain_adamw_destroy(l->adamw);
    free(l->host);
    free(l->whole);
    free(l);
}

size_t dtrain_lora_count(const struct dtrain_lora *l) { return l->count; }
float *dtrain_lora_params(struct dtrain_lora *l) { return l->params; }
float *dtrain_lora_grads(struct dtrain_lora *l) { return l->grads; }
struct dtrain_adamw *dtrain_lora_adamw(struct dtrain_lora *l) { return l->adamw; }

void dtrain_lora_block(struct dtrain_lora *l, int i, struct dtrain_block_lora *out)
{
    memset(out, 0, sizeof *out);
    out->rank = l->spec.rank;
    out->scaling = (float)(l->spec.alpha / l->spec.rank);
    out->n = l->n;
    out->h = l->h;
    out->g = l->g;
    out->u = l->u;
    for (int j = 0; j < l->n; j++) {
        const struct adapter_place *p = &l->ad[j];
        size_t o = (size_t)i * l->per_layer + p->offset, ob = o + a_size(l, p);
        out->ad[j] = (struct dtrain_block_adapter){targets[p->t].linear, p->col0, p->cols, p->in,
                                                   l->params + o, l->params + ob, l->grads + o, l->grads + ob};
    }
}

void dtrain_lora_zero_grad(struct dtrain_lora *l) { dtrain_k_zero(l->k, l->grads, l->count * sizeof(float)); }

double dtrain_lora_sumsq(struct dtrain_lora *l, int dp_rank)
{
    double sum = 0.0;
    if (dp_rank != 0) /* after the reduction every DP rank holds the same sums */
        return 0.0;
    for (int i = 0; i < l->sh->layers; i++)
        for (int j = 0; j < l->n; j++) {
            const struct adapter_place *p = &l->ad[j];
            float *dA = l->grads + (size_t)i * l->per_layer + p->offset, *dB = dA + a_size(l, p);
            int a_split = row_parallel(p->t); /* else B is split */
            if (a_split || l->sh->tp_rank == 0)
                sum += dtrain_k_sumsq(l->k, dA, a_size(l, p));
            if (!a_split || l->sh->tp_rank == 0)
                sum += dtrain_k_sumsq(l->k, dB, b_size(l, p));
        }
    return sum;
}

int dtrain_lora_reduce(struct dtrain_lora *l, struct dtrain_tp *tp, struct dtrain_pcomm *dp, char *err,
                       size_t errlen)
{
    int rc = DTRAIN_OK;
    for (int i = 0; i < l->sh->layers && l->sh->tp > 1 && rc == DTRAIN_OK; i++)
        for (int j = 0; j < l->n && rc == DTRAIN_OK; j++) {
            const struct adapter_place *p = &l->ad[j];
            float *dA = l->grads + (size_t)i * l->per_layer + p->offset, *dB = dA + a_size(l, p);
            rc = row_parallel(p->t) ? dtrain_tp_allreduce(tp, dB, b_size(l, p), err, errlen)
                                    : dtrain_tp_allreduce(tp, dA, a_size(l, p), err, errlen);
        }
    if (rc == DTRAIN_OK && dp != NULL && dtrain_comm_size(dp->c) > 1)
        rc = dtrain_pcomm_allreduce(dp, l->grads, l->count, "LoRA: data-parallel gradient all-reduce", err, errlen);
    return rc;
}

int dtrain_lora_gather(struct dtrain_lora *l, dtrain_comm *world, int tp, int pp, int dp, char *err, size_t errlen)
{
    dtrain_k_download(l->k, l->host, l->params, l->count * sizeof(float));
    if (world == NULL || dtrain_comm_size(world) == 1) {
        slice(l->sh, &l->lay, &l->whole_lay, l->spec.rank, l->host, l->whole, 0);
        return DTRAIN_OK;
    }
    /* every rank's vector, padded to the longest (the shards of every
     * (tp, pp) planned here: the same on every rank) */
    struct dtrain_shard *plans = calloc((size_t)tp * pp, sizeof *plans);
    size_t most = 0;
    int rc = plans == NULL ? DTRAIN_ERR_SYSTEM : DTRAIN_OK;
    for (int q = 0; q < tp * pp && rc == DTRAIN_OK; q++) {
        struct lora_layout lay;
        rc = dtrain_shard_plan_v(&l->sh->model, tp, pp, l->sh->virtual_stages, q % tp, q / tp, &plans[q], err, errlen);
        layout_of(&plans[q], &l->spec, &lay);
        most = lay.count > most ? lay.count : most;
    }
    int n = dtrain_comm_size(world);
    float *mine = rc == DTRAIN_OK ? calloc(most + 1, sizeof(float)) : NULL;
    float *all = mine != NULL ? malloc(((size_t)n * most + 1) * sizeof(float)) : NULL;
    if (all == NULL) {
        if (rc == DTRAIN_OK || rc == DTRAIN_ERR_SYSTEM)
            snprintf(err, errlen, "LoRA: out of memory for the gather of %d ranks' adapters", n);
        rc = rc == DTRAIN_OK ? DTRAIN_ERR_SYSTEM : rc;
    } else {
        memcpy(mine, l->host, l->count * sizeof(float));
        rc = dtrain_pcomm_status(world, dtrain_comm_all_gather_bytes(world, mine, all, most * sizeof(float)),
                                 "LoRA: adapter gather", err, errlen);
    }
    for (int r = 0; r < n && rc == DTRAIN_OK; r++) {
        int t = r % tp, d = (r / tp) % dp, s = r / (tp * dp); /* rank = tp + T*(dp + D*pp) */
        struct lora_layout lay;
        if (d != 0) /* DP replicas hold the same adapters */
            continue;
        layout_of(&plans[s * tp + t], &l->spec, &lay);
        slice(&plans[s * tp + t], &lay, &l->whole_lay, l->spec.rank, all + (size_t)r * most, l->whole, 0);
    }
    free(plans);
    free(mine);
    free(all);
    return rc;
}

void dtrain_lora_update(struct dtrain_lora *l, const struct dtrain_optim_config *c, long step, double lr,
                        float grad_scale)
{
    dtrain_adamw_update(l->adamw, l->params, l->grads, c, step, lr, grad_scale);
}

/* ------------------------------------------------------------ PEFT's files */

/* PEFT's key of global layer `layer`'s adapter p. */
static void key_of(int layer, const struct adapter_place *p, char ab, char *key, size_t len)
{
    char module[128];
    snprintf(module, sizeof module, targets[p->t].module, layer);
    snprintf(key, len, "base_model.model.%s.lora_%c.weight", module, ab);
}

/* The target_modules of adapter_config.json as a mask (PEFT's names, or a
 * list); -1 for a value that is not one. */
static int config_targets(const struct dtrain_lora *l, json_t *v, unsigned *mask)
{
    size_t i;
    json_t *e;
    *mask = 0;
    if (json_is_string(v))
        return target_of(l->sh->model.family, json_string_value(v), mask);
    if (!json_is_array(v))
        return -1;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || target_of(l->sh->model.family, json_string_value(e), mask) != 0)
            return -1;
    }
    return 0;
}

/* No variant of PEFT's that changes the arithmetic: each key absent, null,
 * false or empty. */
static int plain_lora(json_t *root)
{
    static const char *const keys[] = {"use_dora", "use_rslora", "rank_pattern", "alpha_pattern", "lora_bias",
                                       "layers_to_transform"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(root, keys[i]);
        if (v != NULL && !json_is_null(v) && !json_is_false(v) && !(json_is_object(v) && json_object_size(v) == 0))
            return 0;
    }
    return 1;
}

static int check_config(const struct dtrain_lora *l, const char *path, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    json_error_t jerr;
    if (dtrain_read_regular(path, "LoRA adapter config", LORA_CONFIG_MAX, &text, &len, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    int rc = DTRAIN_ERR_INPUT;
    unsigned mask = 0;
    json_t *r = root ? json_object_get(root, "r") : NULL, *a = root ? json_object_get(root, "lora_alpha") : NULL;
    json_t *peft = root ? json_object_get(root, "peft_type") : NULL;
    if (root == NULL || !json_is_object(root))
        snprintf(err, errlen, "%s: not a JSON object (%s)", path, root == NULL ? jerr.text : "wrong type");
    else if (peft != NULL && !(json_is_string(peft) && strcmp(json_string_value(peft), "LORA") == 0))
        snprintf(err, errlen, "%s: peft_type is not LORA: give a LoRA adapter folder", path);
    else if (!json_is_integer(r) || json_integer_value(r) != l->spec.rank)
        snprintf(err, errlen, "%s: rank r is not this run's %d: pass --lora-rank as the adapter's", path, l->spec.rank);
    else if (!json_is_number(a) || fabs(json_number_value(a) - l->spec.alpha) > 1e-9 * l->spec.alpha)
        snprintf(err, errlen, "%s: lora_alpha is not this run's %g: pass --lora-alpha as the adapter's", path,
                 l->spec.alpha);
    else if (!plain_lora(root))
        snprintf(err, errlen, "%s: a LoRA variant dtrain does not train (use_dora, use_rslora, rank_pattern, "
                 "alpha_pattern, lora_bias or layers_to_transform set): give a plain LoRA adapter", path);
    else if (config_targets(l, json_object_get(root, "target_modules"), &mask) != 0 || mask != l->spec.targets)
        snprintf(err, errlen, "%s: target_modules are not this run's --lora-targets for a %s model: pass the "
                 "adapter's", path, dtrain_model_family_name(l->sh->model.family));
    else
        rc = DTRAIN_OK;
    json_decref(root);
    return rc;
}

int dtrain_lora_load_peft(struct dtrain_lora *l, const char *dir, char *err, size_t errlen)
{
    char path[LORA_PATH_MAX], key[256];
    int rc;
    if (dtrain_snprintf(path, sizeof path, "%s/%s", dir, LORA_CONFIG) != 0) {
        snprintf(err, errlen, "%.80s...: the path is too long", dir);
        return DTRAIN_ERR_INPUT;
    }
    if ((rc = check_config(l, path, err, errlen)) != DTRAIN_OK)
        return rc;
    snprintf(path, sizeof path, "%s/%s", dir, LORA_WEIGHTS);
    struct dtrain_st_file *f;
    if ((rc = dtrain_st_open(path, &f, err, errlen)) != DTRAIN_OK)
        return rc;
    size_t want = 0;
    const struct lora_layout *wl = &l->whole_lay;
    for (int i = 0; i < l->whole_sh.layers && rc == DTRAIN_OK; i++)
        for (int j = 0; j < wl->n && rc == DTRAIN_OK; j++) {
            const struct adapter_place *p = &wl->ad[j];
            float *A = l->whole + (size_t)i * wl->per_layer + p->offset, *B = A + a_size(l, p);
            int64_t sa[2] = {l->spec.rank, p->in}, sb[2] = {p->cols, l->spec.rank};
            key_of(i, p, 'A', key, sizeof key);
            rc = dtrain_st_read_f32(f, key, 2, sa, A, err, errlen);
            key_of(i, p, 'B', key, sizeof key);
            if (rc == DTRAIN_OK)
                rc = dtrain_st_read_f32(f, key, 2, sb, B, err, errlen);
            want += 2;
        }
    if (rc == DTRAIN_OK && dtrain_st_count(f) != want) {
        snprintf(err, errlen, "%s: %zu tensors, not the %zu adapters of this model and --lora-targets: give the "
                 "adapter of this base model", path, dtrain_st_count(f), want);
        rc = DTRAIN_ERR_INPUT;
    }
    dtrain_st_close(f);
    if (rc == DTRAIN_OK) {
        slice(l->sh, &l->lay, wl, l->spec.rank, l->host, l->whole, 1);
        dtrain_k_upload(l->k, l->params, l->host, l->count * sizeof(float));
    }
    return rc;
}

static void write_config(const struct dtrain_lora *l, FILE *m, const char *base_model)
{
    int gpt2 = l->sh->model.family == DTRAIN_FAMILY_GPT2;
    json_t *root = json_object(), *tm = json_array();
    for (int j = 0; j < l->n; j++)
        json_array_append_new(tm, json_string(targets[l->ad[j].t].name));
    json_object_set_new(root, "peft_type", json_string("LORA"));
    json_object_set_new(root, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(root, "base_model_name_or_path", base_model ? json_string(base_model) : json_null());
    json_object_set_new(root, "r", json_integer(l->spec.rank));
    json_object_set_new(root, "lora_alpha", l->spec.alpha == floor(l->spec.alpha) ? json_integer((json_int_t)l->spec.alpha)
                                                                                     : json_real(l->spec.alpha));
    json_object_set_new(root, "lora_dropout", json_real(0.0));
    json_object_set_new(root, "target_modules", tm);
    json_object_set_new(root, "bias", json_string("none"));
    json_object_set_new(root, "fan_in_fan_out", json_boolean(gpt2));
    json_object_set_new(root, "inference_mode", json_true());
    json_object_set_new(root, "use_rslora", json_false());
    json_object_set_new(root, "init_lora_weights", json_true());
    json_dumpf(root, m, JSON_INDENT(2) | JSON_SORT_KEYS);
    fputc('\n', m);
    json_decref(root);
}

int dtrain_lora_save_peft(struct dtrain_lora *l, const char *dir, const char *base_model, char *err, size_t errlen)
{
    char path[LORA_PATH_MAX];
    int rc = DTRAIN_OK;
    const struct lora_layout *wl = &l->whole_lay;
    size_t n = 2 * (size_t)wl->n * l->whole_sh.layers;
    struct dtrain_hf_out_tensor *t = calloc(n, sizeof *t);
    char (*keys)[256] = calloc(n, sizeof *keys);
    if (t == NULL || keys == NULL) {
        free(t);
        free(keys);
        snprintf(err, errlen, "%s: out of memory", dir);
        return DTRAIN_ERR_SYSTEM;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make the LoRA folder %s: %s", dir, strerror(errno));
        rc = DTRAIN_ERR_SYSTEM;
    }
    size_t e = 0;
    for (int i = 0; i < l->whole_sh.layers; i++)
        for (int j = 0; j < wl->n; j++) {
            const struct adapter_place *p = &wl->ad[j];
            const float *A = l->whole + (size_t)i * wl->per_layer + p->offset;
            key_of(i, p, 'A', keys[e], sizeof keys[e]);
            t[e] = (struct dtrain_hf_out_tensor){keys[e], DTRAIN_HF_F32, 2, {l->spec.rank, p->in}, A};
            e++;
            key_of(i, p, 'B', keys[e], sizeof keys[e]);
            t[e] = (struct dtrain_hf_out_tensor){keys[e], DTRAIN_HF_F32, 2, {p->cols, l->spec.rank}, A + a_size(l, p)};
            e++;
        }
    static const char *const meta[] = {"format", "pt", NULL};
    if (rc == DTRAIN_OK && dtrain_snprintf(path, sizeof path, "%s/%s", dir, LORA_WEIGHTS) != 0) {
        snprintf(err, errlen, "%.80s...: the path is too long", dir);
        rc = DTRAIN_ERR_INPUT;
    }
    if (rc == DTRAIN_OK)
        rc = dtrain_st_write(path, t, n, meta, err, errlen);
    free(t);
    free(keys);
    if (rc != DTRAIN_OK)
        return rc;
    snprintf(path, sizeof path, "%s/%s", dir, LORA_CONFIG);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (m == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return DTRAIN_ERR_SYSTEM;
    }
    write_config(l, m, base_model);
    fclose(m);
    struct dtrain_out_file o;
    if ((rc = dtrain_out_open(&o, path, err, errlen)) == DTRAIN_OK) {
        dtrain_out_write(&o, text, len);
        rc = dtrain_out_commit(&o, err, errlen);
    }
    free(text);
    return rc;
}

void dtrain_lora_merge(struct dtrain_lora *l, float *whole)
{
    const struct dtrain_shard *s = &l->whole_sh;
    const struct lora_layout *wl = &l->whole_lay;
    static const enum dtrain_model_tensor tensor_of[] = {
        [DTRAIN_LINEAR_QKV] = DTRAIN_MODEL_QKVW, [DTRAIN_LINEAR_ATTPROJ] = DTRAIN_MODEL_ATTPROJW,
        [DTRAIN_LINEAR_FC] = DTRAIN_MODEL_FCW, [DTRAIN_LINEAR_FCPROJ] = DTRAIN_MODEL_FCPROJW};
    float scaling = (float)(l->spec.alpha / l->spec.rank);
    int r = l->spec.rank;
    for (int i = 0; i < s->layers; i++)
        for (int j = 0; j < wl->n; j++) {
            const struct adapter_place *p = &wl->ad[j];
            enum dtrain_model_tensor tt = tensor_of[targets[p->t].linear];
            size_t width = s->size[tt] / (size_t)s->layers; /* one layer's rows x in */
            float *W = whole + s->offset[tt] + (size_t)i * width + (size_t)p->col0 * p->in;
            const float *A = l->whole + (size_t)i * wl->per_layer + p->offset, *B = A + a_size(l, p);
            for (int o = 0; o < p->cols; o++)
                for (int c = 0; c < p->in; c++) {
                    float acc = 0.0f;
                    for (int q = 0; q < r; q++)
                        acc += B[(size_t)o * r + q] * A[(size_t)q * p->in + c];
                    W[(size_t)o * p->in + c] += scaling * acc;
                }
        }
}
