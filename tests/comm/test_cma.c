/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu backend's all-gather, all-reduce and reduce-scatter by direct reads
 * (runtime/comm/cpu/cma.h): members of one host read each other's memory
 * with process_vm_readv.
 *  - n = 2, 3, 4 and 8 members, blocks of 256 KiB and of 300,001 bytes
 *    (floats and bytes), in place and apart, the output at an odd
 *    address: every byte where the ring puts it, the bytes counted as the
 *    ring counts them, and the call counted in single_copy_calls;
 *  - all-reduces (sum and average) of 1 MiB per member (the threshold)
 *    and of a little more, with uneven segments, and reduce-scatters of
 *    1 MiB per member apart (sum) and a little more in place (average),
 *    on values whose sums round: every float the ring's sum in the ring's
 *    order, bit for bit, on every path below;
 *  - DTRAIN_COMM_TRANSPORT_RING, below the size where it pays, and
 *    members on two "hosts": the same results through the rings, none
 *    read directly;
 *  - a member whose memory the others may not read (it is not dumpable
 *    and every member has dropped CAP_SYS_PTRACE: the kernel refuses
 *    process_vm_readv, as Yama or a container's seccomp profile would):
 *    every member finds out at the first call and all of them go over
 *    the rings, the results the same; and a member that turns so after
 *    the first call (an all-reduce) or the third (an all-gather): the
 *    check before the next call finds it, and that call and the ones
 *    after go over the rings on every member;
 *  - a read refused during a call, after that check (the race of another
 *    thread of a member changing its credentials, which no test can time:
 *    rank 0's process_vm_readv is a stand-in here that answers EPERM,
 *    as the kernel then does, from the read after the check on): an
 *    all-gather or a reduce-scatter apart is redone over the rings, the
 *    results the same; an all-reduce or a reduce-scatter in place, whose
 *    inputs hold sums by then, fails on every member with one message
 *    naming rank 0's refused read;
 *  - a reduce-scatter apart and an all-gather apart that touch more than
 *    this CPU's last-level cache holds (cma_stream_min_bytes), whose
 *    outputs are written with streaming stores: every float the ring's
 *    sum, bit for bit, every byte in its place. */
#include <errno.h>
#include <linux/capability.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/cpu/cma.h"
#include "dtrain_comm.h"
#include "harness.h"
#include "tap.h"

enum mode { DIRECT, RING_TRANSPORT, SMALL, TWO_HOSTS, REFUSED, REFUSED_LATER, REFUSED_MID_CALL };
static const char *const mode_text[] = {
    "read directly",
    "DTRAIN_COMM_TRANSPORT_RING: through the rings",
    "blocks below the threshold: through the rings",
    "members on two hosts: through the rings",
    "one member's memory may not be read: every member falls back to the rings",
    "one member's memory becomes unreadable after the first call: that call and the rest through the rings",
    "rank 0's reads refused during ",
};

struct job {
    enum mode mode;
    int direct_calls; /* REFUSED_LATER: calls read directly before a member turns unreadable;
                         REFUSED_MID_CALL: the call whose reads are refused (calls before it read directly) */
};

/* The stand-in at the kernel boundary for REFUSED_MID_CALL: this process's
 * process_vm_readv (the library's calls bind to this definition) answers
 * EPERM once reads_left reads have gone through, as the kernel does for a
 * process that has become unreadable; -1: the system call, always. */
static long reads_left = -1;

ssize_t process_vm_readv(pid_t pid, const struct iovec *local, unsigned long liovcnt, const struct iovec *remote,
                         unsigned long riovcnt, unsigned long flags)
{
    if (reads_left == 0) {
        errno = EPERM;
        return -1;
    }
    if (reads_left > 0)
        reads_left--;
    return syscall(SYS_process_vm_readv, pid, local, liovcnt, remote, riovcnt, flags);
}

/* A call that must fail because rank 0's read was refused after its
 * inputs began to change: 0 when it did, on this member, with a message
 * naming that read. */
static int failed_as_refused(int rank, dtrain_comm *c, int rc, const char *what)
{
    const char *msg = dtrain_comm_error_message(c);
    if (rc != DTRAIN_OK && strstr(msg, "rank 0 could not read") != NULL && strstr(msg, strerror(EPERM)) != NULL)
        return 0;
    harness_diag(rank, "%s with rank 0's reads refused during it: %s; want it failed, naming rank 0's refused read",
                 what, rc == DTRAIN_OK ? "succeeded" : msg);
    return 1;
}

enum part { P_BYTES, P_REDUCED, P_COUNTS, P_PATH, P_PARTS };

static unsigned char pattern(int rank, size_t i)
{
    return (unsigned char)(rank * 37 + i * 13 + (i >> 9));
}

/* An all-reduce operand whose sums round (their order shows in the bits) */
static float value(int rank, size_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank + 1) * 0x9e3779b9u;
    h ^= h >> 15;
    return (float)((int)(h % 200001u) - 100000) * 1.37e-3f + 0.1f * (float)rank;
}

