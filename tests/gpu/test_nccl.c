/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The nccl backend of the comm interface (runtime/comm/nccl).
 *
 * Anywhere: an id that is not "nccl:<256 hex>" is refused with EINVAL;
 * without a GPU, a real id (ncclGetUniqueId works without one) gives
 * ESYS and "no CUDA device".
 * One GPU: a group of one comes up (non-blocking init), TP/PP/DP split off
 * it with ncclCommSplit, no async error, dtrain_comm_abort breaks it, the
 * calls after report EABORTED, destroy.
 * Two GPUs or more (two processes, one GPU each): all-reduce (sum, avg),
 * reduce-scatter, all-gather, broadcast, a send/recv exchange both ways at
 * once, barrier, against values computed here; host memory (the
 * trainer's control messages) through the device copy: an all-reduce and
 * an all-gather of host buffers give the same values, also with a
 * (non-blocking) compute stream named; the control plane (all-gather of
 * host bytes, int64 sum and max, ordered double sum); a member that never calls makes the
 * other time out (ETIMEDOUT) instead of hanging; an all-reduce aborted from
 * another thread fails with EABORTED.
 * CUDA is used only in child processes: a process that touched CUDA
 * cannot fork a child that uses it. */
#include "gpu_pair.h"
#include "tap.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DTRAIN_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm_cause.h"
#include "dtrain_comm.h"
#include "dtrain_parse.h"

#define CHILD_BOUND_S 60

/* ------------------------------------------------------------------ helpers */

/* dtrain_comm_init and dtrain_comm_split, answering their cause (comm_cause.h). */
static int init_cause(const struct dtrain_comm_group *g, enum dtrain_comm_backend backend,
                      const struct dtrain_comm_options *o, dtrain_comm **out, char *err, size_t errlen)
{
    enum dtrain_comm_cause cause;
    int status = dtrain_comm_init(g, backend, o, out, &cause, err, errlen);
    return comm_cause_checked(status, cause);
}

static int split_cause(dtrain_comm *world, const struct dtrain_comm_group *g, const struct dtrain_comm_options *o,
                       dtrain_comm **out, char *err, size_t errlen)
{
    enum dtrain_comm_cause cause;
    int status = dtrain_comm_split(world, g, o, out, &cause, err, errlen);
    return comm_cause_checked(status, cause);
}

static void group_of(struct dtrain_comm_group *g, const char *key, long index, int size, int rank, const char *id)
{
    memset(g, 0, sizeof *g);
    g->present = 1;
    g->index = index;
    g->size = size;
    g->first = 0;
    g->stride = 1;
    g->my_rank = rank;
    g->listen_fd = -1;
    dtrain_snprintf(g->key, sizeof g->key, "%s", key);
    dtrain_snprintf(g->id, sizeof g->id, "%s", id);
}

static int make_id(char *id, size_t len)
{
    ncclUniqueId uid;
    char hex[2 * sizeof uid.internal + 1];
    if (ncclGetUniqueId(&uid) != ncclSuccess || dtrain_hex_encode(uid.internal, sizeof uid.internal, hex, sizeof hex))
        return -1;
    return dtrain_snprintf(id, len, "nccl:%s", hex);
}

/* A child's report: one line per check, "1 what" or "0 what", on fd. */
static void report(int fd, int pass, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(int fd, int pass, const char *fmt, ...)
{
    char line[400];
    va_list ap;
    int n = snprintf(line, sizeof line, "%d ", pass ? 1 : 0);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    if (write(fd, line, len) != (ssize_t)len)
        _exit(3);
}

/* Run fn(rank, fd, arg) in n children (child r on GPU r); turn their
 * report lines into test points; a child that crashed, hung or did not
 * report `expected` lines is one failed point. */
typedef void (*child_fn)(int rank, int n, int fd, int idfd[2], void *arg);

static void run_children(int n, child_fn fn, void *arg, int expected, const char *what)
{
    int rep[2], idp[2];
    pid_t pid[8];
    if (pipe(rep) != 0 || pipe(idp) != 0) {
        ok(0, "%s: pipes", what);
        return;
    }
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            close(rep[0]);
            alarm(CHILD_BOUND_S);
            fn(r, n, rep[1], idp, arg);
            _exit(0);
        }
    }
    close(rep[1]);
    close(idp[0]);
    close(idp[1]);
    FILE *f = fdopen(rep[0], "r");
    char line[512];
    int got = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        ok(line[0] == '1', "%s: %s", what, line + 2);
        got++;
    }
    if (f != NULL)
        fclose(f);
    int crashed = 0;
    for (int r = 0; r < n; r++) {
        int st = 0;
        if (waitpid(pid[r], &st, 0) != pid[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            crashed++;
    }
    ok(crashed == 0 && got == expected, "%s: every process finished and reported (%d of %d reports)", what, got,
       expected);
}

/* Devices seen by a child (the parent stays CUDA-free). */
static int count_devices(void)
{
    pid_t p = fork();
    if (p == 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess)
            n = 0;
        _exit(n > 100 ? 100 : n);
    }
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st))
        return 0;
    return WEXITSTATUS(st);
}

