/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Heartbeats between ring neighbours; see dtrain_heartbeat.h. */
#include "dtrain_heartbeat.h"
#include "dtrain_hb_wire.h"
#include "comm/bootstrap/bootstrap_id.h"
#include "dtrain_clock.h"
#include "dtrain_env.h"
#include "dtrain_fault.h"
#include "parallel/dtrain_pcomm.h"
#include "dtrain_watchdog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define QUIET_FACTOR 4.0 /* the limit grows to this many times the longest quiet spell seen */
#define DRAIN_S 0.05      /* at most this long reading per receive: the watchdog's poll goes on */

struct peer {
    int rank; /* -1: slot unused */
    struct sockaddr_in addr;
    int seen, left;
    uint64_t seq;         /* the last sequence number accepted from it */
    double last;          /* when its last datagram came */
    double quiet_since;   /* when its progress (or waiting) last changed */
    double max_gap;       /* longest gap between its datagrams seen */
    double max_quiet;     /* longest spell it spent armed, not waiting, without progress */
    struct dtrain_hb_beat w; /* its last datagram */
};

struct dtrain_hb {
    int rank;
    int fd[DTRAIN_HB_PEERS];               /* one per slot, connected to its peer */
    struct sockaddr_in self[DTRAIN_HB_PEERS];
    unsigned char key[DTRAIN_HB_KEY_LEN];
    uint64_t seq;                          /* the last sequence number sent */
    struct dtrain_hb_counts counts;
    char node[DTRAIN_HB_NAME_MAX], gpu[DTRAIN_HB_NAME_MAX];
    struct peer peers[DTRAIN_HB_PEERS];
};

int dtrain_hb_open(const char *addr, int rank, const char *node, const char *gpu,
                   const unsigned char key[DTRAIN_HB_KEY_LEN], struct dtrain_hb **out, char *err, size_t errlen)
{
    *out = NULL;
    struct dtrain_hb *h = calloc(1, sizeof *h);
    if (h == NULL) {
        snprintf(err, errlen, "heartbeat: out of memory");
        return -1;
    }
    h->rank = rank;
    memcpy(h->key, key, sizeof h->key);
    snprintf(h->node, sizeof h->node, "%s", node != NULL && node[0] != '\0' ? node : "-");
    snprintf(h->gpu, sizeof h->gpu, "%s", gpu != NULL && gpu[0] != '\0' ? gpu : "none");
    for (int i = 0; i < DTRAIN_HB_PEERS; i++) {
        h->peers[i].rank = -1;
        h->fd[i] = -1;
    }
    struct in_addr in;
    if (inet_pton(AF_INET, addr, &in) != 1) {
        snprintf(err, errlen, "heartbeat: '%.64s' is not an IPv4 address", addr);
        free(h);
        return -1;
    }
    for (int i = 0; i < DTRAIN_HB_PEERS; i++) {
        socklen_t len = sizeof h->self[i];
        h->self[i] = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr = in};
        h->fd[i] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (h->fd[i] < 0 || bind(h->fd[i], (struct sockaddr *)&h->self[i], sizeof h->self[i]) != 0 ||
            getsockname(h->fd[i], (struct sockaddr *)&h->self[i], &len) != 0) {
            snprintf(err, errlen, "heartbeat: UDP socket on %s: %s", addr, strerror(errno));
            dtrain_hb_close(h);
            return -1;
        }
    }
    *out = h;
    return 0;
}

void dtrain_hb_address(const struct dtrain_hb *h, int slot, uint32_t *ipv4, uint16_t *port)
{
    const struct sockaddr_in *a = &h->self[slot >= 0 && slot < DTRAIN_HB_PEERS ? slot : 0];
    *ipv4 = ntohl(a->sin_addr.s_addr);
    *port = ntohs(a->sin_port);
}

