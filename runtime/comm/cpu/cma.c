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

/* What each member tells the others before they read its block. */
struct cma_desc {
    uint64_t pid;
    uint64_t block;      /* where its block is */
    uint64_t bytes;      /* each */
    uint64_t token_at;   /* where its token is (the first call's check) */
    uint64_t token;
};

/* How members agree on the outcome: 0, or the errno of a failed read. */
struct cma_outcome {
    int32_t error;
    int32_t peer; /* the member whose block could not be read */
};

static uint64_t random_token(void)
{
    uint64_t t = 0;
    if (getrandom(&t, sizeof t, 0) != (ssize_t)sizeof t)
        t = 0;
    /* never 0: a zeroed page of another process must not match */
    return t != 0 ? t : ((uint64_t)getpid() << 32 | 0x5a5a5a5au);
}

/* What every member sees alike (the kind of each ring link may not be). */
static int usable(const struct dtrain_comm *c, const struct cpu_comm *cc, size_t each)
{
    return c->size > 1 && each >= CMA_MIN_BYTES && cc->cma >= 0 && c->transport == DTRAIN_COMM_TRANSPORT_AUTO &&
           cc->local == (uint32_t)c->size;
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

int cma_all_gather(struct dtrain_comm *c, struct cpu_comm *cc, const void *in, void *out, size_t each, int *used)
{
    const int n = c->size, me = c->rank;
    unsigned char *own = (unsigned char *)out + (size_t)me * each;
    struct cma_desc mine, *d = NULL;
    struct cma_outcome outcome = {0, -1}, *all = NULL;
    /* the descriptors and outcomes are not payload: counted as the ring's all-gather would be */
    const uint64_t sent = atomic_load(&c->bytes_sent), received = atomic_load(&c->bytes_received);
    int rc = 0;
    *used = 0;
    if (!usable(c, cc, each))
        return 0;
    if (cc->cma_token == 0)
        cc->cma_token = random_token();
    /* in may be this member's place in out (in place) or anywhere apart */
    mine = (struct cma_desc){(uint64_t)getpid(), (uint64_t)(uintptr_t)in, each, (uint64_t)(uintptr_t)&cc->cma_token,
                             cc->cma_token};
    if ((d = malloc((size_t)n * sizeof *d)) == NULL || (all = malloc((size_t)n * sizeof *all)) == NULL) {
        rc = comm_fail(c, DTRAIN_COMM_ESYS, -1, "all-gather: out of memory for %d members' descriptors", n);
        goto out;
    }
    if ((rc = ring_all_gather_bytes(c, cc->next, cc->prev, &mine, d, sizeof mine)) != 0)
        goto out;
    for (int j = 0; j < n; j++)
        if (d[j].bytes != each) {
            rc = comm_fail(c, DTRAIN_COMM_EINVAL, j, "all-gather: rank %d gives %llu bytes, this member %zu", j,
                           (unsigned long long)d[j].bytes, each);
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
        if ((outcome.error = read_peer(d[j].pid, (unsigned char *)out + (size_t)j * each, d[j].block, each)) != 0)
            outcome.peer = j;
    }
    if (outcome.error == 0 && in != own)
        memmove(own, in, each);
    /* No member returns (and changes its block) before all have read it. */
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
         * member knows, none has returned, the blocks are unchanged; the
         * ring gathers this call and the ones after. */
        cc->cma = -1;
        goto ring;
    }
    for (int j = 0; j < n; j++)
        if (all[j].error != 0) {
            rc = comm_fail(c, all[j].error == ESRCH ? DTRAIN_COMM_EPEER : DTRAIN_COMM_ESYS, all[j].peer,
                           "all-gather: rank %d could not read rank %d's block: %s", j, all[j].peer,
                           strerror(all[j].error));
            goto out;
        }
    /* n-1 blocks sent and received, as the ring counts them (one thread calls a communicator at a time) */
    atomic_store(&c->bytes_sent, sent + (uint64_t)(n - 1) * each);
    atomic_store(&c->bytes_received, received + (uint64_t)(n - 1) * each);
    atomic_fetch_add(&c->single_copy_calls, 1);
    *used = 1;
    goto out;
ring: /* *used 0: the caller gathers over the ring, which counts its own bytes */
    atomic_store(&c->bytes_sent, sent);
    atomic_store(&c->bytes_received, received);
out:
    free(d);
    free(all);
    return rc;
}