/* ------------------------------------------------------------------ anywhere */

static void test_bad_ids(void)
{
    struct dtrain_comm_group g;
    dtrain_comm *c = NULL;
    char err[256] = "";
    group_of(&g, "dt.test.0", 0, 1, 0, "nccl:0123zz");
    int rc = init_cause(&g, DTRAIN_COMM_NCCL, NULL, &c, err, sizeof err);
    ok(rc == DTRAIN_COMM_EINVAL && c == NULL && strstr(err, "not an nccl bootstrap id") != NULL,
       "a malformed nccl id is refused: %s", err);
    group_of(&g, "dt.test.0", 0, 1, 0, "cpu:127.0.0.1:5000:00112233445566778899aabbccddeeff");
    rc = init_cause(&g, DTRAIN_COMM_NCCL, NULL, &c, err, sizeof err);
    ok(rc == DTRAIN_COMM_EINVAL && c == NULL, "a cpu id given to the nccl backend is refused: %s", err);
}

static void child_no_device(int rank, int n, int fd, int idfd[2], void *arg)
{
    struct dtrain_comm_group g;
    dtrain_comm *c = NULL;
    char id[DTRAIN_BOOTSTRAP_ID_MAX], err[256] = "";
    (void)rank; (void)n; (void)idfd; (void)arg;
    if (make_id(id, sizeof id) != 0) {
        report(fd, 0, "ncclGetUniqueId works without a GPU");
        return;
    }
    report(fd, 1, "ncclGetUniqueId works without a GPU");
    group_of(&g, "dt.world", 0, 1, 0, id);
    int rc = init_cause(&g, DTRAIN_COMM_NCCL, NULL, &c, err, sizeof err);
    report(fd, rc == DTRAIN_COMM_ESYS && c == NULL && strstr(err, "no CUDA device") != NULL,
           "init without a GPU fails clearly: %s", err);
}

/* ------------------------------------------------------------------ one GPU */

