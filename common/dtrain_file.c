/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Non-blocking, type-checked and trusted opens; see dtrain_file.h. */
#include "dtrain_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_parse.h"

const char *dtrain_file_type_name(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a regular file";
}

const char *dtrain_untrusted_reason(const struct stat *st, char *buf, size_t len)
{
    if (S_ISLNK(st->st_mode))
        dtrain_snprintf(buf, len, "a symbolic link");
    else if (st->st_uid != geteuid() && st->st_uid != 0)
        dtrain_snprintf(buf, len, "owned by uid %lu, not by this job's user (uid %lu) or root",
                        (unsigned long)st->st_uid, (unsigned long)geteuid());
    else if (st->st_mode & (S_IWGRP | S_IWOTH))
        dtrain_snprintf(buf, len, "writable by group or others (mode %04o)", (unsigned)(st->st_mode & 07777));
    else
        return NULL;
    return buf;
}

/* fd is open with O_NONBLOCK: require a regular file, then block again. */
static int check_regular(int fd, const char *path, const char *what, off_t *size, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        dtrain_snprintf(err, errlen, "%s %.512s: %s", what, path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        dtrain_snprintf(err, errlen, "%s %.512s is a directory", what, path);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        dtrain_snprintf(err, errlen, "%s %.512s is not a regular file (%s)", what, path,
                        dtrain_file_type_name(st.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        dtrain_snprintf(err, errlen, "%s %.512s: %s", what, path, strerror(errno));
        return -1;
    }
    if (size)
        *size = st.st_size;
    return 0;
}

int dtrain_open_regular(const char *path, int flags, const char *what, off_t *size, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0') {
        dtrain_snprintf(err, errlen, "no %s given", what);
        return -1;
    }
    /* O_NONBLOCK: opening a FIFO for reading returns at once. */
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd < 0) {
        if (errno == ENXIO) /* a FIFO opened for writing, with no reader */
            dtrain_snprintf(err, errlen, "%s %.512s is not a regular file (a FIFO)", what, path);
        else if (errno == EISDIR)
            dtrain_snprintf(err, errlen, "%s %.512s is a directory", what, path);
        else
            dtrain_snprintf(err, errlen, "cannot open %s %.512s: %s", what, path, strerror(errno));
        return -1;
    }
    if (check_regular(fd, path, what, size, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

FILE *dtrain_fopen_regular(const char *path, int write, const char *what, off_t *size, char *err,
                           size_t errlen)
{
    int fd = dtrain_open_regular(path, write ? O_RDWR : O_RDONLY, what, size, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, write ? "r+b" : "rb");
    if (f == NULL) {
        dtrain_snprintf(err, errlen, "%s %.512s: %s", what, path, strerror(errno));
        close(fd);
    }
    return f;
}

int dtrain_read_fd(int fd, const char *path, const char *what, size_t max_bytes, char **buf, size_t *len,
                   char *err, size_t errlen)
{
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    *buf = NULL;
    if (b == NULL) {
        dtrain_snprintf(err, errlen, "out of memory reading %s %.512s", what, path);
        return -1;
    }
    for (;;) {
        if (n + 1 >= cap) {
            size_t ncap = cap * 2;
            char *nb = ncap > cap ? realloc(b, ncap) : NULL;
            if (nb == NULL) {
                dtrain_snprintf(err, errlen, "out of memory reading %s %.512s", what, path);
                free(b);
                return -1;
            }
            b = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, b + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            dtrain_snprintf(err, errlen, "cannot open %s %.512s: %s", what, path, strerror(errno));
            free(b);
            return -1;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > max_bytes) {
            dtrain_snprintf(err, errlen, "%s %.512s is larger than %zu bytes", what, path, max_bytes);
            free(b);
            return -1;
        }
    }
    b[n] = '\0';
    *buf = b;
    if (len)
        *len = n;
    return 0;
}

int dtrain_read_regular(const char *path, const char *what, size_t max_bytes, char **buf, size_t *len,
                        char *err, size_t errlen)
{
    off_t size = 0;
    *buf = NULL;
    int fd = dtrain_open_regular(path, O_RDONLY, what, &size, err, errlen);
    if (fd < 0)
        return -1;
    if ((unsigned long long)size > max_bytes) {
        dtrain_snprintf(err, errlen, "%s %.512s is larger than %zu bytes", what, path, max_bytes);
        close(fd);
        return -1;
    }
    int rc = dtrain_read_fd(fd, path, what, max_bytes, buf, len, err, errlen);
    close(fd);
    return rc;
}

/* A folder (or the file) a root process may trust: owned by root, not
 * writable by group or others unless sticky (then others may add entries
 * but not replace root's). */
static int trusted_mode(const struct stat *st, int is_file)
{
    if (st->st_uid != 0)
        return 0;
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) == 0)
        return 1;
    return !is_file && (st->st_mode & S_ISVTX);
}

int dtrain_open_trusted(const char *path, const char *what, long long max_bytes, char *err, size_t errlen)
{
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = path ? strrchr(path, '/') : NULL;
    int root = geteuid() == 0, fd = -1, dfd = -1;
    struct stat st;

    if (path == NULL || path[0] == '\0' || (slash && slash[1] == '\0')) {
        dtrain_snprintf(err, errlen, "%s %.512s: give the path of a file", what, path ? path : "");
        return -1;
    }
    const char *base = slash ? slash + 1 : path;
    /* The folder part with its links resolved; the walk below then opens
     * each resolved component with O_NOFOLLOW, so a link swapped in later
     * makes it fail rather than lead elsewhere. */
    size_t dlen = slash ? (size_t)(slash - path) : 0;
    if (dlen >= sizeof dir) {
        dtrain_snprintf(err, errlen, "%s: the path is too long", what);
        return -1;
    }
    memcpy(dir, path, dlen);
    dir[dlen] = '\0';
    if (realpath(dlen ? dir : slash ? "/" : ".", real) == NULL) {
        dtrain_snprintf(err, errlen, "%s %.512s: %s", what, path, strerror(errno));
        return -1;
    }
    if ((dfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        dtrain_snprintf(err, errlen, "%s %.512s: cannot open /: %s", what, path, strerror(errno));
        return -1;
    }
    size_t done = 0; /* real[0..done) is the folder dfd holds */
    for (char *p = real;;) {
        if (root && (fstat(dfd, &st) != 0 || !trusted_mode(&st, 0))) {
            dtrain_snprintf(err, errlen, "%s %.512s: the folder %.*s must be owned by root and not writable "
                            "by group or others (read as root)", what, path, done ? (int)done : 1,
                            done ? real : "/");
            goto fail;
        }
        while (*p == '/')
            p++;
        if (*p == '\0')
            break;
        char *end = strchr(p, '/');
        if (end)
            *end = '\0';
        int next = openat(dfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) {
            dtrain_snprintf(err, errlen, "%s %.512s: cannot open its folder %.512s: %s", what, path, real,
                            strerror(errno));
            goto fail;
        }
        close(dfd);
        dfd = next;
        p += strlen(p);
        done = (size_t)(p - real);
        if (end)
            *end = '/';
    }
    fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ELOOP)
            dtrain_snprintf(err, errlen, "%s %.512s is a symbolic link: name the file itself", what, path);
        else if (errno == EISDIR)
            dtrain_snprintf(err, errlen, "%s %.512s is a directory", what, path);
        else
            dtrain_snprintf(err, errlen, "cannot open %s %.512s: %s", what, path, strerror(errno));
        goto fail;
    }
    off_t size = 0;
    if (check_regular(fd, path, what, &size, err, errlen) != 0)
        goto fail;
    if (max_bytes > 0 && (long long)size > max_bytes) {
        dtrain_snprintf(err, errlen, "%s %.512s: larger than %lld bytes", what, path, max_bytes);
        goto fail;
    }
    if (root && (fstat(fd, &st) != 0 || !trusted_mode(&st, 1))) {
        dtrain_snprintf(err, errlen, "%s %.512s: must be owned by root and not writable by group or others "
                        "(read as root)", what, path);
        goto fail;
    }
    close(dfd);
    return fd;
fail:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    return -1;
}
