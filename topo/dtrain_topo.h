/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo, part 1: a node's GPU topology as a plain model.
 *
 * dtrain_topo_load_*() reads a node with hwloc (live, or from a saved XML
 * file) and, on a live node, NVLink through NVML loaded with
 * dlopen("libnvidia-ml.so.1").  The result is an
 * opaque, immutable model: the GPUs (NVIDIA and AMD, identified by their PCI
 * device; OS devices such as nvml0/cuda0/rsmi0 are attributes of it), their
 * NUMA and CPU locality, a GPU-to-GPU bandwidth matrix and the islands of
 * GPUs that reach each other over NVLink/XGMI.
 *
 * GPUs are numbered 0..n-1 in PCI bus id order (the partitions of one
 * AMD device in TPX/CPX mode in rsmiN order under it); each GPU's
 * vendor_index is what its vendor's visibility variable takes (for NVIDIA
 * the order CUDA_DEVICE_ORDER=PCI_BUS_ID gives CUDA_VISIBLE_DEVICES).
 *
 * No global state: models are independent and may be used from several
 * threads once loaded.  Errors are returned as enum dtrain_status
 * (common/dtrain_status.h: bad input, a shape refused, a system failure;
 * dtrain_status_exit gives the exit code) with one line of text in the
 * caller's buffer (no "dtrain:" prefix; callers add their own). */
#ifndef DTRAIN_TOPO_H
#define DTRAIN_TOPO_H

#include <stddef.h>

#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_TOPO_MAX_GPUS 64    /* more GPUs in one node is refused as input */
#define DTRAIN_TOPO_BUSID_LEN 32   /* "0000:07:00.0" plus room */
#define DTRAIN_TOPO_CPULIST_LEN 512 /* hwloc list syntax, "0-15,64-79" */

enum dtrain_link_kind {
    DTRAIN_LINK_SELF = 0,
    DTRAIN_LINK_PCIE,    /* no NVLink/XGMI path: traffic crosses PCIe (and maybe the CPU) */
    DTRAIN_LINK_NVLINK,  /* direct NVLink, or through NVSwitch */
    DTRAIN_LINK_XGMI,    /* AMD Infinity Fabric */
};

/* Where the link matrix came from. */
enum dtrain_link_source {
    DTRAIN_LINKS_PCIE_ONLY = 0, /* no NVLink/XGMI information: PCI locality only */
    DTRAIN_LINKS_HWLOC_NVLINK,  /* hwloc "NVLinkBandwidth" distances */
    DTRAIN_LINKS_HWLOC_XGMI,    /* hwloc "XGMIBandwidth" distances */
    DTRAIN_LINKS_NVML,          /* NVML queried directly (live nodes) */
    /* No link information at all: a saved topology without a link-reporting
     * backend (an hwloc 1.x export, or hwloc saved without its NVML/RSMI
     * plugin: no nvmlN/rsmiN OS device on any GPU) and no NVML either.
     * NVLink may be there or not: TP > 1 is refused unless PCIe is allowed. */
    DTRAIN_LINKS_NONE,
};

