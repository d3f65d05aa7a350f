/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The placement planner on the fixtures: TP groups on the right GPUs, ranks
 * and coordinates, CPU lists, every refusal, cpu_only, check_shape. */
#include <stdlib.h>
#include <string.h>

#include "dtrain_plan.h"
#include "fixtures.h"
#include "tap.h"
#include "topo_model.h"

static char err[512];

static int plan_on(const dtrain_topo *topo, int T, int P, int D, int N, int K, int allow_pcie, int cpu_only,
                   dtrain_plan **out)
{
    const dtrain_topo *nodes[64];
    for (int i = 0; i < N && i < 64; i++)
        nodes[i] = topo;
    struct dtrain_shape shape = {T, P, D, N, K};
    /* GPU plans keep the GPU's whole NUMA node, which plan_consistent checks;
     * test_cpus.c checks the default, whole cores. */
    struct dtrain_policy policy = {allow_pcie, cpu_only, 0, 0, NULL,
                                   cpu_only ? DTRAIN_CPU_BIND_CORES : DTRAIN_CPU_BIND_NUMA};
    err[0] = '\0';
    *out = NULL;
    return dtrain_plan_place_tasks(&shape, N <= 64 ? nodes : NULL, &policy, out, err, sizeof(err));
}

/* Every task has coordinates matching its rank, node/local rank from block
 * distribution, and on each node distinct GPUs whose CPUs it gets. */
static int plan_consistent(const dtrain_plan *plan, const dtrain_topo *const *nodes)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    int T = s->tp, D = s->dp, K = s->tasks_per_node;
    if (dtrain_plan_world_size(plan) != s->tp * s->pp * s->dp || s->nnodes * K != dtrain_plan_world_size(plan))
        return 0;
    for (int r = 0; r < dtrain_plan_world_size(plan); r++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(plan, r);
        if (!t || t->rank != r || t->node != r / K || t->local_rank != r % K)
            return 0;
        if (dtrain_rank_of(t->tp_rank, t->dp_rank, t->pp_rank, T, D) != r || t->tp_rank >= T || t->dp_rank >= D ||
            t->pp_rank >= s->pp)
            return 0;
        const dtrain_topo *topo = nodes[t->node];
        if (t->gpu < 0 || t->gpu >= dtrain_topo_gpu_count(topo))
            return 0;
        const struct dtrain_gpu_info *g = dtrain_topo_gpu(topo, t->gpu);
        if (strcmp(g->busid, t->gpu_busid) != 0 || strcmp(g->cpulist, t->cpulist) != 0)
            return 0;
        for (int q = t->node * K; q < r; q++)
            if (dtrain_plan_task(plan, q)->gpu == t->gpu)
                return 0;
    }
    return 1;
}

/* GPUs of local TP group g on node n, sorted, as a bit mask. */
static unsigned long long group_mask(const dtrain_plan *plan, int node, int g)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    unsigned long long m = 0;
    for (int j = 0; j < s->tp; j++)
        m |= 1ULL << dtrain_plan_task(plan, node * s->tasks_per_node + g * s->tp + j)->gpu;
    return m;
}

static int groups_in_islands(const dtrain_plan *plan, const dtrain_topo *topo, int node)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    for (int r = node * s->tasks_per_node; r < (node + 1) * s->tasks_per_node; r++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(plan, r);
        const struct dtrain_task_placement *lead = dtrain_plan_task(plan, r - t->tp_rank);
        if (dtrain_topo_island_of(topo, t->gpu) != dtrain_topo_island_of(topo, lead->gpu))
            return 0;
    }
    return 1;
}

static void nvswitch_t4_p2(void)
{
    dtrain_topo *t = load_fixture("dgx-h100.xml");
    dtrain_plan *p;
    if (!t)
        return;
    int rc = plan_on(t, 4, 2, 0, 2, 8, 0, 0, &p);
    if (ok(rc == DTRAIN_OK, "DGX H100 T=4 P=2 N=2 K=8 is placed (%s)", err)) {
        const dtrain_topo *nodes[2] = {t, t};
        ok(dtrain_plan_shape(p)->dp == 2 && dtrain_plan_world_size(p) == 16, "D derived as 2, world 16");
        ok(plan_consistent(p, nodes), "ranks, coordinates, distinct GPUs and their CPUs are consistent");
        ok(groups_in_islands(p, t, 0) && groups_in_islands(p, t, 1), "TP groups inside the NVSwitch island");
        const struct dtrain_task_placement *r9 = dtrain_plan_task(p, 9);
        ok(r9->node == 1 && r9->local_rank == 1 && r9->tp_rank == 1 && r9->dp_rank == 0 && r9->pp_rank == 1,
           "rank 9 = node 1, local 1, tp 1 dp 0 pp 1");
        ok(dtrain_plan_warning(p) == NULL, "no warning");
        ok(dtrain_plan_task(p, 16) == NULL && dtrain_plan_task(p, -1) == NULL, "task out of range is NULL");
        dtrain_plan_free(p);
    }
    /* Same input, same plan. */
    dtrain_plan *a, *b;
    if (plan_on(t, 2, 2, 0, 2, 8, 0, 0, &a) == DTRAIN_OK) {
        if (plan_on(t, 2, 2, 0, 2, 8, 0, 0, &b) == DTRAIN_OK) {
            int same = 1;
            for (int r = 0; r < 16; r++)
                if (memcmp(dtrain_plan_task(a, r), dtrain_plan_task(b, r), sizeof(struct dtrain_task_placement)))
                    same = 0;
            ok(same, "planning twice gives the same plan");
            dtrain_plan_free(b);
        }
        dtrain_plan_free(a);
    }
    dtrain_topo_free(t);
}

