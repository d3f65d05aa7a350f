/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Tensor parallelism: the f/g operators, vocabulary-parallel embedding and
 * cross-entropy; see dtrain_tp.h. */
#include "dtrain_tp.h"
#include "dtrain_pcomm.h"
#include "dtrain_clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dtrain_tp {
    struct dtrain_kernels *k;
    dtrain_comm *comm;    /* NULL when T = 1 */
    struct dtrain_pcomm pc; /* comm on the kernels' memory */
    int size, rank;       /* T, this rank */
    int V, Vl, v0;        /* vocabulary, rows held here, first of them */
    int valid;            /* columns of this rank below V: min(max(V - v0, 0), Vl) */
    int max_rows;
    float *row_max;       /* (max_rows), kernels' memory */
    float *all_max;       /* (T * max_rows) */
    float *sums;          /* (2 * max_rows): denominators, target logits */
    struct dtrain_tp_hook hook;
    int seq_parallel;     /* dtrain_tp_set_sequence_parallel */
    double comm_s;        /* time in its communication calls (dtrain_tp_comm_seconds) */
};

double dtrain_tp_comm_seconds(const struct dtrain_tp *tp) { return tp->comm_s; }

static enum dtrain_status hook_allreduce(void *ctx, float *buf, size_t n, char *err, size_t errlen)
{
    return dtrain_tp_allreduce(ctx, buf, n, err, errlen);
}

static enum dtrain_status hook_all_gather(void *ctx, const float *in, float *out, size_t n, char *err, size_t errlen)
{
    return dtrain_tp_all_gather(ctx, in, out, n, err, errlen);
}

static enum dtrain_status hook_reduce_scatter(void *ctx, const float *in, float *out, size_t n, char *err,
                                              size_t errlen)
{
    return dtrain_tp_reduce_scatter(ctx, in, out, n, err, errlen);
}

int dtrain_tp_create(struct dtrain_kernels *k, dtrain_comm *comm, int V, int Vl, int v0,
                     int max_rows, struct dtrain_tp **out, char *err, size_t errlen)
{
    *out = NULL;
    struct dtrain_tp *tp = calloc(1, sizeof *tp);
    if (tp == NULL)
        goto oom;
    tp->k = k;
    tp->size = comm != NULL ? dtrain_comm_size(comm) : 1;
    tp->comm = tp->size > 1 ? comm : NULL;
    tp->rank = tp->comm != NULL ? dtrain_comm_rank(comm) : 0;
    tp->V = V;
    tp->Vl = Vl;
    tp->v0 = v0;
    tp->valid = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    tp->max_rows = max_rows;
    int rc = dtrain_pcomm_init(&tp->pc, k, tp->comm, err, errlen);
    if (rc != DTRAIN_OK) {
        dtrain_tp_destroy(tp);
        return rc;
    }
    if (tp->comm != NULL) {
        tp->row_max = dtrain_k_alloc(k, (size_t)max_rows * sizeof(float));
        tp->all_max = dtrain_k_alloc(k, (size_t)max_rows * tp->size * sizeof(float));
        tp->sums = dtrain_k_alloc(k, 2 * (size_t)max_rows * sizeof(float));
        if (tp->row_max == NULL || tp->all_max == NULL || tp->sums == NULL)
            goto oom;
    }
    tp->hook = (struct dtrain_tp_hook){.allreduce_sum = hook_allreduce, .size = tp->size, .ctx = tp};
    *out = tp;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for the tensor-parallel scratch of %d rows", max_rows);
    dtrain_tp_destroy(tp);
    return DTRAIN_ERR_SYSTEM;
}

void dtrain_tp_destroy(struct dtrain_tp *tp)
{
    if (tp == NULL)
        return;
    dtrain_pcomm_release(&tp->pc);
    if (tp->comm != NULL) {
        dtrain_k_free(tp->k, tp->row_max);
        dtrain_k_free(tp->k, tp->all_max);
        dtrain_k_free(tp->k, tp->sums);
    }
    free(tp);
}

int dtrain_tp_size(const struct dtrain_tp *tp) { return tp->size; }
int dtrain_tp_rank(const struct dtrain_tp *tp) { return tp->rank; }

int dtrain_tp_set_sequence_parallel(struct dtrain_tp *tp, int on, char *err, size_t errlen)
{
    if (on && tp->comm == NULL) {
        snprintf(err, errlen, "sequence parallelism needs a tensor-parallel group of 2 or more ranks");
        return DTRAIN_ERR_INPUT;
    }
    tp->seq_parallel = on != 0;
    tp->hook.all_gather = on ? hook_all_gather : NULL;
    tp->hook.reduce_scatter = on ? hook_reduce_scatter : NULL;
    return DTRAIN_OK;
}

int dtrain_tp_sequence_parallel(const struct dtrain_tp *tp) { return tp->seq_parallel; }

int dtrain_tp_all_gather(struct dtrain_tp *tp, const float *in, float *out, size_t n, char *err, size_t errlen)
{
    double t0 = dtrain_clock_s();
    int rc = dtrain_pcomm_all_gather(&tp->pc, in, out, n, "sequence-parallel all-gather", err, errlen);
    tp->comm_s += dtrain_clock_s() - t0;
    return rc;
}

