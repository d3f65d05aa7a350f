/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The single-copy all-gather between the members of one host; see cma.h. */
#include "cma.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/comm_backend.h"
#include "ring.h"

/* What each member tells the others before they read its memory. */
struct cma_desc {
    uint64_t pid;
    uint64_t region;     /* where the others read */
    uint64_t shape;      /* what every member gives alike: bytes each, floats */
    uint64_t token_at;   /* where its token is (the first call's check) */
    uint64_t token;
};

/* How members agree on the outcome: 0, or the errno of a failed read. */
struct cma_outcome {
    int32_t error;
    int32_t peer; /* the member whose memory could not be read */
};

static uint64_t random_token(void)
{
    uint64_t t = 0;
    if (getrandom(&t, sizeof t, 0) != (ssize_t)sizeof t)
        t = 0;
    /* never 0: a zeroed page of another process must not match */
    return t != 0 ? t : ((uint64_t)getpid() << 32 | 0x5a5a5a5au);
}

/* bytes of pid's memory at remote into local; 0 or an errno. */
static int read_peer(uint64_t pid, void *local, uint64_t remote, size_t bytes)
{
    unsigned char *to = local;
    while (bytes > 0) {
        struct iovec l = {to, bytes}, r = {(void *)(uintptr_t)remote, bytes};
        ssize_t n = process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EFAULT;
        to += n;
        remote += (uint64_t)n;
        bytes -= (size_t)n;
    }
    return 0;
}

/* The first call: every member's token read where its descriptor says. */
static int check_tokens(const struct cma_desc *d, int n, int me)
{
    for (int j = 0; j < n; j++) {
        uint64_t got = 0;
        if (j != me && (read_peer(d[j].pid, &got, d[j].token_at, sizeof got) != 0 || got != d[j].token))
            return -1;
    }
    return 0;
}

int cma_usable(const struct dtrain_comm *c, const struct cpu_comm *cc, size_t each, size_t min_bytes)
{
    return c->size > 1 && each >= min_bytes && cc->cma >= 0 && c->transport == DTRAIN_COMM_TRANSPORT_AUTO &&
           cc->local == (uint32_t)c->size;
}

/* What this member reads of member `peer` (pid, its region at remote): 0 or an errno. */
typedef int (*cma_reader)(void *arg, int peer, uint64_t pid, uint64_t remote);

/* One collective in one copy: this member's region (where the others
 * read) and its shape (what every member must give alike: `unit`s of
 * `what`), then read() for every other member; sent and received are
 * what the ring would have counted. */
static int cma_run(struct dtrain_comm *c, struct cpu_comm *cc, const void *region, uint64_t shape, const char *what,
                   const char *unit, cma_reader read, void *arg, uint64_t sent, uint64_t received, int *used)
{
    const int n = c->size, me = c->rank;
    struct cma_desc mine, *d = NULL;
    struct cma_outcome outcome = {0, -1}, *all = NULL;
    /* the descriptors and outcomes are not payload: counted as the ring's all-gather would be */
    const uint64_t sent0 = atomic_load(&c->bytes_sent), received0 = atomic_load(&c->bytes_received);
    int rc = 0;
    *used = 0;
    if (cc->cma_token == 0)
        cc->cma_token = random_token();
    mine = (struct cma_desc){(uint64_t)getpid(), (uint64_t)(uintptr_t)region, shape,
                             (uint64_t)(uintptr_t)&cc->cma_token, cc->cma_token};
    if ((d = malloc((size_t)n * sizeof *d)) == NULL || (all = malloc((size_t)n * sizeof *all)) == NULL) {
        rc = comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: out of memory for %d members' descriptors", what, n);
        goto out;
    }
    if ((rc = ring_all_gather_bytes(c, cc->next, cc->prev, &mine, d, sizeof mine)) != 0)
        goto out;
    for (int j = 0; j < n; j++)
        if (d[j].shape != shape) {
            rc = comm_fail(c, DTRAIN_COMM_EINVAL, j, "%s: rank %d gives %llu %s, this member %llu", what, j,
                           (unsigned long long)d[j].shape, unit, (unsigned long long)shape);
            goto out;
        }
    if (cc->cma == 0) {
        /* The first use: every member must read every other's token, or
         * none reads (no permission to attach, other PID namespaces: a
         * pid that names another process here): agreed, then kept. */
        outcome.error = check_tokens(d, n, me) == 0 ? 0 : EPERM;
        if ((rc = ring_all_gather_bytes(c, cc->next, cc->prev, &outcome, all, sizeof outcome)) != 0)
            goto out;
        cc->cma = 1;
        for (int j = 0; j < n; j++)
            if (all[j].error != 0)
                cc->cma = -1;
        if (cc->cma < 0)
            goto ring;
    }
    for (int k = 1; k < n && outcome.error == 0; k++) { /* from the next member on: not all from one at once */
        int j = (me + k) % n;
        if ((outcome.error = read(arg, j, d[j].pid, d[j].region)) != 0)
            outcome.peer = j;
    }
    /* No member returns (and changes its region) before all have read it. */
    if ((rc = ring_all_gather_bytes(c, cc->next, cc->prev, &outcome, all, sizeof outcome)) != 0)
        goto out;
    int refused = 0, other = 0;
    for (int j = 0; j < n; j++) {
        refused += all[j].error == EPERM || all[j].error == EACCES;
        other += all[j].error != 0 && all[j].error != EPERM && all[j].error != EACCES;
    }
    if (refused > 0 && other == 0) {
        /* A member's memory became unreadable since the first call (it
         * made itself not dumpable, changed its credentials): every
         * member knows, none has returned, the regions are unchanged; the
         * ring does this call and the ones after. */
        cc->cma = -1;
        goto ring;
    }
    for (int j = 0; j < n; j++)
        if (all[j].error != 0) {
            rc = comm_fail(c, all[j].error == ESRCH ? DTRAIN_COMM_EPEER : DTRAIN_COMM_ESYS, all[j].peer,
                           "%s: rank %d could not read rank %d's memory: %s", what, j, all[j].peer,
                           strerror(all[j].error));
            goto out;
        }
    /* one thread calls a communicator at a time */
    atomic_store(&c->bytes_sent, sent0 + sent);
    atomic_store(&c->bytes_received, received0 + received);
    atomic_fetch_add(&c->single_copy_calls, 1);
    *used = 1;
    goto out;
ring: /* *used 0: the caller goes over the ring, which counts its own bytes */
    atomic_store(&c->bytes_sent, sent0);
    atomic_store(&c->bytes_received, received0);
out:
    free(d);
    free(all);
    return rc;
}