/* The ring all-reduce's layout, written out here: slices of n * 64Ki
 * floats, each cut in n nearly equal segments; the segment i holds. */
static int segment_of(size_t count, int n, size_t i)
{
    const size_t slice = (size_t)n * (64u << 10);
    size_t off = i / slice * slice, L = count - off < slice ? count - off : slice, at = i - off;
    size_t base = L / (size_t)n, rem = L % (size_t)n;
    for (int s = 0; s < n; s++) {
        size_t start = (size_t)s * base + ((size_t)s < rem ? (size_t)s : rem), len = base + ((size_t)s < rem);
        if (at >= start && at < start + len)
            return s;
    }
    return -1;
}

/* The floats of segment s over all slices */
static size_t segment_floats(size_t count, int n, int s)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += segment_of(count, n, i) == s;
    return total;
}

/* Element i summed as the ring sums what member `owner` finishes: member
 * owner+1's value first, each next member's added to the sum, the
 * owner's own last; an average divides that once. */
static float ring_sum(int owner, int n, size_t i, int avg)
{
    float sum = value((owner + 1) % n, i);
    for (int k = 2; k <= n; k++)
        sum = value((owner + k) % n, i) + sum;
    return avg ? sum / (float)n : sum;
}

/* One reduce-scatter of count floats per member (in place: out is this
 * member's block of in): 0 when every float is the ring's sum (ring_sum,
 * block r finished by member r), 1 if not, 2
 * when the bytes are not counted as the ring counts them; must_fail:
 * 0 when it failed_as_refused, 1 if not. */
static int reduce_scatter_once(int rank, int n, dtrain_comm *c, size_t count, int in_place, int must_fail, float *in,
                               float *out, struct dtrain_comm_stats *st)
{
    const size_t first = (size_t)rank * count;
    for (size_t i = 0; i < (size_t)n * count; i++)
        in[i] = value(rank, i);
    float *dst = in_place ? in + first : out;
    int rc = dtrain_comm_reduce_scatter(c, in, dst, count, in_place ? DTRAIN_REDUCE_AVG : DTRAIN_REDUCE_SUM);
    if (must_fail)
        return failed_as_refused(rank, c, rc, "reduce-scatter");
    if (rc != DTRAIN_OK) {
        harness_diag(rank, "reduce-scatter of %zu floats failed: %s", count, dtrain_comm_error_message(c));
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        float sum = ring_sum(rank, n, first + i, in_place);
        if (memcmp(&dst[i], &sum, sizeof sum) != 0) {
            harness_diag(rank, "reduce-scatter (%zu floats, %s)[%zu] = %.9g, the ring's sum is %.9g", count,
                         in_place ? "average in place" : "sum apart", i, (double)dst[i], (double)sum);
            return 1;
        }
    }
    uint64_t moved = (uint64_t)(n - 1) * count * sizeof(float);
    return harness_check_bytes(rank, st, c, moved, moved, "reduce_scatter") ? 2 : 0;
}

/* One all-reduce of count floats: 0 when every float is the ring's sum
 * (ring_sum, segment s finished by member s), 1 if not, 2 when the bytes
 * are not counted as the ring counts them; must_fail: 0 when it
 * failed_as_refused, 1 if not. */
