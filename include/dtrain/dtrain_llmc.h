/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: llm.c's GPT-2 model file (train_gpt2.c, version 3, fp32).
 *
 * Layout: 256 little-endian int32 (magic 20240326, version 3, maxT, V, L,
 * NH, C, Vp, the rest 0), then every parameter as little-endian fp32 in
 * llm.c's tensor order (enum dtrain_model_tensor).  Models move both ways, so
 * dtrain's results can be compared with the reference's. */
#ifndef DTRAIN_LLMC_H
#define DTRAIN_LLMC_H

#include <stddef.h>

#include "dtrain_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_LLMC_MAGIC 20240326
#define DTRAIN_LLMC_VERSION 3
#define DTRAIN_LLMC_HEADER_INTS 256

/* Read and check the header (and that the file size matches the shape). */
int dtrain_llmc_read_config(const char *path, struct dtrain_model_config *cfg,
                            char *err, size_t errlen);

/* Load the parameters (dtrain_model_param_count(expect) floats, host memory).
 * DTRAIN_ERR_INPUT when the file is bad or its shape differs from expect. */
int dtrain_llmc_load(const char *path, const struct dtrain_model_config *expect, float *params,
                     char *err, size_t errlen);

/* Write a model file (atomically: a temporary file renamed into place). */
int dtrain_llmc_save(const char *path, const struct dtrain_model_config *cfg, const float *params,
                     char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
