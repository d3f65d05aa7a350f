/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Heartbeats between ring neighbours; see dtrain_heartbeat.h. */
#include "dtrain_heartbeat.h"
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

#define HB_MAGIC 0x42485444u /* "DTHB" */
#define HB_VERSION 1u
#define HB_FLAG_WAITING 1
#define HB_FLAG_ARMED 2
#define HB_FLAG_LEAVING 4
#define QUIET_FACTOR 4.0 /* the limit grows to this many times the longest quiet spell seen */

/* One datagram (both ends run the same build: no byte swapping). */
struct wire {
    uint32_t magic, version;
    uint64_t token;
    int32_t rank, flags;
    uint64_t progress;
    int64_t step;
    char what[DTRAIN_HB_WHAT_MAX];
    char node[DTRAIN_HB_NAME_MAX];
    char gpu[DTRAIN_HB_NAME_MAX];
};

struct peer {
    int rank; /* -1: slot unused */
    struct sockaddr_in addr;
    int seen, left;
    double last;          /* when its last datagram came */
    double quiet_since;   /* when its progress (or waiting) last changed */
    double max_gap;       /* longest gap between its datagrams seen */
    double max_quiet;     /* longest spell it spent armed, not waiting, without progress */
    struct wire w;        /* its last datagram */
};

struct dtrain_hb {
    int fd, rank;
    uint64_t token;
    struct sockaddr_in self;
    char node[DTRAIN_HB_NAME_MAX], gpu[DTRAIN_HB_NAME_MAX];
    struct peer peers[DTRAIN_HB_PEERS];
};

uint64_t dtrain_hb_token(const char *world_id)
{
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)world_id; p != NULL && *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return h;
}

int dtrain_hb_open(const char *addr, int rank, const char *node, const char *gpu, uint64_t token,
                   struct dtrain_hb **out, char *err, size_t errlen)
{
    *out = NULL;
    struct dtrain_hb *h = calloc(1, sizeof *h);
    if (h == NULL) {
        snprintf(err, errlen, "heartbeat: out of memory");
        return -1;
    }
    h->rank = rank;
    h->token = token;
    snprintf(h->node, sizeof h->node, "%s", node != NULL && node[0] != '\0' ? node : "-");
    snprintf(h->gpu, sizeof h->gpu, "%s", gpu != NULL && gpu[0] != '\0' ? gpu : "none");
    for (int i = 0; i < DTRAIN_HB_PEERS; i++)
        h->peers[i].rank = -1;
    h->self.sin_family = AF_INET;
    if (inet_pton(AF_INET, addr, &h->self.sin_addr) != 1) {
        snprintf(err, errlen, "heartbeat: '%.64s' is not an IPv4 address", addr);
        free(h);
        return -1;
    }
    socklen_t len = sizeof h->self;
    h->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0 || bind(h->fd, (struct sockaddr *)&h->self, sizeof h->self) != 0 ||
        getsockname(h->fd, (struct sockaddr *)&h->self, &len) != 0) {
        snprintf(err, errlen, "heartbeat: UDP socket on %s: %s", addr, strerror(errno));
        if (h->fd >= 0)
            close(h->fd);
        free(h);
        return -1;
    }
    *out = h;
    return 0;
}

void dtrain_hb_address(const struct dtrain_hb *h, uint32_t *ipv4, uint16_t *port)
{
    *ipv4 = ntohl(h->self.sin_addr.s_addr);
    *port = ntohs(h->self.sin_port);
}

int dtrain_hb_set_peer(struct dtrain_hb *h, int slot, int rank, uint32_t ipv4, uint16_t port)
{
    if (slot < 0 || slot >= DTRAIN_HB_PEERS || rank == h->rank || rank < 0)
        return -1;
    struct peer *p = &h->peers[slot];
    memset(p, 0, sizeof *p);
    p->rank = rank;
    p->addr.sin_family = AF_INET;
    p->addr.sin_addr.s_addr = htonl(ipv4);
    p->addr.sin_port = htons(port);
    return 0;
}

