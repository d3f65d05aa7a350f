/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: one whole GPT-2 model on one kernels instance, the reference
 * the parallel trainer is checked against (tests, benchmarks): flat
 * parameters and gradients in llm.c's tensor order (dtrain_model.h),
 * activations for one batch shape, and the stage pieces (embedding,
 * blocks l0..l1-1, head) that dtrain_gpt2_forward/backward chain together.
 * The config's family must be GPT-2.  Errors: functions returning int give
 * 0, or a negative dtrain_status with one line in err. */
#ifndef DTRAIN_GPT2_H
#define DTRAIN_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ the model */

struct dtrain_gpt2; /* opaque */

/* A model on k with room for batches up to B x T (T <= max_seq_len):
 * parameters (zero), gradients (zero), activations.  The kernels instance
 * must outlive the model. */
int dtrain_gpt2_create(struct dtrain_kernels *k, const struct dtrain_model_config *c, int B, int T,
                       struct dtrain_gpt2 **out, char *err, size_t errlen);
void dtrain_gpt2_destroy(struct dtrain_gpt2 *m);

const struct dtrain_model_config *dtrain_gpt2_get_config(const struct dtrain_gpt2 *m);
size_t dtrain_gpt2_num_params(const struct dtrain_gpt2 *m);
/* Flat parameter and gradient vectors (backend memory), llm.c's order. */
float *dtrain_gpt2_params(struct dtrain_gpt2 *m);
float *dtrain_gpt2_grads(struct dtrain_gpt2 *m);

/* Copy all parameters from / to a host vector of dtrain_gpt2_num_params floats. */
void dtrain_gpt2_set_params(struct dtrain_gpt2 *m, const float *host);
void dtrain_gpt2_get_params(struct dtrain_gpt2 *m, float *host);

/* Forward on B x T tokens (host arrays of B*T ids in [0, V)); with targets,
 * *mean_loss is the mean cross-entropy (else untouched; targets may be NULL).
 * DTRAIN_ERR_INPUT for a token out of range or a shape over the capacity. */
int dtrain_gpt2_forward(struct dtrain_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                        int B, int T, float *mean_loss, char *err, size_t errlen);
/* Zero the parameter gradients. */
void dtrain_gpt2_zero_grad(struct dtrain_gpt2 *m);
/* Backward of the last forward (which must have had targets); gradients of
 * the mean loss accumulate into dtrain_gpt2_grads(). */
int dtrain_gpt2_backward(struct dtrain_gpt2 *m, char *err, size_t errlen);


/* The stage pieces behind forward/backward (a pipeline stage runs some):
 * embed: residual 0 from the uploaded inputs;  blocks [l0, l1): residual l0
 * -> residual l1;  head: final LN, logits, loss.  Backward runs them in
 * reverse: head_backward fills the residual gradient of layer L,
 * blocks_backward carries it down to l0, embed_backward uses residual 0's. */
int dtrain_gpt2_upload_tokens(struct dtrain_gpt2 *m, const int32_t *inputs,
                              const int32_t *targets, int B, int T, char *err, size_t errlen);
void dtrain_gpt2_embed_forward(struct dtrain_gpt2 *m);
int dtrain_gpt2_blocks_forward(struct dtrain_gpt2 *m, int l0, int l1, char *err, size_t errlen);
float dtrain_gpt2_head_forward(struct dtrain_gpt2 *m);
void dtrain_gpt2_head_backward(struct dtrain_gpt2 *m, float dloss);
int dtrain_gpt2_blocks_backward(struct dtrain_gpt2 *m, int l0, int l1, char *err, size_t errlen);
void dtrain_gpt2_embed_backward(struct dtrain_gpt2 *m);
/* The residual stream entering block l (l == L: leaving the last block),
 * (B,T,C) backend memory: where a pipeline stage receives or sends. */
float *dtrain_gpt2_residual(struct dtrain_gpt2 *m, int l);
/* The residual stream's gradient buffer (B,T,C) that backward carries. */
float *dtrain_gpt2_residual_grad(struct dtrain_gpt2 *m);

#ifdef __cplusplus
}
#endif

#endif
