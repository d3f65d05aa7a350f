/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health site config: defaults, every key, and the one-line errors
 * for unknown keys, wrong types, bad values, unreadable files and
 * malformed JSON. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "site_config.h"
#include "health_test.h"
#include "tap.h"

static char dir[4096];
static char err[1024];
static struct health_config cfg;

/* Write the JSON text to a file and load it for node "node7". */
static int load_text(const char *json)
{
    const char *path = write_file(dir, "health.json", "%s", json);
    err[0] = '\0';
    return path ? health_config_load(path, "node7", &cfg, err, sizeof(err)) : -2;
}

/* The load fails and the message contains every given fragment. */
static int refused(const char *json, const char *frag1, const char *frag2)
{
    int rc = load_text(json);
    if (rc != -1 || !strstr(err, frag1) || (frag2 && !strstr(err, frag2)) || strchr(err, '\n')) {
        diag("load gave %d, message: %s", rc, err);
        return 0;
    }
    return 1;
}

static void test_defaults(void)
{
    ok(load_text("{}") == 0, "an empty object is a valid config");
    int all_on = 1;
    for (int i = 0; i < HEALTH_CHECK_COUNT; i++)
        all_on &= cfg.enabled[i] == 1;
    ok(all_on, "every check is on by default");
    ok(cfg.gpu_count == -1 && cfg.gpu_model[0] == '\0' && cfg.topology[0] == '\0',
       "no GPU expectations and the live topology by default");
    ok(strcmp(cfg.sysfs_root, "/sys") == 0 && strcmp(cfg.shm.path, "/dev/shm") == 0 && cfg.shm.min_free_bytes == (1LL << 30),
       "sysfs /sys, /dev/shm needs 1 GiB free by default");
    ok(cfg.ecc.max_uncorrected == 0 && cfg.ecc.max_corrected == HEALTH_NO_LIMIT && cfg.ecc.aggregate == 0,
       "ECC: no uncorrected error allowed, corrected ones unlimited, volatile counters");
    ok(cfg.xid.nignore == 4 && cfg.xid.ignore[0] == 13 && cfg.xid.ignore[3] == 45,
       "XIDs 13, 31, 43, 45 (application faults) are ignored by default");
    ok(cfg.timeout_ms.nvml > 0 && cfg.timeout_ms.topology > 0 && cfg.timeout_ms.filesystem > 0 &&
           cfg.timeout_ms.infiniband > 0 && cfg.timeout_ms.drain > 0,
       "every probe has a time bound by default");
}

