/* SPDX-License-Identifier: GPL-2.0-or-later */
/* common/dtrain_sha256 against the standards' own vectors: SHA-256 from
 * FIPS 180-4's examples, HMAC-SHA-256 from RFC 4231 (all seven cases) and
 * HKDF-SHA-256 from RFC 5869 (cases 1 and 3). */
#include "dtrain_parse.h"
#include "dtrain_sha256.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static int sha_is(const void *msg, size_t len, const char *want)
{
    unsigned char d[DTRAIN_SHA256_LEN];
    char text[2 * DTRAIN_SHA256_LEN + 1];
    dtrain_sha256(msg, len, d);
    dtrain_hex_encode(d, sizeof d, text, sizeof text);
    return strcmp(text, want) == 0;
}

static int hmac_is(const void *key, size_t keylen, const void *msg, size_t len, const char *want)
{
    unsigned char d[DTRAIN_SHA256_LEN];
    char text[2 * DTRAIN_SHA256_LEN + 1];
    dtrain_hmac_sha256(key, keylen, msg, len, d);
    dtrain_hex_encode(d, sizeof d, text, sizeof text);
    return strncmp(text, want, strlen(want)) == 0; /* case 5 checks a truncated MAC */
}

int main(void)
{
    ok(sha_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "SHA-256(\"abc\")");
    ok(sha_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "SHA-256 of nothing");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ok(sha_is(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
       "SHA-256 of the two-block message");
    size_t million = 1000000;
    char *as = malloc(million);
    memset(as, 'a', million);
    ok(sha_is(as, million, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
       "SHA-256 of a million 'a'");
    /* the same fed in odd pieces: the block buffer's seams */
    struct dtrain_sha256 s;
    unsigned char d[DTRAIN_SHA256_LEN], whole[DTRAIN_SHA256_LEN];
    dtrain_sha256_init(&s);
    for (size_t at = 0, step = 1; at < million; at += step, step = step % 131 + 7)
        dtrain_sha256_update(&s, as + at, at + step <= million ? step : million - at);
    dtrain_sha256_final(&s, d);
    dtrain_sha256(as, million, whole);
    ok(memcmp(d, whole, sizeof d) == 0, "fed in pieces of 1 to 137 bytes, the same digest");
    free(as);

    unsigned char k20[20], k131[131], d50[50], k25[25];
    memset(k20, 0x0b, sizeof k20);
    ok(hmac_is(k20, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
       "RFC 4231 case 1");
    ok(hmac_is("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"), "RFC 4231 case 2");
    memset(k20, 0xaa, sizeof k20);
    memset(d50, 0xdd, sizeof d50);
    ok(hmac_is(k20, 20, d50, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
       "RFC 4231 case 3");
    for (int i = 0; i < 25; i++)
        k25[i] = (unsigned char)(i + 1);
    memset(d50, 0xcd, sizeof d50);
    ok(hmac_is(k25, 25, d50, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
       "RFC 4231 case 4");
    memset(k20, 0x0c, sizeof k20);
    ok(hmac_is(k20, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b"),
       "RFC 4231 case 5 (truncated to 128 bits)");
    memset(k131, 0xaa, sizeof k131);
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    ok(hmac_is(k131, 131, m6, strlen(m6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
       "RFC 4231 case 6 (a key longer than a block)");
    const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. The key "
                     "needs to be hashed before being used by the HMAC algorithm.";
    ok(hmac_is(k131, 131, m7, strlen(m7), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
       "RFC 4231 case 7");

    unsigned char ikm[22], salt[13], info[10], okm[42];
    char text[2 * sizeof okm + 1];
    memset(ikm, 0x0b, sizeof ikm);
    for (int i = 0; i < 13; i++)
        salt[i] = (unsigned char)i;
    for (int i = 0; i < 10; i++)
        info[i] = (unsigned char)(0xf0 + i);
    ok(dtrain_hkdf_sha256(salt, sizeof salt, ikm, sizeof ikm, info, sizeof info, okm, sizeof okm) == 0 &&
       (dtrain_hex_encode(okm, sizeof okm, text, sizeof text), strcmp(text, "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf3400720"
                                                "8d5b887185865") == 0),
       "RFC 5869 case 1");
    ok(dtrain_hkdf_sha256(NULL, 0, ikm, sizeof ikm, NULL, 0, okm, sizeof okm) == 0 &&
       (dtrain_hex_encode(okm, sizeof okm, text, sizeof text), strcmp(text, "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d2013"
                                                "95faa4b61a96c8") == 0),
       "RFC 5869 case 3 (no salt, no info)");
    ok(dtrain_hkdf_sha256(NULL, 0, ikm, sizeof ikm, NULL, 0, okm, 255 * 32 + 1) == -1, "HKDF refuses more than 255 blocks");

    ok(dtrain_equal_ct("abcd", "abcd", 4) && !dtrain_equal_ct("abcd", "abce", 4) && dtrain_equal_ct("x", "y", 0),
       "the constant-time comparison");
    return tap_done();
}
