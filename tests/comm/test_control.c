/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The control plane of the cpu backend (dtrain_comm.h): the all-gather of
 * bytes against a serial reference (0 bytes, odd sizes that pad on the
 * link, payloads that differ per rank, several slices' worth, in place and
 * apart, at an unaligned address), the int64 sum and max (wrapping,
 * extremes), the ordered sum of doubles (the reference's order, the same
 * bits on every rank), the bytes counted, bad arguments, and members that
 * gather different sizes (EMISMATCH, sticky), on 1..4 processes over
 * shared memory, TCP and fake hosts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_comm.h"
#include "comm_cause.h"
#include "harness.h"
#include "comm/cpu/ring.h"
#include "tap.h"

enum part { P_INIT, P_ZERO, P_GATHER, P_LARGE, P_SUM, P_MAX, P_DOUBLES, P_STATS, P_ERRORS, P_MISMATCH, P_PARTS };
static const char *const part_text[P_PARTS] = {
    "init",
    "0 bytes (and NULL buffers with 0 bytes) return 0 at once",
    "all_gather_bytes of 1, 3, 5, 13, 64 bytes (apart, in place, unaligned) equals the serial reference",
    "all_gather_bytes of several slices (odd size) equals the serial reference",
    "sum_int64 equals the serial sum (wrapping modulo 2^64)",
    "max_int64 equals the serial maximum (INT64_MIN, negatives, INT64_MAX)",
    "sum_doubles_ordered adds in rank order from 0.0 and gives every rank the same bits",
    "payload bytes counted: (n-1) x bytes, the link's padding not",
    "bad arguments: EINVAL without breaking the communicator",
    "members gathering different sizes fail with EMISMATCH (or EPEER), sticky",
};

struct run {
    int hosts;
    enum dtrain_comm_transport transport;
};

/* Byte i of rank r's payload of `bytes`: differs per rank, size and place. */
static unsigned char byte_of(int rank, size_t bytes, size_t i)
{
    return (unsigned char)(i * 31 + (size_t)rank * 101 + bytes * 7 + 1);
}

static int failed_call(int rank, const char *what, size_t n, int rc, const dtrain_comm *c)
{
    harness_diag(rank, "%s(%zu): %s: %s", what, n, dtrain_comm_cause_name(comm_cause_of(c, rc)),
                 dtrain_comm_error_message(c));
    return 1;
}

static int check_gather(dtrain_comm *c, int rank, int n, size_t bytes)
{
    unsigned char *mine = malloc(bytes), *buf = malloc(bytes * (size_t)n + 1);
    int bad = mine == NULL || buf == NULL;
    for (int mode = 0; mode < 3 && !bad; mode++) { /* apart, in place, at an odd address */
        unsigned char *out = mode == 2 ? buf + 1 : buf;
        memset(buf, 0xee, bytes * (size_t)n + 1);
        for (size_t i = 0; i < bytes; i++)
            mine[i] = byte_of(rank, bytes, i);
        const void *in = mine;
        if (mode == 1) {
            memcpy(out + (size_t)rank * bytes, mine, bytes);
            in = out + (size_t)rank * bytes;
        }
        int rc = dtrain_comm_all_gather_bytes(c, in, out, bytes);
        if (rc != 0) {
            bad = failed_call(rank, "all_gather_bytes", bytes, rc, c);
            break;
        }
        for (int r = 0; r < n && !bad; r++)
            for (size_t i = 0; i < bytes && !bad; i++)
                if (out[(size_t)r * bytes + i] != byte_of(r, bytes, i)) {
                    harness_diag(rank, "all_gather_bytes(%zu, mode %d): rank %d's byte %zu is %u, want %u", bytes,
                                 mode, r, i, out[(size_t)r * bytes + i], byte_of(r, bytes, i));
                    bad = 1;
                }
    }
    free(mine);
    free(buf);
    return bad;
}

static int64_t int_of(int rank, size_t i)
{
    switch (i % 4) {
    case 0: return (int64_t)rank * 1000 - 7;
    case 1: return INT64_MAX - rank; /* the sum wraps */
    case 2: return rank == 1 ? INT64_MIN : -(int64_t)i * rank;
    default: return (int64_t)((uint64_t)0x0123456789abcdefull * (uint64_t)(rank + 1));
    }
}

