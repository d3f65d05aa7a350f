/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Communication on the kernels' memory (runtime/parallel/dtrain_pcomm.h):
 * the staged path a GPU rank takes on the cpu comm backend (download into
 * a staging buffer, communicate, upload) against the direct path, for every
 * call the trainer makes, on 4 local ranks (local_boot.h) with the real cpu
 * kernels and communicators.  The cpu kernels' memory is host memory, so
 * both paths run here; staging is forced by setting the struct's flag after
 * init (what dtrain_pcomm_init does for cuda kernels on a cpu
 * communicator).  The refusal of the cpu kernels on an nccl communicator
 * needs a GPU to make one and is not checked here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_kernels.h"
#include "parallel/dtrain_pcomm.h"
#include "local_boot.h"
#include "tap.h"

#define WORLD 4
#define N 1000 /* floats per rank: not a multiple of the ring's chunks */

struct result {
    int ran;
    char err[256];
    int allreduce, reduce_scatter, all_gather, all_gather_in_place, sendrecv, p2p, grown;
};

static void fill(float *x, size_t n, int rank, int salt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)sin(0.001 * (double)(i + 1) * (rank + 1) + salt);
}

/* Run one call both ways on copies of the same input; 1 when the outputs are bit-identical. */
static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    struct result *r = result;
    struct dtrain_comms comms;
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options kopt = {.threads = 1};
    struct dtrain_pcomm direct, staged;
    (void)ctx;
    if (local_boot_comms(bs, 20000, 0, &comms, NULL, r->err, sizeof r->err) != DTRAIN_OK)
        return 1;
    dtrain_comm *world = comms.group[DTRAIN_GROUP_WORLD];
    int me = bs->rank, n = WORLD;
    size_t bytes = (size_t)N * n * sizeof(float);
    if (dtrain_kernels_create("cpu", &kopt, &k, r->err, sizeof r->err) != 0 ||
        dtrain_pcomm_init(&direct, k, world, r->err, sizeof r->err) != DTRAIN_OK ||
        dtrain_pcomm_init(&staged, k, world, r->err, sizeof r->err) != DTRAIN_OK)
        goto out;
    staged.staged = 1;
    float *a = dtrain_k_alloc(k, bytes), *b = dtrain_k_alloc(k, bytes);
    float *x = dtrain_k_alloc(k, bytes), *y = dtrain_k_alloc(k, bytes);
    if (a == NULL || b == NULL || x == NULL || y == NULL) {
        snprintf(r->err, sizeof r->err, "out of memory");
        goto out;
    }
    int ok_rc = 1;
