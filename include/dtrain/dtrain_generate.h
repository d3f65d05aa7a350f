/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: text generation with a trained model of either family
 * (GPT-2, Llama: dtrain_model.h; the dtrain-generate program).
 *
 * The model runs on the host in plain C, one token at a time, with a KV
 * cache: position t's forward computes its query, key and value, keeps
 * the keys and values, and attends over the t + 1 cached ones, so that n
 * tokens cost n forward steps of O(L C^2 + t C) each (no re-run of the
 * prefix).  The formulas are the trainer's forward's (GPT-2: llm.c's,
 * layernorm eps 1e-5, tanh GELU; Llama: Hugging Face's LlamaForCausalLM,
 * RMSNorm, RoPE (rotate-half) on q and k at the token's position before k
 * is cached, grouped-query attention, SwiGLU, the untied head when there
 * is one; both causal softmax attention; not its bits: the kernels use
 * BLAS), in a fixed order, single-threaded, so that the same parameters,
 * prompt and seed give the same tokens, bit for bit, run after run (and on
 * any machine with the same build).
 *
 * Sampling: logits over the real vocabulary (V of Vp columns) divided by
 * the temperature, the top_k largest kept (0: all; ties keep the lower
 * id), softmax in double, and token i of the output drawn with the
 * uniform number dtrain_rng_uniform(seed, DTRAIN_GEN_STREAM, i); a
 * temperature of 0 takes the largest logit (greedy). */
#ifndef DTRAIN_GENERATE_H
#define DTRAIN_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_GEN_STREAM 0x47454e45ULL /* "GENE": generation's random draws */

struct dtrain_gen; /* opaque: a model and its KV cache */

/* A generator over params (host, dtrain_model_param_count(c) floats, the
 * flat vector of dtrain_model.h; not copied: it must outlive the generator). */
int dtrain_gen_create(const struct dtrain_model_config *c, const float *params, struct dtrain_gen **out,
                      char *err, size_t errlen);
void dtrain_gen_destroy(struct dtrain_gen *g);

/* Forget the cache: the next token is at position 0. */
void dtrain_gen_reset(struct dtrain_gen *g);
/* Tokens in the cache (the next token's position). */
int dtrain_gen_position(const struct dtrain_gen *g);

/* Feed token (0 <= token < V) at the next position; logits (Vp floats, the
 * first V meaningful) of the token after it.  DTRAIN_ERR_INPUT for a bad
 * token or when the cache is full (maxT positions). */
int dtrain_gen_step(struct dtrain_gen *g, int32_t token, float *logits, char *err, size_t errlen);

/* A token from logits (the first V), as described above; index: which
 * draw of the seed's stream. */
int32_t dtrain_gen_sample(const float *logits, int V, double temperature, int top_k, uint64_t seed,
                          uint64_t index);

/* The prompt (n >= 1 tokens), then up to max_new sampled tokens, at most
 * up to maxT in all; out gets the new tokens, *nout how many.  The cache
 * is reset first. */
int dtrain_generate(struct dtrain_gen *g, const int32_t *prompt, int n, int max_new, double temperature,
                    int top_k, uint64_t seed, int32_t *out, int *nout, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