static void child_one_gpu(int rank, int n, int fd, int idfd[2], void *arg)
{
    struct dtrain_comm_group world, sub;
    dtrain_comm *c = NULL, *tp = NULL;
    char id[DTRAIN_BOOTSTRAP_ID_MAX], err[256] = "";
    struct dtrain_comm_options o;
    struct dtrain_comm_error e;
    (void)rank; (void)n; (void)idfd; (void)arg;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = 20000;
    if (make_id(id, sizeof id) != 0 || cudaSetDevice(0) != cudaSuccess) {
        report(fd, 0, "an nccl id and device 0");
        return;
    }
    group_of(&world, "dt.world", 0, 1, 0, id);
    int rc = init_cause(&world, DTRAIN_COMM_NCCL, &o, &c, err, sizeof err);
    report(fd, rc == DTRAIN_COMM_OK, "a group of one comes up (non-blocking init): %s", rc ? err : "ok");
    if (rc != DTRAIN_COMM_OK)
        return;
    group_of(&sub, "dt.tp.0", 0, 1, 0, "unused: split off WORLD");
    rc = split_cause(c, &sub, &o, &tp, err, sizeof err);
    report(fd, rc == DTRAIN_COMM_OK && tp != NULL && dtrain_comm_size(tp) == 1,
           "a TP group splits off WORLD (ncclCommSplit): %s", rc ? err : "ok");
    report(fd, comm_async_cause(c, &e) == DTRAIN_COMM_OK, "no async error on WORLD");
    dtrain_comm_abort(c);
    report(fd, comm_cause_of(c, dtrain_comm_barrier(c)) == DTRAIN_COMM_EABORTED && comm_async_cause(c, &e) ==
           DTRAIN_COMM_EABORTED, "after dtrain_comm_abort, calls report EABORTED: %s", e.message);
    report(fd, tp == NULL || comm_async_cause(tp, &e) == DTRAIN_COMM_OK,
           "the split group shares nothing with the aborted one");
    dtrain_comm_destroy(tp);
    dtrain_comm_destroy(c);
    report(fd, 1, "destroy after abort returns");
}

/* ------------------------------------------------------------------ two GPUs */

/* Rank 0 makes the id and hands it to the others through a pipe. */
static int shared_id(int rank, int n, int idfd[2], char *id, size_t len)
{
    if (rank == 0) {
        if (make_id(id, len) != 0)
            return -1;
        for (int r = 1; r < n; r++)
            if (write(idfd[1], id, DTRAIN_BOOTSTRAP_ID_MAX) != DTRAIN_BOOTSTRAP_ID_MAX)
                return -1;
        return 0;
    }
    return read(idfd[0], id, DTRAIN_BOOTSTRAP_ID_MAX) == DTRAIN_BOOTSTRAP_ID_MAX ? 0 : -1;
}

/* cudaMemcpy or the child exits (reported as a crash) */
static void copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (cudaMemcpy(dst, src, bytes, kind) != cudaSuccess)
        _exit(4);
}

static int close_to(const float *x, float want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i] != want)
            return 0;
    return 1;
}

