/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: bytes, links and times of a plan's groups; see dtrain_explain.h. */
#include "dtrain_explain.h"

#include <stdio.h>
#include <string.h>

#include "dtrain_parse.h"

/* Slowest link between the tasks of ranks a and b (gpu indices in node0). */
static double link_gbps(const dtrain_plan *plan, const dtrain_topo *node0, int a, int b, double net, double pcie,
                        int domain, const char **what)
{
    const struct dtrain_task_placement *ta = dtrain_plan_task(plan, a), *tb = dtrain_plan_task(plan, b);
    if (ta->node != tb->node && !domain) {
        *what = "network";
        return net;
    }
    int ga = ta->gpu, gb = tb->gpu;
    if (ta->node != tb->node) {
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

int dtrain_explain_plan(const dtrain_plan *plan, const dtrain_topo *node0, const struct dtrain_model_size *m,
                        double net_gbps, double pcie_gbps, int pp_in_domain, struct dtrain_explain *out, char *err,
                        size_t errlen)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    memset(out, 0, sizeof *out);
    if (!s || m->layers < 1 || m->hidden < 1 || m->seq < 1 || m->vocab < 1 || m->micro_batch < 1 ||
        m->micro_batches < 1 || m->act_bytes < 1 || m->grad_bytes < 1 || net_gbps <= 0 || pcie_gbps <= 0) {
        dtrain_snprintf(err, errlen, "the model size and bandwidths must be positive");
        return -1;
    }
    int T = s->tp, P = s->pp, D = s->dp, v = m->virtual_stages > 0 ? m->virtual_stages : 1;
    if (m->layers % ((long)P * v) != 0) {
        if (v > 1)
            dtrain_snprintf(err, errlen, "%ld layers do not split into P=%d pipeline stages of %d chunks "
                            "(--virtual-stages)", m->layers, P, v);
        else
            dtrain_snprintf(err, errlen, "%ld layers do not split into P=%d pipeline stages", m->layers, P);
        return -1;
    }
    double H = (double)m->hidden;
    out->params = 12.0 * (double)m->layers * H * H + 13.0 * (double)m->layers * H + (double)(m->padded_vocab > 0 ? m->padded_vocab : m->vocab) * H +
                  (double)(m->max_seq > 0 ? m->max_seq : m->seq) * H + 2.0 * H;
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        int size = g == DTRAIN_EXPLAIN_TP ? T : g == DTRAIN_EXPLAIN_PP ? P : g == DTRAIN_EXPLAIN_DP ? D : T * P * D;
        for (int st = 0; st < P; st++) {
            double b = dtrain_explain_group_bytes(m, T, P, D, (enum dtrain_explain_group)g, st) / size;
            if (b > out->bytes[g]) {
                out->bytes[g] = b;
                out->stage[g] = st;
            }
        }
    }

    /* Each group's slowest link: rank 0's groups stand for all (homogeneous nodes). */
    int domain = T > s->tasks_per_node; /* TP crossing nodes only inside an NVLink domain */
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        int size = g == DTRAIN_EXPLAIN_TP ? T : g == DTRAIN_EXPLAIN_PP ? P : g == DTRAIN_EXPLAIN_DP ? D : T * P * D;
        int stride = g == DTRAIN_EXPLAIN_TP || g == DTRAIN_EXPLAIN_WORLD ? 1 : g == DTRAIN_EXPLAIN_PP ? T * D : T;
        snprintf(out->link[g], sizeof out->link[g], "-");
        if (size < 2)
            continue;
        double worst = 0;
        const char *what = "-";
        for (int i = 0; i < size; i++) {
            int a = i * stride, b = ((i + 1) % size) * stride;
            const char *w;
            double bw = link_gbps(plan, node0, a, b, net_gbps, pcie_gbps,
                                  (g == DTRAIN_EXPLAIN_TP && domain) || (g == DTRAIN_EXPLAIN_PP && pp_in_domain), &w);
            if (worst == 0 || bw < worst) {
                worst = bw;
                what = w;
            }
        }
        out->gbps[g] = worst;
        snprintf(out->link[g], sizeof out->link[g], "%s", what);
        out->seconds[g] = out->bytes[g] / (worst * 1e9);
        out->total_seconds += out->seconds[g];
    }
    return 0;
}
