/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The 1F1B schedule's action lists (runtime/parallel/dtrain_pipeline.h): for many
 * (P, m), on every stage, every micro-batch is received, run forward, sent,
 * its gradient received, run backward and sent back exactly once, in that
 * order; forwards and backwards go in micro-batch order; at most min(P-s, m)
 * micro-batches are in flight on stage s (exactly P on stage 0 when
 * m >= P); slots are never shared by two micro-batches in flight; and all P
 * lists together run to the end when every send waits for its matching
 * receive (rendezvous), so blocking point-to-point calls cannot deadlock.
 * The same for interleaved lists (V virtual stages, dtrain_pipe_schedule_v)
 * round the wrapped pipeline, with Megatron's order checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/dtrain_pipeline.h"
#include "tap.h"

#define MAXP 8
#define MAXM 24

struct lists {
    int P, m;
    struct dtrain_pipe_action a[MAXP][6 * MAXM];
    long n[MAXP];
    int slots[MAXP];
};

static int build(struct lists *L, int P, int m)
{
    L->P = P;
    L->m = m;
    for (int s = 0; s < P; s++) {
        L->n[s] = dtrain_pipe_schedule(P, s, m, L->a[s], 6 * MAXM, &L->slots[s]);
        if (L->n[s] < 0)
            return -1;
    }
    return 0;
}

/* One stage's list: order, counts, in-flight bound, slot use.  Returns a
 * description of the first problem, or NULL. */
static const char *check_stage(const struct lists *L, int s)
{
    static char why[200];
    int P = L->P, m = L->m, first = s == 0, last = s == P - 1;
    int step[MAXM]; /* next expected op index per micro-batch */
    int slot_owner[MAXM];
    int next_fwd = 0, next_bwd = 0, in_flight = 0, max_flight = 0;
    /* the ops a micro-batch goes through on this stage, in order */
    enum dtrain_pipe_op seq[6];
    int nseq = 0;
    if (!first) seq[nseq++] = DTRAIN_PIPE_RECV_ACT;
    seq[nseq++] = DTRAIN_PIPE_FORWARD;
    if (!last) seq[nseq++] = DTRAIN_PIPE_SEND_ACT;
    if (!last) seq[nseq++] = DTRAIN_PIPE_RECV_GRAD;
    seq[nseq++] = DTRAIN_PIPE_BACKWARD;
    if (!first) seq[nseq++] = DTRAIN_PIPE_SEND_GRAD;
    if (L->n[s] != (long)nseq * m) {
        snprintf(why, sizeof why, "stage %d has %ld actions, not %d", s, L->n[s], nseq * m);
        return why;
    }
    for (int i = 0; i < m; i++)
        step[i] = 0;
    for (int i = 0; i < MAXM; i++)
        slot_owner[i] = -1;
    for (long k = 0; k < L->n[s]; k++) {
        const struct dtrain_pipe_action *x = &L->a[s][k];
        if (x->micro < 0 || x->micro >= m || x->slot < 0 || x->slot >= L->slots[s]) {
            snprintf(why, sizeof why, "stage %d action %ld: micro %d slot %d out of range", s, k, x->micro, x->slot);
            return why;
        }
        if (step[x->micro] >= nseq || seq[step[x->micro]] != x->op) {
            snprintf(why, sizeof why, "stage %d action %ld: %s of micro-batch %d out of order", s, k,
                     dtrain_pipe_op_name(x->op), x->micro);
            return why;
        }
        if (step[x->micro] == 0) { /* takes its slot */
            if (slot_owner[x->slot] != -1) {
                snprintf(why, sizeof why, "stage %d: micro-batch %d takes slot %d of micro-batch %d", s, x->micro,
                         x->slot, slot_owner[x->slot]);
                return why;
            }
            slot_owner[x->slot] = x->micro;
            in_flight++;
            if (in_flight > max_flight)
                max_flight = in_flight;
        } else if (x->op != DTRAIN_PIPE_SEND_GRAD && slot_owner[x->slot] != x->micro) {
            /* (SEND_GRAD comes after the backward freed the slot: it sends
             * the stage's gradient buffer) */
            snprintf(why, sizeof why, "stage %d: micro-batch %d uses slot %d it does not hold", s, x->micro, x->slot);
            return why;
        }
        if (x->op == DTRAIN_PIPE_FORWARD && x->micro != next_fwd++) {
            snprintf(why, sizeof why, "stage %d: forward of %d out of micro-batch order", s, x->micro);
            return why;
        }
        if (x->op == DTRAIN_PIPE_BACKWARD) {
            if (x->micro != next_bwd++) {
                snprintf(why, sizeof why, "stage %d: backward of %d out of micro-batch order", s, x->micro);
                return why;
            }
            slot_owner[x->slot] = -1;
            in_flight--;
        }
        step[x->micro]++;
    }
    int bound = P - s < m ? P - s : m;
    if (max_flight > bound || L->slots[s] > bound) {
        snprintf(why, sizeof why, "stage %d: %d in flight, %d slots (bound %d)", s, max_flight, L->slots[s], bound);
        return why;
    }
    if (s == 0 && m >= P && max_flight != P) {
        snprintf(why, sizeof why, "stage 0: %d in flight, 1F1B keeps P = %d", max_flight, P);
        return why;
    }
    return NULL;
}