static void child_collectives(int rank, int n, int fd, int idfd[2], void *arg)
{
    char id[DTRAIN_BOOTSTRAP_ID_MAX] = "", err[256] = "";
    struct dtrain_comm_group g;
    struct dtrain_comm_options o;
    dtrain_comm *c = NULL;
    const size_t count = 1 << 20;
    float *d = NULL, *h = malloc(count * n * sizeof(float));
    (void)arg;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = 20000;
    if (h == NULL || cudaSetDevice(rank) != cudaSuccess || shared_id(rank, n, idfd, id, sizeof id) != 0 ||
        cudaMalloc((void **)&d, count * n * sizeof(float)) != cudaSuccess) {
        report(fd, 0, "rank %d: device, id and memory", rank);
        return;
    }
    group_of(&g, "dt.world", 0, n, rank, id);
    int rc = init_cause(&g, DTRAIN_COMM_NCCL, &o, &c, err, sizeof err);
    if (rank == 0)
        report(fd, rc == DTRAIN_COMM_OK, "%d ranks come up: %s", n, rc ? err : "ok");
    if (rc != DTRAIN_COMM_OK)
        return;
    /* all-reduce: rank r holds r+1 everywhere */
    for (size_t i = 0; i < count; i++)
        h[i] = (float)(rank + 1);
    copy(d, h, count * sizeof(float), cudaMemcpyHostToDevice);
    rc = dtrain_comm_allreduce(c, d, count, DTRAIN_REDUCE_SUM);
    copy(h, d, count * sizeof(float), cudaMemcpyDeviceToHost);
    float sum = (float)n * (n + 1) / 2;
    if (rank == 0)
        report(fd, rc == 0 && close_to(h, sum, count), "all-reduce sum of 1M floats");
    /* average: rank r holds r+1 again (d holds the sum now) */
    for (size_t i = 0; i < count; i++)
        h[i] = (float)(rank + 1);
    copy(d, h, count * sizeof(float), cudaMemcpyHostToDevice);
    rc = dtrain_comm_allreduce(c, d, count, DTRAIN_REDUCE_AVG);
    copy(h, d, count * sizeof(float), cudaMemcpyDeviceToHost);
    if (rank == 0)
        report(fd, rc == 0 && close_to(h, sum / n, count), "all-reduce average");
    /* reduce-scatter in place: every rank gives r+1, gets the sum of its slice */
    for (size_t i = 0; i < count * n; i++)
        h[i] = (float)(rank + 1);
    copy(d, h, count * n * sizeof(float), cudaMemcpyHostToDevice);
    rc = dtrain_comm_reduce_scatter(c, d, d + (size_t)rank * count, count, DTRAIN_REDUCE_SUM);
    copy(h, d + (size_t)rank * count, count * sizeof(float), cudaMemcpyDeviceToHost);
    if (rank == 0)
        report(fd, rc == 0 && close_to(h, sum, count), "reduce-scatter in place");
    /* all-gather in place: slice r holds r */
    for (size_t i = 0; i < count; i++)
        h[i] = (float)rank;
    copy(d + (size_t)rank * count, h, count * sizeof(float), cudaMemcpyHostToDevice);
    rc = dtrain_comm_all_gather(c, d + (size_t)rank * count, d, count);
    copy(h, d, count * n * sizeof(float), cudaMemcpyDeviceToHost);
    int gathered = rc == 0;
    for (int r = 0; r < n; r++)
        gathered = gathered && close_to(h + (size_t)r * count, (float)r, count);
    if (rank == 0)
        report(fd, gathered, "all-gather in place");
    /* broadcast from the last rank */
    for (size_t i = 0; i < count; i++)
        h[i] = (float)(rank == n - 1 ? 42 : -1);
    copy(d, h, count * sizeof(float), cudaMemcpyHostToDevice);
    rc = dtrain_comm_broadcast(c, d, count * sizeof(float), n - 1);
    copy(h, d, count * sizeof(float), cudaMemcpyDeviceToHost);
    if (rank == 0)
        report(fd, rc == 0 && close_to(h, 42.0f, count), "broadcast from rank %d", n - 1);
    /* a ring shift both ways at once: send to next, receive from previous */
    for (size_t i = 0; i < count; i++)
        h[i] = (float)rank;
    copy(d, h, count * sizeof(float), cudaMemcpyHostToDevice);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    rc = dtrain_comm_sendrecv(c, d, count * sizeof(float), next, d + count, count * sizeof(float), prev);
    copy(h, d + count, count * sizeof(float), cudaMemcpyDeviceToHost);
    if (rank == 0)
        report(fd, rc == 0 && close_to(h, (float)prev, count), "send/recv ring shift (4 MB each way, one group)");
    rc = dtrain_comm_barrier(c);
    if (rank == 0)
        report(fd, rc == 0, "barrier");
    /* host memory goes through the communicator's device copy */
    for (size_t i = 0; i < 16; i++)
        h[i] = (float)(rank + 1);
    rc = dtrain_comm_allreduce(c, h, 16, DTRAIN_REDUCE_SUM);
    if (rank == 0)
        report(fd, rc == 0 && close_to(h, sum, 16), "all-reduce of a host buffer (through a device copy)%s%s",
               rc ? ": " : "", rc ? dtrain_comm_error_message(c) : "");
    for (size_t i = 0; i < 4; i++)
        h[i] = (float)rank;
    rc = dtrain_comm_all_gather(c, h, h + 4, 4);
    gathered = rc == 0;
    for (int r = 0; r < n; r++)
        gathered = gathered && close_to(h + 4 + (size_t)r * 4, (float)r, 4);
    if (rank == 0)
        report(fd, gathered, "all-gather of host buffers");
    /* the same with the kernels' stream named (non-blocking, as the cuda
     * backend's): nothing but the backend's own ordering puts the copy of
     * the host buffer before the NCCL call that reads it */
    cudaStream_t compute = NULL;
    int fresh = cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess;
    dtrain_comm_set_stream(c, compute);
    for (int it = 0; fresh && it < 20; it++) {
        for (size_t i = 0; i < 16; i++)
            h[i] = (float)((rank + 1) * (it + 1));
        rc = dtrain_comm_allreduce(c, h, 16, DTRAIN_REDUCE_SUM);
        fresh = rc == 0 && close_to(h, sum * (float)(it + 1), 16);
    }
    if (rank == 0)
        report(fd, fresh, "20 all-reduces of host buffers after a compute stream was named: each sums this call's values");
    dtrain_comm_set_stream(c, NULL);
    if (compute != NULL)
        cudaStreamDestroy(compute);
    dtrain_comm_destroy(c);
    cudaFree(d);
    free(h);
}

