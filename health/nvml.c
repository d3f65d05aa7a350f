/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: read the GPUs' health through NVML; see nvml.h. */
#include "nvml.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "busid.h"
#include "dtrain_nvml.h"
#include "dtrain_file.h"
#include "dtrain_parse.h"
#include "dtrain_clock.h"

/* One gathering: the API, where to announce the stage, the GPU being read. */
struct nvml_ctx {
    struct dtrain_nvml api;
    struct dtrain_stage *stage;
    struct health_nvml_facts *out;
    nvmlDevice_t handles[HEALTH_MAX_GPUS];
};

void health_nvml_library(const char *configured, char *out, size_t outlen)
{
    dtrain_snprintf(out, outlen, "%s", dtrain_nvml_library(configured));
}

/* Judge one call's return code: 1 when it answered.  "Not supported", a
 * function the driver lacks and "no permission" (some queries need root,
 * and --check may run as a user) say nothing about the GPU's health: 0,
 * nothing recorded.  A lost GPU and unexpected errors are recorded on the
 * GPU. */
static int nvml_answered(struct nvml_ctx *c, struct health_nvml_gpu *gpu, const char *fn, nvmlReturn_t rc)
{
    if (rc == NVML_SUCCESS)
        return 1;
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND || rc == NVML_ERROR_NO_PERMISSION)
        return 0;
    if (rc == NVML_ERROR_GPU_IS_LOST)
        gpu->lost = 1;
    if (!gpu->error[0])
        dtrain_snprintf(gpu->error, sizeof(gpu->error), "%s: %s (NVML error %d)", fn,
                        dtrain_nvml_error_string(&c->api, rc), rc);
    return 0;
}

/* Call an optional per-GPU NVML function after announcing it as the stage.
 * Evaluates to 1 when the function exists and answered. */
