/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: node health checks for Slurm's Prolog, Epilog and
 * HealthCheckProgram.
 *
 *   dtrain-health --prolog | --epilog | --check [--json] [--config FILE]
 *                 [--node NAME] [--drain | --no-drain] [--sysfs-root DIR] [-v]
 *
 * Exit status: 0 healthy, 1 unhealthy (drained unless --no-drain, or in
 * --check mode without --drain) or an internal error, 2 bad usage or config.
 * Slurm drains the node and requeues the job when a prolog exits non-zero;
 * dtrain-health drains first so that the reason says what is wrong.
 * doc/dtrain-health.8 is the manual. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "site_config.h"
#include "dtrain_drain.h"
#include "dtrain_exit.h"
#include "dtrain_parse.h"
#include "report.h"
#include "run.h"

#define PROG "dtrain-health"

/* Unhealthy: Slurm drains and requeues on any non-zero prolog status. */
#define HEALTH_EXIT_UNHEALTHY 1

#ifndef DTRAIN_SYSCONFDIR
#define DTRAIN_SYSCONFDIR "/etc"
#endif

struct options {
    int mode;              /* enum health_mode, -1 before one is given */
    const char *config;
    const char *node;
    const char *sysfs_root;
    int json;
    int drain;             /* -1 default: drain in prolog/epilog only */
    int verbose;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " --prolog | --epilog | --check [options]\n"
            "Check this node's GPUs, NVLink, NVML health counters, filesystems and InfiniBand\n"
            "against the site config; on failure drain the node with a reason starting 'dtrain:'.\n"
            "\n"
            "  --prolog           before a job (Slurm Prolog): drains on failure\n"
            "  --epilog           after a job (Slurm Epilog): drains on failure\n"
            "  --check            any time (HealthCheckProgram, NHC, by hand): reports only\n"
            "  --config FILE      site config (default " DTRAIN_SYSCONFDIR "/dtrain/health.json)\n"
            "  --node NAME        Slurm node name (default $SLURMD_NODENAME, else the host name)\n"
            "  --drain            also drain in --check mode\n"
            "  --no-drain         never drain (report and exit 1)\n"
            "  --sysfs-root DIR   read InfiniBand state under DIR instead of the config's sysfs_root\n"
            "  --json             print one JSON object with every check's result\n"
            "  -v, --verbose      print passed and skipped checks too\n"
            "  -h, --help         this text;  -V, --version  the version\n"
            "\n"
            "Exit status: 0 healthy, 1 unhealthy (or internal error), 2 bad usage or config.\n"
            "See dtrain-health(8).\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, PROG ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see " PROG " --help)\n");
    return DTRAIN_EXIT_USAGE;
}

/* Returns -1 to go on, or the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_PROLOG = 256, OPT_EPILOG, OPT_CHECK, OPT_CONFIG, OPT_NODE, OPT_DRAIN, OPT_NO_DRAIN,
           OPT_SYSFS, OPT_JSON };
    static const struct option longopts[] = {
        {"prolog", no_argument, NULL, OPT_PROLOG},
        {"epilog", no_argument, NULL, OPT_EPILOG},
        {"check", no_argument, NULL, OPT_CHECK},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"node", required_argument, NULL, OPT_NODE},
        {"drain", no_argument, NULL, OPT_DRAIN},
        {"no-drain", no_argument, NULL, OPT_NO_DRAIN},
        {"sysfs-root", required_argument, NULL, OPT_SYSFS},
        {"json", no_argument, NULL, OPT_JSON},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":vhV", longopts, NULL)) != -1) {
        int mode = -1;
        switch (c) {
        case OPT_PROLOG: mode = HEALTH_MODE_PROLOG; break;
        case OPT_EPILOG: mode = HEALTH_MODE_EPILOG; break;
        case OPT_CHECK: mode = HEALTH_MODE_CHECK; break;
        case OPT_CONFIG: o->config = optarg; break;
        case OPT_NODE: o->node = optarg; break;
        case OPT_DRAIN: o->drain = 1; break;
        case OPT_NO_DRAIN: o->drain = 0; break;
        case OPT_SYSFS: o->sysfs_root = optarg; break;
        case OPT_JSON: o->json = 1; break;
        case 'v': o->verbose = 1; break;
        case 'h': usage(stdout); return DTRAIN_EXIT_OK;
        case 'V': printf(PROG " " PACKAGE_VERSION "\n"); return DTRAIN_EXIT_OK;
        case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
        if (mode >= 0) {
            if (o->mode >= 0 && o->mode != mode)
                return usage_error("give one of --prolog, --epilog, --check");
            o->mode = mode;
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (o->mode < 0)
        return usage_error("say when this runs: --prolog, --epilog or --check");
    if (o->node && !o->node[0])
        return usage_error("--node needs a node name");
    return -1;
}

/* The node's Slurm name: --node, $SLURMD_NODENAME (set for the prolog and
 * epilog), else the short host name. */
