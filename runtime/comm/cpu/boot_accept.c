/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Bootstrap of the cpu backend: accepting connections and their hellos
 * (the pending list, the secret's proof, stashed and point-to-point
 * hellos); see cpu_comm.h for the sequence and wire.h for the messages. */
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

#define ACCEPT_SLICE_MS 20

/* ------------------------------------------------------------------ accepting */

void cpu_refuse(struct dtrain_comm *c, int fd)
{
    close(fd);
    atomic_fetch_add(&c->refused, 1);
}

static void drop_pending(struct cpu_comm *cc, int i)
{
    cc->pending[i] = cc->pending[--cc->npending];
}

/* Bytes of a pending hello arrived: -1 when they show a stranger (wrong
 * magic, version, kind or secret: refuse at once), else 0; marks the
 * connection proven once the secret matched. */
static int pending_check(const struct cpu_comm *cc, struct pending_conn *pc)
{
    if (wire_hello_prefix_check(pc->buf, pc->got) != 0)
        return -1;
    if (!pc->proven && pc->got >= WIRE_HELLO_SECRET_END) {
        if (!net_secret_equal(pc->buf + 8, cc->secret, sizeof cc->secret))
            return -1;
        pc->proven = 1;
        pc->deadline_ms = dtrain_clock_ms() + CPU_HELLO_TIMEOUT_MS;
    }
    return 0;
}

/* Whether the kernel's queue of connections not yet accepted on fd is half
 * full or more (Linux reports a listening socket's queue length and bound
 * in tcp_info: tcpi_unacked, tcpi_sacked); 1 when it cannot tell. */
static int queue_crowded(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ti.tcpi_sacked == 0)
        return 1;
    return 2 * (uint64_t)ti.tcpi_unacked >= ti.tcpi_sacked;
}

/* The pending connection to drop for a new one when the list is full: the
 * unproven one waiting longest, when it waited CPU_PENDING_MIN_AGE_MS or
 * the kernel's queue is crowded (cpu_comm.h); -1: none, the new
 * connections wait in the kernel's queue. */
static int pending_victim(const struct cpu_comm *cc, int64_t now)
{
    int victim = -1;
    for (int i = 0; i < cc->npending; i++)
        if (!cc->pending[i].proven && (victim < 0 || cc->pending[i].accepted_ms < cc->pending[victim].accepted_ms))
            victim = i;
    if (victim >= 0 && now - cc->pending[victim].accepted_ms < CPU_PENDING_MIN_AGE_MS && !queue_crowded(cc->listen_fd))
        victim = -1;
    return victim;
}

/* Whether a new connection may be taken now (a free slot, or one to drop). */
static int pending_room(const struct cpu_comm *cc, int64_t now)
{
    return cc->npending < cc->max_pending || pending_victim(cc, now) >= 0;
}

/* Take new connections off the listening socket into the pending list while
 * there is room, reading at once what each has already sent (a member's
 * hello is usually there), so that strangers are told apart before they
 * take a slot.  Stops at a whole hello, for the caller to take first. */
static int accept_new(struct dtrain_comm *c, struct cpu_comm *cc, char *why, size_t whylen)
{
    for (;;) {
        int64_t now = dtrain_clock_ms();
        if (!pending_room(cc, now))
            return 0; /* the rest wait in the kernel's queue */
        int fd = accept4(cc->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
                return 0;
            if (errno == EMFILE || errno == ENFILE) {
                struct rlimit rl;
                unsigned long long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (unsigned long long)rl.rlim_cur : 0;
                dtrain_snprintf(why, whylen, "accept: %s (this process may open %llu: raise `ulimit -n` for a "
                                "group of %d members)", strerror(errno), lim, c->size);
            } else {
                dtrain_snprintf(why, whylen, "accept: %s", strerror(errno));
            }
            return -DTRAIN_COMM_ESYS;
        }
        struct pending_conn pc = {.fd = fd, .accepted_ms = now, .deadline_ms = now + CPU_PROVE_TIMEOUT_MS};
        ssize_t n = recv(fd, pc.buf, WIRE_HELLO_LEN, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            cpu_refuse(c, fd);
            continue;
        }
        pc.got = n > 0 ? (size_t)n : 0;
        if (pending_check(cc, &pc) != 0) {
            cpu_refuse(c, fd);
            continue;
        }
        if (cc->npending == cc->max_pending) {
            int victim = pending_victim(cc, now);
            if (victim < 0) { /* cannot happen: room was there and nothing was added */
                cpu_refuse(c, fd);
                continue;
            }
            cpu_refuse(c, cc->pending[victim].fd);
            drop_pending(cc, victim);
        }
        cc->pending[cc->npending++] = pc;
        if (pc.got == WIRE_HELLO_LEN)
            return 0;
    }
}

/* A complete hello: is it one of ours, for us? */
static int hello_valid(const struct dtrain_comm *c, const struct cpu_comm *cc, const unsigned char *buf,
                       struct wire_hello *h)
{
    if (wire_hello_decode(buf, h) != 0)
        return 0;
    int secret_ok = net_secret_equal(h->secret, cc->secret, sizeof cc->secret);
    return secret_ok && h->group_size == (uint32_t)c->size && h->to == (uint32_t)c->rank &&
           h->from < (uint32_t)c->size && h->from != (uint32_t)c->rank;
}

