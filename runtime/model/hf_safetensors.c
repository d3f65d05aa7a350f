/* SPDX-License-Identifier: GPL-2.0-or-later */
/* safetensors files: the checked reader and the writer; see dtrain_hf.h. */
#include "model/dtrain_hf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_kernels.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian: this host is not"
#endif

/* Elements converted per pread of 16-bit data. */
#define ST_CHUNK 65536

struct dtrain_st_file {
    char *path;
    int fd;
    uint64_t data_start; /* 8 + header length */
    uint64_t data_len;
    json_t *root;        /* the header; the tensors' names point into it */
    json_t *meta;        /* "__metadata__", or NULL */
    size_t n;
    struct dtrain_hf_tensor *t;
};

static const char *const dtype_names[] = {"F32", "BF16", "F16"};

const char *dtrain_hf_dtype_name(enum dtrain_hf_dtype t)
{
    return (unsigned)t < 3 ? dtype_names[t] : "?";
}

size_t dtrain_hf_dtype_size(enum dtrain_hf_dtype t)
{
    return t == DTRAIN_HF_F32 ? 4 : 2;
}

/* IEEE half to float, exactly: subnormals normalised, inf kept, a NaN
 * keeps its sign and payload and comes out quiet (as the hardware's
 * conversion, and so torch's, does). */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f)
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0);
    else if (exp != 0)
        u = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0)
        u = sign;
    else {
        uint32_t shift = 0;
        while (!(man & 0x400u)) {
            man <<= 1;
            shift++;
        }
        u = sign | ((113 - shift) << 23) | ((man & 0x3ffu) << 13);
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* "[a, b, c]" into buf. */
static const char *shape_text(char *buf, size_t len, int rank, const int64_t *shape)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

/* One tensor entry of the header: dtype, shape, count and offsets. */
static int parse_tensor(struct dtrain_st_file *f, const char *name, json_t *v, struct dtrain_hf_tensor *t,
                        char *err, size_t errlen)
{
    t->name = name;
    if (!json_is_object(v)) {
        snprintf(err, errlen, "%s: tensor %s: not a JSON object", f->path, name);
        return -1;
    }
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) {
        snprintf(err, errlen, "%s: tensor %s: no \"dtype\" string", f->path, name);
        return -1;
    }
    int found = 0;
    for (int i = 0; i < 3; i++)
        if (strcmp(json_string_value(dt), dtype_names[i]) == 0) {
            t->dtype = (enum dtrain_hf_dtype)i;
            found = 1;
        }
    if (!found) {
        snprintf(err, errlen, "%s: tensor %s has dtype %.32s: dtrain reads F32, BF16 and F16", f->path, name,
                 json_string_value(dt));
        return -1;
    }
    if (!json_is_array(sh)) {
        snprintf(err, errlen, "%s: tensor %s: no \"shape\" list", f->path, name);
        return -1;
    }
    if (json_array_size(sh) > DTRAIN_HF_MAX_RANK) {
        snprintf(err, errlen, "%s: tensor %s has %zu dimensions, dtrain reads at most %d", f->path, name,
                 json_array_size(sh), DTRAIN_HF_MAX_RANK);
        return -1;
    }
    t->rank = (int)json_array_size(sh);
    t->count = 1;
    for (int i = 0; i < t->rank; i++) {
        json_t *d = json_array_get(sh, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            snprintf(err, errlen, "%s: tensor %s: the shape holds something other than a non-negative integer",
                     f->path, name);
            return -1;
        }
        t->shape[i] = json_integer_value(d);
        /* a zero dimension makes the count 0 whatever follows, but the
         * product so far must still fit */
        if ((uint64_t)t->shape[i] > SIZE_MAX || __builtin_mul_overflow(t->count, (size_t)t->shape[i], &t->count)) {
            snprintf(err, errlen, "%s: tensor %s: the shape's element count overflows", f->path, name);
            return -1;
        }
    }
    size_t bytes;
    if (__builtin_mul_overflow(t->count, dtrain_hf_dtype_size(t->dtype), &bytes)) {
        snprintf(err, errlen, "%s: tensor %s: the shape's byte count overflows", f->path, name);
        return -1;
    }
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b)) {
        snprintf(err, errlen, "%s: tensor %s: \"data_offsets\" is not [begin, end] with 0 <= begin <= end",
                 f->path, name);
        return -1;
    }
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    if (t->end - t->begin != bytes) {
        char s[256];
        snprintf(err, errlen, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                 " bytes, its shape %s of %s needs %zu", f->path, name, t->begin, t->end, t->end - t->begin,
                 shape_text(s, sizeof s, t->rank, t->shape), dtype_names[t->dtype], bytes);
        return -1;
    }
    if (t->end > f->data_len) {
        snprintf(err, errlen, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] run past the data (%" PRIu64
                 " bytes)", f->path, name, t->begin, t->end, f->data_len);
        return -1;
    }
    return 0;
}

