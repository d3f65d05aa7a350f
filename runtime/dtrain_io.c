/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Whole-or-nothing output files and checked input files; see dtrain_io.h. */
#include "dtrain_io.h"
#include "dtrain_status.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_file.h"
#include "dtrain_parse.h"

#define IO_PATH_MAX 4096

/* PATH may be replaced by a rename: only when absent or a regular file (a
 * device, FIFO, socket, folder or link there is never replaced).  name is
 * PATH's name in dirfd (PATH itself for AT_FDCWD). */
static int replaceable_at(int dirfd, const char *name, const char *path, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : (snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno)), -1);
    if (S_ISREG(st.st_mode))
        return 0;
    if (S_ISDIR(st.st_mode))
        snprintf(err, errlen, "%s %s is a directory: give a file name", what, path);
    else if (S_ISLNK(st.st_mode))
        snprintf(err, errlen, "%s %s is a symbolic link: give the file it points to", what, path);
    else
        snprintf(err, errlen, "%s %s is %s, not a regular file: dtrain never replaces one", what, path,
                 dtrain_file_type_name(st.st_mode));
    return -1;
}

static int replaceable(const char *path, const char *what, char *err, size_t errlen)
{
    return replaceable_at(AT_FDCWD, path, path, what, err, errlen);
}

/* A path's name in o->dirfd: the path itself, or its last component. */
static const char *name_in(const struct dtrain_out_file *o, const char *path)
{
    const char *slash = strrchr(path, '/');
    return o->dirfd == AT_FDCWD || slash == NULL ? path : slash + 1;
}

int dtrain_out_openat(struct dtrain_out_file *o, int dirfd, const char *path, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    o->dirfd = dirfd;
    int n = snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof o->tmp) {
        snprintf(err, errlen, "output path is too long: %.80s...", path);
        return DTRAIN_ERR_INPUT;
    }
    if (replaceable_at(dirfd, name_in(o, path), path, "output", err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    /* A new file of our own (O_EXCL after removing a stale one of this
     * PID): never a FIFO, device or link someone left under the name. */
    unlinkat(dirfd, name_in(o, o->tmp), 0);
    int fd = openat(dirfd, name_in(o, o->tmp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || (o->f = fdopen(fd, "wb")) == NULL) {
        snprintf(err, errlen, "cannot create %s: %s", o->tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

int dtrain_out_open(struct dtrain_out_file *o, const char *path, char *err, size_t errlen)
{
    return dtrain_out_openat(o, AT_FDCWD, path, err, errlen);
}

void dtrain_out_write(struct dtrain_out_file *o, const void *data, size_t bytes)
{
    if (o->write_errno == 0 && bytes > 0 && fwrite(data, 1, bytes, o->f) != bytes)
        o->write_errno = errno ? errno : EIO;
}

int dtrain_out_commit(struct dtrain_out_file *o, char *err, size_t errlen)
{
    if (o->write_errno == 0 && fflush(o->f) != 0)
        o->write_errno = errno;
    if (o->write_errno == 0 && fsync(fileno(o->f)) != 0)
        o->write_errno = errno;
    if (fclose(o->f) != 0 && o->write_errno == 0)
        o->write_errno = errno;
    o->f = NULL;
    if (o->write_errno == 0 && replaceable_at(o->dirfd, name_in(o, o->path), o->path, "output", err, errlen) != 0) {
        unlinkat(o->dirfd, name_in(o, o->tmp), 0);
        return DTRAIN_ERR_INPUT;
    }
    if (o->write_errno == 0 && renameat(o->dirfd, name_in(o, o->tmp), o->dirfd, name_in(o, o->path)) != 0)
        o->write_errno = errno;
    if (o->write_errno != 0) {
        snprintf(err, errlen, "cannot write %s: %s", o->path, strerror(o->write_errno));
        unlinkat(o->dirfd, name_in(o, o->tmp), 0);
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

void dtrain_out_abort(struct dtrain_out_file *o)
{
    if (o->f != NULL) {
        fclose(o->f);
        o->f = NULL;
        unlinkat(o->dirfd, name_in(o, o->tmp), 0);
    }
}

int dtrain_in_open(const char *path, const char *what, FILE **f, size_t *size,
                   char *err, size_t errlen)
{
    off_t bytes = 0;
    *f = dtrain_fopen_regular(path, 0, what, &bytes, err, errlen);
    if (*f == NULL)
        return DTRAIN_ERR_INPUT;
    *size = (size_t)bytes;
    return DTRAIN_OK;
}

/* Create and remove a probe file in `folder`: the honest test that a file
 * can be created there (access() says yes to root on a full disk, and on
 * some network filesystems). */
static int probe_folder(const char *folder, const char *what, const char *path, char *err, size_t errlen)
{
    char probe[IO_PATH_MAX + 64];
    if (dtrain_snprintf(probe, sizeof probe, "%s/.dtrain-probe.%ld", folder, (long)getpid()) != 0) {
        snprintf(err, errlen, "%s %s: the path is too long", what, path);
        return -1;
    }
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST && unlink(probe) == 0)
        fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: cannot create files in %s: %s", what, path, folder, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    return 0;
}

int dtrain_out_check(const char *path, const char *what, char *err, size_t errlen)
{
    char dir[IO_PATH_MAX];
    struct stat st;
    if (path == NULL || path[0] == '\0')
        return DTRAIN_OK;
    if (dtrain_snprintf(dir, sizeof dir, "%s", path) != 0) {
        snprintf(err, errlen, "%s: the path is too long: %.80s...", what, path);
        return DTRAIN_ERR_INPUT;
    }
    if (replaceable(path, what, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    const char *folder = dirname(dir);
    if (stat(folder, &st) != 0) {
        snprintf(err, errlen, "%s %s: folder %s: %s", what, path, folder, strerror(errno));
        return DTRAIN_ERR_INPUT;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %s: %s is not a folder", what, path, folder);
        return DTRAIN_ERR_INPUT;
    }
    return probe_folder(folder, what, path, err, errlen) == 0 ? DTRAIN_OK : DTRAIN_ERR_INPUT;
}

int dtrain_out_check_dir(const char *dir, const char *what, char *err, size_t errlen)
{
    char buf[IO_PATH_MAX];
    struct stat st;
    if (dir == NULL || dir[0] == '\0')
        return DTRAIN_OK;
    if (dtrain_snprintf(buf, sizeof buf, "%s", dir) != 0) {
        snprintf(err, errlen, "%s: the path is too long: %.80s...", what, dir);
        return DTRAIN_ERR_INPUT;
    }
    /* mkdir -p: the folder is made now, as the first save would. */
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "%s %s: cannot create %s: %s", what, dir, buf, strerror(errno));
            return DTRAIN_ERR_INPUT;
        }
        *p = c;
        if (c == '\0')
            break;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %s is not a folder", what, dir);
        return DTRAIN_ERR_INPUT;
    }
    return probe_folder(dir, what, dir, err, errlen) == 0 ? DTRAIN_OK : DTRAIN_ERR_INPUT;
}
