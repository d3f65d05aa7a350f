/* SPDX-License-Identifier: GPL-2.0-or-later */
/* PCI bus id normalisation; see busid.h. */
#include "busid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"

/* Parse up to maxdigits hex digits ending at `stop`; advance *p past them. */
static int hex_field(const char **p, int maxdigits, char stop, unsigned long *out)
{
    const char *s = *p;
    int n = 0;
    unsigned long v = 0;
    for (; n < maxdigits && s[n] && s[n] != stop; n++) {
        char c = s[n];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + (unsigned long)d;
    }
    if (n == 0 || s[n] != stop)
        return -1;
    *p = s + n + (stop ? 1 : 0);
    *out = v;
    return 0;
}

int health_busid_normalise(const char *in, char *out, size_t outlen)
{
    unsigned long domain = 0, bus, dev, fn;
    const char *p = in;
    /* Three colon/dot separated fields, or four with the domain. */
    int colons = 0;
    for (const char *s = in; *s; s++)
        colons += *s == ':';
    if (colons == 2 && hex_field(&p, 8, ':', &domain) != 0)
        return -1;
    if (colons != 1 && colons != 2)
        return -1;
    if (hex_field(&p, 2, ':', &bus) != 0 || hex_field(&p, 2, '.', &dev) != 0 || hex_field(&p, 1, '\0', &fn) != 0 ||
        dev > 0x1f || fn > 7)
        return -1;
    return dtrain_snprintf(out, outlen, "%04lx:%02lx:%02lx.%lx", domain, bus, dev, fn);
}