struct range {
    uint64_t begin, end;
    size_t index;
};

static int by_offset(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end != y->end ? (x->end < y->end ? -1 : 1) : 0;
}

/* The ranges must tile the data from 0 to its end, as the crate checks:
 * no overlap, no gap, nothing unaccounted for. */
static int check_tiling(struct dtrain_st_file *f, char *err, size_t errlen)
{
    struct range *r = malloc((f->n + 1) * sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return -1;
    }
    for (size_t i = 0; i < f->n; i++)
        r[i] = (struct range){f->t[i].begin, f->t[i].end, i};
    qsort(r, f->n, sizeof *r, by_offset);
    uint64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < f->n && rc == 0; i++) {
        const struct dtrain_hf_tensor *t = &f->t[r[i].index];
        if (t->begin < at) {
            snprintf(err, errlen, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor %s",
                     f->path, t->name, t->begin, t->end, f->t[r[i - 1].index].name);
            rc = -1;
        } else if (t->begin > at) {
            snprintf(err, errlen, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] leave a gap after byte %"
                     PRIu64, f->path, t->name, t->begin, t->end, at);
            rc = -1;
        }
        at = t->end;
    }
    if (rc == 0 && at != f->data_len) {
        snprintf(err, errlen, "%s: the tensors hold %" PRIu64 " bytes, the data after the header is %" PRIu64,
                 f->path, at, f->data_len);
        rc = -1;
    }
    free(r);
    return rc;
}

static int parse_header(struct dtrain_st_file *f, const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    f->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (f->root == NULL) {
        snprintf(err, errlen, "%s: the header is not valid JSON: %s", f->path, jerr.text);
        return -1;
    }
    if (!json_is_object(f->root)) {
        snprintf(err, errlen, "%s: the header is not a JSON object", f->path);
        return -1;
    }
    f->t = calloc(json_object_size(f->root) + 1, sizeof *f->t);
    if (f->t == NULL) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach(f->root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (json_is_null(v))
                continue;
            const char *mk;
            json_t *mv;
            int strings = json_is_object(v);
            if (strings)
                json_object_foreach(v, mk, mv) strings = strings && json_is_string(mv);
            if (!strings) {
                snprintf(err, errlen, "%s: \"__metadata__\" is not an object of strings", f->path);
                return -1;
            }
            f->meta = v;
            continue;
        }
        if (parse_tensor(f, key, v, &f->t[f->n], err, errlen) != 0)
            return -1;
        f->n++;
    }
    return check_tiling(f, err, errlen);
}

