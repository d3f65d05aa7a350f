/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Each task's CPUs (topo/plan_cpus.c) on every saved topology: whole cores,
 * no core in two tasks, one NUMA node when the counts allow, a GPU task on
 * its GPU's NUMA node.  The cores and NUMA nodes the checks use come from
 * hwloc itself, loading the same XML (never from the planner's model). */
#include <dirent.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_plan.h"
#include "tap.h"
#include "fixtures.h"

#define MAX_SETS 64

/* What hwloc says about a fixture: its allowed PUs' cores and NUMA nodes. */
struct oracle {
    hwloc_topology_t topo;
    int ncores, nnuma;
    hwloc_bitmap_t core[4096], numa[64];
    int numa_os[64];
};

static int oracle_load(const char *file, struct oracle *o)
{
    memset(o, 0, sizeof *o);
    if (hwloc_topology_init(&o->topo) != 0)
        return -1;
    if (hwloc_topology_set_xml(o->topo, fixture_path(file)) != 0 || hwloc_topology_load(o->topo) != 0) {
        hwloc_topology_destroy(o->topo);
        return -1;
    }
    hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(o->topo);
    /* A PU without a core object is a core of its own, as in the model. */
    int pu;
    hwloc_bitmap_foreach_begin(pu, allowed) {
        hwloc_obj_t obj = hwloc_get_pu_obj_by_os_index(o->topo, (unsigned)pu);
        hwloc_obj_t core = obj ? hwloc_get_ancestor_obj_by_type(o->topo, HWLOC_OBJ_CORE, obj) : NULL;
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        if (core)
            hwloc_bitmap_and(set, core->cpuset, allowed);
        else
            hwloc_bitmap_only(set, (unsigned)pu);
        int seen = 0;
        for (int k = 0; k < o->ncores && !seen; k++)
            seen = hwloc_bitmap_isequal(o->core[k], set);
        if (seen || o->ncores >= 4096)
            hwloc_bitmap_free(set);
        else
            o->core[o->ncores++] = set;
    }
    hwloc_bitmap_foreach_end();
    for (hwloc_obj_t n = hwloc_get_next_obj_by_type(o->topo, HWLOC_OBJ_NUMANODE, NULL); n && o->nnuma < 64;
         n = hwloc_get_next_obj_by_type(o->topo, HWLOC_OBJ_NUMANODE, n)) {
        if (!n->cpuset || !hwloc_bitmap_intersects(n->cpuset, allowed))
            continue;
        o->numa[o->nnuma] = hwloc_bitmap_alloc();
        hwloc_bitmap_and(o->numa[o->nnuma], n->cpuset, allowed);
        o->numa_os[o->nnuma++] = (int)n->os_index;
    }
    return 0;
}

static void oracle_free(struct oracle *o)
{
    for (int k = 0; k < o->ncores; k++)
        hwloc_bitmap_free(o->core[k]);
    for (int k = 0; k < o->nnuma; k++)
        hwloc_bitmap_free(o->numa[k]);
    hwloc_topology_destroy(o->topo);
}

static int cores_in(const struct oracle *o, hwloc_const_bitmap_t numa)
{
    int n = 0;
    for (int k = 0; k < o->ncores; k++)
        n += numa == NULL || hwloc_bitmap_isincluded(o->core[k], numa);
    return n;
}

/* Check the K tasks of a plan of one node; why gets the first problem. */
static int check_plan(const struct oracle *o, const dtrain_topo *topo, const dtrain_plan *p, int K, int gpu,
                      char *why, size_t whylen)
{
    hwloc_bitmap_t set[MAX_SETS];
    int bad = 0, nset = 0;
    why[0] = '\0';
    for (int r = 0; r < K && r < MAX_SETS; r++) {
        set[nset] = hwloc_bitmap_alloc();
        const char *list = dtrain_plan_task(p, r)->cpulist;
        if (hwloc_bitmap_list_sscanf(set[nset++], list) != 0 || hwloc_bitmap_iszero(set[r])) {
            snprintf(why, whylen, "rank %d: CPU list '%.100s'", r, list);
            bad = 1;
        }
    }
    /* Tasks per NUMA node (GPU tasks: their GPU's node); counts allow when
     * every node has at least as many cores as tasks. */
    int allow = 1;
    if (gpu) {
        for (int n = 0; n < o->nnuma; n++) {
            int m = 0;
            for (int r = 0; r < K; r++)
                m += dtrain_topo_gpu(topo, dtrain_plan_task(p, r)->gpu)->numa_node == o->numa_os[n];
            allow &= m <= cores_in(o, o->numa[n]);
        }
    } else {
        allow = K >= o->nnuma && K <= o->ncores;
        for (int n = 0; n < o->nnuma; n++) /* proportional shares fit */
            allow &= (K * cores_in(o, o->numa[n]) + o->ncores - 1) / o->ncores <= cores_in(o, o->numa[n]);
    }
    for (int r = 0; r < nset && !bad; r++) {
        for (int k = 0; k < o->ncores && !bad && allow; k++)
            if (hwloc_bitmap_intersects(set[r], o->core[k]) && !hwloc_bitmap_isincluded(o->core[k], set[r])) {
                snprintf(why, whylen, "rank %d (%.100s) has part of a core", r, dtrain_plan_task(p, r)->cpulist);
                bad = 1;
            }
        for (int q = 0; q < r && !bad && allow; q++)
            for (int k = 0; k < o->ncores && !bad; k++)
                if (hwloc_bitmap_intersects(set[r], o->core[k]) && hwloc_bitmap_intersects(set[q], o->core[k])) {
                    snprintf(why, whylen, "ranks %d (%.100s) and %d (%.100s) share a core", q,
                             dtrain_plan_task(p, q)->cpulist, r, dtrain_plan_task(p, r)->cpulist);
                    bad = 1;
                }
        int nodes = 0, home = -1;
        for (int n = 0; n < o->nnuma; n++)
            if (hwloc_bitmap_intersects(set[r], o->numa[n])) {
                nodes++;
                if (!hwloc_bitmap_isincluded(o->numa[n], set[r]))
                    home = n; /* part of a node: must be its only one */
            }
        if (!bad && allow && nodes != 1 && (K >= o->nnuma || home >= 0)) {
            snprintf(why, whylen, "rank %d (%.100s) spans %d NUMA nodes", r, dtrain_plan_task(p, r)->cpulist, nodes);
            bad = 1;
        }
        if (!bad && gpu) {
            int numa = dtrain_topo_gpu(topo, dtrain_plan_task(p, r)->gpu)->numa_node;
            for (int n = 0; n < o->nnuma && !bad; n++)
                if (o->numa_os[n] == numa && !hwloc_bitmap_isincluded(set[r], o->numa[n])) {
                    snprintf(why, whylen, "rank %d (%.100s) is not on its GPU's NUMA node %d", r,
                             dtrain_plan_task(p, r)->cpulist, numa);
                    bad = 1;
                }
        }
    }
    for (int r = 0; r < nset; r++)
        hwloc_bitmap_free(set[r]);
    return !bad;
}

static dtrain_plan *plan_one_node(const dtrain_topo *topo, int K, int cpu_only, enum dtrain_cpu_bind bind, char *err,
                                  size_t errlen)
{
    struct dtrain_shape shape = {.tp = 1, .pp = 1, .dp = 0, .nnodes = 1, .tasks_per_node = K};
    struct dtrain_policy policy = {.allow_pcie = 1, .cpu_only = cpu_only, .cpu_bind = bind};
    const dtrain_topo *nodes[1] = {topo};
    dtrain_plan *p = NULL;
    if (dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, errlen) != DTRAIN_OK)
        return NULL;
    return p;
}

