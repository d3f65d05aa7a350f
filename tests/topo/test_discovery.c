/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Discovery: every fixture loads into the expected node model (GPUs, bus
 * ids, locality, links, islands); subsets; live loading through
 * HWLOC_XMLFILE; CPU-only loads; the NVML path against the fake NVML
 * library. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_plan.h"
#include "fixtures.h"
#include "tap.h"
#include "topo_model.h"

struct expect {
    const char *file;
    int ngpus, nislands, largest;
    enum dtrain_link_source source;
    const char *first_busid, *last_busid;
    unsigned vendor;
    const char *model;      /* of GPU 0 */
    const char *osdev;      /* of GPU 0 */
    int numa_first, numa_last;
    const char *cpulist_first;
    /* up to 4 bandwidth checks: a, b, GB/s */
    int bw[4][3];
};

static const struct expect cases[] = {
    {"power8gpudistances.xml", 4, 2, 2, DTRAIN_LINKS_HWLOC_NVLINK, "0002:01:00.0", "000b:01:00.0", 0x10de,
     "Tesla P100-SXM2-16GB", "nvml0", 0, 1, "0-1,8-9,16-17,24-25", {{0, 1, 40}, {2, 3, 40}, {0, 2, 0}, {1, 3, 0}}},
    {"g4dnmetal.xml", 8, 8, 1, DTRAIN_LINKS_PCIE_ONLY, "0000:18:00.0", "0000:f5:00.0", 0x10de, "Tesla T4", "nvml0",
     0, 1, "0-23,48-71", {{0, 1, 0}, {0, 7, 0}, {3, 4, 0}, {6, 7, 0}}},
    {"dgx1-v100.xml", 8, 1, 8, DTRAIN_LINKS_HWLOC_NVLINK, "0000:06:00.0", "0000:8a:00.0", 0x10de,
     "Tesla V100-SXM2-32GB", "nvml0", 0, 1, "0-7,16-23", {{0, 3, 50}, {0, 1, 25}, {0, 5, 0}, {4, 7, 50}}},
    {"dgx1-v100-gpu5-missing.xml", 7, 1, 7, DTRAIN_LINKS_HWLOC_NVLINK, "0000:06:00.0", "0000:8a:00.0", 0x10de,
     "Tesla V100-SXM2-32GB", "nvml0", 0, 1, "0-7,16-23", {{0, 3, 50}, {1, 2, 50}, {5, 6, 50}, {4, 6, 50}}},
    {"dgx-h100.xml", 8, 1, 8, DTRAIN_LINKS_HWLOC_NVLINK, "0000:18:00.0", "0000:db:00.0", 0x10de,
     "NVIDIA H100 80GB HBM3", "nvml0", 0, 1, "0-7,16-23", {{0, 1, 450}, {0, 7, 450}, {3, 4, 450}, {6, 7, 450}}},
    {"dgx-h100-degraded.xml", 8, 1, 8, DTRAIN_LINKS_HWLOC_NVLINK, "0000:18:00.0", "0000:db:00.0", 0x10de,
     "NVIDIA H100 80GB HBM3", "nvml0", 0, 1, "0-7,16-23", {{0, 1, 450}, {0, 3, 400}, {3, 7, 400}, {6, 7, 450}}},
    {"hgx-a100-4gpu.xml", 4, 1, 4, DTRAIN_LINKS_HWLOC_NVLINK, "0000:01:00.0", "0000:c1:00.0", 0x10de,
     "NVIDIA A100-SXM4-40GB", "nvml0", 0, 1, "0-7,16-23", {{0, 1, 100}, {0, 3, 100}, {1, 2, 100}, {2, 3, 100}}},
    {"pcie-a100-bridged-pairs.xml", 4, 2, 2, DTRAIN_LINKS_HWLOC_NVLINK, "0000:17:00.0", "0000:ca:00.0", 0x10de,
     "NVIDIA A100 80GB PCIe", "nvml0", 0, 1, "0-7,16-23", {{0, 1, 300}, {2, 3, 300}, {1, 2, 0}, {0, 3, 0}}},
    {"amd-mi250x.xml", 8, 1, 8, DTRAIN_LINKS_HWLOC_XGMI, "0000:c1:00.0", "0000:de:00.0", 0x1002,
     "AMD Instinct MI250X", "rsmi0", 0, 1, "0-7,16-23", {{0, 1, 200}, {0, 6, 100}, {0, 2, 50}, {0, 3, 0}}},
    /* A real hwloc 1.x export (no OS devices, no link data): "no link information", not "PCIe only". */
    {"hwloc1-x9drg-m2075.xml", 3, 3, 1, DTRAIN_LINKS_NONE, "0000:03:00.0", "0000:84:00.0", 0x10de,
     "Tesla M2075 Dual-Slot Computing Processor Module", "", 0, 1, "0-7,16-23", {{0, 1, 0}, {1, 2, 0}, {0, 2, 0}, {2, 1, 0}}},
};