static int allreduce_once(int rank, int n, dtrain_comm *c, size_t count, int avg, int must_fail, float *buf,
                          struct dtrain_comm_stats *st)
{
    for (size_t i = 0; i < count; i++)
        buf[i] = value(rank, i);
    int rc = dtrain_comm_allreduce(c, buf, count, avg ? DTRAIN_REDUCE_AVG : DTRAIN_REDUCE_SUM);
    if (must_fail)
        return failed_as_refused(rank, c, rc, "all-reduce");
    if (rc != DTRAIN_OK) {
        harness_diag(rank, "all-reduce of %zu floats failed: %s", count, dtrain_comm_error_message(c));
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        float sum = ring_sum(segment_of(count, n, i), n, i, avg);
        if (memcmp(&buf[i], &sum, sizeof sum) != 0) {
            harness_diag(rank, "all-reduce (%zu floats, %s)[%zu] = %.9g, the ring's sum is %.9g", count,
                         avg ? "average" : "sum", i, (double)buf[i], (double)sum);
            return 1;
        }
    }
    /* the ring's halves: the reduce one sends every segment but this
     * member's and receives all but the previous member's; the gather one
     * sends all but the next member's and receives all but this one's */
    uint64_t f = sizeof(float), own = segment_floats(count, n, rank);
    uint64_t sent = (2 * count - own - segment_floats(count, n, (rank + 1) % n)) * f;
    uint64_t received = (2 * count - own - segment_floats(count, n, (rank + n - 1) % n)) * f;
    return harness_check_bytes(rank, st, c, sent, received, "allreduce") ? 2 : 0;
}

/* Drop CAP_SYS_PTRACE from this process's effective set (root may read
 * any process's memory with it); 0 or -1. */
static int drop_ptrace_cap(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
    return syscall(SYS_capset, &h, d) == 0 ? 0 : -1;
}

/* One all-gather of `each` bytes per member: 0 when every byte is right. */
static int gather_once(int rank, int n, dtrain_comm *c, size_t each, int in_place, int as_floats,
                       unsigned char *buf)
{
    unsigned char *out = buf + 1; /* an odd address */
    unsigned char *in = in_place ? out + (size_t)rank * each : out + (size_t)n * each + 64;
    memset(out, 0xee, (size_t)n * each);
    for (size_t i = 0; i < each; i++)
        in[i] = pattern(rank, i);
    int rc = as_floats ? dtrain_comm_all_gather(c, (const float *)(void *)in, (float *)(void *)out, each / 4)
                       : dtrain_comm_all_gather_bytes(c, in, out, each);
    if (rc != DTRAIN_OK) {
        harness_diag(rank, "all-gather of %zu bytes failed: %s", each, dtrain_comm_error_message(c));
        return 1;
    }
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < each; i++)
            if (out[(size_t)j * each + i] != pattern(j, i)) {
                harness_diag(rank, "byte %zu of rank %d's block is %u, want %u (each %zu, %s)", i, j,
                             out[(size_t)j * each + i], pattern(j, i), each, in_place ? "in place" : "apart");
                return 1;
            }
    return 0;
}

