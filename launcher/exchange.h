/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The bootstrap exchange: WORLD's id in ONE PMI2 round.
 *
 * For each group kind (dtrain_bootstrap.h) the task computes its group and
 * the group's leader makes the id (none for the groups nccl splits off
 * WORLD).  Only WORLD's id goes into the KVS (dtrain_group_in_kvs): rank 0
 * puts it under "dt.w", one fence for the whole step, every other task
 * gets it.  The other groups' members receive their ids later, over the
 * WORLD communicator (dtrain_comm_init_all); until then their ids here are
 * empty.  So the KVS, which Slurm's PMI2 hands whole to every node, holds
 * one id whatever the size of the job.
 *
 * When the plugin set DTRAIN_NVLINK_DOMAIN (a TP group of several nodes in
 * a multi-node NVLink domain, or --dtrain-pp-in-domain: DTRAIN_PP_IN_DOMAIN),
 * the leader of each such TP (PP) group also puts its domain under
 * "<group key>.nvd" in the same round and every member compares it with its
 * own: a group across two domains ends with 3 (refused) and one line naming
 * both.  One more key and get per such group (only in that case); still
 * one fence.
 *
 * With --dtrain-verbose on a switch tree (SLURM_TOPOLOGY_ADDR of topology/
 * tree, block or ring), each node's first task also puts its address under
 * "dt.addr.<node>" and rank 0 says which node order is in force and the DP ring
 * edges across leaf switches in it and in dtrain's own order (stderr), and
 * hands the counts to its trainer in DTRAIN_LEAF_EDGES. */
#ifndef DTRAIN_LAUNCH_EXCHANGE_H
#define DTRAIN_LAUNCH_EXCHANGE_H

#include <stddef.h>

#include "dtrain_bootstrap.h"
#include "pmi.h"

struct dtrain_exchange_times {
    long ids_us;   /* leaders making ids (sockets, ncclGetUniqueId) */
    long put_us;   /* PMI2_KVS_Put of this task's keys */
    long fence_us; /* the one PMI2_KVS_Fence */
    long get_us;   /* PMI2_KVS_Get of the ids of the groups this task joins */
};

/* bs must have rank, world_size, tp, pp, dp and backend filled in; the
 * groups are filled here.  `addr` is this task's CPU-backend address
 * (unused for nccl).  Returns DTRAIN_OK; DTRAIN_ERR_FAULT when the PMI2
 * exchange failed in a way a requeue can fix; DTRAIN_ERR_INPUT (tasks that
 * disagree), DTRAIN_ERR_REFUSED (a group across NVLink domains) or
 * DTRAIN_ERR_SYSTEM, with one line in err.
 * On success the leaders' listening sockets are open in bs->groups[].listen_fd. */
enum dtrain_status dtrain_exchange_ids(dtrain_pmi *pmi, struct dtrain_bootstrap *bs, const char *addr,
                                       struct dtrain_exchange_times *times, char *err, size_t errlen);

/* 1 when this task's group of kind k (TP or PP) must stay inside one
 * NVLink domain, the groups the exchange checks: a TP group holding
 * several nodes, a PP group with --dtrain-pp-in-domain, and only when the
 * plugin gave the task its domain (DTRAIN_NVLINK_DOMAIN).  bs as
 * dtrain_exchange_ids left it. */
int dtrain_exchange_domain_kept(const struct dtrain_bootstrap *bs, enum dtrain_group_kind k);

/* Close the listening sockets left in bs (an error path, or when unused). */
void dtrain_bootstrap_close(struct dtrain_bootstrap *bs);

#endif
