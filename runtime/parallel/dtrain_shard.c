/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One rank's part of the model: sizes, views, slices; see dtrain_shard.h. */
#include "dtrain_shard.h"

#include <stdio.h>
#include <string.h>

/* The 12 block tensors, LN1W..FCPROJB, are consecutive in the enum. */
#define BLOCK_TENSORS 12
#define FIRST_BLOCK_TENSOR DTRAIN_MODEL_LN1W

/* Local elements per layer of block tensor i (0..11); a family without
 * biases has none. */
static void local_per_layer(const struct dtrain_shard *s, size_t out[BLOCK_TENSORS])
{
    size_t C = (size_t)s->model.channels, CL = (size_t)s->attn_width, FL = (size_t)s->mlp_width;
    size_t QKV = (size_t)s->qkv_width, FCR = (size_t)s->fc_rows;
    size_t b = s->model.family == DTRAIN_FAMILY_GPT2 ? 1 : 0;
    const size_t v[BLOCK_TENSORS] = {C, b * C, QKV * C, b * QKV, C * CL, b * C,
                                     C, b * C, FCR * C, b * FCR, C * FL, b * C};
    memcpy(out, v, sizeof v);
}

static int local_layers(const struct dtrain_shard *s)
{
    return s->layers;
}

int dtrain_shard_global_layer(const struct dtrain_shard *s, int i)
{
    int per = s->layer_end - s->layer_begin; /* layers of a chunk */
    return s->layer_begin + (i / per) * s->pp * per + i % per;
}

int dtrain_shard_plan(const struct dtrain_model_config *model, int tp, int pp, int tp_rank,
                      int pp_rank, struct dtrain_shard *out, char *err, size_t errlen)
{
    return dtrain_shard_plan_v(model, tp, pp, 1, tp_rank, pp_rank, out, err, errlen);
}