static int check_ints(dtrain_comm *c, int rank, int n, int max)
{
    enum { COUNT = 9 };
    int64_t buf[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = int_of(rank, i);
    int rc = max ? dtrain_comm_max_int64(c, buf, COUNT) : dtrain_comm_sum_int64(c, buf, COUNT);
    if (rc != 0)
        return failed_call(rank, max ? "max_int64" : "sum_int64", COUNT, rc, c);
    for (size_t i = 0; i < COUNT; i++) {
        uint64_t sum = 0;
        int64_t most = INT64_MIN;
        for (int r = 0; r < n; r++) {
            sum += (uint64_t)int_of(r, i);
            most = int_of(r, i) > most ? int_of(r, i) : most;
        }
        int64_t want = max ? most : (int64_t)sum;
        if (buf[i] != want) {
            harness_diag(rank, "%s[%zu] = %lld, want %lld", max ? "max_int64" : "sum_int64", i, (long long)buf[i],
                         (long long)want);
            return 1;
        }
    }
    return 0;
}

/* Values whose sum depends on the order (1e16 + 1 loses the 1), and a
 * negative zero (0.0 + -0.0 is +0.0). */
static double double_of(int rank, size_t i)
{
    switch (i % 4) {
    case 0: return rank == 0 ? 1e16 : 1.0;
    case 1: return rank % 2 ? 0.1 * rank : -1e-3 / (rank + 1);
    case 2: return -0.0;
    default: return rank == 0 ? 1.0 : rank == 1 ? 1e16 : -1e16;
    }
}

static int check_doubles(dtrain_comm *c, int rank, int n)
{
    enum { COUNT = 8 };
    double buf[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = double_of(rank, i);
    int rc = dtrain_comm_sum_doubles_ordered(c, buf, COUNT);
    if (rc != 0)
        return failed_call(rank, "sum_doubles_ordered", COUNT, rc, c);
    for (size_t i = 0; i < COUNT; i++) {
        double want = 0.0;
        for (int r = 0; r < n; r++)
            want += double_of(r, i);
        if (memcmp(&buf[i], &want, sizeof want) != 0) {
            harness_diag(rank, "sum_doubles_ordered[%zu] = %.17g, want %.17g (rank order)", i, buf[i], want);
            return 1;
        }
    }
    /* every rank's bits, compared with this rank's */
    double *all = malloc(sizeof buf * (size_t)n);
    if (all == NULL)
        return 1;
    rc = dtrain_comm_all_gather_bytes(c, buf, all, sizeof buf);
    int bad = rc != 0 ? failed_call(rank, "all_gather_bytes (the sums)", sizeof buf, rc, c) : 0;
    for (int r = 0; r < n && !bad; r++)
        if (memcmp(all + (size_t)r * COUNT, buf, sizeof buf) != 0) {
            harness_diag(rank, "rank %d's ordered sums have other bits than this rank's", r);
            bad = 1;
        }
    free(all);
    return bad;
}

static int check_stats(dtrain_comm *c, int rank, int n)
{
    struct dtrain_comm_stats before, after;
    unsigned char in[5] = {1, 2, 3, 4, 5}, out[5 * HARNESS_MAX_RANKS];
    dtrain_comm_get_stats(c, &before);
    int rc = dtrain_comm_all_gather_bytes(c, in, out, sizeof in);
    if (rc != 0)
        return failed_call(rank, "all_gather_bytes", sizeof in, rc, c);
    dtrain_comm_get_stats(c, &after);
    uint64_t want = (uint64_t)(n - 1) * sizeof in;
    if (after.bytes_sent - before.bytes_sent != want || after.bytes_received - before.bytes_received != want ||
        after.calls - before.calls != 1) {
        harness_diag(rank, "5 bytes gathered: %llu sent, %llu received, %llu calls; want %llu, %llu, 1",
                     (unsigned long long)(after.bytes_sent - before.bytes_sent),
                     (unsigned long long)(after.bytes_received - before.bytes_received),
                     (unsigned long long)(after.calls - before.calls), (unsigned long long)want,
                     (unsigned long long)want);
        return 1;
    }
    return 0;
}

static int check_errors(dtrain_comm *c, int rank)
{
    unsigned char b[8] = {0};
    int64_t v = 1;
    int bad = 0;
    bad |= comm_cause_of(c, dtrain_comm_all_gather_bytes(c, NULL, b, 1)) != DTRAIN_COMM_EINVAL;
    bad |= comm_cause_of(c, dtrain_comm_all_gather_bytes(c, b, NULL, 1)) != DTRAIN_COMM_EINVAL;
    if (dtrain_comm_size(c) > 1) /* bytes * size overflows */
        bad |= comm_cause_of(c, dtrain_comm_all_gather_bytes(c, b, b, SIZE_MAX / 2 + 1)) != DTRAIN_COMM_EINVAL;
    bad |= comm_cause_of(NULL, dtrain_comm_all_gather_bytes(NULL, b, b, 1)) != DTRAIN_COMM_EINVAL;
    bad |= comm_cause_of(c, dtrain_comm_sum_int64(c, NULL, 1)) != DTRAIN_COMM_EINVAL;
    bad |= comm_cause_of(NULL, dtrain_comm_max_int64(NULL, &v, 1)) != DTRAIN_COMM_EINVAL;
    bad |= comm_cause_of(c, dtrain_comm_sum_doubles_ordered(c, NULL, 2)) != DTRAIN_COMM_EINVAL;
    bad |= comm_cause_of(c, dtrain_comm_sum_int64(c, &v, SIZE_MAX / 4)) != DTRAIN_COMM_EINVAL;
    /* still usable: every member makes the same call after */
    int rc = comm_cause_of(c, dtrain_comm_sum_int64(c, &v, 1));
    if (bad || rc != 0 || v != dtrain_comm_size(c)) {
        harness_diag(rank, "bad arguments: %s; the call after: %s, sum %lld", bad ? "not all EINVAL" : "EINVAL",
                     dtrain_comm_cause_name(rc), (long long)v);
        return 1;
    }
    return 0;
}

/* Rank 0 gathers 4 bytes, the others 8: the headers differ. */
static int check_mismatch(dtrain_comm *c, int rank, int n)
{
    if (n < 2)
        return 0;
    unsigned char in[8] = {0}, out[8 * HARNESS_MAX_RANKS];
    int rc = comm_cause_of(c, dtrain_comm_all_gather_bytes(c, in, out, rank == 0 ? 4 : 8));
    int64_t v = 1;
    int again = comm_cause_of(c, dtrain_comm_sum_int64(c, &v, 1));
    if ((rc != DTRAIN_COMM_EMISMATCH && rc != DTRAIN_COMM_EPEER) || again != rc) {
        harness_diag(rank, "different sizes: %s, then %s", dtrain_comm_cause_name(rc),
                     dtrain_comm_cause_name(again));
        return 1;
    }
    return 0;
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
    struct dtrain_comm_stats before, after;
    dtrain_comm_get_stats(c, &before);
    int rc0 = dtrain_comm_all_gather_bytes(c, NULL, NULL, 0), rc1 = dtrain_comm_sum_int64(c, NULL, 0);
    int rc2 = dtrain_comm_sum_doubles_ordered(c, NULL, 0);
    dtrain_comm_get_stats(c, &after);
    if (rc0 != 0 || rc1 != 0 || rc2 != 0 || after.bytes_sent != before.bytes_sent) {
        harness_diag(rank, "0 bytes: %d %d %d, %llu bytes sent", rc0, rc1, rc2,
                     (unsigned long long)(after.bytes_sent - before.bytes_sent));
        failed |= 1 << P_ZERO;
    }
    const size_t sizes[] = {1, 3, 5, 13, 64};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (check_gather(c, rank, n, sizes[i]))
            failed |= 1 << P_GATHER;
    if (check_gather(c, rank, n, 3 * RING_CHUNK_FLOATS * sizeof(float) + 7))
        failed |= 1 << P_LARGE;
    if (check_ints(c, rank, n, 0))
        failed |= 1 << P_SUM;
    if (check_ints(c, rank, n, 1))
        failed |= 1 << P_MAX;
    if (check_doubles(c, rank, n))
        failed |= 1 << P_DOUBLES;
    if (check_stats(c, rank, n))
        failed |= 1 << P_STATS;
    if (check_errors(c, rank))
        failed |= 1 << P_ERRORS;
    if (!failed && check_mismatch(c, rank, n)) /* breaks the communicator: last */
        failed |= 1 << P_MISMATCH;
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
    for (int n = 1; n <= 4; n++)
        one_run(n, &shm, "shared memory");
    for (int n = 2; n <= 4; n++)
        one_run(n, &tcp, "tcp");
    one_run(4, &two_hosts, "2 fake hosts (shm inside, tcp between)");
    return tap_done();
}