static const char *node_name(const struct options *o, char *buf, size_t len)
{
    const char *env = getenv("SLURMD_NODENAME");
    if (o->node)
        return o->node;
    if (env && env[0])
        return env;
    if (gethostname(buf, len) != 0)
        return NULL;
    buf[len - 1] = '\0';
    buf[strcspn(buf, ".")] = '\0';
    return buf[0] ? buf : NULL;
}

/* The config cannot be used: say so (and, from the prolog or epilog, drain
 * with that reason: Slurm drains the node anyway when they fail, but with
 * "Prolog error" only). */
static int config_failed(const struct options *o, const char *node, int drain, const char *err)
{
    char reason[256], drain_err[HEALTH_ERROR_LEN + 64];
    fprintf(stderr, PROG ": %s\n", err);
    if (o->json)
        health_print_json_error(health_mode_name((enum health_mode)o->mode), node, err, stdout);
    if (drain && node) {
        dtrain_snprintf(reason, sizeof(reason), "dtrain: health config: %s", err);
        if (dtrain_drain_node(node, reason, HEALTH_DRAIN_TIMEOUT_MS, drain_err, sizeof(drain_err)) != 0)
            fprintf(stderr, PROG ": %s\n", drain_err);
    }
    return DTRAIN_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    struct options o = {.mode = -1, .config = DTRAIN_SYSCONFDIR "/dtrain/health.json", .drain = -1};
    struct health_config *cfg = NULL;
    struct health_report *rep = NULL;
    char host[256], err[1024], reason[256], drain_err[HEALTH_ERROR_LEN + 64];
    int status = parse_options(argc, argv, &o);
    if (status >= 0)
        return status;

    enum health_mode mode = (enum health_mode)o.mode;
    int drain = o.drain >= 0 ? o.drain : mode != HEALTH_MODE_CHECK;
    const char *node = node_name(&o, host, sizeof(host));
    struct health_verdict verdict = {.node = node, .config = o.config};

    cfg = malloc(sizeof(*cfg));
    rep = malloc(sizeof(*rep));
    if (!cfg || !rep) {
        fprintf(stderr, PROG ": out of memory\n");
        status = DTRAIN_EXIT_FAILURE;
        goto out;
    }
    if (health_config_load(o.config, node, cfg, err, sizeof(err)) != 0) {
        status = config_failed(&o, node, drain, err);
        goto out;
    }
    if (o.sysfs_root && dtrain_snprintf(cfg->sysfs_root, sizeof(cfg->sysfs_root), "%s", o.sysfs_root) != 0) {
        status = usage_error("--sysfs-root: the path is too long");
        goto out;
    }
    if (health_run(cfg, mode, rep, err, sizeof(err)) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        status = DTRAIN_EXIT_FAILURE;
        goto out;
    }
    if (rep->failed) {
        health_reason(rep, reason, sizeof(reason));
        verdict.reason = reason;
        if (drain && !node) {
            dtrain_snprintf(drain_err, sizeof(drain_err), "cannot drain: the node name is unknown (give --node)");
            verdict.drain_error = drain_err;
        } else if (drain) {
            if (dtrain_drain_node(node, reason, cfg->timeout_ms.drain, drain_err, sizeof(drain_err)) == 0)
                verdict.drained = 1;
            else
                verdict.drain_error = drain_err;
        }
    }
    health_print_text(rep, &verdict, o.verbose, o.json ? stderr : stdout, stderr);
    if (o.json && health_print_json(rep, &verdict, stdout) != 0)
        fprintf(stderr, PROG ": cannot write the JSON report\n");
    status = rep->failed ? HEALTH_EXIT_UNHEALTHY : DTRAIN_EXIT_OK;
out:
    free(cfg);
    free(rep);
    return status;
}
