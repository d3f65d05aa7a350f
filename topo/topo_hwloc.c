/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: discovery with hwloc, live or from a saved XML file.
 *
 * GPUs are PCI devices of class 0300/0302/0380 (and 1200, processing
 * accelerator, as MI300X reports) from NVIDIA (0x10de) or AMD (0x1002);
 * their OS devices (nvmlN, cudaN, rsmiN, openclNdM; typed GPU or
 * CoProc depending on the hwloc version that saved the file) only lend them
 * names, a model and a UUID.
 *
 * Links come from hwloc's "NVLinkBandwidth" distances (MB/s), else from
 * "XGMIBandwidth", else there are none (PCIe only).  The matrix may hold OS
 * devices or PCI devices for GPUs, NVSwitch PCI devices and CPU packages
 * (heterogeneous matrix).  The rule, the same as hwloc_distances_transform()
 * with MERGE_SWITCH_PORTS then TRANSITIVE_CLOSURE:
 *   bw(a,b) = direct(a,b) + min(S(a), S(b)),
 * where S(g) is the sum of g's bandwidth to every switch port (0 when g
 * has none, and then nothing goes through switches).  Links to CPUs are
 * noted but never join GPUs into an island. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "dtrain_file.h"
#include "dtrain_parse.h"
#include "topo_model.h"

/* Larger per-pair values are treated as garbage (100 TB/s). */
#define TOPO_MAX_LINK_MBPS 100000000ULL

struct gpu_obj {
    struct dtrain_gpu_info info;
    hwloc_obj_t pci;
    hwloc_obj_t part; /* a partition's own rsmiN OS device; NULL for a whole GPU */
};

/* Links between partitions of one device (MI300 TPX/CPX: XCDs of one
 * package over its Infinity Fabric, far faster than any XGMI link between
 * packages, 64 GB/s per link and direction on MI300X): hwloc's own figure
 * for a GPU's local bandwidth (the diagonal its RSMI backend writes into
 * XGMIBandwidth, "somehow matches the HBM"), or more when some link read
 * is faster, so that they are always the node's fastest. */
#define TOPO_SAME_DEVICE_MBPS 1000000LL

static int is_gpu_pcidev(hwloc_obj_t obj)
{
    unsigned cls = obj->attr->pcidev.class_id;
    unsigned vendor = obj->attr->pcidev.vendor_id;
    /* 0x1200 (processing accelerator) is how MI300X-class AMD GPUs report. */
    return (cls == 0x0300 || cls == 0x0302 || cls == 0x0380 || cls == 0x1200) &&
           (vendor == 0x10de || vendor == 0x1002);
}

/* Management names first: they match nvidia-smi / rocm-smi numbering. */
static int osdev_rank(const char *name)
{
    static const char *const prefix[] = {"nvml", "rsmi", "cuda", "opencl"};
    for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
        if (strncmp(name, prefix[i], strlen(prefix[i])) == 0)
            return (int)i;
    return 99;
}

static void copy_str(char *dst, size_t len, const char *src)
{
    /* Names from a file may be long: a cut name is still a fine label. */
    snprintf(dst, len, "%s", src ? src : "");
}

/* The device's partitions: its rsmiN OS devices when there are several
 * (hwloc >= 2.11 files every partition of an MI300 in TPX/CPX mode under
 * the device's function 0), in rsmiN order.  Returns their count (0 or 1:
 * a whole GPU). */
static int find_partitions(hwloc_obj_t pci, hwloc_obj_t *parts, int max)
{
    int n = 0;
    for (hwloc_obj_t os = pci->io_first_child; os; os = os->next_sibling) {
        unsigned num;
        char tail;
        if (os->type != HWLOC_OBJ_OS_DEVICE || !os->name || sscanf(os->name, "rsmi%u%c", &num, &tail) != 1)
            continue;
        if (n == max)
            return max + 1;
        int at = n++;
        while (at > 0 && strtoul(parts[at - 1]->name + 4, NULL, 10) > num) {
            parts[at] = parts[at - 1];
            at--;
        }
        parts[at] = os;
    }
    return n;
}

