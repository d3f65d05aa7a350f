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
#define COST_F 1 /* simulated time of a chunk's forward; a backward costs twice as much */
#define COST_B 2

/* One event of the simulated run: a compute of stage s, or (comm) the
 * transfer of its output to stage `to`, into chunk `rchunk` there. */
struct event {
    long time;  /* a compute's start, a transfer's: when its producer finished */
    int comm;   /* transfers sort before computes of the same time */
    long seq;   /* then in the order simulated */
    int s, fwd, chunk, micro, to, rchunk;
};

static int event_order(const void *a, const void *b)
{
    const struct event *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    if (x->comm != y->comm)
        return x->comm ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Simulate the P stages' computes (see dtrain_pipeline.h) into ev (room for
 * 4*P*V*m events, not sorted); returns how many, or -1; *makespan: when
 * the last compute ends. */
static long simulate(int P, int V, int m, struct event *ev, long *makespan)
{
    size_t cells = (size_t)P * V * m, nev = 0;
    long *fdone = malloc(cells * sizeof *fdone), *bdone = malloc(cells * sizeof *bdone);
    long *free_at = calloc((size_t)P, sizeof *free_at), rc = -1;
    int *next = calloc((size_t)P, sizeof *next);
    if (fdone == NULL || bdone == NULL || free_at == NULL || next == NULL)
        goto out;
    for (size_t i = 0; i < cells; i++)
        fdone[i] = bdone[i] = -1;
    /* the stage whose next compute can start first takes it (a compute
     * needs its input produced; each stage keeps Megatron's order) */
    int ops = 2 * m * V;
    *makespan = 0;
    for (long left = (long)P * ops; left > 0; left--) {
        int best = -1, bf = 0, bc = 0, bi = 0;
        long bstart = 0;
        for (int s = 0; s < P; s++) {
            if (next[s] == ops)
                continue;
            int fwd, k, c, i;
            long ready;
            compute_at(P, V, m, s, next[s], &fwd, &k);
            virtual_op(P, V, k, fwd, &c, &i);
            if (fwd)
                ready = s == 0 && c == 0 ? 0 : DONE(fdone, s > 0 ? s - 1 : P - 1, s > 0 ? c : c - 1, i);
            else
                ready = s == P - 1 && c == V - 1 ? DONE(fdone, s, c, i)
                                                 : DONE(bdone, s < P - 1 ? s + 1 : 0, s < P - 1 ? c : c + 1, i);
            if (ready < 0)
                continue; /* not produced yet */
            long start = ready > free_at[s] ? ready : free_at[s];
            if (best < 0 || start < bstart)
                best = s, bstart = start, bf = fwd, bc = c, bi = i;
        }
        if (best < 0) /* never for Megatron's order: tests/parallel/test_schedule.c */
            goto out;
        int s = best, fwd = bf, c = bc, i = bi;
        long finish = bstart + (fwd ? COST_F : COST_B);
        ev[nev] = (struct event){bstart, 0, (long)nev, s, fwd, c, i, -1, -1};
        nev++;
        if (fwd ? !(s == P - 1 && c == V - 1) : !(s == 0 && c == 0)) {
            int to = fwd ? (s + 1) % P : (s + P - 1) % P;
            int rchunk = fwd ? (to == 0 ? c + 1 : c) : (to == P - 1 ? c - 1 : c);
            ev[nev] = (struct event){finish, 1, (long)nev, s, fwd, c, i, to, rchunk};
            nev++;
        }
        if (fwd)
            DONE(fdone, s, c, i) = finish;
        else
            DONE(bdone, s, c, i) = finish;
        free_at[s] = finish;
        if (finish > *makespan)
            *makespan = finish;
        next[s]++;
    }
    rc = (long)nev;
out:
    free(fdone);
    free(bdone);
    free(free_at);
    free(next);
    return rc;
}

long dtrain_pipe_schedule_v(int P, int V, int stage, int m, struct dtrain_pipe_action *out, size_t max,
                            int *slots)
{
    if (V == 1)
        return dtrain_pipe_schedule(P, stage, m, out, max, slots);
    if (V < 1 || P < 2 || m < 1 || m % P != 0 || stage < 0 || stage >= P || out == NULL)
        return -1;
    struct event *ev = malloc(4 * (size_t)P * V * m * sizeof *ev);
    struct builder b = {.out = out, .max = max};
    b.slot_of = malloc((size_t)m * sizeof *b.slot_of);
    b.busy = calloc((size_t)m, 1);
    long rc = -1, nev, makespan;
    if (ev == NULL || b.slot_of == NULL || b.busy == NULL || (nev = simulate(P, V, m, ev, &makespan)) < 0)
        goto out;
    for (int i = 0; i < m; i++)
        b.slot_of[i] = -1;
    /* this stage's part of the global sequence of events */
    qsort(ev, (size_t)nev, sizeof *ev, event_order);
    for (long e = 0; e < nev; e++) {
        const struct event *x = &ev[e];
        if (!x->comm && x->s == stage)
            emit_chunk(&b, x->fwd ? DTRAIN_PIPE_FORWARD : DTRAIN_PIPE_BACKWARD, x->micro, x->chunk);
        else if (x->comm && x->s == stage)
            emit_chunk(&b, x->fwd ? DTRAIN_PIPE_SEND_ACT : DTRAIN_PIPE_SEND_GRAD, x->micro, x->chunk);
        else if (x->comm && x->to == stage)
            emit_chunk(&b, x->fwd ? DTRAIN_PIPE_RECV_ACT : DTRAIN_PIPE_RECV_GRAD, x->micro, x->rchunk);
    }
    if (!b.overflow) {
        *slots = b.slots;
        rc = (long)b.n;
    }
out:
    free(ev);
    free(b.slot_of);
    free(b.busy);
    return rc;
}

double dtrain_pipe_sim_bubble_v(int P, int V, int m)
{
    if (V < 2 || P < 2 || m < 1 || m % P != 0)
        return -1.0;
    struct event *ev = malloc(4 * (size_t)P * V * m * sizeof *ev);
    long makespan;
    double r = -1.0;
    if (ev != NULL && simulate(P, V, m, ev, &makespan) >= 0)
        r = (double)makespan / ((double)m * V * (COST_F + COST_B)) - 1.0;
    free(ev);
    return r;
}
