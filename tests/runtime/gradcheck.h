/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Helpers shared by the runtime tests: random fills, host/backend copies and
 * a finite-difference gradient check in double precision. */
#ifndef DTRAIN_TEST_GRADCHECK_H
#define DTRAIN_TEST_GRADCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_kernels.h"

/* x[i] = scale * (uniform(-1, 1)) from (stream, i). */
void fill_uniform(double *x, size_t n, uint64_t stream, double scale);

/* Backend copy of a double array as float (caller frees with dtrain_k_free). */
float *to_backend(struct dtrain_kernels *k, const double *x, size_t n);
/* Backend array of n floats, every one set to value. */
float *backend_filled(struct dtrain_kernels *k, size_t n, float value);
/* Host double copy of a backend float array, minus `minus` (the value the
 * array was filled with before an accumulating backward). */
void from_backend(struct dtrain_kernels *k, double *out, const float *x, size_t n, double minus);

/* Central differences of loss(ctx) w.r.t. x[0..n-1] (x is modified and
 * restored), compared with analytic[]: returns max |a - fd| / max(max |fd|, 1e-6). */
double fd_max_rel_error(double (*loss)(void *ctx), void *ctx, double *x, size_t n,
                        const double *analytic);

/* sum(a * b) */
double dot_d(const double *a, const double *b, size_t n);

#endif