static void fill_from_osdevs(hwloc_obj_t pci, struct dtrain_gpu_info *info)
{
    int best = 100;
    for (hwloc_obj_t os = pci->io_first_child; os; os = os->next_sibling) {
        if (os->type != HWLOC_OBJ_OS_DEVICE || !os->name)
            continue;
        int rank = osdev_rank(os->name);
        if (rank < best) {
            best = rank;
            copy_str(info->osdev, sizeof(info->osdev), os->name);
        }
        const char *model = hwloc_obj_get_info_by_name(os, "GPUModel");
        if (model && !info->model[0])
            copy_str(info->model, sizeof(info->model), model);
        const char *uuid = hwloc_obj_get_info_by_name(os, "NVIDIAUUID");
        if (!uuid)
            uuid = hwloc_obj_get_info_by_name(os, "AMDUUID");
        if (uuid && !info->uuid[0])
            copy_str(info->uuid, sizeof(info->uuid), uuid);
    }
    if (!info->model[0]) {
        const char *name = hwloc_obj_get_info_by_name(pci, "PCIDevice");
        if (name)
            copy_str(info->model, sizeof(info->model), name);
    }
}

static int fill_locality(hwloc_topology_t topo, hwloc_obj_t pci, struct dtrain_gpu_info *info,
                         char *err, size_t errlen)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pci);
    info->numa_node = -1;
    info->cpulist[0] = '\0';
    if (!anc)
        return 0;
    if (anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
        info->numa_node = hwloc_bitmap_first(anc->nodeset);
    if (anc->cpuset) {
        int len = hwloc_bitmap_list_snprintf(info->cpulist, sizeof(info->cpulist), anc->cpuset);
        if (len < 0 || (size_t)len >= sizeof(info->cpulist)) {
            dtrain_snprintf(err, errlen, "GPU %s: its CPU list is longer than %d characters",
                            info->busid, DTRAIN_TOPO_CPULIST_LEN - 1);
            return -1;
        }
    }
    return 0;
}

static int cmp_gpu_obj(const void *pa, const void *pb)
{
    const struct gpu_obj *a = pa, *b = pb;
    int c = strcmp(a->info.busid, b->info.busid);
    return c ? c : a->info.partition - b->info.partition;
}

/* A partition's own names: its rsmiN, model and UUID over the device's. */
static void fill_partition(hwloc_obj_t os, int partition, int partitions, struct dtrain_gpu_info *info)
{
    info->partition = partition;
    info->partitions = partitions;
    copy_str(info->osdev, sizeof(info->osdev), os->name);
    const char *model = hwloc_obj_get_info_by_name(os, "GPUModel");
    if (model)
        copy_str(info->model, sizeof(info->model), model);
    const char *uuid = hwloc_obj_get_info_by_name(os, "AMDUUID");
    if (uuid)
        copy_str(info->uuid, sizeof(info->uuid), uuid);
}

