/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Allocator context (sbatch, salloc), and srun before it asks for resources:
 * refuse a job that cannot run before it is queued.  The option callbacks
 * already refused malformed values; here the values meet the site policy
 * and the job's size as the client parsed it (see submit.h). */
#include <stdlib.h>

#include "dtrain_exit.h"
#include "plugin.h"
#include "submit.h"

int dtrain_allocator_post_opt(struct dtrain_plugin *plugin, int allocates)
{
    struct dtrain_job_size size;
    char err[DTRAIN_MSG_MAX];
    long nodes;
    int code;
    if (!dtrain_options_used(&plugin->opts))
        return 0;
    /* srun of dtrain-launch --supervise's report step: one task per node,
     * nothing placed (remote.c) */
    if (!allocates && dtrain_env_node_report())
        return 0;
    /* srun inside a job (SLURM_JOB_ID set) runs a step of an allocation
     * made before: its --segment is not the job's */
    dtrain_job_size_from_client(&size, allocates || getenv("SLURM_JOB_ID") == NULL);
    if (dtrain_client_check(&plugin->opts, &plugin->config, &size) != 0)
        return -1;
    /* --dtrain-spares: sbatch and salloc ask for the spare nodes too.  Not
     * srun: inside the job the spares reach it through the environment,
     * and its nodes are the ones dtrain-launch --supervise gives it. */
    if (!allocates)
        return 0;
    if ((code = dtrain_submit_spares(&plugin->opts, &size, &nodes, err, sizeof err)) != 0)
        dtrain_client_refuse(code, err);
    if (nodes > 0 && dtrain_client_set_nodes(nodes, err, sizeof err) != 0)
        dtrain_client_refuse(DTRAIN_EXIT_USAGE, err);
    return 0;
}
