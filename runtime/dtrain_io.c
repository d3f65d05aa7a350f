/* Whole-or-nothing output files and checked input files; see dtrain_io.h. */
#include "dtrain_io.h"
#include "dtrain_status.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dtrain_out_open(struct dtrain_out_file *o, const char *path, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    int n = snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof o->tmp) {
        snprintf(err, errlen, "output path is too long: %.80s...", path);
        return DTRAIN_ERR_INPUT;
    }
    o->f = fopen(o->tmp, "wb");
    if (o->f == NULL) {
        snprintf(err, errlen, "cannot create %s: %s", o->tmp, strerror(errno));
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
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
    if (o->write_errno == 0 && rename(o->tmp, o->path) != 0)
        o->write_errno = errno;
    if (o->write_errno != 0) {
        snprintf(err, errlen, "cannot write %s: %s", o->path, strerror(o->write_errno));
        unlink(o->tmp);
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

void dtrain_out_abort(struct dtrain_out_file *o)
{
    if (o->f != NULL) {
        fclose(o->f);
        o->f = NULL;
        unlink(o->tmp);
    }
}

int dtrain_in_open(const char *path, const char *what, FILE **f, size_t *size,
                   char *err, size_t errlen)
{
    struct stat st;
    *f = fopen(path, "rb");
    if (*f == NULL) {
        snprintf(err, errlen, "cannot open %s %s: %s", what, path, strerror(errno));
        return DTRAIN_ERR_INPUT;
    }
    if (fstat(fileno(*f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s is not a regular file", what, path);
        fclose(*f);
        *f = NULL;
        return DTRAIN_ERR_INPUT;
    }
    *size = (size_t)st.st_size;
    return DTRAIN_OK;
}
