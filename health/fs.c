/* dtrain-health: filesystem free space; see fs.h. */
#include "fs.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "bounded.h"
#include "dtrain_parse.h"

static void fs_child(const void *arg, void *out, struct health_stage *stage)
{
    const char *path = arg;
    struct health_fs_facts *facts = out;
    struct stat st;
    struct statvfs vfs;
    health_stage_set(stage, "stat(%.120s)", path);
    if (stat(path, &st) != 0) {
        dtrain_snprintf(facts->error, sizeof(facts->error), "%s: %s", path, strerror(errno));
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        dtrain_snprintf(facts->error, sizeof(facts->error), "%s: not a directory", path);
        return;
    }
    health_stage_set(stage, "statvfs(%.120s)", path);
    if (statvfs(path, &vfs) != 0) {
        dtrain_snprintf(facts->error, sizeof(facts->error), "%s: statvfs: %s", path, strerror(errno));
        return;
    }
    facts->free_bytes = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
    facts->total_bytes = (unsigned long long)vfs.f_blocks * vfs.f_frsize;
    facts->ok = 1;
}

void health_fs_probe(const char *path, int timeout_ms, struct health_fs_facts *out)
{
    char why[HEALTH_ERROR_LEN];
    if (health_run_bounded(fs_child, path, out, sizeof(*out), timeout_ms, why, sizeof(why)) != HEALTH_BOUNDED_OK)
        dtrain_snprintf(out->error, sizeof(out->error), "%s: %s", path, why);
}