/* Run all lists with rendezvous sends: a SEND completes only together with
 * the peer's matching RECV.  Returns 1 when every list ends. */
static int runs_to_end(const struct lists *L)
{
    long pc[MAXP] = {0};
    int P = L->P;
    for (;;) {
        int moved = 0, done = 1;
        for (int s = 0; s < P; s++) {
            if (pc[s] >= L->n[s])
                continue;
            done = 0;
            const struct dtrain_pipe_action *x = &L->a[s][pc[s]];
            int peer = -1;
            enum dtrain_pipe_op want = DTRAIN_PIPE_FORWARD;
            switch (x->op) {
            case DTRAIN_PIPE_FORWARD:
            case DTRAIN_PIPE_BACKWARD:
                pc[s]++;
                moved = 1;
                continue;
            case DTRAIN_PIPE_SEND_ACT: peer = s + 1; want = DTRAIN_PIPE_RECV_ACT; break;
            case DTRAIN_PIPE_RECV_ACT: peer = s - 1; want = DTRAIN_PIPE_SEND_ACT; break;
            case DTRAIN_PIPE_SEND_GRAD: peer = s - 1; want = DTRAIN_PIPE_RECV_GRAD; break;
            case DTRAIN_PIPE_RECV_GRAD: peer = s + 1; want = DTRAIN_PIPE_SEND_GRAD; break;
            }
            if (peer < 0 || peer >= P || pc[peer] >= L->n[peer])
                return 0;
            const struct dtrain_pipe_action *y = &L->a[peer][pc[peer]];
            if (y->op == want && y->micro == x->micro) {
                pc[s]++;
                pc[peer]++;
                moved = 1;
            }
        }
        if (done)
            return 1;
        if (!moved)
            return 0;
    }
}

/* ------------------------------------------------------------ interleaved (V > 1) */

#define MAXV 4
#define MAXMV (MAXM * MAXV)

struct vlists {
    int P, V, m;
    struct dtrain_pipe_action a[MAXP][6 * MAXMV];
    long n[MAXP];
    int slots[MAXP];
};

static int vbuild(struct vlists *L, int P, int V, int m)
{
    L->P = P, L->V = V, L->m = m;
    for (int s = 0; s < P; s++)
        if ((L->n[s] = dtrain_pipe_schedule_v(P, V, s, m, L->a[s], 6 * MAXMV, &L->slots[s])) < 0)
            return -1;
    return 0;
}

/* Each (micro-batch, chunk) of stage s: its ops once each, in order; a
 * micro-batch's slot held from its first action to its backward of chunk
 * 0 and never shared; chunk forwards in Megatron's order (virtual forward k
 * is micro-batch (k/(P*V))*P + k%P of chunk (k/P)%V), backwards in its
 * reverse-chunk order; the warm-up of (P-1-s)*2 + (V-1)*P forwards. */
