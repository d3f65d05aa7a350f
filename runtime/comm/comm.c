/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The comm interface: options, argument checks, the sticky first error,
 * dispatch to a backend; see dtrain_comm.h. */
#include "dtrain_comm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_backend.h"
#include "dtrain_parse.h"

#define TRANSPORT_ENV "DTRAIN_COMM_TRANSPORT"

const char *dtrain_comm_cause_name(int cause)
{
    static const char *const names[] = {"OK", "EINVAL", "ETIMEDOUT", "EPEER", "EABORTED", "EMISMATCH", "ENOTSUP",
                                        "ESYS"};
    return cause >= 0 && cause < (int)(sizeof names / sizeof names[0]) ? names[cause] : "unknown";
}

enum dtrain_status comm_answer(struct dtrain_comm *c, int cause)
{
    if (c != NULL)
        atomic_store_explicit(&c->last_cause, cause, memory_order_relaxed);
    return comm_status(cause);
}

enum dtrain_comm_cause dtrain_comm_cause(const dtrain_comm *c)
{
    return c != NULL ? (enum dtrain_comm_cause)atomic_load_explicit(&c->last_cause, memory_order_relaxed)
                     : DTRAIN_COMM_EINVAL;
}

void dtrain_comm_options_defaults(struct dtrain_comm_options *o)
{
    memset(o, 0, sizeof *o);
}

/* This machine: hostname and boot id, so that two containers that share a
 * hostname but not a kernel do not take each other for one host. */
static void machine_host_id(char *out, size_t len)
{
    char host[256] = "localhost", boot[40] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        dtrain_snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof boot, f) == NULL)
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    dtrain_snprintf(out, len, "%.24s/%.36s", host, boot);
}

static int resolve_options(struct dtrain_comm *c, const struct dtrain_comm_options *o, char *err, size_t errlen)
{
    struct dtrain_comm_options defaults;
    if (o == NULL) {
        dtrain_comm_options_defaults(&defaults);
        o = &defaults;
    }
    if (o->timeout_ms < 0) {
        dtrain_snprintf(err, errlen, "timeout_ms %d: use a positive number of milliseconds (0: default %d)",
                        o->timeout_ms, DTRAIN_COMM_DEFAULT_TIMEOUT_MS);
        return DTRAIN_COMM_EINVAL;
    }
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DTRAIN_COMM_DEFAULT_TIMEOUT_MS;
    c->abort_flag = o->abort_flag;
    if (o->host_id != NULL) {
        if (o->host_id[0] == '\0' || dtrain_snprintf(c->host_id, sizeof c->host_id, "%s", o->host_id) != 0) {
            dtrain_snprintf(err, errlen, "host id '%.80s': use 1 to %d bytes", o->host_id,
                            DTRAIN_COMM_HOST_ID_MAX - 1);
            return DTRAIN_COMM_EINVAL;
        }
    } else {
        machine_host_id(c->host_id, sizeof c->host_id);
    }
    c->transport = o->transport;
    if (c->transport == DTRAIN_COMM_TRANSPORT_DEFAULT) {
        const char *env = getenv(TRANSPORT_ENV);
        c->transport = DTRAIN_COMM_TRANSPORT_AUTO;
        if (env != NULL && strcmp(env, "tcp") == 0)
            c->transport = DTRAIN_COMM_TRANSPORT_TCP;
        else if (env != NULL && strcmp(env, "ring") == 0)
            c->transport = DTRAIN_COMM_TRANSPORT_RING;
        else if (env != NULL && env[0] != '\0' && strcmp(env, "auto") != 0) {
            dtrain_snprintf(err, errlen, TRANSPORT_ENV "='%.32s': use auto, ring or tcp", env);
            return DTRAIN_COMM_EINVAL;
        }
    } else if (c->transport != DTRAIN_COMM_TRANSPORT_AUTO && c->transport != DTRAIN_COMM_TRANSPORT_TCP &&
               c->transport != DTRAIN_COMM_TRANSPORT_RING) {
        dtrain_snprintf(err, errlen, "transport %d: use DTRAIN_COMM_TRANSPORT_AUTO, _RING or _TCP", (int)o->transport);
        return DTRAIN_COMM_EINVAL;
    }
    return DTRAIN_COMM_OK;
}