int dtrain_hb_set_peer(struct dtrain_hb *h, int slot, int rank, uint32_t ipv4, uint16_t port)
{
    if (slot < 0 || slot >= DTRAIN_HB_PEERS || rank == h->rank || rank < 0)
        return -1;
    struct peer *p = &h->peers[slot];
    memset(p, 0, sizeof *p);
    p->rank = -1;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(ipv4), .sin_port = htons(port)};
    /* connected: the kernel hands this socket datagrams from that address only */
    if (connect(h->fd[slot], (struct sockaddr *)&to, sizeof to) != 0)
        return -1;
    p->rank = rank;
    p->addr = to;
    return 0;
}

void dtrain_hb_counts(const struct dtrain_hb *h, struct dtrain_hb_counts *out)
{
    *out = h->counts;
}

void dtrain_hb_send(struct dtrain_hb *h, const struct dtrain_hb_state *s, int leaving)
{
    struct dtrain_hb_beat b;
    unsigned char datagram[DTRAIN_HB_WIRE_LEN];
    memset(&b, 0, sizeof b);
    /* up with the monotonic clock too: a heartbeat opened again on this
     * host goes on above the numbers its predecessor used */
    uint64_t now_ns = (uint64_t)dtrain_clock_ns();
    h->seq = now_ns > h->seq ? now_ns : h->seq + 1;
    b.seq = h->seq;
    b.rank = h->rank;
    b.flags = (s->waiting ? DTRAIN_HB_FLAG_WAITING : 0) | (s->armed ? DTRAIN_HB_FLAG_ARMED : 0) |
              (leaving ? DTRAIN_HB_FLAG_LEAVING : 0);
    b.progress = s->progress;
    b.step = s->step;
    snprintf(b.what, sizeof b.what, "%s", s->what);
    memcpy(b.node, h->node, sizeof b.node);
    memcpy(b.gpu, h->gpu, sizeof b.gpu);
    dtrain_hb_wire_encode(h->key, &b, datagram);
    for (int i = 0; i < DTRAIN_HB_PEERS; i++)
        if (h->peers[i].rank >= 0) /* a lost datagram is the next one's job: no retry */
            (void)send(h->fd[i], datagram, sizeof datagram, MSG_DONTWAIT);
}

/* One datagram from slot's socket: kept, or dropped and counted. */
static void take(struct dtrain_hb *h, struct peer *p, const unsigned char *buf, ssize_t got,
                 const struct sockaddr_in *from, double now)
{
    struct dtrain_hb_beat w;
    if (from->sin_family != AF_INET || from->sin_addr.s_addr != p->addr.sin_addr.s_addr ||
        from->sin_port != p->addr.sin_port || /* queued before the connect */
        dtrain_hb_wire_decode(h->key, buf, (size_t)got, &w) != 0 || w.rank != p->rank ||
        (p->seen && w.seq <= p->seq)) {
        h->counts.dropped++;
        return;
    }
    h->counts.accepted++;
    if (p->seen) {
        if (now - p->last > p->max_gap)
            p->max_gap = now - p->last;
        int quiet = w.progress == p->w.progress && w.flags == p->w.flags;
        if (!quiet) {
            double spell = now - p->quiet_since;
            /* a spell of armed computation that ended: it was work, not a hang */
            if ((p->w.flags & DTRAIN_HB_FLAG_ARMED) && !(p->w.flags & DTRAIN_HB_FLAG_WAITING) &&
                spell > p->max_quiet)
                p->max_quiet = spell;
            p->quiet_since = now;
        }
    } else {
        p->quiet_since = now;
    }
    p->seen = 1;
    p->seq = w.seq;
    p->last = now;
    p->left = p->left || (w.flags & DTRAIN_HB_FLAG_LEAVING);
    p->w = w;
}

