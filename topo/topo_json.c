/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-topo --json: the document described in doc/topo-json.md. */
#include <stdio.h>

#include <jansson.h>

#include "dtrain_parse.h"
#include "topo_report.h"

#define TOPO_JSON_VERSION 1

/* json_object_set_new() with a NULL value fails and frees nothing; callers
 * treat any failure as out of memory. */
static int set(json_t *obj, const char *key, json_t *value)
{
    return value && json_object_set_new(obj, key, value) == 0 ? 0 : -1;
}

static int append(json_t *arr, json_t *value)
{
    return value && json_array_append_new(arr, value) == 0 ? 0 : -1;
}

static json_t *gpu_json(const dtrain_topo *topo, int i)
{
    const struct dtrain_gpu_info *g = dtrain_topo_gpu(topo, i);
    char hex[8];
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = set(o, "index", json_integer(i)) | set(o, "busid", json_string(g->busid));
    snprintf(hex, sizeof(hex), "0x%04x", g->vendor_id & 0xffffu);
    bad |= set(o, "vendor_id", json_string(hex));
    snprintf(hex, sizeof(hex), "0x%04x", g->device_id & 0xffffu);
    bad |= set(o, "device_id", json_string(hex));
    bad |= set(o, "model", json_string(g->model)) | set(o, "uuid", json_string(g->uuid)) |
           set(o, "osdev", json_string(g->osdev)) |
           set(o, "numa_node", g->numa_node >= 0 ? json_integer(g->numa_node) : json_null()) |
           set(o, "cpulist", json_string(g->cpulist)) |
           set(o, "island", json_integer(dtrain_topo_island_of(topo, i))) |
           set(o, "partitions", json_integer(g->partitions > 1 ? g->partitions : 1)) |
           set(o, "partition", json_integer(g->partition)) |
           set(o, "vendor_index", json_integer(g->vendor_index)) |
           set(o, "mig", json_boolean(g->mig != 0)) |
           set(o, "fabric_state", json_integer(g->fabric_state)) |
           set(o, "fabric_cluster", json_string(g->fabric_state > 0 ? g->fabric_cluster : "")) |
           set(o, "fabric_clique", g->fabric_state > 0 ? json_integer(g->fabric_clique) : json_null());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The node's multi-node NVLink domain, or null. */
static json_t *domain_json(const dtrain_topo *topo)
{
    char key[DTRAIN_TOPO_DOMAIN_LEN], why[8];
    return dtrain_topo_nvlink_domain(topo, key, sizeof key, why, sizeof why) == 1 ? json_string(key) : json_null();
}

static json_t *links_json(const dtrain_topo *topo)
{
    int n = dtrain_topo_gpu_count(topo);
    json_t *o = json_object(), *bw = json_array(), *kind = json_array();
    int bad = !o || !bw || !kind;
    for (int i = 0; i < n && !bad; i++) {
        json_t *rb = json_array(), *rk = json_array();
        bad |= !rb || !rk;
        for (int j = 0; j < n && !bad; j++) {
            bad |= append(rb, json_real(dtrain_topo_bandwidth(topo, i, j)));
            bad |= append(rk, json_string(dtrain_link_kind_name(dtrain_topo_link_kind(topo, i, j))));
        }
        if (bad) {
            json_decref(rb);
            json_decref(rk);
            break;
        }
        bad |= append(bw, rb) | append(kind, rk);
    }
    if (!bad) {
        bad = set(o, "source", json_string(dtrain_link_source_name(dtrain_topo_link_source(topo))));
        bad |= set(o, "bandwidth_gbps", bw) | set(o, "kind", kind);
        bw = kind = NULL; /* owned by o now (or already freed on failure) */
    }
    if (bad) {
        json_decref(bw);
        json_decref(kind);
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *islands_json(const dtrain_topo *topo)
{
    int n = dtrain_topo_gpu_count(topo);
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (int is = 0; is < dtrain_topo_island_count(topo); is++) {
        json_t *o = json_object(), *gpus = json_array();
        int bad = !o || !gpus;
        for (int i = 0; i < n && !bad; i++)
            if (dtrain_topo_island_of(topo, i) == is)
                bad |= append(gpus, json_integer(i));
        if (!bad) {
            bad = set(o, "index", json_integer(is)) | set(o, "size", json_integer(dtrain_topo_island_size(topo, is)));
            bad |= set(o, "gpus", gpus);
            gpus = NULL;
        }
        if (bad || append(arr, o) < 0) {
            json_decref(gpus);
            json_decref(o);
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *plan_json(const dtrain_plan *plan)
{
    const struct dtrain_shape *s = dtrain_plan_shape(plan);
    const char *warning = dtrain_plan_warning(plan);
    json_t *o = json_object(), *tasks = json_array();
    int bad = !o || !tasks;
    if (!bad)
        bad = set(o, "tp", json_integer(s->tp)) | set(o, "pp", json_integer(s->pp)) |
              set(o, "dp", json_integer(s->dp)) | set(o, "nodes", json_integer(s->nnodes)) |
              set(o, "tasks_per_node", json_integer(s->tasks_per_node)) |
              set(o, "world_size", json_integer(dtrain_plan_world_size(plan))) |
              set(o, "warning", warning ? json_string(warning) : json_null());
    for (int r = 0; r < dtrain_plan_world_size(plan) && !bad; r++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(plan, r);
        json_t *to = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:s, s:s}", "rank", t->rank, "node", t->node,
                               "local_rank", t->local_rank, "tp_rank", t->tp_rank, "dp_rank", t->dp_rank,
                               "pp_rank", t->pp_rank, "gpu", t->gpu >= 0 ? json_integer(t->gpu) : json_null(),
                               "gpu_busid", t->gpu_busid, "cpulist", t->cpulist);
        bad |= append(tasks, to);
    }
    if (!bad) {
        bad = set(o, "tasks", tasks);
        tasks = NULL;
    }
    if (bad) {
        json_decref(tasks);
        json_decref(o);
        return NULL;
    }
    return o;
}

enum dtrain_status topo_report_json(FILE *out, const dtrain_topo *topo, const dtrain_plan *plan,
                                    const char *source, char *err, size_t errlen)
{
    json_t *doc = json_object(), *gpus = json_array();
    enum dtrain_status rc = DTRAIN_ERR_SYSTEM;
    int bad = !doc || !gpus;

    for (int i = 0; i < dtrain_topo_gpu_count(topo) && !bad; i++)
        bad |= append(gpus, gpu_json(topo, i));
    if (!bad) {
        bad = set(doc, "version", json_integer(TOPO_JSON_VERSION)) | set(doc, "source", json_string(source)) |
              set(doc, "summary", json_string(dtrain_topo_summary(topo))) | set(doc, "gpus", gpus);
        gpus = NULL;
        bad |= set(doc, "links", links_json(topo)) | set(doc, "islands", islands_json(topo)) |
               set(doc, "largest_island", json_integer(dtrain_topo_largest_island(topo))) |
               set(doc, "nvlink_domain", domain_json(topo)) |
               set(doc, "plan", plan ? plan_json(plan) : json_null());
    }
    if (bad) {
        dtrain_snprintf(err, errlen, "out of memory while building JSON");
        goto out;
    }
    if (json_dumpf(doc, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0 || fputc('\n', out) == EOF) {
        dtrain_snprintf(err, errlen, "cannot write JSON output");
        goto out;
    }
    rc = DTRAIN_OK;
out:
    json_decref(gpus);
    json_decref(doc);
    return rc;
}
