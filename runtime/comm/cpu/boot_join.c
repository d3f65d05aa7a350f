/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Bootstrap of the cpu backend, steps 1-3: the id, the members' join and
 * the leader's gather and table; see cpu_comm.h for the sequence and
 * wire.h for the messages. */
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
        int64_t slice = dtrain_clock_ms() + GATHER_SLICE_MS;
        rc = cpu_accept_hello(c, cc, WIRE_BOOT, -1, slice < deadline_ms ? slice : deadline_ms, &fd, &h, why, whylen);
        if (rc == -DTRAIN_COMM_ETIMEDOUT && dtrain_clock_ms() < deadline_ms) {
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
            cpu_refuse(c, fd);
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
    uint32_t draw = ((uint32_t)getpid() * 2654435761u ^ (uint32_t)c->rank * 40503u ^ (uint32_t)dtrain_clock_ms()) | 1u;
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