void dtrain_hb_receive(struct dtrain_hb *h)
{
    unsigned char buf[DTRAIN_HB_WIRE_LEN + 1]; /* one more: a longer datagram shows as too long */
    double now = dtrain_clock_s(), until = now + DRAIN_S;
    for (int i = 0; i < DTRAIN_HB_PEERS; i++) {
        struct peer *p = &h->peers[i];
        if (p->rank < 0)
            continue; /* not connected: nobody's datagrams are ours */
        /* everything queued, not a fixed count: a backlog must not hide the newest */
        while (dtrain_clock_s() < until) {
            struct sockaddr_in from;
            socklen_t flen = sizeof from;
            memset(&from, 0, sizeof from);
            ssize_t got = recvfrom(h->fd[i], buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
            if (got < 0) {
                if (errno == EINTR || errno == ECONNREFUSED) /* the peer's port closed: said once */
                    continue;
                break;
            }
            take(h, p, buf, got, &from, now);
        }
    }
}

int dtrain_hb_check(struct dtrain_hb *h, double waited_s, const char *in, double limit_s, char *reason, size_t len)
{
    double now = dtrain_clock_s();
    for (int i = 0; i < DTRAIN_HB_PEERS; i++) {
        const struct peer *p = &h->peers[i];
        if (p->rank < 0 || !p->seen || p->left)
            continue; /* not up yet (the comm timeout covers start-up) or gone on purpose */
        double silent = now - p->last, quiet = now - p->quiet_since;
        double gap_limit = limit_s > QUIET_FACTOR * p->max_gap ? limit_s : QUIET_FACTOR * p->max_gap;
        double quiet_limit = limit_s > QUIET_FACTOR * p->max_quiet ? limit_s : QUIET_FACTOR * p->max_quiet;
        if (silent > gap_limit && waited_s > gap_limit) {
            snprintf(reason, len, "heartbeat: rank %d (node %s, GPU %s) sent no heartbeat for %.1f s (last seen in "
                     "%s at step %lld): it is stopped or its node unreachable; rank %d waits in a %s call",
                     p->rank, p->w.node, p->w.gpu, silent, p->w.what, (long long)p->w.step, h->rank, in);
            return 1;
        }
        if ((p->w.flags & DTRAIN_HB_FLAG_ARMED) && !(p->w.flags & DTRAIN_HB_FLAG_WAITING) && quiet > quiet_limit &&
            waited_s > quiet_limit) {
            snprintf(reason, len, "heartbeat: rank %d (node %s, GPU %s) hangs in %s at step %lld: alive but no "
                     "progress for %.1f s outside any communicator call, while rank %d waits on it in a %s call",
                     p->rank, p->w.node, p->w.gpu, p->w.what, (long long)p->w.step, quiet, h->rank, in);
            return 1;
        }
    }
    return 0;
}

void dtrain_hb_close(struct dtrain_hb *h)
{
    if (h == NULL)
        return;
    for (int i = 0; i < DTRAIN_HB_PEERS; i++)
        if (h->fd[i] >= 0)
            close(h->fd[i]);
    memset(h->key, 0, sizeof h->key);
    free(h);
}

/* ------------------------------------------------------------ the set-up in a job */

/* The address this rank's neighbours reach it on: with the cpu backend,
 * the one its kernel routes to the world leader from (the interface the
 * job's sockets use); else (nccl) that of NCCL_SOCKET_IFNAME, else the
 * first up non-loopback interface (dtrain_comm_addr_pick). */
static int heartbeat_addr(const struct dtrain_bootstrap *bs, char *addr, size_t len, char *err, size_t errlen)
{
    struct dtrain_cpu_id id;
    if (dtrain_cpu_id_parse(bs->groups[DTRAIN_GROUP_WORLD].id, &id) == 0) {
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)}, me;
        socklen_t mlen = sizeof me;
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ok = 0;
        if (fd >= 0 && inet_pton(AF_INET, id.addr, &to.sin_addr) == 1 &&
            connect(fd, (struct sockaddr *)&to, sizeof to) == 0 && /* a UDP connect sends nothing */
            getsockname(fd, (struct sockaddr *)&me, &mlen) == 0 && inet_ntop(AF_INET, &me.sin_addr, addr, (socklen_t)len))
            ok = 1;
        if (fd >= 0)
            close(fd);
        if (ok)
            return 0;
    }
    return dtrain_comm_addr_pick(getenv("NCCL_SOCKET_IFNAME"), addr, len, err, errlen);
}