int dtrain_tp_reduce_scatter(struct dtrain_tp *tp, const float *in, float *out, size_t n, char *err,
                             size_t errlen)
{
    double t0 = dtrain_clock_s();
    int rc = dtrain_pcomm_reduce_scatter(&tp->pc, in, out, n, "sequence-parallel reduce-scatter", err, errlen);
    tp->comm_s += dtrain_clock_s() - t0;
    return rc;
}

const struct dtrain_tp_hook *dtrain_tp_block_hook(const struct dtrain_tp *tp)
{
    return tp->comm != NULL ? &tp->hook : NULL;
}

int dtrain_tp_allreduce(struct dtrain_tp *tp, float *buf, size_t n, char *err, size_t errlen)
{
    double t0 = dtrain_clock_s();
    int rc = dtrain_pcomm_allreduce(&tp->pc, buf, n, "tensor-parallel all-reduce", err, errlen);
    tp->comm_s += dtrain_clock_s() - t0;
    return rc;
}

/* ------------------------------------------------------------ embedding */

int dtrain_tp_embedding_forward(struct dtrain_tp *tp, float *out, float *full, const int32_t *tokens,
                                const float *wte_local, const float *wpe, int B, int T, int C,
                                char *err, size_t errlen)
{
    if (tp->comm == NULL) {
        dtrain_k_encoder_forward(tp->k, out, tokens, wte_local, wpe, B, T, C);
        return DTRAIN_OK;
    }
    /* g after a vocabulary-parallel lookup: rank 0 adds wpe, the owner of
     * the token its wte row; everything else is an exact zero.  Sequence
     * parallel: g is a reduce-scatter, each rank keeping its rows. */
    size_t NC = (size_t)B * T * C;
    if (tp->seq_parallel) {
        dtrain_k_embedding_vp_forward(tp->k, full, tokens, wte_local, wpe, B, T, C, tp->v0, tp->Vl, tp->rank == 0);
        return dtrain_tp_reduce_scatter(tp, full, out, NC / (size_t)tp->size, err, errlen);
    }
    dtrain_k_embedding_vp_forward(tp->k, out, tokens, wte_local, wpe, B, T, C, tp->v0, tp->Vl, tp->rank == 0);
    return dtrain_tp_allreduce(tp, out, NC, err, errlen);
}

void dtrain_tp_embedding_backward(struct dtrain_tp *tp, float *dwte_local, float *dwpe,
                                  const float *dout, const int32_t *tokens, int B, int T, int C)
{
    if (tp->comm == NULL) {
        dtrain_k_encoder_backward(tp->k, dwte_local, dwpe, dout, tokens, B, T, C);
        return;
    }
    dtrain_k_embedding_vp_backward(tp->k, dwte_local, dwpe, dout, tokens, B, T, C, tp->v0, tp->Vl);
}

/* ------------------------------------------------------------ cross-entropy */

static int check_rows(const struct dtrain_tp *tp, int N, char *err, size_t errlen)
{
    if (N < 1 || N > tp->max_rows) {
        snprintf(err, errlen, "cross-entropy of %d rows: the scratch holds %d", N, tp->max_rows);
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

int dtrain_tp_xent_forward(struct dtrain_tp *tp, float *logits_probs, float *losses,
                           const int32_t *targets, int N, char *err, size_t errlen)
{
    int rc;
    if (tp->comm == NULL) {
        dtrain_k_softmax_xent_forward(tp->k, logits_probs, losses, targets, N, tp->V, tp->Vl);
        return DTRAIN_OK;
    }
    if ((rc = check_rows(tp, N, err, errlen)) != DTRAIN_OK)
        return rc;
    int Vl = tp->Vl, nv = tp->valid;
    /* 1. the row maxima over all columns: gather the local ones */
    dtrain_k_xent_vp_rowmax(tp->k, tp->row_max, logits_probs, N, Vl, nv);
    double t0 = dtrain_clock_s();
    rc = dtrain_pcomm_all_gather(&tp->pc, tp->row_max, tp->all_max, (size_t)N,
                                 "vocabulary-parallel cross-entropy (row maxima)", err, errlen);
    tp->comm_s += dtrain_clock_s() - t0;
    if (rc != DTRAIN_OK)
        return rc;
    /* 2. exponentials, local denominators and the target's shifted logit */
    dtrain_k_xent_vp_exp(tp->k, logits_probs, tp->sums, tp->all_max, tp->size, targets, tp->v0, N, Vl, nv);
    /* 3. the global denominators and target logits in one all-reduce */
    t0 = dtrain_clock_s();
    rc = dtrain_pcomm_allreduce(&tp->pc, tp->sums, 2 * (size_t)N, "vocabulary-parallel cross-entropy (denominators)",
                                err, errlen);
    tp->comm_s += dtrain_clock_s() - t0;
    if (rc != DTRAIN_OK)
        return rc;
    dtrain_k_xent_vp_finish(tp->k, logits_probs, losses, tp->sums, N, Vl, nv);
    return DTRAIN_OK;
}

void dtrain_tp_xent_backward(struct dtrain_tp *tp, float *probs_dlogits, const int32_t *targets,
                             float dloss, int N)
{
    if (tp->comm == NULL) {
        dtrain_k_softmax_xent_backward(tp->k, probs_dlogits, targets, dloss, N, tp->V, tp->Vl);
        return;
    }
    dtrain_k_xent_vp_backward(tp->k, probs_dlogits, targets, tp->v0, dloss, N, tp->Vl, tp->valid);
}