static const char *vcheck_stage(const struct vlists *L, int s)
{
    static char why[200];
    int P = L->P, V = L->V, m = L->m;
    int step[MAXM][MAXV] = {{0}}, owner[MAXM], holds[MAXM], nf = 0, nb = 0, warm = -1;
    for (int i = 0; i < MAXM; i++)
        owner[i] = -1, holds[i] = -1;
    for (long k = 0; k < L->n[s]; k++) {
        const struct dtrain_pipe_action *x = &L->a[s][k];
        int i = x->micro, c = x->chunk;
        if (i < 0 || i >= m || c < 0 || c >= V || x->slot < 0 || x->slot >= L->slots[s]) {
            snprintf(why, sizeof why, "stage %d action %ld out of range", s, k);
            return why;
        }
        enum dtrain_pipe_op seq[6];
        int nseq = 0, first = s == 0 && c == 0, last = s == P - 1 && c == V - 1;
        if (!first) seq[nseq++] = DTRAIN_PIPE_RECV_ACT;
        seq[nseq++] = DTRAIN_PIPE_FORWARD;
        if (!last) seq[nseq++] = DTRAIN_PIPE_SEND_ACT;
        if (!last) seq[nseq++] = DTRAIN_PIPE_RECV_GRAD;
        seq[nseq++] = DTRAIN_PIPE_BACKWARD;
        if (!first) seq[nseq++] = DTRAIN_PIPE_SEND_GRAD;
        if (step[i][c] >= nseq || seq[step[i][c]] != x->op) {
            snprintf(why, sizeof why, "stage %d: %s of micro-batch %d chunk %d out of order", s,
                     dtrain_pipe_op_name(x->op), i, c);
            return why;
        }
        step[i][c]++;
        if (holds[i] == -1) { /* first action: takes the slot */
            if (owner[x->slot] != -1) {
                snprintf(why, sizeof why, "stage %d: micro-batch %d takes slot %d of %d", s, i, x->slot, owner[x->slot]);
                return why;
            }
            owner[x->slot] = i, holds[i] = x->slot;
        } else if (holds[i] != x->slot || (owner[x->slot] != i && !(x->op == DTRAIN_PIPE_SEND_GRAD && c == 0))) {
            snprintf(why, sizeof why, "stage %d: micro-batch %d uses slot %d it does not hold", s, i, x->slot);
            return why;
        }
        if (x->op == DTRAIN_PIPE_FORWARD) {
            int kk = nf++, ci = (kk / P) % V, mi = (kk / (P * V)) * P + kk % P;
            if (c != ci || i != mi) {
                snprintf(why, sizeof why, "stage %d: forward %d is (%d, chunk %d), not (%d, chunk %d)", s, kk, i, c, mi, ci);
                return why;
            }
        }
        if (x->op == DTRAIN_PIPE_BACKWARD) {
            int kk = nb++, ci = V - 1 - (kk / P) % V, mi = (kk / (P * V)) * P + kk % P;
            if (warm < 0)
                warm = nf;
            if (c != ci || i != mi) {
                snprintf(why, sizeof why, "stage %d: backward %d is (%d, chunk %d), not (%d, chunk %d)", s, kk, i, c, mi, ci);
                return why;
            }
            if (c == 0)
                owner[x->slot] = -1;
        }
    }
    int want = (P - 1 - s) * 2 + (V - 1) * P + 1; /* the warm-up, and the first steady forward */
    if (want > m * V)
        want = m * V;
    if (nf != m * V || nb != m * V || warm != want) {
        snprintf(why, sizeof why, "stage %d: %d forwards, %d backwards, %d forwards before the first backward (want %d)",
                 s, nf, nb, warm, want);
        return why;
    }
    return NULL;
}

/* Rendezvous run of all P lists; links wrap (P-1 -> 0 for activations,
 * 0 -> P-1 for gradients); a send matches the receive of the same
 * micro-batch into the receiving chunk (c, or c+1 / c-1 across the wrap). */
