/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Byte-level BPE from a Hugging Face tokenizer.json (dtrain_bpe.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "dtrain_bpe.h"
#include "dtrain_file.h"
#include "dtrain_grow.h"
#include "dtrain_status.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tokenizers' ByteLevel pre-tokenizer with use_regex: GPT-2's pattern. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#define MAX_PATTERNS 4
/* Backtracking steps one match of a split pattern may take: GPT-2's and
 * Llama 3's patterns need a few per byte; a hostile one stops here. */
#define MATCH_LIMIT 10000000u
#define NO_ID UINT32_MAX

struct str_slot { /* the vocabulary's open-addressing table: token string -> id */
    uint32_t off, len, id, used;
};
struct pair_slot { /* merges: (left id, right id) -> (rank, merged id) */
    uint64_t key;
    uint32_t rank, id;
    int used;
};
struct added {
    uint32_t id, off, len;
    int normalized;
};

struct dtrain_bpe {
    char *arena; /* every string: vocabulary tokens, decoded bytes, added contents */
    size_t arena_len, arena_cap;
    struct str_slot *vocab;
    size_t vocab_mask;
    struct pair_slot *pairs;
    size_t pairs_mask;
    uint32_t byte_id[256]; /* the id of each byte's one-character token */
    uint32_t nids;         /* max id + 1 */
    uint32_t *dec_off, *dec_len; /* per id: its bytes in arena (dec_len NO_ID: no such id) */
    struct added *added;
    size_t nadded;
    uint32_t *added_by_byte[256]; /* indices into added, by first byte */
    size_t added_by_byte_n[256];
    int ignore_merges;
    pcre2_code *patterns[MAX_PATTERNS];
    int npatterns;
};

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the others for 256, 257, ... in byte order. */
static void byte_chars(uint32_t map[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++)
        map[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174) ? (uint32_t)b : next++;
}

static size_t utf8_put(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    out[0] = (char)(0xC0 | (c >> 6));
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2; /* the map's characters are all below U+0800 */
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < 2 * n)
        s *= 2;
    return s;
}

static int arena_add(struct dtrain_bpe *b, const void *p, size_t n, uint32_t *off)
{
    while (b->arena_len + n > b->arena_cap) {
        size_t cap = b->arena_cap ? 2 * b->arena_cap : 1 << 16;
        char *a = realloc(b->arena, cap);
        if (a == NULL)
            return -1;
        b->arena = a;
        b->arena_cap = cap;
    }
    if (b->arena_len + n > UINT32_MAX)
        return -1;
    memcpy(b->arena + b->arena_len, p, n);
    *off = (uint32_t)b->arena_len;
    b->arena_len += n;
    return 0;
}

static struct str_slot *vocab_slot(const struct dtrain_bpe *b, const char *s, size_t n)
{
    size_t i = hash_bytes(s, n) & b->vocab_mask;
    for (;; i = (i + 1) & b->vocab_mask) {
        struct str_slot *e = &b->vocab[i];
        if (!e->used || (e->len == n && memcmp(b->arena + e->off, s, n) == 0))
            return e;
    }
}

static uint32_t vocab_find(const struct dtrain_bpe *b, const char *s, size_t n)
{
    const struct str_slot *e = vocab_slot(b, s, n);
    return e->used ? e->id : NO_ID;
}

static struct pair_slot *pair_slot(const struct dtrain_bpe *b, uint32_t l, uint32_t r)
{
    uint64_t key = (uint64_t)l << 32 | r;
    size_t i = hash_u64(key) & b->pairs_mask;
    for (;; i = (i + 1) & b->pairs_mask) {
        struct pair_slot *e = &b->pairs[i];
        if (!e->used || e->key == key)
            return e;
    }
}

/* ------------------------------------------------------------------ load */

