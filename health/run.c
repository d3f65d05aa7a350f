/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: probe what the wanted checks need, then judge; see run.h. */
#include "run.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain_parse.h"
#include "fs.h"
#include "ib.h"
#include "imex.h"
#include "nvml.h"
#include "topology.h"
#include "dtrain_clock.h"

/* How often the epilog looks again for GPU processes that are exiting. */
#define PROCESS_RECHECK_MS 200

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Whether any wanted check needs NVML, and which queries (enum
 * health_nvml_query bits) beyond bus ids and names. */
static int nvml_needed(const struct health_config *cfg, enum health_mode mode, unsigned *what)
{
    static const struct { enum health_check_id id; unsigned query; } uses[] = {
        {HEALTH_CHECK_GPU_COUNT, 0},      {HEALTH_CHECK_GPU_MODEL, 0},
        {HEALTH_CHECK_NVML, 0},           {HEALTH_CHECK_ECC, HEALTH_NVML_ECC},
        {HEALTH_CHECK_RETIRED_MEMORY, HEALTH_NVML_RETIRED}, {HEALTH_CHECK_XID, HEALTH_NVML_XID},
        {HEALTH_CHECK_NVLINK_ERRORS, HEALTH_NVML_NVLINK},   {HEALTH_CHECK_GPU_MEMORY, HEALTH_NVML_MEMORY},
        {HEALTH_CHECK_GPU_PROCESSES, HEALTH_NVML_PROCESSES}, {HEALTH_CHECK_IMEX, HEALTH_NVML_FABRIC},
    };
    int needed = 0;
    *what = 0;
    for (size_t i = 0; i < sizeof(uses) / sizeof(uses[0]); i++)
        if (health_check_wanted(cfg, uses[i].id, mode)) {
            *what |= uses[i].query;
            needed = 1;
        }
    if (health_check_wanted(cfg, HEALTH_CHECK_NVLINK, mode) && cfg->nvlink.min_active_links > 0) {
        *what |= HEALTH_NVML_NVLINK;
        needed = 1;
    }
    return needed;
}

static int topology_needed(const struct health_config *cfg, enum health_mode mode, int nvml)
{
    int nvlink_topo = cfg->nvlink.min_bandwidth_gbps > 0 || cfg->nvlink.reference[0] ||
                      cfg->nvlink.min_largest_island > 0;
    return health_check_wanted(cfg, HEALTH_CHECK_GPU_COUNT, mode) ||
           (health_check_wanted(cfg, HEALTH_CHECK_GPU_MODEL, mode) && cfg->gpu_model[0]) ||
           (health_check_wanted(cfg, HEALTH_CHECK_NVLINK, mode) && nvlink_topo) ||
           /* without gpus.count, the topology says whether GPUs are expected */
           (nvml && cfg->gpu_count < 0);
}

static int has_processes(const struct health_nvml_facts *nv)
{
    for (int g = 0; g < nv->ngpus; g++)
        if (nv->gpus[g].procs_known && nv->gpus[g].nprocs > 0)
            return 1;
    return 0;
}

/* Epilog: processes of the job may still be exiting; look again until
 * they are gone or the grace period ends, keeping the last answer. */
static void wait_for_processes(const struct health_config *cfg, const struct health_nvml_request *req,
                               struct health_nvml_facts *nv)
{
    struct health_nvml_facts *again = malloc(sizeof(*again));
    struct health_nvml_request only = *req;
    double deadline = 1e3 * dtrain_clock_s() + cfg->gpu_processes_grace_ms;
    if (!again)
        return; /* keep the first answer */
    only.what = HEALTH_NVML_PROCESSES;
    while (has_processes(nv) && 1e3 * dtrain_clock_s() < deadline) {
        sleep_ms(PROCESS_RECHECK_MS);
        health_nvml_probe(&only, cfg->timeout_ms.nvml, again);
        if (!again->ok)
            break;
        for (int g = 0; g < nv->ngpus; g++)
            for (int h = 0; h < again->ngpus; h++)
                if (strcmp(nv->gpus[g].busid, again->gpus[h].busid) == 0) {
                    nv->gpus[g].procs_known = again->gpus[h].procs_known;
                    nv->gpus[g].nprocs = again->gpus[h].nprocs;
                    memcpy(nv->gpus[g].procs, again->gpus[h].procs, sizeof(nv->gpus[g].procs));
                }
    }
    free(again);
}