static int child(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    const struct job *j = arg;
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX];
    dtrain_comm *c = NULL;
    int failed = 0;
    (void)ngroups;
    if (j->mode == REFUSED || j->mode == REFUSED_LATER) { /* REFUSED_MID_CALL: the stand-in refuses */
        if (drop_ptrace_cap() != 0) {
            harness_diag(rank, "cannot drop CAP_SYS_PTRACE");
            return (1 << P_PARTS) - 1;
        }
        if (rank == n - 1 && j->mode == REFUSED)
            prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    harness_options(&o, rank, n, j->mode == TWO_HOSTS ? 2 : 1,
                    j->mode == RING_TRANSPORT ? DTRAIN_COMM_TRANSPORT_RING : DTRAIN_COMM_TRANSPORT_AUTO, 20000,
                    host);
    if (harness_init(&groups[0], &o, &c) != 0)
        return (1 << P_PARTS) - 1;
    const size_t sizes[] = {256u << 10, 300001};
    /* 1 MiB per member (CMA_REDUCE_MIN_BYTES); more, segments uneven */
    const size_t reduce_counts[] = {(size_t)n << 18, ((size_t)n << 18) + 13 * (size_t)n + 5};
    size_t most = reduce_counts[1] * sizeof(float) + 128;
    if (most < (size_t)(n + 1) * 300004 + 128)
        most = (size_t)(n + 1) * 300004 + 128;
    unsigned char *buf = malloc(most);
    /* the reduce-scatters' input and output */
    const size_t scatter_counts[] = {(size_t)1 << 18, ((size_t)1 << 18) + 13};
    float *scatter_in = malloc((size_t)n * scatter_counts[1] * sizeof(float)),
          *scatter_out = malloc(scatter_counts[1] * sizeof(float));
    struct dtrain_comm_stats st;
    dtrain_comm_get_stats(c, &st);
    int calls = 0;
    /* two all-reduces, four all-gathers, two reduce-scatters */
    for (int call = 0; call < 8 && buf != NULL && scatter_in != NULL && scatter_out != NULL; call++) {
        /* REFUSED_MID_CALL: rank 0's reads go through for the check of
         * the other members' tokens, then are refused; the all-reduces
         * (calls 0 and 1) and the reduce-scatter in place (7) fail */
        int refused = j->mode == REFUSED_MID_CALL && call == j->direct_calls,
            must_fail = refused && (call < 2 || call == 7);
        if (refused && rank == 0)
            reads_left = n - 1;
        if (call >= 6) {
            /* SMALL: a float under 1 MiB per member */
            size_t count = j->mode == SMALL ? ((size_t)1 << 18) - 1 : scatter_counts[call - 6];
            int bad = reduce_scatter_once(rank, n, c, count, call == 7, must_fail, scatter_in, scatter_out, &st);
            if (bad & 1)
                failed |= 1 << P_REDUCED;
            if (bad & 2)
                failed |= 1 << P_COUNTS;
        } else if (call < 2) {
            /* SMALL: a float under 1 MiB per member */
            size_t count = j->mode == SMALL ? ((size_t)n << 18) - (size_t)n : reduce_counts[call];
            int bad = allreduce_once(rank, n, c, count, call == 1, must_fail, (float *)(void *)buf, &st);
            if (bad & 1)
                failed |= 1 << P_REDUCED;
            if (bad & 2)
                failed |= 1 << P_COUNTS;
        } else {
            size_t s = (size_t)(call - 2) / 2, each = j->mode == SMALL ? 1000 + s * 4 : sizes[s];
            int in_place = call % 2, floats = each % 4 == 0;
            if (gather_once(rank, n, c, each, in_place, floats, buf) != 0)
                failed |= 1 << P_BYTES;
            uint64_t want = (uint64_t)(n - 1) * each;
            if (harness_check_bytes(rank, &st, c, want, want, "all_gather") != 0)
                failed |= 1 << P_COUNTS;
        }
        calls++;
        if (must_fail)
            break; /* the communicator answers every later call with that error */
        if (j->mode == REFUSED_LATER && calls == j->direct_calls && rank == n - 1)
            prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* the next call may not read this member */
    }
    uint64_t direct = st.single_copy_calls,
             want = j->mode == DIRECT ? (uint64_t)calls
                    : j->mode == REFUSED_LATER || j->mode == REFUSED_MID_CALL ? (uint64_t)j->direct_calls : 0;
    if (buf == NULL || scatter_in == NULL || scatter_out == NULL || direct != want) {
        harness_diag(rank, "%llu of %d calls read directly, want %llu", (unsigned long long)direct, calls,
                     (unsigned long long)want);
        failed |= 1 << P_PATH;
    }
    free(buf);
    free(scatter_in);
    free(scatter_out);
    dtrain_comm_destroy(c);
    return failed;
}

/* Floats per member of a reduce-scatter apart on 2 members that reads
 * more than the last-level cache holds: its output streamed (cma.h). */
static size_t streamed_count(void)
{
    return cma_stream_min_bytes() / (3 * sizeof(float)) + 1;
}

/* Test buffers beyond this are not allocated: a cache that large is
 * reported as a skip */
#define STREAMED_MAX_BYTES ((size_t)1 << 30)

static int child_streamed(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX];
    dtrain_comm *c = NULL;
    struct dtrain_comm_stats st;
    int failed = 0;
    (void)ngroups;
    (void)arg;
    harness_options(&o, rank, n, 1, DTRAIN_COMM_TRANSPORT_AUTO, 60000, host);
    if (harness_init(&groups[0], &o, &c) != 0)
        return (1 << P_PARTS) - 1;
    const size_t count = streamed_count(), each = count * sizeof(float);
    float *in = malloc((size_t)n * count * sizeof(float)), *out = malloc(count * sizeof(float));
    unsigned char *buf = malloc((size_t)(n + 1) * each + 128);
    dtrain_comm_get_stats(c, &st);
    if (in == NULL || out == NULL || reduce_scatter_once(rank, n, c, count, 0, 0, in, out, &st) != 0)
        failed |= 1 << P_REDUCED;
    /* an all-gather apart of as many bytes: its own block copied streamed */
    if (buf == NULL || gather_once(rank, n, c, each, 0, 1, buf) != 0)
        failed |= 1 << P_BYTES;
    dtrain_comm_get_stats(c, &st);
    if (st.single_copy_calls != 2) {
        harness_diag(rank, "%llu calls read directly, want 2", (unsigned long long)st.single_copy_calls);
        failed |= 1 << P_PATH;
    }
    free(in);
    free(out);
    free(buf);
    dtrain_comm_destroy(c);
    return failed;
}

