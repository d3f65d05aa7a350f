/* SPDX-License-Identifier: GPL-2.0-or-later */
/* For the harnesses of parsers that read files (the runtime opens paths,
 * never buffers): one private temporary folder per fuzzing process,
 * removed at exit, and a file written there from the input. */
#ifndef DTRAIN_FUZZ_FILES_H
#define DTRAIN_FUZZ_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[64];

static void fuzz_dir_remove(void)
{
    char cmd[96];
    if (fuzz_dir[0] != '\0' && strncmp(fuzz_dir, "/tmp/dtrain-fuzz-", 17) == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", fuzz_dir);
    }
}

/* The folder (made on first use), or NULL. */
static const char *fuzz_tmpdir(void)
{
    if (fuzz_dir[0] == '\0') {
        snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/dtrain-fuzz-XXXXXX");
        if (mkdtemp(fuzz_dir) == NULL) {
            fuzz_dir[0] = '\0';
            return NULL;
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir;
}

/* Write data[0..n) to path; 0 or -1. */
static int fuzz_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    int rc = fwrite(data, 1, n, f) == n ? 0 : -1;
    return fclose(f) == 0 ? rc : -1;
}

#endif