static int bw_is(const dtrain_topo *t, int a, int b, double gbps)
{
    return fabs(dtrain_topo_bandwidth(t, a, b) - gbps) < 1e-6 && fabs(dtrain_topo_bandwidth(t, b, a) - gbps) < 1e-6;
}

static void check_fixture(const struct expect *e)
{
    dtrain_topo *t = load_fixture(e->file);
    if (!ok(t != NULL, "%s: loads", e->file))
        return;
    int n = dtrain_topo_gpu_count(t);
    ok(n == e->ngpus, "%s: %d GPUs (got %d)", e->file, e->ngpus, n);
    ok(dtrain_topo_link_source(t) == e->source, "%s: links from %s (got %s)", e->file,
       dtrain_link_source_name(e->source), dtrain_link_source_name(dtrain_topo_link_source(t)));
    ok(dtrain_topo_island_count(t) == e->nislands && dtrain_topo_largest_island(t) == e->largest,
       "%s: %d islands, largest %d (got %d, %d)", e->file, e->nislands, e->largest, dtrain_topo_island_count(t),
       dtrain_topo_largest_island(t));
    if (n != e->ngpus || n == 0) {
        dtrain_topo_free(t);
        return;
    }
    const struct dtrain_gpu_info *first = dtrain_topo_gpu(t, 0), *last = dtrain_topo_gpu(t, n - 1);
    ok(strcmp(first->busid, e->first_busid) == 0 && strcmp(last->busid, e->last_busid) == 0,
       "%s: bus ids %s .. %s (got %s .. %s)", e->file, e->first_busid, e->last_busid, first->busid, last->busid);
    int sorted = 1, indexed = 1, vendor = 1;
    for (int i = 0; i < n; i++) {
        const struct dtrain_gpu_info *g = dtrain_topo_gpu(t, i);
        if (i > 0 && strcmp(dtrain_topo_gpu(t, i - 1)->busid, g->busid) >= 0)
            sorted = 0;
        if (g->index != i || dtrain_topo_find_busid(t, g->busid) != i)
            indexed = 0;
        if (g->vendor_id != e->vendor)
            vendor = 0;
    }
    ok(sorted && indexed, "%s: GPUs sorted by bus id and numbered in that order", e->file);
    ok(vendor, "%s: vendor 0x%04x on every GPU", e->file, e->vendor);
    ok(strcmp(first->model, e->model) == 0 && strcmp(first->osdev, e->osdev) == 0,
       "%s: GPU 0 is a %s named %s (got '%s', '%s')", e->file, e->model, e->osdev, first->model, first->osdev);
    ok(first->numa_node == e->numa_first && last->numa_node == e->numa_last,
       "%s: NUMA nodes %d .. %d (got %d .. %d)", e->file, e->numa_first, e->numa_last, first->numa_node,
       last->numa_node);
    ok(strcmp(first->cpulist, e->cpulist_first) == 0, "%s: GPU 0 local CPUs %s (got %s)", e->file,
       e->cpulist_first, first->cpulist);
    for (int k = 0; k < 4; k++) {
        int a = e->bw[k][0], b = e->bw[k][1];
        ok(bw_is(t, a, b, e->bw[k][2]), "%s: bandwidth %d-%d is %d GB/s (got %.1f)", e->file, a, b, e->bw[k][2],
           dtrain_topo_bandwidth(t, a, b));
        enum dtrain_link_kind want = e->bw[k][2] == 0 ? DTRAIN_LINK_PCIE
                                     : e->source == DTRAIN_LINKS_HWLOC_XGMI ? DTRAIN_LINK_XGMI
                                                                            : DTRAIN_LINK_NVLINK;
        ok(dtrain_topo_link_kind(t, a, b) == want, "%s: link %d-%d is %s", e->file, a, b, dtrain_link_kind_name(want));
    }
    /* Islands are exactly the classes of "joined by a positive bandwidth". */
    int consistent = 1;
    for (int a = 0; a < n; a++) {
        if (dtrain_topo_link_kind(t, a, a) != DTRAIN_LINK_SELF)
            consistent = 0;
        for (int b = 0; b < n; b++)
            if (dtrain_topo_bandwidth(t, a, b) > 0 && dtrain_topo_island_of(t, a) != dtrain_topo_island_of(t, b))
                consistent = 0;
    }
    int total = 0;
    for (int is = 0; is < dtrain_topo_island_count(t); is++)
        total += dtrain_topo_island_size(t, is);
    ok(consistent && total == n, "%s: linked GPUs share an island, island sizes add up to %d", e->file, n);
    ok(strlen(dtrain_topo_summary(t)) > 0, "%s: summary '%s'", e->file, dtrain_topo_summary(t));
    dtrain_topo_free(t);
}

