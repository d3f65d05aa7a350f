/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: the 1F1B pipeline schedule as an explicit list of actions.
 *
 * Stage s of P runs m micro-batches in three phases (PipeDream-Flush, the
 * schedule Megatron calls 1F1B):
 *   warm-up    w = min(P-1-s, m) forwards;
 *   steady     m - w times: one forward, then the backward of the oldest
 *              micro-batch in flight;
 *   cool-down  the w backwards left.
 * So at most min(P-s, m) micro-batches are in flight on stage s (P on stage
 * 0), and every stage's bubble is (P-1)/(m+P-1) of the step when stages
 * take equal time.
 *
 * Communication is part of the list: RECV_ACT before a forward and
 * SEND_ACT after it (to the next stage), RECV_GRAD before a backward and
 * SEND_GRAD after it (to the previous stage).  Blocking point-to-point calls
 * that may wait for the peer to post the matching call would deadlock if
 * two neighbours both sent first; the list orders each pair of calls on a
 * link so that it never does: after a steady forward a stage sends the
 * activation, then receives the gradient; after a steady backward it first
 * receives the next activation, then sends the gradient.
 * tests/parallel/test_schedule.c runs every stage's list against its
 * neighbours' with rendezvous semantics for many (P, m).
 *
 * Slots: each micro-batch in flight on a stage keeps its activations in a
 * slot, taken at its RECV_ACT (or FORWARD on stage 0) and given back after
 * its BACKWARD; `slots` of them suffice (min(P-s, m)).  The gradients
 * travel through the stage's one gradient buffer: SEND_GRAD comes after the
 * BACKWARD and names the slot just given back.
 *
 * Interleaved 1F1B (dtrain_pipe_schedule_v, V > 1 virtual stages, Megatron's
 * virtual pipeline): stage s holds chunks c = 0..V-1 of the model, chunk c
 * being virtual stage s + c*P (dtrain_shard.h), so a micro-batch goes round
 * the pipeline V times: stage P-1's chunk c sends to stage 0's chunk c+1
 * and gradients go back the same way.  Each stage runs its m*V chunk
 * forwards and backwards in Megatron's order: virtual forward k (0..mV-1)
 * is micro-batch (k / (P*V))*P + k % P on chunk (k / P) % V, virtual
 * backward k the same micro-batch on chunk V-1 - (k / P) % V; warm-up
 * w = min((P-1-s)*2 + (V-1)*P, mV) forwards, then mV - w times one forward
 * and one backward, then the w backwards left.  m must be a multiple of P.
 * The bubble is (P-1)/(V*m) of the ideal time (P-1)/(V*m+P-1) of the step),
 * V times smaller than 1F1B's (P-1)/m.
 *
 * Where the communication goes: every stage builds the same global
 * sequence of events by simulating all P stages in time (a forward costs
 * 1, a backward 2; a stage starts its next compute as soon as it is free
 * and its input was produced); a send follows its forward or backward at
 * once, and the receiver's RECV_* stands at the same time of the global
 * sequence (after the compute it is busy with, before the next).  Each stage's
 * list is its part of that sequence, so with rendezvous semantics the
 * earliest unfinished event always has both of its ranks waiting on it:
 * no deadlock, whatever P, V and m.  Receives are thus eager: an
 * activation goes into its micro-batch's slot (held from its first chunk
 * to the backward of chunk 0), a gradient into the slot's own residual
 * gradient (dtrain_stage_chunk_grad), so nothing waits for a buffer. */
#ifndef DTRAIN_PIPELINE_H
#define DTRAIN_PIPELINE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dtrain_pipe_op {
    DTRAIN_PIPE_RECV_ACT,  /* activation of micro-batch `micro` from the previous stage into `slot` */
    DTRAIN_PIPE_FORWARD,   /* this stage's forward of micro-batch `micro` in `slot` */
    DTRAIN_PIPE_SEND_ACT,  /* its output to the next stage */
    DTRAIN_PIPE_RECV_GRAD, /* the gradient of that output from the next stage */
    DTRAIN_PIPE_BACKWARD,  /* this stage's backward (frees `slot` when done) */
    DTRAIN_PIPE_SEND_GRAD, /* the gradient of its input to the previous stage */
};

struct dtrain_pipe_action {
    enum dtrain_pipe_op op;
    int micro; /* 0..m-1 */
    int slot;  /* 0..slots-1 */
    int chunk; /* 0..V-1: the virtual stage (0 with V = 1) */
};

/* Most actions a stage's list can hold: 6 per micro-batch. */
#define DTRAIN_PIPE_MAX_ACTIONS(m) (6 * (size_t)(m))

/* Fill out (room for max actions) with stage `stage`'s list for P stages and
 * m micro-batches.  Returns the number of actions and sets *slots, or -1
 * when an argument is out of range (P, m >= 1, 0 <= stage < P) or max is
 * too small. */
long dtrain_pipe_schedule(int P, int stage, int m, struct dtrain_pipe_action *out, size_t max,
                          int *slots);

/* Most actions of an interleaved list: 6 per micro-batch and chunk. */
#define DTRAIN_PIPE_MAX_ACTIONS_V(m, V) (6 * (size_t)(m) * (size_t)(V))

/* The list with V virtual stages (V = 1: dtrain_pipe_schedule).  -1 also
 * when V > 1 and P < 2 or m is not a multiple of P. */
long dtrain_pipe_schedule_v(int P, int V, int stage, int m, struct dtrain_pipe_action *out, size_t max,
                            int *slots);

/* "RECV_ACT", "FORWARD", ... */
const char *dtrain_pipe_op_name(enum dtrain_pipe_op op);

/* The ideal bubble fraction (P-1)/(m+P-1). */
double dtrain_pipe_bubble(int P, int m);
/* With V virtual stages: (P-1)/(V*m+P-1) of the step, (P-1)/(V*m) of the
 * ideal (bubble-free) time. */
double dtrain_pipe_bubble_v(int P, int V, int m);
/* The bubble of the interleaved schedule itself, relative to the ideal
 * time, in the simulation that places its communication (a forward costs
 * 1, a backward 2, transfers nothing): makespan / (V*m*3) - 1.  -1 for an
 * argument dtrain_pipe_schedule_v refuses or V = 1. */
double dtrain_pipe_sim_bubble_v(int P, int V, int m);

#ifdef __cplusplus
}
#endif

#endif
