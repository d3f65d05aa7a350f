/* SPDX-License-Identifier: GPL-2.0-or-later */
/* CPU lists and binding; see cpubind.h. */
#include "cpubind.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dtrain_parse.h"

/* Parse a CPU number at *p (digits only), advancing *p. */
static int cpu_number(const char **p, long *out)
{
    char digits[8];
    size_t n = 0;
    while ((*p)[n] >= '0' && (*p)[n] <= '9') {
        if (n + 1 >= sizeof digits)
            return -1;
        digits[n] = (*p)[n];
        n++;
    }
    if (n == 0)
        return -1;
    digits[n] = '\0';
    char ignored[64];
    if (dtrain_parse_int(digits, 0, DTRAIN_CPU_MAX - 1, "cpu", out, ignored, sizeof ignored) != 0)
        return -1;
    *p += n;
    return 0;
}

int dtrain_cpulist_parse(const char *text, cpu_set_t *set, char *err, size_t errlen)
{
    size_t size = CPU_ALLOC_SIZE(DTRAIN_CPU_MAX);
    const char *p = text;
    CPU_ZERO_S(size, set);
    if (text == NULL || *text == '\0') {
        dtrain_snprintf(err, errlen, "empty CPU list");
        return -1;
    }
    for (;;) {
        long lo, hi;
        if (cpu_number(&p, &lo) != 0)
            goto bad;
        hi = lo;
        if (*p == '-') {
            p++;
            if (cpu_number(&p, &hi) != 0 || hi < lo)
                goto bad;
        }
        for (long c = lo; c <= hi; c++)
            CPU_SET_S((size_t)c, size, set);
        if (*p == '\0')
            return 0;
        if (*p != ',')
            goto bad;
        p++;
    }
bad:
    dtrain_snprintf(err, errlen, "CPU list '%.64s' is malformed (write it like 0-15,32-47; CPUs below %d)", text,
                    DTRAIN_CPU_MAX);
    return -1;
}

int dtrain_cpulist_format(const cpu_set_t *set, char *buf, size_t len)
{
    size_t size = CPU_ALLOC_SIZE(DTRAIN_CPU_MAX), used = 0;
    if (len == 0)
        return -1;
    buf[0] = '\0';
    for (int c = 0; c < DTRAIN_CPU_MAX; c++) {
        if (!CPU_ISSET_S((size_t)c, size, set))
            continue;
        int end = c;
        while (end + 1 < DTRAIN_CPU_MAX && CPU_ISSET_S((size_t)end + 1, size, set))
            end++;
        int w = end > c ? snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", c, end)
                        : snprintf(buf + used, len - used, "%s%d", used ? "," : "", c);
        if (w < 0 || (size_t)w >= len - used)
            return -1;
        used += (size_t)w;
        c = end;
    }
    return 0;
}

/* want = cpulist intersected with the calling process's affinity; *listed
 * and *usable count the CPUs before and after.  0, or -1 with err. */
static int usable_set(const char *cpulist, cpu_set_t *want, int *listed, int *usable, char *err, size_t errlen)
{
    size_t size = CPU_ALLOC_SIZE(DTRAIN_CPU_MAX);
    cpu_set_t *now = CPU_ALLOC(DTRAIN_CPU_MAX);
    int rc = -1;
    if (now == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (dtrain_cpulist_parse(cpulist, want, err, errlen) != 0)
        goto cleanup;
    CPU_ZERO_S(size, now);
    if (sched_getaffinity(0, size, now) != 0) {
        dtrain_snprintf(err, errlen, "sched_getaffinity: %s", strerror(errno));
        goto cleanup;
    }
    *listed = CPU_COUNT_S(size, want);
    CPU_AND_S(size, want, want, now);
    *usable = CPU_COUNT_S(size, want);
    rc = 0;
cleanup:
    CPU_FREE(now);
    return rc;
}

int dtrain_cpulist_usable(const char *cpulist, int *listed, int *usable, char *err, size_t errlen)
{
    cpu_set_t *want = CPU_ALLOC(DTRAIN_CPU_MAX);
    if (want == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = usable_set(cpulist, want, listed, usable, err, errlen);
    CPU_FREE(want);
    return rc;
}

int dtrain_cpus_allowed(char *buf, size_t len)
{
    size_t size = CPU_ALLOC_SIZE(DTRAIN_CPU_MAX);
    cpu_set_t *now = CPU_ALLOC(DTRAIN_CPU_MAX);
    int rc = -1;
    if (now == NULL)
        return -1;
    CPU_ZERO_S(size, now);
    if (sched_getaffinity(0, size, now) == 0)
        rc = dtrain_cpulist_format(now, buf, len);
    CPU_FREE(now);
    return rc;
}

enum dtrain_bind_result dtrain_bind_to_cpulist(const char *cpulist, char *bound, size_t boundlen,
                                               char *err, size_t errlen)
{
    size_t size = CPU_ALLOC_SIZE(DTRAIN_CPU_MAX);
    cpu_set_t *want = CPU_ALLOC(DTRAIN_CPU_MAX);
    enum dtrain_bind_result rc = DTRAIN_BIND_ERROR;
    int listed = 0, usable = 0;

    if (boundlen > 0)
        bound[0] = '\0';
    if (want == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_BIND_ERROR;
    }
    if (usable_set(cpulist, want, &listed, &usable, err, errlen) != 0)
        goto cleanup;
    if (usable == 0) {
        rc = DTRAIN_BIND_NONE;
        goto cleanup;
    }
    /* Format first: a task is bound only when its DTRAIN_CPUS can say so. */
    if (dtrain_cpulist_format(want, bound, boundlen) != 0) {
        dtrain_snprintf(err, errlen, "the CPU list to bind to does not fit in %zu bytes", boundlen);
        goto cleanup;
    }
    if (sched_setaffinity(0, size, want) != 0) {
        dtrain_snprintf(err, errlen, "sched_setaffinity(%.64s): %s", bound, strerror(errno));
        bound[0] = '\0';
        goto cleanup;
    }
    rc = usable == listed ? DTRAIN_BIND_ALL : DTRAIN_BIND_PART;
cleanup:
    CPU_FREE(want);
    return rc;
}
