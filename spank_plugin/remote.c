/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Remote context (slurmstepd, one per job step and node).
 *
 * init_post_opt (as root, once per step): read the step's layout from Slurm,
 * this node's GPU topology (topo/) and plan the step.  task_init (as the
 * user, in each task's process just before exec): export the task's
 * environment, bind its CPUs.
 *
 * Nothing here may crash or stop slurmstepd.  A step that cannot be placed
 * is remembered as a one-line failure, and every task of it ends with the
 * failure's exit code in task_init; the node's first task prints the line on
 * its stderr, which reaches the user's terminal or output file.  (Failing
 * init_post_opt or user_init instead shows the user a generic "Plugin
 * initialization failed" and lets srun exit 0.) */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "cpubind.h"
#include "dtrain_env.h"
#include "dtrain_master_port.h"
#include "imex.h"
#include "dtrain_exit.h"
#include "dtrain_explain.h"
#include "dtrain_parse.h"
#include "dtrain_tree.h"
#include "plugin.h"
#include "rendezvous.h"

/* How long this node's topology discovery may take inside slurmstepd. */
#define DTRAIN_TOPO_TIMEOUT_MS 30000

/* ---------------------------------------------------------------- failures */

/* Remember the step's first failure; later ones add nothing. */
static void step_fail(struct dtrain_step *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void step_fail(struct dtrain_step *s, int code, const char *fmt, ...)
{
    if (s->mode == DTRAIN_STEP_FAILED)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->failure, sizeof s->failure, fmt, ap);
    va_end(ap);
    s->mode = DTRAIN_STEP_FAILED;
    s->failure_exit = code;
    slurm_error("dtrain: %s", s->failure);
}

void dtrain_remote_option_error(struct dtrain_plugin *plugin, const char *msg)
{
    step_fail(&plugin->step, DTRAIN_EXIT_USAGE, "%s", msg);
}

/* ---------------------------------------------------------------- planning */

/* The job environment's value of name (the user's; never used as a path). */
static int job_getenv(spank_t sp, const char *name, char *buf, size_t len, const char **out)
{
    spank_err_t rc = spank_getenv(sp, name, buf, (int)len);
    *out = NULL;
    if (rc == ESPANK_SUCCESS) {
        *out = buf;
        return 0;
    }
    return rc == ESPANK_ENV_NOEXIST ? 0 : -1;
}

/* DTRAIN_RANK0_NODE of the job's environment (srun's dtrain.so set it
 * from the step's layout) into s->rank0_node: a node name, or "" when
 * unset; 0, or -1 after step_fail() for a value that is no node name. */
static int read_rank0_node(struct dtrain_step *s, spank_t sp)
{
    const char *v = NULL;
    s->rank0_node[0] = '\0';
    if (job_getenv(sp, DTRAIN_ENV_RANK0_NODE, s->rank0_node, sizeof s->rank0_node, &v) != 0 ||
        (v != NULL && (v[0] == '\0' || v[strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                   "-_.")] != '\0'))) {
        s->rank0_node[0] = '\0';
        step_fail(s, DTRAIN_EXIT_USAGE, "%s: %s is not a node name: leave it to srun's dtrain.so", s->node,
                  DTRAIN_ENV_RANK0_NODE);
        return -1;
    }
    if (v == NULL)
        s->rank0_node[0] = '\0';
    return 0;
}

