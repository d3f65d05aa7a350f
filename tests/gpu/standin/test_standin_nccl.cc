/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The GPU stand-in's NCCL (nccl.cc) across real processes: every
 * collective against values computed here (2 and 4 ranks, buffers larger
 * than the shared slots), ncclAvg, bit-identical results on every rank,
 * split into two groups (and NCCL_SPLIT_NOCOLOR), a send/recv ring in a
 * group, non-blocking init and ncclInProgress handled right (correct
 * results) and wrong (caught), duplicate GPUs refused, an abort or a dead
 * process ending the peer's wait with an error, a host pointer faulting,
 * and nothing left in /dev/shm.
 *
 * The parent never touches the runtime (a forked child of a process with
 * stream threads would inherit none of them); children report one line
 * per check through a pipe and every wait is bounded. */
#include "tap.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#define CHILD_BOUND_S 60

static int g_fd = -1; /* the child's report pipe */
static ncclUniqueId g_id; /* made by the parent before forking */

static void report(int pass, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int pass, const char *fmt, ...)
{
    char line[600];
    va_list ap;
    int n = snprintf(line, sizeof line, "%d ", pass ? 1 : 0);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    if (write(g_fd, line, len) != (ssize_t)len)
        _exit(3);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Poll until the communicator leaves ncclInProgress (bounded). */
static ncclResult_t settle(ncclComm_t c, int *in_progress_seen)
{
    int64_t deadline = now_ms() + 20000;
    for (;;) {
        ncclResult_t st = ncclInternalError;
        if (ncclCommGetAsyncError(c, &st) != ncclSuccess)
            return ncclInternalError;
        if (st != ncclInProgress)
            return st;
        if (in_progress_seen != NULL)
            (*in_progress_seen)++;
        if (now_ms() > deadline)
            return ncclInProgress;
        nap_ms(1);
    }
}

/* The call's result made right: ncclInProgress waited out. */
static ncclResult_t done(ncclComm_t c, ncclResult_t r, int *in_progress_seen)
{
    if (r == ncclInProgress) {
        if (in_progress_seen != NULL)
            (*in_progress_seen)++;
        return settle(c, in_progress_seen);
    }
    return r;
}

static void must(int cond, const char *what)
{
    if (!cond) {
        report(0, "%s", what);
        _exit(4);
    }
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    must(cudaMalloc(&p, bytes) == cudaSuccess, "cudaMalloc");
    return p;
}

static void h2d(void *d, const void *h, size_t bytes)
{
    must(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy to the device");
}

static void d2h(void *h, const void *d, size_t bytes)
{
    must(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy to the host");
}

static ncclComm_t init(int n, int rank, int blocking, ncclResult_t *out)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    cfg.splitShare = 0;
    cfg.commName = "standin-test";
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, n, g_id, rank, &cfg);
    if (!blocking && r == ncclInProgress && c != NULL)
        r = settle(c, NULL);
    *out = r;
    return c;
}

/* ------------------------------------------------------------------ children */

typedef void (*child_fn)(int rank, int n, long arg);

/* Deterministic, inexact floats: sums depend on the order. */
static float value(int rank, size_t i)
{
    uint64_t z = (uint64_t)rank * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    z ^= z >> 29;
    return (float)(z % 20011) / 7.0f - 1000.0f;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void child_collectives(int rank, int n, long arg)
{
    (void)arg;
    must(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
    ncclResult_t r;
    ncclComm_t c = init(n, rank, 1, &r);
    report(r == ncclSuccess, "rank %d: blocking init of %d ranks: %s", rank, n, ncclGetErrorString(r));
    if (r != ncclSuccess)
        return;
    int cnt = -1, me = -1;
    int okq = ncclCommCount(c, &cnt) == ncclSuccess && ncclCommUserRank(c, &me) == ncclSuccess;
    report(okq && cnt == n && me == rank, "rank %d: ncclCommCount %d, ncclCommUserRank %d", rank, cnt, me);
    cudaStream_t s;
    /* a blocking stream: ordered after cudaMemcpy's legacy-stream copies */
    must(cudaStreamCreate(&s) == cudaSuccess, "stream");

    /* all-reduce of 1.5 M floats (more than a 4 MiB slot), sum and avg:
     * against the rank-order reduction, and the same bits everywhere */
    const size_t count = 3 << 19;
    std::vector<float> h(count * (size_t)n), want(count);
    float *d = (float *)dalloc(count * (size_t)n * sizeof(float));
    for (int op = 0; op < 2; op++) {
        for (size_t i = 0; i < count; i++)
            h[i] = value(rank, i);
        h2d(d, h.data(), count * sizeof(float));
        r = ncclAllReduce(d, d, count, ncclFloat32, op ? ncclAvg : ncclSum, c, s);
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        d2h(h.data(), d, count * sizeof(float));
        size_t bad = 0;
        for (size_t i = 0; i < count; i++) {
            float scale = 1.0f / (float)n, acc = op ? value(0, i) * scale : value(0, i);
            for (int q = 1; q < n; q++)
                acc += op ? value(q, i) * scale : value(q, i);
            bad += h[i] != acc;
        }
        report(r == ncclSuccess && bad == 0, "rank %d: all-reduce %s of 1.5M floats in rank order (%zu wrong)",
               rank, op ? "avg (pre-multiplied by 1/n, as NCCL)" : "sum", bad);
        /* everyone's hash, gathered: all equal */
        uint64_t mine = hash_bytes(h.data(), count * sizeof(float));
        uint64_t *dh = (uint64_t *)dalloc(sizeof(uint64_t) * (size_t)n);
        std::vector<uint64_t> hs((size_t)n);
        h2d(dh + rank, &mine, sizeof mine);
        r = ncclAllGather(dh + rank, dh, 1, ncclUint64, c, s);
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        d2h(hs.data(), dh, sizeof(uint64_t) * (size_t)n);
        int same = r == ncclSuccess;
        for (int q = 0; q < n; q++)
            same = same && hs[(size_t)q] == mine;
        report(same, "rank %d: all-reduce %s: bit-identical on every rank", rank, op ? "avg" : "sum");
        cudaFree(dh);
    }
    /* other types: int32, int8 (wrapping), fp16, bf16 */
    {
        int32_t i32[5] = {rank + 1, -rank, 1 << 20, rank * 3, 7};
        int8_t i8[4] = {(int8_t)(100 + rank), (int8_t)(rank + 1), -5, 0};
        uint16_t f16[2] = {0x3c00 /* 1.0 */, 0x3800 /* 0.5 */}, b16[2] = {0x3f80 /* 1.0 */, 0x4000 /* 2.0 */};
        void *di = dalloc(64);
        h2d(di, i32, sizeof i32);
        int ok1 = ncclAllReduce(di, di, 5, ncclInt32, ncclSum, c, s) == ncclSuccess;
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        d2h(i32, di, sizeof i32);
        int sr = n * (n + 1) / 2, s0 = n * (n - 1) / 2;
        ok1 = ok1 && i32[0] == sr && i32[1] == -s0 && i32[2] == n << 20 && i32[3] == 3 * s0 && i32[4] == 7 * n;
        h2d(di, i8, sizeof i8);
        ok1 = ok1 && ncclAllReduce(di, di, 4, ncclInt8, ncclSum, c, s) == ncclSuccess;
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        d2h(i8, di, sizeof i8);
        ok1 = ok1 && i8[0] == (int8_t)(100 * n + s0) && i8[1] == sr && i8[2] == -5 * n;
        h2d(di, f16, sizeof f16);
        ok1 = ok1 && ncclAllReduce(di, di, 2, ncclFloat16, ncclSum, c, s) == ncclSuccess;
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        d2h(f16, di, sizeof f16);
        /* n (2 or 4) in fp16: 0x4000, 0x4400; n/2: 0x3c00, 0x4000 */
        ok1 = ok1 && f16[0] == (n == 2 ? 0x4000 : 0x4400) && f16[1] == (n == 2 ? 0x3c00 : 0x4000);
        h2d(di, b16, sizeof b16);
        ok1 = ok1 && ncclAllReduce(di, di, 2, ncclBfloat16, ncclAvg, c, s) == ncclSuccess;
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        d2h(b16, di, sizeof b16);
        ok1 = ok1 && b16[0] == 0x3f80 && b16[1] == 0x4000;
        report(ok1, "rank %d: all-reduce of int32, int8 (wrapping), fp16 sum, bf16 avg", rank);
        cudaFree(di);
    }
    /* reduce-scatter in place, 1.5M floats per rank (chunked) */
    for (size_t i = 0; i < count * (size_t)n; i++)
        h[i] = (float)(rank + 1) + (float)(i % 7);
    h2d(d, h.data(), count * (size_t)n * sizeof(float));
    r = ncclReduceScatter(d, d + (size_t)rank * count, count, ncclFloat32, ncclSum, c, s);
    must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    d2h(h.data(), d + (size_t)rank * count, count * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += h[i] != (float)(n * (n + 1) / 2) + (float)(n * (int)((rank * count + i) % 7));
    report(r == ncclSuccess && bad == 0, "rank %d: reduce-scatter in place (%zu wrong)", rank, bad);
    /* all-gather in place */
    for (size_t i = 0; i < count; i++)
        h[i] = (float)rank * 1000.0f + (float)(i % 13);
    h2d(d + (size_t)rank * count, h.data(), count * sizeof(float));
    r = ncclAllGather(d + (size_t)rank * count, d, count, ncclFloat32, c, s);
    must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    d2h(h.data(), d, count * (size_t)n * sizeof(float));
    bad = 0;
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < count; i++)
            bad += h[(size_t)q * count + i] != (float)q * 1000.0f + (float)(i % 13);
    report(r == ncclSuccess && bad == 0, "rank %d: all-gather in place (%zu wrong)", rank, bad);
    /* broadcast from the last rank, bytes */
    for (size_t i = 0; i < count; i++)
        h[i] = rank == n - 1 ? (float)i : -1.0f;
    h2d(d, h.data(), count * sizeof(float));
    r = ncclBroadcast(d, d, count * sizeof(float), ncclInt8, n - 1, c, s);
    must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    d2h(h.data(), d, count * sizeof(float));
    bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += h[i] != (float)i;
    report(r == ncclSuccess && bad == 0, "rank %d: broadcast of 6 MB from rank %d", rank, n - 1);
    /* a ring both ways in one group, 3 MB (several mailbox chunks) */
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    const size_t ring = 3 << 18;
    for (size_t i = 0; i < ring; i++)
        h[i] = (float)rank + (float)i;
    h2d(d, h.data(), ring * sizeof(float));
    r = ncclGroupStart();
    ncclResult_t r1 = ncclSend(d, ring, ncclFloat32, next, c, s);
    ncclResult_t r2 = ncclRecv(d + ring, ring, ncclFloat32, prev, c, s);
    ncclResult_t r3 = ncclSend(d, ring, ncclFloat32, prev, c, s);
    ncclResult_t r4 = ncclRecv(d + 2 * ring, ring, ncclFloat32, next, c, s);
    ncclResult_t r5 = ncclGroupEnd();
    must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    d2h(h.data(), d + ring, 2 * ring * sizeof(float));
    bad = 0;
    for (size_t i = 0; i < ring; i++)
        bad += (h[i] != (float)prev + (float)i) + (h[ring + i] != (float)next + (float)i);
    report(r == ncclSuccess && r1 == ncclSuccess && r2 == ncclSuccess && r3 == ncclSuccess && r4 == ncclSuccess &&
           r5 == ncclSuccess && bad == 0, "rank %d: send/recv ring both ways in one group (%zu wrong)", rank, bad);
    /* split: color rank % 2, key -rank (reversed order) */
    ncclComm_t sub = NULL;
    r = ncclCommSplit(c, rank % 2, -rank, &sub, NULL);
    int sn = -1, sr = -1, members = (n + 1 - rank % 2) / 2;
    int want_rank = members - 1 - rank / 2;
    int okc = r == ncclSuccess && sub != NULL && ncclCommCount(sub, &sn) == ncclSuccess &&
              ncclCommUserRank(sub, &sr) == ncclSuccess && sn == members && sr == want_rank;
    report(okc, "rank %d: split color %d: %d members (want %d), rank %d (want %d; key orders it)", rank, rank % 2, sn,
           members, sr, want_rank);
    if (okc) {
        float one = (float)(rank + 1), got = 0;
        h2d(d, &one, sizeof one);
        r = ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, sub, s);
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        d2h(&got, d, sizeof got);
        float wantf = 0;
        for (int q = rank % 2; q < n; q += 2)
            wantf += (float)(q + 1);
        report(r == ncclSuccess && got == wantf, "rank %d: all-reduce within the split group: %g (want %g)", rank,
               (double)got, (double)wantf);
        report(ncclCommDestroy(sub) == ncclSuccess, "rank %d: destroy the split group", rank);
    }
    /* a second split: the last rank takes no part */
    ncclComm_t sub2 = (ncclComm_t)1;
    r = ncclCommSplit(c, rank == n - 1 ? NCCL_SPLIT_NOCOLOR : 7, 0, &sub2, NULL);
    okc = r == ncclSuccess && (rank == n - 1 ? sub2 == NULL : sub2 != NULL && ncclCommCount(sub2, &sn) == ncclSuccess &&
                                                                  sn == n - 1);
    report(okc, "rank %d: split with NCCL_SPLIT_NOCOLOR on rank %d", rank, n - 1);
    if (sub2 != NULL && sub2 != (ncclComm_t)1)
        ncclCommDestroy(sub2);
    report(ncclCommFinalize(c) == ncclSuccess && ncclCommDestroy(c) == ncclSuccess, "rank %d: finalize, destroy",
           rank);
    cudaFree(d);
    cudaStreamDestroy(s);
}

/* Non-blocking, done right: poll until ncclSuccess before touching the
 * stream; correct results, and ncclInProgress seen. */
static void child_nonblocking_right(int rank, int n, long seed)
{
    (void)seed;
    must(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, n, g_id, rank, &cfg);
    ncclResult_t early = ncclSuccess;
    if (r == ncclInProgress) {
        int cnt = 0;
        early = ncclCommCount(c, &cnt); /* before the init is through: refused */
    }
    int seen = 0;
    r = done(c, r, &seen);
    report(r == ncclSuccess && seen > 0, "rank %d: non-blocking init: ncclInProgress, then ncclSuccess", rank);
    report(early == ncclInvalidArgument || early == ncclSuccess,
           "rank %d: a call during the init: %s", rank, ncclGetErrorString(early));
    cudaStream_t s;
    cudaEvent_t ev;
    /* a blocking stream: ordered after cudaMemcpy's legacy-stream copies */
    must(cudaStreamCreate(&s) == cudaSuccess, "stream");
    must(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess, "event");
    const size_t count = 1000;
    float h[1000], *d = (float *)dalloc(count * sizeof(float));
    int bad = 0, failed = 0, inprog = 0;
    for (int it = 0; it < 20; it++) {
        for (size_t i = 0; i < count; i++)
            h[i] = (float)(rank + it) + (float)i;
        h2d(d, h, sizeof h);
        r = done(c, ncclAllReduce(d, d, count, ncclFloat32, ncclSum, c, s), &inprog);
        failed += r != ncclSuccess;
        must(cudaEventRecord(ev, s) == cudaSuccess && cudaEventSynchronize(ev) == cudaSuccess, "event");
        d2h(h, d, sizeof h);
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int q = 0; q < n; q++)
                want += (float)(q + it) + (float)i;
            bad += h[i] != want;
        }
    }
    report(failed == 0 && bad == 0 && inprog > 0,
           "rank %d: 20 all-reduces, ncclInProgress waited out (%d polls): correct (%d wrong, %d failed)", rank,
           inprog, bad, failed);
    r = ncclCommFinalize(c);
    r = done(c, r, NULL);
    report(r == ncclSuccess && ncclCommDestroy(c) == ncclSuccess, "rank %d: finalize (non-blocking), destroy", rank);
    cudaFree(d);
}

