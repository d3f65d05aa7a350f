/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-topo: show a node's GPU topology as dtrain sees it, and the plan
 * for a job shape.  See doc/dtrain-topo.1.
 *
 *   dtrain-topo [--xml FILE] [--tp T] [--pp P] [--dp D] [--nodes N]
 *               [--tasks-per-node K] [--allow-pcie] [--cpu-only]
 *               [--cpu-bind cores|numa] [--nvlink-domain-gpus G]
 *   dtrain-topo --switch-addrs FILE --tp T [--pp P] --tasks-per-node K
 *               [--grad-bytes B] [--hostfile OUT]
 *               [--json | --picture]
 *
 * Exit codes (common/dtrain_exit.h): 0 ok, 2 bad usage or unreadable
 * topology, 3 refused shape, 1 internal error. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_env.h"
#include "dtrain_exit.h"
#include "dtrain_parse.h"
#include "dtrain_plan.h"
#include "dtrain_topo.h"
#include "dtrain_tree.h"
#include "dtrain_explain.h"
#include "dtrain_file.h"
#include "topo_report.h"

#define PROG "dtrain-topo"

struct options {
    const char *xml;
    long tp, pp, dp, nodes, tasks_per_node, domain_gpus;
    const char *switch_addrs, *hostfile, *node_domain;
    double grad_bytes, net_gbps, pcie_gbps;
    int explain;
    struct dtrain_model_size model;
    int want_plan;
    int allow_pcie, cpu_only, json, picture, pp_in_domain;
    enum dtrain_cpu_bind cpu_bind;
    const char *gpu_vendor; /* --gpu-vendor: place only that vendor's GPUs */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " [--xml FILE] [--tp T] [--pp P] [--dp D] [--nodes N]\n"
            "                   [--tasks-per-node K] [--allow-pcie] [--cpu-only] [--nvlink-domain-gpus G]\n"
            "                   [--gpu-vendor nvidia|amd] [--json | --picture]\n"
            "       " PROG " --switch-addrs FILE --tp T [--pp P] --tasks-per-node K [--grad-bytes B]\n"
            "                   [--hostfile OUT]\n"
            "Shows this node's GPUs, NVLink/XGMI links and islands (or those of a saved hwloc\n"
            "XML topology), and with a job shape the rank/GPU/CPU placement dtrain would use.\n"
            "  --xml FILE            read the topology from an hwloc XML file instead of this machine\n"
            "  --tp T --pp P --dp D  tensor, pipeline, data parallel sizes (D derived when left out)\n"
            "  --nodes N             nodes in the job, all like this one (default 1)\n"
            "  --tasks-per-node K    tasks per node (default: the node's GPU count)\n"
            "  --allow-pcie          let TP groups span NVLink islands (with a warning)\n"
            "  --cpu-only            place ranks without GPUs, CPUs split evenly\n"
            "  --cpu-bind cores|numa each rank's CPUs: whole cores of one NUMA node, none shared (cores,\n"
            "                        the default), or its GPU's whole NUMA node (numa; site key cpu_bind)\n"
            "  --gpu-vendor nvidia|amd  only that vendor's GPUs (a node with both; plugin: --dtrain-gpu-vendor)\n"
            "  --nvlink-domain-gpus G  GPUs per multi-node NVLink domain (site key nvlink_domain_gpus):\n"
            "                        TP groups may then hold whole nodes of the node's NVML fabric clique\n"
            "  --pp-in-domain        keep each pipeline group inside one such domain (--dtrain-pp-in-domain)\n"
            "  --node-domain NAME    every node is in NVLink domain NAME (e.g. slurm-block/b1, as the plugin's\n"
            "                        nvlink_domain_source=block), instead of NVML's fabric clique\n"
            "  --switch-addrs FILE   lines 'NODE SLURM_TOPOLOGY_ADDR' in Slurm's node order (one task per\n"
            "                        node: srun --ntasks-per-node=1 sh -c 'echo $SLURMD_NODENAME\n"
            "                        $SLURM_TOPOLOGY_ADDR'): print the node order that keeps DP rings under\n"
            "                        their leaf switches and the bytes crossing leaf uplinks, vs Slurm's\n"
            "  --grad-bytes B        gradient bytes each DP member all-reduces per step (default 0: edges only)\n"
            "  --hostfile OUT        write the chosen order as a SLURM_HOSTFILE (each node K times) for\n"
            "                        srun --distribution=arbitrary inside an allocation; none when Slurm's\n"
            "                        order is as good (SwitchAsNodeRank, BlockAsNodeRank, Slurm 26.05)\n"
            "                        (with --explain, the bytes are those of the model's DP step)\n"
            "  --explain             with a shape: bytes each group (TP, PP, DP, WORLD) sends per rank and\n"
            "                        step in dtrain's trainer, its slowest link and the predicted time, for\n"
            "                        the model below\n"
            "  --sequence-parallel --zero-stage Z --virtual-stages V --recompute-full\n"
            "                        the trainer's options of the same names for --explain (default off, 0, 1)\n"
            "  --layers L --hidden H --seq S --vocab V --micro-batch B --micro-batches M --act-bytes A\n"
            "                        the model and its batch (default GPT-2 small: 12, 768, 1024, 50257,\n"
            "                        8, 8, 2 = bf16); gradients are fp32\n"
            "  --net-gbps N --pcie-gbps N  network and PCIe bandwidth per GPU in GB/s (default 25, 25)\n"
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
    enum { O_XML = 256, O_TP, O_PP, O_DP, O_NODES, O_TPN, O_PCIE, O_CPU, O_CPUBIND, O_DOMAIN, O_ADDRS, O_GRAD, O_HOSTFILE, O_EXPLAIN, O_LAYERS, O_HIDDEN, O_SEQ, O_VOCAB, O_MB, O_NMB, O_ACT, O_NET, O_PCIEBW, O_VENDOR, O_JSON, O_PICTURE, O_PPDOM, O_NODEDOM, O_SP, O_ZERO, O_VSTAGES, O_RECOMPUTE, O_HELP, O_VERSION };
    static const struct option longopts[] = {
        {"xml", required_argument, NULL, O_XML},
        {"tp", required_argument, NULL, O_TP},
        {"pp", required_argument, NULL, O_PP},
        {"dp", required_argument, NULL, O_DP},
        {"nodes", required_argument, NULL, O_NODES},
        {"tasks-per-node", required_argument, NULL, O_TPN},
        {"allow-pcie", no_argument, NULL, O_PCIE},
        {"cpu-only", no_argument, NULL, O_CPU},
        {"cpu-bind", required_argument, NULL, O_CPUBIND},
        {"nvlink-domain-gpus", required_argument, NULL, O_DOMAIN},
        {"pp-in-domain", no_argument, NULL, O_PPDOM},
        {"node-domain", required_argument, NULL, O_NODEDOM},
        {"switch-addrs", required_argument, NULL, O_ADDRS},
        {"grad-bytes", required_argument, NULL, O_GRAD},
        {"hostfile", required_argument, NULL, O_HOSTFILE},
        {"explain", no_argument, NULL, O_EXPLAIN},
        {"sequence-parallel", no_argument, NULL, O_SP},
        {"zero-stage", required_argument, NULL, O_ZERO},
        {"virtual-stages", required_argument, NULL, O_VSTAGES},
        {"recompute-full", no_argument, NULL, O_RECOMPUTE},
        {"layers", required_argument, NULL, O_LAYERS},
        {"hidden", required_argument, NULL, O_HIDDEN},
        {"seq", required_argument, NULL, O_SEQ},
        {"vocab", required_argument, NULL, O_VOCAB},
        {"micro-batch", required_argument, NULL, O_MB},
        {"micro-batches", required_argument, NULL, O_NMB},
        {"act-bytes", required_argument, NULL, O_ACT},
        {"net-gbps", required_argument, NULL, O_NET},
        {"pcie-gbps", required_argument, NULL, O_PCIEBW},
        {"gpu-vendor", required_argument, NULL, O_VENDOR},
        {"json", no_argument, NULL, O_JSON},
        {"picture", no_argument, NULL, O_PICTURE},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    int c;

    memset(o, 0, sizeof(*o));
    o->tp = o->pp = o->nodes = 1;
    /* GPT-2 small, bf16 activations, fp32 gradients, 200 Gb/s network, PCIe 4.0 x16. */
    o->model = (struct dtrain_model_size){.layers = 12, .hidden = 768, .seq = 1024, .vocab = 50257,
                                          .micro_batch = 8, .micro_batches = 8, .act_bytes = 2, .grad_bytes = 4};
    o->net_gbps = DTRAIN_EXPLAIN_NET_GBPS_DEFAULT;
    o->pcie_gbps = DTRAIN_EXPLAIN_PCIE_GBPS_DEFAULT;
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
        case O_CPUBIND:
            if (strcmp(optarg, "cores") == 0)
                o->cpu_bind = DTRAIN_CPU_BIND_CORES;
            else if (strcmp(optarg, "numa") == 0)
                o->cpu_bind = DTRAIN_CPU_BIND_NUMA;
            else {
                fprintf(stderr, PROG ": --cpu-bind '%.32s': use cores or numa\n", optarg);
                return -1;
            }
            o->want_plan = 1;
            break;
        case O_VENDOR:
            if (!dtrain_vendor_from_name(optarg)) {
                fprintf(stderr, PROG ": --gpu-vendor '%.32s': use nvidia or amd\n", optarg);
                return -1;
            }
            o->gpu_vendor = optarg;
            break;
        case O_DOMAIN: if (parse_number("--nvlink-domain-gpus", optarg, 0, DTRAIN_PLAN_MAX_DIM, &o->domain_gpus) < 0) return -1; o->want_plan = 1; break;
        case O_ADDRS: o->switch_addrs = optarg; break;
        case O_HOSTFILE: o->hostfile = optarg; break;
        case O_EXPLAIN: o->explain = 1; o->want_plan = 1; break;
        case O_SP: o->model.sequence_parallel = 1; break;
        case O_RECOMPUTE: o->model.recompute_full = 1; break;
        case O_ZERO: { long v; if (parse_number("--zero-stage", optarg, 0, 3, &v) < 0) return -1; o->model.zero_stage = (int)v; break; }
        case O_VSTAGES: { long v; if (parse_number("--virtual-stages", optarg, 1, 1024, &v) < 0) return -1; o->model.virtual_stages = (int)v; break; }
        case O_PPDOM: o->pp_in_domain = 1; o->want_plan = 1; break;
        case O_NODEDOM: o->node_domain = optarg; o->want_plan = 1; break;
        case O_LAYERS: if (parse_number("--layers", optarg, 1, 100000, &o->model.layers) < 0) return -1; break;
        case O_HIDDEN: if (parse_number("--hidden", optarg, 1, 1L << 20, &o->model.hidden) < 0) return -1; break;
        case O_SEQ: if (parse_number("--seq", optarg, 1, 1L << 24, &o->model.seq) < 0) return -1; break;
        case O_VOCAB: if (parse_number("--vocab", optarg, 1, 1L << 24, &o->model.vocab) < 0) return -1; break;
        case O_MB: if (parse_number("--micro-batch", optarg, 1, 1L << 20, &o->model.micro_batch) < 0) return -1; break;
        case O_NMB: if (parse_number("--micro-batches", optarg, 1, 1L << 20, &o->model.micro_batches) < 0) return -1; break;
        case O_ACT: { long v; if (parse_number("--act-bytes", optarg, 1, 8, &v) < 0) return -1; o->model.act_bytes = (int)v; break; }
        case O_NET: { long v; if (parse_number("--net-gbps", optarg, 1, DTRAIN_EXPLAIN_GBPS_MAX, &v) < 0) return -1; o->net_gbps = (double)v; break; }
        case O_PCIEBW: { long v; if (parse_number("--pcie-gbps", optarg, 1, DTRAIN_EXPLAIN_GBPS_MAX, &v) < 0) return -1; o->pcie_gbps = (double)v; break; }
        case O_GRAD: {
            char *end = NULL;
            o->grad_bytes = strtod(optarg, &end);
            if (!end || end == optarg || *end || !(o->grad_bytes >= 0 && o->grad_bytes < 1e18)) {
                fprintf(stderr, PROG ": --grad-bytes '%s': give a number of bytes (e.g. 4e9)\n", optarg);
                return -1;
            }
            break;
        }
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
    if (o->hostfile && !o->switch_addrs) {
        fprintf(stderr, PROG ": --hostfile needs --switch-addrs\n");
        return -1;
    }
    if (o->json && o->picture) {
        fprintf(stderr, PROG ": --json and --picture do not mix: pick one\n");
        return -1;
    }
    return 0;
}

static void print_cost(const char *what, const struct dtrain_tree_node *nodes, const int *order, int n,
                       const struct dtrain_tree_cost *c)
{
    printf("%-14s", what);
    for (int p = 0; p < n; p++)
        printf(" %s", nodes[order[p]].name);
    printf("\n  DP ring edges across leaf switches: %ld of %ld", c->cross_edges, c->ring_edges);
    if (c->cross_bytes > 0)
        printf(", %.3f GB per step over leaf uplinks", c->cross_bytes / 1e9);
    if (c->pp_pairs)
        printf("; PP neighbour pairs across leaf switches: %ld of %ld", c->pp_cross, c->pp_pairs);
    printf("\n");
}

/* --explain: what each group moves per step. */
static int explain(const struct options *o, const dtrain_topo *topo, const dtrain_plan *plan)
{
    struct dtrain_explain e;
    char err[256];
    if (dtrain_explain_plan(plan, topo, &o->model, o->net_gbps, o->pcie_gbps, o->pp_in_domain, &e, err, sizeof err) !=
        0) {
        fprintf(stderr, PROG ": --explain: %s\n", err);
        return -1;
    }
    printf("\nExplain: %ld layers, hidden %ld, sequence %ld, vocabulary %ld: %.1f M parameters; %ld micro-batches of "
           "%ld per step and DP rank, %d-byte activations, fp32 gradients, ZeRO-%d%s%s%s\n",
           o->model.layers, o->model.hidden, o->model.seq, o->model.vocab, e.params / 1e6, o->model.micro_batches,
           o->model.micro_batch, o->model.act_bytes, o->model.zero_stage,
           o->model.sequence_parallel ? ", sequence parallel" : "", o->model.virtual_stages > 1 ? ", interleaved" : "",
           o->model.recompute_full ? ", full recompute" : "");
    printf("GROUP  BYTES/RANK/STEP  SLOWEST LINK            PREDICTED\n");
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        if (e.links.gbps[g] <= 0) {
            printf("%-6s %-16s %-23s %s\n", dtrain_explain_group_name((enum dtrain_explain_group)g), "0",
                   "- (one rank)", "-");
            continue;
        }
        char bw[40];
        snprintf(bw, sizeof bw, "%s %.0f GB/s", e.links.kind[g], e.links.gbps[g]);
        printf("%-6s %10.3f GB    %-23s %9.3f ms\n", dtrain_explain_group_name((enum dtrain_explain_group)g),
               e.bytes[g] / 1e9, bw, e.seconds[g] * 1e3);
    }
    printf("Predicted communication per step: %.3f ms (no overlap with compute: an upper bound)\n",
           e.total_seconds * 1e3);
    return 0;
}