int dtrain_shard_plan_v(const struct dtrain_model_config *model, int tp, int pp, int vs, int tp_rank,
                        int pp_rank, struct dtrain_shard *out, char *err, size_t errlen)
{
    int rc = dtrain_model_config_check(model, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (tp < 1 || pp < 1 || tp_rank < 0 || tp_rank >= tp || pp_rank < 0 || pp_rank >= pp) {
        snprintf(err, errlen, "rank (tp %d, pp %d) is outside a layout of T=%d P=%d",
                 tp_rank, pp_rank, tp, pp);
        return DTRAIN_ERR_INPUT;
    }
    int C = model->channels, NH = model->num_heads, L = model->num_layers;
    int Vp = model->padded_vocab_size, KVH = dtrain_model_kv_heads(model), F = dtrain_model_mlp_width(model);
    if (NH % tp != 0) {
        snprintf(err, errlen, "tensor parallel T=%d does not divide the %d attention heads: "
                 "choose T among the divisors of num_heads", tp, NH);
        return DTRAIN_ERR_INPUT;
    }
    /* Megatron-LM's rule: each rank holds whole key/value heads with their
     * query groups, so T must divide KVH (no replication of a kv head) */
    if (KVH % tp != 0) {
        snprintf(err, errlen, "tensor parallel T=%d does not divide the %d key/value heads: each rank holds "
                 "whole key/value heads with their query heads (as Megatron-LM); choose T among the divisors "
                 "of num_key_value_heads", tp, KVH);
        return DTRAIN_ERR_INPUT;
    }
    if (F % tp != 0) {
        snprintf(err, errlen, "tensor parallel T=%d does not divide the MLP width %d: "
                 "choose T among its divisors", tp, F);
        return DTRAIN_ERR_INPUT;
    }
    if (Vp % tp != 0) {
        snprintf(err, errlen, "tensor parallel T=%d does not divide the padded vocabulary %d: "
                 "set padded_vocab_size to a multiple of %d", tp, Vp, tp);
        return DTRAIN_ERR_INPUT;
    }
    if (L < pp) {
        snprintf(err, errlen, "pipeline parallel P=%d needs at least one layer per stage; the "
                 "model has %d: use P <= %d", pp, L, L);
        return DTRAIN_ERR_INPUT;
    }
    if (vs < 1 || (vs > 1 && (pp < 2 || L % (pp * vs) != 0))) {
        snprintf(err, errlen, "--virtual-stages %d with P=%d and %d layers: V must be at least 1, and V > 1 "
                 "needs P >= 2 and P*V dividing the layers (each stage's %d layers into V chunks of equal size)",
                 vs, pp, L, L / pp);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_shard s;
    memset(&s, 0, sizeof s);
    s.model = *model;
    s.tp = tp;
    s.pp = pp;
    s.tp_rank = tp_rank;
    s.pp_rank = pp_rank;
    s.virtual_stages = vs;
    s.layer_begin = (int)((long)L * pp_rank / ((long)pp * vs));
    s.layer_end = (int)((long)L * (pp_rank + 1) / ((long)pp * vs));
    s.layers = vs * (s.layer_end - s.layer_begin);
    s.has_embedding = pp_rank == 0;
    s.has_head = pp_rank == pp - 1;
    s.heads = NH / tp;
    s.kv_heads = KVH / tp;
    s.head_size = C / NH;
    s.attn_width = s.heads * s.head_size;
    s.qkv_width = (s.heads + 2 * s.kv_heads) * s.head_size;
    s.mlp_width = F / tp;
    s.fc_rows = model->family == DTRAIN_FAMILY_GPT2 ? s.mlp_width : 2 * s.mlp_width;
    s.vocab_rows = Vp / tp;
    s.vocab_begin = tp_rank * s.vocab_rows;

    size_t per[BLOCK_TENSORS];
    local_per_layer(&s, per);
    size_t nl = (size_t)local_layers(&s);
    size_t whole[DTRAIN_MODEL_NUM_TENSORS];
    dtrain_model_tensor_sizes(model, whole);
    int tied = !model->untied_head;
    s.size[DTRAIN_MODEL_WTE] = (s.has_embedding || (s.has_head && tied)) ? (size_t)s.vocab_rows * C : 0;
    s.size[DTRAIN_MODEL_WPE] = s.has_embedding ? whole[DTRAIN_MODEL_WPE] : 0;
    for (int i = 0; i < BLOCK_TENSORS; i++)
        s.size[FIRST_BLOCK_TENSOR + i] = nl * per[i];
    s.size[DTRAIN_MODEL_LNFW] = s.has_head ? whole[DTRAIN_MODEL_LNFW] : 0;
    s.size[DTRAIN_MODEL_LNFB] = s.has_head ? whole[DTRAIN_MODEL_LNFB] : 0;
    s.size[DTRAIN_MODEL_LMHEAD] = (s.has_head && !tied) ? (size_t)s.vocab_rows * C : 0;
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        s.offset[t] = s.count;
        s.count += s.size[t];
    }
    *out = s;
    return DTRAIN_OK;
}

size_t dtrain_shard_layer_size(const struct dtrain_shard *s)
{
    size_t per[BLOCK_TENSORS], n = 0;
    local_per_layer(s, per);
    for (int i = 0; i < BLOCK_TENSORS; i++)
        n += per[i];
    return n;
}

void dtrain_shard_block_shape(const struct dtrain_shard *s, int B, int T,
                              struct dtrain_block_shape *shape)
{
    shape->B = B;
    shape->T = T;
    shape->C = s->model.channels;
    shape->NH = s->heads;
    shape->HS = s->head_size;
    shape->KVH = s->kv_heads;
    shape->F = s->mlp_width;
    shape->add_row_bias = s->tp_rank == 0;
    shape->family = s->model.family;
    shape->norm_eps = s->model.norm_eps;
    shape->rope_inv_freq = NULL; /* the stage's */
}

/* Offsets of local layer i's 12 block tensors in the local vector. */
static void layer_offsets(const struct dtrain_shard *s, int i, size_t out[BLOCK_TENSORS])
{
    size_t per[BLOCK_TENSORS];
    local_per_layer(s, per);
    for (int j = 0; j < BLOCK_TENSORS; j++)
        out[j] = s->offset[FIRST_BLOCK_TENSOR + j] + (size_t)i * per[j];
}

void dtrain_shard_block_weights(const struct dtrain_shard *s, const float *params, int i,
                                struct dtrain_block_weights *w)
{
    size_t o[BLOCK_TENSORS];
    layer_offsets(s, i, o);
    const float *p = params;
    *w = (struct dtrain_block_weights){p + o[0], p + o[1], p + o[2], p + o[3], p + o[4], p + o[5],
                                       p + o[6], p + o[7], p + o[8], p + o[9], p + o[10], p + o[11], NULL, NULL};
}

void dtrain_shard_block_grads(const struct dtrain_shard *s, float *grads, int i,
                              struct dtrain_block_grads *g)
{
    size_t o[BLOCK_TENSORS];
    layer_offsets(s, i, o);
    float *p = grads;
    *g = (struct dtrain_block_grads){p + o[0], p + o[1], p + o[2], p + o[3], p + o[4], p + o[5],
                                     p + o[6], p + o[7], p + o[8], p + o[9], p + o[10], p + o[11]};
}

float *dtrain_shard_tensor(const struct dtrain_shard *s, float *vec, enum dtrain_model_tensor t)
{
    if (t < 0 || t >= DTRAIN_MODEL_NUM_TENSORS || s->size[t] == 0)
        return NULL;
    return vec + s->offset[t];
}

/* ------------------------------------------------------------ local <-> whole */

/* rows x cols elements: local rows are contiguous, whole rows `stride` apart. */
struct block_copy {
    size_t local, whole, rows, cols, stride;
};

typedef void (*block_fn)(void *ctx, const struct block_copy *b);

/* The rows of one layer's column-parallel tensor held here, as sections of
 * `section` whole rows each of which the rank holds `local` rows from
 * tp_rank*local on: QKV's q, k and v (the local heads' and their kv
 * heads'), Llama's gate and up. */
struct sections {
    int n;
    size_t whole_start[3], local_rows[3];
};

static struct sections qkv_sections(const struct dtrain_shard *s)
{
    size_t HS = (size_t)s->head_size, NH = (size_t)s->model.num_heads;
    size_t KVH = (size_t)dtrain_model_kv_heads(&s->model), t = (size_t)s->tp_rank;
    size_t q = (size_t)s->heads * HS, kv = (size_t)s->kv_heads * HS;
    return (struct sections){3, {t * q, NH * HS + t * kv, (NH + KVH) * HS + t * kv}, {q, kv, kv}};
}

static struct sections fc_sections(const struct dtrain_shard *s)
{
    size_t FL = (size_t)s->mlp_width, F = (size_t)dtrain_model_mlp_width(&s->model), t = (size_t)s->tp_rank;
    if (s->model.family == DTRAIN_FAMILY_GPT2)
        return (struct sections){1, {t * FL, 0, 0}, {FL, 0, 0}};
    return (struct sections){2, {t * FL, F + t * FL, 0}, {FL, FL, 0}};
}

/* A column-parallel tensor of layer l (local offset lo, whole offset wo of
 * its layer; `cols` elements per row: C for weights, 1 for biases). */
static void for_each_section(const struct sections *sec, size_t lo, size_t wo, size_t cols, block_fn fn, void *ctx)
{
    for (int p = 0; p < sec->n; p++) {
        struct block_copy b = {lo, wo + sec->whole_start[p] * cols, 1, sec->local_rows[p] * cols, 0};
        fn(ctx, &b);
        lo += sec->local_rows[p] * cols;
    }
}

/* Every piece of the local vector with its place in the whole vector. */
static void for_each_block(const struct dtrain_shard *s, block_fn fn, void *ctx)
{
    const struct dtrain_model_config *m = &s->model;
    size_t C = (size_t)m->channels, CL = (size_t)s->attn_width, FL = (size_t)s->mlp_width;
    size_t F = (size_t)dtrain_model_mlp_width(m), tp = (size_t)s->tp_rank;
    size_t goff[DTRAIN_MODEL_NUM_TENSORS], whole[DTRAIN_MODEL_NUM_TENSORS];
    dtrain_model_tensor_sizes(m, whole);
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++)
        goff[t] = dtrain_model_tensor_offset(m, (enum dtrain_model_tensor)t);
    struct sections qkv = qkv_sections(s), fc = fc_sections(s);
    struct block_copy b;
    if (s->size[DTRAIN_MODEL_WTE] > 0) {
        b = (struct block_copy){s->offset[DTRAIN_MODEL_WTE], goff[DTRAIN_MODEL_WTE] + (size_t)s->vocab_begin * C,
                                1, s->size[DTRAIN_MODEL_WTE], 0};
        fn(ctx, &b);
    }
    if (s->size[DTRAIN_MODEL_WPE] > 0) {
        b = (struct block_copy){s->offset[DTRAIN_MODEL_WPE], goff[DTRAIN_MODEL_WPE], 1, s->size[DTRAIN_MODEL_WPE], 0};
        fn(ctx, &b);
    }
    size_t per[BLOCK_TENSORS];
    local_per_layer(s, per);
    for (int j = 0; j < BLOCK_TENSORS; j++) {
        int t = FIRST_BLOCK_TENSOR + j;
        if (per[j] == 0)
            continue;
        size_t wl = whole[t] / (size_t)m->num_layers; /* whole elements per layer */
        for (int i = 0; i < local_layers(s); i++) {
            size_t l = (size_t)dtrain_shard_global_layer(s, i);
            size_t lo = s->offset[t] + (size_t)i * per[j], wo = goff[t] + l * wl;
            switch (t) {
            case DTRAIN_MODEL_QKVW: /* q, k, v rows of the local heads */
                for_each_section(&qkv, lo, wo, C, fn, ctx);
                break;
            case DTRAIN_MODEL_QKVB:
                for_each_section(&qkv, lo, wo, 1, fn, ctx);
                break;
            case DTRAIN_MODEL_ATTPROJW: /* (C, C): columns of the local heads */
                b = (struct block_copy){lo, wo + tp * CL, C, CL, C};
                fn(ctx, &b);
                break;
            case DTRAIN_MODEL_FCW: /* rows (Llama: of gate, then of up) */
                for_each_section(&fc, lo, wo, C, fn, ctx);
                break;
            case DTRAIN_MODEL_FCB:
                for_each_section(&fc, lo, wo, 1, fn, ctx);
                break;
            case DTRAIN_MODEL_FCPROJW: /* (C, F): columns */
                b = (struct block_copy){lo, wo + tp * FL, C, FL, F};
                fn(ctx, &b);
                break;
            default: /* replicated: norms, projection biases */
                b = (struct block_copy){lo, wo, 1, C, 0};
                fn(ctx, &b);
                break;
            }
        }
    }
    for (int t = DTRAIN_MODEL_LNFW; t <= DTRAIN_MODEL_LNFB; t++) {
        if (s->size[t] > 0) {
            b = (struct block_copy){s->offset[t], goff[t], 1, C, 0};
            fn(ctx, &b);
        }
    }
    if (s->size[DTRAIN_MODEL_LMHEAD] > 0) {
        b = (struct block_copy){s->offset[DTRAIN_MODEL_LMHEAD],
                                goff[DTRAIN_MODEL_LMHEAD] + (size_t)s->vocab_begin * C, 1,
                                s->size[DTRAIN_MODEL_LMHEAD], 0};
        fn(ctx, &b);
    }
}

