/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Bootstrap, ring links and point-to-point links of the cpu backend; see
 * cpu_comm.h for the sequence and wire.h for the messages. */
#include "cpu_comm.h"

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

/* ------------------------------------------------------------------ id */

int cpu_id_parse(const char *id, struct sockaddr_in *leader, unsigned char secret[DTRAIN_BOOTSTRAP_SECRET_LEN])
{
    struct dtrain_cpu_id parsed;
    memset(leader, 0, sizeof *leader);
    if (dtrain_cpu_id_parse(id, &parsed) != 0)
        return -1;
    leader->sin_family = AF_INET;
    if (inet_pton(AF_INET, parsed.addr, &leader->sin_addr) != 1) /* checked by the parser */
        return -1;
    leader->sin_port = htons((uint16_t)parsed.port);
    memcpy(secret, parsed.secret, DTRAIN_BOOTSTRAP_SECRET_LEN);
    return 0;
}

/* How often the leader looks at the members that joined while it waits
 * for the others. */
#define GATHER_SLICE_MS 500

/* ------------------------------------------------------------------ accepting */

static void refuse(struct dtrain_comm *c, int fd)
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
        pc->deadline_ms = comm_now_ms() + CPU_HELLO_TIMEOUT_MS;
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
        int64_t now = comm_now_ms();
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
            refuse(c, fd);
            continue;
        }
        pc.got = n > 0 ? (size_t)n : 0;
        if (pending_check(cc, &pc) != 0) {
            refuse(c, fd);
            continue;
        }
        if (cc->npending == cc->max_pending) {
            int victim = pending_victim(cc, now);
            if (victim < 0) { /* cannot happen: room was there and nothing was added */
                refuse(c, fd);
                continue;
            }
            refuse(c, cc->pending[victim].fd);
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

static int set_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* An authenticated P2P hello: its link, for a later recv from that member. */
static void install_p2p_in(struct dtrain_comm *c, struct cpu_comm *cc, int fd, int from)
{
    struct link *l = NULL;
    if (cc->p2p_in[from] == NULL && set_nodelay(fd) == 0)
        l = link_new(fd, from, 0);
    if (l == NULL) {
        refuse(c, fd);
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
        refuse(c, fd);
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
    refuse(c, fd);
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
        refuse(c, pc->fd);
        drop_pending(cc, i);
        return 0;
    }
    pc->got += (size_t)n;
    if (pending_check(cc, pc) != 0) {
        refuse(c, pc->fd);
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
static int accept_hello(struct dtrain_comm *c, struct cpu_comm *cc, enum wire_hello_kind kind, int from,
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
        int np = 0, listening = pending_room(cc, comm_now_ms());
        p[np++] = (struct pollfd){.fd = listening ? cc->listen_fd : -1, .events = POLLIN};
        for (int i = 0; i < cc->npending; i++)
            p[np++] = (struct pollfd){.fd = cc->pending[i].fd, .events = POLLIN};
        int64_t left = deadline_ms - comm_now_ms();
        int slice = cc->booting ? CPU_BOOT_WATCH_MS : ACCEPT_SLICE_MS;
        if (poll(p, (nfds_t)np, (int)(left < slice ? (left > 0 ? left : 0) : slice)) < 0 &&
            errno != EINTR) {
            dtrain_snprintf(why, whylen, "poll: %s", strerror(errno));
            return -DTRAIN_COMM_ESYS;
        }
        /* Pending connections first (indices shift as they leave), newest last. */
        int64_t now = comm_now_ms();
        for (int i = cc->npending - 1; i >= 0; i--) {
            if (p[1 + i].revents != 0) {
                if (read_pending(c, cc, i, kind, from, fd_out, h))
                    return 0;
            } else if (now >= cc->pending[i].deadline_ms) {
                refuse(c, cc->pending[i].fd);
                drop_pending(cc, i);
            }
        }
        if (p[0].revents != 0 && (rc = accept_new(c, cc, why, whylen)) != 0)
            return rc;
    }
}

/* ------------------------------------------------------------------ steps 1-3 */

/* The IPv4 address and port a socket is bound to. */
static int local_address(int fd, struct sockaddr_in *sin, char *why, size_t whylen)
{
    socklen_t len = sizeof *sin;
    int rc = getsockname(fd, (struct sockaddr *)sin, &len);
    if (rc != 0 || sin->sin_family != AF_INET) {
        dtrain_snprintf(why, whylen, "getsockname: %s", rc != 0 ? strerror(errno) : "not an IPv4 socket");
        return -DTRAIN_COMM_EINVAL;
    }
    return 0;
}

/* A joined member whose connection closed (it died): its rank, else -1. */
static int member_gone(const int *fds, int n)
{
    for (int i = 1; i < n; i++) {
        char byte;
        if (fds[i] >= 0 && recv(fds[i], &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
            return i;
    }
    return -1;
}

/* A member's host id and rank, sorted by host id, then rank. */
struct host_ref {
    const char *host;
    int rank;
};

static int by_host(const void *a, const void *b)
{
    const struct host_ref *x = a, *y = b;
    int d = strcmp(x->host, y->host);
    return d != 0 ? d : (x->rank > y->rank) - (x->rank < y->rank);
}

static int leader_gather(struct dtrain_comm *c, struct cpu_comm *cc, int64_t deadline_ms, char *why, size_t whylen)
{
    const int n = c->size;
    struct sockaddr_in me;
    int rc = local_address(cc->listen_fd, &me, why, whylen);
    if (rc != 0)
        return rc;
    int *fds = malloc((size_t)n * sizeof *fds);
    char(*hosts)[DTRAIN_COMM_HOST_ID_MAX] = calloc((size_t)n, sizeof *hosts);
    uint32_t *local = calloc((size_t)n, sizeof *local); /* by host number: members on that host */
    if (fds == NULL || hosts == NULL || local == NULL) {
        dtrain_snprintf(why, whylen, "out of memory for the table of %d members", n);
        rc = -DTRAIN_COMM_ESYS;
        goto out;
    }
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    cc->table[0] = (struct wire_peer){.addr = me.sin_addr, .port = ntohs(me.sin_port)};
    dtrain_snprintf(hosts[0], sizeof hosts[0], "%s", c->host_id);
    for (int joined = 1; joined < n;) {
        struct wire_hello h;
        int fd;
        /* In slices, so that a member that joined and then died is noticed
         * at once: the bootstrap fails and every joined member, waiting for
         * the table, sees its connection close, instead of all waiting out
         * the whole timeout. */
        int64_t slice = comm_now_ms() + GATHER_SLICE_MS;
        rc = accept_hello(c, cc, WIRE_BOOT, -1, slice < deadline_ms ? slice : deadline_ms, &fd, &h, why, whylen);
        if (rc == -DTRAIN_COMM_ETIMEDOUT && comm_now_ms() < deadline_ms) {
            int gone = member_gone(fds, n);
            if (gone < 0)
                continue;
            dtrain_snprintf(why, whylen, "rank %d joined and then closed its connection while %d of %d members "
                            "had joined (it died?)", gone, joined, n);
            rc = -DTRAIN_COMM_EPEER;
            goto out;
        }
        if (rc == -DTRAIN_COMM_ETIMEDOUT) {
            int missing = 1;
            while (missing < n && fds[missing] >= 0)
                missing++;
            dtrain_snprintf(why, whylen, "%d of %d members joined within %d ms; rank %d and maybe others did not "
                            "(dead, or not started?)", joined, n, c->timeout_ms, missing);
        }
        if (rc != 0)
            goto out;
        if (fds[h.from] >= 0 || h.port == 0) { /* a second hello for one rank: not ours to believe */
            refuse(c, fd);
            continue;
        }
        /* Taken: say so, so that the member tells this apart from being
         * dropped with the strangers (then it joins again).  One byte on a
         * new connection does not block; a member gone already may come
         * back. */
        unsigned char joined_byte = WIRE_BOOT_JOINED;
        if (send(fd, &joined_byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
            close(fd);
            continue;
        }
        atomic_fetch_add(&c->setup_bytes_sent, 1);
        fds[h.from] = fd;
        cc->table[h.from] = (struct wire_peer){.addr = h.addr, .port = h.port};
        memcpy(hosts[h.from], h.host_id, sizeof hosts[h.from]);
        joined++;
    }
    /* Host numbers: the first member with the same host id (sorted, not
     * compared pairwise: n log n string compares at 10^5 members, not n^2). */
    struct host_ref *refs = malloc((size_t)n * sizeof *refs);
    if (refs == NULL) {
        dtrain_snprintf(why, whylen, "out of memory for the host numbers of %d members", n);
        rc = -DTRAIN_COMM_ESYS;
        goto out;
    }
    for (int i = 0; i < n; i++)
        refs[i] = (struct host_ref){hosts[i], i};
    qsort(refs, (size_t)n, sizeof *refs, by_host);
    for (int i = 0, first = 0; i < n; i++) {
        if (i > 0 && strcmp(refs[i].host, refs[i - 1].host) != 0)
            first = i;
        cc->table[refs[i].rank].host = (uint32_t)refs[first].rank;
        local[refs[first].rank]++;
    }
    free(refs);
    cc->local = local[cc->table[0].host];
    /* Each member its ring neighbours and itself, the same bytes at any n;
     * the others' addresses it asks for when it needs them (lookup). */
    for (int i = 1; i < n; i++) {
        unsigned char msg[WIRE_TABLE_LEN];
        const int entry[WIRE_TABLE_ENTRIES] = {(i + n - 1) % n, i, (i + 1) % n};
        wire_table_head_encode((uint32_t)n, (uint32_t)i, local[cc->table[i].host], msg);
        for (int k = 0; k < WIRE_TABLE_ENTRIES; k++)
            wire_peer_encode(&cc->table[entry[k]], msg + WIRE_TABLE_HEAD_LEN + (size_t)k * WIRE_TABLE_ENTRY_LEN);
        if ((rc = net_write_all(c, fds[i], msg, sizeof msg, deadline_ms, why, whylen)) != 0)
            goto out;
    }
    /* The connections stay open until every ring link is up (step 5). */
    cc->boot_fds = fds;
    fds = NULL;
out:
    for (int i = 0; fds != NULL && i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    free(hosts);
    free(local);
    return rc;
}

/* Connect to the leader and send the BOOT hello until the leader takes it
 * (WIRE_BOOT_JOINED).  A connection that closes before that byte was
 * dropped unread, as a stranger's would be, while a flood of connections
 * filled the leader's pending list: join again until the deadline.  The
 * listening socket is made on the first connection's local address. */
static int member_hello(struct dtrain_comm *c, struct cpu_comm *cc, const struct sockaddr_in *leader,
                        int64_t deadline_ms, int *fd_out, char *why, size_t whylen)
{
    unsigned char hello[WIRE_HELLO_LEN];
    struct sockaddr_in me;
    char text[32];
    int rc = 0;
    uint32_t draw = ((uint32_t)getpid() * 2654435761u ^ (uint32_t)c->rank * 40503u ^ (uint32_t)comm_now_ms()) | 1u;
    for (int dropped = 0;; dropped++) {
        int fd = -1;
        unsigned char byte = 0;
        rc = net_connect(c, leader, deadline_ms, &fd, why, whylen);
        if (rc != 0)
            break;
        if (cc->listen_fd < 0) { /* listen where the route to the leader leaves this host */
            if ((rc = local_address(fd, &me, why, whylen)) != 0 ||
                (rc = net_listen(&me.sin_addr, &cc->listen_fd, why, whylen)) != 0 ||
                (rc = local_address(cc->listen_fd, &me, why, whylen)) != 0) {
                close(fd);
                return rc;
            }
            struct wire_hello h = {.kind = WIRE_BOOT, .group_size = (uint32_t)c->size,
                                   .from = (uint32_t)c->rank, .to = 0, .addr = me.sin_addr,
                                   .port = ntohs(me.sin_port), .pid = (uint32_t)getpid()};
            memcpy(h.secret, cc->secret, sizeof h.secret);
            dtrain_snprintf(h.host_id, sizeof h.host_id, "%s", c->host_id);
            wire_hello_encode(&h, hello);
        }
        rc = net_write_all(c, fd, hello, sizeof hello, deadline_ms, why, whylen);
        if (rc == 0)
            rc = net_read_all(c, fd, &byte, 1, deadline_ms, why, whylen);
        if (rc == 0 && byte == WIRE_BOOT_JOINED) {
            *fd_out = fd;
            return 0;
        }
        close(fd);
        if (rc == 0) {
            dtrain_snprintf(why, whylen, "the leader at %s answered the hello with byte 0x%02x, not 0x%02x (another "
                            "dtrain version?)", net_addr_text(leader, text, sizeof text), byte, WIRE_BOOT_JOINED);
            return -DTRAIN_COMM_EPEER;
        }
        if (rc != -DTRAIN_COMM_EPEER || (rc = net_check(c, deadline_ms, why, whylen)) != 0)
            break;
        /* Dropped with the strangers: back off (cpu_comm.h, CPU_REJOIN_MAX_MS). */
        long d = NET_RETRY_MS;
        for (int k = 0; k < dropped && d < CPU_REJOIN_MAX_MS; k++)
            d *= 2;
        if (d > CPU_REJOIN_MAX_MS)
            d = CPU_REJOIN_MAX_MS;
        draw ^= draw << 13; /* xorshift32: this member's own sequence, no shared state */
        draw ^= draw >> 17;
        draw ^= draw << 5;
        long ms = d / 2 + (long)(draw % (uint32_t)(d / 2 + 1));
        struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
        atomic_fetch_add(&c->rejoined, 1);
    }
    if (rc == -DTRAIN_COMM_ETIMEDOUT && atomic_load(&c->rejoined) > 0) {
        char step[200];
        dtrain_snprintf(step, sizeof step, "%s", why);
        dtrain_snprintf(why, whylen, "%s (the leader dropped this member's hello %llu times: a flood of "
                        "connections at its port?)", step, (unsigned long long)atomic_load(&c->rejoined));
    }
    return rc;
}

static int member_join(struct dtrain_comm *c, struct cpu_comm *cc, const struct sockaddr_in *leader,
                       int64_t deadline_ms, char *why, size_t whylen)
{
    const int n = c->size;
    char text[32];
    int fd = -1;
    unsigned char head[WIRE_TABLE_HEAD_LEN], entries[WIRE_TABLE_ENTRIES * WIRE_TABLE_ENTRY_LEN];
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    int rc;

    rc = member_hello(c, cc, leader, deadline_ms, &fd, why, whylen);
    if (rc != 0)
        goto out;
    if (getsockname(cc->listen_fd, (struct sockaddr *)&me, &len) != 0) {
        dtrain_snprintf(why, whylen, "getsockname: %s", strerror(errno));
        rc = -DTRAIN_COMM_ESYS;
        goto out;
    }
    uint32_t size, to, local;
    if ((rc = net_read_all(c, fd, head, sizeof head, deadline_ms, why, whylen)) != 0)
        goto failed;
    if (wire_table_head_decode(head, &size, &to, &local) != 0 || size != (uint32_t)n || to != (uint32_t)c->rank ||
        local < 1 || local > size) {
        dtrain_snprintf(why, whylen, "the leader at %s sent a table that is not for rank %d of %d",
                        net_addr_text(leader, text, sizeof text), c->rank, n);
        rc = -DTRAIN_COMM_EPEER;
        goto out;
    }
    rc = net_read_all(c, fd, entries, sizeof entries, deadline_ms, why, whylen);
    if (rc != 0)
        goto failed;
    /* rank-1, then itself, then rank+1 (equal at n = 2): read in that order. */
    const int entry[WIRE_TABLE_ENTRIES] = {(c->rank + n - 1) % n, c->rank, (c->rank + 1) % n};
    for (int k = 0; k < WIRE_TABLE_ENTRIES; k++)
        wire_peer_decode(entries + (size_t)k * WIRE_TABLE_ENTRY_LEN, &cc->table[entry[k]]);
    cc->local = local;
    if (cc->table[c->rank].port != ntohs(me.sin_port) || cc->table[c->rank].addr.s_addr != me.sin_addr.s_addr) {
        dtrain_snprintf(why, whylen, "the leader's table does not list this member's address");
        rc = -DTRAIN_COMM_EPEER;
        goto out;
    }
    /* Kept until the bootstrap is done (step 5): watched meanwhile. */
    cc->boot_fd = fd;
    fd = -1;
    goto out;
failed: { /* say which step: the rest of the group may be what is missing */
        char step[200];
        dtrain_snprintf(step, sizeof step, "%s", why);
        dtrain_snprintf(why, whylen, "waiting for the group table from the leader at %s (it sends it once all %d "
                        "members joined): %s", net_addr_text(leader, text, sizeof text), n, step);
    }
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Descriptors this process has open now (/proc/self/fd; 64 when it
 * cannot tell). */
static unsigned long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 64;
    unsigned long long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n > 0 ? n - 1 : 0; /* not the directory's own */
}

/* The leader keeps one connection per member from the join to its
 * communicator's end (the address lookups), besides its pending list: at
 * thousands of members more than a default soft RLIMIT_NOFILE of 1024.
 * Raise the soft limit to the hard one when that is too few (as servers
 * do; the limit is the process's), or fail now with what to do, instead
 * of failing in accept once that many members joined. */
static int leader_fd_budget(struct dtrain_comm *c, const struct cpu_comm *cc, char *why, size_t whylen)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0; /* cannot tell: accept says so if it comes to that */
    unsigned long long need = open_fds() + (unsigned long long)(c->size - 1) + (unsigned long long)cc->max_pending +
                              CPU_FD_SPARE;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
        struct rlimit raised = {.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)need : rl.rlim_max,
                                .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            return 0;
        dtrain_snprintf(why, whylen, "the leader of %d members needs %llu file descriptors, and raising its limit "
                        "from %llu failed (%s): run `ulimit -n %llu` where the job starts", c->size, need,
                        (unsigned long long)rl.rlim_cur, strerror(errno), need);
        return -DTRAIN_COMM_ESYS;
    }
    dtrain_snprintf(why, whylen, "the leader of %d members needs %llu file descriptors but its hard limit is %llu: "
                    "run `ulimit -n %llu` where the job starts, after raising the hard limit (limits.conf, "
                    "slurmd's LimitNOFILE)", c->size, need, (unsigned long long)rl.rlim_max, need);
    return -DTRAIN_COMM_ESYS;
}

int cpu_bootstrap(struct dtrain_comm *c, struct cpu_comm *cc, const struct dtrain_comm_group *g,
                  int64_t deadline_ms, char *why, size_t whylen)
{
    struct sockaddr_in leader;
    char text[32], have[32];

    if (cpu_id_parse(g->id, &leader, cc->secret) != 0) {
        dtrain_snprintf(why, whylen, "'%.80s' is not a cpu bootstrap id (cpu:<IPv4>:<port>:<32 hex digits>)", g->id);
        return -DTRAIN_COMM_EINVAL;
    }
    cc->max_pending = CPU_MAX_PENDING;
    if (c->rank == 0 && c->size / CPU_PENDING_PER_SLOT > cc->max_pending)
        cc->max_pending = c->size / CPU_PENDING_PER_SLOT < CPU_MAX_PENDING_LEADER ? c->size / CPU_PENDING_PER_SLOT
                                                                                  : CPU_MAX_PENDING_LEADER;
    cc->table = calloc((size_t)c->size, sizeof *cc->table);
    cc->p2p_out = calloc((size_t)c->size, sizeof *cc->p2p_out);
    cc->p2p_in = calloc((size_t)c->size, sizeof *cc->p2p_in);
    cc->pending = calloc((size_t)cc->max_pending, sizeof *cc->pending);
    cc->poll = calloc(1 + (size_t)cc->max_pending, sizeof *cc->poll);
    if (cc->table == NULL || cc->p2p_out == NULL || cc->p2p_in == NULL || cc->pending == NULL || cc->poll == NULL) {
        dtrain_snprintf(why, whylen, "out of memory for %d members", c->size);
        return -DTRAIN_COMM_ESYS;
    }
    if (c->rank != 0)
        return member_join(c, cc, &leader, deadline_ms, why, whylen);

    /* The leader listens on the socket the id names (made by the launcher). */
    struct sockaddr_in me;
    if (cc->listen_fd < 0) {
        dtrain_snprintf(why, whylen, "rank 0 of a cpu group needs the listening socket of its id (listen_fd)");
        return -DTRAIN_COMM_EINVAL;
    }
    if (local_address(cc->listen_fd, &me, why, whylen) != 0 || me.sin_port != leader.sin_port ||
        me.sin_addr.s_addr != leader.sin_addr.s_addr) {
        dtrain_snprintf(why, whylen, "listen_fd %d is not the socket of id %s (it is bound to %s)", cc->listen_fd,
                        net_addr_text(&leader, text, sizeof text), net_addr_text(&me, have, sizeof have));
        return -DTRAIN_COMM_EINVAL;
    }
    if (net_set_nonblocking(cc->listen_fd) != 0) {
        dtrain_snprintf(why, whylen, "fcntl(listen_fd): %s", strerror(errno));
        return -DTRAIN_COMM_ESYS;
    }
    int rc = leader_fd_budget(c, cc, why, whylen);
    return rc != 0 ? rc : leader_gather(c, cc, deadline_ms, why, whylen);
}

/* ------------------------------------------------------------------ step 4: ring links */

static struct sockaddr_in peer_address(const struct cpu_comm *cc, int rank)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr = cc->table[rank].addr,
                              .sin_port = htons(cc->table[rank].port)};
    return sin;
}

static int same_host(const struct dtrain_comm *c, const struct cpu_comm *cc, int rank)
{
    return c->transport == DTRAIN_COMM_TRANSPORT_AUTO && cc->table[rank].host == cc->table[c->rank].host;
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
    rc = accept_hello(c, cc, WIRE_RING, prev, deadline_ms, &fd, &h, why, whylen);
    if (rc == -DTRAIN_COMM_ETIMEDOUT)
        dtrain_snprintf(why, whylen, "rank %d (ring predecessor) did not connect within %d ms", prev, c->timeout_ms);
    if (rc != 0)
        return rc;
    if (set_nodelay(fd) != 0) {
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
static int directory_start(struct dtrain_comm *c, struct cpu_comm *cc, char *why, size_t whylen)
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

static void directory_stop(struct cpu_directory *d)
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
static int lookup(struct dtrain_comm *c, struct cpu_comm *cc, int peer, int64_t deadline_ms, char *why,
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

/* ------------------------------------------------------------------ step 5: done */

int cpu_boot_watch(struct dtrain_comm *c, char *why, size_t whylen)
{
    struct cpu_comm *cc = c->impl;
    if (cc == NULL || (cc->boot_fds == NULL && cc->boot_fd < 0))
        return 0;
    int64_t now = comm_now_ms();
    if (now < cc->boot_watch_ms)
        return 0;
    cc->boot_watch_ms = now + CPU_BOOT_WATCH_MS;
    char byte;
    if (cc->boot_fd >= 0) {
        ssize_t n = recv(cc->boot_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            dtrain_snprintf(why, whylen, "the leader (rank 0) ended the bootstrap while the ring links were set "
                            "up: a member died or failed (the leader's message names it), or the leader did");
            return -DTRAIN_COMM_EPEER;
        }
        return 0;
    }
    for (int i = 1; i < c->size; i++) {
        if (cc->boot_fds[i] < 0)
            continue;
        ssize_t n = recv(cc->boot_fds[i], &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            dtrain_snprintf(why, whylen, "rank %d closed its bootstrap connection before its ring links were up "
                            "(it died, or failed)", i);
            return -DTRAIN_COMM_EPEER;
        }
    }
    return 0;
}

static void close_boot(struct cpu_comm *cc, int size)
{
    for (int i = 0; cc->boot_fds != NULL && i < size; i++)
        if (cc->boot_fds[i] >= 0)
            close(cc->boot_fds[i]);
    free(cc->boot_fds);
    cc->boot_fds = NULL;
    if (cc->boot_fd >= 0)
        close(cc->boot_fd);
    cc->boot_fd = -1;
}

int cpu_boot_done(struct dtrain_comm *c, struct cpu_comm *cc, int64_t deadline_ms, char *why, size_t whylen)
{
    unsigned char byte = WIRE_BOOT_READY;
    int rc = 0;
    if (cc->boot_fds == NULL && cc->boot_fd < 0)
        return 0; /* a group of one */
    if (c->rank != 0) {
        if ((rc = net_write_all(c, cc->boot_fd, &byte, 1, deadline_ms, why, whylen)) != 0 ||
            (rc = net_read_all(c, cc->boot_fd, &byte, 1, deadline_ms, why, whylen)) != 0) {
            char step[200];
            dtrain_snprintf(step, sizeof step, "%s", why);
            dtrain_snprintf(why, whylen, "waiting for the other members' ring links: %s", step);
        } else if (byte != WIRE_BOOT_DONE) {
            dtrain_snprintf(why, whylen, "the leader ended the bootstrap with byte 0x%02x, not 0x%02x", byte,
                            WIRE_BOOT_DONE);
            rc = -DTRAIN_COMM_EPEER;
        }
        if (rc == 0) { /* kept: where this member looks addresses up */
            cc->lookup_fd = cc->boot_fd;
            cc->boot_fd = -1;
        }
        close_boot(cc, c->size);
        return rc;
    }
    /* The leader: every member's READY (the watch sees any that closes
     * meanwhile), then DONE to all. */
    for (int i = 1; i < c->size && rc == 0; i++) {
        if ((rc = net_read_all(c, cc->boot_fds[i], &byte, 1, deadline_ms, why, whylen)) == -DTRAIN_COMM_EPEER &&
            strstr(why, "rank ") == NULL)
            dtrain_snprintf(why, whylen, "rank %d closed its bootstrap connection before its ring links were up "
                            "(it died, or failed)", i);
        else if (rc == -DTRAIN_COMM_ETIMEDOUT)
            dtrain_snprintf(why, whylen, "rank %d did not set up its ring links within %d ms", i, c->timeout_ms);
        else if (rc == 0 && byte != WIRE_BOOT_READY) {
            dtrain_snprintf(why, whylen, "rank %d sent byte 0x%02x for its ring links, not 0x%02x", i, byte,
                            WIRE_BOOT_READY);
            rc = -DTRAIN_COMM_EPEER;
        }
    }
    byte = WIRE_BOOT_DONE;
    for (int i = 1; i < c->size && rc == 0; i++)
        rc = net_write_all(c, cc->boot_fds[i], &byte, 1, deadline_ms, why, whylen);
    if (rc == 0 && (rc = directory_start(c, cc, why, whylen)) == 0)
        cc->boot_fds = NULL; /* the lookup thread's now */
    close_boot(cc, c->size);
    return rc;
}

/* ------------------------------------------------------------------ point-to-point links */

int cpu_p2p_out(struct dtrain_comm *c, struct cpu_comm *cc, int peer, struct link **out, char *why, size_t whylen)
{
    if (cc->p2p_out[peer] == NULL) {
        int fd;
        int64_t deadline_ms = comm_now_ms() + c->timeout_ms;
        int rc = lookup(c, cc, peer, deadline_ms, why, whylen);
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
        int rc = accept_hello(c, cc, WIRE_P2P, peer, comm_now_ms() + c->timeout_ms, NULL, NULL, why, whylen);
        if (rc == -DTRAIN_COMM_ETIMEDOUT)
            dtrain_snprintf(why, whylen, "rank %d did not connect to send within %d ms", peer, c->timeout_ms);
        if (rc != 0)
            return rc;
    }
    *out = cc->p2p_in[peer];
    return 0;
}

void cpu_comm_close(struct cpu_comm *cc, int size)
{
    for (int i = 0; i < cc->npending; i++)
        close(cc->pending[i].fd);
    cc->npending = 0;
    if (cc->stash_fd >= 0)
        close(cc->stash_fd);
    for (int i = 0; i < size; i++) {
        if (cc->p2p_out != NULL)
            link_free(cc->p2p_out[i]);
        if (cc->p2p_in != NULL)
            link_free(cc->p2p_in[i]);
    }
    link_free(cc->next);
    link_free(cc->prev);
    directory_stop(cc->directory);
    if (cc->lookup_fd >= 0)
        close(cc->lookup_fd);
    close_boot(cc, size);
    if (cc->listen_fd >= 0)
        close(cc->listen_fd);
    free(cc->p2p_out);
    free(cc->p2p_in);
    free(cc->table);
    free(cc->scratch);
    free(cc->pending);
    free(cc->poll);
    free(cc);
}
