/* The environment the plugin gives a task (doc/environment.md), computed as
 * a plain list of name=value pairs so that it can be checked without Slurm.
 *
 * dtrain_task_env_options(): what every step of a dtrain job gets, the batch
 * step included (the option values, no placement).
 * dtrain_task_env_placement(): adds one task's placement over it. */
#ifndef DTRAIN_SPANK_TASKENV_H
#define DTRAIN_SPANK_TASKENV_H

#include <stddef.h>

#include "dtrain_plan.h"
#include "options.h"

#define DTRAIN_TASK_ENV_MAX 32
#define DTRAIN_TASK_ENV_VALUE_MAX (DTRAIN_OPT_PATH_MAX + 16)

struct dtrain_env_var {
    const char *name; /* one of the DTRAIN_ENV_* names (static strings) */
    char value[DTRAIN_TASK_ENV_VALUE_MAX];
};

struct dtrain_task_env {
    int count;
    struct dtrain_env_var var[DTRAIN_TASK_ENV_MAX];
};

/* Where one task runs, as the remote context worked it out. */
struct dtrain_task_where {
    const struct dtrain_shape *shape;           /* the plan's shape, D filled in */
    const struct dtrain_task_placement *task;   /* this task's entry in the plan */
    int local_world_size;                       /* tasks of this step on this node */
    const char *cuda_visible; /* CUDA_VISIBLE_DEVICES for the task's GPU; NULL: no GPU */
    const char *cpus;         /* the CPUs the task was bound to; NULL: not bound */
};

/* Start env with the option values.  allow_pcie: the effective setting
 * (user option and site policy).  Returns 0, or -1 when a value does not fit. */
int dtrain_task_env_options(struct dtrain_task_env *env, const struct dtrain_options *opts, int allow_pcie);

/* Add (or replace) the placement variables of one task. Returns 0 or -1. */
int dtrain_task_env_placement(struct dtrain_task_env *env, const struct dtrain_task_where *where);

/* The value of `name` in env, or NULL. */
const char *dtrain_task_env_get(const struct dtrain_task_env *env, const char *name);

#endif