struct copy_ctx {
    float *dst;
    const float *src;
    int to_local;
};

static void copy_block(void *p, const struct block_copy *b)
{
    const struct copy_ctx *c = p;
    for (size_t r = 0; r < b->rows; r++) {
        size_t lo = b->local + r * b->cols, wh = b->whole + r * b->stride;
        if (c->to_local)
            memcpy(c->dst + lo, c->src + wh, b->cols * sizeof(float));
        else
            memcpy(c->dst + wh, c->src + lo, b->cols * sizeof(float));
    }
}

void dtrain_shard_scatter(const struct dtrain_shard *s, const float *whole, float *local)
{
    struct copy_ctx c = {local, whole, 1};
    for_each_block(s, copy_block, &c);
}

void dtrain_shard_gather(const struct dtrain_shard *s, const float *local, float *whole)
{
    struct copy_ctx c = {whole, local, 0};
    for_each_block(s, copy_block, &c);
}

struct run_ctx {
    const struct dtrain_shard *s;
    dtrain_shard_run_fn fn;
    void *ctx;
};

static void run_block(void *p, const struct block_copy *b)
{
    const struct run_ctx *c = p;
    int t = 0; /* the tensor holding the block: the last one starting at or before it */
    for (int i = 0; i < DTRAIN_MODEL_NUM_TENSORS; i++)
        if (c->s->size[i] > 0 && c->s->offset[i] <= b->local)
            t = i;
    struct dtrain_shard_run r = {0, 0, b->cols, dtrain_shard_in_norm(c->s, (enum dtrain_model_tensor)t)};
    for (size_t row = 0; row < b->rows; row++) {
        r.local = b->local + row * b->cols;
        r.whole = b->whole + row * b->stride;
        c->fn(c->ctx, &r);
    }
}

