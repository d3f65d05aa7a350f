/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The nccl backend of the comm interface: NCCL on the GPUs; see
 * dtrain_comm.h and comm_backend.h.
 *
 * Init: the "nccl:<256 hex>" id the launcher made with ncclGetUniqueId,
 * ncclCommInitRankConfig with a non-blocking config, then polling
 * ncclCommGetAsyncError until the communicator is up (bounded by the
 * timeout, the abort flag and dtrain_comm_abort()).  Groups that every
 * member of WORLD joins (TP, PP, DP) can instead be split off WORLD with
 * ncclCommSplit (dtrain_comm_split(): one bootstrap instead of one per
 * group); the pipeline's neighbour pairs use their own ids, which reach
 * their members over WORLD (dtrain_comm_init_all), not through PMI2.
 *
 * Streams: each communicator has its own communication stream.  A call
 * records an event on the compute stream (dtrain_comm_set_stream(); the
 * whole device is synchronised when none was given), makes the
 * communication stream wait for it, queues the NCCL operation, records an
 * event after it and waits for that event.  The wait is the watchdog: it
 * polls the event, ncclCommGetAsyncError, the abort flag and the clock; a
 * fault, an abort or no completion within timeout_ms calls ncclCommAbort
 * (through comm_fail -> break_links), so that the members waiting on this
 * one fail too instead of hanging.  Point-to-point send and receive go in
 * one NCCL group, so a pipeline's exchanges cannot deadlock.
 *
 * NCCL cannot tell members that called different operations or counts
 * apart from slow ones: such a mismatch ends as ETIMEDOUT, not EMISMATCH.
 *
 * Buffers are device memory.  Host memory (the trainer's small control
 * messages: loss and norm sums, the start agreement, checkpoint outcomes,
 * the llm.c export's gather; the control plane's all-gather of bytes)
 * goes through a device copy the communicator keeps (bounce): copied in,
 * the call, copied out; slow, for small calls. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "comm/comm_backend.h"
#include "dtrain_parse.h"
#include "dtrain_placement_env.h"
#include "dtrain_clock.h"

struct nccl_impl {
    pthread_mutex_t mu;   /* guards comm: break_links may abort it from any thread */
    ncclComm_t comm;      /* NULL after ncclCommAbort */
    int device;
    cudaStream_t stream;  /* communication */
    cudaStream_t compute; /* the kernels' stream, or NULL */
    cudaEvent_t ready, done;
    float *token;         /* device: the barrier's all-reduce */
    void *bounce;         /* device: host buffers' copy (grown on demand) */
    size_t bounce_bytes;
    char name[DTRAIN_BOOTSTRAP_KEY_MAX];
};

static struct nccl_impl *impl(struct dtrain_comm *c)
{
    return c->impl;
}

/* Our result code for an NCCL error. */
static int result_of(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return DTRAIN_COMM_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return DTRAIN_COMM_EINVAL;
    case ncclRemoteError: return DTRAIN_COMM_EPEER;
    default: return DTRAIN_COMM_ESYS;
    }
}

/* The communicator's state (ncclInProgress while an operation or the init
 * is under way), or ncclInvalidUsage once aborted. */
static ncclResult_t async_state(struct nccl_impl *ni)
{
    ncclResult_t st = ncclInvalidUsage;
    pthread_mutex_lock(&ni->mu);
    if (ni->comm != NULL && ncclCommGetAsyncError(ni->comm, &st) != ncclSuccess)
        st = ncclInternalError;
    pthread_mutex_unlock(&ni->mu);
    return st;
}