static void test_every_key(void)
{
    char json[16384];
    int len = snprintf(json, sizeof(json),
             "{\"topology\": \"%s/%%n.xml\", \"sysfs_root\": \"%s/sys\", \"nvml_library\": \"/opt/nvml/libnvidia-ml.so.1\",\n"
             " \"gpus\": {\"count\": 8, \"model\": \"H100\"},\n"
             " \"timeouts_ms\": {\"topology\": 1000, \"nvml\": 2000, \"filesystem\": 3000, \"infiniband\": 4000, \"imex\": 600, \"drain\": 5000},\n"
             " \"checks\": {\n"
             "  \"gpu_count\": {\"enabled\": true}, \"gpu_model\": {\"enabled\": false},\n"
             "  \"nvlink\": {\"min_bandwidth_gbps\": 450, \"reference_topology\": \"%s\", \"tolerance_percent\": 12.5,\n"
             "             \"min_largest_island\": 8, \"min_active_links\": 18},\n"
             "  \"nvml\": {}, \"ecc\": {\"counter\": \"aggregate\", \"max_uncorrected\": 3, \"max_corrected\": 1000},\n"
             "  \"retired_memory\": {\"max_retired_pages\": 10, \"max_uncorrected_remapped_rows\": 2},\n"
             "  \"xid\": {\"wait_ms\": 50, \"ignore\": [13, 63]},\n"
             "  \"nvlink_errors\": {\"max_replay\": 100, \"max_recovery\": null, \"max_crc\": 7},\n"
             "  \"gpu_memory\": {\"max_used\": \"512MiB\"}, \"gpu_processes\": {\"grace_ms\": 0},\n"
             "  \"checkpoint_fs\": {\"path\": \"/ckpt/%%n\", \"min_free\": \"100GB\"},\n"
             "  \"shm\": {\"enabled\": false, \"path\": \"/dev/shm\", \"min_free\": 4096},\n"
             "  \"infiniband\": {\"ports\": [\"mlx5_0:1\", \"mlx5_1:2\"], \"min_rate_gbps\": 200},\n"
             "  \"imex\": {\"enabled\": true, \"always\": true, \"ctl\": \"/opt/imex/%%n/nvidia-imex-ctl\"}}}\n",
             dir, dir, fixture("dgx-h100.xml"));
    if (len < 0 || len >= (int)sizeof(json))
        printf("Bail out! config text too long\n");
    write_file(dir, "node7.xml", "<topology/>\n");
    int rc = load_text(json);
    if (!ok(rc == 0, "a config with every key loads"))
        diag("%s", err);
    char want[4200];
    if (snprintf(want, sizeof(want), "%s/node7.xml", dir) >= (int)sizeof(want))
        want[0] = '\0';
    ok(strcmp(cfg.topology, want) == 0, "topology: %%n is the node name (%s)", cfg.topology);
    ok(strcmp(cfg.checkpoint_fs.path, "/ckpt/node7") == 0 && cfg.checkpoint_fs.min_free_bytes == 100000000000LL,
       "checkpoint_fs: path with %%n, 100GB = 10^11 bytes");
    ok(strcmp(cfg.nvml_library, "/opt/nvml/libnvidia-ml.so.1") == 0, "nvml_library");
    ok(cfg.gpu_count == 8 && strcmp(cfg.gpu_model, "H100") == 0, "gpus.count and gpus.model");
    ok(cfg.timeout_ms.topology == 1000 && cfg.timeout_ms.nvml == 2000 && cfg.timeout_ms.filesystem == 3000 &&
           cfg.timeout_ms.infiniband == 4000 && cfg.timeout_ms.drain == 5000,
       "timeouts_ms");
    ok(cfg.enabled[HEALTH_CHECK_GPU_COUNT] && !cfg.enabled[HEALTH_CHECK_GPU_MODEL] && !cfg.enabled[HEALTH_CHECK_SHM],
       "\"enabled\": false turns a check off");
    ok(cfg.nvlink.min_bandwidth_gbps == 450 && cfg.nvlink.tolerance_percent == 12.5 &&
           cfg.nvlink.min_largest_island == 8 && cfg.nvlink.min_active_links == 18 && cfg.nvlink.reference[0],
       "nvlink expectations");
    ok(cfg.ecc.aggregate == 1 && cfg.ecc.max_uncorrected == 3 && cfg.ecc.max_corrected == 1000, "ecc limits");
    ok(cfg.retired.max_retired_pages == 10 && cfg.retired.max_uncorrected_rows == 2, "retired_memory limits");
    ok(cfg.xid.wait_ms == 50 && cfg.xid.nignore == 2 && cfg.xid.ignore[1] == 63, "xid wait and ignore list");
    ok(cfg.nvlink_errors.max_replay == 100 && cfg.nvlink_errors.max_recovery == HEALTH_NO_LIMIT &&
           cfg.nvlink_errors.max_crc == 7,
       "nvlink_errors limits, null = no limit");
    ok(cfg.gpu_memory_max_used == 512LL << 20 && cfg.gpu_processes_grace_ms == 0, "gpu_memory and gpu_processes");
    ok(cfg.infiniband.nports == 2 && strcmp(cfg.infiniband.ports[1].device, "mlx5_1") == 0 &&
           cfg.infiniband.ports[1].port == 2 && cfg.infiniband.min_rate_gbps == 200,
       "infiniband ports DEVICE:PORT and rate");
    ok(cfg.enabled[HEALTH_CHECK_IMEX] && cfg.imex.always && cfg.timeout_ms.imex == 600 &&
           strcmp(cfg.imex.ctl, "/opt/imex/node7/nvidia-imex-ctl") == 0,
       "imex: enabled, always, ctl with %%n, timeouts_ms.imex");
    ok(load_text("{\"topology\": \"live\"}") == 0 && cfg.topology[0] == '\0', "topology \"live\"");
}