struct loader {
    struct dtrain_bpe *b;
    const char *name;
    char *err;
    size_t errlen;
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int bad(struct loader *L, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(L->err, L->errlen, "%s: %s", L->name, what);
    return DTRAIN_ERR_INPUT;
}

static int oom(struct loader *L)
{
    snprintf(L->err, L->errlen, "%s: out of memory", L->name);
    return DTRAIN_ERR_SYSTEM;
}

/* A string field (or JSON null, reported as NULL with *present 0). */
static const char *opt_string(json_t *obj, const char *key, int *present)
{
    json_t *v = json_object_get(obj, key);
    *present = v != NULL && !json_is_null(v);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A boolean field that must be absent, null or `want`. */
static int want_bool(struct loader *L, json_t *obj, const char *where, const char *key, int want)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(L, "%s.%s is not true or false", where, key);
    if (json_is_true(v) != want)
        return bad(L, "%s.%s %s is not supported", where, key, want ? "false" : "true");
    return 0;
}

static int type_is(json_t *obj, const char *type)
{
    json_t *t = json_object_get(obj, "type");
    return json_is_string(t) && strcmp(json_string_value(t), type) == 0;
}

static int add_pattern(struct loader *L, const char *pattern, size_t len, const char *where)
{
    if (L->b->npatterns == MAX_PATTERNS)
        return bad(L, "%s: more than %d split patterns", where, MAX_PATTERNS);
    if (len > DTRAIN_BPE_MAX_PATTERN_BYTES)
        return bad(L, "%s: the pattern is longer than %d bytes", where, DTRAIN_BPE_MAX_PATTERN_BYTES);
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                                   &code, &at, NULL);
    if (re == NULL) {
        char msg[256];
        pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof msg);
        return bad(L, "%s: the pattern does not compile at offset %zu: %s", where, (size_t)at, msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT: the interpreter, slower */
    L->b->patterns[L->b->npatterns++] = re;
    return 0;
}

static int load_pre_one(struct loader *L, json_t *p, const char *where, int *byte_level)
{
    if (!json_is_object(p))
        return bad(L, "%s is not an object", where);
    if (type_is(p, "ByteLevel")) {
        int rc;
        if (*byte_level)
            return bad(L, "%s: a second ByteLevel pre-tokenizer", where);
        *byte_level = 1;
        if ((rc = want_bool(L, p, where, "add_prefix_space", 0)) != 0)
            return rc;
        json_t *r = json_object_get(p, "use_regex");
        if (r != NULL && !json_is_boolean(r))
            return bad(L, "%s.use_regex is not true or false", where);
        if (r == NULL || json_is_true(r)) /* tokenizers' default is true */
            return add_pattern(L, GPT2_PATTERN, strlen(GPT2_PATTERN), where);
        return 0;
    }
    if (type_is(p, "Split")) {
        if (*byte_level)
            return bad(L, "%s: a Split after the ByteLevel pre-tokenizer is not supported", where);
        json_t *pat = json_object_get(p, "pattern"), *re = json_object_get(pat, "Regex");
        json_t *beh = json_object_get(p, "behavior");
        if (!json_is_object(pat) || !json_is_string(re))
            return bad(L, "%s.pattern is not {\"Regex\": \"...\"} (String patterns are not supported)", where);
        if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated") != 0)
            return bad(L, "%s.behavior is not \"Isolated\" (the only one supported)", where);
        int rc = want_bool(L, p, where, "invert", 0);
        if (rc != 0)
            return rc;
        return add_pattern(L, json_string_value(re), json_string_length(re), where);
    }
    return bad(L, "%s: only the ByteLevel and Split pre-tokenizers are supported", where);
}

static int load_pre_tokenizer(struct loader *L, json_t *root)
{
    json_t *p = json_object_get(root, "pre_tokenizer");
    int byte_level = 0, rc = 0;
    if (json_is_object(p) && type_is(p, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return bad(L, "pre_tokenizer.pretokenizers is not an array");
        for (size_t i = 0; i < json_array_size(list) && rc == 0; i++) {
            char where[64];
            snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
            rc = load_pre_one(L, json_array_get(list, i), where, &byte_level);
        }
    } else if (p != NULL && !json_is_null(p)) {
        rc = load_pre_one(L, p, "pre_tokenizer", &byte_level);
    }
    if (rc == 0 && !byte_level)
        return bad(L, "pre_tokenizer: not byte-level (no ByteLevel pre-tokenizer); only byte-level BPE is supported");
    return rc;
}

static int load_decoder(struct loader *L, json_t *root)
{
    json_t *d = json_object_get(root, "decoder");
    if (!json_is_object(d) || !type_is(d, "ByteLevel"))
        return bad(L, "decoder: only the ByteLevel decoder is supported");
    return 0;
}

static int load_vocab(struct loader *L, json_t *model)
{
    struct dtrain_bpe *b = L->b;
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return bad(L, "model.vocab is not an object");
    size_t n = json_object_size(vocab);
    if (n == 0 || n > DTRAIN_BPE_MAX_VOCAB)
        return bad(L, "model.vocab has %zu tokens (1 to %d)", n, DTRAIN_BPE_MAX_VOCAB);
    b->vocab_mask = table_size(n) - 1;
    b->vocab = calloc(b->vocab_mask + 1, sizeof *b->vocab);
    if (b->vocab == NULL)
        return oom(L);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        size_t len = strlen(key);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= DTRAIN_BPE_MAX_VOCAB)
            return bad(L, "model.vocab: a token's id is not an integer from 0 to %d", DTRAIN_BPE_MAX_VOCAB - 1);
        if (len == 0 || len > DTRAIN_BPE_MAX_TOKEN_BYTES)
            return bad(L, "model.vocab: token %lld is empty or longer than %d bytes", (long long)json_integer_value(v),
                       DTRAIN_BPE_MAX_TOKEN_BYTES);
        struct str_slot *e = vocab_slot(b, key, len);
        if (e->used) /* jansson keeps one of duplicate keys; a NUL inside makes two equal */
            return bad(L, "model.vocab: token %lld appears twice", (long long)json_integer_value(v));
        if (arena_add(b, key, len, &e->off) != 0)
            return oom(L);
        e->len = (uint32_t)len;
        e->id = (uint32_t)json_integer_value(v);
        e->used = 1;
        if (e->id + 1 > b->nids)
            b->nids = e->id + 1;
    }
    return 0;
}