/* A short spin, then sleeps of 50 us: NCCL's own threads need the CPU. */
static void backoff(int *round)
{
    if (++*round < 64)
        return;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* Wait until the communicator leaves ncclInProgress (init, split): 0, or
 * a result code with one line in err.  Aborts the communicator on failure. */
static int wait_ready(struct dtrain_comm *c, struct nccl_impl *ni, const char *what, char *err, size_t errlen)
{
    int64_t deadline = dtrain_clock_ms() + c->timeout_ms;
    int round = 0;
    for (;;) {
        ncclResult_t st = async_state(ni);
        if (st == ncclSuccess)
            return DTRAIN_COMM_OK;
        if (st != ncclInProgress) {
            pthread_mutex_lock(&ni->mu);
            dtrain_snprintf(err, errlen, "%s: %s (%s)", what, ncclGetErrorString(st),
                            ni->comm != NULL ? ncclGetLastError(ni->comm) : "aborted");
            pthread_mutex_unlock(&ni->mu);
            return result_of(st);
        }
        if (comm_should_abort(c)) {
            dtrain_snprintf(err, errlen, "%s: aborted", what);
            return DTRAIN_COMM_EABORTED;
        }
        if (dtrain_clock_ms() > deadline) {
            dtrain_snprintf(err, errlen, "%s: the group was not up within %d ms (a member missing, "
                            "or on an unreachable network)", what, c->timeout_ms);
            return DTRAIN_COMM_ETIMEDOUT;
        }
        backoff(&round);
    }
}

static void abort_nccl(struct nccl_impl *ni)
{
    pthread_mutex_lock(&ni->mu);
    if (ni->comm != NULL)
        (void)ncclCommAbort(ni->comm);
    ni->comm = NULL;
    pthread_mutex_unlock(&ni->mu);
}

/* Stream, events and the barrier's token, on the task's GPU: device
 * DTRAIN_CUDA_DEVICE of CUDA_VISIBLE_DEVICES (dtrain_placement_env.h), or
 * the caller's current device when the plugin did not place the task. */
static int setup(struct dtrain_comm *c, const struct dtrain_comm_group *g, char *err, size_t errlen)
{
    struct nccl_impl *ni = calloc(1, sizeof *ni);
    cudaError_t e;
    if (ni == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_COMM_ESYS;
    }
    if (pthread_mutex_init(&ni->mu, NULL) != 0) {
        free(ni);
        dtrain_snprintf(err, errlen, "pthread_mutex_init failed");
        return DTRAIN_COMM_ESYS;
    }
    c->impl = ni;
    dtrain_snprintf(ni->name, sizeof ni->name, "%s", g->key);
    int count = 0;
    if ((e = cudaGetDeviceCount(&count)) != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        dtrain_snprintf(err, errlen, "no CUDA device (%s): the nccl backend needs a GPU per task",
                        e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees none");
        return DTRAIN_COMM_ESYS;
    }
    int device = dtrain_task_cuda_device(count);
    if ((device >= 0 && (e = cudaSetDevice(device)) != cudaSuccess) ||
        (e = cudaGetDevice(&ni->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&ni->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&ni->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&ni->done, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMalloc((void **)&ni->token, sizeof(float))) != cudaSuccess) {
        dtrain_snprintf(err, errlen, "CUDA setup: %s", cudaGetErrorString(e));
        return DTRAIN_COMM_ESYS;
    }
    return DTRAIN_COMM_OK;
}

static ncclConfig_t make_config(const struct nccl_impl *ni)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;   /* calls return at once; wait_ready and finish poll */
    cfg.splitShare = 0; /* communicators share nothing (dtrain_comm.h) */
    cfg.commName = ni->name;
    return cfg;
}

static int nccl_init(struct dtrain_comm *c, const struct dtrain_comm_group *g, char *err, size_t errlen)
{
    ncclUniqueId id;
    int rc;
    if (g->listen_fd >= 0)
        close(g->listen_fd); /* only cpu ids come with a socket */
    _Static_assert(sizeof id.internal == DTRAIN_NCCL_ID_LEN, "ncclUniqueId is 128 bytes");
    if (dtrain_nccl_id_parse(g->id, (unsigned char *)id.internal) != 0) {
        dtrain_snprintf(err, errlen, "group %.64s: '%.16s...' is not an nccl bootstrap id (was dtrain-launch run "
                        "with --comm-backend cpu?)", g->key, g->id);
        return DTRAIN_COMM_EINVAL;
    }
    if ((rc = setup(c, g, err, errlen)) != DTRAIN_COMM_OK)
        return rc;
    struct nccl_impl *ni = impl(c);
    ncclConfig_t cfg = make_config(ni);
    ncclResult_t r = ncclCommInitRankConfig(&ni->comm, c->size, id, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        dtrain_snprintf(err, errlen, "ncclCommInitRankConfig: %s (NCCL_DEBUG=WARN tells more)", ncclGetErrorString(r));
        ni->comm = NULL;
        return result_of(r);
    }
    if ((rc = wait_ready(c, ni, "ncclCommInitRankConfig", err, errlen)) != DTRAIN_COMM_OK)
        abort_nccl(ni);
    return rc;
}

static int nccl_split(struct dtrain_comm *parent, struct dtrain_comm *c, const struct dtrain_comm_group *g, char *err,
                      size_t errlen)
{
    struct nccl_impl *pi = impl(parent);
    int rc;
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    if ((rc = setup(c, g, err, errlen)) != DTRAIN_COMM_OK)
        return rc;
    struct nccl_impl *ni = impl(c);
    ncclConfig_t cfg = make_config(ni);
    /* one color per group of this kind: its first member's rank (the groups
     * of a kind partition WORLD); the rank in the group orders it.  Not
     * g->index: a bootstrap read from the environment (dtrain-launch's
     * trainer) has none (-1, which is NCCL_SPLIT_NOCOLOR) */
    if (g->first < 0) {
        dtrain_snprintf(err, errlen, "group %.64s: first member %d is not a rank", g->key, g->first);
        return DTRAIN_COMM_EINVAL;
    }
    int color = (int)g->first;
    pthread_mutex_lock(&pi->mu);
    ncclResult_t r = pi->comm != NULL ? ncclCommSplit(pi->comm, color, g->my_rank, &ni->comm, &cfg)
                                      : ncclInvalidUsage;
    pthread_mutex_unlock(&pi->mu);
    if (r != ncclSuccess && r != ncclInProgress) {
        dtrain_snprintf(err, errlen, "ncclCommSplit: %s", ncclGetErrorString(r));
        ni->comm = NULL;
        return result_of(r);
    }
    /* the split is collective over the parent: its state moves too */
    if ((rc = wait_ready(parent, pi, "ncclCommSplit (parent)", err, errlen)) != DTRAIN_COMM_OK ||
        (rc = wait_ready(c, ni, "ncclCommSplit", err, errlen)) != DTRAIN_COMM_OK) {
        abort_nccl(ni);
        return rc;
    }
    int n = 0;
    pthread_mutex_lock(&ni->mu);
    if (ni->comm == NULL || ncclCommCount(ni->comm, &n) != ncclSuccess)
        n = -1;
    pthread_mutex_unlock(&ni->mu);
    if (n != c->size) {
        dtrain_snprintf(err, errlen, "ncclCommSplit made a group of %d members, expected %d: the groups of kind %.16s "
                        "are not a partition of WORLD", n, c->size, g->key);
        abort_nccl(ni);
        return DTRAIN_COMM_EINVAL;
    }
    return DTRAIN_COMM_OK;
}

static void nccl_set_stream(struct dtrain_comm *c, void *stream)
{
    impl(c)->compute = (cudaStream_t)stream;
}

/* --------------------------------------------------------------- one call */

/* Device or managed memory; host memory cannot go through NCCL. */
static int on_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (p == NULL)
        return 1;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Before queueing: buffers on the device, the communication stream after
 * the compute stream's work so far.  Locks ni->mu on success. */
static int begin(struct dtrain_comm *c, const char *what, const void *a, const void *b)
{
    struct nccl_impl *ni = impl(c);
    cudaError_t e;
    if (!on_device(a) || !on_device(b))
        return comm_fail(c, DTRAIN_COMM_EINVAL, -1, "%s: host memory reached the NCCL call (a bug: it goes "
                         "through the bounce copy)", what);
    if (ni->compute != NULL) {
        if ((e = cudaEventRecord(ni->ready, ni->compute)) != cudaSuccess ||
            (e = cudaStreamWaitEvent(ni->stream, ni->ready, 0)) != cudaSuccess)
            return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: ordering after the compute stream: %s", what,
                             cudaGetErrorString(e));
    } else if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: %s", what, cudaGetErrorString(e));
    }
    pthread_mutex_lock(&ni->mu);
    if (ni->comm == NULL) {
        pthread_mutex_unlock(&ni->mu);
        return comm_fail(c, DTRAIN_COMM_EABORTED, -1, "%s: the communicator was aborted", what);
    }
    return DTRAIN_COMM_OK;
}