struct gather_read {
    void *out;
    size_t each;
};

static int gather_block(void *arg, int peer, uint64_t pid, uint64_t remote)
{
    const struct gather_read *g = arg;
    return read_peer(pid, (unsigned char *)g->out + (size_t)peer * g->each, remote, g->each);
}

int cma_all_gather(struct dtrain_comm *c, struct cpu_comm *cc, const void *in, void *out, size_t each, int *used)
{
    struct gather_read g = {out, each};
    const uint64_t moved = (uint64_t)(c->size - 1) * each;
    *used = 0;
    if (!cma_usable(c, cc, each, CMA_MIN_BYTES))
        return 0;
    /* in may be this member's place in out (in place) or anywhere apart */
    int rc = cma_run(c, cc, in, each, "all-gather", "bytes", gather_block, &g, moved, moved, used);
    unsigned char *own = (unsigned char *)out + (size_t)c->rank * each;
    if (rc == 0 && *used && in != own)
        memmove(own, in, each);
    return rc;
}

struct allreduce_read {
    float *buf;
    size_t count;
    int n;
};

/* Iovecs per process_vm_readv: far under any IOV_MAX */
#define CMA_IOV 64

/* Member peer's segment of every slice, where it lies in buf here too. */
static int allreduce_segments(void *arg, int peer, uint64_t pid, uint64_t remote)
{
    const struct allreduce_read *a = arg;
    const size_t slice = (size_t)a->n * RING_CHUNK_FLOATS;
    struct iovec l[CMA_IOV], r[CMA_IOV];
    size_t off = 0;
    while (off < a->count) {
        int k = 0;
        size_t want = 0;
        for (; k < CMA_IOV && off < a->count; k++, off += slice) {
            size_t len, at = ring_segment(a->count, a->n, off, peer, &len);
            l[k] = (struct iovec){a->buf + at, len * sizeof(float)};
            r[k] = (struct iovec){(void *)(uintptr_t)(remote + at * sizeof(float)), len * sizeof(float)};
            want += len * sizeof(float);
        }
        ssize_t got = process_vm_readv((pid_t)pid, l, (unsigned long)k, r, (unsigned long)k, 0);
        if (got == (ssize_t)want)
            continue;
        /* cut short (a signal, a fault): the same reads one at a time, which says why */
        for (int i = 0; i < k; i++) {
            int e = read_peer(pid, l[i].iov_base, (uint64_t)(uintptr_t)r[i].iov_base, l[i].iov_len);
            if (e != 0)
                return e;
        }
    }
    return 0;
}

int cma_allreduce_gather(struct dtrain_comm *c, struct cpu_comm *cc, float *buf, size_t count, int *used)
{
    const int n = c->size, me = c->rank;
    struct allreduce_read a = {buf, count, n};
    *used = 0;
    if (!cma_usable(c, cc, count / (size_t)n * sizeof(float), CMA_ALLREDUCE_MIN_BYTES))
        return 0;
    /* what the ring's gather half sends (every segment but the next
     * member's) and receives (every segment but this member's) */
    uint64_t sent = (uint64_t)(count - ring_segment_floats(count, n, (me + 1) % n)) * sizeof(float);
    uint64_t received = (uint64_t)(count - ring_segment_floats(count, n, me)) * sizeof(float);
    return cma_run(c, cc, buf, count, "all-reduce", "floats", allreduce_segments, &a, sent, received, used);
}