static void dgx1(void)
{
    dtrain_topo *t = load_fixture("dgx1-v100.xml");
    dtrain_plan *p;
    if (!t)
        return;
    const dtrain_topo *nodes[1] = {t};
    if (ok(plan_on(t, 2, 1, 0, 1, 8, 0, 0, &p) == DTRAIN_OK, "DGX-1 T=2 (%s)", err)) {
        int all_double = 1;
        for (int g = 0; g < 4; g++) {
            const struct dtrain_task_placement *a = dtrain_plan_task(p, 2 * g), *b = dtrain_plan_task(p, 2 * g + 1);
            if (dtrain_topo_bandwidth(t, a->gpu, b->gpu) != 50)
                all_double = 0;
            diag("TP group %d: GPUs %d,%d (%.0f GB/s)", g, a->gpu, b->gpu, dtrain_topo_bandwidth(t, a->gpu, b->gpu));
        }
        ok(all_double, "DGX-1 T=2: every TP pair is a double-link (NV2, 50 GB/s) pair");
        ok(plan_consistent(p, nodes), "DGX-1 T=2: consistent");
        dtrain_plan_free(p);
    }
    if (ok(plan_on(t, 4, 1, 0, 1, 8, 0, 0, &p) == DTRAIN_OK, "DGX-1 T=4 (%s)", err)) {
        unsigned long long g0 = group_mask(p, 0, 0), g1 = group_mask(p, 0, 1);
        ok(g0 == 0x0f && g1 == 0xf0, "DGX-1 T=4: the fully connected quads {0,1,2,3} and {4,5,6,7} (got %llx %llx)",
           g0, g1);
        dtrain_plan_free(p);
    }
    if (ok(plan_on(t, 1, 8, 0, 1, 8, 0, 0, &p) == DTRAIN_OK, "DGX-1 T=1 P=8 (%s)", err)) {
        int chain = 1;
        for (int s = 0; s + 1 < 8; s++)
            if (dtrain_topo_bandwidth(t, dtrain_plan_task(p, s)->gpu, dtrain_plan_task(p, s + 1)->gpu) != 50)
                chain = 0;
        ok(chain, "DGX-1 P=8: consecutive pipeline stages sit on double links");
        dtrain_plan_free(p);
    }
    if (ok(plan_on(t, 2, 2, 0, 1, 8, 0, 0, &p) == DTRAIN_OK, "DGX-1 T=2 P=2 (%s)", err)) {
        /* DP peers (same stage) and PP neighbours: equal tp ranks should be linked. */
        int linked = 1;
        for (int r = 0; r < 8; r++)
            for (int q = 0; q < 8; q++) {
                const struct dtrain_task_placement *a = dtrain_plan_task(p, r), *b = dtrain_plan_task(p, q);
                int related = a->tp_rank == b->tp_rank && r != q &&
                              (a->pp_rank == b->pp_rank || a->dp_rank == b->dp_rank);
                if (related && dtrain_topo_bandwidth(t, a->gpu, b->gpu) == 0)
                    linked = 0;
            }
        ok(linked, "DGX-1 T=2 P=2: DP peers and PP neighbours of equal tp rank are NVLink-connected");
        dtrain_plan_free(p);
    }
    dtrain_topo_free(t);
}

static void pairs_fixture(const char *file, const char *what)
{
    dtrain_topo *t = load_fixture(file);
    dtrain_plan *p;
    if (!t)
        return;
    int n = dtrain_topo_gpu_count(t);
    if (ok(plan_on(t, 2, 1, 0, 1, n, 0, 0, &p) == DTRAIN_OK, "%s T=2 (%s)", what, err)) {
        int best = 1;
        for (int g = 0; g < n / 2; g++) {
            unsigned long long m = group_mask(p, 0, g);
            int low = __builtin_ctzll(m);
            if (m != 3ULL << low || low % 2 != 0)
                best = 0;
        }
        ok(best, "%s T=2: TP pairs are {0,1} {2,3} ...", what);
        dtrain_plan_free(p);
    }
    if (n == 4) {
        int rc = plan_on(t, 4, 1, 0, 1, 4, 0, 0, &p);
        ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "largest NVLink island (2 GPUs)") && strstr(err, "--dtrain-tp=2"),
           "%s T=4 refused: %s", what, err);
        rc = plan_on(t, 4, 1, 0, 1, 4, 1, 0, &p);
        ok(rc == DTRAIN_OK && dtrain_plan_warning(p) != NULL, "%s T=4 with allow_pcie: warning '%s'", what,
           p ? dtrain_plan_warning(p) : err);
        dtrain_plan_free(p);
    }
    dtrain_topo_free(t);
}

