/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The communicator groups of a T x P x D job and their PMI2 key names.
 *
 * Pure arithmetic on the rank order of dtrain_plan.h; no allocation, no
 * state.  For a rank and a kind, dtrain_group_of() says whether the rank
 * has such a group, which group it is (index), its members (first, stride,
 * size), the rank's place in it and the key the leader publishes the id
 * under.  Keys are "dt.w", "dt.tp.<i>", "dt.pp.<i>", "dt.dp.<i>" and
 * "dt.pn.<i>" (PP neighbour pair i = the rank of its lower stage), at most
 * 14 bytes for any world dtrain_plan.h allows: far below PMI2's 64. */
#ifndef DTRAIN_LAUNCH_GROUPS_H
#define DTRAIN_LAUNCH_GROUPS_H

#include <stddef.h>

#include "dtrain_bootstrap.h"

struct dtrain_grid {
    int tp, pp, dp; /* T, P, D, each >= 1 */
};

/* Number of groups of a kind in the job (PP_NEXT and PP_PREV count the same
 * neighbour pairs: T*D*(P-1)). */
long dtrain_group_count(const struct dtrain_grid *grid, enum dtrain_group_kind kind);

/* Fill *out (all but id and listen_fd) with rank's group of this kind.
 * Returns 0, or -1 when the grid or rank is out of range.  out->present is
 * 0 when the rank has no group of that kind. */
int dtrain_group_of(const struct dtrain_grid *grid, int rank, enum dtrain_group_kind kind,
                    struct dtrain_comm_group *out);

/* 1 when group g (of this kind, as dtrain_group_of filled it) has its id
 * in the PMI2 KVS: only WORLD's, when it has other members.  The other
 * groups' ids reach their members over WORLD (dtrain_bootstrap.h), so the
 * KVS holds one id whatever the size of the job.  The leader (my_rank 0)
 * puts it, the others get it. */
int dtrain_group_in_kvs(enum dtrain_group_kind kind, const struct dtrain_comm_group *g);

/* The PMI2 key of group `index` of a kind (PP_NEXT/PP_PREV: "dt.pn.<i>").
 * Returns 0, or -1 when it does not fit in keylen. */
int dtrain_group_key(enum dtrain_group_kind kind, long index, char *key, size_t keylen);

#endif