static void check_specifics(void)
{
    dtrain_topo *t = load_fixture("power8gpudistances.xml");
    if (t) {
        ok(strcmp(dtrain_topo_gpu(t, 0)->uuid, "GPU-77bf6b9a-6906-5a93-d28b-b77d2c23d1d2") == 0,
           "power8: UUID from NVIDIAUUID (%s)", dtrain_topo_gpu(t, 0)->uuid);
        ok(t->nvlink_to_cpu == 1, "power8: NVLink to the CPUs is seen but does not join the pairs");
        dtrain_topo_free(t);
    }
    t = load_fixture("dgx-h100.xml");
    if (t) {
        ok(strstr(dtrain_topo_summary(t), "NVSwitch") != NULL, "dgx-h100: summary says NVSwitch (%s)",
           dtrain_topo_summary(t));
        dtrain_topo_free(t);
    }
    t = load_fixture("amd-mi250x.xml");
    if (t) {
        ok(strcmp(dtrain_topo_gpu(t, 0)->uuid, "5a00000000000000") == 0, "mi250x: UUID from AMDUUID (%s)",
           dtrain_topo_gpu(t, 0)->uuid);
        dtrain_topo_free(t);
    }
    t = load_fixture("dgx1-v100-gpu5-missing.xml");
    if (t) {
        ok(dtrain_topo_find_busid(t, "0000:86:00.0") == -1 && dtrain_topo_find_busid(t, "0000:89:00.0") == 5,
           "missing GPU: 86:00.0 absent, 89:00.0 is now GPU 5");
        dtrain_topo_free(t);
    }
}

static void check_subset_and_lookup(void)
{
    char err[256];
    dtrain_topo *t = load_fixture("dgx1-v100.xml"), *sub = NULL;
    if (!t)
        return;
    ok(dtrain_topo_find_busid(t, "0000:0B:00.0") == 3, "find_busid ignores case");
    ok(dtrain_topo_find_busid(t, "00000000:0b:00.0") == 3, "find_busid takes NVML's 8-digit domain");
    ok(dtrain_topo_find_busid(t, "0000:0c:00.0") == -1 && dtrain_topo_find_busid(t, NULL) == -1,
       "find_busid: unknown or NULL is -1");
    ok(dtrain_topo_gpu(t, 8) == NULL && dtrain_topo_gpu(t, -1) == NULL, "gpu(): out of range is NULL");
    ok(dtrain_topo_bandwidth(t, 0, 9) == 0 && dtrain_topo_island_of(t, 9) == -1 && dtrain_topo_island_size(t, 5) == 0,
       "out-of-range queries answer 0 / -1");

    int quad[] = {7, 4, 5, 6};
    if (ok(dtrain_topo_subset(t, quad, 4, &sub, err, sizeof(err)) == DTRAIN_OK, "subset {7,4,5,6}")) {
        ok(dtrain_topo_gpu_count(sub) == 4 && strcmp(dtrain_topo_gpu(sub, 0)->busid, "0000:8a:00.0") == 0 &&
               dtrain_topo_gpu(sub, 0)->index == 0,
           "subset renumbers in the order given");
        ok(bw_is(sub, 0, 1, 50) && bw_is(sub, 1, 2, 25) && dtrain_topo_island_count(sub) == 1,
           "subset keeps the links (7-4 50 GB/s, 4-5 25 GB/s), one island");
        dtrain_topo_free(sub);
        sub = NULL;
    }
    int apart[] = {0, 5};
    if (ok(dtrain_topo_subset(t, apart, 2, &sub, err, sizeof(err)) == DTRAIN_OK, "subset {0,5}")) {
        ok(dtrain_topo_island_count(sub) == 2, "islands recomputed: 0 and 5 are not linked directly");
        dtrain_topo_free(sub);
        sub = NULL;
    }
    int repeated[] = {1, 1}, outside[] = {0, 8};
    ok(dtrain_topo_subset(t, repeated, 2, &sub, err, sizeof(err)) == DTRAIN_ERR_INPUT && sub == NULL,
       "subset with a repeated GPU is refused: %s", err);
    ok(dtrain_topo_subset(t, outside, 2, &sub, err, sizeof(err)) == DTRAIN_ERR_INPUT,
       "subset with an unknown GPU is refused: %s", err);
    dtrain_topo_free(t);
}

static const char *const g4dn_busids[8] = {"0000:18:00.0", "0000:19:00.0", "0000:35:00.0", "0000:36:00.0",
                                            "0000:e7:00.0", "0000:e8:00.0", "0000:f4:00.0", "0000:f5:00.0"};

