/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-topo: readable tables and the ASCII picture. */
#include <stdio.h>
#include <string.h>

#include "topo_report.h"

static void print_gpus(FILE *out, const dtrain_topo *topo)
{
    int n = dtrain_topo_gpu_count(topo);
    fprintf(out, "%-4s %-13s %-28s %-5s %-7s %-9s %s\n", "GPU", "BUS ID", "MODEL", "NUMA", "ISLAND",
            "OSDEV", "CPUS");
    for (int i = 0; i < n; i++) {
        const struct dtrain_gpu_info *g = dtrain_topo_gpu(topo, i);
        char numa[16];
        if (g->numa_node >= 0)
            snprintf(numa, sizeof(numa), "%d", g->numa_node);
        else
            snprintf(numa, sizeof(numa), "-");
        fprintf(out, "%-4d %-13s %-28.28s %-5s %-7d %-9s %s\n", i, g->busid, g->model[0] ? g->model : "-",
                numa, dtrain_topo_island_of(topo, i), g->osdev[0] ? g->osdev : "-",
                g->cpulist[0] ? g->cpulist : "-");
    }
}

static void print_links(FILE *out, const dtrain_topo *topo)
{
    int n = dtrain_topo_gpu_count(topo);
    fprintf(out, "\nLinks: %s; GPU-to-GPU bandwidth in GB/s (PCIe = no NVLink/XGMI path)\n",
            dtrain_link_source_name(dtrain_topo_link_source(topo)));
    fprintf(out, "%6s", "");
    for (int j = 0; j < n; j++)
        fprintf(out, " %6d", j);
    fprintf(out, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(out, "%6d", i);
        for (int j = 0; j < n; j++) {
            enum dtrain_link_kind k = dtrain_topo_link_kind(topo, i, j);
            if (k == DTRAIN_LINK_SELF)
                fprintf(out, " %6s", "X");
            else if (k == DTRAIN_LINK_PCIE)
                fprintf(out, " %6s", "PCIe");
            else
                fprintf(out, " %6.0f", dtrain_topo_bandwidth(topo, i, j));
        }
        fprintf(out, "\n");
    }
}

static void print_islands(FILE *out, const dtrain_topo *topo)
{
    int n = dtrain_topo_gpu_count(topo);
    fprintf(out, "\nIslands: %d (largest %d GPUs)\n", dtrain_topo_island_count(topo),
            dtrain_topo_largest_island(topo));
    for (int is = 0; is < dtrain_topo_island_count(topo); is++) {
        fprintf(out, "  island %d: %d GPU%s:", is, dtrain_topo_island_size(topo, is),
                dtrain_topo_island_size(topo, is) == 1 ? "" : "s");
        for (int i = 0; i < n; i++)
            if (dtrain_topo_island_of(topo, i) == is)
                fprintf(out, " %d", i);
        fprintf(out, "\n");
    }
}

static void print_plan(FILE *out, const dtrain_plan *plan)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    int world = dtrain_plan_world_size(plan);
    fprintf(out, "\nPlan: T=%d P=%d D=%d, %d node%s x %d tasks, world size %d\n", s->tp, s->pp, s->dp,
            s->nnodes, s->nnodes == 1 ? "" : "s", s->tasks_per_node, world);
    if (dtrain_plan_warning(plan))
        fprintf(out, "warning: %s\n", dtrain_plan_warning(plan));
    fprintf(out, "%-6s %-5s %-5s %-3s %-3s %-3s %-4s %-13s %s\n", "RANK", "NODE", "LOCAL", "TP", "DP", "PP",
            "GPU", "BUS ID", "CPUS");
    for (int r = 0; r < world; r++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(plan, r);
        char gpu[16];
        if (t->gpu >= 0)
            snprintf(gpu, sizeof(gpu), "%d", t->gpu);
        else
            snprintf(gpu, sizeof(gpu), "-");
        fprintf(out, "%-6d %-5d %-5d %-3d %-3d %-3d %-4s %-13s %s\n", t->rank, t->node, t->local_rank,
                t->tp_rank, t->dp_rank, t->pp_rank, gpu, t->gpu_busid[0] ? t->gpu_busid : "-",
                t->cpulist[0] ? t->cpulist : "-");
    }
}

void topo_report_table(FILE *out, const dtrain_topo *topo, const dtrain_plan *plan)
{
    fprintf(out, "Node: %s\n\n", dtrain_topo_summary(topo));
    if (dtrain_topo_gpu_count(topo) > 0) {
        print_gpus(out, topo);
        print_links(out, topo);
        print_islands(out, topo);
    }
    if (plan)
        print_plan(out, plan);
}

