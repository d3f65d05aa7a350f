/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: the fault-tolerant training loop of the parallel trainer.
 *
 * dtrain_ft_run() trains a dtrain_ptrainer (dtrain_parallel.h) to
 * config.steps: every step (dtrain_ptrainer_step_ctl), its progress line
 * and metrics (dtrain_ptrainer_log_step), the llm.c export at the end,
 * plus:
 *
 *   Resume.  With a checkpoint folder (--ckpt-dir, else DTRAIN_CKPT_DIR,
 *   which sbatch --dtrain-ckpt-dir sets; dtrain-train's --checkpoint), or
 *   --resume DIR (which must hold one), a trainer at step 0 first loads the newest
 *   good checkpoint there (dtrain_shard_ckpt.h: written by any layout;
 *   damaged ones are skipped, saying so) and goes on from its step; the
 *   metrics file is cut back to that step.  When every checkpoint there is
 *   damaged the run stops (DTRAIN_ERR_INPUT) rather than start over.  In
 *   the same layout the
 *   resumed run's losses equal the unbroken run's bit for bit: parameters,
 *   AdamW moments, step and data position are restored exactly and every
 *   random draw in dtrain is a pure function of the seeds.
 *
 *   Checkpoints every --checkpoint-every steps, at the end, and when any
 *   rank got SIGTERM (preemption, scancel), SIGINT (Ctrl-C, counted as a
 *   SIGTERM) or SIGUSR1 (sbatch --signal):
 *   the ranks agree on the signal through the loss sum of the step in
 *   flight, write a checkpoint of the step after it, and stop with the
 *   requeue code.  A checkpoint that fails to write (a full disk) is
 *   reported and training goes on; the older checkpoints stay.
 *   --ckpt-async: the periodic ones are written in the background
 *   (dtrain_ckpt_async.h) and committed at the first step boundary where
 *   every rank's write is done.  --ckpt-local-dir: they go to the
 *   node-local tier with each shard copied to a rank on another node, and
 *   every --ckpt-shared-every steps, at the end and when stopping to the
 *   shared folder; the resume takes the newest complete checkpoint of
 *   either tier (dtrain_sckpt_resume_tiers) and says which.
 *
 *   Faults.  A communicator error (a dead peer, a timeout, an abort), a
 *   hang seen by the watchdog (dtrain_watchdog.h), or a stop signal ends
 *   the run with DTRAIN_ERR_FAULT and the reason in err; the caller
 *   reports it (dtrain_fault_report: one line, exit 75 while restarts
 *   remain).  A non-finite loss or gradient norm skips the step (no
 *   update, the batch consumed) up to --nonfinite-skips times in a row;
 *   one more rolls the run back to the last checkpoint (at most 3
 *   rollbacks; without a checkpoint it is an error: training diverged).
 *
 *   Stragglers (--straggler-steps, --straggler-margin, DTRAIN_STRAGGLER;
 *   dtrain_parallel.h finds them): the straggler reports itself on one
 *   line; with --straggler-drain (DTRAIN_STRAGGLER=drain) the ranks
 *   checkpoint, the straggler leaves DTRAIN_DRAIN_REQUEST in the
 *   checkpoint folder and the run stops with DTRAIN_ERR_FAULT (requeue).
 *
 *   Fault injection (dtrain_inject.h, --inject or DTRAIN_INJECT).
 *
 * Every rank calls it; rank 0 prints the progress and checkpoint lines to
 * `progress` and its messages to stderr. */
#ifndef DTRAIN_FT_H
#define DTRAIN_FT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#include "dtrain_bootstrap.h"
#include "dtrain_comm.h"
#include "dtrain_fault.h"
#include "dtrain_parallel.h"
#include "ft/dtrain_policy.h"
#include "dtrain_shard_ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_FT_STRAGGLER_STEPS 5 /* straggler_steps when DTRAIN_STRAGGLER asks for detection */

/* The writing job's layout and this rank's place in it, as checkpoints record it. */
struct dtrain_sckpt_layout dtrain_ft_layout(const struct dtrain_bootstrap *bs, const struct dtrain_train_config *cfg);

/* Complete c from the environment before the trainer is built: an empty
 * ckpt_dir takes DTRAIN_CKPT_DIR, an empty inject DTRAIN_INJECT; the
 * injection spec is checked.  DTRAIN_ERR_INPUT with one line in err. */
int dtrain_ft_config_from_env(struct dtrain_train_config *c, char *err, size_t errlen);

/* What a checkpoint holds of this rank, as runs of the whole model's
 * vector (dtrain_shard_ckpt.h), pointing into a host copy of the
 * trainer's parameters and moments (which live in kernel-backend memory,
 * device memory on a GPU): save, the parameters and moments it owns (each
 * element of the model once over the job: dtrain_shard_in_norm across TP
 * and PP, the ZeRO-1 shares or DP rank 0 across DP), increasing; load,
 * every run it needs (its whole shard's parameters, the moments it keeps).
 * dtrain_ft_pieces_download fills the host copy from the trainer before a
 * save; dtrain_ft_pieces_upload puts it back after a load.  Valid while t
 * lives. */
struct state_copy;
struct dtrain_ft_pieces {
    struct dtrain_sckpt_piece *save, *load;
    size_t nsave, nload;
    /* The load as a DP group (struct dtrain_sckpt_group: at ZeRO >= 1 each
     * DP rank reads a share of the shards): the shard's runs, and the DP
     * group (NULL: ZeRO off or D = 1, every rank reads its pieces itself). */
    struct dtrain_sckpt_piece *slice;
    size_t nslice;
    dtrain_comm *dp_comm;
    struct dtrain_kernels *k;   /* the trainer's */
    float *dev_params, *host_params; /* dev_params NULL: ZeRO-3, dp's shares */
    struct dtrain_dp *dp;
    size_t nparams;
    struct dtrain_adamw *adamw; /* whose moments: the DP's, or LoRA's adapters' */
    struct state_copy *state;   /* the moments' runs and their host copies */
    size_t nstate;
    /* what a save reads of the parameters, as ranges of the local vector
     * (the saved pieces', merged where they touch); a rank with no save
     * pieces (it writes no moments: ZeRO off, DP rank > 0) reads nothing */
    struct dtrain_ft_range { size_t off, count; } *saved;
    size_t nsaved;
};
int dtrain_ft_pieces(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg,
                     const struct dtrain_bootstrap *bs, struct dtrain_ft_pieces *out, char *err, size_t errlen);
/* The trainer's state a save writes into the pieces' host copies (only
 * what the save pieces hold: at D > 1 a share), or the loaded state back
 * (a file's I/O error of offloaded moments: DTRAIN_ERR_SYSTEM with err). */
int dtrain_ft_pieces_download(struct dtrain_ft_pieces *p, char *err, size_t errlen);
int dtrain_ft_pieces_upload(struct dtrain_ft_pieces *p, char *err, size_t errlen);
void dtrain_ft_pieces_free(struct dtrain_ft_pieces *p);
/* The group p's load is done as (its slice and DP group). */
struct dtrain_sckpt_group dtrain_ft_pieces_group(const struct dtrain_ft_pieces *p);

/* One checkpoint of t's present step into dir, or t from dir's newest
 * good checkpoint (none there is DTRAIN_ERR_INPUT), outside the loop (a
 * collective over world, as in the loop; damaged checkpoints are reported
 * to stderr prefixed prog). */
int dtrain_ft_save(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg, const struct dtrain_bootstrap *bs,
                   dtrain_comm *world, const char *dir, char *err, size_t errlen);
int dtrain_ft_load(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg, const struct dtrain_bootstrap *bs,
                   dtrain_comm *world, const char *dir, const char *prog, char *err, size_t errlen);

/* What the loop measured, for the caller's last line and the benchmark. */
struct dtrain_ft_summary {
    long resumed_step;       /* -1: started from the beginning */
    long steps_skipped;      /* non-finite steps skipped */
    int rollbacks;
    int checkpoints;         /* written by this run */
    int checkpoint_failures;
    double ckpt_write_s;     /* seconds in the last checkpoint written */
    unsigned long long ckpt_bytes; /* its size, all shards (rank 0) */
    double load_s;           /* seconds loading the checkpoint resumed from */
    unsigned long long load_bytes; /* bytes this rank read then */
    unsigned long long load_received; /* bytes of files it received from other ranks then (node-local tier:
                                       * those its node lacked) */
};

/* Train t (built from cfg on bs and comms) to cfg->steps.  abort_flag is
 * the communicators' abort flag (the watchdog sets it); fault the
 * process's fault state.  Returns DTRAIN_OK, DTRAIN_ERR_FAULT (requeue:
 * err holds the reason, not yet reported), or another status with one
 * line in err. */
int dtrain_ft_run(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg,
                  const struct dtrain_bootstrap *bs, const struct dtrain_comms *comms, atomic_int *abort_flag,
                  struct dtrain_fault *fault, FILE *progress, struct dtrain_ft_summary *sum, char *err,
                  size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
