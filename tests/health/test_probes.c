/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health probes against the hardware-boundary stand-ins: the fake
 * NVML library (fake_nvml.c, answers set by a file), a folder tree shaped
 * like /sys/class/infiniband, and saved hwloc topologies; the bounded
 * runner (time bound, crash, stage named); and whole runs (health_run). */
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_bounded.h"
#include "fs.h"
#include "health_test.h"
#include "ib.h"
#include "nvml.h"
#include "run.h"
#include "site_config.h"
#include "tap.h"
#include "topology.h"

static char dir[512];
static char why[512];

/* ------------------------------------------------------------ bounded */
struct answer { int value; };

static void quick_probe(const void *arg, void *out, struct dtrain_stage *stage)
{
    dtrain_stage_set(stage, "adding one");
    ((struct answer *)out)->value = *(const int *)arg + 1;
}

static void hung_probe(const void *arg, void *out, struct dtrain_stage *stage)
{
    (void)arg;
    (void)out;
    dtrain_stage_set(stage, "waiting for %s", "Godot");
    for (;;)
        pause();
}

static void dying_probe(const void *arg, void *out, struct dtrain_stage *stage)
{
    (void)arg;
    (void)out;
    dtrain_stage_set(stage, "reading a register");
    kill(getpid(), SIGTERM);
    for (;;)
        pause();
}

static void test_bounded(void)
{
    struct answer a = {0};
    int in = 41;
    ok(dtrain_run_bounded(quick_probe, &in, &a, sizeof(a), 5000, why, sizeof(why)) == DTRAIN_BOUNDED_OK &&
           a.value == 42,
       "bounded: the child's answer comes back");
    a.value = 7;
    ok(dtrain_run_bounded(hung_probe, &in, &a, sizeof(a), 100, why, sizeof(why)) == DTRAIN_BOUNDED_TIMEOUT &&
           strstr(why, "did not finish within 100 ms (stuck in waiting for Godot)") && a.value == 0,
       "bounded: a hung probe is cut off and its stage named (%s)", why);
    ok(dtrain_run_bounded(dying_probe, &in, &a, sizeof(a), 5000, why, sizeof(why)) == DTRAIN_BOUNDED_FAILED &&
           strstr(why, "crashed with signal 15") && strstr(why, "in reading a register"),
       "bounded: a probe killed by a signal is reported (%s)", why);
}

/* ------------------------------------------------------------ NVML */
static struct health_nvml_facts nv;

/* Probe the fake NVML with the given answers file and queries. */
static void probe_fake(const char *answers, unsigned what, int timeout_ms)
{
    struct health_nvml_request req;
    memset(&req, 0, sizeof(req));
    snprintf(req.library, sizeof(req.library), "%s", fake_nvml_library());
    req.what = what;
    const char *path = write_file(dir, "nvml.conf", "%s", answers);
    setenv("FAKE_NVML_CONFIG", path ? path : "/nonexistent", 1);
    health_nvml_probe(&req, timeout_ms, &nv);
}

static const unsigned all_queries = HEALTH_NVML_ECC | HEALTH_NVML_RETIRED | HEALTH_NVML_XID | HEALTH_NVML_NVLINK |
                                    HEALTH_NVML_MEMORY | HEALTH_NVML_PROCESSES;

