/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A task's environment as name=value pairs; see taskenv.h. */
#include "taskenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_env.h"
#include "dtrain_parse.h"

int dtrain_task_env_options(struct dtrain_env_list *env, const struct dtrain_options *opts, int allow_pcie)
{
    int rc = 0;
    env->count = 0;
    rc |= dtrain_env_list_set(env, DTRAIN_ENV_TP, "%d", dtrain_options_tp(opts));
    rc |= dtrain_env_list_set(env, DTRAIN_ENV_PP, "%d", dtrain_options_pp(opts));
    if (opts->dp > 0)
        rc |= dtrain_env_list_set(env, DTRAIN_ENV_DP, "%d", opts->dp);
    if (opts->ckpt_dir[0] != '\0')
        rc |= dtrain_env_list_set(env, DTRAIN_ENV_CKPT_DIR, "%s", opts->ckpt_dir);
    if (opts->max_restarts >= 0)
        rc |= dtrain_env_list_set(env, DTRAIN_ENV_MAX_RESTARTS, "%d", opts->max_restarts);
    if (opts->spares >= 0)
        rc |= dtrain_env_list_set(env, DTRAIN_ENV_SPARES, "%d", opts->spares);
    if (opts->straggler > 0)
        rc |= dtrain_env_list_set(env, DTRAIN_ENV_STRAGGLER, "%s", opts->straggler == 2 ? "drain" : "report");
    rc |= dtrain_env_list_set(env, DTRAIN_ENV_VERBOSE, "%d", opts->verbose ? 1 : 0);
    rc |= dtrain_env_list_set(env, DTRAIN_ENV_ALLOW_PCIE, "%d", allow_pcie ? 1 : 0);
    return rc ? -1 : 0;
}

/* Copy text into a coords field; -1 when it does not fit. */
static int put(char *dst, size_t len, const char *text)
{
    return dtrain_snprintf(dst, len, "%s", text ? text : "");
}

int dtrain_task_env_placement(struct dtrain_env_list *env, const struct dtrain_task_where *w)
{
    static struct dtrain_coords c; /* large (the GPU list); one task at a time per process */
    const struct dtrain_task_placement *t = w->task;
    memset(&c, 0, sizeof c);
    c.pos = t->pos;
    c.local_rank = t->local_rank;
    c.local_size = w->local_world_size;
    c.node = t->node;
    c.nnodes = w->shape->nnodes;
    c.restart_count = w->restart_count;
    c.cuda_device = w->cuda_visible ? w->cuda_device : -1;
    c.master_port = w->master_addr ? w->master_port : 0;
    c.master_ports = c.master_port > 0 ? w->master_ports : 0;
    if (put(c.placed_by, sizeof c.placed_by, "spank") != 0 || put(c.gpu_busid, sizeof c.gpu_busid, t->gpu_busid) != 0 ||
        put(c.gpu_visibility, sizeof c.gpu_visibility, w->cuda_visible ? w->gpu_visibility : NULL) != 0 ||
        put(c.cpus, sizeof c.cpus, w->cpus) != 0 || put(c.cuda_visible, sizeof c.cuda_visible, w->cuda_visible) != 0 ||
        put(c.rocr_visible, sizeof c.rocr_visible, w->cuda_visible ? w->rocr_visible : NULL) != 0 ||
        put(c.master_addr, sizeof c.master_addr, w->master_addr) != 0)
        return -1;
    return dtrain_placement_env_encode(&c, env);
}

const char *dtrain_task_env_get(const struct dtrain_env_list *env, const char *name)
{
    return dtrain_env_list_get(env, name);
}

