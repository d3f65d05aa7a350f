/* SPDX-License-Identifier: GPL-2.0-or-later */
/* TCP and shared-memory links; see link.h. */
#include "link.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "dtrain_comm.h"
#include "dtrain_parse.h"
#include "dtrain_spin.h"
#include "reduce.h"

#define RING_MAGIC 0x474e5244u /* "DRNG" */
#define RING_DATA_OFFSET 4096  /* the header page */

/* Waiting: spin l->spin idle rounds, then yield l->yield more, then sleep
 * in slices (a slice bounds how late an abort or a dead peer is noticed,
 * and a missed wake-up). */
#define WAIT_TCP_SLICE_MS 20
#define WAIT_SHM_SLICE_NS 1000000L

/* The ring header: each side writes only its own cache line. */
struct shm_ring {
    uint32_t magic;
    uint32_t version;
    uint64_t capacity;
    alignas(64) _Atomic uint64_t head;   /* bytes written: the writer's */
    atomic_uint data_seq;                /* futex word: bumped after each write */
    atomic_uint writer_closed;
    atomic_uint writer_sleeping;         /* the writer waits on space_seq */
    alignas(64) _Atomic uint64_t tail;   /* bytes read: the reader's */
    atomic_uint space_seq;               /* futex word: bumped after each read */
    atomic_uint reader_closed;
    atomic_uint reader_sleeping;         /* the reader waits on data_seq */
};
_Static_assert(sizeof(struct shm_ring) <= RING_DATA_OFFSET, "ring header fits its page");

static unsigned char *ring_data(struct shm_ring *r)
{
    return (unsigned char *)r + RING_DATA_OFFSET;
}

static void futex_wake(atomic_uint *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void futex_wait(atomic_uint *word, unsigned seen, long ns)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

struct link *link_new(int fd, int peer, int sender)
{
    struct link *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->fd = fd;
    l->peer = peer;
    l->sender = sender;
    link_set_waiting(l, 0);
    return l;
}

void link_set_waiting(struct link *l, int oversubscribed)
{
    /* Measured with dtrain-bench-collectives on 2 CPUs: 4 and 8 ranks gain
     * from giving the CPU away at once; 2 ranks gain a little from a short
     * spin (about 10 us) when the machine is quiet, and lose a lot from a
     * long one when other processes want the CPUs (as a trainer's compute
     * threads do). */
    l->spin = oversubscribed ? 0 : 16;
    l->yield = oversubscribed ? 8 : 32;
}

static int fail(struct link *l, int code, const char *what, int err)
{
    if (err != 0)
        dtrain_snprintf(l->why, sizeof l->why, "%s: %s", what, strerror(err));
    else
        dtrain_snprintf(l->why, sizeof l->why, "%s", what);
    return -code;
}

/* ------------------------------------------------------------------ shared memory */

static int map_segment(struct link *l, int fd, int create, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return fail(l, DTRAIN_COMM_ESYS, "mmap of the shared-memory ring", errno);
    struct shm_ring *r = p;
    if (create) {
        r->magic = RING_MAGIC;
        r->version = WIRE_VERSION;
        r->capacity = len - RING_DATA_OFFSET;
    } else if (r->magic != RING_MAGIC || r->version != WIRE_VERSION || r->capacity != len - RING_DATA_OFFSET ||
               r->capacity < 64 || (r->capacity & (r->capacity - 1)) != 0) {
        munmap(p, len);
        return fail(l, DTRAIN_COMM_EPEER, "the shared-memory ring the peer named is not one", 0);
    }
    l->ring = r;
    l->map_len = len;
    return 0;
}

int link_shm_create(struct link *l, char name[WIRE_SHM_NAME_MAX])
{
    unsigned long long tag;
    if (getrandom(&tag, sizeof tag, 0) != (ssize_t)sizeof tag)
        return fail(l, DTRAIN_COMM_ESYS, "getrandom", errno);
    dtrain_snprintf(name, WIRE_SHM_NAME_MAX, "/dtrain-comm-%ld-%016llx", (long)getpid(), tag);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(l, DTRAIN_COMM_ESYS, "shm_open", errno);
    size_t len = RING_DATA_OFFSET + (size_t)LINK_SHM_RING_BYTES;
    /* Reserve the pages now: a full /dev/shm is an error here, not a SIGBUS later. */
    int rc = posix_fallocate(fd, 0, (off_t)len);
    if (rc != 0) {
        close(fd);
        shm_unlink(name);
        return fail(l, DTRAIN_COMM_ESYS, "reserving the shared-memory ring (is /dev/shm full?)", rc);
    }
    rc = map_segment(l, fd, 1, len);
    close(fd);
    if (rc != 0)
        shm_unlink(name);
    return rc;
}

int link_shm_open(struct link *l, const char *name)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(l, DTRAIN_COMM_ESYS, "shm_open of the peer's ring", errno);
    struct stat st;
    int rc;
    if (fstat(fd, &st) != 0)
        rc = fail(l, DTRAIN_COMM_ESYS, "fstat of the peer's ring", errno);
    else if (st.st_size <= RING_DATA_OFFSET || st.st_size > RING_DATA_OFFSET + (off_t)(1u << 30))
        rc = fail(l, DTRAIN_COMM_EPEER, "the peer's ring has a wrong size", 0);
    else
        rc = map_segment(l, fd, 0, (size_t)st.st_size);
    close(fd);
    return rc;
}

