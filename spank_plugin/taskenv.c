/* A task's environment as name=value pairs; see taskenv.h. */
#include "taskenv.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dtrain_env.h"

/* Set name to the formatted value, replacing an earlier value of name. */
static int env_set(struct dtrain_task_env *env, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int env_set(struct dtrain_task_env *env, const char *name, const char *fmt, ...)
{
    struct dtrain_env_var *v = NULL;
    for (int i = 0; i < env->count && !v; i++)
        if (strcmp(env->var[i].name, name) == 0)
            v = &env->var[i];
    if (v == NULL) {
        if (env->count >= DTRAIN_TASK_ENV_MAX)
            return -1;
        v = &env->var[env->count++];
        v->name = name;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(v->value, sizeof v->value, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= sizeof v->value) ? -1 : 0;
}

int dtrain_task_env_options(struct dtrain_task_env *env, const struct dtrain_options *opts, int allow_pcie)
{
    int rc = 0;
    env->count = 0;
    rc |= env_set(env, DTRAIN_ENV_TP, "%d", dtrain_options_tp(opts));
    rc |= env_set(env, DTRAIN_ENV_PP, "%d", dtrain_options_pp(opts));
    if (opts->dp > 0)
        rc |= env_set(env, DTRAIN_ENV_DP, "%d", opts->dp);
    if (opts->ckpt_dir[0] != '\0')
        rc |= env_set(env, DTRAIN_ENV_CKPT_DIR, "%s", opts->ckpt_dir);
    if (opts->max_restarts >= 0)
        rc |= env_set(env, DTRAIN_ENV_MAX_RESTARTS, "%d", opts->max_restarts);
    rc |= env_set(env, DTRAIN_ENV_VERBOSE, "%d", opts->verbose ? 1 : 0);
    rc |= env_set(env, DTRAIN_ENV_ALLOW_PCIE, "%d", allow_pcie ? 1 : 0);
    return rc ? -1 : 0;
}

int dtrain_task_env_placement(struct dtrain_task_env *env, const struct dtrain_task_where *w)
{
    const struct dtrain_task_placement *t = w->task;
    int world = w->shape->tp * w->shape->pp * w->shape->dp;
    int rc = 0;

    rc |= env_set(env, DTRAIN_ENV_TP, "%d", w->shape->tp);
    rc |= env_set(env, DTRAIN_ENV_PP, "%d", w->shape->pp);
    rc |= env_set(env, DTRAIN_ENV_DP, "%d", w->shape->dp);
    rc |= env_set(env, DTRAIN_ENV_TP_RANK, "%d", t->tp_rank);
    rc |= env_set(env, DTRAIN_ENV_PP_RANK, "%d", t->pp_rank);
    rc |= env_set(env, DTRAIN_ENV_DP_RANK, "%d", t->dp_rank);
    rc |= env_set(env, DTRAIN_ENV_RANK, "%d", t->rank);
    rc |= env_set(env, DTRAIN_ENV_WORLD_SIZE, "%d", world);
    rc |= env_set(env, DTRAIN_ENV_LOCAL_RANK, "%d", t->local_rank);
    rc |= env_set(env, DTRAIN_ENV_GPU, "%s", t->gpu_busid);
    if (w->cpus != NULL)
        rc |= env_set(env, DTRAIN_ENV_CPUS, "%s", w->cpus);
    rc |= env_set(env, DTRAIN_ENV_PLACED_BY, "spank");
    rc |= env_set(env, DTRAIN_ENV_FW_RANK, "%d", t->rank);
    rc |= env_set(env, DTRAIN_ENV_FW_LOCAL_RANK, "%d", t->local_rank);
    rc |= env_set(env, DTRAIN_ENV_FW_WORLD_SIZE, "%d", world);
    rc |= env_set(env, DTRAIN_ENV_FW_LOCAL_WORLD_SIZE, "%d", w->local_world_size);
    if (w->cuda_visible != NULL) {
        rc |= env_set(env, DTRAIN_ENV_CUDA_VISIBLE, "%s", w->cuda_visible);
        rc |= env_set(env, DTRAIN_ENV_CUDA_ORDER, "PCI_BUS_ID");
    }
    return rc ? -1 : 0;
}

const char *dtrain_task_env_get(const struct dtrain_task_env *env, const char *name)
{
    for (int i = 0; i < env->count; i++)
        if (strcmp(env->var[i].name, name) == 0)
            return env->var[i].value;
    return NULL;
}
