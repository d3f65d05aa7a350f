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
};

int dtrain_out_open(struct dtrain_out_file *o, const char *path, char *err, size_t errlen);
void dtrain_out_write(struct dtrain_out_file *o, const void *data, size_t bytes);
int dtrain_out_commit(struct dtrain_out_file *o, char *err, size_t errlen);
void dtrain_out_abort(struct dtrain_out_file *o);

/* Open path for reading and give its size.  DTRAIN_ERR_INPUT when missing,
 * unreadable or not a regular file. */
int dtrain_in_open(const char *path, const char *what, FILE **f, size_t *size,
                   char *err, size_t errlen);

#endif
