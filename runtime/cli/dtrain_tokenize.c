/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-tokenize INPUT OUTPUT: turn any file into a byte-level token file
 * (vocabulary 256: token = byte value) in llm.c's layout, so that demos and
 * tests need no download and no tokenizer.  "-" reads standard input. */
#include "dtrain_data.h"
#include "dtrain_file.h"
#include "dtrain_io.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "dtrain-tokenize"

static void usage(FILE *out)
{
    fprintf(out, "usage: " PROG " INPUT OUTPUT   (or --help, --version)\n"
            "Write OUTPUT as a token file (llm.c layout, uint16 tokens) holding one token per\n"
            "byte of INPUT (vocabulary 256).  INPUT '-' is standard input.\n"
            "A good demo corpus on Debian: cat /usr/share/common-licenses/* > corpus.txt\n");
}

int main(int argc, char **argv)
{
    char err[512];
    uint16_t *tokens = NULL;
    size_t n = 0, cap = 0;
    int rc = DTRAIN_EXIT_USAGE;
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return DTRAIN_EXIT_OK;
    }
    if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
        printf(PROG " " PACKAGE_VERSION "\n");
        return DTRAIN_EXIT_OK;
    }
    if (argc != 3) {
        usage(stderr);
        return DTRAIN_EXIT_USAGE;
    }
    char why[1200];
    /* Never a blocking open: a FIFO or device given as input is refused
     * (stdin, "-", may be a pipe); the output is checked before reading. */
    FILE *in = strcmp(argv[1], "-") == 0 ? stdin : dtrain_fopen_regular(argv[1], 0, "input", NULL, why, sizeof why);
    if (in == NULL) {
        fprintf(stderr, PROG ": %s\n", why);
        return DTRAIN_EXIT_USAGE;
    }
    if (dtrain_out_check(argv[2], "output", why, sizeof why) != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", why);
        if (in != stdin)
            fclose(in);
        return DTRAIN_EXIT_USAGE;
    }
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0) {
        if (n + got > (size_t)DTRAIN_TOKENS_MAX_COUNT) {
            fprintf(stderr, PROG ": %s is larger than a token file can hold (%ld tokens)\n",
                    argv[1], DTRAIN_TOKENS_MAX_COUNT);
            goto out;
        }
        if (n + got > cap) {
            size_t ncap = cap ? cap * 2 : sizeof buf;
            while (ncap < n + got)
                ncap *= 2;
            uint16_t *grown = realloc(tokens, ncap * sizeof *tokens);
            if (grown == NULL) {
                fprintf(stderr, PROG ": out of memory reading %s\n", argv[1]);
                rc = DTRAIN_EXIT_FAILURE;
                goto out;
            }
            tokens = grown;
            cap = ncap;
        }
        for (size_t i = 0; i < got; i++)
            tokens[n + i] = buf[i];
        n += got;
    }
    if (ferror(in)) {
        fprintf(stderr, PROG ": cannot read %s: %s\n", argv[1], strerror(errno));
        goto out;
    }
    int st = dtrain_tokens_write(argv[2], tokens, n, err, sizeof err);
    if (st != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        rc = dtrain_status_exit(st);
        goto out;
    }
    printf(PROG ": wrote %zu tokens (vocabulary 256) to %s\n", n, argv[2]);
    rc = DTRAIN_EXIT_OK;
out:
    if (in != stdin)
        fclose(in);
    free(tokens);
    return rc;
}