/* A machine for the fake NVML library (tests/health/fake_nvml.c, a stand-in
 * for libnvidia-ml.so.1), which answers from the file named by
 * FAKE_NVML_CONFIG: the first ngpus g4dn GPUs, then NVLinks numbered per GPU
 * in the order they are added. */
#define FAKE_NVML_FILE "test_discovery-nvml.conf"
struct fake_machine {
    FILE *f;
    int ngpus;
    int nlinks[8];
};

static void fake_start(struct fake_machine *m, int ngpus, unsigned version)
{
    memset(m, 0, sizeof(*m));
    m->ngpus = ngpus;
    m->f = fopen(FAKE_NVML_FILE, "w");
    if (!m->f) {
        diag("cannot write %s: the NVML checks below will fail", FAKE_NVML_FILE);
        return;
    }
    fprintf(m->f, "count = %d\nall.nvlink_version = %u\n", ngpus, version);
    for (int g = 0; g < ngpus; g++)
        fprintf(m->f, "gpu%d.busid = %s\n", g, g4dn_busids[g]);
    setenv("FAKE_NVML_CONFIG", FAKE_NVML_FILE, 1);
}

/* One NVLink from GPU g to the PCI device at busid (vendor 0: NVIDIA). */
static void fake_link(struct fake_machine *m, int g, const char *busid, unsigned vendor)
{
    if (!m->f)
        return;
    fprintf(m->f, "gpu%d.nvlink%d.remote = %s\n", g, m->nlinks[g], busid);
    if (vendor)
        fprintf(m->f, "gpu%d.nvlink%d.remote_vendor = 0x%x\n", g, m->nlinks[g], vendor);
    m->nlinks[g]++;
}

/* n links between GPUs a and b. */
static void fake_pair(struct fake_machine *m, int a, int b, int n)
{
    for (int i = 0; i < n; i++) {
        fake_link(m, a, g4dn_busids[b], 0);
        fake_link(m, b, g4dn_busids[a], 0);
    }
}

/* n links from GPU g to the ports of four NVSwitches. */
static void fake_switch(struct fake_machine *m, int g, int n)
{
    static const char *const ports[4] = {"0000:e0:00.0", "0000:e1:00.0", "0000:e2:00.0", "0000:e3:00.0"};
    for (int i = 0; i < n; i++)
        fake_link(m, g, ports[i % 4], 0);
}

/* One link from GPU g to the CPU (POWER: an IBM NVLink bridge). */
static void fake_cpu(struct fake_machine *m, int g)
{
    fake_link(m, g, "0007:00:00.1", 0x1014);
}

/* Close the file; `extra` is one more line ("init = 9") or NULL. */
static void fake_finish(struct fake_machine *m, const char *extra)
{
    if (!m->f)
        return;
    for (int g = 0; g < m->ngpus; g++)
        fprintf(m->f, "gpu%d.nvlinks = %d\n", g, m->nlinks[g]);
    if (extra)
        fprintf(m->f, "%s\n", extra);
    fclose(m->f);
    m->f = NULL;
}

static void check_live(void)
{
    char err[512];
    dtrain_topo *t = NULL;
    const char *fake = getenv("DTRAIN_FAKE_NVML");

    /* This machine, as it is (usually no GPU): must load. */
    unsetenv("HWLOC_XMLFILE");
    int rc = dtrain_topo_load_live(&t, err, sizeof(err));
    ok(rc == DTRAIN_OK, "load_live on this machine (%s)", rc ? err : dtrain_topo_summary(t));
    dtrain_topo_free(t);
    t = NULL;

    /* HWLOC_XMLFILE makes a slurmd node look like a saved machine... */
    setenv("HWLOC_XMLFILE", fixture_path("dgx1-v100.xml"), 1);
    rc = dtrain_topo_load_live(&t, err, sizeof(err));
    ok(rc == DTRAIN_OK && dtrain_topo_gpu_count(t) == 8 &&
           dtrain_topo_link_source(t) == DTRAIN_LINKS_HWLOC_NVLINK && bw_is(t, 0, 3, 50),
       "load_live honours HWLOC_XMLFILE (DGX-1 seen)");
    dtrain_topo_free(t);
    t = NULL;

    /* ...and NVML, which describes the real machine, is never mixed in. */
    if (fake) {
        struct fake_machine m;
        fake_start(&m, 2, 2);
        fake_pair(&m, 0, 1, 4);
        fake_finish(&m, NULL);
        setenv("DTRAIN_NVML_LIBRARY", fake, 1);
        setenv("HWLOC_XMLFILE", fixture_path("g4dnmetal.xml"), 1);
        rc = dtrain_topo_load_live(&t, err, sizeof(err));
        ok(rc == DTRAIN_OK && dtrain_topo_link_source(t) == DTRAIN_LINKS_PCIE_ONLY &&
               dtrain_topo_bandwidth(t, 0, 1) == 0,
           "with HWLOC_XMLFILE set, NVML is not consulted");
        dtrain_topo_free(t);
        t = NULL;
        rc = dtrain_topo_load_xml(fixture_path("g4dnmetal.xml"), &t, err, sizeof(err));
        ok(rc == DTRAIN_OK && dtrain_topo_link_source(t) == DTRAIN_LINKS_PCIE_ONLY,
           "loading an explicit XML file never consults NVML");
        dtrain_topo_free(t);
        t = NULL;
        unsetenv("DTRAIN_NVML_LIBRARY");
    } else {
        skip("DTRAIN_FAKE_NVML not set: fake NVML library not built");
        skip("DTRAIN_FAKE_NVML not set: fake NVML library not built");
    }
    unsetenv("HWLOC_XMLFILE");
}

