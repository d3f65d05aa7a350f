/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What the CUDA backend offers beyond dtrain_kernels.h (built when
 * configured with CUDA: DTRAIN_HAVE_CUDA).
 *
 *  - the device check every GPU user makes first (tests skip on it, the
 *    runtime refuses `--backend cuda` with its answer);
 *  - the instance's stream, so that a communicator (the nccl backend of
 *    dtrain_comm.h) can order its own stream after the kernels with events;
 *  - the pieces of a vocabulary-parallel cross-entropy, the same steps as
 *    runtime/parallel/dtrain_tp.c takes on the CPU, with the collectives in between
 *    left to the caller;
 *  - the bf16 cuBLASLt GEMM rate the benchmarks compare a training step to.
 *
 * Every function taking a kernels instance needs one of the "cuda" backend. */
#ifndef DTRAIN_CUDA_H
#define DTRAIN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA devices this process can use: 0 with one line in why (e.g. "no CUDA
 * device (CUDA driver version is insufficient for CUDA runtime version)")
 * when there is none or no driver; why may be NULL. */
int dtrain_cuda_device_count(char *why, size_t whylen);

/* Name and compute capability of the instance's device, e.g.
 * "NVIDIA H200 (sm_90, 132 SMs)". */
void dtrain_cuda_device_name(struct dtrain_kernels *k, char *out, size_t outlen);

/* The instance's stream (a cudaStream_t). */
void *dtrain_cuda_stream(struct dtrain_kernels *k);

/* ---------------------------------------------- vocabulary-parallel loss
 *
 * A rank holds columns v0 .. v0+Vl-1 of the (N, V) logits, of which the
 * first nv are real (< V) and the rest padding.  Forward:
 *   1. xent_vp_rowmax:  row_max (N) = max over the nv real local columns
 *                       (-inf when nv == 0);
 *   -- the caller all-gathers row_max into all_max (size * N) --
 *   2. xent_vp_exp:     m = max over all_max; logits become exp(x - m), the
 *                       padding 0; sums[n] = local sum, sums[N + n] = the
 *                       target's x - m when the target is here, else 0;
 *   -- the caller all-reduces (sums) the 2N floats of sums --
 *   3. xent_vp_finish:  losses (N) = log(sums[n]) - sums[N + n], logits
 *                       become the probabilities.
 * Backward (in place, (=)): dlogits = (p - onehot) * dloss, padding 0.
 * All pointers are device memory of the instance. */
void dtrain_cuda_xent_vp_rowmax(struct dtrain_kernels *k, float *row_max, const float *logits,
                                int N, int Vl, int nv);
void dtrain_cuda_xent_vp_exp(struct dtrain_kernels *k, float *logits, float *sums,
                             const float *all_max, int size, const int32_t *targets, int v0,
                             int N, int Vl, int nv);
void dtrain_cuda_xent_vp_finish(struct dtrain_kernels *k, float *logits, float *losses,
                                const float *sums, int N, int Vl, int nv);
void dtrain_cuda_xent_vp_backward(struct dtrain_kernels *k, float *probs_dlogits,
                                  const int32_t *targets, int v0, float dloss, int N, int Vl,
                                  int nv);

/* ---------------------------------------------- baseline */

/* Median TFLOP/s of `reps` bf16 n x n x n cuBLASLt GEMMs (bf16 in and out,
 * fp32 accumulation) on random data, timed with CUDA events after warm-up.
 * Returns 0, or -1 with one line in err (out of device memory...). */
int dtrain_cuda_gemm_bf16_tflops(struct dtrain_kernels *k, int n, int reps, double *tflops,
                                 char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
