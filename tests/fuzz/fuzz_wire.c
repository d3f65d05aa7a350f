/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: what a stranger may send the CPU backend's listening socket
 * and links: hello (whole and as a prefix), table head and entries, the
 * address lookups the leader's directory answers (and their answers),
 * reply, ack and message headers. */
#include <stdint.h>
#include <string.h>

#include "comm/cpu/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char buf[256] = {0};
    memcpy(buf, data, size < sizeof buf ? size : sizeof buf);
    struct wire_hello h;
    (void)wire_hello_prefix_check(buf, size < WIRE_HELLO_LEN ? size : WIRE_HELLO_LEN);
    if (wire_hello_decode(buf, &h) == 0) {
        unsigned char again[WIRE_HELLO_LEN];
        wire_hello_encode(&h, again);
    }
    uint32_t a, b, local, rank;
    (void)wire_table_head_decode(buf, &a, &b, &local);
    struct wire_peer peer;
    wire_peer_decode(buf, &peer);
    (void)wire_lookup_decode(buf, &rank);
    wire_answer_decode(buf, &rank, &peer);
    int shm, mapped;
    char name[WIRE_SHM_NAME_MAX];
    (void)wire_reply_decode(buf, &shm, name);
    (void)wire_ack_decode(buf, &mapped);
    struct wire_header wh;
    (void)wire_header_decode(buf, &wh);
    return 0;
}