/* Rank 1 joins, then never calls: rank 0's all-reduce times out. */
/* A child's WORLD of n ranks on device `rank`, with 1024 device floats in
 * *d: 0, or -1 after a report (rank 0 reports a failed init). */
static int child_world(int rank, int n, int fd, int idfd[2], int timeout_ms, dtrain_comm **c, float **d)
{
    char id[DTRAIN_BOOTSTRAP_ID_MAX] = "", err[256] = "";
    struct dtrain_comm_group g;
    struct dtrain_comm_options o;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = timeout_ms;
    *c = NULL;
    *d = NULL;
    if (cudaSetDevice(rank) != cudaSuccess || shared_id(rank, n, idfd, id, sizeof id) != 0 ||
        cudaMalloc((void **)d, 1024 * sizeof(float)) != cudaSuccess) {
        report(fd, 0, "rank %d: device, id and memory", rank);
        return -1;
    }
    group_of(&g, "dt.world", 0, n, rank, id);
    if (init_cause(&g, DTRAIN_COMM_NCCL, &o, c, err, sizeof err) != DTRAIN_COMM_OK) {
        if (rank == 0)
            report(fd, 0, "init: %s", err);
        return -1;
    }
    return 0;
}

static void child_timeout(int rank, int n, int fd, int idfd[2], void *arg)
{
    dtrain_comm *c = NULL;
    float *d = NULL;
    (void)arg;
    if (child_world(rank, n, fd, idfd, 3000, &c, &d) != 0)
        return;
    if (rank == 0) {
        int rc = comm_cause_of(c, dtrain_comm_allreduce(c, d, 1024, DTRAIN_REDUCE_SUM));
        report(fd, rc == DTRAIN_COMM_ETIMEDOUT, "a member that never calls: ETIMEDOUT after 3 s: %s",
               dtrain_comm_error_message(c));
    } else {
        sleep(8); /* past rank 0's timeout, then leave without calling */
    }
    dtrain_comm_destroy(c);
    cudaFree(d);
}

struct abort_later {
    dtrain_comm *c;
    unsigned delay_ms;
};

static void *abort_after(void *p)
{
    const struct abort_later *a = p;
    usleep(a->delay_ms * 1000u);
    dtrain_comm_abort(a->c);
    return NULL;
}

/* dtrain_comm_abort from another thread (as the watchdog does) while rank 0
 * waits in an all-reduce that rank 1 never joins: NCCL's aborted operation
 * ends early and its completion event fires, and the call must still fail. */