/* After an NCCL call that returned ncclInProgress (ni->mu held, and held
 * again on return): on a non-blocking communicator the operation is on the
 * stream only once ncclCommGetAsyncError says ncclSuccess (NCCL may still
 * be setting up connections), and no other call may use the communicator
 * before that.  Returns what NCCL finally said, or QUEUE_ABORTED /
 * QUEUE_TIMEDOUT (negative ncclResult_t values NCCL never uses) when we
 * stop waiting. */
#define QUEUE_ABORTED ((ncclResult_t)-1)
#define QUEUE_TIMEDOUT ((ncclResult_t)-2)
static ncclResult_t wait_queued(struct dtrain_comm *c, struct nccl_impl *ni, ncclResult_t r)
{
    int64_t deadline = dtrain_clock_ms() + c->timeout_ms;
    int round = 0;
    while (r == ncclInProgress) {
        if (ni->comm == NULL)
            return QUEUE_ABORTED;
        if (ncclCommGetAsyncError(ni->comm, &r) != ncclSuccess)
            return ncclInternalError;
        if (r != ncclInProgress)
            break;
        if (atomic_load(&c->failed) != 0 || comm_should_abort(c))
            return QUEUE_ABORTED;
        if (dtrain_clock_ms() > deadline)
            return QUEUE_TIMEDOUT;
        /* let break_links abort meanwhile */
        pthread_mutex_unlock(&ni->mu);
        backoff(&round);
        pthread_mutex_lock(&ni->mu);
    }
    return r;
}

