/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-scale: per-rank costs of placement and bootstrap at 1k, 16k
 * and 100k ranks, without launching them (the real planner and the real
 * group model; a saved DGX H100 topology stands in for every node).
 *
 * For each world:
 *   planner, whole world (what every task built before: baseline) vs. one
 *     node's share (dtrain_plan_place_node, what the plugin and dtrain-launch
 *     build now): heap bytes held by the plan (mallinfo2) and time;
 *   PMI2 KVS volume: the keys the launcher's one exchange round puts (one per
 *     group leader, dt.*), and the bytes every node receives from Slurm's
 *     PMI2 fence, which hands each node the whole KVS (NCCL ids: "nccl:" +
 *     256 hex digits).
 * Usage: dtrain-bench-scale [FIXTURE.xml]  (default: the source tree's
 * dgx-h100.xml).  Times are one run each on a shared machine: read the
 * ratio, not the absolute figure. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain_plan.h"
#include "dtrain_topo.h"
#include "groups.h"

#ifndef DTRAIN_FIXTURES_DIR
#define DTRAIN_FIXTURES_DIR "tests/fixtures/topology"
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t heap_used(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Heap bytes and seconds of one plan (whole world when node < 0). */
static int measure(const struct dtrain_shape *shape, const dtrain_topo *const *nodes, int node, size_t *bytes,
                   double *secs)
{
    const struct dtrain_policy policy = {0, 0, 0, 0, NULL};
    char err[512];
    dtrain_plan *plan = NULL;
    size_t before = heap_used();
    double t0 = now_s();
    int rc = node < 0 ? dtrain_plan_place_tasks(shape, nodes, &policy, &plan, err, sizeof err)
                      : dtrain_plan_place_node(shape, nodes, &policy, node, &plan, err, sizeof err);
    *secs = now_s() - t0;
    *bytes = heap_used() - before;
    if (rc != DTRAIN_TOPO_OK)
        fprintf(stderr, "dtrain-bench-scale: %s\n", err);
    dtrain_plan_free(plan);
    return rc;
}

/* Keys of the one exchange round and their bytes (key + value + 2). */
static void kvs_volume(int T, int P, int D, long *keys, double *bytes)
{
    const struct dtrain_grid grid = {.tp = T, .pp = P, .dp = D};
    const size_t value = 5 + 256; /* "nccl:" + 128 bytes in hex */
    *keys = 0;
    *bytes = 0;
    for (int rank = 0; rank < T * P * D; rank++)
        for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
            struct dtrain_comm_group g;
            if (dtrain_group_of(&grid, rank, (enum dtrain_group_kind)k, &g) != 0 || !g.present || g.my_rank != 0 ||
                g.size < 2)
                continue;
            (*keys)++;
            *bytes += (double)(strlen(g.key) + value + 2);
        }
}

int main(int argc, char **argv)
{
    const char *xml = argc > 1 ? argv[1] : DTRAIN_FIXTURES_DIR "/dgx-h100.xml";
    char err[512];
    dtrain_topo *topo = NULL;
    if (dtrain_topo_load_xml(xml, &topo, err, sizeof err) != DTRAIN_TOPO_OK) {
        fprintf(stderr, "dtrain-bench-scale: %s\n", err);
        return 2;
    }
    /* T=8 P=16 on 8-GPU nodes, D from the world. */
    static const int worlds[] = {1024, 16384, 102400};
    printf("dtrain-bench-scale: %s, T=8 P=16, 8 tasks per node\n", dtrain_topo_summary(topo));
    printf("%8s %6s | %12s %9s | %12s %9s | %7s %7s | %8s %12s\n", "ranks", "nodes", "world plan", "time",
           "node share", "time", "bytes x", "time x", "KVS keys", "KVS/node");
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        int K = 8, N = worlds[w] / K, T = 8, P = 16, D = worlds[w] / (T * P);
        const dtrain_topo **nodes = malloc(sizeof *nodes * (size_t)N);
        if (!nodes)
            return 1;
        for (int i = 0; i < N; i++)
            nodes[i] = topo;
        struct dtrain_shape shape = {T, P, 0, N, K};
        size_t wb, nb;
        double wt, nt;
        if (measure(&shape, nodes, -1, &wb, &wt) != 0 || measure(&shape, nodes, N - 1, &nb, &nt) != 0)
            return 1;
        long keys;
        double kvs;
        kvs_volume(T, P, D, &keys, &kvs);
        printf("%8d %6d | %10.2f MB %7.2f ms | %10.1f KB %7.3f ms | %7.0f %7.0f | %8ld %9.2f MiB\n", worlds[w], N,
               (double)wb / 1e6, wt * 1e3, (double)nb / 1e3, nt * 1e3, (double)wb / (double)(nb ? nb : 1),
               wt / (nt > 0 ? nt : 1e-9), keys, kvs / (1024.0 * 1024.0));
        free(nodes);
    }
    printf("world plan = what every task built before (baseline); node share = what the plugin and\n"
           "dtrain-launch build now; KVS/node = bytes each node receives from the PMI2 fence (Slurm hands\n"
           "every node the whole KVS): it still grows with the world (one key per group leader).\n");
    dtrain_topo_free(topo);
    return 0;
}
