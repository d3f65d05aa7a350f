/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: training a GPT-2 model in one process (the `dtrain-train` program).
 *
 * One process runs the same trainer as T x P x D ranks under dtrain-launch
 * (dtrain_parallel.h), on a 1x1x1 bootstrap of its own, with the same loop
 * (dtrain_ft.h) and the same checkpoints: a folder of step-N sharded
 * checkpoints (dtrain_shard_ckpt.h) holding one shard, which any layout
 * can resume from, and which dtrain-train resumes from whatever layout
 * wrote it.
 *
 * Three levels, use the one that fits:
 *
 *   dtrain_train_main(argc, argv)
 *       The whole program: `dtrain-train [CONFIG.json] [flags]`.  Returns
 *       the process exit code (common/dtrain_exit.h); messages go to stderr
 *       prefixed "dtrain-train: ", progress lines to stdout.
 *
 *   struct dtrain_train_config + dtrain_train_config_*()
 *       One JSON config (sections "model", "data", "optimizer", "run"),
 *       overridden by command-line flags; every value checked, with one clear
 *       line for an unknown key, a wrong type, an impossible shape or a
 *       value out of range.  dtrain-train --help lists keys and flags.
 *
 *   struct dtrain_trainer
 *       Build from a finished config; step, checkpoint, export; or run the
 *       whole loop with its progress lines and JSON-lines metrics.
 *
 * Threads: `threads` sets the CPU kernels' pool and OpenBLAS's thread count
 * (which is process-wide in OpenBLAS).  The same config, seed and thread
 * count give bit-identical losses and parameters, run after run.
 *
 * Metrics file: one JSON object per step:
 *   {"step": 0, "loss": 5.54, "lr": 0.0003, "grad_norm": 1.2, "ms": 210.5,
 *    "tokens_per_s": 4866, "gflops": 123.4, "time": 1795941614.325}
 * step counts from 0; loss is the mean loss of that step's batch, computed
 * before the update; time is the Unix time the line was written.  A step
 * after which the validation loss was computed (val_every, and the last
 * step) also has "val_loss": the mean loss over the val_batches first
 * batches of the validation data, after that step's update.  With
 * prom_textfile, the same figures also go to a Prometheus textfile
 * (node_exporter), rewritten at most once a second. */
#ifndef DTRAIN_TRAIN_H
#define DTRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain_data.h"
#include "dtrain_model.h"
#include "dtrain_optim.h"
#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_PATH_MAX 4096