static void test_nvml(void)
{
    char answers[1024];
    probe_fake("count = 2\n"
               "all.name = Tesla V100-SXM2-32GB\n"
               "gpu0.busid = 0000:07:00.0\n"
               "gpu1.busid = 0000:8A:00.0\n"
               "gpu1.ecc_uncorrected = 3\n"
               "gpu1.ecc_corrected = 12\n"
               "gpu0.remap_pending = 1\n"
               "gpu1.remap = 0\n"
               "gpu1.retired_sbe = 4\n"
               "gpu1.retired_dbe = 2\n"
               "gpu1.retired_pending = 1\n"
               "gpu0.memory_used = 1073741824\n"
               "all.nvlinks = 6\n"
               "gpu1.nvlink_down = 2,5\n"
               "gpu0.nvlink_recovery = 7\n"
               "gpu1.xid = 79,13\n",
               all_queries, 10000);
    ok(nv.ok && nv.ngpus == 2, "nvml: the fake answers for 2 GPUs (%s)", nv.error);
    ok(strcmp(nv.gpus[0].busid, "0000:07:00.0") == 0 && strcmp(nv.gpus[1].busid, "0000:8a:00.0") == 0,
       "nvml: bus ids normalised to the topology's spelling");
    ok(strcmp(nv.gpus[1].name, "Tesla V100-SXM2-32GB") == 0, "nvml: names");
    ok(nv.gpus[1].ecc_known && nv.gpus[1].ecc_uncorrected == 3 && nv.gpus[1].ecc_corrected == 12,
       "nvml: ECC counts");
    ok(nv.gpus[0].remap_known && nv.gpus[0].remap_pending == 1 && !nv.gpus[0].retired_known,
       "nvml: remapped rows where supported");
    ok(!nv.gpus[1].remap_known && nv.gpus[1].retired_known && nv.gpus[1].retired_sbe == 4 &&
           nv.gpus[1].retired_dbe == 2 && nv.gpus[1].retired_pending,
       "nvml: retired pages where rows are not remapped");
    ok(nv.gpus[0].memory_known && nv.gpus[0].memory_used == 1073741824ULL, "nvml: memory in use");
    ok(nv.gpus[1].nlinks == 6 && !nv.gpus[1].link_active[2] && !nv.gpus[1].link_active[5] && nv.gpus[1].link_active[0],
       "nvml: NVLink states, links 2 and 5 down");
    ok(nv.gpus[0].link_errors_known && nv.gpus[0].link_recovery[3] == 7, "nvml: NVLink error counters");
    ok(nv.gpus[1].xid_known && nv.gpus[1].nxids == 2 && nv.gpus[1].xids[0] == 79 && nv.gpus[0].nxids == 0,
       "nvml: XID events, on the GPU that raised them");

    char self[32] = "";
    FILE *comm = fopen("/proc/self/comm", "r");
    if (comm) {
        if (!fgets(self, sizeof(self), comm))
            self[0] = '\0';
        self[strcspn(self, "\n")] = '\0';
        fclose(comm);
    }
    snprintf(answers, sizeof(answers), "count = 1\ngpu0.processes = %d:1048576,999999:0\n", (int)getpid());
    probe_fake(answers, HEALTH_NVML_PROCESSES, 10000);
    ok(nv.ok && nv.gpus[0].procs_known && nv.gpus[0].nprocs == 2 && nv.gpus[0].procs[0].pid == (unsigned)getpid() &&
           self[0] && strcmp(nv.gpus[0].procs[0].name, self) == 0 && nv.gpus[0].procs[1].name[0] == '\0',
       "nvml: processes, named from /proc (%s)", nv.gpus[0].procs[0].name);

    probe_fake("count = 2\ngpu1.lost = 1\n", all_queries, 10000);
    ok(nv.ok && !nv.gpus[0].lost && nv.gpus[1].lost && strstr(nv.gpus[1].error, "GPU is lost"),
       "nvml: a GPU that fell off the bus");

    probe_fake("count = 2\nfail = nvmlDeviceGetMemoryInfo:999\n", all_queries, 10000);
    ok(nv.ok && !nv.gpus[0].memory_known && nv.gpus[0].ecc_known &&
           strcmp(nv.gpus[1].error, "nvmlDeviceGetMemoryInfo: Unknown Error (NVML error 999)") == 0,
       "nvml: an unexpected error is recorded on the GPU, with the call (%s)", nv.gpus[1].error);
    probe_fake("count = 2\nfail = nvmlDeviceGetComputeRunningProcesses_v3:4\n", all_queries, 10000);
    ok(nv.ok && !nv.gpus[0].procs_known && !nv.gpus[0].error[0] && nv.gpus[0].memory_known,
       "nvml: \"no permission\" leaves the query unanswered, not an error");

    probe_fake("init = 9\n", all_queries, 10000);
    ok(!nv.ok && !nv.probe_failed && strstr(nv.error, "nvmlInit_v2 failed: Driver Not Loaded"),
       "nvml: init failure says why (%s)", nv.error);
    probe_fake("count = 1\nbogus line\n", 0, 10000);
    ok(!nv.ok && strstr(nv.error, "nvmlInit_v2 failed"), "nvml: the fake refuses a malformed answers file");

    probe_fake("count = 4\nhang = nvmlDeviceGetTotalEccErrors\n", all_queries, 300);
    ok(!nv.ok && nv.probe_failed && strstr(nv.error, "NVML did not finish within 300 ms") &&
           strstr(nv.error, "nvmlDeviceGetTotalEccErrors on GPU 0"),
       "nvml: a hung call is cut off and named (%s)", nv.error);
    probe_fake("count = 4\nhang = nvmlInit_v2\n", all_queries, 300);
    ok(nv.probe_failed && strstr(nv.error, "stuck in nvmlInit_v2"), "nvml: a hung nvmlInit_v2 is cut off");
    probe_fake("count = 4\nexit = nvmlInit_v2:0\n", all_queries, 10000);
    ok(!nv.ok && nv.probe_failed && strstr(nv.error, "NVML exited with status 0 before answering") &&
           strstr(nv.error, "nvmlInit_v2"),
       "nvml: an NVML that _exits(0) in init is a failure that says so (%s)", nv.error);
    probe_fake("count = 4\nexit = nvmlInit_v2:3\n", all_queries, 10000);
    ok(!nv.ok && nv.probe_failed && strstr(nv.error, "exited with status 3"), "nvml: one that exits 3 too (%s)",
       nv.error);

    struct health_nvml_request req;
    memset(&req, 0, sizeof(req));
    snprintf(req.library, sizeof(req.library), "%s/no-such-libnvidia-ml.so.1", dir);
    health_nvml_probe(&req, 10000, &nv);
    ok(!nv.ok && !nv.probe_failed && strstr(nv.error, "cannot load NVML") && strstr(nv.error, "no-such-libnvidia-ml"),
       "nvml: a missing library says which");

    char lib[1024];
    unsetenv("DTRAIN_NVML_LIBRARY");
    health_nvml_library("", lib, sizeof(lib));
    ok(strcmp(lib, "libnvidia-ml.so.1") == 0, "nvml library: libnvidia-ml.so.1 by default");
    setenv("DTRAIN_NVML_LIBRARY", "/opt/fake.so", 1);
    health_nvml_library("", lib, sizeof(lib));
    ok(strcmp(lib, "/opt/fake.so") == 0, "nvml library: $DTRAIN_NVML_LIBRARY");
    health_nvml_library("/etc/nvml.so", lib, sizeof(lib));
    ok(strcmp(lib, "/etc/nvml.so") == 0, "nvml library: the config's wins");
    unsetenv("DTRAIN_NVML_LIBRARY");
}

