/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Opening files named by someone else without hanging, and without
 * trusting a path while root.
 *
 * A FIFO, a terminal or a device where a regular file is expected makes a
 * plain open() or read() wait forever (the whole step or job then hangs).
 * Every path dtrain reads is opened with dtrain_open_regular(): open with
 * O_NONBLOCK (which never waits for a FIFO's writer), fstat the opened
 * descriptor, require a regular file, then clear O_NONBLOCK.  The check is
 * on the descriptor that is then read, so nothing can be swapped in
 * between.
 *
 * dtrain_open_trusted() is the check for files that a root process (the
 * SPANK plugin in slurmstepd, dtrain-health in the prolog) reads and acts
 * on: no symbolic link anywhere, and when running as root the file and
 * every folder above it owned by root and not writable by group or others
 * (a sticky folder such as /tmp excepted), checked on descriptors opened
 * one component at a time with O_NOFOLLOW.
 *
 * Errors: one line in err naming `what` and the path, no "dtrain:" prefix.
 * No global state; safe inside slurmstepd. */
#ifndef DTRAIN_FILE_H
#define DTRAIN_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Open `path` (flags: O_RDONLY, O_RDWR, or O_WRONLY with O_APPEND/O_CREAT,
 * mode 0644; O_NONBLOCK, O_CLOEXEC and O_NOCTTY are added) and require a
 * regular file.  Returns the descriptor (blocking
 * again) and its size in *size (may be NULL), or -1 with err:
 * "cannot open WHAT PATH: No such file or directory", "WHAT PATH is a directory",
 * "WHAT PATH is not a regular file (a FIFO)". */
int dtrain_open_regular(const char *path, int flags, const char *what, off_t *size, char *err, size_t errlen);

/* The same as a stdio stream opened "rb" (or "r+b" when write is 1). */
FILE *dtrain_fopen_regular(const char *path, int write, const char *what, off_t *size, char *err,
                           size_t errlen);

/* Read a whole regular file into a fresh NUL-terminated buffer (free()
 * it); refused when larger than max_bytes.  Returns 0, or -1 with err. */
int dtrain_read_regular(const char *path, const char *what, size_t max_bytes, char **buf, size_t *len,
                        char *err, size_t errlen);

/* Read everything from an open descriptor (at most max_bytes) into a fresh
 * NUL-terminated buffer.  Returns 0, or -1 with err. */
int dtrain_read_fd(int fd, const char *path, const char *what, size_t max_bytes, char **buf, size_t *len,
                   char *err, size_t errlen);

/* Open a file a privileged process will trust (see above); a relative
 * path is taken from the working folder.  max_bytes > 0 bounds its size.  Not root: only the
 * no-link and regular-file checks apply.  Returns the descriptor, or -1. */
int dtrain_open_trusted(const char *path, const char *what, long long max_bytes, char *err, size_t errlen);

/* The trust check of a folder or file a run reads back as its own (its
 * checkpoints), as ssh's StrictModes: st (from lstat or fstat) is no
 * symbolic link, is owned by this process's user (geteuid) or root, and
 * is not writable by group or others.  NULL when it passes, else the
 * reason, written into buf: "a symbolic link", "owned by uid U, not by
 * this job's user (uid E) or root", "writable by group or others (mode
 * 0777)". */
const char *dtrain_untrusted_reason(const struct stat *st, char *buf, size_t len);

/* A short name for a file type: "a directory", "a FIFO", "a socket",
 * "a character device", "a block device", "a symbolic link", "a regular file". */
const char *dtrain_file_type_name(mode_t mode);

#endif
