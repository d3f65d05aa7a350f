/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The checkpoint folder: step names, listing, creating and removing only
 * what a save made; see sckpt_internal.h. */
#include "sckpt_internal.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ names and folders */

int sckpt_step_path(char *out, size_t len, const char *dir, uint64_t step, const char *suffix)
{
    return dtrain_snprintf(out, len, "%s/step-%08" PRIu64 "%s", dir, step, suffix);
}

int sckpt_shard_name(char *out, size_t len, long rank)
{
    return dtrain_snprintf(out, len, "shard-%05ld.bin", rank);
}

/* "step-<8 or more digits><suffix>": 1 and *step, else 0. */
static int parse_step_name(const char *name, const char *suffix, uint64_t *step)
{
    if (strncmp(name, "step-", 5) != 0)
        return 0;
    const char *d = name + 5;
    size_t n = 0;
    while (d[n] >= '0' && d[n] <= '9')
        n++;
    if (n < 8 || n > 18 || strcmp(d + n, suffix) != 0)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (uint64_t)(d[i] - '0');
    *step = v;
    return 1;
}

int sckpt_make_dirs(const char *path)
{
    char buf[DTRAIN_PATH_MAX];
    if (dtrain_snprintf(buf, sizeof buf, "%s", path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

int sckpt_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* dir/name's parent folder into parent, name's start into *name. */
static int split_path(const char *path, char *parent, size_t len, const char **name)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL || dtrain_snprintf(parent, len, "%.*s", (int)(slash - path), path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (parent[0] == '\0')
        dtrain_snprintf(parent, len, "/");
    *name = slash + 1;
    return 0;
}

int sckpt_open_step_dir(const char *path, char *why, size_t whylen)
{
    char parent[DTRAIN_PATH_MAX], reason[128];
    const char *name;
    struct stat st;
    if (split_path(path, parent, sizeof parent, &name) != 0) {
        dtrain_snprintf(why, whylen, "checkpoint folder path too long: %.80s...", path);
        return -1;
    }
    /* the checkpoint folder itself is the one the user named (made like mkdir -p) */
    if (sckpt_make_dirs(parent) != 0) {
        int e = errno;
        dtrain_snprintf(why, whylen, "cannot create %s: %s", parent, strerror(e));
        errno = e;
        return -1;
    }
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) {
        int e = errno;
        dtrain_snprintf(why, whylen, "cannot open %s: %s", parent, strerror(e));
        errno = e;
        return -1;
    }
    /* made new, or there already: a real folder of this user's (another
     * rank of this run made it, or an earlier attempt of this job) */
    int fd = -1, e = 0;
    if (mkdirat(pfd, name, 0755) != 0 && errno != EEXIST)
        e = errno;
    else if ((fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        e = errno;
    if (e != 0) {
        if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
            dtrain_snprintf(why, whylen, "%s is %s, not a step folder this run made: nothing is written through "
                            "it; remove it", path, dtrain_file_type_name(st.st_mode));
        else
            dtrain_snprintf(why, whylen, "cannot create %s: %s", path, strerror(e));
        close(pfd);
        errno = e == ELOOP ? EEXIST : e;
        return -1;
    }
    close(pfd);
    const char *bad = NULL;
    if (fstat(fd, &st) != 0)
        bad = strerror(errno);
    else if (st.st_uid != geteuid() && dtrain_snprintf(reason, sizeof reason, "owned by uid %lu, not by this "
                                                       "job's user (uid %lu)", (unsigned long)st.st_uid,
                                                       (unsigned long)geteuid()) >= 0)
        bad = reason;
    else
        bad = dtrain_untrusted_reason(&st, reason, sizeof reason);
    if (bad != NULL) {
        dtrain_snprintf(why, whylen, "%s is not a step folder this run made (%s): nothing is written into it; "
                        "remove it", path, bad);
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

int sckpt_check_trusted(const char *dir, const char *what, const uint64_t *steps, long n, char *err,
                        size_t errlen)
{
    char reason[128], path[DTRAIN_PATH_MAX];
    struct stat st;
    /* the folder the user named (a link to it is theirs to make) */
    if (stat(dir, &st) != 0)
        return 0;
    if (dtrain_untrusted_reason(&st, reason, sizeof reason)) {
        dtrain_snprintf(err, errlen, "%s %s is not trusted: %s; a checkpoint is read only from a folder of this "
                        "user's (or root's) that nobody else can write", what, dir, reason);
        return -1;
    }
    for (long i = 0; i < n; i++) {
        if (sckpt_step_path(path, sizeof path, dir, steps[i], "") != 0)
            continue;
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (d == NULL) {
            if (fd >= 0)
                close(fd);
            continue; /* gone since listed: the resume says what is missing */
        }
        int bad = fstat(fd, &st) == 0 && dtrain_untrusted_reason(&st, reason, sizeof reason) != NULL;
        struct dirent *e;
        while (!bad && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                dtrain_untrusted_reason(&st, reason, sizeof reason) != NULL) {
                bad = 1;
                size_t len = strlen(path);
                dtrain_snprintf(path + len, sizeof path - len, "/%s", e->d_name);
            }
        }
        closedir(d);
        if (bad) {
            dtrain_snprintf(err, errlen, "%s %s: %s is not trusted: %s; a checkpoint is read only from files of this "
                            "user's (or root's) that nobody else can write", what, dir, path, reason);
            return -1;
        }
    }
    return 0;
}

/* Is `name` a file a save writes into a step folder: the manifest, a
 * shard, or one of their temporary names (dtrain_io.h's NAME.tmp.PID)? */
static int our_file_name(const char *name)
{
    size_t n = 0;
    if (strncmp(name, DTRAIN_SCKPT_MANIFEST, strlen(DTRAIN_SCKPT_MANIFEST)) == 0)
        n = strlen(DTRAIN_SCKPT_MANIFEST);
    else if (strncmp(name, "shard-", 6) == 0) {
        n = 6;
        while (name[n] >= '0' && name[n] <= '9')
            n++;
        if (n < 11 || strncmp(name + n, ".bin", 4) != 0)
            return 0;
        n += 4;
    } else
        return 0;
    if (name[n] == '\0')
        return 1;
    if (strncmp(name + n, ".tmp.", 5) != 0 || name[n + 5] == '\0')
        return 0;
    for (n += 5; name[n] != '\0'; n++)
        if (name[n] < '0' || name[n] > '9')
            return 0;
    return 1;
}

/* Say once why a folder was left alone (stderr: there is no other stream
 * here); errno is kept. */
static void left_alone(const char *path, const char *why)
{
    int e = errno;
    fprintf(stderr, "dtrain: checkpoint: leaving %s alone: %s\n", path, why);
    fflush(stderr);
    errno = e;
}

int sckpt_remove_step_dir(const char *path)
{
    char parent[DTRAIN_PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL || dtrain_snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    const char *name = slash + 1;
    int pfd = open(parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat st;
    int rc = -1;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = errno == ENOENT ? 0 : -1;
        close(pfd);
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        left_alone(path, S_ISLNK(st.st_mode) ? "a symbolic link, not a step folder of this run"
                                             : "not a folder");
        close(pfd);
        return -1;
    }
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        close(pfd);
        return -1;
    }
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
        errno = EPERM;
        left_alone(path, "owned by another user, not a step folder of this run");
        goto out;
    }
    int foreign = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat fst;
        if (!our_file_name(e->d_name) || fstatat(fd, e->d_name, &fst, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(fst.st_mode)) {
            if (foreign++ == 0) {
                char what[400];
                dtrain_snprintf(what, sizeof what, "it holds %.200s, which no save writes", e->d_name);
                left_alone(path, what);
            }
            continue;
        }
        if (unlinkat(fd, e->d_name, 0) != 0 && errno != ENOENT)
            foreign++;
    }
    if (foreign) {
        errno = ENOTEMPTY;
        goto out;
    }
    rc = unlinkat(pfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
out:
    closedir(d);
    close(pfd);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

long sckpt_list_steps(const char *dir, const char *suffix, uint64_t *steps, long max)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : -1;
    long n = 0, cap = 64;
    uint64_t *all = malloc((size_t)cap * sizeof *all);
    struct dirent *e;
    int dfd = dirfd(d);
    while (all != NULL && (e = readdir(d)) != NULL) {
        uint64_t step;
        struct stat st;
        if (!parse_step_name(e->d_name, suffix, &step))
            continue;
        /* Real folders only: a link named like a step is not ours (said
         * when looking for leftovers to remove, the one place it matters). */
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
            char shown[DTRAIN_PATH_MAX];
            if (suffix[0] != '\0' && S_ISLNK(st.st_mode) &&
                dtrain_snprintf(shown, sizeof shown, "%s/%s", dir, e->d_name) == 0)
                left_alone(shown, "a symbolic link, not a step folder of this run");
            continue;
        }
        if (suffix[0] == '\0') {
            char m[DTRAIN_PATH_MAX];
            if (dtrain_snprintf(m, sizeof m, "%s/%s", e->d_name, DTRAIN_SCKPT_MANIFEST) != 0 ||
                fstatat(dfd, m, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
                continue;
        }
        if (n == cap) {
            uint64_t *more = realloc(all, 2 * (size_t)cap * sizeof *all);
            if (more == NULL) {
                free(all);
                all = NULL;
                break;
            }
            all = more;
            cap *= 2;
        }
        all[n++] = step;
    }
    closedir(d);
    if (all == NULL) {
        errno = ENOMEM;
        return -1;
    }
    qsort(all, (size_t)n, sizeof *all, cmp_desc);
    for (long i = 0; i < n && i < max; i++)
        steps[i] = all[i];
    free(all);
    return n;
}

int dtrain_sckpt_list(const char *dir, uint64_t *steps, int max, char *err, size_t errlen)
{
    long n = sckpt_list_steps(dir, "", steps, max);
    if (n < 0) {
        dtrain_snprintf(err, errlen, "cannot read checkpoint folder %s: %s", dir, strerror(errno));
        return -1;
    }
    return (int)n;
}

void sckpt_prune(const char *dir, int keep)
{
    long n = sckpt_list_steps(dir, "", NULL, 0);
    if (n <= keep)
        return;
    uint64_t *steps = malloc((size_t)n * sizeof *steps);
    if (steps == NULL)
        return;
    n = sckpt_list_steps(dir, "", steps, n);
    for (long i = keep; i < n; i++) {
        char path[DTRAIN_PATH_MAX];
        if (sckpt_step_path(path, sizeof path, dir, steps[i], "") == 0)
            sckpt_remove_step_dir(path);
    }
    free(steps);
}

void sckpt_remove_partial(const char *dir)
{
    uint64_t steps[MAX_CANDIDATES];
    long n;
    while ((n = sckpt_list_steps(dir, ".tmp", steps, MAX_CANDIDATES)) > 0) {
        long removed = 0;
        for (long i = 0; i < n && i < MAX_CANDIDATES; i++) {
            char path[DTRAIN_PATH_MAX];
            if (sckpt_step_path(path, sizeof path, dir, steps[i], ".tmp") == 0 && sckpt_remove_step_dir(path) == 0)
                removed++;
        }
        if (removed == 0)
            break;
    }
}
