/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu backend's messages on the wire, little-endian, fixed sizes
 * (doc/comm.md draws them).
 *
 *   hello   128 bytes, first on every connection, from the side that
 *           connected: who it is, who it wants, the group's secret.
 *           BOOT (member -> leader) also carries the member's listening
 *           address and host id; RING (member -> next member) asks for
 *           shared memory with WIRE_FLAG_SHM; P2P opens a point-to-point
 *           link to a member that is not the next one.
 *   joined  leader -> member, one byte as soon as its BOOT hello is taken:
 *           a member whose connection closes before it was dropped with
 *           the strangers (a flood at the leader's port) and joins again.
 *   table   leader -> member after every BOOT hello arrived: a 20-byte head
 *           (group size, rank, members on its host) and three 12-byte
 *           entries (address, port, host number): rank-1, the member
 *           itself, rank+1.  The same bytes whatever the group's size.
 *   lookup  member -> leader on the BOOT connection, kept open after the
 *           bootstrap: 8 bytes asking for one member's entry (a
 *           point-to-point link to a member that is not a neighbour);
 *           answer 16 bytes back (the rank and its entry).
 *   reply   64 bytes, ring-link receiver -> sender: TCP, or the name of a
 *           shared-memory segment to map; then a 4-byte ack back (1 mapped,
 *           0 could not: both stay on TCP).
 *   header  24 bytes in front of every collective or point-to-point
 *           message on a link: operation, sequence number, count, root, so
 *           that members calling different things fail with EMISMATCH
 *           instead of mixing data. */
#ifndef DTRAIN_COMM_CPU_WIRE_H
#define DTRAIN_COMM_CPU_WIRE_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain_bootstrap.h"
#include "dtrain_comm.h"

#define WIRE_VERSION 3 /* 2: the leader acknowledges a BOOT hello (WIRE_BOOT_JOINED); 3: neighbours
                        * instead of the whole table, addresses looked up on the BOOT connection */

/* ------------------------------------------------------------------ hello */
#define WIRE_HELLO_LEN 128
enum wire_hello_kind { WIRE_BOOT = 1, WIRE_RING = 2, WIRE_P2P = 3 };
#define WIRE_FLAG_SHM 1u

struct wire_hello {
    enum wire_hello_kind kind;
    unsigned char secret[DTRAIN_BOOTSTRAP_SECRET_LEN];
    uint32_t group_size;
    uint32_t from, to;    /* ranks in the group */
    struct in_addr addr;  /* BOOT: where the member listens */
    uint16_t port;        /* BOOT: its port */
    uint16_t flags;       /* RING: WIRE_FLAG_SHM */
    char host_id[DTRAIN_COMM_HOST_ID_MAX]; /* BOOT */
    uint32_t pid;         /* for messages only */
};

void wire_hello_encode(const struct wire_hello *h, unsigned char out[WIRE_HELLO_LEN]);
/* 0, or -1 for a wrong magic, version or kind, or an unterminated host id.
 * The secret is NOT checked here. */
int wire_hello_decode(const unsigned char in[WIRE_HELLO_LEN], struct wire_hello *h);

/* The first `got` bytes of a hello still on its way: -1 when they already
 * show it is not one (magic, version, kind), 0 while too few bytes came to
 * tell; the secret (bytes 8..24) is checked by the caller. */
#define WIRE_HELLO_SECRET_END 24
int wire_hello_prefix_check(const unsigned char *in, size_t got);

/* ------------------------------------------------------------------ table */
#define WIRE_TABLE_HEAD_LEN 20
#define WIRE_TABLE_ENTRY_LEN 12
#define WIRE_TABLE_ENTRIES 3 /* rank-1, rank, rank+1 */
#define WIRE_TABLE_LEN (WIRE_TABLE_HEAD_LEN + WIRE_TABLE_ENTRIES * WIRE_TABLE_ENTRY_LEN)

