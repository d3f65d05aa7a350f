/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Where one rank sits in the T x P x D grid: the one record of a task's
 * grid sizes, its global rank and its coordinates, and the one rank order.
 * The structs that carry a placement (the planner's dtrain_task_placement,
 * dtrain_coords of the environment, dtrain-launch's dtrain_placement, the
 * runtime's dtrain_bootstrap, the checkpoint's dtrain_sckpt_layout) hold it
 * with DTRAIN_GRID_POS_MEMBERS,
 * so one is handed to the next by one struct assignment (a.pos = b.pos)
 * instead of eight field copies, while a.tp_rank etc. still name the
 * fields.  Pure code: no I/O, no state.
 *
 * The rank order (doc/design.md): TP fastest, then DP, then PP:
 *   rank = tp_rank + T * (dp_rank + D * pp_rank)                              */
#ifndef DTRAIN_GRID_POS_H
#define DTRAIN_GRID_POS_H

/* The fields, once: the named struct and the members of the structs that
 * embed it are this list. */
#define DTRAIN_GRID_POS_FIELDS                                                                     \
    int tp, pp, dp;                /* T, P, D */                                                  \
    int world_size;                /* T*P*D */                                                    \
    int rank;                      /* global rank = SLURM_PROCID = PMI2 rank */                   \
    int tp_rank, pp_rank, dp_rank; /* rank = tp_rank + T*(dp_rank + D*pp_rank) */

struct dtrain_grid_pos {
    DTRAIN_GRID_POS_FIELDS
};

/* Inside a struct: a member `pos` (a struct dtrain_grid_pos) whose fields
 * are also the struct's own (s.pos.tp_rank is s.tp_rank).  The anonymous
 * struct has the same members in the same order as struct dtrain_grid_pos,
 * so the two union members share their layout (C11 6.5.2.3: a common
 * initial sequence); the Linux kernel's struct_group() is this pattern. */
#define DTRAIN_GRID_POS_MEMBERS                                                                    \
    union {                                                                                        \
        struct dtrain_grid_pos pos;                                                                \
        struct {                                                                                   \
            DTRAIN_GRID_POS_FIELDS                                                                 \
        };                                                                                         \
    }

/* Coordinates <-> rank, the one definition of the rank order. */
static inline int dtrain_rank_of(int tp_rank, int dp_rank, int pp_rank, int T, int D)
{
    return tp_rank + T * (dp_rank + D * pp_rank);
}
static inline void dtrain_coords_of(int rank, int T, int D, int *tp_rank, int *dp_rank, int *pp_rank)
{
    *tp_rank = rank % T;
    *dp_rank = (rank / T) % D;
    *pp_rank = rank / (T * D);
}

/* The position of rank in a T x P x D grid (sizes, world size, rank and its
 * coordinates); T, P, D >= 1. */
static inline struct dtrain_grid_pos dtrain_grid_pos_of(int T, int P, int D, int rank)
{
    struct dtrain_grid_pos g = {.tp = T, .pp = P, .dp = D, .world_size = T * P * D, .rank = rank};
    dtrain_coords_of(rank, T, D, &g.tp_rank, &g.dp_rank, &g.pp_rank);
    return g;
}

/* The position at these coordinates (rank from the one formula). */
static inline struct dtrain_grid_pos dtrain_grid_pos_at(int T, int P, int D, int tp_rank, int pp_rank, int dp_rank)
{
    struct dtrain_grid_pos g = {.tp = T, .pp = P, .dp = D, .world_size = T * P * D,
                                .rank = dtrain_rank_of(tp_rank, dp_rank, pp_rank, T, D),
                                .tp_rank = tp_rank, .pp_rank = pp_rank, .dp_rank = dp_rank};
    return g;
}

#endif
