/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: the CPUs of the local tasks of one node.
 *
 * From the node model's PUs with their cores and NUMA nodes (hwloc's
 * objects: hyperthread siblings may be numbered 1 or N apart, so OS index
 * order says nothing about cores).  As LLNL's mpibind does:
 *
 *   cores (default)  A GPU task belongs to its GPU's NUMA node; the tasks of
 *                    one NUMA node divide its cores: with m tasks and c
 *                    cores, task k (in local rank order) gets cores
 *                    k*c/m .. (k+1)*c/m-1 (in order of their lowest PU), all
 *                    their PUs, so no core is shared and none is left
 *                    unused.  CPU-only tasks, and GPU tasks whose GPU has no
 *                    single NUMA node, divide the cores the others left
 *                    (all cores when none is left): fewer tasks than NUMA
 *                    nodes get whole NUMA nodes each; otherwise the NUMA
 *                    nodes get blocks of consecutive tasks in proportion to
 *                    their cores, and each node's tasks divide its cores.
 *                    More tasks than cores in a NUMA node: its PUs, in core
 *                    order, are divided instead (at least one each), so
 *                    cores are then shared.
 *   numa             A GPU task gets its GPU's local CPUs (its NUMA node,
 *                    shared with the other tasks there); CPU-only tasks the
 *                    whole NUMA node(s) the division above gives them.
 *
 * Without PU information (a model built by hand) a GPU task gets its GPU's
 * local CPUs and a CPU-only task none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_node.h"
#include "topo_model.h"

struct core {
    int first_pu; /* lowest PU OS index: the cores' order */
    int numa;     /* NUMA node OS index, -1 unknown */
    int start, n; /* its PUs: pu_of[start .. start+n-1] */
};

struct node_cpus {
    const dtrain_topo *topo;
    int ncores;
    struct core *cores;
    int *pu_of; /* PU OS indices grouped by core, ascending in each core */
    int *taken; /* per core: 1 when a NUMA-local group took it */
};

struct pu {
    int core, os, numa;
};

static int cmp_pu_by_core(const void *pa, const void *pb)
{
    const struct pu *a = pa, *b = pb;
    if (a->core != b->core)
        return a->core < b->core ? -1 : 1;
    return (a->os > b->os) - (a->os < b->os);
}

static int cmp_core(const void *pa, const void *pb)
{
    const struct core *a = pa, *b = pb;
    return a->first_pu - b->first_pu;
}

