/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The whole GPT-2 model: layout facts, gradient check of every parameter
 * against double-precision finite differences, the stage pieces a pipeline
 * runs, and a transformer block split over two tensor-parallel ranks. */
#include "dtrain_gpt2.h"
#include "dtrain_kernels.h"
#include "gradcheck.h"
#include "ref_double.h"
#include "tap.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const struct dtrain_model_config tiny = {
    .max_seq_len = 6, .vocab_size = 13, .padded_vocab_size = 16,
    .num_layers = 2, .num_heads = 2, .channels = 8,
};

static void *xmalloc(size_t n)
{
    void *p = calloc(1, n);
    if (p == NULL)
        abort();
    return p;
}

static void test_layout(void)
{
    struct dtrain_model_config gpt2 = {.max_seq_len = 1024, .vocab_size = 50257,
                                      .padded_vocab_size = 50304, .num_layers = 12,
                                      .num_heads = 12, .channels = 768};
    ok(dtrain_model_param_count(&gpt2) == 124475904UL,
       "GPT-2 124M in llm.c's layout has 124475904 parameters (got %zu)", dtrain_model_param_count(&gpt2));
    ok(dtrain_model_tensor_offset(&gpt2, DTRAIN_MODEL_WPE) == 50304UL * 768 &&
       dtrain_model_tensor_offset(&gpt2, DTRAIN_MODEL_LNFB) == 124475904UL - 768,
       "tensor offsets follow llm.c's order (wte, wpe, ..., lnfw, lnfb)");
    ok(dtrain_model_pad_vocab(50257) == 50304 && dtrain_model_pad_vocab(256) == 256,
       "default padded vocabulary rounds up to 128");
    char err[256] = "";
    struct dtrain_model_config bad = tiny;
    bad.num_heads = 3;
    ok(dtrain_model_config_check(&bad, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "multiple"),
       "C %% NH != 0 is refused: %s", err);
    bad = tiny;
    bad.padded_vocab_size = 12;
    ok(dtrain_model_config_check(&bad, err, sizeof err) == DTRAIN_ERR_INPUT, "Vp < V is refused: %s", err);
    bad = tiny;
    bad.num_layers = 0;
    ok(dtrain_model_config_check(&bad, err, sizeof err) == DTRAIN_ERR_INPUT, "L = 0 is refused: %s", err);
    /* 6N per token plus attention for one token, one layer, C=1, Vp=1 */
    struct dtrain_model_config one = {.max_seq_len = 1, .vocab_size = 1, .padded_vocab_size = 1,
                                     .num_layers = 1, .num_heads = 1, .channels = 1};
    ok(fabs(dtrain_model_flops_per_step(&one, 1, 1) - 3.0 * (2.0 * 13 + 4.0)) < 1e-9,
       "FLOPs per step = 3 x (2 x (12 L C^2 + C Vp) per token + 4 L T C per token)");

    /* initialisation: a value depends on (seed, tensor, index) only */
    size_t n = dtrain_model_param_count(&tiny);
    float *a = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float));
    dtrain_model_init_params(&tiny, 5, a);
    dtrain_model_init_params(&tiny, 5, b);
    int same = memcmp(a, b, n * sizeof(float)) == 0;
    dtrain_model_init_params(&tiny, 6, b);
    ok(same && memcmp(a, b, n * sizeof(float)) != 0, "initialisation is a function of the seed");
    struct dtrain_model_config deeper = tiny;
    deeper.num_layers = 3;
    float *c = xmalloc(dtrain_model_param_count(&deeper) * sizeof(float));
    dtrain_model_init_params(&deeper, 5, c);
    size_t q2 = dtrain_model_tensor_offset(&tiny, DTRAIN_MODEL_QKVW);
    size_t q3 = dtrain_model_tensor_offset(&deeper, DTRAIN_MODEL_QKVW);
    ok(memcmp(a + q2, c + q3, 2 * 3 * 64 * sizeof(float)) == 0,
       "a tensor's first elements do not depend on its length (a shard initialises alone)");
    size_t wte_pad = (size_t)tiny.vocab_size * tiny.channels;
    int pad_zero = 1, ln_one = 1;
    for (size_t i = wte_pad; i < (size_t)tiny.padded_vocab_size * tiny.channels; i++)
        pad_zero &= a[i] == 0.0f;
    for (size_t i = 0; i < (size_t)tiny.channels; i++)
        ln_one &= a[dtrain_model_tensor_offset(&tiny, DTRAIN_MODEL_LNFW) + i] == 1.0f;
    ok(pad_zero && ln_one, "padding rows of wte start at 0, layer-norm weights at 1");
    free(a); free(b); free(c);
}