struct wire_peer {
    struct in_addr addr; /* listening address of the member */
    uint16_t port;
    uint32_t host;       /* members with equal numbers share a host */
};

/* local: members on the receiver's host (itself included). */
void wire_table_head_encode(uint32_t size, uint32_t to, uint32_t local, unsigned char out[WIRE_TABLE_HEAD_LEN]);
int wire_table_head_decode(const unsigned char in[WIRE_TABLE_HEAD_LEN], uint32_t *size, uint32_t *to,
                           uint32_t *local);
void wire_peer_encode(const struct wire_peer *p, unsigned char out[WIRE_TABLE_ENTRY_LEN]);
void wire_peer_decode(const unsigned char in[WIRE_TABLE_ENTRY_LEN], struct wire_peer *p);

/* ------------------------------------------------------------------ address lookup */
#define WIRE_LOOKUP_LEN 8
#define WIRE_ANSWER_LEN (4 + WIRE_TABLE_ENTRY_LEN)
void wire_lookup_encode(uint32_t rank, unsigned char out[WIRE_LOOKUP_LEN]);
/* 0 with *rank, or -1 for a wrong magic. */
int wire_lookup_decode(const unsigned char in[WIRE_LOOKUP_LEN], uint32_t *rank);
void wire_answer_encode(uint32_t rank, const struct wire_peer *p, unsigned char out[WIRE_ANSWER_LEN]);
void wire_answer_decode(const unsigned char in[WIRE_ANSWER_LEN], uint32_t *rank, struct wire_peer *p);

/* ------------------------------------------------------------------ bootstrap done */
/* One byte each on the BOOT connection (cpu_comm.h, steps 2 and 5). */
#define WIRE_BOOT_JOINED 0x4a /* 'J': leader -> member, its hello was taken */
#define WIRE_BOOT_READY 0x52 /* 'R': member -> leader, its ring links are up */
#define WIRE_BOOT_DONE 0x44  /* 'D': leader -> member, everyone's are */

/* ------------------------------------------------------------------ ring-link reply */
#define WIRE_REPLY_LEN 64
#define WIRE_SHM_NAME_MAX 52 /* NUL included */

void wire_reply_encode(int shm, const char *name, unsigned char out[WIRE_REPLY_LEN]);
/* 0 with *shm and name (when shm), or -1 on a malformed reply. */
int wire_reply_decode(const unsigned char in[WIRE_REPLY_LEN], int *shm, char name[WIRE_SHM_NAME_MAX]);

#define WIRE_ACK_LEN 4
void wire_ack_encode(int mapped, unsigned char out[WIRE_ACK_LEN]);
int wire_ack_decode(const unsigned char in[WIRE_ACK_LEN], int *mapped);

/* ------------------------------------------------------------------ message header */
#define WIRE_HEADER_LEN 24
enum wire_op {
    WIRE_OP_ALLREDUCE = 1,
    WIRE_OP_REDUCE_SCATTER = 2,
    WIRE_OP_ALL_GATHER = 3,
    WIRE_OP_BROADCAST = 4,
    WIRE_OP_SEND = 5,
    WIRE_OP_BARRIER = 6,
    WIRE_OP_ALL_GATHER_BYTES = 7, /* the control plane's (dtrain_comm_all_gather_bytes) */
};

struct wire_header {
    uint16_t op;    /* enum wire_op */
    uint16_t arg;   /* reduce op, or 0 */
    uint32_t seq;   /* messages before this one on the link */
    uint32_t root;  /* broadcast root, else 0 */
    uint64_t count; /* floats, or bytes for broadcast, send and all_gather_bytes */
};

void wire_header_encode(const struct wire_header *h, unsigned char out[WIRE_HEADER_LEN]);
int wire_header_decode(const unsigned char in[WIRE_HEADER_LEN], struct wire_header *h);
const char *wire_op_name(unsigned op);
/* "allreduce (sum) of 100 floats (message 3 on the link)", for messages. */
const char *wire_header_text(const struct wire_header *h, char *buf, size_t len);

#endif
