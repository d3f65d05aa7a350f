/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health checks, judged on facts built here (no machine involved):
 * every check's pass, fail and skip, the mode table, one line per fault
 * when a probe could not look, and the drain reason. */
#include <string.h>

#include "checks.h"
#include "imex.h"
#include "report.h"
#include "site_config.h"
#include "tap.h"

static struct health_config cfg;
static struct health_topo_facts topo;
static struct health_nvml_facts nvml;
static struct health_fs_facts fs;
static struct health_ib_facts ib;
static struct health_facts facts;
static struct health_result res;

/* A healthy 8-GPU node: NVLink all-to-all at 450 GB/s, NVML agrees. */
static void healthy_node(void)
{
    health_config_defaults(&cfg);
    cfg.gpu_count = 8;
    snprintf(cfg.gpu_model, sizeof(cfg.gpu_model), "h100");
    memset(&topo, 0, sizeof(topo));
    memset(&nvml, 0, sizeof(nvml));
    topo.node.ok = 1;
    topo.node.ngpus = 8;
    topo.node.largest_island = 8;
    nvml.ok = 1;
    nvml.ngpus = 8;
    for (int a = 0; a < 8; a++) {
        snprintf(topo.node.gpus[a].busid, sizeof(topo.node.gpus[a].busid), "0000:%02x:00.0", 0x18 + a);
        snprintf(topo.node.gpus[a].model, sizeof(topo.node.gpus[a].model), "NVIDIA H100 80GB HBM3");
        topo.node.gpus[a].vendor_id = 0x10de;
        for (int b = 0; b < 8; b++)
            topo.node.bandwidth_gbps[a][b] = a == b ? 0 : 450;
        struct health_nvml_gpu *g = &nvml.gpus[a];
        snprintf(g->busid, sizeof(g->busid), "%s", topo.node.gpus[a].busid);
        snprintf(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
        g->ecc_known = g->remap_known = g->memory_known = g->procs_known = g->xid_known = 1;
        g->link_errors_known = 1;
        g->nlinks = 18;
        memset(g->link_active, 1, 18);
        g->memory_total = 80ULL << 30;
        g->memory_used = 500ULL << 20;
    }
    memset(&fs, 0, sizeof(fs));
    fs.ok = 1;
    fs.free_bytes = 500ULL << 30;
    memset(&ib, 0, sizeof(ib));
    ib.ok = 1;
    facts = (struct health_facts){.topo = &topo, .nvml = &nvml, .checkpoint_fs = &fs, .shm = &fs, .ib = &ib};
}

/* Judge one check in the prolog; the outcome is `want` and the detail
 * contains `frag` (when given). */
static int judged(enum health_check_id id, enum health_outcome want, const char *frag)
{
    health_check_judge(id, &cfg, HEALTH_MODE_PROLOG, &facts, &res);
    if (res.outcome != want || (frag && !strstr(res.detail, frag))) {
        diag("%s: %s: %s", health_check_name(id), health_outcome_name(res.outcome), res.detail);
        return 0;
    }
    return 1;
}

static void test_modes(void)
{
    ok(health_check_in_mode(HEALTH_CHECK_GPU_PROCESSES, HEALTH_MODE_EPILOG) &&
           !health_check_in_mode(HEALTH_CHECK_GPU_PROCESSES, HEALTH_MODE_PROLOG) &&
           !health_check_in_mode(HEALTH_CHECK_GPU_PROCESSES, HEALTH_MODE_CHECK),
       "gpu_processes runs in the epilog only");
    ok(!health_check_in_mode(HEALTH_CHECK_GPU_MEMORY, HEALTH_MODE_CHECK) &&
           !health_check_in_mode(HEALTH_CHECK_SHM, HEALTH_MODE_CHECK) &&
           health_check_in_mode(HEALTH_CHECK_GPU_MEMORY, HEALTH_MODE_PROLOG),
       "gpu_memory and shm do not run while jobs may own them (check mode)");
    int everywhere = 1;
    enum health_check_id all[] = {HEALTH_CHECK_GPU_COUNT, HEALTH_CHECK_NVLINK, HEALTH_CHECK_ECC, HEALTH_CHECK_XID,
                                  HEALTH_CHECK_INFINIBAND, HEALTH_CHECK_CHECKPOINT_FS};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        for (int m = HEALTH_MODE_PROLOG; m <= HEALTH_MODE_CHECK; m++)
            everywhere &= health_check_in_mode(all[i], (enum health_mode)m);
    ok(everywhere, "hardware checks run in every mode");
    healthy_node();
    cfg.enabled[HEALTH_CHECK_ECC] = 0;
    ok(!health_check_wanted(&cfg, HEALTH_CHECK_ECC, HEALTH_MODE_PROLOG), "\"enabled\": false: not wanted");
}

static void test_gpu_count(void)
{
    healthy_node();
    ok(judged(HEALTH_CHECK_GPU_COUNT, HEALTH_PASS, "8 GPUs as expected"), "gpu_count: 8 of 8 passes");
    topo.node.ngpus = 7;
    ok(judged(HEALTH_CHECK_GPU_COUNT, HEALTH_FAIL, "7 GPUs in the topology, 8 expected"), "gpu_count: 7 of 8 fails");
    topo.have_reference = 1;
    topo.reference = topo.node;
    topo.reference.ngpus = 8;
    snprintf(topo.reference.gpus[7].busid, sizeof(topo.reference.gpus[7].busid), "0000:8a:00.0");
    ok(judged(HEALTH_CHECK_GPU_COUNT, HEALTH_FAIL, "(missing 0000:8a:00.0)"),
       "gpu_count: the missing GPU is named from the reference");
    healthy_node();
    nvml.ngpus = 7;
    ok(judged(HEALTH_CHECK_GPU_COUNT, HEALTH_FAIL, "NVML sees 7 GPUs, 8 expected"), "gpu_count: NVML short of one");
    cfg.gpu_count = -1;
    ok(judged(HEALTH_CHECK_GPU_COUNT, HEALTH_FAIL, "the topology shows 8 GPUs but NVML 7"),
       "gpu_count without gpus.count: topology and NVML must agree");
    nvml.ok = 0;
    ok(judged(HEALTH_CHECK_GPU_COUNT, HEALTH_SKIP, "gpus.count not set"),
       "gpu_count without gpus.count nor NVML: skipped");
    healthy_node();
    topo.node.gpus[3].vendor_id = 0x1002;
    cfg.gpu_count = -1;
    ok(health_expected_gpus(&cfg, &facts) == 7, "without gpus.count the topology's NVIDIA GPUs are expected");
}

static void test_topology_unavailable(void)
{
    healthy_node();
    topo.node.ok = 0;
    snprintf(topo.node.error, sizeof(topo.node.error), "topology /x.xml: did not finish within 10 ms");
    ok(judged(HEALTH_CHECK_GPU_COUNT, HEALTH_FAIL, "did not finish within 10 ms"),
       "no topology: the first check needing it fails with the reason");
    ok(judged(HEALTH_CHECK_GPU_MODEL, HEALTH_PASS, NULL),
       "no topology: gpu_model falls back to NVML's names");
    cfg.nvlink.min_bandwidth_gbps = 100;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_SKIP, "topology unavailable (see gpu_count)"),
       "no topology: later checks are skipped, pointing at the one that failed");
    cfg.enabled[HEALTH_CHECK_GPU_COUNT] = 0;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "did not finish"),
       "no topology and gpu_count off: nvlink reports it");
}

