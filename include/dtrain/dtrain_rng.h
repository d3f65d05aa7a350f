/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: counter-based random numbers.
 *
 * Every random value is a pure function of (seed, stream, index): no
 * generator state to carry, share or checkpoint beyond the seed, and a shard
 * of a tensor or a resumed run draws exactly the values a whole, unbroken
 * run would have drawn. */
#ifndef DTRAIN_RNG_H
#define DTRAIN_RNG_H

#include <stdint.h>

/* 64 well-mixed bits for (seed, stream, index). */
uint64_t dtrain_rng_bits(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in (0, 1). */
double dtrain_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on two uniforms of this index). */
double dtrain_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* A bijection of [0, n) chosen by key (a small Feistel network with cycle
 * walking): position i of a shuffled order of n items, in O(1) time and
 * memory.  n >= 1, i < n. */
uint64_t dtrain_rng_permute(uint64_t i, uint64_t n, uint64_t key);

#endif
