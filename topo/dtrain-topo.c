/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-topo: show a node's GPU topology as dtrain sees it, and the plan
 * for a job shape.  See doc/dtrain-topo.1.
 *
 *   dtrain-topo [--xml FILE] [--tp T] [--pp P] [--dp D] [--nodes N]
 *               [--tasks-per-node K] [--allow-pcie] [--cpu-only]
 *               [--json | --picture]
 *
 * Exit codes (common/dtrain_exit.h): 0 ok, 2 bad usage or unreadable
 * topology, 3 refused shape, 1 internal error. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_exit.h"
#include "dtrain_parse.h"
#include "dtrain_plan.h"
#include "dtrain_topo.h"
#include "topo_report.h"

#define PROG "dtrain-topo"

struct options {
    const char *xml;
    long tp, pp, dp, nodes, tasks_per_node;
    int want_plan;
    int allow_pcie, cpu_only, json, picture;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " [--xml FILE] [--tp T] [--pp P] [--dp D] [--nodes N]\n"
            "                   [--tasks-per-node K] [--allow-pcie] [--cpu-only] [--json | --picture]\n"
            "Shows this node's GPUs, NVLink/XGMI links and islands (or those of a saved hwloc\n"
            "XML topology), and with a job shape the rank/GPU/CPU placement dtrain would use.\n"
            "  --xml FILE            read the topology from an hwloc XML file instead of this machine\n"
            "  --tp T --pp P --dp D  tensor, pipeline, data parallel sizes (D derived when left out)\n"
            "  --nodes N             nodes in the job, all like this one (default 1)\n"
            "  --tasks-per-node K    tasks per node (default: the node's GPU count)\n"
            "  --allow-pcie          let TP groups span NVLink islands (with a warning)\n"
            "  --cpu-only            place ranks without GPUs, CPUs split evenly\n"
            "  --json                print JSON (doc/topo-json.md) instead of tables\n"
            "  --picture             also draw the islands and the TP groups of node 0\n"
            "  --help, --version     this text; the version\n"
            "Exit: 0 ok, 2 bad usage or topology, 3 shape refused, 1 internal error.\n");
}

