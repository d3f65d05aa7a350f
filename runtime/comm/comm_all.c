/* Every communicator of a task in one call, and the bootstrap a child
 * PROGRAM of dtrain-launch finds in its environment; see dtrain_comm.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_comm.h"
#include "dtrain_parse.h"

/* Names as in DTRAIN_COMM_<K>_* (launcher/handoff.h) and in messages. */
static const char *const kind_env[DTRAIN_GROUP_KINDS] = {"WORLD", "TP", "PP", "DP", "PP_NEXT", "PP_PREV"};

void dtrain_comm_destroy_all(struct dtrain_comms *comms)
{
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        dtrain_comm_destroy(comms->group[k]);
        comms->group[k] = NULL;
    }
}

int dtrain_comm_init_all(struct dtrain_bootstrap *bs, const struct dtrain_comm_options *opts,
                         struct dtrain_comms *out, char *err, size_t errlen)
{
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX], why[256];
    int rc = DTRAIN_COMM_OK;

    memset(out, 0, sizeof *out);
    if (opts != NULL)
        o = *opts;
    else
        dtrain_comm_options_defaults(&o);
    if (o.host_id == NULL && bs->node >= 0) {
        dtrain_snprintf(host, sizeof host, "node%d", bs->node);
        o.host_id = host;
    }
    /* Whole groups in one order everywhere; the neighbour pairs of a
     * pipeline alternate (even stages their next pair first, odd stages
     * their previous one) so that all pairs come up at once instead of one
     * after the other from the last stage back. */
    const struct dtrain_comm_group *pp = &bs->groups[DTRAIN_GROUP_PP];
    int odd_stage = pp->present && pp->my_rank % 2 == 1;
    const enum dtrain_group_kind order[DTRAIN_GROUP_KINDS] = {
        DTRAIN_GROUP_WORLD, DTRAIN_GROUP_TP, DTRAIN_GROUP_PP, DTRAIN_GROUP_DP,
        odd_stage ? DTRAIN_GROUP_PP_PREV : DTRAIN_GROUP_PP_NEXT,
        odd_stage ? DTRAIN_GROUP_PP_NEXT : DTRAIN_GROUP_PP_PREV,
    };
    int i;
    for (i = 0; i < DTRAIN_GROUP_KINDS; i++) {
        struct dtrain_comm_group *g = &bs->groups[order[i]];
        if (!g->present)
            continue;
        /* nccl: the groups that cover WORLD split off it (one bootstrap
         * instead of one per group); the pipeline pairs use their ids */
        int split = bs->backend == DTRAIN_COMM_NCCL && out->group[DTRAIN_GROUP_WORLD] != NULL &&
                    (order[i] == DTRAIN_GROUP_TP || order[i] == DTRAIN_GROUP_PP || order[i] == DTRAIN_GROUP_DP);
        if (split)
            rc = dtrain_comm_split(out->group[DTRAIN_GROUP_WORLD], g, &o, &out->group[order[i]], why, sizeof why);
        else
            rc = dtrain_comm_init(g, bs->backend, &o, &out->group[order[i]], why, sizeof why);
        g->listen_fd = -1; /* taken over, also on failure */
        if (rc != DTRAIN_COMM_OK) {
            dtrain_snprintf(err, errlen, "%s communicator (rank %d of %d): %s", kind_env[order[i]], g->my_rank,
                            g->size, why);
            break;
        }
    }
    if (rc == DTRAIN_COMM_OK)
        return rc;
    for (i++; i < DTRAIN_GROUP_KINDS; i++) { /* groups not reached: their sockets */
        struct dtrain_comm_group *g = &bs->groups[order[i]];
        if (g->present && g->listen_fd >= 0)
            close(g->listen_fd);
        g->listen_fd = -1;
    }
    dtrain_comm_destroy_all(out);
    return rc;
}

/* ------------------------------------------------------------------ environment */

static int env_int(const char *kind, const char *field, long min, long max, int required, long *out, char *err,
                   size_t errlen)
{
    char name[64], why[200];
    dtrain_snprintf(name, sizeof name, "DTRAIN_COMM_%s_%s", kind, field);
    const char *text = getenv(name);
    if (text == NULL && !required)
        return 0;
    if (dtrain_parse_int(text, min, max, name, out, why, sizeof why) != 0) {
        dtrain_snprintf(err, errlen, "%s (set by dtrain-launch for a child PROGRAM)", why);
        return -1;
    }
    return 1;
}