static int check_group(const struct dtrain_comm_group *g, char *err, size_t errlen)
{
    if (g == NULL || !g->present) {
        dtrain_snprintf(err, errlen, "no group given (or the group is marked absent)");
        return DTRAIN_COMM_EINVAL;
    }
    if (g->size < 1 || g->my_rank < 0 || g->my_rank >= g->size) {
        dtrain_snprintf(err, errlen, "group %.64s%srank %d of %d members is out of range", g->key,
                        g->key[0] ? ": " : "", g->my_rank, g->size);
        return DTRAIN_COMM_EINVAL;
    }
    if (memchr(g->id, '\0', sizeof g->id) == NULL) {
        dtrain_snprintf(err, errlen, "group %.64s: the bootstrap id is not terminated", g->key);
        return DTRAIN_COMM_EINVAL;
    }
    return DTRAIN_COMM_OK;
}

static int init(const struct dtrain_comm_group *g, enum dtrain_comm_backend backend,
                const struct dtrain_comm_options *opts, dtrain_comm **out, char *err, size_t errlen)
{
    int listen_fd = g != NULL ? g->listen_fd : -1;
    int rc;
    if (out == NULL) {
        dtrain_snprintf(err, errlen, "no place for the communicator (out is NULL)");
        rc = DTRAIN_COMM_EINVAL;
        goto fail_fd;
    }
    *out = NULL;
    struct dtrain_comm *c = calloc(1, sizeof *c);
    if (c == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        rc = DTRAIN_COMM_ESYS;
        goto fail_fd;
    }
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        dtrain_snprintf(err, errlen, "pthread_mutex_init failed");
        rc = DTRAIN_COMM_ESYS;
        goto fail_fd;
    }
    if ((rc = check_group(g, err, errlen)) != 0 || (rc = resolve_options(c, opts, err, errlen)) != 0)
        goto fail;
    c->rank = g->my_rank;
    c->size = g->size;
    switch (backend) {
    case DTRAIN_COMM_CPU:
        c->backend = &comm_backend_cpu;
        break;
    case DTRAIN_COMM_NCCL:
#ifdef DTRAIN_HAVE_CUDA
        c->backend = &comm_backend_nccl;
        break;
#else
        dtrain_snprintf(err, errlen, "the nccl backend is not built into this library (configure --with-cuda): "
                        "use the cpu backend");
        rc = DTRAIN_COMM_ENOTSUP;
        goto fail;
#endif
    default:
        dtrain_snprintf(err, errlen, "unknown backend %d", (int)backend);
        rc = DTRAIN_COMM_EINVAL;
        goto fail;
    }
    listen_fd = -1; /* the backend owns it now */
    rc = c->backend->init(c, g, err, errlen);
    if (rc != DTRAIN_COMM_OK)
        goto fail;
    *out = c;
    return DTRAIN_COMM_OK;
fail:
    dtrain_comm_destroy(c);
fail_fd:
    if (listen_fd >= 0)
        close(listen_fd);
    return rc;
}

void dtrain_comm_destroy(dtrain_comm *c)
{
    if (c == NULL)
        return;
    if (c->backend != NULL)
        c->backend->destroy(c);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

enum dtrain_status dtrain_comm_init(const struct dtrain_comm_group *g, enum dtrain_comm_backend backend,
                                    const struct dtrain_comm_options *opts, dtrain_comm **out,
                                    enum dtrain_comm_cause *cause, char *err, size_t errlen)
{
    return comm_answer_cause(cause, init(g, backend, opts, out, err, errlen));
}

int comm_fail(struct dtrain_comm *c, int cause, int peer, const char *fmt, ...)
{
    pthread_mutex_lock(&c->lock);
    int first = c->error.cause == DTRAIN_COMM_OK;
    if (first) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->error.message, sizeof c->error.message, fmt, ap);
        va_end(ap);
        c->error.cause = cause;
        c->error.peer = peer;
        atomic_store(&c->failed, cause);
    }
    int rc = c->error.cause;
    pthread_mutex_unlock(&c->lock);
    if (first && c->backend != NULL)
        c->backend->break_links(c);
    return rc;
}

int dtrain_comm_rank(const dtrain_comm *c)
{
    return c != NULL ? c->rank : -1;
}

int dtrain_comm_size(const dtrain_comm *c)
{
    return c != NULL ? c->size : 0;
}

