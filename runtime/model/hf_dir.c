/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A Hugging Face model folder's weights: model.safetensors, or the shards
 * of model.safetensors.index.json; see dtrain_hf.h. */
#include "model/dtrain_hf.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"

#define HF_WEIGHTS "model.safetensors"
#define HF_INDEX "model.safetensors.index.json"
/* An index lists names, never data: the header's bound is plenty. */
#define HF_INDEX_MAX DTRAIN_ST_MAX_HEADER
#define HF_PATH_MAX 4096

struct hf_entry {
    const struct dtrain_hf_tensor *t;
    size_t file;
};

struct dtrain_hf_dir {
    char *dir;
    size_t nfiles;
    struct dtrain_st_file **files;
    char **names;          /* the files' names in dir */
    size_t n;
    struct hf_entry *all;    /* file after file, header order */
    struct hf_entry *sorted; /* by name, for lookups */
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct hf_entry *)a)->t->name, ((const struct hf_entry *)b)->t->name);
}

/* A shard name of the index: a plain file name inside the folder (the
 * index is untrusted: never a path out of it). */
static int plain_name(const char *s)
{
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static enum dtrain_status add_file(struct dtrain_hf_dir *d, const char *name, char *err, size_t errlen)
{
    char path[HF_PATH_MAX];
    if (dtrain_snprintf(path, sizeof path, "%s/%s", d->dir, name) != 0) {
        snprintf(err, errlen, "%s: the path of %.80s is too long", d->dir, name);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_st_file **files = realloc(d->files, (d->nfiles + 1) * sizeof *files);
    char **names = files != NULL ? realloc(d->names, (d->nfiles + 1) * sizeof *names) : NULL;
    if (files != NULL)
        d->files = files;
    if (names != NULL)
        d->names = names;
    if (files == NULL || names == NULL || (d->names[d->nfiles] = strdup(name)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", d->dir);
        return DTRAIN_ERR_SYSTEM;
    }
    d->files[d->nfiles] = NULL;
    d->nfiles++;
    return dtrain_st_open(path, &d->files[d->nfiles - 1], err, errlen);
}

/* The shards an index names, each once, in the order first named. */
static enum dtrain_status open_index(struct dtrain_hf_dir *d, const char *path, json_t **map, char *err,
                                     size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    if (dtrain_read_regular(path, "safetensors index", HF_INDEX_MAX, &text, &len, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (root == NULL) {
        snprintf(err, errlen, "%s: not valid JSON: %s", path, jerr.text);
        return DTRAIN_ERR_INPUT;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        snprintf(err, errlen, "%s: no \"weight_map\" object", path);
        json_decref(root);
        return DTRAIN_ERR_INPUT;
    }
    *map = json_incref(wm);
    json_decref(root);
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v) || !plain_name(json_string_value(v))) {
            snprintf(err, errlen, "%s: tensor %s: the file %s%.80s%s is not a plain file name in the folder", path,
                     key, json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "(not a string)",
                     json_is_string(v) ? "\"" : "");
            return DTRAIN_ERR_INPUT;
        }
    }
    json_object_foreach(wm, key, v) {
        const char *file = json_string_value(v);
        int seen = 0;
        for (size_t i = 0; i < d->nfiles && !seen; i++)
            seen = strcmp(d->names[i], file) == 0;
        enum dtrain_status rc = seen ? DTRAIN_OK : add_file(d, file, err, errlen);
        if (rc != DTRAIN_OK)
            return rc;
    }
    return DTRAIN_OK;
}

/* Every tensor of the files once, and (sharded) exactly the index's map. */
static enum dtrain_status build_table(struct dtrain_hf_dir *d, json_t *map, char *err, size_t errlen)
{
    size_t n = 0;
    for (size_t i = 0; i < d->nfiles; i++)
        n += dtrain_st_count(d->files[i]);
    d->all = malloc((n + 1) * sizeof *d->all);
    d->sorted = malloc((n + 1) * sizeof *d->sorted);
    if (d->all == NULL || d->sorted == NULL) {
        snprintf(err, errlen, "%s: out of memory", d->dir);
        return DTRAIN_ERR_SYSTEM;
    }
    for (size_t i = 0; i < d->nfiles; i++)
        for (size_t k = 0; k < dtrain_st_count(d->files[i]); k++)
            d->all[d->n++] = (struct hf_entry){dtrain_st_tensor(d->files[i], k), i};
    memcpy(d->sorted, d->all, n * sizeof *d->all);
    qsort(d->sorted, n, sizeof *d->sorted, by_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(d->sorted[i].t->name, d->sorted[i - 1].t->name) == 0) {
            snprintf(err, errlen, "%s: tensor %s is in both %s and %s", d->dir, d->sorted[i].t->name,
                     d->names[d->sorted[i - 1].file], d->names[d->sorted[i].file]);
            return DTRAIN_ERR_INPUT;
        }
    if (map == NULL)
        return DTRAIN_OK;
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        struct dtrain_hf_tensor probe = {.name = key};
        struct hf_entry want = {&probe, 0}, *e = bsearch(&want, d->sorted, n, sizeof *d->sorted, by_name);
        if (e == NULL || strcmp(d->names[e->file], json_string_value(v)) != 0) {
            snprintf(err, errlen, "%s/%s: tensor %s is not in %s", d->dir, HF_INDEX, key, json_string_value(v));
            return DTRAIN_ERR_INPUT;
        }
    }
    if (json_object_size(map) != n) {
        /* a tensor of a shard the map does not name: find it */
        for (size_t i = 0; i < n; i++)
            if (json_object_get(map, d->all[i].t->name) == NULL) {
                snprintf(err, errlen, "%s/%s: tensor %s of %s is not in the weight map", d->dir, HF_INDEX,
                         d->all[i].t->name, d->names[d->all[i].file]);
                return DTRAIN_ERR_INPUT;
            }
    }
    return DTRAIN_OK;
}

enum dtrain_status dtrain_hf_dir_open(const char *dir, struct dtrain_hf_dir **out, char *err, size_t errlen)
{
    *out = NULL;
    struct dtrain_hf_dir *d = calloc(1, sizeof *d);
    if (d == NULL || (d->dir = strdup(dir)) == NULL) {
        free(d);
        snprintf(err, errlen, "%s: out of memory", dir);
        return DTRAIN_ERR_SYSTEM;
    }
    char path[HF_PATH_MAX], index[HF_PATH_MAX];
    json_t *map = NULL;
    enum dtrain_status rc = DTRAIN_ERR_INPUT;
    struct stat st;
    if (dtrain_snprintf(path, sizeof path, "%s/%s", dir, HF_WEIGHTS) != 0 ||
        dtrain_snprintf(index, sizeof index, "%s/%s", dir, HF_INDEX) != 0) {
        snprintf(err, errlen, "%.80s...: the path is too long", dir);
        goto out;
    }
    /* As transformers: model.safetensors first, else the index. */
    if (stat(path, &st) == 0 || stat(index, &st) != 0)
        rc = add_file(d, HF_WEIGHTS, err, errlen);
    else
        rc = open_index(d, index, &map, err, errlen);
    if (rc == DTRAIN_OK)
        rc = build_table(d, map, err, errlen);
out:
    json_decref(map);
    if (rc != DTRAIN_OK)
        dtrain_hf_dir_close(d);
    else
        *out = d;
    return rc;
}

void dtrain_hf_dir_close(struct dtrain_hf_dir *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->nfiles; i++) {
        dtrain_st_close(d->files[i]);
        free(d->names[i]);
    }
    free(d->files);
    free(d->names);
    free(d->all);
    free(d->sorted);
    free(d->dir);
    free(d);
}

