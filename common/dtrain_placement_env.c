/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A task's placement as NAME=VALUE pairs, and back; see dtrain_placement_env.h. */
#include "dtrain_placement_env.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_env.h"
#include "dtrain_master_port.h"
#include "dtrain_parse.h"

#define COORD_MAX 1000000 /* far above any world size: only a sanity bound */

int dtrain_env_list_set(struct dtrain_env_list *env, const char *name, const char *fmt, ...)
{
    struct dtrain_env_var *v = NULL;
    for (int i = 0; i < env->count && !v; i++)
        if (strcmp(env->var[i].name, name) == 0)
            v = &env->var[i];
    if (v == NULL) {
        if (env->count >= DTRAIN_ENV_LIST_MAX)
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

const char *dtrain_env_list_get(const struct dtrain_env_list *env, const char *name)
{
    for (int i = 0; i < env->count; i++)
        if (strcmp(env->var[i].name, name) == 0)
            return env->var[i].value;
    return NULL;
}

int dtrain_placement_env_encode(const struct dtrain_coords *c, struct dtrain_env_list *env)
{
    const struct { const char *name; int value; int when; } ints[] = {
        {DTRAIN_ENV_TP, c->tp, 1},
        {DTRAIN_ENV_PP, c->pp, 1},
        {DTRAIN_ENV_DP, c->dp, 1},
        {DTRAIN_ENV_TP_RANK, c->tp_rank, 1},
        {DTRAIN_ENV_PP_RANK, c->pp_rank, 1},
        {DTRAIN_ENV_DP_RANK, c->dp_rank, 1},
        {DTRAIN_ENV_RANK, c->rank, 1},
        {DTRAIN_ENV_WORLD_SIZE, c->world_size, 1},
        {DTRAIN_ENV_LOCAL_RANK, c->local_rank, 1},
        {DTRAIN_ENV_NODE_RANK, c->node, 1},
        {DTRAIN_ENV_NNODES, c->nnodes, c->nnodes > 0},
        {DTRAIN_ENV_CUDA_DEVICE, c->cuda_device, c->cuda_device >= 0},
        {DTRAIN_ENV_FW_RANK, c->rank, 1},
        {DTRAIN_ENV_FW_LOCAL_RANK, c->local_rank, 1},
        {DTRAIN_ENV_FW_WORLD_SIZE, c->world_size, 1},
        {DTRAIN_ENV_FW_LOCAL_WORLD_SIZE, c->local_size, c->local_size > 0},
        {DTRAIN_ENV_FW_NODE_RANK, c->node, 1},
        {DTRAIN_ENV_FW_GROUP_RANK, c->node, 1},
        {DTRAIN_ENV_FW_GROUP_WORLD_SIZE, c->nnodes, c->nnodes > 0},
        {DTRAIN_ENV_FW_ROLE_RANK, c->rank, 1},
        {DTRAIN_ENV_FW_ROLE_WORLD_SIZE, c->world_size, 1},
        {DTRAIN_ENV_FW_RESTART_COUNT, c->restart_count, 1},
        {DTRAIN_ENV_FW_MASTER_PORT, c->master_port, c->master_port > 0},
    };
    const struct { const char *name; const char *value; int when; } strs[] = {
        {DTRAIN_ENV_GPU, c->gpu_busid, 1},
        {DTRAIN_ENV_GPU_VISIBILITY, c->gpu_visibility, c->gpu_visibility[0] != '\0'},
        {DTRAIN_ENV_CPUS, c->cpus, c->cpus[0] != '\0'},
        {DTRAIN_ENV_PLACED_BY, c->placed_by, 1},
        {DTRAIN_ENV_FW_MASTER_ADDR, c->master_addr, c->master_addr[0] != '\0'},
        {DTRAIN_ENV_CUDA_VISIBLE, c->cuda_visible, c->cuda_visible[0] != '\0'},
        {DTRAIN_ENV_CUDA_ORDER, "PCI_BUS_ID", c->cuda_visible[0] != '\0'},
        {DTRAIN_ENV_ROCR_VISIBLE, c->rocr_visible, c->rocr_visible[0] != '\0'},
        {DTRAIN_ENV_HIP_VISIBLE, c->cuda_visible, c->rocr_visible[0] != '\0'},
    };
    int rc = 0;
    if (c->master_port > 0 && c->master_ports > 0)
        rc |= dtrain_env_list_set(env, DTRAIN_ENV_PORTS, "%d-%d", c->master_port, c->master_port + c->master_ports - 1);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].when)
            rc |= dtrain_env_list_set(env, ints[i].name, "%d", ints[i].value);
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (strs[i].when)
            rc |= dtrain_env_list_set(env, strs[i].name, "%s", strs[i].value);
    return rc ? -1 : 0;
}

/* An integer variable: 0 set and valid (or unset and optional: *out = dflt),
 * -1 with err. */