static void g4dn(void)
{
    dtrain_topo *t = load_fixture("g4dnmetal.xml");
    dtrain_plan *p;
    if (!t)
        return;
    int rc = plan_on(t, 2, 1, 0, 1, 8, 0, 0, &p);
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "PCIe only") && strstr(err, "--dtrain-allow-pcie"),
       "g4dn T=2 refused without allow_pcie: %s", err);
    rc = plan_on(t, 2, 1, 0, 1, 8, 1, 0, &p);
    if (ok(rc == DTRAIN_OK, "g4dn T=2 accepted with allow_pcie (%s)", err)) {
        ok(dtrain_plan_warning(p) && strstr(dtrain_plan_warning(p), "PCIe"), "with a warning: %s",
           dtrain_plan_warning(p) ? dtrain_plan_warning(p) : "(none)");
        int local = 1;
        for (int g = 0; g < 4; g++) {
            int a = dtrain_plan_task(p, 2 * g)->gpu, b = dtrain_plan_task(p, 2 * g + 1)->gpu;
            if (dtrain_topo_gpu(t, a)->numa_node != dtrain_topo_gpu(t, b)->numa_node)
                local = 0;
        }
        ok(local, "g4dn PCIe pairs stay within one NUMA node");
        dtrain_plan_free(p);
    }
    rc = plan_on(t, 1, 1, 0, 1, 8, 0, 0, &p);
    ok(rc == DTRAIN_OK && dtrain_plan_warning(p) == NULL, "g4dn T=1 needs no NVLink and warns nothing");
    dtrain_plan_free(p);
    dtrain_topo_free(t);
}

static void missing_and_degraded(void)
{
    dtrain_topo *t = load_fixture("dgx1-v100-gpu5-missing.xml");
    dtrain_plan *p;
    if (t) {
        int rc = plan_on(t, 2, 1, 0, 1, 8, 0, 0, &p);
        ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "7 GPUs for 8 tasks") && strstr(err, "--ntasks-per-node=7"),
           "missing GPU: 8 tasks on 7 GPUs refused: %s", err);
        if (ok(plan_on(t, 4, 1, 0, 1, 4, 0, 0, &p) == DTRAIN_OK, "missing GPU: T=4 K=4 (%s)", err)) {
            ok(group_mask(p, 0, 0) == 0x0f, "missing GPU: the intact quad {0,1,2,3} is used");
            dtrain_plan_free(p);
        }
        if (ok(plan_on(t, 2, 1, 0, 1, 6, 0, 0, &p) == DTRAIN_OK, "missing GPU: T=2 K=6 (%s)", err)) {
            int all_double = 1;
            for (int g = 0; g < 3; g++)
                if (dtrain_topo_bandwidth(t, dtrain_plan_task(p, 2 * g)->gpu, dtrain_plan_task(p, 2 * g + 1)->gpu) != 50)
                    all_double = 0;
            ok(all_double, "missing GPU: 3 double-link pairs still found");
            dtrain_plan_free(p);
        }
        dtrain_topo_free(t);
    }
    t = load_fixture("dgx-h100-degraded.xml");
    if (t) {
        if (ok(plan_on(t, 2, 1, 0, 1, 6, 0, 0, &p) == DTRAIN_OK, "degraded link: T=2 K=6 (%s)", err)) {
            int uses3 = 0;
            for (int r = 0; r < 6; r++)
                uses3 |= dtrain_plan_task(p, r)->gpu == 3;
            ok(!uses3, "degraded link: the GPU with fewer links (3) is left out when a GPU can be spared");
            dtrain_plan_free(p);
        }
        ok(plan_on(t, 8, 1, 0, 1, 8, 0, 0, &p) == DTRAIN_OK && dtrain_plan_warning(p) == NULL,
           "degraded link: T=8 still one island, placed without warning");
        dtrain_plan_free(p);
        dtrain_topo_free(t);
    }
    t = load_fixture("amd-mi250x.xml");
    if (t) {
        if (ok(plan_on(t, 2, 1, 0, 1, 8, 0, 0, &p) == DTRAIN_OK, "MI250X T=2 (%s)", err)) {
            int in_package = 1;
            for (int g = 0; g < 4; g++)
                if (dtrain_topo_bandwidth(t, dtrain_plan_task(p, 2 * g)->gpu, dtrain_plan_task(p, 2 * g + 1)->gpu) != 200)
                    in_package = 0;
            ok(in_package, "MI250X T=2: TP pairs are the in-package GCD pairs (200 GB/s XGMI)");
            dtrain_plan_free(p);
        }
        dtrain_topo_free(t);
    }
    t = load_fixture("hgx-a100-4gpu.xml");
    if (t) {
        ok(plan_on(t, 4, 1, 0, 1, 4, 0, 0, &p) == DTRAIN_OK && group_mask(p, 0, 0) == 0x0f,
           "HGX A100 4-GPU: T=4 takes the whole board");
        dtrain_plan_free(p);
        dtrain_topo_free(t);
    }
}

static void heterogeneous_nodes(void)
{
    dtrain_topo *full = load_fixture("dgx1-v100.xml"), *miss = load_fixture("dgx1-v100-gpu5-missing.xml");
    if (full && miss) {
        const dtrain_topo *nodes[2] = {full, miss};
        struct dtrain_shape shape = {4, 1, 0, 2, 4};
        struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_NUMA}; /* plan_consistent: the GPU's NUMA node */
        dtrain_plan *p = NULL;
        int rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_OK && plan_consistent(p, nodes) && group_mask(p, 1, 0) == 0x0f,
           "nodes with different models: each planned on its own (%s)", err);
        dtrain_plan_free(p);
        shape.tasks_per_node = 8;
        rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "node 1"), "the short node is named: %s", err);
        const dtrain_topo *holes[2] = {full, NULL};
        shape.tasks_per_node = 4;
        rc = dtrain_plan_place_tasks(&shape, holes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_ERR_INPUT && p == NULL, "a missing node model is bad input: %s", err);
    }
    dtrain_topo_free(full);
    dtrain_topo_free(miss);
}

