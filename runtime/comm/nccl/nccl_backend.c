/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The nccl backend of the comm interface: NCCL on the GPUs; see
 * dtrain_comm.h and comm_backend.h.  This file makes, splits, watches and
 * destroys communicators; nccl_data.c moves the data of the calls.
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

#include "comm/nccl/nccl_internal.h"

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
