/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo internals: the node model behind the opaque dtrain_topo
 * handle, shared by the discovery sources (hwloc, NVML) and the planner.
 * Not installed.
 *
 * A source fills gpus[], the per-pair link counts/bandwidths and the PCIe
 * locality, then calls topo_model_finish(), which derives the link kinds,
 * the islands and the summary.  After that the model is immutable. */
#ifndef DTRAIN_TOPO_MODEL_H
#define DTRAIN_TOPO_MODEL_H

#include "dtrain_topo.h"

/* PCIe locality of a GPU pair when no NVLink/XGMI joins them (closest first). */
enum topo_pcie_locality {
    TOPO_PCIE_SAME_SWITCH = 0, /* below one PCI bridge other than the host bridge */
    TOPO_PCIE_SAME_NUMA = 1,   /* same NUMA node (or same host-side ancestor) */
    TOPO_PCIE_SYSTEM = 2,      /* across NUMA nodes / sockets */
};

struct dtrain_topo {
    int ngpus;
    struct dtrain_gpu_info gpus[DTRAIN_TOPO_MAX_GPUS];
    /* GB/s over NVLink/XGMI (direct + through switches), 0 when PCIe only. */
    double bw[DTRAIN_TOPO_MAX_GPUS][DTRAIN_TOPO_MAX_GPUS];
    /* Same link, in whole MB/s: the planner scores with these so that sums
     * compare exactly. */
    long long bw_mbps[DTRAIN_TOPO_MAX_GPUS][DTRAIN_TOPO_MAX_GPUS];
    unsigned char pcie[DTRAIN_TOPO_MAX_GPUS][DTRAIN_TOPO_MAX_GPUS]; /* enum topo_pcie_locality */
    enum dtrain_link_kind kind[DTRAIN_TOPO_MAX_GPUS][DTRAIN_TOPO_MAX_GPUS];
    enum dtrain_link_source source;
    int via_switch; /* 1 when some GPU-GPU bandwidth came through NVSwitch ports */
    int nvlink_to_cpu; /* 1 when some GPU has NVLink to a CPU (POWER); informational */
    int nvml_seen;     /* 1 when NVML (live) enumerated some GPU of the model, links or not */

    int nislands;
    int island_of[DTRAIN_TOPO_MAX_GPUS];
    int island_size[DTRAIN_TOPO_MAX_GPUS];

    /* The node's usable CPUs (PUs: OS indices, ascending), and for each its
     * core (a number shared by the hyperthreads of one core, unique in the
     * node) and its NUMA node (OS index, -1 unknown), as hwloc reports them:
     * the planner gives ranks whole cores from these (plan_cpus.c).  One
     * allocation of 3*npus ints (topo_model_alloc_pus). */
    int npus;
    int *pus;
    int *pu_core;
    int *pu_numa;

    char summary[256];
};

/* A zeroed model (calloc); NULL on out of memory. */
struct dtrain_topo *topo_model_new(void);

/* Allocate pus, pu_core and pu_numa for n PUs (n > 0), replacing any.
 * 0, or -1 on out of memory. */
int topo_model_alloc_pus(struct dtrain_topo *topo, int n);

/* dst's PUs become a copy of src's.  0, or -1 on out of memory. */
int topo_model_copy_pus(struct dtrain_topo *dst, const struct dtrain_topo *src);

/* Set the link between a and b (both directions), in MB/s. */
void topo_model_set_link(struct dtrain_topo *topo, int a, int b, long long mbps);

/* Derive kinds, islands and the summary from gpus/bw_mbps/source.  May run
 * again after the links changed (tests apply NVML to a loaded model). */
void topo_model_finish(struct dtrain_topo *topo);

/* Sort gpus[] by bus id and renumber; must run before any link is set. */
void topo_model_sort_gpus(struct dtrain_topo *topo);

/* Number each GPU among the GPUs of its vendor (vendor_index), in model
 * order; once per loaded node, never on a subset. */
void topo_model_vendor_index(struct dtrain_topo *topo);

/* Canonical PCI bus id "dddd:bb:dd.f", lower case. */
void topo_format_busid(char *buf, size_t len, unsigned domain, unsigned bus,
                       unsigned dev, unsigned func);

/* NVML source (topo_nvml.c): read NVLink of the model's GPUs through the
 * NVML library `libpath` (NULL or "": $DTRAIN_NVML_LIBRARY, else
 * "libnvidia-ml.so.1", as dtrain_nvml_library() says) and, when it reports
 * any NVLink, replace the model's links with it (source DTRAIN_LINKS_NVML)
 * and fill missing model/uuid.
 * Returns 1 when NVLink was found and applied, 0 when NVML is absent or
 * reports none (not an error), -1 with err on a broken NVML.  Call before
 * topo_model_finish(). */
int topo_nvml_apply(struct dtrain_topo *topo, const char *libpath, char *err, size_t errlen);

/* NVML source, fabric only: fill the GPUs' fabric_* fields from NVML for
 * GPUs whose bus id NVML also reports, and nothing else (links stay the
 * model's).  For a saved topology that stands for this very node (the
 * plugin's HWLOC_XMLFILE / topology_xml=): hwloc files never carry fabric
 * membership.  Returns 1 when some GPU reported a fabric, 0 when none or no
 * NVML, -1 with err on a broken NVML. */
int topo_nvml_apply_fabric(struct dtrain_topo *topo, const char *libpath, char *err, size_t errlen);

/* A topology file larger than this is refused (the largest real machines
 * save a few MB). */
#define TOPO_XML_MAX_BYTES (256 * 1024 * 1024)

/* Refuse hwloc XML text buf[0..len) that is not well-formed XML or would
 * crash hwloc 2.9 while loading (see topo_xml_check.c); `name` names it in
 * messages.  Returns DTRAIN_OK, or DTRAIN_ERR_INPUT with one line in
 * err. */
/* Load from hwloc XML text buf[0..len) (`name` in messages), or live when
 * buf is NULL; flags: DTRAIN_TOPO_LOAD_CPUS_ONLY or 0 (topo_hwloc.c). */
enum dtrain_status topo_hwloc_load(const char *buf, size_t len, const char *name, int flags, dtrain_topo **out,
                                   char *err, size_t errlen);

enum dtrain_status topo_xml_precheck_buffer(const char *buf, size_t len, const char *name, char *err, size_t errlen);

/* Give libxml2 (this thread) a generic error function of ours: hwloc's
 * libxml2 plugin leaves one of its own there that dangles once hwloc
 * unloads the plugin (see topo_xml_check.c).  Call after every
 * hwloc_topology_destroy(). */
void topo_xml_own_errors(void);

/* NVLink bandwidth per link and direction, in MB/s, for an NVML NVLink
 * version value (see topo_nvml.c for the table). */
long long topo_nvlink_mbps_per_link(unsigned version);

#endif