static int group_from_env(int k, struct dtrain_comm_group *g, char *err, size_t errlen)
{
    char name[64];
    long size, rank, first, stride, fd;
    memset(g, 0, sizeof *g);
    g->listen_fd = -1;
    g->index = -1; /* not in the environment */
    dtrain_snprintf(name, sizeof name, "DTRAIN_COMM_%s_ID", kind_env[k]);
    const char *id = getenv(name);
    if (id == NULL)
        return 0; /* the task has no such group */
    if (dtrain_snprintf(g->id, sizeof g->id, "%s", id) != 0) {
        dtrain_snprintf(err, errlen, "%s is longer than %d bytes", name, DTRAIN_BOOTSTRAP_ID_MAX - 1);
        return -1;
    }
    if (env_int(kind_env[k], "SIZE", 1, 1L << 30, 1, &size, err, errlen) < 0 ||
        env_int(kind_env[k], "RANK", 0, size - 1, 1, &rank, err, errlen) < 0 ||
        env_int(kind_env[k], "FIRST", 0, 1L << 30, 1, &first, err, errlen) < 0 ||
        env_int(kind_env[k], "STRIDE", 1, 1L << 30, 1, &stride, err, errlen) < 0)
        return -1;
    int has_fd = env_int(kind_env[k], "FD", 0, 1L << 20, 0, &fd, err, errlen);
    if (has_fd < 0)
        return -1;
    g->present = 1;
    g->size = (int)size;
    g->my_rank = (int)rank;
    g->first = (int)first;
    g->stride = (int)stride;
    g->listen_fd = has_fd ? (int)fd : -1;
    dtrain_snprintf(g->key, sizeof g->key, "%s", kind_env[k]);
    return 0;
}

int dtrain_comm_bootstrap_from_env(struct dtrain_bootstrap *bs, char *err, size_t errlen)
{
    char why[200];
    long v;
    memset(bs, 0, sizeof *bs);
    const char *backend = getenv("DTRAIN_COMM_BACKEND");
    if (backend != NULL && strcmp(backend, "cpu") == 0)
        bs->backend = DTRAIN_COMM_CPU;
    else if (backend != NULL && strcmp(backend, "nccl") == 0)
        bs->backend = DTRAIN_COMM_NCCL;
    else {
        dtrain_snprintf(err, errlen, "DTRAIN_COMM_BACKEND is %s%.32s%s: run this program as `srun --mpi=pmi2 "
                        "dtrain-launch -- PROGRAM`, which sets it to cpu or nccl",
                        backend ? "'" : "", backend ? backend : "not set", backend ? "'" : "");
        return DTRAIN_COMM_EINVAL;
    }
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++)
        if (group_from_env(k, &bs->groups[k], err, errlen) != 0)
            return DTRAIN_COMM_EINVAL;
    const struct dtrain_comm_group *world = &bs->groups[DTRAIN_GROUP_WORLD];
    if (!world->present) {
        dtrain_snprintf(err, errlen, "DTRAIN_COMM_WORLD_ID is not set: run this program under dtrain-launch");
        return DTRAIN_COMM_EINVAL;
    }
    bs->rank = world->my_rank;
    bs->world_size = world->size;
    /* T, P, D and the coordinates are the sizes and ranks of the groups. */
    const struct dtrain_comm_group *tp = &bs->groups[DTRAIN_GROUP_TP], *pp = &bs->groups[DTRAIN_GROUP_PP],
                                   *dp = &bs->groups[DTRAIN_GROUP_DP];
    bs->tp = tp->present ? tp->size : 1;
    bs->pp = pp->present ? pp->size : 1;
    bs->dp = dp->present ? dp->size : 1;
    bs->tp_rank = tp->present ? tp->my_rank : 0;
    bs->pp_rank = pp->present ? pp->my_rank : 0;
    bs->dp_rank = dp->present ? dp->my_rank : 0;
    bs->node = -1;
    const char *node = getenv("SLURM_NODEID");
    if (node != NULL) {
        if (dtrain_parse_int(node, 0, 1L << 30, "SLURM_NODEID", &v, why, sizeof why) != 0) {
            dtrain_snprintf(err, errlen, "%s", why);
            return DTRAIN_COMM_EINVAL;
        }
        bs->node = (int)v;
    }
    const char *local = getenv("DTRAIN_LOCAL_RANK");
    if (local != NULL && dtrain_parse_int(local, 0, 1L << 20, "DTRAIN_LOCAL_RANK", &v, why, sizeof why) == 0)
        bs->local_rank = (int)v;
    return DTRAIN_COMM_OK;
}