/* Fabric membership as NVML reports it on GB200-class nodes (written into
 * the model here: hwloc files never carry it, and tests/topo/test_discovery
 * reads it through the fake NVML). */
static void set_fabric(dtrain_topo *t, int state, const char *cluster, unsigned clique)
{
    for (int i = 0; i < t->ngpus; i++) {
        t->gpus[i].fabric_state = state;
        t->gpus[i].fabric_clique = clique;
        snprintf(t->gpus[i].fabric_cluster, sizeof t->gpus[i].fabric_cluster, "%s", cluster);
    }
    topo_model_finish(t);
}

/* 4 nodes x 4 GPUs (HGX A100 4-GPU boards standing in for GB200 trays), two
 * cliques of 8 GPUs across 2 nodes each. */
static void multinode_domains(void)
{
    static const char cluster[] = "6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c";
    dtrain_topo *a = load_fixture("hgx-a100-4gpu.xml"), *b = load_fixture("hgx-a100-4gpu.xml");
    dtrain_topo *plain = load_fixture("hgx-a100-4gpu.xml");
    char key[DTRAIN_TOPO_DOMAIN_LEN], why[512];
    if (!a || !b || !plain) {
        dtrain_topo_free(a);
        dtrain_topo_free(b);
        dtrain_topo_free(plain);
        return;
    }
    set_fabric(a, 3, cluster, 1);
    set_fabric(b, 3, cluster, 2);
    ok(dtrain_topo_nvlink_domain(a, key, sizeof key, why, sizeof why) == 1 &&
           strcmp(key, "6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c/1") == 0 && strstr(dtrain_topo_summary(a), key),
       "a registered node's domain is cluster/clique (%s)", dtrain_topo_summary(a));
    ok(dtrain_topo_nvlink_domain(plain, key, sizeof key, why, sizeof why) == 0 && key[0] == '\0',
       "a node without fabric has no domain");

    const dtrain_topo *nodes[4] = {a, a, b, b};
    struct dtrain_shape shape = {8, 1, 0, 4, 4};
    struct dtrain_policy policy = {0, 0, 8, 0, NULL, DTRAIN_CPU_BIND_CORES};
    dtrain_plan *p = NULL;
    err[0] = '\0';
    int rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
    int good = rc == DTRAIN_OK && dtrain_plan_shape(p)->dp == 2;
    for (int r = 0; good && r < 16; r++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(p, r);
        int node_gpus = 0;
        for (int q = (r / 4) * 4; q < (r / 4) * 4 + 4; q++)
            node_gpus |= 1 << dtrain_plan_task(p, q)->gpu;
        good = t->tp_rank == r % 8 && t->dp_rank == r / 8 && t->node == r / 4 && node_gpus == 0xf &&
               nodes[t->node] == (t->dp_rank == 0 ? a : b);
    }
    ok(good, "T=8 on 4 nodes x 4 GPUs, domains of 8: each TP group holds the 2 nodes of one clique, every GPU once "
       "(%s)", err);
    dtrain_plan_free(p);

    shape.tp = 16;
    rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && p == NULL && strstr(err, "T=16") && strstr(err, "(8 GPUs") &&
           strstr(err, "--dtrain-tp=8"),
       "T=16 refused, naming the domain size: %s", err);

    const dtrain_topo *mixed[4] = {a, b, a, b};
    shape.tp = 8;
    rc = dtrain_plan_place_tasks(&shape, mixed, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "TP group of nodes 0 and 1") && strstr(err, "/1 (node 0)") &&
           strstr(err, "/2 (node 1)"),
       "a TP group over nodes of two cliques is refused, naming both: %s", err);

    const dtrain_topo *noplain[4] = {a, a, plain, plain};
    rc = dtrain_plan_place_tasks(&shape, noplain, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "node 2") && strstr(err, "no multi-node NVLink domain"),
       "a node without fabric in a node-spanning TP group is refused: %s", err);

    set_fabric(b, 2, cluster, 2);
    rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "node 2") && strstr(err, "in progress"),
       "a node whose fabric registration is in progress is refused: %s", err);
    set_fabric(b, 3, cluster, 2);
    b->gpus[3].fabric_clique = 7;
    rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "different NVLink domains"),
       "a node whose GPUs report two cliques is refused: %s", err);

    policy.nvlink_domain_gpus = 0;
    rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "must stay on one node"),
       "without the site's domain size TP stays inside a node: %s", err);

    ok(dtrain_plan_check_shape(8, 1, 0, 16, 4, 8, err, sizeof(err)) == DTRAIN_OK, "check_shape: T=8 K=4 domain 8");
    ok(dtrain_plan_check_shape(16, 1, 0, 0, 0, 8, err, sizeof(err)) == DTRAIN_ERR_REFUSED && strstr(err, "8 GPUs"),
       "check_shape: T=16 over a domain of 8, task counts unknown (sbatch): %s", err);
    ok(dtrain_plan_check_shape(6, 1, 0, 0, 4, 72, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "multiple of the 4 tasks"),
       "check_shape: T=6 with K=4 would split a node: %s", err);
    ok(dtrain_plan_check_shape(16, 1, 0, 0, 4, 72, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "does not divide") && strstr(err, "--dtrain-tp=12"),
       "check_shape: T=16 does not tile a domain of 72: %s", err);
    ok(dtrain_plan_check_shape(8, 1, 0, 0, 8, 72, err, sizeof(err)) == DTRAIN_OK,
       "check_shape: T=8 inside a node of 8 needs nothing of the domain");

    /* --dtrain-pp-in-domain (policy.pp_in_domain) */
    set_fabric(b, 3, cluster, 2); /* all of b in clique 2 again */
    err[0] = '\0';
    policy.nvlink_domain_gpus = 8;
    policy.pp_in_domain = 1;
    struct dtrain_shape pp2 = {4, 2, 0, 2, 4}; /* T=4 P=2 D=1 on 2 nodes: the PP groups join nodes 0 and 1 */
    const dtrain_topo *same[2] = {a, a}, *two[2] = {a, b}, *nofab[2] = {plain, plain};
    rc = dtrain_plan_place_tasks(&pp2, same, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_OK && dtrain_plan_task(p, 4)->pp_rank == 1 && dtrain_plan_task(p, 4)->node == 1,
       "pp-in-domain: T=4 P=2 over 2 nodes of one clique is placed (%s)", err);
    dtrain_plan_free(p);
    rc = dtrain_plan_place_tasks(&pp2, two, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "PP group of nodes 0 and 1") && strstr(err, "/1 (node 0)") &&
           strstr(err, "/2 (node 1)") && strstr(err, "--dtrain-pp-in-domain out"),
       "pp-in-domain: a PP group over two cliques is refused, naming both: %s", err);
    rc = dtrain_plan_place_node(&pp2, two, &policy, 1, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "PP group of nodes 0 and 1"),
       "pp-in-domain: node 1's share alone finds it too: %s", err);
    rc = dtrain_plan_place_tasks(&pp2, nofab, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "no multi-node NVLink domain") &&
           strstr(err, "keeps each pipeline group"),
       "pp-in-domain: nodes without fabric are refused: %s", err);
    policy.node_domain = "slurm-block/b1"; /* Slurm's block stands for NVML's clique */
    err[0] = '\0';
    rc = dtrain_plan_place_tasks(&pp2, nofab, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_OK, "pp-in-domain: the same nodes in one Slurm block (policy.node_domain) are placed (%s)",
       err);
    dtrain_plan_free(p);
    policy.node_domain = NULL;
    policy.cpu_only = 1;
    rc = dtrain_plan_place_tasks(&pp2, NULL, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "no GPUs"), "pp-in-domain on CPU-only nodes is refused: %s", err);
    policy.cpu_only = 0;
    policy.pp_in_domain = 0;
    rc = dtrain_plan_place_tasks(&pp2, two, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_OK, "without pp-in-domain the PP group may cross cliques (%s)", err);
    dtrain_plan_free(p);

    ok(dtrain_plan_check_pp_domain(4, 2, 16, 4, 8, err, sizeof(err)) == DTRAIN_OK,
       "check_pp_domain: T=4 P=2 D=2 on 4 nodes: PP groups join nodes {0,2} and {1,3}, 2 nodes fit 8 GPUs");
    ok(dtrain_plan_check_pp_domain(4, 4, 16, 4, 8, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "join 4 nodes (16 GPUs)") && strstr(err, "domain of 8 GPUs") && strstr(err, "--dtrain-pp=2 or less"),
       "check_pp_domain: T=4 P=4 on 4 nodes joins all 4: refused, P=2 suggested: %s", err);
    ok(dtrain_plan_check_pp_domain(2, 4, 16, 4, 8, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "join 4 nodes") && strstr(err, "--dtrain-pp=2 or less"),
       "check_pp_domain: T=2 P=4 D=2 (2 DP members per node) joins all 4 nodes: %s", err);
    ok(dtrain_plan_check_pp_domain(8, 2, 32, 4, 8, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "join 4 nodes") && !strstr(err, "--dtrain-pp="),
       "check_pp_domain: T=8 P=2 (TP groups of 2 nodes) cannot fit, no smaller P helps: %s", err);
    ok(dtrain_plan_check_pp_domain(4, 2, 0, 4, 8, err, sizeof(err)) == DTRAIN_OK,
       "check_pp_domain: task count unknown, nothing to judge yet");
    ok(dtrain_plan_check_pp_domain(4, 2, 16, 4, 0, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "declares no multi-node NVLink domain"),
       "check_pp_domain: a cluster without domains refuses the option: %s", err);

    /* --segment against Slurm's blocks (nvlink_domain_source=block): 4 GPUs
     * a node, blocks of 2 nodes (8 GPUs). */
    ok(dtrain_plan_check_segment(8, 1, 0, 16, 4, 8, 0, "block", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "TP groups of T=8 hold 2 nodes each") && strstr(err, "on 4 nodes") &&
           strstr(err, "without --segment") && strstr(err, ": use --segment=2"),
       "check_segment: T=8 on 4 nodes of 4, blocks of 2 nodes, no --segment: refused, --segment=2 named: %s", err);
    ok(dtrain_plan_check_segment(8, 1, 0, 16, 4, 8, 2, "block", err, sizeof(err)) == DTRAIN_OK,
       "check_segment: ... with --segment=2: accepted");
    ok(dtrain_plan_check_segment(8, 1, 0, 16, 4, 8, 4, "block", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "--segment=4 is larger than a block (2 nodes)") && strstr(err, "use --segment=2"),
       "check_segment: ... --segment=4 is larger than a block: %s", err);
    ok(dtrain_plan_check_segment(8, 1, 0, 24, 4, 16, 3, "block", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "segments of 3 nodes would split them") && strstr(err, "use --segment=2"),
       "check_segment: T=8 on 6 nodes, blocks of 4 nodes, --segment=3 splits a TP group: %s", err);
    ok(dtrain_plan_check_segment(8, 1, 0, 24, 4, 16, 5, "block", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "--segment=5 does not divide the job's 6 nodes"),
       "check_segment: --segment=5 on 6 nodes: %s", err);
    ok(dtrain_plan_check_segment(8, 1, 0, 64, 4, 32, 0, "ring", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "use --segment=8"),
       "check_segment: T=8 on 16 nodes, rings of 8 nodes: the largest segment, a ring each (%s)", err);
    ok(dtrain_plan_check_segment(8, 1, 0, 64, 4, 32, 0, "block", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "use --segment=2"),
       "check_segment: ... blocks of 8 nodes: the smallest (%s)", err);
    ok(dtrain_plan_check_segment(8, 1, 0, 8, 4, 8, 0, "block", err, sizeof(err)) == DTRAIN_OK,
       "check_segment: T=8 on 2 nodes (one block's worth): Slurm keeps the job in one block, no --segment needed");
    ok(dtrain_plan_check_segment(8, 1, 0, 8, 4, 8, 1, "block", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "leave --segment out (Slurm puts a job of 2 nodes in one block)"),
       "check_segment: ... but --segment=1 would let its 2 nodes go to two blocks: %s", err);
    ok(dtrain_plan_check_segment(4, 2, 0, 16, 4, 8, 0, "block", err, sizeof(err)) == DTRAIN_OK,
       "check_segment: T=4 (one node each), no PP in a domain: nothing to keep together");
    ok(dtrain_plan_check_segment(4, 2, 1, 16, 4, 16, 0, "ring", err, sizeof(err)) == DTRAIN_OK,
       "check_segment: T=4 P=2 --dtrain-pp-in-domain on 4 nodes, rings of 4 nodes: one ring holds the job");
    ok(dtrain_plan_check_segment(4, 2, 1, 32, 4, 16, 0, "ring", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "pipeline groups of T=4 P=2") && strstr(err, "Slurm ring") &&
           strstr(err, "no --segment of at most 4 nodes dividing 8 holds them"),
       "check_segment: T=4 P=2 D=4 --dtrain-pp-in-domain on 8 nodes, rings of 4: PP joins nodes {0,4}, {1,5}..., "
       "which no segment holds: %s", err);
    ok(dtrain_plan_check_segment(8, 2, 1, 16, 4, 16, 0, "ring", err, sizeof(err)) == DTRAIN_OK,
       "check_segment: T=8 P=2 D=1 --dtrain-pp-in-domain on 4 nodes, rings of 4: one ring holds the job");
    ok(dtrain_plan_check_segment(8, 2, 1, 16, 4, 16, 2, "ring", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "TP and pipeline groups") && strstr(err, "segments of 2 nodes would split them") &&
           strstr(err, "leave --segment out"),
       "check_segment: ... but --segment=2 would split the set of 4 nodes: %s", err);
    ok(dtrain_plan_check_segment(4, 2, 1, 16, 4, 8, 0, "block", err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "no --segment of at most 2 nodes"),
       "check_segment: T=4 P=2 --dtrain-pp-in-domain on 4 nodes, blocks of 2: PP joins {0,2}, no segment holds it: %s",
       err);
    ok(dtrain_plan_check_segment(8, 1, 0, 0, 4, 8, 0, "block", err, sizeof(err)) == DTRAIN_OK,
       "check_segment: task count unknown, nothing to judge");
    dtrain_topo_free(a);
    dtrain_topo_free(b);
    dtrain_topo_free(plain);
}

