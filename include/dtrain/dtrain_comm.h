/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain comm: communicators and collectives for the trainer.
 *
 * A communicator (opaque dtrain_comm) joins the members of one group of
 * runtime/comm/bootstrap/dtrain_bootstrap.h (WORLD, TP, PP, DP or a PP neighbour pair):
 * ranks 0..size-1, rank 0 the leader that made the group's bootstrap id.
 * Communicators share nothing: two of them over the same processes, used
 * interleaved, never see each other's data.  There is no global state.
 *
 * Backends, chosen at run time (enum dtrain_comm_backend):
 *   cpu   processes on one host talk through shared memory, hosts through
 *         TCP; bootstrapped from the "cpu:<IPv4>:<port>:<secret>" id the
 *         launcher made (a connection without the group's secret is
 *         dropped).  Ring algorithms, chunked and pipelined: an all-reduce
 *         sends 2(n-1)/n of the buffer per rank.  doc/comm.md has the wire
 *         protocol and the algorithms.
 *   nccl  NCCL between GPUs (built with CUDA; else init fails with cause
 *         DTRAIN_COMM_ENOTSUP), from the "nccl:<hex>" id the launcher made;
 *         TP/PP/DP groups can be split off WORLD (dtrain_comm_split).
 *         Non-blocking init and a watchdog on every call (doc/gpu.md).
 * With cpu, buffers are host memory; with nccl, GPU memory (a host buffer
 * goes through a device copy: slow, for small control messages).
 *
 * Results.  Every call that can fail returns enum dtrain_status
 * (dtrain_status.h), the vocabulary of every part: DTRAIN_OK, or
 * DTRAIN_ERR_FAULT when a peer or this machine let the job down (causes
 * ETIMEDOUT, EPEER, EABORTED, ESYS: requeue) and DTRAIN_ERR_SYSTEM for a
 * bad argument, a mismatch or a missing backend (EINVAL, EMISMATCH,
 * ENOTSUP: a bug or a wrong build).  The cause, enum dtrain_comm_cause, is
 * comm's detail: dtrain_comm_cause() after a call, the error record
 * (dtrain_comm_get_async_error), or the cause parameter of the calls that
 * make communicators.  Below, "fails with X" names the cause.
 *
 * Calls.  Every member calls the same collectives, in the same order, with
 * the same counts (and root); a mismatch is detected where the headers meet
 * and fails with DTRAIN_COMM_EMISMATCH.  Point-to-point send/recv share the
 * ordering of the collectives on a link: a send to the next ring member
 * travels behind the collectives before it.  A call with count 0 returns 0
 * at once without communicating (it is no synchronisation point).
 *
 * Bounded waits.  No call blocks forever.  Every call fails with
 * DTRAIN_COMM_ETIMEDOUT when it makes no progress (no byte moves) for
 * timeout_ms, and init fails when the whole group is not up within
 * timeout_ms.  Every wait also watches the abort flag of the options (an
 * atomic int the process's watchdog may set to stop every communicator at
 * once) and dtrain_comm_abort(); either makes the call fail with
 * DTRAIN_COMM_EABORTED within a few tens of milliseconds.  A peer that dies
 * or resets its sockets gives DTRAIN_COMM_EPEER.
 *
 * Errors are sticky.  After the first failure the communicator is broken:
 * it closes its links (so that its peers fail fast with EPEER instead of
 * waiting for their timeout) and every later call fails with the first
 * error's cause.
 * dtrain_comm_get_async_error() tells which peer and what happened, and
 * also notices, between calls, a peer that has gone.  Destroy it and build
 * new communicators (in dtrain: exit with the requeue code).
 *
 * Threads.  Calls on one communicator come from one thread at a time.
 * dtrain_comm_abort(), dtrain_comm_get_async_error(),
 * dtrain_comm_error_message() and dtrain_comm_get_stats() may be called from
 * any thread, also while a call is in flight; dtrain_comm_destroy() only
 * when no call is.  A NULL communicator fails with DTRAIN_COMM_EINVAL (rank
 * -1, size 0, empty statistics). */
#ifndef DTRAIN_COMM_H
#define DTRAIN_COMM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain_bootstrap.h"
#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dtrain_comm dtrain_comm; /* opaque */

/* Why a call failed: comm's detail under its enum dtrain_status (named like
 * errno values, which are the same kind of thing: the cause beneath a
 * failed call). */
