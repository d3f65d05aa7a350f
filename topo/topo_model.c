/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: the node model's accessors, islands, subset and summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"
#include "topo_model.h"

struct dtrain_topo *topo_model_new(void)
{
    return calloc(1, sizeof(struct dtrain_topo));
}

void dtrain_topo_free(dtrain_topo *topo)
{
    if (!topo)
        return;
    free(topo->pus);
    free(topo);
}

int topo_model_alloc_pus(struct dtrain_topo *topo, int n)
{
    int *block = malloc(sizeof(int) * 3 * (size_t)n);
    if (!block)
        return -1;
    free(topo->pus);
    topo->pus = block;
    topo->pu_core = block + n;
    topo->pu_numa = block + 2 * (size_t)n;
    topo->npus = n;
    return 0;
}

int topo_model_copy_pus(struct dtrain_topo *dst, const struct dtrain_topo *src)
{
    if (src->npus <= 0)
        return 0;
    if (topo_model_alloc_pus(dst, src->npus) != 0)
        return -1;
    memcpy(dst->pus, src->pus, sizeof(int) * (size_t)src->npus);
    memcpy(dst->pu_core, src->pu_core, sizeof(int) * (size_t)src->npus);
    memcpy(dst->pu_numa, src->pu_numa, sizeof(int) * (size_t)src->npus);
    return 0;
}

void topo_format_busid(char *buf, size_t len, unsigned domain, unsigned bus,
                       unsigned dev, unsigned func)
{
    snprintf(buf, len, "%04x:%02x:%02x.%x", domain & 0xffffu, bus & 0xffu, dev & 0x1fu, func & 0x7u);
}

void topo_model_set_link(struct dtrain_topo *topo, int a, int b, long long mbps)
{
    if (a == b || mbps < 0)
        return;
    topo->bw_mbps[a][b] = mbps;
    topo->bw_mbps[b][a] = mbps;
}

static int cmp_gpu_busid(const void *pa, const void *pb)
{
    const struct dtrain_gpu_info *a = pa, *b = pb;
    int c = strcmp(a->busid, b->busid);
    return c ? c : a->partition - b->partition;
}

void topo_model_sort_gpus(struct dtrain_topo *topo)
{
    qsort(topo->gpus, (size_t)topo->ngpus, sizeof(topo->gpus[0]), cmp_gpu_busid);
    for (int i = 0; i < topo->ngpus; i++)
        topo->gpus[i].index = i;
    topo_model_vendor_index(topo);
}

void topo_model_vendor_index(struct dtrain_topo *topo)
{
    for (int i = 0; i < topo->ngpus; i++) {
        topo->gpus[i].vendor_index = 0;
        for (int j = 0; j < i; j++)
            topo->gpus[i].vendor_index += topo->gpus[j].vendor_id == topo->gpus[i].vendor_id;
    }
}

int dtrain_topo_vendor(const dtrain_topo *topo)
{
    int vendor = 0;
    for (int i = 0; topo && i < topo->ngpus; i++) {
        if (vendor && (unsigned)vendor != topo->gpus[i].vendor_id)
            return -1;
        vendor = (int)topo->gpus[i].vendor_id;
    }
    return vendor;
}

unsigned dtrain_vendor_from_name(const char *name)
{
    if (name && strcmp(name, "nvidia") == 0)
        return DTRAIN_VENDOR_NVIDIA;
    if (name && strcmp(name, "amd") == 0)
        return DTRAIN_VENDOR_AMD;
    return 0;
}

enum dtrain_status dtrain_topo_vendor_subset(const dtrain_topo *topo, unsigned vendor, dtrain_topo **out, char *err,
                                             size_t errlen)
{
    int keep[DTRAIN_TOPO_MAX_GPUS], n = 0;
    for (int i = 0; topo && i < topo->ngpus; i++)
        if (topo->gpus[i].vendor_id == vendor)
            keep[n++] = i;
    if (n == 0) {
        dtrain_snprintf(err, errlen, "this node has no %s GPU (%d GPUs of another vendor)",
                        vendor == DTRAIN_VENDOR_AMD ? "AMD" : "NVIDIA", topo ? topo->ngpus : 0);
        return DTRAIN_ERR_REFUSED;
    }
    return dtrain_topo_subset(topo, keep, n, out, err, errlen);
}