/* ------------------------------------------------------------------ gradient check */

struct model_ctx {
    const struct dtrain_model_config *cfg;
    double *params;
    const int32_t *inputs, *targets;
    int B, T;
};

static double model_loss(void *p)
{
    struct model_ctx *c = p;
    return ref_gpt2_loss(c->cfg, c->params, c->inputs, c->targets, c->B, c->T);
}

static void test_gradcheck(struct dtrain_kernels *k)
{
    char err[256] = "";
    int B = 2, T = 5;
    int32_t inputs[10] = {1, 4, 4, 12, 0, 7, 3, 9, 1, 11};
    int32_t targets[10] = {4, 4, 12, 0, 7, 2, 9, 1, 11, 5};
    struct dtrain_gpt2 *m = NULL;
    if (!ok(dtrain_gpt2_create(k, &tiny, B, T, &m, err, sizeof err) == DTRAIN_OK, "create a tiny model"))
        return;
    size_t n = dtrain_gpt2_num_params(m);
    double *p = xmalloc(n * sizeof(double));
    float *pf = xmalloc(n * sizeof(float));
    /* random everywhere (LN weights around 1), so that no gradient is trivially 0 */
    fill_uniform(p, n, 100, 0.3);
    for (int t = DTRAIN_MODEL_LN1W; t <= DTRAIN_MODEL_LNFW; t++) {
        if (t != DTRAIN_MODEL_LN1W && t != DTRAIN_MODEL_LN2W && t != DTRAIN_MODEL_LNFW)
            continue;
        size_t off = dtrain_model_tensor_offset(&tiny, (enum dtrain_model_tensor)t);
        size_t len = dtrain_model_tensor_offset(&tiny, (enum dtrain_model_tensor)(t + 1)) - off;
        for (size_t i = 0; i < len; i++)
            p[off + i] += 1.0;
    }
    for (size_t i = 0; i < n; i++) {
        pf[i] = (float)p[i];
        p[i] = pf[i]; /* the reference evaluates exactly the float parameters */
    }
    dtrain_gpt2_set_params(m, pf);
    float loss = 0;
    int rc = dtrain_gpt2_forward(m, inputs, targets, B, T, &loss, err, sizeof err);
    dtrain_gpt2_zero_grad(m);
    rc = rc ? rc : dtrain_gpt2_backward(m, err, sizeof err);
    ok(rc == DTRAIN_OK, "forward and backward run%s%s", rc ? ": " : "", rc ? err : "");
    struct model_ctx c = {&tiny, p, inputs, targets, B, T};
    double ref = model_loss(&c);
    ok(fabs(loss - ref) < 1e-5 * ref, "model loss %.7f matches the double reference %.7f", loss, ref);

    double *g = xmalloc(n * sizeof(double));
    from_backend(k, g, dtrain_gpt2_grads(m), n, 0.0);
    for (int t = 0; t < DTRAIN_MODEL_NUM_TENSORS; t++) {
        size_t off = dtrain_model_tensor_offset(&tiny, (enum dtrain_model_tensor)t);
        size_t len = dtrain_model_tensor_offset(&tiny, (enum dtrain_model_tensor)(t + 1)) - off;
        double e = fd_max_rel_error(model_loss, &c, p + off, len, g + off);
        ok(e < 5e-3, "whole-model gradient of %-8s vs finite differences: rel error %.2e",
           dtrain_model_tensor_name((enum dtrain_model_tensor)t), e);
    }
    int pad_zero = 1;
    for (size_t i = (size_t)tiny.vocab_size * tiny.channels;
         i < (size_t)tiny.padded_vocab_size * tiny.channels; i++)
        pad_zero &= g[i] == 0.0;
    ok(pad_zero, "padding rows of wte get no gradient");

    /* A second backward without zero_grad doubles every gradient (+=). */
    rc = dtrain_gpt2_forward(m, inputs, targets, B, T, &loss, err, sizeof err);
    rc = rc ? rc : dtrain_gpt2_backward(m, err, sizeof err);
    double *g2 = xmalloc(n * sizeof(double)), worst = 0, gmax = 0;
    from_backend(k, g2, dtrain_gpt2_grads(m), n, 0.0);
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(g2[i] - 2 * g[i]));
        gmax = fmax(gmax, fabs(g[i]));
    }
    ok(rc == DTRAIN_OK && worst <= 1e-6 * gmax, "gradients accumulate over two backward passes");

    /* The stage pieces, split as two pipeline stages, give the same bits. */
    float *g_whole = xmalloc(n * sizeof(float)), *g_split = xmalloc(n * sizeof(float));
    float loss_split = 0;
    dtrain_gpt2_zero_grad(m);
    rc = dtrain_gpt2_forward(m, inputs, targets, B, T, &loss, err, sizeof err);
    rc = rc ? rc : dtrain_gpt2_backward(m, err, sizeof err);
    dtrain_k_download(k, g_whole, dtrain_gpt2_grads(m), n * sizeof(float));
    dtrain_gpt2_zero_grad(m);
    rc = rc ? rc : dtrain_gpt2_upload_tokens(m, inputs, targets, B, T, err, sizeof err);
    dtrain_gpt2_embed_forward(m);
    rc = rc ? rc : dtrain_gpt2_blocks_forward(m, 0, 1, err, sizeof err);
    rc = rc ? rc : dtrain_gpt2_blocks_forward(m, 1, 2, err, sizeof err);
    loss_split = dtrain_gpt2_head_forward(m);
    dtrain_gpt2_head_backward(m, 1.0f / (B * T));
    rc = rc ? rc : dtrain_gpt2_blocks_backward(m, 1, 2, err, sizeof err);
    rc = rc ? rc : dtrain_gpt2_blocks_backward(m, 0, 1, err, sizeof err);
    dtrain_gpt2_embed_backward(m);
    dtrain_k_download(k, g_split, dtrain_gpt2_grads(m), n * sizeof(float));
    ok(rc == DTRAIN_OK && loss_split == loss && memcmp(g_whole, g_split, n * sizeof(float)) == 0,
       "embed + blocks [0,1) + blocks [1,2) + head, and back, give the same bits as forward/backward");
    ok(dtrain_gpt2_blocks_forward(m, 1, 3, err, sizeof err) == DTRAIN_ERR_INPUT,
       "a layer range past L is refused: %s", err);

    int32_t bad[10];
    memcpy(bad, inputs, sizeof bad);
    bad[3] = 13;
    ok(dtrain_gpt2_forward(m, bad, targets, B, T, &loss, err, sizeof err) == DTRAIN_ERR_INPUT &&
       strstr(err, "outside the vocabulary"), "a token >= V is refused: %s", err);
    ok(dtrain_gpt2_forward(m, inputs, targets, B, T + 1, &loss, err, sizeof err) == DTRAIN_ERR_INPUT,
       "a batch larger than the model's capacity is refused: %s", err);
    struct dtrain_gpt2 *m2 = NULL;
    ok(dtrain_gpt2_create(k, &tiny, 1, 7, &m2, err, sizeof err) == DTRAIN_ERR_INPUT && m2 == NULL,
       "T > max_seq_len is refused: %s", err);
    free(p); free(pf); free(g); free(g2); free(g_whole); free(g_split);
    dtrain_gpt2_destroy(m);
}

