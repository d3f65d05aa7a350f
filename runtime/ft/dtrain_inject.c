/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fault injection specs; see dtrain_inject.h. */
#include "dtrain_inject.h"
#include "dtrain_file.h"
#include "dtrain_parse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYNTAX "KIND:rank=R[:step=S][:count=N][:ms=M][:restart=N|any], KIND one of kill, hang, nan, corrupt, " \
    "nospace, delay, slowckpt, slowload"
#define MAX_STEP 1000000000L

static const char *const kind_names[] = {"kill", "hang", "nan", "corrupt", "nospace", "delay", "slowckpt",
                                          "slowload"};

const char *dtrain_inject_kind_name(enum dtrain_inject_kind kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "unknown";
}

/* One "key=value" of fault f. */
static int parse_field(const char *field, struct dtrain_inject_fault *f, unsigned *seen, char *err,
                       size_t errlen)
{
    static const char *const keys[] = {"rank", "step", "count", "restart", "ms"};
    static const long max[] = {1L << 20, MAX_STEP, MAX_STEP, 100000, 3600000};
    const char *eq = strchr(field, '=');
    char why[160];
    for (unsigned k = 0; eq != NULL && k < sizeof keys / sizeof keys[0]; k++) {
        if ((size_t)(eq - field) != strlen(keys[k]) || strncmp(field, keys[k], (size_t)(eq - field)) != 0)
            continue;
        if (*seen & (1u << k)) {
            snprintf(err, errlen, "'%s' is given twice", keys[k]);
            return -1;
        }
        *seen |= 1u << k;
        long v;
        if (k == 3 && strcmp(eq + 1, "any") == 0) {
            f->restart = -1;
            return 0;
        }
        if (dtrain_parse_int(eq + 1, k == 2 || k == 4 ? 1 : 0, max[k], keys[k], &v, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s", why);
            return -1;
        }
        if (k == 0)
            f->rank = (int)v;
        else if (k == 1)
            f->step = v;
        else if (k == 2)
            f->count = v;
        else if (k == 3)
            f->restart = v;
        else
            f->ms = v;
        return 0;
    }
    snprintf(err, errlen, "'%.60s' is not rank=, step=, count=, ms= or restart=", field);
    return -1;
}

static int parse_one(char *text, struct dtrain_inject_fault *f, char *err, size_t errlen)
{
    char *save = NULL, *part = strtok_r(text, ":", &save);
    unsigned seen = 0;
    int kind = -1;
    for (unsigned k = 0; part != NULL && k < sizeof kind_names / sizeof kind_names[0]; k++)
        if (strcmp(part, kind_names[k]) == 0)
            kind = (int)k;
    if (kind < 0) {
        snprintf(err, errlen, "unknown fault '%.40s'", part != NULL ? part : "");
        return -1;
    }
    *f = (struct dtrain_inject_fault){(enum dtrain_inject_kind)kind, -1, -1, 1, 0, 0};
    while ((part = strtok_r(NULL, ":", &save)) != NULL)
        if (parse_field(part, f, &seen, err, errlen) != 0)
            return -1;
    if (!(seen & 1u)) {
        snprintf(err, errlen, "%s needs rank=R", kind_names[kind]);
        return -1;
    }
    int wants_step = kind != DTRAIN_INJECT_CORRUPT && kind != DTRAIN_INJECT_SLOWLOAD;
    if (wants_step != !!(seen & 2u)) {
        snprintf(err, errlen, "%s %s step=S", kind_names[kind], wants_step ? "needs" : "takes no");
        return -1;
    }
    if ((seen & 4u) && kind != DTRAIN_INJECT_NAN && kind != DTRAIN_INJECT_DELAY) {
        snprintf(err, errlen, "count= is for nan and delay only");
        return -1;
    }
    int wants_ms = kind == DTRAIN_INJECT_DELAY || kind == DTRAIN_INJECT_SLOWCKPT || kind == DTRAIN_INJECT_SLOWLOAD;
    if (!!(seen & 16u) != wants_ms) {
        if (wants_ms)
            snprintf(err, errlen, "%s needs ms=M", kind_names[kind]);
        else
            snprintf(err, errlen, "ms= is for delay, slowckpt and slowload only");
        return -1;
    }
    return 0;
}

int dtrain_inject_parse(const char *spec, struct dtrain_inject *out, char *err, size_t errlen)
{
    char buf[1024], why[256];
    memset(out, 0, sizeof *out);
    if (spec == NULL || spec[0] == '\0')
        return 0;
    if (dtrain_snprintf(buf, sizeof buf, "%s", spec) != 0) {
        snprintf(err, errlen, "fault injection spec is longer than %zu bytes", sizeof buf - 1);
        return -1;
    }
    char *save = NULL;
    for (char *one = strtok_r(buf, ",", &save); one != NULL; one = strtok_r(NULL, ",", &save)) {
        if (out->n == DTRAIN_INJECT_MAX) {
            snprintf(err, errlen, "fault injection: more than %d faults", DTRAIN_INJECT_MAX);
            return -1;
        }
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", one);
        if (parse_one(one, &out->faults[out->n], why, sizeof why) != 0) {
            snprintf(err, errlen, "fault injection '%.80s': %s (write " SYNTAX ")", copy, why);
            return -1;
        }
        out->n++;
    }
    return 0;
}

int dtrain_inject_due(const struct dtrain_inject *in, enum dtrain_inject_kind kind, int rank, long step,
                      long restart)
{
    for (int i = 0; in != NULL && i < in->n; i++) {
        const struct dtrain_inject_fault *f = &in->faults[i];
        if (f->kind != kind || f->rank != rank || (f->restart >= 0 && f->restart != restart))
            continue;
        if (kind == DTRAIN_INJECT_CORRUPT || (step >= f->step && step < f->step + f->count))
            return 1;
    }
    return 0;
}

long dtrain_inject_delay_ms(const struct dtrain_inject *in, int rank, long step, long restart)
{
    return dtrain_inject_ms(in, DTRAIN_INJECT_DELAY, rank, step, restart);
}

long dtrain_inject_ms(const struct dtrain_inject *in, enum dtrain_inject_kind kind, int rank, long step,
                      long restart)
{
    for (int i = 0; in != NULL && i < in->n; i++) {
        const struct dtrain_inject_fault *f = &in->faults[i];
        if (f->kind == kind && f->rank == rank && (f->restart < 0 || f->restart == restart) &&
            step >= f->step && step < f->step + f->count)
            return f->ms;
    }
    return 0;
}

const struct dtrain_inject_fault *dtrain_inject_find(const struct dtrain_inject *in, enum dtrain_inject_kind kind,
                                                     int rank, long step, long restart)
{
    for (int i = 0; in != NULL && i < in->n; i++) {
        const struct dtrain_inject_fault *f = &in->faults[i];
        if (f->kind == kind && f->rank == rank && (f->restart < 0 || f->restart == restart) && f->step == step)
            return f;
    }
    return NULL;
}

int dtrain_inject_corrupt_file(const char *path, char *err, size_t errlen)
{
    struct stat st;
    unsigned char b;
    char why[600] = "";
    int fd = dtrain_open_regular(path, O_RDWR, "file", NULL, why, sizeof why);
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 1) {
        snprintf(err, errlen, "cannot corrupt %s: %s", path, fd < 0 ? why : "empty or unreadable");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    off_t at = st.st_size / 2 + (st.st_size > 512 ? 128 : 0); /* in the payload, past the header */
    if (at >= st.st_size)
        at = st.st_size - 1;
    int rc = -1;
    if (pread(fd, &b, 1, at) == 1) {
        b ^= 0xff;
        if (pwrite(fd, &b, 1, at) == 1 && fsync(fd) == 0)
            rc = 0;
    }
    if (rc != 0)
        snprintf(err, errlen, "cannot corrupt %s: %s", path, strerror(errno));
    close(fd);
    return rc;
}
