/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, internal: files written whole or not at all, and files read
 * with their size known up front.
 *
 * dtrain_out_open() writes to "PATH.tmp.PID"; dtrain_out_commit() flushes,
 * fsyncs and renames it over PATH, so a crash never leaves a half-written
 * model or checkpoint under the real name. */
#ifndef DTRAIN_IO_H
#define DTRAIN_IO_H

#include <stddef.h>
#include <stdio.h>

struct dtrain_out_file {
    FILE *f;
    char tmp[4200];
    const char *path;
    int write_errno; /* first failing write's errno, 0 when none */
    int dirfd;       /* AT_FDCWD, or the folder the file is made in (dtrain_out_openat) */
};

/* PATH.tmp.PID is created new (O_EXCL, O_NOFOLLOW); PATH must be absent
 * or a regular file, here and again just before the rename: a device,
 * FIFO, socket, folder or link under that name is never replaced. */
int dtrain_out_open(struct dtrain_out_file *o, const char *path, char *err, size_t errlen);
/* The same in the folder open as dirfd (O_DIRECTORY|O_NOFOLLOW, checked
 * by the caller): the file is path's last component there, so no link
 * above it is followed; path names it in messages. */
int dtrain_out_openat(struct dtrain_out_file *o, int dirfd, const char *path, char *err, size_t errlen);
void dtrain_out_write(struct dtrain_out_file *o, const void *data, size_t bytes);
int dtrain_out_commit(struct dtrain_out_file *o, char *err, size_t errlen);
void dtrain_out_abort(struct dtrain_out_file *o);

/* Open path for reading and give its size.  DTRAIN_ERR_INPUT when missing,
 * unreadable or not a regular file; never waits (a FIFO is refused at
 * once, common/dtrain_file.h). */
int dtrain_in_open(const char *path, const char *what, FILE **f, size_t *size,
                   char *err, size_t errlen);

/* Checked before any work, so that a run never trains for hours and then
 * cannot write its result.  dtrain_out_check: a file a run will write
 * with dtrain_out_open (or append to): absent or a regular file, in an
 * existing folder where a file can be created (a probe file is made and
 * removed).  dtrain_out_check_dir: a folder a run writes into (created,
 * like mkdir -p, then probed the same way).  "" or NULL: nothing to check.
 * DTRAIN_OK, or DTRAIN_ERR_INPUT with one line naming `what`. */
int dtrain_out_check(const char *path, const char *what, char *err, size_t errlen);
int dtrain_out_check_dir(const char *dir, const char *what, char *err, size_t errlen);

#endif