/* The step's layout; 0, or -1 after step_fail(). */
static int read_layout(struct dtrain_step *s, spank_t sp)
{
    spank_err_t rc;
    if ((rc = spank_get_item(sp, S_JOB_NNODES, &s->nnodes)) != ESPANK_SUCCESS ||
        (rc = spank_get_item(sp, S_JOB_NODEID, &s->nodeid)) != ESPANK_SUCCESS ||
        (rc = spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &s->local_tasks)) != ESPANK_SUCCESS ||
        (rc = spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &s->total_tasks)) != ESPANK_SUCCESS) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot read the step layout from Slurm: %s", s->node,
                  spank_strerror(rc));
        return -1;
    }
    if (s->nnodes == 0 || s->local_tasks == 0 || (uint64_t)s->nnodes * s->local_tasks != s->total_tasks) {
        step_fail(s, DTRAIN_EXIT_REFUSED,
                  "%s: this step has %u tasks on %u nodes, %u of them here: dtrain needs the same number of "
                  "tasks on every node (use --ntasks-per-node)",
                  s->node, s->total_tasks, s->nnodes, s->local_tasks);
        return -1;
    }
    /* Ranks are Slurm task ids and a node holds a block of them: the block
     * of SLURM_NODEID (--distribution=block), or any block when the nodes
     * were reordered (--distribution=arbitrary with a SLURM_HOSTFILE that
     * lists each node K times in a row). */
    for (uint32_t i = 0; i < s->local_tasks; i++) {
        uint32_t global = 0;
        if ((rc = spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, i, &global)) != ESPANK_SUCCESS) {
            step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot map local task %u to its task id: %s", s->node, i,
                      spank_strerror(rc));
            return -1;
        }
        if (i == 0)
            s->node_pos = global / s->local_tasks;
        if (global != s->node_pos * s->local_tasks + i) {
            step_fail(s, DTRAIN_EXIT_REFUSED,
                      "%s: task %u runs here, but dtrain needs each node to hold a block of consecutive task "
                      "ids: use --distribution=block (or arbitrary, with SLURM_HOSTFILE listing each node "
                      "%u times in a row)",
                      s->node, global, s->local_tasks);
            return -1;
        }
    }
    /* MASTER_ADDR is rank 0's node: the one srun named from the step's
     * layout (DTRAIN_RANK0_NODE), else the step's first node. */
    if (s->rank0_node[0] != '\0') {
        if (s->node_pos == 0 && strcmp(s->rank0_node, s->node) != 0) {
            step_fail(s, DTRAIN_EXIT_REFUSED,
                      "%s: rank 0 runs here, but %s names %.64s: the job's environment is not the step's (leave "
                      "%s alone)", s->node, DTRAIN_ENV_RANK0_NODE, s->rank0_node, DTRAIN_ENV_RANK0_NODE);
            return -1;
        }
    } else if ((s->node_pos == 0) != (s->nodeid == 0)) {
        step_fail(s, DTRAIN_EXIT_REFUSED,
                  "%s: %s, but without word from srun (%s, which srun's dtrain.so sets unless --export=NONE "
                  "drops it) rank 0 must run on the step's first node (MASTER_ADDR): keep that node first in "
                  "SLURM_HOSTFILE (dtrain-topo --switch-addrs does)",
                  s->node, s->nodeid == 0 ? "this is the step's first node without rank 0" : "rank 0 runs here",
                  DTRAIN_ENV_RANK0_NODE);
        return -1;
    }
    return 0;
}

/* This node's model, from (first found):
 *  - topology_xml= of the site configuration ("%n" = this node);
 *  - HWLOC_XMLFILE in slurmstepd's own environment (slurmd's, the admin's;
 *    never the job's): loaded as a file here, because hwloc given a broken
 *    HWLOC_XMLFILE silently falls back to the real machine;
 *  - discovery of this machine (hwloc, NVML).
 * The load runs in a forked child bounded by DTRAIN_TOPO_TIMEOUT_MS: a
 * topology file that crashes or hangs hwloc, or a hung NVML, fails the
 * step with one line and leaves slurmstepd alone.  A file is opened as a
 * root process trusts it (no link, root-owned file and folders). */
static int read_topology(struct dtrain_plugin *plugin, char *err, size_t errlen)
{
    struct dtrain_step *s = &plugin->step;
    char path[DTRAIN_CONFIG_PATH_MAX];
    const char *xml = NULL;

    if (plugin->config.topology_xml[0] != '\0') {
        if (dtrain_config_topology_path(&plugin->config, s->node, path, sizeof path, err, errlen) != 0)
            return DTRAIN_ERR_INPUT;
        xml = path;
    } else {
        xml = getenv("HWLOC_XMLFILE");
    }
    if (xml != NULL && xml[0] == '\0')
        xml = NULL;
    return dtrain_topo_load_bounded(xml, DTRAIN_TOPO_LOAD_TRUSTED | DTRAIN_TOPO_LOAD_THIS_NODE, DTRAIN_TOPO_TIMEOUT_MS,
                                    &s->topo, err, errlen);
}

static int load_topology(struct dtrain_plugin *plugin)
{
    struct dtrain_step *s = &plugin->step;
    char err[DTRAIN_MSG_MAX];
    if (read_topology(plugin, err, sizeof err) != DTRAIN_OK) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot read this node's GPU topology: %s", s->node, err);
        return -1;
    }
    return 0;
}

/* The Slurm unit that is a node's NVLink domain (nvlink_domain_source=
 * block|ring, read from the task's SLURM_TOPOLOGY_ADDR), or 0: NVML's clique. */
/* The node's NVLink domain from the task's Slurm address (a block or a
 * ring, s->domain_unit) into s->nvlink_domain: 0, or -1 with why. */
static int domain_from_address(struct dtrain_step *s, spank_t sp, char *why, size_t whylen)
{
    char addr[DTRAIN_TREE_ADDR_MAX], pattern[DTRAIN_TREE_ADDR_MAX];
    const char *a = NULL, *p = NULL;
    /* unset or too long: a and p stay NULL, said as no address */
    job_getenv(sp, "SLURM_TOPOLOGY_ADDR", addr, sizeof addr, &a);
    job_getenv(sp, "SLURM_TOPOLOGY_ADDR_PATTERN", pattern, sizeof pattern, &p);
    return dtrain_tree_unit_domain((enum dtrain_tree_unit)s->domain_unit, a, p, s->nvlink_domain,
                                   sizeof s->nvlink_domain, why, whylen);
}