size_t dtrain_hf_dir_count(const struct dtrain_hf_dir *d)
{
    return d->n;
}

const struct dtrain_hf_tensor *dtrain_hf_dir_tensor(const struct dtrain_hf_dir *d, size_t i)
{
    return i < d->n ? d->all[i].t : NULL;
}

static const struct hf_entry *find(const struct dtrain_hf_dir *d, const char *name)
{
    struct dtrain_hf_tensor probe = {.name = name};
    struct hf_entry want = {&probe, 0};
    return bsearch(&want, d->sorted, d->n, sizeof *d->sorted, by_name);
}

const struct dtrain_hf_tensor *dtrain_hf_dir_find(const struct dtrain_hf_dir *d, const char *name)
{
    const struct hf_entry *e = find(d, name);
    return e != NULL ? e->t : NULL;
}

enum dtrain_status dtrain_hf_dir_read_f32(struct dtrain_hf_dir *d, const char *name, int rank,
                                          const int64_t *shape, float *out, char *err, size_t errlen)
{
    const struct hf_entry *e = find(d, name);
    if (e == NULL) {
        snprintf(err, errlen, "%s: no tensor %s", d->dir, name);
        return DTRAIN_ERR_INPUT;
    }
    return dtrain_st_read_f32(d->files[e->file], name, rank, shape, out, err, errlen);
}

/* ---- writing ---- */

static uint64_t tensor_bytes(const struct dtrain_hf_out_tensor *t)
{
    uint64_t c = dtrain_hf_dtype_size(t->dtype);
    for (int i = 0; i < t->rank && i < DTRAIN_HF_MAX_RANK; i++)
        c *= t->shape[i] > 0 ? (uint64_t)t->shape[i] : 0;
    return c;
}

/* Remove a stale weights file that would shadow (or mislead about) the one
 * just written: only a regular file, never through a link. */