static int vruns_to_end(const struct vlists *L)
{
    long pc[MAXP] = {0};
    int P = L->P;
    for (;;) {
        int moved = 0, done = 1;
        for (int s = 0; s < P; s++) {
            if (pc[s] >= L->n[s])
                continue;
            done = 0;
            const struct dtrain_pipe_action *x = &L->a[s][pc[s]];
            int peer, pchunk;
            enum dtrain_pipe_op want;
            switch (x->op) {
            case DTRAIN_PIPE_SEND_ACT:
                peer = (s + 1) % P, pchunk = s == P - 1 ? x->chunk + 1 : x->chunk, want = DTRAIN_PIPE_RECV_ACT;
                break;
            case DTRAIN_PIPE_SEND_GRAD:
                peer = (s + P - 1) % P, pchunk = s == 0 ? x->chunk - 1 : x->chunk, want = DTRAIN_PIPE_RECV_GRAD;
                break;
            case DTRAIN_PIPE_FORWARD:
            case DTRAIN_PIPE_BACKWARD:
                pc[s]++;
                moved = 1;
                continue;
            default: /* receives complete with the peer's send */
                continue;
            }
            if (pc[peer] >= L->n[peer])
                return 0;
            const struct dtrain_pipe_action *y = &L->a[peer][pc[peer]];
            if (y->op == want && y->micro == x->micro && y->chunk == pchunk) {
                pc[s]++;
                pc[peer]++;
                moved = 1;
            }
        }
        if (done)
            return 1;
        if (!moved)
            return 0;
    }
}

static void test_interleaved(void)
{
    static struct vlists L;
    int bad_build = 0, bad_stage = 0, deadlocks = 0, cases = 0;
    for (int P = 2; P <= MAXP; P++) {
        for (int V = 2; V <= MAXV; V++) {
            for (int m = P; m <= MAXM; m += P) {
                cases++;
                if (vbuild(&L, P, V, m) != 0) {
                    bad_build++;
                    continue;
                }
                for (int s = 0; s < P; s++) {
                    const char *why = vcheck_stage(&L, s);
                    if (why != NULL && bad_stage++ == 0)
                        diag("P=%d V=%d m=%d: %s", P, V, m, why);
                }
                if (!vruns_to_end(&L) && deadlocks++ == 0)
                    diag("P=%d V=%d m=%d: the lists deadlock under rendezvous sends", P, V, m);
            }
        }
    }
    ok(bad_build == 0, "interleaved: every stage's list builds for P = 2..%d, V = 2..%d, m = P, 2P, ... <= %d "
                       "(%d cases)", MAXP, MAXV, MAXM, cases);
    ok(bad_stage == 0, "interleaved: each (micro-batch, chunk) once through recv, forward, send, recv grad, backward, "
                       "send grad; Megatron's chunk order and warm-up; a slot per micro-batch, never shared");
    ok(deadlocks == 0, "interleaved: all P lists run to the end with rendezvous sends round the wrapped pipeline");
    int slots;
    struct dtrain_pipe_action room[6 * 4 * 2];
    ok(dtrain_pipe_schedule_v(2, 2, 0, 3, room, 6 * 3 * 2, &slots) < 0 &&
       dtrain_pipe_schedule_v(1, 2, 0, 2, room, 6 * 4 * 2, &slots) < 0 &&
       dtrain_pipe_schedule_v(2, 0, 0, 2, room, 6 * 4 * 2, &slots) < 0 &&
       dtrain_pipe_schedule_v(2, 2, 0, 4, room, 10, &slots) < 0,
       "interleaved: m not a multiple of P, P = 1, V = 0 and too little room are refused");
    /* the schedule's own bubble, relative to the ideal time, where the
     * simulation's costs hold: Megatron's (P-1)/(V*m) */
    double worst = 0.0;
    for (int P = 2; P <= MAXP; P++)
        for (int V = 2; V <= MAXV; V++)
            for (int m = P; m <= MAXM; m += P) {
                double dv = dtrain_pipe_sim_bubble_v(P, V, m) - (double)(P - 1) / ((double)V * m);
                if (dv < 0)
                    dv = -dv;
                if (dv > worst)
                    worst = dv;
            }
    ok(worst < 1e-9, "interleaved: the lists' simulated bubble is (P-1)/(V*m) of the ideal time for every case "
       "(largest difference %.2g)", worst);
    /* V = 1 is the plain list */
    struct dtrain_pipe_action plain[6 * 4];
    int s1, s2;
    long n1 = dtrain_pipe_schedule(3, 1, 4, plain, 24, &s1), n2 = dtrain_pipe_schedule_v(3, 1, 1, 4, room, 48, &s2);
    ok(n1 == n2 && s1 == s2 && memcmp(plain, room, (size_t)n1 * sizeof *plain) == 0,
       "dtrain_pipe_schedule_v with V = 1 is dtrain_pipe_schedule");
    double d = dtrain_pipe_bubble_v(4, 2, 8) - 3.0 / 19.0;
    ok(d < 1e-12 && d > -1e-12 && dtrain_pipe_bubble_v(4, 1, 8) == dtrain_pipe_bubble(4, 8),
       "the interleaved bubble (P-1)/(V*m+P-1): 3/19 for P=4 V=2 m=8, 1F1B's for V = 1");
}