/* After queueing (r: what the NCCL call returned; ni->mu held): wait until
 * the operation is on the stream, then for its completion under the
 * watchdog, then order the compute stream after it. */
static int finish(struct dtrain_comm *c, ncclResult_t r, const char *what, size_t bytes_sent, size_t bytes_received)
{
    struct nccl_impl *ni = impl(c);
    cudaError_t e = cudaSuccess;
    r = wait_queued(c, ni, r);
    if (r == ncclSuccess)
        e = cudaEventRecord(ni->done, ni->stream);
    pthread_mutex_unlock(&ni->mu);
    if (r == QUEUE_ABORTED) {
        int failed = atomic_load(&c->failed);
        return failed != 0 ? failed : comm_fail(c, DTRAIN_COMM_EABORTED, -1, "%s: aborted", what);
    }
    if (r == QUEUE_TIMEDOUT)
        return comm_fail(c, DTRAIN_COMM_ETIMEDOUT, -1, "%s: NCCL had not queued it after %d ms", what,
                         c->timeout_ms);
    if (r != ncclSuccess)
        return comm_fail(c, result_of(r), -1, "%s: %s", what, ncclGetErrorString(r));
    if (e != cudaSuccess)
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: %s", what, cudaGetErrorString(e));
    int64_t deadline = dtrain_clock_ms() + c->timeout_ms;
    int round = 0;
    for (;;) {
        e = cudaEventQuery(ni->done);
        if (e == cudaSuccess)
            break;
        if (e != cudaErrorNotReady)
            return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: %s", what, cudaGetErrorString(e));
        int failed = atomic_load(&c->failed);
        if (failed != 0)
            return failed; /* broken meanwhile (abort from another thread) */
        ncclResult_t st = async_state(ni);
        if (st != ncclSuccess && st != ncclInProgress)
            return comm_fail(c, result_of(st), -1, "%s: %s", what, ncclGetErrorString(st));
        if (comm_should_abort(c))
            return comm_fail(c, DTRAIN_COMM_EABORTED, -1, "%s: aborted", what);
        if (dtrain_clock_ms() > deadline)
            return comm_fail(c, DTRAIN_COMM_ETIMEDOUT, -1, "%s: not complete after %d ms (a member stuck, gone, "
                             "or calling something else)", what, c->timeout_ms);
        backoff(&round);
    }
    /* An aborted communicator's kernels exit early and complete the event:
     * completion alone does not mean the data arrived. */
    int failed = atomic_load(&c->failed);
    if (failed != 0)
        return failed;
    ncclResult_t st = async_state(ni);
    if (st != ncclSuccess && st != ncclInProgress)
        return comm_fail(c, st == ncclInvalidUsage ? DTRAIN_COMM_EABORTED : result_of(st), -1, "%s: %s", what,
                         st == ncclInvalidUsage ? "the communicator was aborted" : ncclGetErrorString(st));
    if (ni->compute != NULL && (e = cudaStreamWaitEvent(ni->compute, ni->done, 0)) != cudaSuccess)
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: %s", what, cudaGetErrorString(e));
    atomic_fetch_add_explicit(&c->bytes_sent, bytes_sent, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->bytes_received, bytes_received, memory_order_relaxed);
    return DTRAIN_COMM_OK;
}

