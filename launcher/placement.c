/* SPDX-License-Identifier: GPL-2.0-or-later */
/* This task's placement, from the plugin or planned here; see placement.h. */
#include "placement.h"

#include <errno.h>
#include <hwloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_env.h"
#include "dtrain_parse.h"
#include "dtrain_placement_env.h"
#include "dtrain_plan.h"

/* An integer from the environment: 0 when set and valid, 1 when unset (and
 * not required), -1 with a message when malformed or required but unset. */
static int env_int(const char *name, long min, long max, int required, int *out, char *err, size_t errlen)
{
    const char *text = getenv(name);
    char why[200];
    long v;
    if (text == NULL) {
        if (!required)
            return 1;
        dtrain_snprintf(err, errlen, "%s is not set: run dtrain-launch as a task of `srun --mpi=pmi2`", name);
        return -1;
    }
    if (dtrain_parse_int(text, min, max, name, &v, why, sizeof why) != 0) {
        dtrain_snprintf(err, errlen, "%s", why);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* SLURM_STEP_TASKS_PER_NODE ("8(x2)", "8,8", "15,1", "4(x2),3"): the number
 * of tasks every node has, or -1 when nodes differ.  Returns 0, or -1 when
 * the text is malformed. */
static int tasks_per_node_uniform(const char *text, int *per_node, int *nnodes)
{
    long k = -1, nodes = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long n = strtol(p, &end, 10);
        if (end == p || errno != 0 || n < 1 || n > DTRAIN_PLAN_MAX_WORLD || *p == '-' || *p == '+')
            return -1;
        long times = 1;
        p = end;
        if (strncmp(p, "(x", 2) == 0) {
            p += 2;
            errno = 0;
            times = strtol(p, &end, 10);
            if (end == p || errno != 0 || times < 1 || times > DTRAIN_PLAN_MAX_WORLD || *end != ')')
                return -1;
            p = end + 1;
        }
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return -1;
        k = (k == -1 || k == n) ? n : -2;
        nodes += times;
        if (nodes > DTRAIN_PLAN_MAX_WORLD)
            return -1;
    }
    if (nodes == 0)
        return -1;
    *per_node = k < 0 ? -1 : (int)k;
    *nnodes = (int)nodes;
    return 0;
}

/* The placement the dtrain SPANK plugin exported (decoded by the one
 * decoder of dtrain_placement_env.h), checked. */
static enum dtrain_status from_plugin(const struct dtrain_shape_request *req, struct dtrain_placement *p, char *err, size_t errlen)
{
    struct dtrain_coords *c = &p->coords;
    char why[256];
    if (dtrain_placement_env_decode(dtrain_env_getter_process, NULL, c, why, sizeof why) != 0) {
        dtrain_snprintf(err, errlen, "the dtrain plugin's environment: %s", why);
        return DTRAIN_ERR_INPUT;
    }
    p->pos = c->pos;
    p->local_rank = c->local_rank;
    p->local_size = c->local_size;
    const struct { const char *opt; int asked; int got; const char *var; } dims[] = {
        {"--tp", req->tp, p->tp, DTRAIN_ENV_TP},
        {"--pp", req->pp, p->pp, DTRAIN_ENV_PP},
        {"--dp", req->dp, p->dp, DTRAIN_ENV_DP},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].asked != 0 && dims[i].asked != dims[i].got) {
            dtrain_snprintf(err, errlen, "%s %d disagrees with %s=%d set by the dtrain plugin (--dtrain-%s): "
                                         "give the shape once, with --dtrain-tp/--dtrain-pp on sbatch or srun",
                            dims[i].opt, dims[i].asked, dims[i].var, dims[i].got, dims[i].opt + 2);
            return DTRAIN_ERR_INPUT;
        }
    }
    if (p->world_size != (long)p->tp * p->pp * p->dp) {
        dtrain_snprintf(err, errlen, "the dtrain plugin set %s=%d but T*P*D = %d*%d*%d: its environment is "
                                     "inconsistent (is the plugin the same version as dtrain-launch?)",
                        DTRAIN_ENV_WORLD_SIZE, p->world_size, p->tp, p->pp, p->dp);
        return DTRAIN_ERR_INPUT;
    }
    int tp, dp, pp;
    dtrain_coords_of(p->rank, p->tp, p->dp, &tp, &dp, &pp);
    if (p->rank >= p->world_size || tp != p->tp_rank || dp != p->dp_rank || pp != p->pp_rank) {
        dtrain_snprintf(err, errlen, "the dtrain plugin set rank %d with (tp, dp, pp) = (%d, %d, %d), but the "
                                     "rank order gives (%d, %d, %d): is the plugin the same version as dtrain-launch?",
                        p->rank, p->tp_rank, p->dp_rank, p->pp_rank, tp, dp, pp);
        return DTRAIN_ERR_INPUT;
    }
    memcpy(p->cpus, c->cpus, sizeof p->cpus);
    p->cpus[sizeof p->cpus - 1] = '\0';
    p->placed_by_plugin = 1;
    return DTRAIN_OK;
}

