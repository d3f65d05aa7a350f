/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu bootstrap's bytes and its address lookups (issue 19: the leader
 * sends each member its neighbours, not the whole table).
 *
 * - Bytes: every member but the leader sends the same bytes to set up the
 *   communicator at n = 4, 8 and 16 (stats.setup_bytes_sent: its BOOT and
 *   RING hellos, the ring-link reply and ack, its READY byte; a hello sent
 *   again after a flood counted apart), and the leader the same bytes per
 *   member: what one member costs does not grow with the group.
 * - Lookups: after the bootstrap, every member sends to and receives from
 *   a member that is not its ring neighbour (rank + n/2), asking the leader
 *   for the address (8 bytes out, besides the P2P hello); the leader needs
 *   no lookup; a second exchange opens nothing and asks nothing.
 * - The leader gone: once rank 0 destroyed its communicator, a member's
 *   lookup fails with EPEER in one line naming the leader. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_comm.h"
#include "dtrain_parse.h"
#include "comm_cause.h"
#include "harness.h"
#include "tap.h"
#include "comm/cpu/wire.h"

static uint64_t setup_bytes(dtrain_comm *c, uint64_t *rejoined)
{
    struct dtrain_comm_stats s;
    dtrain_comm_get_stats(c, &s);
    if (rejoined != NULL)
        *rejoined = s.rejoined;
    return s.setup_bytes_sent;
}

enum part { P_MEMBER_BYTES, P_LEADER_BYTES, P_P2P_DATA, P_LOOKUP_BYTES, P_CACHED, P_PARTS };

static int bytes_child(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX];
    dtrain_comm *c = NULL;
    int failed = 0;
    (void)ngroups;
    (void)arg;
    harness_options(&o, rank, n, 2, DTRAIN_COMM_TRANSPORT_AUTO, 20000, host);
    if (harness_init(&groups[0], &o, &c) != 0)
        return (1 << P_PARTS) - 1;
    uint64_t rejoined, got = setup_bytes(c, &rejoined);
    /* A ring link costs its sender the RING hello and its receiver the
     * reply; the ack goes back from the sender. */
    const uint64_t ring = WIRE_HELLO_LEN + WIRE_REPLY_LEN + WIRE_ACK_LEN;
    if (rank != 0) {
        uint64_t want = WIRE_HELLO_LEN * (1 + rejoined) + 1 + ring; /* BOOT hello(s), READY */
        if (got != want) {
            harness_diag(rank, "set-up bytes %llu, want %llu at any n", (unsigned long long)got,
                         (unsigned long long)want);
            failed |= 1 << P_MEMBER_BYTES;
        }
    } else {
        /* per member: JOINED, its neighbours, DONE; and the answers its
         * thread may have given already to members done sooner (one per
         * member in this test) */
        uint64_t want = (uint64_t)(n - 1) * (1 + WIRE_TABLE_LEN + 1) + ring;
        uint64_t answers = got >= want ? got - want : 0;
        if (got < want || answers % WIRE_ANSWER_LEN != 0 || answers > (uint64_t)(n - 1) * WIRE_ANSWER_LEN) {
            harness_diag(rank, "leader's set-up bytes %llu, want %llu = %d x %d + %llu (+ answers of %d bytes)",
                         (unsigned long long)got, (unsigned long long)want, n - 1, 2 + WIRE_TABLE_LEN,
                         (unsigned long long)ring, WIRE_ANSWER_LEN);
            failed |= 1 << P_LEADER_BYTES;
        }
    }

    /* Everyone to rank + n/2 (no ring neighbour at n >= 4), twice. */
    const int to = (rank + n / 2) % n, from = (rank + n - n / 2) % n;
    for (int round = 0; round < 2; round++) {
        uint64_t before = setup_bytes(c, NULL);
        int out[4] = {rank, round, n, 77}, in[4] = {0};
        int rc = comm_cause_of(c, dtrain_comm_sendrecv(c, out, sizeof out, to, in, sizeof in, from));
        if (rc != DTRAIN_COMM_OK || in[0] != from || in[1] != round || in[2] != n || in[3] != 77) {
            harness_diag(rank, "round %d: sendrecv to %d from %d: %s: %s", round, to, from,
                         dtrain_comm_cause_name(rc), dtrain_comm_error_message(c));
            failed |= 1 << P_P2P_DATA;
            break;
        }
        uint64_t spent = setup_bytes(c, NULL) - before;
        /* the leader answers lookups from its own thread meanwhile: its
         * count is not looked at */
        uint64_t want = round > 0 ? 0 : WIRE_HELLO_LEN + (rank != 0 ? WIRE_LOOKUP_LEN : 0);
        if (rank != 0 && spent != want) {
            harness_diag(rank, "round %d: set-up bytes %llu for the link to %d, want %llu", round,
                         (unsigned long long)spent, to, (unsigned long long)want);
            failed |= 1 << (round == 0 ? P_LOOKUP_BYTES : P_CACHED);
        }
    }
    if (dtrain_comm_barrier(c) != DTRAIN_OK)
        failed |= 1 << P_P2P_DATA;
    dtrain_comm_destroy(c);
    return failed;
}

