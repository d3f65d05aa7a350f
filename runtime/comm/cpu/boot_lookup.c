/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu backend's address lookups: the leader's directory thread and a
 * member's question; see cpu_comm.h. */
#include "boot_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "comm/comm_backend.h"
#include "dtrain_parse.h"
#include "net.h"

/* ------------------------------------------------------------------ address lookups */

/* The leader's answers to members' lookups, by a thread of its own: the
 * members ask whenever they open a point-to-point link, which may be while
 * the leader computes or waits in another communicator, so the answers
 * cannot wait for the leader's next call.  It reads only the table
 * (complete, and no longer written, once the bootstrap is done) and owns
 * the BOOT connections.  Bounded: one request of WIRE_LOOKUP_LEN bytes at a
 * time per member (a member waits for each answer); a member that sends
 * anything else, or closes, loses its connection (it then sees it closed). */
struct cpu_directory {
    pthread_t thread;
    int wake[2];                 /* written once to stop the thread */
    int n;
    int *fds;                    /* [n]: the BOOT connections, -1 for the leader and closed ones */
    unsigned char (*req)[WIRE_LOOKUP_LEN]; /* [n]: a request on its way */
    unsigned char *got;          /* [n]: its bytes so far */
    const struct wire_peer *table;
    _Atomic uint64_t *sent;      /* the communicator's setup_bytes_sent */
    struct pollfd *p;            /* [n] */
};

static void directory_drop(struct cpu_directory *d, int i)
{
    close(d->fds[i]);
    d->fds[i] = -1;
}

