/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Double-precision reference forward passes of every GPT-2 layer and of the
 * whole model, written independently of kernels/ for the gradient checks:
 * finite differences of these (step 1e-5 in double) are the "true"
 * gradients the float backward passes are compared against. */
#ifndef DTRAIN_TEST_REF_DOUBLE_H
#define DTRAIN_TEST_REF_DOUBLE_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_model.h"

void ref_encoder(double *out, const int32_t *tokens, const double *wte, const double *wpe,
                 int B, int T, int C);
void ref_layernorm(double *out, const double *inp, const double *w, const double *b, int N, int C);
void ref_matmul(double *out, const double *inp, const double *w, const double *bias,
                int N, int IC, int OC);
void ref_attention(double *out, const double *qkv, int B, int T, int NH, int HS);
void ref_gelu(double *out, const double *inp, size_t n);
/* mean over N rows of -log softmax(logits row, first V of Vp columns)[target] */
double ref_xent_mean(const double *logits, const int32_t *targets, int N, int V, int Vp);

/* Mean loss of the whole model on B x T tokens, parameters in llm.c order. */
double ref_gpt2_loss(const struct dtrain_model_config *c, const double *params,
                     const int32_t *inputs, const int32_t *targets, int B, int T);

#endif