void dtrain_shard_for_each_run(const struct dtrain_shard *s, dtrain_shard_run_fn fn, void *ctx)
{
    struct run_ctx c = {s, fn, ctx};
    for_each_block(s, run_block, &c);
}

int dtrain_shard_in_norm(const struct dtrain_shard *s, enum dtrain_model_tensor t)
{
    switch (t) {
    case DTRAIN_MODEL_WTE:
        return s->has_embedding; /* the head's copy on the last stage is stage 0's twin */
    case DTRAIN_MODEL_QKVW:
    case DTRAIN_MODEL_QKVB:
    case DTRAIN_MODEL_LMHEAD:
    case DTRAIN_MODEL_ATTPROJW:
    case DTRAIN_MODEL_FCW:
    case DTRAIN_MODEL_FCB:
    case DTRAIN_MODEL_FCPROJW:
        return 1;
    default:
        return s->tp_rank == 0;
    }
}

/* ------------------------------------------------------------ gradient units */

/* The stage has a position embedding (stage 0 of GPT-2): a unit of its own. */
static int has_wpe(const struct dtrain_shard *s)
{
    return s->size[DTRAIN_MODEL_WPE] > 0;
}

int dtrain_shard_units(const struct dtrain_shard *s)
{
    return s->has_head + local_layers(s) + has_wpe(s) + (s->size[DTRAIN_MODEL_WTE] > 0);
}