static int collect_gpus(hwloc_topology_t topo, struct gpu_obj *gpus, int *ngpus, char *err, size_t errlen)
{
    int n = 0;
    for (hwloc_obj_t pci = hwloc_get_next_pcidev(topo, NULL); pci; pci = hwloc_get_next_pcidev(topo, pci)) {
        if (!is_gpu_pcidev(pci))
            continue;
        hwloc_obj_t parts[DTRAIN_TOPO_MAX_GPUS];
        int nparts = find_partitions(pci, parts, DTRAIN_TOPO_MAX_GPUS);
        int entries = nparts > 1 ? nparts : 1;
        if (n + entries > DTRAIN_TOPO_MAX_GPUS) {
            dtrain_snprintf(err, errlen, "more than %d GPUs (or GPU partitions) in one node", DTRAIN_TOPO_MAX_GPUS);
            return -1;
        }
        for (int p = 0; p < entries; p++) {
            struct gpu_obj *g = &gpus[n];
            memset(g, 0, sizeof(*g));
            g->pci = pci;
            topo_format_busid(g->info.busid, sizeof(g->info.busid), pci->attr->pcidev.domain,
                              pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
            g->info.vendor_id = pci->attr->pcidev.vendor_id;
            g->info.device_id = pci->attr->pcidev.device_id;
            g->info.partitions = 1;
            fill_from_osdevs(pci, &g->info);
            if (nparts > 1) {
                g->part = parts[p];
                fill_partition(parts[p], p, nparts, &g->info);
            }
            if (fill_locality(topo, pci, &g->info, err, errlen) < 0)
                return -1;
            n++;
        }
    }
    qsort(gpus, (size_t)n, sizeof(gpus[0]), cmp_gpu_obj);
    for (int i = 0; i < n; i++) {
        gpus[i].info.index = i;
        if (i > 0 && cmp_gpu_obj(&gpus[i], &gpus[i - 1]) == 0) {
            dtrain_snprintf(err, errlen, "two GPUs share the PCI bus id %s", gpus[i].info.busid);
            return -1;
        }
    }
    *ngpus = n;
    return 0;
}

/* The deepest object above both a and b.  hwloc_get_common_ancestor_obj()
 * compares depths, which are negative special values for I/O objects, and
 * walks off the root on some PCI trees: walk parent pointers instead. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    for (hwloc_obj_t x = a; x; x = x->parent)
        for (hwloc_obj_t y = b; y; y = y->parent)
            if (x == y)
                return x;
    return NULL;
}

/* PCIe closeness of two GPUs, used when no NVLink/XGMI joins them. */
static enum topo_pcie_locality pcie_locality(hwloc_topology_t topo, const struct gpu_obj *a,
                                             const struct gpu_obj *b)
{
    hwloc_obj_t common = common_ancestor(a->pci, b->pci);
    if (common && (common->type == HWLOC_OBJ_PCI_DEVICE ||
                   (common->type == HWLOC_OBJ_BRIDGE &&
                    common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)))
        return TOPO_PCIE_SAME_SWITCH;
    if (a->info.numa_node >= 0 && a->info.numa_node == b->info.numa_node)
        return TOPO_PCIE_SAME_NUMA;
    if (a->info.numa_node < 0 && b->info.numa_node < 0 &&
        hwloc_get_non_io_ancestor_obj(topo, a->pci) == hwloc_get_non_io_ancestor_obj(topo, b->pci))
        return TOPO_PCIE_SAME_NUMA;
    return TOPO_PCIE_SYSTEM;
}

enum endpoint_kind { EP_OTHER, EP_GPU, EP_SWITCH, EP_CPU };

/* What a distances-matrix object is: one of our GPUs (by its PCI device or
 * one of its OS devices), a switch (any other PCI device), or a CPU. */
static enum endpoint_kind classify(hwloc_obj_t obj, const struct gpu_obj *gpus, int ngpus, int *gpu)
{
    hwloc_obj_t pci = obj;
    for (int i = 0; i < ngpus; i++)
        if (gpus[i].part && gpus[i].part == obj) {
            *gpu = i;
            return EP_GPU;
        }
    if (obj->type == HWLOC_OBJ_OS_DEVICE) {
        pci = obj->parent;
        while (pci && pci->type == HWLOC_OBJ_OS_DEVICE)
            pci = pci->parent;
        if (!pci || pci->type != HWLOC_OBJ_PCI_DEVICE)
            return EP_OTHER;
    }
    if (pci->type == HWLOC_OBJ_PCI_DEVICE) {
        for (int i = 0; i < ngpus; i++)
            if (gpus[i].pci == pci) {
                if (gpus[i].part)
                    return EP_OTHER; /* the device, not one of its partitions: no one GPU of ours */
                *gpu = i;
                return EP_GPU;
            }
        return obj->type == HWLOC_OBJ_OS_DEVICE ? EP_OTHER : EP_SWITCH;
    }
    if (hwloc_obj_type_is_normal(obj->type) || hwloc_obj_type_is_memory(obj->type))
        return EP_CPU;
    return EP_OTHER;
}

/* One direction may be missing in hand-made matrices; when both are there,
 * the smaller one is what a transfer gets. */
static unsigned long long pair_value(const struct hwloc_distances_s *d, unsigned i, unsigned j)
{
    unsigned long long ij = d->values[(size_t)i * d->nbobjs + j];
    unsigned long long ji = d->values[(size_t)j * d->nbobjs + i];
    if (ij > TOPO_MAX_LINK_MBPS)
        ij = 0;
    if (ji > TOPO_MAX_LINK_MBPS)
        ji = 0;
    if (ij && ji)
        return ij < ji ? ij : ji;
    return ij ? ij : ji;
}

/* Fill model links from the distances named `name`.  Returns 1 when some
 * GPU-GPU bandwidth was found, 0 when none, -1 on hwloc failure. */
static int links_from_distances(hwloc_topology_t topo, const char *name, const struct gpu_obj *gpus,
                                struct dtrain_topo *model, char *err, size_t errlen)
{
    struct hwloc_distances_s *dists[4];
    unsigned nr = 4;
    int n = model->ngpus, found = 0;

    if (hwloc_distances_get_by_name(topo, name, &nr, dists, 0) < 0) {
        dtrain_snprintf(err, errlen, "hwloc could not read the %s distances: %s", name, strerror(errno));
        return -1;
    }
    if (nr > 4)
        nr = 4;
    for (unsigned m = 0; m < nr; m++) {
        struct hwloc_distances_s *d = dists[m];
        unsigned long long direct[DTRAIN_TOPO_MAX_GPUS][DTRAIN_TOPO_MAX_GPUS];
        unsigned long long to_switch[DTRAIN_TOPO_MAX_GPUS] = {0};
        enum endpoint_kind *kinds = calloc(d->nbobjs ? d->nbobjs : 1, sizeof(*kinds));
        int *gpu_of = calloc(d->nbobjs ? d->nbobjs : 1, sizeof(*gpu_of));
        if (!kinds || !gpu_of) {
            free(kinds);
            free(gpu_of);
            for (unsigned k = m; k < nr; k++)
                hwloc_distances_release(topo, dists[k]);
            dtrain_snprintf(err, errlen, "out of memory");
            return -1;
        }
        memset(direct, 0, sizeof(direct));
        for (unsigned i = 0; i < d->nbobjs; i++) {
            gpu_of[i] = -1;
            kinds[i] = d->objs[i] ? classify(d->objs[i], gpus, n, &gpu_of[i]) : EP_OTHER;
        }
        for (unsigned i = 0; i < d->nbobjs; i++) {
            if (kinds[i] != EP_GPU)
                continue;
            for (unsigned j = 0; j < d->nbobjs; j++) {
                if (i == j)
                    continue;
                unsigned long long v = pair_value(d, i, j);
                if (!v)
                    continue;
                if (kinds[j] == EP_GPU && gpu_of[j] != gpu_of[i]) {
                    if (v > direct[gpu_of[i]][gpu_of[j]])
                        direct[gpu_of[i]][gpu_of[j]] = v;
                } else if (kinds[j] == EP_SWITCH) {
                    to_switch[gpu_of[i]] += v;
                } else if (kinds[j] == EP_CPU) {
                    model->nvlink_to_cpu = 1;
                }
            }
        }
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                unsigned long long sw = 0;
                if (to_switch[a] && to_switch[b]) {
                    sw = to_switch[a] < to_switch[b] ? to_switch[a] : to_switch[b];
                    model->via_switch = 1;
                }
                unsigned long long v = direct[a][b] + sw;
                if (v > (unsigned long long)model->bw_mbps[a][b]) {
                    topo_model_set_link(model, a, b, (long long)v);
                    found = 1;
                }
            }
        free(kinds);
        free(gpu_of);
        hwloc_distances_release(topo, d);
    }
    return found;
}

