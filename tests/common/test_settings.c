/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of common/dtrain_settings: the one settings table and its walk. */
#include "dtrain_settings.h"
#include "dtrain_parse.h"
#include "tap.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sample {
    int flag;
    int count;
    long steps;
    long long bytes;
    uint64_t seed;
    double rate;
    char name[8];
    int order;
    int inner;
};

#define OFF(m) offsetof(struct sample, m)
static const char *const orders[] = {"sequential", "shuffled", NULL};
static const struct dtrain_setting inner_keys[] = {
    {.name = "inner", .type = DTRAIN_SETTING_INT, .offset = OFF(inner), .min = -5, .max = 5},
    {.name = NULL},
};
static const struct dtrain_setting table[] = {
    {.name = "flag", .type = DTRAIN_SETTING_BOOL, .offset = OFF(flag), .min = 0, .max = 1, .alias = "the-flag"},
    {.name = "count", .type = DTRAIN_SETTING_INT, .offset = OFF(count), .min = 1, .max = 10},
    {.name = "steps", .type = DTRAIN_SETTING_LONG, .offset = OFF(steps), .min = 0, .max = 9.2e18},
    {.name = "bytes", .type = DTRAIN_SETTING_LLONG, .offset = OFF(bytes), .min = 0, .max = 1e15},
    {.name = "seed", .type = DTRAIN_SETTING_U64, .offset = OFF(seed), .min = 0, .max = 9.2e18},
    {.name = "rate", .type = DTRAIN_SETTING_REAL, .offset = OFF(rate), .min = 0, .max = 0.5},
    {.name = "name", .type = DTRAIN_SETTING_TEXT, .offset = OFF(name), .size = sizeof(((struct sample *)0)->name)},
    {.name = "order", .type = DTRAIN_SETTING_ENUM, .offset = OFF(order), .names = orders},
    {.name = "nested", .type = DTRAIN_SETTING_OBJECT, .fields = inner_keys},
    {.name = NULL},
};

/* A reader whose messages show what the walk handed it. */
static char msg[1024];

static int set_json(const struct dtrain_settings_reader *r, const struct dtrain_setting *s,
                    const char *where, json_t *v)
{
    int rc = -1;
    switch (s->type) {
    case DTRAIN_SETTING_BOOL:
        rc = json_is_boolean(v) ? dtrain_setting_store_integer(s, r->base, json_is_true(v)) : -1;
        break;
    case DTRAIN_SETTING_INT: case DTRAIN_SETTING_LONG: case DTRAIN_SETTING_LLONG: case DTRAIN_SETTING_U64:
        rc = json_is_integer(v) ? dtrain_setting_store_integer(s, r->base, json_integer_value(v)) : -1;
        break;
    case DTRAIN_SETTING_REAL:
        rc = json_is_number(v) ? dtrain_setting_store_real(s, r->base, json_number_value(v)) : -1;
        break;
    case DTRAIN_SETTING_TEXT:
        rc = json_is_string(v) ? dtrain_setting_store_text(s, r->base, json_string_value(v), json_string_length(v)) : -1;
        break;
    case DTRAIN_SETTING_ENUM:
        rc = json_is_string(v) ? dtrain_setting_store_enum_word(s, r->base, json_string_value(v)) : -1;
        break;
    default:
        break;
    }
    if (rc != 0)
        snprintf(msg, sizeof msg, "bad %s: %s", where, dtrain_settings_json_kind(r, v));
    return rc;
}

static int unknown(const struct dtrain_settings_reader *r, const char *parent, const char *where,
                   const char *key, const char *known)
{
    (void)r;
    snprintf(msg, sizeof msg, "unknown [%s] [%s] [%.64s] (known: %s)", parent, where, key, known);
    return 7;
}

static int not_object(const struct dtrain_settings_reader *r, const char *where, json_t *v)
{
    snprintf(msg, sizeof msg, "not an object [%s]: %s", where, dtrain_settings_json_kind(r, v));
    return -1;
}