struct dtrain_gpu_info {
    int index;                             /* 0..n-1, PCI bus id order, then partition */
    char busid[DTRAIN_TOPO_BUSID_LEN];     /* "0000:07:00.0", lower case */
    unsigned vendor_id;                    /* 0x10de NVIDIA, 0x1002 AMD */
    unsigned device_id;
    char model[128];                       /* "Tesla V100-SXM2-32GB", or "" */
    char uuid[64];                         /* "GPU-....", or "" */
    char osdev[32];                        /* first OS device name (nvml0, cuda0, rsmi0...), or "" */
    int numa_node;                         /* OS index of the nearest NUMA node, -1 unknown */
    char cpulist[DTRAIN_TOPO_CPULIST_LEN]; /* local CPUs (hwloc list syntax), "" unknown */
    /* Multi-node NVLink fabric (NVML nvmlDeviceGetGpuFabricInfoV; hwloc
     * files never hold it): state 0 none (not reported, not supported), 1 not
     * started, 2 in progress, 3 registered, 4 registration failed (NVML
     * reported completion with an error); cluster UUID and clique id are
     * meaningful when 3.  GPUs of one cluster and clique share one NVLink
     * domain across nodes (GB200 NVL72: 72 GPUs in 18 nodes). */
    int fabric_state;
    unsigned fabric_clique;
    /* Partitions: management OS devices (rsmiN) under this one PCI device;
     * > 1 on AMD MI300 in TPX/CPX mode (3 or 6 per MI300X/MI300A device;
     * hwloc files them all under the device's function 0).  Each partition
     * is its own entry of the model, a GPU to place: entries of one device
     * share busid and differ in partition (0..partitions-1, the rsmiN
     * order), and links between them count as the fastest of the node.
     * mig: 1 when NVML reports MIG mode on (live nodes): refused by the
     * planner (see doc/topology.md). */
    int partitions;
    int partition;
    int mig;
    /* The GPU's index among the node's GPUs of its vendor, in the order the
     * vendor's runtime numbers them: for NVIDIA the CUDA index with
     * CUDA_DEVICE_ORDER=PCI_BUS_ID; for AMD the ROCr agent index that
     * ROCR_VISIBLE_DEVICES takes (PCI bus id order, then partition: the
     * order amdgpu probes devices and KFD lists their partitions).  Set
     * once at load; a subset keeps the values of the whole node. */
    int vendor_index;
    char fabric_cluster[40];               /* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", or "" */
};

typedef struct dtrain_topo dtrain_topo;

/* Load from a saved hwloc XML file (I/O devices and distances included).
 * Returns DTRAIN_OK, or DTRAIN_ERR_INPUT (missing, unreadable, malformed or
 * impossible topology) or DTRAIN_ERR_SYSTEM (out of memory, hwloc failure)
 * with one line in err; the other loads and dtrain_topo_subset likewise. */
enum dtrain_status dtrain_topo_load_xml(const char *path, dtrain_topo **out, char *err, size_t errlen);

/* Load this machine.  Honours HWLOC_XMLFILE as hwloc does (so a slurmd
 * started with it looks like the saved machine; NVML is then never
 * consulted).  On the real machine, when libnvidia-ml.so.1 (or the library
 * named by $DTRAIN_NVML_LIBRARY in the process environment) can be opened
 * and reports NVLink, NVML's links are used, since hwloc 2.9 misreads them
 * on A100/H100 and Debian's hwloc has no NVML backend; otherwise hwloc's
 * distances.  A node without NVML is not an error. */
enum dtrain_status dtrain_topo_load_live(dtrain_topo **out, char *err, size_t errlen);

/* Load from hwloc XML text buf[0..len) (`name` names it in messages). */
enum dtrain_status dtrain_topo_load_xml_buffer(const char *buf, size_t len, const char *name, dtrain_topo **out,
                                               char *err, size_t errlen);

/* Load in a forked child that may take at most timeout_ms (see
 * topo_bounded.c): from the file `xml`, opened as a privileged process
 * trusts it (common/dtrain_file.h) when flags has DTRAIN_TOPO_LOAD_TRUSTED,
 * or live when xml is NULL.  With DTRAIN_TOPO_LOAD_THIS_NODE the file
 * stands for this very node (the plugin's HWLOC_XMLFILE / topology_xml=):
 * NVML's fabric membership (never its links) is added for the GPUs whose
 * bus ids NVML also reports, since hwloc files never carry it.  A crash or
 * hang of the load gives DTRAIN_ERR_SYSTEM with one line ("topology
 * discovery crashed with signal 11 (...) in loading F with hwloc"), never a
 * crash or hang of the caller.  The caller must not mind
 * a child process (fork). */
#define DTRAIN_TOPO_LOAD_TRUSTED 1
#define DTRAIN_TOPO_LOAD_THIS_NODE 2
/* Only the CPUs: hwloc keeps no PCI device, bridge or OS device and NVML is
 * never opened, so the model has no GPU but the same CPUs (the PCI walk and
 * NVML are most of a live load: dtrain-launch's CPU-only plan uses it). */