struct dtrain_train_config {
    /* model: a field left 0 is taken from --init-hf / --init-llmc / --model-config / --resume, or the default */
    struct dtrain_model_config model;
    char model_config[DTRAIN_PATH_MAX]; /* a Hugging Face config.json (random weights of its architecture), or "" */
    /* data */
    char data[DTRAIN_PATH_MAX];       /* token file (required) */
    enum dtrain_data_order data_order;
    uint64_t data_seed;               /* shuffled order's seed */
    char val_data[DTRAIN_PATH_MAX];   /* validation token file, or "" */
    double val_fraction;              /* or: the last this fraction of `data` held out (0: none) */
    /* optimizer (optim.total_steps follows `steps`) */
    struct dtrain_optim_config optim;
    char offload_optimizer[DTRAIN_PATH_MAX]; /* "", "cpu" or "nvme:DIR": where AdamW's state lives (dtrain_optim.h) */
    /* run */
    int batch, seq;                   /* B, T */
    long steps;                       /* train until this many steps are done */
    uint64_t seed;                    /* model initialisation */
    int threads;
    char backend[16];                 /* kernels: "cpu" or "cuda" (dtrain_kernels_backends()) */
    enum dtrain_kernels_precision precision; /* DEFAULT: the backend's (cpu fp32, cuda bf16) */
    char init_llmc[DTRAIN_PATH_MAX];  /* start from this llm.c model file, or "" */
    char init_hf[DTRAIN_PATH_MAX];    /* start from this Hugging Face model folder, or "" */
    char resume[DTRAIN_PATH_MAX];     /* continue from the newest checkpoint of this folder, or "" */
    char checkpoint[DTRAIN_PATH_MAX]; /* dtrain-train: write checkpoints into this folder (and resume from
                                       * it when it holds some), or "" */
    long checkpoint_every;            /* also every this many steps; 0: only at the end */
    char save_llmc[DTRAIN_PATH_MAX];  /* export an llm.c model file at the end, or "" */
    char save_hf[DTRAIN_PATH_MAX];    /* write a Hugging Face model folder at the end, or "" */
    char metrics[DTRAIN_PATH_MAX];    /* JSON-lines metrics file, or "" */
    char prom_textfile[DTRAIN_PATH_MAX]; /* node_exporter textfile (.prom) kept up to date, or "" */
    long log_every;                   /* print every this many steps; 0: never */
    long sample_every;                /* rank 0 prints a generated sample every this many steps; 0: never */
    char rank_metrics[DTRAIN_PATH_MAX]; /* folder of per-rank metrics files rank-N.jsonl, or "" */
    double peak_flops;                /* MFU's peak FLOP/s per device; 0: rank 0 measures its GEMM rate */
    long val_every;                   /* validation loss every this many steps and after the last; 0: the last */
    int val_batches;                  /* K: validation batches (the first K of the validation data) */
    /* parallel (dtrain_parallel.h); one process may run several micro-batches
     * (gradient accumulation); ZeRO shards nothing there */
    int micro_batches;                /* m: each data-parallel rank's rows run as m micro-batches */
    int virtual_stages;               /* V: chunks of layers per pipeline stage (interleaved 1F1B; 1: plain) */
    int zero_stage;                   /* ZeRO over the data-parallel ranks: 0 none, 1 the AdamW state, 2 also the
                                       * reduced gradients, 3 also the parameters (FSDP) */
    int zero_prefetch;                /* ZeRO-3: gather the next unit in a thread while the current one computes */
    char offload_params[16];          /* "" or "cpu": ZeRO-3's parameter shares in pinned host memory */
    int recompute;                    /* activation recomputation, enum dtrain_recompute (dtrain_stage.h):
                                       * 0 none, 1 selective (attention probabilities), 2 full */
    int sequence_parallel;            /* Megatron sequence parallelism over the TP group (needs T > 1 dividing seq) */
    int memory_report;                /* each rank prints its memory as one JSON line at the start */
    double loss_scale;                /* fp16: the initial loss scale (dynamic loss scaling) */
    long loss_scale_window;           /* fp16: steps without an overflow before the scale doubles */
    double bucket_mb;                 /* data-parallel gradient buckets of about this many MB */
    int dp_overlap;                   /* reduce buckets in a thread while backward goes on */
    int comm_timeout;                 /* seconds a communicator may make no progress */
    /* fault tolerance (dtrain_ft.h, doc/fault-tolerance.md); dtrain-launch's options */
    char ckpt_dir[DTRAIN_PATH_MAX];   /* sharded checkpoints and resume; "": $DTRAIN_CKPT_DIR, else none */
    int ckpt_keep;                    /* complete checkpoints kept */
    int ckpt_async;                   /* write checkpoints in the background (dtrain_ckpt_async.h) */
    char ckpt_local_dir[DTRAIN_PATH_MAX]; /* node-local tier ("%n": the node's name); "": $DTRAIN_CKPT_LOCAL_DIR */
    long ckpt_shared_every;           /* with a node-local tier: the shared folder every this many steps (0: at
                                       * the end and when stopping only) */
    int nonfinite_skips;              /* steps in a row with a non-finite loss skipped before a rollback */
    int watchdog;                     /* seconds without progress that make a rank hung; 0: 2 x comm_timeout */
    double hang_detect;               /* heartbeats: seconds after which a silent or stuck neighbour that a
                                       * waiting rank depends on is hung (dtrain_heartbeat.h); 0: off */
    int straggler_steps;              /* steps in a row a rank's compute must exceed the median's; 0: off */
    double straggler_margin;          /* by this fraction (0.5: 50% above the median) */
    int straggler_drain;              /* 1: a straggler ends the run (drain its node, restart without it) */
    char inject[DTRAIN_PATH_MAX];     /* fault injection spec (dtrain_inject.h); "": $DTRAIN_INJECT */
    /* LoRA (doc/runtime.md "LoRA"): adapters on the frozen base */
    int lora_rank;                    /* r; 0: no LoRA, every parameter trained */
    double lora_alpha;                /* scaling alpha / r; 0: alpha = r */
    char lora_targets[256];           /* comma-separated linears (q,k,v,o,gate,up,down; GPT-2's c_attn, ...) */
    char init_lora[DTRAIN_PATH_MAX];  /* start the adapters from this PEFT folder, or "" */
    char save_lora[DTRAIN_PATH_MAX];  /* write the adapters as a PEFT folder at the end, or "" */
    int merge_lora;                   /* --save-hf writes the base with the adapters merged in */
    int base_dtype;                   /* enum dtrain_base_dtype: how the frozen base's block linears are held */
};

/* --base-dtype (doc/runtime.md "LoRA"): fp32, or QLoRA's NF4 for the
 * weights of every block linear (the adapters' base; needs --lora-rank). */
enum dtrain_base_dtype { DTRAIN_BASE_FP32, DTRAIN_BASE_NF4 };

/* Defaults: constant lr 3e-4, betas 0.9/0.999, eps 1e-8, no weight decay, no
 * clipping; B=4, T=64, 100 steps, seed 1337, sequential data, threads = CPUs
 * this process may run on; model (when not imported) L=4, C=256, NH=4,
 * V=256 (bytes), maxT=256; one micro-batch, no ZeRO-1, 4 MB buckets, overlap on,
 * communicator timeout 300 s; 2 checkpoints kept, 3 non-finite steps skipped;
 * no validation data, 8 validation batches after the last step. */
