/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: the training config as dtrain-train and dtrain-launch read it:
 * a JSON file (dtrain_train_config_load_json), or, for an input that
 * starts with "--", its lines as command-line arguments
 * (dtrain_train_config_parse_args); then dtrain_train_config_finish() on
 * what was accepted.  finish() reads and writes files, so every path the
 * input set is cleared first and the token file is the harness's own name
 * (the check of the settings, not of this machine's files). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_train.h"
#include "fuzz_files.h"

#define MAX_ARGS 64

static int parse_lines(struct dtrain_train_config *c, const uint8_t *data, size_t size, char *err, size_t errlen)
{
    char *text = malloc(size + 1), *argv[MAX_ARGS + 1];
    int argc = 0, help = 0;
    if (text == NULL)
        return -1;
    memcpy(text, data, size);
    text[size] = '\0';
    argv[argc++] = "dtrain-train";
    for (char *line = text, *next; line != NULL && argc < MAX_ARGS; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        argv[argc++] = line;
    }
    argv[argc] = NULL;
    int rc = dtrain_train_config_parse_args(c, argc, argv, &help, err, errlen);
    free(text);
    return help ? -1 : rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_tmpdir();
    char path[128], err[2048];
    struct dtrain_train_config c;
    if (dir == NULL)
        return 0;
    dtrain_train_config_defaults(&c);
    int rc;
    if (size >= 2 && data[0] == '-' && data[1] == '-') {
        rc = parse_lines(&c, data, size, err, sizeof err);
    } else {
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (fuzz_write(path, data, size) != 0)
            return 0;
        rc = dtrain_train_config_load_json(&c, path, err, sizeof err);
    }
    if (rc != 0)
        return 0;
    /* No file of the input's choosing is read or created. */
    c.init_llmc[0] = c.resume[0] = c.checkpoint[0] = c.save_llmc[0] = c.metrics[0] = '\0';
    c.prom_textfile[0] = c.ckpt_dir[0] = c.inject[0] = '\0';
    snprintf(c.data, sizeof c.data, "%s/tokens.bin", dir);
    (void)dtrain_train_config_finish(&c, err, sizeof err);
    (void)dtrain_train_config_single_process(&c, err, sizeof err);
    return 0;
}
