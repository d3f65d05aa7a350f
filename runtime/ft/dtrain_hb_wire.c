/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A heartbeat datagram; see dtrain_hb_wire.h. */
#include "dtrain_hb_wire.h"
#include "dtrain_sha256.h"

#include <string.h>

#define HB_MAGIC 0x42485444u /* "DTHB" */
#define HB_VERSION 2u        /* 1: a token in clear, no MAC (before issue 32) */
#define HB_KEY_LABEL "dtrain heartbeat v2"

enum {
    AT_MAGIC = 0,
    AT_VERSION = 4,
    AT_RANK = 8,
    AT_FLAGS = 12,
    AT_SEQ = 16,
    AT_PROGRESS = 24,
    AT_STEP = 32,
    AT_WHAT = 40,
    AT_NODE = AT_WHAT + DTRAIN_HB_WHAT_MAX,
    AT_GPU = AT_NODE + DTRAIN_HB_NAME_MAX,
    AT_MAC = AT_GPU + DTRAIN_HB_NAME_MAX,
};
_Static_assert(AT_MAC + DTRAIN_HB_MAC_LEN == DTRAIN_HB_WIRE_LEN, "the datagram's layout");

void dtrain_hb_key(const char *world_id, unsigned char key[DTRAIN_HB_KEY_LEN])
{
    const char *id = world_id != NULL ? world_id : "";
    (void)dtrain_hkdf_sha256(NULL, 0, id, strlen(id), HB_KEY_LABEL, sizeof HB_KEY_LABEL - 1, key, DTRAIN_HB_KEY_LEN);
}

static void mac(const unsigned char key[DTRAIN_HB_KEY_LEN], const unsigned char *datagram,
                unsigned char out[DTRAIN_HB_MAC_LEN])
{
    unsigned char full[DTRAIN_SHA256_LEN];
    dtrain_hmac_sha256(key, DTRAIN_HB_KEY_LEN, datagram, AT_MAC, full);
    memcpy(out, full, DTRAIN_HB_MAC_LEN);
}

static void put_text(unsigned char *at, size_t size, const char *text)
{
    size_t n = strnlen(text, size - 1);
    memset(at, 0, size);
    memcpy(at, text, n);
}

void dtrain_hb_wire_encode(const unsigned char key[DTRAIN_HB_KEY_LEN], const struct dtrain_hb_beat *b,
                           unsigned char out[DTRAIN_HB_WIRE_LEN])
{
    const uint32_t magic = HB_MAGIC, version = HB_VERSION;
    memcpy(out + AT_MAGIC, &magic, 4);
    memcpy(out + AT_VERSION, &version, 4);
    memcpy(out + AT_RANK, &b->rank, 4);
    memcpy(out + AT_FLAGS, &b->flags, 4);
    memcpy(out + AT_SEQ, &b->seq, 8);
    memcpy(out + AT_PROGRESS, &b->progress, 8);
    memcpy(out + AT_STEP, &b->step, 8);
    put_text(out + AT_WHAT, DTRAIN_HB_WHAT_MAX, b->what);
    put_text(out + AT_NODE, DTRAIN_HB_NAME_MAX, b->node);
    put_text(out + AT_GPU, DTRAIN_HB_NAME_MAX, b->gpu);
    mac(key, out, out + AT_MAC);
}

int dtrain_hb_wire_decode(const unsigned char key[DTRAIN_HB_KEY_LEN], const void *buf, size_t len,
                          struct dtrain_hb_beat *out)
{
    const unsigned char *in = buf;
    uint32_t magic, version;
    unsigned char want[DTRAIN_HB_MAC_LEN];
    if (len != DTRAIN_HB_WIRE_LEN)
        return -1;
    memcpy(&magic, in + AT_MAGIC, 4);
    memcpy(&version, in + AT_VERSION, 4);
    if (magic != HB_MAGIC || version != HB_VERSION)
        return -1;
    mac(key, in, want);
    if (!dtrain_equal_ct(want, in + AT_MAC, DTRAIN_HB_MAC_LEN))
        return -1;
    memcpy(&out->rank, in + AT_RANK, 4);
    memcpy(&out->flags, in + AT_FLAGS, 4);
    memcpy(&out->seq, in + AT_SEQ, 8);
    memcpy(&out->progress, in + AT_PROGRESS, 8);
    memcpy(&out->step, in + AT_STEP, 8);
    memcpy(out->what, in + AT_WHAT, DTRAIN_HB_WHAT_MAX);
    memcpy(out->node, in + AT_NODE, DTRAIN_HB_NAME_MAX);
    memcpy(out->gpu, in + AT_GPU, DTRAIN_HB_NAME_MAX);
    out->what[DTRAIN_HB_WHAT_MAX - 1] = out->node[DTRAIN_HB_NAME_MAX - 1] = out->gpu[DTRAIN_HB_NAME_MAX - 1] = '\0';
    return out->rank >= 0 ? 0 : -1;
}
