/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The GPUs Slurm's GRES gave a step, so that the plugin places tasks only on
 * those.
 *
 * With GRES, slurmstepd puts the allocated GPUs' node indices in
 * SLURM_STEP_GPUS ("0,1,4,5") and the values the step must use in
 * CUDA_VISIBLE_DEVICES, in the same order: the same indices, or 0..n-1 when
 * cgroups hide the other devices.  Node indices are NVML's, which number GPUs
 * in PCI bus id order, like the node model.  Pure code. */
#ifndef DTRAIN_SPANK_GRES_H
#define DTRAIN_SPANK_GRES_H

#include <stddef.h>

#include "dtrain_topo.h"

#define DTRAIN_GRES_TOKEN_MAX 64 /* "GPU-<uuid>" fits */

struct dtrain_gres_gpus {
    int count;                                  /* 0: Slurm did not restrict the GPUs */
    int index[DTRAIN_TOPO_MAX_GPUS];            /* node GPU indices, ascending */
    char visible[DTRAIN_TOPO_MAX_GPUS][DTRAIN_GRES_TOKEN_MAX]; /* CUDA_VISIBLE_DEVICES value of each */
};

/* step_gpus: SLURM_STEP_GPUS or NULL; cuda_visible: the step's
 * CUDA_VISIBLE_DEVICES or NULL; node_gpus: GPUs in the node model.
 * Returns 0 (count 0 when step_gpus is NULL or empty), or -1 with err when
 * an index is malformed, repeated or not on this node. */
int dtrain_gres_parse(const char *step_gpus, const char *cuda_visible, int node_gpus,
                      struct dtrain_gres_gpus *out, char *err, size_t errlen);

#endif
