/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-scale: per-rank costs of placement and bootstrap at 1k, 16k
 * and 100k ranks, without launching them (the real planner and the real
 * group model; a saved DGX H100 topology stands in for every node).
 *
 * For each world:
 *   planner, whole world (what every task built before: baseline) vs. one
 *     node's share (dtrain_plan_place_node, what the plugin and dtrain-launch
 *     build now): heap bytes held by the plan (mallinfo2) and time;
 *   PMI2 KVS volume: the keys the launcher's one exchange round puts, before
 *     (one per group leader, dt.*: baseline) and now (WORLD's only), and the
 *     bytes every node receives from Slurm's PMI2 fence, which hands each
 *     node the whole KVS (NCCL ids: "nccl:" + 256 hex digits); and the ids a
 *     task receives over WORLD instead.
 *   cpu backend bootstrap of a group of n = 1k, 16k, 100k members
 *     (computed, not run: the messages are made with the real encoders of
 *     runtime/comm/cpu/wire.h, one per message the protocol sends, and
 *     their bytes counted; dtrain-bench-boot runs the real bootstrap up to
 *     8k members on one machine): what one member sends (BOOT and RING
 *     hellos, ring-link reply and ack, READY, and its address lookups: over
 *     WORLD at most 2 peers that are not ring neighbours, the checkpoint's
 *     copy peer and rank 0; the PP transfers and the tied embedding go to
 *     ring neighbours of the PP group and ask nothing), what the leader
 *     sends (per member JOINED, the 56-byte neighbours message, DONE, and
 *     the answers to its lookups) and the descriptors it holds (one
 *     connection per member, kept for the lookups, its pending list, the
 *     listening socket and ring links), against the whole table to every
 *     member (20 + 12 n bytes each: the baseline).
 * Usage: dtrain-bench-scale [FIXTURE.xml]  (default: the source tree's
 * dgx-h100.xml).  Times are one run each on a shared machine: read the
 * ratio, not the absolute figure. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/cpu/cpu_comm.h"
#include "dtrain_plan.h"
#include "dtrain_topo.h"
#include "groups.h"
#include "comm/cpu/wire.h"
#include "dtrain_clock.h"

#ifndef DTRAIN_FIXTURES_DIR
#define DTRAIN_FIXTURES_DIR "tests/fixtures/topology"
#endif

static size_t heap_used(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Heap bytes and seconds of one plan (whole world when node < 0). */
static int measure(const struct dtrain_shape *shape, const dtrain_topo *const *nodes, int node, size_t *bytes,
                   double *secs)
{
    const struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
    char err[512];
    dtrain_plan *plan = NULL;
    size_t before = heap_used();
    double t0 = dtrain_clock_s();
    int rc = node < 0 ? dtrain_plan_place_tasks(shape, nodes, &policy, &plan, err, sizeof err)
                      : dtrain_plan_place_node(shape, nodes, &policy, node, &plan, err, sizeof err);
    *secs = dtrain_clock_s() - t0;
    *bytes = heap_used() - before;
    if (rc != DTRAIN_OK)
        fprintf(stderr, "dtrain-bench-scale: %s\n", err);
    dtrain_plan_free(plan);
    return rc;
}

/* The keys of the one exchange round and their bytes (key + value + 2),
 * before (every group leader put its id: the baseline) and now (the
 * launcher's rule, dtrain_group_in_kvs: WORLD's id only); and now, the
 * most id bytes one task receives over WORLD instead (dtrain_comm_init_all:
 * one id per group it joins but does not lead; cpu: every kind, nccl: the
 * pipeline pairs, TP/PP/DP being split off WORLD). */
struct kvs_volume {
    long keys_before, keys_now;
    double bytes_before, bytes_now;
    int world_ids_cpu, world_ids_nccl; /* most ids one task receives over WORLD */
};

static void kvs_volume(int T, int P, int D, struct kvs_volume *v)
{
    const struct dtrain_grid grid = {.tp = T, .pp = P, .dp = D};
    const size_t value = 5 + 256; /* "nccl:" + 128 bytes in hex */
    memset(v, 0, sizeof *v);
    for (int rank = 0; rank < T * P * D; rank++) {
        int cpu = 0, nccl = 0;
        for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
            struct dtrain_comm_group g;
            if (dtrain_group_of(&grid, rank, (enum dtrain_group_kind)k, &g) != 0 || !g.present || g.size < 2)
                continue;
            double pair = (double)(strlen(g.key) + value + 2);
            if (g.my_rank == 0) {
                v->keys_before++;
                v->bytes_before += pair;
            }
            if (dtrain_group_in_kvs((enum dtrain_group_kind)k, &g)) {
                if (g.my_rank == 0) {
                    v->keys_now++;
                    v->bytes_now += pair;
                }
            } else if (g.my_rank != 0) {
                cpu++;
                nccl += !dtrain_group_split_off_world(DTRAIN_COMM_NCCL, (enum dtrain_group_kind)k);
            }
        }
        if (cpu > v->world_ids_cpu)
            v->world_ids_cpu = cpu;
        if (nccl > v->world_ids_nccl)
            v->world_ids_nccl = nccl;
    }
}

/* The cpu bootstrap of a group of n members, message by message with the
 * real encoders (see the header): bytes one member sends, bytes the
 * leader sends, the descriptors the leader holds, and the baseline (the
 * whole table to every member) the leader sent before. */
struct boot_cost {
    double member, leader, whole_table;
    long leader_fds;
};

static void boot_cost(int n, int lookups, struct boot_cost *b)
{
    unsigned char hello[WIRE_HELLO_LEN], table[WIRE_TABLE_LEN], reply[WIRE_REPLY_LEN], ack[WIRE_ACK_LEN],
        lookup[WIRE_LOOKUP_LEN], answer[WIRE_ANSWER_LEN], byte = WIRE_BOOT_JOINED;
    struct wire_hello h = {.kind = WIRE_BOOT, .group_size = (uint32_t)n, .from = 1, .port = 1};
    struct wire_peer peer = {.port = 1};
    memset(b, 0, sizeof *b);
    /* A member: BOOT hello, RING hello, the reply and ack of its ring link
     * (it receives from rank-1), READY, its lookups. */
    wire_hello_encode(&h, hello);
    b->member += sizeof hello;
    h.kind = WIRE_RING;
    wire_hello_encode(&h, hello);
    b->member += sizeof hello;
    wire_reply_encode(0, NULL, reply);
    wire_ack_encode(1, ack);
    b->member += sizeof reply + sizeof ack + sizeof byte;
    for (int k = 0; k < lookups; k++) {
        wire_lookup_encode((uint32_t)k, lookup);
        b->member += sizeof lookup;
    }
    /* The leader: its own ring link's part, then per member JOINED, the
     * neighbours message (head + 3 entries), DONE and the lookups' answers. */
    b->leader = sizeof hello + sizeof reply + sizeof ack;
    for (int i = 1; i < n; i++) {
        wire_table_head_encode((uint32_t)n, (uint32_t)i, 8, table);
        for (int k = 0; k < WIRE_TABLE_ENTRIES; k++)
            wire_peer_encode(&peer, table + WIRE_TABLE_HEAD_LEN + (size_t)k * WIRE_TABLE_ENTRY_LEN);
        b->leader += sizeof byte + sizeof table + sizeof byte;
        for (int k = 0; k < lookups; k++) {
            wire_answer_encode((uint32_t)k, &peer, answer);
            b->leader += sizeof answer;
        }
        b->whole_table += WIRE_TABLE_HEAD_LEN + (double)n * WIRE_TABLE_ENTRY_LEN;
    }
    int pending = n / CPU_PENDING_PER_SLOT < CPU_MAX_PENDING          ? CPU_MAX_PENDING
                  : n / CPU_PENDING_PER_SLOT > CPU_MAX_PENDING_LEADER ? CPU_MAX_PENDING_LEADER
                                                                     : n / CPU_PENDING_PER_SLOT;
    b->leader_fds = (long)(n - 1) + pending + 1 /* listening */ + 2 /* ring */ + 2 /* lookup thread's pipe */;
}

static void print_boot(const int *worlds, size_t nworlds)
{
    printf("\ncpu backend bootstrap of WORLD (n members; computed with the real wire encoders, not run)\n");
    printf("%8s | %10s | %12s %10s | %12s %8s | %14s %8s\n", "n", "member B", "leader B", "leader B/n", "leader fds",
           "fds/n", "whole table B", "x now");
    for (size_t w = 0; w < nworlds; w++) {
        struct boot_cost b;
        boot_cost(worlds[w], 2, &b);
        printf("%8d | %10.0f | %12.0f %10.1f | %12ld %8.3f | %14.3g %7.0fx\n", worlds[w], b.member, b.leader,
               b.leader / worlds[w], b.leader_fds, (double)b.leader_fds / worlds[w], b.whole_table,
               b.whole_table / b.leader);
    }
    printf("member B = what one member sends, the same at any n (O(1)); leader B/n constant = O(n) in all;\n"
           "leader fds: one connection per member (kept for the address lookups) + its pending list: raise\n"
           "`ulimit -n` past that (the leader raises its soft limit to the hard one itself); whole table B =\n"
           "what the leader sent before (20 + 12 n to every member, O(n^2): baseline), x now = that / leader B.\n");
}

int main(int argc, char **argv)
{
    const char *xml = argc > 1 ? argv[1] : DTRAIN_FIXTURES_DIR "/dgx-h100.xml";
    char err[512];
    dtrain_topo *topo = NULL;
    if (dtrain_topo_load_xml(xml, &topo, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, "dtrain-bench-scale: %s\n", err);
        return 2;
    }
    /* T=8 P=16 on 8-GPU nodes, D from the world. */
    static const int worlds[] = {1024, 16384, 102400};
    printf("dtrain-bench-scale: %s, T=8 P=16, 8 tasks per node\n", dtrain_topo_summary(topo));
    printf("%8s %6s | %12s %9s | %12s %9s | %7s %7s | %8s %12s | %8s %12s | %9s\n", "ranks", "nodes",
           "world plan", "time", "node share", "time", "bytes x", "time x", "keys was", "KVS/node was", "keys now",
           "KVS/node now", "ids/task");
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
        struct kvs_volume v;
        kvs_volume(T, P, D, &v);
        printf("%8d %6d | %10.2f MB %7.2f ms | %10.1f KB %7.3f ms | %7.0f %7.0f | %8ld %8.2f MiB | %8ld %10.0f B | "
               "%4d / %d\n",
               worlds[w], N, (double)wb / 1e6, wt * 1e3, (double)nb / 1e3, nt * 1e3,
               (double)wb / (double)(nb ? nb : 1), wt / (nt > 0 ? nt : 1e-9), v.keys_before,
               v.bytes_before / (1024.0 * 1024.0), v.keys_now, v.bytes_now, v.world_ids_cpu, v.world_ids_nccl);
        free(nodes);
    }
    printf("world plan = what every task built before (baseline); node share = what the plugin and\n"
           "dtrain-launch build now; KVS/node = bytes each node receives from the PMI2 fence (Slurm hands\n"
           "every node the whole KVS, nccl ids): 'was' one key per group leader (baseline), 'now' WORLD's\n"
           "id only; ids/task = the most ids one task then receives over WORLD (cpu / nccl), 272 bytes each.\n");
    print_boot(worlds, sizeof worlds / sizeof worlds[0]);
    dtrain_topo_free(topo);
    return 0;
}
