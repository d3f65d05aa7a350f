/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A Hugging Face config.json: Llama (and Mistral without a sliding
 * window) and GPT-2, read into struct dtrain_hf_config and written back as
 * save_pretrained does; see dtrain_hf.h. */
#include "model/dtrain_hf.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"

#define HF_CONFIG "config.json"
#define HF_CONFIG_MAX (16u << 20)
#define HF_PATH_MAX 4096

struct reader {
    json_t *root;
    const char *what;
    char *err;
    size_t errlen;
};

static const struct {
    const char *architecture, *model_type;
    enum dtrain_hf_arch arch;
} known[] = {
    {"LlamaForCausalLM", "llama", DTRAIN_HF_LLAMA},
    {"MistralForCausalLM", "mistral", DTRAIN_HF_MISTRAL},
    {"GPT2LMHeadModel", "gpt2", DTRAIN_HF_GPT2},
};
#define NKNOWN (sizeof known / sizeof known[0])

/* An integer key in [min, max]; absent (or null when null_ok) leaves *out. */
static int get_int(struct reader *r, json_t *obj, const char *key, long min, long max, int required, long *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            snprintf(r->err, r->errlen, "%s: no \"%s\"", r->what, key);
        return required ? -1 : 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        snprintf(r->err, r->errlen, "%s: \"%s\" must be an integer in [%ld, %ld]", r->what, key, min, max);
        return -1;
    }
    *out = (long)json_integer_value(v);
    return 0;
}

