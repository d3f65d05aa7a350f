/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Helpers shared by the dtrain-health unit tests: a scratch folder, files
 * written into it, and where the fixtures and the fake NVML library are
 * (set by tests/health/Makefile.am). */
#ifndef DTRAIN_TEST_HEALTH_H
#define DTRAIN_TEST_HEALTH_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh scratch folder under the build folder (or $TMPDIR); the test
 * removes it with scratch_remove() at the end. */
static inline const char *scratch_dir(char *buf, size_t len)
{
    snprintf(buf, len, "%s/dtrain-health-test.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(buf);
}

static inline void scratch_remove(const char *dir)
{
    char cmd[4200];
    if (dir && strstr(dir, "dtrain-health-test.")) {
        if (snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir) >= (int)sizeof(cmd) || system(cmd) != 0)
            printf("# could not remove %s\n", dir);
    }
}

/* Write dir/name with printf-style content; returns the path (static
 * buffer, one at a time) or NULL. */
static inline const char *write_file(const char *dir, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline const char *write_file(const char *dir, const char *name, const char *fmt, ...)
{
    static char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return NULL;
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    return fclose(f) == 0 ? path : NULL;
}

/* A topology fixture (tests/fixtures/topology/NAME). */
static inline const char *fixture(const char *name)
{
    static char path[4096];
    const char *dir = getenv("DTRAIN_FIXTURES");
    snprintf(path, sizeof(path), "%s/%s", dir ? dir : "../fixtures/topology", name);
    return path;
}

/* The fake NVML library (tests/health/fake_nvml.c), or NULL. */
static inline const char *fake_nvml_library(void)
{
    const char *lib = getenv("FAKE_NVML_LIB");
    return lib && access(lib, R_OK) == 0 ? lib : NULL;
}

#endif