/* Load g4dn (PCIe only) and apply the fake NVML described by its file. */
static int apply_fake(const char *fake, dtrain_topo **out, char *err, size_t errlen)
{
    dtrain_topo *t = load_fixture("g4dnmetal.xml");
    *out = t;
    if (!t)
        return -2;
    int rc = topo_nvml_apply(t, fake, err, errlen);
    topo_model_finish(t);
    return rc;
}

static void check_nvml(void)
{
    const char *fake = getenv("DTRAIN_FAKE_NVML");
    char err[512] = "";
    dtrain_topo *t = NULL;
    struct fake_machine m;
    if (!fake) {
        for (int i = 0; i < 10; i++)
            skip("DTRAIN_FAKE_NVML not set: fake NVML library not built");
        return;
    }
    fake_start(&m, 8, 2);
    fake_pair(&m, 0, 1, 2);
    fake_pair(&m, 2, 3, 1);
    fake_finish(&m, NULL);
    int rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 1 && dtrain_topo_link_source(t) == DTRAIN_LINKS_NVML, "NVML: NVLink found and used (rc %d)", rc);
    ok(bw_is(t, 0, 1, 50) && bw_is(t, 2, 3, 25) && bw_is(t, 1, 2, 0),
       "NVML: 2 links = 50 GB/s, 1 link = 25 GB/s (NVLink 2), unlinked = 0");
    ok(dtrain_topo_island_count(t) == 6 && dtrain_topo_largest_island(t) == 2, "NVML: islands {0,1} {2,3} + 4 single");
    ok(strcmp(dtrain_topo_gpu(t, 0)->model, "Tesla T4") == 0, "NVML: hwloc's model name is kept");
    dtrain_topo_free(t);

    fake_start(&m, 8, 1);
    fake_switch(&m, 0, 12);
    fake_switch(&m, 1, 12);
    fake_switch(&m, 2, 12);
    fake_switch(&m, 3, 6);
    fake_cpu(&m, 4);
    fake_cpu(&m, 5);
    fake_finish(&m, NULL);
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 1 && bw_is(t, 0, 1, 240) && bw_is(t, 0, 3, 120) && bw_is(t, 4, 5, 0) && t->via_switch,
       "NVML: through NVSwitch a-b gets min(S(a), S(b)) (NVLink 1: 20 GB/s per link); CPU links join nothing");
    ok(dtrain_topo_island_count(t) == 5, "NVML: switched GPUs form one island (got %d islands)",
       dtrain_topo_island_count(t));
    dtrain_topo_free(t);

    /* NVML numbers up to NVML_NVLINK_MAX_LINKS (36) links per GPU. */
    fake_start(&m, 8, 2);
    fake_pair(&m, 0, 1, 20);
    fake_finish(&m, NULL);
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 1 && bw_is(t, 0, 1, 500), "NVML: links past the 18th are counted (20 links = 500 GB/s)");
    dtrain_topo_free(t);

    fake_start(&m, 8, 2);
    fake_pair(&m, 0, 1, 2);
    fake_finish(&m, "init = 9");
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 0 && dtrain_topo_link_source(t) == DTRAIN_LINKS_PCIE_ONLY,
       "NVML whose init fails (no driver) is like no NVML");
    dtrain_topo_free(t);

    rc = apply_fake("/nonexistent/libnvidia-ml.so.1", &t, err, sizeof(err));
    ok(rc == 0 && dtrain_topo_link_source(t) == DTRAIN_LINKS_PCIE_ONLY, "no NVML library: not an error");
    dtrain_topo_free(t);

    rc = apply_fake("libm.so.6", &t, err, sizeof(err));
    ok(rc == -1 && strstr(err, "NVML") != NULL, "a library without the NVML functions is an error: %s", err);
    dtrain_topo_free(t);
    unsetenv("FAKE_NVML_CONFIG");
    remove(FAKE_NVML_FILE);
}

