/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Counter-based random numbers; see dtrain_rng.h. */
#include "dtrain_rng.h"

#include <math.h>

/* splitmix64's finaliser: a strong 64-bit mixer. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t dtrain_rng_bits(uint64_t seed, uint64_t stream, uint64_t index)
{
    return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

double dtrain_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    /* 53 random bits, shifted off zero: (k + 0.5) / 2^53. */
    uint64_t bits = dtrain_rng_bits(seed, stream, index) >> 11;
    return ((double)bits + 0.5) * (1.0 / 9007199254740992.0);
}

double dtrain_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    double u1 = dtrain_rng_uniform(seed, stream, 2 * index);
    double u2 = dtrain_rng_uniform(seed, stream, 2 * index + 1);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t dtrain_rng_permute(uint64_t i, uint64_t n, uint64_t key)
{
    if (n <= 1)
        return 0;
    /* The smallest even number of bits covering n, split into two halves. */
    int bits = 2;
    while (bits < 64 && (n - 1) >> bits != 0)
        bits += 2;
    int half = bits / 2;
    uint64_t mask = (half == 32) ? 0xffffffffULL : ((1ULL << half) - 1);
    uint64_t x = i;
    do { /* cycle walking: re-encrypt until the value lands inside [0, n) */
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = mix64(r ^ mix64(key + round)) & mask;
            uint64_t nl = r, nr = l ^ f;
            l = nl;
            r = nr;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}
