/* SPDX-License-Identifier: GPL-2.0-or-later */
/* bpe_decode TOKENIZER.JSON TOKENFILE: the token file's ids (uint16 or
 * uint32, llm.c's layout) decoded to bytes on stdout with the tokenizer
 * (data/dtrain_bpe.h), for tokenizer.sh's decode(encode(x)) == x.  Exit 2
 * with one line on bad input, 1 on an id the tokenizer lacks. */
#include "data/dtrain_bpe.h"
#include "dtrain_data.h"
#include "dtrain_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    char err[1024], *buf = NULL;
    size_t len = 0;
    struct dtrain_bpe *bpe = NULL;
    int rc = 2;
    if (argc != 3) {
        fprintf(stderr, "usage: bpe_decode TOKENIZER.JSON TOKENFILE\n");
        return 2;
    }
    if (dtrain_bpe_load(argv[1], &bpe, err, sizeof err) != DTRAIN_OK ||
        dtrain_read_regular(argv[2], "token file", (size_t)1 << 31, &buf, &len, err, sizeof err) != 0) {
        fprintf(stderr, "bpe_decode: %s\n", err);
        goto out;
    }
    int32_t header[DTRAIN_TOKENS_HEADER_INTS];
    if (len < sizeof header) {
        fprintf(stderr, "bpe_decode: %s: no header\n", argv[2]);
        goto out;
    }
    memcpy(header, buf, sizeof header);
    size_t width = header[0] == DTRAIN_TOKENS32_MAGIC ? 4 : 2, count = (size_t)header[2];
    if (len != sizeof header + count * width) {
        fprintf(stderr, "bpe_decode: %s: size does not match the header\n", argv[2]);
        goto out;
    }
    rc = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t id = 0;
        if (width == 4)
            memcpy(&id, buf + sizeof header + 4 * i, 4);
        else {
            uint16_t v;
            memcpy(&v, buf + sizeof header + 2 * i, 2);
            id = v;
        }
        size_t n;
        const unsigned char *t = dtrain_bpe_token_bytes(bpe, id, &n);
        if (t == NULL) {
            fprintf(stderr, "bpe_decode: token %zu: id %lu is not the tokenizer's\n", i, (unsigned long)id);
            rc = 1;
            break;
        }
        fwrite(t, 1, n, stdout);
    }
    if (fflush(stdout) != 0)
        rc = 1;
out:
    free(buf);
    dtrain_bpe_free(bpe);
    return rc;
}