enum dtrain_comm_cause {
    DTRAIN_COMM_OK = 0,
    DTRAIN_COMM_EINVAL = 1,    /* bad argument (NULL buffer, peer out of range, malformed id/group) */
    DTRAIN_COMM_ETIMEDOUT = 2, /* no progress for timeout_ms (a stuck or missing peer) */
    DTRAIN_COMM_EPEER = 3,     /* a peer closed or reset its connection, died, or aborted */
    DTRAIN_COMM_EABORTED = 4,  /* the abort flag was set or dtrain_comm_abort() was called */
    DTRAIN_COMM_EMISMATCH = 5, /* members called different operations, counts or roots */
    DTRAIN_COMM_ENOTSUP = 6,   /* the backend is not built into this library */
    DTRAIN_COMM_ESYS = 7,      /* a system call failed here (memory, sockets, shared memory) */
};

/* "OK", "EINVAL", "ETIMEDOUT", ... ("unknown" for other values). */
const char *dtrain_comm_cause_name(int cause);

/* The cause of c's last call that returns a status (from the thread that
 * makes c's calls): DTRAIN_COMM_OK when it succeeded, the first error's
 * cause on a broken communicator, DTRAIN_COMM_EINVAL for a rejected
 * argument (c stays usable) or a NULL c.  dtrain_comm_abort() and
 * dtrain_comm_get_async_error() from another thread do not change it. */
enum dtrain_comm_cause dtrain_comm_cause(const dtrain_comm *c);

enum dtrain_reduce_op {
    DTRAIN_REDUCE_SUM = 0,
    DTRAIN_REDUCE_AVG = 1, /* sum divided by the communicator's size */
};

/* How cpu-backend members of one host talk. */
enum dtrain_comm_transport {
    DTRAIN_COMM_TRANSPORT_DEFAULT = 0, /* DTRAIN_COMM_TRANSPORT=auto|ring|tcp from the environment, else auto */
    DTRAIN_COMM_TRANSPORT_AUTO = 1,    /* shared memory between members with equal host ids, TCP otherwise; the
                                        * cpu backend's all-gathers, all-reduces and reduce-scatters of one
                                        * host read the members' memory directly where the kernel allows
                                        * (doc/comm.md) */
    DTRAIN_COMM_TRANSPORT_TCP = 2,     /* TCP everywhere (tests, debugging) */
    DTRAIN_COMM_TRANSPORT_RING = 3,    /* as AUTO, every byte through the shared-memory rings (comparisons) */
};

#define DTRAIN_COMM_DEFAULT_TIMEOUT_MS 60000
#define DTRAIN_COMM_HOST_ID_MAX 64 /* bytes of a host id, NUL included */

struct dtrain_comm_options {
    int timeout_ms;               /* > 0; 0: DTRAIN_COMM_DEFAULT_TIMEOUT_MS */
    const atomic_int *abort_flag; /* non-zero aborts every call; NULL: none.  May be shared by all
                                   * communicators of the process; must outlive them. */
    const char *host_id;          /* members with equal host ids are on one machine (shared memory);
                                   * NULL: this machine's hostname and boot id.  At most 63 bytes. */
    enum dtrain_comm_transport transport;
};

/* Zero timeout (default), no abort flag, host id of this machine, default transport. */
void dtrain_comm_options_defaults(struct dtrain_comm_options *o);

/* Join group g as member g->my_rank: every member of g calls this with the
 * same g->id.  Blocks until the whole group is connected (bounded by the
 * timeout).  The communicator takes over g->listen_fd (the leader's
 * listening socket of a cpu id): it is closed by dtrain_comm_destroy(), or
 * here when init fails; the caller must not close it.  opts may be NULL
 * (defaults).  Returns DTRAIN_OK and *out, or a failed status, its cause
 * in *cause (when cause is not NULL; DTRAIN_COMM_OK on success) and one
 * line in err. */
enum dtrain_status dtrain_comm_init(const struct dtrain_comm_group *g, enum dtrain_comm_backend backend,
                                    const struct dtrain_comm_options *opts, dtrain_comm **out,
                                    enum dtrain_comm_cause *cause, char *err, size_t errlen);

/* Every communicator of a task, indexed by enum dtrain_group_kind; NULL
 * where the task has no such group (PP_NEXT on the last stage...). */
struct dtrain_comms {
    dtrain_comm *group[DTRAIN_GROUP_KINDS];
};