static ncclRedOp_t red_op(enum dtrain_reduce_op op)
{
    return op == DTRAIN_REDUCE_AVG ? ncclAvg : ncclSum;
}

static int nccl_allreduce_dev(struct dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op)
{
    int rc = begin(c, "all-reduce", buf, NULL);
    if (rc != DTRAIN_COMM_OK)
        return rc;
    struct nccl_impl *ni = impl(c);
    size_t bytes = count * sizeof(float);
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat32, red_op(op), ni->comm, ni->stream);
    return finish(c, r, "all-reduce", bytes, bytes);
}

static int nccl_reduce_scatter_dev(struct dtrain_comm *c, const float *in, float *out, size_t count,
                               enum dtrain_reduce_op op)
{
    int rc = begin(c, "reduce-scatter", in, out);
    if (rc != DTRAIN_COMM_OK)
        return rc;
    struct nccl_impl *ni = impl(c);
    ncclResult_t r = ncclReduceScatter(in, out, count, ncclFloat32, red_op(op), ni->comm, ni->stream);
    return finish(c, r, "reduce-scatter", count * (size_t)(c->size - 1) * sizeof(float),
                  count * (size_t)(c->size - 1) * sizeof(float));
}

/* count elements of elem bytes each: floats, or the control plane's bytes. */
static int all_gather_dev(struct dtrain_comm *c, const void *in, void *out, size_t count, ncclDataType_t type,
                          size_t elem)
{
    int rc = begin(c, "all-gather", in, out);
    if (rc != DTRAIN_COMM_OK)
        return rc;
    struct nccl_impl *ni = impl(c);
    ncclResult_t r = ncclAllGather(in, out, count, type, ni->comm, ni->stream);
    return finish(c, r, "all-gather", count * elem, count * (size_t)(c->size - 1) * elem);
}

static int nccl_all_gather_dev(struct dtrain_comm *c, const float *in, float *out, size_t count)
{
    return all_gather_dev(c, in, out, count, ncclFloat32, sizeof(float));
}

