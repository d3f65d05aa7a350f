/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Every collective of the cpu backend against a serial reference: counts
 * 0, 1, 7, 1001 and several slices' worth, n = 1..8 processes, over shared
 * memory, over TCP, and mixed (fake hosts: shared memory inside a "host",
 * TCP between).  Values are small integers, so sums are exact whatever the
 * order and results are compared bit for bit; averages divide the exact sum
 * once, as the reference does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_comm.h"
#include "comm_cause.h"
#include "harness.h"
#include "comm/cpu/ring.h"
#include "tap.h"

/* Each failing part sets one bit of the child's exit code. */
enum part { P_INIT, P_ALLREDUCE, P_REDUCE_SCATTER, P_ALL_GATHER, P_BROADCAST, P_SENDRECV, P_BARRIER, P_PARTS };
static const char *const part_text[P_PARTS] = {
    "init, and the ring links use the transport asked for",
    "allreduce sum and average (in place) equal the serial reference",
    "reduce_scatter sum and average (apart and in place) equal the serial reference",
    "all_gather (apart and in place) equals the serial reference",
    "broadcast from every root, odd byte counts, arrives whole",
    "sendrecv for every shift, send/recv between neighbours and members further apart",
    "barrier",
};

struct run {
    int hosts;                            /* fake hosts; 0: all on one */
    enum dtrain_comm_transport transport;
};

static float value(int rank, size_t i)
{
    return (float)((long)((i * 7 + (size_t)rank * 13) % 29) - 14);
}

static size_t big_count(int n)
{
    return (size_t)n * RING_CHUNK_FLOATS * 2 + 13; /* several slices, uneven segments */
}

/* A call that failed: say so; 1. */
static int call_failed(int rank, const char *what, size_t count, int rc, const dtrain_comm *c)
{
    harness_diag(rank, "%s(%zu): %s: %s", what, count, dtrain_comm_cause_name(comm_cause_of(c, rc)),
                 dtrain_comm_error_message(c));
    return 1;
}

static int check_allreduce(dtrain_comm *c, int rank, int n, size_t count)
{
    float *buf = malloc((count + 1) * sizeof *buf);
    int bad = buf == NULL;
    for (int avg = 0; avg < 2 && !bad; avg++) {
        for (size_t i = 0; i < count; i++)
            buf[i] = value(rank, i);
        int rc = dtrain_comm_allreduce(c, buf, count, avg ? DTRAIN_REDUCE_AVG : DTRAIN_REDUCE_SUM);
        if (rc != 0) {
            bad = call_failed(rank, "allreduce", count, rc, c);
            break;
        }
        for (size_t i = 0; i < count && !bad; i++) {
            float sum = 0;
            for (int r = 0; r < n; r++)
                sum += value(r, i);
            float want = avg ? sum / (float)n : sum;
            if (buf[i] != want) {
                harness_diag(rank, "allreduce(%zu, %s)[%zu] = %g, want %g", count, avg ? "avg" : "sum", i,
                             (double)buf[i], (double)want);
                bad = 1;
            }
        }
    }
    free(buf);
    return bad;
}

static int check_reduce_scatter(dtrain_comm *c, int rank, int n, size_t count)
{
    float *in = malloc((count * (size_t)n + 1) * sizeof *in), *out = malloc((count + 1) * sizeof *out);
    int bad = in == NULL || out == NULL;
    for (int mode = 0; mode < 3 && !bad; mode++) { /* sum apart, average apart, sum in place */
        for (size_t i = 0; i < count * (size_t)n; i++)
            in[i] = value(rank, i);
        float *dst = mode == 2 ? in + (size_t)rank * count : out;
        int rc = dtrain_comm_reduce_scatter(c, in, dst, count, mode == 1 ? DTRAIN_REDUCE_AVG : DTRAIN_REDUCE_SUM);
        if (rc != 0) {
            bad = call_failed(rank, "reduce_scatter", count, rc, c);
            break;
        }
        for (size_t i = 0; i < count && !bad; i++) {
            float sum = 0;
            for (int r = 0; r < n; r++)
                sum += value(r, (size_t)rank * count + i);
            float want = mode == 1 ? sum / (float)n : sum;
            if (dst[i] != want) {
                harness_diag(rank, "reduce_scatter(%zu, mode %d)[%zu] = %g, want %g", count, mode, i,
                             (double)dst[i], (double)want);
                bad = 1;
            }
        }
    }
    free(in);
    free(out);
    return bad;
}