static int parse_number(const char *opt, const char *text, long min, long max, long *out)
{
    char err[256];
    if (dtrain_parse_int(text, min, max, opt, out, err, sizeof(err)) < 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    return 0;
}

/* Returns -1 on bad usage (message printed), 1 when --help was asked, 2
 * --version. */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { O_XML = 256, O_TP, O_PP, O_DP, O_NODES, O_TPN, O_PCIE, O_CPU, O_JSON, O_PICTURE, O_HELP, O_VERSION };
    static const struct option longopts[] = {
        {"xml", required_argument, NULL, O_XML},
        {"tp", required_argument, NULL, O_TP},
        {"pp", required_argument, NULL, O_PP},
        {"dp", required_argument, NULL, O_DP},
        {"nodes", required_argument, NULL, O_NODES},
        {"tasks-per-node", required_argument, NULL, O_TPN},
        {"allow-pcie", no_argument, NULL, O_PCIE},
        {"cpu-only", no_argument, NULL, O_CPU},
        {"json", no_argument, NULL, O_JSON},
        {"picture", no_argument, NULL, O_PICTURE},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    int c;

    memset(o, 0, sizeof(*o));
    o->tp = o->pp = o->nodes = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_XML: o->xml = optarg; break;
        case O_TP: if (parse_number("--tp", optarg, 1, DTRAIN_PLAN_MAX_DIM, &o->tp) < 0) return -1; o->want_plan = 1; break;
        case O_PP: if (parse_number("--pp", optarg, 1, DTRAIN_PLAN_MAX_DIM, &o->pp) < 0) return -1; o->want_plan = 1; break;
        case O_DP: if (parse_number("--dp", optarg, 1, DTRAIN_PLAN_MAX_DIM, &o->dp) < 0) return -1; o->want_plan = 1; break;
        case O_NODES: if (parse_number("--nodes", optarg, 1, DTRAIN_PLAN_MAX_WORLD, &o->nodes) < 0) return -1; o->want_plan = 1; break;
        case O_TPN: if (parse_number("--tasks-per-node", optarg, 1, DTRAIN_PLAN_MAX_WORLD, &o->tasks_per_node) < 0) return -1; o->want_plan = 1; break;
        case O_PCIE: o->allow_pcie = 1; o->want_plan = 1; break;
        case O_CPU: o->cpu_only = 1; o->want_plan = 1; break;
        case O_JSON: o->json = 1; break;
        case O_PICTURE: o->picture = 1; break;
        case O_HELP: return 1;
        case O_VERSION: return 2;
        default:
            if (optopt)
                fprintf(stderr, PROG ": option %s needs a value or is unknown: see " PROG " --help\n",
                        argv[optind - 1]);
            else
                fprintf(stderr, PROG ": unknown option %s: see " PROG " --help\n", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s': see " PROG " --help\n", argv[optind]);
        return -1;
    }
    if (o->json && o->picture) {
        fprintf(stderr, PROG ": --json and --picture do not mix: pick one\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    char err[512] = "";
    dtrain_topo *topo = NULL;
    dtrain_plan *plan = NULL;
    const dtrain_topo **nodes = NULL;
    int status = DTRAIN_EXIT_FAILURE, rc;

    rc = parse_options(argc, argv, &o);
    if (rc == 2) {
        printf(PROG " " PACKAGE_VERSION "\n");
        return DTRAIN_EXIT_OK;
    }
    if (rc != 0) {
        if (rc > 0)
            usage(stdout);
        return rc > 0 ? DTRAIN_EXIT_OK : DTRAIN_EXIT_USAGE;
    }
    /* In a bounded child: a file that crashes or hangs hwloc gives one line. */
    rc = dtrain_topo_load_bounded(o.xml, 0, 60000, &topo, err, sizeof(err));
    if (rc != DTRAIN_TOPO_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return dtrain_topo_status_exit(rc);
    }
    if (o.want_plan) {
        struct dtrain_shape shape = {(int)o.tp, (int)o.pp, (int)o.dp, (int)o.nodes, (int)o.tasks_per_node};
        struct dtrain_policy policy = {o.allow_pcie, o.cpu_only};
        if (shape.tasks_per_node == 0) {
            /* One task per GPU; a CPU-only job needs at least a TP group. */
            shape.tasks_per_node = dtrain_topo_gpu_count(topo);
            if (o.cpu_only || shape.tasks_per_node == 0)
                shape.tasks_per_node = shape.tp;
        }
        nodes = malloc(sizeof(*nodes) * (size_t)shape.nnodes);
        if (!nodes) {
            fprintf(stderr, PROG ": out of memory\n");
            goto out;
        }
        for (int i = 0; i < shape.nnodes; i++)
            nodes[i] = topo; /* a homogeneous job: every node like this one */
        rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &plan, err, sizeof(err));
        if (rc != DTRAIN_TOPO_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            status = dtrain_topo_status_exit(rc);
            goto out;
        }
        if (dtrain_plan_warning(plan) && o.json)
            fprintf(stderr, PROG ": warning: %s\n", dtrain_plan_warning(plan));
    }
    if (o.json) {
        if (topo_report_json(stdout, topo, plan, o.xml ? o.xml : "live", err, sizeof(err)) < 0) {
            fprintf(stderr, PROG ": %s\n", err);
            goto out;
        }
    } else {
        topo_report_table(stdout, topo, plan);
        if (o.picture)
            topo_report_picture(stdout, topo, plan);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, PROG ": cannot write the output\n");
        goto out;
    }
    status = DTRAIN_EXIT_OK;
out:
    free(nodes);
    dtrain_plan_free(plan);
    dtrain_topo_free(topo);
    return status;
}