enum dtrain_status dtrain_st_open(const char *path, struct dtrain_st_file **out, char *err, size_t errlen)
{
    *out = NULL;
    struct dtrain_st_file *f = calloc(1, sizeof *f);
    if (f == NULL || (f->path = strdup(path)) == NULL) {
        free(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return DTRAIN_ERR_SYSTEM;
    }
    off_t size = 0;
    f->fd = dtrain_open_regular(path, O_RDONLY, "safetensors file", &size, err, errlen);
    if (f->fd < 0) {
        dtrain_st_close(f);
        return DTRAIN_ERR_INPUT;
    }
    enum dtrain_status rc = DTRAIN_ERR_INPUT;
    unsigned char len8[8];
    char *text = NULL;
    if (size < 8 || pread(f->fd, len8, 8, 0) != 8) {
        snprintf(err, errlen, "%s: %lld bytes, too short for a safetensors file", path, (long long)size);
        goto out;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len8[i];
    if (hlen > DTRAIN_ST_MAX_HEADER) {
        snprintf(err, errlen, "%s: header length %" PRIu64 " is above the limit of %u bytes", path, hlen,
                 DTRAIN_ST_MAX_HEADER);
        goto out;
    }
    if (hlen > (uint64_t)size - 8) {
        snprintf(err, errlen, "%s: header length %" PRIu64 " runs past the end of the file (%lld bytes)", path,
                 hlen, (long long)size);
        goto out;
    }
    f->data_start = 8 + hlen;
    f->data_len = (uint64_t)size - f->data_start;
    text = malloc(hlen + 1);
    if (text == NULL) {
        snprintf(err, errlen, "%s: out of memory for a header of %" PRIu64 " bytes", path, hlen);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    ssize_t got = hlen ? pread(f->fd, text, hlen, 8) : 0;
    if (got != (ssize_t)hlen) {
        snprintf(err, errlen, "%s: cannot read the header: %s", path, got < 0 ? strerror(errno) : "short read");
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    if (parse_header(f, text, hlen, err, errlen) != 0)
        goto out;
    rc = DTRAIN_OK;
out:
    free(text);
    if (rc != DTRAIN_OK)
        dtrain_st_close(f);
    else
        *out = f;
    return rc;
}

void dtrain_st_close(struct dtrain_st_file *f)
{
    if (f == NULL)
        return;
    if (f->fd >= 0)
        close(f->fd);
    json_decref(f->root);
    free(f->t);
    free(f->path);
    free(f);
}

size_t dtrain_st_count(const struct dtrain_st_file *f)
{
    return f->n;
}

const struct dtrain_hf_tensor *dtrain_st_tensor(const struct dtrain_st_file *f, size_t i)
{
    return i < f->n ? &f->t[i] : NULL;
}

const struct dtrain_hf_tensor *dtrain_st_find(const struct dtrain_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *dtrain_st_metadata(const struct dtrain_st_file *f, const char *key)
{
    return f->meta != NULL ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

/* pread exactly n bytes at the data's offset `at`. */
static int read_data(struct dtrain_st_file *f, const struct dtrain_hf_tensor *t, void *buf, size_t n,
                     uint64_t at, char *err, size_t errlen)
{
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(f->fd, p, n, (off_t)(f->data_start + at));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            snprintf(err, errlen, "%s: tensor %s: %s", f->path, t->name,
                     got < 0 ? strerror(errno) : "the file ends early (changed since it was opened?)");
            return -1;
        }
        p += got;
        n -= (size_t)got;
        at += (uint64_t)got;
    }
    return 0;
}

enum dtrain_status dtrain_st_read_f32(struct dtrain_st_file *f, const char *name, int rank,
                                      const int64_t *shape, float *out, char *err, size_t errlen)
{
    const struct dtrain_hf_tensor *t = dtrain_st_find(f, name);
    if (t == NULL) {
        snprintf(err, errlen, "%s: no tensor %s", f->path, name);
        return DTRAIN_ERR_INPUT;
    }
    if (shape != NULL) {
        int same = rank == t->rank;
        for (int i = 0; same && i < rank; i++)
            same = shape[i] == t->shape[i];
        if (!same) {
            char have[256], need[256];
            snprintf(err, errlen, "%s: tensor %s has shape %s, the model needs %s", f->path, name,
                     shape_text(have, sizeof have, t->rank, t->shape),
                     shape_text(need, sizeof need, rank < 0 ? 0 : rank > DTRAIN_HF_MAX_RANK ? DTRAIN_HF_MAX_RANK : rank,
                                shape));
            return DTRAIN_ERR_INPUT;
        }
    }
    if (t->dtype == DTRAIN_HF_F32)
        return read_data(f, t, out, t->count * 4, t->begin, err, errlen) == 0 ? DTRAIN_OK : DTRAIN_ERR_SYSTEM;
    uint16_t *buf = malloc(ST_CHUNK * sizeof *buf);
    if (buf == NULL) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return DTRAIN_ERR_SYSTEM;
    }
    enum dtrain_status rc = DTRAIN_OK;
    for (size_t done = 0; done < t->count && rc == DTRAIN_OK;) {
        size_t k = t->count - done < ST_CHUNK ? t->count - done : ST_CHUNK;
        if (read_data(f, t, buf, k * 2, t->begin + done * 2, err, errlen) != 0) {
            rc = DTRAIN_ERR_SYSTEM;
            break;
        }
        for (size_t i = 0; i < k; i++)
            out[done + i] = t->dtype == DTRAIN_HF_BF16 ? dtrain_bf16_to_f32(buf[i]) : f16_to_f32(buf[i]);
        done += k;
    }
    free(buf);
    return rc;
}

/* ---- the writer ---- */

/* A JSON string as serde_json writes it: '"' and '\\' escaped, control
 * characters as \b \t \n \f \r or \u00xx (lowercase), the rest as is. */
static void put_json_string(FILE *m, const char *s)
{
    fputc('"', m);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", m); break;
        case '\\': fputs("\\\\", m); break;
        case '\b': fputs("\\b", m); break;
        case '\t': fputs("\\t", m); break;
        case '\n': fputs("\\n", m); break;
        case '\f': fputs("\\f", m); break;
        case '\r': fputs("\\r", m); break;
        default:
            if (*p < 0x20)
                fprintf(m, "\\u%04x", *p);
            else
                fputc(*p, m);
        }
    }
    fputc('"', m);
}

/* Python's order: dtype by alignment (F32, then BF16), then name. */
static int write_order(const void *a, const void *b)
{
    const struct dtrain_hf_out_tensor *x = *(const struct dtrain_hf_out_tensor *const *)a,
                                      *y = *(const struct dtrain_hf_out_tensor *const *)b;
    if (x->dtype != y->dtype)
        return x->dtype < y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int name_order(const void *a, const void *b)
{
    return strcmp((*(const struct dtrain_hf_out_tensor *const *)a)->name,
                  (*(const struct dtrain_hf_out_tensor *const *)b)->name);
}

static size_t out_count(const struct dtrain_hf_out_tensor *t)
{
    size_t c = 1;
    for (int i = 0; i < t->rank; i++)
        c *= (size_t)t->shape[i];
    return c;
}

static int check_out(const char *path, const struct dtrain_hf_out_tensor *t, char *err, size_t errlen)
{
    if (t->name == NULL || t->name[0] == '\0' || strcmp(t->name, "__metadata__") == 0) {
        snprintf(err, errlen, "%s: a tensor without a usable name", path);
        return -1;
    }
    if (t->dtype != DTRAIN_HF_F32 && t->dtype != DTRAIN_HF_BF16) {
        snprintf(err, errlen, "%s: tensor %s: dtrain writes F32 or BF16", path, t->name);
        return -1;
    }
    if (t->rank < 0 || t->rank > DTRAIN_HF_MAX_RANK) {
        snprintf(err, errlen, "%s: tensor %s: rank %d", path, t->name, t->rank);
        return -1;
    }
    size_t c = 1;
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] < 0 || (uint64_t)t->shape[i] > SIZE_MAX ||
            __builtin_mul_overflow(c, (size_t)t->shape[i], &c) || c > SIZE_MAX / 4) {
            snprintf(err, errlen, "%s: tensor %s: a bad shape", path, t->name);
            return -1;
        }
    if (c > 0 && t->data == NULL) {
        snprintf(err, errlen, "%s: tensor %s: no data", path, t->name);
        return -1;
    }
    return 0;
}