/* ------------------------------------------------------------------ tensor parallel */

/* Two ranks, each on its own thread and kernels instance; the hook sums the
 * two buffers in a fixed order so both ranks get identical bits. */
struct tp_group {
    pthread_barrier_t barrier;
    float *bufs[2];
};

struct tp_rank_ctx {
    struct tp_group *group;
    int rank;
};

static enum dtrain_status tp_allreduce(void *p, float *buf, size_t n, char *err, size_t errlen)
{
    struct tp_rank_ctx *r = p;
    (void)err; (void)errlen;
    float *sum = malloc(n * sizeof(float));
    if (sum == NULL)
        return DTRAIN_ERR_SYSTEM;
    r->group->bufs[r->rank] = buf;
    pthread_barrier_wait(&r->group->barrier);
    for (size_t i = 0; i < n; i++)
        sum[i] = r->group->bufs[0][i] + r->group->bufs[1][i];
    pthread_barrier_wait(&r->group->barrier);
    memcpy(buf, sum, n * sizeof(float));
    free(sum);
    return DTRAIN_OK;
}

/* One block's tensors in host memory, full or one rank's slice. */
struct host_block {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
#define BLOCK_TENSORS 12

static float **tensors(struct host_block *h) { return &h->ln1w; }

static void block_sizes(int C, int CL, int F, size_t s[BLOCK_TENSORS])
{
    size_t sz[BLOCK_TENSORS] = {C, C, (size_t)3 * CL * C, (size_t)3 * CL, (size_t)C * CL, C, C, C,
                                (size_t)F * C, F, (size_t)C * F, C};
    memcpy(s, sz, sizeof sz);
}

/* Everything a block run needs on one kernels instance. */
struct block_run {
    struct dtrain_kernels *k;
    struct dtrain_block_shape s;
    float *dev[BLOCK_TENSORS], *grad[BLOCK_TENSORS];
    struct dtrain_block_acts a;
    struct dtrain_block_scratch sc;
    float *x, *y, *dres;
    struct dtrain_tp_hook hook;
    struct tp_rank_ctx rank;
    int rc;
    char err[256];
};

static float *dzeros(struct dtrain_kernels *k, size_t n)
{
    float *p = dtrain_k_alloc(k, n * sizeof(float));
    if (p == NULL)
        abort();
    return p;
}

static void block_run_setup(struct block_run *r, struct host_block *h, const float *x,
                            const float *dy)
{
    const struct dtrain_block_shape *s = &r->s;
    size_t N = (size_t)s->B * s->T, C = s->C, CL = (size_t)s->NH * s->HS, F = s->F;
    size_t sizes[BLOCK_TENSORS];
    block_sizes((int)C, (int)CL, (int)F, sizes);
    for (int i = 0; i < BLOCK_TENSORS; i++) {
        r->dev[i] = dzeros(r->k, sizes[i]);
        dtrain_k_upload(r->k, r->dev[i], tensors(h)[i], sizes[i] * sizeof(float));
        r->grad[i] = dzeros(r->k, sizes[i]);
    }
    r->a = (struct dtrain_block_acts){dtrain_kernels_act_dtype(r->k), dzeros(r->k, N * C), dzeros(r->k, N),
                                      dzeros(r->k, N),
                                      dzeros(r->k, N * 3 * CL), dzeros(r->k, N * CL),
                                      dzeros(r->k, (size_t)s->B * s->NH * s->T * s->T),
                                      dzeros(r->k, N * C), dzeros(r->k, N * C), dzeros(r->k, N),
                                      dzeros(r->k, N), dzeros(r->k, N * F), dzeros(r->k, N * F), NULL, NULL};
    r->sc = (struct dtrain_block_scratch){dzeros(r->k, N * C), dzeros(r->k, N * 3 * CL),
                                          dzeros(r->k, N * CL), dzeros(r->k, N * F),
                                          dzeros(r->k, dtrain_k_attention_scratch(r->k, s->B, s->T,
                                                                                  s->NH, s->NH, s->HS))};
    r->x = dzeros(r->k, N * C);
    r->y = dzeros(r->k, N * C);
    r->dres = dzeros(r->k, N * C);
    dtrain_k_upload(r->k, r->x, x, N * C * sizeof(float));
    dtrain_k_upload(r->k, r->dres, dy, N * C * sizeof(float));
}

static void block_run_free(struct block_run *r)
{
    for (int i = 0; i < BLOCK_TENSORS; i++) {
        dtrain_k_free(r->k, r->dev[i]);
        dtrain_k_free(r->k, r->grad[i]);
    }
    void *acts[12] = {r->a.ln1, r->a.ln1_mean, r->a.ln1_rstd, r->a.qkv, r->a.atty, r->a.att,
                      r->a.res2, r->a.ln2, r->a.ln2_mean, r->a.ln2_rstd, r->a.fch, r->a.fch_gelu};
    for (int i = 0; i < 12; i++)
        dtrain_k_free(r->k, acts[i]);
    dtrain_k_free(r->k, r->sc.dln); dtrain_k_free(r->k, r->sc.dqkv);
    dtrain_k_free(r->k, r->sc.datty); dtrain_k_free(r->k, r->sc.dfc); dtrain_k_free(r->k, r->sc.att);
    dtrain_k_free(r->k, r->x); dtrain_k_free(r->k, r->y); dtrain_k_free(r->k, r->dres);
}

static void *block_run_main(void *p)
{
    struct block_run *r = p;
    struct dtrain_block_weights w = {r->dev[0], r->dev[1], r->dev[2], r->dev[3], r->dev[4], r->dev[5],
                                     r->dev[6], r->dev[7], r->dev[8], r->dev[9], r->dev[10], r->dev[11], NULL, NULL};
    struct dtrain_block_grads g = {r->grad[0], r->grad[1], r->grad[2], r->grad[3], r->grad[4], r->grad[5],
                                   r->grad[6], r->grad[7], r->grad[8], r->grad[9], r->grad[10], r->grad[11]};
    const struct dtrain_tp_hook *hook = r->hook.allreduce_sum ? &r->hook : NULL;
    r->rc = dtrain_block_forward(r->k, &r->s, &w, &r->a, r->x, r->y, hook, r->err, sizeof r->err);
    if (r->rc == DTRAIN_OK)
        r->rc = dtrain_block_backward(r->k, &r->s, &w, &g, &r->a, &r->sc, r->x, r->dres, hook,
                                      r->err, sizeof r->err);
    return NULL;
}

/* Rows [r0, r0+rows) of a (.., cols) matrix into dst. */
static void copy_rows(float *dst, const float *src, size_t r0, size_t rows, size_t cols)
{
    memcpy(dst, src + r0 * cols, rows * cols * sizeof(float));
}

/* Columns [c0, c0+cols) of a (rows, width) matrix into dst (rows, cols). */
static void copy_cols(float *dst, const float *src, size_t rows, size_t width, size_t c0, size_t cols)
{
    for (size_t i = 0; i < rows; i++)
        memcpy(dst + i * cols, src + i * width + c0, cols * sizeof(float));
}

/* Rank r's slice: heads [r*NH/2, ...), MLP columns [r*F/2, ...). The QKV
 * rows of a slice come from each of the q, k and v blocks. */
static void slice_block(struct host_block *out, const struct host_block *full, int r, int C, int CL, int F)
{
    size_t sizes[BLOCK_TENSORS];
    block_sizes(C, CL, F, sizes);
    for (int i = 0; i < BLOCK_TENSORS; i++)
        tensors(out)[i] = xmalloc(sizes[i] * sizeof(float));
    memcpy(out->ln1w, full->ln1w, C * sizeof(float));
    memcpy(out->ln1b, full->ln1b, C * sizeof(float));
    memcpy(out->ln2w, full->ln2w, C * sizeof(float));
    memcpy(out->ln2b, full->ln2b, C * sizeof(float));
    memcpy(out->attprojb, full->attprojb, C * sizeof(float));
    memcpy(out->fcprojb, full->fcprojb, C * sizeof(float));
    for (int part = 0; part < 3; part++) { /* q, k, v */
        copy_rows(out->qkvw + (size_t)part * CL * C, full->qkvw, (size_t)part * C + (size_t)r * CL, CL, C);
        copy_rows(out->qkvb + (size_t)part * CL, full->qkvb, (size_t)part * C + (size_t)r * CL, CL, 1);
    }
    copy_cols(out->attprojw, full->attprojw, C, C, (size_t)r * CL, CL);
    copy_rows(out->fcw, full->fcw, (size_t)r * F, F, C);
    copy_rows(out->fcb, full->fcb, (size_t)r * F, F, 1);
    copy_cols(out->fcprojw, full->fcprojw, C, 4 * (size_t)C, (size_t)r * F, F);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static float *download(struct dtrain_kernels *k, const float *dev, size_t n)
{
    float *h = xmalloc(n * sizeof(float));
    dtrain_k_download(k, h, dev, n * sizeof(float));
    return h;
}

static void test_tensor_parallel(void)
{
    const int B = 2, T = 4, C = 16, NH = 4, HS = 4, F = 4 * C, N = B * T;
    char err[256] = "";
    struct dtrain_kernels_options one = {.threads = 1};
    struct host_block full;
    size_t sizes[BLOCK_TENSORS];
    block_sizes(C, C, F, sizes);
    double *tmp = xmalloc((size_t)F * C * sizeof(double));
    for (int i = 0; i < BLOCK_TENSORS; i++) {
        tensors(&full)[i] = xmalloc(sizes[i] * sizeof(float));
        fill_uniform(tmp, sizes[i], 200 + (uint64_t)i, 0.3);
        for (size_t j = 0; j < sizes[i]; j++)
            tensors(&full)[i][j] = (float)tmp[j] + ((i == 0 || i == 6) ? 1.0f : 0.0f);
    }
    float *x = xmalloc((size_t)N * C * sizeof(float)), *dy = xmalloc((size_t)N * C * sizeof(float));
    fill_uniform(tmp, (size_t)N * C, 220, 1.0);
    for (size_t j = 0; j < (size_t)N * C; j++)
        x[j] = (float)tmp[j];
    fill_uniform(tmp, (size_t)N * C, 221, 1.0);
    for (size_t j = 0; j < (size_t)N * C; j++)
        dy[j] = (float)tmp[j];

    struct block_run whole = {.s = {B, T, C, NH, HS, F, 1}};
    struct block_run ranks[2] = {{.s = {B, T, C, NH / 2, HS, F / 2, 1}},
                                 {.s = {B, T, C, NH / 2, HS, F / 2, 0}}};
    struct host_block part[2];
    struct tp_group group;
    pthread_barrier_init(&group.barrier, NULL, 2);
    if (dtrain_kernels_create("cpu", &one, &whole.k, err, sizeof err) != 0 ||
        dtrain_kernels_create("cpu", &one, &ranks[0].k, err, sizeof err) != 0 ||
        dtrain_kernels_create("cpu", &one, &ranks[1].k, err, sizeof err) != 0)
        abort();
    block_run_setup(&whole, &full, x, dy);
    block_run_main(&whole);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        slice_block(&part[r], &full, r, C, C / 2, F / 2);
        block_run_setup(&ranks[r], &part[r], x, dy);
        ranks[r].rank = (struct tp_rank_ctx){&group, r};
        ranks[r].hook = (struct dtrain_tp_hook){.allreduce_sum = tp_allreduce, .ctx = &ranks[r].rank};
        pthread_create(&th[r], NULL, block_run_main, &ranks[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    ok(whole.rc == DTRAIN_OK && ranks[0].rc == DTRAIN_OK && ranks[1].rc == DTRAIN_OK,
       "one block on one rank and split over two TP ranks runs");

    size_t NC = (size_t)N * C;
    float *y = download(whole.k, whole.y, NC), *dx = download(whole.k, whole.dres, NC);
    float *y0 = download(ranks[0].k, ranks[0].y, NC), *y1 = download(ranks[1].k, ranks[1].y, NC);
    float *dx0 = download(ranks[0].k, ranks[0].dres, NC), *dx1 = download(ranks[1].k, ranks[1].dres, NC);
    ok(max_diff(y, y0, NC) < 1e-5 && memcmp(y0, y1, NC * sizeof(float)) == 0,
       "TP forward: both ranks hold the whole block's output (max diff %.1e)", max_diff(y, y0, NC));
    ok(max_diff(dx, dx0, NC) < 1e-5 && memcmp(dx0, dx1, NC * sizeof(float)) == 0,
       "TP backward: both ranks hold the whole block's input gradient (max diff %.1e)", max_diff(dx, dx0, NC));

    /* every rank's parameter gradients are its slice of the whole block's */
    double worst = 0;
    struct host_block gfull, gslice;
    size_t local[BLOCK_TENSORS];
    block_sizes(C, C / 2, F / 2, local);
    for (int i = 0; i < BLOCK_TENSORS; i++)
        tensors(&gfull)[i] = download(whole.k, whole.grad[i], sizes[i]);
    for (int r = 0; r < 2; r++) {
        slice_block(&gslice, &gfull, r, C, C / 2, F / 2);
        for (int i = 0; i < BLOCK_TENSORS; i++) {
            float *got = download(ranks[r].k, ranks[r].grad[i], local[i]);
            worst = fmax(worst, max_diff(got, tensors(&gslice)[i], local[i]));
            free(got);
            free(tensors(&gslice)[i]);
        }
    }
    for (int i = 0; i < BLOCK_TENSORS; i++)
        free(tensors(&gfull)[i]);
    ok(worst < 1e-5, "TP backward: each rank's weight gradients are its slice of the whole (max diff %.1e)",
       worst);

    free(y); free(dx); free(y0); free(y1); free(dx0); free(dx1);
    block_run_free(&whole);
    for (int r = 0; r < 2; r++) {
        block_run_free(&ranks[r]);
        dtrain_kernels_destroy(ranks[r].k);
        for (int i = 0; i < BLOCK_TENSORS; i++)
            free(tensors(&part[r])[i]);
    }
    dtrain_kernels_destroy(whole.k);
    for (int i = 0; i < BLOCK_TENSORS; i++)
        free(tensors(&full)[i]);
    pthread_barrier_destroy(&group.barrier);
    free(x); free(dy); free(tmp);
}

int main(void)
{
    char err[256] = "";
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options opt = {.threads = 2};
    test_layout();
    if (!ok(dtrain_kernels_create("cpu", &opt, &k, err, sizeof err) == 0, "create cpu kernels%s%s",
            *err ? ": " : "", err))
        return tap_done();
    test_gradcheck(k);
    dtrain_kernels_destroy(k);
    test_tensor_parallel();
    return tap_done();
}
