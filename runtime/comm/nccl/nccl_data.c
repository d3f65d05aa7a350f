/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The nccl backend's data calls: one NCCL operation under the watchdog
 * (device memory), host buffers through the bounce copy, the control
 * plane's all-gather of bytes, and a group of one's copy; see
 * nccl_backend.c for the design. */
#include <pthread.h>
#include <string.h>

#include "comm/nccl/nccl_internal.h"
#include "dtrain_clock.h"

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

int nccl_allreduce(struct dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op)
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

int nccl_reduce_scatter(struct dtrain_comm *c, const float *in, float *out, size_t count,
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

int nccl_all_gather(struct dtrain_comm *c, const float *in, float *out, size_t count)
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
int nccl_all_gather_bytes(struct dtrain_comm *c, const void *in, void *out, size_t bytes)
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

int nccl_broadcast(struct dtrain_comm *c, void *buf, size_t bytes, int root)
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

int nccl_sendrecv(struct dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to, void *recvbuf,
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

int nccl_barrier(struct dtrain_comm *c)
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
int nccl_copy(struct dtrain_comm *c, void *dst, const void *src, size_t bytes)
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