static int domain_unit_of(const struct dtrain_site_config *cfg)
{
    return cfg->nvlink_domain_source == DTRAIN_DOMAIN_BLOCK  ? DTRAIN_TREE_UNIT_BLOCK
           : cfg->nvlink_domain_source == DTRAIN_DOMAIN_RING ? DTRAIN_TREE_UNIT_RING
                                                               : 0;
}

/* dtrain-launch --supervise's report step (DTRAIN_NODE_REPORT=1 running
 * `dtrain-launch --node-report`, one task per node): nothing is placed;
 * each task gets the option values and this node's multi-node NVLink
 * domain, as a placed step would compute it (Slurm's block or ring, read in
 * task_init, or NVML's clique), whatever the step's shape.  A node whose
 * topology or domain cannot be read reports none (said in slurmd's log):
 * the supervisor then takes it as in no domain. */
static int report_step(struct dtrain_plugin *plugin, spank_t sp)
{
    struct dtrain_step *s = &plugin->step;
    char buf[8], err[DTRAIN_MSG_MAX];
    const char *v = NULL;
    int argc = 0;
    char **argv = NULL;
    if (job_getenv(sp, DTRAIN_ENV_NODE_REPORT, buf, sizeof buf, &v) != 0 || v == NULL || strcmp(v, "1") != 0 ||
        spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || !dtrain_argv_node_report(argc, argv))
        return 0;
    s->mode = DTRAIN_STEP_REPORT;
    s->nvlink_domain[0] = '\0';
    s->domain_unit = domain_unit_of(&plugin->config);
    if (s->domain_unit)
        return 1;
    if (read_topology(plugin, err, sizeof err) != DTRAIN_OK) {
        slurm_info("dtrain: %s: the node report has no NVLink domain: cannot read this node's GPU topology: %s",
                   s->node, err);
        return 1;
    }
    int d = dtrain_topo_nvlink_domain(s->topo, s->nvlink_domain, sizeof s->nvlink_domain, err, sizeof err);
    if (d < 0)
        slurm_info("dtrain: %s: the node report has no NVLink domain: %s", s->node, err);
    if (d != 1)
        s->nvlink_domain[0] = '\0';
    return 1;
}

/* Restrict the model to the GPUs Slurm's GRES gave the step, if any.
 * CUDA_VISIBLE_DEVICES is read only then: without GRES it is the user's. */
static int apply_gres(struct dtrain_step *s, spank_t sp)
{
    char step_gpus[1024], visible[4096], err[DTRAIN_MSG_MAX];
    const char *sg = NULL, *cv = NULL;
    int rc;

    if (job_getenv(sp, "SLURM_STEP_GPUS", step_gpus, sizeof step_gpus, &sg) != 0 ||
        (sg != NULL && job_getenv(sp, DTRAIN_ENV_CUDA_VISIBLE, visible, sizeof visible, &cv) != 0)) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot read SLURM_STEP_GPUS/CUDA_VISIBLE_DEVICES of the step "
                  "(longer than %zu/%zu bytes?)", s->node, sizeof step_gpus - 1, sizeof visible - 1);
        return -1;
    }
    if (dtrain_gres_parse(sg, cv, dtrain_topo_gpu_count(s->topo), &s->gres, err, sizeof err) != 0) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: the GPUs Slurm gave this step do not match the node: %s",
                  s->node, err);
        return -1;
    }
    if (s->gres.count == 0)
        return 0;
    rc = dtrain_topo_subset(s->topo, s->gres.index, s->gres.count, &s->gres_topo, err, sizeof err);
    if (rc != DTRAIN_OK) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot restrict the node to the step's GPUs: %s", s->node, err);
        return -1;
    }
    return 0;
}

/* The GPUs to place: the GRES GPUs (or the node's), only those of
 * --dtrain-gpu-vendor when given, each with the value its vendor's runtime
 * knows it by.  A node with GPUs of both vendors and no --dtrain-gpu-vendor
 * is refused by the planner. */