/* Multi-node NVLink fabric membership through the fake NVML. */
static void check_fabric(void)
{
    const char *fake = getenv("DTRAIN_FAKE_NVML");
    char err[512] = "", key[DTRAIN_TOPO_DOMAIN_LEN], why[512];
    dtrain_topo *t = NULL;
    struct fake_machine m;
    if (!fake) {
        for (int i = 0; i < 7; i++)
            skip("DTRAIN_FAKE_NVML not set: fake NVML library not built");
        return;
    }
    fake_start(&m, 8, 7);
    fprintf(m.f, "all.fabric_state = 3\nall.fabric_cluster = 6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c\n"
                 "all.fabric_clique = 17\n");
    fake_finish(&m, NULL);
    int rc = apply_fake(fake, &t, err, sizeof(err));
    const struct dtrain_gpu_info *g = t ? dtrain_topo_gpu(t, 5) : NULL;
    ok(rc == 0 && g && g->fabric_state == 3 && g->fabric_clique == 17 &&
           strcmp(g->fabric_cluster, "6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c") == 0,
       "NVML fabric: state, clique id and cluster UUID read per GPU (nvmlDeviceGetGpuFabricInfoV)");
    ok(dtrain_topo_nvlink_domain(t, key, sizeof key, why, sizeof why) == 1 &&
           strcmp(key, "6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c/17") == 0,
       "NVML fabric: the node's domain is %s", key);
    dtrain_topo_free(t);

    fake_start(&m, 8, 7);
    fprintf(m.f, "all.fabric_state = 3\nall.fabric_cluster = 6d1e4a7b0c2f4e0a9b1d3c5e7f9a1b2c\n"
                 "gpu6.fabric_state = 2\n");
    fake_finish(&m, NULL);
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 0 && dtrain_topo_nvlink_domain(t, key, sizeof key, why, sizeof why) == -1 &&
           strstr(why, "0000:f4:00.0") && strstr(why, "in progress"),
       "NVML fabric: a GPU still registering makes no domain: %s", why);
    dtrain_topo_free(t);

    fake_start(&m, 8, 7);
    fprintf(m.f, "all.fabric_state = 3\nall.fabric_cluster = 6d1e4a7b0c2f4e0a9b1d3c5e7f9a1b2c\n"
                 "gpu2.fabric_status = 999\n");
    fake_finish(&m, NULL);
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 0 && dtrain_topo_nvlink_domain(t, key, sizeof key, why, sizeof why) == -1 && strstr(why, "0000:35:00.0") &&
           strstr(why, "registration failed"),
       "NVML fabric: a registration that ended in an error makes no domain: %s", why);
    dtrain_topo_free(t);

    fake_start(&m, 8, 2);
    fake_finish(&m, NULL);
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 0 && dtrain_topo_nvlink_domain(t, key, sizeof key, why, sizeof why) == 0,
       "NVML without fabric support (before Hopper): no domain, not an error");
    dtrain_topo_free(t);

    fake_start(&m, 8, 7);
    fprintf(m.f, "gpu2.mig = 1\ngpu3.mig = 0\n");
    fake_finish(&m, NULL);
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 0 && dtrain_topo_gpu(t, 2)->mig == 1 && dtrain_topo_gpu(t, 3)->mig == 0 && dtrain_topo_gpu(t, 0)->mig == 0,
       "NVML: MIG mode read per GPU (on, off, not supported)");
    {
        const dtrain_topo *nodes[1] = {t};
        struct dtrain_shape shape = {1, 1, 0, 1, 8};
        struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
        dtrain_plan *p = NULL;
        rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_ERR_REFUSED && strstr(err, "0000:35:00.0 has MIG mode on but NVML lists no MIG instance"),
           "a GPU in MIG mode without instances is refused with one line: %s", err);
        dtrain_plan_free(p);
    }
    dtrain_topo_free(t);

    /* MIG instances: GPU 2 (NVLinked to GPU 3) in MIG mode with 3 of them. */
    fake_start(&m, 8, 4);
    fake_pair(&m, 0, 1, 2);
    fake_pair(&m, 2, 3, 2);
    fprintf(m.f, "gpu2.mig = 1\ngpu2.mig_devices = 3\n");
    fake_finish(&m, NULL);
    rc = apply_fake(fake, &t, err, sizeof(err));
    ok(rc == 1 && dtrain_topo_gpu_count(t) == 10, "NVML MIG: 3 instances of GPU 2 are 3 GPUs (10 in all): %d",
       dtrain_topo_gpu_count(t));
    if (dtrain_topo_gpu_count(t) == 10) {
        int mig_ok = 1;
        for (int i = 2; i < 5; i++) {
            const struct dtrain_gpu_info *g = dtrain_topo_gpu(t, i);
            char want[64];
            snprintf(want, sizeof want, "MIG-00000002-0000-5000-8000-%012d", i - 2);
            mig_ok &= strcmp(g->busid, "0000:35:00.0") == 0 && strcmp(g->uuid, want) == 0 && g->partition == i - 2 &&
                      g->partitions == 3 && g->mig == 1;
        }
        ok(mig_ok, "NVML MIG: each instance keeps its GPU's bus id and gets its MIG-<uuid>, in slot order");
        ok(dtrain_topo_bandwidth(t, 0, 1) > 0 && dtrain_topo_bandwidth(t, 2, 5) == 0 && dtrain_topo_bandwidth(t, 2, 3) == 0 &&
               dtrain_topo_link_kind(t, 3, 4) == DTRAIN_LINK_PCIE && strcmp(dtrain_topo_gpu(t, 5)->busid, "0000:36:00.0") == 0,
           "NVML MIG: instances have no NVLink (not to each other, not to GPU 3); GPUs 0-1 keep theirs");
        const dtrain_topo *nodes[1] = {t};
        struct dtrain_shape shape = {1, 1, 0, 1, 10};
        struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
        dtrain_plan *p = NULL;
        rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_OK, "NVML MIG: T=1 places one rank on each GPU and instance: %s", rc ? err : "ok");
        dtrain_plan_free(p);
        p = NULL;
        shape.tp = 2;
        rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_ERR_REFUSED, "NVML MIG: T=2 over MIG instances (no NVLink) refused without allow_pcie: %s",
           err);
        dtrain_plan_free(p);
        p = NULL;
        policy.allow_pcie = 1;
        rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof(err));
        ok(rc == DTRAIN_OK && dtrain_plan_warning(p) != NULL, "NVML MIG: T=2 with allow_pcie placed, with a warning");
        dtrain_plan_free(p);
    } else {
        for (int i = 0; i < 5; i++)
            ok(0, "NVML MIG: no expansion, nothing to check");
    }
    dtrain_topo_free(t);

    /* A saved file standing for this node (the plugin's HWLOC_XMLFILE):
     * fabric from NVML, links still the file's. */
    fake_start(&m, 8, 7);
    fake_pair(&m, 0, 1, 4);
    fprintf(m.f, "all.fabric_state = 3\nall.fabric_cluster = 6d1e4a7b0c2f4e0a9b1d3c5e7f9a1b2c\nall.fabric_clique = 4\n");
    fake_finish(&m, NULL);
    setenv("DTRAIN_NVML_LIBRARY", fake, 1);
    rc = dtrain_topo_load_bounded(fixture_path("g4dnmetal.xml"), DTRAIN_TOPO_LOAD_THIS_NODE, 20000, &t, err,
                                  sizeof(err));
    ok(rc == DTRAIN_OK && dtrain_topo_nvlink_domain(t, key, sizeof key, why, sizeof why) == 1 &&
           strcmp(key, "6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c/4") == 0 &&
           dtrain_topo_link_source(t) == DTRAIN_LINKS_PCIE_ONLY && dtrain_topo_bandwidth(t, 0, 1) == 0,
       "a saved topology of this node gets NVML's fabric (%s) but never its links", rc ? err : key);
    dtrain_topo_free(t);
    t = NULL;
    rc = dtrain_topo_load_bounded(fixture_path("g4dnmetal.xml"), 0, 20000, &t, err, sizeof(err));
    ok(rc == DTRAIN_OK && dtrain_topo_nvlink_domain(t, key, sizeof key, why, sizeof why) == 0,
       "a saved topology of another machine never gets NVML's fabric");
    dtrain_topo_free(t);
    unsetenv("DTRAIN_NVML_LIBRARY");
    unsetenv("FAKE_NVML_CONFIG");
    remove(FAKE_NVML_FILE);
}