/* A merge's two halves, from "a b" or ["a", "b"]. */
static int merge_halves(json_t *m, const char **a, size_t *alen, const char **c, size_t *clen)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = memchr(s, ' ', json_string_length(m));
        if (sp == NULL || strchr(sp + 1, ' ') != NULL)
            return -1;
        *a = s;
        *alen = (size_t)(sp - s);
        *c = sp + 1;
        *clen = json_string_length(m) - *alen - 1;
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *alen = json_string_length(json_array_get(m, 0));
        *c = json_string_value(json_array_get(m, 1));
        *clen = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return -1;
}

static int load_merges(struct loader *L, json_t *model)
{
    struct dtrain_bpe *b = L->b;
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges))
        return bad(L, "model.merges is not an array");
    size_t n = json_array_size(merges);
    if (n > DTRAIN_BPE_MAX_MERGES)
        return bad(L, "model.merges has %zu merges (at most %d)", n, DTRAIN_BPE_MAX_MERGES);
    b->pairs_mask = table_size(n) - 1;
    b->pairs = calloc(b->pairs_mask + 1, sizeof *b->pairs);
    char *joined = malloc(2 * DTRAIN_BPE_MAX_TOKEN_BYTES);
    if (b->pairs == NULL || joined == NULL) {
        free(joined);
        return oom(L);
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *l, *r;
        size_t ll, rl;
        if (merge_halves(json_array_get(merges, i), &l, &ll, &r, &rl) != 0) {
            rc = bad(L, "model.merges[%zu] is not \"a b\" or [\"a\", \"b\"]", i);
            break;
        }
        uint32_t lid = vocab_find(b, l, ll), rid = vocab_find(b, r, rl), mid = NO_ID;
        if (lid != NO_ID && rid != NO_ID && ll + rl <= DTRAIN_BPE_MAX_TOKEN_BYTES) {
            memcpy(joined, l, ll);
            memcpy(joined + ll, r, rl);
            mid = vocab_find(b, joined, ll + rl);
        }
        if (lid == NO_ID || rid == NO_ID)
            rc = bad(L, "model.merges[%zu] names a token that is not in model.vocab", i);
        else if (mid == NO_ID)
            rc = bad(L, "model.merges[%zu]: the merged token is not in model.vocab", i);
        else { /* a repeated merge takes the later rank, as tokenizers does */
            struct pair_slot *e = pair_slot(b, lid, rid);
            e->key = (uint64_t)lid << 32 | rid;
            e->rank = (uint32_t)i;
            e->id = mid;
            e->used = 1;
        }
    }
    free(joined);
    return rc;
}

