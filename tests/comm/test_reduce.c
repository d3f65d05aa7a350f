/* SPDX-License-Identifier: GPL-2.0-or-later */
/* runtime/comm/cpu/reduce.h: reduce_floats_streamed writes what
 * reduce_floats writes, bit for bit, at every alignment of the output
 * (its streaming stores need 16-byte aligned lines: a head and a tail go
 * plainly) and every length around its 8- and 16-float loops, sums and
 * averages, on values whose sums round; nothing before or after the
 * output is touched; copy_bytes_streamed writes memcpy's bytes at every
 * alignment of either end; and cma_stream_min_bytes names a cache size. */
#include "comm/cpu/cma.h"
#include "comm/cpu/reduce.h"
#include "tap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 16 /* floats either side of the output, left as they were */
#define MAX_FLOATS 70000

int main(void)
{
    const size_t lengths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 65536 + 3, 65536 + 13};
    const float divisors[] = {0.0f, 3.0f};
    float *a = malloc(MAX_FLOATS * sizeof(float)), *in = malloc(MAX_FLOATS * sizeof(float));
    float *want = aligned_alloc(64, (MAX_FLOATS + 2 * GUARD + 64) * sizeof(float));
    float *got = aligned_alloc(64, (MAX_FLOATS + 2 * GUARD + 64) * sizeof(float));
    if (a == NULL || in == NULL || want == NULL || got == NULL)
        return 99;
    unsigned s = 2024;
    for (size_t i = 0; i < MAX_FLOATS; i++) { /* magnitudes apart by up to 2^20: sums round */
        s = s * 1103515245u + 12345u;
        a[i] = (float)(s >> 8) / 16777216.0f * (float)(1u << (s % 21));
        s = s * 1103515245u + 12345u;
        in[i] = -(float)(s >> 8) / 16777216.0f / 3.0f;
    }
    for (int d = 0; d < 2; d++) {
        int same = 1, guarded = 1;
        for (size_t offset = 0; offset < 16; offset++) { /* the output's first float 0..15 floats past a line */
            for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
                size_t n = lengths[k];
                float *w = want + GUARD + offset, *g = got + GUARD + offset;
                for (size_t i = 0; i < n + 2 * GUARD + offset; i++)
                    want[i] = got[i] = -7.25f;
                /* the inputs start at other alignments than the output */
                reduce_floats(w, a + k % 3, in + offset % 5, n, divisors[d]);
                reduce_floats_streamed(g, a + k % 3, in + offset % 5, n, divisors[d]);
                if (memcmp(w, g, n * sizeof(float)) != 0)
                    same = 0;
                for (size_t i = 0; i < GUARD + offset; i++)
                    if (got[i] != -7.25f || g[n + i % GUARD] != -7.25f)
                        guarded = 0;
            }
        }
        ok(same, "%s: the streamed reduction writes the plain one's bits, every output alignment (0-15 floats past "
           "a line) and length (0 to 65549 floats)", d ? "average" : "sum");
        ok(guarded, "%s: no float before or after the output changed", d ? "average" : "sum");
    }
    /* the streamed copy: every alignment of both ends, lengths around its
     * 64-byte loop, against memcpy, with guard bytes either side */
    {
        enum { MAX_BYTES = 70000, PAD = 64 };
        unsigned char *src = malloc(MAX_BYTES + PAD), *w = malloc(MAX_BYTES + 3 * PAD),
                      *g = malloc(MAX_BYTES + 3 * PAD);
        const size_t blens[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 65536 + 7};
        int same = 1, guarded = 1;
        if (src == NULL || w == NULL || g == NULL)
            return 99;
        for (size_t i = 0; i < MAX_BYTES + PAD; i++)
            src[i] = (unsigned char)(i * 131 + (i >> 8));
        for (size_t doff = 0; doff < 16; doff++)
            for (size_t soff = 0; soff < 16; soff += 5)
                for (size_t k = 0; k < sizeof blens / sizeof blens[0]; k++) {
                    size_t n = blens[k];
                    memset(w, 0x5c, n + 3 * PAD);
                    memset(g, 0x5c, n + 3 * PAD);
                    memcpy(w + PAD + doff, src + soff, n);
                    copy_bytes_streamed(g + PAD + doff, src + soff, n);
                    if (memcmp(w + PAD + doff, g + PAD + doff, n) != 0)
                        same = 0;
                    if (memcmp(w, g, n + 3 * PAD) != 0)
                        guarded = 0;
                }
        ok(same, "the streamed copy writes memcpy's bytes, every alignment of the output (0-15 bytes past a line) "
           "and of the input, lengths 0 to 65543");
        ok(guarded, "the streamed copy: no byte before or after the output changed");
        free(src);
        free(w);
        free(g);
    }
    size_t llc = cma_stream_min_bytes();
    ok(llc >= (64u << 10) && llc <= ((size_t)1 << 36), "cma_stream_min_bytes: %zu bytes, a cache's size", llc);
    free(a);
    free(in);
    free(want);
    free(got);
    return tap_done();
}
