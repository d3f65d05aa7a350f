/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: topology facts from libdtrain-topo; see topology.h. */
#include "topology.h"

#include <string.h>

#include "busid.h"
#include "dtrain_parse.h"
#include "dtrain_topo.h"

struct topology_request {
    const char *node_xml;
    const char *reference_xml;
};

static void copy_model(const dtrain_topo *topo, struct health_topo_model *out)
{
    int n = dtrain_topo_gpu_count(topo);
    if (n > HEALTH_MAX_GPUS)
        n = HEALTH_MAX_GPUS;
    out->ngpus = n;
    for (int a = 0; a < n; a++) {
        const struct dtrain_gpu_info *info = dtrain_topo_gpu(topo, a);
        struct health_topo_gpu *gpu = &out->gpus[a];
        if (health_busid_normalise(info->busid, gpu->busid, sizeof(gpu->busid)) != 0)
            dtrain_snprintf(gpu->busid, sizeof(gpu->busid), "%s", info->busid);
        dtrain_snprintf(gpu->model, sizeof(gpu->model), "%s", info->model);
        gpu->vendor_id = info->vendor_id;
        for (int b = 0; b < n; b++)
            out->bandwidth_gbps[a][b] = a == b ? 0.0f : (float)dtrain_topo_bandwidth(topo, a, b);
    }
    out->largest_island = dtrain_topo_largest_island(topo);
    dtrain_snprintf(out->summary, sizeof(out->summary), "%s", dtrain_topo_summary(topo));
}

static void load_one(const char *xml, struct health_topo_model *out, struct dtrain_stage *stage)
{
    dtrain_topo *topo = NULL;
    char err[HEALTH_ERROR_LEN];
    int rc;
    dtrain_snprintf(out->source, sizeof(out->source), "%s", xml[0] ? xml : "live");
    if (xml[0]) {
        dtrain_stage_set(stage, "loading the topology %s", xml);
        rc = dtrain_topo_load_xml(xml, &topo, err, sizeof(err));
    } else {
        dtrain_stage_set(stage, "discovering the live topology (hwloc)");
        rc = dtrain_topo_load_live(&topo, err, sizeof(err));
    }
    if (rc != DTRAIN_OK) {
        dtrain_snprintf(out->error, sizeof(out->error), "topology %s: %s", out->source, err);
        return;
    }
    copy_model(topo, out);
    dtrain_topo_free(topo);
    out->ok = 1;
}

static void topology_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    const struct topology_request *req = arg;
    struct health_topo_facts *facts = out;
    load_one(req->node_xml, &facts->node, stage);
    if (req->reference_xml[0]) {
        facts->have_reference = 1;
        load_one(req->reference_xml, &facts->reference, stage);
    }
}

static void topology_failed(void *out, const void *ctx, const char *why)
{
    struct health_topo_model *node = &((struct health_topo_facts *)out)->node;
    const char *node_xml = ctx;
    dtrain_snprintf(node->source, sizeof(node->source), "%s", node_xml[0] ? node_xml : "live");
    dtrain_snprintf(node->error, sizeof(node->error), "topology %s: %s", node->source, why);
}

void health_topology_start(const char *node_xml, const char *reference_xml, int timeout_ms,
                           struct health_topo_facts *out, struct dtrain_probe *probe)
{
    /* The child gets a copy of this frame: the request may live here. */
    struct topology_request req = {.node_xml = node_xml, .reference_xml = reference_xml};
    dtrain_probe_start(probe, topology_child, &req, out, sizeof(*out), timeout_ms, topology_failed, node_xml);
}

void health_topology_probe(const char *node_xml, const char *reference_xml, int timeout_ms,
                           struct health_topo_facts *out)
{
    struct dtrain_probe probe;
    health_topology_start(node_xml, reference_xml, timeout_ms, out, &probe);
    dtrain_probe_wait(&probe);
}
