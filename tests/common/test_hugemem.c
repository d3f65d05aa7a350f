/* SPDX-License-Identifier: GPL-2.0-or-later */
/* common/dtrain_hugemem.h: blocks zeroed, aligned and whole at every size
 * around the 2 MiB switch; a large block advised for huge pages (its
 * mapping's VmFlags in /proc/self/smaps carry "hg") and costing no RAM
 * until written; sizes it cannot serve refused. */
#include "dtrain_hugemem.h"
#include "tap.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The smaps entry of the mapping holding p: its "Rss:" in kB and whether
 * its VmFlags advise huge pages; 0, or -1 when /proc has no such entry. */
static int mapping_of(const void *p, long *rss_kb, int *advised)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, found = -1;
    uintptr_t a = (uintptr_t)p;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
            if (in)
                break; /* the next mapping: the one wanted is read */
            in = a >= lo && a < hi;
            continue;
        }
        if (!in)
            continue;
        found = 0;
        if (strncmp(line, "Rss:", 4) == 0)
            *rss_kb = strtol(line + 4, NULL, 10);
        if (strncmp(line, "VmFlags:", 8) == 0)
            *advised = strstr(line, " hg") != NULL;
    }
    if (f != NULL)
        fclose(f);
    return found;
}

/* every byte 0, then written and read back at its first, middle and last */
static int zeroed_and_whole(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    memset(p, 0xa5, n);
    return p[0] == 0xa5 && p[n / 2] == 0xa5 && p[n - 1] == 0xa5;
}

int main(void)
{
    const size_t huge = DTRAIN_HUGEMEM_PAGE;
    const size_t sizes[] = {1, 63, 64, 65, 4096, huge - 1, huge, huge + 1, 5 * huge + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *p = dtrain_hugemem_alloc(n);
        ok(p != NULL && ((uintptr_t)p & 63) == 0 && (n < huge || ((uintptr_t)p & (huge - 1)) == 0),
           "%zu bytes: a block, 64-byte aligned%s", n, n >= huge ? " and 2 MiB aligned" : "");
        ok(p != NULL && zeroed_and_whole(p, n), "%zu bytes: zeroed, every byte writable", n);
        dtrain_hugemem_free(p);
    }

    /* a 64 MiB block: a mapping of its own, advised, no RAM until written */
    size_t big = (size_t)64 << 20;
    unsigned char *p = dtrain_hugemem_alloc(big);
    long rss = -1;
    int advised = -1, seen;
    seen = p != NULL ? mapping_of(p, &rss, &advised) : -1;
    ok(seen == 0, "64 MiB: its mapping is in /proc/self/smaps");
    ok(rss >= 0 && rss < 1024, "64 MiB untouched: %ld kB resident (under 1 MiB: the block costs no RAM)", rss);
#ifdef MADV_HUGEPAGE
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (thp != NULL) {
        ok(advised == 1, "64 MiB: advised MADV_HUGEPAGE (VmFlags hg)");
        fclose(thp);
    } else {
        skip("this kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)");
    }
#else
    skip("no MADV_HUGEPAGE in this C library");
#endif
    memset(p + big / 2, 1, 4096);
    seen = mapping_of(p, &rss, &advised);
    ok(seen == 0 && rss >= 4 && rss <= 2048,
       "one page written: %ld kB resident (a 4 KiB page, or the one 2 MiB page it lies in)", rss);
    dtrain_hugemem_free(p);
    seen = mapping_of(p, &rss, &advised);
    ok(seen == -1, "freed: the mapping is gone");

    dtrain_hugemem_free(NULL);
    ok(1, "freeing NULL does nothing");
    ok(dtrain_hugemem_alloc(0) == NULL, "0 bytes: NULL");
    ok(dtrain_hugemem_alloc(SIZE_MAX) == NULL && dtrain_hugemem_alloc(SIZE_MAX - 64) == NULL,
       "SIZE_MAX bytes and just under: NULL, no wrapped size");
    return tap_done();
}
