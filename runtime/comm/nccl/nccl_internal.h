/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Inside the nccl backend: its state per communicator and the small
 * helpers its two files share.  nccl_backend.c makes, splits, watches and
 * destroys communicators (and holds the operations table); nccl_data.c
 * moves the data of one call (device memory, host memory through the
 * bounce copy). */
#ifndef DTRAIN_COMM_NCCL_INTERNAL_H
#define DTRAIN_COMM_NCCL_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm_backend.h"
#include "dtrain_bootstrap.h"

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

static inline struct nccl_impl *impl(struct dtrain_comm *c)
{
    return c->impl;
}

/* Our result code for an NCCL error. */
static inline int result_of(ncclResult_t r)
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
static inline ncclResult_t async_state(struct nccl_impl *ni)
{
    ncclResult_t st = ncclInvalidUsage;
    pthread_mutex_lock(&ni->mu);
    if (ni->comm != NULL && ncclCommGetAsyncError(ni->comm, &st) != ncclSuccess)
        st = ncclInternalError;
    pthread_mutex_unlock(&ni->mu);
    return st;
}

/* A short spin, then sleeps of 50 us: NCCL's own threads need the CPU. */
static inline void backoff(int *round)
{
    if (++*round < 64)
        return;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* The data calls of the operations table (nccl_data.c). */
int nccl_allreduce(struct dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op);
int nccl_reduce_scatter(struct dtrain_comm *c, const float *in, float *out, size_t count,
                               enum dtrain_reduce_op op);
int nccl_all_gather(struct dtrain_comm *c, const float *in, float *out, size_t count);
int nccl_broadcast(struct dtrain_comm *c, void *buf, size_t bytes, int root);
int nccl_all_gather_bytes(struct dtrain_comm *c, const void *in, void *out, size_t bytes);
int nccl_sendrecv(struct dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to, void *recvbuf,
                         size_t recv_bytes, int from);
int nccl_barrier(struct dtrain_comm *c);
int nccl_copy(struct dtrain_comm *c, void *dst, const void *src, size_t bytes);

#endif