static int select_gpus(struct dtrain_plugin *plugin)
{
    struct dtrain_step *s = &plugin->step;
    const dtrain_topo *base = s->gres_topo ? s->gres_topo : s->topo;
    unsigned vendor = plugin->opts.gpu_vendor;
    int n = dtrain_topo_gpu_count(base), keep[DTRAIN_TOPO_MAX_GPUS], k = 0;
    char err[DTRAIN_MSG_MAX];

    s->has_mig = 0;
    for (int g = 0; g < n; g++)
        s->has_mig |= strncmp(dtrain_topo_gpu(base, g)->uuid, "MIG-", 4) == 0;

    for (int g = 0; g < n; g++) {
        const struct dtrain_gpu_info *gpu = dtrain_topo_gpu(base, g);
        if (vendor && gpu->vendor_id != vendor)
            continue;
        if (s->gres.count > 0)
            memcpy(s->gpu_token[k], s->gres.visible[g], sizeof s->gpu_token[k]);
        else if (s->has_mig && gpu->uuid[0]) /* MIG instances by UUID only; then whole GPUs too */
            snprintf(s->gpu_token[k], sizeof s->gpu_token[k], "%s", gpu->uuid);
        else
            snprintf(s->gpu_token[k], sizeof s->gpu_token[k], "%d", gpu->vendor_index);
        keep[k++] = g;
    }
    if (k == n)
        return 0;
    if (k == 0) {
        step_fail(s, DTRAIN_EXIT_REFUSED, "%s: --dtrain-gpu-vendor=%s, but none of the step's %d GPUs here is one: "
                  "ask for that vendor's nodes or GPUs (--gres=gpu:TYPE:N)", s->node,
                  vendor == DTRAIN_VENDOR_AMD ? "amd" : "nvidia", n);
        return -1;
    }
    dtrain_topo *sub = NULL;
    if (dtrain_topo_subset(base, keep, k, &sub, err, sizeof err) != DTRAIN_OK) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot restrict the node to the %s GPUs: %s", s->node,
                  vendor == DTRAIN_VENDOR_AMD ? "AMD" : "NVIDIA", err);
        return -1;
    }
    dtrain_topo_free(s->gres_topo);
    s->gres_topo = sub;
    return 0;
}

static int plan_step(struct dtrain_plugin *plugin)
{
    struct dtrain_step *s = &plugin->step;
    const dtrain_topo *node = s->gres_topo ? s->gres_topo : s->topo;
    const dtrain_topo **nodes = NULL;
    char err[DTRAIN_MSG_MAX];
    struct dtrain_shape shape = {
        .tp = dtrain_options_tp(&plugin->opts),
        .pp = dtrain_options_pp(&plugin->opts),
        .dp = plugin->opts.dp,
        .nnodes = (int)s->nnodes,
        .tasks_per_node = (int)s->local_tasks,
    };
    struct dtrain_policy policy = {
        .allow_pcie = s->allow_pcie,
        /* A node without GPUs runs CPU ranks (the CPU backend). */
        .cpu_only = dtrain_topo_gpu_count(node) == 0,
        .nvlink_domain_gpus = plugin->config.nvlink_domain_gpus,
        .pp_in_domain = plugin->opts.pp_in_domain,
        /* Slurm's block (ring) stands for NVML's clique: the task's
         * SLURM_TOPOLOGY_ADDR names it (read in task_init, where Slurm has
         * set it); the launcher compares the nodes'. */
        .node_domain = plugin->config.nvlink_domain_source == DTRAIN_DOMAIN_BLOCK  ? DTRAIN_TREE_BLOCK_PREFIX
                       : plugin->config.nvlink_domain_source == DTRAIN_DOMAIN_RING ? DTRAIN_TREE_RING_PREFIX
                                                                                    : NULL,
        /* --dtrain-cpu-bind, else the site's cpu_bind=, else whole cores */
        .cpu_bind = (plugin->opts.cpu_bind ? plugin->opts.cpu_bind == 2 : plugin->config.cpu_bind_numa)
                        ? DTRAIN_CPU_BIND_NUMA
                        : DTRAIN_CPU_BIND_CORES,
    };
    int rc = -1;

    if (s->total_tasks > DTRAIN_PLAN_MAX_WORLD) {
        step_fail(s, DTRAIN_EXIT_REFUSED, "%s: %u tasks is more than dtrain places (%d)", s->node, s->total_tasks,
                  DTRAIN_PLAN_MAX_WORLD);
        return -1;
    }
    /* Only this node is known here; the plan of this node's ranks depends
     * on this node's model alone, so it stands for every node. */
    nodes = malloc(sizeof *nodes * s->nnodes);
    if (nodes == NULL) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: out of memory", s->node);
        return -1;
    }
    for (uint32_t i = 0; i < s->nnodes; i++)
        nodes[i] = node;
    /* This node's share only: memory and time independent of the world. */
    int prc = dtrain_plan_place_node(&shape, nodes, &policy, (int)s->node_pos, &s->plan, err, sizeof err);
    if (prc != DTRAIN_OK) {
        step_fail(s, dtrain_status_exit(prc), "%s: %s", s->node, err);
        goto cleanup;
    }
    /* A TP group of several nodes, or PP groups kept in a domain: the
     * launcher checks with the other nodes that they report this same
     * domain (launcher/exchange.c). */
    s->nvlink_domain[0] = '\0';
    s->domain_unit = 0;
    if (shape.tp > shape.tasks_per_node || policy.pp_in_domain) {
        if (policy.node_domain)
            s->domain_unit = domain_unit_of(&plugin->config);
        else if (dtrain_topo_nvlink_domain(node, s->nvlink_domain, sizeof s->nvlink_domain, err, sizeof err) != 1)
            s->nvlink_domain[0] = '\0'; /* the planner refused such a node already */
    }
    s->mode = DTRAIN_STEP_PLACED;
    rc = 0;
