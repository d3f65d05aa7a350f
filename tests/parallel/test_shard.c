/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One rank's part of the model (runtime/parallel/dtrain_shard.h), without any
 * communication: for several (T, P), the shards of all ranks put back
 * together give the whole model; every parameter of the whole model is
 * held by exactly the ranks Megatron's split says and counted exactly once
 * in the gradient norm; the gradient units tile each local vector; block
 * views point at the right slices; on one rank the layout is the whole
 * model's flat vector; shapes that do not split are refused with one line;
 * with virtual stages (V = 2) the chunks hold Megatron's layers and the same
 * checks hold. */
#include <stdlib.h>
#include <string.h>

#include "parallel/dtrain_shard.h"
#include "tap.h"

static const struct dtrain_model_config model = {
    .max_seq_len = 16, .vocab_size = 250, .padded_vocab_size = 256,
    .num_layers = 5, .num_heads = 4, .channels = 8,
};

/* whole[i] = i, so that a copied value tells where it came from */
static float *iota(size_t n)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; v != NULL && i < n; i++)
        v[i] = (float)i;
    return v;
}

struct layout_check {
    int gathered_whole; /* gather of every rank's scatter rebuilds the whole vector */
    int holders_ok;     /* each element held by 1 (split) or T (replicated) ranks per copy */
    int norm_once;      /* each element counted once in the norm over all ranks */
    int units_tile;     /* each rank's units cover its local vector exactly once */
    size_t local_total;
};

static void check_layout_v(const struct dtrain_model_config *mp, int T, int P, int V, struct layout_check *out)
{
    size_t n = dtrain_model_param_count(mp);
    float *whole = iota(n), *back = calloc(n, sizeof(float));
    int *holders = calloc(n, sizeof(int)), *norm = calloc(n, sizeof(int));
    memset(out, 0, sizeof *out);
    out->gathered_whole = out->units_tile = 1;
    for (int pp = 0; pp < P; pp++) {
        for (int tp = 0; tp < T; tp++) {
            struct dtrain_shard s;
            char err[256];
            if (dtrain_shard_plan_v(mp, T, P, V, tp, pp, &s, err, sizeof err) != DTRAIN_OK) {
                out->gathered_whole = 0;
                diag("plan T=%d P=%d (%d,%d): %s", T, P, tp, pp, err);
                continue;
            }
            out->local_total += s.count;
            float *local = malloc((s.count + 1) * sizeof(float));
            dtrain_shard_scatter(&s, whole, local);
            dtrain_shard_gather(&s, local, back);
            for (size_t i = 0; i < s.count; i++) {
                size_t g = (size_t)local[i]; /* which whole element this local one is */
                holders[g]++;
            }
            /* units: every local element once; norm flags per element */
            unsigned char *seen = calloc(s.count + 1, 1);
            for (int u = 0; u < dtrain_shard_units(&s); u++) {
                struct dtrain_shard_range r[DTRAIN_SHARD_UNIT_RANGES];
                int nr = dtrain_shard_unit_ranges(&s, u, r);
                for (int j = 0; j < nr; j++)
                    for (size_t i = r[j].offset; i < r[j].offset + r[j].count && i < s.count; i++) {
                        if (seen[i]++)
                            out->units_tile = 0;
                        if (r[j].in_norm)
                            norm[(size_t)local[i]]++;
                    }
            }
            for (size_t i = 0; i < s.count; i++)
                if (seen[i] != 1)
                    out->units_tile = 0;
            free(seen);
            free(local);
        }
    }
    out->gathered_whole = out->gathered_whole && memcmp(whole, back, n * sizeof(float)) == 0;
    /* expected holders: split tensors 1 per copy, replicated T; wte has two
     * copies when P > 1 */
    out->holders_ok = out->norm_once = 1;
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        size_t sizes[DTRAIN_MODEL_NUM_TENSORS];
        dtrain_model_tensor_sizes(mp, sizes);
        size_t off = dtrain_model_tensor_offset(mp, (enum dtrain_model_tensor)t);
        int split = t == DTRAIN_MODEL_WTE || t == DTRAIN_MODEL_QKVW || t == DTRAIN_MODEL_QKVB ||
                    t == DTRAIN_MODEL_ATTPROJW || t == DTRAIN_MODEL_FCW || t == DTRAIN_MODEL_FCB ||
                    t == DTRAIN_MODEL_FCPROJW;
        int copies = (t == DTRAIN_MODEL_WTE && P > 1) ? 2 : 1;
        int want = (split ? 1 : T) * copies;
        for (size_t i = off; i < off + sizes[t]; i++) {
            if (holders[i] != want) {
                if (out->holders_ok)
                    diag("T=%d P=%d: %s element %zu held %d times, want %d", T, P,
                         dtrain_model_tensor_name((enum dtrain_model_tensor)t), i - off, holders[i], want);
                out->holders_ok = 0;
            }
            if (norm[i] != 1)
                out->norm_once = 0;
        }
    }
    free(whole);
    free(back);
    free(holders);
    free(norm);
}