static void every_fixture(void)
{
    const char *dir = getenv("DTRAIN_FIXTURES") ? getenv("DTRAIN_FIXTURES") : "../fixtures/topology";
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort), files = 0;
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        size_t len = strlen(name);
        if (len < 5 || strcmp(name + len - 4, ".xml") != 0)
            continue;
        files++;
        struct oracle o;
        dtrain_topo *topo = load_fixture(name);
        if (!ok(topo && oracle_load(name, &o) == 0, "%s: loads (model and hwloc)", name)) {
            dtrain_topo_free(topo);
            continue;
        }
        int ngpus = dtrain_topo_gpu_count(topo);
        int counts[] = {1, 2, 4, 8, ngpus};
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            int K = counts[c];
            if (K < 1 || (c == 4 && (K == 1 || K == 2 || K == 4 || K == 8)) || K > MAX_SETS)
                continue;
            char err[512] = "", why[512] = "";
            dtrain_plan *p = plan_one_node(topo, K, 1, DTRAIN_CPU_BIND_CORES, err, sizeof err);
            int good = p && check_plan(&o, topo, p, K, 0, why, sizeof why); /* fills why before ok() reads it */
            ok(good, "%s, %d CPU-only tasks: whole cores, none shared, one NUMA node each (%d cores, %d NUMA "
               "nodes)%s%s%s", name, K, o.ncores, o.nnuma, err, why[0] ? ": " : "", why);
            dtrain_plan_free(p);
            if (K > ngpus)
                continue;
            p = plan_one_node(topo, K, 0, DTRAIN_CPU_BIND_CORES, err, sizeof err);
            if (!p) {
                /* Partitioned or two-vendor GPUs: placed only with other options. */
                ok(1, "%s, %d GPU tasks: refused (%.100s), nothing to check", name, K, err);
                continue;
            }
            good = check_plan(&o, topo, p, K, 1, why, sizeof why);
            ok(good, "%s, %d GPU tasks: whole cores of their GPU's NUMA node, none shared%s%s", name, K,
               why[0] ? ": " : "", why);
            dtrain_plan_free(p);
        }
        oracle_free(&o);
        dtrain_topo_free(topo);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    ok(files >= 13, "every fixture of %s checked (%d files)", dir, files);
}

