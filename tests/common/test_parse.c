/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of common/dtrain_parse: the strict number parser every option goes through. */
#include "dtrain_parse.h"
#include "tap.h"

#include <string.h>

static void expect_int_refused(const char *text)
{
    char err[256] = "";
    long v = 12345;
    int rc = dtrain_parse_int(text, 1, 1024, "--dtrain-tp", &v, err, sizeof err);
    ok(rc == -1 && v == 12345 && strstr(err, "--dtrain-tp") != NULL,
       "'%s' is refused with a message naming the option (%s)", text, err);
}

int main(void)
{
    const char *bad[] = {"0", "-1", "abc", "3.5", "1e9", "", " 4", "4 ", "+4", "0x10",
                         "1025", "99999999999999999999999", "4abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_int_refused(bad[i]);

    char err[256];
    long v = 0;
    ok(dtrain_parse_int("8", 1, 1024, "x", &v, err, sizeof err) == 0 && v == 8, "8 is accepted");
    ok(dtrain_parse_int("1024", 1, 1024, "x", &v, err, sizeof err) == 0 && v == 1024, "the maximum is accepted");
    ok(dtrain_parse_int("007", 1, 1024, "x", &v, err, sizeof err) == 0 && v == 7, "leading zeros are accepted");
    ok(dtrain_parse_int(NULL, 1, 2, "x", &v, err, sizeof err) == -1, "NULL is refused");

    int b = -1;
    ok(dtrain_parse_bool("yes", "x", &b, err, sizeof err) == 0 && b == 1, "yes is true");
    ok(dtrain_parse_bool("OFF", "x", &b, err, sizeof err) == 0 && b == 0, "OFF is false");
    ok(dtrain_parse_bool("maybe", "bind", &b, err, sizeof err) == -1 && strstr(err, "bind"), "maybe is refused");

    unsigned char id[128], back[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 37 + 11);
    char hex[257];
    ok(dtrain_hex_encode(id, sizeof id, hex, sizeof hex) == 0 && strlen(hex) == 256, "128 bytes encode to 256 hex digits");
    ok(dtrain_hex_decode(hex, back, sizeof back) == 0 && memcmp(id, back, sizeof id) == 0, "hex round trip");
    ok(dtrain_hex_encode(id, sizeof id, hex, 256) == -1, "a too-small output buffer is refused");
    hex[10] = 'g';
    ok(dtrain_hex_decode(hex, back, sizeof back) == -1, "a bad hex digit is refused");
    ok(dtrain_hex_decode("abcd", back, 3) == -1, "a short hex string is refused");
    ok(dtrain_hex_decode("abcdef00", back, 3) == -1, "a long hex string is refused");

    char small[8];
    ok(dtrain_snprintf(small, sizeof small, "%s", "truncated!") == -1 && strlen(small) == 7, "truncation is reported");

    char path[16];
    ok(dtrain_expand_node("/l/%n/x", "node7", path, sizeof path) == 0 && strcmp(path, "/l/node7/x") == 0, "%%n is the node name");
    ok(dtrain_expand_node("a%%n%", "node7", path, sizeof path) == 0 && strcmp(path, "a%n%") == 0, "%%%% is one %%, a lone %% stays");
    ok(dtrain_expand_node("/l/%n", NULL, path, sizeof path) == -2, "%%n without a node name is refused");
    ok(dtrain_expand_node("/l/%n", "", path, sizeof path) == -2, "%%n with an empty node name is refused");
    ok(dtrain_expand_node("/plain", NULL, path, sizeof path) == 0 && strcmp(path, "/plain") == 0, "no %%n needs no node name");
    ok(dtrain_expand_node("/l/%n", "a-very-long-node", path, sizeof path) == -1, "too long once expanded is refused");
    ok(dtrain_expand_node("0123456789abcde", NULL, path, sizeof path) == 0, "15 bytes fit 16");
    ok(dtrain_expand_node("0123456789abcdef", NULL, path, sizeof path) == -1, "16 bytes do not fit 16");
    return tap_done();
}