/* Before every call: a broken communicator answers with its first error. */
static int usable(dtrain_comm *c)
{
    if (c == NULL)
        return DTRAIN_COMM_EINVAL;
    int failed = atomic_load(&c->failed);
    if (failed != 0)
        return failed;
    if (comm_should_abort(c))
        return comm_fail(c, DTRAIN_COMM_EABORTED, -1, "aborted before the call");
    return DTRAIN_COMM_OK;
}

/* A call handed to the backend: counted as started, so that another
 * thread (the watchdog's heartbeat) can tell a rank waiting in a call from
 * one computing (started > calls while a call is in flight). */
static dtrain_comm *begin(dtrain_comm *c)
{
    atomic_fetch_add_explicit(&c->started, 1, memory_order_relaxed);
    return c;
}

static int done(dtrain_comm *c, int rc)
{
    if (rc == DTRAIN_COMM_OK)
        atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
    return rc;
}

/* Reduce-scatter and all-gather with nothing to exchange: a copy. */
static int alone(dtrain_comm *c, const float *in, float *out, size_t count)
{
    size_t bytes = count * sizeof(float);
    if (count == 0 || out == in)
        return done(c, DTRAIN_COMM_OK);
    /* the buffers may be device memory: the backend copies them */
    if (c->backend->copy != NULL) {
        const char *o = (const char *)out, *i = (const char *)in;
        if (o < i + bytes && i < o + bytes)
            return comm_fail(c, DTRAIN_COMM_EINVAL, -1, "a group of one: input and output overlap without being "
                             "the same buffer");
        return done(c, begin(c)->backend->copy(c, out, in, bytes));
    }
    memmove(out, in, bytes);
    return done(c, DTRAIN_COMM_OK);
}

/* Whether a member's block part[part_bytes] overlaps the whole buffer
 * whole[whole_bytes] anywhere but at its own place (whole + at bytes): a
 * reduce-scatter's output against its input, an all-gather's input
 * against its output.  The collectives write one while the members read
 * the other (the others directly, on one host), so such a call would
 * change what is still being read. */
static int overlaps_out_of_place(const void *whole, size_t whole_bytes, const void *part, size_t part_bytes,
                                 size_t at)
{
    const char *w = whole, *p = part;
    return p != w + at && p < w + whole_bytes && w < p + part_bytes;
}

/* count * size * sizeof(float) must not overflow. */
static int floats_fit(size_t count, int size)
{
    return count <= SIZE_MAX / sizeof(float) / (size_t)size;
}

static int allreduce(dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op)
{
    int rc = usable(c);
    if (rc != 0)
        return rc;
    if ((buf == NULL && count > 0) || (op != DTRAIN_REDUCE_SUM && op != DTRAIN_REDUCE_AVG) || !floats_fit(count, 1))
        return DTRAIN_COMM_EINVAL;
    if (count == 0 || c->size == 1)
        return done(c, DTRAIN_COMM_OK);
    return done(c, begin(c)->backend->allreduce(c, buf, count, op));
}

static int reduce_scatter(dtrain_comm *c, const float *in, float *out, size_t count, enum dtrain_reduce_op op)
{
    int rc = usable(c);
    if (rc != 0)
        return rc;
    if (((in == NULL || out == NULL) && count > 0) || (op != DTRAIN_REDUCE_SUM && op != DTRAIN_REDUCE_AVG) ||
        !floats_fit(count, c->size))
        return DTRAIN_COMM_EINVAL;
    const size_t bytes = count * sizeof(float);
    if (c->size > 1 && count > 0 &&
        overlaps_out_of_place(in, bytes * (size_t)c->size, out, bytes, bytes * (size_t)c->rank))
        return DTRAIN_COMM_EINVAL;
    if (count == 0 || c->size == 1)
        return alone(c, in, out, count);
    return done(c, begin(c)->backend->reduce_scatter(c, in, out, count, op));
}

static int all_gather(dtrain_comm *c, const float *in, float *out, size_t count)
{
    int rc = usable(c);
    if (rc != 0)
        return rc;
    if (((in == NULL || out == NULL) && count > 0) || !floats_fit(count, c->size))
        return DTRAIN_COMM_EINVAL;
    const size_t bytes = count * sizeof(float);
    if (c->size > 1 && count > 0 &&
        overlaps_out_of_place(out, bytes * (size_t)c->size, in, bytes, bytes * (size_t)c->rank))
        return DTRAIN_COMM_EINVAL;
    if (count == 0 || c->size == 1)
        return alone(c, in, out, count);
    return done(c, begin(c)->backend->all_gather(c, in, out, count));
}