/* Union-find root with path halving; the arrays are tiny. */
static int uf_find(int *parent, int x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static void compute_islands(struct dtrain_topo *topo)
{
    int parent[DTRAIN_TOPO_MAX_GPUS];
    int n = topo->ngpus;

    for (int i = 0; i < n; i++)
        parent[i] = i;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (topo->bw_mbps[i][j] > 0) {
                int ri = uf_find(parent, i), rj = uf_find(parent, j);
                if (ri != rj)
                    parent[ri > rj ? ri : rj] = ri < rj ? ri : rj;
            }
    /* Number islands by their lowest GPU: scanning GPUs in order meets each
     * island first at its lowest member. */
    int island_of_root[DTRAIN_TOPO_MAX_GPUS];
    for (int i = 0; i < n; i++)
        island_of_root[i] = -1;
    topo->nislands = 0;
    memset(topo->island_size, 0, sizeof(topo->island_size));
    for (int i = 0; i < n; i++) {
        int r = uf_find(parent, i);
        if (island_of_root[r] < 0)
            island_of_root[r] = topo->nislands++;
        topo->island_of[i] = island_of_root[r];
        topo->island_size[topo->island_of[i]]++;
    }
}

static void make_summary(struct dtrain_topo *topo)
{
    const char *model = topo->ngpus ? topo->gpus[0].model : "";
    int same_model = 1;
    for (int i = 1; i < topo->ngpus; i++)
        if (strcmp(topo->gpus[i].model, model) != 0)
            same_model = 0;
    if (topo->ngpus == 0) {
        dtrain_snprintf(topo->summary, sizeof(topo->summary), "no GPUs, %d CPUs", topo->npus);
        return;
    }
    const char *links;
    switch (topo->source) {
    case DTRAIN_LINKS_HWLOC_NVLINK:
    case DTRAIN_LINKS_NVML:
        links = topo->via_switch ? "NVLink via NVSwitch" : "NVLink";
        break;
    case DTRAIN_LINKS_HWLOC_XGMI:
        links = "XGMI";
        break;
    case DTRAIN_LINKS_NONE:
        links = "no link information";
        break;
    default:
        links = "PCIe only";
        break;
    }
    char islands[64] = "";
    if (topo->source != DTRAIN_LINKS_PCIE_ONLY && topo->source != DTRAIN_LINKS_NONE && topo->nislands > 1)
        dtrain_snprintf(islands, sizeof(islands), ", %d islands (largest %d)", topo->nislands,
                        dtrain_topo_largest_island(topo));
    char domain[DTRAIN_TOPO_DOMAIN_LEN + 40] = "", key[DTRAIN_TOPO_DOMAIN_LEN], why[8];
    if (dtrain_topo_nvlink_domain(topo, key, sizeof key, why, sizeof why) == 1)
        dtrain_snprintf(domain, sizeof(domain), ", multi-node NVLink domain %s", key);
    /* Truncation of a very long model name only shortens the log line. */
    (void)dtrain_snprintf(topo->summary, sizeof(topo->summary), "%dx %s, %s%s%s", topo->ngpus,
                          same_model && model[0] ? model : "GPU", links, islands, domain);
}

int dtrain_topo_nvlink_domain(const dtrain_topo *topo, char *buf, size_t len, char *why, size_t whylen)
{
    static const char *const state_name[] = {"not supported", "not started", "in progress", "registered",
                                             "registration failed"};
    int reported = 0;
    if (buf && len)
        buf[0] = '\0';
    if (!topo)
        return 0;
    for (int i = 0; i < topo->ngpus; i++)
        if (topo->gpus[i].fabric_state > 0)
            reported = 1;
    if (!reported)
        return 0;
    const struct dtrain_gpu_info *g0 = &topo->gpus[0];
    for (int i = 0; i < topo->ngpus; i++) {
        const struct dtrain_gpu_info *g = &topo->gpus[i];
        if (g->fabric_state != 3) {
            int st = g->fabric_state >= 0 && g->fabric_state <= 4 ? g->fabric_state : 1;
            dtrain_snprintf(why, whylen,
                            "GPU %s has not joined its NVLink fabric (NVML fabric state: %s): wait for the "
                            "fabric manager (nvidia-imex / nvidia-fabricmanager) or drain the node",
                            g->busid, state_name[st]);
            return -1;
        }
        if (g->fabric_clique != g0->fabric_clique || strcmp(g->fabric_cluster, g0->fabric_cluster) != 0) {
            dtrain_snprintf(why, whylen,
                            "GPUs %s and %s are in different NVLink domains (%s/%u and %s/%u): the node's fabric "
                            "is misconfigured",
                            g0->busid, g->busid, g0->fabric_cluster, g0->fabric_clique, g->fabric_cluster,
                            g->fabric_clique);
            return -1;
        }
    }
    if (buf && len)
        (void)dtrain_snprintf(buf, len, "%s/%u", g0->fabric_cluster, g0->fabric_clique);
    return 1;
}

void topo_model_finish(struct dtrain_topo *topo)
{
    int n = topo->ngpus;

    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) {
                topo->bw_mbps[i][j] = 0;
                topo->bw[i][j] = 0;
                topo->kind[i][j] = DTRAIN_LINK_SELF;
                continue;
            }
            topo->bw[i][j] = (double)topo->bw_mbps[i][j] / 1000.0;
            /* AMD's fast links are Infinity Fabric (XGMI, or within one
             * partitioned device), NVIDIA's NVLink. */
            enum dtrain_link_kind fast = topo->gpus[i].vendor_id == DTRAIN_VENDOR_AMD ? DTRAIN_LINK_XGMI
                                                                                    : DTRAIN_LINK_NVLINK;
            topo->kind[i][j] = topo->bw_mbps[i][j] > 0 ? fast : DTRAIN_LINK_PCIE;
        }
    compute_islands(topo);
    make_summary(topo);
}