int main(void)
{
    static struct lists L;
    int bad_build = 0, bad_stage = 0, deadlocks = 0, cases = 0;
    const char *first_problem = NULL;
    for (int P = 1; P <= MAXP; P++) {
        for (int m = 1; m <= MAXM; m++) {
            cases++;
            if (build(&L, P, m) != 0) {
                bad_build++;
                continue;
            }
            for (int s = 0; s < P; s++) {
                const char *why = check_stage(&L, s);
                if (why != NULL) {
                    bad_stage++;
                    if (first_problem == NULL)
                        first_problem = why, diag("P=%d m=%d: %s", P, m, why);
                }
            }
            if (!runs_to_end(&L)) {
                deadlocks++;
                if (deadlocks == 1)
                    diag("P=%d m=%d: the lists deadlock under rendezvous sends", P, m);
            }
        }
    }
    ok(bad_build == 0, "every stage's list builds for P = 1..%d, m = 1..%d (%d cases)", MAXP, MAXM, cases);
    ok(bad_stage == 0, "each micro-batch: recv, forward, send, recv grad, backward, send grad, once, in order; "
                       "forwards and backwards in micro-batch order; slots never shared");
    ok(deadlocks == 0, "all P lists run to the end with rendezvous sends (no deadlock), for every (P, m)");

    /* the in-flight figures of one case, by hand */
    build(&L, 4, 8);
    ok(L.slots[0] == 4 && L.slots[1] == 3 && L.slots[2] == 2 && L.slots[3] == 1,
       "P=4 m=8: stages keep 4, 3, 2, 1 micro-batches in flight (got %d %d %d %d)", L.slots[0], L.slots[1],
       L.slots[2], L.slots[3]);
    ok(L.a[3][0].op == DTRAIN_PIPE_RECV_ACT && L.a[3][1].op == DTRAIN_PIPE_FORWARD &&
       L.a[3][2].op == DTRAIN_PIPE_BACKWARD && L.a[3][3].op == DTRAIN_PIPE_RECV_ACT,
       "the last stage alternates one forward, one backward from its first micro-batch");
    long n0 = L.n[0];
    int fwd_before_bwd = 0;
    for (long k = 0; k < n0 && L.a[0][k].op != DTRAIN_PIPE_BACKWARD; k++)
        fwd_before_bwd += L.a[0][k].op == DTRAIN_PIPE_FORWARD;
    ok(fwd_before_bwd == 4, "stage 0 runs P = 4 forwards before its first backward (got %d)", fwd_before_bwd);
    build(&L, 3, 1);
    ok(L.slots[0] == 1 && L.n[0] == 4 && L.n[1] == 6 && L.n[2] == 4,
       "P=3 m=1: one micro-batch goes down and back (4, 6, 4 actions)");

    int slots;
    struct dtrain_pipe_action tiny[5];
    ok(dtrain_pipe_schedule(0, 0, 1, tiny, 5, &slots) < 0 && dtrain_pipe_schedule(2, 2, 1, tiny, 5, &slots) < 0 &&
       dtrain_pipe_schedule(2, 0, 0, tiny, 5, &slots) < 0 && dtrain_pipe_schedule(2, 1, 2, tiny, 5, &slots) < 0,
       "P < 1, stage >= P, m < 1 and too little room are refused");
    ok(dtrain_pipe_bubble(4, 8) > 0.2727 && dtrain_pipe_bubble(4, 8) < 0.2728 && dtrain_pipe_bubble(1, 3) == 0.0,
       "the ideal bubble (P-1)/(m+P-1): 3/11 for P=4 m=8, 0 without a pipeline");
    test_interleaved();
    return tap_done();
}
