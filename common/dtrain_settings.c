/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One settings table and one walk over it; see dtrain_settings.h. */
#include "dtrain_settings.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtrain_parse.h"

static int in_group(const struct dtrain_setting *s, const char *group)
{
    return group == NULL || s->group == NULL || strcmp(s->group, group) == 0;
}

const struct dtrain_setting *dtrain_settings_find(const struct dtrain_setting *table, const char *group,
                                                  const char *name, size_t len, int by_alias)
{
    for (const struct dtrain_setting *s = table; s->name != NULL; s++) {
        const char *n = by_alias ? s->alias : s->name;
        if (n != NULL && in_group(s, group) && strlen(n) == len && strncmp(n, name, len) == 0)
            return s;
    }
    return NULL;
}

int dtrain_settings_known(const struct dtrain_setting *table, const char *group, char *out, size_t outlen)
{
    size_t used = 0;
    if (outlen > 0)
        out[0] = '\0';
    for (const struct dtrain_setting *s = table; s->name != NULL; s++)
        if (in_group(s, group) && dtrain_list_append(out, outlen, &used, s->name) != 0)
            return -1;
    return 0;
}

int dtrain_setting_enum_words(const struct dtrain_setting *s, char *out, size_t outlen)
{
    size_t used = 0;
    if (outlen > 0)
        out[0] = '\0';
    for (const char *const *w = s->names; w != NULL && *w != NULL; w++)
        if (dtrain_list_append(out, outlen, &used, *w) != 0)
            return -1;
    return 0;
}

const char *dtrain_settings_json_kind(const struct dtrain_settings_reader *r, const json_t *value)
{
    switch (json_typeof(value)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return r->integer_words;
    case JSON_REAL: return r->real_words;
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "something else";
}

int dtrain_settings_walk_json(const struct dtrain_settings_reader *r, const struct dtrain_setting *table,
                              const char *group, const char *prefix, json_t *obj)
{
    const char *key;
    json_t *value;
    if (!json_is_object(obj))
        return r->not_object(r, prefix, obj);
    json_object_foreach(obj, key, value) {
        char where[DTRAIN_SETTINGS_WHERE_MAX];
        dtrain_snprintf(where, sizeof where, "%s%s%s", prefix, prefix[0] ? "." : "", key);
        const struct dtrain_setting *s = dtrain_settings_find(table, group, key, strlen(key), 0);
        int rc;
        if (s == NULL) {
            char known[DTRAIN_SETTINGS_KNOWN_MAX];
            dtrain_settings_known(table, group, known, sizeof known);
            rc = r->unknown(r, prefix, where, key, known);
            return rc != 0 ? rc : -1;
        }
        if (s->type == DTRAIN_SETTING_OBJECT)
            rc = dtrain_settings_walk_json(r, s->fields, s->name, where, value);
        else
            rc = r->set_json(r, s, where, value);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int dtrain_settings_split(const char *arg, char *key, size_t keylen, const char **value)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg || (size_t)(eq - arg) >= keylen)
        return -1;
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = '\0';
    *value = eq + 1;
    return 0;
}

void *dtrain_setting_field(const struct dtrain_setting *s, void *base)
{
    return (char *)base + s->offset;
}

int dtrain_setting_store_integer(const struct dtrain_setting *s, void *base, long long v)
{
    if ((double)v < s->min || (double)v > s->max)
        return -1;
    void *f = dtrain_setting_field(s, base);
    switch (s->type) {
    case DTRAIN_SETTING_BOOL:
    case DTRAIN_SETTING_INT: *(int *)f = (int)v; return 0;
    case DTRAIN_SETTING_LONG: *(long *)f = (long)v; return 0;
    case DTRAIN_SETTING_LLONG: *(long long *)f = v; return 0;
    case DTRAIN_SETTING_U64: *(uint64_t *)f = (uint64_t)v; return 0;
    default: return -1;
    }
}

int dtrain_setting_store_real(const struct dtrain_setting *s, void *base, double v)
{
    if (s->type != DTRAIN_SETTING_REAL || !isfinite(v) || v < s->min || v > s->max)
        return -1;
    *(double *)dtrain_setting_field(s, base) = v;
    return 0;
}

int dtrain_setting_store_text(const struct dtrain_setting *s, void *base, const char *text, size_t len)
{
    if (len >= s->size || memchr(text, '\0', len) != NULL)
        return -1;
    char *f = dtrain_setting_field(s, base);
    memcpy(f, text, len);
    f[len] = '\0';
    return 0;
}

int dtrain_setting_store_enum_word(const struct dtrain_setting *s, void *base, const char *text)
{
    for (int i = 0; s->names != NULL && s->names[i] != NULL; i++)
        if (strcmp(text, s->names[i]) == 0) {
            *(int *)dtrain_setting_field(s, base) = i;
            return 0;
        }
    return -1;
}