/* An hwloc 1.x export has no link data: TP > 1 only with allow_pcie. */
static void no_link_information(void)
{
    dtrain_topo *t = load_fixture("hwloc1-x9drg-m2075.xml");
    dtrain_plan *p = NULL;
    if (!t)
        return;
    ok(dtrain_topo_link_source(t) == DTRAIN_LINKS_NONE && strstr(dtrain_topo_summary(t), "no link information") &&
           !strstr(dtrain_topo_summary(t), "PCIe only"),
       "hwloc 1.x export: '%s'", dtrain_topo_summary(t));
    ok(plan_on(t, 3, 1, 0, 1, 3, 0, 0, &p) == DTRAIN_ERR_REFUSED && strstr(err, "no link information") &&
           strstr(err, "--dtrain-allow-pcie"),
       "T=3 there is refused, saying why: %s", err);
    int rc = plan_on(t, 3, 1, 0, 1, 3, 1, 0, &p);
    ok(rc == DTRAIN_OK && dtrain_plan_warning(p) &&
           strstr(dtrain_plan_warning(p), "no link information"),
       "... placed with allow_pcie, with a warning: %s", p ? dtrain_plan_warning(p) : err);
    dtrain_plan_free(p);
    ok(plan_on(t, 1, 1, 0, 1, 3, 0, 0, &p) == DTRAIN_OK, "T=1 needs no links (%s)", err);
    dtrain_plan_free(p);
    dtrain_topo_free(t);
}

