/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Property test of the planner over random topologies (seeded, so every run
 * sees the same cases).  For each random node and job shape, checked against
 * an independent brute force over every assignment of tasks to GPUs:
 *   - the plan maps each node's tasks one-to-one onto its GPUs;
 *   - a plan is found exactly when some assignment keeps every TP group
 *     inside one island, and then every TP group is inside one island;
 *   - its slowest TP link (min over groups of the min pair bandwidth) is
 *     the best any valid assignment achieves;
 *   - with allow_pcie a plan always exists, with a warning exactly when no
 *     island-respecting one does;
 *   - the same input gives the same plan. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_plan.h"
#include "tap.h"
#include "topo_model.h"

#define CASES 400

static uint64_t rng_state = 0x243f6a8885a308d3ULL;
static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

static struct dtrain_topo *random_topo(int n)
{
    struct dtrain_topo *t = topo_model_new();
    if (!t)
        return NULL;
    t->ngpus = n;
    for (int i = 0; i < n; i++) {
        t->gpus[i].index = i;
        snprintf(t->gpus[i].busid, sizeof(t->gpus[i].busid), "0000:%02x:00.0", 16 * (i + 1));
        t->gpus[i].vendor_id = 0x10de;
        t->gpus[i].numa_node = i < n / 2 ? 0 : 1;
        snprintf(t->gpus[i].cpulist, sizeof(t->gpus[i].cpulist), "%d-%d", 8 * t->gpus[i].numa_node,
                 8 * t->gpus[i].numa_node + 7);
    }
    /* Sparse or dense random links; bandwidths 25..100 GB/s. */
    unsigned density = 1 + rnd(4); /* in quarters */
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            t->pcie[a][b] = t->pcie[b][a] = (unsigned char)rnd(3);
            if (rnd(4) < density)
                topo_model_set_link(t, a, b, 25000LL * (1 + rnd(4)));
        }
    t->source = DTRAIN_LINKS_HWLOC_NVLINK;
    topo_model_finish(t);
    return t;
}

struct brute {
    const struct dtrain_topo *t;
    int K, T;
    int used[DTRAIN_TOPO_MAX_GPUS];
    int gpu_of[DTRAIN_TOPO_MAX_GPUS];
    int found;
    double best; /* best min-over-groups of min pair bandwidth */
};

static double bottleneck(const struct dtrain_topo *t, const int *gpu_of, int K, int T)
{
    double worst = -1;
    if (T == 1)
        return 0;
    for (int g = 0; g < K / T; g++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++) {
                double v = dtrain_topo_bandwidth(t, gpu_of[g * T + i], gpu_of[g * T + j]);
                if (worst < 0 || v < worst)
                    worst = v;
            }
    return worst;
}

/* Every assignment of local tasks to distinct GPUs with each TP group in
 * one island (TP groups as sets: members of a group in ascending order). */
static void brute_from(struct brute *b, int task)
{
    if (task == b->K) {
        double v = bottleneck(b->t, b->gpu_of, b->K, b->T);
        if (!b->found || v > b->best)
            b->best = v;
        b->found = 1;
        return;
    }
    int pos = task % b->T;
    for (int x = 0; x < b->t->ngpus; x++) {
        if (b->used[x])
            continue;
        if (pos > 0 && (x < b->gpu_of[task - 1] ||
                        dtrain_topo_island_of(b->t, x) != dtrain_topo_island_of(b->t, b->gpu_of[task - pos])))
            continue;
        b->used[x] = 1;
        b->gpu_of[task] = x;
        brute_from(b, task + 1);
        b->used[x] = 0;
    }
}