/* ------------------------------------------------------------ topology */
static void test_topology(void)
{
    static struct health_topo_facts t;
    char node_xml[1024];
    snprintf(node_xml, sizeof(node_xml), "%s", fixture("dgx1-v100-gpu5-missing.xml")); /* fixture(): one buffer */
    health_topology_probe(node_xml, fixture("dgx1-v100.xml"), 10000, &t);
    ok(t.node.ok && t.node.ngpus == 7 && t.have_reference && t.reference.ok && t.reference.ngpus == 8,
       "topology: node and reference load (%s%s)", t.node.error, t.reference.error);
    ok(strcmp(t.node.gpus[0].busid, "0000:06:00.0") == 0 && strstr(t.node.gpus[0].model, "V100") &&
           t.node.gpus[0].vendor_id == 0x10de,
       "topology: bus ids, models, vendors");
    ok(t.reference.bandwidth_gbps[0][3] == 50 && t.reference.bandwidth_gbps[0][1] == 25 &&
           t.reference.bandwidth_gbps[0][5] == 0 && t.reference.largest_island == 8,
       "topology: the NVLink matrix (DGX-1 hybrid cube-mesh)");

    setenv("HWLOC_XMLFILE", fixture("hgx-a100-4gpu.xml"), 1);
    health_topology_probe("", "", 10000, &t);
    unsetenv("HWLOC_XMLFILE");
    ok(t.node.ok && t.node.ngpus == 4 && strcmp(t.node.source, "live") == 0 && !t.have_reference,
       "topology: live discovery honours HWLOC_XMLFILE");

    const char *bad = write_file(dir, "broken.xml", "<topology><object type=\"Machine\"");
    health_topology_probe(bad ? bad : "/nonexistent", "", 10000, &t);
    ok(!t.node.ok && strstr(t.node.error, "broken.xml"), "topology: a malformed file fails with its name (%s)",
       t.node.error);
}

/* ------------------------------------------------------------ filesystems */
static void test_fs(void)
{
    struct health_fs_facts f;
    health_fs_probe(dir, 5000, &f);
    ok(f.ok && f.free_bytes > 0 && f.total_bytes >= f.free_bytes, "fs: free space of a folder");
    char path[1200];
    snprintf(path, sizeof(path), "%s/absent", dir);
    health_fs_probe(path, 5000, &f);
    ok(!f.ok && strstr(f.error, "absent: No such file or directory"), "fs: a missing path (%s)", f.error);
    const char *file = write_file(dir, "plain", "x");
    health_fs_probe(file ? file : "/nonexistent", 5000, &f);
    ok(!f.ok && strstr(f.error, "not a directory"), "fs: a file is not a directory");
}