static void test_refusals(void)
{
    ok(refused("{\"gpu\": {}}", "health.json: gpu: unknown key", "known: topology, sysfs_root"),
       "unknown top-level key: named, with the known keys");
    ok(refused("{\"checks\": {\"ecc\": {\"max_uncorected\": 1}}}", "checks.ecc.max_uncorected: unknown key",
               "max_uncorrected"),
       "unknown key in a check: its full path");
    ok(refused("{\"checks\": {\"ecc_errors\": {}}}", "checks.ecc_errors: unknown key", "gpu_count"),
       "unknown check name");
    ok(refused("{\"gpus\": {\"count\": \"8\"}}", "gpus.count: expected a whole number, got a string", NULL),
       "wrong type: a string for a number");
    ok(refused("{\"gpus\": {\"count\": 65}}", "gpus.count: out of range", "0 to 64"), "count out of range");
    ok(refused("{\"checks\": {\"xid\": {\"enabled\": 1}}}", "checks.xid.enabled: expected true or false", NULL),
       "enabled must be a boolean");
    ok(refused("{\"checks\": {\"gpu_memory\": {\"max_used\": \"2 GiB\"}}}", "checks.gpu_memory.max_used: '2 GiB' is not a size",
               NULL),
       "size with a space is refused");
    ok(refused("{\"checks\": {\"gpu_memory\": {\"max_used\": \"2Gb\"}}}", "is not a size", NULL),
       "unknown size unit is refused");
    ok(refused("{\"checks\": {\"ecc\": {\"counter\": \"lifetime\"}}}", "checks.ecc.counter: expected \"volatile\" or \"aggregate\"",
               NULL),
       "ecc.counter other than volatile/aggregate");
    ok(refused("{\"checks\": {\"xid\": {\"ignore\": [79, \"x\"]}}}", "checks.xid.ignore: entries must be XID numbers", NULL),
       "xid.ignore with a non-number");
    ok(refused("{\"checks\": {\"infiniband\": {\"ports\": [\"mlx5_0\"]}}}", "entries must be \"DEVICE:PORT\"", NULL),
       "IB port without :PORT");
    ok(refused("{\"checks\": {\"infiniband\": {\"ports\": [\"../x:1\"]}}}", "entries must be \"DEVICE:PORT\"", NULL),
       "IB device with a slash is refused");
    ok(refused("{\"checks\": {\"nvlink\": {\"tolerance_percent\": 150}}}", "tolerance_percent: out of range", NULL),
       "tolerance above 100%%");
    ok(refused("{\"timeouts_ms\": {\"nvml\": 0}}", "timeouts_ms.nvml: out of range", NULL), "a zero time bound");
    ok(refused("{\"checks\": []}", "checks: expected an object", NULL), "a section that is not an object");
    ok(refused("[]", "expected an object", NULL), "a top level that is not an object");
    ok(refused("{\"gpus\": {\"count\": 8}, \"gpus\": {}}", "duplicate object key", NULL), "duplicate keys");
    ok(refused("{\"gpus\": {\"count\": 8},}", "line 1", NULL), "malformed JSON: the line is named");
    ok(refused("{\"topology\": \"/nonexistent/node.xml\"}", "topology: cannot open the file /nonexistent/node.xml", NULL),
       "unreadable topology file: a config error");
    ok(refused("{\"checks\": {\"nvlink\": {\"reference_topology\": \"/\"}}}", "is a directory", NULL),
       "reference topology that is a folder");

    char missing[4200];
    if (snprintf(missing, sizeof(missing), "%s/absent.json", dir) >= (int)sizeof(missing))
        missing[0] = '\0';
    ok(health_config_load(missing, "n", &cfg, err, sizeof(err)) == -1 && strstr(err, "cannot open the config") &&
           strstr(err, "No such file"),
       "missing config file: cannot read, and why");
    ok(health_config_load(dir, "n", &cfg, err, sizeof(err)) == -1 && strstr(err, "is a directory"),
       "a folder as config");
    /* A FIFO (as root: the trusted open; else the plain one) is refused at
     * once, never waited on (issue 16). */
    char fifo[4200];
    if (snprintf(fifo, sizeof(fifo), "%s/fifo.json", dir) >= (int)sizeof(fifo))
        fifo[0] = '\0';
    ok(mkfifo(fifo, 0600) == 0 && health_config_load(fifo, "n", &cfg, err, sizeof(err)) == -1 &&
           strstr(err, "not a regular file (a FIFO)"),
       "a FIFO as config: refused without waiting (%s)", err);
    unlink(fifo);
    ok(load_text("{\"checks\": {\"checkpoint_fs\": {\"path\": \"/ckpt/%n\"}}}") == 0, "%%n with a node name");
    char path[4200];
    if (snprintf(path, sizeof(path), "%s/health.json", dir) >= (int)sizeof(path))
        path[0] = '\0';
    ok(health_config_load(path, NULL, &cfg, err, sizeof(err)) == -1 && strstr(err, "node name is unknown"),
       "%%n without a node name is refused");
}

