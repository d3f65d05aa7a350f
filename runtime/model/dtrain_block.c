/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One GPT-2 transformer block, forward and backward; see dtrain_gpt2.h.
 *
 *   ln1  = LN(x)                       (N,C)
 *   qkv  = ln1 @ Wqkv^T + bqkv         (N,3*NH*HS)  column-parallel on TP
 *   atty = attention(qkv)              (N,NH*HS)
 *   res2 = x + atty @ Wo^T + bo        (N,C)        row-parallel: all-reduce
 *   ln2  = LN(res2)                    (N,C)
 *   fch  = ln2 @ Wfc^T + bfc           (N,F)        column-parallel
 *   y    = res2 + gelu(fch) @ Wp^T + bp (N,C)       row-parallel: all-reduce
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
#include "dtrain_gpt2.h"

/* Typed views: an inner activation (of the acts' type), an fp32 array. */
#define ACT(a, p) dtrain_tensor_of((a)->act, (p))
#define F32(p) dtrain_tensor_f32(p)

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

int dtrain_block_forward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                         const struct dtrain_block_weights *w, const struct dtrain_block_acts *a,
                         const float *x, float *y, const struct dtrain_tp_hook *tp,
                         char *err, size_t errlen)
{
    int sp = sequence_parallel(tp), N = s->B * s->T, C = s->C, CL = s->NH * s->HS, F = s->F;
    int rows = sp ? N / tp->size : N; /* of the residual stream held here */
    size_t RC = (size_t)rows * C;
    const float *in;
    float *part;
    int rc;

    /* attention branch */
    dtrain_k_layernorm_forward(k, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, rows, C);
    if ((rc = gather_rows(tp, a->ln1, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_forward(k, ACT(a, a->qkv), F32(in), w->qkvw, w->qkvb, N, C, 3 * CL);
    dtrain_k_attention_forward(k, ACT(a, a->atty), a->att, ACT(a, a->qkv), s->B, s->T, s->NH, s->NH, s->HS);
    part = sp ? a->seq_out : a->res2;
    dtrain_k_matmul_forward(k, F32(part), ACT(a, a->atty), w->attprojw, s->add_row_bias ? w->attprojb : NULL, N,
                            CL, C);
    if ((rc = sum_partials(tp, part, a->res2, RC, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(k, a->res2, a->res2, x, RC);

    /* MLP branch */
    dtrain_k_layernorm_forward(k, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, rows, C);
    if ((rc = gather_rows(tp, a->ln2, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_forward(k, ACT(a, a->fch), F32(in), w->fcw, w->fcb, N, C, F);
    dtrain_k_gelu_forward(k, ACT(a, a->fch_gelu), ACT(a, a->fch), (size_t)N * F);
    part = sp ? a->seq_out : y;
    dtrain_k_matmul_forward(k, F32(part), ACT(a, a->fch_gelu), w->fcprojw, s->add_row_bias ? w->fcprojb : NULL, N,
                            F, C);
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
    int rows = sp ? N / tp->size : N;
    size_t RC = (size_t)rows * C;
    float *dln = sp ? a->seq_out : sc->dln; /* the summed input gradient of the LN output, rows held here */
    const float *dy, *in;
    int rc;

    /* MLP branch: dres holds dy = d(res2) through the residual = d(fcproj). */
    if ((rc = gather_rows(tp, dres, a->seq_out, RC, &dy, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, ACT(a, sc->dfc), g->fcprojw, g->fcprojb, F32(dy), ACT(a, a->fch_gelu), w->fcprojw,
                             N, F, C);
    dtrain_k_gelu_backward(k, ACT(a, sc->dfc), ACT(a, a->fch), ACT(a, sc->dfc), (size_t)N * F);
    if ((rc = gather_rows(tp, a->ln2, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, F32(sc->dln), g->fcw, g->fcb, ACT(a, sc->dfc), F32(in), w->fcw, N, C, F);
    if ((rc = sum_partials(tp, sc->dln, dln, RC, err, errlen)) != DTRAIN_OK)
        return rc;
    /* dres += LN2 backward: now d(res2) */
    dtrain_k_layernorm_backward(k, dres, g->ln2w, g->ln2b, dln, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, rows, C);

    /* attention branch: d(attproj) = d(res2) */
    if ((rc = gather_rows(tp, dres, a->seq_out, RC, &dy, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, ACT(a, sc->datty), g->attprojw, g->attprojb, F32(dy), ACT(a, a->atty),
                             w->attprojw, N, CL, C);
    dtrain_k_attention_backward(k, ACT(a, sc->dqkv), sc->att, ACT(a, sc->datty), ACT(a, a->qkv), ACT(a, a->atty),
                                a->att, s->B, s->T, s->NH, s->NH, s->HS);
    if ((rc = gather_rows(tp, a->ln1, a->seq_in, RC, &in, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, F32(sc->dln), g->qkvw, g->qkvb, ACT(a, sc->dqkv), F32(in), w->qkvw, N, C, 3 * CL);
    if ((rc = sum_partials(tp, sc->dln, dln, RC, err, errlen)) != DTRAIN_OK)
        return rc;
    /* dres += LN1 backward: now dx */
    dtrain_k_layernorm_backward(k, dres, g->ln1w, g->ln1b, dln, x, w->ln1w, a->ln1_mean, a->ln1_rstd, rows, C);
    return DTRAIN_OK;
}
