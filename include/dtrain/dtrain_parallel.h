/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: the 3D-parallel trainer (tensor x pipeline x data parallel).
 *
 *   dtrain_parallel_main(argc, argv, bs)
 *       The trainer inside `srun --mpi=pmi2 dtrain-launch [CONFIG] [flags]`:
 *       builds every communicator from the launcher's bootstrap, parses
 *       dtrain-train's config and flags (plus the "parallel" section:
 *       --micro-batches, --virtual-stages, --zero-stage, --bucket-mb,
 *       --dp-overlap), trains, and
 *       returns the process exit code.  Rank 0 prints the progress lines
 *       and writes the metrics file.  dtrain-train (dtrain_train.h) runs
 *       the same program on a 1x1x1 bootstrap of its own.
 *
 *   struct dtrain_ptrainer
 *       One rank's trainer on communicators the caller built (the launcher's,
 *       dtrain-train's 1x1x1 or a test's): create, step; the loop is
 *       dtrain_ft_run (dtrain_ft.h), the only one.
 *
 * Semantics: the same as the single-process trainer with the same config.
 * Step k reads global batch k (B x T) on every rank; data-parallel rank d
 * takes rows [d*B/D, (d+1)*B/D) and runs them as m micro-batches of
 * B/(D*m) rows through the 1F1B pipeline (dtrain_pipeline.h; interleaved
 * with --virtual-stages V > 1, each stage holding V chunks); the loss is
 * the mean over the global batch and every gradient that of that mean.  The
 * whole model is initialised from the seed as on one rank and each rank
 * keeps its slice (dtrain_shard.h), so every layout starts from the same
 * parameters and follows the (1,1,1) run up to fp32 rounding
 * (doc/parallel.md states and measures the tolerance).
 *
 * Rank order and groups: runtime/comm/bootstrap/dtrain_bootstrap.h.  Tensor parallel:
 * dtrain_tp.h; pipeline: dtrain_stage.h and dtrain_pipeline.h; data
 * parallel, ZeRO-1, norm and update: dtrain_dp.h.
 *
 * Exit codes: 0 done; 2 bad config, data or shape (NH, 4C or Vp not
 * divisible by T, fewer layers than stages, B not divisible by D*m, V > 1
 * with P = 1, P*V not dividing the layers or m not a multiple of P; on
 * every rank); 75 a peer failed or timed out (requeue); 1 anything else. */
#ifndef DTRAIN_PARALLEL_H
#define DTRAIN_PARALLEL_H

#include <stddef.h>
#include <stdio.h>

#include "dtrain_bootstrap.h"
#include "dtrain_comm.h"
#include "dtrain_train.h"

struct dtrain_sckpt_scaler; /* dtrain_shard_ckpt.h */

struct dtrain_shard;
struct dtrain_dp;

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

/* Straggler detection (--straggler-steps N > 0, --straggler-margin M):
 * after each logged step every rank gathers every rank's times (as
 * --rank-metrics does) and computes the same verdict: a rank whose own
 * compute time (forward and backward, its tensor-parallel communication
 * not counted: that is waiting on its partners) exceeds the median over
 * the world by more than M (a fraction) N steps in a row is a straggler.
 * The newest verdict, the same on every rank: */
struct dtrain_straggler {
    int rank;           /* the straggler (the largest excess among those N steps in a row), -1: none */
    int is_new;         /* this step made it one (its N-th step in a row) */
    long steps;         /* steps in a row above the margin */
    double compute_ms;  /* its own compute time this step */
    double median_ms;   /* the median over the world */
    double excess;      /* compute / median - 1 */
};
void dtrain_ptrainer_straggler(const struct dtrain_ptrainer *t, struct dtrain_straggler *s);

/* Tell w (dtrain_watchdog.h, NULL: none) each 1F1B action and collective
 * of a step as it begins, for the heartbeat and the fault line. */
struct dtrain_watchdog;
void dtrain_ptrainer_set_watchdog(struct dtrain_ptrainer *t, struct dtrain_watchdog *w);

struct dtrain_pstep_result {
    struct dtrain_step_result base; /* loss and norm of the whole job, every rank */
    double pipe_wait_ms;  /* this rank's time blocked in pipeline sends and receives */
    double compute_ms;    /* its time in forward and backward (TP communication included) */
    double tp_comm_ms;    /* of which in tensor-parallel communication */
    double loss_scale;    /* fp16: the loss scale of this step (1 otherwise) */
    long overflow_steps;  /* fp16: steps skipped for a gradient overflow so far */
    int overflow;         /* fp16: this step's scaled gradients overflowed: no update, the scale was
                           * halved, the batch is consumed, the step is not (as for ctl->skipped) */
    double dp_exposed_ms; /* its wait for gradient buckets after backward */
    double dp_gather_ms;  /* ZeRO-3: of which in parameter gathers (waits for a prefetched one included) */
    int dp_prefetched;    /* ZeRO-3: gathers of the step that ran ahead in the prefetcher thread */
};