#define DTRAIN_TOPO_LOAD_CPUS_ONLY 4
enum dtrain_status dtrain_topo_load_bounded(const char *xml, int flags, int timeout_ms, dtrain_topo **out, char *err,
                                            size_t errlen);

void dtrain_topo_free(dtrain_topo *topo);

/* A new model holding only the listed GPUs (indices of `topo`), renumbered
 * 0..n-1 in the order given, links and islands recomputed: used when Slurm's
 * GRES already restricted the task to some GPUs. */
enum dtrain_status dtrain_topo_subset(const dtrain_topo *topo, const int *gpus, int ngpus,
                                      dtrain_topo **out, char *err, size_t errlen);

int dtrain_topo_gpu_count(const dtrain_topo *topo);
const struct dtrain_gpu_info *dtrain_topo_gpu(const dtrain_topo *topo, int gpu);
int dtrain_topo_find_busid(const dtrain_topo *topo, const char *busid); /* index or -1 (first partition) */

#define DTRAIN_VENDOR_NVIDIA 0x10de
#define DTRAIN_VENDOR_AMD 0x1002
/* The vendor of every GPU of the model (DTRAIN_VENDOR_*), 0 when it has no
 * GPU, -1 when GPUs of two vendors are there. */
int dtrain_topo_vendor(const dtrain_topo *topo);
/* A new model holding only the GPUs of `vendor` (DTRAIN_VENDOR_*), as
 * dtrain_topo_subset does; a model without such a GPU is refused
 * (DTRAIN_ERR_REFUSED) with one line. */
enum dtrain_status dtrain_topo_vendor_subset(const dtrain_topo *topo, unsigned vendor, dtrain_topo **out, char *err,
                                             size_t errlen);
/* "nvidia" / "amd" -> DTRAIN_VENDOR_*; 0 for anything else. */
unsigned dtrain_vendor_from_name(const char *name);

/* Bandwidth in GB/s between two GPUs over NVLink/XGMI (direct, or through
 * NVSwitch ports at the switch bandwidth); 0 when only PCIe joins them. */
double dtrain_topo_bandwidth(const dtrain_topo *topo, int a, int b);
enum dtrain_link_kind dtrain_topo_link_kind(const dtrain_topo *topo, int a, int b);
enum dtrain_link_source dtrain_topo_link_source(const dtrain_topo *topo);
const char *dtrain_link_kind_name(enum dtrain_link_kind kind);     /* "NVLink", ... */
const char *dtrain_link_source_name(enum dtrain_link_source src);  /* "hwloc NVLinkBandwidth", ... */

/* Islands: maximal groups of GPUs connected to each other (transitively)
 * over NVLink/XGMI.  A GPU without such links is an island of one.
 * Islands are numbered by their lowest GPU index. */
int dtrain_topo_island_count(const dtrain_topo *topo);
int dtrain_topo_island_of(const dtrain_topo *topo, int gpu);
int dtrain_topo_island_size(const dtrain_topo *topo, int island);
int dtrain_topo_largest_island(const dtrain_topo *topo); /* size of the largest island */

/* The multi-node NVLink domain of this node's GPUs.  Returns 1 with
 * "<cluster uuid>/<clique id>" in buf when every GPU is registered in one
 * cluster and clique; 0 when no GPU reports fabric membership (an ordinary
 * node: NVLink stops at the node); -1 with one line in why when the GPUs
 * report a fabric but not one usable domain (registration not complete,
 * GPUs in different cliques). */
#define DTRAIN_TOPO_DOMAIN_LEN 64
int dtrain_topo_nvlink_domain(const dtrain_topo *topo, char *buf, size_t len, char *why, size_t whylen);

/* Short description of the machine (for logs): "8x NVIDIA H100, NVLink via NVSwitch". */
const char *dtrain_topo_summary(const dtrain_topo *topo);

#ifdef __cplusplus
}
#endif
#endif