static const char *cpus_of(const dtrain_plan *p, int r)
{
    return p ? dtrain_plan_task(p, r)->cpulist : "(no plan)";
}

/* g4dn.metal: 2 x 24-core Cascade Lake with SMT, core c = PUs c and c+48
 * (NUMA 0: 0-23,48-71): the Skylake-like numbering of the issue. */
static void siblings_n_apart(void)
{
    dtrain_topo *topo = load_fixture("g4dnmetal.xml");
    char err[512] = "";
    if (!topo)
        return;
    dtrain_plan *p = plan_one_node(topo, 4, 1, DTRAIN_CPU_BIND_CORES, err, sizeof err);
    ok(p && strcmp(cpus_of(p, 0), "0-11,48-59") == 0 && strcmp(cpus_of(p, 1), "12-23,60-71") == 0 &&
           strcmp(cpus_of(p, 2), "24-35,72-83") == 0 && strcmp(cpus_of(p, 3), "36-47,84-95") == 0,
       "g4dn.metal, 4 CPU-only tasks: 12 whole cores each, 2 tasks per socket (%s | %s | %s | %s)", cpus_of(p, 0),
       cpus_of(p, 1), cpus_of(p, 2), cpus_of(p, 3));
    dtrain_plan_free(p);
    p = plan_one_node(topo, 1, 1, DTRAIN_CPU_BIND_CORES, err, sizeof err);
    ok(p && strcmp(cpus_of(p, 0), "0-95") == 0, "g4dn.metal, 1 CPU-only task: the whole machine (%.100s)", cpus_of(p, 0));
    dtrain_plan_free(p);
    p = plan_one_node(topo, 8, 0, DTRAIN_CPU_BIND_CORES, err, sizeof err);
    ok(p && strcmp(cpus_of(p, 0), "0-5,48-53") == 0 && strcmp(cpus_of(p, 7), "42-47,90-95") == 0,
       "g4dn.metal, 8 GPU tasks: 6 whole cores each on its T4's socket (%s, ..., %s)%s", cpus_of(p, 0), cpus_of(p, 7),
       err);
    dtrain_plan_free(p);
    p = plan_one_node(topo, 8, 0, DTRAIN_CPU_BIND_NUMA, err, sizeof err);
    ok(p && strcmp(cpus_of(p, 0), "0-23,48-71") == 0 && strcmp(cpus_of(p, 3), "0-23,48-71") == 0 &&
           strcmp(cpus_of(p, 7), "24-47,72-95") == 0,
       "cpu_bind numa: each GPU task gets its GPU's whole NUMA node, as before (%s, %s, %s)", cpus_of(p, 0),
       cpus_of(p, 3), cpus_of(p, 7));
    dtrain_plan_free(p);
    p = plan_one_node(topo, 2, 1, DTRAIN_CPU_BIND_NUMA, err, sizeof err);
    ok(p && strcmp(cpus_of(p, 0), "0-23,48-71") == 0 && strcmp(cpus_of(p, 1), "24-47,72-95") == 0,
       "cpu_bind numa, 2 CPU-only tasks: a NUMA node each (%s | %s)", cpus_of(p, 0), cpus_of(p, 1));
    dtrain_plan_free(p);
    dtrain_topo_free(topo);
}

/* The refusals name the fix that applies. */
static void messages(void)
{
    char err[512] = "";
    dtrain_topo *cpus = NULL, *full = load_fixture("dgx-h100.xml"), *one = NULL;
    dtrain_topo_load_bounded(fixture_path("dgx-h100.xml"), DTRAIN_TOPO_LOAD_CPUS_ONLY, 20000, &cpus, err, sizeof err);
    dtrain_plan *p = cpus ? plan_one_node(cpus, 2, 0, DTRAIN_CPU_BIND_CORES, err, sizeof err) : NULL;
    ok(cpus && !p && strstr(err, "node 0 has no GPUs") && strstr(err, "--cpu-only") &&
           !strstr(err, "--ntasks-per-node=0"),
       "a node without GPUs: refused, naming --cpu-only (%.100s)", err);
    int gpu0 = 0;
    if (full && dtrain_topo_subset(full, &gpu0, 1, &one, err, sizeof err) == DTRAIN_OK) {
        struct dtrain_shape shape = {.tp = 2, .pp = 1, .dp = 0, .nnodes = 1, .tasks_per_node = 2};
        struct dtrain_policy policy = {0};
        const dtrain_topo *nodes[1] = {one};
        err[0] = '\0';
        int rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof err);
        ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "has 1 GPU for 2 tasks") && strstr(err, "T=2") &&
               strstr(err, "--dtrain-tp=1") && !strstr(err, "torchrun"),
           "a 1-GPU node asked for T=2 with 2 tasks: names the node's 1 GPU and a smaller T (%.100s)", err);
        dtrain_plan_free(p);
    }
    dtrain_topo_free(one);
    dtrain_topo_free(full);
    dtrain_topo_free(cpus);
}

int main(void)
{
    every_fixture();
    siblings_n_apart();
    messages();
    return tap_done();
}