int cpu_set_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* An authenticated P2P hello: its link, for a later recv from that member. */
static void install_p2p_in(struct dtrain_comm *c, struct cpu_comm *cc, int fd, int from)
{
    struct link *l = NULL;
    if (cc->p2p_in[from] == NULL && cpu_set_nodelay(fd) == 0)
        l = link_new(fd, from, 0);
    if (l == NULL) {
        cpu_refuse(c, fd);
        return;
    }
    link_set_waiting(l, cc->oversubscribed);
    pthread_mutex_lock(&c->lock);
    cc->p2p_in[from] = l;
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(&c->tcp_links, 1);
}

/* Pending connection i's hello is complete: take it out of the list and
 * use it.  1 when it is the hello the caller waits for (fd and hello
 * returned), else 0 (installed, kept or refused). */
static int complete_pending(struct dtrain_comm *c, struct cpu_comm *cc, int i, enum wire_hello_kind kind, int from,
                            int *fd_out, struct wire_hello *h)
{
    struct pending_conn *pc = &cc->pending[i];
    unsigned char buf[WIRE_HELLO_LEN];
    memcpy(buf, pc->buf, sizeof buf);
    int fd = pc->fd;
    drop_pending(cc, i);
    if (!hello_valid(c, cc, buf, h)) {
        cpu_refuse(c, fd);
        return 0;
    }
    if (h->kind == kind && (from < 0 || h->from == (uint32_t)from) && kind != WIRE_P2P) {
        *fd_out = fd;
        return 1;
    }
    if (h->kind == WIRE_P2P) {
        install_p2p_in(c, cc, fd, (int)h->from);
        return 0;
    }
    /* A ring neighbour that was faster than us: keep it for cpu_connect_ring. */
    if (h->kind == WIRE_RING && cc->stash_fd < 0 && h->from == (uint32_t)((c->rank + c->size - 1) % c->size)) {
        cc->stash_fd = fd;
        cc->stash = *h;
        return 0;
    }
    cpu_refuse(c, fd);
    return 0;
}

/* Read what pending connection i has sent.  1 when a hello the caller
 * waits for is complete (fd and hello returned), else 0. */
static int read_pending(struct dtrain_comm *c, struct cpu_comm *cc, int i, enum wire_hello_kind kind, int from,
                        int *fd_out, struct wire_hello *h)
{
    struct pending_conn *pc = &cc->pending[i];
    ssize_t n = recv(pc->fd, pc->buf + pc->got, WIRE_HELLO_LEN - pc->got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n <= 0) {
        cpu_refuse(c, pc->fd);
        drop_pending(cc, i);
        return 0;
    }
    pc->got += (size_t)n;
    if (pending_check(cc, pc) != 0) {
        cpu_refuse(c, pc->fd);
        drop_pending(cc, i);
        return 0;
    }
    if (pc->got < WIRE_HELLO_LEN)
        return 0;
    return complete_pending(c, cc, i, kind, from, fd_out, h);
}

/* Wait for an authenticated hello of `kind` from member `from` (-1: any);
 * for WIRE_P2P, until cc->p2p_in[from] is installed.  Everything else that
 * arrives on the way is installed, kept or dropped. */
int cpu_accept_hello(struct dtrain_comm *c, struct cpu_comm *cc, enum wire_hello_kind kind, int from,
                     int64_t deadline_ms, int *fd_out, struct wire_hello *h, char *why, size_t whylen)
{
    struct wire_hello unused_hello;
    int unused_fd;
    if (h == NULL)
        h = &unused_hello;
    if (fd_out == NULL)
        fd_out = &unused_fd;
    for (;;) {
        if (kind == WIRE_P2P && cc->p2p_in[from] != NULL)
            return 0;
        if (kind == WIRE_RING && cc->stash_fd >= 0 && cc->stash.from == (uint32_t)from) {
            *fd_out = cc->stash_fd;
            *h = cc->stash;
            cc->stash_fd = -1;
            return 0;
        }
        int rc = net_check(c, deadline_ms, why, whylen);
        if (rc != 0)
            return rc;
        /* Hellos that came whole (with their connection, or while an
         * earlier call returned another): no more bytes will wake poll
         * for them. */
        for (int i = cc->npending - 1; i >= 0; i--)
            if (cc->pending[i].got == WIRE_HELLO_LEN && complete_pending(c, cc, i, kind, from, fd_out, h))
                return 0;
        /* The listening socket only while a new connection can be taken:
         * else it stays readable and poll would not sleep. */
        struct pollfd *p = cc->poll;
        int np = 0, listening = pending_room(cc, dtrain_clock_ms());
        p[np++] = (struct pollfd){.fd = listening ? cc->listen_fd : -1, .events = POLLIN};
        for (int i = 0; i < cc->npending; i++)
            p[np++] = (struct pollfd){.fd = cc->pending[i].fd, .events = POLLIN};
        int64_t left = deadline_ms - dtrain_clock_ms();
        int slice = cc->booting ? CPU_BOOT_WATCH_MS : ACCEPT_SLICE_MS;
        if (poll(p, (nfds_t)np, (int)(left < slice ? (left > 0 ? left : 0) : slice)) < 0 &&
            errno != EINTR) {
            dtrain_snprintf(why, whylen, "poll: %s", strerror(errno));
            return -DTRAIN_COMM_ESYS;
        }
        /* Pending connections first (indices shift as they leave), newest last. */
        int64_t now = dtrain_clock_ms();
        for (int i = cc->npending - 1; i >= 0; i--) {
            if (p[1 + i].revents != 0) {
                if (read_pending(c, cc, i, kind, from, fd_out, h))
                    return 0;
            } else if (now >= cc->pending[i].deadline_ms) {
                cpu_refuse(c, cc->pending[i].fd);
                drop_pending(cc, i);
            }
        }
        if (p[0].revents != 0 && (rc = accept_new(c, cc, why, whylen)) != 0)
            return rc;
    }
}