static void test_gpu_model(void)
{
    healthy_node();
    ok(judged(HEALTH_CHECK_GPU_MODEL, HEALTH_PASS, "8 GPUs are 'h100'"), "gpu_model: case-insensitive substring");
    snprintf(nvml.gpus[2].name, sizeof(nvml.gpus[2].name), "Tesla T4");
    ok(judged(HEALTH_CHECK_GPU_MODEL, HEALTH_FAIL, "GPU 0000:1a:00.0 is 'Tesla T4', not 'h100'"),
       "gpu_model: NVML's name is used and a wrong model named");
    healthy_node();
    nvml.ok = 0;
    topo.node.gpus[1].model[0] = '\0';
    ok(judged(HEALTH_CHECK_GPU_MODEL, HEALTH_FAIL, "GPU 0000:19:00.0: model unknown"),
       "gpu_model: an unknown model fails");
    cfg.gpu_model[0] = '\0';
    ok(judged(HEALTH_CHECK_GPU_MODEL, HEALTH_SKIP, "gpus.model not set"), "gpu_model: skipped without gpus.model");
}

static void test_nvlink(void)
{
    healthy_node();
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_SKIP, "no NVLink expectations"), "nvlink: nothing expected, skipped");
    cfg.nvlink.min_bandwidth_gbps = 450;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_PASS, "NVLink as expected"), "nvlink: 450 GB/s everywhere passes");
    for (int b = 0; b < 8; b++)
        if (b != 3)
            topo.node.bandwidth_gbps[3][b] = topo.node.bandwidth_gbps[b][3] = 400;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "GPU 0000:1b:00.0: NVLink to 7 GPUs degraded (400 GB/s, 450 expected)"),
       "nvlink: one degraded GPU is one note naming it");
    healthy_node();
    cfg.nvlink.min_bandwidth_gbps = 450;
    topo.node.bandwidth_gbps[0][5] = topo.node.bandwidth_gbps[5][0] = 0;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "NVLink 0000:18:00.0 <-> 0000:1d:00.0 down (0 GB/s, 450 expected)"),
       "nvlink: a single pair down is named as a pair");

    healthy_node();
    cfg.nvlink.reference[0] = '/';
    topo.have_reference = 1;
    topo.reference = topo.node;
    for (int b = 0; b < 8; b++)
        if (b != 3)
            topo.node.bandwidth_gbps[3][b] = topo.node.bandwidth_gbps[b][3] = 400;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "degraded (400 GB/s, 450 expected)"),
       "nvlink: below the reference topology fails");
    cfg.nvlink.tolerance_percent = 12;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_PASS, NULL), "nvlink: within tolerance_percent of the reference passes");
    topo.node.ngpus = 7;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "GPU 0000:1f:00.0 of the reference is missing"),
       "nvlink: a reference GPU the node lacks");
    topo.reference.ok = 0;
    snprintf(topo.reference.error, sizeof(topo.reference.error), "topology /ref.xml: malformed");
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "/ref.xml: malformed"), "nvlink: an unreadable reference fails");

    healthy_node();
    cfg.nvlink.min_largest_island = 8;
    topo.node.largest_island = 4;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "the largest NVLink island has 4 GPUs, 8 expected"),
       "nvlink: island smaller than expected");
    healthy_node();
    cfg.nvlink.min_active_links = 18;
    nvml.gpus[6].link_active[4] = nvml.gpus[6].link_active[9] = 0;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_FAIL, "GPU 0000:1e:00.0 has 16 NVLinks active, 18 expected"),
       "nvlink: inactive links from NVML");
    nvml.ok = 0;
    ok(judged(HEALTH_CHECK_NVLINK, HEALTH_SKIP, "NVML unavailable"), "nvlink: active links only, no NVML: skipped");
}

