/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The 1F1B schedule; see dtrain_pipeline.h. */
#include "dtrain_pipeline.h"

#include <stdlib.h>

/* The list being built, and the slots in use. */
struct builder {
    struct dtrain_pipe_action *out;
    size_t max, n;
    int first, last;  /* stage 0, stage P-1 */
    int *slot_of;     /* (m) micro-batch -> slot, -1 before it has one */
    char *busy;       /* (m) slot in use; at most min(P-s, m) ever are */
    int slots;        /* highest slot used + 1 */
    int overflow;
};

/* chunk: the virtual stage; a micro-batch's slot is given back after its
 * backward of chunk 0, the last thing it does on the stage. */
static void emit_chunk(struct builder *b, enum dtrain_pipe_op op, int micro, int chunk)
{
    if (b->n >= b->max) {
        b->overflow = 1;
        return;
    }
    if (b->slot_of[micro] < 0) { /* first touch: take the lowest free slot */
        int s = 0;
        while (b->busy[s])
            s++;
        b->busy[s] = 1;
        b->slot_of[micro] = s;
        if (s + 1 > b->slots)
            b->slots = s + 1;
    }
    b->out[b->n++] = (struct dtrain_pipe_action){op, micro, b->slot_of[micro], chunk};
    if (op == DTRAIN_PIPE_BACKWARD && chunk == 0)
        b->busy[b->slot_of[micro]] = 0;
}

static void emit(struct builder *b, enum dtrain_pipe_op op, int micro) { emit_chunk(b, op, micro, 0); }

static void recv_act(struct builder *b, int i) { if (!b->first) emit(b, DTRAIN_PIPE_RECV_ACT, i); }
static void send_act(struct builder *b, int i) { if (!b->last) emit(b, DTRAIN_PIPE_SEND_ACT, i); }
static void recv_grad(struct builder *b, int i) { if (!b->last) emit(b, DTRAIN_PIPE_RECV_GRAD, i); }
static void send_grad(struct builder *b, int i) { if (!b->first) emit(b, DTRAIN_PIPE_SEND_GRAD, i); }

long dtrain_pipe_schedule(int P, int stage, int m, struct dtrain_pipe_action *out, size_t max,
                          int *slots)
{
    if (P < 1 || m < 1 || stage < 0 || stage >= P || out == NULL)
        return -1;
    struct builder b = {.out = out, .max = max, .first = stage == 0, .last = stage == P - 1};
    b.slot_of = malloc((size_t)m * sizeof *b.slot_of);
    b.busy = calloc((size_t)m, 1);
    if (b.slot_of == NULL || b.busy == NULL) {
        free(b.slot_of);
        free(b.busy);
        return -1;
    }
    for (int i = 0; i < m; i++)
        b.slot_of[i] = -1;
    int warmup = P - 1 - stage < m ? P - 1 - stage : m;
    int steady = m - warmup;

    for (int i = 0; i < warmup; i++) {
        recv_act(&b, i);
        emit(&b, DTRAIN_PIPE_FORWARD, i);
        send_act(&b, i);
    }
    if (steady > 0)
        recv_act(&b, warmup);
    for (int j = 0; j < steady; j++) {
        int fwd = warmup + j;
        emit(&b, DTRAIN_PIPE_FORWARD, fwd);
        send_act(&b, fwd);   /* send first, ... */
        recv_grad(&b, j);    /* ... then receive: the next stage receives first */
        emit(&b, DTRAIN_PIPE_BACKWARD, j);
        if (j + 1 < steady)
            recv_act(&b, fwd + 1); /* receive first, then send: the previous stage sends first */
        send_grad(&b, j);
    }
    for (int i = steady; i < m; i++) {
        recv_grad(&b, i);
        emit(&b, DTRAIN_PIPE_BACKWARD, i);
        send_grad(&b, i);
    }
    free(b.slot_of);
    free(b.busy);
    if (b.overflow)
        return -1;
    *slots = b.slots;
    return (long)b.n;
}

const char *dtrain_pipe_op_name(enum dtrain_pipe_op op)
{
    static const char *const names[] = {"RECV_ACT", "FORWARD", "SEND_ACT",
                                        "RECV_GRAD", "BACKWARD", "SEND_GRAD"};
    return (op >= 0 && op <= DTRAIN_PIPE_SEND_GRAD) ? names[op] : "?";
}

double dtrain_pipe_bubble(int P, int m)
{
    return (double)(P - 1) / (double)(m + P - 1);
}

double dtrain_pipe_bubble_v(int P, int V, int m)
{
    return (double)(P - 1) / ((double)V * m + P - 1);
}

/* ------------------------------------------------------------ interleaved */