cleanup:
    free(nodes);
    return rc;
}

/* MASTER_ADDR/MASTER_PORT of the placed step (rendezvous.h), the restart
 * count, the GPU visibility.  The first node claims the step's block of
 * ports_per_step ports (MASTER_PORT its first); a block with a busy port is
 * passed over for the range's next when every task learns the block from
 * this node, i.e. on a step of one node (the other nodes compute the block
 * alone).  dtrain's own trainer claims none.  An address that cannot
 * be worked out only leaves MASTER_ADDR unset. */
static void prepare_tasks(struct dtrain_plugin *plugin, spank_t sp, uint32_t stepid)
{
    struct dtrain_step *s = &plugin->step;
    char buf[4096], err[DTRAIN_RDV_ERR_MAX];
    const char *v = NULL;
    uint32_t jobid = 0;
    long n;

    s->gpu_all = plugin->opts.gpu_visibility ? plugin->opts.gpu_visibility == 1 : !plugin->config.gpu_visibility_one;
    /* CUDA runs on one MIG instance per process: with MIG instances among
     * the GPUs, every task sees only its own. */
    if (s->has_mig)
        s->gpu_all = 0;
    s->restart_count = 0;
    if (job_getenv(sp, "SLURM_RESTART_COUNT", buf, sizeof buf, &v) == 0 && v != NULL &&
        dtrain_parse_int(v, 0, 1000000, "SLURM_RESTART_COUNT", &n, err, sizeof err) == 0)
        s->restart_count = (int)n;
    spank_err_t rc = spank_get_item(sp, S_JOB_ID, &jobid);
    if (rc != ESPANK_SUCCESS) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot read the job id: %s", s->node, spank_strerror(rc));
        return;
    }
    int argc = 0;
    char **argv = NULL;
    int own_trainer =
        spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && dtrain_argv_runs_own_trainer(argc, argv);
    const int lo = plugin->config.master_port_lo, hi = plugin->config.master_port_hi;
    const int k = plugin->config.ports_per_step;
    s->master_port = own_trainer ? 0 : dtrain_master_port(lo, hi, k, jobid, stepid);
    s->master_ports = own_trainer ? 0 : k;
    if (s->node_pos == 0 && s->master_port > 0) { /* rank 0's node */
        const int may_move = s->nnodes == 1;
        char what[160];
        dtrain_snprintf(what, sizeof what, "MASTER_PORT %d (block %d-%d of master_ports=%d-%d, ports_per_step=%d, "
                        "job %u step %u)", s->master_port, s->master_port, s->master_port + k - 1, lo, hi, k, jobid,
                        stepid);
        int crc = dtrain_rdv_claim_ports(s->master_port, lo, hi, k, may_move, &s->port_claim, err, sizeof err);
        if (crc == -2) {
            step_fail(s, DTRAIN_EXIT_FAILURE, "%s: %s: %s", s->node, what, err);
            return;
        }
        if (crc != 0 && may_move) {
            step_fail(s, DTRAIN_EXIT_FAILURE, "%s: %s: %s; no block of %d free ports of master_ports=%d-%d is left "
                      "on this node: run the step again when another has ended, or ask the admin to widen "
                      "master_ports", s->node, what, err, k, lo, hi);
            return;
        }
        if (crc != 0) {
            step_fail(s, DTRAIN_EXIT_FAILURE, "%s: %s: %s; a step of %u nodes cannot move to another block (each "
                      "node computes it alone): run the step again (another step id gets another block) or ask the "
                      "admin to widen master_ports", s->node, what, err, s->nnodes);
            return;
        }
        s->master_port = s->port_claim.port;
    }
    v = NULL;
    if (s->rank0_node[0] != '\0')
        v = s->rank0_node;
    else if (job_getenv(sp, "SLURM_STEP_NODELIST", buf, sizeof buf, &v) != 0 || v == NULL)
        job_getenv(sp, "SLURM_JOB_NODELIST", buf, sizeof buf, &v);
    if (dtrain_rdv_master_addr(v, s->master_addr, sizeof s->master_addr, err, sizeof err) != 0) {
        s->master_addr[0] = '\0';
        if (plugin->opts.verbose)
            slurm_info("dtrain: %s: MASTER_ADDR not set: %s", s->node, err);
    }
}

