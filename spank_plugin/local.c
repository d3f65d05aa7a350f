/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Local context (srun).  srun first checks its options like sbatch does
 * (dtrain_allocator_post_opt, before it asks for resources); here it checks
 * again with the step Slurm actually created (its task and node counts),
 * before any task starts.
 *
 * srun is also the one process that sees the whole step: each slurmstepd
 * knows only its own node's task ids.  For a step of several nodes it asks
 * slurmctld for the step's layout (one RPC, slurm_job_step_layout_get) and
 * its configuration (slurm_load_ctl_conf), and hands the tasks
 *   DTRAIN_RANK0_NODE  the node holding task 0: MASTER_ADDR's node.  Slurm
 *                      26.05 lays the tasks out by leaf switch, block or ring
 *                      position, and SLURM_HOSTFILE orders them as it
 *                      lists the nodes, so task 0 need not be on the step's
 *                      first node (SLURM_NODEID 0);
 *   DTRAIN_NODE_ORDER  where the order comes from (dtrain_tree.h), which
 *                      --dtrain-verbose names here and in dtrain-launch.
 * Both travel in srun's environment, which Slurm copies to the tasks
 * (not with --export=NONE: slurmstepd then falls back to the first node). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>

#include "dtrain_env.h"
#include "dtrain_parse.h"
#include "dtrain_slurm_compat.h"
#include "dtrain_tree.h"
#include "plugin.h"
#include "submit.h"

/* Nodes named in --dtrain-verbose's order line; the rest are counted. */
#define ORDER_LINE_NODES 32

/* The step's node names in SLURM_NODEID order, into names[nnodes] (each
 * freed with free()); 0, or -1. */
static int node_names(const char *list, uint32_t nnodes, char **names)
{
    DTRAIN_SLURM_HOSTLIST hl = list ? slurm_hostlist_create(list) : NULL;
    uint32_t i = 0;
    if (hl == NULL)
        return -1;
    for (; i < nnodes; i++)
        if ((names[i] = slurm_hostlist_shift(hl)) == NULL)
            break;
    slurm_hostlist_destroy(hl);
    return i == nnodes ? 0 : -1;
}

/* See the top of this file.  Nothing here blocks the step: without the
 * layout the tasks fall back to the step's first node. */
