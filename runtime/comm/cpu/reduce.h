/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu backend's float reduction: what a shared-memory link's reader
 * adds as it reads (link.c) and what a direct read is added with (cma.c),
 * the same with streaming stores (cma.c's reduce-scatter apart), and a
 * streamed copy (cma.c's all-gather apart). */
#ifndef DTRAIN_COMM_CPU_REDUCE_H
#define DTRAIN_COMM_CPU_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

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

/* v into p: plainly (any alignment), or streamed (SSE's movntps, p 16-byte
 * aligned): a streamed line goes to memory without being read first,
 * where a plain store to a line not in the cache reads it (a
 * write-allocate).  streamed is a constant where this is inlined. */
static inline void put4(float *p, v4sf v, int streamed)
{
#if defined(__SSE__)
    if (streamed) {
        _mm_stream_ps(p, (__m128)v);
        return;
    }
#else
    (void)streamed;
#endif
    store4(p, v);
}

/* reduce_floats' loops, its stores plain or streamed (dst + 0 then 16-byte
 * aligned): one order of operations for both, so both give the same bits. */
static inline void reduce_span(float *dst, const float *a, const float *in, size_t n, float divisor, int streamed)
{
    size_t i = 0;
    if (divisor != 0.0f) {
        const v4sf d = {divisor, divisor, divisor, divisor};
        for (; i + 8 <= n; i += 8) {
            v4sf x0 = load4(a + i) + load4(in + i), x1 = load4(a + i + 4) + load4(in + i + 4);
            put4(dst + i, x0 / d, streamed);
            put4(dst + i + 4, x1 / d, streamed);
        }
        for (; i < n; i++)
            dst[i] = (a[i] + in[i]) / divisor;
        return;
    }
    for (; i + 16 <= n; i += 16) {
        v4sf x0 = load4(a + i) + load4(in + i), x1 = load4(a + i + 4) + load4(in + i + 4);
        v4sf x2 = load4(a + i + 8) + load4(in + i + 8), x3 = load4(a + i + 12) + load4(in + i + 12);
        put4(dst + i, x0, streamed);
        put4(dst + i + 4, x1, streamed);
        put4(dst + i + 8, x2, streamed);
        put4(dst + i + 12, x3, streamed);
    }
    for (; i < n; i++)
        dst[i] = a[i] + in[i];
}

/* dst = a + in (a may be dst), then / divisor when it is not 0: the sum
 * is rounded once and divided once, as a serial reference does. */
static inline void reduce_floats(float *dst, const float *a, const float *in, size_t n, float divisor)
{
    reduce_span(dst, a, in, n, divisor, 0);
}

/* reduce_floats with dst written by streaming stores where the CPU has
 * them (put4), after a plain head up to dst's first 16-byte line.  For an
 * output that will not be in the cache when it is read next anyway
 * (cma.c says when); the same bits as reduce_floats.  Ends with a store
 * fence, so the members that read dst after the next message see every
 * value. */
static inline void reduce_floats_streamed(float *dst, const float *a, const float *in, size_t n, float divisor)
{
#if defined(__SSE__)
    size_t head = 0;
    while (head < n && ((uintptr_t)(dst + head) & 15) != 0)
        head++;
    reduce_span(dst, a, in, head, divisor, 0);
    reduce_span(dst + head, a + head, in + head, n - head, divisor, 1);
    _mm_sfence();
#else
    reduce_floats(dst, a, in, n, divisor);
#endif
}

/* dst = src, bytes long, the two apart, dst's lines written by streaming
 * stores where the CPU has SSE2 (memcpy elsewhere): glibc's memcpy
 * streams only past a threshold it derives from the cache size it reads
 * from CPUID, which a VM can misreport (320 MiB for a 32 MiB L3 on a Zen 4
 * guest), and then writes 32 MiB with a write-allocate per line.  Ends
 * with a store fence, as reduce_floats_streamed. */
static inline void copy_bytes_streamed(void *dst, const void *src, size_t bytes)
{
#if defined(__SSE2__)
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > bytes)
        head = bytes;
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
        _mm_stream_si128((__m128i *)(void *)d, x0);
        _mm_stream_si128((__m128i *)(void *)(d + 16), x1);
        _mm_stream_si128((__m128i *)(void *)(d + 32), x2);
        _mm_stream_si128((__m128i *)(void *)(d + 48), x3);
    }
    memcpy(d, s, bytes);
    _mm_sfence();
#else
    memcpy(dst, src, bytes);
#endif
}

#endif