static int get_int(dtrain_env_getter get, void *ctx, const char *name, long min, int required, int dflt, int *out,
                   char *err, size_t errlen)
{
    const char *text = get(name, ctx);
    long v;
    if (text == NULL) {
        if (required) {
            dtrain_snprintf(err, errlen, "%s is not set", name);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    if (dtrain_parse_int(text, min, COORD_MAX, name, &v, err, errlen) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int get_str(dtrain_env_getter get, void *ctx, const char *name, char *out, size_t outlen, char *err,
                   size_t errlen)
{
    const char *text = get(name, ctx);
    if (dtrain_snprintf(out, outlen, "%s", text ? text : "") != 0) {
        dtrain_snprintf(err, errlen, "%s is longer than %zu bytes", name, outlen - 1);
        return -1;
    }
    return 0;
}

/* DTRAIN_PORTS "LO-HI" (optional): the block starts at MASTER_PORT and
 * holds at most DTRAIN_PORTS_PER_STEP_MAX ports. */
static enum dtrain_status get_ports(dtrain_env_getter get, void *ctx, struct dtrain_coords *c, char *err,
                                    size_t errlen)
{
    const char *text = get(DTRAIN_ENV_PORTS, ctx);
    int lo, hi;
    if (text == NULL)
        return DTRAIN_OK;
    if (dtrain_master_ports_parse(text, DTRAIN_ENV_PORTS, &lo, &hi, err, errlen) != DTRAIN_OK)
        return DTRAIN_ERR_INPUT;
    if (lo != c->master_port || hi - lo + 1 > DTRAIN_PORTS_PER_STEP_MAX) {
        dtrain_snprintf(err, errlen, "%s=%.32s is not a block of at most %d ports starting at %s=%d", DTRAIN_ENV_PORTS,
                        text, DTRAIN_PORTS_PER_STEP_MAX, DTRAIN_ENV_FW_MASTER_PORT, c->master_port);
        return DTRAIN_ERR_INPUT;
    }
    c->master_ports = hi - lo + 1;
    return DTRAIN_OK;
}

enum dtrain_status dtrain_placement_env_decode(dtrain_env_getter get, void *ctx, struct dtrain_coords *c, char *err,
                                               size_t errlen)
{
    const struct { const char *name; int *dst; long min; int required; int dflt; } ints[] = {
        {DTRAIN_ENV_TP, &c->tp, 1, 1, 0},
        {DTRAIN_ENV_PP, &c->pp, 1, 1, 0},
        {DTRAIN_ENV_DP, &c->dp, 1, 1, 0},
        {DTRAIN_ENV_RANK, &c->rank, 0, 1, 0},
        {DTRAIN_ENV_WORLD_SIZE, &c->world_size, 1, 1, 0},
        {DTRAIN_ENV_TP_RANK, &c->tp_rank, 0, 1, 0},
        {DTRAIN_ENV_PP_RANK, &c->pp_rank, 0, 1, 0},
        {DTRAIN_ENV_DP_RANK, &c->dp_rank, 0, 1, 0},
        {DTRAIN_ENV_LOCAL_RANK, &c->local_rank, 0, 1, 0},
        {DTRAIN_ENV_FW_LOCAL_WORLD_SIZE, &c->local_size, 1, 0, 0},
        {DTRAIN_ENV_NODE_RANK, &c->node, 0, 0, 0},
        {DTRAIN_ENV_NNODES, &c->nnodes, 1, 0, 0},
        {DTRAIN_ENV_FW_RESTART_COUNT, &c->restart_count, 0, 0, 0},
        {DTRAIN_ENV_CUDA_DEVICE, &c->cuda_device, 0, 0, -1},
        {DTRAIN_ENV_FW_MASTER_PORT, &c->master_port, 1, 0, 0},
    };
    const struct { const char *name; char *dst; size_t len; } strs[] = {
        {DTRAIN_ENV_PLACED_BY, c->placed_by, sizeof c->placed_by},
        {DTRAIN_ENV_GPU, c->gpu_busid, sizeof c->gpu_busid},
        {DTRAIN_ENV_GPU_VISIBILITY, c->gpu_visibility, sizeof c->gpu_visibility},
        {DTRAIN_ENV_CPUS, c->cpus, sizeof c->cpus},
        {DTRAIN_ENV_CUDA_VISIBLE, c->cuda_visible, sizeof c->cuda_visible},
        {DTRAIN_ENV_ROCR_VISIBLE, c->rocr_visible, sizeof c->rocr_visible},
        {DTRAIN_ENV_FW_MASTER_ADDR, c->master_addr, sizeof c->master_addr},
    };
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (get_int(get, ctx, ints[i].name, ints[i].min, ints[i].required, ints[i].dflt, ints[i].dst, err,
                    errlen) != 0)
            return DTRAIN_ERR_INPUT;
    if (c->master_port > 65535) {
        dtrain_snprintf(err, errlen, "%s=%d is not a TCP port (1..65535)", DTRAIN_ENV_FW_MASTER_PORT,
                        c->master_port);
        return DTRAIN_ERR_INPUT;
    }
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (get_str(get, ctx, strs[i].name, strs[i].dst, strs[i].len, err, errlen) != 0)
            return DTRAIN_ERR_INPUT;
    return get_ports(get, ctx, c, err, errlen);
}

const char *dtrain_env_getter_process(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

const char *dtrain_env_getter_list(const char *name, void *ctx)
{
    return dtrain_env_list_get(ctx, name);
}

int dtrain_task_cuda_device(int count)
{
    const char *text = getenv(DTRAIN_ENV_CUDA_DEVICE);
    char err[128];
    long v;
    if (text == NULL)
        return -1;
    if (count < 1 || dtrain_parse_int(text, 0, count - 1, DTRAIN_ENV_CUDA_DEVICE, &v, err, sizeof err) != 0)
        return 0;
    return (int)v;
}
