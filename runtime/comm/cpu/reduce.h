/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu backend's float reduction: what a shared-memory link's reader
 * adds as it reads (link.c) and what a direct read is added with (cma.c). */
#ifndef DTRAIN_COMM_CPU_REDUCE_H
#define DTRAIN_COMM_CPU_REDUCE_H

#include <stddef.h>
#include <string.h>

/* Four floats, for SSE at -O2 (where GCC does not vectorise loops itself);
 * loads and stores go through memcpy: any alignment. */
typedef float v4sf __attribute__((vector_size(16)));

static inline v4sf load4(const float *p)
{
    v4sf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store4(float *p, v4sf v)
{
    memcpy(p, &v, sizeof v);
}

/* dst = a + in (a may be dst), then / divisor when it is not 0: the sum
 * is rounded once and divided once, as a serial reference does. */
static inline void reduce_floats(float *dst, const float *a, const float *in, size_t n, float divisor)
{
    size_t i = 0;
    if (divisor != 0.0f) {
        const v4sf d = {divisor, divisor, divisor, divisor};
        for (; i + 8 <= n; i += 8) {
            v4sf x0 = load4(a + i) + load4(in + i), x1 = load4(a + i + 4) + load4(in + i + 4);
            store4(dst + i, x0 / d);
            store4(dst + i + 4, x1 / d);
        }
        for (; i < n; i++)
            dst[i] = (a[i] + in[i]) / divisor;
        return;
    }
    for (; i + 16 <= n; i += 16) {
        v4sf x0 = load4(a + i) + load4(in + i), x1 = load4(a + i + 4) + load4(in + i + 4);
        v4sf x2 = load4(a + i + 8) + load4(in + i + 8), x3 = load4(a + i + 12) + load4(in + i + 12);
        store4(dst + i, x0);
        store4(dst + i + 4, x1);
        store4(dst + i + 8, x2);
        store4(dst + i + 12, x3);
    }
    for (; i < n; i++)
        dst[i] = a[i] + in[i];
}

#endif