int dtrain_remote_post_opt(struct dtrain_plugin *plugin, spank_t sp)
{
    struct dtrain_step *s = &plugin->step;
    uint32_t stepid;
    spank_err_t rc;

    if (!dtrain_options_used(&plugin->opts) || s->mode == DTRAIN_STEP_FAILED)
        return 0;
    /* slurmstepd's own environment (not the job's) names the node. */
    const char *node = getenv("SLURMD_NODENAME");
    if (node == NULL || dtrain_snprintf(s->node, sizeof s->node, "%s", node) != 0)
        gethostname(s->node, sizeof s->node - 1);

    if ((rc = spank_get_item(sp, S_JOB_STEPID, &stepid)) != ESPANK_SUCCESS) {
        step_fail(s, DTRAIN_EXIT_FAILURE, "%s: cannot read the step id: %s", s->node, spank_strerror(rc));
        return 0;
    }
    s->allow_pcie = dtrain_config_pcie_allowed(&plugin->config, plugin->opts.allow_pcie);
    if (s->allow_pcie < 0) {
        step_fail(s, DTRAIN_EXIT_USAGE, "--dtrain-allow-pcie is turned off on this cluster (site setting "
                  "allow_pcie=no): leave it out");
        return 0;
    }
    if (stepid == SLURM_BATCH_SCRIPT || stepid == SLURM_INTERACTIVE_STEP) {
        s->mode = DTRAIN_STEP_OPTIONS;
        return 0;
    }
    if (stepid == SLURM_EXTERN_CONT || stepid == SLURM_PENDING_STEP)
        return 0;
    if (report_step(plugin, sp))
        return 0;
    if (read_rank0_node(s, sp) != 0 || read_layout(s, sp) != 0 || load_topology(plugin) != 0 || apply_gres(s, sp) != 0 ||
        select_gpus(plugin) != 0)
        return 0;
    if (plan_step(plugin) == 0)
        prepare_tasks(plugin, sp, stepid);
    return 0;
}

/* ---------------------------------------------------------------- tasks */