#define BOTH(call_direct, call_staged) \
    ok_rc &= (call_direct) == DTRAIN_OK && (call_staged) == DTRAIN_OK
    /* all-reduce */
    fill(a, N, me, 1);
    memcpy(b, a, N * sizeof(float));
    BOTH(dtrain_pcomm_allreduce(&direct, a, N, "ar", r->err, sizeof r->err),
         dtrain_pcomm_allreduce(&staged, b, N, "ar", r->err, sizeof r->err));
    r->allreduce = memcmp(a, b, N * sizeof(float)) == 0;
    /* reduce-scatter in place: out = in + rank * N */
    fill(a, (size_t)N * n, me, 2);
    memcpy(b, a, bytes);
    BOTH(dtrain_pcomm_reduce_scatter(&direct, a, a + (size_t)me * N, N, "rs", r->err, sizeof r->err),
         dtrain_pcomm_reduce_scatter(&staged, b, b + (size_t)me * N, N, "rs", r->err, sizeof r->err));
    r->reduce_scatter = memcmp(a + (size_t)me * N, b + (size_t)me * N, N * sizeof(float)) == 0;
    /* all-gather out of place, then in place */
    fill(x, N, me, 3);
    BOTH(dtrain_pcomm_all_gather(&direct, x, a, N, "ag", r->err, sizeof r->err),
         dtrain_pcomm_all_gather(&staged, x, b, N, "ag", r->err, sizeof r->err));
    r->all_gather = memcmp(a, b, bytes) == 0;
    fill(a + (size_t)me * N, N, me, 4);
    memcpy(b + (size_t)me * N, a + (size_t)me * N, N * sizeof(float));
    BOTH(dtrain_pcomm_all_gather(&direct, a + (size_t)me * N, a, N, "ag", r->err, sizeof r->err),
         dtrain_pcomm_all_gather(&staged, b + (size_t)me * N, b, N, "ag", r->err, sizeof r->err));
    r->all_gather_in_place = memcmp(a, b, bytes) == 0;
    /* sendrecv around the ring (the tied embedding's exchange is one), sizes differing */
    int to = (me + 1) % n, from = (me + n - 1) % n;
    fill(x, N, me, 5);
    size_t got = N - (size_t)from; /* what `from` sends */
    BOTH(dtrain_pcomm_sendrecv(&direct, x, N - (size_t)me, to, a, got, from, "sr", r->err, sizeof r->err),
         dtrain_pcomm_sendrecv(&staged, x, N - (size_t)me, to, b, got, from, "sr", r->err, sizeof r->err));
    r->sendrecv = memcmp(a, b, got * sizeof(float)) == 0;
    /* send / recv between pairs (0,1) and (2,3), the pipeline's pattern, staged on both ends */
    int peer = me ^ 1;
    fill(x, N, me, 6);
    if (me % 2 == 0)
        BOTH(dtrain_pcomm_send(&direct, x, N, peer, "send", r->err, sizeof r->err),
             dtrain_pcomm_send(&staged, x, N, peer, "send", r->err, sizeof r->err));
    else
        BOTH(dtrain_pcomm_recv(&direct, a, N, peer, "recv", r->err, sizeof r->err),
             dtrain_pcomm_recv(&staged, b, N, peer, "recv", r->err, sizeof r->err));
    r->p2p = me % 2 == 0 || memcmp(a, b, N * sizeof(float)) == 0;
    /* the staging buffer grew to the largest call (N * WORLD floats) and was only allocated when staged */
    r->grown = staged.host_floats == (size_t)N * n && direct.host == NULL;
    r->ran = ok_rc;
    dtrain_k_free(k, a);
    dtrain_k_free(k, b);
    dtrain_k_free(k, x);
    dtrain_k_free(k, y);
out:
    if (k != NULL) {
        dtrain_pcomm_release(&direct);
        dtrain_pcomm_release(&staged);
        dtrain_kernels_destroy(k);
    }
    dtrain_comm_destroy_all(&comms);
    return r->ran ? 0 : 1;
}

int main(void)
{
    struct result res[WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD];
    char err[256];
    memset(res, 0, sizeof res);
    int rc = local_boot_run(1, 1, WORLD, rank_main, NULL, sizeof res[0], res, codes, 60, err, sizeof err);
    int ran = rc == 0, ar = 1, rs = 1, ag = 1, agi = 1, sr = 1, p2p = 1, grown = 1;
    for (int r = 0; r < WORLD; r++) {
        if (res[r].err[0])
            diag("rank %d: %s", r, res[r].err);
        ran &= res[r].ran;
        ar &= res[r].allreduce;
        rs &= res[r].reduce_scatter;
        ag &= res[r].all_gather;
        agi &= res[r].all_gather_in_place;
        sr &= res[r].sendrecv;
        p2p &= res[r].p2p;
        grown &= res[r].grown;
    }
    ok(ran, "%d ranks run every call both ways (%s)", WORLD, ran ? "ok" : err);
    ok(ran && ar, "staged all-reduce = direct, bit for bit");
    ok(ran && rs, "staged reduce-scatter in place = direct");
    ok(ran && ag, "staged all-gather = direct");
    ok(ran && agi, "staged all-gather in place = direct");
    ok(ran && sr, "staged sendrecv of different sizes around the ring = direct");
    ok(ran && p2p, "staged send/recv between pipeline pairs = direct");
    ok(ran && grown, "the staging buffer is made only when staged, as large as the largest call");

    /* the cpu kernels' host memory cannot go to a GPU communicator */
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options kopt = {.threads = 1};
    struct dtrain_pcomm p;
    ok(dtrain_kernels_create("cpu", &kopt, &k, err, sizeof err) == 0 && dtrain_kernels_host_memory(k) == 1,
       "the cpu kernels' memory is host memory");
    ok(k != NULL && dtrain_pcomm_init(&p, k, NULL, err, sizeof err) == DTRAIN_OK && !p.staged,
       "a group of one (no communicator) is never staged");
    if (k != NULL)
        dtrain_kernels_destroy(k);
    return tap_done();
}
