/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The progress engine; see engine.h. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm_backend.h"
#include "dtrain_grow.h"
#include "net.h"

void engine_begin(struct engine_plan *p, struct link *s, struct link *r, enum wire_op op, unsigned arg,
                  unsigned root, size_t send_count, size_t recv_count)
{
    memset(p, 0, sizeof *p);
    p->op = op;
    struct wire_header h = {.op = (uint16_t)op, .arg = (uint16_t)arg, .root = root, .count = send_count};
    if (s != NULL) {
        h.seq = s->seq++;
        wire_header_encode(&h, p->header_out);
        engine_send(p, p->header_out, WIRE_HEADER_LEN, -1);
        p->send[0].payload = 0;
    }
    if (r != NULL) {
        p->expect = h;
        p->expect.count = recv_count;
        p->expect.seq = r->seq++;
        engine_recv(p, p->header_in, WIRE_HEADER_LEN, RECV_HEADER, NULL, 0.0f, -1);
        p->recv[0].payload = 0;
    }
}

long engine_send_copy(struct engine_plan *p, const void *src, size_t bytes, long dep, void *copy_to)
{
    if (bytes == 0)
        return -1;
    if (dtrain_grow((void **)&p->send, &p->send_cap, p->nsend, sizeof *p->send, 64) != 0) {
        p->out_of_memory = 1;
        return -1;
    }
    p->send[p->nsend] = (struct send_op){.src = src, .bytes = bytes, .dep = dep, .copy_to = copy_to, .payload = 1};
    return (long)p->nsend++;
}

long engine_send(struct engine_plan *p, const void *src, size_t bytes, long dep)
{
    return engine_send_copy(p, src, bytes, dep, NULL);
}

long engine_recv(struct engine_plan *p, void *dst, size_t bytes, enum recv_kind kind, const float *a,
                 float divisor, long gate)
{
    if (bytes == 0)
        return -1;
    if (dtrain_grow((void **)&p->recv, &p->recv_cap, p->nrecv, sizeof *p->recv, 64) != 0) {
        p->out_of_memory = 1;
        return -1;
    }
    p->recv[p->nrecv] = (struct recv_op){.dst = dst, .bytes = bytes, .kind = kind, .a = a,
                                         .divisor = divisor, .gate = gate, .payload = kind != RECV_DISCARD};
    return (long)p->nrecv++;
}

void engine_pad(struct engine_plan *p, size_t bytes, int send, int recv)
{
    size_t pad = (4 - bytes % 4) % 4;
    if (send)
        engine_send(p, p->pad_out, pad, -1);
    if (recv)
        engine_recv(p, p->pad_in, pad, RECV_DISCARD, NULL, 0.0f, -1);
    if (send && pad > 0)
        p->send[p->nsend - 1].payload = 0;
}

void engine_free(struct engine_plan *p)
{
    free(p->send);
    free(p->recv);
    p->send = NULL;
    p->recv = NULL;
}

static const char *op_name(const struct engine_plan *p)
{
    return wire_op_name(p->op);
}

/* The header the peer sent against the one expected. */
static int check_header(struct dtrain_comm *c, struct engine_plan *p, const struct link *r)
{
    struct wire_header got;
    const struct wire_header *want = &p->expect;
    if (wire_header_decode(p->header_in, &got) != 0)
        return comm_fail(c, DTRAIN_COMM_EMISMATCH, r->peer, "%s: rank %d sent something that is not a message header",
                         wire_op_name(want->op), r->peer);
    char here[96], there[96];
    if (got.op != want->op || got.arg != want->arg || got.root != want->root || got.count != want->count ||
        got.seq != want->seq)
        return comm_fail(c, DTRAIN_COMM_EMISMATCH, r->peer,
                         "%s here, but rank %d sent %s: members must make the same calls in the same order",
                         wire_header_text(want, here, sizeof here), r->peer, wire_header_text(&got, there, sizeof there));
    return 0;
}

