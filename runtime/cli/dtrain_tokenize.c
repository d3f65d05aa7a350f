/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-tokenize INPUT OUTPUT: turn any file into a byte-level token file
 * (vocabulary 256: token = byte value) in llm.c's layout, so that demos and
 * tests need no download and no tokenizer.  "-" reads standard input.
 * With --tokenizer tokenizer.json: a Hugging Face byte-level BPE's ids
 * (data/dtrain_bpe.h), uint16 when every id of its vocabulary fits. */
#include "data/dtrain_bpe.h"
#include "dtrain_data.h"
#include "dtrain_file.h"
#include "dtrain_grow.h"
#include "dtrain_io.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "dtrain-tokenize"

static void usage(FILE *out)
{
    fprintf(out, "usage: " PROG " [--tokenizer TOKENIZER.JSON] INPUT OUTPUT   (or --help, --version)\n"
            "Write OUTPUT as a token file (llm.c layout, uint16 tokens) holding one token per\n"
            "byte of INPUT (vocabulary 256).  INPUT '-' is standard input.\n"
            "  --tokenizer FILE  encode with a Hugging Face byte-level BPE tokenizer.json (GPT-2's,\n"
            "                    Llama 3's kind) instead: uint16 tokens when its vocabulary fits,\n"
            "                    else uint32 (llm.c's llama-3 files)\n"
            "A good demo corpus on Debian: cat /usr/share/common-licenses/* > corpus.txt\n"
            "Exit codes: 0 done, 2 bad input (one line on stderr), 1 internal error.\n");
}

/* INPUT with the tokenizer at tok_path into OUTPUT; in is open. */
static int encode_file(const char *tok_path, FILE *in, const char *input, const char *output)
{
    char err[1024];
    struct dtrain_bpe *bpe = NULL;
    unsigned char *text = NULL;
    uint32_t *ids = NULL;
    size_t len = 0, cap = 0, n = 0, got;
    int rc = dtrain_bpe_load(tok_path, &bpe, err, sizeof err);
    if (rc != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return dtrain_status_exit(rc);
    }
    for (;;) {
        if (dtrain_grow((void **)&text, &cap, len + 1, 1, 1 << 20) != 0) {
            fprintf(stderr, PROG ": out of memory reading %s\n", input);
            rc = DTRAIN_ERR_SYSTEM;
            goto out;
        }
        if ((got = fread(text + len, 1, cap - len, in)) == 0)
            break;
        len += got;
    }
    if (ferror(in)) {
        fprintf(stderr, PROG ": cannot read %s: %s\n", input, strerror(errno));
        rc = DTRAIN_ERR_INPUT;
        goto out;
    }
    if ((rc = dtrain_bpe_encode(bpe, text, len, &ids, &n, err, sizeof err)) != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s: %s\n", input, err);
        goto out;
    }
    uint32_t max_id = dtrain_bpe_max_id(bpe);
    if (max_id <= UINT16_MAX) {
        uint16_t *narrow = malloc((n ? n : 1) * sizeof *narrow);
        if (narrow == NULL) {
            fprintf(stderr, PROG ": out of memory\n");
            rc = DTRAIN_ERR_SYSTEM;
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            narrow[i] = (uint16_t)ids[i];
        rc = dtrain_tokens_write(output, narrow, n, err, sizeof err);
        free(narrow);
    } else {
        rc = dtrain_tokens_write32(output, ids, n, err, sizeof err);
    }
    if (rc != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        goto out;
    }
    printf(PROG ": wrote %zu tokens (vocabulary %lu, %s) to %s\n", n, (unsigned long)max_id + 1,
           max_id <= UINT16_MAX ? "uint16" : "uint32", output);
out:
    free(text);
    free(ids);
    dtrain_bpe_free(bpe);
    return dtrain_status_exit(rc);
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
    const char *tok_path = NULL;
    if (argc >= 2 && strncmp(argv[1], "--tokenizer=", 12) == 0) {
        tok_path = argv[1] + 12;
        argv++;
        argc--;
    } else if (argc >= 3 && strcmp(argv[1], "--tokenizer") == 0) {
        tok_path = argv[2];
        argv += 2;
        argc -= 2;
    }
    if (argc != 3 || (tok_path != NULL && *tok_path == '\0')) {
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
    if (tok_path != NULL) {
        rc = encode_file(tok_path, in, argv[1], argv[2]);
        goto out;
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
