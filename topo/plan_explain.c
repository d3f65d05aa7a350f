/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: bytes, links and times of a plan's groups; see dtrain_explain.h. */
#include "dtrain_explain.h"

#include <stdio.h>
#include <string.h>

#include "dtrain_parse.h"

/* Where rank runs: its node and its GPU (index in the node's model), from
 * the plan, or for a rank of a node the plan lacks, from the rank of the
 * same local index on node `home`, which the plan has (nodes are alike). */
static int where(const dtrain_plan *plan, int home, int rank, int *node, int *gpu)
{
    int K = dtrain_plan_shape(plan)->tasks_per_node;
    const struct dtrain_task_placement *t = dtrain_plan_task(plan, rank);
    *node = rank / K;
    if (t == NULL)
        t = dtrain_plan_task(plan, home * K + rank % K);
    if (t == NULL)
        return -1;
    *gpu = t->gpu;
    return 0;
}

/* Slowest link between the tasks of ranks a and b. */
static double link_gbps(const dtrain_plan *plan, const dtrain_topo *node0, int home, int a, int b, double net,
                        double pcie, int domain, const char **what)
{
    int na, ga, nb, gb;
    if (where(plan, home, a, &na, &ga) != 0 || where(plan, home, b, &nb, &gb) != 0) {
        *what = "network";
        return net;
    }
    if (na != nb && !domain) {
        *what = "network";
        return net;
    }
    if (na != nb) {
        /* One multi-node NVLink domain: the NVSwitch fabric runs at the
         * GPUs' own NVLink rate (GB200: 900 GB/s each way). */
        double bw = node0 && dtrain_topo_gpu_count(node0) > 1 ? dtrain_topo_bandwidth(node0, 0, 1) : 0;
        *what = bw > 0 ? "NVLink domain" : "network";
        return bw > 0 ? bw : net;
    }
    if (ga < 0 || gb < 0 || !node0) {
        *what = "CPU memory/network";
        return net;
    }
    double bw = ga == gb ? 0 : dtrain_topo_bandwidth(node0, ga, gb);
    if (bw > 0) {
        *what = dtrain_topo_link_kind(node0, ga, gb) == DTRAIN_LINK_XGMI ? "XGMI" : "NVLink";
        return bw;
    }
    *what = "PCIe";
    return pcie;
}

enum dtrain_status dtrain_explain_rank_links(const dtrain_plan *plan, const dtrain_topo *node, int rank,
                                             double net_gbps, double pcie_gbps, int pp_in_domain,
                                             struct dtrain_group_links *out)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    memset(out, 0, sizeof *out);
    if (s == NULL || rank < 0 || rank >= dtrain_plan_world_size(plan) || dtrain_plan_task(plan, rank) == NULL)
        return DTRAIN_ERR_INPUT;
    int home = rank / s->tasks_per_node;
    int T = s->tp, P = s->pp, D = s->dp, tp, dp, pp;
    dtrain_coords_of(rank, T, D, &tp, &dp, &pp);
    int tp_domain = T > s->tasks_per_node; /* TP crossing nodes only inside an NVLink domain */
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        int size = dtrain_explain_group_size((enum dtrain_explain_group)g, T, P, D);
        snprintf(out->kind[g], sizeof out->kind[g], "-");
        if (size < 2)
            continue;
        /* the ring of the group's members, member i next to i + 1 */
        double worst = 0;
        const char *what = "-";
        for (int i = 0; i < size; i++) {
            int r[2];
            for (int k = 0; k < 2; k++) {
                int j = (i + k) % size;
                r[k] = g == DTRAIN_EXPLAIN_TP   ? dtrain_rank_of(j, dp, pp, T, D)
                       : g == DTRAIN_EXPLAIN_PP ? dtrain_rank_of(tp, dp, j, T, D)
                       : g == DTRAIN_EXPLAIN_DP ? dtrain_rank_of(tp, j, pp, T, D)
                                                : j;
            }
            const char *w;
            double bw = link_gbps(plan, node, home, r[0], r[1], net_gbps, pcie_gbps,
                                  (g == DTRAIN_EXPLAIN_TP && tp_domain) || (g == DTRAIN_EXPLAIN_PP && pp_in_domain),
                                  &w);
            if (worst == 0 || bw < worst) {
                worst = bw;
                what = w;
            }
        }
        out->gbps[g] = worst;
        snprintf(out->kind[g], sizeof out->kind[g], "%s", what);
    }
    return DTRAIN_OK;
}

enum dtrain_status dtrain_explain_plan(const dtrain_plan *plan, const dtrain_topo *node0,
                                       const struct dtrain_model_size *m, double net_gbps, double pcie_gbps,
                                       int pp_in_domain, struct dtrain_explain *out, char *err, size_t errlen)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    memset(out, 0, sizeof *out);
    if (!s || m->layers < 1 || m->hidden < 1 || m->seq < 1 || m->vocab < 1 || m->micro_batch < 1 ||
        m->micro_batches < 1 || m->act_bytes < 1 || m->grad_bytes < 1 || net_gbps <= 0 || pcie_gbps <= 0) {
        dtrain_snprintf(err, errlen, "the model size and bandwidths must be positive");
        return DTRAIN_ERR_INPUT;
    }
    int T = s->tp, P = s->pp, D = s->dp, v = m->virtual_stages > 0 ? m->virtual_stages : 1;
    if (m->layers % ((long)P * v) != 0) {
        if (v > 1)
            dtrain_snprintf(err, errlen, "%ld layers do not split into P=%d pipeline stages of %d chunks "
                            "(--virtual-stages)", m->layers, P, v);
        else
            dtrain_snprintf(err, errlen, "%ld layers do not split into P=%d pipeline stages", m->layers, P);
        return DTRAIN_ERR_INPUT;
    }
    double H = (double)m->hidden;
    out->params = 12.0 * (double)m->layers * H * H + 13.0 * (double)m->layers * H + (double)(m->padded_vocab > 0 ? m->padded_vocab : m->vocab) * H +
                  (double)(m->max_seq > 0 ? m->max_seq : m->seq) * H + 2.0 * H;
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        int size = dtrain_explain_group_size((enum dtrain_explain_group)g, T, P, D);
        for (int st = 0; st < P; st++) {
            double b = dtrain_explain_group_bytes(m, T, P, D, (enum dtrain_explain_group)g, st) / size;
            if (b > out->bytes[g]) {
                out->bytes[g] = b;
                out->stage[g] = st;
            }
        }
    }

    /* Each group's slowest link: rank 0's groups stand for all (homogeneous nodes). */
    dtrain_explain_rank_links(plan, node0, 0, net_gbps, pcie_gbps, pp_in_domain, &out->links);
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        out->seconds[g] = dtrain_explain_seconds(out->bytes[g], out->links.gbps[g]);
        out->total_seconds += out->seconds[g];
    }
    return DTRAIN_OK;
}