int main(void)
{
    static const char *const part_text[P_PARTS] = {
        "all-gather: every byte of every block in its place (in place and apart, output at an odd address)",
        "all-reduce and reduce-scatter: every float the ring's sum in the ring's order, bit for bit (sum and average); "
        "a call that must fail failed, naming the refused read",
        "bytes counted as the ring counts them",
        "",
    };
    /* REFUSED_LATER: after the first all-reduce (the second is refused),
     * or after the first all-gather (the second all-gather is).
     * REFUSED_MID_CALL: during the first all-reduce, the second, the
     * first all-gather (apart), the first reduce-scatter (apart), the
     * second (in place) */
    const struct { int n; enum mode mode; int direct_calls; } runs[] = {
        {2, DIRECT, 0}, {3, DIRECT, 0}, {4, DIRECT, 0}, {8, DIRECT, 0}, {2, RING_TRANSPORT, 0}, {3, RING_TRANSPORT, 0},
        {4, SMALL, 0}, {4, TWO_HOSTS, 0}, {2, REFUSED, 0}, {3, REFUSED, 0}, {2, REFUSED_LATER, 1},
        {4, REFUSED_LATER, 1}, {3, REFUSED_LATER, 3}, {2, REFUSED_MID_CALL, 0}, {3, REFUSED_MID_CALL, 1},
        {3, REFUSED_MID_CALL, 2}, {4, REFUSED_MID_CALL, 6}, {2, REFUSED_MID_CALL, 7},
    };
    static const char *const call_text[8] = {
        "the first all-reduce (it fails on every member)", "the second all-reduce (it fails on every member)",
        "the first all-gather, apart (redone over the rings)", "", "", "",
        "the first reduce-scatter, apart (redone over the rings)",
        "the second reduce-scatter, in place (it fails on every member)",
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        struct harness_result res;
        struct job j = {runs[k].mode, runs[k].direct_calls};
        int rc = harness_run(runs[k].n, 1, child, &j, 60, NULL, &res);
        char what[160], path[160];
        snprintf(what, sizeof what, "%s%s", mode_text[runs[k].mode],
                 runs[k].mode == REFUSED_MID_CALL ? call_text[runs[k].direct_calls] : "");
        if (runs[k].mode == DIRECT)
            snprintf(path, sizeof path, "every call read the others' memory directly (single_copy_calls)");
        else if (runs[k].mode == REFUSED_LATER || runs[k].mode == REFUSED_MID_CALL)
            snprintf(path, sizeof path, "the %d call(s) before it alone read directly (single_copy_calls)",
                     runs[k].direct_calls);
        else
            snprintf(path, sizeof path, "no call read directly (single_copy_calls 0)");
        for (int p = 0; p < P_PARTS; p++)
            ok(rc == 0 && !harness_part_failed(&res, runs[k].n, p), "n=%d, %s: %s", runs[k].n, what,
               p == P_PATH ? path : part_text[p]);
    }
    const size_t count = streamed_count();
    if (3 * count * sizeof(float) > STREAMED_MAX_BYTES) {
        char why[200];
        snprintf(why, sizeof why, "a reduce-scatter and an all-gather apart past the last-level cache (streamed "
                 "outputs): this CPU's cache of %zu MiB would need more than %zu MiB of test buffers", cma_stream_min_bytes() >> 20,
                 STREAMED_MAX_BYTES >> 20);
        skip(why);
        skip(why);
    } else {
        struct harness_result res;
        int rc = harness_run(2, 1, child_streamed, NULL, 120, NULL, &res);
        ok(rc == 0 && !harness_part_failed(&res, 2, P_REDUCED) && !harness_part_failed(&res, 2, P_PATH),
           "n=2, a reduce-scatter apart of %zu floats per member, past the %zu MiB last-level cache (its output "
           "streamed), read directly: every float the ring's sum in the ring's order, bit for bit", count,
           cma_stream_min_bytes() >> 20);
        ok(rc == 0 && !harness_part_failed(&res, 2, P_BYTES) && !harness_part_failed(&res, 2, P_PATH),
           "n=2, an all-gather apart of %zu bytes per member to an odd address, past the cache (its own block "
           "copied streamed), read directly: every byte in its place", count * sizeof(float));
    }
    return tap_done();
}
