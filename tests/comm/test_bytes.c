/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What each member sends, counted by the communicator (payload bytes,
 * headers and padding not counted), against what the ring algorithms
 * promise: all-reduce 2(n-1)/n of the buffer, reduce-scatter and
 * all-gather (n-1)/n of the whole, broadcast the buffer once along the
 * chain (the last member sends nothing), and what send/recv move.  Counts
 * divisible by n, also over several slices, n = 2..8, shared memory and
 * TCP; received bytes equal sent bytes around the ring. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_comm.h"
#include "harness.h"
#include "comm/cpu/ring.h"
#include "tap.h"

enum part { P_ALLREDUCE, P_REDUCE_SCATTER, P_ALL_GATHER, P_BROADCAST, P_SENDRECV, P_CALLS, P_PARTS };
static const char *const part_text[P_PARTS] = {
    "all-reduce sends and receives exactly 2(n-1)/n * 4 * count bytes per member",
    "reduce-scatter sends and receives exactly (n-1) * 4 * count bytes per member (count per member)",
    "all-gather sends and receives exactly (n-1) * 4 * count bytes per member",
    "broadcast: every member but the chain's last sends the buffer once, every member but the root receives it",
    "send/recv and sendrecv count their bytes (odd sizes: padding not counted)",
    "the call counter counts completed calls",
};

static int child(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    const enum dtrain_comm_transport *t = arg;
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX];
    dtrain_comm *c = NULL;
    int failed = 0;
    (void)ngroups;

    harness_options(&o, rank, n, 1, *t, 20000, host);
    if (harness_init(&groups[0], &o, &c) != 0)
        return (1 << P_PARTS) - 1;
    const size_t counts[] = {(size_t)n, (size_t)n * 1000, (size_t)n * (RING_CHUNK_FLOATS * 2 + 7)};
    size_t most = counts[2] * (size_t)n;
    float *a = calloc(most, sizeof *a), *b = calloc(most, sizeof *b);
    struct dtrain_comm_stats st;
    dtrain_comm_get_stats(c, &st);
    uint64_t calls = st.calls;
    for (size_t i = 0; i < 3 && a != NULL && b != NULL; i++) {
        const uint64_t count = counts[i], f = sizeof(float);
        int rc = dtrain_comm_allreduce(c, a, count, DTRAIN_REDUCE_SUM);
        uint64_t ar = 2 * (uint64_t)(n - 1) * count / (uint64_t)n * f;
        if (rc != 0 || harness_check_bytes(rank, &st, c, ar, ar, "allreduce"))
            failed |= 1 << P_ALLREDUCE;
        rc = dtrain_comm_reduce_scatter(c, a, b, count, DTRAIN_REDUCE_AVG);
        if (rc != 0 || harness_check_bytes(rank, &st, c, (uint64_t)(n - 1) * count * f, (uint64_t)(n - 1) * count * f,
                             "reduce_scatter"))
            failed |= 1 << P_REDUCE_SCATTER;
        rc = dtrain_comm_all_gather(c, a, b, count);
        if (rc != 0 ||
            harness_check_bytes(rank, &st, c, (uint64_t)(n - 1) * count * f, (uint64_t)(n - 1) * count * f, "all_gather"))
            failed |= 1 << P_ALL_GATHER;
        int root = (int)(i % (size_t)n);
        size_t bytes = count * f + 3;
        rc = dtrain_comm_broadcast(c, a, bytes, root);
        int last = (root + n - 1) % n;
        if (rc != 0 || harness_check_bytes(rank, &st, c, rank == last ? 0 : bytes, rank == root ? 0 : bytes, "broadcast"))
            failed |= 1 << P_BROADCAST;
        /* a shift by 1 with sendrecv, then rank 0 sends to rank n-1 alone */
        rc = dtrain_comm_sendrecv(c, a, bytes, (rank + 1) % n, b, bytes, (rank + n - 1) % n);
        if (rc == 0 && rank == 0)
            rc = dtrain_comm_send(c, a, bytes + 2, n - 1);
        if (rc == 0 && rank == n - 1)
            rc = dtrain_comm_recv(c, b, bytes + 2, 0);
        uint64_t extra_s = rank == 0 ? bytes + 2 : 0, extra_r = rank == n - 1 ? bytes + 2 : 0;
        if (rc != 0 || harness_check_bytes(rank, &st, c, bytes + extra_s, bytes + extra_r, "sendrecv/send/recv"))
            failed |= 1 << P_SENDRECV;
        calls += 5 + (rank == 0 || rank == n - 1 ? 1 : 0);
    }
    if (a == NULL || b == NULL || st.calls != calls) {
        harness_diag(rank, "calls %llu, want %llu", (unsigned long long)st.calls, (unsigned long long)calls);
        failed |= 1 << P_CALLS;
    }
    free(a);
    free(b);
    dtrain_comm_destroy(c);
    return failed;
}

int main(void)
{
    const struct { enum dtrain_comm_transport t; const char *name; } runs[] = {
        {DTRAIN_COMM_TRANSPORT_AUTO, "shared memory"}, {DTRAIN_COMM_TRANSPORT_TCP, "tcp"}};
    for (size_t k = 0; k < 2; k++) {
        for (int n = 2; n <= 8; n += k == 0 ? 1 : 3) {
            struct harness_result res;
            enum dtrain_comm_transport t = runs[k].t;
            int rc = harness_run(n, 1, child, &t, 60, NULL, &res);
            for (int p = 0; p < P_PARTS; p++)
                ok(rc == 0 && !harness_part_failed(&res, n, p), "n=%d %s: %s", n, runs[k].name, part_text[p]);
        }
    }
    return tap_done();
}