static void check_nvlink_table(void)
{
    ok(topo_nvlink_mbps_per_link(1) == 20000 && topo_nvlink_mbps_per_link(2) == 25000 &&
           topo_nvlink_mbps_per_link(6) == 25000 && topo_nvlink_mbps_per_link(7) == 50000 &&
           topo_nvlink_mbps_per_link(0) == 25000,
       "NVLink per-link bandwidth table: v1 20, v2-v6 25, v7 (5.0) 50 GB/s");
}

/* DTRAIN_TOPO_LOAD_CPUS_ONLY (dtrain-launch's CPU-only plan): a saved
 * machine with GPUs loads with the same CPUs and no GPU, and a CPU-only plan
 * on it gives every task the same CPUs as on the full load; live, through
 * HWLOC_XMLFILE and on this machine alike. */
static int same_cpus(const dtrain_topo *a, const dtrain_topo *b)
{
    return a->npus > 0 && a->npus == b->npus && memcmp(a->pus, b->pus, sizeof(int) * (size_t)a->npus) == 0;
}

static int same_cpu_plan(const dtrain_topo *a, const dtrain_topo *b, int K)
{
    struct dtrain_shape shape = {.tp = 1, .pp = 1, .dp = K, .nnodes = 1, .tasks_per_node = K};
    struct dtrain_policy policy = {.cpu_only = 1};
    dtrain_plan *pa = NULL, *pb = NULL;
    char err[256];
    const dtrain_topo *na[1] = {a}, *nb[1] = {b};
    int same = dtrain_plan_place_node(&shape, na, &policy, 0, &pa, err, sizeof err) == DTRAIN_OK &&
               dtrain_plan_place_node(&shape, nb, &policy, 0, &pb, err, sizeof err) == DTRAIN_OK;
    for (int r = 0; same && r < K; r++) {
        const struct dtrain_task_placement *x = dtrain_plan_task(pa, r), *y = dtrain_plan_task(pb, r);
        same = x && y && x->cpulist[0] != '\0' && strcmp(x->cpulist, y->cpulist) == 0;
    }
    dtrain_plan_free(pa);
    dtrain_plan_free(pb);
    return same;
}

