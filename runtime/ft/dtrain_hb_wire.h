/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: one heartbeat datagram, sealed and checked (dtrain_heartbeat.h
 * sends and reads them).  Both ends run the same build: fields in host
 * order, fixed offsets.
 *
 *   0 magic "DTHB"   4 version 2   8 rank   12 flags   16 sequence
 *   24 progress   32 step   40 what[48]   88 node[32]   120 gpu[32]
 *   152 MAC: HMAC-SHA-256 of bytes 0..151 under the job's heartbeat key,
 *       its first 16 bytes                                 (168 bytes)
 *
 * The key (dtrain_hb_key) is HKDF-SHA-256 of the world group's bootstrap
 * id, which holds the job's secret, labelled "dtrain heartbeat v2": it is
 * never printed or sent, and a datagram of another job, a forged or an
 * altered one fails the MAC.  The sequence number grows with every
 * datagram a sender sends; the receiver keeps the last one it accepted
 * from each peer (dtrain_heartbeat.c), so a replayed datagram is refused.
 * Pure functions: the fuzzers (tests/fuzz/fuzz_hb_wire.c) take them whole. */
#ifndef DTRAIN_HB_WIRE_H
#define DTRAIN_HB_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define DTRAIN_HB_KEY_LEN 32
#define DTRAIN_HB_MAC_LEN 16
#define DTRAIN_HB_WIRE_LEN 168
#define DTRAIN_HB_WHAT_MAX 48
#define DTRAIN_HB_NAME_MAX 32

#define DTRAIN_HB_FLAG_WAITING 1
#define DTRAIN_HB_FLAG_ARMED 2
#define DTRAIN_HB_FLAG_LEAVING 4

/* What one datagram says; the texts are NUL-terminated. */
struct dtrain_hb_beat {
    int32_t rank, flags;
    uint64_t seq;
    uint64_t progress;
    int64_t step;
    char what[DTRAIN_HB_WHAT_MAX];
    char node[DTRAIN_HB_NAME_MAX];
    char gpu[DTRAIN_HB_NAME_MAX];
};

/* The job's heartbeat key from the world group's bootstrap id text. */
void dtrain_hb_key(const char *world_id, unsigned char key[DTRAIN_HB_KEY_LEN]);

/* Seal b into out (texts cut to their fields). */
void dtrain_hb_wire_encode(const unsigned char key[DTRAIN_HB_KEY_LEN], const struct dtrain_hb_beat *b,
                           unsigned char out[DTRAIN_HB_WIRE_LEN]);

/* 0 and the datagram's content in out when buf is one whole datagram of
 * this format under key, with a rank >= 0; else -1 (out unspecified). */
int dtrain_hb_wire_decode(const unsigned char key[DTRAIN_HB_KEY_LEN], const void *buf, size_t len,
                          struct dtrain_hb_beat *out);

#endif