/* ------------------------------------------------------------ InfiniBand */
/* A fake sysfs port: ROOT/class/infiniband/DEV/ports/N/{state,phys_state,rate}. */
static void fake_port(const char *root, const char *dev, int port, const char *state, const char *phys,
                      const char *rate)
{
    char path[1400], cmd[1500];
    snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%d", root, dev, port);
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
    if (system(cmd) != 0)
        diag("cannot create %s", path);
    write_file(path, "state", "%s\n", state);
    write_file(path, "phys_state", "%s\n", phys);
    write_file(path, "rate", "%s\n", rate);
}

static void test_ib(void)
{
    struct health_ib_facts f;
    char root[600];
    snprintf(root, sizeof(root), "%s/sys", dir);
    health_ib_probe(root, NULL, 0, 2000, &f);
    ok(f.ok && f.nports == 0, "ib: no class/infiniband folder: no ports, not an error");
    fake_port(root, "mlx5_1", 1, "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)");
    fake_port(root, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)");
    health_ib_probe(root, NULL, 0, 2000, &f);
    ok(f.ok && f.nports == 2 && strcmp(f.ports[0].device, "mlx5_0") == 0 && strcmp(f.ports[1].device, "mlx5_1") == 0,
       "ib: every port found, in order");
    ok(strcmp(f.ports[0].state, "ACTIVE") == 0 && strcmp(f.ports[0].phys_state, "LinkUp") == 0 &&
           f.ports[0].rate_gbps == 200,
       "ib: state, physical state and rate parsed");
    ok(strcmp(f.ports[1].state, "DOWN") == 0 && strcmp(f.ports[1].phys_state, "Disabled") == 0,
       "ib: a down port");
    struct health_ib_port_spec want[2] = {{"mlx5_0", 1}, {"mlx5_2", 1}};
    health_ib_probe(root, want, 2, 2000, &f);
    ok(f.ok && f.nports == 2 && f.ports[0].present && !f.ports[1].present && strcmp(f.ports[1].device, "mlx5_2") == 0,
       "ib: listed ports, a missing one marked absent");
    /* A FIFO where a sysfs file should be (a fake or damaged tree): skipped
     * at once, not waited on until the probe's 2 s bound (issue 16). */
    char fifo[1400];
    fake_port(root, "mlx5_3", 1, "4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)");
    snprintf(fifo, sizeof fifo, "%s/class/infiniband/mlx5_3/ports/1/state", root);
    int made = unlink(fifo) == 0 && mkfifo(fifo, 0600) == 0;
    struct health_ib_port_spec one[1] = {{"mlx5_3", 1}};
    health_ib_probe(root, one, 1, 2000, &f);
    ok(made && f.ok && f.nports == 1 && f.ports[0].present && f.ports[0].state[0] == '\0' &&
           strcmp(f.ports[0].phys_state, "LinkUp") == 0,
       "ib: a FIFO as a port's state file is skipped without waiting (probe %s, state '%s')",
       f.ok ? "done" : "did not finish", f.ports[0].state);
    unlink(fifo);
}

/* ------------------------------------------------------------ whole runs */
/* health_run, with the failed checks shown as diagnostics. */
static int run_and_show(const struct health_config *cfg, enum health_mode mode, struct health_report *rep)
{
    char err[512];
    int rc = health_run(cfg, mode, rep, err, sizeof(err));
    if (rc != 0)
        diag("health_run: %s", err);
    for (int i = 0; rc == 0 && i < rep->nresults; i++)
        if (rep->results[i].outcome == HEALTH_FAIL)
            diag("%s: %s", health_check_name(rep->results[i].id), rep->results[i].detail);
    return rc;
}

