/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What the fault-tolerance unit tests share: a tiny model's config on a
 * token file of their own, a temporary folder, and reading a whole
 * checkpoint back into the model's flat vectors (one process, no
 * communicator: dtrain_sckpt_resume with world NULL). */
#ifndef DTRAIN_TEST_FAULT_HARNESS_H
#define DTRAIN_TEST_FAULT_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_shard_ckpt.h"
#include "dtrain_train.h"

/* A fresh folder under /tmp (removed by harness_cleanup) with a token file
 * of structured bytes; cfg gets the tiny model (L=2 C=32 NH=4 V=256,
 * maxT=16, B=8 x T=16, lr 1e-2, clip 1, 1 thread) on it.  0, or -1 with a
 * line in err. */
int harness_setup(const char *name, char *dir, size_t dirlen, struct dtrain_train_config *cfg, char *err,
                  size_t errlen);
void harness_cleanup(const char *dir);

/* A whole checkpoint of dir: the newest good one.  params, m, v get
 * malloc'ed whole-model vectors (free them).  Returns the resume status;
 * *res says what was found. */
int harness_read_whole(const char *dir, const struct dtrain_train_config *cfg, float **params, float **m,
                       float **v, struct dtrain_sckpt_resumed *res, char *err, size_t errlen);

/* 1 when the n floats of a and b have the same bits. */
int harness_same_bits(const float *a, const float *b, size_t n);

/* Run a shell command quietly; its exit status. */
int harness_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
