/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Predicted and measured bytes per group and step; see dtrain_traffic.h. */
#include "dtrain_traffic.h"

#include <stdarg.h>
#include <stdlib.h>

#include "dtrain_env.h"
#include "parallel/dtrain_stage.h"

void dtrain_traffic_model(const struct dtrain_train_config *c, int T, int D, int step_sums,
                          struct dtrain_model_size *m)
{
    int mb = c->micro_batches > 0 ? c->micro_batches : 1;
    *m = (struct dtrain_model_size){
        .layers = c->model.num_layers,
        .hidden = c->model.channels,
        .seq = c->seq,
        .vocab = c->model.vocab_size,
        .micro_batch = D > 0 ? c->batch / ((long)D * mb) : 0,
        .micro_batches = mb,
        .act_bytes = 4, /* the trainer communicates fp32 (dtrain_pcomm.h), whatever the kernels' precision */
        .grad_bytes = 4,
        .padded_vocab = c->model.padded_vocab_size,
        .max_seq = c->model.max_seq_len,
        .virtual_stages = c->virtual_stages > 0 ? c->virtual_stages : 1,
        .sequence_parallel = c->sequence_parallel && T > 1,
        .zero_stage = c->zero_stage,
        .recompute_full = c->recompute == DTRAIN_RECOMPUTE_FULL,
        .step_sums = step_sums,
    };
    const struct dtrain_model_config *mc = &c->model;
    if (mc->family != DTRAIN_FAMILY_GPT2) { /* the family's sizes (GPT-2's are the formulas') */
        size_t sz[DTRAIN_MODEL_NUM_TENSORS];
        double L = mc->num_layers;
        dtrain_model_tensor_sizes(mc, sz);
        m->layer_split = (double)(sz[DTRAIN_MODEL_QKVW] + sz[DTRAIN_MODEL_QKVB] + sz[DTRAIN_MODEL_ATTPROJW] +
                                  sz[DTRAIN_MODEL_FCW] + sz[DTRAIN_MODEL_FCB] + sz[DTRAIN_MODEL_FCPROJW]) / L;
        m->layer_whole = (double)(sz[DTRAIN_MODEL_LN1W] + sz[DTRAIN_MODEL_LN1B] + sz[DTRAIN_MODEL_LN2W] +
                                  sz[DTRAIN_MODEL_LN2B] + sz[DTRAIN_MODEL_ATTPROJB] + sz[DTRAIN_MODEL_FCPROJB]) / L;
        m->final_norm = (double)(sz[DTRAIN_MODEL_LNFW] + sz[DTRAIN_MODEL_LNFB]);
        m->norm_vectors = (int)((sz[DTRAIN_MODEL_LN1W] + sz[DTRAIN_MODEL_LN1B] + sz[DTRAIN_MODEL_LN2W] +
                                 sz[DTRAIN_MODEL_LN2B]) / (size_t)mc->num_layers / (size_t)mc->channels);
        m->no_wpe = sz[DTRAIN_MODEL_WPE] == 0;
        m->untied_head = mc->untied_head;
    }
}

/* The communicators of each kind (PP: the pipeline group and the neighbour pairs). */
static int kind_comms(const struct dtrain_comms *comms, enum dtrain_explain_group g, dtrain_comm *out[3])
{
    int n = 0;
    switch (g) {
    case DTRAIN_EXPLAIN_TP: out[n++] = comms->group[DTRAIN_GROUP_TP]; break;
    case DTRAIN_EXPLAIN_PP:
        out[n++] = comms->group[DTRAIN_GROUP_PP];
        out[n++] = comms->group[DTRAIN_GROUP_PP_NEXT];
        out[n++] = comms->group[DTRAIN_GROUP_PP_PREV];
        break;
    case DTRAIN_EXPLAIN_DP: out[n++] = comms->group[DTRAIN_GROUP_DP]; break;
    default: out[n++] = comms->group[DTRAIN_GROUP_WORLD]; break;
    }
    return n;
}

void dtrain_traffic_sample(const struct dtrain_comms *comms, uint64_t sent[DTRAIN_EXPLAIN_GROUPS])
{
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        dtrain_comm *c[3];
        int n = kind_comms(comms, (enum dtrain_explain_group)g, c);
        sent[g] = 0;
        for (int i = 0; i < n; i++) {
            struct dtrain_comm_stats st;
            dtrain_comm_get_stats(c[i], &st); /* NULL: zeros */
            sent[g] += st.bytes_sent;
        }
    }
}

const char *dtrain_traffic_link(const struct dtrain_comms *comms, enum dtrain_explain_group g)
{
    dtrain_comm *c[3];
    int n = kind_comms(comms, g, c), shm = 0, tcp = 0, gpu = 0;
    for (int i = 0; i < n; i++) {
        struct dtrain_comm_stats st;
        if (c[i] == NULL || dtrain_comm_size(c[i]) < 2)
            continue;
        dtrain_comm_get_stats(c[i], &st);
        shm += st.shm_links;
        tcp += st.tcp_links;
        gpu += dtrain_comm_device_memory(c[i]);
    }
    if (gpu > 0)
        return "NCCL";
    return shm && tcp ? "shared memory + TCP" : tcp ? "TCP" : shm ? "shared memory" : "-";
}

/* What the model says each member of this rank's group of kind g sends in a step. */
static double member_bytes(const struct dtrain_model_size *m, const struct dtrain_bootstrap *bs,
                           enum dtrain_explain_group g)
{
    int size = dtrain_explain_group_size(g, bs->tp, bs->pp, bs->dp);
    double b = dtrain_explain_group_bytes(m, bs->tp, bs->pp, bs->dp, g, bs->pp_rank);
    return size > 0 ? b / size : 0.0;
}

