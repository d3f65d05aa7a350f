/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What dtrain-launch hands to the runtime: this task's place in the job and,
 * for every communicator the job needs, its members and its bootstrap id.
 *
 * This contract belongs to the comm layer: it makes the ids
 * (bootstrap_id.h), writes and reads the DTRAIN_COMM_* environment
 * (bootstrap_env.h) and turns each group into a communicator
 * (dtrain_comm.h).  dtrain-launch only carries the id texts through PMI2:
 * it fills one struct dtrain_bootstrap per task in a single PMI2 round
 * (each group's leader puts its id, one fence, members get) and then either
 * calls the runtime in-process with it, or exports it to a child PROGRAM
 * (doc/bootstrap.md).
 *
 * Groups, for T x P x D ranks, rank = tp + T*(dp + D*pp) (dtrain_plan.h):
 *   WORLD    all ranks
 *   TP       the T ranks with this task's (dp, pp): consecutive ranks
 *   PP       the P ranks with this task's (tp, dp): one pipeline
 *   DP       the D ranks with this task's (tp, pp): gradient all-reduce
 *   PP_NEXT  {this task, the same (tp, dp) on stage pp+1}; absent on the last stage
 *   PP_PREV  {the same (tp, dp) on stage pp-1, this task}; absent on the first stage
 * Members of every group form an arithmetic sequence of global ranks, so a
 * group is (first, stride, size) and needs no list.  Group rank 0 is the
 * leader: it made the id.  A PP_NEXT group of one task is the PP_PREV group
 * of its next stage (same key, same id).
 *
 * Bootstrap id text (NUL-terminated, at most DTRAIN_BOOTSTRAP_ID_MAX bytes):
 *   "nccl:<256 hex digits>"                the 128-byte ncclUniqueId
 *   "cpu:<IPv4 address>:<port>:<32 hex>"   the leader's listening TCP socket
 *                                          and the group's 16-byte secret
 * With the CPU backend the leader already listens on that port (listen_fd);
 * a member connecting must present the secret, and the leader must refuse
 * a peer that does not (the secret travels only through Slurm's PMI2).
 * Groups of one task are made locally and carry an id too, so that every
 * group can be turned into a communicator the same way.
 *
 * Only WORLD's id travels through PMI2 (one key for the whole job, whatever
 * its size).  The other groups' leaders make their ids too (cpu: every
 * group; nccl: the pipeline pairs, TP/PP/DP being split off WORLD with
 * ncclCommSplit), and their members receive them over the WORLD
 * communicator in dtrain_comm_init_all (dtrain_comm.h): until then a
 * member's id of a group other than WORLD is empty. */
#ifndef DTRAIN_BOOTSTRAP_H
#define DTRAIN_BOOTSTRAP_H

#include "dtrain_grid_pos.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_BOOTSTRAP_ID_MAX 1024  /* = PMI2_MAX_VALLEN, NUL included */
#define DTRAIN_BOOTSTRAP_KEY_MAX 64   /* = PMI2_MAX_KEYLEN, NUL included */
#define DTRAIN_BOOTSTRAP_SECRET_LEN 16

enum dtrain_comm_backend {
    DTRAIN_COMM_CPU = 0,  /* TCP sockets between processes */
    DTRAIN_COMM_NCCL = 1, /* NCCL on GPUs */
};

enum dtrain_group_kind {
    DTRAIN_GROUP_WORLD = 0,
    DTRAIN_GROUP_TP,
    DTRAIN_GROUP_PP,
    DTRAIN_GROUP_DP,
    DTRAIN_GROUP_PP_NEXT,
    DTRAIN_GROUP_PP_PREV,
    DTRAIN_GROUP_KINDS /* number of kinds */
};

struct dtrain_comm_group {
    int present;   /* 0: this task has no such group (PP_NEXT on the last stage, PP_PREV on the first) */
    long index;    /* the group's number among the groups of its kind */
    int size;      /* members */
    int first;     /* global rank of group rank 0, the leader */
    int stride;    /* global rank of group rank i = first + i * stride */
    int my_rank;   /* this task's rank in the group */
    char key[DTRAIN_BOOTSTRAP_KEY_MAX]; /* PMI2 key the id travelled under, e.g. "dt.tp.3" */
    char id[DTRAIN_BOOTSTRAP_ID_MAX];   /* bootstrap id text (format above) */
    int listen_fd; /* CPU backend, leader only: the bound, listening socket; else -1 */
};

struct dtrain_bootstrap {
    DTRAIN_GRID_POS_MEMBERS; /* T, P, D, world_size = T*P*D, rank = SLURM_PROCID = PMI2 rank, coordinates */
    int node;        /* 0..nodes-1, the task's node in the step */
    int local_rank;  /* task index on its node */
    int local_size;  /* tasks on its node */
    enum dtrain_comm_backend backend;
    struct dtrain_comm_group groups[DTRAIN_GROUP_KINDS]; /* indexed by enum dtrain_group_kind */
};

/* "world", "tp", "pp", "dp", "pp_next", "pp_prev": the kind's name in
 * messages and reports (upper case in DTRAIN_COMM_<K>_*, bootstrap_env.h). */
const char *dtrain_group_kind_name(enum dtrain_group_kind kind);

/* One task alone (T = P = D = 1, rank 0 of 1, node 0): every group of one
 * member, nothing to connect, the cpu backend.  dtrain-train trains on it
 * the trainer dtrain-launch runs on its PMI2 bootstrap. */
void dtrain_bootstrap_local(struct dtrain_bootstrap *bs);

/* 1 when groups of this kind are split off WORLD (nccl's TP, PP and DP
 * groups, ncclCommSplit) and so have no id at all; 0 when their leader
 * makes an id (every other kind, and every kind with cpu). */
static inline int dtrain_group_split_off_world(enum dtrain_comm_backend backend, enum dtrain_group_kind kind)
{
    return backend == DTRAIN_COMM_NCCL &&
           (kind == DTRAIN_GROUP_TP || kind == DTRAIN_GROUP_PP || kind == DTRAIN_GROUP_DP);
}

/* Global rank of member i (0 <= i < g->size) of a group. */
static inline int dtrain_group_member(const struct dtrain_comm_group *g, int i)
{
    return g->first + i * g->stride;
}

#ifdef __cplusplus
}
#endif
#endif
