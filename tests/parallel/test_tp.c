/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Tensor parallelism (runtime/parallel/dtrain_tp.h) with T = 2 and T = 4 local
 * processes on real communicators, against the unsplit layers run in the
 * same process with the CPU kernels:
 *  - vocabulary-parallel embedding: the output and the wpe gradient are the
 *    whole lookup's bit for bit, each rank's wte gradient rows those of the
 *    whole gradient;
 *  - vocabulary-parallel cross-entropy (V = 250 padded to 256, so the last
 *    ranks hold padding columns): losses, probabilities and logit gradients
 *    of each rank's columns match the full softmax cross-entropy;
 *  - one transformer block split Megatron-style (column-parallel QKV and
 *    fc, row-parallel projections, the f/g all-reduces through the hook):
 *    output and input gradient on every rank equal the whole block's, each
 *    rank's weight gradients its slice of the whole block's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_rng.h"
#include "parallel/dtrain_shard.h"
#include "parallel/dtrain_tp.h"
#include "local_boot.h"
#include "tap.h"

#define B 2
#define T 8
#define N (B * T)
#define V 250
#define VP 256
#define C 16
#define NH 4

struct result {
    int ran;
    char err[256];
    int emb_out_same, emb_dwpe_same, emb_dwte_same;
    double xent_loss, xent_probs, xent_dlogits;
    double block_y, block_dx, block_dw;
};

static void fill(float *x, size_t n, uint64_t stream, double scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * dtrain_rng_normal(99, stream, i));
}

/* The next n floats of *p. */
static float *take(float **p, size_t n)
{
    float *r = *p;
    *p += n;
    return r;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m))
            m = d;
    }
    return m;
}

static void test_embedding(struct dtrain_kernels *k, struct dtrain_tp *tp, int rank, int size, struct result *r)
{
    int Vl = VP / size, v0 = rank * Vl;
    float *wte = malloc(sizeof(float) * VP * C), *wpe = malloc(sizeof(float) * T * C);
    float *out = malloc(sizeof(float) * N * C), *whole = malloc(sizeof(float) * N * C);
    float *dout = malloc(sizeof(float) * N * C);
    float *dwte = calloc(VP * C, sizeof(float)), *dwpe = calloc(T * C, sizeof(float));
    float *dwte_l = calloc((size_t)Vl * C, sizeof(float)), *dwpe_l = calloc(T * C, sizeof(float));
    int32_t tokens[N];
    fill(wte, (size_t)VP * C, 1, 0.02);
    fill(wpe, (size_t)T * C, 2, 0.02);
    fill(dout, (size_t)N * C, 3, 1.0);
    for (int i = 0; i < N; i++)
        tokens[i] = (int32_t)(dtrain_rng_bits(99, 4, (uint64_t)i) % V);
    tokens[1] = tokens[5]; /* a repeated token: its rows add up in order */
    dtrain_k_encoder_forward(k, whole, tokens, wte, wpe, B, T, C);
    int rc = dtrain_tp_embedding_forward(tp, out, NULL, tokens, wte + (size_t)v0 * C, wpe, B, T, C, r->err, sizeof r->err);
    r->emb_out_same = rc == DTRAIN_OK && memcmp(out, whole, sizeof(float) * N * C) == 0;
    dtrain_k_encoder_backward(k, dwte, dwpe, dout, tokens, B, T, C);
    dtrain_tp_embedding_backward(tp, dwte_l, dwpe_l, dout, tokens, B, T, C);
    r->emb_dwpe_same = memcmp(dwpe, dwpe_l, sizeof(float) * T * C) == 0;
    r->emb_dwte_same = memcmp(dwte + (size_t)v0 * C, dwte_l, sizeof(float) * (size_t)Vl * C) == 0;
    free(wte);
    free(wpe);
    free(out);
    free(whole);
    free(dout);
    free(dwte);
    free(dwpe);
    free(dwte_l);
    free(dwpe_l);
}