int dtrain_traffic_links(struct dtrain_group_links *links, char *err, size_t errlen)
{
    const char *text = getenv(DTRAIN_ENV_GROUP_LINKS);
    if (text == NULL)
        return 0;
    return dtrain_group_links_parse(text, links, err, errlen) == 0 ? 1 : -1;
}

/* printf at buf + *at, within len; *at stops at len - 1 (a cut line). */
static void appendf(char *buf, size_t len, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
    va_list ap;
    if (*at >= len - 1)
        return;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    *at = w < 0 ? len - 1 : *at + (size_t)w >= len ? len - 1 : *at + (size_t)w;
}

void dtrain_traffic_explain(FILE *out, const char *prog, const struct dtrain_train_config *c,
                            const struct dtrain_bootstrap *bs, const struct dtrain_comms *comms, int step_sums,
                            const struct dtrain_group_links *links)
{
    struct dtrain_model_size m;
    double total = 0;
    dtrain_traffic_model(c, bs->tp, bs->dp, step_sums, &m);
    fprintf(out, "%s: explain: T=%d P=%d D=%d, %ld layers, C=%ld, %ld micro-batches of %ld x %ld tokens per DP rank%s%s"
            "%s, ZeRO-%d: bytes sent per step by rank %d's groups (model: doc/topology.md)\n",
            prog, bs->tp, bs->pp, bs->dp, m.layers, m.hidden, m.micro_batches, m.micro_batch, m.seq,
            m.virtual_stages > 1 ? ", interleaved" : "", m.sequence_parallel ? ", sequence parallel" : "",
            m.recompute_full ? ", full recompute" : "", m.zero_stage, bs->rank);
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        enum dtrain_explain_group k = (enum dtrain_explain_group)g;
        int size = dtrain_explain_group_size(k, bs->tp, bs->pp, bs->dp);
        double b = dtrain_explain_group_bytes(&m, bs->tp, bs->pp, bs->dp, k, bs->pp_rank);
        double per = size > 0 ? b / size : 0.0;
        char predicted[160] = "";
        size_t at = 0;
        if (links && links->gbps[g] > 0) {
            double sec = dtrain_explain_seconds(per, links->gbps[g]);
            appendf(predicted, sizeof predicted, &at, "; slowest link %s %.6g GB/s: predicted %.3f ms",
                    links->kind[g], links->gbps[g], sec * 1e3);
            total += sec;
        } else if (links) {
            appendf(predicted, sizeof predicted, &at, "; no link (one member)");
        }
        fprintf(out, "%s: explain: %-5s group of %d: %.0f bytes in all, %.0f per member, over %s%s\n", prog,
                dtrain_explain_group_name(k), size, b, per, dtrain_traffic_link(comms, k), predicted);
    }
    /* dtrain-launch counted the DP ring edges across leaf switches
     * (DTRAIN_LEAF_EDGES); each carries one DP member's bytes a step */
    long cross, ring, own;
    if (bs->dp > 1 && dtrain_leaf_edges_parse(getenv(DTRAIN_ENV_LEAF_EDGES), &cross, &ring, &own) == 0) {
        double per = member_bytes(&m, bs, DTRAIN_EXPLAIN_DP);
        fprintf(out, "%s: explain: leaf switch uplinks: %ld of %ld DP ring edges cross them, %.0f bytes per step in "
                "the node order in force; %ld, %.0f bytes, in dtrain's own order (stage %d's DP bytes a member)\n",
                prog, cross, ring, per * (double)cross, own, per * (double)own, bs->pp_rank);
    }
    if (links)
        fprintf(out, "%s: explain: predicted communication per step: %.3f ms (no overlap with compute: an upper "
                "bound; links from the plugin's topology and the site's net_gbps/pcie_gbps)\n", prog, total * 1e3);
    else
        fprintf(out, "%s: explain: no predicted times: no link rates (DTRAIN_GROUP_LINKS, which the SPANK plugin "
                "sets when it places the step)\n", prog);
    fflush(out);
}

void dtrain_traffic_report(FILE *out, const char *prog, const struct dtrain_train_config *c,
                           const struct dtrain_bootstrap *bs, const struct dtrain_group_links *links,
                           int step_sums, long step,
                           const uint64_t before[DTRAIN_EXPLAIN_GROUPS], const uint64_t now[DTRAIN_EXPLAIN_GROUPS],
                           double pipe_wait_ms, double tp_comm_ms, double dp_exposed_ms)
{
    struct dtrain_model_size m;
    dtrain_traffic_model(c, bs->tp, bs->dp, step_sums, &m);
    char line[1024];
    size_t at = 0;
    appendf(line, sizeof line, &at, "%s: rank %d step %ld: sent", prog, bs->rank, step);
    double per[DTRAIN_EXPLAIN_GROUPS];
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        per[g] = member_bytes(&m, bs, (enum dtrain_explain_group)g);
        appendf(line, sizeof line, &at, "%s %s %llu (group average %.0f)", g ? "," : "",
                dtrain_explain_group_name((enum dtrain_explain_group)g), (unsigned long long)(now[g] - before[g]),
                per[g]);
    }
    appendf(line, sizeof line, &at, "; waited: pipeline %.3f ms, TP %.3f ms, DP exposed %.3f ms", pipe_wait_ms,
            tp_comm_ms, dp_exposed_ms);
    for (int g = 0; links && g < DTRAIN_EXPLAIN_GROUPS; g++)
        appendf(line, sizeof line, &at, "%s %s %.3f ms", g ? "," : "; predicted",
                dtrain_explain_group_name((enum dtrain_explain_group)g),
                dtrain_explain_seconds(per[g], links->gbps[g]) * 1e3);
    fprintf(out, "%s\n", line);
    fflush(out);
}