/* One step of the whole job (a collective over every rank). */
int dtrain_ptrainer_step(struct dtrain_ptrainer *t, struct dtrain_pstep_result *r,
                         char *err, size_t errlen);
long dtrain_ptrainer_steps_done(const struct dtrain_ptrainer *t);

/* ------------------------------------------------------------ the pieces of the loop
 * (dtrain_ft.h, the fault-tolerant loop, is built from these) */

struct dtrain_pstep_control {
    /* in: this rank's counts; out: their sums over the world, carried with the loss */
    int32_t term;     /* got SIGTERM or SIGINT (dtrain_policy.h) */
    int32_t usr1;     /* got SIGUSR1 */
    int64_t writing;  /* background checkpoint writes still running (dtrain_loop.c) */
    int skipped;      /* out: the loss or the gradient norm was not finite on the whole job: no update
                       * was made (every rank skips alike), the batch is consumed, the step is not */
};

/* dtrain_ptrainer_step with control (ctl NULL: the same as it, a non-finite
 * loss is an error). */
int dtrain_ptrainer_step_ctl(struct dtrain_ptrainer *t, struct dtrain_pstep_control *ctl,
                             struct dtrain_pstep_result *r, char *err, size_t errlen);

/* Dynamic loss scaling (--precision fp16; GradScaler's semantics): the
 * loss is multiplied by the scale (initially parallel.loss_scale) before
 * backward, the gradients divided by it before the norm and clipping; a
 * step whose gradient norm is not finite (an fp16 overflow) makes no
 * update and halves the scale, and loss_scale_window steps in a row
 * without one double it.  The state travels in checkpoints. */
void dtrain_ptrainer_scaler(const struct dtrain_ptrainer *t, struct dtrain_sckpt_scaler *s);
/* Take a checkpoint's scaler state (ignored when it has none, or when this
 * run does not scale the loss). */
void dtrain_ptrainer_set_scaler(struct dtrain_ptrainer *t, const struct dtrain_sckpt_scaler *s);

/* This rank's backend memory by kind, as the stage, data parallelism and
 * the tied embedding allocated it (all of it up front: the activations are
 * the peak), and what the formula gives for the same layout (fp32, n local
 * parameters, D data-parallel ranks): parameters 4n, the accumulated
 * gradients 4n, the reduced gradients kept 4n (stage 0 and 1; none on
 * D = 1 without ZeRO) or 4n/D (stage 2), AdamW moments 8n (stage 0) or
 * 8n/D (stage 1, 2).  Stage 3: shares of all four, 16n/D, and the full
 * weights and gradient buffers of the units held at once (wte and the
 * largest other unit: 8 bytes a parameter of each).  The measured figure is
 * above the formula by the buckets' padding to a multiple of D. */
struct dtrain_ptrainer_memory {
    size_t params, grads, reduced_grads, optimizer, activations, comm;
    size_t model_state, model_state_formula; /* params + grads + reduced_grads + optimizer */
    /* --offload-optimizer: the AdamW state outside the device (doc/runtime.md's formulas) */
    size_t pinned_host, pinned_host_formula, nvme, nvme_formula;
};
void dtrain_ptrainer_memory(const struct dtrain_ptrainer *t, struct dtrain_ptrainer_memory *m);
/* The memory as one JSON line {"memory": {...}} (--memory-report). */
void dtrain_ptrainer_memory_line(const struct dtrain_ptrainer *t, FILE *out);

/* Validation (a collective over every rank): the mean loss over the first
 * K = dtrain_ptrainer_val_batches() B x T batches of the validation data
 * (--val-data, or the --val-fraction held out of the training data), with
 * the present parameters, forward only: each DP rank its rows, each stage
 * its layers, the last stage's TP ranks the vocabulary-parallel loss, the
 * sum over the world in rank order.  The same in every layout up to fp32
 * rounding (tests/parallel/test_train.c).  NaN and DTRAIN_OK without
 * validation data. */
int dtrain_ptrainer_validate(struct dtrain_ptrainer *t, double *val_loss, char *err, size_t errlen);
int dtrain_ptrainer_val_batches(const struct dtrain_ptrainer *t); /* K; 0: no validation data */

/* --sample-every: the model gathered on rank 0 (a collective over the
 * world) and 64 tokens it writes after a newline (fewer when max_seq_len
 * is reached; dtrain_generate.h:
 * temperature 0.8, top-k 40, seed 1337) printed to progress as one line
 * "sample after step N: ..." (bytes as ASCII text, control bytes as spaces,
 * bytes above 126 as '?';
 * token ids for a vocabulary above 256). */
