/* SPDX-License-Identifier: GPL-2.0-or-later */
/* State of one cpu-backend communicator and its bootstrap (boot*.c).
 *
 * Bootstrap of a group of n members (doc/comm.md, "Wire protocol"):
 *  1. every member but the leader connects to the leader's address from
 *     the id and sends a BOOT hello: the secret, its rank, the address it
 *     listens on (the local address of that very connection, so the right
 *     interface is used) and its host id;
 *  2. the leader drops every connection whose hello is malformed, whose
 *     secret differs (compared in constant time) or whose rank is taken,
 *     answers a taken hello with WIRE_BOOT_JOINED, and keeps waiting,
 *     until all n-1 members have come or the timeout; a member whose
 *     connection closes before that byte was dropped unread with the
 *     strangers (a full pending list) and joins again;
 *  3. the leader sends every member its neighbours: the address and host
 *     number of rank-1, of itself and of rank+1, and how many members share
 *     its host (the same 56 bytes at any group size: the bootstrap sends
 *     O(n) bytes in all, where the whole table to everyone was O(n^2));
 *  4. ring links: each member connects to rank+1 (RING hello, again with
 *     the secret) and accepts rank-1's; same-host neighbours agree on a
 *     shared-memory ring (reply + ack), others keep the TCP connection;
 *  5. done: the connections of step 1 stay open through step 4; a member
 *     whose ring links are up sends the leader WIRE_BOOT_READY, and once
 *     all have (and its own are up) the leader sends each WIRE_BOOT_DONE
 *     and the bootstrap is done.  Until then each member watches its
 *     connection to the leader, and the leader those to every member
 *     (cpu_boot_watch, from every wait of net.c): a member that dies after
 *     the table, while the ring is built, closes its connection, the
 *     leader fails and closes all of them, and every member stops within
 *     a watch interval instead of waiting out the timeout for a
 *     neighbour that is gone.
 * Point-to-point links to members other than the ring neighbours are
 * opened on first use (P2P hello), over TCP, to an address asked of the
 * leader (lookup, 8 bytes, answered with 16) on the BOOT connection, which
 * stays open for that: a thread of the leader's communicator answers from
 * the leader's whole table (cpu_directory) until it is destroyed.  A
 * member remembers each answer (cc->table). */
#ifndef DTRAIN_COMM_CPU_COMM_H
#define DTRAIN_COMM_CPU_COMM_H

#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain_bootstrap.h"
#include "link.h"
#include "wire.h"

struct dtrain_comm;

/* Connections whose hello has not fully arrived, and how long one may take:
 * a connection must show the group's secret (the first 24 bytes of its
 * hello; a member sends all 128 at once right after connecting) within
 * CPU_PROVE_TIMEOUT_MS, and complete its hello within CPU_HELLO_TIMEOUT_MS.
 * The list holds CPU_MAX_PENDING connections at a member (ring and
 * point-to-point links: a few peers), and at the leader one per
 * CPU_PENDING_PER_SLOT members of the group, between CPU_MAX_PENDING and
 * CPU_MAX_PENDING_LEADER (n-1 members join at once; on a loaded host a
 * member's hello may come some time after its connection).  When the list
 * is full, a connection that has not shown the secret goes (the one waiting
 * longest), never one that has; and only one that waited
 * CPU_PENDING_MIN_AGE_MS, unless the kernel's queue of connections not yet
 * accepted is half full: until then the new connections wait in that
 * queue, where a member's hello keeps arriving, instead of pushing out a
 * member whose hello is a few milliseconds late.  A stranger's silent
 * connection still goes after at most that age (a flood fills the queue:
 * then at once). */
#define CPU_MAX_PENDING 32
#define CPU_MAX_PENDING_LEADER 512
#define CPU_PENDING_PER_SLOT 8
#define CPU_PENDING_MIN_AGE_MS 200
#define CPU_PROVE_TIMEOUT_MS 3000
#define CPU_HELLO_TIMEOUT_MS 10000

/* A member whose hello the leader dropped unread joins again after a
 * random pause in [d/2, d], d = NET_RETRY_MS * 2^drops up to
 * CPU_REJOIN_MAX_MS: members dropped together do not all come back in the
 * same millisecond. */
#define CPU_REJOIN_MAX_MS 2000

/* Descriptors the leader keeps besides one per member and its pending list
 * (listening socket, ring links, the lookup thread's pipe, a margin). */