void link_shm_unlink(const char *name)
{
    shm_unlink(name);
}

void link_shm_drop(struct link *l)
{
    if (l->ring != NULL)
        munmap(l->ring, l->map_len);
    l->ring = NULL;
    l->map_len = 0;
}

static ssize_t shm_write(struct link *l, const void *src, size_t len)
{
    struct shm_ring *r = l->ring;
    uint64_t cap = r->capacity;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    size_t room = (size_t)(cap - (head - tail));
    if (atomic_load_explicit(&r->reader_closed, memory_order_relaxed) || l->peer_gone)
        return fail(l, DTRAIN_COMM_EPEER, "the peer closed its end of the shared-memory link", 0);
    size_t n = len < room ? len : room;
    if (n > LINK_SHM_PIECE_BYTES)
        n = LINK_SHM_PIECE_BYTES;
    if (n == 0)
        return 0;
    size_t pos = (size_t)(head & (cap - 1));
    size_t first = n < cap - pos ? n : (size_t)(cap - pos);
    memcpy(ring_data(r) + pos, src, first);
    memcpy(ring_data(r), (const unsigned char *)src + first, n - first);
    /* seq_cst: ordered against the sleeping flag the reader sets before it checks head. */
    atomic_store(&r->head, head + n);
    atomic_fetch_add(&r->data_seq, 1);
    if (atomic_load(&r->reader_sleeping))
        futex_wake(&r->data_seq);
    return (ssize_t)n;
}

/* Bytes readable now (no more than len), or a negative code when there are
 * none and the writer has gone. */
static ssize_t shm_readable(struct link *l, size_t len)
{
    struct shm_ring *r = l->ring;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    size_t avail = (size_t)(head - tail);
    if (avail == 0 && (atomic_load_explicit(&r->writer_closed, memory_order_relaxed) || l->peer_gone))
        return fail(l, DTRAIN_COMM_EPEER, "the peer closed its end of the shared-memory link", 0);
    return (ssize_t)(avail < len ? avail : len);
}

static void shm_consume(struct link *l, size_t n)
{
    struct shm_ring *r = l->ring;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    atomic_store(&r->tail, tail + n);
    atomic_fetch_add(&r->space_seq, 1);
    if (atomic_load(&r->writer_sleeping))
        futex_wake(&r->space_seq);
}

static ssize_t shm_read(struct link *l, void *dst, size_t len)
{
    ssize_t n = shm_readable(l, len);
    if (n <= 0)
        return n;
    struct shm_ring *r = l->ring;
    uint64_t cap = r->capacity;
    size_t pos = (size_t)(atomic_load_explicit(&r->tail, memory_order_relaxed) & (cap - 1));
    size_t first = (size_t)n < cap - pos ? (size_t)n : (size_t)(cap - pos);
    memcpy(dst, ring_data(r) + pos, first);
    memcpy((unsigned char *)dst + first, ring_data(r), (size_t)n - first);
    shm_consume(l, (size_t)n);
    return n;
}

