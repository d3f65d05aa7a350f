/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One transformer block, forward and backward, of either family; see
 * dtrain_model.h.
 *
 *   GPT-2                                  Llama
 *   ln1  = LN(x)                (N,C)      RMSNorm(x)
 *   qkv  = ln1 @ Wqkv^T + bqkv  (N,QKV)    no bias; then RoPE on q and k    column-parallel on TP
 *   atty = attention(qkv)       (N,NH*HS)  grouped-query (KVH kv heads)
 *   res2 = x + atty @ Wo^T + bo (N,C)      no bias                          row-parallel: all-reduce
 *   ln2  = LN(res2)             (N,C)      RMSNorm(res2)
 *   fch  = ln2 @ Wfc^T + bfc    (N,F)      (N,2F) gate and up, no bias      column-parallel
 *   act  = gelu(fch)            (N,F)      silu(gate) * up
 *   y    = res2 + act @ Wp^T + bp (N,C)    no bias                          row-parallel: all-reduce
 *
 * The two families differ only in the four helpers below (norm, bias,
 * activation, rotary embedding): one block, so that every parallelism and
 * recomputation mode serves both.
 *
 * On tensor-parallel ranks the two projections give partial sums, summed by
 * the hook before the residual add (forward), and the two column-parallel
 * matmuls give partial input gradients, summed before the layer norms'
 * backward.  On one rank the hook is absent and the code is the plain block.
 *
 * Sequence parallel (dtrain_tp_hook): x, y, res2, ln1, ln2 and the norm
 * statistics are the rank's Nl = N/T rows; the LN output is all-gathered
 * into seq_in (N,C) before each column-parallel matmul, the row-parallel
 * partial sums (N,C in seq_out) reduce-scattered into the rank's rows
 * before the residual add; backward gathers the LN outputs again (only the
 * local rows are kept, as in Megatron-LM) and gathers the residual gradient
 * before each row-parallel matmul's backward, reduce-scatters the input
 * gradient of each column-parallel one. */
#include "dtrain_model.h"

/* Typed views: an inner activation (of the acts' type), an fp32 array. */
#define ACT(a, p) dtrain_tensor_of((a)->act, (p))
#define F32(p) dtrain_tensor_f32(p)

static int llama(const struct dtrain_block_shape *s)
{
    return s->family == DTRAIN_FAMILY_LLAMA;
}

static int kv_heads(const struct dtrain_block_shape *s)
{
    return s->KVH > 0 ? s->KVH : s->NH;
}

/* The family's norm: GPT-2's LayerNorm (weight, bias, mean and rstd kept),
 * Llama's RMSNorm (weight, rstd). */
static void norm_forward(struct dtrain_kernels *k, const struct dtrain_block_shape *s, float *out, float *mean,
                         float *rstd, const float *inp, const float *weight, const float *bias, int rows, int C)
{
    if (llama(s))
        dtrain_k_rmsnorm_forward(k, out, rstd, inp, weight, s->norm_eps, rows, C);
    else
        dtrain_k_layernorm_forward(k, out, mean, rstd, inp, weight, bias, rows, C);
}

static void norm_backward(struct dtrain_kernels *k, const struct dtrain_block_shape *s, float *dinp, float *dweight,
                          float *dbias, const float *dout, const float *inp, const float *weight, const float *mean,
                          const float *rstd, int rows, int C)
{
    if (llama(s))
        dtrain_k_rmsnorm_backward(k, dinp, dweight, dout, inp, weight, rstd, rows, C);
    else
        dtrain_k_layernorm_backward(k, dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, C);
}

void dtrain_model_norm_forward(struct dtrain_kernels *k, const struct dtrain_model_config *c, float *out,
                               float *mean, float *rstd, const float *inp, const float *weight, const float *bias,
                               int N, int C)
{
    struct dtrain_block_shape s = {.family = c->family, .norm_eps = c->norm_eps};
    norm_forward(k, &s, out, mean, rstd, inp, weight, bias, N, C);
}