#define CPU_FD_SPARE 16

struct pending_conn {
    int fd;
    size_t got;
    unsigned char buf[WIRE_HELLO_LEN];
    int64_t accepted_ms;  /* when it was taken off the kernel's queue */
    int64_t deadline_ms;  /* prove the secret by then, then complete the hello */
    int proven;           /* the secret came: a member */
};

struct cpu_directory;

struct cpu_comm {
    int listen_fd;           /* where peers connect to this member */
    unsigned char secret[DTRAIN_BOOTSTRAP_SECRET_LEN];
    struct wire_peer *table; /* [size]: the leader every member; a member its neighbours, itself and the
                              * members it looked up (port 0: not known yet) */
    uint32_t local;          /* members on this host (itself included) */
    struct link *next;       /* ring: this member -> rank+1 */
    struct link *prev;       /* ring: rank-1 -> this member */
    struct link **p2p_out;   /* [size], opened on first send to a non-neighbour */
    struct link **p2p_in;    /* [size], accepted on the way */
    struct pending_conn *pending; /* [max_pending] */
    int npending, max_pending;
    struct pollfd *poll;     /* [1 + max_pending]: accept_hello's */
    int stash_fd;            /* a RING hello that came before it was awaited, or -1 */
    struct wire_hello stash;
    float *scratch;          /* reduce-scatter's partial sums, 3 * RING_CHUNK_FLOATS */
    int cma;                 /* direct reads (cma.h): 0 not tried yet, 1 on, -1 unusable from now on */
    uint64_t cma_token;      /* what the others read here to check it works */
    float *cma_sum;          /* the reduce halves' sums (cma.c), 2 * CMA_BATCH * RING_CHUNK_FLOATS; dtrain_hugemem */
    int oversubscribed;      /* more members on this host than CPUs this process may use */
    /* Step 5 (until the bootstrap is done): the leader's connections to
     * each member ([size], -1 for itself), a member's to the leader. */
    int *boot_fds;
    int boot_fd;
    int booting;             /* in cpu_init's bootstrap: waits sleep longer (net.c) */
    int64_t boot_watch_ms;   /* when the watch looks next */
    /* After step 5: a member's BOOT connection, for address lookups (-1 at
     * the leader); the leader's thread answering them on its connections. */
    int lookup_fd;
    struct cpu_directory *directory;
};

/* Parse "cpu:<IPv4>:<port>:<32 hex>".  0, or -1 when malformed. */
int cpu_id_parse(const char *id, struct sockaddr_in *leader, unsigned char secret[DTRAIN_BOOTSTRAP_SECRET_LEN]);

/* Steps 1-3 above: cc->listen_fd and cc->table are set on success.
 * Returns 0 or a negative result code with one line in why. */
int cpu_bootstrap(struct dtrain_comm *c, struct cpu_comm *cc, const struct dtrain_comm_group *g,
                  int64_t deadline_ms, char *why, size_t whylen);

/* Step 4: cc->next and cc->prev. */
int cpu_connect_ring(struct dtrain_comm *c, struct cpu_comm *cc, int64_t deadline_ms, char *why, size_t whylen);

/* Step 5: every member has its ring links; the bootstrap's connections
 * are closed. */
int cpu_boot_done(struct dtrain_comm *c, struct cpu_comm *cc, int64_t deadline_ms, char *why, size_t whylen);

/* While the bootstrap's connections are open (steps 4 and 5): 0, or
 * -DTRAIN_COMM_EPEER with one line when one of them closed (a member or
 * the leader is gone).  Looks at most every CPU_BOOT_WATCH_MS; net.c calls
 * it from every wait (c->impl is the cpu_comm; NULL is fine). */
#define CPU_BOOT_WATCH_MS 100
int cpu_boot_watch(struct dtrain_comm *c, char *why, size_t whylen);

/* The link to send to / receive from a member that is not a ring
 * neighbour, opened (or awaited) now when needed. */
int cpu_p2p_out(struct dtrain_comm *c, struct cpu_comm *cc, int peer, struct link **out, char *why, size_t whylen);
int cpu_p2p_in(struct dtrain_comm *c, struct cpu_comm *cc, int peer, struct link **out, char *why, size_t whylen);

/* Close everything (also half-built state); the leader's lookup thread
 * stops first. */
void cpu_comm_close(struct cpu_comm *cc, int size);

#endif