void dtrain_train_config_defaults(struct dtrain_train_config *c);

/* Apply a JSON config file on top of c. */
int dtrain_train_config_load_json(struct dtrain_train_config *c, const char *path,
                                  char *err, size_t errlen);

/* Apply `[CONFIG.json] [flags]` (argv[0] is the program): the config file
 * first, then the flags, whatever their order.  *help is set when --help was
 * given (nothing else is then checked). */
int dtrain_train_config_parse_args(struct dtrain_train_config *c, int argc, char **argv,
                                   int *help, char *err, size_t errlen);

/* Fill in the model shape (from --resume, --init-llmc or the defaults) and
 * check everything that does not need the data file; last, the outputs
 * (dtrain_train_config_check_outputs). */
int dtrain_train_config_finish(struct dtrain_train_config *c, char *err, size_t errlen);

/* Before any work: every output the config names can be written (checkpoint,
 * --save-llmc, metrics, prom textfile: absent or a regular file in a folder
 * where files can be created; the fault-tolerance checkpoint folder: made
 * and probed).  A device, FIFO, folder or link where a file goes is
 * refused.  DTRAIN_OK or DTRAIN_ERR_INPUT with one line. */
int dtrain_train_config_check_outputs(const struct dtrain_train_config *c, char *err, size_t errlen);

/* One process's options onto the one trainer's (dtrain-train and the
 * trainer API below): fault.ckpt_dir and fault.inject are dtrain-launch's
 * and refused (DTRAIN_ERR_INPUT), run.checkpoint becomes the checkpoint
 * folder of the loop (ckpt_dir). */
int dtrain_train_config_single_process(struct dtrain_train_config *c, char *err, size_t errlen);

/* The usage text, for --help. */
void dtrain_train_usage(FILE *out);

/* ------------------------------------------------------------------ trainer */

struct dtrain_trainer; /* opaque: the parallel trainer on one process */

struct dtrain_step_result {
    long step;          /* 0-based index of the step just done */
    float loss;         /* mean loss of its batch, before the update */
    double lr;          /* learning rate used */
    double grad_norm;   /* global gradient norm before clipping */
    double ms;          /* wall time of the whole step */
    double tokens_per_s;
    double gflops;      /* achieved model GFLOP/s (dtrain_model_flops_per_step) */
    double mfu;         /* model FLOP/s over (peak per device x devices), 0..1; 0: no peak known */
    int has_val_loss;   /* the validation loss was computed after this step's update: */
    double val_loss;    /* that loss */
};

/* Build the kernels, the model (initialised, imported, or resumed from the
 * newest checkpoint of c->resume), the optimizer and the data from a
 * finished config.  DTRAIN_ERR_INPUT for a bad data, model or checkpoint
 * (or one that does not fit the config). */
int dtrain_trainer_create(const struct dtrain_train_config *c, struct dtrain_trainer **out,
                          char *err, size_t errlen);
void dtrain_trainer_destroy(struct dtrain_trainer *t);

/* Steps done so far (the next step's index). */
long dtrain_trainer_steps_done(const struct dtrain_trainer *t);

/* The model's parameters: how many, and a host copy of them all (llm.c's
 * order, dtrain_model.h). */
size_t dtrain_trainer_num_params(const struct dtrain_trainer *t);
int dtrain_trainer_params(struct dtrain_trainer *t, float *whole, char *err, size_t errlen);
/* The gradients of the last step's mean loss (before clipping), a host
 * copy in the same order. */
int dtrain_trainer_grads(struct dtrain_trainer *t, float *whole, char *err, size_t errlen);

/* One training step: next batch, forward, backward, clip, AdamW. */
int dtrain_trainer_step(struct dtrain_trainer *t, struct dtrain_step_result *r,
                        char *err, size_t errlen);

/* A checkpoint of the present step into folder dir (dir/step-N, the
 * newest c->ckpt_keep kept), or an llm.c model file. */
int dtrain_trainer_save_checkpoint(struct dtrain_trainer *t, const char *dir, char *err, size_t errlen);
int dtrain_trainer_save_llmc(struct dtrain_trainer *t, const char *path, char *err, size_t errlen);

/* Train until config.steps are done, in the loop of dtrain_ft.h: progress
 * lines to `progress` (every log_every steps), metrics, checkpoints into
 * c->checkpoint (every checkpoint_every steps and at the end), the llm.c
 * export.  A trainer at step 0 first resumes from c->checkpoint when it
 * holds checkpoints. */
int dtrain_trainer_run(struct dtrain_trainer *t, FILE *progress, char *err, size_t errlen);

/* ------------------------------------------------------------------ program */

/* `dtrain-train [CONFIG.json] [flags]`; returns the exit code. */
int dtrain_train_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
