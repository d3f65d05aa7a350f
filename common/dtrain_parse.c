/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Strict number parsing and hex helpers; see dtrain_parse.h. */
#include "dtrain_parse.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum dtrain_status dtrain_parse_int(const char *text, long min, long max, const char *what,
                                    long *out, char *err, size_t errlen)
{
    if (text == NULL || *text == '\0') {
        dtrain_snprintf(err, errlen, "%s: a value is required (an integer from %ld to %ld)", what, min, max);
        return DTRAIN_ERR_INPUT;
    }
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9') {
            dtrain_snprintf(err, errlen, "%s: '%.64s' is not a whole number (use an integer from %ld to %ld)",
                            what, text, min, max);
            return DTRAIN_ERR_INPUT;
        }
    }
    errno = 0;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (errno == ERANGE || v < min || v > max) {
        dtrain_snprintf(err, errlen, "%s: %.64s is out of range (use an integer from %ld to %ld)", what, text, min, max);
        return DTRAIN_ERR_INPUT;
    }
    *out = v;
    return DTRAIN_OK;
}

enum dtrain_status dtrain_parse_bool(const char *text, const char *what, int *out, char *err, size_t errlen)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    if (text != NULL) {
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
            if (strcasecmp(text, yes[i]) == 0) { *out = 1; return DTRAIN_OK; }
            if (strcasecmp(text, no[i]) == 0) { *out = 0; return DTRAIN_OK; }
        }
    }
    dtrain_snprintf(err, errlen, "%s: '%.64s' is not a boolean (use yes or no)", what, text ? text : "");
    return DTRAIN_ERR_INPUT;
}

int dtrain_bool_flag_takes(const char *next)
{
    return next != NULL && next[0] != '-';
}

void dtrain_printable(char *text)
{
    for (unsigned char *b = (unsigned char *)text; *b != '\0'; b++)
        if (*b < ' ' || *b > '~')
            *b = '?';
}

int dtrain_hex_encode(const void *data, size_t len, char *out, size_t outlen)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = data;
    if (outlen < 2 * len + 1)
        return -1;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * len] = '\0';
    return 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int dtrain_hex_decode(const char *hex, void *data, size_t len)
{
    unsigned char *b = data;
    for (size_t i = 0; i < len; i++) {
        if (hex[2 * i] == '\0' || hex[2 * i + 1] == '\0')
            return -1;
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return hex[2 * len] == '\0' ? 0 : -1;
}

int dtrain_snprintf(char *buf, size_t len, const char *fmt, ...)
{
    if (buf == NULL || len == 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int dtrain_expand_node(const char *text, const char *node, char *out, size_t outlen)
{
    size_t o = 0;
    if (outlen == 0)
        return -1;
    for (const char *p = text; *p != '\0'; p++) {
        const char *piece;
        char one[2] = {*p, '\0'};
        if (p[0] == '%' && p[1] == 'n') {
            if (node == NULL || node[0] == '\0')
                return -2;
            piece = node;
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            piece = "%";
            p++;
        } else {
            piece = one;
        }
        size_t len = strlen(piece);
        if (o + len >= outlen)
            return -1;
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = '\0';
    return 0;
}

int dtrain_list_append(char *out, size_t outlen, size_t *used, const char *name)
{
    int n = snprintf(out + *used, outlen - *used, "%s%s", *used ? ", " : "", name);
    if (n < 0 || (size_t)n >= outlen - *used)
        return -1;
    *used += (size_t)n;
    return 0;
}
