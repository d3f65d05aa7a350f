/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Comm failures' error lines, double sums and communication on the kernels' memory for
 * the parallel trainer; see dtrain_pcomm.h. */
#include "dtrain_pcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dtrain_pcomm_status(dtrain_comm *c, int rc, const char *what, char *err, size_t errlen)
{
    if (rc == DTRAIN_OK)
        return DTRAIN_OK;
    const char *msg = c != NULL ? dtrain_comm_error_message(c) : "";
    snprintf(err, errlen, "%s: %s%s%s", what, dtrain_comm_cause_name(dtrain_comm_cause(c)), msg[0] ? ": " : "", msg);
    return rc;
}

#define MAX_DOUBLES 8

int dtrain_pcomm_sum_doubles(dtrain_comm *c, const double *in, double *out, int n,
                             const char *what, char *err, size_t errlen)
{
    if (n < 1 || n > MAX_DOUBLES) {
        snprintf(err, errlen, "%s: %d values to sum (1 to %d)", what, n, MAX_DOUBLES);
        return DTRAIN_ERR_SYSTEM;
    }
    double sum[MAX_DOUBLES];
    memcpy(sum, in, (size_t)n * sizeof *sum);
    int rc = dtrain_pcomm_status(c, dtrain_comm_sum_doubles_ordered(c, sum, (size_t)n), what, err, errlen);
    if (rc == DTRAIN_OK)
        memcpy(out, sum, (size_t)n * sizeof *sum);
    return rc;
}

/* ------------------------------------------------------------ on the kernels' memory */

int dtrain_pcomm_init(struct dtrain_pcomm *p, struct dtrain_kernels *k, dtrain_comm *c, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->k = k;
    p->c = c;
    if (c == NULL)
        return DTRAIN_OK;
    int host_kernels = dtrain_kernels_host_memory(k), gpu_comm = dtrain_comm_device_memory(c);
    if (host_kernels && gpu_comm) {
        snprintf(err, errlen, "the nccl comm backend moves GPU memory and the %s kernels keep tensors in host "
                 "memory: give --backend cuda, or run dtrain-launch --comm-backend cpu", dtrain_kernels_name(k));
        return DTRAIN_ERR_INPUT;
    }
    if (gpu_comm)
        dtrain_comm_set_stream(c, dtrain_k_stream(k));
    p->staged = !host_kernels && !gpu_comm;
    return DTRAIN_OK;
}

void dtrain_pcomm_release(struct dtrain_pcomm *p)
{
    dtrain_k_host_free(p->k, p->host);
    p->host = NULL;
    p->host_floats = 0;
}

/* A staging buffer of at least n floats. */
static int host_room(struct dtrain_pcomm *p, size_t n, const char *what, char *err, size_t errlen)
{
    if (n <= p->host_floats)
        return DTRAIN_OK;
    dtrain_k_host_free(p->k, p->host);
    p->host_floats = 0;
    if ((p->host = dtrain_k_host_alloc(p->k, n * sizeof(float))) == NULL) {
        snprintf(err, errlen, "%s: out of host memory for a staging buffer of %zu floats", what, n);
        return DTRAIN_ERR_SYSTEM;
    }
    p->host_floats = n;
    return DTRAIN_OK;
}

static void down(struct dtrain_pcomm *p, float *host, const float *dev, size_t n)
{
    dtrain_k_download(p->k, host, dev, n * sizeof(float));
}

static void up(struct dtrain_pcomm *p, float *dev, const float *host, size_t n)
{
    dtrain_k_upload(p->k, dev, host, n * sizeof(float));
}

int dtrain_pcomm_allreduce(struct dtrain_pcomm *p, float *buf, size_t n, const char *what, char *err,
                           size_t errlen)
{
    int rc;
    if (p->c == NULL || n == 0)
        return DTRAIN_OK;
    if (!p->staged)
        return dtrain_pcomm_status(p->c, dtrain_comm_allreduce(p->c, buf, n, DTRAIN_REDUCE_SUM), what, err, errlen);
    if ((rc = host_room(p, n, what, err, errlen)) != DTRAIN_OK)
        return rc;
    down(p, p->host, buf, n);
    rc = dtrain_pcomm_status(p->c, dtrain_comm_allreduce(p->c, p->host, n, DTRAIN_REDUCE_SUM), what, err, errlen);
    if (rc == DTRAIN_OK)
        up(p, buf, p->host, n);
    return rc;
}