int comm_all_gather_bytes(dtrain_comm *c, const void *in, void *out, size_t bytes)
{
    int rc = usable(c);
    if (rc != 0)
        return rc;
    if (((in == NULL || out == NULL) && bytes > 0) || bytes > SIZE_MAX / (size_t)c->size ||
        (c->size > 1 && bytes > 0 &&
         overlaps_out_of_place(out, bytes * (size_t)c->size, in, bytes, bytes * (size_t)c->rank)))
        return DTRAIN_COMM_EINVAL;
    if (bytes == 0)
        return done(c, DTRAIN_COMM_OK);
    if (c->size == 1) { /* host memory on every backend: no device copy */
        if (in != out)
            memmove(out, in, bytes);
        return done(c, DTRAIN_COMM_OK);
    }
    return done(c, begin(c)->backend->all_gather_bytes(c, in, out, bytes));
}

static int broadcast(dtrain_comm *c, void *buf, size_t bytes, int root)
{
    int rc = usable(c);
    if (rc != 0)
        return rc;
    if ((buf == NULL && bytes > 0) || root < 0 || root >= c->size)
        return DTRAIN_COMM_EINVAL;
    if (bytes == 0 || c->size == 1)
        return done(c, DTRAIN_COMM_OK);
    return done(c, begin(c)->backend->broadcast(c, buf, bytes, root));
}

enum dtrain_status dtrain_comm_allreduce(dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op)
{
    return comm_answer(c, allreduce(c, buf, count, op));
}

enum dtrain_status dtrain_comm_reduce_scatter(dtrain_comm *c, const float *in, float *out, size_t count,
                                              enum dtrain_reduce_op op)
{
    return comm_answer(c, reduce_scatter(c, in, out, count, op));
}

enum dtrain_status dtrain_comm_all_gather(dtrain_comm *c, const float *in, float *out, size_t count)
{
    return comm_answer(c, all_gather(c, in, out, count));
}

enum dtrain_status dtrain_comm_all_gather_bytes(dtrain_comm *c, const void *in, void *out, size_t bytes)
{
    return comm_answer(c, comm_all_gather_bytes(c, in, out, bytes));
}

enum dtrain_status dtrain_comm_broadcast(dtrain_comm *c, void *buf, size_t bytes, int root)
{
    return comm_answer(c, broadcast(c, buf, bytes, root));
}

static int peer_ok(const dtrain_comm *c, int peer)
{
    return peer >= 0 && peer < c->size && peer != c->rank;
}

static int sendrecv(dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to, void *recvbuf,
                    size_t recv_bytes, int from)
{
    int rc = usable(c);
    if (rc != 0)
        return rc;
    if ((send_bytes > 0 && (sendbuf == NULL || !peer_ok(c, to))) ||
        (recv_bytes > 0 && (recvbuf == NULL || !peer_ok(c, from))))
        return DTRAIN_COMM_EINVAL;
    if (send_bytes == 0 && recv_bytes == 0)
        return done(c, DTRAIN_COMM_OK);
    return done(c, begin(c)->backend->sendrecv(c, sendbuf, send_bytes, send_bytes > 0 ? to : -1, recvbuf, recv_bytes,
                                        recv_bytes > 0 ? from : -1));
}

enum dtrain_status dtrain_comm_sendrecv(dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to,
                                        void *recvbuf, size_t recv_bytes, int from)
{
    return comm_answer(c, sendrecv(c, sendbuf, send_bytes, to, recvbuf, recv_bytes, from));
}

enum dtrain_status dtrain_comm_send(dtrain_comm *c, const void *buf, size_t bytes, int peer)
{
    return dtrain_comm_sendrecv(c, buf, bytes, peer, NULL, 0, -1);
}

enum dtrain_status dtrain_comm_recv(dtrain_comm *c, void *buf, size_t bytes, int peer)
{
    return dtrain_comm_sendrecv(c, NULL, 0, -1, buf, bytes, peer);
}

static int barrier(dtrain_comm *c)
{
    int rc = usable(c);
    if (rc != 0 || c->size == 1)
        return rc == 0 ? done(c, rc) : rc;
    return done(c, begin(c)->backend->barrier(c));
}

