/* SPDX-License-Identifier: GPL-2.0-or-later */
/* SHA-256, HMAC and HKDF; see dtrain_sha256.h. */
#include "dtrain_sha256.h"

#include <string.h>

static const uint32_t round_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t st[8], const unsigned char *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + round_k[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    st[0] += a;
    st[1] += b;
    st[2] += c;
    st[3] += d;
    st[4] += e;
    st[5] += f;
    st[6] += g;
    st[7] += h;
}

void dtrain_sha256_init(struct dtrain_sha256 *s)
{
    static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->state, initial, sizeof initial);
    s->bytes = 0;
    s->used = 0;
}

void dtrain_sha256_update(struct dtrain_sha256 *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    s->bytes += len;
    while (len > 0) {
        size_t take = DTRAIN_SHA256_BLOCK - s->used < len ? DTRAIN_SHA256_BLOCK - s->used : len;
        memcpy(s->block + s->used, p, take);
        s->used += take;
        p += take;
        len -= take;
        if (s->used == DTRAIN_SHA256_BLOCK) {
            compress(s->state, s->block);
            s->used = 0;
        }
    }
}

void dtrain_sha256_final(struct dtrain_sha256 *s, unsigned char out[DTRAIN_SHA256_LEN])
{
    uint64_t bits = s->bytes * 8;
    unsigned char pad[DTRAIN_SHA256_BLOCK + 8] = {0x80};
    /* 0x80, zeros up to 56 mod 64, then the length in bits, big-endian */
    size_t padlen = (s->used < 56 ? 56 - s->used : 120 - s->used);
    for (int i = 0; i < 8; i++)
        pad[padlen + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    dtrain_sha256_update(s, pad, padlen + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(s->state[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->state[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->state[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->state[i];
    }
    memset(s, 0, sizeof *s);
}

void dtrain_sha256(const void *data, size_t len, unsigned char out[DTRAIN_SHA256_LEN])
{
    struct dtrain_sha256 s;
    dtrain_sha256_init(&s);
    dtrain_sha256_update(&s, data, len);
    dtrain_sha256_final(&s, out);
}

void dtrain_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                        unsigned char out[DTRAIN_SHA256_LEN])
{
    unsigned char k[DTRAIN_SHA256_BLOCK] = {0}, pad[DTRAIN_SHA256_BLOCK], inner[DTRAIN_SHA256_LEN];
    if (keylen > DTRAIN_SHA256_BLOCK)
        dtrain_sha256(key, keylen, k);
    else if (keylen > 0)
        memcpy(k, key, keylen);
    struct dtrain_sha256 s;
    for (int i = 0; i < DTRAIN_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x36;
    dtrain_sha256_init(&s);
    dtrain_sha256_update(&s, pad, sizeof pad);
    dtrain_sha256_update(&s, msg, len);
    dtrain_sha256_final(&s, inner);
    for (int i = 0; i < DTRAIN_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x5c;
    dtrain_sha256_init(&s);
    dtrain_sha256_update(&s, pad, sizeof pad);
    dtrain_sha256_update(&s, inner, sizeof inner);
    dtrain_sha256_final(&s, out);
    memset(k, 0, sizeof k);
    memset(pad, 0, sizeof pad);
}

int dtrain_hkdf_sha256(const void *salt, size_t saltlen, const void *ikm, size_t ikmlen, const void *info,
                       size_t infolen, unsigned char *out, size_t outlen)
{
    if (outlen > 255 * DTRAIN_SHA256_LEN || infolen > DTRAIN_HKDF_INFO_MAX)
        return -1;
    unsigned char zeros[DTRAIN_SHA256_LEN] = {0}, prk[DTRAIN_SHA256_LEN];
    unsigned char msg[DTRAIN_SHA256_LEN + DTRAIN_HKDF_INFO_MAX + 1];
    /* extract: PRK = HMAC(salt, or zeros without one, IKM) */
    dtrain_hmac_sha256(saltlen > 0 ? salt : zeros, saltlen > 0 ? saltlen : sizeof zeros, ikm, ikmlen, prk);
    /* expand: T(i) = HMAC(PRK, T(i-1) | info | i), T(0) empty */
    size_t tlen = 0, done = 0;
    for (unsigned i = 1; done < outlen; i++) {
        unsigned char t[DTRAIN_SHA256_LEN];
        if (infolen > 0)
            memcpy(msg + tlen, info, infolen);
        msg[tlen + infolen] = (unsigned char)i;
        dtrain_hmac_sha256(prk, sizeof prk, msg, tlen + infolen + 1, t);
        size_t take = outlen - done < sizeof t ? outlen - done : sizeof t;
        memcpy(out + done, t, take);
        done += take;
        memcpy(msg, t, sizeof t);
        tlen = sizeof t;
        memset(t, 0, sizeof t);
    }
    memset(prk, 0, sizeof prk);
    memset(msg, 0, sizeof msg);
    return 0;
}

int dtrain_equal_ct(const void *a, const void *b, size_t len)
{
    const unsigned char *x = a, *y = b;
    volatile unsigned char diff = 0;
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned char)(x[i] ^ y[i]);
    return diff == 0;
}
