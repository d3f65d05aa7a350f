/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Heartbeats between ring neighbours; see dtrain_heartbeat.h. */
#include "dtrain_heartbeat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
    double now = now_s();
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
    double now = now_s();
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
