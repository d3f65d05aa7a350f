/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: filesystem free space; see fs.h. */
#include "fs.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "dtrain_parse.h"

static void fs_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    const char *path = arg;
    struct health_fs_facts *facts = out;
    struct stat st;
    struct statvfs vfs;
    dtrain_stage_set(stage, "stat(%.120s)", path);
    if (stat(path, &st) != 0) {
        dtrain_snprintf(facts->error, sizeof(facts->error), "%s: %s", path, strerror(errno));
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        dtrain_snprintf(facts->error, sizeof(facts->error), "%s: not a directory", path);
        return;
    }
    dtrain_stage_set(stage, "statvfs(%.120s)", path);
    if (statvfs(path, &vfs) != 0) {
        dtrain_snprintf(facts->error, sizeof(facts->error), "%s: statvfs: %s", path, strerror(errno));
        return;
    }
    facts->free_bytes = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
    facts->total_bytes = (unsigned long long)vfs.f_blocks * vfs.f_frsize;
    facts->ok = 1;
}

static void fs_failed(void *out, const void *ctx, const char *why)
{
    struct health_fs_facts *facts = out;
    dtrain_snprintf(facts->error, sizeof(facts->error), "%s: %s", (const char *)ctx, why);
}

void health_fs_start(const char *path, int timeout_ms, struct health_fs_facts *out, struct dtrain_probe *probe)
{
    dtrain_probe_start(probe, fs_child, path, out, sizeof(*out), timeout_ms, fs_failed, path);
}

void health_fs_probe(const char *path, int timeout_ms, struct health_fs_facts *out)
{
    struct dtrain_probe probe;
    health_fs_start(path, timeout_ms, out, &probe);
    dtrain_probe_wait(&probe);
}