/* Build every present group of bs with bs->backend, in an order that
 * cannot deadlock when every task of the job calls it.  WORLD first, from
 * its id; then the ids of the other groups go from their leaders to their
 * members over WORLD (point-to-point, a binary tree per group: one message
 * per member, nothing through PMI2), so a member's id of a group other
 * than WORLD may be empty on entry (dtrain_bootstrap.h); nccl's TP, PP
 * and DP groups are split off WORLD instead.  The host id is
 * "node<bs->node>" (Slurm node index: tasks of one node share memory, tasks
 * of different nodes use TCP) unless opts->host_id is set, or this
 * machine's when bs->node < 0.  Takes over every listen_fd (set to -1 in
 * bs).  On failure, nothing stays open and out is all NULL.  Results as
 * dtrain_comm_init. */
enum dtrain_status dtrain_comm_init_all(struct dtrain_bootstrap *bs, const struct dtrain_comm_options *opts,
                                        struct dtrain_comms *out, enum dtrain_comm_cause *cause, char *err,
                                        size_t errlen);
void dtrain_comm_destroy_all(struct dtrain_comms *comms);

/* Fill bs from the DTRAIN_COMM_* variables dtrain-launch gives a child
 * PROGRAM (doc/bootstrap.md), plus DTRAIN_RANK, DTRAIN_WORLD_SIZE,
 * DTRAIN_TP/PP/DP and their ranks when set, and SLURM_NODEID as bs->node
 * (-1 when unset).  Returns DTRAIN_OK, or DTRAIN_ERR_SYSTEM (its only
 * failure, cause DTRAIN_COMM_EINVAL) and one line naming the variable that
 * is missing or malformed. */
enum dtrain_status dtrain_comm_bootstrap_from_env(struct dtrain_bootstrap *bs, char *err, size_t errlen);

/* Make group g's communicator by splitting `world` instead of from g->id:
 * collective over world, so every member of world calls it for its own
 * group of one kind (TP, PP or DP: groups that cover WORLD), in the same
 * order.  nccl only (ncclCommSplit: one bootstrap for all groups); other
 * backends fail with DTRAIN_COMM_ENOTSUP.  Results as dtrain_comm_init. */
enum dtrain_status dtrain_comm_split(dtrain_comm *world, const struct dtrain_comm_group *g,
                                     const struct dtrain_comm_options *opts, dtrain_comm **out,
                                     enum dtrain_comm_cause *cause, char *err, size_t errlen);

/* GPU backends: every later call waits for the work queued so far on
 * `stream` (a cudaStream_t, e.g. the kernels' dtrain_cuda_stream()), and
 * that stream's later work waits for the call.  Without it, a call first
 * synchronises the device.  The cpu backend ignores it. */
void dtrain_comm_set_stream(dtrain_comm *c, void *stream);

/* 1 when c moves GPU memory (nccl), 0 when host memory (cpu, or NULL). */
int dtrain_comm_device_memory(const dtrain_comm *c);

int dtrain_comm_rank(const dtrain_comm *c);
int dtrain_comm_size(const dtrain_comm *c);

/* In place: buf[count] becomes the element-wise sum (or average) over all
 * members.  Every member ends with bit-identical values. */
enum dtrain_status dtrain_comm_allreduce(dtrain_comm *c, float *buf, size_t count, enum dtrain_reduce_op op);

/* in[count * size] on every member; out[count] on member r becomes the
 * reduction of the members' in[r*count .. r*count + count).  out may be
 * in + r*count (in place); otherwise the two must not overlap (EINVAL,
 * the communicator unharmed). */
enum dtrain_status dtrain_comm_reduce_scatter(dtrain_comm *c, const float *in, float *out, size_t count,
                                              enum dtrain_reduce_op op);

/* in[count] of member r lands at out[r*count] on every member
 * (out holds count * size).  in may be out + r*count (in place);
 * otherwise the two must not overlap (EINVAL, the communicator unharmed). */
enum dtrain_status dtrain_comm_all_gather(dtrain_comm *c, const float *in, float *out, size_t count);

/* buf[bytes] of member root is copied to every member's buf. */
enum dtrain_status dtrain_comm_broadcast(dtrain_comm *c, void *buf, size_t bytes, int root);

/* The control plane: small messages that are not floats (exit codes,
 * counts, flags, addresses, sums of doubles), byte-typed as NCCL's
 * bootstrap all-gather is, so that no float carries anything but floats.
 * Buffers are HOST memory on every backend (nccl stages them through a
 * device copy: slow, for small messages).  Values travel in the members'
 * native byte order (one architecture per job).  Collectives like the
 * rest: the same calls, in the same order, with the same counts; count 0
 * returns at once.  A member out of memory for the gathered copy fails
 * the communicator with cause DTRAIN_COMM_ESYS. */

