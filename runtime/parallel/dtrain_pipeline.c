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

static void emit(struct builder *b, enum dtrain_pipe_op op, int micro)
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
    b->out[b->n++] = (struct dtrain_pipe_action){op, micro, b->slot_of[micro]};
    if (op == DTRAIN_PIPE_BACKWARD)
        b->busy[b->slot_of[micro]] = 0;
}

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