/* The node's allowed PUs with their core and NUMA node, from hwloc's
 * objects (never from OS index arithmetic: siblings may be numbered 1 or N
 * apart). */
static int collect_pus(hwloc_topology_t topo, struct dtrain_topo *model, char *err, size_t errlen)
{
    hwloc_const_cpuset_t set = hwloc_topology_get_allowed_cpuset(topo);
    int weight = set ? hwloc_bitmap_weight(set) : 0;
    if (weight <= 0)
        return 0; /* unknown or infinite: cpu_only plans then leave CPUs unset */
    if (topo_model_alloc_pus(model, weight) != 0) {
        dtrain_snprintf(err, errlen, "out of memory");
        return -1;
    }
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int i = 0, pu;
    hwloc_bitmap_foreach_begin(pu, set) {
        if (i < weight) {
            hwloc_obj_t obj = hwloc_get_pu_obj_by_os_index(topo, (unsigned)pu);
            hwloc_obj_t core = obj ? hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, obj) : NULL;
            model->pus[i] = pu;
            /* A PU without a core object (some exports) is a core of its own. */
            model->pu_core[i] = core ? (int)core->logical_index : (ncores > 0 ? ncores : 0) + i;
            model->pu_numa[i] = -1;
            for (hwloc_obj_t numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, NULL); numa;
                 numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, numa))
                if (numa->cpuset && hwloc_bitmap_isset(numa->cpuset, (unsigned)pu)) {
                    model->pu_numa[i] = (int)numa->os_index;
                    break;
                }
            i++;
        }
    }
    hwloc_bitmap_foreach_end();
    model->npus = i;
    return 0;
}

