/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Test helpers for the GPU tests: the CPU and CUDA kernels side by side.
 *
 * A pair is one "cpu" and one "cuda" kernels instance.  A mirror is one
 * tensor held on both, filled with the same values; after a kernel ran on
 * both, mirror_error() is the largest |gpu - cpu| divided by the largest
 * |cpu| (so an element near zero does not blow the ratio up), and any NaN
 * or infinity on the GPU side makes it infinite.
 *
 * Inputs are fresh every run: the seed comes from the clock and the
 * process id unless DTRAIN_TEST_SEED is set, and is printed so that a
 * failure can be repeated.  Outputs a kernel overwrites start as NaN
 * ("poisoned", so an element the kernel forgot shows up); outputs it adds
 * into start as the same random values on both sides. */
#ifndef DTRAIN_GPU_PAIR_H
#define DTRAIN_GPU_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_kernels.h"

struct gpu_pair {
    struct dtrain_kernels *cpu, *gpu;
    uint64_t seed, stream; /* stream: the next random stream to use */
};

struct mirror {
    float *cpu, *gpu;
    size_t n;
};

struct mirror_i32 {
    int32_t *cpu, *gpu;
    size_t n;
};

/* The seed of this run (DTRAIN_TEST_SEED or clock and pid), printed once. */
uint64_t gpu_test_seed(void);

/* 1 when a CUDA device is usable; else 0 and the reason in why. */
int gpu_available(char *why, size_t whylen);
/* How many (0 without CUDA). */
int gpu_device_count(void);
/* How many, counted in a child process (0 with the reason in why): tests
 * that fork ranks call this, because CUDA does not survive a fork once the
 * parent has initialised it. */
int gpu_devices_in_child(char *why, size_t whylen);

/* 1 when a device must be there (DTRAIN_GPU_REQUIRED=1: the GPU stand-in's
 * pass of the suite, run-on-gpu.sh on a machine that lists a GPU): finding
 * none is then a failure, not a skip. */
int gpu_required(void);

/* The whole file without a device: prints the TAP plan of a skip, or of a
 * failure when gpu_required(); returns the exit status for main. */
int gpu_skip_all(const char *why);

/* Both instances, the cuda one in `precision` (the cpu one in fp32, or,
 * gpu_pair_open_matched, in `precision` too: the reference for typed bf16
 * results, computed as the cuda backend is held to); exits the test with a
 * failure line when one cannot be made. */
void gpu_pair_open(struct gpu_pair *p, enum dtrain_kernels_precision precision);
void gpu_pair_open_matched(struct gpu_pair *p, enum dtrain_kernels_precision precision);
void gpu_pair_close(struct gpu_pair *p);

struct mirror mirror_random(struct gpu_pair *p, size_t n, float scale); /* uniform in [-scale, scale) */
struct mirror mirror_poisoned(struct gpu_pair *p, size_t n);            /* NaN on both */
struct mirror_i32 mirror_tokens(struct gpu_pair *p, size_t n, int V);    /* uniform in [0, V) */
void mirror_free(struct gpu_pair *p, struct mirror *m);
void mirror_i32_free(struct gpu_pair *p, struct mirror_i32 *m);

/* Largest |gpu - cpu| / largest |cpu| over the mirror (waits for both). */
double mirror_error(struct gpu_pair *p, const struct mirror *m);
/* 1 when two GPU tensors of n floats hold the same bits. */
int gpu_same_bits(struct gpu_pair *p, const float *a, const float *b, size_t n);
/* A GPU copy of a mirror's GPU side (for repeat runs). */
float *gpu_clone(struct gpu_pair *p, const float *src, size_t n);

/* A typed mirror: n elements of dtype on both sides.  A bf16 one is filled
 * with the random (or NaN) fp32 values rounded to bf16, the same bits on
 * both; tmirror_error widens both sides exactly and measures as
 * mirror_error does. */
struct tmirror {
    void *cpu, *gpu;
    size_t n;
    enum dtrain_dtype dtype;
};

struct tmirror tmirror_random(struct gpu_pair *p, enum dtrain_dtype dtype, size_t n, float scale);
struct tmirror tmirror_poisoned(struct gpu_pair *p, enum dtrain_dtype dtype, size_t n);
double tmirror_error(struct gpu_pair *p, const struct tmirror *m);
void tmirror_free(struct gpu_pair *p, struct tmirror *m);
/* The typed views of each side. */
struct dtrain_tensor tmirror_cpu(const struct tmirror *m);
struct dtrain_tensor tmirror_gpu(const struct tmirror *m);

/* 0 when the cuda instance recorded no error; else prints it and -1. */
int gpu_error(struct gpu_pair *p);

#endif
