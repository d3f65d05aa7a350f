/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Ring algorithms of the cpu backend, as engine plans (engine.h).
 *
 * Members 0..n-1 form a ring; each writes to `next` (rank+1) and reads from
 * `prev` (rank-1).  Buffers are cut into slices so that what one step
 * reduces is forwarded by the next step while it is still in cache, and
 * every step moves through the links in pieces, so all ranks work at once:
 *
 *   all-reduce      per slice of n*C floats, n segments: n-1 steps of
 *                   reduce-scatter (send segment r-s-1, add the received
 *                   segment r-s-2 into place), then n-1 steps of
 *                   all-gather (send r-s, copy in r-s-1).  Each rank sends
 *                   every segment but its own twice: 2(n-1)/n of the buffer.
 *                   Member r finishes segment r of every slice
 *                   (ring_segment); on one host the cpu backend sums and
 *                   gathers the segments by direct reads instead (cma.h),
 *                   in the same order.
 *   reduce-scatter  per slice of C floats of each rank's block: the same
 *                   n-1 reduce steps; partial sums live in three scratch
 *                   slots of C floats, member r's sum lands in out.
 *   all-gather      per slice of C floats: the n-1 copy steps (bytes too:
 *                   the control plane's all-gather).
 *   broadcast       a pipelined chain root -> root+1 -> ... -> root-1.
 * Averages divide the finished sum once, on the member that completes the
 * segment, so every member ends with the same bits. */
#ifndef DTRAIN_COMM_CPU_RING_H
#define DTRAIN_COMM_CPU_RING_H

#include <stddef.h>

#include "dtrain_comm.h"
#include "link.h"
#include "wire.h"

/* Floats per segment of a slice (C above). */
#define RING_CHUNK_FLOATS (64u << 10)

struct dtrain_comm;

int ring_allreduce(struct dtrain_comm *c, struct link *next, struct link *prev, float *buf, size_t count,
                   enum dtrain_reduce_op op, enum wire_op wire_op);

/* The all-reduce's layout: the slice of count floats starting at `off`
 * (a multiple of n * RING_CHUNK_FLOATS) holds n segments; segment i's
 * start (from buf) and length in floats. */
size_t ring_segment(size_t count, int n, size_t off, int i, size_t *len);
/* The floats of segment i over all slices (what member i finishes). */
size_t ring_segment_floats(size_t count, int n, int i);
/* scratch holds 3 * RING_CHUNK_FLOATS floats. */
int ring_reduce_scatter(struct dtrain_comm *c, struct link *next, struct link *prev, const float *in, float *out,
                        size_t count, enum dtrain_reduce_op op, float *scratch);
int ring_all_gather(struct dtrain_comm *c, struct link *next, struct link *prev, const float *in, float *out,
                    size_t count);
/* The same on bytes (the control plane), padded to 4 bytes on the link. */
int ring_all_gather_bytes(struct dtrain_comm *c, struct link *next, struct link *prev, const void *in, void *out,
                          size_t bytes);
int ring_broadcast(struct dtrain_comm *c, struct link *next, struct link *prev, void *buf, size_t bytes, int root);

/* Point to point: a message out on `to` and one in from `from`, at once;
 * either link may be NULL (nothing to send / receive). */
int ring_sendrecv(struct dtrain_comm *c, struct link *to, const void *sendbuf, size_t send_bytes, struct link *from,
                  void *recvbuf, size_t recv_bytes);

#endif