/* One node's share of the plan is the full plan's entries for that node. */
static void node_share(void)
{
    dtrain_topo *t = load_fixture("dgx1-v100.xml");
    const dtrain_topo *nodes[16];
    dtrain_plan *full = NULL, *one = NULL;
    if (!t)
        return;
    for (int i = 0; i < 16; i++)
        nodes[i] = t;
    struct dtrain_shape shape = {4, 4, 0, 16, 8};
    struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
    int rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &full, err, sizeof(err));
    int same = rc == DTRAIN_OK;
    for (int node = 0; same && node < 16; node += 5) {
        same = dtrain_plan_place_node(&shape, nodes, &policy, node, &one, err, sizeof(err)) == DTRAIN_OK &&
               dtrain_plan_world_size(one) == 128 && dtrain_plan_shape(one)->dp == 8;
        for (int r = 0; same && r < 128; r++) {
            const struct dtrain_task_placement *a = dtrain_plan_task(full, r), *b = dtrain_plan_task(one, r);
            same = r / 8 == node ? b && memcmp(a, b, sizeof *a) == 0 : b == NULL;
        }
        dtrain_plan_free(one);
        one = NULL;
    }
    ok(same, "place_node: each node's share equals the full plan's entries, other ranks absent (%s)", err);
    ok(dtrain_plan_place_node(&shape, nodes, &policy, 16, &one, err, sizeof(err)) == DTRAIN_ERR_INPUT &&
           one == NULL && strstr(err, "node 16"),
       "place_node: a node outside the job is bad input: %s", err);
    dtrain_plan_free(full);
    dtrain_topo_free(t);
}