void dtrain_model_norm_backward(struct dtrain_kernels *k, const struct dtrain_model_config *c, float *dinp,
                                float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, const float *mean, const float *rstd, int N, int C)
{
    struct dtrain_block_shape s = {.family = c->family, .norm_eps = c->norm_eps};
    norm_backward(k, &s, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

/* A bias (or its gradient) of the family: Llama has none. */
#define BIAS(s, b) (llama(s) ? NULL : (b))

/* The MLP's activation: fch (N, F; Llama 2F) -> fch_gelu (N,F). */
static void act_forward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                        const struct dtrain_block_acts *a, int N)
{
    if (llama(s))
        dtrain_k_swiglu_forward(k, ACT(a, a->fch_gelu), ACT(a, a->fch), N, s->F);
    else
        dtrain_k_gelu_forward(k, ACT(a, a->fch_gelu), ACT(a, a->fch), (size_t)N * s->F);
}

/* Where the down projection's input gradient goes (N,F): dfc itself for
 * GELU (its backward runs in place), past SwiGLU's (N,2F) input gradient
 * for Llama (the scratch has room: dtrain_block_scratch). */
static void *act_grad(const struct dtrain_block_shape *s, const struct dtrain_block_acts *a,
                      const struct dtrain_block_scratch *sc, int N)
{
    return llama(s) ? (char *)sc->dfc + (size_t)N * 2 * s->F * dtrain_dtype_size(a->act) : sc->dfc;
}

static void act_backward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                         const struct dtrain_block_acts *a, const struct dtrain_block_scratch *sc, int N)
{
    if (llama(s))
        dtrain_k_swiglu_backward(k, ACT(a, sc->dfc), ACT(a, a->fch), ACT(a, act_grad(s, a, sc, N)), N, s->F);
    else
        dtrain_k_gelu_backward(k, ACT(a, sc->dfc), ACT(a, a->fch), ACT(a, sc->dfc), (size_t)N * s->F);
}

/* Llama: rotary position embeddings on q and k (in place), after the QKV
 * matmul; backward the inverse rotation of their gradients. */
static void rope_forward(struct dtrain_kernels *k, const struct dtrain_block_shape *s, struct dtrain_tensor qkv)
{
    if (llama(s))
        dtrain_k_rope_forward(k, qkv, s->rope_inv_freq, s->B, s->T, s->NH, kv_heads(s), s->HS);
}

static void rope_backward(struct dtrain_kernels *k, const struct dtrain_block_shape *s, struct dtrain_tensor dqkv)
{
    if (llama(s))
        dtrain_k_rope_backward(k, dqkv, s->rope_inv_freq, s->B, s->T, s->NH, kv_heads(s), s->HS);
}

static int sequence_parallel(const struct dtrain_tp_hook *tp)
{
    return tp != NULL && tp->reduce_scatter != NULL && tp->all_gather != NULL;
}

/* The input of a column-parallel matmul (f forward) or the output gradient
 * of a row-parallel one (g backward): rows (n floats) as they are, or,
 * sequence parallel, every rank's rows gathered into full. */
static int gather_rows(const struct dtrain_tp_hook *tp, const float *rows, float *full, size_t n,
                       const float **out, char *err, size_t errlen)
{
    *out = rows;
    if (!sequence_parallel(tp))
        return DTRAIN_OK;
    *out = full;
    return tp->all_gather(tp->ctx, rows, full, n, err, errlen);
}

/* The TP ranks' partial sums (N,C) of part summed (g forward, f
 * backward): in place with the all-reduce (out is part, n = N*C), or,
 * sequence parallel, this rank's n floats of rows into out
 * (reduce-scatter).  No-op on one rank. */
static int sum_partials(const struct dtrain_tp_hook *tp, const float *part, float *out, size_t n, char *err,
                        size_t errlen)
{
    if (sequence_parallel(tp))
        return tp->reduce_scatter(tp->ctx, part, out, n, err, errlen);
    if (tp == NULL || tp->allreduce_sum == NULL)
        return DTRAIN_OK;
    return tp->allreduce_sum(tp->ctx, out, n, err, errlen);
}

/* LoRA on linear lin (dtrain_block_lora): forward adds scaling * (x A^T)
 * B^T to its columns of y (N rows of ldy); fp32 operands (the trainer
 * refuses LoRA in mixed precision). */
static void lora_forward(struct dtrain_kernels *k, const struct dtrain_block_lora *l, enum dtrain_block_linear lin,
                         const float *x, float *y, int ldy, int N)
{
    for (int i = 0; l != NULL && i < l->n; i++) {
        const struct dtrain_block_adapter *d = &l->ad[i];
        if (d->linear != lin)
            continue;
        dtrain_k_matmul_forward(k, F32(l->h), F32(x), d->A, NULL, N, d->in, l->rank);
        dtrain_k_matmul_forward(k, F32(l->u), F32(l->h), d->B, NULL, N, l->rank, d->cols);
        dtrain_k_axpby_strided(k, y + d->col0, ldy, l->u, d->cols, l->scaling, 1.0f, N, d->cols);
    }
}

/* Backward of the adapters of lin, after the base's input gradient is in dx
 * (N, in): with dyc its columns of dy (N rows of ldy) and h = x A^T again,
 * dB += dyc^T (s h), g = s dyc B, dA += g^T x, dx += g A. */
