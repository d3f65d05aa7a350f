/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, internal: what the parallel trainer's modules share about the
 * comm layer (dtrain_comm.h): a failed comm call's error line,
 * exact-order sums of doubles (on the comm's control plane), and
 * communication on the kernels' memory (struct dtrain_pcomm). */
#ifndef DTRAIN_PCOMM_H
#define DTRAIN_PCOMM_H

#include <stddef.h>

#include "dtrain_comm.h"
#include "dtrain_kernels.h"
#include "dtrain_status.h"

/* rc: the status of the call on c that has just returned.  When it failed,
 * one line "WHAT: CAUSE: <the comm's first error>" in err.  Returns rc. */
int dtrain_pcomm_status(dtrain_comm *c, int rc, const char *what, char *err, size_t errlen);

/* out[i] = sum over the members of their in[i] (i < n, 1 <= n <= 8, the
 * same n on every member), added in member order, in double, on every
 * member: all get the same bits.  A collective over c. */
int dtrain_pcomm_sum_doubles(dtrain_comm *c, const double *in, double *out, int n,
                             const char *what, char *err, size_t errlen);

/* A communicator used on kernel-backend memory (the trainer's tensors).
 * The call goes straight to the communicator when it can reach that
 * memory: host memory on the cpu kernels with the cpu backend, GPU memory
 * with the nccl backend (whose calls then run in order on the kernels'
 * stream, dtrain_comm_set_stream).  A GPU rank on the cpu backend (several
 * ranks sharing one GPU for testing) stages every call through a pinned
 * host buffer: download, communicate, upload.  The cpu kernels with the
 * nccl backend cannot work (NCCL moves GPU memory only) and are refused.
 * Calls on one struct come from one thread at a time, and from the thread
 * that runs the kernels when staged (the copies are kernel operations).
 * Every call returns a dtrain_status with "WHAT: ..." in err. */
struct dtrain_pcomm {
    dtrain_comm *c;           /* NULL: a group of one, nothing moves */
    struct dtrain_kernels *k;
    int staged;
    float *host;              /* staging buffer (dtrain_k_host_alloc), grown on demand */
    size_t host_floats;
};

int dtrain_pcomm_init(struct dtrain_pcomm *p, struct dtrain_kernels *k, dtrain_comm *c, char *err, size_t errlen);
void dtrain_pcomm_release(struct dtrain_pcomm *p);

int dtrain_pcomm_allreduce(struct dtrain_pcomm *p, float *buf, size_t n, const char *what, char *err,
                           size_t errlen);
/* in[n * size] -> out[n], the rank's share (out may be in + rank * n). */
int dtrain_pcomm_reduce_scatter(struct dtrain_pcomm *p, const float *in, float *out, size_t n, const char *what,
                                char *err, size_t errlen);
/* in[n] of every rank -> out[n * size] (in may be out + rank * n). */
int dtrain_pcomm_all_gather(struct dtrain_pcomm *p, const float *in, float *out, size_t n, const char *what,
                            char *err, size_t errlen);
int dtrain_pcomm_send(struct dtrain_pcomm *p, const float *buf, size_t n, int peer, const char *what, char *err,
                      size_t errlen);
int dtrain_pcomm_recv(struct dtrain_pcomm *p, float *buf, size_t n, int peer, const char *what, char *err,
                      size_t errlen);
int dtrain_pcomm_sendrecv(struct dtrain_pcomm *p, const float *sendbuf, size_t send_n, int to, float *recvbuf,
                          size_t recv_n, int from, const char *what, char *err, size_t errlen);

#endif