static void test_nvml(void)
{
    healthy_node();
    ok(judged(HEALTH_CHECK_NVML, HEALTH_PASS, "NVML answers for 8 GPUs"), "nvml: answers");
    nvml.ok = 0;
    snprintf(nvml.error, sizeof(nvml.error), "cannot load NVML: libnvidia-ml.so.1: cannot open shared object file");
    ok(judged(HEALTH_CHECK_NVML, HEALTH_FAIL, "the node should have 8 GPUs but NVML is unusable: cannot load NVML"),
       "nvml: GPUs declared but no NVML fails with the reason");
    ok(judged(HEALTH_CHECK_ECC, HEALTH_SKIP, "NVML unavailable (see the nvml check)") &&
           judged(HEALTH_CHECK_XID, HEALTH_SKIP, NULL) && judged(HEALTH_CHECK_GPU_MEMORY, HEALTH_SKIP, NULL),
       "nvml: the other NVML checks are skipped, one line for one fault");
    cfg.gpu_count = 0;
    ok(judged(HEALTH_CHECK_NVML, HEALTH_SKIP, "no GPUs expected and no NVML"), "nvml: no GPUs, no NVML: skipped");
    nvml.probe_failed = 1;
    snprintf(nvml.error, sizeof(nvml.error), "NVML did not finish within 500 ms (stuck in nvmlInit_v2)");
    ok(judged(HEALTH_CHECK_NVML, HEALTH_FAIL, "stuck in nvmlInit_v2"), "nvml: a hung NVML always fails");
    healthy_node();
    nvml.gpus[4].lost = 1;
    ok(judged(HEALTH_CHECK_NVML, HEALTH_FAIL, "GPU 0000:1c:00.0 has fallen off the bus"), "nvml: a lost GPU");
    healthy_node();
    snprintf(nvml.gpus[0].error, sizeof(nvml.gpus[0].error), "nvmlDeviceGetMemoryInfo: Unknown Error (NVML error 999)");
    ok(judged(HEALTH_CHECK_NVML, HEALTH_FAIL, "GPU 0000:18:00.0: nvmlDeviceGetMemoryInfo: Unknown Error"),
       "nvml: an unexpected NVML error on a GPU");
}