static int walk_text(struct sample *out, const char *text)
{
    struct dtrain_settings_reader r = {.integer_words = "an integer", .real_words = "a real number",
                                       .base = out, .set_json = set_json, .unknown = unknown,
                                       .not_object = not_object};
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        snprintf(msg, sizeof msg, "json: %s", jerr.text);
        return -100;
    }
    msg[0] = '\0';
    int rc = dtrain_settings_walk_json(&r, table, NULL, "", root);
    json_decref(root);
    return rc;
}

int main(void)
{
    struct sample s;
    memset(&s, 0, sizeof s);
    ok(walk_text(&s, "{\"flag\": true, \"count\": 10, \"steps\": 123456789012, \"bytes\": 1000000000000000,"
                     " \"seed\": 42, \"rate\": 0.25, \"name\": \"abcdefg\", \"order\": \"shuffled\","
                     " \"nested\": {\"inner\": -5}}") == 0,
       "every type is read (%s)", msg);
    ok(s.flag == 1 && s.count == 10 && s.steps == 123456789012L && s.bytes == 1000000000000000LL &&
       s.seed == 42 && s.rate == 0.25 && strcmp(s.name, "abcdefg") == 0 && s.order == 1 && s.inner == -5,
       "and stored where the table says");

    /* bounds */
    ok(walk_text(&s, "{\"count\": 0}") == -1 && s.count == 10, "below the minimum is refused, nothing stored");
    ok(walk_text(&s, "{\"count\": 11}") == -1 && s.count == 10, "above the maximum is refused");
    ok(walk_text(&s, "{\"rate\": 0.5}") == 0 && s.rate == 0.5, "the real maximum is accepted");
    ok(walk_text(&s, "{\"rate\": 0.5000001}") == -1 && s.rate == 0.5, "a real above it is refused");
    ok(walk_text(&s, "{\"rate\": -0.0}") == 0, "-0 is within [0, 0.5]");
    ok(walk_text(&s, "{\"nested\": {\"inner\": 6}}") == -1 && strcmp(msg, "bad nested.inner: an integer") == 0,
       "a nested value out of range names its path (%s)", msg);

    /* hostile numbers */
    ok(walk_text(&s, "{\"steps\": 9223372036854775807}") == -1, "LLONG_MAX is above 9.2e18");
    ok(walk_text(&s, "{\"bytes\": -9223372036854775807}") == -1, "a huge negative is refused");
    ok(walk_text(&s, "{\"count\": 99999999999999999999999}") == -100, "an integer jansson cannot hold is a JSON error");
    ok(walk_text(&s, "{\"rate\": 1e400}") == -100, "an infinite real is a JSON error");

    /* wrong JSON types, in the reader's words */
    ok(walk_text(&s, "{\"count\": 1.5}") == -1 && strcmp(msg, "bad count: a real number") == 0, "a real for an int (%s)", msg);
    ok(walk_text(&s, "{\"flag\": 1}") == -1 && strcmp(msg, "bad flag: an integer") == 0, "an integer for a bool (%s)", msg);
    ok(walk_text(&s, "{\"name\": null}") == -1 && strcmp(msg, "bad name: null") == 0, "null for a string");
    ok(walk_text(&s, "{\"name\": [1]}") == -1 && strcmp(msg, "bad name: an array") == 0, "an array for a string");
    ok(walk_text(&s, "{\"order\": \"random\"}") == -1 && s.order == 1, "an unknown enum word is refused");
    ok(walk_text(&s, "[1, 2]") == -1 && strcmp(msg, "not an object []: an array") == 0, "the top level must be an object (%s)", msg);
    ok(walk_text(&s, "{\"nested\": \"x\"}") == -1 && strcmp(msg, "not an object [nested]: a string") == 0,
       "a nested object must be an object (%s)", msg);

    /* unknown keys list the known ones */
    ok(walk_text(&s, "{\"cont\": 1}") == 7 &&
       strcmp(msg, "unknown [] [cont] [cont] (known: flag, count, steps, bytes, seed, rate, name, order, nested)") == 0,
       "an unknown key lists the known ones, the reader's answer is returned (%s)", msg);
    ok(walk_text(&s, "{\"nested\": {\"x\": 1}}") == 7 && strcmp(msg, "unknown [nested] [nested.x] [x] (known: inner)") == 0,
       "a nested unknown key lists its object's keys (%s)", msg);

    /* very long strings, NUL bytes: bounded */
    char big[6000];
    memset(big, 'k', sizeof big);
    snprintf(big, sizeof big, "{\"");
    memset(big + 2, 'k', 5000);
    snprintf(big + 5002, sizeof big - 5002, "\": 1}");
    ok(walk_text(&s, big) == 7 && strlen(msg) < sizeof msg - 1, "a 5000-byte key is answered within bounds");
    memset(big, 'v', sizeof big);
    snprintf(big, sizeof big, "{\"name\": \"");
    memset(big + 10, 'v', 5000);
    snprintf(big + 5010, sizeof big - 5010, "\"}");
    ok(walk_text(&s, big) == -1 && strcmp(s.name, "abcdefg") == 0, "a string longer than the buffer is refused");
    ok(walk_text(&s, "{\"name\": \"12345678\"}") == -1, "8 bytes do not fit 8");
    ok(walk_text(&s, "{\"name\": \"ab\\u0000cd\"}") == -1 && strcmp(s.name, "abcdefg") == 0, "a NUL byte is refused");

    /* the table by name and by alias, and the lists */
    ok(dtrain_settings_find(table, NULL, "the-flag=1", 8, 1) == &table[0], "found by alias with a length");
    ok(dtrain_settings_find(table, NULL, "flag", 4, 1) == NULL, "a name is not an alias");
    ok(dtrain_settings_find(table, NULL, "coun", 4, 0) == NULL, "a prefix is not a name");
    char words[64];
    ok(dtrain_setting_enum_words(&table[7], words, sizeof words) == 0 && strcmp(words, "sequential, shuffled") == 0,
       "an enum's words");
    char tiny[12];
    ok(dtrain_settings_known(table, NULL, tiny, sizeof tiny) == -1 && strlen(tiny) < sizeof tiny,
       "a known list cut short is reported and terminated");
    static const struct dtrain_setting grouped[] = {
        {.name = "a", .type = DTRAIN_SETTING_INT, .group = "x"},
        {.name = "b", .type = DTRAIN_SETTING_INT, .group = "y"},
        {.name = "c", .type = DTRAIN_SETTING_INT, .group = "x"},
        {.name = NULL},
    };
    char list[32];
    ok(dtrain_settings_known(grouped, "x", list, sizeof list) == 0 && strcmp(list, "a, c") == 0, "a group's keys");
    ok(dtrain_settings_find(grouped, "x", "b", 1, 0) == NULL && dtrain_settings_find(grouped, "y", "b", 1, 0) == &grouped[1],
       "a key is found in its group only");

    /* key=value */
    char key[8];
    const char *value = NULL;
    ok(dtrain_settings_split("bind=yes", key, sizeof key, &value) == 0 && strcmp(key, "bind") == 0 &&
       strcmp(value, "yes") == 0, "key=value splits");
    ok(dtrain_settings_split("a=b=c", key, sizeof key, &value) == 0 && strcmp(key, "a") == 0 && strcmp(value, "b=c") == 0,
       "at the first =");
    ok(dtrain_settings_split("k=", key, sizeof key, &value) == 0 && value[0] == '\0', "an empty value is a value");
    ok(dtrain_settings_split("=v", key, sizeof key, &value) == -1, "an empty key is refused");
    ok(dtrain_settings_split("novalue", key, sizeof key, &value) == -1, "no = is refused");
    ok(dtrain_settings_split("1234567=v", key, sizeof key, &value) == 0, "7 bytes of key fit 8");
    ok(dtrain_settings_split("12345678=v", key, sizeof key, &value) == -1, "8 bytes of key do not fit 8");
    return tap_done();
}