static void test_sizes(void)
{
    long long v = 0;
    char e[256];
    ok(health_parse_size("0", "x", &v, e, sizeof(e)) == 0 && v == 0, "size 0");
    ok(health_parse_size("1KiB", "x", &v, e, sizeof(e)) == 0 && v == 1024, "1KiB = 1024");
    ok(health_parse_size("3TB", "x", &v, e, sizeof(e)) == 0 && v == 3000000000000LL, "3TB = 3*10^12");
    ok(health_parse_size("7B", "x", &v, e, sizeof(e)) == 0 && v == 7, "7B");
    ok(health_parse_size("", "x", &v, e, sizeof(e)) == -1 && strstr(e, "x: '' is not a size"), "empty size");
    ok(health_parse_size("-1", "x", &v, e, sizeof(e)) == -1, "negative size");
    ok(health_parse_size("99999999999TiB", "x", &v, e, sizeof(e)) == -1, "overflowing size");
}

/* The example shipped as $(pkgdatadir)/health.json is a valid config. */
static void test_example(void)
{
    const char *example = getenv("DTRAIN_HEALTH_EXAMPLE");
    if (!example) {
        skip("DTRAIN_HEALTH_EXAMPLE not set: run through make check");
        return;
    }
    int rc = health_config_load(example, "node1", &cfg, err, sizeof(err));
    ok(rc == 0 && cfg.gpu_count == 8 && cfg.infiniband.nports == 4 && cfg.nvlink.min_active_links == 18,
       "the example health.json loads (%s)", rc ? err : "ok");
}

int main(void)
{
    if (!scratch_dir(dir, sizeof(dir))) {
        printf("Bail out! cannot create a scratch folder\n");
        return 1;
    }
    test_defaults();
    test_every_key();
    test_refusals();
    test_sizes();
    test_example();
    ok(strcmp(health_check_name(HEALTH_CHECK_RETIRED_MEMORY), "retired_memory") == 0 &&
           strcmp(health_check_name(HEALTH_CHECK_COUNT), "unknown") == 0,
       "check names");
    scratch_remove(dir);
    return tap_done();
}