static int load_model(struct loader *L, json_t *root)
{
    json_t *model = json_object_get(root, "model");
    int present, rc;
    if (!json_is_object(model))
        return bad(L, "model is not an object");
    json_t *type = json_object_get(model, "type");
    if (type != NULL && !type_is(model, "BPE"))
        return bad(L, "model.type is not \"BPE\" (only byte-level BPE is supported)");
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout != NULL && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return bad(L, "model.dropout is not supported");
    const char *s = opt_string(model, "continuing_subword_prefix", &present);
    if (present && (s == NULL || *s != '\0'))
        return bad(L, "model.continuing_subword_prefix is not supported");
    s = opt_string(model, "end_of_word_suffix", &present);
    if (present && (s == NULL || *s != '\0'))
        return bad(L, "model.end_of_word_suffix is not supported");
    if ((rc = want_bool(L, model, "model", "byte_fallback", 0)) != 0)
        return rc;
    json_t *im = json_object_get(model, "ignore_merges");
    if (im != NULL && !json_is_null(im) && !json_is_boolean(im))
        return bad(L, "model.ignore_merges is not true or false");
    L->b->ignore_merges = json_is_true(im);
    if ((rc = load_vocab(L, model)) != 0 || (rc = load_merges(L, model)) != 0)
        return rc;
    /* Every byte needs its one-character token, or some text cannot be
     * encoded (tokenizers would drop it silently). */
    uint32_t map[256];
    byte_chars(map);
    for (int c = 0; c < 256; c++) {
        char u[2];
        size_t n = utf8_put(map[c], u);
        if ((L->b->byte_id[c] = vocab_find(L->b, u, n)) == NO_ID)
            return bad(L, "model.vocab lacks the token of byte 0x%02x: not a byte-level vocabulary", c);
    }
    return 0;
}

static int load_added(struct loader *L, json_t *root)
{
    struct dtrain_bpe *b = L->b;
    json_t *list = json_object_get(root, "added_tokens");
    if (list == NULL || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return bad(L, "added_tokens is not an array");
    size_t n = json_array_size(list);
    if (n > DTRAIN_BPE_MAX_ADDED)
        return bad(L, "added_tokens has %zu tokens (at most %d)", n, DTRAIN_BPE_MAX_ADDED);
    b->added = calloc(n ? n : 1, sizeof *b->added);
    if (b->added == NULL)
        return oom(L);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(list, i), *id = json_object_get(t, "id"), *c = json_object_get(t, "content");
        char where[64];
        int rc;
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_object(t))
            return bad(L, "%s is not an object", where);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= DTRAIN_BPE_MAX_VOCAB)
            return bad(L, "%s.id is not an integer from 0 to %d", where, DTRAIN_BPE_MAX_VOCAB - 1);
        if (!json_is_string(c) || json_string_length(c) == 0 || json_string_length(c) > DTRAIN_BPE_MAX_TOKEN_BYTES)
            return bad(L, "%s.content is not a string of 1 to %d bytes", where, DTRAIN_BPE_MAX_TOKEN_BYTES);
        if ((rc = want_bool(L, t, where, "lstrip", 0)) != 0 || (rc = want_bool(L, t, where, "rstrip", 0)) != 0 ||
            (rc = want_bool(L, t, where, "single_word", 0)) != 0)
            return rc;
        json_t *norm = json_object_get(t, "normalized");
        if (norm != NULL && !json_is_boolean(norm))
            return bad(L, "%s.normalized is not true or false", where);
        struct added *a = &b->added[i];
        a->id = (uint32_t)json_integer_value(id);
        a->len = (uint32_t)json_string_length(c);
        a->normalized = json_is_true(norm);
        for (size_t j = 0; j < i; j++)
            if (b->added[j].id == a->id ||
                (b->added[j].len == a->len && memcmp(b->arena + b->added[j].off, json_string_value(c), a->len) == 0))
                return bad(L, "%s repeats the id or content of added_tokens[%zu]", where, j);
        if (arena_add(b, json_string_value(c), a->len, &a->off) != 0)
            return oom(L);
        b->nadded = i + 1;
        if (a->id + 1 > b->nids)
            b->nids = a->id + 1;
    }
    /* Index by first byte: the text is scanned once, trying only these. */
    for (size_t i = 0; i < b->nadded; i++)
        b->added_by_byte_n[(unsigned char)b->arena[b->added[i].off]]++;
    for (int c = 0; c < 256; c++) {
        if (b->added_by_byte_n[c] == 0)
            continue;
        if ((b->added_by_byte[c] = malloc(b->added_by_byte_n[c] * sizeof(uint32_t))) == NULL)
            return oom(L);
        b->added_by_byte_n[c] = 0;
    }
    for (size_t i = 0; i < b->nadded; i++) {
        unsigned char c = (unsigned char)b->arena[b->added[i].off];
        b->added_by_byte[c][b->added_by_byte_n[c]++] = (uint32_t)i;
    }
    return 0;
}