static void remove_stale(const char *dir, const char *name)
{
    char path[HF_PATH_MAX];
    struct stat st;
    if (dtrain_snprintf(path, sizeof path, "%s/%s", dir, name) == 0 && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        unlink(path);
}

static const char *const pt_meta[] = {"format", "pt", NULL};

static enum dtrain_status write_index(const char *dir, const struct dtrain_hf_out_tensor *tensors, size_t n,
                                      const size_t *shard_of, size_t nshards, uint64_t total, char *err,
                                      size_t errlen)
{
    char path[HF_PATH_MAX], name[64];
    uint64_t params = 0;
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    enum dtrain_status rc = DTRAIN_ERR_SYSTEM;
    if (root == NULL || meta == NULL || map == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        params += tensor_bytes(&tensors[i]) / dtrain_hf_dtype_size(tensors[i].dtype);
        snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", shard_of[i] + 1, nshards);
        if (json_object_set_new(map, tensors[i].name, json_string(name)) != 0)
            goto oom;
    }
    if (json_object_set_new(meta, "total_parameters", json_integer((json_int_t)params)) != 0 ||
        json_object_set_new(meta, "total_size", json_integer((json_int_t)total)) != 0 ||
        json_object_set(root, "metadata", meta) != 0 || json_object_set(root, "weight_map", map) != 0)
        goto oom;
    /* as transformers: json.dumps(index, indent=2, sort_keys=True) + "\n" */
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (text == NULL)
        goto oom;
    struct dtrain_out_file o;
    if (dtrain_snprintf(path, sizeof path, "%s/%s", dir, HF_INDEX) != 0) {
        snprintf(err, errlen, "%.80s...: the path is too long", dir);
        rc = DTRAIN_ERR_INPUT;
    } else if ((rc = dtrain_out_open(&o, path, err, errlen)) == DTRAIN_OK) {
        dtrain_out_write(&o, text, strlen(text));
        dtrain_out_write(&o, "\n", 1);
        rc = dtrain_out_commit(&o, err, errlen);
    }
    free(text);
    goto out;
oom:
    snprintf(err, errlen, "%s/%s: out of memory", dir, HF_INDEX);
out:
    json_decref(root);
    json_decref(meta);
    json_decref(map);
    return rc;
}

enum dtrain_status dtrain_hf_dir_write(const char *dir, const struct dtrain_hf_out_tensor *tensors, size_t n,
                                       uint64_t max_shard_bytes, char *err, size_t errlen)
{
    char path[HF_PATH_MAX];
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += tensor_bytes(&tensors[i]);
    if (max_shard_bytes == 0 || total <= max_shard_bytes) {
        if (dtrain_snprintf(path, sizeof path, "%s/%s", dir, HF_WEIGHTS) != 0) {
            snprintf(err, errlen, "%.80s...: the path is too long", dir);
            return DTRAIN_ERR_INPUT;
        }
        enum dtrain_status rc = dtrain_st_write(path, tensors, n, pt_meta, err, errlen);
        if (rc == DTRAIN_OK)
            remove_stale(dir, HF_INDEX);
        return rc;
    }
    /* Shards in the given order, a new one when the next tensor would
     * pass the limit (a tensor above it gets a shard of its own). */
    size_t *shard_of = malloc((n + 1) * sizeof *shard_of), nshards = 0;
    if (shard_of == NULL) {
        snprintf(err, errlen, "%s: out of memory", dir);
        return DTRAIN_ERR_SYSTEM;
    }
    uint64_t used = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = tensor_bytes(&tensors[i]);
        if (nshards == 0 || (used > 0 && used + b > max_shard_bytes)) {
            nshards++;
            used = 0;
        }
        shard_of[i] = nshards - 1;
        used += b;
    }
    enum dtrain_status rc = DTRAIN_OK;
    for (size_t s = 0, first = 0; s < nshards && rc == DTRAIN_OK; s++) {
        size_t end = first;
        while (end < n && shard_of[end] == s)
            end++;
        if (dtrain_snprintf(path, sizeof path, "%s/model-%05zu-of-%05zu.safetensors", dir, s + 1, nshards) != 0) {
            snprintf(err, errlen, "%.80s...: the path is too long", dir);
            rc = DTRAIN_ERR_INPUT;
        } else
            rc = dtrain_st_write(path, tensors + first, end - first, pt_meta, err, errlen);
        first = end;
    }
    /* the index last: once it is there, every shard it names is */
    if (rc == DTRAIN_OK)
        rc = write_index(dir, tensors, n, shard_of, nshards, total, err, errlen);
    if (rc == DTRAIN_OK)
        remove_stale(dir, HF_WEIGHTS);
    free(shard_of);
    return rc;
}