enum dtrain_shard_unit_kind dtrain_shard_unit_kind(const struct dtrain_shard *s, int u, int *layer)
{
    int nl = local_layers(s);
    *layer = -1;
    if (s->has_head) {
        if (u == 0)
            return DTRAIN_UNIT_HEAD;
        u--;
    }
    if (u < nl) {
        *layer = nl - 1 - u; /* backward runs the layers top down */
        return DTRAIN_UNIT_LAYER;
    }
    u -= nl;
    if (has_wpe(s) && u == 0)
        return DTRAIN_UNIT_WPE;
    return DTRAIN_UNIT_WTE;
}

int dtrain_shard_unit_of(const struct dtrain_shard *s, enum dtrain_shard_unit_kind kind, int i)
{
    int nl = local_layers(s), base = s->has_head;
    switch (kind) {
    case DTRAIN_UNIT_HEAD:
        return s->has_head ? 0 : -1;
    case DTRAIN_UNIT_LAYER:
        return (i >= 0 && i < nl) ? base + (nl - 1 - i) : -1;
    case DTRAIN_UNIT_WPE:
        return has_wpe(s) ? base + nl : -1;
    case DTRAIN_UNIT_WTE:
        return s->size[DTRAIN_MODEL_WTE] > 0 ? base + nl + has_wpe(s) : -1;
    }
    return -1;
}

static void tensor_range(const struct dtrain_shard *s, int t, struct dtrain_shard_range *r)
{
    r->offset = s->offset[t];
    r->count = s->size[t];
    r->in_norm = dtrain_shard_in_norm(s, (enum dtrain_model_tensor)t);
}

int dtrain_shard_unit_ranges(const struct dtrain_shard *s, int u, struct dtrain_shard_range *r)
{
    int layer;
    size_t per[BLOCK_TENSORS], off[BLOCK_TENSORS];
    switch (dtrain_shard_unit_kind(s, u, &layer)) {
    case DTRAIN_UNIT_HEAD:
        tensor_range(s, DTRAIN_MODEL_LNFW, &r[0]);
        tensor_range(s, DTRAIN_MODEL_LNFB, &r[1]);
        tensor_range(s, DTRAIN_MODEL_LMHEAD, &r[2]); /* an untied head */
        return s->size[DTRAIN_MODEL_LMHEAD] > 0 ? 3 : 2;
    case DTRAIN_UNIT_LAYER:
        local_per_layer(s, per);
        layer_offsets(s, layer, off);
        for (int j = 0; j < BLOCK_TENSORS; j++) {
            int t = FIRST_BLOCK_TENSOR + j;
            r[j].offset = off[j];
            r[j].count = per[j];
            r[j].in_norm = dtrain_shard_in_norm(s, (enum dtrain_model_tensor)t);
        }
        return BLOCK_TENSORS;
    case DTRAIN_UNIT_WPE:
        tensor_range(s, DTRAIN_MODEL_WPE, &r[0]);
        return 1;
    case DTRAIN_UNIT_WTE:
        tensor_range(s, DTRAIN_MODEL_WTE, &r[0]);
        return 1;
    }
    return 0;
}
