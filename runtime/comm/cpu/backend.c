/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu backend: shared memory between processes of one host, TCP
 * between hosts, ring algorithms.  Bootstrap in boot.c, links in link.c,
 * algorithms in ring.c, the progress engine in engine.c. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_backend.h"
#include "cma.h"
#include "cpu_comm.h"
#include "dtrain_parse.h"
#include "net.h"
#include "ring.h"

static struct cpu_comm *impl(struct dtrain_comm *c)
{
    return c->impl;
}

static int cpu_init(struct dtrain_comm *c, const struct dtrain_comm_group *g, char *err, size_t errlen)
{
    char why[200];
    struct cpu_comm *cc = calloc(1, sizeof *cc);
    if (cc == NULL) {
        if (g->listen_fd >= 0)
            close(g->listen_fd);
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_COMM_ESYS;
    }
    cc->listen_fd = g->listen_fd; /* ours from now on, closed by destroy */
    cc->stash_fd = -1;
    cc->boot_fd = -1;
    cc->lookup_fd = -1;
    c->impl = cc;
    if (c->size == 1) { /* nobody will connect */
        if (cc->listen_fd >= 0)
            close(cc->listen_fd);
        cc->listen_fd = -1;
        return 0;
    }
    int64_t deadline = dtrain_clock_ms() + c->timeout_ms;
    cc->booting = 1;
    int rc = cpu_bootstrap(c, cc, g, deadline, why, sizeof why);
    if (rc == 0)
        rc = cpu_connect_ring(c, cc, deadline, why, sizeof why);
    if (rc == 0)
        rc = cpu_boot_done(c, cc, deadline, why, sizeof why);
    cc->booting = 0;
    if (rc != 0) {
        dtrain_snprintf(err, errlen, "%s", why);
        return -rc;
    }
    return 0;
}

/* On one host by direct reads (cma.h), else on the ring. */
static int cpu_allreduce(struct dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op)
{
    struct cpu_comm *cc = impl(c);
    int used, rc = cma_allreduce(c, cc, buf, count, op, &used);
    if (rc != 0 || used)
        return rc;
    return ring_allreduce(c, cc->next, cc->prev, buf, count, op, WIRE_OP_ALLREDUCE);
}

static int cpu_reduce_scatter(struct dtrain_comm *c, const float *in, float *out, size_t count,
                              enum dtrain_reduce_op op)
{
    struct cpu_comm *cc = impl(c);
    int used, rc = cma_reduce_scatter(c, cc, in, out, count, op, &used);
    if (rc != 0 || used)
        return rc;
    if (cc->scratch == NULL && c->size > 2 &&
        (cc->scratch = malloc(3 * (size_t)RING_CHUNK_FLOATS * sizeof(float))) == NULL)
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "reduce_scatter: out of memory for partial sums");
    return ring_reduce_scatter(c, cc->next, cc->prev, in, out, count, op, cc->scratch);
}

static int cpu_all_gather(struct dtrain_comm *c, const float *in, float *out, size_t count)
{
    int used, rc = cma_all_gather(c, impl(c), in, out, count * sizeof(float), &used);
    if (rc != 0 || used)
        return rc;
    return ring_all_gather(c, impl(c)->next, impl(c)->prev, in, out, count);
}

static int cpu_all_gather_bytes(struct dtrain_comm *c, const void *in, void *out, size_t bytes)
{
    int used, rc = cma_all_gather(c, impl(c), in, out, bytes, &used);
    if (rc != 0 || used)
        return rc;
    return ring_all_gather_bytes(c, impl(c)->next, impl(c)->prev, in, out, bytes);
}

static int cpu_broadcast(struct dtrain_comm *c, void *buf, size_t bytes, int root)
{
    return ring_broadcast(c, impl(c)->next, impl(c)->prev, buf, bytes, root);
}

/* The link to send to `to` (the ring's next member, or a point-to-point
 * link opened now), and the one to receive from `from`; -1: none. */
