/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Hugging Face model folders in and out (--init-hf, --model-config,
 * --save-hf): config.json's architecture and sizes as a dtrain model, the
 * safetensors tensors by their Hugging Face names as the model's flat
 * parameter vector (dtrain_model.h), both ways.
 *
 *   Llama (LlamaForCausalLM, MistralForCausalLM)  GPT-2 (GPT2LMHeadModel)
 *   model.embed_tokens.weight -> wte rows 0..V-1  transformer.wte.weight, .wpe.weight
 *   model.layers.L.input_layernorm.weight -> ln1w transformer.h.L.ln_1.weight, .bias
 *   self_attn.{q,k,v}_proj.weight -> qkvw's rows  attn.c_attn.weight (Conv1D: transposed)
 *   self_attn.o_proj.weight -> attprojw           attn.c_proj.weight (transposed), .bias
 *   post_attention_layernorm.weight -> ln2w       ln_2.weight, .bias
 *   mlp.{gate,up}_proj.weight -> fcw's rows       mlp.c_fc.weight (transposed), .bias
 *   mlp.down_proj.weight -> fcprojw               mlp.c_proj.weight (transposed), .bias
 *   model.norm.weight -> lnfw                     transformer.ln_f.weight, .bias
 *   lm_head.weight -> lmhead (untied)             (tied: none)
 * Hugging Face's Llama weights assume its rotate-half RoPE, which is the
 * one dtrain's kernels apply (dtrain_k_rope_forward): q and k rows load as
 * they are stored.  Errors: one line in err, DTRAIN_ERR_INPUT for a file
 * that is wrong, DTRAIN_ERR_SYSTEM for one that cannot be read or written. */
#ifndef DTRAIN_HF_MODEL_H
#define DTRAIN_HF_MODEL_H

#include <stddef.h>

#include "dtrain_model.h"

/* The model of a config.json, or of the one in a folder (path). */
enum dtrain_status dtrain_hf_read_model_config(const char *path, struct dtrain_model_config *out, char *err,
                                               size_t errlen);
/* Every parameter of m from the folder's model.safetensors (or its sharded
 * index): each tensor the model needs present with its shape (F32, BF16
 * or F16), no tensor the model does not know. */
enum dtrain_status dtrain_hf_load_params(const char *dir, const struct dtrain_model_config *m, float *whole,
                                         char *err, size_t errlen);
/* config.json and model.safetensors (fp32) of m with parameters whole into
 * dir (made when absent), loadable by transformers' from_pretrained. */
enum dtrain_status dtrain_hf_save(const char *dir, const struct dtrain_model_config *m, const float *whole,
                                  char *err, size_t errlen);

#endif
