/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: a node's islands drawn as boxes with its TP groups in
 * them; see dtrain_explain.h. */
#include <stdio.h>
#include <string.h>

#include "dtrain_explain.h"

void dtrain_plan_picture(FILE *out, const char *prefix, const dtrain_topo *topo, const dtrain_plan *plan, int node)
{
    int n = dtrain_topo_gpu_count(topo);
    int tp_group_of[DTRAIN_TOPO_MAX_GPUS];
    int T = plan ? dtrain_plan_shape(plan)->tp : 1;
    int K = plan ? dtrain_plan_shape(plan)->tasks_per_node : 0;

    for (int i = 0; i < n; i++)
        tp_group_of[i] = -1;
    for (int l = 0; plan && l < K; l++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(plan, node * K + l);
        if (t && t->gpu >= 0 && t->gpu < n)
            tp_group_of[t->gpu] = l / T;
    }
    if (plan)
        fprintf(out, "%sIslands and the TP groups of node %d (g<k>: its TP group k of T=%d, ranks %d+k*T..%d+k*T+T-1):\n",
                prefix, node, T, node * K, node * K);
    else
        fprintf(out, "%sIslands:\n", prefix);
    for (int is = 0; is < dtrain_topo_island_count(topo); is++) {
        char line[1024];
        size_t used = 0;
        line[0] = '\0';
        for (int i = 0; i < n && used < sizeof(line); i++) {
            if (dtrain_topo_island_of(topo, i) != is)
                continue;
            int w;
            if (tp_group_of[i] >= 0)
                w = snprintf(line + used, sizeof(line) - used, " [GPU%d g%d]", i, tp_group_of[i]);
            else
                w = snprintf(line + used, sizeof(line) - used, " [GPU%d %s]", i, plan ? "--" : "");
            if (w < 0 || (size_t)w >= sizeof(line) - used)
                break;
            used += (size_t)w;
        }
        size_t width = strlen(line) + 1;
        fprintf(out, "%s  +", prefix);
        for (size_t k = 0; k < width; k++)
            fputc('-', out);
        fprintf(out, "+  island %d\n%s  |%s |\n%s  +", is, prefix, line, prefix);
        for (size_t k = 0; k < width; k++)
            fputc('-', out);
        fprintf(out, "+\n");
    }
}