void dtrain_hb_send(struct dtrain_hb *h, const struct dtrain_hb_state *s, int leaving)
{
    struct wire w;
    memset(&w, 0, sizeof w);
    w.magic = HB_MAGIC;
    w.version = HB_VERSION;
    w.token = h->token ^ (uint64_t)h->rank;
    w.rank = h->rank;
    w.flags = (s->waiting ? HB_FLAG_WAITING : 0) | (s->armed ? HB_FLAG_ARMED : 0) | (leaving ? HB_FLAG_LEAVING : 0);
    w.progress = s->progress;
    w.step = s->step;
    snprintf(w.what, sizeof w.what, "%s", s->what);
    memcpy(w.node, h->node, sizeof w.node);
    memcpy(w.gpu, h->gpu, sizeof w.gpu);
    for (int i = 0; i < DTRAIN_HB_PEERS; i++)
        if (h->peers[i].rank >= 0) /* a lost datagram is the next one's job: no retry */
            (void)sendto(h->fd, &w, sizeof w, MSG_DONTWAIT, (struct sockaddr *)&h->peers[i].addr,
                         sizeof h->peers[i].addr);
}

void dtrain_hb_receive(struct dtrain_hb *h)
{
    struct wire w;
    double now = dtrain_clock_s();
    for (int n = 0; n < 64; n++) { /* bounded: two peers send a few per interval */
        ssize_t got = recv(h->fd, &w, sizeof w, MSG_DONTWAIT);
        if (got < 0)
            break;
        if (got != (ssize_t)sizeof w || w.magic != HB_MAGIC || w.version != HB_VERSION ||
            w.token != (h->token ^ (uint64_t)(int64_t)w.rank))
            continue;
        w.what[sizeof w.what - 1] = w.node[sizeof w.node - 1] = w.gpu[sizeof w.gpu - 1] = '\0';
        for (int i = 0; i < DTRAIN_HB_PEERS; i++) {
            struct peer *p = &h->peers[i];
            if (p->rank != w.rank)
                continue;
            if (p->seen) {
                if (now - p->last > p->max_gap)
                    p->max_gap = now - p->last;
                int quiet = w.progress == p->w.progress && w.flags == p->w.flags;
                if (!quiet) {
                    double spell = now - p->quiet_since;
                    /* a spell of armed computation that ended: it was work, not a hang */
                    if ((p->w.flags & HB_FLAG_ARMED) && !(p->w.flags & HB_FLAG_WAITING) && spell > p->max_quiet)
                        p->max_quiet = spell;
                    p->quiet_since = now;
                }
            } else {
                p->quiet_since = now;
            }
            p->seen = 1;
            p->last = now;
            p->left = p->left || (w.flags & HB_FLAG_LEAVING);
            p->w = w;
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
        if ((p->w.flags & HB_FLAG_ARMED) && !(p->w.flags & HB_FLAG_WAITING) && quiet > quiet_limit &&
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
    close(h->fd);
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

/* The neighbours' heartbeat addresses, this rank's (ip, port) sent to both
 * and theirs received (got[0]: prev's, got[1]: next's), in host memory. */
struct hb_address {
    uint32_t ip, port;
};

static int exchange_one(dtrain_comm *world, const struct hb_address *mine, int to, struct hb_address *got, int from,
                        char *err, size_t errlen)
{
    return dtrain_pcomm_status(world, dtrain_comm_sendrecv(world, mine, sizeof *mine, to, got, sizeof *got, from),
                               "heartbeat addresses", err, errlen);
}

static int exchange_addresses(dtrain_comm *world, int prev, int next, uint32_t ip, uint16_t port,
                              uint32_t got_ip[2], uint16_t got_port[2], char *err, size_t errlen)
{
    struct hb_address mine = {ip, port}, got[2];
    int rc;
    /* to the next, from the previous; then to the previous, from the next */
    if ((rc = exchange_one(world, &mine, next, &got[0], prev, err, errlen)) != DTRAIN_OK ||
        (rc = exchange_one(world, &mine, prev, &got[1], next, err, errlen)) != DTRAIN_OK)
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
    uint32_t ip = 0, got_ip[2];
    uint16_t port = 0, got_port[2];
    if (heartbeat_addr(bs, addr, sizeof addr, why, sizeof why) != 0 ||
        dtrain_hb_open(addr, me, fault->node, getenv(DTRAIN_ENV_GPU),
                       dtrain_hb_token(bs->groups[DTRAIN_GROUP_WORLD].id), &hb, why, sizeof why) != 0)
        fprintf(stderr, "%s: rank %d: no heartbeats (--hang-detect): %s; its hangs are found by the communicator "
                "timeout\n", fault->prog, me, why);
    else
        dtrain_hb_address(hb, &ip, &port);
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    rc = exchange_addresses(world, prev, next, ip, port, got_ip, got_port, err, errlen);
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