/* Non-blocking, done wrong: the event right after a call that returned
 * ncclInProgress.  Caught as stale data, or as ncclInvalidArgument on the
 * next call with the real message. */
static void child_nonblocking_wrong(int rank, int n, long arg)
{
    (void)arg;
    must(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
    ncclResult_t r;
    ncclComm_t c = init(n, rank, 0, &r);
    must(r == ncclSuccess, "non-blocking init");
    cudaStream_t s;
    cudaEvent_t ev;
    /* a blocking stream: ordered after cudaMemcpy's legacy-stream copies */
    must(cudaStreamCreate(&s) == cudaSuccess, "stream");
    must(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess, "event");
    float h[256], *d = (float *)dalloc(sizeof h);
    for (int i = 0; i < 256; i++)
        h[i] = (float)(rank + 1);
    h2d(d, h, sizeof h);
    r = ncclAllReduce(d, d, 256, ncclFloat32, ncclSum, c, s);
    /* wrong: the stream is used before ncclCommGetAsyncError said ncclSuccess */
    must(cudaEventRecord(ev, s) == cudaSuccess && cudaEventSynchronize(ev) == cudaSuccess, "event");
    d2h(h, d, sizeof h);
    int stale = h[0] != (float)(n * (n + 1) / 2);
    int cnt = 0;
    ncclResult_t next = ncclCommCount(c, &cnt);
    int refused = next == ncclInvalidArgument &&
                  strstr(ncclGetLastError(c), "Attempt to use communicator before the previous operation returned "
                                              "ncclSuccess") != NULL;
    report(r == ncclInProgress, "rank %d: the first all-reduce of a non-blocking communicator: %s", rank,
           ncclGetErrorString(r));
    report(stale || refused, "rank %d: using the stream before ncclSuccess is caught: %s%s%s", rank,
           stale ? "stale output" : "", stale && refused ? ", " : "", refused ? "ncclInvalidArgument next" : "");
    r = settle(c, NULL);
    must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    d2h(h, d, sizeof h);
    report(r == ncclSuccess && h[0] == (float)(n * (n + 1) / 2), "rank %d: done right afterwards: the sum arrives",
           rank);
    ncclCommDestroy(c);
    cudaFree(d);
}

/* arg 0: every rank on its own device, but two physical ones alike
 * through CUDA_VISIBLE_DEVICES; arg 1: cudaSetDevice(0) everywhere,
 * non-blocking. */
static void child_duplicate(int rank, int n, long arg)
{
    if (arg == 0 && rank == 0)
        setenv("CUDA_VISIBLE_DEVICES", "1,0", 1); /* its device 0 is physical 1 */
    must(cudaSetDevice(arg == 0 ? rank : 0) == cudaSuccess, "cudaSetDevice");
    ncclResult_t r;
    ncclComm_t c = init(n, rank, (int)(arg == 0), &r);
    const char *msg = ncclGetLastError(c);
    report(r == ncclInvalidUsage && strstr(msg, "Duplicate GPU detected : rank") != NULL &&
           strstr(msg, "both on CUDA device") != NULL,
           "rank %d: two ranks on one GPU refused (%s): %s", rank, arg == 0 ? "blocking" : "non-blocking", msg);
    if (c != NULL)
        ncclCommAbort(c);
}

/* Rank 0 starts an all-reduce alone and aborts while it waits; rank 1
 * calls later and must learn the peer is gone. */
static void child_abort(int rank, int n, long arg)
{
    (void)arg;
    must(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
    ncclResult_t r;
    ncclComm_t c = init(n, rank, 1, &r);
    must(r == ncclSuccess, "init");
    cudaStream_t s;
    /* a blocking stream: ordered after cudaMemcpy's legacy-stream copies */
    must(cudaStreamCreate(&s) == cudaSuccess, "stream");
    float *d = (float *)dalloc(1024 * sizeof(float));
    if (rank == 0) {
        r = ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, c, s);
        nap_ms(300);
        int still = cudaStreamQuery(s) == cudaErrorNotReady;
        int64_t t0 = now_ms();
        ncclResult_t a = ncclCommAbort(c);
        /* rank 1 calls only now (a flag file of this test run, not a nap) */
        char flag[64];
        snprintf(flag, sizeof flag, "/tmp/dtrain-standin-abort-%d", (int)getppid());
        int fd = open(flag, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        must(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        /* ends at the abort, not at the stand-in's 10-minute last resort */
        report(r == ncclSuccess && still && a == ncclSuccess && now_ms() - t0 < 60000,
               "rank 0: an all-reduce waiting for its peer ends at ncclCommAbort (%lld ms)",
               (long long)(now_ms() - t0));
        report(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, c, s) == ncclInvalidUsage,
               "rank 0: a call on the aborted communicator is invalid");
    } else {
        char flag[64];
        snprintf(flag, sizeof flag, "/tmp/dtrain-standin-abort-%d", (int)getppid());
        for (int64_t w = now_ms(); access(flag, F_OK) != 0 && now_ms() - w < 60000;)
            nap_ms(5);
        unlink(flag);
        r = ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, c, s);
        int64_t t0 = now_ms();
        ncclResult_t st = ncclSuccess;
        while (now_ms() - t0 < 20000 && ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclSuccess)
            nap_ms(5);
        report(st == ncclRemoteError && cudaStreamSynchronize(s) == cudaSuccess,
               "rank 1: the peer's abort ends the wait: %s (%s)", ncclGetErrorString(st), ncclGetLastError(c));
        ncclCommAbort(c);
    }
    cudaFree(d);
}

/* Rank 0 exits without a word; rank 1's all-reduce must fail, not hang. */
static void child_dead(int rank, int n, long arg)
{
    (void)arg;
    must(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
    ncclResult_t r;
    ncclComm_t c = init(n, rank, 1, &r);
    must(r == ncclSuccess, "init");
    if (rank == 0)
        _exit(0); /* no atexit handlers: as a crash */
    cudaStream_t s;
    /* a blocking stream: ordered after cudaMemcpy's legacy-stream copies */
    must(cudaStreamCreate(&s) == cudaSuccess, "stream");
    float *d = (float *)dalloc(64);
    nap_ms(200);
    r = ncclAllReduce(d, d, 16, ncclFloat32, ncclSum, c, s);
    int64_t t0 = now_ms();
    ncclResult_t st = ncclSuccess;
    while (now_ms() - t0 < 20000 && ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclSuccess)
        nap_ms(5);
    report(r == ncclSuccess && (st == ncclSystemError || st == ncclRemoteError),
           "rank 1: a peer that died ends the wait: %s (%s)", ncclGetErrorString(st), ncclGetLastError(c));
    ncclCommAbort(c);
}

/* A host pointer: the device faults, the communicator reports it, the
 * peer learns. */
static void child_host_pointer(int rank, int n, long arg)
{
    (void)arg;
    must(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
    ncclResult_t r;
    ncclComm_t c = init(n, rank, 1, &r);
    must(r == ncclSuccess, "init");
    cudaStream_t s;
    /* a blocking stream: ordered after cudaMemcpy's legacy-stream copies */
    must(cudaStreamCreate(&s) == cudaSuccess, "stream");
    static float host[64];
    float *d = (float *)dalloc(sizeof host);
    r = ncclAllReduce(rank == 0 ? host : d, rank == 0 ? host : d, 64, ncclFloat32, ncclSum, c, s);
    cudaError_t e = cudaStreamSynchronize(s);
    int64_t t0 = now_ms();
    ncclResult_t st = ncclSuccess;
    while (now_ms() - t0 < 20000 && ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclSuccess)
        nap_ms(5);
    if (rank == 0)
        report(r == ncclSuccess && e == cudaErrorIllegalAddress && st == ncclUnhandledCudaError,
               "rank 0: a host buffer faults the device (%s) and the communicator (%s)", cudaGetErrorString(e),
               ncclGetErrorString(st));
    else
        report(st == ncclRemoteError, "rank 1: the faulted peer ends the wait: %s", ncclGetErrorString(st));
    ncclCommAbort(c);
}

/* ------------------------------------------------------------------ parent */

static std::set<std::string> shm_entries(void)
{
    std::set<std::string> out;
    DIR *dir = opendir("/dev/shm");
    if (dir == NULL)
        return out;
    while (struct dirent *e = readdir(dir))
        if (strncmp(e->d_name, "dtrain-standin-nccl-", 20) == 0)
            out.insert(e->d_name);
    closedir(dir);
    return out;
}

/* Run fn in n children; their lines become test points; one more point
 * says they all exited 0 within the bound with `expected` lines. */
static void run(int n, child_fn fn, long arg, int expected, const char *what, const char *seed)
{
    int rep[2];
    pid_t pid[8];
    if (pipe(rep) != 0) {
        ok(0, "%s: pipe", what);
        return;
    }
    if (ncclGetUniqueId(&g_id) != ncclSuccess) {
        ok(0, "%s: ncclGetUniqueId", what);
        return;
    }
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            close(rep[0]);
            g_fd = rep[1];
            alarm(CHILD_BOUND_S);
            if (seed != NULL)
                setenv("DTRAIN_STANDIN_SEED", seed, 1);
            fn(r, n, arg);
            exit(0);
        }
    }
    close(rep[1]);
    FILE *f = fdopen(rep[0], "r");
    char line[700];
    int got = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        ok(line[0] == '1', "%s: %s", what, line + 2);
        got++;
    }
    if (f != NULL)
        fclose(f);
    /* the pipe closes when every child is gone; still, bound the reaping */
    int bad = 0;
    int64_t deadline = now_ms() + (CHILD_BOUND_S + 10) * 1000;
    for (int r = 0; r < n; r++) {
        int st = 0;
        pid_t w;
        while ((w = waitpid(pid[r], &st, WNOHANG)) == 0 && now_ms() < deadline)
            nap_ms(10);
        if (w == 0) {
            kill(pid[r], SIGKILL);
            waitpid(pid[r], &st, 0);
            bad++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            diag("%s: child %d: %s %d", what, r, WIFEXITED(st) ? "exit" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    ok(bad == 0 && got == expected, "%s: every process exited 0 and reported (%d of %d reports)", what, got,
       expected);
}

int main(void)
{
    std::set<std::string> before = shm_entries();
    setenv("DTRAIN_STANDIN_GPUS", "8", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    run(2, child_collectives, 0, 2 * 16, "2 ranks", NULL);
    run(4, child_collectives, 0, 4 * 16, "4 ranks", NULL);
    run(2, child_nonblocking_right, 0, 2 * 4, "non-blocking, seed 1", "1");
    run(2, child_nonblocking_right, 0, 2 * 4, "non-blocking, seed 2", "2");
    run(4, child_nonblocking_right, 0, 4 * 4, "non-blocking, 4 ranks, seed 3", "3");
    run(2, child_nonblocking_wrong, 0, 2 * 3, "non-blocking misuse, seed 1", "1");
    run(2, child_nonblocking_wrong, 0, 2 * 3, "non-blocking misuse, seed 5", "5");
    run(2, child_duplicate, 0, 2, "one physical GPU (CUDA_VISIBLE_DEVICES)", NULL);
    run(2, child_duplicate, 1, 2, "one GPU", NULL);
    run(2, child_abort, 0, 3, "abort", NULL);
    run(2, child_dead, 0, 1, "dead peer", NULL);
    run(2, child_host_pointer, 0, 2, "host pointer", NULL);
    std::set<std::string> after = shm_entries();
    int left = 0;
    for (const std::string &e : after)
        if (before.count(e) == 0) {
            diag("left behind: /dev/shm/%s", e.c_str());
            left++;
        }
    ok(left == 0, "nothing left in /dev/shm (%d new entries)", left);
    return tap_done();
}