static int check_all_gather(dtrain_comm *c, int rank, int n, size_t count)
{
    float *in = malloc((count + 1) * sizeof *in), *out = malloc((count * (size_t)n + 1) * sizeof *out);
    int bad = in == NULL || out == NULL;
    for (int in_place = 0; in_place < 2 && !bad; in_place++) {
        memset(out, 0xff, count * (size_t)n * sizeof *out);
        float *src = in_place ? out + (size_t)rank * count : in;
        for (size_t i = 0; i < count; i++)
            src[i] = value(rank, i);
        int rc = dtrain_comm_all_gather(c, src, out, count);
        if (rc != 0) {
            bad = call_failed(rank, "all_gather", count, rc, c);
            break;
        }
        for (size_t j = 0; j < count * (size_t)n && !bad; j++) {
            float want = value((int)(j / count), j % count);
            if (out[j] != want) {
                harness_diag(rank, "all_gather(%zu)[%zu] = %g, want %g", count, j, (double)out[j], (double)want);
                bad = 1;
            }
        }
    }
    free(in);
    free(out);
    return bad;
}

static int check_broadcast(dtrain_comm *c, int rank, int n, size_t count)
{
    size_t bytes = count * sizeof(float) + count % 3; /* not always whole floats */
    unsigned char *buf = malloc(bytes + 1);
    int bad = buf == NULL;
    for (int root = 0; root < n && !bad; root++) {
        for (size_t i = 0; i < bytes; i++)
            buf[i] = rank == root ? (unsigned char)(i * 31 + (size_t)root) : 0xee;
        int rc = dtrain_comm_broadcast(c, buf, bytes, root);
        if (rc != 0) {
            bad = call_failed(rank, "broadcast from each root, bytes", bytes, rc, c);
            break;
        }
        for (size_t i = 0; i < bytes && !bad; i++)
            if (buf[i] != (unsigned char)(i * 31 + (size_t)root)) {
                harness_diag(rank, "broadcast(%zu bytes, root %d)[%zu] is wrong", bytes, root, i);
                bad = 1;
            }
    }
    free(buf);
    return bad;
}

static void fill(unsigned char *buf, size_t bytes, int from, int tag)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (unsigned char)(i + (size_t)from * 5 + (size_t)tag);
}

static int arrived(int rank, const unsigned char *buf, size_t bytes, int from, int tag, const char *what)
{
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != (unsigned char)(i + (size_t)from * 5 + (size_t)tag)) {
            harness_diag(rank, "%s: %zu bytes from rank %d: byte %zu is wrong", what, bytes, from, i);
            return 0;
        }
    return 1;
}

/* sendrecv for every shift k (to rank+k, from rank-k: cycles that plain
 * send/recv would deadlock on with large messages); then send/recv in
 * pairs: (j, j+n/2), members further apart than the ring's neighbours, and
 * (2j, 2j+1), neighbours; the lower one sends first. */
static int check_sendrecv(dtrain_comm *c, int rank, int n, size_t bytes)
{
    unsigned char *out = malloc(bytes + 1), *in = malloc(bytes + 1);
    int bad = out == NULL || in == NULL, rc = 0;
    for (int k = 1; k < n && !bad; k++) {
        int to = (rank + k) % n, from = (rank - k + n) % n;
        fill(out, bytes, rank, k);
        memset(in, 0, bytes);
        rc = dtrain_comm_sendrecv(c, out, bytes, to, in, bytes, from);
        bad = rc != 0 || !arrived(rank, in, bytes, from, k, "sendrecv");
    }
    const int half = n / 2;
    for (int pairing = 0; pairing < 2 && !bad && n > 1; pairing++) {
        int partner = pairing == 0 ? (rank < half ? rank + half : rank - half) : rank ^ 1;
        if (partner >= n || (pairing == 0 && rank >= 2 * half))
            continue; /* odd n: the last member sits this one out */
        fill(out, bytes, rank, 100 + pairing);
        memset(in, 0, bytes);
        if (rank < partner) {
            rc = dtrain_comm_send(c, out, bytes, partner);
            rc = rc != 0 ? rc : dtrain_comm_recv(c, in, bytes, partner);
        } else {
            rc = dtrain_comm_recv(c, in, bytes, partner);
            rc = rc != 0 ? rc : dtrain_comm_send(c, out, bytes, partner);
        }
        bad = rc != 0 || !arrived(rank, in, bytes, partner, 100 + pairing, "send/recv");
    }
    if (rc != 0)
        harness_diag(rank, "sendrecv/send/recv of %zu bytes: %s: %s", bytes,
                     dtrain_comm_cause_name(dtrain_comm_cause(c)), dtrain_comm_error_message(c));
    free(out);
    free(in);
    return bad;
}

