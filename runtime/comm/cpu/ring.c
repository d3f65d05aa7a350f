/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Ring collectives as engine plans; see ring.h. */
#include "ring.h"

#include <stdint.h>
#include <string.h>

#include "comm/comm_backend.h"
#include "engine.h"

/* i mod n for any i. */
static int mod(long i, int n)
{
    long m = i % n;
    return (int)(m < 0 ? m + n : m);
}

/* Segment i of L floats cut in n nearly equal parts: start and length. */
static size_t seg_start(size_t L, int n, int i)
{
    size_t base = L / (size_t)n, rem = L % (size_t)n;
    return (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
}

static size_t seg_len(size_t L, int n, int i)
{
    return L / (size_t)n + ((size_t)i < L % (size_t)n ? 1 : 0);
}

static int run(struct dtrain_comm *c, struct link *s, struct link *r, struct engine_plan *p)
{
    int rc = engine_run(c, s, r, p);
    engine_free(p);
    return rc;
}

size_t ring_segment(size_t count, int n, size_t off, int i, size_t *len)
{
    const size_t slice = (size_t)n * RING_CHUNK_FLOATS;
    size_t L = count - off < slice ? count - off : slice;
    *len = seg_len(L, n, i);
    return off + seg_start(L, n, i);
}

size_t ring_segment_floats(size_t count, int n, int i)
{
    const size_t slice = (size_t)n * RING_CHUNK_FLOATS;
    size_t total = 0;
    for (size_t off = 0; off < count; off += slice)
        total += seg_len(count - off < slice ? count - off : slice, n, i);
    return total;
}

int ring_allreduce(struct dtrain_comm *c, struct link *next, struct link *prev, float *buf, size_t count,
                   enum dtrain_reduce_op op, enum wire_op wire_op)
{
    const int n = c->size, r = c->rank;
    const size_t slice = (size_t)n * RING_CHUNK_FLOATS;
    const float divisor = op == DTRAIN_REDUCE_AVG ? (float)n : 0.0f;
    struct engine_plan p;

    engine_begin(&p, next, prev, wire_op, (unsigned)op, 0, count, count);
    for (size_t off = 0; off < count; off += slice) {
        size_t L = count - off < slice ? count - off : slice;
        float *base = buf + off;
        long last_recv = -1; /* the previous step's receive: what this step forwards */
        for (int step = 0; step < 2 * (n - 1); step++) {
            int reducing = step < n - 1;
            int k = reducing ? step : step - (n - 1);
            int sseg = reducing ? mod(r - k - 1, n) : mod(r - k, n);
            int rseg = reducing ? mod(r - k - 2, n) : mod(r - k - 1, n);
            engine_send(&p, base + seg_start(L, n, sseg), seg_len(L, n, sseg) * sizeof(float),
                        step == 0 ? -1 : last_recv);
            float *dst = base + seg_start(L, n, rseg);
            last_recv = engine_recv(&p, dst, seg_len(L, n, rseg) * sizeof(float),
                                    reducing ? RECV_REDUCE : RECV_COPY, dst, k == n - 2 && reducing ? divisor : 0.0f,
                                    -1);
        }
    }
    return run(c, next, prev, &p);
}

int ring_reduce_scatter(struct dtrain_comm *c, struct link *next, struct link *prev, const float *in, float *out,
                        size_t count, enum dtrain_reduce_op op, float *scratch)
{
    const int n = c->size, r = c->rank;
    const size_t C = RING_CHUNK_FLOATS;
    const float divisor = op == DTRAIN_REDUCE_AVG ? (float)n : 0.0f;
    long slot_reader[3] = {-1, -1, -1}; /* the send op that forwards each scratch slot's partial sum */
    unsigned next_slot = 0;
    struct engine_plan p;

    engine_begin(&p, next, prev, WIRE_OP_REDUCE_SCATTER, (unsigned)op, 0, count, count);
    for (size_t off = 0; off < count; off += C) {
        size_t L = count - off < C ? count - off : C;
        long last_recv = -1;
        int last_slot = -1;
        for (int k = 0; k < n - 1; k++) {
            int sseg = mod(r - k - 1, n), rseg = mod(r - k - 2, n);
            const float *src = k == 0 ? in + (size_t)sseg * count + off : scratch + (size_t)last_slot * C;
            long sent = engine_send(&p, src, L * sizeof(float), k == 0 ? -1 : last_recv);
            if (last_slot >= 0)
                slot_reader[last_slot] = sent;
            const float *mine = in + (size_t)rseg * count + off;
            if (k < n - 2) { /* a partial sum, forwarded by the next step */
                int slot = (int)(next_slot++ % 3);
                last_recv = engine_recv(&p, scratch + (size_t)slot * C, L * sizeof(float), RECV_REDUCE, mine, 0.0f,
                                        slot_reader[slot]);
                last_slot = slot;
            } else { /* rseg == r: the finished sum */
                engine_recv(&p, out + off, L * sizeof(float), RECV_REDUCE, mine, divisor, -1);
                last_slot = -1;
            }
        }
    }
    return run(c, next, prev, &p);
}

/* The all-gather of `each` bytes per member, in slices of `slice` bytes;
 * the header counts `count` (floats, or bytes); a byte message is padded to
 * a multiple of 4 on the link (engine_pad), as broadcast and send are. */
static int gather(struct dtrain_comm *c, struct link *next, struct link *prev, enum wire_op op, const void *in,
                  void *out, size_t each, size_t count, size_t slice)
{
    const int n = c->size, r = c->rank;
    unsigned char *o = out, *own = o + (size_t)r * each;
    const unsigned char *i = in;
    struct engine_plan p;

    /* This member's block goes out from `in` and lands in its place in
     * `out` as it is sent (engine_send_copy), piece by piece while in
     * cache; overlapping buffers are moved first, as before. */
    uintptr_t ib = (uintptr_t)i, ob = (uintptr_t)o;
    int fused = n > 1 && (ib + each <= ob || ob + (size_t)n * each <= ib);
    if (!fused && i != own)
        memmove(own, in, each);
    engine_begin(&p, next, prev, op, 0, 0, count, count);
    for (size_t off = 0; off < each; off += slice) {
        size_t L = each - off < slice ? each - off : slice;
        long last_recv = -1;
        for (int k = 0; k < n - 1; k++) {
            int sseg = mod(r - k, n), rseg = mod(r - k - 1, n);
            if (k == 0 && fused)
                engine_send_copy(&p, i + off, L, -1, own + off);
            else
                engine_send(&p, o + (size_t)sseg * each + off, L, k == 0 ? -1 : last_recv);
            last_recv = engine_recv(&p, o + (size_t)rseg * each + off, L, RECV_COPY, NULL, 0.0f, -1);
        }
    }
    engine_pad(&p, (size_t)(n - 1) * each, 1, 1);
    return run(c, next, prev, &p);
}

int ring_all_gather(struct dtrain_comm *c, struct link *next, struct link *prev, const float *in, float *out,
                    size_t count)
{
    return gather(c, next, prev, WIRE_OP_ALL_GATHER, in, out, count * sizeof(float), count,
                  RING_CHUNK_FLOATS * sizeof(float));
}

int ring_all_gather_bytes(struct dtrain_comm *c, struct link *next, struct link *prev, const void *in, void *out,
                          size_t bytes)
{
    return gather(c, next, prev, WIRE_OP_ALL_GATHER_BYTES, in, out, bytes, bytes, RING_CHUNK_FLOATS * sizeof(float));
}

int ring_broadcast(struct dtrain_comm *c, struct link *next, struct link *prev, void *buf, size_t bytes, int root)
{
    const int n = c->size;
    const int pos = mod(c->rank - root, n); /* 0: root, n-1: end of the chain */
    struct link *s = pos < n - 1 ? next : NULL;
    struct link *r = pos > 0 ? prev : NULL;
    struct engine_plan p;

    engine_begin(&p, s, r, WIRE_OP_BROADCAST, 0, (unsigned)root, bytes, bytes);
    long got = r != NULL ? engine_recv(&p, buf, bytes, RECV_COPY, NULL, 0.0f, -1) : -1;
    if (s != NULL)
        engine_send(&p, buf, bytes, got);
    engine_pad(&p, bytes, s != NULL, r != NULL);
    return run(c, s, r, &p);
}

int ring_sendrecv(struct dtrain_comm *c, struct link *to, const void *sendbuf, size_t send_bytes, struct link *from,
                  void *recvbuf, size_t recv_bytes)
{
    struct engine_plan p;
    engine_begin(&p, to, from, WIRE_OP_SEND, 0, 0, send_bytes, recv_bytes);
    if (to != NULL) {
        engine_send(&p, sendbuf, send_bytes, -1);
        engine_pad(&p, send_bytes, 1, 0);
    }
    if (from != NULL) {
        engine_recv(&p, recvbuf, recv_bytes, RECV_COPY, NULL, 0.0f, -1);
        engine_pad(&p, recv_bytes, 0, 1);
    }
    return run(c, to, from, &p);
}