static int get_intv(struct reader *r, json_t *obj, const char *key, long min, long max, int required, int *out)
{
    long v = *out;
    if (get_int(r, obj, key, min, max, required, &v) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

/* A number in the open range (lo, hi); absent leaves *out. */
static int get_real(struct reader *r, json_t *obj, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || !(x > lo && x < hi)) {
        snprintf(r->err, r->errlen, "%s: \"%s\" must be a number above %g and below %g", r->what, key, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int get_bool(struct reader *r, json_t *obj, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        snprintf(r->err, r->errlen, "%s: \"%s\" must be true or false", r->what, key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* A string key that must equal `want` when present. */
static int want_string(struct reader *r, const char *key, const char *want)
{
    json_t *v = json_object_get(r->root, key);
    if (v == NULL || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), want) == 0))
        return 0;
    snprintf(r->err, r->errlen, "%s: \"%s\" is %s%.40s%s: dtrain's model has %s", r->what, key,
             json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "not a string",
             json_is_string(v) ? "\"" : "", want);
    return -1;
}

/* A boolean key that must be `want` when present. */
static int want_bool(struct reader *r, const char *key, int want, const char *why)
{
    int v = want;
    if (get_bool(r, r->root, key, &v) != 0)
        return -1;
    if (v != want) {
        snprintf(r->err, r->errlen, "%s: \"%s\" is %s: %s", r->what, key, v ? "true" : "false", why);
        return -1;
    }
    return 0;
}

static int read_arch(struct reader *r, struct dtrain_hf_config *c)
{
    json_t *archs = json_object_get(r->root, "architectures"), *mt = json_object_get(r->root, "model_type");
    const char *arch = NULL, *type = json_is_string(mt) ? json_string_value(mt) : NULL;
    if (json_is_array(archs) && json_array_size(archs) > 0)
        arch = json_string_value(json_array_get(archs, 0));
    for (size_t i = 0; i < NKNOWN; i++)
        if ((arch != NULL || type != NULL) && (arch == NULL || strcmp(arch, known[i].architecture) == 0) &&
            (type == NULL || strcmp(type, known[i].model_type) == 0)) {
            c->arch = known[i].arch;
            return 0;
        }
    snprintf(r->err, r->errlen,
             "%s: architecture %.60s (model_type %.40s): dtrain reads LlamaForCausalLM (llama), "
             "MistralForCausalLM (mistral) and GPT2LMHeadModel (gpt2)",
             r->what, arch ? arch : "not given", type ? type : "not given");
    return -1;
}

/* bos_token_id, eos_token_id (an id or a list of ids), dtype. */
static int read_common(struct reader *r, struct dtrain_hf_config *c)
{
    /* ids outside the vocabulary (GPT2Config keeps 50256 whatever vocab_size
     * is) are metadata dtrain never uses: dropped, not refused */
    c->bos_token_id = -1;
    if (get_int(r, r->root, "bos_token_id", 0, INT32_MAX, 0, &c->bos_token_id) != 0)
        return -1;
    if (c->bos_token_id >= c->vocab_size)
        c->bos_token_id = -1;
    json_t *eos = json_object_get(r->root, "eos_token_id");
    size_t n = json_is_array(eos) ? json_array_size(eos) : eos != NULL && !json_is_null(eos) ? 1 : 0;
    if (n > DTRAIN_HF_MAX_EOS) {
        snprintf(r->err, r->errlen, "%s: \"eos_token_id\" lists %zu ids, dtrain keeps at most %d", r->what, n,
                 DTRAIN_HF_MAX_EOS);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            snprintf(r->err, r->errlen, "%s: \"eos_token_id\" must be non-negative ids", r->what);
            return -1;
        }
        if (json_integer_value(v) < c->vocab_size)
            c->eos_token_id[c->n_eos++] = (long)json_integer_value(v);
    }
    json_t *dt = json_object_get(r->root, "dtype");
    if (dt == NULL || json_is_null(dt))
        dt = json_object_get(r->root, "torch_dtype");
    if (dt != NULL && !json_is_null(dt)) {
        const char *s = json_string_value(dt);
        if (s == NULL || (strcmp(s, "float32") != 0 && strcmp(s, "bfloat16") != 0 && strcmp(s, "float16") != 0)) {
            snprintf(r->err, r->errlen, "%s: \"dtype\" %.40s: dtrain reads float32, bfloat16 and float16", r->what,
                     s ? s : "is not a string");
            return -1;
        }
        snprintf(c->dtype, sizeof c->dtype, "%s", s);
    }
    return 0;
}

/* RoPE: transformers 5's "rope_parameters", or the older top-level
 * "rope_theta" and "rope_scaling". */
static int read_rope(struct reader *r, struct dtrain_hf_config *c)
{
    json_t *p = json_object_get(r->root, "rope_parameters");
    if (p == NULL || json_is_null(p))
        p = json_object_get(r->root, "rope_scaling");
    if (p != NULL && !json_is_null(p) && !json_is_object(p)) {
        snprintf(r->err, r->errlen, "%s: \"rope_parameters\" (or \"rope_scaling\") is not an object", r->what);
        return -1;
    }
    c->rope_theta = 10000.0;
    if (get_real(r, r->root, "rope_theta", 0, 1e300, &c->rope_theta) != 0 ||
        (p != NULL && get_real(r, p, "rope_theta", 0, 1e300, &c->rope_theta) != 0))
        return -1;
    c->rope_type = DTRAIN_HF_ROPE_DEFAULT;
    json_t *t = p ? json_object_get(p, "rope_type") : NULL;
    if (t == NULL && p != NULL)
        t = json_object_get(p, "type");
    if (t == NULL || json_is_null(t) || (json_is_string(t) && strcmp(json_string_value(t), "default") == 0))
        return 0;
    if (!json_is_string(t) || strcmp(json_string_value(t), "llama3") != 0) {
        snprintf(r->err, r->errlen, "%s: rope type %.40s: dtrain has default and llama3", r->what,
                 json_is_string(t) ? json_string_value(t) : "(not a string)");
        return -1;
    }
    c->rope_type = DTRAIN_HF_ROPE_LLAMA3;
    c->rope_factor = c->rope_low_freq_factor = c->rope_high_freq_factor = 0;
    c->rope_original_max_positions = 0;
    if (get_real(r, p, "factor", 0, 1e6, &c->rope_factor) != 0 ||
        get_real(r, p, "low_freq_factor", 0, 1e6, &c->rope_low_freq_factor) != 0 ||
        get_real(r, p, "high_freq_factor", 0, 1e6, &c->rope_high_freq_factor) != 0 ||
        get_intv(r, p, "original_max_position_embeddings", 1, 1L << 30, 1, &c->rope_original_max_positions) != 0)
        return -1;
    if (!(c->rope_factor >= 1) || !(c->rope_low_freq_factor > 0) ||
        !(c->rope_high_freq_factor > c->rope_low_freq_factor)) {
        snprintf(r->err, r->errlen,
                 "%s: llama3 rope needs factor >= 1 and 0 < low_freq_factor < high_freq_factor (%g, %g, %g)",
                 r->what, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor);
        return -1;
    }
    return 0;
}

static int read_llama(struct reader *r, struct dtrain_hf_config *c)
{
    json_t *o = r->root;
    c->num_kv_heads = 0;
    c->head_dim = 0;
    c->norm_eps = 1e-6;
    c->tie_word_embeddings = 0;
    if (get_intv(r, o, "hidden_size", 1, 1L << 20, 1, &c->hidden_size) != 0 ||
        get_intv(r, o, "intermediate_size", 1, 1L << 24, 1, &c->intermediate_size) != 0 ||
        get_intv(r, o, "num_hidden_layers", 1, 1L << 16, 1, &c->num_layers) != 0 ||
        get_intv(r, o, "num_attention_heads", 1, c->hidden_size, 1, &c->num_heads) != 0 ||
        get_intv(r, o, "num_key_value_heads", 1, c->num_heads, 0, &c->num_kv_heads) != 0 ||
        get_intv(r, o, "head_dim", 1, 1L << 20, 0, &c->head_dim) != 0 ||
        get_intv(r, o, "vocab_size", 1, 1L << 30, 1, &c->vocab_size) != 0 ||
        get_intv(r, o, "max_position_embeddings", 1, 1L << 30, 1, &c->max_positions) != 0 ||
        get_real(r, o, "rms_norm_eps", 0, 1, &c->norm_eps) != 0 ||
        get_bool(r, o, "tie_word_embeddings", &c->tie_word_embeddings) != 0)
        return -1;
    if (c->num_kv_heads == 0)
        c->num_kv_heads = c->num_heads;
    if (c->hidden_size % c->num_heads != 0 || c->num_heads % c->num_kv_heads != 0 ||
        (c->hidden_size / c->num_heads) % 2 != 0) {
        snprintf(r->err, r->errlen,
                 "%s: hidden_size %d, num_attention_heads %d, num_key_value_heads %d: the heads must divide the "
                 "width into even head sizes and the key-value heads the heads",
                 r->what, c->hidden_size, c->num_heads, c->num_kv_heads);
        return -1;
    }
    if (c->head_dim != 0 && c->head_dim != c->hidden_size / c->num_heads) {
        snprintf(r->err, r->errlen, "%s: head_dim %d is not hidden_size / num_attention_heads = %d", r->what,
                 c->head_dim, c->hidden_size / c->num_heads);
        return -1;
    }
    c->head_dim = c->hidden_size / c->num_heads;
    if (want_string(r, "hidden_act", "silu") != 0 ||
        want_bool(r, "attention_bias", 0, "dtrain's Llama has no biases") != 0 ||
        want_bool(r, "mlp_bias", 0, "dtrain's Llama has no biases") != 0)
        return -1;
    json_t *sw = json_object_get(o, "sliding_window");
    if (sw != NULL && !json_is_null(sw)) {
        snprintf(r->err, r->errlen, "%s: \"sliding_window\" is set: dtrain's attention is over the whole context",
                 r->what);
        return -1;
    }
    return read_rope(r, c);
}

static int read_gpt2(struct reader *r, struct dtrain_hf_config *c)
{
    json_t *o = r->root;
    c->norm_eps = 1e-5;
    c->tie_word_embeddings = 1;
    c->max_positions = 0;
    c->intermediate_size = 0;
    if (get_intv(r, o, "n_embd", 1, 1L << 20, 1, &c->hidden_size) != 0 ||
        get_intv(r, o, "n_layer", 1, 1L << 16, 1, &c->num_layers) != 0 ||
        get_intv(r, o, "n_head", 1, c->hidden_size, 1, &c->num_heads) != 0 ||
        get_intv(r, o, "n_ctx", 1, 1L << 30, 0, &c->max_positions) != 0 ||
        get_intv(r, o, "n_positions", 1, 1L << 30, c->max_positions == 0, &c->max_positions) != 0 ||
        get_intv(r, o, "n_inner", 1, 1L << 24, 0, &c->intermediate_size) != 0 ||
        get_intv(r, o, "vocab_size", 1, 1L << 30, 1, &c->vocab_size) != 0 ||
        get_real(r, o, "layer_norm_epsilon", 0, 1, &c->norm_eps) != 0 ||
        get_bool(r, o, "tie_word_embeddings", &c->tie_word_embeddings) != 0)
        return -1;
    if (c->hidden_size % c->num_heads != 0) {
        snprintf(r->err, r->errlen, "%s: n_embd %d is not a multiple of n_head %d", r->what, c->hidden_size,
                 c->num_heads);
        return -1;
    }
    if (c->intermediate_size == 0)
        c->intermediate_size = 4 * c->hidden_size;
    c->num_kv_heads = c->num_heads;
    c->head_dim = c->hidden_size / c->num_heads;
    if (want_string(r, "activation_function", "gelu_new") != 0 ||
        want_bool(r, "scale_attn_weights", 1, "dtrain's attention scales by 1/sqrt(head size)") != 0 ||
        want_bool(r, "scale_attn_by_inverse_layer_idx", 0, "dtrain's attention does not") != 0 ||
        want_bool(r, "add_cross_attention", 0, "dtrain's GPT-2 is a decoder only") != 0)
        return -1;
    return 0;
}

enum dtrain_status dtrain_hf_config_parse(const char *text, size_t len, const char *what,
                                          struct dtrain_hf_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    struct reader r = {json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), what, err, errlen};
    if (r.root == NULL) {
        snprintf(err, errlen, "%s: not valid JSON: %s (line %d)", what, jerr.text, jerr.line);
        return DTRAIN_ERR_INPUT;
    }
    int bad = !json_is_object(r.root);
    if (bad)
        snprintf(err, errlen, "%s: not a JSON object", what);
    bad = bad || read_arch(&r, c) != 0 ||
          (c->arch == DTRAIN_HF_GPT2 ? read_gpt2(&r, c) : read_llama(&r, c)) != 0 || read_common(&r, c) != 0;
    json_decref(r.root);
    return bad ? DTRAIN_ERR_INPUT : DTRAIN_OK;
}

enum dtrain_status dtrain_hf_config_read(const char *dir, struct dtrain_hf_config *c, char *err, size_t errlen)
{
    char path[HF_PATH_MAX], *text = NULL;
    size_t len = 0;
    if (dtrain_snprintf(path, sizeof path, "%s/%s", dir, HF_CONFIG) != 0) {
        snprintf(err, errlen, "%.80s...: the path is too long", dir);
        return DTRAIN_ERR_INPUT;
    }
    if (dtrain_read_regular(path, "Hugging Face config", HF_CONFIG_MAX, &text, &len, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    enum dtrain_status rc = dtrain_hf_config_parse(text, len, path, c, err, errlen);
    free(text);
    return rc;
}

/* ---- writing: Python's json.dumps(d, indent=2, sort_keys=True) ---- */

/* A finite double as Python's repr: the shortest digits that read back
 * the same, fixed notation for exponents in [-4, 16), else d.ddde+XX. */
static void put_py_float(FILE *m, double x)
{
    char e[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, x);
    const char *s = e;
    if (*s == '-') {
        fputc('-', m);
        s++;
    }
    char digits[24];
    size_t nd = 0;
    for (; *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp = atoi(s + 1);
    if (exp >= -4 && exp < 16) {
        if (exp < 0)
            fprintf(m, "0.%.*s%s", -exp - 1, "0000", digits);
        else if ((size_t)exp + 1 >= nd)
            fprintf(m, "%s%.*s.0", digits, exp + 1 - (int)nd, "0000000000000000");
        else
            fprintf(m, "%.*s.%s", exp + 1, digits, digits + exp + 1);
    } else
        fprintf(m, "%c%s%se%c%02d", digits[0], nd > 1 ? "." : "", digits + 1, exp < 0 ? '-' : '+',
                exp < 0 ? -exp : exp);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int put_py_json(FILE *m, json_t *v, int indent)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        if (n == 0)
            return fputs("{}", m) < 0 ? -1 : 0;
        const char **keys = malloc(n * sizeof *keys), *k;
        json_t *x;
        if (keys == NULL)
            return -1;
        json_object_foreach(v, k, x) keys[i++] = k;
        qsort(keys, n, sizeof *keys, by_key);
        fputs("{\n", m);
        for (i = 0; i < n; i++) {
            fprintf(m, "%*s\"%s\": ", indent + 2, "", keys[i]);
            put_py_json(m, json_object_get(v, keys[i]), indent + 2);
            fputs(i + 1 < n ? ",\n" : "\n", m);
        }
        fprintf(m, "%*s}", indent, "");
        free(keys);
        return 0;
    }
    case JSON_ARRAY:
        if (json_array_size(v) == 0)
            return fputs("[]", m) < 0 ? -1 : 0;
        fputs("[\n", m);
        for (size_t i = 0; i < json_array_size(v); i++) {
            fprintf(m, "%*s", indent + 2, "");
            put_py_json(m, json_array_get(v, i), indent + 2);
            fputs(i + 1 < json_array_size(v) ? ",\n" : "\n", m);
        }
        fprintf(m, "%*s]", indent, "");
        return 0;
    case JSON_STRING: /* our values are plain ASCII names */
        fprintf(m, "\"%s\"", json_string_value(v));
        return 0;
    case JSON_INTEGER:
        fprintf(m, "%lld", (long long)json_integer_value(v));
        return 0;
    case JSON_REAL:
        put_py_float(m, json_real_value(v));
        return 0;
    case JSON_TRUE:
        return fputs("true", m) < 0 ? -1 : 0;
    case JSON_FALSE:
        return fputs("false", m) < 0 ? -1 : 0;
    default:
        return fputs("null", m) < 0 ? -1 : 0;
    }
}

static void set(json_t *o, const char *key, json_t *v)
{
    json_object_set_new(o, key, v);
}

static json_t *config_json(const struct dtrain_hf_config *c)
{
    json_t *o = json_object();
    size_t k = 0;
    while (k + 1 < NKNOWN && known[k].arch != c->arch)
        k++;
    set(o, "architectures", json_pack("[s]", known[k].architecture));
    set(o, "model_type", json_string(known[k].model_type));
    set(o, "vocab_size", json_integer(c->vocab_size));
    set(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    set(o, "initializer_range", json_real(0.02));
    set(o, "use_cache", json_true());
    set(o, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    if (c->n_eos == 1)
        set(o, "eos_token_id", json_integer(c->eos_token_id[0]));
    else if (c->n_eos == 0)
        set(o, "eos_token_id", json_null());
    else {
        json_t *a = json_array();
        for (int i = 0; i < c->n_eos; i++)
            json_array_append_new(a, json_integer(c->eos_token_id[i]));
        set(o, "eos_token_id", a);
    }
    if (c->dtype[0] != '\0')
        set(o, "dtype", json_string(c->dtype));
    if (c->arch == DTRAIN_HF_GPT2) {
        set(o, "activation_function", json_string("gelu_new"));
        set(o, "n_embd", json_integer(c->hidden_size));
        set(o, "n_layer", json_integer(c->num_layers));
        set(o, "n_head", json_integer(c->num_heads));
        set(o, "n_positions", json_integer(c->max_positions));
        set(o, "n_inner", c->intermediate_size == 4 * c->hidden_size ? json_null() : json_integer(c->intermediate_size));
        set(o, "layer_norm_epsilon", json_real(c->norm_eps));
        return o;
    }
    set(o, "hidden_act", json_string("silu"));
    set(o, "hidden_size", json_integer(c->hidden_size));
    set(o, "intermediate_size", json_integer(c->intermediate_size));
    set(o, "num_hidden_layers", json_integer(c->num_layers));
    set(o, "num_attention_heads", json_integer(c->num_heads));
    set(o, "num_key_value_heads", json_integer(c->num_kv_heads));
    set(o, "head_dim", json_integer(c->hidden_size / c->num_heads));
    set(o, "max_position_embeddings", json_integer(c->max_positions));
    set(o, "rms_norm_eps", json_real(c->norm_eps));
    set(o, "attention_dropout", json_real(0.0));
    if (c->arch == DTRAIN_HF_MISTRAL)
        set(o, "sliding_window", json_null());
    else {
        set(o, "attention_bias", json_false());
        set(o, "mlp_bias", json_false());
    }
    json_t *rope = json_object();
    set(rope, "rope_theta", json_real(c->rope_theta));
    set(rope, "rope_type", json_string(c->rope_type == DTRAIN_HF_ROPE_LLAMA3 ? "llama3" : "default"));
    if (c->rope_type == DTRAIN_HF_ROPE_LLAMA3) {
        set(rope, "factor", json_real(c->rope_factor));
        set(rope, "low_freq_factor", json_real(c->rope_low_freq_factor));
        set(rope, "high_freq_factor", json_real(c->rope_high_freq_factor));
        set(rope, "original_max_position_embeddings", json_integer(c->rope_original_max_positions));
    }
    set(o, "rope_parameters", rope);
    return o;
}

enum dtrain_status dtrain_hf_config_write(const char *dir, const struct dtrain_hf_config *c, char *err,
                                          size_t errlen)
{
    char path[HF_PATH_MAX];
    if (dtrain_snprintf(path, sizeof path, "%s/%s", dir, HF_CONFIG) != 0) {
        snprintf(err, errlen, "%.80s...: the path is too long", dir);
        return DTRAIN_ERR_INPUT;
    }
    if (c->num_heads <= 0 || c->hidden_size <= 0 || !isfinite(c->norm_eps) || !isfinite(c->rope_theta) ||
        !isfinite(c->rope_factor) || !isfinite(c->rope_low_freq_factor) || !isfinite(c->rope_high_freq_factor)) {
        snprintf(err, errlen, "%s: the config to write is incomplete", path);
        return DTRAIN_ERR_INPUT;
    }
    json_t *o = config_json(c);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    int bad = o == NULL || m == NULL || put_py_json(m, o, 0) != 0 || fputc('\n', m) == EOF;
    if (m != NULL && fclose(m) != 0)
        bad = 1;
    json_decref(o);
    if (bad) {
        free(text);
        snprintf(err, errlen, "%s: out of memory", path);
        return DTRAIN_ERR_SYSTEM;
    }
    struct dtrain_out_file out;
    enum dtrain_status rc = dtrain_out_open(&out, path, err, errlen);
    if (rc == DTRAIN_OK) {
        dtrain_out_write(&out, text, len);
        rc = dtrain_out_commit(&out, err, errlen);
    }
    free(text);
    return rc;
}