static void test_nvml_health(void)
{
    healthy_node();
    ok(judged(HEALTH_CHECK_ECC, HEALTH_PASS, NULL), "ecc: zero counts pass");
    nvml.gpus[1].ecc_uncorrected = 2;
    ok(judged(HEALTH_CHECK_ECC, HEALTH_FAIL, "GPU 0000:19:00.0: 2 uncorrected ECC errors (volatile; at most 0 allowed)"),
       "ecc: uncorrected errors fail");
    healthy_node();
    nvml.gpus[1].ecc_corrected = 5000;
    ok(judged(HEALTH_CHECK_ECC, HEALTH_PASS, NULL), "ecc: corrected errors unlimited by default");
    cfg.ecc.max_corrected = 100;
    ok(judged(HEALTH_CHECK_ECC, HEALTH_FAIL, "5000 corrected ECC errors"), "ecc: corrected above a set limit");
    for (int g = 0; g < 8; g++)
        nvml.gpus[g].ecc_known = 0;
    ok(judged(HEALTH_CHECK_ECC, HEALTH_SKIP, "ECC is off or not supported"), "ecc: not supported anywhere: skipped");

    healthy_node();
    ok(judged(HEALTH_CHECK_RETIRED_MEMORY, HEALTH_PASS, NULL), "retired_memory: clean rows pass");
    nvml.gpus[2].remap_pending = 1;
    ok(judged(HEALTH_CHECK_RETIRED_MEMORY, HEALTH_FAIL, "row remapping pending (reset the GPU)"),
       "retired_memory: pending remap fails");
    nvml.gpus[2].remap_pending = 0;
    nvml.gpus[2].remap_failed = 1;
    ok(judged(HEALTH_CHECK_RETIRED_MEMORY, HEALTH_FAIL, "a row remapping failed"), "retired_memory: failed remap");
    healthy_node();
    nvml.gpus[0].remap_known = 0;
    nvml.gpus[0].retired_known = 1;
    nvml.gpus[0].retired_sbe = 40;
    nvml.gpus[0].retired_dbe = 21;
    ok(judged(HEALTH_CHECK_RETIRED_MEMORY, HEALTH_FAIL, "GPU 0000:18:00.0: 61 retired pages (at most 60)"),
       "retired_memory: too many retired pages (older GPUs)");
    nvml.gpus[0].retired_sbe = 1;
    nvml.gpus[0].retired_pending = 1;
    ok(judged(HEALTH_CHECK_RETIRED_MEMORY, HEALTH_FAIL, "pages pending retirement"),
       "retired_memory: pages pending retirement");

    healthy_node();
    ok(judged(HEALTH_CHECK_XID, HEALTH_PASS, "no XID events"), "xid: none passes");
    nvml.gpus[5].nxids = 2;
    nvml.gpus[5].xids[0] = 13;
    nvml.gpus[5].xids[1] = 79;
    ok(judged(HEALTH_CHECK_XID, HEALTH_FAIL, "GPU 0000:1d:00.0: XID 79") && !strstr(res.detail, "XID 13"),
       "xid: XID 79 fails, the ignored XID 13 is not reported");
    nvml.gpus[5].nxids = 1;
    ok(judged(HEALTH_CHECK_XID, HEALTH_PASS, "ignored"), "xid: only ignored XIDs pass");
    for (int g = 0; g < 8; g++)
        nvml.gpus[g].xid_known = 0;
    ok(judged(HEALTH_CHECK_XID, HEALTH_SKIP, NULL), "xid: no GPU supports events: skipped");

    healthy_node();
    ok(judged(HEALTH_CHECK_NVLINK_ERRORS, HEALTH_PASS, "on 144 links"), "nvlink_errors: zero counters pass");
    nvml.gpus[7].link_replay[3] = 100000;
    ok(judged(HEALTH_CHECK_NVLINK_ERRORS, HEALTH_PASS, NULL), "nvlink_errors: replays unlimited by default");
    nvml.gpus[7].link_recovery[3] = 1;
    ok(judged(HEALTH_CHECK_NVLINK_ERRORS, HEALTH_FAIL, "GPU 0000:1f:00.0 NVLink 3: 1 recovery errors (at most 0)"),
       "nvlink_errors: a recovery error fails");

    healthy_node();
    ok(judged(HEALTH_CHECK_GPU_MEMORY, HEALTH_PASS, "below 2.0 GiB"), "gpu_memory: driver reserve passes");
    nvml.gpus[3].memory_used = 30ULL << 30;
    ok(judged(HEALTH_CHECK_GPU_MEMORY, HEALTH_FAIL, "GPU 0000:1b:00.0: 30.0 GiB of memory in use (at most 2.0 GiB)"),
       "gpu_memory: memory held fails");

    healthy_node();
    ok(judged(HEALTH_CHECK_GPU_PROCESSES, HEALTH_PASS, "no processes on 8 GPUs"), "gpu_processes: none passes");
    nvml.gpus[0].nprocs = 1;
    nvml.gpus[0].procs[0].pid = 4242;
    snprintf(nvml.gpus[0].procs[0].name, sizeof(nvml.gpus[0].procs[0].name), "python3");
    ok(judged(HEALTH_CHECK_GPU_PROCESSES, HEALTH_FAIL, "GPU 0000:18:00.0 still runs 1 process after the job: pid 4242 (python3)"),
       "gpu_processes: a leftover process is named");
}

