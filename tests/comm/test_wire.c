/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the cpu backend's pieces that need no second process: the
 * messages of wire.h (round trips, and refusals of a wrong magic, version,
 * kind or an unterminated string), the id parser against the launcher's own
 * (same verdict on every id, same address, port and secret), the constant-
 * time secret comparison, result names, and dtrain_comm_bootstrap_from_env
 * against the variables dtrain-launch's own hand-off code exports for a
 * real 2 x 2 x 2 grid. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "comm/cpu/cpu_comm.h"
#include "dtrain_comm.h"
#include "groups.h"
#include "handoff.h"
#include "comm/cpu/net.h"
#include "tap.h"
#include "comm/cpu/wire.h"

static void test_hello(void)
{
    unsigned char buf[WIRE_HELLO_LEN];
    struct wire_hello h = {.kind = WIRE_RING, .group_size = 8, .from = 3, .to = 4, .port = 4242, .flags = WIRE_FLAG_SHM,
                           .pid = 1234},
                      back;
    for (int i = 0; i < DTRAIN_BOOTSTRAP_SECRET_LEN; i++)
        h.secret[i] = (unsigned char)(i * 17 + 1);
    inet_pton(AF_INET, "10.1.2.3", &h.addr);
    strcpy(h.host_id, "node7");
    wire_hello_encode(&h, buf);
    ok(wire_hello_decode(buf, &back) == 0 && back.kind == WIRE_RING && back.group_size == 8 && back.from == 3 &&
       back.to == 4 && back.port == 4242 && back.flags == WIRE_FLAG_SHM && back.pid == 1234 &&
       back.addr.s_addr == h.addr.s_addr && strcmp(back.host_id, "node7") == 0 &&
       memcmp(back.secret, h.secret, sizeof h.secret) == 0, "a hello survives encoding and decoding");
    ok(buf[0] == 'D' && buf[1] == 'T' && buf[2] == 'C' && buf[3] == 'M' && buf[28] == 3 && buf[29] == 0,
       "a hello is little-endian with magic DTCM");
    unsigned char bad[WIRE_HELLO_LEN];
    int refused = 0;
    memcpy(bad, buf, sizeof bad), bad[0] ^= 1, refused += wire_hello_decode(bad, &back) == -1;
    memcpy(bad, buf, sizeof bad), bad[4] = 9, refused += wire_hello_decode(bad, &back) == -1;
    memcpy(bad, buf, sizeof bad), bad[6] = 0, refused += wire_hello_decode(bad, &back) == -1;
    memcpy(bad, buf, sizeof bad), bad[6] = 4, refused += wire_hello_decode(bad, &back) == -1;
    memcpy(bad, buf, sizeof bad), memset(bad + 44, 'x', DTRAIN_COMM_HOST_ID_MAX),
        refused += wire_hello_decode(bad, &back) == -1;
    ok(refused == 5, "hellos with a wrong magic, version, kind 0 or 4, or an unterminated host id are refused (%d/5)",
       refused);
}

