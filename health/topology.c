/* dtrain-health: topology facts from libdtrain-topo; see topology.h. */
#include "topology.h"

#include <string.h>

#include "bounded.h"
#include "busid.h"
#include "site_config.h"
#include "dtrain_parse.h"
#include "dtrain_topo.h"

struct topology_request {
    char node_xml[HEALTH_PATH_LEN];
    char reference_xml[HEALTH_PATH_LEN];
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

static void load_one(const char *xml, struct health_topo_model *out, struct health_stage *stage)
{
    dtrain_topo *topo = NULL;
    char err[HEALTH_ERROR_LEN];
    int rc;
    dtrain_snprintf(out->source, sizeof(out->source), "%s", xml[0] ? xml : "live");
    if (xml[0]) {
        health_stage_set(stage, "loading the topology %s", xml);
        rc = dtrain_topo_load_xml(xml, &topo, err, sizeof(err));
    } else {
        health_stage_set(stage, "discovering the live topology (hwloc)");
        rc = dtrain_topo_load_live(&topo, err, sizeof(err));
    }
    if (rc != DTRAIN_TOPO_OK) {
        dtrain_snprintf(out->error, sizeof(out->error), "topology %s: %s", out->source, err);
        return;
    }
    copy_model(topo, out);
    dtrain_topo_free(topo);
    out->ok = 1;
}

static void topology_child(const void *arg, void *out, struct health_stage *stage)
{
    const struct topology_request *req = arg;
    struct health_topo_facts *facts = out;
    load_one(req->node_xml, &facts->node, stage);
    if (req->reference_xml[0]) {
        facts->have_reference = 1;
        load_one(req->reference_xml, &facts->reference, stage);
    }
}

void health_topology_probe(const char *node_xml, const char *reference_xml, int timeout_ms,
                           struct health_topo_facts *out)
{
    struct topology_request req;
    char why[HEALTH_ERROR_LEN];
    dtrain_snprintf(req.node_xml, sizeof(req.node_xml), "%s", node_xml);
    dtrain_snprintf(req.reference_xml, sizeof(req.reference_xml), "%s", reference_xml);
    if (health_run_bounded(topology_child, &req, out, sizeof(*out), timeout_ms, why, sizeof(why)) !=
        HEALTH_BOUNDED_OK) {
        dtrain_snprintf(out->node.source, sizeof(out->node.source), "%s", node_xml[0] ? node_xml : "live");
        dtrain_snprintf(out->node.error, sizeof(out->node.error), "topology %s: %s", out->node.source, why);
    }
}