static void test_xent(struct dtrain_kernels *k, struct dtrain_tp *tp, int rank, int size, struct result *r)
{
    int Vl = VP / size, v0 = rank * Vl;
    float *full = malloc(sizeof(float) * N * VP), *mine = malloc(sizeof(float) * N * Vl);
    float losses[N], losses_l[N];
    int32_t targets[N];
    fill(full, (size_t)N * VP, 5, 3.0);
    for (int i = 0; i < N; i++)
        targets[i] = (int32_t)(dtrain_rng_bits(99, 6, (uint64_t)i) % V);
    targets[0] = V - 1; /* the last real column */
    for (int n = 0; n < N; n++)
        memcpy(mine + (size_t)n * Vl, full + (size_t)n * VP + v0, sizeof(float) * Vl);
    dtrain_k_softmax_xent_forward(k, full, losses, targets, N, V, VP);
    if (dtrain_tp_xent_forward(tp, mine, losses_l, targets, N, r->err, sizeof r->err) != DTRAIN_OK) {
        r->xent_loss = INFINITY;
        goto out;
    }
    double dl = 0.0, dp = 0.0, dg = 0.0;
    for (int n = 0; n < N; n++) {
        double d = fabs((double)losses[n] - losses_l[n]) / fabs((double)losses[n]);
        if (!(d <= dl))
            dl = d;
        double e = max_diff(full + (size_t)n * VP + v0, mine + (size_t)n * Vl, (size_t)Vl);
        if (!(e <= dp))
            dp = e;
    }
    dtrain_k_softmax_xent_backward(k, full, targets, 1.0f / N, N, V, VP);
    dtrain_tp_xent_backward(tp, mine, targets, 1.0f / N, N);
    for (int n = 0; n < N; n++) {
        double e = max_diff(full + (size_t)n * VP + v0, mine + (size_t)n * Vl, (size_t)Vl);
        if (!(e <= dg))
            dg = e;
    }
    r->xent_loss = dl;
    r->xent_probs = dp;
    r->xent_dlogits = dg;
out:
    free(full);
    free(mine);
}

/* The block of a one-layer model: whole (T = 1 shard) against this rank's
 * slice, with the TP hook. */
static void test_block(struct dtrain_kernels *k, struct dtrain_tp *tp, int rank, int size, struct result *r)
{
    struct dtrain_model_config cfg = {.max_seq_len = T, .vocab_size = V, .padded_vocab_size = VP,
                                     .num_layers = 1, .num_heads = NH, .channels = C};
    struct dtrain_shard whole_s, mine_s;
    char err[256];
    if (dtrain_shard_plan(&cfg, 1, 1, 0, 0, &whole_s, err, sizeof err) != 0 ||
        dtrain_shard_plan(&cfg, size, 1, rank, 0, &mine_s, err, sizeof err) != 0) {
        snprintf(r->err, sizeof r->err, "%s", err);
        r->block_y = INFINITY;
        return;
    }
    size_t n = whole_s.count, nl = mine_s.count;
    float *pw = malloc(n * sizeof(float)), *gw = calloc(n, sizeof(float));
    float *pl = malloc(nl * sizeof(float)), *gl = calloc(nl, sizeof(float)), *gl_whole = malloc(nl * sizeof(float));
    fill(pw, n, 7, 0.1);
    for (int i = 0; i < C; i++) { /* layer norm weights near 1 */
        pw[whole_s.offset[DTRAIN_MODEL_LN1W] + i] += 1.0f;
        pw[whole_s.offset[DTRAIN_MODEL_LN2W] + i] += 1.0f;
    }
    dtrain_shard_scatter(&mine_s, pw, pl);
    float *x = malloc(sizeof(float) * N * C), *y0 = malloc(sizeof(float) * N * C), *y = malloc(sizeof(float) * N * C);
    float *d0 = malloc(sizeof(float) * N * C), *d = malloc(sizeof(float) * N * C);
    fill(x, (size_t)N * C, 8, 1.0);
    fill(d0, (size_t)N * C, 9, 1.0);
    memcpy(d, d0, sizeof(float) * N * C);

    /* activations and scratch for the widest shape (the whole block) */
    size_t F = 4 * C;
    float *act = calloc((size_t)N * (6 * C + 3 * C + 2 * F + 4) + (size_t)B * NH * T * T, sizeof(float));
    size_t att_scratch = dtrain_k_attention_scratch(k, B, T, NH, NH, C / NH);
    float *scr = calloc((size_t)N * (2 * C + 3 * C + F) + att_scratch, sizeof(float));
    struct dtrain_block_shape sw, sl;
    dtrain_shard_block_shape(&whole_s, B, T, &sw);
    dtrain_shard_block_shape(&mine_s, B, T, &sl);
    struct dtrain_block_acts a;
    struct dtrain_block_scratch sc;
    float *p = act;
    a.act = dtrain_kernels_act_dtype(k);
    a.ln1 = take(&p, N * C);
    a.ln1_mean = take(&p, N);
    a.ln1_rstd = take(&p, N);
    a.qkv = take(&p, N * 3 * C);
    a.atty = take(&p, N * C);
    a.att = take(&p, B * NH * T * T);
    a.res2 = take(&p, N * C);
    a.ln2 = take(&p, N * C);
    a.ln2_mean = take(&p, N);
    a.ln2_rstd = take(&p, N);
    a.fch = take(&p, N * F);
    a.fch_gelu = take(&p, N * F);
    p = scr;
    sc.dln = take(&p, N * C);
    sc.dqkv = take(&p, N * 3 * C);
    sc.datty = take(&p, N * C);
    sc.dfc = take(&p, N * F);
    sc.att = p;

    struct dtrain_block_weights w;
    struct dtrain_block_grads g;
    dtrain_shard_block_weights(&whole_s, pw, 0, &w);
    dtrain_shard_block_grads(&whole_s, gw, 0, &g);
    int rc = dtrain_block_forward(k, &sw, &w, &a, x, y0, NULL, r->err, sizeof r->err);
    if (rc == DTRAIN_OK)
        rc = dtrain_block_backward(k, &sw, &w, &g, &a, &sc, x, d0, NULL, r->err, sizeof r->err);
    dtrain_shard_block_weights(&mine_s, pl, 0, &w);
    dtrain_shard_block_grads(&mine_s, gl, 0, &g);
    if (rc == DTRAIN_OK)
        rc = dtrain_block_forward(k, &sl, &w, &a, x, y, dtrain_tp_block_hook(tp), r->err, sizeof r->err);
    if (rc == DTRAIN_OK)
        rc = dtrain_block_backward(k, &sl, &w, &g, &a, &sc, x, d, dtrain_tp_block_hook(tp), r->err, sizeof r->err);
    if (rc != DTRAIN_OK) {
        r->block_y = INFINITY;
    } else {
        r->block_y = max_diff(y, y0, (size_t)N * C);
        r->block_dx = max_diff(d, d0, (size_t)N * C);
        dtrain_shard_scatter(&mine_s, gw, gl_whole); /* this rank's slice of the whole gradients */
        r->block_dw = max_diff(gl, gl_whole, nl);
    }
    free(pw);
    free(gw);
    free(pl);
    free(gl);
    free(gl_whole);
    free(x);
    free(y0);
    free(y);
    free(d0);
    free(d);
    free(act);
    free(scr);
}

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    struct result *r = result;
    struct dtrain_comms comms;
    struct dtrain_kernels *k = NULL;
    struct dtrain_tp *tp = NULL;
    struct dtrain_kernels_options ko = {.threads = 1};
    (void)ctx;
    if (local_boot_comms(bs, 20000, 0, &comms, NULL, r->err, sizeof r->err) != DTRAIN_OK)
        return 3;
    int size = bs->tp;
    if (dtrain_kernels_create("cpu", &ko, &k, r->err, sizeof r->err) != 0 ||
        dtrain_tp_create(k, comms.group[DTRAIN_GROUP_TP], V, VP / size, bs->tp_rank * (VP / size), N, &tp,
                         r->err, sizeof r->err) != DTRAIN_OK)
        goto out;
    test_embedding(k, tp, bs->tp_rank, size, r);
    test_xent(k, tp, bs->tp_rank, size, r);
    test_block(k, tp, bs->tp_rank, size, r);
    r->ran = 1;