int dtrain_ptrainer_sample(struct dtrain_ptrainer *t, FILE *progress, char *err, size_t errlen);

/* Rank 0: the progress line (every log_every steps, and every step with
 * a validation loss) and the metrics line of a step.  A metrics, per-rank
 * or Prometheus file that cannot be written is no error: a warning on
 * stderr (once per file, with errno), the line left out whole. */
int dtrain_ptrainer_log_step(struct dtrain_ptrainer *t, FILE *progress, const struct dtrain_pstep_result *r,
                             char *err, size_t errlen);
/* Rank 0: cut the metrics file back to the lines of the steps before
 * `step` (0: empty it), so that a resumed run's file reads as one run. */
int dtrain_ptrainer_metrics_from(struct dtrain_ptrainer *t, long step, char *err, size_t errlen);
/* Rank 0, after the run: one line, "PROG: done: steps A..B of N in 3m12s,
 * final loss L (smoothed S), val loss V (best W after step K);
 * checkpoints in DIR; model FILE; metrics FILE" (the parts that apply), or
 * "PROG: nothing to do: the run is at step N of N already" when this
 * process ran no step. */
void dtrain_ptrainer_summary(const struct dtrain_ptrainer *t, FILE *progress, const char *prog, const char *ckpt_dir);
/* MFU's peak FLOP/s per device: --peak-flops (*measured 0), or rank 0's
 * GEMM rate measured at creation (*measured 1: the backend's matmul of
 * 512^3 in the run's precision, timed for 0.2 s; only where progress lines
 * or metrics show it; raised to any step's faster rate per device, so
 * that MFU never exceeds 100%); 0: none.  MFU = model FLOPs per step
 * (dtrain_model_flops_per_step) / step seconds / (peak x world size). */
double dtrain_ptrainer_peak_flops(const struct dtrain_ptrainer *t, int *measured);
/* "42s", "3m07s", "2h05m" */
void dtrain_format_duration(double seconds, char *out, size_t outlen);

/* After the last step: the llm.c export (a collective) and the metrics file closed. */
int dtrain_ptrainer_finish(struct dtrain_ptrainer *t, char *err, size_t errlen);

/* The data batch the next step reads; moving the trainer (after loading a
 * checkpoint) to step `step` reading batch `data_batches`. */
uint64_t dtrain_ptrainer_data_batches(const struct dtrain_ptrainer *t);
void dtrain_ptrainer_set_position(struct dtrain_ptrainer *t, long step, uint64_t data_batches);

/* What a checkpoint holds of this rank: its shard (the layout of its
 * parameters), its parameters (backend memory, writable; NULL with ZeRO-3,
 * whose shares dtrain_dp_params_download/upload move) and its data-
 * parallel state (the AdamW moments it keeps: dtrain_dp_for_each_state). */
const struct dtrain_shard *dtrain_ptrainer_shard(const struct dtrain_ptrainer *t);
float *dtrain_ptrainer_params(struct dtrain_ptrainer *t);
struct dtrain_dp *dtrain_ptrainer_dp(struct dtrain_ptrainer *t);
/* LoRA's adapters (runtime/parallel/dtrain_lora.h), NULL without LoRA
 * (dtrain_ptrainer_dp is then NULL: the base has no gradients). */
struct dtrain_lora *dtrain_ptrainer_lora(struct dtrain_ptrainer *t);
struct dtrain_kernels *dtrain_ptrainer_kernels(struct dtrain_ptrainer *t); /* its kernel backend */

/* This rank's parameters (its slice of the model in the layout of
 * dtrain_shard_plan(model, T, P, tp_rank, pp_rank)) copied into local
 * (host, dtrain_ptrainer_shard()->count floats).  With ZeRO-3 they are
 * gathered from the DP ranks' shares: every DP rank must call it. */
int dtrain_ptrainer_local_params(struct dtrain_ptrainer *t, float *local, char *err, size_t errlen);
/* This rank's gradients of the last step (the mean loss's, reduced over
 * DP, before clipping), in the same layout, into local.  DTRAIN_ERR_INPUT
 * with ZeRO-2 and -3, whose ranks keep only their share of them. */
int dtrain_ptrainer_local_grads(struct dtrain_ptrainer *t, float *local, char *err, size_t errlen);

/* The whole model's parameters (host, dtrain_model_param_count floats), put
 * together on WORLD rank 0 from the TP and PP shards of DP rank 0
 * (whole is only written on rank 0; a collective over WORLD). */
int dtrain_ptrainer_gather_params(struct dtrain_ptrainer *t, float *whole, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