static void cpu_only(void)
{
    dtrain_topo *t = load_fixture("dgx1-v100.xml");
    dtrain_plan *p;
    if (!t)
        return;
    if (ok(plan_on(t, 2, 2, 0, 2, 4, 0, 1, &p) == DTRAIN_OK, "cpu_only T=2 P=2 N=2 K=4 (%s)", err)) {
        int nogpu = 1;
        for (int r = 0; r < 8; r++)
            if (dtrain_plan_task(p, r)->gpu != -1 || dtrain_plan_task(p, r)->gpu_busid[0])
                nogpu = 0;
        ok(nogpu, "cpu_only: no GPU assigned");
        /* Core c is PUs c and c+16; NUMA node 0 holds cores 0-7 (issue #32:
         * the OS-index split gave ranks 0 and 2 the same cores). */
        ok(strcmp(dtrain_plan_task(p, 0)->cpulist, "0-3,16-19") == 0 &&
               strcmp(dtrain_plan_task(p, 1)->cpulist, "4-7,20-23") == 0 &&
               strcmp(dtrain_plan_task(p, 2)->cpulist, "8-11,24-27") == 0 &&
               strcmp(dtrain_plan_task(p, 7)->cpulist, "12-15,28-31") == 0,
           "cpu_only: the node's 16 cores split evenly, whole cores (%s, %s, %s, %s)", dtrain_plan_task(p, 0)->cpulist,
           dtrain_plan_task(p, 1)->cpulist, dtrain_plan_task(p, 2)->cpulist, dtrain_plan_task(p, 7)->cpulist);
        dtrain_plan_free(p);
    }
    if (ok(plan_on(t, 1, 1, 0, 1, 64, 0, 1, &p) == DTRAIN_OK, "cpu_only: more tasks (64) than CPUs (32)")) {
        ok(strcmp(dtrain_plan_task(p, 63)->cpulist, "31") == 0 && dtrain_plan_task(p, 0)->cpulist[0],
           "cpu_only: every task gets at least one CPU");
        dtrain_plan_free(p);
    }
    struct dtrain_shape shape = {2, 1, 0, 3, 2};
    struct dtrain_policy policy = {0, 1, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
    int rc = dtrain_plan_place_tasks(&shape, NULL, &policy, &p, err, sizeof(err));
    ok(rc == DTRAIN_OK && dtrain_plan_task(p, 5)->cpulist[0] == '\0' && dtrain_plan_task(p, 5)->gpu == -1,
       "cpu_only without node models: ranks only, CPUs left unset");
    dtrain_plan_free(p);
    dtrain_topo_free(t);
}

struct refusal {
    int T, P, D, N, K;
    const char *what, *needle;
};

static void refusals(void)
{
    dtrain_topo *t = load_fixture("dgx-h100.xml");
    if (!t)
        return;
    static const struct refusal cases[] = {
        {3, 1, 0, 1, 8, "T not dividing tasks per node", "does not divide the 8 tasks per node"},
        {16, 1, 0, 1, 16, "more tasks per node than GPUs", "8 GPUs for 16 tasks"},
        {2, 3, 0, 1, 8, "T*P not dividing the world", "does not divide the 8 tasks"},
        {2, 2, 3, 1, 8, "a given D that does not multiply out", "T*P*D = 2*2*3 = 12"},
        {0, 1, 0, 1, 8, "T = 0", "T=0 is out of range"},
        {70000, 1, 0, 1, 8, "T too large", "T=70000 is out of range"},
        {1, -1, 0, 1, 8, "P negative", "P=-1 is out of range"},
        {1, 1, 70000, 1, 8, "D too large", "D=70000 is out of range"},
        {1, 1, 0, 0, 8, "no nodes", "0 nodes is out of range"},
        {1, 1, 0, 1, 0, "no tasks per node", "0 tasks per node is out of range"},
        {1, 1, 0, 2000000, 8, "world too large", "out of range"},
        {8, 1, 0, 1, 4, "T larger than tasks per node", "larger than the 4 tasks per node"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct refusal *c = &cases[i];
        dtrain_plan *p = NULL;
        const dtrain_topo *nodes[1] = {t};
        struct dtrain_shape shape = {c->T, c->P, c->D, c->N, c->K};
        struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
        err[0] = '\0';
        int rc = dtrain_plan_place_tasks(&shape, c->N == 1 ? nodes : NULL, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_ERR_REFUSED && p == NULL && strstr(err, c->needle) && !strchr(err, '\n') &&
               (strstr(err, "use ") || strstr(err, "dtrain places")),
           "refused, %s: %s", c->what, err);
    }
    /* Islands of unequal sizes that cannot hold the groups. */
    dtrain_topo *bridged = load_fixture("pcie-a100-bridged-pairs.xml");
    if (bridged) {
        int sel[] = {0, 1, 2};
        dtrain_topo *three = NULL;
        if (dtrain_topo_subset(bridged, sel, 3, &three, err, sizeof(err)) == DTRAIN_OK) {
            dtrain_plan *p;
            int rc = plan_on(three, 1, 1, 0, 1, 3, 0, 0, &p);
            ok(rc == DTRAIN_OK, "islands {0,1} {2}: T=1 K=3 fine");
            dtrain_plan_free(p);
            rc = plan_on(three, 2, 1, 0, 1, 2, 0, 0, &p);
            ok(rc == DTRAIN_OK && group_mask(p, 0, 0) == 0x3, "islands {0,1} {2}: T=2 K=2 uses the pair");
            dtrain_plan_free(p);
            dtrain_topo_free(three);
        }
        dtrain_topo_free(bridged);
    }
    dtrain_topo_free(t);
}

static void shape_checks(void)
{
    ok(dtrain_plan_check_shape(8, 8, 0, 512, 8, 0, err, sizeof(err)) == DTRAIN_OK, "check_shape T=8 P=8 512 tasks");
    ok(dtrain_plan_check_shape(8, 8, 0, 0, 0, 0, err, sizeof(err)) == DTRAIN_OK, "check_shape with unknown counts");
    ok(dtrain_plan_check_shape(4, 2, 4, 32, 0, 0, err, sizeof(err)) == DTRAIN_OK, "check_shape with D given");
    ok(dtrain_plan_check_shape(8, 8, 0, 500, 0, 0, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "multiple of 64"),
       "check_shape: 500 tasks for T*P=64 refused: %s", err);
    ok(dtrain_plan_check_shape(3, 1, 0, 0, 8, 0, err, sizeof(err)) == DTRAIN_ERR_REFUSED && strstr(err, "--dtrain-tp=2"),
       "check_shape: T=3 with 8 tasks per node suggests T=2: %s", err);
    ok(dtrain_plan_check_shape(2, 2, 5, 16, 0, 0, err, sizeof(err)) == DTRAIN_ERR_REFUSED &&
           strstr(err, "--dtrain-dp=4"),
       "check_shape: D=5 for 16 tasks suggests D=4: %s", err);
    ok(dtrain_plan_check_shape(65536, 65536, 0, 0, 0, 0, err, sizeof(err)) == DTRAIN_ERR_REFUSED,
       "check_shape: T*P beyond the world limit: %s", err);
    ok(dtrain_plan_check_shape(1, 1, 0, -5, 0, 0, err, sizeof(err)) == DTRAIN_ERR_REFUSED, "check_shape: negative tasks");
    char tiny[4];
    ok(dtrain_plan_check_shape(0, 1, 0, 0, 0, 0, tiny, sizeof(tiny)) == DTRAIN_ERR_REFUSED && strlen(tiny) == 3,
       "check_shape never overruns a small error buffer");
    int all = 1;
    for (int r = 0; r < 96; r++) {
        int tp, dp, pp;
        dtrain_coords_of(r, 4, 3, &tp, &dp, &pp);
        if (dtrain_rank_of(tp, dp, pp, 4, 3) != r || tp != r % 4 || dp != (r / 4) % 3 || pp != r / 12)
            all = 0;
    }
    ok(all, "rank = tp + T*(dp + D*pp) round-trips");
}

static void large_shape(void)
{
    dtrain_topo *t = load_fixture("dgx-h100.xml");
    if (!t)
        return;
    enum { NODES = 1024 };
    const dtrain_topo **nodes = malloc(sizeof(*nodes) * NODES);
    if (nodes) {
        for (int i = 0; i < NODES; i++)
            nodes[i] = t;
        struct dtrain_shape shape = {8, 16, 0, NODES, 8};
        struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_NUMA}; /* plan_consistent: the GPU's NUMA node */
        dtrain_plan *p = NULL;
        int rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_OK && dtrain_plan_world_size(p) == 8192 && dtrain_plan_shape(p)->dp == 64 &&
               plan_consistent(p, nodes),
           "1024 nodes x 8 tasks, T=8 P=16: placed and consistent (%s)", err);
        dtrain_plan_free(p);
        free(nodes);
    }
    dtrain_topo_free(t);
}

int main(void)
{
    nvswitch_t4_p2();
    dgx1();
    pairs_fixture("power8gpudistances.xml", "power8");
    pairs_fixture("pcie-a100-bridged-pairs.xml", "bridged pairs");
    g4dn();
    missing_and_degraded();
    heterogeneous_nodes();
    multinode_domains();
    no_link_information();
    node_share();
    cpu_only();
    refusals();
    shape_checks();
    large_shape();
    return tap_done();
}