out:
    dtrain_tp_destroy(tp);
    dtrain_kernels_destroy(k);
    dtrain_comm_destroy_all(&comms);
    return r->ran ? 0 : 1;
}

int main(void)
{
    for (int size = 2; size <= 4; size += 2) {
        struct result res[4];
        int codes[LOCAL_BOOT_MAX_WORLD];
        char err[256];
        memset(res, 0, sizeof res);
        int rc = local_boot_run(size, 1, 1, rank_main, NULL, sizeof res[0], res, codes, 60, err, sizeof err);
        int ran = rc == 0, emb = 1, dwte = 1;
        double xl = 0, xp = 0, xg = 0, by = 0, bx = 0, bw = 0;
        for (int r = 0; r < size; r++) {
            if (res[r].err[0])
                diag("T=%d rank %d: %s", size, r, res[r].err);
            ran = ran && res[r].ran;
            emb = emb && res[r].emb_out_same && res[r].emb_dwpe_same;
            dwte = dwte && res[r].emb_dwte_same;
            xl = fmax(xl, res[r].xent_loss);
            xp = fmax(xp, res[r].xent_probs);
            xg = fmax(xg, res[r].xent_dlogits);
            by = fmax(by, res[r].block_y);
            bx = fmax(bx, res[r].block_dx);
            bw = fmax(bw, res[r].block_dw);
        }
        ok(ran, "T=%d: %d ranks build their TP communicator and run every check (%s)", size, size, ran ? "ok" : err);
        ok(ran && emb, "T=%d: vocabulary-parallel embedding: output and wpe gradient are the whole lookup's, bit for bit",
           size);
        ok(ran && dwte, "T=%d: each rank's wte gradient is its rows of the whole gradient, bit for bit", size);
        ok(ran && xl < 1e-6 && xp < 1e-6, "T=%d: vocabulary-parallel cross-entropy (V=250 of 256 columns): losses within "
           "%.1e relative, probabilities within %.1e of the full softmax", size, xl, xp);
        ok(ran && xg < 1e-7, "T=%d: its logit gradients within %.1e of the full ones (padding columns 0)", size, xg);
        ok(ran && by < 1e-5 && bx < 1e-5, "T=%d: a block split over the ranks (f/g all-reduces) gives the whole block's "
           "output (%.1e) and input gradient (%.1e) on every rank", size, by, bx);
        ok(ran && bw < 1e-5, "T=%d: each rank's weight gradients are its slice of the whole block's (%.1e)", size, bw);
    }
    return tap_done();
}
