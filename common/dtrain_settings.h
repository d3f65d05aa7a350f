/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One settings table and one walk over it, for every config reader
 * (dtrain-health's site JSON, the plugin's plugstack.conf arguments and site
 * JSON, the trainer's config file and flags).
 *
 * A table is an array of struct dtrain_setting ended by a NULL name: each
 * known key says its type, where it is stored (an offset into the reader's
 * struct) and its range.  The walk finds the keys, builds their "a.b.c"
 * paths, descends into nested objects and lists the known keys when one is
 * not; what a value means and every message stay the reader's, given in a
 * struct dtrain_settings_reader, so that each reader keeps its own words.
 * No allocation beyond jansson's, bounded buffers only. */
#ifndef DTRAIN_SETTINGS_H
#define DTRAIN_SETTINGS_H

#include <jansson.h>
#include <stddef.h>

enum dtrain_setting_type {
    DTRAIN_SETTING_BOOL,   /* int 0/1 */
    DTRAIN_SETTING_INT,    /* int in [min, max] */
    DTRAIN_SETTING_LONG,   /* long in [min, max] */
    DTRAIN_SETTING_LLONG,  /* long long in [min, max] */
    DTRAIN_SETTING_U64,    /* uint64_t in [min, max] */
    DTRAIN_SETTING_REAL,   /* double, finite, in [min, max] */
    DTRAIN_SETTING_TEXT,   /* char[size] */
    DTRAIN_SETTING_ENUM,   /* int: the index of the value in names */
    DTRAIN_SETTING_OBJECT, /* a nested object: fields */
    DTRAIN_SETTING_CUSTOM, /* the reader's own: kind says which */
};

struct dtrain_setting {
    const char *name;
    enum dtrain_setting_type type;
    size_t offset;                       /* into the reader's struct */
    size_t size;                         /* TEXT: bytes of the buffer */
    double min, max;                     /* numbers: the accepted range */
    const struct dtrain_setting *fields; /* OBJECT: its table */
    const char *const *names;            /* ENUM: the words, NULL-ended */
    int kind;                            /* the reader's refinement of type (a path, a size...) */
    const char *group;                   /* flat tables: the object that holds the key (NULL: any) */
    const char *alias;                   /* the key's command-line name, or NULL */
    const char *help;                    /* one line for --help, or NULL */
};

struct dtrain_settings_reader;

/* What a reader does with a value and how it words an error.  Each callback
 * writes its own message and returns non-zero to stop the walk (that value
 * is returned by the walk). */
struct dtrain_settings_reader {
    const char *integer_words; /* a JSON integer in words ("an integer") */
    const char *real_words;    /* a JSON real in words ("a real number") */
    void *base;                /* the struct the offsets point into */
    void *ctx;                 /* the reader's own state */
    /* A known key that is not an object: store value. */
    int (*set_json)(const struct dtrain_settings_reader *r, const struct dtrain_setting *s,
                    const char *where, json_t *value);
    /* key is not in the table under parent ("" at the top); known lists
     * the table's keys ("a, b, c"). */
    int (*unknown)(const struct dtrain_settings_reader *r, const char *parent, const char *where,
                   const char *key, const char *known);
    /* where ("" at the top) should hold an object but holds value. */
    int (*not_object)(const struct dtrain_settings_reader *r, const char *where, json_t *value);
};

/* Bytes of the "a.b.c" path the walk gives (longer paths are cut) and of
 * the known-keys list. */
#define DTRAIN_SETTINGS_WHERE_MAX 256
#define DTRAIN_SETTINGS_KNOWN_MAX 512

/* Walk obj with table (keys in group only, when group is not NULL); prefix
 * is the path of obj ("" at the top).  Returns 0 or the first non-zero a
 * callback returned. */
int dtrain_settings_walk_json(const struct dtrain_settings_reader *r, const struct dtrain_setting *table,
                              const char *group, const char *prefix, json_t *obj);

/* The entry of table named name (len bytes; by alias instead when by_alias),
 * among group's keys when group is not NULL; NULL when there is none. */
const struct dtrain_setting *dtrain_settings_find(const struct dtrain_setting *table, const char *group,
                                                  const char *name, size_t len, int by_alias);

/* The ", "-separated names of table's keys (of group's, when group is not
 * NULL).  Returns -1 when out is too small (it then holds the list cut short). */
int dtrain_settings_known(const struct dtrain_setting *table, const char *group, char *out, size_t outlen);

/* The ", "-separated words of an ENUM setting. */
int dtrain_setting_enum_words(const struct dtrain_setting *s, char *out, size_t outlen);

/* A JSON value's type in words: "an object", "an array", "a string",
 * "a boolean", "null", or the reader's words for integers and reals. */
const char *dtrain_settings_json_kind(const struct dtrain_settings_reader *r, const json_t *value);

/* Split "key=value" into key (a bounded copy) and value.  Returns -1 when
 * there is no '=', the key is empty or it does not fit keylen bytes. */
int dtrain_settings_split(const char *arg, char *key, size_t keylen, const char **value);

/* Where s is stored in base. */
void *dtrain_setting_field(const struct dtrain_setting *s, void *base);

/* Store into s's field in base.  Each returns 0, or -1 and stores nothing:
 * integer: v outside [min, max] (BOOL, INT, LONG, LLONG, U64);
 * real: v not finite or outside [min, max];
 * text: text (len bytes, which must hold no NUL) does not fit size bytes;
 * enum_word: text is not one of names. */
int dtrain_setting_store_integer(const struct dtrain_setting *s, void *base, long long v);
int dtrain_setting_store_real(const struct dtrain_setting *s, void *base, double v);
int dtrain_setting_store_text(const struct dtrain_setting *s, void *base, const char *text, size_t len);
int dtrain_setting_store_enum_word(const struct dtrain_setting *s, void *base, const char *text);

#endif
