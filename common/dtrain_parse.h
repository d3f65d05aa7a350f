/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Strict parsing of user-supplied numbers and small text helpers.
 *
 * Every option, config value and environment variable that dtrain reads goes
 * through these, so "0", "-1", "abc", "3.5", "1e9", " 4", "4 " and overflow
 * are refused the same way everywhere.  No allocation, no global state:
 * safe inside slurmstepd. */
#ifndef DTRAIN_PARSE_H
#define DTRAIN_PARSE_H

#include <stddef.h>

#include "dtrain_status.h"

/* Parse a decimal integer in [min, max]: digits only (no sign, no spaces, no
 * exponent, no leading '+'), no overflow.  Returns DTRAIN_OK and stores
 * *out, or DTRAIN_ERR_INPUT and writes one line into err (without "dtrain:" prefix) naming `what`,
 * the bad text and the accepted range. */
enum dtrain_status dtrain_parse_int(const char *text, long min, long max, const char *what,
                                    long *out, char *err, size_t errlen);

/* Parse a boolean: 1/0, yes/no, true/false, on/off (case-insensitive);
 * as dtrain_parse_int. */
enum dtrain_status dtrain_parse_bool(const char *text, const char *what, int *out,
                                     char *err, size_t errlen);

/* A boolean command-line flag given as "--flag" (no "=VALUE"): 1 when
 * `next`, the argument after it (NULL: none), is its value, 0 when the
 * flag stands alone and means on: at the end, or before an option
 * (`--memory-report --metrics m.jsonl`).  Any other word is the value,
 * for dtrain_parse_bool to take or refuse: a typo is never silently read
 * as the next argument (a config file). */
int dtrain_bool_flag_takes(const char *next);

/* Make text printable ASCII in place: each byte outside ' '..'~' (a
 * control byte, DEL, a byte of UTF-8 or garbage) becomes '?'.  For text
 * read from the machine (sysfs, a library) that ends up in a drain reason,
 * slurmctld's log or one line of output. */
void dtrain_printable(char *text);

/* Hex-encode len bytes into out (2*len+1 bytes needed). Returns 0, or -1 when
 * outlen is too small. */
int dtrain_hex_encode(const void *data, size_t len, char *out, size_t outlen);

/* Decode exactly len bytes from hex text (must be 2*len hex digits).
 * Returns 0, or -1 on bad length or digit. */
int dtrain_hex_decode(const char *hex, void *data, size_t len);

/* snprintf that never overflows and always terminates; returns -1 when the
 * result was truncated (so callers can refuse instead of using a cut path). */
int dtrain_snprintf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copy text into out with "%n" replaced by node and "%%" by "%" (the
 * placeholders of site-config paths and --ckpt-local-dir).  Returns 0, -1
 * when the result does not fit in outlen bytes, or -2 when text uses %n and
 * node is NULL or empty. */
int dtrain_expand_node(const char *text, const char *node, char *out, size_t outlen);

/* Append name to the ", "-separated list in out (*used bytes so far): the
 * known keys a settings table names in its "unknown key" answers.  Returns
 * -1 once out is full (it then holds the list cut short). */
int dtrain_list_append(char *out, size_t outlen, size_t *used, const char *name);

#endif