static void check_cpus_only(void)
{
    static const char *const files[] = {"dgx-h100.xml", "amd-mi300x-cpx.xml", "g4dnmetal.xml"};
    char err[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        dtrain_topo *full = NULL, *cpus = NULL;
        int rf = dtrain_topo_load_bounded(fixture_path(files[i]), 0, 20000, &full, err, sizeof err);
        int rc = dtrain_topo_load_bounded(fixture_path(files[i]), DTRAIN_TOPO_LOAD_CPUS_ONLY, 20000, &cpus, err,
                                          sizeof err);
        ok(rf == DTRAIN_OK && rc == DTRAIN_OK && dtrain_topo_gpu_count(full) > 0 &&
               dtrain_topo_gpu_count(cpus) == 0 && same_cpus(full, cpus) && same_cpu_plan(full, cpus, 8),
           "%s with CPUS_ONLY: no GPU (full load %d), the same %d CPUs, the same CPU-only plan for 8 tasks%s%s",
           files[i], full ? dtrain_topo_gpu_count(full) : -1, cpus ? cpus->npus : -1, rf || rc ? ": " : "",
           rf || rc ? err : "");
        dtrain_topo_free(full);
        dtrain_topo_free(cpus);
    }

    /* Live: through HWLOC_XMLFILE (the slurmd of a local cluster)... */
    dtrain_topo *full = NULL, *cpus = NULL;
    setenv("HWLOC_XMLFILE", fixture_path("dgx1-v100.xml"), 1);
    int rf = dtrain_topo_load_live(&full, err, sizeof err);
    int rc = dtrain_topo_load_bounded(NULL, DTRAIN_TOPO_LOAD_CPUS_ONLY, 20000, &cpus, err, sizeof err);
    unsetenv("HWLOC_XMLFILE");
    ok(rf == DTRAIN_OK && rc == DTRAIN_OK && dtrain_topo_gpu_count(full) == 8 &&
           dtrain_topo_gpu_count(cpus) == 0 && same_cpus(full, cpus),
       "live CPUS_ONLY load through HWLOC_XMLFILE (DGX-1): no GPU, the same CPUs%s%s", rf || rc ? ": " : "",
       rf || rc ? err : "");
    dtrain_topo_free(full);
    dtrain_topo_free(cpus);
    full = cpus = NULL;
    /* ...and this machine itself. */
    rf = dtrain_topo_load_live(&full, err, sizeof err);
    rc = dtrain_topo_load_bounded(NULL, DTRAIN_TOPO_LOAD_CPUS_ONLY, 20000, &cpus, err, sizeof err);
    ok(rf == DTRAIN_OK && rc == DTRAIN_OK && dtrain_topo_gpu_count(cpus) == 0 && same_cpus(full, cpus),
       "live CPUS_ONLY load of this machine: no GPU, the same %d CPUs as the full load%s%s", cpus ? cpus->npus : -1,
       rf || rc ? ": " : "", rf || rc ? err : "");
    dtrain_topo_free(full);
    dtrain_topo_free(cpus);
}

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_fixture(&cases[i]);
    check_specifics();
    check_subset_and_lookup();
    check_live();
    check_cpus_only();
    check_nvml();
    check_fabric();
    check_nvlink_table();
    return tap_done();
}
