/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The progress engine every cpu-backend operation runs on.
 *
 * An operation, as one member sees it, is two ordered lists: what it
 * writes to its send link and what it reads from its receive link (either
 * may be absent).  Each entry is a byte range of user memory (or scratch):
 *   send op  src[bytes]; with dep >= 0 it may only send byte b once receive
 *            op dep has delivered byte b (a ring forwards what it has just
 *            reduced or copied: that is the pipelining, chunk by chunk);
 *            with copy_to, each piece written to the link is also copied
 *            there while it is in cache (an all-gather's own block: its
 *            input is read from memory once, not twice);
 *   recv op  dst[bytes] copied, or reduced (dst = a + incoming, then /
 *            divisor), or discarded (padding), or a header to check; with
 *            gate >= 0 it may only start once send op gate is complete (a
 *            scratch slot is reused only after it was sent).
 * engine_run() moves both lists forward as far as the links allow, and
 * waits (link_wait) only when neither can move.  It fails with
 * ETIMEDOUT after timeout_ms without progress, EABORTED when told to stop,
 * EPEER when a link breaks, EMISMATCH when the peer's header differs, each
 * recorded with comm_fail(). */
#ifndef DTRAIN_COMM_CPU_ENGINE_H
#define DTRAIN_COMM_CPU_ENGINE_H

#include <stddef.h>

#include "link.h"
#include "wire.h"

struct dtrain_comm;

enum recv_kind { RECV_COPY, RECV_REDUCE, RECV_DISCARD, RECV_HEADER };

struct send_op {
    const void *src;
    size_t bytes;
    long dep;    /* receive op that must deliver each byte first, or -1 */
    void *copy_to; /* NULL, or where the sent bytes are copied too (not overlapping src) */
    int payload; /* counted in the statistics */
};

struct recv_op {
    void *dst;
    size_t bytes;
    enum recv_kind kind;
    const float *a;  /* RECV_REDUCE: the local operand (may be dst) */
    float divisor;   /* RECV_REDUCE: 0, or divide the result by it (average) */
    long gate;       /* send op that must be complete first, or -1 */
    int payload;
};

struct engine_plan {
    enum wire_op op;
    struct send_op *send;
    size_t nsend, send_cap;
    struct recv_op *recv;
    size_t nrecv, recv_cap;
    struct wire_header expect; /* the header the receive side must see */
    unsigned char header_out[WIRE_HEADER_LEN];
    unsigned char header_in[WIRE_HEADER_LEN];
    unsigned char pad_out[4];  /* zeros that pad a byte message */
    unsigned char pad_in[4];   /* where received padding goes */
    int out_of_memory;
};

/* Start a plan: a header with send_count goes first on the send link (when
 * s), one with recv_count is expected first on the receive link (when r);
 * both links' sequence numbers advance. */
void engine_begin(struct engine_plan *p, struct link *s, struct link *r, enum wire_op op, unsigned arg,
                  unsigned root, size_t send_count, size_t recv_count);

/* Append an op; zero-byte ops are not added.  Return the op's index, or -1
 * (none added).  Out of memory is remembered and reported by engine_run. */
long engine_send(struct engine_plan *p, const void *src, size_t bytes, long dep);
/* The same, and each piece sent is copied to copy_to[bytes] too. */
long engine_send_copy(struct engine_plan *p, const void *src, size_t bytes, long dep, void *copy_to);
long engine_recv(struct engine_plan *p, void *dst, size_t bytes, enum recv_kind kind, const float *a,
                 float divisor, long gate);
/* Pad a byte message of `bytes` to a multiple of 4 on either side. */
void engine_pad(struct engine_plan *p, size_t bytes, int send, int recv);

/* Run the plan to the end.  Returns 0 or the communicator's (first) error. */
int engine_run(struct dtrain_comm *c, struct link *s, struct link *r, struct engine_plan *p);

void engine_free(struct engine_plan *p);

#endif
