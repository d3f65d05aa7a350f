/* libdtrain: the 3D-parallel trainer (tensor x pipeline x data parallel).
 *
 *   dtrain_parallel_main(argc, argv, bs)
 *       The trainer inside `srun --mpi=pmi2 dtrain-launch [CONFIG] [flags]`:
 *       builds every communicator from the launcher's bootstrap, parses
 *       dtrain-train's config and flags (plus the "parallel" section:
 *       --micro-batches, --zero1, --bucket-mb, --dp-overlap), trains, and
 *       returns the process exit code.  Rank 0 prints the progress lines
 *       and writes the metrics file.  One task with one micro-batch and no
 *       ZeRO-1 runs the single-process trainer (dtrain_train.h) itself.
 *
 *   struct dtrain_ptrainer
 *       One rank's trainer on communicators the caller built (the launcher's
 *       or a test's): create, step, run.
 *
 * Semantics: the same as the single-process trainer with the same config.
 * Step k reads global batch k (B x T) on every rank; data-parallel rank d
 * takes rows [d*B/D, (d+1)*B/D) and runs them as m micro-batches of
 * B/(D*m) rows through the 1F1B pipeline (dtrain_pipeline.h); the loss is
 * the mean over the global batch and every gradient that of that mean.  The
 * whole model is initialised from the seed as on one rank and each rank
 * keeps its slice (dtrain_shard.h), so every layout starts from the same
 * parameters and follows the (1,1,1) run up to fp32 rounding
 * (doc/parallel.md states and measures the tolerance).
 *
 * Rank order and groups: launcher/dtrain_bootstrap.h.  Tensor parallel:
 * dtrain_tp.h; pipeline: dtrain_stage.h and dtrain_pipeline.h; data
 * parallel, ZeRO-1, norm and update: dtrain_dp.h.
 *
 * Exit codes: 0 done; 2 bad config, data or shape (NH, 4C or Vp not
 * divisible by T, fewer layers than stages, B not divisible by D*m; on
 * every rank); 75 a peer failed or timed out (requeue); 1 anything else. */
#ifndef DTRAIN_PARALLEL_H
#define DTRAIN_PARALLEL_H

#include <stddef.h>
#include <stdio.h>

#include "dtrain_bootstrap.h"
#include "dtrain_comm.h"
#include "dtrain_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `dtrain-launch [CONFIG.json] [flags]` in-process (argv[0] names the
 * program in messages).  Takes over bs's listening sockets.  Returns the
 * exit code. */
int dtrain_parallel_main(int argc, char **argv, struct dtrain_bootstrap *bs);

struct dtrain_ptrainer; /* opaque */

/* Check the layout against a finished config before any communicator is
 * used: T, P, D >= 1, the model splits over T and P, B over D*m.
 * DTRAIN_ERR_INPUT with one line saying what to change. */
int dtrain_parallel_check(const struct dtrain_train_config *c, int tp, int pp, int dp,
                          char *err, size_t errlen);

/* One rank's trainer.  bs gives the layout (tp, pp, dp sizes and ranks,
 * rank, world_size); comms every group of it (NULL entries only where the
 * rank has no such group, dtrain_comm_init_all).  comms must outlive it. */
int dtrain_ptrainer_create(const struct dtrain_train_config *c, const struct dtrain_bootstrap *bs,
                           const struct dtrain_comms *comms, struct dtrain_ptrainer **out,
                           char *err, size_t errlen);
void dtrain_ptrainer_destroy(struct dtrain_ptrainer *t);

struct dtrain_pstep_result {
    struct dtrain_step_result base; /* loss and norm of the whole job, every rank */
    double pipe_wait_ms;  /* this rank's time blocked in pipeline sends and receives */
    double compute_ms;    /* its time in forward and backward */
    double dp_exposed_ms; /* its wait for gradient buckets after backward */
};

/* One step of the whole job (a collective over every rank). */
int dtrain_ptrainer_step(struct dtrain_ptrainer *t, struct dtrain_pstep_result *r,
                         char *err, size_t errlen);
long dtrain_ptrainer_steps_done(const struct dtrain_ptrainer *t);

/* Train until config.steps: rank 0 prints progress lines to `progress`
 * (NULL: none) and writes the metrics file; at the end rank 0 writes the
 * llm.c model file (--save-llmc), gathered from every stage and TP rank. */
int dtrain_ptrainer_run(struct dtrain_ptrainer *t, FILE *progress, char *err, size_t errlen);

/* This rank's parameters (its slice of the model in the layout of
 * dtrain_shard_plan(model, T, P, tp_rank, pp_rank); backend memory);
 * returns how many. */
size_t dtrain_ptrainer_local_params(struct dtrain_ptrainer *t, const float **params);

/* The whole model's parameters (host, dtrain_gpt2_param_count floats), put
 * together on WORLD rank 0 from the TP and PP shards of DP rank 0
 * (whole is only written on rank 0; a collective over WORLD). */
int dtrain_ptrainer_gather_params(struct dtrain_ptrainer *t, float *whole, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
