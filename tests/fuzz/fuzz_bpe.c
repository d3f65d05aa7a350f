/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: tokenizer.json (data/dtrain_bpe.h), untrusted: any input is
 * refused with a line or loads; a loaded tokenizer then encodes a fixed
 * text (invalid UTF-8 and special-token prefixes included) and the input
 * itself, and every encoding must decode back to its text byte for byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/dtrain_bpe.h"
#include "dtrain_status.h"

static void round_trip(const struct dtrain_bpe *bpe, const unsigned char *text, size_t len)
{
    char err[1024];
    uint32_t *ids = NULL;
    size_t n = 0, at = 0;
    if (dtrain_bpe_encode(bpe, text, len, &ids, &n, err, sizeof err) != DTRAIN_OK)
        return; /* a hostile split pattern may run past its match limit */
    for (size_t i = 0; i < n; i++) {
        size_t tl;
        const unsigned char *t = dtrain_bpe_token_bytes(bpe, ids[i], &tl);
        if (t == NULL || at + tl > len || memcmp(text + at, t, tl) != 0)
            abort(); /* decode(encode(x)) != x */
        at += tl;
    }
    if (at != len)
        abort();
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char text[] = "Hello, World! It's 2024\r\n\xe4\xb8\x80 \xff\x80 caf\xc3\xa9 <|end <|begin_of_text|>  x";
    char err[1024];
    struct dtrain_bpe *bpe = NULL;
    if (dtrain_bpe_load_text((const char *)data, size, "fuzz.json", &bpe, err, sizeof err) != DTRAIN_OK) {
        if (bpe != NULL || strchr(err, '\n') != NULL)
            abort(); /* refused: no handle, one line */
        return 0;
    }
    round_trip(bpe, (const unsigned char *)text, sizeof text - 1);
    round_trip(bpe, data, size < 4096 ? size : 4096);
    dtrain_bpe_free(bpe);
    return 0;
}