/* The neighbours' heartbeat addresses: this rank's (ip, port) of the
 * socket for each neighbour sent to it, and theirs for this rank received
 * (got[0]: prev's, got[1]: next's), in host memory. */
struct hb_address {
    uint32_t ip, port;
};

static int exchange_one(dtrain_comm *world, const struct hb_address *mine, int to, struct hb_address *got, int from,
                        char *err, size_t errlen)
{
    return dtrain_pcomm_status(world, dtrain_comm_sendrecv(world, mine, sizeof *mine, to, got, sizeof *got, from),
                               "heartbeat addresses", err, errlen);
}

static int exchange_addresses(dtrain_comm *world, int prev, int next, uint32_t ip, const uint16_t port_for[2],
                              uint32_t got_ip[2], uint16_t got_port[2], char *err, size_t errlen)
{
    struct hb_address for_prev = {ip, port_for[0]}, for_next = {ip, port_for[1]}, got[2];
    int rc;
    /* to the next, from the previous; then to the previous, from the next */
    if ((rc = exchange_one(world, &for_next, next, &got[0], prev, err, errlen)) != DTRAIN_OK ||
        (rc = exchange_one(world, &for_prev, prev, &got[1], next, err, errlen)) != DTRAIN_OK)
        return rc;
    for (int j = 0; j < 2; j++) {
        got_ip[j] = got[j].ip;
        got_port[j] = (uint16_t)got[j].port;
    }
    return DTRAIN_OK;
}

int dtrain_hb_start(const struct dtrain_bootstrap *bs, dtrain_comm *world, const struct dtrain_fault *fault,
                    double hang_detect, struct dtrain_watchdog *wd, char *err, size_t errlen)
{
    int n = bs->world_size, me = bs->rank, rc;
    if (hang_detect <= 0 || n < 2)
        return DTRAIN_OK;
    char addr[INET_ADDRSTRLEN], why[256];
    struct dtrain_hb *hb = NULL;
    unsigned char key[DTRAIN_HB_KEY_LEN];
    uint32_t ip = 0, got_ip[2];
    uint16_t port_for[2] = {0, 0}, got_port[2];
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    dtrain_hb_key(bs->groups[DTRAIN_GROUP_WORLD].id, key);
    if (heartbeat_addr(bs, addr, sizeof addr, why, sizeof why) != 0 ||
        dtrain_hb_open(addr, me, fault->node, getenv(DTRAIN_ENV_GPU), key, &hb, why, sizeof why) != 0)
        fprintf(stderr, "%s: rank %d: no heartbeats (--hang-detect): %s; its hangs are found by the communicator "
                "timeout\n", fault->prog, me, why);
    else {
        /* slot 0 watches prev, slot 1 next; two ranks are each other's
         * prev and next: slot 0 alone, its port sent both ways */
        dtrain_hb_address(hb, 0, &ip, &port_for[0]);
        dtrain_hb_address(hb, next != prev ? 1 : 0, &ip, &port_for[1]);
    }
    memset(key, 0, sizeof key);
    rc = exchange_addresses(world, prev, next, ip, port_for, got_ip, got_port, err, errlen);
    if (rc == DTRAIN_OK && hb != NULL) {
        if (got_port[0] > 0)
            dtrain_hb_set_peer(hb, 0, prev, got_ip[0], got_port[0]);
        if (next != prev && got_port[1] > 0)
            dtrain_hb_set_peer(hb, 1, next, got_ip[1], got_port[1]);
        dtrain_watchdog_set_heartbeat(wd, hb);
        hb = NULL;
    }
    dtrain_hb_close(hb);
    return rc;
}
