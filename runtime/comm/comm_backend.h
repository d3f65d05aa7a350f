/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Inside the comm layer: the communicator every backend shares, and the
 * table of operations a backend fills in (cpu, and nccl when built with CUDA).
 *
 * comm.c checks arguments, keeps the sticky first error and dispatches to
 * the backend; a backend only moves data.  Inside comm every function
 * returns a cause (enum dtrain_comm_cause, 0 for success); the public
 * entry points turn it into enum dtrain_status (comm_answer).  A backend reports failures with
 * comm_fail(), which records the first error and breaks the communicator's
 * links (backend->break_links) so that peers fail fast. */
#ifndef DTRAIN_COMM_BACKEND_H
#define DTRAIN_COMM_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain_comm.h"

struct comm_backend {
    const char *name;
    int device_memory; /* 1: buffers are GPU memory (nccl); 0: host memory */
    /* Connect the group; c->rank, size and options are set.  On failure
     * the caller still calls destroy.  Returns 0 or a result code. */
    int (*init)(struct dtrain_comm *c, const struct dtrain_comm_group *g, char *err, size_t errlen);
    /* Arguments are checked and count > 0, size > 1 when these run. */
    int (*allreduce)(struct dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op);
    int (*reduce_scatter)(struct dtrain_comm *c, const float *in, float *out, size_t count,
                          enum dtrain_reduce_op op);
    int (*all_gather)(struct dtrain_comm *c, const float *in, float *out, size_t count);
    int (*broadcast)(struct dtrain_comm *c, void *buf, size_t bytes, int root);
    /* The control plane's all-gather: in[bytes] and out[bytes * size] are
     * host memory on every backend (dtrain_comm_all_gather_bytes). */
    int (*all_gather_bytes)(struct dtrain_comm *c, const void *in, void *out, size_t bytes);
    /* to / from: a peer, or -1 for no send / no receive (then 0 bytes). */
    int (*sendrecv)(struct dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to, void *recvbuf,
                    size_t recv_bytes, int from);
    int (*barrier)(struct dtrain_comm *c);
    /* Any thread: make every wait of this communicator end, and peers see
     * the links close. */
    void (*break_links)(struct dtrain_comm *c);
    /* Any thread, non-blocking: record (comm_fail) a peer that has gone. */
    void (*poll_links)(struct dtrain_comm *c);
    void (*destroy)(struct dtrain_comm *c);
    /* Optional (NULL: not offered).  split: make c (rank, size and options
     * set) the group g of parent's members, collectively over parent, as
     * init does from an id.  set_stream: order later calls after the work
     * of this compute stream (a cudaStream_t). */
    int (*split)(struct dtrain_comm *parent, struct dtrain_comm *c, const struct dtrain_comm_group *g, char *err,
                 size_t errlen);
    void (*set_stream)(struct dtrain_comm *c, void *stream);
    /* Optional (NULL: memmove).  dst <- src (bytes > 0, dst != src, the
     * regions apart) in the backend's memory, for a group of one member:
     * device memory on nccl, ordered as the backend's calls are. */
    int (*copy)(struct dtrain_comm *c, void *dst, const void *src, size_t bytes);
};

extern const struct comm_backend comm_backend_cpu;
#ifdef DTRAIN_HAVE_CUDA
extern const struct comm_backend comm_backend_nccl; /* nccl/nccl_backend.c */
#endif

struct dtrain_comm {
    const struct comm_backend *backend;
    void *impl; /* the backend's state */
    int rank, size;
    int timeout_ms;
    const atomic_int *abort_flag; /* the process's, or NULL */
    char host_id[DTRAIN_COMM_HOST_ID_MAX];
    enum dtrain_comm_transport transport; /* AUTO or TCP, resolved */
    atomic_int aborted;                   /* dtrain_comm_abort() was called */
    atomic_int failed;                    /* the first error's cause, 0 while none */
    atomic_int last_cause;                /* the last public call's cause (dtrain_comm_cause) */
    pthread_mutex_t lock;                 /* guards error and links changing under break_links */
    struct dtrain_comm_error error;       /* the first error */
    _Atomic uint64_t bytes_sent, bytes_received, calls, refused, rejoined;
    _Atomic uint64_t setup_bytes_sent;    /* dtrain_comm_stats.setup_bytes_sent */
    _Atomic uint64_t started;             /* calls handed to the backend (in flight while > calls) */
    atomic_int shm_links, tcp_links;
    _Atomic uint64_t single_copy_calls;   /* dtrain_comm_stats.single_copy_calls */
};

/* Record the first error (cause > 0; peer or -1; printf message) and break
 * the links.  Returns the first error's cause (sticky). */
int comm_fail(struct dtrain_comm *c, int code, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The one mapping from comm's causes to the status every part speaks: a
 * peer or this machine let the job down (requeue), or a bug / wrong build. */
static inline enum dtrain_status comm_status(int cause)
{
    switch (cause) {
    case DTRAIN_COMM_OK:
        return DTRAIN_OK;
    case DTRAIN_COMM_ETIMEDOUT:
    case DTRAIN_COMM_EPEER:
    case DTRAIN_COMM_EABORTED:
    case DTRAIN_COMM_ESYS:
        return DTRAIN_ERR_FAULT;
    default:
        return DTRAIN_ERR_SYSTEM;
    }
}

/* A public call on c (NULL allowed) that ended with `cause`: kept for
 * dtrain_comm_cause(), returned as its status. */
enum dtrain_status comm_answer(struct dtrain_comm *c, int cause);

/* A call that makes communicators: the cause into *out (NULL allowed). */
static inline enum dtrain_status comm_answer_cause(enum dtrain_comm_cause *out, int cause)
{
    if (out != NULL)
        *out = (enum dtrain_comm_cause)cause;
    return comm_status(cause);
}

/* dtrain_comm_all_gather_bytes returning the cause (the control plane's
 * reductions are built on it). */
int comm_all_gather_bytes(struct dtrain_comm *c, const void *in, void *out, size_t bytes);

/* Non-zero when the abort flag or dtrain_comm_abort() says stop. */
static inline int comm_should_abort(const struct dtrain_comm *c)
{
    return atomic_load_explicit(&c->aborted, memory_order_relaxed) ||
           (c->abort_flag != NULL && atomic_load_explicit(c->abort_flag, memory_order_relaxed));
}

#endif