static int split(dtrain_comm *world, const struct dtrain_comm_group *g, const struct dtrain_comm_options *opts,
                 dtrain_comm **out, char *err, size_t errlen)
{
    int rc;
    *out = NULL;
    if (world == NULL) {
        dtrain_snprintf(err, errlen, "no communicator to split");
        return DTRAIN_COMM_EINVAL;
    }
    if ((rc = usable(world)) != 0) {
        dtrain_snprintf(err, errlen, "the communicator to split is broken: %s", dtrain_comm_error_message(world));
        return rc;
    }
    if (world->backend->split == NULL) {
        dtrain_snprintf(err, errlen, "the %s backend does not split communicators: use dtrain_comm_init",
                        world->backend->name);
        return DTRAIN_COMM_ENOTSUP;
    }
    struct dtrain_comm *c = calloc(1, sizeof *c);
    if (c == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_COMM_ESYS;
    }
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        dtrain_snprintf(err, errlen, "pthread_mutex_init failed");
        return DTRAIN_COMM_ESYS;
    }
    if ((rc = check_group(g, err, errlen)) != 0 || (rc = resolve_options(c, opts, err, errlen)) != 0)
        goto fail;
    c->rank = g->my_rank;
    c->size = g->size;
    c->backend = world->backend;
    if ((rc = world->backend->split(world, c, g, err, errlen)) != DTRAIN_COMM_OK)
        goto fail;
    *out = c;
    return DTRAIN_COMM_OK;
fail:
    dtrain_comm_destroy(c);
    return rc;
}

enum dtrain_status dtrain_comm_barrier(dtrain_comm *c)
{
    return comm_answer(c, barrier(c));
}

enum dtrain_status dtrain_comm_split(dtrain_comm *world, const struct dtrain_comm_group *g,
                                     const struct dtrain_comm_options *opts, dtrain_comm **out,
                                     enum dtrain_comm_cause *cause, char *err, size_t errlen)
{
    return comm_answer_cause(cause, split(world, g, opts, out, err, errlen));
}

int dtrain_comm_device_memory(const dtrain_comm *c)
{
    return c != NULL && c->backend != NULL && c->backend->device_memory;
}

void dtrain_comm_set_stream(dtrain_comm *c, void *stream)
{
    if (c != NULL && c->backend != NULL && c->backend->set_stream != NULL)
        c->backend->set_stream(c, stream);
}

void dtrain_comm_abort(dtrain_comm *c)
{
    if (c == NULL)
        return;
    atomic_store(&c->aborted, 1);
    comm_fail(c, DTRAIN_COMM_EABORTED, -1, "dtrain_comm_abort() was called");
}

enum dtrain_status dtrain_comm_get_async_error(dtrain_comm *c, struct dtrain_comm_error *e)
{
    if (c == NULL) {
        *e = (struct dtrain_comm_error){.cause = DTRAIN_COMM_EINVAL, .peer = -1, .message = "no communicator"};
        return comm_status(e->cause);
    }
    if (atomic_load(&c->failed) == 0 && c->backend != NULL)
        c->backend->poll_links(c);
    pthread_mutex_lock(&c->lock);
    *e = c->error;
    if (e->cause == DTRAIN_COMM_OK)
        e->peer = -1;
    pthread_mutex_unlock(&c->lock);
    return comm_status(e->cause);
}

const char *dtrain_comm_error_message(const dtrain_comm *c)
{
    /* Written once, before `failed` is set, never again: safe to read after. */
    return c != NULL && atomic_load(&c->failed) != 0 ? c->error.message : "";
}

void dtrain_comm_get_stats(const dtrain_comm *c, struct dtrain_comm_stats *s)
{
    memset(s, 0, sizeof *s);
    if (c == NULL)
        return;
    s->bytes_sent = atomic_load(&c->bytes_sent);
    s->bytes_received = atomic_load(&c->bytes_received);
    s->calls = atomic_load(&c->calls);
    s->started = atomic_load(&c->started);
    s->refused = atomic_load(&c->refused);
    s->rejoined = atomic_load(&c->rejoined);
    s->setup_bytes_sent = atomic_load(&c->setup_bytes_sent);
    s->single_copy_calls = atomic_load(&c->single_copy_calls);
    s->shm_links = atomic_load(&c->shm_links);
    s->tcp_links = atomic_load(&c->tcp_links);
}
