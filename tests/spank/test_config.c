/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the plugin's site configuration (site_config.c): plugstack.conf
 * arguments, the site JSON, "%n" in topology_xml, and the shipped files
 * etc/plugstack.conf.d/dtrain.conf and etc/dtrain.json (paths from the
 * environment: DTRAIN_PLUGSTACK_CONF, DTRAIN_SITE_JSON). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "site_config.h"
#include "tap.h"

static char tmpdir[256];

static int parse(const char *line, struct dtrain_site_config *cfg, char *err, size_t errlen)
{
    char copy[2048], *av[32], *save = NULL;
    int ac = 0;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *w = strtok_r(copy, " ", &save); w && ac < 32; w = strtok_r(NULL, " ", &save))
        av[ac++] = w;
    err[0] = '\0';
    return dtrain_config_parse(cfg, ac, av, err, errlen);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

static void test_arguments(void)
{
    struct dtrain_site_config c;
    char err[512];

    ok(parse("", &c, err, sizeof err) == 0 && c.bind == 0 && c.allow_pcie == DTRAIN_PCIE_USER && c.max_tp == 0 &&
       c.topology_xml[0] == '\0', "no arguments: defaults (bind=no, allow_pcie=user, max_tp unknown)");
    ok(parse("bind=yes allow_pcie=no max_tp=8 topology_xml=/etc/dtrain/%n.xml", &c, err, sizeof err) == 0 &&
       c.bind == 1 && c.allow_pcie == DTRAIN_PCIE_NEVER && c.max_tp == 8 &&
       strcmp(c.topology_xml, "/etc/dtrain/%n.xml") == 0, "every key is read");
    ok(parse("allow_pcie=user", &c, err, sizeof err) == 0 && c.allow_pcie == DTRAIN_PCIE_USER, "allow_pcie=user");
    ok(parse("nvlink_domain_gpus=72", &c, err, sizeof err) == 0 && c.nvlink_domain_gpus == 72,
       "nvlink_domain_gpus=72 (GB200 NVL72)");
    ok(parse("", &c, err, sizeof err) == 0 && c.nvlink_domain_gpus == 0, "default: no multi-node NVLink domain");
    ok(parse("", &c, err, sizeof err) == 0 && c.nvlink_domain_source == DTRAIN_DOMAIN_NVML, "default: the domain is NVML's");
    ok(parse("nvlink_domain_source=block", &c, err, sizeof err) == 0 && c.nvlink_domain_source == DTRAIN_DOMAIN_BLOCK,
       "nvlink_domain_source=block: Slurm's topology/block block is the domain");
    ok(parse("nvlink_domain_source=nvml", &c, err, sizeof err) == 0 && c.nvlink_domain_source == DTRAIN_DOMAIN_NVML,
       "nvlink_domain_source=nvml");
    ok(parse("nvlink_domain_source=ring", &c, err, sizeof err) == 0 && c.nvlink_domain_source == DTRAIN_DOMAIN_RING,
       "nvlink_domain_source=ring: Slurm's topology/ring ring is the domain (Slurm 26.05)");
    ok(parse("nvlink_domain_source=torus", &c, err, sizeof err) != 0 && strstr(err, "nvml") && strstr(err, "ring"),
       "nvlink_domain_source=torus is refused, naming the values: %s", err);
    ok(parse("allow_pcie=true", &c, err, sizeof err) == 0 && c.allow_pcie == DTRAIN_PCIE_ALWAYS, "allow_pcie=true");
    ok(parse("", &c, err, sizeof err) == 0 && c.gpu_visibility_one == 0 && c.master_port_lo == 29500 &&
       c.master_port_hi == 29999, "defaults: gpu_visibility=all, master_ports=29500-29999");
    ok(parse("", &c, err, sizeof err) == 0 && c.cpu_bind_numa == 0 &&
           parse("cpu_bind=numa", &c, err, sizeof err) == 0 && c.cpu_bind_numa == 1 &&
           parse("cpu_bind=cores", &c, err, sizeof err) == 0 && c.cpu_bind_numa == 0,
       "cpu_bind: cores (the default) or numa (issue #32)");
    ok(parse("gpu_visibility=one master_ports=40000-40099", &c, err, sizeof err) == 0 && c.gpu_visibility_one == 1 &&
       c.master_port_lo == 40000 && c.master_port_hi == 40099, "gpu_visibility=one master_ports=40000-40099");
    ok(parse("", &c, err, sizeof err) == 0 && c.ports_per_step == 3,
       "default: ports_per_step=3 (MASTER_PORT, +1, +2: Megatron-LM's in-process restart)");
    ok(parse("ports_per_step=1", &c, err, sizeof err) == 0 && c.ports_per_step == 1 &&
           parse("ports_per_step=16", &c, err, sizeof err) == 0 && c.ports_per_step == 16,
       "ports_per_step=1 and =16");
    ok(parse("master_ports=40000-40001 ports_per_step=2", &c, err, sizeof err) == 0 &&
           parse("master_ports=40000-40000 ports_per_step=1", &c, err, sizeof err) == 0,
       "a range of exactly one block");
    ok(parse("", &c, err, sizeof err) == 0 && c.imex_check == 1 &&
           strcmp(c.imex_channels, "/dev/nvidia-caps-imex-channels") == 0,
       "defaults: imex_check=yes, imex_channels=/dev/nvidia-caps-imex-channels");
    ok(parse("imex_check=no imex_channels=/srv/fake/imex", &c, err, sizeof err) == 0 && c.imex_check == 0 &&
           strcmp(c.imex_channels, "/srv/fake/imex") == 0,
       "imex_check=no imex_channels=/srv/fake/imex");
    ok(parse("", &c, err, sizeof err) == 0 && c.net_gbps == 25 && c.pcie_gbps == 25,
       "defaults: net_gbps=25 pcie_gbps=25 (dtrain-topo's --net-gbps --pcie-gbps)");
    ok(parse("net_gbps=50 pcie_gbps=64", &c, err, sizeof err) == 0 && c.net_gbps == 50 && c.pcie_gbps == 64,
       "net_gbps=50 pcie_gbps=64");
    ok(parse("", &c, err, sizeof err) == 0 && c.expedited_requeue == 1 &&
           parse("expedited_requeue=no", &c, err, sizeof err) == 0 && c.expedited_requeue == 0 &&
           parse("expedited_requeue=yes", &c, err, sizeof err) == 0 && c.expedited_requeue == 1,
       "expedited_requeue: yes (the default) or no");

    struct { const char *line, *want; } bad[] = {
        {"colour=blue", "unknown key 'colour'"},
        {"bind", "'bind' is not key=value"},
        {"=yes", "is not key=value"},
        {"bind=maybe", "bind"},
        {"allow_pcie=sometimes", "allow_pcie"},
        {"max_tp=-1", "max_tp"},
        {"max_tp=65", "max_tp"},
        {"max_tp=4.5", "max_tp"},
        {"nvlink_domain_gpus=-8", "nvlink_domain_gpus"},
        {"nvlink_domain_gpus=lots", "nvlink_domain_gpus"},
        {"nvlink_domain_source=tree", "nvlink_domain_source=tree: use nvml, block or ring"},
        {"topology_xml=relative.xml", "absolute path"},
        {"gpu_visibility=some", "gpu_visibility=some: use all or one"},
        {"cpu_bind=threads", "cpu_bind=threads: use cores or numa"},
        {"master_ports=29500", "give a port range LO-HI"},
        {"master_ports=30000-29999", "1024 <= LO <= HI <= 65535"},
        {"master_ports=80-90", "1024 <= LO <= HI <= 65535"},
        {"master_ports=29500-70000", "1024 <= LO <= HI <= 65535"},
        {"imex_channels=dev/imex", "imex_channels=dev/imex: give an absolute path"},
        {"imex_check=maybe", "imex_check"},
        {"ports_per_step=0", "ports_per_step"},
        {"ports_per_step=17", "ports_per_step"},
        {"ports_per_step=three", "ports_per_step"},
        {"master_ports=40000-40001", "master_ports=40000-40001 holds 2 ports, fewer than ports_per_step=3"},
        {"master_ports=40000-40007 ports_per_step=9", "holds 8 ports, fewer than ports_per_step=9 (the ports each "
                                                      "step is given): widen master_ports or lower ports_per_step"},
        {"config=/nonexistent/dtrain.json", "/nonexistent/dtrain.json"},
        {"net_gbps=0", "net_gbps"},
        {"net_gbps=fast", "net_gbps"},
        {"pcie_gbps=100001", "pcie_gbps"},
        {"pcie_gbps=12.5", "pcie_gbps"},
        {"expedited_requeue=sometimes", "expedited_requeue"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ok(parse(bad[i].line, &c, err, sizeof err) == -1 && strstr(err, bad[i].want) &&
           strncmp(err, "plugstack.conf: ", 16) == 0,
           "'%s' is refused naming it (%s)", bad[i].line, err);
}

static void test_site_json(void)
{
    struct dtrain_site_config c;
    char err[512], path[512], line[2048];

    snprintf(path, sizeof path, "%s/site.json", tmpdir);
    write_file(path, "{\"spank\": {\"bind\": true, \"max_tp\": 4, \"allow_pcie\": \"no\"}, \"health\": {\"x\": 1}}",
               0644);
    snprintf(line, sizeof line, "config=%s", path);
    ok(parse(line, &c, err, sizeof err) == 0 && c.bind == 1 && c.max_tp == 4 && c.allow_pcie == DTRAIN_PCIE_NEVER &&
       strcmp(c.config, path) == 0, "the site file's \"spank\" keys are read, other sections left alone (%s)", err);
    snprintf(line, sizeof line, "max_tp=8 config=%s bind=no", path);
    ok(parse(line, &c, err, sizeof err) == 0 && c.max_tp == 8 && c.bind == 0 && c.allow_pcie == DTRAIN_PCIE_NEVER,
       "keys on the plugstack line win over the site file, wherever config= stands");
    snprintf(line, sizeof line, "config=%s config=%s", path, path);
    ok(parse(line, &c, err, sizeof err) == -1 && strstr(err, "twice"), "config= given twice is refused (%s)", err);


    const char *bad[][2] = {
        {"{\"spank\": {\"bnid\": true}}", "unknown key 'bnid'"},
        {"{\"spank\": {\"max_tp\": -2}}", "max_tp"},
        {"{\"spank\": {\"max_tp\": 2.5}}", "max_tp"},
        {"{\"spank\": {\"bind\": [1]}}", "bind"},
        {"{\"spank\": {\"config\": \"/x\"}}", "config"},
        {"{\"spank\": 3}", "must be an object"},
        {"[1, 2]", "top level"},
        {"{\"spank\": {\"bind\": true,}", "line 1"},
        {"{\"spank\": {\"bind\": true, \"bind\": false}}", "line 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i][0], 0644);
        snprintf(line, sizeof line, "config=%s", path);
        ok(parse(line, &c, err, sizeof err) == -1 && strstr(err, bad[i][1]) && strstr(err, path),
           "site file %s is refused naming the file (%s)", bad[i][0], err);
    }

    write_file(path, "{}", 0666);
    snprintf(line, sizeof line, "config=%s", path);
    if (geteuid() == 0)
        ok(parse(line, &c, err, sizeof err) == -1 && strstr(err, "writable"),
           "as root, a site file writable by others is refused (%s)", err);
    else
        skip("not root: the ownership check of files read as root cannot run");
    chmod(path, 0644);
    ok(parse(line, &c, err, sizeof err) == 0, "an empty site file is fine");
    snprintf(line, sizeof line, "config=%s", tmpdir);
    ok(parse(line, &c, err, sizeof err) == -1 && strstr(err, "is a directory"), "a folder is refused (%s)", err);
    unlink(path);
}

static void test_topology_path(void)
{
    struct dtrain_site_config c;
    char err[512], out[256];

    parse("topology_xml=/etc/dtrain/topo-%n.xml", &c, err, sizeof err);
    ok(dtrain_config_topology_path(&c, "gpu-a17", out, sizeof out, err, sizeof err) == 0 &&
       strcmp(out, "/etc/dtrain/topo-gpu-a17.xml") == 0, "%%n is the node name (%s)", out);
    ok(dtrain_config_topology_path(&c, "../etc", out, sizeof out, err, sizeof err) == -1 &&
       dtrain_config_topology_path(&c, "a/b", out, sizeof out, err, sizeof err) == -1 &&
       dtrain_config_topology_path(&c, "", out, sizeof out, err, sizeof err) == -1 &&
       dtrain_config_topology_path(&c, NULL, out, sizeof out, err, sizeof err) == -1,
       "node names that could leave the folder are refused (%s)", err);
    parse("topology_xml=/t/100%%-%n.xml", &c, err, sizeof err);
    ok(dtrain_config_topology_path(&c, "n1", out, sizeof out, err, sizeof err) == 0 &&
       strcmp(out, "/t/100%-n1.xml") == 0, "%%%% is a percent sign (%s)", out);
    parse("topology_xml=/t/fixed.xml", &c, err, sizeof err);
    ok(dtrain_config_topology_path(&c, NULL, out, sizeof out, err, sizeof err) == 0 &&
       strcmp(out, "/t/fixed.xml") == 0, "a path without %%n needs no node name");
    parse("topology_xml=/t/%n/%n/%n.xml", &c, err, sizeof err);
    ok(dtrain_config_topology_path(&c, "nodename-long", out, 24, err, sizeof err) == -1 && strstr(err, "too long"),
       "an expansion that does not fit is refused");
}

static void test_pcie_policy(void)
{
    struct dtrain_site_config c;
    dtrain_config_init(&c);
    ok(dtrain_config_pcie_allowed(&c, 0) == 0 && dtrain_config_pcie_allowed(&c, 1) == 1, "user: the job decides");
    c.allow_pcie = DTRAIN_PCIE_ALWAYS;
    ok(dtrain_config_pcie_allowed(&c, 0) == 1 && dtrain_config_pcie_allowed(&c, 1) == 1, "yes: always allowed");
    c.allow_pcie = DTRAIN_PCIE_NEVER;
    ok(dtrain_config_pcie_allowed(&c, 0) == 0 && dtrain_config_pcie_allowed(&c, 1) == -1,
       "no: the option is refused");
}

/* The plugstack line we ship must parse.  Its config= names the site file
 * where `make install` puts it; here it names a copy of the shipped file
 * (DTRAIN_SITE_JSON). */
static void shipped_args(const char *line, const char *json, char *out, size_t outlen)
{
    char copy[2048], *save = NULL;
    size_t o = 0;
    snprintf(copy, sizeof copy, "%s", line);
    out[0] = '\0';
    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        int n = strncmp(w, "config=", 7) == 0 ? snprintf(out + o, outlen - o, "%sconfig=%s", o ? " " : "", json)
                                              : snprintf(out + o, outlen - o, "%s%s", o ? " " : "", w);
        if (n < 0 || (size_t)n >= outlen - o)
            break;
        o += (size_t)n;
    }
}

static void test_shipped_files(void)
{
    const char *conf = getenv("DTRAIN_PLUGSTACK_CONF"), *json = getenv("DTRAIN_SITE_JSON");
    struct dtrain_site_config c;
    char err[512], line[2048], args[2048], local[2048];

    if (conf == NULL || json == NULL) {
        skip("DTRAIN_PLUGSTACK_CONF / DTRAIN_SITE_JSON not set (run through make check)");
        skip("DTRAIN_PLUGSTACK_CONF / DTRAIN_SITE_JSON not set (run through make check)");
        return;
    }
    FILE *f = fopen(conf, "r");
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        char kind[32], path[1024];
        int used = 0;
        if (line[0] == '#' || sscanf(line, "%31s %1023s %n", kind, path, &used) < 2)
            continue;
        if ((strcmp(kind, "required") == 0 || strcmp(kind, "optional") == 0) && strstr(path, "/dtrain.so")) {
            found = 1;
            snprintf(args, sizeof args, "%s", line + used);
            args[strcspn(args, "\n")] = '\0';
        }
    }
    if (f)
        fclose(f);

    /* A copy installed as `make install` does (mode 0644): the source tree's
     * modes follow the umask of whoever unpacked it, and as root the plugin
     * refuses a group-writable file. */
    char text[65536], installed[512];
    size_t n = 0;
    FILE *in = fopen(json, "r");
    if (in) {
        n = fread(text, 1, sizeof text - 1, in);
        fclose(in);
    }
    text[n] = '\0';
    snprintf(installed, sizeof installed, "%s/dtrain.json", tmpdir);
    write_file(installed, text, 0644);

    shipped_args(found ? args : "", installed, local, sizeof local);
    ok(found && parse(local, &c, err, sizeof err) == 0, "%s has a dtrain.so line whose arguments parse ('%s' %s)",
       conf, found ? args : "", err);
    snprintf(line, sizeof line, "config=%s", installed);
    ok(in != NULL && parse(line, &c, err, sizeof err) == 0, "the example site file %s loads (%s)", json, err);
    unlink(installed);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/dtrain-config-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(tmpdir) == NULL) {
        printf("Bail out! cannot create a temporary folder\n");
        return 1;
    }
    test_arguments();
    test_site_json();
    test_topology_path();
    test_pcie_policy();
    test_shipped_files();
    rmdir(tmpdir);
    return tap_done();
}