/* Move the receive list; returns bytes moved, or -1 after comm_fail. */
static long pump_recv(struct dtrain_comm *c, struct engine_plan *p, struct link *r, size_t si, size_t *ri,
                      size_t *roff)
{
    long moved = 0;
    while (*ri < p->nrecv) {
        struct recv_op *op = &p->recv[*ri];
        if (op->gate >= 0 && si <= (size_t)op->gate)
            break;
        size_t left = op->bytes - *roff;
        ssize_t n;
        if (op->kind == RECV_REDUCE) {
            n = link_read_reduce(r, (float *)(void *)((char *)op->dst + *roff),
                                 (const float *)(const void *)((const char *)op->a + *roff), left / sizeof(float),
                                 op->divisor);
            if (n > 0)
                n *= (ssize_t)sizeof(float);
        } else {
            n = link_read(r, (char *)op->dst + *roff, left);
        }
        if (n < 0) {
            comm_fail(c, (int)-n, r->peer, "%s: receiving from rank %d: %s", op_name(p), r->peer, r->why);
            return -1;
        }
        if (n == 0)
            break;
        moved += n;
        *roff += (size_t)n;
        if (op->payload)
            atomic_fetch_add_explicit(&c->bytes_received, (uint64_t)n, memory_order_relaxed);
        if (*roff == op->bytes) {
            if (op->kind == RECV_HEADER && check_header(c, p, r) != 0)
                return -1;
            (*ri)++;
            *roff = 0;
        }
    }
    return moved;
}

/* Bytes of send op si that may go now (its dependency's progress). */
static size_t send_allowed(const struct engine_plan *p, size_t si, size_t ri, size_t roff)
{
    const struct send_op *op = &p->send[si];
    if (op->dep < 0 || ri > (size_t)op->dep)
        return op->bytes;
    return ri == (size_t)op->dep ? roff : 0;
}

static long pump_send(struct dtrain_comm *c, struct engine_plan *p, struct link *s, size_t *si, size_t *soff,
                      size_t ri, size_t roff)
{
    long moved = 0;
    while (*si < p->nsend) {
        struct send_op *op = &p->send[*si];
        size_t allowed = send_allowed(p, *si, ri, roff);
        if (*soff >= allowed)
            break;
        ssize_t n = link_write(s, (const char *)op->src + *soff, allowed - *soff);
        if (n < 0) {
            comm_fail(c, (int)-n, s->peer, "%s: sending to rank %d: %s", op_name(p), s->peer, s->why);
            return -1;
        }
        if (n == 0)
            break;
        if (op->copy_to != NULL)
            memcpy((char *)op->copy_to + *soff, (const char *)op->src + *soff, (size_t)n);
        moved += n;
        *soff += (size_t)n;
        if (op->payload)
            atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)n, memory_order_relaxed);
        if (*soff == op->bytes) {
            (*si)++;
            *soff = 0;
        }
    }
    return moved;
}

int engine_run(struct dtrain_comm *c, struct link *s, struct link *r, struct engine_plan *p)
{
    size_t si = 0, soff = 0, ri = 0, roff = 0;
    unsigned idle = 0;
    int64_t idle_since = 0;

    if (p->out_of_memory)
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: out of memory for the operation's plan", op_name(p));
    for (;;) {
        int failed = atomic_load_explicit(&c->failed, memory_order_relaxed);
        if (failed != 0) /* broken meanwhile, e.g. by dtrain_comm_abort() in another thread */
            return failed;
        /* Sending first puts this member's header out before it judges
         * the peer's, so that both ends of a mismatch see it. */
        long got_s = s != NULL ? pump_send(c, p, s, &si, &soff, ri, roff) : 0;
        if (got_s < 0)
            return atomic_load(&c->failed);
        long got_r = r != NULL ? pump_recv(c, p, r, si, &ri, &roff) : 0;
        if (got_r < 0)
            return atomic_load(&c->failed);
        if (si == p->nsend && ri == p->nrecv)
            return 0;
        if (got_r > 0 || got_s > 0) {
            idle = 0;
            continue;
        }
        if (comm_should_abort(c))
            return comm_fail(c, DTRAIN_COMM_EABORTED, -1, "%s: aborted", op_name(p));
        int64_t now = dtrain_clock_ms();
        if (idle == 0)
            idle_since = now;
        /* Wait on what blocks: data to receive, room to send. */
        int recv_blocked = ri < p->nrecv && !(p->recv[ri].gate >= 0 && si <= (size_t)p->recv[ri].gate);
        int send_blocked = si < p->nsend && soff < send_allowed(p, si, ri, roff);
        if (now - idle_since >= c->timeout_ms) {
            int peer = recv_blocked ? r->peer : send_blocked ? s->peer : -1;
            return comm_fail(c, DTRAIN_COMM_ETIMEDOUT, peer,
                             "%s: no progress for %d ms waiting %s rank %d (stuck or dead?)", op_name(p),
                             c->timeout_ms, recv_blocked ? "for data from" : "to send to", peer);
        }
        int rc = link_wait(recv_blocked ? r : NULL, send_blocked ? s : NULL, idle++);
        if (rc < 0)
            return comm_fail(c, -rc, -1, "%s: waiting for the links failed", op_name(p));
    }
}
