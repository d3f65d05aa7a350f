/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: LoRA adapters of one rank's shard (doc/runtime.md "LoRA").
 *
 * PEFT's LoraLayer without dropout: a targeted linear computes
 * y = x W^T + (alpha/r) (x A^T) B^T, A (r, in) and B (out, r); the base W
 * is frozen (no gradient, no optimizer state, no data-parallel traffic):
 * the adapters are the trainable vector, here, with their gradients and
 * their AdamW moments.  Layout of the vector: for each local layer, for each
 * target in enum dtrain_lora_target order, A then B (row-major).
 *
 * Targets by family, named as PEFT's target_modules name the modules of
 * transformers' classes: Llama q_proj k_proj v_proj o_proj gate_proj
 * up_proj down_proj (also q, k, v, o, gate, up, down); GPT-2 c_attn,
 * attn.c_proj, c_fc, mlp.c_proj, and c_proj for both projections (PEFT's
 * suffix match).
 *
 * Tensor parallel as Megatron's LoRA: the adapter of a column-parallel
 * linear (q, k, v, gate, up; c_attn, c_fc) holds its B's output rows of
 * the rank and a whole A, of a row-parallel one (o, down; the c_projs) its
 * A's input columns and a whole B; the whole ones' gradients are summed
 * over the TP group (dtrain_lora_reduce).  Pipeline stages hold their
 * layers' adapters; data-parallel ranks the same adapters, their gradients
 * all-reduced. */
#ifndef DTRAIN_LORA_H
#define DTRAIN_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_comm.h"
#include "dtrain_optim.h"
#include "dtrain_shard.h"

enum dtrain_lora_target {
    DTRAIN_LORA_Q, DTRAIN_LORA_K, DTRAIN_LORA_V, DTRAIN_LORA_O, DTRAIN_LORA_GATE, DTRAIN_LORA_UP, DTRAIN_LORA_DOWN,
    DTRAIN_LORA_C_ATTN, DTRAIN_LORA_ATTN_C_PROJ, DTRAIN_LORA_C_FC, DTRAIN_LORA_MLP_C_PROJ,
    DTRAIN_LORA_NUM_TARGETS
};

struct dtrain_lora_spec {
    int rank;
    double alpha;     /* scaling = alpha / rank */
    unsigned targets; /* 1 << enum dtrain_lora_target */
};

/* The spec of --lora-rank, --lora-alpha (0: rank) and --lora-targets
 * ("": q,v for Llama, c_attn for GPT-2) for model m: DTRAIN_ERR_INPUT with
 * one line for an unknown name, a name of the other family, a rank below 1
 * or above a targeted linear's smaller side. */
int dtrain_lora_spec_make(const struct dtrain_model_config *m, int rank, double alpha, const char *targets,
                          struct dtrain_lora_spec *out, char *err, size_t errlen);

/* Adapter elements of the whole model (the checkpoints' vector), 0 when
 * the spec does not fit m. */
size_t dtrain_lora_whole_count(const struct dtrain_model_config *m, const struct dtrain_lora_spec *spec);
/* PEFT's names of the spec's targets, comma-separated (e.g. "q_proj,v_proj"). */
void dtrain_lora_target_names(const struct dtrain_lora_spec *spec, char *buf, size_t len);

struct dtrain_lora;

/* Adapters for shard and micro-batches of N = B*T rows;
 * initialised as PEFT's default (A kaiming-uniform, bound 1/sqrt(in), from
 * seed; B zero).  AdamW moments of exactly the adapters. */
int dtrain_lora_create(struct dtrain_kernels *k, const struct dtrain_shard *shard, const struct dtrain_lora_spec *spec,
                       int N, uint64_t seed, struct dtrain_lora **out, char *err, size_t errlen);
void dtrain_lora_destroy(struct dtrain_lora *l);

size_t dtrain_lora_count(const struct dtrain_lora *l);
float *dtrain_lora_params(struct dtrain_lora *l); /* backend memory */
float *dtrain_lora_grads(struct dtrain_lora *l);
struct dtrain_adamw *dtrain_lora_adamw(struct dtrain_lora *l);
/* Local layer i's adapters for dtrain_block_weights.lora (gradients into
 * the adapters' gradient vector). */
void dtrain_lora_block(struct dtrain_lora *l, int i, struct dtrain_block_lora *out);

struct dtrain_tp;
struct dtrain_pcomm;

void dtrain_lora_zero_grad(struct dtrain_lora *l);
/* After the step's backward: the TP-whole matrices' gradients summed over
 * tp, then every gradient over the data-parallel group dp (NULL or of
 * size 1: none). */
int dtrain_lora_reduce(struct dtrain_lora *l, struct dtrain_tp *tp, struct dtrain_pcomm *dp, char *err,
                       size_t errlen);
/* This rank's share of the squared gradient norm: each adapter element of
 * the model counted once over the job (TP-whole matrices on TP rank 0, DP
 * rank 0 only). */
double dtrain_lora_sumsq(struct dtrain_lora *l, int dp_rank);
void dtrain_lora_update(struct dtrain_lora *l, const struct dtrain_optim_config *c, long step, double lr,
                        float grad_scale);

/* The local adapter vector as runs of the whole model's (the order of
 * dtrain_lora_whole_count, T = P = 1), in local order, adjacent ones
 * merged: in_norm set where this rank writes it to checkpoints (a
 * TP-whole matrix on TP rank 0 only). */
void dtrain_lora_for_each_run(const struct dtrain_lora *l, dtrain_shard_run_fn fn, void *ctx);

/* The whole model's adapters into l's host copy, from every rank of a
 * T x P x D world (a collective over world; NULL: one process), before
 * dtrain_lora_save_peft and dtrain_lora_merge. */
int dtrain_lora_gather(struct dtrain_lora *l, dtrain_comm *world, int tp, int pp, int dp, char *err, size_t errlen);

/* PEFT's folder: adapter_config.json and adapter_model.safetensors, keys
 * base_model.model.<module>.lora_A.weight / lora_B.weight.  Load refuses
 * (DTRAIN_ERR_INPUT, one line) a folder whose rank, alpha, targets or
 * tensors (names, shapes: the base model's) differ from this run's. */
int dtrain_lora_load_peft(struct dtrain_lora *l, const char *dir, char *err, size_t errlen);
int dtrain_lora_save_peft(struct dtrain_lora *l, const char *dir, const char *base_model, char *err, size_t errlen);
/* W += scaling * B A on every targeted linear of a whole host parameter
 * vector (dtrain's (out, in) layout). */
void dtrain_lora_merge(struct dtrain_lora *l, float *whole);

#endif