static void hand_over_order(struct dtrain_plugin *plugin, spank_t sp, uint32_t nnodes)
{
    slurm_step_id_t id;
    uint32_t job = 0, step = 0;
    slurm_step_layout_t *layout = NULL;
    slurm_conf_t *conf = NULL;
    char **names = NULL;
    int *pos_node = NULL;
    const int verbose = plugin->opts.verbose;

    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
        return;
    memset(&id, 0, sizeof id);
    id.job_id = job;
    id.step_id = step;
    id.step_het_comp = NO_VAL;
    layout = slurm_job_step_layout_get(&id);
    if (layout == NULL || layout->node_cnt != nnodes || layout->tasks == NULL || layout->tids == NULL) {
        if (verbose)
            fprintf(stderr, "dtrain: cannot read step %u.%u's layout from Slurm: MASTER_ADDR is its first node\n",
                    job, step);
        goto out;
    }
    names = calloc(nnodes, sizeof *names);
    pos_node = malloc(sizeof *pos_node * nnodes);
    if (names == NULL || pos_node == NULL || node_names(layout->node_list, nnodes, names) != 0)
        goto out;
    /* node_pos = its first task id / K; read_layout in slurmstepd checks
     * that each node holds a block of them */
    uint32_t K = layout->tasks[0];
    for (uint32_t p = 0; p < nnodes; p++)
        pos_node[p] = -1;
    for (uint32_t n = 0; n < nnodes; n++) {
        if (K == 0 || layout->tasks[n] != K || layout->tids[n] == NULL || layout->tids[n][0] % K != 0 ||
            layout->tids[n][0] / K >= nnodes)
            goto out; /* refused in slurmstepd, with the reason */
        pos_node[layout->tids[n][0] / K] = (int)n;
    }
    if (pos_node[0] < 0)
        goto out;
    if (setenv(DTRAIN_ENV_RANK0_NODE, names[pos_node[0]], 1) != 0)
        goto out;

    const char *plugin_name = NULL, *param = NULL;
    int no_dist_topo = 0, topo_layout = 0;
    if (slurm_load_ctl_conf((time_t)0, &conf) == SLURM_SUCCESS && conf != NULL) {
        plugin_name = conf->topology_plugin;
        param = conf->topology_param;
#if HAVE_DECL_SELECT_NO_DIST_TOPO_BLOCK
        topo_layout = 1;
        no_dist_topo = (conf->select_type_param & SELECT_NO_DIST_TOPO_BLOCK) != 0;
#endif
    }
    const int arbitrary = (layout->task_dist & SLURM_DIST_STATE_BASE) == SLURM_DIST_ARBITRARY;
    enum dtrain_node_order order =
        conf ? dtrain_node_order_of(plugin_name, param, arbitrary, topo_layout, no_dist_topo)
             : arbitrary ? DTRAIN_NODE_ORDER_HOSTFILE : DTRAIN_NODE_ORDER_UNKNOWN;
    if (order != DTRAIN_NODE_ORDER_UNKNOWN)
        setenv(DTRAIN_ENV_NODE_ORDER, dtrain_node_order_name(order), 1);
    if (verbose) {
        /* one write: the line is not interleaved with srun's own */
        char line[DTRAIN_MSG_MAX + 64 * ORDER_LINE_NODES];
        size_t at = 0;
        int w = snprintf(line, sizeof line, "dtrain: node order: %s:", dtrain_node_order_describe(order));
        at = w > 0 ? (size_t)w : 0;
        for (uint32_t p = 0; p < nnodes && p < ORDER_LINE_NODES && at < sizeof line; p++) {
            w = snprintf(line + at, sizeof line - at, " %.60s", pos_node[p] >= 0 ? names[pos_node[p]] : "?");
            at = w > 0 && (size_t)w < sizeof line - at ? at + (size_t)w : sizeof line - 1;
        }
        if (nnodes > ORDER_LINE_NODES && at < sizeof line)
            at += (size_t)snprintf(line + at, sizeof line - at, " ... (%u more)", nnodes - ORDER_LINE_NODES);
        if (at < sizeof line)
            snprintf(line + at, sizeof line - at, " (rank 0 and MASTER_ADDR on %.60s)", names[pos_node[0]]);
        fprintf(stderr, "%s\n", line);
    }
out:
    if (verbose)
        fflush(stderr);
    for (uint32_t n = 0; names && n < nnodes; n++)
        free(names[n]);
    free(names);
    free(pos_node);
    if (conf)
        dtrain_slurm_free_conf(conf);
    if (layout)
        slurm_job_step_layout_free(layout);
}

int dtrain_local_user_init(struct dtrain_plugin *plugin, spank_t sp)
{
    struct dtrain_job_size size;
    char ntasks[16], nnodes[16], err[DTRAIN_MSG_MAX];
    uint32_t total = 0, nodes = 0;
    spank_err_t rc;

    if (spank_context() != S_CTX_LOCAL || !dtrain_options_used(&plugin->opts) || dtrain_env_node_report())
        return 0; /* dtrain-launch --supervise's report step places nothing (remote.c) */
    if ((rc = spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &total)) != ESPANK_SUCCESS ||
        (rc = spank_get_item(sp, S_JOB_NNODES, &nodes)) != ESPANK_SUCCESS) {
        /* The remote side checks again with what it sees; do not block here. */
        slurm_verbose("dtrain: cannot read the step size in srun: %s", spank_strerror(rc));
        return 0;
    }
    dtrain_snprintf(ntasks, sizeof ntasks, "%u", total);
    dtrain_snprintf(nnodes, sizeof nnodes, "%u", nodes);
    dtrain_job_size_derive(ntasks, nnodes, NULL, &size);
    int code = dtrain_submit_check(&plugin->opts, &plugin->config, &size, err, sizeof err);
    if (code == 0) {
        /* a step of one node: rank 0 is on it, nothing to order */
        unsetenv(DTRAIN_ENV_RANK0_NODE);
        unsetenv(DTRAIN_ENV_NODE_ORDER);
        if (nodes > 1)
            hand_over_order(plugin, sp, nodes);
        return 0;
    }
    /* The step exists now: return an error so that srun releases it. */
    fprintf(stderr, "dtrain: %s\n", err);
    fflush(stderr);
    return -1;
}
