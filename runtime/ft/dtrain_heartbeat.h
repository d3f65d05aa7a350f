/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: heartbeats between ranks, for fast hang detection.
 *
 * The communicator timeout (--comm-timeout) has to cover the longest call
 * a run legitimately makes, so it is a slow way to find a hung rank.  A
 * heartbeat is a side channel: every rank's watchdog thread
 * (dtrain_watchdog.h) sends a small UDP datagram every poll interval to
 * its two neighbours in the world ring (rank - 1 and rank + 1) and reads
 * theirs.  It never touches the communicators (NCCL ranks use it alike);
 * each rank sends 2 and receives 2 datagrams per interval whatever the
 * world size, and keeps the state of 2 peers: bounded.
 *
 * A datagram says what the rank does: its rank, node and GPU, the step
 * and action it is in (the trainer publishes its 1F1B action or
 * collective), whether a communicator call is in flight (waiting), and a
 * progress counter (calls and bytes moved by its communicators, plus the
 * loop's beats).  A rank in a long collective moves bytes or waits:
 * neither is a hang.  A watcher that has itself waited in a call without
 * progress for the limit declares its neighbour hung when
 *   - no datagram came from it for the limit (the process is stopped or
 *     its node unreachable), or
 *   - it is in a training step, outside any communicator call, and its
 *     progress counter has not moved for the limit (stuck in computation
 *     while its peers wait on it).
 * The limit is --hang-detect seconds, raised to 4 x the longest quiet
 * spell (or heartbeat gap) the watcher has already seen from that peer,
 * so a slow machine does not make slow work look hung.  A rank that
 * stops its watchdog (the end of the run) says so ("leaving") and is not
 * watched any more.
 *
 * Datagrams are sealed with the job's heartbeat key (dtrain_hb_wire.h:
 * HKDF of the world group's bootstrap id, never printed) and numbered:
 * a forged, altered, replayed or another job's datagram is dropped and
 * counted.  Each neighbour has a socket of its own, connected to that
 * neighbour's socket for this rank (the address exchange gives each side
 * the other's port), so the kernel delivers nothing from any other
 * address: a flood from elsewhere cannot fill it or delay a genuine
 * datagram; what arrives is read until none is left (bounded in time), and
 * its source is checked again.  No global state: one struct per watchdog. */
#ifndef DTRAIN_HEARTBEAT_H
#define DTRAIN_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_comm.h"
#include "dtrain_hb_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shortest --hang-detect limit (seconds; 0 is off): 5 polls of the
 * watchdog's default 0.2 s interval.  Below it the interval shrinks with
 * the limit (hang_s / 5), and an ordinary stretch of computation between
 * two communicator calls, or a descheduled thread, outlasts the limit: a
 * healthy run would be declared hung. */
#define DTRAIN_HANG_DETECT_MIN_S 1.0
#define DTRAIN_HB_PEERS 2

/* What a rank says about itself in each datagram. */
struct dtrain_hb_state {
    int waiting;                      /* a communicator call is in flight */
    int armed;                        /* in a training step: stuck computation counts */
    uint64_t progress;
    long step;
    char what[DTRAIN_HB_WHAT_MAX];    /* action or collective, e.g. "forward of micro-batch 1" */
};

struct dtrain_hb; /* opaque */

/* One socket per peer slot, bound to an IPv4 address of this host (ports
 * from the kernel).  addr: the address peers reach this rank on; key: the
 * job's (dtrain_hb_key).  0, or -1 with one line. */
int dtrain_hb_open(const char *addr, int rank, const char *node, const char *gpu,
                   const unsigned char key[DTRAIN_HB_KEY_LEN], struct dtrain_hb **out, char *err, size_t errlen);
/* The address and port of slot's socket, in host order: what the peer of
 * that slot is given (dtrain_hb_start exchanges them over the world
 * communicator). */
void dtrain_hb_address(const struct dtrain_hb *h, int slot, uint32_t *ipv4, uint16_t *port);
/* Watch and feed this peer (slot < DTRAIN_HB_PEERS, distinct ranks, not
 * this rank) at the address of ITS socket for this rank; slot's socket is
 * connected to it. */
int dtrain_hb_set_peer(struct dtrain_hb *h, int slot, int rank, uint32_t ipv4, uint16_t port);
/* Datagrams read and kept, and read and dropped (wrong sender, size,
 * format, MAC or rank, or replayed). */
struct dtrain_hb_counts {
    uint64_t accepted, dropped;
};
void dtrain_hb_counts(const struct dtrain_hb *h, struct dtrain_hb_counts *out);
/* Send our state to the peers; read what came (non-blocking). */
void dtrain_hb_send(struct dtrain_hb *h, const struct dtrain_hb_state *s, int leaving);
void dtrain_hb_receive(struct dtrain_hb *h);
/* The verdict: 1 and one line in reason when a peer is hung, given that
 * this rank has waited without progress for waited_s seconds in a call on
 * the group named `in` ("TP", "world"...).  limit_s: --hang-detect. */
int dtrain_hb_check(struct dtrain_hb *h, double waited_s, const char *in, double limit_s, char *reason,
                    size_t len);
void dtrain_hb_close(struct dtrain_hb *h);

/* In a job (the loop's set-up): open this rank's heartbeat and learn its
 * ring neighbours' addresses (a collective over world: two exchanges with
 * rank - 1 and rank + 1, in host memory), then hand it to wd.  Ranks
 * alone, or hang_detect <= 0 (--hang-detect 0): none.  A rank that cannot
 * open its socket says so and sends port 0 (its neighbours then neither
 * send to it nor judge it): the exchange stays matched and the run goes on
 * with the communicator timeout for it.  DTRAIN_OK, or a status with one
 * line in err. */
struct dtrain_bootstrap;
struct dtrain_fault;
struct dtrain_watchdog;
int dtrain_hb_start(const struct dtrain_bootstrap *bs, dtrain_comm *world, const struct dtrain_fault *fault,
                    double hang_detect, struct dtrain_watchdog *wd, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