static void lora_backward(struct dtrain_kernels *k, const struct dtrain_block_lora *l, enum dtrain_block_linear lin,
                          const float *x, const float *dy, int ldy, float *dx, int N)
{
    for (int i = 0; l != NULL && i < l->n; i++) {
        const struct dtrain_block_adapter *d = &l->ad[i];
        if (d->linear != lin)
            continue;
        const float *dyc = dy + d->col0;
        if (d->col0 != 0 || d->cols != ldy) { /* a column block: made contiguous */
            dtrain_k_axpby_strided(k, l->u, d->cols, dyc, ldy, 1.0f, 0.0f, N, d->cols);
            dyc = l->u;
        }
        dtrain_k_matmul_forward(k, F32(l->h), F32(x), d->A, NULL, N, d->in, l->rank);
        dtrain_k_axpby_strided(k, l->h, l->rank, l->h, l->rank, l->scaling, 0.0f, N, l->rank);
        dtrain_k_matmul_backward(k, F32(l->g), d->dB, NULL, F32(dyc), F32(l->h), d->B, N, l->rank, d->cols);
        dtrain_k_axpby_strided(k, l->g, l->rank, l->g, l->rank, l->scaling, 0.0f, N, l->rank);
        dtrain_k_matmul_backward(k, F32(l->u), d->dA, NULL, F32(l->g), F32(x), d->A, N, d->in, l->rank);
        dtrain_k_axpby_strided(k, dx, d->in, l->u, d->in, 1.0f, 1.0f, N, d->in);
    }
}

/* The frozen base's matmul of linear lin: fp32 weights, or NF4 (w->nf4)
 * dequantised on the fly (QLoRA's base). */
static void base_forward(struct dtrain_kernels *k, const struct dtrain_block_weights *w, enum dtrain_block_linear lin,
                         struct dtrain_tensor out, struct dtrain_tensor inp, const float *weight, const float *bias,
                         int N, int IC, int OC)
{
    if (w->nf4 != NULL)
        dtrain_k_nf4_matmul_forward(k, out, inp, w->nf4[lin], bias, N);
    else
        dtrain_k_matmul_forward(k, out, inp, weight, bias, N, IC, OC);
}

/* Its backward: with NF4 the input gradient only (the base is frozen, its
 * weight and bias gradients NULL). */
