/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Communicator groups and key names; see groups.h. */
#include "groups.h"

#include <string.h>

#include "dtrain_parse.h"
#include "dtrain_plan.h"

static int grid_ok(const struct dtrain_grid *g)
{
    return g->tp >= 1 && g->pp >= 1 && g->dp >= 1 &&
           g->tp <= DTRAIN_PLAN_MAX_DIM && g->pp <= DTRAIN_PLAN_MAX_DIM && g->dp <= DTRAIN_PLAN_MAX_DIM &&
           (long long)g->tp * g->pp * g->dp <= DTRAIN_PLAN_MAX_WORLD;
}

long dtrain_group_count(const struct dtrain_grid *g, enum dtrain_group_kind kind)
{
    if (!grid_ok(g))
        return -1;
    long T = g->tp, P = g->pp, D = g->dp;
    switch (kind) {
    case DTRAIN_GROUP_WORLD: return 1;
    case DTRAIN_GROUP_TP: return P * D;
    case DTRAIN_GROUP_PP: return T * D;
    case DTRAIN_GROUP_DP: return T * P;
    case DTRAIN_GROUP_PP_NEXT:
    case DTRAIN_GROUP_PP_PREV: return T * D * (P - 1);
    case DTRAIN_GROUP_KINDS: break;
    }
    return -1;
}

static const char *key_prefix(enum dtrain_group_kind kind)
{
    switch (kind) {
    case DTRAIN_GROUP_WORLD: return "dt.w";
    case DTRAIN_GROUP_TP: return "dt.tp.";
    case DTRAIN_GROUP_PP: return "dt.pp.";
    case DTRAIN_GROUP_DP: return "dt.dp.";
    case DTRAIN_GROUP_PP_NEXT:
    case DTRAIN_GROUP_PP_PREV: return "dt.pn.";
    case DTRAIN_GROUP_KINDS: break;
    }
    return NULL;
}

int dtrain_group_key(enum dtrain_group_kind kind, long index, char *key, size_t keylen)
{
    const char *prefix = key_prefix(kind);
    if (prefix == NULL || index < 0)
        return -1;
    if (kind == DTRAIN_GROUP_WORLD)
        return dtrain_snprintf(key, keylen, "%s", prefix);
    return dtrain_snprintf(key, keylen, "%s%ld", prefix, index);
}

int dtrain_group_in_kvs(enum dtrain_group_kind kind, const struct dtrain_comm_group *g)
{
    return kind == DTRAIN_GROUP_WORLD && g->present && g->size > 1;
}

/* One group as (first, stride, size) and this rank's place in it. */
static void set_members(struct dtrain_comm_group *out, long index, int first, int stride, int size, int rank)
{
    out->present = 1;
    out->index = index;
    out->first = first;
    out->stride = stride;
    out->size = size;
    out->my_rank = (rank - first) / stride;
}

int dtrain_group_of(const struct dtrain_grid *g, int rank, enum dtrain_group_kind kind,
                    struct dtrain_comm_group *out)
{
    if (!grid_ok(g) || (unsigned)kind >= DTRAIN_GROUP_KINDS)
        return -1;
    const int T = g->tp, P = g->pp, D = g->dp, world = T * P * D;
    if (rank < 0 || rank >= world)
        return -1;
    int tp, dp, pp;
    dtrain_coords_of(rank, T, D, &tp, &dp, &pp);

    memset(out, 0, sizeof *out);
    out->listen_fd = -1;
    switch (kind) {
    case DTRAIN_GROUP_WORLD:
        set_members(out, 0, 0, 1, world, rank);
        break;
    case DTRAIN_GROUP_TP: /* index (dp, pp): dp + D*pp */
        set_members(out, dp + (long)D * pp, dtrain_rank_of(0, dp, pp, T, D), 1, T, rank);
        break;
    case DTRAIN_GROUP_PP: /* index (tp, dp): tp + T*dp */
        set_members(out, tp + (long)T * dp, dtrain_rank_of(tp, dp, 0, T, D), T * D, P, rank);
        break;
    case DTRAIN_GROUP_DP: /* index (tp, pp): tp + T*pp */
        set_members(out, tp + (long)T * pp, dtrain_rank_of(tp, 0, pp, T, D), T, D, rank);
        break;
    case DTRAIN_GROUP_PP_NEXT: /* pair index = rank of the lower stage */
        if (pp + 1 < P)
            set_members(out, rank, rank, T * D, 2, rank);
        break;
    case DTRAIN_GROUP_PP_PREV:
        if (pp > 0)
            set_members(out, rank - T * D, rank - T * D, T * D, 2, rank);
        break;
    case DTRAIN_GROUP_KINDS:
        return -1;
    }
    if (out->present && dtrain_group_key(kind, out->index, out->key, sizeof out->key) != 0)
        return -1;
    return 0;
}
