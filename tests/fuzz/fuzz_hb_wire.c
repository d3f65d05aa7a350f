/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: a heartbeat datagram (runtime/ft/dtrain_hb_wire.h), what
 * anyone may send a rank's heartbeat socket: the input as it comes (any
 * length, almost never a valid MAC), then the same bytes sealed with the
 * key so that the fields behind the MAC are parsed too; whatever decodes
 * must survive a round trip unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_sha256.h"
#include "ft/dtrain_hb_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned char key[DTRAIN_HB_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct dtrain_hb_beat beat, again;
    (void)dtrain_hb_wire_decode(key, data, size, &beat);

    unsigned char sealed[DTRAIN_HB_WIRE_LEN] = {0}, full[DTRAIN_SHA256_LEN], out[DTRAIN_HB_WIRE_LEN];
    const size_t body = DTRAIN_HB_WIRE_LEN - DTRAIN_HB_MAC_LEN;
    memcpy(sealed, data, size < body ? size : body);
    dtrain_hmac_sha256(key, sizeof key, sealed, body, full);
    memcpy(sealed + body, full, DTRAIN_HB_MAC_LEN);
    if (dtrain_hb_wire_decode(key, sealed, sizeof sealed, &beat) == 0) {
        if (beat.rank < 0 || strlen(beat.what) >= sizeof beat.what || strlen(beat.node) >= sizeof beat.node ||
            strlen(beat.gpu) >= sizeof beat.gpu)
            abort();
        dtrain_hb_wire_encode(key, &beat, out);
        if (dtrain_hb_wire_decode(key, out, sizeof out, &again) != 0 || again.rank != beat.rank ||
            again.flags != beat.flags || again.seq != beat.seq || again.progress != beat.progress ||
            again.step != beat.step || strcmp(again.what, beat.what) != 0 || strcmp(again.node, beat.node) != 0 ||
            strcmp(again.gpu, beat.gpu) != 0)
            abort();
        out[3] ^= 1; /* one bit changed: the MAC refuses it */
        if (dtrain_hb_wire_decode(key, out, sizeof out, &again) == 0)
            abort();
    }
    return 0;
}