/* Build the model from a loaded hwloc topology. */
static enum dtrain_status model_from_hwloc(hwloc_topology_t topo, int use_nvml, dtrain_topo **out, char *err,
                                           size_t errlen)
{
    struct gpu_obj *gpus = calloc(DTRAIN_TOPO_MAX_GPUS, sizeof(*gpus));
    struct dtrain_topo *model = topo_model_new();
    enum dtrain_status rc = DTRAIN_ERR_SYSTEM;

    if (!gpus || !model) {
        dtrain_snprintf(err, errlen, "out of memory");
        goto fail;
    }
    rc = DTRAIN_ERR_INPUT;
    if (collect_gpus(topo, gpus, &model->ngpus, err, errlen) < 0)
        goto fail;
    for (int i = 0; i < model->ngpus; i++) {
        model->gpus[i] = gpus[i].info;
        for (int j = 0; j < model->ngpus; j++)
            model->pcie[i][j] = (unsigned char)(i == j ? TOPO_PCIE_SAME_SWITCH : pcie_locality(topo, &gpus[i], &gpus[j]));
    }
    rc = DTRAIN_ERR_SYSTEM;
    if (collect_pus(topo, model, err, errlen) < 0)
        goto fail;

    model->source = DTRAIN_LINKS_PCIE_ONLY;
    int found = links_from_distances(topo, "NVLinkBandwidth", gpus, model, err, errlen);
    if (found < 0)
        goto fail;
    if (found) {
        model->source = DTRAIN_LINKS_HWLOC_NVLINK;
    } else {
        found = links_from_distances(topo, "XGMIBandwidth", gpus, model, err, errlen);
        if (found < 0)
            goto fail;
        if (found)
            model->source = DTRAIN_LINKS_HWLOC_XGMI;
    }

    /* Partitions of one device: the fastest link of the node. */
    long long fastest = TOPO_SAME_DEVICE_MBPS;
    for (int i = 0; i < model->ngpus; i++)
        for (int j = 0; j < model->ngpus; j++)
            if (model->bw_mbps[i][j] > fastest)
                fastest = model->bw_mbps[i][j];
    for (int i = 0; i < model->ngpus; i++)
        for (int j = i + 1; j < model->ngpus; j++)
            if (gpus[i].part && gpus[j].pci == gpus[i].pci)
                topo_model_set_link(model, i, j, fastest);
    topo_model_vendor_index(model);

    if (use_nvml && model->ngpus > 0) {
        /* hwloc 2.9 misreads NVLink on A100/H100 and Debian's hwloc has no
         * NVML backend: on a live node NVML, when present, is the truth. */
        int applied = topo_nvml_apply(model, NULL, err, errlen);
        if (applied < 0) {
            rc = DTRAIN_ERR_SYSTEM;
            goto fail;
        }
    }
    if (model->source == DTRAIN_LINKS_PCIE_ONLY && model->ngpus > 0 && !model->nvml_seen) {
        /* "PCIe only" means a backend looked for links and found none: the
         * NVML (nvmlN) or RSMI (rsmiN) OS devices say hwloc's did.  Without
         * them (hwloc 1.x exports, hwloc without those plugins) nobody
         * looked. */
        int looked = 0;
        for (int i = 0; i < model->ngpus; i++)
            looked |= strncmp(model->gpus[i].osdev, "nvml", 4) == 0 || strncmp(model->gpus[i].osdev, "rsmi", 4) == 0;
        if (!looked)
            model->source = DTRAIN_LINKS_NONE;
    }
    topo_model_finish(model);
    free(gpus);
    *out = model;
    return DTRAIN_OK;
fail:
    free(gpus);
    dtrain_topo_free(model);
    return rc;
}

/* Load a topology: from the XML text buf[0..len) when given (named `name`
 * in messages), else live.  hwloc is never left to open a file itself: a
 * live load with HWLOC_XMLFILE set reads that file here (non-blocking
 * open, regular file, size bound, pre-check) and hands hwloc the bytes.
 * With DTRAIN_TOPO_LOAD_CPUS_ONLY in flags hwloc keeps no I/O object and
 * NVML is never opened (the PCI walk and NVML are most of a live load). */