enum dtrain_status dtrain_topo_subset(const dtrain_topo *topo, const int *gpus, int ngpus,
                                      dtrain_topo **out, char *err, size_t errlen)
{
    int seen[DTRAIN_TOPO_MAX_GPUS] = {0};

    if (!topo || !out || (ngpus > 0 && !gpus) || ngpus < 0 || ngpus > topo->ngpus) {
        dtrain_snprintf(err, errlen, "invalid GPU subset (%d GPUs of %d)", ngpus, topo ? topo->ngpus : 0);
        return DTRAIN_ERR_INPUT;
    }
    for (int i = 0; i < ngpus; i++) {
        if (gpus[i] < 0 || gpus[i] >= topo->ngpus || seen[gpus[i]]) {
            dtrain_snprintf(err, errlen, "invalid GPU subset: index %d is out of range 0..%d or repeated",
                            gpus[i], topo->ngpus - 1);
            return DTRAIN_ERR_INPUT;
        }
        seen[gpus[i]] = 1;
    }
    struct dtrain_topo *sub = topo_model_new();
    if (!sub) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    if (topo_model_copy_pus(sub, topo) != 0) {
        free(sub);
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    sub->ngpus = ngpus;
    sub->source = topo->source;
    sub->nvlink_to_cpu = topo->nvlink_to_cpu;
    for (int i = 0; i < ngpus; i++) {
        sub->gpus[i] = topo->gpus[gpus[i]];
        sub->gpus[i].index = i;
        for (int j = 0; j < ngpus; j++) {
            sub->bw_mbps[i][j] = topo->bw_mbps[gpus[i]][gpus[j]];
            sub->pcie[i][j] = topo->pcie[gpus[i]][gpus[j]];
        }
    }
    sub->via_switch = topo->via_switch;
    topo_model_finish(sub);
    *out = sub;
    return DTRAIN_OK;
}

int dtrain_topo_gpu_count(const dtrain_topo *topo)
{
    return topo ? topo->ngpus : 0;
}

const struct dtrain_gpu_info *dtrain_topo_gpu(const dtrain_topo *topo, int gpu)
{
    if (!topo || gpu < 0 || gpu >= topo->ngpus)
        return NULL;
    return &topo->gpus[gpu];
}

int dtrain_topo_find_busid(const dtrain_topo *topo, const char *busid)
{
    if (!topo || !busid)
        return -1;
    for (int i = 0; i < topo->ngpus; i++)
        if (strcasecmp(topo->gpus[i].busid, busid) == 0)
            return i;
    /* Accept NVML's 8-digit domain ("00000000:07:00.0") too. */
    if (strlen(busid) == 16 && strncmp(busid, "0000", 4) == 0)
        return dtrain_topo_find_busid(topo, busid + 4);
    return -1;
}

static int valid_pair(const dtrain_topo *topo, int a, int b)
{
    return topo && a >= 0 && b >= 0 && a < topo->ngpus && b < topo->ngpus;
}

double dtrain_topo_bandwidth(const dtrain_topo *topo, int a, int b)
{
    return valid_pair(topo, a, b) ? topo->bw[a][b] : 0.0;
}

enum dtrain_link_kind dtrain_topo_link_kind(const dtrain_topo *topo, int a, int b)
{
    return valid_pair(topo, a, b) ? topo->kind[a][b] : DTRAIN_LINK_PCIE;
}

enum dtrain_link_source dtrain_topo_link_source(const dtrain_topo *topo)
{
    return topo ? topo->source : DTRAIN_LINKS_PCIE_ONLY;
}

const char *dtrain_link_kind_name(enum dtrain_link_kind kind)
{
    switch (kind) {
    case DTRAIN_LINK_SELF: return "self";
    case DTRAIN_LINK_PCIE: return "PCIe";
    case DTRAIN_LINK_NVLINK: return "NVLink";
    case DTRAIN_LINK_XGMI: return "XGMI";
    }
    return "unknown";
}

const char *dtrain_link_source_name(enum dtrain_link_source src)
{
    switch (src) {
    case DTRAIN_LINKS_PCIE_ONLY: return "PCIe only";
    case DTRAIN_LINKS_HWLOC_NVLINK: return "hwloc NVLinkBandwidth";
    case DTRAIN_LINKS_HWLOC_XGMI: return "hwloc XGMIBandwidth";
    case DTRAIN_LINKS_NVML: return "NVML";
    case DTRAIN_LINKS_NONE: return "no link information";
    }
    return "unknown";
}

int dtrain_topo_island_count(const dtrain_topo *topo)
{
    return topo ? topo->nislands : 0;
}

int dtrain_topo_island_of(const dtrain_topo *topo, int gpu)
{
    if (!topo || gpu < 0 || gpu >= topo->ngpus)
        return -1;
    return topo->island_of[gpu];
}

int dtrain_topo_island_size(const dtrain_topo *topo, int island)
{
    if (!topo || island < 0 || island >= topo->nislands)
        return 0;
    return topo->island_size[island];
}

int dtrain_topo_largest_island(const dtrain_topo *topo)
{
    int best = 0;
    if (!topo)
        return 0;
    for (int i = 0; i < topo->nislands; i++)
        if (topo->island_size[i] > best)
            best = topo->island_size[i];
    return best;
}

const char *dtrain_topo_summary(const dtrain_topo *topo)
{
    return topo ? topo->summary : "";
}