/* Each id's bytes: an added token's content, a vocabulary token through
 * the inverse byte map (as tokenizers' ByteLevel decoder: a token with a
 * character outside the map stands for its own UTF-8 bytes). */
static int build_decoder(struct loader *L)
{
    struct dtrain_bpe *b = L->b;
    uint32_t map[256];
    int16_t inverse[512];
    byte_chars(map);
    for (int i = 0; i < 512; i++)
        inverse[i] = -1;
    for (int c = 0; c < 256; c++)
        inverse[map[c]] = (int16_t)c;
    b->dec_off = malloc(b->nids * sizeof *b->dec_off);
    b->dec_len = malloc(b->nids * sizeof *b->dec_len);
    if (b->dec_off == NULL || b->dec_len == NULL)
        return oom(L);
    for (uint32_t i = 0; i < b->nids; i++)
        b->dec_len[i] = NO_ID;
    unsigned char out[DTRAIN_BPE_MAX_TOKEN_BYTES];
    for (size_t i = 0; i <= b->vocab_mask; i++) {
        const struct str_slot *e = &b->vocab[i];
        if (!e->used)
            continue;
        if (b->dec_len[e->id] != NO_ID)
            return bad(L, "model.vocab: id %lu belongs to two tokens", (unsigned long)e->id);
        const unsigned char *s = (const unsigned char *)b->arena + e->off;
        size_t n = 0, k = 0;
        int mapped = 1;
        while (k < e->len && mapped) { /* the map's characters are 1 or 2 UTF-8 bytes */
            uint32_t c;
            if (s[k] < 0x80)
                c = s[k++];
            else if ((s[k] & 0xE0) == 0xC0 && k + 1 < e->len && (s[k + 1] & 0xC0) == 0x80) {
                c = (uint32_t)(s[k] & 0x1F) << 6 | (s[k + 1] & 0x3F);
                k += 2;
            } else
                break;
            if (c >= 512 || inverse[c] < 0)
                mapped = 0;
            else
                out[n++] = (unsigned char)inverse[c];
        }
        if (!mapped || k < e->len) {
            n = e->len;
            memcpy(out, s, n);
        }
        /* arena_add may move the arena: s is not used past here */
        if (arena_add(b, out, n, &b->dec_off[e->id]) != 0)
            return oom(L);
        b->dec_len[e->id] = (uint32_t)n;
    }
    for (size_t i = 0; i < b->nadded; i++) {
        /* encoding may reach the id through the vocabulary: one text for both */
        if (b->dec_len[b->added[i].id] != NO_ID &&
            vocab_find(b, b->arena + b->added[i].off, b->added[i].len) != b->added[i].id)
            return bad(L, "added_tokens[%zu] has the id of a different model.vocab token", i);
        b->dec_off[b->added[i].id] = b->added[i].off;
        b->dec_len[b->added[i].id] = b->added[i].len;
    }
    return 0;
}