int health_run(const struct health_config *cfg, enum health_mode mode, struct health_report *out,
               char *err, size_t errlen)
{
    struct health_facts facts = {0};
    struct health_topo_facts *topo = NULL;
    struct health_nvml_facts *nvml = NULL;
    struct health_fs_facts *ckpt = NULL, *shm = NULL;
    struct health_ib_facts *ib = NULL;
    struct health_imex_facts *imex = NULL;
    struct health_nvml_request req;
    struct dtrain_probe topo_probe, nvml_probe, ckpt_probe, shm_probe, ib_probe;
    struct dtrain_probe *probes[5] = {NULL, NULL, NULL, NULL, NULL};
    double start = 1e3 * dtrain_clock_s();
    int rc = -1;

    memset(out, 0, sizeof(*out));
    out->mode = mode;
    out->topology_ms = out->nvml_ms = out->filesystem_ms = out->infiniband_ms = out->imex_ms = -1;

    /* Every probe the wanted checks need, started at once. */
    unsigned what = 0;
    int use_nvml = nvml_needed(cfg, mode, &what);
    if (topology_needed(cfg, mode, use_nvml)) {
        if (!(topo = calloc(1, sizeof(*topo))))
            goto oom;
        health_topology_start(cfg->topology, cfg->nvlink.reference, cfg->timeout_ms.topology, topo, &topo_probe);
        probes[0] = &topo_probe;
        facts.topo = topo;
    }
    if (use_nvml) {
        memset(&req, 0, sizeof(req));
        health_nvml_library(cfg->nvml_library, req.library, sizeof(req.library));
        req.what = what;
        req.ecc_aggregate = cfg->ecc.aggregate;
        req.xid_wait_ms = cfg->xid.wait_ms;
        if (!(nvml = calloc(1, sizeof(*nvml))))
            goto oom;
        health_nvml_start(&req, cfg->timeout_ms.nvml, nvml, &nvml_probe);
        probes[1] = &nvml_probe;
        facts.nvml = nvml;
    }
    if (health_check_wanted(cfg, HEALTH_CHECK_CHECKPOINT_FS, mode) && cfg->checkpoint_fs.path[0]) {
        if (!(ckpt = calloc(1, sizeof(*ckpt))))
            goto oom;
        health_fs_start(cfg->checkpoint_fs.path, cfg->timeout_ms.filesystem, ckpt, &ckpt_probe);
        probes[2] = &ckpt_probe;
        facts.checkpoint_fs = ckpt;
    }
    if (health_check_wanted(cfg, HEALTH_CHECK_SHM, mode) && cfg->shm.path[0]) {
        if (!(shm = calloc(1, sizeof(*shm))))
            goto oom;
        health_fs_start(cfg->shm.path, cfg->timeout_ms.filesystem, shm, &shm_probe);
        probes[3] = &shm_probe;
        facts.shm = shm;
    }
    if (health_check_wanted(cfg, HEALTH_CHECK_INFINIBAND, mode)) {
        if (!(ib = calloc(1, sizeof(*ib))))
            goto oom;
        health_ib_start(cfg->sysfs_root, cfg->infiniband.ports, cfg->infiniband.nports, cfg->timeout_ms.infiniband,
                        ib, &ib_probe);
        probes[4] = &ib_probe;
        facts.ib = ib;
    }
    dtrain_probe_wait_all(probes, 5);
    if (probes[0])
        out->topology_ms = topo_probe.elapsed_ms;
    if (probes[1])
        out->nvml_ms = nvml_probe.elapsed_ms;
    if (probes[2])
        out->filesystem_ms = ckpt_probe.elapsed_ms;
    if (probes[3] && shm_probe.elapsed_ms > out->filesystem_ms)
        out->filesystem_ms = shm_probe.elapsed_ms;
    if (probes[4])
        out->infiniband_ms = ib_probe.elapsed_ms;
    if (nvml && nvml->ok && (req.what & HEALTH_NVML_PROCESSES) && cfg->gpu_processes_grace_ms > 0 &&
        has_processes(nvml)) {
        double t = 1e3 * dtrain_clock_s();
        wait_for_processes(cfg, &req, nvml);
        out->nvml_ms += 1e3 * dtrain_clock_s() - t;
    }
    /* The IMEX daemon, once NVML has said the node is in a multi-node
     * NVLink domain (or the site wants it everywhere): nodes without one
     * run no control program. */
    if (health_check_wanted(cfg, HEALTH_CHECK_IMEX, mode) &&
        (cfg->imex.always || health_imex_node_in_domain(&facts))) {
        if (!(imex = calloc(1, sizeof(*imex))))
            goto oom_after;
        struct dtrain_probe imex_probe;
        struct dtrain_probe *one[1] = {&imex_probe};
        health_imex_start(cfg->imex.ctl, cfg->timeout_ms.imex, imex, &imex_probe);
        dtrain_probe_wait_all(one, 1);
        out->imex_ms = imex_probe.elapsed_ms;
        facts.imex = imex;
    }

    for (int id = 0; id < HEALTH_CHECK_COUNT; id++) {
        if (!health_check_wanted(cfg, (enum health_check_id)id, mode))
            continue;
        struct health_result *r = &out->results[out->nresults++];
        health_check_judge((enum health_check_id)id, cfg, mode, &facts, r);
        out->failed += r->outcome == HEALTH_FAIL;
    }
    out->total_ms = 1e3 * dtrain_clock_s() - start;
    rc = 0;
    goto done;
oom:
    /* Probes already started must not outlive the run. */
    dtrain_probe_wait_all(probes, 5);
oom_after:
    dtrain_snprintf(err, errlen, "out of memory");
done:
    free(topo);
    free(nvml);
    free(ckpt);
    free(shm);
    free(ib);
    free(imex);
    return rc;
}