static int child(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    const struct run *run = arg;
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX];
    dtrain_comm *c = NULL;
    int failed = 0;
    (void)ngroups;

    harness_options(&o, rank, n, run->hosts, run->transport, 20000, host);
    if (harness_init(&groups[0], &o, &c) != 0)
        return (1 << P_PARTS) - 1;
    /* After a barrier, before any point-to-point link: the ring's two. */
    struct dtrain_comm_stats st;
    int rc = dtrain_comm_barrier(c);
    if (rc != 0)
        harness_diag(rank, "first barrier: %s", dtrain_comm_error_message(c));
    dtrain_comm_get_stats(c, &st);
    int links = n > 1 ? 2 : 0;
    int want_shm = run->transport == DTRAIN_COMM_TRANSPORT_TCP ? 0 : run->hosts <= 1 ? links : -1;
    if (rc != 0 || st.shm_links + st.tcp_links != links || (want_shm >= 0 && st.shm_links != want_shm)) {
        harness_diag(rank, "ring links: %d shm + %d tcp", st.shm_links, st.tcp_links);
        failed |= 1 << P_INIT;
    }
    const size_t counts[] = {0, 1, 7, 1001, big_count(n)};
    const size_t rs_counts[] = {0, 1, 7, 1001, RING_CHUNK_FLOATS * 2 + 13};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        if (check_allreduce(c, rank, n, counts[i]))
            failed |= 1 << P_ALLREDUCE;
        if (check_reduce_scatter(c, rank, n, rs_counts[i]))
            failed |= 1 << P_REDUCE_SCATTER;
        if (check_all_gather(c, rank, n, rs_counts[i]))
            failed |= 1 << P_ALL_GATHER;
        if (check_broadcast(c, rank, n, i < 4 ? counts[i] : 300000))
            failed |= 1 << P_BROADCAST;
        if (check_sendrecv(c, rank, n, i < 4 ? counts[i] * 4 + 3 : 3000001))
            failed |= 1 << P_SENDRECV;
        if (dtrain_comm_barrier(c) != 0) {
            harness_diag(rank, "barrier: %s", dtrain_comm_error_message(c));
            failed |= 1 << P_BARRIER;
        }
        if (failed)
            break; /* a broken communicator fails everything after */
    }
    dtrain_comm_destroy(c);
    return failed;
}

static void one_run(int n, const struct run *run, const char *name)
{
    struct harness_result res;
    int rc = harness_run(n, 1, child, (void *)run, 60, NULL, &res);
    for (int p = 0; p < P_PARTS; p++)
        ok(rc == 0 && !harness_part_failed(&res, n, p), "n=%d %s: %s", n, name, part_text[p]);
}

int main(void)
{
    const struct run shm = {.hosts = 1, .transport = DTRAIN_COMM_TRANSPORT_AUTO};
    const struct run tcp = {.hosts = 1, .transport = DTRAIN_COMM_TRANSPORT_TCP};
    const struct run two_hosts = {.hosts = 2, .transport = DTRAIN_COMM_TRANSPORT_AUTO};
    const struct run three_hosts = {.hosts = 3, .transport = DTRAIN_COMM_TRANSPORT_AUTO};
    for (int n = 1; n <= 8; n++)
        one_run(n, &shm, "shared memory");
    for (int n = 1; n <= 8; n++)
        one_run(n, &tcp, "tcp");
    one_run(4, &two_hosts, "2 fake hosts (shm inside, tcp between)");
    one_run(5, &three_hosts, "3 fake hosts");
    return tap_done();
}
