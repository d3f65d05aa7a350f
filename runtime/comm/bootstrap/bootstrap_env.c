/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The bootstrap as DTRAIN_COMM_* variables, written and read in one place;
 * see bootstrap_env.h. */
#include "bootstrap_env.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap_id.h"
#include "dtrain_comm.h"
#include "dtrain_parse.h"

/* By enum dtrain_group_kind: the names in messages and reports; upper case
 * in DTRAIN_COMM_<K>_*. */
static const char *const kind_name[DTRAIN_GROUP_KINDS] = {"world", "tp", "pp", "dp", "pp_next", "pp_prev"};

/* The per-group fields, in the order of group_fields() below. */
enum { F_ID, F_RANK, F_SIZE, F_FIRST, F_STRIDE, F_FD, NFIELDS };
static const char *const field_name[NFIELDS] = {"ID", "RANK", "SIZE", "FIRST", "STRIDE", "FD"};

const char *dtrain_group_kind_name(enum dtrain_group_kind kind)
{
    return (unsigned)kind < DTRAIN_GROUP_KINDS ? kind_name[kind] : "?";
}

static void upper(char *s)
{
    for (; *s != '\0'; s++)
        *s = (char)toupper((unsigned char)*s);
}

static int var_name(char *name, size_t len, int kind, int field)
{
    if (dtrain_snprintf(name, len, "DTRAIN_COMM_%s_%s", kind_name[kind], field_name[field]) != 0)
        return -1;
    upper(name);
    return 0;
}

/* ------------------------------------------------------------------ writing */

/* setenv(DTRAIN_COMM_<kind>_<field>, value), or unsetenv when value is NULL. */
static int set_group_var(int kind, int field, const char *value, char *err, size_t errlen)
{
    char name[64];
    if (var_name(name, sizeof name, kind, field) != 0) {
        dtrain_snprintf(err, errlen, "variable name too long");
        return -1;
    }
    int rc = value != NULL ? setenv(name, value, 1) : unsetenv(name);
    if (rc != 0) {
        dtrain_snprintf(err, errlen, "setenv %s: %s", name, strerror(errno));
        return -1;
    }
    return 0;
}

static int export_group(int kind, const struct dtrain_comm_group *g, char *err, size_t errlen)
{
    char numbers[NFIELDS][16];
    const char *values[NFIELDS] = {NULL};
    if (g->present) {
        const int ints[NFIELDS] = {0, g->my_rank, g->size, g->first, g->stride, g->listen_fd};
        for (int f = F_RANK; f < NFIELDS; f++) {
            if (dtrain_snprintf(numbers[f], sizeof numbers[f], "%d", ints[f]) != 0)
                return -1;
            values[f] = numbers[f];
        }
        values[F_ID] = g->id;
        if (g->listen_fd < 0)
            values[F_FD] = NULL;
    }
    for (int f = 0; f < NFIELDS; f++)
        if (set_group_var(kind, f, values[f], err, errlen) != 0)
            return -1;
    if (g->present && g->listen_fd >= 0) {
        int flags = fcntl(g->listen_fd, F_GETFD);
        if (flags < 0 || fcntl(g->listen_fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) {
            dtrain_snprintf(err, errlen, "fcntl(listening socket %d): %s", g->listen_fd, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int dtrain_bootstrap_env_export(const struct dtrain_bootstrap *bs, char *err, size_t errlen)
{
    if (setenv("DTRAIN_COMM_BACKEND", dtrain_backend_name(bs->backend), 1) != 0) {
        dtrain_snprintf(err, errlen, "setenv DTRAIN_COMM_BACKEND: %s", strerror(errno));
        return -1;
    }
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++)
        if (export_group(k, &bs->groups[k], err, errlen) != 0)
            return -1;
    return 0;
}

/* ------------------------------------------------------------------ reading */

/* 1 and *out when the variable is set and valid, 0 when it is unset and not
 * required, -1 with one line in err otherwise. */
static int env_int(int kind, int field, long min, long max, int required, long *out, char *err, size_t errlen)
{
    char name[64], why[200];
    var_name(name, sizeof name, kind, field);
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
    var_name(name, sizeof name, k, F_ID);
    const char *id = getenv(name);
    if (id == NULL)
        return 0; /* the task has no such group */
    if (dtrain_snprintf(g->id, sizeof g->id, "%s", id) != 0) {
        dtrain_snprintf(err, errlen, "%s is longer than %d bytes", name, DTRAIN_BOOTSTRAP_ID_MAX - 1);
        return -1;
    }
    if (env_int(k, F_SIZE, 1, 1L << 30, 1, &size, err, errlen) < 0 ||
        env_int(k, F_RANK, 0, size - 1, 1, &rank, err, errlen) < 0 ||
        env_int(k, F_FIRST, 0, 1L << 30, 1, &first, err, errlen) < 0 ||
        env_int(k, F_STRIDE, 1, 1L << 30, 1, &stride, err, errlen) < 0)
        return -1;
    int has_fd = env_int(k, F_FD, 0, 1L << 20, 0, &fd, err, errlen);
    if (has_fd < 0)
        return -1;
    g->present = 1;
    g->size = (int)size;
    g->my_rank = (int)rank;
    g->first = (int)first;
    g->stride = (int)stride;
    g->listen_fd = has_fd ? (int)fd : -1;
    dtrain_snprintf(g->key, sizeof g->key, "%s", kind_name[k]);
    upper(g->key); /* "TP": the <K> of its variables */
    return 0;
}

/* Its only failure is a malformed or missing variable (cause EINVAL), a
 * DTRAIN_ERR_SYSTEM as comm's EINVAL always is. */
enum dtrain_status dtrain_comm_bootstrap_from_env(struct dtrain_bootstrap *bs, char *err, size_t errlen)
{
    char why[200];
    long v;
    memset(bs, 0, sizeof *bs);
    const char *backend = getenv("DTRAIN_COMM_BACKEND");
    if (dtrain_backend_parse(backend, &bs->backend) != 0) {
        dtrain_snprintf(err, errlen, "DTRAIN_COMM_BACKEND is %s%.32s%s: run this program as `srun --mpi=pmi2 "
                        "dtrain-launch -- PROGRAM`, which sets it to cpu or nccl",
                        backend ? "'" : "", backend ? backend : "not set", backend ? "'" : "");
        return DTRAIN_ERR_SYSTEM;
    }
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++)
        if (group_from_env(k, &bs->groups[k], err, errlen) != 0)
            return DTRAIN_ERR_SYSTEM;
    const struct dtrain_comm_group *world = &bs->groups[DTRAIN_GROUP_WORLD];
    if (!world->present) {
        dtrain_snprintf(err, errlen, "DTRAIN_COMM_WORLD_ID is not set: run this program under dtrain-launch");
        return DTRAIN_ERR_SYSTEM;
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
            return DTRAIN_ERR_SYSTEM;
        }
        bs->node = (int)v;
    }
    const char *local = getenv("DTRAIN_LOCAL_RANK");
    if (local != NULL && dtrain_parse_int(local, 0, 1L << 20, "DTRAIN_LOCAL_RANK", &v, why, sizeof why) == 0)
        bs->local_rank = (int)v;
    return DTRAIN_OK;
}