int dtrain_pcomm_reduce_scatter(struct dtrain_pcomm *p, const float *in, float *out, size_t n, const char *what,
                                char *err, size_t errlen)
{
    int rc;
    if (p->c == NULL) {
        if (out != in)
            dtrain_k_copy(p->k, out, in, n * sizeof(float));
        return DTRAIN_OK;
    }
    if (!p->staged)
        return dtrain_pcomm_status(p->c, dtrain_comm_reduce_scatter(p->c, in, out, n, DTRAIN_REDUCE_SUM), what, err,
                                   errlen);
    size_t size = (size_t)dtrain_comm_size(p->c), mine = n * (size_t)dtrain_comm_rank(p->c);
    if ((rc = host_room(p, n * size, what, err, errlen)) != DTRAIN_OK)
        return rc;
    down(p, p->host, in, n * size);
    rc = dtrain_pcomm_status(p->c, dtrain_comm_reduce_scatter(p->c, p->host, p->host + mine, n, DTRAIN_REDUCE_SUM),
                             what, err, errlen);
    if (rc == DTRAIN_OK)
        up(p, out, p->host + mine, n);
    return rc;
}

int dtrain_pcomm_all_gather(struct dtrain_pcomm *p, const float *in, float *out, size_t n, const char *what,
                            char *err, size_t errlen)
{
    int rc;
    if (p->c == NULL) {
        if (out != in)
            dtrain_k_copy(p->k, out, in, n * sizeof(float));
        return DTRAIN_OK;
    }
    if (!p->staged)
        return dtrain_pcomm_status(p->c, dtrain_comm_all_gather(p->c, in, out, n), what, err, errlen);
    size_t size = (size_t)dtrain_comm_size(p->c), mine = n * (size_t)dtrain_comm_rank(p->c);
    if ((rc = host_room(p, n * size, what, err, errlen)) != DTRAIN_OK)
        return rc;
    down(p, p->host + mine, in, n);
    rc = dtrain_pcomm_status(p->c, dtrain_comm_all_gather(p->c, p->host + mine, p->host, n), what, err, errlen);
    if (rc == DTRAIN_OK)
        up(p, out, p->host, n * size);
    return rc;
}

int dtrain_pcomm_send(struct dtrain_pcomm *p, const float *buf, size_t n, int peer, const char *what, char *err,
                      size_t errlen)
{
    int rc;
    if (!p->staged)
        return dtrain_pcomm_status(p->c, dtrain_comm_send(p->c, buf, n * sizeof(float), peer), what, err, errlen);
    if ((rc = host_room(p, n, what, err, errlen)) != DTRAIN_OK)
        return rc;
    down(p, p->host, buf, n);
    return dtrain_pcomm_status(p->c, dtrain_comm_send(p->c, p->host, n * sizeof(float), peer), what, err, errlen);
}

int dtrain_pcomm_recv(struct dtrain_pcomm *p, float *buf, size_t n, int peer, const char *what, char *err,
                      size_t errlen)
{
    int rc;
    if (!p->staged)
        return dtrain_pcomm_status(p->c, dtrain_comm_recv(p->c, buf, n * sizeof(float), peer), what, err, errlen);
    if ((rc = host_room(p, n, what, err, errlen)) != DTRAIN_OK)
        return rc;
    rc = dtrain_pcomm_status(p->c, dtrain_comm_recv(p->c, p->host, n * sizeof(float), peer), what, err, errlen);
    if (rc == DTRAIN_OK)
        up(p, buf, p->host, n);
    return rc;
}

int dtrain_pcomm_sendrecv(struct dtrain_pcomm *p, const float *sendbuf, size_t send_n, int to, float *recvbuf,
                          size_t recv_n, int from, const char *what, char *err, size_t errlen)
{
    int rc;
    if (!p->staged)
        return dtrain_pcomm_status(p->c, dtrain_comm_sendrecv(p->c, sendbuf, send_n * sizeof(float), to, recvbuf,
                                                              recv_n * sizeof(float), from), what, err, errlen);
    if ((rc = host_room(p, send_n + recv_n, what, err, errlen)) != DTRAIN_OK)
        return rc;
    down(p, p->host, sendbuf, send_n);
    rc = dtrain_pcomm_status(p->c, dtrain_comm_sendrecv(p->c, p->host, send_n * sizeof(float), to,
                                                        p->host + send_n, recv_n * sizeof(float), from),
                             what, err, errlen);
    if (rc == DTRAIN_OK)
        up(p, recvbuf, p->host + send_n, recv_n);
    return rc;
}
