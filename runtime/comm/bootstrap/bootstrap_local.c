/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The bootstrap of a process alone; see dtrain_bootstrap.h. */
#include "dtrain_bootstrap.h"

#include <stdio.h>
#include <string.h>

void dtrain_bootstrap_local(struct dtrain_bootstrap *bs)
{
    memset(bs, 0, sizeof *bs);
    bs->pos = dtrain_grid_pos_of(1, 1, 1, 0);
    bs->local_size = 1;
    bs->backend = DTRAIN_COMM_CPU;
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        struct dtrain_comm_group *g = &bs->groups[k];
        g->listen_fd = -1;
        if (k == DTRAIN_GROUP_PP_NEXT || k == DTRAIN_GROUP_PP_PREV)
            continue; /* one stage: no neighbours */
        g->present = 1;
        g->size = 1;
        g->stride = 1;
        snprintf(g->key, sizeof g->key, "local.%s", dtrain_group_kind_name((enum dtrain_group_kind)k));
        snprintf(g->id, sizeof g->id, "local"); /* a group of one is never connected */
    }
}