static int load_json(struct loader *L, json_t *root)
{
    int rc;
    if (!json_is_object(root))
        return bad(L, "not a JSON object");
    json_t *norm = json_object_get(root, "normalizer");
    if (norm != NULL && !json_is_null(norm))
        return bad(L, "normalizer: normalizers are not supported (only null)");
    if ((rc = load_model(L, root)) != 0 || (rc = load_added(L, root)) != 0 || (rc = load_pre_tokenizer(L, root)) != 0 ||
        (rc = load_decoder(L, root)) != 0 || (rc = build_decoder(L)) != 0)
        return rc;
    return 0;
}

/* One line: a hostile file's bytes must not break it (jansson quotes them). */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

int dtrain_bpe_load_text(const char *text, size_t len, const char *name, struct dtrain_bpe **out, char *err,
                         size_t errlen)
{
    struct loader L = {calloc(1, sizeof(struct dtrain_bpe)), name, err, errlen};
    *out = NULL;
    if (L.b == NULL)
        return oom(&L);
    if (len > (size_t)DTRAIN_BPE_MAX_FILE_BYTES) {
        free(L.b);
        return bad(&L, "larger than %ld bytes", DTRAIN_BPE_MAX_FILE_BYTES);
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (root == NULL)
        rc = bad(&L, "not valid JSON: line %d column %d: %s", je.line, je.column, je.text);
    else
        rc = load_json(&L, root);
    json_decref(root);
    if (rc != DTRAIN_OK) {
        one_line(err);
        dtrain_bpe_free(L.b);
        return rc;
    }
    *out = L.b;
    return DTRAIN_OK;
}

int dtrain_bpe_load(const char *path, struct dtrain_bpe **out, char *err, size_t errlen)
{
    char *text;
    size_t len;
    *out = NULL;
    if (dtrain_read_regular(path, "tokenizer", (size_t)DTRAIN_BPE_MAX_FILE_BYTES, &text, &len, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    int rc = dtrain_bpe_load_text(text, len, path, out, err, errlen);
    free(text);
    return rc;
}

void dtrain_bpe_free(struct dtrain_bpe *b)
{
    if (b == NULL)
        return;
    for (int i = 0; i < b->npatterns; i++)
        pcre2_code_free(b->patterns[i]);
    for (int c = 0; c < 256; c++)
        free(b->added_by_byte[c]);
    free(b->added);
    free(b->dec_off);
    free(b->dec_len);
    free(b->vocab);
    free(b->pairs);
    free(b->arena);
    free(b);
}

uint32_t dtrain_bpe_max_id(const struct dtrain_bpe *b)
{
    return b->nids - 1;
}

const unsigned char *dtrain_bpe_token_bytes(const struct dtrain_bpe *b, uint32_t id, size_t *len)
{
    if (id >= b->nids || b->dec_len[id] == NO_ID) {
        *len = 0;
        return NULL;
    }
    *len = b->dec_len[id];
    return (const unsigned char *)b->arena + b->dec_off[id];
}

/* ---------------------------------------------------------------- encode */

struct encoder {
    const struct dtrain_bpe *b;
    uint32_t *ids;
    size_t n, cap;
    /* one word's symbols: ids, and a doubly linked list over positions */
    uint32_t *sym, *prev, *next;
    size_t sym_cap;
    uint64_t *heap; /* (rank << 32 | position): lowest rank first, then leftmost */
    size_t heap_n, heap_cap;
    char *mapped; /* a word through the byte map, for ignore_merges */
    size_t mapped_cap;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    char *err;
    size_t errlen;
};

static int emit(struct encoder *E, uint32_t id)
{
    if (dtrain_grow((void **)&E->ids, &E->cap, E->n, sizeof *E->ids, 4096) != 0)
        return DTRAIN_ERR_SYSTEM;
    E->ids[E->n++] = id;
    return 0;
}

static int heap_push(struct encoder *E, uint64_t v)
{
    if (dtrain_grow((void **)&E->heap, &E->heap_cap, E->heap_n, sizeof *E->heap, 64) != 0)
        return DTRAIN_ERR_SYSTEM;
    size_t i = E->heap_n++;
    while (i > 0 && E->heap[(i - 1) / 2] > v) {
        E->heap[i] = E->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    E->heap[i] = v;
    return 0;
}

static uint64_t heap_pop(struct encoder *E)
{
    uint64_t top = E->heap[0], last = E->heap[--E->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= E->heap_n)
            break;
        if (c + 1 < E->heap_n && E->heap[c + 1] < E->heap[c])
            c++;
        if (E->heap[c] >= last)
            break;
        E->heap[i] = E->heap[c];
        i = c;
    }
    if (E->heap_n > 0)
        E->heap[i] = last;
    return top;
}

/* Queue the merge of the symbols at l and next[l], if there is one. */
static int queue_pair(struct encoder *E, uint32_t l)
{
    if (l == NO_ID || E->next[l] == NO_ID)
        return 0;
    const struct pair_slot *p = pair_slot(E->b, E->sym[l], E->sym[E->next[l]]);
    return p->used ? heap_push(E, (uint64_t)p->rank << 32 | l) : 0;
}

/* One pre-tokenized piece: its bytes' tokens merged by rank, as tokenizers'
 * BPE does (the lowest-ranked pair first, the leftmost among equals). */
static int encode_word(struct encoder *E, const unsigned char *s, size_t len)
{
    const struct dtrain_bpe *b = E->b;
    int rc;
    if (len >= UINT32_MAX)
        return DTRAIN_ERR_SYSTEM;
    if (b->ignore_merges && len <= DTRAIN_BPE_MAX_TOKEN_BYTES) {
        uint32_t map[256];
        size_t m = 0;
        byte_chars(map);
        if (dtrain_grow((void **)&E->mapped, &E->mapped_cap, 2 * DTRAIN_BPE_MAX_TOKEN_BYTES, 1,
                        2 * DTRAIN_BPE_MAX_TOKEN_BYTES + 1) != 0)
            return DTRAIN_ERR_SYSTEM;
        for (size_t i = 0; i < len; i++)
            m += utf8_put(map[s[i]], E->mapped + m);
        uint32_t id = vocab_find(b, E->mapped, m);
        if (id != NO_ID)
            return emit(E, id);
    }
    while (E->sym_cap < len) {
        size_t cap = E->sym_cap ? 2 * E->sym_cap : 256;
        uint32_t *a = realloc(E->sym, cap * sizeof *a), *p, *q;
        if (a == NULL)
            return DTRAIN_ERR_SYSTEM;
        E->sym = a;
        if ((p = realloc(E->prev, cap * sizeof *p)) == NULL)
            return DTRAIN_ERR_SYSTEM;
        E->prev = p;
        if ((q = realloc(E->next, cap * sizeof *q)) == NULL)
            return DTRAIN_ERR_SYSTEM;
        E->next = q;
        E->sym_cap = cap;
    }
    for (size_t i = 0; i < len; i++) {
        E->sym[i] = b->byte_id[s[i]];
        E->prev[i] = i == 0 ? NO_ID : (uint32_t)(i - 1);
        E->next[i] = i + 1 == len ? NO_ID : (uint32_t)(i + 1);
    }
    E->heap_n = 0;
    for (size_t i = 0; i + 1 < len; i++)
        if ((rc = queue_pair(E, (uint32_t)i)) != 0)
            return rc;
    while (E->heap_n > 0) {
        uint64_t top = heap_pop(E);
        uint32_t l = (uint32_t)top, rank = (uint32_t)(top >> 32), r = E->next[l];
        if (E->sym[l] == NO_ID || r == NO_ID)
            continue; /* merged away since it was queued */
        const struct pair_slot *p = pair_slot(b, E->sym[l], E->sym[r]);
        if (!p->used || p->rank != rank)
            continue;
        E->sym[l] = p->id;
        E->sym[r] = NO_ID;
        E->next[l] = E->next[r];
        if (E->next[r] != NO_ID)
            E->prev[E->next[r]] = l;
        if ((rc = queue_pair(E, E->prev[l])) != 0 || (rc = queue_pair(E, l)) != 0)
            return rc;
    }
    for (uint32_t i = 0; i != NO_ID; i = E->next[i])
        if ((rc = emit(E, E->sym[i])) != 0)
            return rc;
    return 0;
}

/* Split s with pattern k (tokenizers' Split, Isolated: the matches and the
 * text between them are the pieces), then each piece with the next. */
static int split(struct encoder *E, int k, const unsigned char *s, size_t len)
{
    if (len == 0)
        return 0;
    if (k == E->b->npatterns)
        return encode_word(E, s, len);
    size_t prev = 0, pos = 0;
    int rc;
    while (pos < len) {
        int m = pcre2_match(E->b->patterns[k], s, len, pos, 0, E->md, E->mc);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            char msg[256];
            pcre2_get_error_message(m, (PCRE2_UCHAR *)msg, sizeof msg);
            snprintf(E->err, E->errlen, "the tokenizer's split pattern %d failed: %s", k + 1, msg);
            return DTRAIN_ERR_INPUT;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(E->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* an empty match splits nothing: try from the next character */
            pos = ms + 1;
            while (pos < len && (s[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if ((rc = split(E, k + 1, s + prev, ms - prev)) != 0 || (rc = split(E, k + 1, s + ms, me - ms)) != 0)
            return rc;
        prev = pos = me;
    }
    return split(E, k + 1, s + prev, len - prev);
}

/* The added tokens with normalized == pass, leftmost-longest, in s; the
 * text between them goes to the next pass, then to the split patterns. */
static int split_added(struct encoder *E, int pass, const unsigned char *s, size_t len)
{
    const struct dtrain_bpe *b = E->b;
    if (pass == 2)
        return split(E, 0, s, len);
    size_t prev = 0;
    int rc;
    for (size_t i = 0; i < len; i++) {
        size_t cn = b->added_by_byte_n[s[i]];
        const struct added *best = NULL;
        for (size_t j = 0; j < cn; j++) {
            const struct added *a = &b->added[b->added_by_byte[s[i]][j]];
            if (a->normalized == pass && a->len <= len - i && (best == NULL || a->len > best->len) &&
                memcmp(b->arena + a->off, s + i, a->len) == 0)
                best = a;
        }
        if (best == NULL)
            continue;
        if ((rc = split_added(E, pass + 1, s + prev, i - prev)) != 0 || (rc = emit(E, best->id)) != 0)
            return rc;
        i += best->len - 1;
        prev = i + 1;
    }
    return split_added(E, pass + 1, s + prev, len - prev);
}

int dtrain_bpe_encode(const struct dtrain_bpe *b, const unsigned char *text, size_t len, uint32_t **ids,
                      size_t *n, char *err, size_t errlen)
{
    struct encoder E = {.b = b, .err = err, .errlen = errlen};
    int rc = DTRAIN_ERR_SYSTEM;
    *ids = NULL;
    *n = 0;
    E.md = pcre2_match_data_create(1, NULL);
    E.mc = pcre2_match_context_create(NULL);
    if (E.md != NULL && E.mc != NULL) {
        pcre2_set_match_limit(E.mc, MATCH_LIMIT);
        rc = split_added(&E, 0, text, len);
    }
    if (rc == DTRAIN_ERR_SYSTEM)
        snprintf(err, errlen, "out of memory encoding %zu bytes", len);
    pcre2_match_data_free(E.md);
    pcre2_match_context_free(E.mc);
    free(E.sym);
    free(E.prev);
    free(E.next);
    free(E.heap);
    free(E.mapped);
    if (rc != DTRAIN_OK) {
        free(E.ids);
        return rc;
    }
    *ids = E.ids;
    *n = E.n;
    return DTRAIN_OK;
}
