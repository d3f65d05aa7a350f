/* SPDX-License-Identifier: GPL-2.0-or-later */
/* SHA-256 (FIPS 180-4), HMAC-SHA-256 (RFC 2104) and HKDF-SHA-256
 * (RFC 5869), self-contained: the heartbeats' MAC and key derivation
 * (runtime/ft/dtrain_hb_wire.h) need nothing more, and a crypto library
 * would be a new dependency of every part that links common (the SPANK
 * plugin, the launcher).  Checked against the standards' vectors in
 * tests/common/test_sha256.  Not for bulk data: a plain C loop. */
#ifndef DTRAIN_SHA256_H
#define DTRAIN_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define DTRAIN_SHA256_LEN 32
#define DTRAIN_SHA256_BLOCK 64
#define DTRAIN_HKDF_INFO_MAX 256 /* the label's length: ours are short */

struct dtrain_sha256 {
    uint32_t state[8];
    uint64_t bytes;                          /* message length so far */
    unsigned char block[DTRAIN_SHA256_BLOCK];
    size_t used;                             /* bytes waiting in block */
};

void dtrain_sha256_init(struct dtrain_sha256 *s);
void dtrain_sha256_update(struct dtrain_sha256 *s, const void *data, size_t len);
void dtrain_sha256_final(struct dtrain_sha256 *s, unsigned char out[DTRAIN_SHA256_LEN]);
void dtrain_sha256(const void *data, size_t len, unsigned char out[DTRAIN_SHA256_LEN]);

/* HMAC-SHA-256 of msg under key (any length). */
void dtrain_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                        unsigned char out[DTRAIN_SHA256_LEN]);

/* HKDF-SHA-256: extract (salt may be NULL with saltlen 0) then expand to
 * outlen bytes (at most 255 x 32) labelled by info (at most
 * DTRAIN_HKDF_INFO_MAX bytes).  0, or -1 when either is too long. */
int dtrain_hkdf_sha256(const void *salt, size_t saltlen, const void *ikm, size_t ikmlen, const void *info,
                       size_t infolen, unsigned char *out, size_t outlen);

/* 1 when the len bytes are equal, in a time that does not depend on where
 * they differ (MACs and secrets). */
int dtrain_equal_ct(const void *a, const void *b, size_t len);

#endif