static void test_filesystems_and_ib(void)
{
    healthy_node();
    ok(judged(HEALTH_CHECK_CHECKPOINT_FS, HEALTH_SKIP, "no checkpoint path"), "checkpoint_fs: no path: skipped");
    snprintf(cfg.checkpoint_fs.path, sizeof(cfg.checkpoint_fs.path), "/ckpt");
    cfg.checkpoint_fs.min_free_bytes = 1LL << 40;
    ok(judged(HEALTH_CHECK_CHECKPOINT_FS, HEALTH_FAIL, "only 500.0 GiB free on /ckpt (1.0 TiB checkpoint needed)"),
       "checkpoint_fs: too little free space");
    cfg.checkpoint_fs.min_free_bytes = 1LL << 30;
    ok(judged(HEALTH_CHECK_CHECKPOINT_FS, HEALTH_PASS, "500.0 GiB free on /ckpt"), "checkpoint_fs: enough space");
    fs.ok = 0;
    snprintf(fs.error, sizeof(fs.error), "/ckpt: did not finish within 5000 ms (stuck in statvfs(/ckpt))");
    ok(judged(HEALTH_CHECK_CHECKPOINT_FS, HEALTH_FAIL, "checkpoint: /ckpt: did not finish"),
       "checkpoint_fs: a hung filesystem fails");
    ok(judged(HEALTH_CHECK_SHM, HEALTH_FAIL, "shm: /ckpt"), "shm: uses the same judgement");

    healthy_node();
    ok(judged(HEALTH_CHECK_INFINIBAND, HEALTH_SKIP, "no InfiniBand ports"), "infiniband: none: skipped");
    ib.nports = 2;
    snprintf(ib.ports[0].device, sizeof(ib.ports[0].device), "mlx5_0");
    ib.ports[0].port = 1;
    ib.ports[0].present = 1;
    snprintf(ib.ports[0].state, sizeof(ib.ports[0].state), "ACTIVE");
    ib.ports[0].rate_gbps = 200;
    ib.ports[1] = ib.ports[0];
    snprintf(ib.ports[1].device, sizeof(ib.ports[1].device), "mlx5_1");
    ok(judged(HEALTH_CHECK_INFINIBAND, HEALTH_PASS, "2 InfiniBand ports ACTIVE"), "infiniband: active ports pass");
    snprintf(ib.ports[1].state, sizeof(ib.ports[1].state), "DOWN");
    snprintf(ib.ports[1].phys_state, sizeof(ib.ports[1].phys_state), "Polling");
    ok(judged(HEALTH_CHECK_INFINIBAND, HEALTH_FAIL, "mlx5_1 port 1 is DOWN (physical state Polling)"),
       "infiniband: a down port fails");
    ib.ports[1].present = 0;
    ok(judged(HEALTH_CHECK_INFINIBAND, HEALTH_FAIL, "mlx5_1 port 1 not found under /sys/class/infiniband"),
       "infiniband: an expected port that is missing");
    ib.ports[1] = ib.ports[0];
    cfg.infiniband.min_rate_gbps = 400;
    ok(judged(HEALTH_CHECK_INFINIBAND, HEALTH_FAIL, "runs at 200 Gb/s, 400 expected"), "infiniband: slow port");
    ib.ok = 0;
    snprintf(ib.error, sizeof(ib.error), "InfiniBand sysfs did not finish");
    ok(judged(HEALTH_CHECK_INFINIBAND, HEALTH_FAIL, "did not finish"), "infiniband: probe failure fails");
}