static void base_backward(struct dtrain_kernels *k, const struct dtrain_block_weights *w, enum dtrain_block_linear lin,
                          struct dtrain_tensor dinp, float *dweight, float *dbias, struct dtrain_tensor dout,
                          struct dtrain_tensor inp, const float *weight, int N, int IC, int OC)
{
    if (w->nf4 != NULL)
        dtrain_k_nf4_matmul_backward(k, dinp, dout, w->nf4[lin], N);
    else
        dtrain_k_matmul_backward(k, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

/* The fp32 view of an inner activation (LoRA runs in fp32 only). */
static float *act_f32(void *p) { return p; }

int dtrain_block_forward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                         const struct dtrain_block_weights *w, const struct dtrain_block_acts *a,
                         const float *x, float *y, const struct dtrain_tp_hook *tp,
                         char *err, size_t errlen)
{
    int sp = sequence_parallel(tp), N = s->B * s->T, C = s->C, CL = s->NH * s->HS, F = s->F;
    int QKV = (s->NH + 2 * kv_heads(s)) * s->HS, FCR = llama(s) ? 2 * F : F;
    int rows = sp ? N / tp->size : N; /* of the residual stream held here */
    size_t RC = (size_t)rows * C;
    const float *in;
    float *part;
    int rc;

    /* attention branch */
    norm_forward(k, s, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, rows, C);
    if ((rc = gather_rows(tp, a->ln1, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    base_forward(k, w, DTRAIN_LINEAR_QKV, ACT(a, a->qkv), F32(in), w->qkvw, BIAS(s, w->qkvb), N, C, QKV);
    lora_forward(k, w->lora, DTRAIN_LINEAR_QKV, in, act_f32(a->qkv), QKV, N);
    rope_forward(k, s, ACT(a, a->qkv));
    dtrain_k_attention_forward(k, ACT(a, a->atty), a->att, ACT(a, a->qkv), s->B, s->T, s->NH, kv_heads(s), s->HS);
    part = sp ? a->seq_out : a->res2;
    base_forward(k, w, DTRAIN_LINEAR_ATTPROJ, F32(part), ACT(a, a->atty), w->attprojw,
                 s->add_row_bias ? BIAS(s, w->attprojb) : NULL, N, CL, C);
    lora_forward(k, w->lora, DTRAIN_LINEAR_ATTPROJ, act_f32(a->atty), part, C, N);
    if ((rc = sum_partials(tp, part, a->res2, RC, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(k, a->res2, a->res2, x, RC);

    /* MLP branch */
    norm_forward(k, s, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, rows, C);
    if ((rc = gather_rows(tp, a->ln2, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    base_forward(k, w, DTRAIN_LINEAR_FC, ACT(a, a->fch), F32(in), w->fcw, BIAS(s, w->fcb), N, C, FCR);
    lora_forward(k, w->lora, DTRAIN_LINEAR_FC, in, act_f32(a->fch), FCR, N);
    act_forward(k, s, a, N);
    part = sp ? a->seq_out : y;
    base_forward(k, w, DTRAIN_LINEAR_FCPROJ, F32(part), ACT(a, a->fch_gelu), w->fcprojw,
                 s->add_row_bias ? BIAS(s, w->fcprojb) : NULL, N, F, C);
    lora_forward(k, w->lora, DTRAIN_LINEAR_FCPROJ, act_f32(a->fch_gelu), part, C, N);
    if ((rc = sum_partials(tp, part, y, RC, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(k, y, y, a->res2, RC);
    return DTRAIN_OK;
}

int dtrain_block_backward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                          const struct dtrain_block_weights *w, const struct dtrain_block_grads *g,
                          const struct dtrain_block_acts *a, const struct dtrain_block_scratch *sc,
                          const float *x, float *dres, const struct dtrain_tp_hook *tp,
                          char *err, size_t errlen)
{
    int sp = sequence_parallel(tp), N = s->B * s->T, C = s->C, CL = s->NH * s->HS, F = s->F;
    int QKV = (s->NH + 2 * kv_heads(s)) * s->HS, FCR = llama(s) ? 2 * F : F;
    int rows = sp ? N / tp->size : N;
    size_t RC = (size_t)rows * C;
    float *dln = sp ? a->seq_out : sc->dln; /* the summed input gradient of the LN output, rows held here */
    const float *dy, *in;
    int rc;

    /* MLP branch: dres holds dy = d(res2) through the residual = d(fcproj). */
    if ((rc = gather_rows(tp, dres, a->seq_out, RC, &dy, err, errlen)) != DTRAIN_OK)
        return rc;
    base_backward(k, w, DTRAIN_LINEAR_FCPROJ, ACT(a, act_grad(s, a, sc, N)), g->fcprojw, BIAS(s, g->fcprojb),
                  F32(dy), ACT(a, a->fch_gelu), w->fcprojw, N, F, C);
    lora_backward(k, w->lora, DTRAIN_LINEAR_FCPROJ, act_f32(a->fch_gelu), dy, C, act_f32(act_grad(s, a, sc, N)), N);
    act_backward(k, s, a, sc, N);
    if ((rc = gather_rows(tp, a->ln2, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    base_backward(k, w, DTRAIN_LINEAR_FC, F32(sc->dln), g->fcw, BIAS(s, g->fcb), ACT(a, sc->dfc), F32(in), w->fcw,
                  N, C, FCR);
    lora_backward(k, w->lora, DTRAIN_LINEAR_FC, in, act_f32(sc->dfc), FCR, sc->dln, N);
    if ((rc = sum_partials(tp, sc->dln, dln, RC, err, errlen)) != DTRAIN_OK)
        return rc;
    /* dres += LN2 backward: now d(res2) */
    norm_backward(k, s, dres, g->ln2w, g->ln2b, dln, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, rows, C);

    /* attention branch: d(attproj) = d(res2) */
    if ((rc = gather_rows(tp, dres, a->seq_out, RC, &dy, err, errlen)) != DTRAIN_OK)
        return rc;
    base_backward(k, w, DTRAIN_LINEAR_ATTPROJ, ACT(a, sc->datty), g->attprojw, BIAS(s, g->attprojb), F32(dy),
                  ACT(a, a->atty), w->attprojw, N, CL, C);
    lora_backward(k, w->lora, DTRAIN_LINEAR_ATTPROJ, act_f32(a->atty), dy, C, act_f32(sc->datty), N);
    dtrain_k_attention_backward(k, ACT(a, sc->dqkv), sc->att, ACT(a, sc->datty), ACT(a, a->qkv), ACT(a, a->atty),
                                a->att, s->B, s->T, s->NH, kv_heads(s), s->HS);
    if ((rc = gather_rows(tp, a->ln1, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    rope_backward(k, s, ACT(a, sc->dqkv));
    base_backward(k, w, DTRAIN_LINEAR_QKV, F32(sc->dln), g->qkvw, BIAS(s, g->qkvb), ACT(a, sc->dqkv), F32(in),
                  w->qkvw, N, C, QKV);
    lora_backward(k, w->lora, DTRAIN_LINEAR_QKV, in, act_f32(sc->dqkv), QKV, sc->dln, N);
    if ((rc = sum_partials(tp, sc->dln, dln, RC, err, errlen)) != DTRAIN_OK)
        return rc;
    /* dres += LN1 backward: now dx */
    norm_backward(k, s, dres, g->ln1w, g->ln1b, dln, x, w->ln1w, a->ln1_mean, a->ln1_rstd, rows, C);
    return DTRAIN_OK;
}