/* A live topology load that takes longer has hung (sysfs on a sick node). */
#define PLACEMENT_TOPO_TIMEOUT_MS 30000

/* Plan the job here, with the planner, for CPUs only. */
static enum dtrain_status plan_here(const struct dtrain_shape_request *req, struct dtrain_placement *p, char *err, size_t errlen)
{
    int T = 1, P = 1, D = 0, K, nnodes, procid;
    const struct { int asked; const char *var; int *dst; } dims[] = {
        {req->tp, DTRAIN_ENV_TP, &T}, {req->pp, DTRAIN_ENV_PP, &P}, {req->dp, DTRAIN_ENV_DP, &D},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].asked != 0)
            *dims[i].dst = dims[i].asked;
        else if (env_int(dims[i].var, 1, DTRAIN_PLAN_MAX_DIM, 0, dims[i].dst, err, errlen) < 0)
            return DTRAIN_ERR_INPUT;
    }
    const char *tpn = getenv("SLURM_STEP_TASKS_PER_NODE");
    if (tpn == NULL) {
        dtrain_snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE is not set: run dtrain-launch as a task of "
                                     "`srun --mpi=pmi2`");
        return DTRAIN_ERR_INPUT;
    }
    if (tasks_per_node_uniform(tpn, &K, &nnodes) != 0) {
        dtrain_snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE='%.64s' is not Slurm's N(xM),... form", tpn);
        return DTRAIN_ERR_INPUT;
    }
    if (K < 0) {
        dtrain_snprintf(err, errlen, "this step has different task counts per node (%.64s); a TP group must stay "
                                     "on one node: give srun --ntasks-per-node=K with K a multiple of T=%d",
                        tpn, T);
        return DTRAIN_ERR_REFUSED;
    }
    if ((long)K * nnodes != p->world_size) {
        dtrain_snprintf(err, errlen, "SLURM_STEP_TASKS_PER_NODE=%.64s makes %ld tasks but PMI2 has %d", tpn,
                        (long)K * nnodes, p->world_size);
        return DTRAIN_ERR_INPUT;
    }
    enum dtrain_status rc = dtrain_plan_check_shape(T, P, D, p->world_size, K, 0, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (env_int("SLURM_NODEID", 0, DTRAIN_PLAN_MAX_WORLD, 1, &p->node, err, errlen) != 0 ||
        env_int("SLURM_LOCALID", 0, DTRAIN_PLAN_MAX_WORLD, 1, &procid, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    if (p->node != p->rank / K || procid != p->rank % K) {
        dtrain_snprintf(err, errlen, "rank %d runs as task %d of node %d, but block order puts it at task %d of "
                                     "node %d: use srun --distribution=block (the default)",
                        p->rank, procid, p->node, p->rank % K, p->rank / K);
        return DTRAIN_ERR_REFUSED;
    }

    dtrain_topo *topo = NULL;
    dtrain_plan *plan = NULL;
    char why[512];
    struct dtrain_shape shape = {.tp = T, .pp = P, .dp = D, .nnodes = nnodes, .tasks_per_node = K};
    struct dtrain_policy policy = {.allow_pcie = 0, .cpu_only = 1};
    rc = DTRAIN_ERR_SYSTEM;
    /* A CPU-only plan needs the CPUs only: no PCI walk, no NVML (most of
     * a live load), bounded as the plugin's load is. */
    if (dtrain_topo_load_bounded(NULL, DTRAIN_TOPO_LOAD_CPUS_ONLY, PLACEMENT_TOPO_TIMEOUT_MS, &topo, why,
                                 sizeof why) != DTRAIN_OK) {
        dtrain_snprintf(err, errlen, "reading this node's topology: %s", why);
        goto out;
    }
    /* Only this task's entry is used, which depends on this node only. */
    const dtrain_topo **nodes = malloc(sizeof *nodes * (size_t)nnodes);
    if (nodes == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < nnodes; i++)
        nodes[i] = topo;
    rc = dtrain_plan_place_node(&shape, nodes, &policy, p->node, &plan, why, sizeof why);
    free(nodes);
    if (rc != DTRAIN_OK) {
        dtrain_snprintf(err, errlen, "%s", why);
        goto out;
    }
    rc = DTRAIN_ERR_SYSTEM;
    const struct dtrain_task_placement *t = dtrain_plan_task(plan, p->rank);
    if (t == NULL) {
        dtrain_snprintf(err, errlen, "the planner has no task %d", p->rank);
        goto out;
    }
    /* The planner's position of this rank; world_size (PMI2's) was checked against T*P*D above. */
    p->pos = t->pos;
    p->node = t->node;
    p->nnodes = nnodes;
    p->local_rank = t->local_rank;
    p->local_size = K;
    memcpy(p->cpus, t->cpulist, sizeof p->cpus);
    p->cpus[sizeof p->cpus - 1] = '\0';
    const char *warning = dtrain_plan_warning(plan);
    if (warning != NULL)
        dtrain_snprintf(p->warning, sizeof p->warning, "%s", warning);
    p->placed_by_plugin = 0;
    rc = DTRAIN_OK;
out:
    dtrain_plan_free(plan);
    dtrain_topo_free(topo);
    return rc;
}

enum dtrain_status dtrain_placement_resolve(const struct dtrain_shape_request *req, int pmi_rank, int pmi_size,
                                            struct dtrain_placement *out, char *err, size_t errlen)
{
    int procid, ntasks;
    memset(out, 0, sizeof *out);
    out->rank = pmi_rank;
    out->world_size = pmi_size;
    /* Slurm's view must agree with PMI2's: rank = SLURM_PROCID = PMI2 rank. */
    if (env_int("SLURM_PROCID", 0, DTRAIN_PLAN_MAX_WORLD, 1, &procid, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    if (procid != pmi_rank) {
        dtrain_snprintf(err, errlen, "SLURM_PROCID=%d but PMI2 says rank %d: this is not the task srun started "
                                     "(run dtrain-launch directly under srun --mpi=pmi2)",
                        procid, pmi_rank);
        return DTRAIN_ERR_INPUT;
    }
    int nt = env_int("SLURM_STEP_NUM_TASKS", 1, DTRAIN_PLAN_MAX_WORLD, 0, &ntasks, err, errlen);
    if (nt < 0)
        return DTRAIN_ERR_INPUT;
    if (nt == 0 && ntasks != pmi_size) {
        dtrain_snprintf(err, errlen, "SLURM_STEP_NUM_TASKS=%d but PMI2 says %d tasks", ntasks, pmi_size);
        return DTRAIN_ERR_INPUT;
    }

    const char *by = getenv(DTRAIN_ENV_PLACED_BY);
    enum dtrain_status rc = (by != NULL && strcmp(by, "spank") == 0) ? from_plugin(req, out, err, errlen)
                                                                     : plan_here(req, out, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (out->rank != pmi_rank || out->world_size != pmi_size) {
        dtrain_snprintf(err, errlen, "the dtrain plugin placed rank %d of %d but PMI2 says rank %d of %d: "
                                     "the plugin and srun disagree (was the step started with other options?)",
                        out->rank, out->world_size, pmi_rank, pmi_size);
        return DTRAIN_ERR_INPUT;
    }
    if (out->placed_by_plugin) {
        int nodeid = 0;
        if (env_int("SLURM_NODEID", 0, DTRAIN_PLAN_MAX_WORLD, 0, &nodeid, err, errlen) < 0)
            return DTRAIN_ERR_INPUT;
        out->node = nodeid;
        if (env_int("SLURM_STEP_NUM_NODES", 1, DTRAIN_PLAN_MAX_WORLD, 0, &out->nnodes, err, errlen) < 0)
            return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

/* Bind this process to a cpulist; -1 with a reason when it cannot. */
static int bind_cpus(const char *cpulist, char *why, size_t whylen)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    cpu_set_t mask;
    int rc = -1;
    if (set == NULL) {
        dtrain_snprintf(why, whylen, "out of memory");
        return -1;
    }
    CPU_ZERO(&mask);
    if (hwloc_bitmap_list_sscanf(set, cpulist) != 0 || hwloc_bitmap_iszero(set)) {
        dtrain_snprintf(why, whylen, "the planner's CPU list '%.64s' is not a CPU list", cpulist);
        goto out;
    }
    int cpu;
    hwloc_bitmap_foreach_begin(cpu, set) {
        if (cpu >= CPU_SETSIZE) {
            dtrain_snprintf(why, whylen, "CPU %d is beyond what sched_setaffinity takes", cpu);
            goto out;
        }
        CPU_SET(cpu, &mask);
    } hwloc_bitmap_foreach_end();
    if (sched_setaffinity(0, sizeof mask, &mask) != 0) {
        dtrain_snprintf(why, whylen, "sched_setaffinity(%.64s): %s", cpulist, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    hwloc_bitmap_free(set);
    return rc;
}

enum dtrain_status dtrain_placement_apply(struct dtrain_placement *p, char *err, size_t errlen)
{
    if (p->placed_by_plugin)
        return DTRAIN_OK;
    char why[200];
    if (p->cpus[0] != '\0' && bind_cpus(p->cpus, why, sizeof why) != 0) {
        dtrain_snprintf(p->warning, sizeof p->warning, "not bound to CPUs %.64s: %s", p->cpus, why);
        p->cpus[0] = '\0';
    }
    /* The one encoder (dtrain_placement_env.h) writes the variables. */
    static struct dtrain_env_list env;
    struct dtrain_coords *c = &p->coords;
    c->pos = p->pos;
    c->local_rank = p->local_rank;
    c->local_size = p->local_size;
    c->node = p->node;
    c->nnodes = p->nnodes;
    c->cuda_device = -1; /* GPUs stay as Slurm set them: only the plugin places them */
    memcpy(c->cpus, p->cpus, sizeof c->cpus);
    c->cpus[sizeof c->cpus - 1] = '\0';
    dtrain_snprintf(c->placed_by, sizeof c->placed_by, "launcher");
    if (env_int("SLURM_RESTART_COUNT", 0, 1000000, 0, &c->restart_count, err, errlen) < 0)
        c->restart_count = 0;
    env.count = 0;
    if (dtrain_placement_env_encode(c, &env) != 0) {
        dtrain_snprintf(err, errlen, "the placement does not fit the environment");
        return DTRAIN_ERR_SYSTEM;
    }
    for (int i = 0; i < env.count; i++) {
        if (setenv(env.var[i].name, env.var[i].value, 1) != 0) {
            dtrain_snprintf(err, errlen, "setenv %s: %s", env.var[i].name, strerror(errno));
            return DTRAIN_ERR_SYSTEM;
        }
    }
    return DTRAIN_OK;
}