static int nccl_broadcast_dev(struct dtrain_comm *c, void *buf, size_t bytes, int root)
{
    int rc = begin(c, "broadcast", buf, NULL);
    if (rc != DTRAIN_COMM_OK)
        return rc;
    struct nccl_impl *ni = impl(c);
    ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclInt8, root, ni->comm, ni->stream);
    return finish(c, r, "broadcast", c->rank == root ? bytes : 0, c->rank == root ? 0 : bytes);
}

static int nccl_sendrecv_dev(struct dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to, void *recvbuf,
                         size_t recv_bytes, int from)
{
    int rc = begin(c, "send/recv", to >= 0 ? sendbuf : NULL, from >= 0 ? recvbuf : NULL);
    if (rc != DTRAIN_COMM_OK)
        return rc;
    struct nccl_impl *ni = impl(c);
    /* one group: both directions progress together */
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess && to >= 0)
        r = ncclSend(sendbuf, send_bytes, ncclInt8, to, ni->comm, ni->stream);
    if ((r == ncclSuccess || r == ncclInProgress) && from >= 0)
        r = ncclRecv(recvbuf, recv_bytes, ncclInt8, from, ni->comm, ni->stream);
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress)
        r = end;
    return finish(c, r, "send/recv", to >= 0 ? send_bytes : 0, from >= 0 ? recv_bytes : 0);
}

/* --------------------------------------------------------------- host buffers */

/* The bounce copy of at least bytes; NULL (the communicator failed) when
 * the device is out of memory. */
static char *bounce(struct dtrain_comm *c, size_t bytes, const char *what)
{
    struct nccl_impl *ni = impl(c);
    if (bytes <= ni->bounce_bytes)
        return ni->bounce;
    (void)cudaFree(ni->bounce);
    ni->bounce = NULL;
    ni->bounce_bytes = 0;
    cudaError_t e = cudaMalloc(&ni->bounce, bytes);
    if (e != cudaSuccess) {
        ni->bounce = NULL;
        comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: a device copy of %zu bytes of host memory: %s", what, bytes,
                  cudaGetErrorString(e));
        return NULL;
    }
    ni->bounce_bytes = bytes;
    return ni->bounce;
}

/* dst <- src, either side host or device (the call before it completed),
 * on the communication stream: a host-to-device copy is then ordered
 * before the NCCL call that reads it (cudaMemcpy runs on the legacy
 * stream, which the non-blocking communication stream does not wait for,
 * and may return before a pageable copy lands), and a copy to the host is
 * waited for. */
static int move(struct dtrain_comm *c, void *dst, const void *src, size_t bytes, const char *what)
{
    struct nccl_impl *ni = impl(c);
    if (bytes == 0)
        return DTRAIN_COMM_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ni->stream);
    if (e == cudaSuccess && !on_device(dst))
        e = cudaStreamSynchronize(ni->stream);
    return e == cudaSuccess ? DTRAIN_COMM_OK
                            : comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: copying a host buffer: %s", what,
                                        cudaGetErrorString(e));
}

static int nccl_allreduce(struct dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op)
{
    size_t bytes = count * sizeof(float);
    char *b;
    int rc;
    if (on_device(buf))
        return nccl_allreduce_dev(c, buf, count, op);
    if ((b = bounce(c, bytes, "all-reduce")) == NULL)
        return atomic_load(&c->failed);
    if ((rc = move(c, b, buf, bytes, "all-reduce")) != DTRAIN_COMM_OK ||
        (rc = nccl_allreduce_dev(c, (float *)b, count, op)) != DTRAIN_COMM_OK)
        return rc;
    return move(c, buf, b, bytes, "all-reduce");
}

