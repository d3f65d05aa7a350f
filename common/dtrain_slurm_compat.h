/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Where Slurm's C API differs between the versions dtrain builds against
 * (22.05, 24.11, 26.05; configure's feature tests, doc/install.md "Slurm
 * versions tested"): one name for each, so that the callers hold no
 * #ifdef of their own. */
#ifndef DTRAIN_SLURM_COMPAT_H
#define DTRAIN_SLURM_COMPAT_H

#include <slurm/slurm.h>
#include <stdint.h>

/* A job as slurm_requeue and slurm_load_job name it: a slurm_step_id_t
 * from Slurm 26.05 on, its uint32_t id before. */
#ifdef DTRAIN_SLURM_REQUEUE_STEP_ID
typedef slurm_step_id_t dtrain_slurm_job_t;
static inline dtrain_slurm_job_t dtrain_slurm_job(uint32_t id)
{
    slurm_step_id_t which = SLURM_STEP_ID_INITIALIZER;
    which.job_id = id;
    return which;
}
#else
typedef uint32_t dtrain_slurm_job_t;
static inline dtrain_slurm_job_t dtrain_slurm_job(uint32_t id)
{
    return id;
}
#endif

/* What slurm_load_ctl_conf returns is freed by slurm_free_ctl_conf,
 * renamed slurm_free_conf in Slurm 26.05. */
#if HAVE_DECL_SLURM_FREE_CONF
#define dtrain_slurm_free_conf slurm_free_conf
#else
#define dtrain_slurm_free_conf slurm_free_ctl_conf
#endif

#endif
