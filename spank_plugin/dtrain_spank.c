/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain.so: the SPANK entry points.  Each one dispatches to the file of the
 * context it runs in (allocator.c, local.c, remote.c); see plugin.h. */
#include <stdio.h>
#include <string.h>

#include <slurm/spank.h>

#include "dtrain_exit.h"
#include "plugin.h"
#include "submit.h"

SPANK_PLUGIN(dtrain, 1)

/* The plugin's state in this process (one step, in slurmstepd).  Static
 * because Slurm's option callbacks carry no user pointer. */
static struct dtrain_plugin plugin;

/* One callback for every --dtrain-* option; `val` is the option id. */
static int option_cb(int val, const char *optarg, int remote)
{
    char err[DTRAIN_MSG_MAX];
    if (dtrain_options_set(&plugin.opts, (enum dtrain_opt_id)val, optarg, err, sizeof err) == 0)
        return 0;
    if (!remote)
        dtrain_client_refuse(DTRAIN_EXIT_USAGE, err);
    /* In slurmstepd: never exit; the step's tasks report it (remote.c). */
    dtrain_remote_option_error(&plugin, err);
    return 0;
}

static int register_options(spank_t sp)
{
    for (size_t i = 0; i < dtrain_option_count; i++) {
        const struct dtrain_option_info *info = &dtrain_option_table[i];
        /* Slurm copies the strings; the casts only satisfy its non-const API. */
        struct spank_option opt = {
            .name = (char *)info->name,
            .arginfo = (char *)info->arginfo,
            .usage = (char *)info->usage,
            .has_arg = info->arginfo != NULL,
            .val = (int)info->id,
            .cb = option_cb,
        };
        spank_err_t rc = spank_option_register(sp, &opt);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("dtrain: cannot register --%s: %s", info->name, spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    char err[DTRAIN_MSG_MAX];
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL:
    case S_CTX_REMOTE:
        break;
    default: /* slurmd, job prolog/epilog: nothing to do */
        return 0;
    }
    memset(&plugin, 0, sizeof plugin);
    /* no block held (port 0): its lock_fd entries are not read */
    plugin.step.port_claim = (struct dtrain_rdv_claim){.port = 0, .dir_fd = -1};
    dtrain_options_init(&plugin.opts);
    if (dtrain_config_parse(&plugin.config, ac, av, err, sizeof err) != 0) {
        slurm_error("dtrain: %s", err);
        return -1;
    }
    return register_options(sp);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL: /* srun checks its options as sbatch does */
        return dtrain_allocator_post_opt(&plugin, spank_context() == S_CTX_ALLOCATOR);
    case S_CTX_REMOTE:
        return dtrain_remote_post_opt(&plugin, sp);
    default:
        return 0;
    }
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return dtrain_local_user_init(&plugin, sp);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return dtrain_remote_task_init(&plugin, sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (spank_context() == S_CTX_REMOTE)
        dtrain_remote_exit(&plugin);
    return 0;
}
