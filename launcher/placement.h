/* SPDX-License-Identifier: GPL-2.0-or-later */
/* This task's place in the job: shape T x P x D, rank, coordinates, node.
 *
 * With the dtrain SPANK plugin (DTRAIN_PLACED_BY=spank) the placement comes
 * from the plugin's environment and is checked against PMI2 and Slurm:
 * PMI2 rank == SLURM_PROCID == DTRAIN_RANK, sizes equal, coordinates in the
 * rank order of dtrain_plan.h, and --tp/--pp/--dp, when given, equal to the
 * plugin's.  Without the plugin the launcher plans the job itself with the
 * same planner (CPU placement: each task gets whole cores of its node, none
 * shared, as topo/plan_cpus.c divides them; GPUs are left as Slurm set
 * them); T, P, D come from the options, else from
 * DTRAIN_TP/PP/DP in the environment, else 1, 1 and world / (T*P).
 * Errors return a status (DTRAIN_ERR_INPUT: a mismatch or bad input;
 * DTRAIN_ERR_REFUSED: the shape; DTRAIN_ERR_SYSTEM: internal) with one line
 * in err (no program prefix). */
#ifndef DTRAIN_LAUNCH_PLACEMENT_H
#define DTRAIN_LAUNCH_PLACEMENT_H

#include <stddef.h>

#include "dtrain_placement_env.h"
#include "dtrain_topo.h"

/* The shape asked for on the command line; 0 = not given. */
struct dtrain_shape_request {
    int tp, pp, dp;
};

struct dtrain_placement {
    DTRAIN_GRID_POS_MEMBERS;        /* T, P, D, world size, rank, coordinates */
    int node, nnodes;
    int local_rank, local_size;
    int placed_by_plugin;           /* 1: DTRAIN_PLACED_BY=spank; 0: planned here */
    char cpus[DTRAIN_TOPO_CPULIST_LEN]; /* the task's CPUs, "" when not known */
    char warning[256];              /* a line to print once (rank 0), or "" */
    struct dtrain_coords coords;    /* the plugin's variables, decoded; or what apply encodes */
};

/* Resolve the placement of the task with this PMI2 rank and size. */
enum dtrain_status dtrain_placement_resolve(const struct dtrain_shape_request *req, int pmi_rank, int pmi_size,
                                            struct dtrain_placement *out, char *err, size_t errlen);

/* When the launcher planned the task: bind it to its CPUs and export the
 * placement variables of common/dtrain_env.h with DTRAIN_PLACED_BY=launcher
 * (the plugin's variables are left as they are).  A binding that the system
 * refuses is not an error: DTRAIN_CPUS is then left empty and *warning says
 * why.  Returns DTRAIN_OK, or DTRAIN_ERR_SYSTEM with one line in err. */
enum dtrain_status dtrain_placement_apply(struct dtrain_placement *p, char *err, size_t errlen);

#endif
