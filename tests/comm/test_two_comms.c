/* SPDX-License-Identifier: GPL-2.0-or-later */
/* No global state: two communicators over the same 4 processes, one over
 * shared memory and one over TCP, used interleaved, never mix their data,
 * their sequence numbers or their statistics, and destroying one leaves the
 * other working.  (Every member builds them in the same order, as
 * dtrain_comm_init_all does: init blocks until the group is complete.) */
#include <stdlib.h>
#include <string.h>

#include "dtrain_comm.h"
#include "harness.h"
#include "tap.h"

enum part { P_INIT, P_DATA, P_STATS, P_ALONE, P_PARTS };
static const char *const part_text[P_PARTS] = {
    "two communicators over the same 4 processes come up (one over shared memory, one over TCP)",
    "interleaved all-reduce, broadcast, sendrecv, reduce-scatter and all-gather on both give each its own results",
    "each communicator counts only its own bytes",
    "after one is destroyed the other still works",
};

static float v(int comm, int rank, size_t i)
{
    return (float)((long)((i + (size_t)rank * 3 + (size_t)comm * 7) % 17) - 8);
}

static int child(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    struct dtrain_comm_options o[2];
    char host[2][DTRAIN_COMM_HOST_ID_MAX];
    dtrain_comm *c[2] = {NULL, NULL};
    int failed = 0;
    (void)ngroups;
    (void)arg;

    harness_options(&o[0], rank, n, 1, DTRAIN_COMM_TRANSPORT_AUTO, 20000, host[0]);
    harness_options(&o[1], rank, n, 1, DTRAIN_COMM_TRANSPORT_TCP, 20000, host[1]);
    if (harness_init(&groups[0], &o[0], &c[0]) != 0 || harness_init(&groups[1], &o[1], &c[1]) != 0) {
        dtrain_comm_destroy(c[0]);
        return (1 << P_PARTS) - 1;
    }
    const size_t count = 300001;
    float *x[2], *y[2];
    for (int k = 0; k < 2; k++) {
        x[k] = malloc(count * (size_t)n * sizeof(float));
        y[k] = malloc(count * (size_t)n * sizeof(float));
    }
    for (int round = 0; round < 3 && x[0] && x[1] && y[0] && y[1]; round++) {
        int rc = 0;
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < count; i++)
                x[k][i] = v(k, rank, i);
        /* all-reduce on both, broadcast on 0 between them, then check */
        rc |= dtrain_comm_allreduce(c[0], x[0], count, DTRAIN_REDUCE_SUM);
        float token = (float)(rank == 2 ? 42 + round : -1);
        rc |= dtrain_comm_broadcast(c[1], &token, sizeof token, 2);
        rc |= dtrain_comm_allreduce(c[1], x[1], count, DTRAIN_REDUCE_AVG);
        for (size_t i = 0; i < count && rc == 0; i++) {
            float s0 = 0, s1 = 0;
            for (int r = 0; r < n; r++)
                s0 += v(0, r, i), s1 += v(1, r, i);
            if (x[0][i] != s0 || x[1][i] != s1 / (float)n) {
                harness_diag(rank, "round %d: element %zu: %g %g, want %g %g", round, i, (double)x[0][i],
                             (double)x[1][i], (double)s0, (double)(s1 / (float)n));
                failed |= 1 << P_DATA;
                break;
            }
        }
        if (token != (float)(42 + round))
            failed |= 1 << P_DATA;
        /* sendrecv in opposite directions on the two */
        float out[2] = {(float)rank, (float)(100 + rank)}, in[2] = {-1, -1};
        rc |= dtrain_comm_sendrecv(c[0], &out[0], 4, (rank + 1) % n, &in[0], 4, (rank + n - 1) % n);
        rc |= dtrain_comm_sendrecv(c[1], &out[1], 4, (rank + n - 1) % n, &in[1], 4, (rank + 1) % n);
        if (in[0] != (float)((rank + n - 1) % n) || in[1] != (float)(100 + (rank + 1) % n))
            failed |= 1 << P_DATA;
        /* reduce-scatter on 1 inside an all-gather pair on 0 */
        for (size_t i = 0; i < count; i++)
            x[0][i] = v(0, rank, i);
        for (size_t i = 0; i < count * (size_t)n; i++)
            x[1][i] = v(1, rank, i);
        rc |= dtrain_comm_all_gather(c[0], x[0], y[0], count);
        rc |= dtrain_comm_reduce_scatter(c[1], x[1], y[1], count, DTRAIN_REDUCE_SUM);
        for (size_t i = 0; i < count * (size_t)n && rc == 0; i++)
            if (y[0][i] != v(0, (int)(i / count), i % count)) {
                failed |= 1 << P_DATA;
                break;
            }
        for (size_t i = 0; i < count && rc == 0; i++) {
            float s = 0;
            for (int r = 0; r < n; r++)
                s += v(1, r, (size_t)rank * count + i);
            if (y[1][i] != s) {
                failed |= 1 << P_DATA;
                break;
            }
        }
        if (rc != 0) {
            harness_diag(rank, "round %d: %s | %s", round, dtrain_comm_error_message(c[0]),
                         dtrain_comm_error_message(c[1]));
            failed |= 1 << P_DATA;
            break;
        }
    }
    /* bytes: comm 0 did 3 x (allreduce + sendrecv + all_gather), comm 1 3 x (broadcast + allreduce + sendrecv
     * + reduce_scatter) */
    struct dtrain_comm_stats s0, s1;
    dtrain_comm_get_stats(c[0], &s0);
    dtrain_comm_get_stats(c[1], &s1);
    const unsigned long long f = sizeof(float), m = (unsigned long long)(n - 1);
    unsigned long long want0 = 3 * (4 + m * count * f), bcast = rank == (2 + n - 1) % n ? 0 : 4;
    unsigned long long want1 = 3 * (bcast + 4 + m * count * f);
    /* The all-reduce share depends on how 300001 floats split into segments:
     * equal on both communicators, whatever the rest was.  Comm 1's reverse
     * sendrecv opened two point-to-point TCP links beside its ring's two. */
    unsigned long long ar0 = s0.bytes_sent - want0, ar1 = s1.bytes_sent - want1;
    if (ar0 != ar1 || ar0 == 0 || s0.shm_links != 2 || s0.tcp_links != 0 || s1.shm_links != 0 || s1.tcp_links != 4) {
        harness_diag(rank, "bytes sent %llu and %llu (all-reduce shares %llu, %llu); links %d+%d, %d+%d",
                     (unsigned long long)s0.bytes_sent, (unsigned long long)s1.bytes_sent, ar0, ar1, s0.shm_links,
                     s0.tcp_links, s1.shm_links, s1.tcp_links);
        failed |= 1 << P_STATS;
    }
    for (int k = 0; k < 2; k++) {
        free(x[k]);
        free(y[k]);
    }
    /* comm 0 goes; comm 1 goes on */
    dtrain_comm_destroy(c[0]);
    float one = 1;
    if (dtrain_comm_allreduce(c[1], &one, 1, DTRAIN_REDUCE_SUM) != 0 || one != (float)n ||
        dtrain_comm_barrier(c[1]) != 0)
        failed |= 1 << P_ALONE;
    dtrain_comm_destroy(c[1]);
    return failed;
}

int main(void)
{
    struct harness_result res;
    int rc = harness_run(4, 2, child, NULL, 60, NULL, &res);
    for (int p = 0; p < P_PARTS; p++)
        ok(rc == 0 && !harness_part_failed(&res, 4, p), "%s", part_text[p]);
    return tap_done();
}