static void child_abort_midcall(int rank, int n, int fd, int idfd[2], void *arg)
{
    dtrain_comm *c = NULL;
    float *d = NULL;
    (void)arg;
    if (child_world(rank, n, fd, idfd, 20000, &c, &d) != 0)
        return;
    if (rank == 0) {
        struct abort_later a = {.c = c, .delay_ms = 1000};
        pthread_t t;
        int started = pthread_create(&t, NULL, abort_after, &a) == 0;
        int rc = comm_cause_of(c, dtrain_comm_allreduce(c, d, 1024, DTRAIN_REDUCE_SUM));
        if (started)
            pthread_join(t, NULL);
        report(fd, started && rc == DTRAIN_COMM_EABORTED,
               "an all-reduce aborted from another thread fails with EABORTED, not OK (rc %d: %s)", rc,
               dtrain_comm_error_message(c));
    } else {
        sleep(3); /* never joins; leaves after rank 0 gave up */
    }
    dtrain_comm_destroy(c);
    cudaFree(d);
}

/* The control plane (host memory always): all_gather_bytes through the
 * device copy (odd sizes, in place, a large payload, after a compute
 * stream was named), the int64 sum and max, the ordered double sum with
 * the same bits on every rank, 0 bytes and a NULL buffer. */
static unsigned char ctl_byte(int rank, size_t bytes, size_t i)
{
    return (unsigned char)(i * 31 + (size_t)rank * 101 + bytes * 7 + 1);
}

static int ctl_gathered(const unsigned char *out, int n, size_t bytes)
{
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < bytes; i++)
            if (out[(size_t)r * bytes + i] != ctl_byte(r, bytes, i))
                return 0;
    return 1;
}

static int ctl_gather(dtrain_comm *c, int rank, int n, size_t bytes, int in_place, unsigned char *buf)
{
    unsigned char *mine = malloc(bytes);
    if (mine == NULL)
        return 0;
    for (size_t i = 0; i < bytes; i++)
        mine[i] = ctl_byte(rank, bytes, i);
    memset(buf, 0, bytes * (size_t)n);
    if (in_place)
        memcpy(buf + (size_t)rank * bytes, mine, bytes);
    int rc = dtrain_comm_all_gather_bytes(c, in_place ? buf + (size_t)rank * bytes : mine, buf, bytes);
    free(mine);
    return rc == 0 && ctl_gathered(buf, n, bytes);
}

