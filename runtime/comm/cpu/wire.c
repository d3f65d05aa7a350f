/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Encoding of the cpu backend's messages; see wire.h. */
#include "wire.h"

#include <stdio.h>
#include <string.h>

#define MAGIC_HELLO 0x4d435444u  /* "DTCM" */
#define MAGIC_TABLE 0x54435444u  /* "DTCT" */
#define MAGIC_REPLY 0x52435444u  /* "DTCR" */
#define MAGIC_ACK 0x41435444u    /* "DTCA" */
#define MAGIC_HEADER 0x48435444u /* "DTCH" */
#define MAGIC_LOOKUP 0x4c435444u /* "DTCL" */

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* hello: magic 0, version 4, kind 6, secret 8..23, size 24, from 28, to 32,
 * addr 36 (network order), port 40, flags 42, host id 44..107, pid 108. */
void wire_hello_encode(const struct wire_hello *h, unsigned char out[WIRE_HELLO_LEN])
{
    memset(out, 0, WIRE_HELLO_LEN);
    put32(out, MAGIC_HELLO);
    put16(out + 4, WIRE_VERSION);
    put16(out + 6, (uint16_t)h->kind);
    memcpy(out + 8, h->secret, DTRAIN_BOOTSTRAP_SECRET_LEN);
    put32(out + 24, h->group_size);
    put32(out + 28, h->from);
    put32(out + 32, h->to);
    memcpy(out + 36, &h->addr.s_addr, 4);
    put16(out + 40, h->port);
    put16(out + 42, h->flags);
    memcpy(out + 44, h->host_id, DTRAIN_COMM_HOST_ID_MAX);
    put32(out + 108, h->pid);
}

int wire_hello_decode(const unsigned char in[WIRE_HELLO_LEN], struct wire_hello *h)
{
    unsigned kind = get16(in + 6);
    if (get32(in) != MAGIC_HELLO || get16(in + 4) != WIRE_VERSION || kind < WIRE_BOOT || kind > WIRE_P2P)
        return -1;
    memset(h, 0, sizeof *h);
    h->kind = (enum wire_hello_kind)kind;
    memcpy(h->secret, in + 8, DTRAIN_BOOTSTRAP_SECRET_LEN);
    h->group_size = get32(in + 24);
    h->from = get32(in + 28);
    h->to = get32(in + 32);
    memcpy(&h->addr.s_addr, in + 36, 4);
    h->port = get16(in + 40);
    h->flags = get16(in + 42);
    memcpy(h->host_id, in + 44, DTRAIN_COMM_HOST_ID_MAX);
    if (memchr(h->host_id, '\0', DTRAIN_COMM_HOST_ID_MAX) == NULL)
        return -1;
    h->pid = get32(in + 108);
    return 0;
}

int wire_hello_prefix_check(const unsigned char *in, size_t got)
{
    unsigned char want[6];
    put32(want, MAGIC_HELLO);
    put16(want + 4, WIRE_VERSION);
    size_t n = got < sizeof want ? got : sizeof want;
    if (memcmp(in, want, n) != 0)
        return -1;
    if (got >= 8) {
        unsigned kind = get16(in + 6);
        if (kind < WIRE_BOOT || kind > WIRE_P2P)
            return -1;
    }
    return 0;
}

void wire_table_head_encode(uint32_t size, uint32_t to, uint32_t local, unsigned char out[WIRE_TABLE_HEAD_LEN])
{
    memset(out, 0, WIRE_TABLE_HEAD_LEN);
    put32(out, MAGIC_TABLE);
    put16(out + 4, WIRE_VERSION);
    put32(out + 8, size);
    put32(out + 12, to);
    put32(out + 16, local);
}

int wire_table_head_decode(const unsigned char in[WIRE_TABLE_HEAD_LEN], uint32_t *size, uint32_t *to,
                           uint32_t *local)
{
    if (get32(in) != MAGIC_TABLE || get16(in + 4) != WIRE_VERSION)
        return -1;
    *size = get32(in + 8);
    *to = get32(in + 12);
    *local = get32(in + 16);
    return 0;
}

void wire_lookup_encode(uint32_t rank, unsigned char out[WIRE_LOOKUP_LEN])
{
    put32(out, MAGIC_LOOKUP);
    put32(out + 4, rank);
}

int wire_lookup_decode(const unsigned char in[WIRE_LOOKUP_LEN], uint32_t *rank)
{
    if (get32(in) != MAGIC_LOOKUP)
        return -1;
    *rank = get32(in + 4);
    return 0;
}

