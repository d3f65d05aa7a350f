/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The single-copy all-gather between the members of one host; see cma.h. */
#include "cma.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/comm_backend.h"
#include "dtrain_hugemem.h"
#include "reduce.h"
#include "ring.h"

/* What each member tells the others before they read its memory. */
struct cma_desc {
    uint64_t pid;
    uint64_t region;     /* where the others read */
    uint64_t shape;      /* what every member gives alike: bytes each, floats */
    uint64_t token_at;   /* where its token is (each call's check) */
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

/* Every other member's token read where its descriptor says: 0, or -1. */
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

/* One direct-read call: d[n], what every member said, and the byte counts
 * as they were before its control messages (not payload: counted as the
 * ring would count the collective). */
struct cma_call {
    struct cma_desc *d;
    struct cma_outcome *all;
    uint64_t sent0, received0;
    const char *what;
};

/* Start a call: this member's region (where the others read) and its
 * shape (what every member must give alike: `unit`s), swapped over the
 * ring; then every member reads every other's token, and they agree on
 * whether all could.  Every call checks, after every member has entered
 * it: a member whose memory became unreadable since the last call (it
 * made itself not dumpable, changed its credentials) sends this call to
 * the rings before any member has changed a buffer, and the calls after
 * it too (cc->cma -1).  The first call's check decides whether the
 * communicator reads directly at all (no permission to attach, members
 * in other PID namespaces: a pid that names another process here).
 * 0 with *go 1: read; 0 with *go 0: the rings; else the cause (comm_fail
 * has said why). */
static int cma_begin(struct dtrain_comm *c, struct cpu_comm *cc, struct cma_call *k, const void *region,
                     uint64_t shape, const char *unit, int *go)
{
    const int n = c->size, me = c->rank;
    int rc;
    *go = 0;
    k->sent0 = atomic_load(&c->bytes_sent);
    k->received0 = atomic_load(&c->bytes_received);
    if ((k->d = malloc((size_t)n * sizeof *k->d)) == NULL || (k->all = malloc((size_t)n * sizeof *k->all)) == NULL)
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: out of memory for %d members' descriptors", k->what, n);
    if (cc->cma_token == 0)
        cc->cma_token = random_token();
    struct cma_desc mine = {(uint64_t)getpid(), (uint64_t)(uintptr_t)region, shape,
                            (uint64_t)(uintptr_t)&cc->cma_token, cc->cma_token};
    if ((rc = ring_all_gather_bytes(c, cc->next, cc->prev, &mine, k->d, sizeof mine)) != 0)
        return rc;
    for (int j = 0; j < n; j++)
        if (k->d[j].shape != shape)
            return comm_fail(c, DTRAIN_COMM_EINVAL, j, "%s: rank %d gives %llu %s, this member %llu", k->what, j,
                             (unsigned long long)k->d[j].shape, unit, (unsigned long long)shape);
    struct cma_outcome checked = {check_tokens(k->d, n, me) == 0 ? 0 : EPERM, -1};
    if ((rc = ring_all_gather_bytes(c, cc->next, cc->prev, &checked, k->all, sizeof checked)) != 0)
        return rc;
    cc->cma = 1;
    for (int j = 0; j < n; j++)
        if (k->all[j].error != 0)
            cc->cma = -1;
    *go = cc->cma == 1;
    return 0;
}

/* The members' outcomes of a round of reads, swapped over the ring: no
 * member returns, and changes its buffer, before every member has read
 * it.  A refused read (EPERM, EACCES: a member's memory became
 * unreadable between cma_begin's check and the reads) sends the calls
 * after this one to the rings; where the call has changed no member's
 * input yet (redo not NULL) it goes to the rings too (*redo 1, 0
 * returned).  Else the cause on every member: a member gone (ESRCH), a
 * refusal once inputs have changed. */
static int cma_agree(struct dtrain_comm *c, struct cpu_comm *cc, struct cma_call *k, struct cma_outcome mine,
                     int *redo)
{
    int rc, failed = -1, refusals_only = 1;
    if ((rc = ring_all_gather_bytes(c, cc->next, cc->prev, &mine, k->all, sizeof mine)) != 0)
        return rc;
    for (int j = 0; j < c->size; j++) {
        int error = k->all[j].error;
        if (error == 0)
            continue;
        if (error == EPERM || error == EACCES)
            cc->cma = -1;
        else
            refusals_only = 0;
        if (failed < 0)
            failed = j;
    }
    if (failed < 0)
        return 0;
    if (refusals_only && redo != NULL) {
        *redo = 1;
        return 0;
    }
    const struct cma_outcome *o = &k->all[failed];
    return comm_fail(c, o->error == ESRCH ? DTRAIN_COMM_EPEER : DTRAIN_COMM_ESYS, o->peer,
                     "%s: rank %d could not read rank %d's memory: %s%s", k->what, failed, o->peer,
                     strerror(o->error),
                     o->error == EPERM || o->error == EACCES
                         ? " (that rank turned unreadable during the call, once the inputs held partial sums: "
                           "it changed its credentials or made itself not dumpable)"
                         : "");
}

/* End a call: the byte counts as they were, plus what the ring would have
 * moved for the part done (one thread calls a communicator at a time). */
static void cma_end(struct dtrain_comm *c, struct cma_call *k, uint64_t sent, uint64_t received)
{
    atomic_store(&c->bytes_sent, k->sent0 + sent);
    atomic_store(&c->bytes_received, k->received0 + received);
    free(k->d);
    free(k->all);
}

/* Whether a call apart writes its output streamed (cma.h): n members'
 * blocks of `each` bytes read and this member's written, more than the
 * last-level cache holds. */
static int streams_past_cache(int n, size_t each)
{
    return (size_t)(n + 1) * each > cma_stream_min_bytes();
}

int cma_all_gather(struct dtrain_comm *c, struct cpu_comm *cc, const void *in, void *out, size_t each, int *used)
{
    const int n = c->size, me = c->rank;
    struct cma_call k = {.what = "all-gather"};
    struct cma_outcome outcome = {0, -1};
    int go, rc;
    *used = 0;
    if (!cma_usable(c, cc, each, CMA_MIN_BYTES))
        return 0;
    /* in may be this member's place in out (in place) or anywhere apart */
    if ((rc = cma_begin(c, cc, &k, in, each, "bytes", &go)) != 0 || !go)
        goto out;
    for (int i = 1; i < n && outcome.error == 0; i++) { /* from the next member on: not all from one at once */
        int j = (me + i) % n;
        if ((outcome.error = read_peer(k.d[j].pid, (unsigned char *)out + (size_t)j * each, k.d[j].region, each)) != 0)
            outcome.peer = j;
    }
    int redo = 0; /* nothing but out changed: the rings can gather it all */
    if ((rc = cma_agree(c, cc, &k, outcome, &redo)) != 0 || redo)
        goto out;
    unsigned char *own = (unsigned char *)out + (size_t)me * each;
    /* apart, this member's own block copied in: streamed past the cache,
     * as the reduce-scatter's sums (cma.h) */
    if (in != own && streams_past_cache(n, each) &&
        ((const unsigned char *)in + each <= own || own + each <= (const unsigned char *)in))
        copy_bytes_streamed(own, in, each);
    else if (in != own)
        memmove(own, in, each);
    atomic_fetch_add(&c->single_copy_calls, 1);
    *used = 1;
out:
    /* n-1 blocks sent and received when read, as the ring counts them; else the ring counts its own */
    cma_end(c, &k, *used ? (uint64_t)(n - 1) * each : 0, *used ? (uint64_t)(n - 1) * each : 0);
    return rc;
}

/* Iovecs per process_vm_readv: far under any IOV_MAX */
#define CMA_IOV 64

/* k pieces of pid's memory (r) into l in one process_vm_readv; cut short
 * (a signal, a fault), the same reads one at a time, which say why.  0 or
 * an errno. */
static int read_peer_pieces(uint64_t pid, const struct iovec *l, const struct iovec *r, int k)
{
    size_t want = 0;
    for (int i = 0; i < k; i++)
        want += l[i].iov_len;
    ssize_t got = process_vm_readv((pid_t)pid, l, (unsigned long)k, r, (unsigned long)k, 0);
    if (got == (ssize_t)want)
        return 0;
    for (int i = 0; i < k; i++) {
        int e = read_peer(pid, l[i].iov_base, (uint64_t)(uintptr_t)r[i].iov_base, l[i].iov_len);
        if (e != 0)
            return e;
    }
    return 0;
}

/* Member peer's segment of every slice, where it lies in buf here too. */
static int read_segments(float *buf, size_t count, int n, int peer, uint64_t pid, uint64_t remote)
{
    const size_t slice = (size_t)n * RING_CHUNK_FLOATS;
    struct iovec l[CMA_IOV], r[CMA_IOV];
    size_t off = 0;
    while (off < count) {
        int k = 0;
        for (; k < CMA_IOV && off < count; k++, off += slice) {
            size_t len, at = ring_segment(count, n, off, peer, &len);
            l[k] = (struct iovec){buf + at, len * sizeof(float)};
            r[k] = (struct iovec){(void *)(uintptr_t)(remote + at * sizeof(float)), len * sizeof(float)};
        }
        int e = read_peer_pieces(pid, l, r, k);
        if (e != 0)
            return e;
    }
    return 0;
}

/* Segments summed per round of the reduce halves (all-reduce's first,
 * reduce-scatter's), each member's read in one process_vm_readv: a call
 * costs tens of microseconds on a VM (the peer's lookup and permission
 * check, the pinning set-up), and a 64 MiB all-reduce on 2 members made
 * 128 of them, one per 256 KiB segment; 4 a call (1 MiB) made that half
 * about a fifth faster on a Zen 4 VM (doc/comm.md), 8 no faster. */
#define CMA_BATCH 4

/* A round's segments: at[s] floats into every member's region, len[s]
 * floats long, summed into this member's buffer at here[s]. */
struct cma_batch {
    size_t at[CMA_BATCH], here[CMA_BATCH], len[CMA_BATCH];
    int count;
};

/* The other members' values of a round's segments, each summed into its
 * RING_CHUNK_FLOATS slot of sum in the ring's order: member me+1's first,
 * each next one's (read into next's slots) added to the sum.  What the
 * ring adds before a member's own value; 0, or the failed read. */
static struct cma_outcome sum_others(const struct cma_call *k, int n, int me, const struct cma_batch *b, float *sum,
                                     float *next)
{
    struct cma_outcome o = {0, -1};
    struct iovec l[CMA_BATCH], r[CMA_BATCH];
    for (int i = 1; i < n; i++) {
        int j = (me + i) % n;
        float *into = i == 1 ? sum : next;
        for (int s = 0; s < b->count; s++) {
            l[s] = (struct iovec){into + (size_t)s * RING_CHUNK_FLOATS, b->len[s] * sizeof(float)};
            r[s] = (struct iovec){(void *)(uintptr_t)(k->d[j].region + b->at[s] * sizeof(float)),
                                  b->len[s] * sizeof(float)};
        }
        if ((o.error = read_peer_pieces(k->d[j].pid, l, r, b->count)) != 0) {
            o.peer = j;
            return o;
        }
        for (int s = 0; i > 1 && s < b->count; s++)
            reduce_floats(sum + (size_t)s * RING_CHUNK_FLOATS, next + (size_t)s * RING_CHUNK_FLOATS,
                          sum + (size_t)s * RING_CHUNK_FLOATS, b->len[s], 0.0f);
    }
    return o;
}

/* Room for a round's sums and next values (sum_others) in *sum: 0, or the
 * cause.  On a huge page: a round's 1 MiB of sums is as big as a core's
 * L2 on a Zen 4, and on 4 KiB pages scattered in physical memory parts of
 * it evicted each other (L2 sets are chosen by physical address), so the
 * sums read back from memory: the 2-rank all-reduce of 64 MiB ran at
 * 5.6-6.2 GB/s busbw with malloc's scratch, 6.0-8.1 with this, and the
 * 4- and 8-rank ones a third faster too (doc/comm.md). */
static int sum_scratch(struct dtrain_comm *c, struct cpu_comm *cc, const char *what, float **sum)
{
    if (cc->cma_sum == NULL &&
        (cc->cma_sum = dtrain_hugemem_alloc(2 * (size_t)CMA_BATCH * RING_CHUNK_FLOATS * sizeof(float))) == NULL)
        return comm_fail(c, DTRAIN_COMM_ESYS, -1, "%s: out of memory for its sums", what);
    *sum = cc->cma_sum;
    return 0;
}

/* Add a round's sums (sum's slots) into out at each segment's place here,
 * its own values there in: out = in + sum (divided once); streamed: out
 * written by streaming stores (reduce_floats_streamed). */
static void add_sums(const struct cma_batch *b, float *out, const float *in, const float *sum, float divisor,
                     int streamed)
{
    for (int s = 0; s < b->count; s++)
        (streamed ? reduce_floats_streamed : reduce_floats)(out + b->here[s], in + b->here[s],
                                                            sum + (size_t)s * RING_CHUNK_FLOATS, b->len[s], divisor);
}

/* The largest cache the kernel lists for CPU 0 (sysfs, "32768K"): the
 * last level.  Not sysconf(_SC_LEVEL3_CACHE_SIZE): glibc 2.36 computes it
 * from CPUID and said 320 MiB on a Zen 4 VM whose L3 is 32 MiB.  0 when
 * sysfs lists none. */
static size_t largest_cache_bytes(void)
{
    size_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[64], text[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue;
        char *end = NULL;
        unsigned long long v = fgets(text, sizeof text, f) != NULL ? strtoull(text, &end, 10) : 0;
        fclose(f);
        if (end != NULL && (*end == 'K' || *end == 'M' || *end == 'G'))
            v <<= *end == 'K' ? 10 : *end == 'M' ? 20 : 30;
        if (v > best && v < ((unsigned long long)1 << 40))
            best = (size_t)v;
    }
    return best;
}

size_t cma_stream_min_bytes(void)
{
    static _Atomic size_t known; /* read once: every call asks */
    size_t v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v == 0) {
        v = largest_cache_bytes();
        if (v == 0)
            v = CMA_STREAM_FALLBACK_BYTES;
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
}

int cma_allreduce(struct dtrain_comm *c, struct cpu_comm *cc, float *buf, size_t count, enum dtrain_reduce_op op,
                  int *used)
{
    const int n = c->size, me = c->rank;
    const float divisor = op == DTRAIN_REDUCE_AVG ? (float)n : 0.0f;
    struct cma_call k = {.what = "all-reduce"};
    struct cma_outcome outcome;
    int go, rc;
    *used = 0;
    if (!cma_usable(c, cc, count / (size_t)n * sizeof(float), CMA_REDUCE_MIN_BYTES))
        return 0;
    if ((rc = cma_begin(c, cc, &k, buf, count, "floats", &go)) != 0 || !go)
        goto out;
    float *sum = NULL;
    if ((rc = sum_scratch(c, cc, k.what, &sum)) != 0)
        goto out;
    /* this member's segment of every slice, in place: the others' values,
     * then its own added (divided once); it changes nothing another
     * member reads in this half */
    outcome = (struct cma_outcome){0, -1};
    for (size_t off = 0; off < count && outcome.error == 0;) {
        struct cma_batch b = {.count = 0};
        for (; b.count < CMA_BATCH && off < count; b.count++, off += (size_t)n * RING_CHUNK_FLOATS)
            b.at[b.count] = b.here[b.count] = ring_segment(count, n, off, me, &b.len[b.count]);
        outcome = sum_others(&k, n, me, &b, sum, sum + CMA_BATCH * RING_CHUNK_FLOATS);
        if (outcome.error == 0)
            add_sums(&b, buf, buf, sum, divisor, 0);
    }
    /* buf holds sums now: the ring cannot start again from it */
    if ((rc = cma_agree(c, cc, &k, outcome, NULL)) != 0)
        goto out;
    outcome = (struct cma_outcome){0, -1};
    for (int i = 1; i < n && outcome.error == 0; i++) { /* the others' finished segments, from the next member on */
        int j = (me + i) % n;
        if ((outcome.error = read_segments(buf, count, n, j, k.d[j].pid, k.d[j].region)) != 0)
            outcome.peer = j;
    }
    if ((rc = cma_agree(c, cc, &k, outcome, NULL)) != 0)
        goto out;
    atomic_fetch_add(&c->single_copy_calls, 1);
    *used = 1;
out:;
    /* as the ring counts an all-reduce: its reduce half sends every
     * segment but this member's and receives all but the previous
     * member's, its gather half sends all but the next member's and
     * receives all but this one's */
    const uint64_t f = sizeof(float), own = ring_segment_floats(count, n, me);
    uint64_t sent = (2 * count - own - ring_segment_floats(count, n, (me + 1) % n)) * f;
    uint64_t received = (2 * count - own - ring_segment_floats(count, n, (me + n - 1) % n)) * f;
    cma_end(c, &k, *used ? sent : 0, *used ? received : 0);
    return rc;
}

int cma_reduce_scatter(struct dtrain_comm *c, struct cpu_comm *cc, const float *in, float *out, size_t count,
                       enum dtrain_reduce_op op, int *used)
{
    const int n = c->size, me = c->rank;
    const float divisor = op == DTRAIN_REDUCE_AVG ? (float)n : 0.0f;
    const float *mine = in + (size_t)me * count;
    struct cma_call k = {.what = "reduce-scatter"};
    struct cma_outcome outcome = {0, -1};
    int go, rc;
    *used = 0;
    if (!cma_usable(c, cc, count * sizeof(float), CMA_REDUCE_MIN_BYTES))
        return 0;
    if ((rc = cma_begin(c, cc, &k, in, count, "floats", &go)) != 0 || !go)
        goto out;
    float *sum = NULL;
    if ((rc = sum_scratch(c, cc, k.what, &sum)) != 0)
        goto out;
    /* apart, the output is a third buffer: streamed where the call reads
     * more than the cache holds (cma.h) */
    const int streamed = out != mine && streams_past_cache(n, count * sizeof(float));
    /* this member's block of every member's input, CMA_BATCH slices a round */
    for (size_t off = 0; off < count && outcome.error == 0;) {
        struct cma_batch b = {.count = 0};
        for (; b.count < CMA_BATCH && off < count; b.count++, off += RING_CHUNK_FLOATS) {
            b.at[b.count] = (size_t)me * count + off;
            b.here[b.count] = off;
            b.len[b.count] = count - off < RING_CHUNK_FLOATS ? count - off : RING_CHUNK_FLOATS;
        }
        outcome = sum_others(&k, n, me, &b, sum, sum + CMA_BATCH * RING_CHUNK_FLOATS);
        if (outcome.error == 0)
            add_sums(&b, out, mine, sum, divisor, streamed);
    }
    /* apart, the inputs are as they were and the rings can sum them; in
     * place this member's block holds sums */
    int redo = 0;
    if ((rc = cma_agree(c, cc, &k, outcome, out != mine ? &redo : NULL)) != 0 || redo)
        goto out;
    atomic_fetch_add(&c->single_copy_calls, 1);
    *used = 1;
out:
    /* as the ring counts it: n-1 blocks sent and received */
    cma_end(c, &k, *used ? (uint64_t)(n - 1) * count * sizeof(float) : 0,
            *used ? (uint64_t)(n - 1) * count * sizeof(float) : 0);
    return rc;
}