/* Append GPU g's token (after a comma unless first); -2 when out is full. */
static int append(char *out, size_t outlen, size_t *len, const char (*tokens)[DTRAIN_GPU_TOKEN_MAX], int g)
{
    char idx[16];
    const char *tok = tokens ? tokens[g] : idx;
    if (tokens == NULL)
        snprintf(idx, sizeof idx, "%d", g);
    int n = snprintf(out + *len, outlen - *len, "%s%s", *len ? "," : "", tok);
    if (n < 0 || (size_t)n >= outlen - *len)
        return -2;
    *len += (size_t)n;
    return 0;
}

int dtrain_visible_devices(const int *task_gpu, int ntasks, int ngpus, const char (*tokens)[DTRAIN_GPU_TOKEN_MAX],
                           int all, int local, char *out, size_t outlen, int *device)
{
    unsigned char listed[DTRAIN_TOPO_MAX_GPUS] = {0};
    size_t len = 0;
    if (outlen == 0)
        return -2;
    out[0] = '\0';
    if (local < 0 || local >= ntasks || task_gpu[local] < 0 || task_gpu[local] >= ngpus ||
        ngpus > DTRAIN_TOPO_MAX_GPUS)
        return -1;
    if (!all) {
        *device = 0;
        return append(out, outlen, &len, tokens, task_gpu[local]);
    }
    int pos = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < (pass == 0 ? ntasks : ngpus); i++) {
            int g = pass == 0 ? task_gpu[i] : i;
            if (g < 0 || g >= ngpus || listed[g])
                continue;
            listed[g] = 1;
            if (g == task_gpu[local])
                *device = pos;
            pos++;
            if (append(out, outlen, &len, tokens, g) != 0)
                return -2;
        }
    }
    return 0;
}

int dtrain_hip_indices(const char *visible, char *out, size_t outlen)
{
    size_t len = 0;
    int n = 1;
    for (const char *p = visible; *p; p++)
        n += *p == ',';
    if (outlen == 0)
        return -2;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(out + len, outlen - len, "%s%d", i ? "," : "", i);
        if (w < 0 || (size_t)w >= outlen - len)
            return -2;
        len += (size_t)w;
    }
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int dtrain_argv_spawns_workers(int argc, char *const argv[])
{
    int i = 0;
    if (argc > 0 && argv[0] != NULL && strcmp(base_name(argv[0]), "dtrain-launch") == 0) {
        while (i < argc && argv[i] != NULL && strcmp(argv[i], "--") != 0)
            i++;
        i++; /* PROGRAM, after "--" */
    }
    if (i >= argc || argv[i] == NULL)
        return 0;
    const char *prog = base_name(argv[i]);
    if (strcmp(prog, "torchrun") == 0 || strcmp(prog, "deepspeed") == 0)
        return 1;
    if (strncmp(prog, "python", 6) == 0 && i + 2 < argc && argv[i + 1] != NULL && argv[i + 2] != NULL &&
        strcmp(argv[i + 1], "-m") == 0)
        return strcmp(argv[i + 2], "torch.distributed.run") == 0 ||
               strcmp(argv[i + 2], "torch.distributed.launch") == 0;
    return 0;
}

int dtrain_argv_runs_own_trainer(int argc, char *const argv[])
{
    if (argc <= 0 || argv[0] == NULL)
        return 0;
    const char *prog = base_name(argv[0]);
    if (strcmp(prog, "dtrain-train") == 0)
        return 1;
    if (strcmp(prog, "dtrain-launch") != 0)
        return 0;
    for (int i = 1; i < argc && argv[i] != NULL; i++)
        if (strcmp(argv[i], "--") == 0)
            return 0;
    return 1;
}

int dtrain_argv_node_report(int argc, char *const argv[])
{
    return argc == 2 && argv != NULL && argv[0] != NULL && argv[1] != NULL &&
           strcmp(base_name(argv[0]), "dtrain-launch") == 0 && strcmp(argv[1], "--node-report") == 0;
}

int dtrain_env_node_report(void)
{
    const char *v = getenv(DTRAIN_ENV_NODE_REPORT);
    return v != NULL && strcmp(v, "1") == 0;
}