static void check_layout(int T, int P, struct layout_check *out) { check_layout_v(&model, T, P, 1, out); }

int main(void)
{
    const int layouts[][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}, {4, 3}, {2, 5}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        int T = layouts[i][0], P = layouts[i][1];
        struct layout_check c;
        check_layout(T, P, &c);
        ok(c.gathered_whole, "T=%d P=%d: the shards of all ranks put together are the whole model", T, P);
        ok(c.holders_ok, "T=%d P=%d: split tensors held once, replicated ones by each TP rank, wte twice with P > 1",
           T, P);
        ok(c.norm_once, "T=%d P=%d: every parameter counts once in the gradient norm", T, P);
        ok(c.units_tile, "T=%d P=%d: the gradient units cover each local vector exactly once", T, P);
    }

    /* one rank: the whole model's layout, wte and lnf in one shard */
    struct dtrain_shard s;
    char err[256];
    int rc = dtrain_shard_plan(&model, 1, 1, 0, 0, &s, err, sizeof err);
    size_t n = dtrain_model_param_count(&model);
    int same = rc == DTRAIN_OK && s.count == n;
    for (int t = 0; same && t < DTRAIN_MODEL_NUM_TENSORS; t++)
        same = s.offset[t] == dtrain_model_tensor_offset(&model, (enum dtrain_model_tensor)t);
    ok(same && s.has_embedding && s.has_head && dtrain_shard_units(&s) == 1 + 5 + 1 + 1,
       "T=P=1: the local vector is the whole flat vector in llm.c's order; units head, 5 layers, wpe, wte");

    /* stages and units of a middle stage; block views */
    rc = dtrain_shard_plan(&model, 2, 3, 1, 1, &s, err, sizeof err);
    int layer;
    ok(rc == DTRAIN_OK && s.layer_begin == 1 && s.layer_end == 3 && !s.has_embedding && !s.has_head &&
       s.size[DTRAIN_MODEL_WTE] == 0 && dtrain_shard_units(&s) == 2 &&
       dtrain_shard_unit_kind(&s, 0, &layer) == DTRAIN_UNIT_LAYER && layer == 1,
       "T=2 P=3, stage 1 of 5 layers: blocks [1, 3), no wte, units top layer first");
    float *local = iota(s.count);
    struct dtrain_block_weights w;
    dtrain_shard_block_weights(&s, local, 1, &w);
    size_t per_layer = dtrain_shard_layer_size(&s);
    ok(per_layer == 2 * 8 + 3 * 4 * 8 + 3 * 4 + 8 * 4 + 8 + 2 * 8 + 16 * 8 + 16 + 8 * 16 + 8 &&
       w.qkvw == local + s.offset[DTRAIN_MODEL_QKVW] + 3 * 4 * 8 &&
       w.fcprojb == local + s.offset[DTRAIN_MODEL_FCPROJB] + 8,
       "block views of local layer 1 point one layer's slice into each tensor (%zu parameters a layer)", per_layer);
    free(local);
    struct dtrain_block_shape shape;
    dtrain_shard_block_shape(&s, 3, 5, &shape);
    ok(shape.NH == 2 && shape.HS == 2 && shape.F == 16 && shape.C == 8 && shape.add_row_bias == 0,
       "TP rank 1 runs 2 of 4 heads, 16 of 32 MLP columns, and leaves the row biases to rank 0");

    /* TP slices: rank 1's first q row is whole row C/T of qkvw; its attprojw
     * row r holds columns [C/T, C) of whole row r */
    float *whole = iota(n);
    rc = dtrain_shard_plan(&model, 2, 1, 1, 0, &s, err, sizeof err);
    local = malloc(s.count * sizeof(float));
    dtrain_shard_scatter(&s, whole, local);
    size_t q = dtrain_model_tensor_offset(&model, DTRAIN_MODEL_QKVW);
    size_t ap = dtrain_model_tensor_offset(&model, DTRAIN_MODEL_ATTPROJW);
    float *lq = dtrain_shard_tensor(&s, local, DTRAIN_MODEL_QKVW);
    float *lap = dtrain_shard_tensor(&s, local, DTRAIN_MODEL_ATTPROJW);
    float *lwte = dtrain_shard_tensor(&s, local, DTRAIN_MODEL_WTE);
    ok(lq[0] == (float)(q + 4 * 8) && lq[4 * 8] == (float)(q + 8 * 8 + 4 * 8) && lap[0] == (float)(ap + 4) &&
       lap[4] == (float)(ap + 8 + 4) && lwte[0] == (float)(128 * 8),
       "TP rank 1 holds heads 2-3's q, k and v rows, the matching attprojw columns and wte rows 128..255");
    free(local);
    free(whole);

    /* refusals */
    struct dtrain_model_config bad = model;
    ok(dtrain_shard_plan(&bad, 3, 1, 0, 0, &s, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "heads"),
       "T=3 with 4 heads: refused (%s)", err);
    bad.num_heads = 8;
    bad.channels = 8;
    bad.padded_vocab_size = 250;
    ok(dtrain_shard_plan(&bad, 4, 1, 0, 0, &s, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "padded vocabulary"),
       "padded vocabulary 250 with T=4: refused (%s)", err);
    bad = model;
    bad.num_heads = 1;
    bad.channels = 3;
    ok(dtrain_shard_plan(&bad, 8, 1, 0, 0, &s, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "heads"),
       "T=8 with one head: refused (%s)", err);
    ok(dtrain_shard_plan(&model, 1, 6, 0, 0, &s, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "layer"),
       "P=6 with 5 layers: refused (%s)", err);
    ok(dtrain_shard_plan(&model, 2, 1, 2, 0, &s, err, sizeof err) == DTRAIN_ERR_INPUT,
       "a TP rank outside the layout: refused (%s)", err);
    /* virtual stages: 8 layers, P = 2, V = 2: chunk c of stage s holds
     * virtual stage s + 2c, layers {0,1,4,5} on stage 0 and {2,3,6,7} on 1 */
    struct dtrain_model_config m8 = model;
    m8.num_layers = 8;
    for (int T = 1; T <= 2; T++) {
        for (int P = 2; P <= 4; P *= 2) {
            struct layout_check c;
            check_layout_v(&m8, T, P, 2, &c);
            ok(c.gathered_whole && c.holders_ok && c.norm_once && c.units_tile,
               "T=%d P=%d V=2 (8 layers): every rank's slices rebuild the whole model, held and in the norm as "
               "without virtual stages, units tile each local vector", T, P);
        }
    }
    struct dtrain_shard v0, v1, plain;
    int good = dtrain_shard_plan_v(&m8, 1, 2, 2, 0, 0, &v0, err, sizeof err) == DTRAIN_OK &&
               dtrain_shard_plan_v(&m8, 1, 2, 2, 0, 1, &v1, err, sizeof err) == DTRAIN_OK &&
               dtrain_shard_plan(&m8, 1, 2, 0, 0, &plain, err, sizeof err) == DTRAIN_OK;
    ok(good && v0.layers == 4 && dtrain_shard_global_layer(&v0, 0) == 0 && dtrain_shard_global_layer(&v0, 1) == 1 &&
       dtrain_shard_global_layer(&v0, 2) == 4 && dtrain_shard_global_layer(&v0, 3) == 5 &&
       dtrain_shard_global_layer(&v1, 0) == 2 && dtrain_shard_global_layer(&v1, 3) == 7 && v0.count == plain.count &&
       v0.has_embedding && !v0.has_head && v1.has_head,
       "P=2 V=2, 8 layers: stage 0 holds layers 0,1,4,5 and the embeddings, stage 1 layers 2,3,6,7 and the head; "
       "as many parameters as with V=1");
    int r1 = dtrain_shard_plan_v(&model, 1, 2, 2, 0, 0, &v0, err, sizeof err);
    ok(r1 == DTRAIN_ERR_INPUT && strstr(err, "P*V dividing the layers") != NULL,
       "5 layers at P=2 V=2 refused: %s", err);
    r1 = dtrain_shard_plan_v(&m8, 1, 1, 2, 0, 0, &v0, err, sizeof err);
    int r2 = dtrain_shard_plan_v(&m8, 1, 2, 0, 0, 0, &v1, err, sizeof err);
    ok(r1 == DTRAIN_ERR_INPUT && r2 == DTRAIN_ERR_INPUT, "V=2 without a pipeline (P=1) and V=0 refused");
    return tap_done();
}