static void child_control(int rank, int n, int fd, int idfd[2], void *arg)
{
    dtrain_comm *c;
    float *d;
    (void)arg;
    if (child_world(rank, n, fd, idfd, 20000, &c, &d) != 0)
        return;
    const size_t large = (1u << 20) + 3;
    unsigned char *buf = malloc(large * (size_t)n);
    int odd = buf != NULL;
    for (size_t bytes = 1; odd && bytes <= 13; bytes += 4)
        odd = ctl_gather(c, rank, n, bytes, 0, buf);
    if (rank == 0)
        report(fd, odd, "all_gather_bytes of host buffers of 1, 5, 9, 13 bytes (through the device copy)%s%s",
               odd ? "" : ": ", odd ? "" : dtrain_comm_error_message(c));
    int in_place = buf != NULL && ctl_gather(c, rank, n, 7, 1, buf);
    if (rank == 0)
        report(fd, in_place, "all_gather_bytes in place");
    int big = buf != NULL && ctl_gather(c, rank, n, large, 0, buf);
    if (rank == 0)
        report(fd, big, "all_gather_bytes of 1 MiB + 3 bytes");
    int64_t v[3] = {rank == 0 ? INT64_MAX : 2, -rank, rank == 1 ? INT64_MIN : 5};
    int rc = dtrain_comm_sum_int64(c, v, 3);
    int sums = rc == 0 && v[0] == (n == 2 ? INT64_MIN + 1 : v[0]) && v[1] == -(int64_t)n * (n - 1) / 2;
    int64_t m[2] = {rank == 1 ? INT64_MIN : -rank, 10 * rank};
    rc = dtrain_comm_max_int64(c, m, 2);
    int maxes = rc == 0 && m[0] == 0 && m[1] == 10 * (n - 1);
    if (rank == 0)
        report(fd, sums && maxes, "sum_int64 (wrapping) and max_int64");
    /* 1e16 + 1.0 loses the 1 in rank order; -0.0 alone adds to +0.0 */
    double x[2] = {rank == 0 ? 1e16 : 1.0, -0.0}, want0 = 1e16, want1 = 0.0, both[4];
    for (int r = 1; r < n; r++)
        want0 += 1.0;
    rc = dtrain_comm_sum_doubles_ordered(c, x, 2);
    int same = rc == 0 && memcmp(&x[0], &want0, sizeof want0) == 0 && memcmp(&x[1], &want1, sizeof want1) == 0 &&
               dtrain_comm_all_gather_bytes(c, x, both, sizeof x) == 0 && memcmp(both, both + 2, sizeof x) == 0;
    if (rank == 0)
        report(fd, same, "sum_doubles_ordered adds in rank order, the same bits on both ranks");
    unsigned char one = 1;
    int zero = dtrain_comm_all_gather_bytes(c, NULL, NULL, 0) == 0 &&
               comm_cause_of(c, dtrain_comm_all_gather_bytes(c, NULL, buf, 1)) == DTRAIN_COMM_EINVAL &&
               comm_cause_of(c, dtrain_comm_sum_int64(c, NULL, 1)) == DTRAIN_COMM_EINVAL &&
               dtrain_comm_all_gather_bytes(c, &one, buf, 1) == 0 && buf[0] == 1 && buf[n - 1] == 1;
    if (rank == 0)
        report(fd, zero, "0 bytes return at once; a NULL buffer is EINVAL and the communicator goes on");
    cudaStream_t compute = NULL;
    int fresh = buf != NULL && cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess;
    dtrain_comm_set_stream(c, compute);
    for (int it = 0; fresh && it < 20; it++)
        fresh = ctl_gather(c, rank, n, (size_t)it + 1, 0, buf);
    if (rank == 0)
        report(fd, fresh, "20 all_gather_bytes after a compute stream was named: each gathers this call's bytes");
    dtrain_comm_set_stream(c, NULL);
    if (compute != NULL)
        cudaStreamDestroy(compute);
    free(buf);
    dtrain_comm_destroy(c);
    cudaFree(d);
}

int main(void)
{
    test_bad_ids();
#ifdef DTRAIN_CUDA_STANDIN
    diag("on the GPU stand-in (tests/gpu/standin: the CUDA runtime and NCCL on the CPU)");
#endif
    int devices = count_devices();
    if (devices == 0) {
        if (gpu_required())
            ok(0, "a CUDA device (DTRAIN_GPU_REQUIRED=1)");
        run_children(1, child_no_device, NULL, 2, "no GPU");
        skip("no CUDA device: one-GPU communicators");
        skip("no CUDA device: collectives between two GPUs");
        return tap_done();
    }
    diag("%d CUDA device(s)", devices);
    run_children(1, child_one_gpu, NULL, 6, "one GPU");
    if (devices < 2) {
        skip("collectives between two GPUs: this machine has one");
        skip("control plane between two GPUs: this machine has one");
        skip("timeout between two GPUs: this machine has one");
        skip("abort between two GPUs: this machine has one");
        return tap_done();
    }
    run_children(2, child_collectives, NULL, 11, "two GPUs");
    run_children(2, child_control, NULL, 7, "two GPUs, control plane");
    run_children(2, child_timeout, NULL, 1, "two GPUs");
    run_children(2, child_abort_midcall, NULL, 1, "two GPUs");
    return tap_done();
}

#else

int main(void)
{
    printf("1..0 # SKIP dtrain was configured without CUDA\n");
    return 0;
}

#endif
