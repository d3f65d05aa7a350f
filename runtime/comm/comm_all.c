/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Every communicator of a task in one call; see dtrain_comm.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_comm.h"
#include "dtrain_parse.h"

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
            dtrain_snprintf(err, errlen, "%s communicator (rank %d of %d): %s", dtrain_group_kind_name(order[i]), g->my_rank,
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