static const char *const part_text[P_PARTS] = {
    "every member but the leader sends the same set-up bytes (2 hellos, reply, ack, READY)",
    "the leader sends JOINED, 3 entries and DONE per member: the same bytes per member",
    "a member reaches a member that is not its ring neighbour point-to-point after the bootstrap",
    "that link costs the P2P hello and one 8-byte lookup (none at the leader)",
    "a second exchange on that link asks nothing and opens nothing",
};

/* Rank 0 destroys its communicator after a barrier; then rank 1 sends to
 * rank 3, whose address it never had. */
static int gone_child(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX];
    dtrain_comm *c = NULL;
    (void)ngroups;
    (void)arg;
    harness_options(&o, rank, n, 2, DTRAIN_COMM_TRANSPORT_AUTO, 20000, host);
    if (harness_init(&groups[0], &o, &c) != 0)
        return 1;
    if (dtrain_comm_barrier(c) != DTRAIN_OK) {
        dtrain_comm_destroy(c);
        return 2;
    }
    int failed = 0;
    char gone[64];
    dtrain_snprintf(gone, sizeof gone, "/tmp/dtrain-test-lookup-%ld", (long)getppid());
    if (rank == 0) {
        dtrain_comm_destroy(c);
        FILE *f = fopen(gone, "w"); /* the leader's communicator is gone: say so */
        return f != NULL && fclose(f) == 0 ? 0 : 4;
    }
    if (rank == 1) {
        int x = 5;
        while (access(gone, F_OK) != 0) /* the harness's bound ends a wait that never ends */
            usleep(10000);
        unlink(gone);
        int rc = comm_cause_of(c, dtrain_comm_send(c, &x, sizeof x, 3));
        const char *msg = dtrain_comm_error_message(c);
        harness_diag(rank, "send to rank 3 after the leader left: %s: %s", dtrain_comm_cause_name(rc), msg);
        failed = rc != DTRAIN_COMM_EPEER || strstr(msg, "rank 0") == NULL || strchr(msg, '\n') != NULL ? 3 : 0;
    }
    dtrain_comm_destroy(c);
    return failed;
}

int main(void)
{
    for (int n = 4; n <= 16; n *= 2) {
        struct harness_result res;
        int rc = harness_run(n, 1, bytes_child, NULL, 60, NULL, &res);
        for (int p = 0; p < P_PARTS; p++)
            ok(rc == 0 && !harness_part_failed(&res, n, p), "n=%d: %s", n, part_text[p]);
    }
    struct harness_result res;
    int rc = harness_run(4, 1, gone_child, NULL, 60, NULL, &res);
    ok(rc == 0 && res.failed == 0,
       "n=4: after the leader destroyed its communicator, a lookup fails with EPEER in one line naming rank 0");
    return tap_done();
}