static void test_run(void)
{
    struct health_config cfg;
    struct health_report rep;
    const char *nvml_conf;
    health_config_defaults(&cfg);
    snprintf(cfg.topology, sizeof(cfg.topology), "%s", fixture("dgx1-v100.xml"));
    snprintf(cfg.nvml_library, sizeof(cfg.nvml_library), "%s", fake_nvml_library());
    snprintf(cfg.sysfs_root, sizeof(cfg.sysfs_root), "%s/sys", dir);
    snprintf(cfg.checkpoint_fs.path, sizeof(cfg.checkpoint_fs.path), "%s", dir);
    cfg.checkpoint_fs.min_free_bytes = 1;
    snprintf(cfg.shm.path, sizeof(cfg.shm.path), "%s", dir);
    cfg.shm.min_free_bytes = 1;
    cfg.gpu_count = 8;
    snprintf(cfg.gpu_model, sizeof(cfg.gpu_model), "V100");
    cfg.infiniband.nports = 1;
    snprintf(cfg.infiniband.ports[0].device, sizeof(cfg.infiniband.ports[0].device), "mlx5_0");
    cfg.infiniband.ports[0].port = 1;
    const char *healthy = "count = 8\nall.name = Tesla V100-SXM2-32GB\n"
                          "gpu0.busid = 0000:06:00.0\ngpu1.busid = 0000:07:00.0\ngpu2.busid = 0000:0a:00.0\n"
                          "gpu3.busid = 0000:0b:00.0\ngpu4.busid = 0000:85:00.0\ngpu5.busid = 0000:86:00.0\n"
                          "gpu6.busid = 0000:89:00.0\ngpu7.busid = 0000:8a:00.0\n";
    nvml_conf = write_file(dir, "run.conf", "%s", healthy);
    setenv("FAKE_NVML_CONFIG", nvml_conf ? nvml_conf : "/nonexistent", 1);
    int rc = run_and_show(&cfg, HEALTH_MODE_PROLOG, &rep);
    ok(rc == 0 && rep.failed == 0 && rep.nresults == HEALTH_CHECK_COUNT - 1,
       "run: a healthy node passes the prolog (%d failed)", rep.failed);
    ok(rep.topology_ms >= 0 && rep.nvml_ms >= 0 && rep.filesystem_ms >= 0 && rep.infiniband_ms >= 0 &&
           rep.total_ms >= rep.nvml_ms,
       "run: every probe's time is measured");

    write_file(dir, "run.conf", "%sgpu3.xid = 79\n", healthy);
    rc = run_and_show(&cfg, HEALTH_MODE_CHECK, &rep);
    ok(rc == 0 && rep.failed == 1 && rep.nresults == HEALTH_CHECK_COUNT - 3,
       "run: check mode runs its checks and finds the XID");

    write_file(dir, "run.conf", "%sgpu2.processes = 31337:1048576\n", healthy);
    cfg.gpu_processes_grace_ms = 300;
    rc = run_and_show(&cfg, HEALTH_MODE_EPILOG, &rep);
    ok(rc == 0 && rep.failed == 1 && rep.results[9].id == HEALTH_CHECK_GPU_PROCESSES &&
           rep.results[9].outcome == HEALTH_FAIL && strstr(rep.results[9].detail, "pid 31337"),
       "run: a process that stays past the grace period fails the epilog");
    rc = run_and_show(&cfg, HEALTH_MODE_PROLOG, &rep);
    ok(rc == 0 && rep.failed == 0, "run: the same process does not count in the prolog");

    write_file(dir, "run.conf", "%shang = nvmlDeviceGetMemoryInfo\n", healthy);
    cfg.timeout_ms.nvml = 300;
    rc = run_and_show(&cfg, HEALTH_MODE_PROLOG, &rep);
    ok(rc == 0 && rep.failed == 1 && rep.results[3].id == HEALTH_CHECK_NVML &&
           strstr(rep.results[3].detail, "nvmlDeviceGetMemoryInfo on GPU 0"),
       "run: a hung NVML call fails the run with one line naming it");

    for (int i = 0; i < HEALTH_CHECK_COUNT; i++)
        cfg.enabled[i] = 0;
    cfg.enabled[HEALTH_CHECK_SHM] = 1;
    rc = run_and_show(&cfg, HEALTH_MODE_PROLOG, &rep);
    ok(rc == 0 && rep.nresults == 1 && rep.nvml_ms < 0 && rep.topology_ms < 0,
       "run: turned-off checks do not probe");
    unsetenv("FAKE_NVML_CONFIG");
}

int main(void)
{
    if (!scratch_dir(dir, sizeof(dir))) {
        printf("Bail out! cannot create a scratch folder\n");
        return 1;
    }
    test_bounded();
    if (fake_nvml_library()) {
        test_nvml();
    } else {
        skip("FAKE_NVML_LIB not built: NVML probes not run");
    }
    test_topology();
    test_fs();
    test_ib();
    if (fake_nvml_library())
        test_run();
    else
        skip("FAKE_NVML_LIB not built: whole runs not run");
    scratch_remove(dir);
    return tap_done();
}