static int cmp_int(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

static void node_cpus_free(struct node_cpus *nc)
{
    free(nc->cores);
    free(nc->pu_of);
    free(nc->taken);
}

/* The node's cores from its PUs.  0, or -1 on out of memory. */
static int node_cpus_build(const dtrain_topo *topo, struct node_cpus *nc)
{
    int n = topo->npus;
    struct pu *idx = malloc(sizeof(struct pu) * (size_t)n);
    memset(nc, 0, sizeof *nc);
    nc->topo = topo;
    nc->cores = malloc(sizeof(struct core) * (size_t)n);
    nc->pu_of = malloc(sizeof(int) * (size_t)n);
    nc->taken = calloc((size_t)n, sizeof(int));
    if (!idx || !nc->cores || !nc->pu_of || !nc->taken) {
        free(idx);
        node_cpus_free(nc);
        return -1;
    }
    for (int i = 0; i < n; i++)
        idx[i] = (struct pu){topo->pu_core[i], topo->pus[i], topo->pu_numa[i]};
    qsort(idx, (size_t)n, sizeof(struct pu), cmp_pu_by_core);
    for (int i = 0; i < n; i++) {
        nc->pu_of[i] = idx[i].os;
        if (i == 0 || idx[i].core != idx[i - 1].core)
            nc->cores[nc->ncores++] = (struct core){idx[i].os, idx[i].numa, i, 0};
        nc->cores[nc->ncores - 1].n++;
    }
    free(idx);
    qsort(nc->cores, (size_t)nc->ncores, sizeof(struct core), cmp_core);
    return 0;
}

/* Write the PUs of cores[list[0..ncores)] (or, when pu_lo < pu_hi, only
 * their PUs pu_lo .. pu_hi-1 in core order) as a list into buf. */
static void format_pus(const struct node_cpus *nc, const int *list, int ncores, int pu_lo, int pu_hi, char *buf,
                       size_t len)
{
    int total = 0;
    buf[0] = '\0';
    for (int k = 0; k < ncores; k++)
        total += nc->cores[list[k]].n;
    int *pus = malloc(sizeof(int) * (size_t)(total > 0 ? total : 1));
    if (!pus)
        return;
    int npus = 0, pos = 0;
    for (int k = 0; k < ncores; k++) {
        const struct core *c = &nc->cores[list[k]];
        for (int j = 0; j < c->n; j++, pos++)
            if (pu_lo >= pu_hi || (pos >= pu_lo && pos < pu_hi))
                pus[npus++] = nc->pu_of[c->start + j];
    }
    qsort(pus, (size_t)npus, sizeof(int), cmp_int);
    size_t used = 0;
    for (int k = 0; k < npus;) {
        int run = k; /* a run of consecutive CPU numbers */
        while (run + 1 < npus && pus[run + 1] == pus[run] + 1)
            run++;
        int w = run > k ? snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", pus[k], pus[run])
                        : snprintf(buf + used, len - used, "%s%d", used ? "," : "", pus[k]);
        if (w < 0 || (size_t)w >= len - used) {
            /* Cut at the last whole entry: a shorter list still binds correctly. */
            char *comma = strrchr(buf, ',');
            if (comma)
                *comma = '\0';
            break;
        }
        used += (size_t)w;
        k = run + 1;
    }
    free(pus);
}

/* Tasks ranks[0..m) divide the cores cand[0..c) of one NUMA node. */
static void divide_node(const struct node_cpus *nc, const int *cand, int c, const int *ranks, int m,
                        enum dtrain_cpu_bind bind, struct dtrain_task_placement *tasks)
{
    int npus = 0;
    for (int k = 0; k < c; k++)
        npus += nc->cores[cand[k]].n;
    for (int k = 0; k < m; k++) {
        char *buf = tasks[ranks[k]].cpulist;
        if (bind == DTRAIN_CPU_BIND_NUMA)
            format_pus(nc, cand, c, 0, 0, buf, DTRAIN_TOPO_CPULIST_LEN);
        else if (m <= c)
            format_pus(nc, cand + (long)k * c / m, (int)((long)(k + 1) * c / m - (long)k * c / m), 0, 0, buf,
                       DTRAIN_TOPO_CPULIST_LEN);
        else {
            int lo = (int)((long)k * npus / m), hi = (int)((long)(k + 1) * npus / m);
            if (lo >= npus)
                lo = npus - 1;
            if (hi <= lo)
                hi = lo + 1;
            format_pus(nc, cand, c, lo, hi, buf, DTRAIN_TOPO_CPULIST_LEN);
        }
    }
}

/* Tasks ranks[0..m) divide the cores cand[0..c) (ascending), which may
 * span NUMA nodes. */
static int divide(const struct node_cpus *nc, const int *cand, int c, const int *ranks, int m,
                  enum dtrain_cpu_bind bind, struct dtrain_task_placement *tasks)
{
    /* The NUMA nodes of cand in order of their first core; cores of one
     * node gathered (by[] holds cand reordered node by node). */
    int *by = malloc(sizeof(int) * (size_t)c), *node_start = malloc(sizeof(int) * ((size_t)c + 1));
    int nnodes = 0;
    if (!by || !node_start) {
        free(by);
        free(node_start);
        return -1;
    }
    int placed = 0;
    for (int k = 0; k < c; k++) {
        int numa = nc->cores[cand[k]].numa, seen = 0;
        for (int j = 0; j < k && !seen; j++)
            seen = nc->cores[cand[j]].numa == numa;
        if (seen)
            continue;
        node_start[nnodes++] = placed;
        for (int j = k; j < c; j++)
            if (nc->cores[cand[j]].numa == numa)
                by[placed++] = cand[j];
    }
    node_start[nnodes] = c;
    if (m < nnodes) {
        /* Fewer tasks than NUMA nodes: whole nodes each. */
        for (int k = 0; k < m; k++) {
            int lo = node_start[(long)k * nnodes / m], hi = node_start[(long)(k + 1) * nnodes / m];
            format_pus(nc, by + lo, hi - lo, 0, 0, tasks[ranks[k]].cpulist, DTRAIN_TOPO_CPULIST_LEN);
        }
    } else {
        /* Blocks of consecutive tasks per node, in proportion to its cores. */
        for (int n = 0; n < nnodes; n++) {
            long first = ((long)m * node_start[n] + c / 2) / c, last = ((long)m * node_start[n + 1] + c / 2) / c;
            if (last > first)
                divide_node(nc, by + node_start[n], node_start[n + 1] - node_start[n], ranks + first,
                            (int)(last - first), bind, tasks);
        }
    }
    free(by);
    free(node_start);
    return 0;
}

int plan_node_cpus(const dtrain_topo *topo, int K, const int *gpu_of_local, enum dtrain_cpu_bind bind,
                   struct dtrain_task_placement *tasks)
{
    for (int i = 0; i < K; i++) {
        tasks[i].cpulist[0] = '\0';
        if (gpu_of_local && (bind == DTRAIN_CPU_BIND_NUMA || !topo || topo->npus <= 0))
            memcpy(tasks[i].cpulist, topo->gpus[gpu_of_local[i]].cpulist, DTRAIN_TOPO_CPULIST_LEN);
    }
    if (!topo || topo->npus <= 0 || (gpu_of_local && bind == DTRAIN_CPU_BIND_NUMA))
        return 0;
    struct node_cpus nc;
    if (node_cpus_build(topo, &nc) != 0)
        return -1;
    int *ranks = malloc(sizeof(int) * (size_t)K), *cand = malloc(sizeof(int) * (size_t)nc.ncores);
    int *home = malloc(sizeof(int) * (size_t)K);
    int rc = -1;
    if (!ranks || !cand || !home)
        goto out;
    /* Each task's NUMA node: its GPU's, when that node has cores here. */
    for (int i = 0; i < K; i++) {
        home[i] = -1;
        int numa = gpu_of_local ? topo->gpus[gpu_of_local[i]].numa_node : -1;
        for (int k = 0; numa >= 0 && k < nc.ncores && home[i] < 0; k++)
            if (nc.cores[k].numa == numa)
                home[i] = numa;
    }
    /* NUMA-local groups first, in NUMA order of their first task. */
    for (int i = 0; i < K; i++) {
        int numa = home[i], seen = 0, m = 0, c = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = home[j] == numa;
        if (numa < 0 || seen)
            continue;
        for (int j = i; j < K; j++)
            if (home[j] == numa)
                ranks[m++] = j;
        for (int k = 0; k < nc.ncores; k++)
            if (nc.cores[k].numa == numa) {
                cand[c++] = k;
                nc.taken[k] = 1;
            }
        if (divide(&nc, cand, c, ranks, m, bind, tasks) != 0)
            goto out;
    }
    /* The others: the cores left, else all. */
    int m = 0, c = 0;
    for (int i = 0; i < K; i++)
        if (home[i] < 0)
            ranks[m++] = i;
    for (int k = 0; k < nc.ncores; k++)
        if (!nc.taken[k])
            cand[c++] = k;
    if (c == 0)
        for (int k = 0; k < nc.ncores; k++)
            cand[c++] = k;
    if (m > 0 && divide(&nc, cand, c, ranks, m, bind, tasks) != 0)
        goto out;
    rc = 0;
out:
    free(ranks);
    free(cand);
    free(home);
    node_cpus_free(&nc);
    return rc;
}
