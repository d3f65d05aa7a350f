/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: NVLink read directly from NVML on live nodes.
 *
 * NVML is opened at run time through common/dtrain_nvml.h, so dtrain
 * neither links against nor requires the NVIDIA driver.  DTRAIN_NVML_LIBRARY
 * (from the process environment, i.e. slurmd's for the plugin, never the
 * job's) may name another library: the tests use a fake NVML that stands in
 * for the hardware.
 *
 * Per GPU, every active link's remote end is looked up: another GPU of the
 * model is a direct link; any other NVIDIA PCI device is an NVSwitch port;
 * anything else is a CPU (POWER NPU).  Bandwidth per link and direction
 * comes from the link's NVLink version (table below), and switched pairs get
 * min(S(a), S(b)) as in topo_hwloc.c.
 *
 * Per GPU also its fabric membership (nvmlDeviceGetGpuFabricInfoV, drivers
 * from 550 on): the cluster UUID and clique id of a multi-node NVLink
 * domain.  The inter-node links of such a domain go through NVSwitch trays
 * outside the node; the model only records the membership, and the planner
 * and the launcher keep TP groups that leave a node inside one domain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_nvml.h"
#include "dtrain_parse.h"
#include "topo_model.h"

long long topo_nvlink_mbps_per_link(unsigned version)
{
    /* NVML reports either the NVLink major version (older drivers) or
     * nvmlNvlinkVersion_t (1=1.0, 2=2.0, 3=2.2, 4=3.0, 5=3.1, 6=4.0, 7=5.0).
     * Per link and direction: NVLink 1.0 (P100) 20 GB/s; 2.x (V100), 3.x
     * (A100) and 4.0 (H100) 25 GB/s; 5.0 (B200) 50 GB/s.  Both readings
     * give the same answer for 1 and for 2..6 (25 GB/s either way). */
    if (version == 1)
        return 20000;
    if (version >= 7)
        return 50000;
    return 25000; /* 2..6, and 0 (unknown): the common case */
}

static int find_gpu(const struct dtrain_topo *topo, const nvmlPciInfo_t *pci)
{
    char busid[DTRAIN_TOPO_BUSID_LEN];
    topo_format_busid(busid, sizeof(busid), pci->domain, pci->bus, pci->device, 0);
    return dtrain_topo_find_busid(topo, busid);
}

/* The GPU's fabric membership, when this NVML reports one. */
static int read_fabric(const struct dtrain_nvml *api, nvmlDevice_t dev, struct dtrain_gpu_info *info)
{
    nvmlGpuFabricInfo_v2_t f;
    info->fabric_state = 0;
    info->fabric_clique = 0;
    info->fabric_cluster[0] = '\0';
    if (!api->nvmlDeviceGetGpuFabricInfoV)
        return 0; /* a driver before 550: no multi-node NVLink */
    memset(&f, 0, sizeof f);
    f.version = nvmlGpuFabricInfo_v2;
    if (api->nvmlDeviceGetGpuFabricInfoV(dev, &f) != NVML_SUCCESS || f.state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
        return 0;
    /* A registration that finished with an error is no domain to place in. */
    info->fabric_state = f.state == NVML_GPU_FABRIC_STATE_COMPLETED && f.status != NVML_SUCCESS
                             ? 4 /* registration failed */
                             : f.state > NVML_GPU_FABRIC_STATE_COMPLETED ? NVML_GPU_FABRIC_STATE_NOT_STARTED
                                                                         : f.state;
    info->fabric_clique = f.cliqueId;
    const unsigned char *u = f.clusterUuid;
    snprintf(info->fabric_cluster, sizeof info->fabric_cluster,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4],
             u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    return 1;
}

/* 1 when MIG mode is on (NOT_SUPPORTED before Ampere: off). */
static int read_mig(const struct dtrain_nvml *api, nvmlDevice_t dev)
{
    unsigned int mig = 0, pending = 0;
    return api->nvmlDeviceGetMigMode && api->nvmlDeviceGetMigMode(dev, &mig, &pending) == NVML_SUCCESS &&
           mig == NVML_FEATURE_ENABLED;
}

/* MIG instances per GPU of the model, as NVML lists them. */
#define TOPO_MIG_MAX 8 /* A100/H100/B200: at most 7 GPU instances */
struct topo_migs {
    int count[DTRAIN_TOPO_MAX_GPUS];
    char uuid[DTRAIN_TOPO_MAX_GPUS][TOPO_MIG_MAX][64];
};

/* The MIG instances of a GPU in MIG mode: their "MIG-<uuid>" names. */
static void read_migs(const struct dtrain_nvml *api, nvmlDevice_t dev, int g, struct topo_migs *m)
{
    unsigned int max = 0;
    m->count[g] = 0;
    if (!api->nvmlDeviceGetMaxMigDeviceCount || !api->nvmlDeviceGetMigDeviceHandleByIndex || !api->nvmlDeviceGetUUID ||
        api->nvmlDeviceGetMaxMigDeviceCount(dev, &max) != NVML_SUCCESS)
        return;
    for (unsigned int i = 0; i < max && m->count[g] < TOPO_MIG_MAX; i++) {
        nvmlDevice_t mig;
        char text[96];
        if (api->nvmlDeviceGetMigDeviceHandleByIndex(dev, i, &mig) != NVML_SUCCESS ||
            api->nvmlDeviceGetUUID(mig, text, sizeof text) != NVML_SUCCESS)
            continue; /* an empty slot (NOT_FOUND) */
        text[sizeof text - 1] = '\0';
        if (strncmp(text, "MIG-", 4) != 0 || strlen(text) >= sizeof m->uuid[g][0])
            continue;
        snprintf(m->uuid[g][m->count[g]++], sizeof m->uuid[g][0], "%s", text);
    }
}

/* Each GPU in MIG mode with instances becomes one model entry per
 * instance (uuid "MIG-...", partition = its place, partitions = their
 * count).  MIG instances have no NVLink (no peer access between them,
 * even on one GPU): their links are 0, so TP groups over them need
 * --dtrain-allow-pcie like any PCIe pair. */
static int expand_migs(struct dtrain_topo *topo, const struct topo_migs *m, char *err, size_t errlen)
{
    int n = topo->ngpus, total = 0, expand = 0;
    int from[DTRAIN_TOPO_MAX_GPUS], slot[DTRAIN_TOPO_MAX_GPUS];
    for (int g = 0; g < n; g++) {
        int k = topo->gpus[g].mig && m->count[g] > 0 ? m->count[g] : 1;
        expand |= k > 1 || (topo->gpus[g].mig && m->count[g] > 0);
        for (int i = 0; i < k; i++) {
            if (total == DTRAIN_TOPO_MAX_GPUS) {
                dtrain_snprintf(err, errlen, "more than %d GPUs and MIG instances in one node", DTRAIN_TOPO_MAX_GPUS);
                return -1;
            }
            from[total] = g;
            slot[total++] = topo->gpus[g].mig && m->count[g] > 0 ? i : -1;
        }
    }
    if (!expand)
        return 0;
    struct dtrain_topo *old = malloc(sizeof *old);
    if (!old) {
        dtrain_snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(old, topo, sizeof *old);
    for (int i = 0; i < total; i++) {
        struct dtrain_gpu_info *info = &topo->gpus[i];
        *info = old->gpus[from[i]];
        info->index = i;
        if (slot[i] >= 0) {
            snprintf(info->uuid, sizeof info->uuid, "%s", m->uuid[from[i]][slot[i]]);
            info->partition = slot[i];
            info->partitions = m->count[from[i]];
        }
        for (int j = 0; j < total; j++) {
            topo->bw_mbps[i][j] = slot[i] >= 0 || slot[j] >= 0 ? 0 : old->bw_mbps[from[i]][from[j]];
            topo->pcie[i][j] = from[i] == from[j] ? TOPO_PCIE_SAME_SWITCH : old->pcie[from[i]][from[j]];
        }
    }
    topo->ngpus = total; /* vendor_index stays the physical GPU's */
    free(old);
    return 0;
}

/* Open and initialise NVML: 1 ready, 0 absent (not an error), -1 with err. */
static int nvml_start(struct dtrain_nvml *api, const char *libpath, int need_links, char *err, size_t errlen)
{
    char why[256]; /* the loader's words; this source says its own */
    libpath = dtrain_nvml_library(libpath);
    int opened = dtrain_nvml_open(api, libpath, why, sizeof(why));
    if (opened == DTRAIN_NVML_ABSENT)
        return 0; /* no NVIDIA driver: not an error */
    if (opened != DTRAIN_NVML_OK ||
        (need_links && (!api->nvmlDeviceGetNvLinkState || !api->nvmlDeviceGetNvLinkRemotePciInfo_v2 ||
                        !api->nvmlDeviceGetName || !api->nvmlDeviceGetUUID))) {
        dtrain_nvml_close(api);
        dtrain_snprintf(err, errlen, "%s lacks NVML functions dtrain needs (driver too old?)", libpath);
        return -1;
    }
    if (api->nvmlInit_v2() != NVML_SUCCESS) {
        /* Driver library present but no usable GPU driver: like no NVML. */
        dtrain_nvml_close(api);
        return 0;
    }
    return 1;
}

int topo_nvml_apply_fabric(struct dtrain_topo *topo, const char *libpath, char *err, size_t errlen)
{
    struct dtrain_nvml api;
    unsigned int count = 0;
    int found = 0;
    struct topo_migs *migs = calloc(1, sizeof *migs);
    if (!migs) {
        dtrain_snprintf(err, errlen, "out of memory");
        return -1;
    }
    int started = nvml_start(&api, libpath, 0, err, errlen);
    if (started <= 0) {
        free(migs);
        return started;
    }
    if (api.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS)
        count = 0;
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t dev;
        nvmlPciInfo_t pci;
        if (api.nvmlDeviceGetHandleByIndex_v2(i, &dev) != NVML_SUCCESS ||
            api.nvmlDeviceGetPciInfo_v3(dev, &pci) != NVML_SUCCESS)
            continue;
        int g = find_gpu(topo, &pci);
        if (g < 0)
            continue;
        found |= read_fabric(&api, dev, &topo->gpus[g]);
        topo->gpus[g].mig = read_mig(&api, dev);
        if (topo->gpus[g].mig)
            read_migs(&api, dev, g, migs);
    }
    api.nvmlShutdown();
    dtrain_nvml_close(&api);
    int rc = expand_migs(topo, migs, err, errlen);
    free(migs);
    return rc < 0 ? -1 : found;
}

int topo_nvml_apply(struct dtrain_topo *topo, const char *libpath, char *err, size_t errlen)
{
    struct dtrain_nvml api;
    unsigned int count = 0;
    int found = 0;
    long long direct[DTRAIN_TOPO_MAX_GPUS][DTRAIN_TOPO_MAX_GPUS];
    long long to_switch[DTRAIN_TOPO_MAX_GPUS] = {0};
    int to_cpu = 0;
    struct topo_migs *migs = calloc(1, sizeof *migs);
    if (!migs) {
        dtrain_snprintf(err, errlen, "out of memory");
        return -1;
    }

    int started = nvml_start(&api, libpath, 1, err, errlen);
    if (started <= 0) {
        free(migs);
        return started;
    }
    memset(direct, 0, sizeof(direct));
    if (api.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS)
        count = 0;
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t dev;
        nvmlPciInfo_t pci;
        if (api.nvmlDeviceGetHandleByIndex_v2(i, &dev) != NVML_SUCCESS ||
            api.nvmlDeviceGetPciInfo_v3(dev, &pci) != NVML_SUCCESS)
            continue;
        int g = find_gpu(topo, &pci);
        if (g < 0)
            continue; /* hidden from hwloc (cgroup): not ours to place */
        topo->nvml_seen = 1;
        struct dtrain_gpu_info *info = &topo->gpus[g];
        char text[96];
        if (!info->model[0] && api.nvmlDeviceGetName(dev, text, sizeof(text)) == NVML_SUCCESS) {
            text[sizeof(text) - 1] = '\0';
            snprintf(info->model, sizeof(info->model), "%s", text);
        }
        if (!info->uuid[0] && api.nvmlDeviceGetUUID(dev, text, sizeof(text)) == NVML_SUCCESS) {
            size_t len = strnlen(text, sizeof(info->uuid) - 1);
            memcpy(info->uuid, text, len);
            info->uuid[len] = '\0';
        }
        read_fabric(&api, dev, info);
        info->mig = read_mig(&api, dev);
        if (info->mig)
            read_migs(&api, dev, g, migs);
        for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
            int active = 0;
            nvmlPciInfo_t remote;
            unsigned int version = 0;
            if (api.nvmlDeviceGetNvLinkState(dev, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED)
                continue;
            if (api.nvmlDeviceGetNvLinkRemotePciInfo_v2(dev, link, &remote) != NVML_SUCCESS)
                continue;
            if (api.nvmlDeviceGetNvLinkVersion && api.nvmlDeviceGetNvLinkVersion(dev, link, &version) != NVML_SUCCESS)
                version = 0;
            long long mbps = topo_nvlink_mbps_per_link(version);
            int peer = find_gpu(topo, &remote);
            if (peer >= 0 && peer != g)
                direct[g][peer] += mbps;
            else if (peer < 0 && (remote.pciDeviceId & 0xffffu) == 0x10de)
                to_switch[g] += mbps;
            else if (peer < 0)
                to_cpu = 1;
        }
    }
    api.nvmlShutdown();
    dtrain_nvml_close(&api);

    int n = topo->ngpus;
    for (int a = 0; a < n && !found; a++)
        for (int b = 0; b < n; b++)
            if (a != b && (direct[a][b] || (to_switch[a] && to_switch[b])))
                found = 1;
    if (found) {
        memset(topo->bw_mbps, 0, sizeof(topo->bw_mbps));
        topo->via_switch = 0;
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                /* Each end counted its own links; they agree on healthy links. */
                long long d = direct[a][b] < direct[b][a] ? direct[a][b] : direct[b][a];
                if (!d)
                    d = direct[a][b] ? direct[a][b] : direct[b][a];
                long long sw = 0;
                if (to_switch[a] && to_switch[b]) {
                    sw = to_switch[a] < to_switch[b] ? to_switch[a] : to_switch[b];
                    topo->via_switch = 1;
                }
                topo_model_set_link(topo, a, b, d + sw);
            }
        topo->nvlink_to_cpu = to_cpu;
        topo->source = DTRAIN_LINKS_NVML;
    }
    /* After the links: MIG instances get none. */
    int rc = expand_migs(topo, migs, err, errlen);
    free(migs);
    return rc < 0 ? -1 : found;
}