enum dtrain_status dtrain_st_write(const char *path, const struct dtrain_hf_out_tensor *tensors, size_t n,
                                   const char *const *meta_kv, char *err, size_t errlen)
{
    const struct dtrain_hf_out_tensor **order = malloc((n + 1) * sizeof *order);
    char *head = NULL;
    size_t head_len = 0;
    FILE *m = NULL;
    uint16_t *buf = NULL;
    enum dtrain_status rc = DTRAIN_ERR_INPUT;
    if (order == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return DTRAIN_ERR_SYSTEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (check_out(path, &tensors[i], err, errlen) != 0)
            goto out;
        order[i] = &tensors[i];
    }
    qsort(order, n, sizeof *order, name_order);
    for (size_t i = 1; i < n; i++)
        if (strcmp(order[i]->name, order[i - 1]->name) == 0) {
            snprintf(err, errlen, "%s: tensor %s given twice", path, order[i]->name);
            goto out;
        }
    qsort(order, n, sizeof *order, write_order);

    /* The header: {"__metadata__":{...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...} */
    rc = DTRAIN_ERR_SYSTEM;
    if ((m = open_memstream(&head, &head_len)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    fputc('{', m);
    int first = 1;
    if (meta_kv != NULL && meta_kv[0] != NULL) {
        fputs("\"__metadata__\":{", m);
        for (size_t i = 0; meta_kv[i] != NULL && meta_kv[i + 1] != NULL; i += 2) {
            if (i)
                fputc(',', m);
            put_json_string(m, meta_kv[i]);
            fputc(':', m);
            put_json_string(m, meta_kv[i + 1]);
        }
        fputc('}', m);
        first = 0;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const struct dtrain_hf_out_tensor *t = order[i];
        uint64_t bytes = (uint64_t)out_count(t) * dtrain_hf_dtype_size(t->dtype);
        if (!first)
            fputc(',', m);
        first = 0;
        put_json_string(m, t->name);
        fprintf(m, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[t->dtype]);
        for (int d = 0; d < t->rank; d++)
            fprintf(m, "%s%" PRId64, d ? "," : "", t->shape[d]);
        fprintf(m, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", at, at + bytes);
        at += bytes;
    }
    fputc('}', m);
    while (ftell(m) % 8 != 0)
        fputc(' ', m);
    if (fclose(m) != 0) {
        m = NULL;
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    m = NULL;

    struct dtrain_out_file o;
    rc = dtrain_out_open(&o, path, err, errlen);
    if (rc != DTRAIN_OK)
        goto out;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)head_len >> (8 * i));
    dtrain_out_write(&o, len8, 8);
    dtrain_out_write(&o, head, head_len);
    buf = malloc(ST_CHUNK * sizeof *buf);
    if (buf == NULL) {
        dtrain_out_abort(&o);
        snprintf(err, errlen, "%s: out of memory", path);
        rc = DTRAIN_ERR_SYSTEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const struct dtrain_hf_out_tensor *t = order[i];
        size_t count = out_count(t);
        if (t->dtype == DTRAIN_HF_F32) {
            dtrain_out_write(&o, t->data, count * 4);
            continue;
        }
        for (size_t done = 0; done < count;) {
            size_t k = count - done < ST_CHUNK ? count - done : ST_CHUNK;
            for (size_t j = 0; j < k; j++)
                buf[j] = dtrain_bf16_from_f32(t->data[done + j]);
            dtrain_out_write(&o, buf, k * 2);
            done += k;
        }
    }
    rc = dtrain_out_commit(&o, err, errlen);
out:
    if (m != NULL)
        fclose(m);
    free(head);
    free(buf);
    free(order);
    return rc;
}
