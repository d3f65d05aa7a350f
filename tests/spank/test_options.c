/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the plugin's --dtrain-* options (options.c) and of the
 * checks sbatch/salloc/srun make before queueing (submit.c). */
#include <string.h>

#include "dtrain_exit.h"
#include "dtrain_topo.h"
#include "options.h"
#include "submit.h"
#include "tap.h"

static void expect_refused(enum dtrain_opt_id id, const char *name, const char *text)
{
    struct dtrain_options o;
    char err[256] = "", shown[64];
    snprintf(shown, sizeof shown, "%s", text);
    for (char *p = shown; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = '?'; /* keep the TAP line one line */
    dtrain_options_init(&o);
    o.tp = 4; /* an earlier good value must survive a bad one */
    int rc = dtrain_options_set(&o, id, text, err, sizeof err);
    ok(rc == -1 && strstr(err, name) != NULL && o.tp == 4 && o.ckpt_dir[0] == '\0' && o.given == 0,
       "%s='%.40s' is refused naming the option (%s)", name, shown, err);
}

static void test_option_values(void)
{
    const char *bad[] = {"0", "-1", "abc", "3.5", "1e9", "99999999999999999999", "65537", "", " 2", "2 ", "+2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect_refused(DTRAIN_OPT_TP, "--dtrain-tp", bad[i]);
        expect_refused(DTRAIN_OPT_PP, "--dtrain-pp", bad[i]);
        expect_refused(DTRAIN_OPT_DP, "--dtrain-dp", bad[i]);
    }
    expect_refused(DTRAIN_OPT_MAX_RESTARTS, "--dtrain-max-restarts", "-1");
    expect_refused(DTRAIN_OPT_MAX_RESTARTS, "--dtrain-max-restarts", "10001");
    expect_refused(DTRAIN_OPT_MAX_RESTARTS, "--dtrain-max-restarts", "two");
    expect_refused(DTRAIN_OPT_SPARES, "--dtrain-spares", "-1");
    expect_refused(DTRAIN_OPT_SPARES, "--dtrain-spares", "65");
    expect_refused(DTRAIN_OPT_SPARES, "--dtrain-spares", "99999999999999999999");
    expect_refused(DTRAIN_OPT_SPARES, "--dtrain-spares", "one");
    expect_refused(DTRAIN_OPT_SPARES, "--dtrain-spares", "");
    expect_refused(DTRAIN_OPT_CKPT_DIR, "--dtrain-ckpt-dir", "");
    expect_refused(DTRAIN_OPT_CKPT_DIR, "--dtrain-ckpt-dir", "/ckpt\nsecond line");

    char longpath[DTRAIN_OPT_PATH_MAX + 8];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    expect_refused(DTRAIN_OPT_CKPT_DIR, "--dtrain-ckpt-dir", longpath);

    struct dtrain_options o;
    char err[256];
    dtrain_options_init(&o);
    ok(!dtrain_options_used(&o) && dtrain_options_tp(&o) == 1 && dtrain_options_pp(&o) == 1 &&
       o.max_restarts == -1, "no option: not a dtrain job, T = P = 1");
    ok(dtrain_options_set(&o, DTRAIN_OPT_TP, "8", err, sizeof err) == 0 && o.tp == 8 && dtrain_options_used(&o),
       "--dtrain-tp=8 is accepted and makes it a dtrain job");
    ok(dtrain_options_set(&o, DTRAIN_OPT_TP, "2", err, sizeof err) == 0 && o.tp == 2,
       "a second value replaces the first (callbacks may fire twice)");
    ok(dtrain_options_set(&o, DTRAIN_OPT_PP, "65536", err, sizeof err) == 0 && o.pp == 65536,
       "the documented maximum 65536 is accepted");
    ok(dtrain_options_set(&o, DTRAIN_OPT_MAX_RESTARTS, "0", err, sizeof err) == 0 && o.max_restarts == 0,
       "--dtrain-max-restarts=0 is accepted");
    ok(o.spares == -1 && dtrain_options_set(&o, DTRAIN_OPT_SPARES, "0", err, sizeof err) == 0 && o.spares == 0 &&
       dtrain_options_set(&o, DTRAIN_OPT_SPARES, "64", err, sizeof err) == 0 && o.spares == 64,
       "--dtrain-spares takes 0 to 64");
    ok(dtrain_options_set(&o, DTRAIN_OPT_CKPT_DIR, "/scratch/run 1", err, sizeof err) == 0 &&
       strcmp(o.ckpt_dir, "/scratch/run 1") == 0, "a checkpoint folder with a space is kept as given");
    ok(dtrain_options_set(&o, DTRAIN_OPT_ALLOW_PCIE, NULL, err, sizeof err) == 0 && o.allow_pcie == 1 &&
       dtrain_options_set(&o, DTRAIN_OPT_VERBOSE, "", err, sizeof err) == 0 && o.verbose == 1,
       "the flags take no value");
    ok(dtrain_options_set(&o, DTRAIN_OPT_GPU_VISIBILITY, "one", err, sizeof err) == 0 && o.gpu_visibility == 2 &&
       dtrain_options_set(&o, DTRAIN_OPT_GPU_VISIBILITY, "all", err, sizeof err) == 0 && o.gpu_visibility == 1,
       "--dtrain-gpu-visibility takes all or one");
    ok(dtrain_options_set(&o, DTRAIN_OPT_GPU_VISIBILITY, "some", err, sizeof err) != 0 && o.gpu_visibility == 1 &&
       strstr(err, "use all or one") != NULL, "--dtrain-gpu-visibility=some is refused (%s)", err);
    ok(dtrain_options_set(&o, DTRAIN_OPT_GPU_VENDOR, "amd", err, sizeof err) == 0 && o.gpu_vendor == DTRAIN_VENDOR_AMD &&
       dtrain_options_set(&o, DTRAIN_OPT_GPU_VENDOR, "nvidia", err, sizeof err) == 0 &&
       o.gpu_vendor == DTRAIN_VENDOR_NVIDIA, "--dtrain-gpu-vendor takes nvidia or amd");
    ok(dtrain_options_set(&o, DTRAIN_OPT_GPU_VENDOR, "intel", err, sizeof err) != 0 &&
       o.gpu_vendor == DTRAIN_VENDOR_NVIDIA && strstr(err, "use nvidia or amd") != NULL,
       "--dtrain-gpu-vendor=intel is refused, the value kept (%s)", err);

    ok(dtrain_options_set(&o, DTRAIN_OPT_STRAGGLER, "report", err, sizeof err) == 0 && o.straggler == 1 &&
       dtrain_options_set(&o, DTRAIN_OPT_STRAGGLER, "drain", err, sizeof err) == 0 && o.straggler == 2,
       "--dtrain-straggler takes report or drain");
    ok(dtrain_options_set(&o, DTRAIN_OPT_STRAGGLER, "kill", err, sizeof err) != 0 && o.straggler == 2 &&
       strstr(err, "--dtrain-straggler 'kill': use report or drain") != NULL, "--dtrain-straggler=kill is refused (%s)",
       err);

    ok(o.cpu_bind == 0 && dtrain_options_set(&o, DTRAIN_OPT_CPU_BIND, "numa", err, sizeof err) == 0 &&
           o.cpu_bind == 2 && dtrain_options_set(&o, DTRAIN_OPT_CPU_BIND, "cores", err, sizeof err) == 0 &&
           o.cpu_bind == 1,
       "--dtrain-cpu-bind takes cores or numa (issue #32)");
    ok(dtrain_options_set(&o, DTRAIN_OPT_CPU_BIND, "threads", err, sizeof err) != 0 && o.cpu_bind == 1 &&
           strstr(err, "--dtrain-cpu-bind 'threads': use cores or numa") != NULL,
       "--dtrain-cpu-bind=threads is refused, the value kept (%s)", err);

    dtrain_options_init(&o);
    ok(dtrain_options_set(&o, DTRAIN_OPT_VERBOSE, NULL, err, sizeof err) == 0 && dtrain_options_used(&o),
       "any option alone makes it a dtrain job");

    int usage_ok = 1;
    for (size_t i = 0; i < dtrain_option_count; i++)
        usage_ok &= strncmp(dtrain_option_table[i].usage, "[dtrain] ", 9) == 0 &&
                    strncmp(dtrain_option_table[i].name, "dtrain-", 7) == 0;
    ok(dtrain_option_count == 13 && usage_ok, "13 options, each named dtrain-* with usage starting [dtrain]");
}

static void test_job_size(void)
{
    struct dtrain_job_size s;
    dtrain_job_size_derive("16", "2", NULL, &s);
    ok(s.ntasks == 16 && s.nnodes == 2 && s.tasks_per_node == 8 && !s.uneven, "-n16 -N2: 8 tasks per node");
    dtrain_job_size_derive(NULL, "2", "8", &s);
    ok(s.ntasks == 16 && s.tasks_per_node == 8, "-N2 --ntasks-per-node=8: 16 tasks");
    dtrain_job_size_derive("7", "2", NULL, &s);
    ok(s.uneven && s.tasks_per_node == 0, "-n7 -N2: uneven");
    dtrain_job_size_derive("8", "1-4", NULL, &s);
    ok(s.ntasks == 8 && s.nnodes == 0 && s.tasks_per_node == 0, "-N1-4: node count unknown");
    dtrain_job_size_derive("8", "2-2", NULL, &s);
    ok(s.nnodes == 2 && s.tasks_per_node == 4, "-N2-2 is 2 nodes");
    dtrain_job_size_derive(NULL, NULL, NULL, &s);
    ok(s.ntasks == 0 && s.nnodes == 0 && s.tasks_per_node == 0 && !s.uneven, "nothing set: all unknown");
    dtrain_job_size_derive("x", "-", "0", &s);
    ok(s.ntasks == 0 && s.nnodes == 0 && s.tasks_per_node == 0, "unparsable texts count as unknown");
}

static void test_spares(void)
{
    struct dtrain_options o;
    struct dtrain_job_size s;
    char err[256];
    long nodes = -1;
    dtrain_options_init(&o);
    dtrain_job_size_derive(NULL, "2", "2", &s);
    ok(dtrain_submit_spares(&o, &s, &nodes, err, sizeof err) == 0 && nodes == 0,
       "no --dtrain-spares: the node count is left alone");
    dtrain_options_set(&o, DTRAIN_OPT_SPARES, "0", err, sizeof err);
    ok(dtrain_submit_spares(&o, &s, &nodes, err, sizeof err) == 0 && nodes == 0, "--dtrain-spares=0: left alone");
    dtrain_options_set(&o, DTRAIN_OPT_SPARES, "1", err, sizeof err);
    ok(dtrain_submit_spares(&o, &s, &nodes, err, sizeof err) == 0 && nodes == 3, "-N2 --dtrain-spares=1: 3 nodes");
    dtrain_job_size_derive("4", "2-2", NULL, &s);
    ok(dtrain_submit_spares(&o, &s, &nodes, err, sizeof err) == 0 && nodes == 3, "-N2-2 --dtrain-spares=1: 3 nodes");
    static const char *const unfixed[][2] = {{"8", "1-4"}, {"8", NULL}};
    for (size_t k = 0; k < 2; k++) {
        dtrain_job_size_derive(unfixed[k][0], unfixed[k][1], NULL, &s);
        err[0] = '\0';
        ok(dtrain_submit_spares(&o, &s, &nodes, err, sizeof err) == DTRAIN_EXIT_USAGE && nodes == 0 &&
           strstr(err, "--dtrain-spares=1 needs a fixed node count") != NULL && strchr(err, '\n') == NULL,
           "-N %s --dtrain-spares=1 is refused on one line (%s)", unfixed[k][1] ? unfixed[k][1] : "unset", err);
    }
}

/* Run dtrain_submit_check on T/P/D and a size; returns the code, err filled. */
static int check(int tp, int pp, int dp, int allow_pcie, const struct dtrain_site_config *cfg, const char *ntasks,
                 const char *nodes, const char *per_node, char *err, size_t errlen)
{
    struct dtrain_options o;
    struct dtrain_job_size s;
    char text[16];
    dtrain_options_init(&o);
    snprintf(text, sizeof text, "%d", tp);
    dtrain_options_set(&o, DTRAIN_OPT_TP, text, err, errlen);
    if (pp > 0) {
        snprintf(text, sizeof text, "%d", pp);
        dtrain_options_set(&o, DTRAIN_OPT_PP, text, err, errlen);
    }
    if (dp > 0) {
        snprintf(text, sizeof text, "%d", dp);
        dtrain_options_set(&o, DTRAIN_OPT_DP, text, err, errlen);
    }
    if (allow_pcie)
        dtrain_options_set(&o, DTRAIN_OPT_ALLOW_PCIE, NULL, err, errlen);
    dtrain_job_size_derive(ntasks, nodes, per_node, &s);
    err[0] = '\0';
    return dtrain_submit_check(&o, cfg, &s, err, errlen);
}

static void test_submit_check(void)
{
    struct dtrain_site_config cfg;
    char err[512];
    dtrain_config_init(&cfg);

    ok(check(4, 2, 0, 0, &cfg, NULL, "2", "8", err, sizeof err) == 0, "T=4 P=2 on 2x8 tasks is accepted");
    ok(check(4, 2, 2, 0, &cfg, NULL, "2", "8", err, sizeof err) == 0, "T=4 P=2 D=2 on 16 tasks is accepted");
    ok(check(4, 2, 3, 0, &cfg, NULL, "2", "8", err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "16"),
       "T*P*D != ntasks is refused (%s)", err);
    ok(check(3, 1, 0, 0, &cfg, "16", NULL, NULL, err, sizeof err) == DTRAIN_EXIT_REFUSED,
       "T*P not dividing ntasks is refused (%s)", err);
    ok(check(8, 1, 0, 0, &cfg, NULL, "4", "4", err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "per node"),
       "T above tasks per node is refused (%s)", err);
    ok(check(2, 1, 0, 0, &cfg, "7", "2", NULL, err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "evenly"),
       "tasks that do not spread evenly are refused (%s)", err);
    ok(check(8, 1, 0, 0, &cfg, NULL, NULL, NULL, err, sizeof err) == 0, "unknown size, no max_tp: accepted");

    cfg.max_tp = 4;
    ok(check(8, 1, 0, 0, &cfg, NULL, NULL, NULL, err, sizeof err) == DTRAIN_EXIT_REFUSED &&
       strstr(err, "--dtrain-tp=4 or less") && strstr(err, "--dtrain-allow-pcie"),
       "T above max_tp is refused and names the fixes (%s)", err);
    ok(check(4, 1, 0, 0, &cfg, NULL, NULL, NULL, err, sizeof err) == 0, "T = max_tp is accepted");
    ok(check(8, 1, 0, 1, &cfg, NULL, NULL, NULL, err, sizeof err) == 0,
       "T above max_tp with --dtrain-allow-pcie is accepted");
    cfg.allow_pcie = DTRAIN_PCIE_NEVER;
    ok(check(8, 1, 0, 0, &cfg, NULL, NULL, NULL, err, sizeof err) == DTRAIN_EXIT_REFUSED &&
       !strstr(err, "allow-pcie"), "with allow_pcie=no the refusal does not suggest --dtrain-allow-pcie (%s)", err);
    ok(check(2, 1, 0, 1, &cfg, NULL, NULL, NULL, err, sizeof err) == DTRAIN_EXIT_USAGE && strstr(err, "allow_pcie=no"),
       "--dtrain-allow-pcie is refused when the site turned it off (%s)", err);
    cfg.allow_pcie = DTRAIN_PCIE_ALWAYS;
    ok(check(8, 1, 0, 0, &cfg, NULL, NULL, NULL, err, sizeof err) == 0,
       "with allow_pcie=yes T above max_tp is accepted without the option");

    /* A multi-node NVLink domain of 8 GPUs over nodes of 4. */
    cfg.allow_pcie = DTRAIN_PCIE_USER;
    cfg.nvlink_domain_gpus = 8;
    ok(check(8, 1, 0, 0, &cfg, NULL, "4", "4", err, sizeof err) == 0,
       "nvlink_domain_gpus=8: T=8 over nodes of 4 tasks is accepted (%s)", err);
    ok(check(16, 1, 0, 0, &cfg, NULL, "4", "4", err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "(8 GPUs") &&
           strstr(err, "--dtrain-tp=8"),
       "nvlink_domain_gpus=8: T=16 is refused naming the domain size (%s)", err);
    ok(check(16, 1, 0, 0, &cfg, NULL, NULL, NULL, err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "(8 GPUs"),
       "nvlink_domain_gpus=8: T=16 is refused with the task counts unknown (%s)", err);
    ok(check(6, 1, 0, 0, &cfg, NULL, "4", "4", err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "part of a node"),
       "nvlink_domain_gpus=8: T=6 over nodes of 4 is refused (%s)", err);
    /* --dtrain-pp-in-domain: the PP groups must fit the domain of 8 */
    struct dtrain_options po;
    struct dtrain_job_size ps;
    dtrain_options_init(&po);
    ok(dtrain_options_set(&po, DTRAIN_OPT_PP_IN_DOMAIN, NULL, err, sizeof err) == 0 && po.pp_in_domain == 1,
       "--dtrain-pp-in-domain is a flag");
    dtrain_options_set(&po, DTRAIN_OPT_TP, "4", err, sizeof err);
    dtrain_options_set(&po, DTRAIN_OPT_PP, "4", err, sizeof err);
    dtrain_job_size_derive(NULL, "4", "4", &ps);
    ok(dtrain_submit_check(&po, &cfg, &ps, err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "join 4 nodes") &&
           strstr(err, "--dtrain-pp=2 or less"),
       "pp-in-domain T=4 P=4 on 4x4 tasks is refused, P=2 named (%s)", err);
    dtrain_options_set(&po, DTRAIN_OPT_PP, "2", err, sizeof err);
    ok(dtrain_submit_check(&po, &cfg, &ps, err, sizeof err) == 0, "pp-in-domain T=4 P=2 on 4x4 tasks is accepted");
    cfg.nvlink_domain_gpus = 0;
    ok(dtrain_submit_check(&po, &cfg, &ps, err, sizeof err) == DTRAIN_EXIT_REFUSED &&
           strstr(err, "declares no multi-node NVLink domain"),
       "pp-in-domain without the site's domain is refused (%s)", err);

    /* Slurm's blocks as the domains (nvlink_domain_source=block, blocks of 2
     * nodes of 4 GPUs): the job's --segment, as sbatch read it. */
    struct dtrain_options so;
    struct dtrain_job_size ss;
    cfg.nvlink_domain_gpus = 8;
    cfg.nvlink_domain_source = DTRAIN_DOMAIN_BLOCK;
    dtrain_options_init(&so);
    dtrain_options_set(&so, DTRAIN_OPT_TP, "8", err, sizeof err);
    dtrain_job_size_derive(NULL, "4", "4", &ss);
    ok(dtrain_submit_check(&so, &cfg, &ss, err, sizeof err) == 0,
       "block: T=8 on 4 nodes, --segment unknown (srun inside a job, or a Slurm without it): not judged");
    ss.segment_known = 1;
    ok(dtrain_submit_check(&so, &cfg, &ss, err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "use --segment=2") &&
           strstr(err, "Slurm block"),
       "block: T=8 on 4 nodes without --segment is refused, naming --segment=2 (%s)", err);
    ss.segment = 2;
    ok(dtrain_submit_check(&so, &cfg, &ss, err, sizeof err) == 0, "block: ... with --segment=2 it is accepted");
    cfg.nvlink_domain_source = DTRAIN_DOMAIN_RING;
    ss.segment = 1;
    ok(dtrain_submit_check(&so, &cfg, &ss, err, sizeof err) == DTRAIN_EXIT_REFUSED && strstr(err, "Slurm ring") &&
           strstr(err, "use --segment=2"),
       "ring: --segment=1 splits the TP groups of 2 nodes (%s)", err);
    cfg.nvlink_domain_source = DTRAIN_DOMAIN_NVML;
    ok(dtrain_submit_check(&so, &cfg, &ss, err, sizeof err) == 0,
       "NVML's cliques as the domains: --segment is not dtrain's business");
    cfg.nvlink_domain_gpus = 0;

    struct dtrain_options none;
    struct dtrain_job_size s;
    dtrain_options_init(&none);
    dtrain_job_size_derive("7", "2", NULL, &s);
    ok(dtrain_submit_check(&none, &cfg, &s, err, sizeof err) == 0, "a job without dtrain options is never refused");
}

int main(void)
{
    test_option_values();
    test_job_size();
    test_spares();
    test_submit_check();
    return tap_done();
}