static int cpu_sendrecv(struct dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to, void *recvbuf,
                        size_t recv_bytes, int from)
{
    struct cpu_comm *cc = impl(c);
    struct link *out = NULL, *in = NULL;
    char why[200];
    int rc;
    /* Open ours before waiting for theirs: a peer doing the same then
     * finds our connection queued. */
    if (to >= 0) {
        out = cc->next;
        if (to != cc->next->peer && (rc = cpu_p2p_out(c, cc, to, &out, why, sizeof why)) != 0)
            return comm_fail(c, -rc, to, "send: opening a link to rank %d: %s", to, why);
    }
    if (from >= 0) {
        in = cc->prev;
        if (from != cc->prev->peer && (rc = cpu_p2p_in(c, cc, from, &in, why, sizeof why)) != 0)
            return comm_fail(c, -rc, from, "recv: waiting for rank %d's link: %s", from, why);
    }
    return ring_sendrecv(c, out, sendbuf, send_bytes, in, recvbuf, recv_bytes);
}

static int cpu_barrier(struct dtrain_comm *c)
{
    /* An all-reduce of one float per member: every member hears from every other. */
    float *token = calloc((size_t)c->size, sizeof *token);
    if (token == NULL)
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "barrier: out of memory");
    int rc = ring_allreduce(c, impl(c)->next, impl(c)->prev, token, (size_t)c->size, DTRAIN_REDUCE_SUM,
                            WIRE_OP_BARRIER);
    free(token);
    return rc;
}

/* Every link this communicator has (call under c->lock). */
static void each_link(struct dtrain_comm *c, void (*fn)(struct link *, void *), void *arg)
{
    struct cpu_comm *cc = impl(c);
    if (cc == NULL)
        return;
    if (cc->next != NULL)
        fn(cc->next, arg);
    if (cc->prev != NULL)
        fn(cc->prev, arg);
    for (int i = 0; i < c->size; i++) {
        if (cc->p2p_out != NULL && cc->p2p_out[i] != NULL)
            fn(cc->p2p_out[i], arg);
        if (cc->p2p_in != NULL && cc->p2p_in[i] != NULL)
            fn(cc->p2p_in[i], arg);
    }
}

static void break_one(struct link *l, void *arg)
{
    (void)arg;
    link_break(l);
}

static void cpu_break_links(struct dtrain_comm *c)
{
    pthread_mutex_lock(&c->lock);
    each_link(c, break_one, NULL);
    pthread_mutex_unlock(&c->lock);
}

static void find_gone(struct link *l, void *arg)
{
    struct link **gone = arg;
    if (*gone == NULL && link_peer_gone(l))
        *gone = l;
}

static void cpu_poll_links(struct dtrain_comm *c)
{
    struct cpu_comm *cc = impl(c);
    struct link *gone = NULL;
    pthread_mutex_lock(&c->lock);
    each_link(c, find_gone, &gone);
    int peer = gone != NULL ? gone->peer : -1;
    const char *which = gone == NULL ? "" : gone == cc->next ? " (ring successor)"
                                            : gone == cc->prev ? " (ring predecessor)" : "";
    pthread_mutex_unlock(&c->lock);
    if (gone != NULL)
        comm_fail(c, DTRAIN_COMM_EPEER, peer, "rank %d%s has closed its link: it exited, died or aborted", peer,
                  which);
}

static void cpu_destroy(struct dtrain_comm *c)
{
    if (c->impl != NULL)
        cpu_comm_close(c->impl, c->size);
    c->impl = NULL;
}

const struct comm_backend comm_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .allreduce = cpu_allreduce,
    .reduce_scatter = cpu_reduce_scatter,
    .all_gather = cpu_all_gather,
    .broadcast = cpu_broadcast,
    .all_gather_bytes = cpu_all_gather_bytes,
    .sendrecv = cpu_sendrecv,
    .barrier = cpu_barrier,
    .break_links = cpu_break_links,
    .poll_links = cpu_poll_links,
    .destroy = cpu_destroy,
};
