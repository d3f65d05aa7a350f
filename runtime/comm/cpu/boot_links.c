/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Bootstrap of the cpu backend, step 4: the ring links, and the
 * point-to-point links opened on first use; see cpu_comm.h. */
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

/* ------------------------------------------------------------------ step 4: ring links */

static struct sockaddr_in peer_address(const struct cpu_comm *cc, int rank)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr = cc->table[rank].addr,
                              .sin_port = htons(cc->table[rank].port)};
    return sin;
}

static int same_host(const struct dtrain_comm *c, const struct cpu_comm *cc, int rank)
{
    return c->transport != DTRAIN_COMM_TRANSPORT_TCP && cc->table[rank].host == cc->table[c->rank].host;
}

/* Connect to `to` and say hello; *fd_out is the connection. */
static int connect_hello(struct dtrain_comm *c, struct cpu_comm *cc, int to, enum wire_hello_kind kind,
                         unsigned flags, int64_t deadline_ms, int *fd_out, char *why, size_t whylen)
{
    struct sockaddr_in sin = peer_address(cc, to);
    unsigned char buf[WIRE_HELLO_LEN];
    struct wire_hello h = {.kind = kind, .group_size = (uint32_t)c->size, .from = (uint32_t)c->rank,
                           .to = (uint32_t)to, .flags = (uint16_t)flags, .pid = (uint32_t)getpid()};
    memcpy(h.secret, cc->secret, sizeof h.secret);
    wire_hello_encode(&h, buf);
    int rc = net_connect(c, &sin, deadline_ms, fd_out, why, whylen);
    if (rc != 0)
        return rc;
    rc = net_write_all(c, *fd_out, buf, sizeof buf, deadline_ms, why, whylen);
    if (rc != 0) {
        close(*fd_out);
        *fd_out = -1;
    }
    return rc;
}

/* A new link: its waiting policy, and the statistics. */
static void count_link(struct dtrain_comm *c, const struct cpu_comm *cc, struct link *l)
{
    link_set_waiting(l, cc->oversubscribed);
    atomic_fetch_add(l->ring != NULL ? &c->shm_links : &c->tcp_links, 1);
}

/* More members of this communicator on this host than CPUs to run them
 * (other communicators and jobs are not counted: a hint, not a census). */
static int host_oversubscribed(const struct dtrain_comm *c, const struct cpu_comm *cc)
{
    (void)c;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    return cc->local > (uint32_t)CPU_COUNT(&set);
}

