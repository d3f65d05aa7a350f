/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, private to trainer/: the parallel trainer's state, shared by
 * its files (not installed; dtrain_parallel.h is the API):
 *
 *   dtrain_parallel_trainer.c  creation, the accessors, the memory report
 *   dtrain_step.c              the step: 1F1B schedule, tied embedding, update
 *   dtrain_eval.c              validation, samples, the parameter gather, llm.c export
 *   dtrain_metrics.c           reporting: metrics JSON, progress, per-rank lines,
 *                              stragglers, summary, Prometheus
 *   dtrain_ckpt_pieces.c       trainer state <-> checkpoint pieces
 *   dtrain_loop.c              the loop (dtrain_ft_run) */
#ifndef DTRAIN_PTRAINER_H
#define DTRAIN_PTRAINER_H

#include "dtrain_parallel.h"
#include "dtrain_data.h"
#include "ft/dtrain_inject.h"
#include "dtrain_metrics.h"
#include "parallel/dtrain_pcomm.h"
#include "parallel/dtrain_pipeline.h"
#include "parallel/dtrain_shard.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_clock.h"


struct dtrain_ptrainer {
    struct dtrain_train_config cfg;
    struct dtrain_bootstrap layout; /* sizes and ranks (no ids kept) */
    const struct dtrain_comms *comms;
    struct dtrain_kernels *k;
    struct dtrain_tokens *data;
    struct dtrain_tokens *val;   /* validation data, NULL: none */
    int val_batches;             /* K: min(val_batches, batches the validation data holds) */
    struct dtrain_shard shard;
    struct dtrain_tp *tp;
    struct dtrain_stage *stage;
    struct dtrain_dp *dp;        /* NULL with LoRA: the base has no gradients to reduce */
    struct dtrain_lora *lora;    /* LoRA's adapters, the trained vector (NULL: every parameter trained) */
    struct dtrain_pcomm lora_dp; /* LoRA: the DP group on the kernels' memory (the adapters' all-reduce) */
    struct dtrain_pipe_action *actions;
    long nactions;
    struct dtrain_watchdog *wd;  /* told each action (NULL: none) */
    struct dtrain_inject_hooks inject; /* fault injection in the step (ft/dtrain_inject.h; no functions: none) */
    int micro_rows;              /* b = B / (D*m) */
    int32_t *inputs, *targets;   /* host: the global batch, B*T each */
    float *tie;                  /* P > 1, stages holding wte: the other end's wte gradient (kernels' memory) */
    struct dtrain_pcomm prev, next, pp; /* the pipeline's communicators on the kernels' memory */
    FILE *metrics;               /* rank 0, with --metrics */
    FILE *rank_file;             /* every rank, with --rank-metrics: DIR/rank-N.jsonl */
    char rank_path[DTRAIN_PATH_MAX + 32];
    float *host_times;           /* RANK_FIELDS x world: every rank's times, gathered on the world */
    double *compute_sum;         /* rank 0: each rank's compute ms summed over the logged steps */
    int gather;                  /* every logged step gathers every rank's times (rank metrics, stragglers) */
    long *slow_run;              /* with straggler_steps: each rank's steps in a row above the margin */
    double *sorted;              /* scratch: the own compute times, sorted for the median */
    struct dtrain_straggler strag;
    long logged;
    struct dtrain_prom prom;     /* rank 0, with --prom-textfile (prom_on) */
    int prom_on;
    const char *prog;            /* names the warnings of a side channel (dtrain_report_set_prog), NULL: "dtrain" */
    unsigned side_warned;        /* SIDE_*: the files whose write failure was said already */
    long step;
    uint64_t data_batches;
    double flops_per_step;       /* of the whole job */
    struct dtrain_sckpt_scaler scaler; /* fp16: dynamic loss scaling (on 0 otherwise) */
    double peak_flops;           /* per device; 0: unknown (no progress or metrics to show MFU in) */
    int peak_measured;           /* 1: measured (the GEMM at start, raised by faster steps: dtrain_mfu), 0: declared (--peak-flops) */
    int peak_warned;             /* 1: a declared peak under a step's rate was said (dtrain_mfu_peak_warning) */
    /* rank 0's story of the run: since its first step */
    double run_start;            /* wall clock at the start of the first step of this process, 0: none yet */
    long first_step;             /* that step */
    double smooth_loss;          /* exponential moving average of the loss (SMOOTH_ALPHA) */
    float last_loss;
    double last_val, best_val;   /* NaN: none */
    long best_val_step;
};

#define SMOOTH_ALPHA 0.1 /* weight of the newest step in the smoothed loss */
enum { SIDE_METRICS = 1, SIDE_RANK = 2, SIDE_PROM = 4 }; /* the side channels, for side_warned */
#define RANK_FIELDS 4    /* gathered per rank and step: ms, compute, TP, pipeline wait */

/* dtrain_step.c: this DP rank's rows of batch k of data; a transfer to the
 * next stage (to_next) or from/to the previous one. */
void dtrain_ptrainer_read_rows(struct dtrain_ptrainer *t, const struct dtrain_tokens *data,
                               enum dtrain_data_order order, uint64_t seed, uint64_t k);
int dtrain_ptrainer_transfer(struct dtrain_ptrainer *t, int send, int to_next, float *buf, size_t floats,
                             const char *what, char *err, size_t errlen);
/* Fault injection's hooks into the step (ft/dtrain_inject.h; NULL: none). */
void dtrain_ptrainer_set_inject(struct dtrain_ptrainer *t, const struct dtrain_inject_hooks *h);

/* dtrain_metrics.c: open the metrics file, the per-rank file and the
 * Prometheus file at creation; close the metrics file at the end. */
int dtrain_report_open(struct dtrain_ptrainer *t, char *err, size_t errlen);
int dtrain_report_close(struct dtrain_ptrainer *t, char *err, size_t errlen);
/* The program that the warnings of a file that cannot be written name: a
 * failed metrics, per-rank or Prometheus write is a warning (once per
 * file, with errno), never the run's end. */
void dtrain_report_set_prog(struct dtrain_ptrainer *t, const char *prog);

#endif
