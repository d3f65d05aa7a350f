/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Allocator context (sbatch, salloc), and srun before it asks for resources:
 * refuse a job that cannot run before it is queued.  The option callbacks
 * already refused malformed values; here the values meet the site policy
 * and the job's size as the client parsed it (see submit.h). */
#include "plugin.h"
#include "submit.h"

int dtrain_allocator_post_opt(struct dtrain_plugin *plugin)
{
    struct dtrain_job_size size;
    if (!dtrain_options_used(&plugin->opts))
        return 0;
    dtrain_job_size_from_client(&size);
    return dtrain_client_check(&plugin->opts, &plugin->config, &size);
}