int cpu_connect_ring(struct dtrain_comm *c, struct cpu_comm *cc, int64_t deadline_ms, char *why, size_t whylen)
{
    const int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    unsigned char reply[WIRE_REPLY_LEN], ack[WIRE_ACK_LEN];
    char name[WIRE_SHM_NAME_MAX] = "";
    struct wire_hello h;
    int fd = -1, rc, offered = 0, mapped = 0;

    /* Connect to next first (the kernel queues it), then take prev's, so
     * that no member waits for another that waits too. */
    rc = connect_hello(c, cc, next, WIRE_RING, same_host(c, cc, next) ? WIRE_FLAG_SHM : 0, deadline_ms, &fd, why,
                       whylen);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    cc->next = link_new(fd, next, 1);
    pthread_mutex_unlock(&c->lock);
    if (cc->next == NULL) {
        close(fd);
        goto oom;
    }
    rc = cpu_accept_hello(c, cc, WIRE_RING, prev, deadline_ms, &fd, &h, why, whylen);
    if (rc == -DTRAIN_COMM_ETIMEDOUT)
        dtrain_snprintf(why, whylen, "rank %d (ring predecessor) did not connect within %d ms", prev, c->timeout_ms);
    if (rc != 0)
        return rc;
    if (cpu_set_nodelay(fd) != 0) {
        close(fd);
        dtrain_snprintf(why, whylen, "setsockopt TCP_NODELAY: %s", strerror(errno));
        return -DTRAIN_COMM_ESYS;
    }
    pthread_mutex_lock(&c->lock);
    cc->prev = link_new(fd, prev, 0);
    pthread_mutex_unlock(&c->lock);
    if (cc->prev == NULL) {
        close(fd);
        goto oom;
    }
    /* Shared memory when both think they share a host; if the segment
     * cannot be made here, the link stays on TCP. */
    offered = (h.flags & WIRE_FLAG_SHM) && same_host(c, cc, prev) && link_shm_create(cc->prev, name) == 0;
    wire_reply_encode(offered, name, reply);
    if ((rc = net_write_all(c, cc->prev->fd, reply, sizeof reply, deadline_ms, why, whylen)) != 0)
        goto out;
    /* next's answer to our hello. */
    int shm = 0;
    char next_name[WIRE_SHM_NAME_MAX];
    if ((rc = net_read_all(c, cc->next->fd, reply, sizeof reply, deadline_ms, why, whylen)) != 0) {
        if (rc == -DTRAIN_COMM_EPEER && strstr(why, "rank ") == NULL) {
            char step[200];
            dtrain_snprintf(step, sizeof step, "%s", why);
            dtrain_snprintf(why, whylen, "rank %d (ring successor) went away while the ring link was set up "
                            "(it died?): %s", next, step);
        }
        goto out;
    }
    if (wire_reply_decode(reply, &shm, next_name) != 0) {
        dtrain_snprintf(why, whylen, "rank %d answered the ring hello with garbage", next);
        rc = -DTRAIN_COMM_EPEER;
        goto out;
    }
    int next_mapped = shm && link_shm_open(cc->next, next_name) == 0;
    wire_ack_encode(next_mapped, ack);
    if ((rc = net_write_all(c, cc->next->fd, ack, sizeof ack, deadline_ms, why, whylen)) != 0 ||
        (rc = net_read_all(c, cc->prev->fd, ack, sizeof ack, deadline_ms, why, whylen)) != 0)
        goto out;
    if (wire_ack_decode(ack, &mapped) != 0) {
        dtrain_snprintf(why, whylen, "rank %d acknowledged the ring link with garbage", prev);
        rc = -DTRAIN_COMM_EPEER;
        goto out;
    }
    if (offered && !mapped)
        link_shm_drop(cc->prev);
    cc->oversubscribed = host_oversubscribed(c, cc);
    count_link(c, cc, cc->next);
    count_link(c, cc, cc->prev);
out:
    if (offered)
        link_shm_unlink(name); /* both have it mapped, or it is not used: the name goes */
    return rc;
oom:
    dtrain_snprintf(why, whylen, "out of memory for a link");
    return -DTRAIN_COMM_ESYS;
}

/* ------------------------------------------------------------------ point-to-point links */

int cpu_p2p_out(struct dtrain_comm *c, struct cpu_comm *cc, int peer, struct link **out, char *why, size_t whylen)
{
    if (cc->p2p_out[peer] == NULL) {
        int fd;
        int64_t deadline_ms = dtrain_clock_ms() + c->timeout_ms;
        int rc = cpu_lookup(c, cc, peer, deadline_ms, why, whylen);
        if (rc == 0)
            rc = connect_hello(c, cc, peer, WIRE_P2P, 0, deadline_ms, &fd, why, whylen);
        if (rc != 0)
            return rc;
        struct link *l = link_new(fd, peer, 1);
        if (l == NULL) {
            close(fd);
            dtrain_snprintf(why, whylen, "out of memory for a link");
            return -DTRAIN_COMM_ESYS;
        }
        pthread_mutex_lock(&c->lock);
        cc->p2p_out[peer] = l;
        pthread_mutex_unlock(&c->lock);
        count_link(c, cc, l);
    }
    *out = cc->p2p_out[peer];
    return 0;
}

int cpu_p2p_in(struct dtrain_comm *c, struct cpu_comm *cc, int peer, struct link **out, char *why, size_t whylen)
{
    if (cc->p2p_in[peer] == NULL) {
        int rc = cpu_accept_hello(c, cc, WIRE_P2P, peer, dtrain_clock_ms() + c->timeout_ms, NULL, NULL, why, whylen);
        if (rc == -DTRAIN_COMM_ETIMEDOUT)
            dtrain_snprintf(why, whylen, "rank %d did not connect to send within %d ms", peer, c->timeout_ms);
        if (rc != 0)
            return rc;
    }
    *out = cc->p2p_in[peer];
    return 0;
}