static int nccl_reduce_scatter(struct dtrain_comm *c, const float *in, float *out, size_t count,
                               enum dtrain_reduce_op op)
{
    size_t each = count * sizeof(float), all = each * (size_t)c->size;
    char *b;
    int rc;
    if (on_device(in) && on_device(out))
        return nccl_reduce_scatter_dev(c, in, out, count, op);
    if ((b = bounce(c, all + each, "reduce-scatter")) == NULL)
        return atomic_load(&c->failed);
    if ((rc = move(c, b, in, all, "reduce-scatter")) != DTRAIN_COMM_OK ||
        (rc = nccl_reduce_scatter_dev(c, (float *)b, (float *)(b + all), count, op)) != DTRAIN_COMM_OK)
        return rc;
    return move(c, out, b + all, each, "reduce-scatter");
}

static int nccl_all_gather(struct dtrain_comm *c, const float *in, float *out, size_t count)
{
    size_t each = count * sizeof(float), all = each * (size_t)c->size;
    char *b;
    int rc;
    if (on_device(in) && on_device(out))
        return nccl_all_gather_dev(c, in, out, count);
    if ((b = bounce(c, all + each, "all-gather")) == NULL)
        return atomic_load(&c->failed);
    if ((rc = move(c, b + all, in, each, "all-gather")) != DTRAIN_COMM_OK ||
        (rc = nccl_all_gather_dev(c, (float *)(b + all), (float *)b, count)) != DTRAIN_COMM_OK)
        return rc;
    return move(c, out, b, all, "all-gather");
}

/* The control plane: host memory always.  NCCL moves device memory only,
 * so the bytes go through the bounce copy and one ncclAllGather of
 * ncclUint8 on the communication stream (what NCCL's own bootstrap
 * all-gather does on its sockets); move() waits for the copy back, so out
 * is ready on return.  Ordered after the compute stream like every call:
 * a control message is a step's verdict and must not overtake its work. */
static int nccl_all_gather_bytes(struct dtrain_comm *c, const void *in, void *out, size_t bytes)
{
    size_t all = bytes * (size_t)c->size;
    char *b;
    int rc;
    if ((b = bounce(c, all + bytes, "all-gather (bytes)")) == NULL)
        return atomic_load(&c->failed);
    if ((rc = move(c, b + all, in, bytes, "all-gather (bytes)")) != DTRAIN_COMM_OK ||
        (rc = all_gather_dev(c, b + all, b, bytes, ncclUint8, 1)) != DTRAIN_COMM_OK)
        return rc;
    return move(c, out, b, all, "all-gather (bytes)");
}

static int nccl_broadcast(struct dtrain_comm *c, void *buf, size_t bytes, int root)
{
    char *b;
    int rc;
    if (on_device(buf))
        return nccl_broadcast_dev(c, buf, bytes, root);
    if ((b = bounce(c, bytes, "broadcast")) == NULL)
        return atomic_load(&c->failed);
    if ((rc = move(c, b, buf, bytes, "broadcast")) != DTRAIN_COMM_OK ||
        (rc = nccl_broadcast_dev(c, b, bytes, root)) != DTRAIN_COMM_OK)
        return rc;
    return move(c, buf, b, bytes, "broadcast");
}

static int nccl_sendrecv(struct dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to, void *recvbuf,
                         size_t recv_bytes, int from)
{
    const void *s = to >= 0 ? sendbuf : NULL;
    void *r = from >= 0 ? recvbuf : NULL;
    char *b;
    int rc;
    if (on_device(s) && on_device(r))
        return nccl_sendrecv_dev(c, sendbuf, send_bytes, to, recvbuf, recv_bytes, from);
    if ((b = bounce(c, send_bytes + recv_bytes + 1, "send/recv")) == NULL)
        return atomic_load(&c->failed);
    if ((s != NULL && (rc = move(c, b, s, send_bytes, "send/recv")) != DTRAIN_COMM_OK) ||
        (rc = nccl_sendrecv_dev(c, b, send_bytes, to, b + send_bytes, recv_bytes, from)) != DTRAIN_COMM_OK)
        return rc;
    return r != NULL ? move(c, r, b + send_bytes, recv_bytes, "send/recv") : DTRAIN_COMM_OK;
}