#define GPU_CALL(c, g, gpu, fn, ...)                                                            \
    ((c)->api.fn != NULL &&                                                                     \
     (dtrain_stage_set((c)->stage, "%s on GPU %d (%s)", #fn, (g), (gpu)->busid),              \
      nvml_answered((c), (gpu), #fn, (c)->api.fn(__VA_ARGS__))))

static void read_ecc(struct nvml_ctx *c, int g, const struct health_nvml_request *req)
{
    struct health_nvml_gpu *gpu = &c->out->gpus[g];
    nvmlDevice_t dev = c->handles[g];
    int counter = req->ecc_aggregate ? NVML_AGGREGATE_ECC : NVML_VOLATILE_ECC;
    gpu->ecc_known =
        GPU_CALL(c, g, gpu, nvmlDeviceGetTotalEccErrors, dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter,
                 &gpu->ecc_uncorrected) &&
        GPU_CALL(c, g, gpu, nvmlDeviceGetTotalEccErrors, dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, counter,
                 &gpu->ecc_corrected);
}

static void read_retired(struct nvml_ctx *c, int g)
{
    struct health_nvml_gpu *gpu = &c->out->gpus[g];
    nvmlDevice_t dev = c->handles[g];
    /* Ampere and later remap rows; older GPUs retire pages. */
    gpu->remap_known = GPU_CALL(c, g, gpu, nvmlDeviceGetRemappedRows, dev, &gpu->remap_corrected,
                                &gpu->remap_uncorrected, &gpu->remap_pending, &gpu->remap_failed);
    if (gpu->remap_known || !c->api.nvmlDeviceGetRetiredPages)
        return;
    static const int causes[2] = {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                                  NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR};
    unsigned int counts[2];
    for (int i = 0; i < 2; i++) {
        /* A buffer of 0 entries asks for the count only: NVML answers
         * success (none) or INSUFFICIENT_SIZE with the count. */
        unsigned long long addresses[1];
        counts[i] = 0;
        dtrain_stage_set(c->stage, "nvmlDeviceGetRetiredPages on GPU %d (%s)", g, gpu->busid);
        nvmlReturn_t rc = c->api.nvmlDeviceGetRetiredPages(dev, causes[i], &counts[i], addresses);
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE && !nvml_answered(c, gpu, "nvmlDeviceGetRetiredPages", rc))
            return;
    }
    int pending = 0;
    if (!GPU_CALL(c, g, gpu, nvmlDeviceGetRetiredPagesPendingStatus, dev, &pending))
        return;
    gpu->retired_known = 1;
    gpu->retired_sbe = counts[0];
    gpu->retired_dbe = counts[1];
    gpu->retired_pending = pending == NVML_FEATURE_ENABLED;
}

static void read_memory(struct nvml_ctx *c, int g)
{
    struct health_nvml_gpu *gpu = &c->out->gpus[g];
    nvmlMemory_t mem;
    if (GPU_CALL(c, g, gpu, nvmlDeviceGetMemoryInfo, c->handles[g], &mem)) {
        gpu->memory_known = 1;
        gpu->memory_total = mem.total;
        gpu->memory_used = mem.used;
    }
}

static void process_name(unsigned pid, char *out, size_t outlen)
{
    char path[64];
    out[0] = '\0';
    dtrain_snprintf(path, sizeof(path), "/proc/%u/comm", pid);
    /* Never a blocking open: a FIFO or device here (a fake or damaged
     * tree) is skipped, not waited on until the probe's bound. */
    char why[128];
    int fd = dtrain_open_regular(path, O_RDONLY, "process name", NULL, why, sizeof why);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, outlen - 1);
    close(fd);
    if (n <= 0) {
        out[0] = '\0';
        return;
    }
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

static void read_processes(struct nvml_ctx *c, int g)
{
    struct health_nvml_gpu *gpu = &c->out->gpus[g];
    nvmlProcessInfo_t infos[256];
    unsigned int n = sizeof(infos) / sizeof(infos[0]);
    if (!c->api.nvmlDeviceGetComputeRunningProcesses_v3)
        return;
    dtrain_stage_set(c->stage, "nvmlDeviceGetComputeRunningProcesses_v3 on GPU %d (%s)", g, gpu->busid);
    nvmlReturn_t rc = c->api.nvmlDeviceGetComputeRunningProcesses_v3(c->handles[g], &n, infos);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        /* More than 256: n is the count needed, none listed. */
        gpu->procs_known = 1;
        gpu->nprocs = n;
        return;
    }
    if (!nvml_answered(c, gpu, "nvmlDeviceGetComputeRunningProcesses_v3", rc))
        return;
    gpu->procs_known = 1;
    gpu->nprocs = n;
    for (unsigned int i = 0; i < n && i < HEALTH_MAX_PROCS; i++) {
        gpu->procs[i].pid = infos[i].pid;
        gpu->procs[i].used_bytes = infos[i].usedGpuMemory;
        process_name(infos[i].pid, gpu->procs[i].name, sizeof(gpu->procs[i].name));
    }
}

static void read_nvlinks(struct nvml_ctx *c, int g)
{
    struct health_nvml_gpu *gpu = &c->out->gpus[g];
    nvmlDevice_t dev = c->handles[g];
    if (!c->api.nvmlDeviceGetNvLinkState)
        return;
    for (unsigned int link = 0; link < HEALTH_MAX_NVLINKS; link++) {
        int state = 0;
        dtrain_stage_set(c->stage, "nvmlDeviceGetNvLinkState on GPU %d (%s) link %u", g, gpu->busid, link);
        nvmlReturn_t rc = c->api.nvmlDeviceGetNvLinkState(dev, link, &state);
        if (rc != NVML_SUCCESS) {
            /* Links are numbered from 0: the first one NVML refuses
             * (invalid argument, not supported) ends the list. */
            if (rc == NVML_ERROR_GPU_IS_LOST)
                nvml_answered(c, gpu, "nvmlDeviceGetNvLinkState", rc);
            break;
        }
        gpu->nlinks = (int)link + 1;
        gpu->link_active[link] = state == NVML_FEATURE_ENABLED;
        if (!c->api.nvmlDeviceGetNvLinkErrorCounter)
            continue;
        unsigned long long flit = 0, data = 0;
        dtrain_stage_set(c->stage, "nvmlDeviceGetNvLinkErrorCounter on GPU %d (%s) link %u", g, gpu->busid, link);
        if (c->api.nvmlDeviceGetNvLinkErrorCounter(dev, link, NVML_NVLINK_ERROR_DL_REPLAY, &gpu->link_replay[link]) ==
                NVML_SUCCESS &&
            c->api.nvmlDeviceGetNvLinkErrorCounter(dev, link, NVML_NVLINK_ERROR_DL_RECOVERY,
                                                   &gpu->link_recovery[link]) == NVML_SUCCESS &&
            c->api.nvmlDeviceGetNvLinkErrorCounter(dev, link, NVML_NVLINK_ERROR_DL_CRC_FLIT, &flit) == NVML_SUCCESS &&
            c->api.nvmlDeviceGetNvLinkErrorCounter(dev, link, NVML_NVLINK_ERROR_DL_CRC_DATA, &data) == NVML_SUCCESS) {
            gpu->link_crc[link] = flit + data;
            gpu->link_errors_known = 1;
        }
    }
}

/* Whether the GPU is on a multi-node NVLink fabric (GB200 NVL and later):
 * NVML answers its fabric info with a state other than NOT_SUPPORTED, the
 * rule libdtrain-topo reads a node's domain by (topo_nvml.c).  A driver
 * before 550 has no such call: no fabric. */
static void read_fabric(struct nvml_ctx *c, int g)
{
    struct health_nvml_gpu *gpu = &c->out->gpus[g];
    nvmlGpuFabricInfo_v2_t f;
    memset(&f, 0, sizeof(f));
    f.version = nvmlGpuFabricInfo_v2;
    if (GPU_CALL(c, g, gpu, nvmlDeviceGetGpuFabricInfoV, c->handles[g], &f))
        gpu->fabric = f.state != NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
}

/* Listen for XID events on every GPU for wait_ms (0: only those pending).
 * NVML reports the XIDs raised while the set is registered; see
 * doc/health.md for what that means for a prolog. */
static void read_xids(struct nvml_ctx *c, int wait_ms)
{
    struct dtrain_nvml *api = &c->api;
    nvmlEventSet_t set = NULL;
    if (!api->nvmlEventSetCreate || !api->nvmlDeviceRegisterEvents || !api->nvmlEventSetWait_v2)
        return;
    dtrain_stage_set(c->stage, "nvmlEventSetCreate");
    if (api->nvmlEventSetCreate(&set) != NVML_SUCCESS)
        return;
    int registered = 0;
    for (int g = 0; g < c->out->ngpus; g++) {
        struct health_nvml_gpu *gpu = &c->out->gpus[g];
        if (GPU_CALL(c, g, gpu, nvmlDeviceRegisterEvents, c->handles[g], nvmlEventTypeXidCriticalError, set)) {
            gpu->xid_known = 1;
            registered = 1;
        }
    }
    long long deadline = dtrain_clock_ms() + wait_ms;
    for (int events = 0; registered && events < 4096; events++) {
        nvmlEventData_t data;
        long long left = deadline - dtrain_clock_ms();
        memset(&data, 0, sizeof(data));
        dtrain_stage_set(c->stage, "nvmlEventSetWait_v2 (%lld ms)", left > 0 ? left : 0);
        if (api->nvmlEventSetWait_v2(set, &data, left > 0 ? (unsigned int)left : 0) != NVML_SUCCESS)
            break; /* NVML_ERROR_TIMEOUT: nothing more */
        if (!(data.eventType & nvmlEventTypeXidCriticalError))
            continue;
        for (int g = 0; g < c->out->ngpus; g++) {
            struct health_nvml_gpu *gpu = &c->out->gpus[g];
            if (c->handles[g] != data.device)
                continue;
            if (gpu->nxids < HEALTH_MAX_XIDS)
                gpu->xids[gpu->nxids] = data.eventData;
            gpu->nxids++;
        }
    }
    if (api->nvmlEventSetFree) {
        dtrain_stage_set(c->stage, "nvmlEventSetFree");
        api->nvmlEventSetFree(set);
    }
}

void health_nvml_gather(const struct health_nvml_request *req, struct health_nvml_facts *out,
                        struct dtrain_stage *stage)
{
    struct nvml_ctx c;
    unsigned int count = 0;
    nvmlReturn_t rc;

    memset(out, 0, sizeof(*out));
    memset(&c, 0, sizeof(c));
    c.stage = stage;
    c.out = out;
    dtrain_snprintf(out->library, sizeof(out->library), "%s", req->library);
    dtrain_stage_set(stage, "dlopen(%s)", req->library);
    if (dtrain_nvml_open(&c.api, req->library, out->error, sizeof(out->error)) != DTRAIN_NVML_OK)
        return;
    dtrain_stage_set(stage, "nvmlInit_v2");
    rc = c.api.nvmlInit_v2();
    if (rc != NVML_SUCCESS) {
        dtrain_snprintf(out->error, sizeof(out->error), "nvmlInit_v2 failed: %s (NVML error %d; is the NVIDIA driver loaded?)",
                        dtrain_nvml_error_string(&c.api, rc), rc);
        goto close;
    }
    dtrain_stage_set(stage, "nvmlDeviceGetCount_v2");
    rc = c.api.nvmlDeviceGetCount_v2(&count);
    if (rc != NVML_SUCCESS || count > HEALTH_MAX_GPUS) {
        if (rc != NVML_SUCCESS)
            dtrain_snprintf(out->error, sizeof(out->error), "nvmlDeviceGetCount_v2 failed: %s (NVML error %d)",
                            dtrain_nvml_error_string(&c.api, rc), rc);
        else
            dtrain_snprintf(out->error, sizeof(out->error), "NVML reports %u GPUs, more than the %d supported",
                            count, HEALTH_MAX_GPUS);
        goto shutdown;
    }
    out->ngpus = (int)count;
    for (int g = 0; g < out->ngpus; g++) {
        struct health_nvml_gpu *gpu = &out->gpus[g];
        nvmlPciInfo_t pci;
        dtrain_snprintf(gpu->busid, sizeof(gpu->busid), "index %d", g);
        if (!GPU_CALL(&c, g, gpu, nvmlDeviceGetHandleByIndex_v2, (unsigned int)g, &c.handles[g]))
            continue;
        memset(&pci, 0, sizeof(pci));
        if (GPU_CALL(&c, g, gpu, nvmlDeviceGetPciInfo_v3, c.handles[g], &pci)) {
            pci.busId[sizeof(pci.busId) - 1] = '\0';
            if (health_busid_normalise(pci.busId, gpu->busid, sizeof(gpu->busid)) != 0)
                dtrain_snprintf(gpu->busid, sizeof(gpu->busid), "%04x:%02x:%02x.0", pci.domain & 0xffffu,
                                pci.bus & 0xffu, pci.device & 0x1fu);
        }
        char name[96] = "";
        if (GPU_CALL(&c, g, gpu, nvmlDeviceGetName, c.handles[g], name, (unsigned int)sizeof(name))) {
            name[sizeof(name) - 1] = '\0';
            dtrain_snprintf(gpu->name, sizeof(gpu->name), "%s", name);
        }
        if (req->what & HEALTH_NVML_ECC)
            read_ecc(&c, g, req);
        if (req->what & HEALTH_NVML_RETIRED)
            read_retired(&c, g);
        if (req->what & HEALTH_NVML_MEMORY)
            read_memory(&c, g);
        if (req->what & HEALTH_NVML_PROCESSES)
            read_processes(&c, g);
        if (req->what & HEALTH_NVML_NVLINK)
            read_nvlinks(&c, g);
        if (req->what & HEALTH_NVML_FABRIC)
            read_fabric(&c, g);
    }
    if (req->what & HEALTH_NVML_XID)
        read_xids(&c, req->xid_wait_ms);
    out->ok = 1;
shutdown:
    dtrain_stage_set(stage, "nvmlShutdown");
    c.api.nvmlShutdown();
close:
    dtrain_stage_set(stage, "dlclose");
    dtrain_nvml_close(&c.api);
}

static void nvml_probe_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    health_nvml_gather(arg, out, stage);
}

static void nvml_failed(void *out, const void *ctx, const char *why)
{
    struct health_nvml_facts *facts = out;
    const struct health_nvml_request *req = ctx;
    facts->ok = 0;
    facts->probe_failed = 1;
    dtrain_snprintf(facts->library, sizeof(facts->library), "%s", req->library);
    dtrain_snprintf(facts->error, sizeof(facts->error), "NVML %s", why);
}

void health_nvml_start(const struct health_nvml_request *req, int timeout_ms, struct health_nvml_facts *out,
                       struct dtrain_probe *probe)
{
    dtrain_probe_start(probe, nvml_probe_child, req, out, sizeof(*out), timeout_ms, nvml_failed, req);
}

void health_nvml_probe(const struct health_nvml_request *req, int timeout_ms, struct health_nvml_facts *out)
{
    struct dtrain_probe probe;
    health_nvml_start(req, timeout_ms, out, &probe);
    dtrain_probe_wait(&probe);
}
