/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A link: one direction of data between two members of a communicator.
 *
 * Over TCP the link is a connected socket that carries the data.  Over
 * shared memory it is a single-producer single-consumer byte ring in a
 * segment both processes map (created by the receiving side, named once
 * over the TCP connection, unlinked as soon as both have mapped it); the
 * TCP connection stays open as the control socket: its end-of-file tells
 * that the peer died, since a killed process leaves no other trace.
 *
 * The operations never block: they move what they can now and return the
 * bytes (or floats) moved, 0 when nothing could move, or a negative
 * enum dtrain_comm_result with one line in l->why.  link_wait() sleeps a
 * little until one of two links may move again.  A stream of float data
 * must start at a multiple of 4 bytes (the ring engine pads byte messages),
 * so that a float never straddles the ring's wrap. */
#ifndef DTRAIN_COMM_CPU_LINK_H
#define DTRAIN_COMM_CPU_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

/* Bytes of a shared-memory ring (power of two) and the most one write
 * publishes at a time (so that the reader can start on it early). */
#define LINK_SHM_RING_BYTES (1u << 21)
#define LINK_SHM_PIECE_BYTES (64u << 10)
/* TCP receive staging for reductions. */
#define LINK_STAGE_BYTES (256u << 10)

struct shm_ring;

struct link {
    int fd;                /* TCP socket: data (tcp) or control (shm); -1 when closed */
    int peer;              /* rank at the other end */
    int sender;            /* 1: this side writes */
    struct shm_ring *ring; /* NULL over TCP */
    size_t map_len;
    int peer_gone;         /* the control socket saw end-of-file or an error */
    unsigned char *stage;  /* TCP, receiver: bytes read ahead for a reduction */
    size_t stage_len;
    uint32_t seq;          /* next message's sequence number */
    unsigned spin, yield;  /* idle rounds spent spinning, then yielding, before sleeping */
    char why[160];
};

/* A TCP link over connected socket fd (taken over).  NULL when out of memory. */
struct link *link_new(int fd, int peer, int sender);

/* Receiver: create a ring segment; name receives its name.  Sender: map
 * the named segment.  Both attach it to l (l->fd becomes the control
 * socket).  link_shm_unlink removes the name (the mappings stay). */
int link_shm_create(struct link *l, char name[WIRE_SHM_NAME_MAX]);
int link_shm_open(struct link *l, const char *name);
void link_shm_unlink(const char *name);
/* Back to TCP after a failed mapping on the other side. */
void link_shm_drop(struct link *l);

ssize_t link_write(struct link *l, const void *src, size_t len);
ssize_t link_read(struct link *l, void *dst, size_t len);
/* dst[i] = a[i] + incoming[i] (a may be dst), divided by divisor when it is
 * not 0, for up to n floats; returns the floats done. */
ssize_t link_read_reduce(struct link *l, float *dst, const float *a, size_t n, float divisor);

/* How to wait: oversubscribed (more members on this host than CPUs to run
 * them) gives the CPU away at once instead of spinning.  link_new sets 0. */
void link_set_waiting(struct link *l, int oversubscribed);

/* Sleep a little until r (receiving) or s (sending) may move: spin, then
 * yield, then poll or futex-wait for at most a few milliseconds, as idle
 * (rounds without progress so far) grows.  Either may be NULL.  Returns 0,
 * or a negative result code. */
int link_wait(struct link *r, struct link *s, unsigned idle);

/* Non-blocking: 1 when the peer has gone (end-of-file or error on the
 * control socket, the ring closed), else 0.  Safe from any thread. */
int link_peer_gone(struct link *l);

/* Any thread: make both ends' waits end and fail (shutdown the socket,
 * mark the ring closed, wake sleepers). */
void link_break(struct link *l);

/* Close and free (NULL allowed). */
void link_free(struct link *l);

#endif