void wire_answer_encode(uint32_t rank, const struct wire_peer *p, unsigned char out[WIRE_ANSWER_LEN])
{
    put32(out, rank);
    wire_peer_encode(p, out + 4);
}

void wire_answer_decode(const unsigned char in[WIRE_ANSWER_LEN], uint32_t *rank, struct wire_peer *p)
{
    *rank = get32(in);
    wire_peer_decode(in + 4, p);
}

void wire_peer_encode(const struct wire_peer *p, unsigned char out[WIRE_TABLE_ENTRY_LEN])
{
    memcpy(out, &p->addr.s_addr, 4);
    put16(out + 4, p->port);
    put16(out + 6, 0);
    put32(out + 8, p->host);
}

void wire_peer_decode(const unsigned char in[WIRE_TABLE_ENTRY_LEN], struct wire_peer *p)
{
    memcpy(&p->addr.s_addr, in, 4);
    p->port = get16(in + 4);
    p->host = get32(in + 8);
}

void wire_reply_encode(int shm, const char *name, unsigned char out[WIRE_REPLY_LEN])
{
    memset(out, 0, WIRE_REPLY_LEN);
    put32(out, MAGIC_REPLY);
    put32(out + 4, shm ? 1 : 0);
    if (shm)
        strncpy((char *)out + 8, name, WIRE_SHM_NAME_MAX - 1);
}

int wire_reply_decode(const unsigned char in[WIRE_REPLY_LEN], int *shm, char name[WIRE_SHM_NAME_MAX])
{
    uint32_t mode = get32(in + 4);
    if (get32(in) != MAGIC_REPLY || mode > 1)
        return -1;
    *shm = (int)mode;
    memcpy(name, in + 8, WIRE_SHM_NAME_MAX);
    if (memchr(name, '\0', WIRE_SHM_NAME_MAX) == NULL || (mode == 1 && name[0] != '/'))
        return -1;
    return 0;
}

void wire_ack_encode(int mapped, unsigned char out[WIRE_ACK_LEN])
{
    put32(out, MAGIC_ACK + (mapped ? 1u : 0u));
}

int wire_ack_decode(const unsigned char in[WIRE_ACK_LEN], int *mapped)
{
    uint32_t v = get32(in);
    if (v != MAGIC_ACK && v != MAGIC_ACK + 1)
        return -1;
    *mapped = v == MAGIC_ACK + 1;
    return 0;
}

/* header: magic 0, op 4, arg 6, seq 8, root 12, count 16. */
void wire_header_encode(const struct wire_header *h, unsigned char out[WIRE_HEADER_LEN])
{
    put32(out, MAGIC_HEADER);
    put16(out + 4, h->op);
    put16(out + 6, h->arg);
    put32(out + 8, h->seq);
    put32(out + 12, h->root);
    put64(out + 16, h->count);
}

int wire_header_decode(const unsigned char in[WIRE_HEADER_LEN], struct wire_header *h)
{
    if (get32(in) != MAGIC_HEADER)
        return -1;
    h->op = get16(in + 4);
    h->arg = get16(in + 6);
    h->seq = get32(in + 8);
    h->root = get32(in + 12);
    h->count = get64(in + 16);
    return 0;
}

const char *wire_header_text(const struct wire_header *h, char *buf, size_t len)
{
    static const char *const reduce[] = {"sum", "avg"};
    const char *unit =
        h->op == WIRE_OP_BROADCAST || h->op == WIRE_OP_SEND || h->op == WIRE_OP_ALL_GATHER_BYTES ? "bytes" : "floats";
    int n;
    if (h->op == WIRE_OP_BROADCAST)
        n = snprintf(buf, len, "broadcast from rank %u of %llu bytes", h->root, (unsigned long long)h->count);
    else if (h->op == WIRE_OP_ALLREDUCE || h->op == WIRE_OP_REDUCE_SCATTER)
        n = snprintf(buf, len, "%s (%s) of %llu %s", wire_op_name(h->op), h->arg < 2 ? reduce[h->arg] : "?",
                     (unsigned long long)h->count, unit);
    else
        n = snprintf(buf, len, "%s of %llu %s", wire_op_name(h->op), (unsigned long long)h->count, unit);
    if (n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " (message %u on the link)", h->seq);
    return buf;
}

const char *wire_op_name(unsigned op)
{
    static const char *const names[] = {"?", "allreduce", "reduce_scatter", "all_gather",
                                        "broadcast", "send", "barrier", "all_gather_bytes"};
    return op < sizeof names / sizeof names[0] ? names[op] : "?";
}