static void test_imex(void)
{
    static struct health_imex_facts imex;
    healthy_node();
    ok(health_check_in_mode(HEALTH_CHECK_IMEX, HEALTH_MODE_PROLOG) &&
           health_check_in_mode(HEALTH_CHECK_IMEX, HEALTH_MODE_EPILOG) &&
           health_check_in_mode(HEALTH_CHECK_IMEX, HEALTH_MODE_CHECK) && cfg.enabled[HEALTH_CHECK_IMEX] &&
           !cfg.imex.always && strcmp(cfg.imex.ctl, "/usr/bin/nvidia-imex-ctl") == 0,
       "imex: every mode, on by default, only on fabric nodes, /usr/bin/nvidia-imex-ctl");
    ok(!health_imex_node_in_domain(&facts) &&
           judged(HEALTH_CHECK_IMEX, HEALTH_SKIP, "no GPU reports a multi-node NVLink fabric"),
       "imex: an ordinary node (no GPU on a fabric): skipped");
    nvml.ok = 0;
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_SKIP, "NVML cannot say"), "imex: NVML unusable: skipped (nvml fails)");
    nvml.ok = 1;
    nvml.gpus[5].fabric = 1;
    ok(health_imex_node_in_domain(&facts) && judged(HEALTH_CHECK_IMEX, HEALTH_SKIP, "not probed"),
       "imex: a GPU on a fabric: the node is in a domain; nothing probed: skipped");
    memset(&imex, 0, sizeof(imex));
    facts.imex = &imex;
    imex.ok = 1;
    snprintf(imex.output, sizeof(imex.output), "READY");
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_PASS, "IMEX daemon READY (nvidia-imex-ctl -q)"), "imex: READY passes");
    snprintf(imex.output, sizeof(imex.output), "WAITING_FOR_PEERS");
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_FAIL, "IMEX daemon WAITING_FOR_PEERS, not READY"),
       "imex: a daemon still waiting for its peers fails, naming the state");
    imex.exit_status = 1;
    snprintf(imex.output, sizeof(imex.output), "READY");
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_FAIL, "not answering (nvidia-imex-ctl -q exit 1: READY)"),
       "imex: READY with a failing exit is no answer");
    snprintf(imex.output, sizeof(imex.output), "connect: Connection refused");
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_FAIL, "exit 1: connect: Connection refused): start it (systemctl start "
                                              "nvidia-imex) with IMEX_CMD_ENABLED=1"),
       "imex: a daemon that does not answer fails, naming the fix");
    imex.exit_status = 0;
    snprintf(imex.output, sizeof(imex.output), "Ready!");
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_FAIL, "not answering (nvidia-imex-ctl -q exit 0: Ready!)"),
       "imex: an answer that is no state word fails");
    imex.ok = 0;
    snprintf(imex.error, sizeof(imex.error), "/usr/bin/nvidia-imex-ctl -q did not finish within 5000 ms");
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_FAIL, "IMEX daemon state unknown: /usr/bin/nvidia-imex-ctl -q did not finish"),
       "imex: a hung control program fails");
    nvml.gpus[5].fabric = 0;
    cfg.imex.always = 1;
    ok(judged(HEALTH_CHECK_IMEX, HEALTH_FAIL, "state unknown"), "imex: \"always\": judged on an ordinary node too");
    ok(health_imex_known_state("READY") && health_imex_known_state("INIT_GPU") && !health_imex_known_state("ready") &&
           !health_imex_known_state(""),
       "imex: the state words NVIDIA's tools name");
}