static void test_messages(void)
{
    unsigned char head[WIRE_TABLE_HEAD_LEN], entry[WIRE_TABLE_ENTRY_LEN], reply[WIRE_REPLY_LEN], ack[WIRE_ACK_LEN];
    unsigned char hb[WIRE_HEADER_LEN];
    uint32_t size = 0, to = 0, local = 0;
    wire_table_head_encode(5, 3, 2, head);
    ok(wire_table_head_decode(head, &size, &to, &local) == 0 && size == 5 && to == 3 && local == 2,
       "a table head round-trips");
    head[1] ^= 1;
    ok(wire_table_head_decode(head, &size, &to, &local) == -1, "a table head with a wrong magic is refused");
    struct wire_peer p = {.port = 65535, .host = 70000}, q;
    inet_pton(AF_INET, "192.168.0.9", &p.addr);
    wire_peer_encode(&p, entry);
    wire_peer_decode(entry, &q);
    ok(q.addr.s_addr == p.addr.s_addr && q.port == 65535 && q.host == 70000, "a table entry round-trips");
    unsigned char lookup[WIRE_LOOKUP_LEN], answer[WIRE_ANSWER_LEN];
    uint32_t rank = 0;
    wire_lookup_encode(99999, lookup);
    ok(wire_lookup_decode(lookup, &rank) == 0 && rank == 99999, "a lookup round-trips");
    lookup[0] ^= 1;
    ok(wire_lookup_decode(lookup, &rank) == -1, "a lookup with a wrong magic is refused");
    wire_answer_encode(7, &p, answer);
    wire_answer_decode(answer, &rank, &q);
    ok(rank == 7 && q.addr.s_addr == p.addr.s_addr && q.port == 65535 && q.host == 70000,
       "a lookup's answer round-trips");

    int shm = -1;
    char name[WIRE_SHM_NAME_MAX];
    wire_reply_encode(1, "/dtrain-comm-1-00ff", reply);
    ok(wire_reply_decode(reply, &shm, name) == 0 && shm == 1 && strcmp(name, "/dtrain-comm-1-00ff") == 0,
       "a shared-memory reply round-trips");
    wire_reply_encode(0, "", reply);
    ok(wire_reply_decode(reply, &shm, name) == 0 && shm == 0, "a TCP reply round-trips");
    int refused = 0;
    wire_reply_encode(1, "no-slash", reply), refused += wire_reply_decode(reply, &shm, name) == -1;
    wire_reply_encode(1, "/x", reply), reply[4] = 2, refused += wire_reply_decode(reply, &shm, name) == -1;
    wire_reply_encode(1, "/x", reply), memset(reply + 8, 'a', WIRE_SHM_NAME_MAX),
        refused += wire_reply_decode(reply, &shm, name) == -1;
    ok(refused == 3, "replies naming no /segment, with mode 2 or an unterminated name are refused (%d/3)", refused);
    int mapped = -1;
    wire_ack_encode(1, ack);
    int one = wire_ack_decode(ack, &mapped) == 0 && mapped == 1;
    wire_ack_encode(0, ack);
    int zero = wire_ack_decode(ack, &mapped) == 0 && mapped == 0;
    ack[3] ^= 0x40;
    ok(one && zero && wire_ack_decode(ack, &mapped) == -1, "acks round-trip; a garbled one is refused");

    struct wire_header h = {.op = WIRE_OP_BROADCAST, .arg = 0, .seq = 77, .root = 5, .count = 1ull << 40}, g;
    wire_header_encode(&h, hb);
    ok(wire_header_decode(hb, &g) == 0 && g.op == h.op && g.seq == 77 && g.root == 5 && g.count == 1ull << 40,
       "a message header round-trips (64-bit count)");
    char text[128];
    ok(strcmp(wire_header_text(&h, text, sizeof text), "broadcast from rank 5 of 1099511627776 bytes (message 77 on "
              "the link)") == 0, "a header reads: %s", text);
    hb[0] = 0;
    ok(wire_header_decode(hb, &g) == -1, "a header with a wrong magic is refused");
}

static void test_ids(void)
{
    static const char *const ids[] = {
        "", "cpu:", "cpu:127.0.0.1", "cpu:127.0.0.1:80", "cpu:127.0.0.1:80:abc",
        "cpu:127.0.0.1:0:00112233445566778899aabbccddeeff", "cpu:127.0.0.1:65536:00112233445566778899aabbccddeeff",
        "cpu:localhost:80:00112233445566778899aabbccddeeff", "cpu:127.0.0.1:80:00112233445566778899aabbccddeefg",
        "cpu:127.0.0.1:80:00112233445566778899aabbccddeeff00", "nccl:00",
        "cpu:127.0.0.1:-80:00112233445566778899aabbccddeeff", "cpu:127.0.0.1: 80:00112233445566778899aabbccddeeff",
        "cpu:1.2.3.4.5:80:00112233445566778899aabbccddeeff", "cpu:10.1.2.3:29500:00112233445566778899aabbccddeeff",
        "cpu:127.0.0.1:65535:ffeeddccbbaa99887766554433221100",
    };
    int agree = 0, good = 0;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        struct dtrain_cpu_id l;
        struct sockaddr_in sin;
        unsigned char secret[DTRAIN_BOOTSTRAP_SECRET_LEN];
        int ours = cpu_id_parse(ids[i], &sin, secret), theirs = dtrain_cpu_id_parse(ids[i], &l);
        char addr[INET_ADDRSTRLEN] = "";
        inet_ntop(AF_INET, &sin.sin_addr, addr, sizeof addr);
        if (ours == theirs &&
            (ours != 0 || (strcmp(addr, l.addr) == 0 && ntohs(sin.sin_port) == l.port &&
                           memcmp(secret, l.secret, sizeof secret) == 0)))
            agree++;
        good += ours == 0;
    }
    ok(agree == (int)(sizeof ids / sizeof ids[0]) && good == 2,
       "the comm layer's id parser agrees with the launcher's on %d of %zu ids (2 well-formed)", agree,
       sizeof ids / sizeof ids[0]);
    unsigned char a[16] = {1, 2, 3}, b[16] = {1, 2, 3};
    int same = net_secret_equal(a, b, 16);
    b[0] ^= 0x80;
    int first = net_secret_equal(a, b, 16);
    b[0] ^= 0x80, b[15] = 1;
    ok(same && !first && !net_secret_equal(a, b, 16), "secrets compare equal only when every byte is");
    ok(strcmp(dtrain_comm_cause_name(DTRAIN_COMM_OK), "OK") == 0 &&
       strcmp(dtrain_comm_cause_name(DTRAIN_COMM_EPEER), "EPEER") == 0 &&
       strcmp(dtrain_comm_cause_name(DTRAIN_COMM_ESYS), "ESYS") == 0 &&
       strcmp(dtrain_comm_cause_name(99), "unknown") == 0 && strcmp(dtrain_comm_cause_name(-1), "unknown") == 0,
       "result codes have names");
}