/* Virtual forward or backward k of stage s in Megatron's order. */
static void virtual_op(int P, int V, int k, int forward, int *chunk, int *micro)
{
    int c = (k / P) % V;
    *chunk = forward ? c : V - 1 - c;
    *micro = (k / (P * V)) * P + k % P;
}

/* Stage s's i-th compute (0..2mV-1): forward (1) or backward (0), and which
 * virtual op k. */
static void compute_at(int P, int V, int m, int s, int i, int *forward, int *k)
{
    int total = m * V, w = (P - 1 - s) * 2 + (V - 1) * P;
    if (w > total)
        w = total;
    if (i < w) {
        *forward = 1, *k = i;
    } else if (i < w + 2 * (total - w)) {
        int j = (i - w) / 2;
        *forward = (i - w) % 2 == 0;
        *k = *forward ? w + j : j;
    } else {
        *forward = 0, *k = i - w - (total - w);
    }
}

#define DONE(arr, s, c, i) (arr)[((size_t)(s) * V + (size_t)(c)) * (size_t)m + (size_t)(i)]

long dtrain_pipe_schedule_v(int P, int V, int stage, int m, struct dtrain_pipe_action *out, size_t max,
                            int *slots)
{
    if (V == 1)
        return dtrain_pipe_schedule(P, stage, m, out, max, slots);
    if (V < 1 || P < 2 || m < 1 || m % P != 0 || stage < 0 || stage >= P || out == NULL)
        return -1;
    size_t cells = (size_t)P * V * m;
    long *fdone = malloc(cells * sizeof *fdone), *bdone = malloc(cells * sizeof *bdone);
    int *next = calloc((size_t)P, sizeof *next);
    struct builder b = {.out = out, .max = max};
    b.slot_of = malloc((size_t)m * sizeof *b.slot_of);
    b.busy = calloc((size_t)m, 1);
    long rc = -1;
    if (fdone == NULL || bdone == NULL || next == NULL || b.slot_of == NULL || b.busy == NULL)
        goto out;
    for (size_t i = 0; i < cells; i++)
        fdone[i] = bdone[i] = -1;
    for (int i = 0; i < m; i++)
        b.slot_of[i] = -1;
    int ops = 2 * m * V, left = P * ops;
    for (long round = 0; left > 0; round++) {
        int progress = 0;
        for (int s = 0; s < P; s++) {
            if (next[s] == ops)
                continue;
            int fwd, k, c, i;
            compute_at(P, V, m, s, next[s], &fwd, &k);
            virtual_op(P, V, k, fwd, &c, &i);
            /* what it needs, produced in an earlier round: (ps, pc) of fdone or bdone */
            long ready;
            int ps, pc;
            if (fwd) {
                ps = s > 0 ? s - 1 : P - 1, pc = s > 0 ? c : c - 1;
                ready = s == 0 && c == 0 ? 1 : DONE(fdone, ps, pc, i) >= 0 && DONE(fdone, ps, pc, i) < round;
            } else {
                ps = s < P - 1 ? s + 1 : 0, pc = s < P - 1 ? c : c + 1;
                ready = s == P - 1 && c == V - 1 ? DONE(fdone, s, c, i) >= 0
                                                : DONE(bdone, ps, pc, i) >= 0 && DONE(bdone, ps, pc, i) < round;
            }
            if (!ready)
                continue;
            int has_output = fwd ? !(s == P - 1 && c == V - 1) : !(s == 0 && c == 0);
            int to = fwd ? (s + 1) % P : (s + P - 1) % P; /* where the output goes */
            if (s == stage) { /* the compute, then its send at once */
                emit_chunk(&b, fwd ? DTRAIN_PIPE_FORWARD : DTRAIN_PIPE_BACKWARD, i, c);
                if (has_output)
                    emit_chunk(&b, fwd ? DTRAIN_PIPE_SEND_ACT : DTRAIN_PIPE_SEND_GRAD, i, c);
            } else if (has_output && to == stage) {
                /* the matching receive, at the same place of the global
                 * sequence; into chunk c (c+1 or c-1 across the wrap) */
                int rc_ = fwd ? (to == 0 ? c + 1 : c) : (to == P - 1 ? c - 1 : c);
                emit_chunk(&b, fwd ? DTRAIN_PIPE_RECV_ACT : DTRAIN_PIPE_RECV_GRAD, i, rc_);
            }
            if (fwd)
                DONE(fdone, s, c, i) = round;
            else
                DONE(bdone, s, c, i) = round;
            next[s]++;
            left--;
            progress = 1;
        }
        if (!progress) /* never for Megatron's order: tests/parallel/test_schedule.c */
            goto out;
    }
    if (!b.overflow) {
        *slots = b.slots;
        rc = (long)b.n;
    }
out:
    free(fdone);
    free(bdone);
    free(next);
    free(b.slot_of);
    free(b.busy);
    return rc;
}
