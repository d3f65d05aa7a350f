/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Local context (srun).  srun first checks its options like sbatch does
 * (dtrain_allocator_post_opt, before it asks for resources); here it checks
 * again with the step Slurm actually created (its task and node counts),
 * before any task starts. */
#include <stdio.h>

#include "dtrain_parse.h"
#include "plugin.h"
#include "submit.h"

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
    if (code == 0)
        return 0;
    /* The step exists now: return an error so that srun releases it. */
    fprintf(stderr, "dtrain: %s\n", err);
    fflush(stderr);
    return -1;
}