/* --switch-addrs: the node order of the step under Slurm's switch tree. */
static int switch_order(const struct options *o)
{
    char err[512];
    char *text = NULL;
    size_t len = 0;
    struct dtrain_tree_node *nodes = NULL;
    int n = 0, status = DTRAIN_EXIT_USAGE;
    int *slurm = NULL, *order = NULL;
    FILE *f = NULL;

    if (dtrain_read_regular(o->switch_addrs, "switch address file", 64L << 20, &text, &len, err, sizeof err) != 0 ||
        dtrain_tree_parse(text, len, &nodes, &n, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s: %s\n", o->switch_addrs, err);
        goto out;
    }
    int T = (int)o->tp, P = (int)o->pp, K = o->tasks_per_node ? (int)o->tasks_per_node : (int)o->tp;
    slurm = malloc(sizeof *slurm * (size_t)n);
    order = malloc(sizeof *order * (size_t)n);
    if (!slurm || !order || dtrain_tree_order(nodes, n, order) != 0) {
        fprintf(stderr, PROG ": out of memory\n");
        status = DTRAIN_EXIT_FAILURE;
        goto out;
    }
    for (int i = 0; i < n; i++)
        slurm[i] = i;
    struct dtrain_tree_cost before, after;
    if (dtrain_tree_cost(nodes, slurm, n, T, P, K, o->grad_bytes, &before, err, sizeof err) != 0 ||
        dtrain_tree_cost(nodes, order, n, T, P, K, o->grad_bytes, &after, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s: use --tp/--pp/--tasks-per-node that fit the %d nodes\n", err, n);
        status = DTRAIN_EXIT_REFUSED;
        goto out;
    }
    long D = (long)n * K / ((long)T * P);
    if (o->explain && o->grad_bytes <= 0 && D > 1) {
        /* --explain: each DP ring edge carries one member's bytes of the model's step */
        double per = dtrain_explain_group_bytes(&o->model, T, P, (int)D, DTRAIN_EXPLAIN_DP, 0) / (double)D;
        before.cross_bytes = per * (double)before.cross_edges;
        after.cross_bytes = per * (double)after.cross_edges;
    }
    printf("Switch tree: %d nodes under %d leaf switches; T=%d P=%d D=%ld, %d tasks per node\n", n, before.leaves,
           T, P, D, K);
    const char *in_force = getenv(DTRAIN_ENV_NODE_ORDER);
    printf("Order in force: %s\n", in_force ? dtrain_node_order_describe(dtrain_node_order_parse(in_force))
                                            : "Slurm's, as the addresses are listed (task order)");
    print_cost("Slurm's order:", nodes, slurm, n, &before);
    print_cost("chosen order:", nodes, order, n, &after);
    if (o->explain && o->grad_bytes <= 0 && D > 1)
        printf("(--explain: each DP ring edge carries one member's DP bytes of stage 0 a step, for the model "
               "below)\n");
    /* Slurm's order already keeps each leaf's nodes together: the node
     * ranks of TopologyParam=SwitchAsNodeRank / BlockAsNodeRank, or Slurm
     * 26.05's topology-ordered step layout.  Nothing to reorder. */
    if (before.cross_edges <= after.cross_edges && before.pp_cross <= after.pp_cross) {
        printf("Slurm's order crosses no more leaf uplinks than the chosen one: run the step in Slurm's order, "
               "no host file%s.\n", o->hostfile ? " (none written)" : "");
    } else {
        printf("Reordered: the node order of the step (task ids follow SLURM_HOSTFILE with\n"
               "--distribution=arbitrary); the rank formula rank = tp + T*(dp + D*pp) is unchanged.\n"
               "Run it inside an allocation of these nodes (sbatch, salloc), where Slurm lays the step out along the\n"
               "host file: SLURM_HOSTFILE=%s srun --distribution=arbitrary -n %ld ...\n",
               o->hostfile ? o->hostfile : "FILE", (long)n * K);
        if (o->hostfile) {
            f = fopen(o->hostfile, "w");
            for (int p = 0; f && p < n; p++)
                for (int k = 0; k < K; k++)
                    fprintf(f, "%s\n", nodes[order[p]].name);
            if (!f || fclose(f) != 0) {
                f = NULL;
                fprintf(stderr, PROG ": cannot write %s\n", o->hostfile);
                status = DTRAIN_EXIT_FAILURE;
                goto out;
            }
            f = NULL;
        }
    }
    if (o->explain && (o->tp > 0)) {
        /* the model of --explain, for the bytes above */
        printf("Model: %ld layers, hidden %ld, sequence %ld, vocabulary %ld, %ld micro-batches of %ld\n",
               o->model.layers, o->model.hidden, o->model.seq, o->model.vocab, o->model.micro_batches,
               o->model.micro_batch);
    }
    status = fflush(stdout) == 0 ? DTRAIN_EXIT_OK : DTRAIN_EXIT_FAILURE;
out:
    free(text);
    free(nodes);
    free(slurm);
    free(order);
    return status;
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
    if (o.switch_addrs)
        return switch_order(&o);
    /* In a bounded child: a file that crashes or hangs hwloc gives one line. */
    rc = dtrain_topo_load_bounded(o.xml, 0, 60000, &topo, err, sizeof(err));
    if (rc != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return dtrain_status_exit(rc);
    }
    if (o.gpu_vendor) {
        dtrain_topo *sub = NULL;
        rc = dtrain_topo_vendor_subset(topo, dtrain_vendor_from_name(o.gpu_vendor), &sub, err, sizeof(err));
        dtrain_topo_free(topo);
        topo = sub;
        if (rc != DTRAIN_OK) {
            fprintf(stderr, PROG ": --gpu-vendor %s: %s\n", o.gpu_vendor, err);
            return dtrain_status_exit(rc);
        }
    }
    if (o.want_plan) {
        struct dtrain_shape shape = {(int)o.tp, (int)o.pp, (int)o.dp, (int)o.nodes, (int)o.tasks_per_node};
        struct dtrain_policy policy = {o.allow_pcie, o.cpu_only, (int)o.domain_gpus, o.pp_in_domain, o.node_domain,
                                       o.cpu_bind};
        if (shape.tasks_per_node == 0) {
            /* One task per GPU; a CPU-only job needs at least a TP group. */
            int ngpus = dtrain_topo_gpu_count(topo);
            shape.tasks_per_node = ngpus;
            if (o.cpu_only || shape.tasks_per_node == 0)
                shape.tasks_per_node = shape.tp;
            else if (ngpus < shape.tp) {
                /* Not a torchrun-style job: the node is too small for one TP group. */
                fprintf(stderr, PROG ": this node has %d GPU%s, fewer than T=%ld: use --tp %d or less, or "
                                     "--cpu-only to place CPU ranks\n",
                        ngpus, ngpus == 1 ? "" : "s", o.tp, ngpus);
                status = DTRAIN_EXIT_REFUSED;
                goto out;
            }
        }
        nodes = malloc(sizeof(*nodes) * (size_t)shape.nnodes);
        if (!nodes) {
            fprintf(stderr, PROG ": out of memory\n");
            goto out;
        }
        for (int i = 0; i < shape.nnodes; i++)
            nodes[i] = topo; /* a homogeneous job: every node like this one */
        rc = dtrain_plan_place_tasks(&shape, nodes, &policy, &plan, err, sizeof(err));
        if (rc != DTRAIN_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            status = dtrain_status_exit(rc);
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
        if (o.picture) {
            fputc('\n', stdout);
            dtrain_plan_picture(stdout, "", topo, plan, 0);
        }
        if (o.explain && explain(&o, topo, plan) != 0) {
            status = DTRAIN_EXIT_USAGE;
            goto out;
        }
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