static void test_reason(void)
{
    struct health_report rep;
    char reason[256];
    memset(&rep, 0, sizeof(rep));
    rep.nresults = 3;
    rep.results[0] = (struct health_result){.id = HEALTH_CHECK_GPU_COUNT, .outcome = HEALTH_PASS};
    rep.results[1] = (struct health_result){.id = HEALTH_CHECK_XID, .outcome = HEALTH_FAIL};
    snprintf(rep.results[1].detail, sizeof(rep.results[1].detail), "GPU 0000:07:00.0: XID 79");
    rep.results[2] = (struct health_result){.id = HEALTH_CHECK_ECC, .outcome = HEALTH_FAIL};
    rep.failed = 1;
    health_reason(&rep, reason, sizeof(reason));
    ok(strcmp(reason, "dtrain: xid: GPU 0000:07:00.0: XID 79") == 0, "reason: 'dtrain: CHECK: DETAIL' (%s)", reason);
    rep.failed = 2;
    health_reason(&rep, reason, sizeof(reason));
    ok(strcmp(reason, "dtrain: xid: GPU 0000:07:00.0: XID 79 (+1 more)") == 0, "reason: other failures counted");
    memset(rep.results[1].detail, 'x', sizeof(rep.results[1].detail) - 1);
    rep.results[1].detail[sizeof(rep.results[1].detail) - 1] = '\0';
    health_reason(&rep, reason, sizeof(reason));
    ok(strlen(reason) == sizeof(reason) - 1 && strstr(reason, "x (+1 more)"), "reason: a long detail is cut, the tail kept");
    snprintf(rep.results[1].detail, sizeof(rep.results[1].detail), "port is DO\033[2JWN\001\x7f\xc3\xa9");
    health_reason(&rep, reason, sizeof(reason));
    ok(strcmp(reason, "dtrain: xid: port is DO?[2JWN???? (+1 more)") == 0,
       "reason: control bytes and non-ASCII from the machine become '?' (%s)", reason);

    /* Many problems in one check: the detail stays bounded and says how many were left out. */
    healthy_node();
    for (int g = 0; g < 8; g++)
        nvml.gpus[g].ecc_uncorrected = 1000000 + (unsigned long long)g;
    health_check_judge(HEALTH_CHECK_ECC, &cfg, HEALTH_MODE_PROLOG, &facts, &res);
    ok(res.outcome == HEALTH_FAIL && strstr(res.detail, "more)") && strlen(res.detail) < sizeof(res.detail),
       "a check with many problems lists what fits and counts the rest");
}

int main(void)
{
    test_modes();
    test_gpu_count();
    test_topology_unavailable();
    test_gpu_model();
    test_nvlink();
    test_nvml();
    test_nvml_health();
    test_filesystems_and_ib();
    test_imex();
    test_reason();
    return tap_done();
}