int main(void)
{
    int one_to_one = 1, exists_iff = 1, in_islands = 1, optimal = 1, pcie_ok = 1, deterministic = 1;
    int nfound = 0, nrefused = 0;
    char err[512];

    for (int c = 0; c < CASES; c++) {
        int n = 2 + (int)rnd(7); /* 2..8 GPUs */
        struct dtrain_topo *t = random_topo(n);
        if (!t)
            break;
        int T = 1 + (int)rnd(4);
        if (T > n)
            T = n;
        int K = T * (1 + (int)rnd((unsigned)(n / T)));
        int N = 1 + (int)rnd(2);
        int groups = N * K / T, P = 1;
        for (int d = 1 + (int)rnd((unsigned)groups); d >= 1; d--)
            if (groups % d == 0) {
                P = d;
                break;
            }
        const dtrain_topo *nodes[2] = {t, t};
        struct dtrain_shape shape = {T, P, 0, N, K};
        struct dtrain_policy strict = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES}, lenient = {1, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
        dtrain_plan *p = NULL, *q = NULL;

        struct brute b;
        memset(&b, 0, sizeof(b));
        b.t = t;
        b.K = K;
        b.T = T;
        brute_from(&b, 0);

        int rc = dtrain_plan_place_tasks(&shape, nodes, &strict, &p, err, sizeof(err));
        if ((rc == DTRAIN_OK) != b.found || (rc != DTRAIN_OK && rc != DTRAIN_ERR_REFUSED)) {
            exists_iff = 0;
            diag("case %d: n=%d T=%d K=%d: planner rc %d, brute force %s (%s)", c, n, T, K, rc,
                 b.found ? "found one" : "found none", err);
        }
        if (rc == DTRAIN_OK) {
            nfound++;
            for (int node = 0; node < N; node++) {
                int seen[DTRAIN_TOPO_MAX_GPUS] = {0}, gpu_of[DTRAIN_TOPO_MAX_GPUS];
                for (int l = 0; l < K; l++) {
                    const struct dtrain_task_placement *task = dtrain_plan_task(p, node * K + l);
                    if (task->gpu < 0 || task->gpu >= n || seen[task->gpu]++)
                        one_to_one = 0;
                    gpu_of[l] = task->gpu < 0 ? 0 : task->gpu;
                    const struct dtrain_task_placement *lead = dtrain_plan_task(p, node * K + l - task->tp_rank);
                    if (dtrain_topo_island_of(t, task->gpu) != dtrain_topo_island_of(t, lead->gpu))
                        in_islands = 0;
                }
                double v = bottleneck(t, gpu_of, K, T);
                if (v != b.best) {
                    optimal = 0;
                    diag("case %d: n=%d T=%d K=%d: TP bottleneck %.0f GB/s, best possible %.0f", c, n, T, K, v, b.best);
                }
            }
            if (dtrain_plan_place_tasks(&shape, nodes, &strict, &q, err, sizeof(err)) != DTRAIN_OK)
                deterministic = 0;
            else
                for (int r = 0; r < N * K; r++)
                    if (memcmp(dtrain_plan_task(p, r), dtrain_plan_task(q, r), sizeof(struct dtrain_task_placement)))
                        deterministic = 0;
            dtrain_plan_free(q);
            q = NULL;
        } else {
            nrefused++;
        }
        dtrain_plan_free(p);
        p = NULL;

        rc = dtrain_plan_place_tasks(&shape, nodes, &lenient, &p, err, sizeof(err));
        if (rc != DTRAIN_OK || (dtrain_plan_warning(p) != NULL) == b.found)
            pcie_ok = 0;
        dtrain_plan_free(p);
        dtrain_topo_free(t);
    }
    diag("%d random cases: %d placed, %d refused", CASES, nfound, nrefused);
    ok(nfound > CASES / 4 && nrefused > CASES / 20, "the random cases mix placeable and refused shapes");
    ok(exists_iff, "a plan is found exactly when a valid assignment exists (brute force)");
    ok(one_to_one, "every plan maps each node's tasks one-to-one onto its GPUs");
    ok(in_islands, "every TP group lies inside one island");
    ok(optimal, "the slowest TP link is as fast as the best valid assignment allows");
    ok(pcie_ok, "with allow_pcie a plan always exists, warned exactly when islands are spanned");
    ok(deterministic, "the same input gives the same plan");
    return tap_done();
}