/* in[bytes] of member r lands at out[r*bytes] on every member (out holds
 * bytes * size).  in may be out + r*bytes (in place); otherwise the two
 * must not overlap (EINVAL). */
enum dtrain_status dtrain_comm_all_gather_bytes(dtrain_comm *c, const void *in, void *out, size_t bytes);

/* In place: buf[count] becomes the element-wise sum over the members
 * (wrapping modulo 2^64 on overflow) / the maximum. */
enum dtrain_status dtrain_comm_sum_int64(dtrain_comm *c, int64_t *buf, size_t count);
enum dtrain_status dtrain_comm_max_int64(dtrain_comm *c, int64_t *buf, size_t count);

/* In place: buf[count] becomes the sum over the members in double, added
 * in member order (0.0 + member 0 + member 1 ...) on every member, so that
 * all get the same bits whatever the group's shape. */
enum dtrain_status dtrain_comm_sum_doubles_ordered(dtrain_comm *c, double *buf, size_t count);

/* Point to point: the peer's matching recv/send must have the same bytes.
 * send returns once buf may be reused (the data may still be in flight,
 * buffered by the link); a send larger than the link's buffer waits for
 * the matching recv, so two members sending to each other first deadlock
 * (until the timeout) as with MPI: use dtrain_comm_sendrecv for that. */
enum dtrain_status dtrain_comm_send(dtrain_comm *c, const void *buf, size_t bytes, int peer);
enum dtrain_status dtrain_comm_recv(dtrain_comm *c, void *buf, size_t bytes, int peer);

/* Send to one peer and receive from another (or the same) at once, so that
 * exchanges in a cycle (a pipeline's activations forward and gradients
 * backward, a shift by k) cannot deadlock however large the messages.
 * Either side may have 0 bytes; peers may equal each other, not this rank. */
enum dtrain_status dtrain_comm_sendrecv(dtrain_comm *c, const void *sendbuf, size_t send_bytes, int to,
                                        void *recvbuf, size_t recv_bytes, int from);

/* Returns when every member has entered the barrier. */
enum dtrain_status dtrain_comm_barrier(dtrain_comm *c);

/* Break the communicator: a call in flight (in another thread) returns
 * with cause DTRAIN_COMM_EABORTED, so will every later call, and peers see
 * EPEER.
 * Idempotent; destroy still has to be called. */
void dtrain_comm_abort(dtrain_comm *c);

struct dtrain_comm_error {
    int cause;        /* enum dtrain_comm_cause; DTRAIN_COMM_OK when no error */
    int peer;         /* member involved (rank in this communicator), or -1 */
    char message[256];/* one line, e.g. "rank 3 (next): connection reset" */
};

/* The first error of the communicator (cause DTRAIN_COMM_OK when none),
 * after a quick non-blocking look at the links for a peer that has closed
 * or aborted since the last call.  Returns the status of e->cause:
 * DTRAIN_OK when none. */
enum dtrain_status dtrain_comm_get_async_error(dtrain_comm *c, struct dtrain_comm_error *e);

/* The first error's message, or "" when none.  Valid until destroy. */
const char *dtrain_comm_error_message(const dtrain_comm *c);

struct dtrain_comm_stats {
    uint64_t bytes_sent;     /* payload bytes this member has sent (headers not counted) */
    uint64_t bytes_received; /* payload bytes received */
    uint64_t calls;          /* collective and point-to-point calls that completed */
    uint64_t started;        /* calls that began moving data: above calls + failed ones while one is in
                              * flight (another thread sees a rank waiting in a call; dtrain_watchdog.h) */
    uint64_t refused;        /* connections dropped at bootstrap or accept: wrong secret or hello */
    uint64_t rejoined;       /* cpu bootstrap: times this member's hello was dropped unread by the leader
                              * (its pending list full of strangers' connections) and sent again */
    uint64_t setup_bytes_sent; /* cpu backend: bytes this member sent to set up the communicator and its
                                * links (hellos, the bootstrap's address messages and bytes, ring-link
                                * replies, address lookups), not counted in bytes_sent */
    int shm_links;           /* links over shared memory */
    int tcp_links;           /* links over TCP */
    uint64_t single_copy_calls; /* cpu backend: collectives that read the other members' memory directly
                                 * instead of passing through the rings (doc/comm.md) */
};

void dtrain_comm_get_stats(const dtrain_comm *c, struct dtrain_comm_stats *s);

/* Close links, unmap memory, free.  NULL is allowed. */
void dtrain_comm_destroy(dtrain_comm *c);

#ifdef __cplusplus
}
#endif
#endif