static int nccl_barrier(struct dtrain_comm *c)
{
    struct nccl_impl *ni = impl(c);
    int rc = begin(c, "barrier", ni->token, NULL);
    if (rc != DTRAIN_COMM_OK)
        return rc;
    ncclResult_t r = ncclAllReduce(ni->token, ni->token, 1, ncclFloat32, ncclSum, ni->comm, ni->stream);
    return finish(c, r, "barrier", 0, 0);
}

/* A group of one: dst <- src on the compute stream (the kernels' work
 * before and after stays ordered with it), or synchronously without one;
 * host memory on either side is ready when this returns. */
static int nccl_copy(struct dtrain_comm *c, void *dst, const void *src, size_t bytes)
{
    struct nccl_impl *ni = impl(c);
    int dst_dev = on_device(dst), src_dev = on_device(src), host = !dst_dev || !src_dev;
    if (!dst_dev && !src_dev) {
        memmove(dst, src, bytes);
        return DTRAIN_COMM_OK;
    }
    cudaStream_t s = ni->compute != NULL ? ni->compute : ni->stream;
    cudaError_t e = ni->compute != NULL ? cudaSuccess : cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    if (e == cudaSuccess && (host || ni->compute == NULL))
        e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? DTRAIN_COMM_OK
                            : comm_fail(c, DTRAIN_COMM_ESYS, -1, "copy in a group of one: %s", cudaGetErrorString(e));
}

/* --------------------------------------------------------------- faults */

static void nccl_break_links(struct dtrain_comm *c)
{
    if (impl(c) != NULL)
        abort_nccl(impl(c));
}

static void nccl_poll_links(struct dtrain_comm *c)
{
    struct nccl_impl *ni = impl(c);
    if (ni == NULL)
        return;
    ncclResult_t st = async_state(ni);
    if (st != ncclSuccess && st != ncclInProgress && st != ncclInvalidUsage)
        comm_fail(c, result_of(st), -1, "NCCL reports %s", ncclGetErrorString(st));
}

static void nccl_destroy(struct dtrain_comm *c)
{
    struct nccl_impl *ni = impl(c);
    if (ni == NULL)
        return;
    if (ni->comm != NULL) {
        /* a clean finish: flush, then free; abort when that does not end */
        int round = 0;
        int64_t deadline = dtrain_clock_ms() + c->timeout_ms;
        ncclResult_t r = ncclCommFinalize(ni->comm), st = ncclInProgress;
        while ((r == ncclSuccess || r == ncclInProgress) && st == ncclInProgress && dtrain_clock_ms() <= deadline) {
            if (ncclCommGetAsyncError(ni->comm, &st) != ncclSuccess)
                break;
            backoff(&round);
        }
        if ((r == ncclSuccess || r == ncclInProgress) && st == ncclSuccess)
            (void)ncclCommDestroy(ni->comm);
        else
            (void)ncclCommAbort(ni->comm);
        ni->comm = NULL;
    }
    if (ni->token != NULL)
        (void)cudaFree(ni->token);
    if (ni->bounce != NULL)
        (void)cudaFree(ni->bounce);
    if (ni->ready != NULL)
        (void)cudaEventDestroy(ni->ready);
    if (ni->done != NULL)
        (void)cudaEventDestroy(ni->done);
    if (ni->stream != NULL)
        (void)cudaStreamDestroy(ni->stream);
    pthread_mutex_destroy(&ni->mu);
    free(ni);
    c->impl = NULL;
}

const struct comm_backend comm_backend_nccl = {
    .name = "nccl",
    .device_memory = 1,
    .init = nccl_init,
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .all_gather_bytes = nccl_all_gather_bytes,
    .sendrecv = nccl_sendrecv,
    .barrier = nccl_barrier,
    .break_links = nccl_break_links,
    .poll_links = nccl_poll_links,
    .destroy = nccl_destroy,
    .split = nccl_split,
    .set_stream = nccl_set_stream,
    .copy = nccl_copy,
};
