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

/* A hook's status as the block's. */
static int hook_rc(int rc)
{
    return rc == 0 ? DTRAIN_OK : rc < 0 ? rc : DTRAIN_ERR_SYSTEM; /* the hook's status passes through */
}

static int sequence_parallel(const struct dtrain_tp_hook *tp)
{
    return tp != NULL && tp->reduce_scatter != NULL && tp->all_gather != NULL;
}


static int tp_allreduce(const struct dtrain_tp_hook *tp, float *buf, size_t n,
                        char *err, size_t errlen)
{
    if (tp == NULL || tp->allreduce_sum == NULL)
        return DTRAIN_OK;
    return hook_rc(tp->allreduce_sum(tp->ctx, buf, n, err, errlen));
}

/* Sequence-parallel forward: x, y (Nl,C); see the header comment. */
static int block_forward_sp(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                            const struct dtrain_block_weights *w, const struct dtrain_block_acts *a,
                            const float *x, float *y, const struct dtrain_tp_hook *tp, char *err, size_t errlen)
{
    int N = s->B * s->T, C = s->C, CL = s->NH * s->HS, F = s->F, Nl = N / tp->size;
    size_t NlC = (size_t)Nl * C;
    int rc;

    /* attention branch: LN on the rank's rows, gathered for the QKV matmul */
    dtrain_k_layernorm_forward(k, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, Nl, C);
    if ((rc = hook_rc(tp->all_gather(tp->ctx, a->ln1, a->seq_in, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_forward(k, a->qkv, a->seq_in, w->qkvw, w->qkvb, N, C, 3 * CL);
    dtrain_k_attention_forward(k, a->atty, a->att, a->qkv, s->B, s->T, s->NH, s->HS);
    dtrain_k_matmul_forward(k, a->seq_out, a->atty, w->attprojw, s->add_row_bias ? w->attprojb : NULL, N, CL, C);
    if ((rc = hook_rc(tp->reduce_scatter(tp->ctx, a->seq_out, a->res2, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(k, a->res2, a->res2, x, NlC);

    /* MLP branch */
    dtrain_k_layernorm_forward(k, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, Nl, C);
    if ((rc = hook_rc(tp->all_gather(tp->ctx, a->ln2, a->seq_in, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_forward(k, a->fch, a->seq_in, w->fcw, w->fcb, N, C, F);
    dtrain_k_gelu_forward(k, a->fch_gelu, a->fch, (size_t)N * F);
    dtrain_k_matmul_forward(k, a->seq_out, a->fch_gelu, w->fcprojw, s->add_row_bias ? w->fcprojb : NULL, N, F, C);
    if ((rc = hook_rc(tp->reduce_scatter(tp->ctx, a->seq_out, y, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(k, y, y, a->res2, NlC);
    return DTRAIN_OK;
}

/* Sequence-parallel backward: dres (Nl,C) dy in, dx out. */
static int block_backward_sp(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                             const struct dtrain_block_weights *w, const struct dtrain_block_grads *g,
                             const struct dtrain_block_acts *a, const struct dtrain_block_scratch *sc,
                             const float *x, float *dres, const struct dtrain_tp_hook *tp, char *err, size_t errlen)
{
    int N = s->B * s->T, C = s->C, CL = s->NH * s->HS, F = s->F, Nl = N / tp->size;
    size_t NlC = (size_t)Nl * C;
    float *full = a->seq_out; /* the gathered residual gradient, then the rank's rows of dln */
    int rc;

    /* MLP branch: the whole d(fcproj) for the row-parallel matmul */
    if ((rc = hook_rc(tp->all_gather(tp->ctx, dres, full, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, sc->dfc, g->fcprojw, g->fcprojb, full, a->fch_gelu, w->fcprojw, N, F, C);
    dtrain_k_gelu_backward(k, sc->dfc, a->fch, sc->dfc, (size_t)N * F);
    if ((rc = hook_rc(tp->all_gather(tp->ctx, a->ln2, a->seq_in, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, sc->dln, g->fcw, g->fcb, sc->dfc, a->seq_in, w->fcw, N, C, F);
    if ((rc = hook_rc(tp->reduce_scatter(tp->ctx, sc->dln, full, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    /* dres += LN2 backward of the rank's rows: now d(res2) */
    dtrain_k_layernorm_backward(k, dres, g->ln2w, g->ln2b, full, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, Nl, C);

    /* attention branch */
    if ((rc = hook_rc(tp->all_gather(tp->ctx, dres, full, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, sc->datty, g->attprojw, g->attprojb, full, a->atty, w->attprojw, N, CL, C);
    dtrain_k_attention_backward(k, sc->dqkv, sc->att, sc->datty, a->qkv, a->att, s->B, s->T, s->NH, s->HS);
    if ((rc = hook_rc(tp->all_gather(tp->ctx, a->ln1, a->seq_in, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    dtrain_k_matmul_backward(k, sc->dln, g->qkvw, g->qkvb, sc->dqkv, a->seq_in, w->qkvw, N, C, 3 * CL);
    if ((rc = hook_rc(tp->reduce_scatter(tp->ctx, sc->dln, full, NlC, err, errlen))) != DTRAIN_OK)
        return rc;
    /* dres += LN1 backward: now dx */
    dtrain_k_layernorm_backward(k, dres, g->ln1w, g->ln1b, full, x, w->ln1w, a->ln1_mean, a->ln1_rstd, Nl, C);
    return DTRAIN_OK;
}

int dtrain_block_forward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                         const struct dtrain_block_weights *w, const struct dtrain_block_acts *a,
                         const float *x, float *y, const struct dtrain_tp_hook *tp,
                         char *err, size_t errlen)
{
    int N = s->B * s->T, C = s->C, CL = s->NH * s->HS, F = s->F;
    size_t NC = (size_t)N * C;
    int rc;
    if (sequence_parallel(tp))
        return block_forward_sp(k, s, w, a, x, y, tp, err, errlen);

    /* attention branch */
    dtrain_k_layernorm_forward(k, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, N, C);
    dtrain_k_matmul_forward(k, a->qkv, a->ln1, w->qkvw, w->qkvb, N, C, 3 * CL);
    dtrain_k_attention_forward(k, a->atty, a->att, a->qkv, s->B, s->T, s->NH, s->HS);
    dtrain_k_matmul_forward(k, a->res2, a->atty, w->attprojw,
                            s->add_row_bias ? w->attprojb : NULL, N, CL, C);
    if ((rc = tp_allreduce(tp, a->res2, NC, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(k, a->res2, a->res2, x, NC);

    /* MLP branch */
    dtrain_k_layernorm_forward(k, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, N, C);
    dtrain_k_matmul_forward(k, a->fch, a->ln2, w->fcw, w->fcb, N, C, F);
    dtrain_k_gelu_forward(k, a->fch_gelu, a->fch, (size_t)N * F);
    dtrain_k_matmul_forward(k, y, a->fch_gelu, w->fcprojw,
                            s->add_row_bias ? w->fcprojb : NULL, N, F, C);
    if ((rc = tp_allreduce(tp, y, NC, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_k_residual_forward(k, y, y, a->res2, NC);
    return DTRAIN_OK;
}

int dtrain_block_backward(struct dtrain_kernels *k, const struct dtrain_block_shape *s,
                          const struct dtrain_block_weights *w, const struct dtrain_block_grads *g,
                          const struct dtrain_block_acts *a, const struct dtrain_block_scratch *sc,
                          const float *x, float *dres, const struct dtrain_tp_hook *tp,
                          char *err, size_t errlen)
{
    int N = s->B * s->T, C = s->C, CL = s->NH * s->HS, F = s->F;
    size_t NC = (size_t)N * C;
    int rc;
    if (sequence_parallel(tp))
        return block_backward_sp(k, s, w, g, a, sc, x, dres, tp, err, errlen);

    /* MLP branch: dres holds dy = d(res2) through the residual = d(fcproj). */
    dtrain_k_matmul_backward(k, sc->dfc, g->fcprojw, g->fcprojb, dres, a->fch_gelu, w->fcprojw,
                             N, F, C);
    dtrain_k_gelu_backward(k, sc->dfc, a->fch, sc->dfc, (size_t)N * F);
    dtrain_k_matmul_backward(k, sc->dln, g->fcw, g->fcb, sc->dfc, a->ln2, w->fcw, N, C, F);
    if ((rc = tp_allreduce(tp, sc->dln, NC, err, errlen)) != DTRAIN_OK)
        return rc;
    /* dres += LN2 backward: now d(res2) */
    dtrain_k_layernorm_backward(k, dres, g->ln2w, g->ln2b, sc->dln, a->res2, w->ln2w,
                                a->ln2_mean, a->ln2_rstd, N, C);

    /* attention branch: d(attproj) = d(res2) */
    dtrain_k_matmul_backward(k, sc->datty, g->attprojw, g->attprojb, dres, a->atty, w->attprojw,
                             N, CL, C);
    dtrain_k_attention_backward(k, sc->dqkv, sc->att, sc->datty, a->qkv, a->att, s->B, s->T,
                                s->NH, s->HS);
    dtrain_k_matmul_backward(k, sc->dln, g->qkvw, g->qkvb, sc->dqkv, a->ln1, w->qkvw, N, C, 3 * CL);
    if ((rc = tp_allreduce(tp, sc->dln, NC, err, errlen)) != DTRAIN_OK)
        return rc;
    /* dres += LN1 backward: now dx */
    dtrain_k_layernorm_backward(k, dres, g->ln1w, g->ln1b, sc->dln, x, w->ln1w,
                                a->ln1_mean, a->ln1_rstd, N, C);
    return DTRAIN_OK;
}