/* dtrain-launch's hand-off for rank `rank` of a 2 x 2 x 2 grid, read back. */
static void test_env(void)
{
    const struct dtrain_grid grid = {.tp = 2, .pp = 2, .dp = 2};
    struct dtrain_bootstrap bs, back;
    char err[256] = "";
    int same = 1, rounds = 0;
    for (int rank = 0; rank < 8; rank++) {
        memset(&bs, 0, sizeof bs);
        bs.rank = rank;
        bs.world_size = 8;
        bs.tp = bs.pp = bs.dp = 2;
        bs.backend = DTRAIN_COMM_CPU;
        for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
            struct dtrain_comm_group *g = &bs.groups[k];
            dtrain_group_of(&grid, rank, (enum dtrain_group_kind)k, g);
            snprintf(g->id, sizeof g->id, "cpu:127.0.0.1:%d:00112233445566778899aabbccddeeff", 1000 + k);
            /* any descriptor will do: the hand-off only clears its close-on-exec */
            g->listen_fd = g->present && g->my_rank == 0 ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
        }
        bs.tp_rank = rank % 2, bs.dp_rank = rank / 2 % 2, bs.pp_rank = rank / 4;
        setenv("SLURM_NODEID", rank < 4 ? "0" : "1", 1);
        int exported = dtrain_handoff_export(&bs, err, sizeof err) == 0 &&
                       dtrain_comm_bootstrap_from_env(&back, err, sizeof err) == 0;
        for (int k = 0; k < DTRAIN_GROUP_KINDS; k++)
            if (bs.groups[k].listen_fd >= 0)
                close(bs.groups[k].listen_fd);
        if (!exported) {
            diag("rank %d: %s", rank, err);
            same = 0;
            break;
        }
        rounds++;
        same &= back.rank == rank && back.world_size == 8 && back.tp == 2 && back.pp == 2 && back.dp == 2 &&
                back.tp_rank == bs.tp_rank && back.pp_rank == bs.pp_rank && back.dp_rank == bs.dp_rank &&
                back.node == rank / 4 && back.backend == DTRAIN_COMM_CPU;
        for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
            const struct dtrain_comm_group *g = &bs.groups[k], *h = &back.groups[k];
            same &= g->present == h->present;
            if (g->present)
                same &= g->size == h->size && g->first == h->first && g->stride == h->stride &&
                        g->my_rank == h->my_rank && strcmp(g->id, h->id) == 0 && g->listen_fd == h->listen_fd;
        }
    }
    ok(same && rounds == 8, "what dtrain-launch exports for each rank of a 2x2x2 grid reads back the same (groups, "
       "sockets, coordinates, node)");
    setenv("DTRAIN_COMM_TP_SIZE", "two", 1);
    /* DTRAIN_ERR_SYSTEM: cause EINVAL, its only one */
    ok(dtrain_comm_bootstrap_from_env(&back, err, sizeof err) == DTRAIN_ERR_SYSTEM &&
       strstr(err, "DTRAIN_COMM_TP_SIZE") != NULL, "a malformed variable is named (%s)", err);
    unsetenv("DTRAIN_COMM_BACKEND");
    ok(dtrain_comm_bootstrap_from_env(&back, err, sizeof err) == DTRAIN_ERR_SYSTEM &&
       strstr(err, "dtrain-launch") != NULL, "without dtrain-launch's variables: EINVAL with advice (%s)", err);
}

int main(void)
{
    test_hello();
    test_messages();
    test_ids();
    test_env();
    return tap_done();
}