enum dtrain_status topo_hwloc_load(const char *buf, size_t len, const char *name, int flags, dtrain_topo **out,
                                   char *err, size_t errlen)
{
    hwloc_topology_t topo = NULL;
    char *envbuf = NULL;
    enum dtrain_status rc = DTRAIN_ERR_SYSTEM;

    if (!out) {
        dtrain_snprintf(err, errlen, "no place to store the topology");
        return DTRAIN_ERR_INPUT;
    }
    *out = NULL;
    const char *env = getenv("HWLOC_XMLFILE");
    int live = buf == NULL;
    if (live && env && env[0]) {
        if (dtrain_read_regular(env, "topology file (HWLOC_XMLFILE)", TOPO_XML_MAX_BYTES, &envbuf, &len, err,
                                errlen) != 0)
            return DTRAIN_ERR_INPUT;
        buf = envbuf;
        name = env;
    }
    if (buf && topo_xml_precheck_buffer(buf, len, name, err, errlen) < 0) {
        rc = DTRAIN_ERR_INPUT;
        goto out;
    }
    if (hwloc_topology_init(&topo) < 0) {
        dtrain_snprintf(err, errlen, "hwloc_topology_init failed: %s", strerror(errno));
        topo = NULL;
        goto out;
    }
    /* Without KEEP_ALL, hwloc drops every PCI and OS device, GPUs included;
     * a CPU-only load wants exactly that (bridges, PCI and OS devices). */
    const int cpus_only = (flags & DTRAIN_TOPO_LOAD_CPUS_ONLY) != 0;
    if (hwloc_topology_set_io_types_filter(topo, cpus_only ? HWLOC_TYPE_FILTER_KEEP_NONE : HWLOC_TYPE_FILTER_KEEP_ALL) <
        0) {
        dtrain_snprintf(err, errlen, "hwloc could not keep I/O devices: %s", strerror(errno));
        goto out;
    }
    if (buf && hwloc_topology_set_xmlbuffer(topo, buf, (int)len) < 0) {
        dtrain_snprintf(err, errlen, "%.512s is not a valid hwloc XML topology (hwloc could not parse it)", name);
        rc = DTRAIN_ERR_INPUT;
        goto out;
    }
    if (hwloc_topology_load(topo) < 0) {
        if (buf)
            dtrain_snprintf(err, errlen, "%.512s is not a valid hwloc XML topology (hwloc could not load it)", name);
        else
            dtrain_snprintf(err, errlen, "hwloc could not load this machine's topology");
        rc = DTRAIN_ERR_INPUT;
        goto out;
    }
    /* NVML describes this machine only: never mix it into a saved topology,
     * whether given explicitly or through HWLOC_XMLFILE. */
    int use_nvml = !cpus_only && buf == NULL && hwloc_topology_is_thissystem(topo);
    rc = model_from_hwloc(topo, use_nvml, out, err, errlen);
out:
    if (topo) {
        hwloc_topology_destroy(topo);
        topo_xml_own_errors(); /* hwloc may have unloaded its libxml2 plugin */
    }
    free(envbuf);
    return rc;
}

enum dtrain_status dtrain_topo_load_xml_buffer(const char *buf, size_t len, const char *name, dtrain_topo **out,
                                               char *err, size_t errlen)
{
    if (!buf) {
        dtrain_snprintf(err, errlen, "no topology given");
        return DTRAIN_ERR_INPUT;
    }
    return topo_hwloc_load(buf, len, name ? name : "topology", 0, out, err, errlen);
}

enum dtrain_status dtrain_topo_load_xml(const char *path, dtrain_topo **out, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t len = 0;
    if (out)
        *out = NULL;
    if (!path || !path[0]) {
        dtrain_snprintf(err, errlen, "no topology file given");
        return DTRAIN_ERR_INPUT;
    }
    if (dtrain_read_regular(path, "topology file", TOPO_XML_MAX_BYTES, &buf, &len, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    enum dtrain_status rc = topo_hwloc_load(buf, len, path, 0, out, err, errlen);
    free(buf);
    return rc;
}

enum dtrain_status dtrain_topo_load_live(dtrain_topo **out, char *err, size_t errlen)
{
    return topo_hwloc_load(NULL, 0, NULL, 0, out, err, errlen);
}