static ssize_t shm_read_reduce(struct link *l, float *dst, const float *a, size_t n, float divisor)
{
    ssize_t bytes = shm_readable(l, n * sizeof(float));
    if (bytes <= 0)
        return bytes;
    size_t floats = (size_t)bytes / sizeof(float);
    if (floats == 0)
        return 0;
    struct shm_ring *r = l->ring;
    uint64_t cap = r->capacity;
    size_t pos = (size_t)(atomic_load_explicit(&r->tail, memory_order_relaxed) & (cap - 1));
    size_t first = floats < (cap - pos) / sizeof(float) ? floats : (size_t)(cap - pos) / sizeof(float);
    reduce_floats(dst, a, (const float *)(const void *)(ring_data(r) + pos), first, divisor);
    reduce_floats(dst + first, a + first, (const float *)(const void *)ring_data(r), floats - first, divisor);
    shm_consume(l, floats * sizeof(float));
    return (ssize_t)floats;
}

/* ------------------------------------------------------------------ TCP */

static ssize_t tcp_write(struct link *l, const void *src, size_t len)
{
    ssize_t n = send(l->fd, src, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    return fail(l, DTRAIN_COMM_EPEER, "send", errno);
}

static ssize_t tcp_recv(struct link *l, void *dst, size_t len)
{
    ssize_t n = recv(l->fd, dst, len, MSG_DONTWAIT);
    if (n > 0)
        return n;
    if (n == 0)
        return fail(l, DTRAIN_COMM_EPEER, "the peer closed the connection", 0);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    return fail(l, DTRAIN_COMM_EPEER, "recv", errno);
}

static ssize_t tcp_read(struct link *l, void *dst, size_t len)
{
    if (l->stage_len > 0) { /* bytes read ahead by a reduction come first */
        size_t n = len < l->stage_len ? len : l->stage_len;
        memcpy(dst, l->stage, n);
        memmove(l->stage, l->stage + n, l->stage_len - n);
        l->stage_len -= n;
        return (ssize_t)n;
    }
    return tcp_recv(l, dst, len);
}

static ssize_t tcp_read_reduce(struct link *l, float *dst, const float *a, size_t n, float divisor)
{
    if (l->stage == NULL && (l->stage = malloc(LINK_STAGE_BYTES)) == NULL)
        return fail(l, DTRAIN_COMM_ESYS, "out of memory for the receive buffer", 0);
    /* Read no further than this reduction needs: what follows belongs to
     * the next operation, which may not be a reduction. */
    size_t want = n * sizeof(float);
    if (want > LINK_STAGE_BYTES)
        want = LINK_STAGE_BYTES;
    if (l->stage_len < want) {
        ssize_t got = tcp_recv(l, l->stage + l->stage_len, want - l->stage_len);
        if (got < 0)
            return got;
        l->stage_len += (size_t)got;
    }
    size_t floats = l->stage_len / sizeof(float);
    if (floats == 0)
        return 0;
    reduce_floats(dst, a, (const float *)(const void *)l->stage, floats, divisor);
    size_t used = floats * sizeof(float);
    memmove(l->stage, l->stage + used, l->stage_len - used);
    l->stage_len -= used;
    return (ssize_t)floats;
}

/* ------------------------------------------------------------------ interface */

ssize_t link_write(struct link *l, const void *src, size_t len)
{
    return l->ring != NULL ? shm_write(l, src, len) : tcp_write(l, src, len);
}

ssize_t link_read(struct link *l, void *dst, size_t len)
{
    return l->ring != NULL ? shm_read(l, dst, len) : tcp_read(l, dst, len);
}

ssize_t link_read_reduce(struct link *l, float *dst, const float *a, size_t n, float divisor)
{
    return l->ring != NULL ? shm_read_reduce(l, dst, a, n, divisor) : tcp_read_reduce(l, dst, a, n, divisor);
}

int link_peer_gone(struct link *l)
{
    if (l->peer_gone)
        return 1;
    if (l->ring != NULL) {
        atomic_uint *other = l->sender ? &l->ring->reader_closed : &l->ring->writer_closed;
        if (atomic_load(other))
            return 1;
    }
    if (l->fd < 0)
        return 1;
    /* Over TCP, bytes waiting are the peer's next message, not a failure:
     * only end-of-file or an error counts.  The control socket of a shared
     * memory link carries nothing after setup. */
    char byte;
    ssize_t n = recv(l->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        (n > 0 && l->ring != NULL))
        return 1;
    return 0;
}

/* Poll the sockets of r and s (data or control) for up to ms. */
static int poll_links(struct link *r, struct link *s, int ms)
{
    struct pollfd p[2];
    struct link *ls[2];
    int n = 0;
    if (r != NULL && r->fd >= 0) {
        p[n] = (struct pollfd){.fd = r->fd, .events = POLLIN};
        ls[n++] = r;
    }
    if (s != NULL && s->fd >= 0) {
        /* A shm sender only watches its control socket for end-of-file. */
        p[n] = (struct pollfd){.fd = s->fd, .events = s->ring != NULL ? POLLIN : POLLOUT};
        ls[n++] = s;
    }
    int got = poll(p, (nfds_t)n, ms);
    if (got < 0 && errno != EINTR)
        return -DTRAIN_COMM_ESYS;
    for (int i = 0; got > 0 && i < n; i++)
        if (ls[i]->ring != NULL && p[i].revents != 0 && link_peer_gone(ls[i]))
            ls[i]->peer_gone = 1;
    return 0;
}

int link_wait(struct link *r, struct link *s, unsigned idle)
{
    int shm_only = (r == NULL || r->ring != NULL) && (s == NULL || s->ring != NULL);
    if (!shm_only) {
        /* TCP involved: the kernel wakes us; shm links beside it get short slices. */
        int any_shm = (r != NULL && r->ring != NULL) || (s != NULL && s->ring != NULL);
        unsigned yield = (r != NULL ? r : s)->yield;
        int ms = any_shm ? (idle < yield ? 0 : 1) : WAIT_TCP_SLICE_MS;
        if (any_shm && idle < yield)
            sched_yield();
        return poll_links(r, s, ms);
    }
    const struct link *policy = r != NULL ? r : s;
    if (policy == NULL) {
        sched_yield();
        return 0;
    }
    if (idle < policy->spin) {
        for (int i = 0; i < 32; i++)
            dtrain_cpu_relax();
        return 0;
    }
    if (idle < policy->spin + policy->yield) {
        sched_yield();
        return 0;
    }
    /* Sleep on the ring we wait for; a dead peer shows on its control socket. */
    int rc = poll_links(r, s, 0);
    if (rc != 0)
        return rc;
    if (r != NULL) {
        struct shm_ring *ring = r->ring;
        unsigned seen = atomic_load(&ring->data_seq);
        atomic_store(&ring->reader_sleeping, 1);
        if (atomic_load(&ring->head) == atomic_load_explicit(&ring->tail, memory_order_relaxed) &&
            !atomic_load(&ring->writer_closed))
            futex_wait(&ring->data_seq, seen, WAIT_SHM_SLICE_NS);
        atomic_store(&ring->reader_sleeping, 0);
    } else if (s != NULL) {
        struct shm_ring *ring = s->ring;
        unsigned seen = atomic_load(&ring->space_seq);
        atomic_store(&ring->writer_sleeping, 1);
        if (atomic_load(&ring->head) - atomic_load(&ring->tail) == ring->capacity &&
            !atomic_load(&ring->reader_closed))
            futex_wait(&ring->space_seq, seen, WAIT_SHM_SLICE_NS);
        atomic_store(&ring->writer_sleeping, 0);
    }
    return 0;
}

void link_break(struct link *l)
{
    if (l == NULL)
        return;
    if (l->ring != NULL) {
        atomic_store(l->sender ? &l->ring->writer_closed : &l->ring->reader_closed, 1);
        futex_wake(&l->ring->data_seq);
        futex_wake(&l->ring->space_seq);
    }
    if (l->fd >= 0)
        shutdown(l->fd, SHUT_RDWR);
}

void link_free(struct link *l)
{
    if (l == NULL)
        return;
    if (l->ring != NULL) {
        atomic_store(l->sender ? &l->ring->writer_closed : &l->ring->reader_closed, 1);
        futex_wake(l->sender ? &l->ring->data_seq : &l->ring->space_seq);
        munmap(l->ring, l->map_len);
    }
    if (l->fd >= 0)
        close(l->fd);
    free(l->stage);
    free(l);
}