/* Member i's connection has bytes (or closed): read, answer a whole request. */
static void directory_serve(struct cpu_directory *d, int i)
{
    ssize_t r = recv(d->fds[i], d->req[i] + d->got[i], WIRE_LOOKUP_LEN - d->got[i], MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (r <= 0) { /* the member destroyed its communicator, or died */
        directory_drop(d, i);
        return;
    }
    d->got[i] = (unsigned char)(d->got[i] + r);
    if (d->got[i] < WIRE_LOOKUP_LEN)
        return;
    d->got[i] = 0;
    uint32_t rank;
    unsigned char answer[WIRE_ANSWER_LEN];
    if (wire_lookup_decode(d->req[i], &rank) != 0 || rank >= (uint32_t)d->n) {
        directory_drop(d, i);
        return;
    }
    wire_answer_encode(rank, &d->table[rank], answer);
    /* The member waits for it with nothing else unread: its buffer has room. */
    if (send(d->fds[i], answer, sizeof answer, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof answer) {
        directory_drop(d, i);
        return;
    }
    atomic_fetch_add(d->sent, sizeof answer);
}

static void *directory_main(void *arg)
{
    struct cpu_directory *d = arg;
    for (;;) {
        nfds_t np = 0;
        d->p[np++] = (struct pollfd){.fd = d->wake[0], .events = POLLIN};
        for (int i = 1; i < d->n; i++)
            d->p[np++] = (struct pollfd){.fd = d->fds[i], .events = POLLIN}; /* -1: ignored */
        if (poll(d->p, np, -1) < 0) {
            if (errno == EINTR)
                continue;
            return NULL; /* members then see their lookups time out */
        }
        if (d->p[0].revents != 0)
            return NULL;
        for (int i = 1; i < d->n; i++)
            if (d->fds[i] >= 0 && d->p[i].revents != 0)
                directory_serve(d, i);
    }
}

static void directory_free(struct cpu_directory *d)
{
    if (d == NULL)
        return;
    for (int i = 0; d->fds != NULL && i < d->n; i++)
        if (d->fds[i] >= 0)
            close(d->fds[i]);
    if (d->wake[0] >= 0)
        close(d->wake[0]);
    if (d->wake[1] >= 0)
        close(d->wake[1]);
    free(d->fds);
    free(d->req);
    free(d->got);
    free(d->p);
    free(d);
}

/* The leader, at the end of step 5: a thread takes cc->boot_fds. */
int cpu_directory_start(struct dtrain_comm *c, struct cpu_comm *cc, char *why, size_t whylen)
{
    const int n = c->size;
    struct cpu_directory *d = calloc(1, sizeof *d);
    if (d == NULL)
        goto oom;
    d->wake[0] = d->wake[1] = -1;
    d->n = n;
    d->table = cc->table;
    d->sent = &c->setup_bytes_sent;
    d->req = calloc((size_t)n, sizeof *d->req);
    d->got = calloc((size_t)n, sizeof *d->got);
    d->p = calloc((size_t)n, sizeof *d->p);
    if (d->req == NULL || d->got == NULL || d->p == NULL)
        goto oom;
    if (pipe2(d->wake, O_CLOEXEC) != 0) {
        dtrain_snprintf(why, whylen, "pipe for the address lookups: %s", strerror(errno));
        directory_free(d);
        return -DTRAIN_COMM_ESYS;
    }
    d->fds = cc->boot_fds;
    int err = pthread_create(&d->thread, NULL, directory_main, d);
    if (err != 0) {
        d->fds = NULL; /* still cc->boot_fds: closed by the caller */
        dtrain_snprintf(why, whylen, "a thread for the address lookups: %s", strerror(err));
        directory_free(d);
        return -DTRAIN_COMM_ESYS;
    }
    cc->directory = d;
    return 0;
oom:
    directory_free(d);
    dtrain_snprintf(why, whylen, "out of memory for the address lookups of %d members", n);
    return -DTRAIN_COMM_ESYS;
}

void cpu_directory_stop(struct cpu_directory *d)
{
    if (d == NULL)
        return;
    char byte = 1;
    while (write(d->wake[1], &byte, 1) < 0 && errno == EINTR)
        ;
    pthread_join(d->thread, NULL);
    directory_free(d);
}

/* Member `peer`'s address: known (neighbour, asked before, or the leader's
 * table), else asked of the leader on the BOOT connection. */
int cpu_lookup(struct dtrain_comm *c, struct cpu_comm *cc, int peer, int64_t deadline_ms, char *why,
               size_t whylen)
{
    if (cc->table[peer].port != 0)
        return 0;
    if (cc->lookup_fd < 0) {
        dtrain_snprintf(why, whylen, "rank %d's address is not known and there is no connection to the leader to "
                        "ask for it", peer);
        return -DTRAIN_COMM_EINVAL;
    }
    unsigned char req[WIRE_LOOKUP_LEN], answer[WIRE_ANSWER_LEN];
    wire_lookup_encode((uint32_t)peer, req);
    int rc = net_write_all(c, cc->lookup_fd, req, sizeof req, deadline_ms, why, whylen);
    if (rc == 0)
        rc = net_read_all(c, cc->lookup_fd, answer, sizeof answer, deadline_ms, why, whylen);
    if (rc == -DTRAIN_COMM_EPEER) {
        dtrain_snprintf(why, whylen, "asking the leader (rank 0) for rank %d's address: the leader's "
                        "communicator is gone (destroyed or died), and it answers the address lookups", peer);
        return rc;
    }
    if (rc == -DTRAIN_COMM_ETIMEDOUT) {
        dtrain_snprintf(why, whylen, "the leader (rank 0) did not answer the lookup of rank %d's address within "
                        "%d ms", peer, c->timeout_ms);
        return rc;
    }
    if (rc != 0)
        return rc;
    uint32_t rank;
    struct wire_peer p;
    wire_answer_decode(answer, &rank, &p);
    if (rank != (uint32_t)peer || p.port == 0) {
        dtrain_snprintf(why, whylen, "the leader answered the lookup of rank %d's address with rank %u's, port %u",
                        peer, rank, p.port);
        return -DTRAIN_COMM_EPEER;
    }
    cc->table[peer] = p;
    return 0;
}