/* End this task (the forked child about to exec the user's program). */
static void task_fail(int code, int print, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
static void task_fail(int code, int print, const char *fmt, ...)
{
    if (print) {
        va_list ap;
        va_start(ap, fmt);
        fputs("dtrain: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        fflush(stderr);
    }
    _exit(code);
}

static void export_env(spank_t sp, const struct dtrain_env_list *env)
{
    for (int i = 0; i < env->count; i++) {
        spank_err_t rc = spank_setenv(sp, env->var[i].name, env->var[i].value, 1);
        if (rc != ESPANK_SUCCESS)
            task_fail(DTRAIN_EXIT_FAILURE, 1, "cannot set %s: %s", env->var[i].name, spank_strerror(rc));
    }
}

/* With --dtrain-verbose, the node's first task says once when the topology
 * lists CPUs that this machine lacks (a saved topology on a smaller test
 * machine), instead of every task saying it. */
static void warn_missing_cpus(struct dtrain_plugin *plugin)
{
    struct dtrain_step *s = &plugin->step;
    char err[DTRAIN_MSG_MAX], have[256];
    int partial = 0, none = 0;
    for (uint32_t i = 0; i < s->local_tasks; i++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(s->plan, (int)(s->node_pos * s->local_tasks + i));
        int listed, usable;
        if (t->cpulist[0] == '\0' || dtrain_cpulist_usable(t->cpulist, &listed, &usable, err, sizeof err) != 0)
            continue;
        partial += usable > 0 && usable < listed;
        none += usable == 0;
    }
    if (partial + none == 0)
        return;
    if (dtrain_cpus_allowed(have, sizeof have) != 0)
        dtrain_snprintf(have, sizeof have, "?");
    fprintf(stderr, "dtrain: warning: %s: the topology lists CPUs this machine lacks (usable here: %s): "
            "%d of %u tasks bound to part of their CPUs, %d left unbound\n", s->node, have, partial,
            s->local_tasks, none);
}

/* Bind the task when the site asks for it; returns the bound CPU list or
 * NULL.  A topology that names CPUs this machine lacks never fails a task. */
static const char *bind_task(struct dtrain_plugin *plugin, const struct dtrain_task_placement *t, char *bound,
                             size_t len)
{
    char err[DTRAIN_MSG_MAX];
    if (!plugin->config.bind || t->cpulist[0] == '\0')
        return NULL;
    switch (dtrain_bind_to_cpulist(t->cpulist, bound, len, err, sizeof err)) {
    case DTRAIN_BIND_ALL:
    case DTRAIN_BIND_PART:
        return bound;
    case DTRAIN_BIND_NONE:
        return NULL;
    case DTRAIN_BIND_ERROR:
        break;
    }
    if (plugin->opts.verbose)
        fprintf(stderr, "dtrain: warning: %s: rank %d not bound: %s\n", plugin->step.node, t->rank, err);
    return NULL;
}

/* With --dtrain-verbose, the node's first task draws the node's islands and
 * TP groups, in one write so that the nodes' pictures do not interleave. */
static void draw_node(const struct dtrain_step *s, const dtrain_topo *model)
{
    char prefix[DTRAIN_CONFIG_NODE_MAX + 16], *text = NULL;
    size_t len = 0;
    snprintf(prefix, sizeof prefix, "dtrain: %s: ", s->node);
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return;
    dtrain_plan_picture(mem, prefix, model, s->plan, (int)s->node_pos);
    if (fclose(mem) == 0 && text != NULL)
        fwrite(text, 1, len, stderr);
    free(text);
}

int dtrain_remote_task_init(struct dtrain_plugin *plugin, spank_t sp)
{
    struct dtrain_step *s = &plugin->step;
    static char visible[DTRAIN_COORDS_VISIBLE_MAX], bound[DTRAIN_TASK_ENV_VALUE_MAX];
    int task_gpu[DTRAIN_PLAN_MAX_WORLD];
    int local = -1;
    uint32_t global = 0;
    spank_err_t rc;

    if (spank_context() != S_CTX_REMOTE || s->mode == DTRAIN_STEP_IGNORED)
        return 0;
    if ((rc = spank_get_item(sp, S_TASK_ID, &local)) != ESPANK_SUCCESS)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: cannot read the task id: %s", s->node, spank_strerror(rc));
    if (s->mode == DTRAIN_STEP_FAILED)
        task_fail(s->failure_exit, local == 0, "%s", s->failure);

    if (dtrain_task_env_options(&s->env, &plugin->opts, s->allow_pcie) != 0)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: an option value does not fit the environment", s->node);
    if (s->mode == DTRAIN_STEP_OPTIONS) {
        if (dtrain_task_env_batch(&s->env, plugin->config.expedited_requeue) != 0)
            task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: the site's settings do not fit the environment", s->node);
        export_env(sp, &s->env);
        return 0;
    }
    if (s->mode == DTRAIN_STEP_REPORT) {
        char why[DTRAIN_MSG_MAX];
        if (s->domain_unit && domain_from_address(s, sp, why, sizeof why) != 0)
            s->nvlink_domain[0] = '\0'; /* the report says none; the address it carries says why */
        if (s->nvlink_domain[0] && dtrain_env_list_set(&s->env, DTRAIN_ENV_NVLINK_DOMAIN, "%s", s->nvlink_domain) != 0)
            task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: the NVLink domain does not fit the environment", s->node);
        export_env(sp, &s->env);
        return 0;
    }

    if ((rc = spank_get_item(sp, S_TASK_GLOBAL_ID, &global)) != ESPANK_SUCCESS)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: cannot read the task's global id: %s", s->node, spank_strerror(rc));
    if (local < 0 || (uint32_t)local >= s->local_tasks || global != s->node_pos * s->local_tasks + (uint32_t)local)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: task %u (local %d) is not where the plan put it", s->node, global,
                  local);

    int argc = 0;
    char **argv = NULL;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && dtrain_argv_spawns_workers(argc, argv))
        task_fail(DTRAIN_EXIT_USAGE, local == 0, DTRAIN_SPAWN_REFUSAL, argv[0]);

    const struct dtrain_task_placement *t = dtrain_plan_task(s->plan, (int)global);
    const dtrain_topo *model = s->gres_topo ? s->gres_topo : s->topo; /* what the plan placed on */
    const char *cuda = NULL, *rocr = NULL;
    static char hip[DTRAIN_COORDS_VISIBLE_MAX];
    int device = -1;
    if (t->gpu >= 0) {
        /* The values CUDA knows the GPUs by: Slurm's for GRES GPUs, else
         * their places in PCI bus id order; this node's tasks' GPUs first
         * with --dtrain-gpu-visibility=all. */
        for (uint32_t i = 0; i < s->local_tasks && i < DTRAIN_PLAN_MAX_WORLD; i++)
            task_gpu[i] = dtrain_plan_task(s->plan, (int)(s->node_pos * s->local_tasks + i))->gpu;
        int vrc = dtrain_visible_devices(task_gpu, (int)s->local_tasks, dtrain_topo_gpu_count(model),
                                         (const char (*)[DTRAIN_GPU_TOKEN_MAX])s->gpu_token, s->gpu_all, local,
                                         visible, sizeof visible, &device);
        if (vrc != 0)
            task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: cannot write CUDA_VISIBLE_DEVICES for rank %u", s->node, global);
        cuda = visible;
        /* AMD: ROCr takes the agent indices, HIP (and CUDA_VISIBLE_DEVICES,
         * which HIP reads too) then numbers those from 0. */
        if (dtrain_topo_vendor(model) == DTRAIN_VENDOR_AMD) {
            rocr = visible;
            if (dtrain_hip_indices(visible, hip, sizeof hip) != 0)
                task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: cannot write HIP_VISIBLE_DEVICES for rank %u", s->node,
                          global);
            cuda = hip;
        }
    }
    struct dtrain_task_where where = {
        .shape = dtrain_plan_shape(s->plan),
        .task = t,
        .local_world_size = (int)s->local_tasks,
        .cuda_visible = cuda,
        .rocr_visible = rocr,
        .cuda_device = device,
        .gpu_visibility = s->gpu_all ? "all" : "one",
        .cpus = NULL,
        .master_addr = s->master_addr[0] ? s->master_addr : NULL,
        .master_port = s->master_port,
        .master_ports = s->master_ports,
        .restart_count = s->restart_count,
    };
    if (local == 0 && plugin->config.bind && plugin->opts.verbose)
        warn_missing_cpus(plugin);
    where.cpus = bind_task(plugin, t, bound, sizeof bound);
    if (dtrain_task_env_placement(&s->env, &where) != 0)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: the placement of rank %u does not fit the environment", s->node,
                  global);
    if (s->domain_unit) {
        char why[DTRAIN_MSG_MAX];
        if (domain_from_address(s, sp, why, sizeof why) != 0)
            task_fail(DTRAIN_EXIT_REFUSED, local == 0, "%s: %s", s->node, why);
    }
    /* NVLink between the nodes of a domain needs an IMEX channel, which
     * Slurm's switch/nvidia_imex makes in the step's own /dev (imex.h):
     * looked for here, in the task, where CUDA will look. */
    if (s->nvlink_domain[0] && s->nnodes > 1 && plugin->config.imex_check) {
        char channel[32], why[DTRAIN_MSG_MAX], groups[96];
        const struct dtrain_shape *shape = dtrain_plan_shape(s->plan);
        if (shape->tp > shape->tasks_per_node)
            snprintf(groups, sizeof groups, "TP groups (T=%d over %d tasks per node)", shape->tp,
                     shape->tasks_per_node);
        else
            snprintf(groups, sizeof groups, "PP groups (--dtrain-pp-in-domain)");
        if (dtrain_imex_find_channel(plugin->config.imex_channels, channel, sizeof channel, why, sizeof why) != 1)
            task_fail(DTRAIN_EXIT_REFUSED, local == 0,
                      "%s: the step's %s use NVLink between the nodes of domain %s, which needs an IMEX channel, "
                      "and the step has none (%s): ask the admin for SwitchType=switch/nvidia_imex in slurm.conf "
                      "(a channel per job) and the nvidia-imex daemon on the domain's nodes",
                      s->node, groups, s->nvlink_domain, why);
        if (local == 0 && plugin->opts.verbose)
            fprintf(stderr, "dtrain: %s: IMEX channel %s/%s\n", s->node, plugin->config.imex_channels, channel);
    }
    if (s->nvlink_domain[0] && dtrain_env_list_set(&s->env, DTRAIN_ENV_NVLINK_DOMAIN, "%s", s->nvlink_domain) != 0)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: the placement of rank %u does not fit the environment", s->node,
                  global);
    if (plugin->opts.pp_in_domain && dtrain_env_list_set(&s->env, DTRAIN_ENV_PP_IN_DOMAIN, "1") != 0)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: the placement of rank %u does not fit the environment", s->node,
                  global);
    /* The links each group crosses, for the trainer's predicted times. */
    struct dtrain_group_links links;
    char links_text[DTRAIN_GROUP_LINKS_TEXT_MAX];
    if (dtrain_explain_rank_links(s->plan, model, t->rank, plugin->config.net_gbps, plugin->config.pcie_gbps,
                                  plugin->opts.pp_in_domain, &links) != 0 ||
        dtrain_group_links_format(&links, links_text, sizeof links_text) != 0 ||
        dtrain_env_list_set(&s->env, DTRAIN_ENV_GROUP_LINKS, "%s", links_text) != 0)
        task_fail(DTRAIN_EXIT_FAILURE, 1, "%s: the links of rank %u do not fit the environment", s->node, global);
    export_env(sp, &s->env);

    if (local == 0 && plugin->opts.verbose)
        draw_node(s, model);
    const char *warning = dtrain_plan_warning(s->plan);
    if (warning != NULL && local == 0)
        fprintf(stderr, "dtrain: warning: %s: %s\n", s->node, warning);
    char port_text[16] = "(unset)";
    if (s->master_port > 0)
        snprintf(port_text, sizeof port_text, "%d", s->master_port);
    if (plugin->opts.verbose)
        fprintf(stderr, "dtrain: rank %d on %s: tp %d pp %d dp %d, local rank %d, GPU %s%s%s (CUDA device %d of "
                "%.64s), CPUs %s, MASTER_ADDR=%s MASTER_PORT=%s, slowest links %s\n", t->rank,
                s->node, t->tp_rank, t->pp_rank, t->dp_rank, t->local_rank, cuda ? "" : "none",
                t->gpu_busid[0] ? " " : "", t->gpu_busid, device, cuda ? cuda : "-",
                where.cpus ? where.cpus : "not bound", s->master_addr[0] ? s->master_addr : "(unset)",
                port_text, links_text);
    fflush(stderr);
    return 0;
}

void dtrain_remote_exit(struct dtrain_plugin *plugin)
{
    struct dtrain_step *s = &plugin->step;
    dtrain_plan_free(s->plan);
    dtrain_topo_free(s->gres_topo);
    dtrain_topo_free(s->topo);
    dtrain_rdv_release(&s->port_claim);
    s->plan = NULL;
    s->gres_topo = NULL;
    s->topo = NULL;
}
