/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Hugging Face model folders (model/dtrain_hf.h): safetensors written and
 * read back (F32, BF16, F16 widening, shapes, a sharded folder and its
 * index), every kind of hostile header refused with its one line, and
 * config.json for Llama and GPT-2 read, refused and written back. */
#include "model/dtrain_hf.h"
#include "dtrain_kernels.h"
#include "tap.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[1024];
static char path[2048];

static const char *in_dir(const char *name)
{
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* A safetensors file from a header text and n data bytes (0x5a each),
 * the length field `hlen` (or the header's length when -1). */
static const char *raw_file(const char *name, const char *header, long long hlen, size_t n)
{
    FILE *f = fopen(in_dir(name), "wb");
    if (f == NULL)
        abort();
    unsigned long long len = hlen < 0 ? strlen(header) : (unsigned long long)hlen;
    for (int i = 0; i < 8; i++)
        fputc((int)(len >> (8 * i)) & 0xff, f);
    fputs(header, f);
    for (size_t i = 0; i < n; i++)
        fputc(0x5a, f);
    fclose(f);
    return path;
}

static void expect_bad(const char *file, const char *needle, const char *what)
{
    char err[512] = "";
    struct dtrain_st_file *f = NULL;
    int rc = dtrain_st_open(file, &f, err, sizeof err);
    ok(rc == DTRAIN_ERR_INPUT && f == NULL && strstr(err, needle) != NULL && strchr(err, '\n') == NULL, "%s: %s",
       what, err);
    dtrain_st_close(f);
}

static void test_hostile(void)
{
    FILE *sf = fopen(in_dir("short"), "wb");
    fputs("abc", sf);
    fclose(sf);
    expect_bad(path, "too short", "a file shorter than the length field");
    expect_bad(raw_file("past", "{}", 1000, 0), "runs past the end", "a header length past the end");
    expect_bad(raw_file("huge", "{}", 200000000, 0), "above the limit", "a header length above 100 MB");
    expect_bad(raw_file("notjson", "{\"a\": [", -1, 0), "not valid JSON", "a header that is not JSON");
    expect_bad(raw_file("list", "[1, 2]", -1, 0), "not a JSON object", "a header that is a list");
    expect_bad(raw_file("dtype", "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", -1, 8),
               "tensor w has dtype I64", "a dtype dtrain does not read");
    expect_bad(raw_file("neg", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", -1, 4),
               "non-negative integer", "a negative dimension");
    expect_bad(raw_file("overflow",
                        "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}",
                        -1, 4),
               "overflows", "a shape whose element count overflows");
    expect_bad(raw_file("bytes", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", -1, 20),
               "needs 24", "offsets that do not match the shape");
    expect_bad(raw_file("end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 4),
               "run past the data", "offsets past the end of the data");
    expect_bad(raw_file("overlap",
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8),
               "overlap tensor", "overlapping offsets");
    expect_bad(raw_file("gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8),
               "leave a gap", "a gap in the data");
    expect_bad(raw_file("extra", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 8),
               "the data after the header is 8", "data no tensor holds");
    expect_bad(raw_file("dup",
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8),
               "duplicate", "a tensor name given twice");
    expect_bad(raw_file("meta", "{\"__metadata__\":{\"k\":1}}", -1, 0), "not an object of strings",
               "metadata that is not strings");
    expect_bad(raw_file("real", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", -1, 4),
               "non-negative integer", "a dimension that is not an integer");
    expect_bad(raw_file("offs", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", -1, 4),
               "begin <= end", "offsets in the wrong order");
    expect_bad(in_dir("missing"), "missing", "a missing file");
    mkdir(in_dir("adir"), 0755);
    expect_bad(in_dir("adir"), "directory", "a folder where the file belongs");
    /* an empty header of the crate's own: {} and no data */
    char err[512] = "";
    struct dtrain_st_file *f = NULL;
    ok(dtrain_st_open(raw_file("empty", "{}      ", -1, 0), &f, err, sizeof err) == DTRAIN_OK &&
           dtrain_st_count(f) == 0, "an empty file ({} padded) opens with no tensors %s", err);
    dtrain_st_close(f);
}

static void test_round_trip(void)
{
    char err[512] = "";
    float a[6] = {1.5f, -2.25f, 3e-20f, INFINITY, -0.0f, 65504.0f}, b[4] = {0.1f, 1.0f / 3, -7.0f, 1e30f},
          s[1] = {42.0f};
    struct dtrain_hf_out_tensor t[] = {
        {"z.weight", DTRAIN_HF_F32, 2, {2, 3}, a},
        {"a.bias", DTRAIN_HF_BF16, 1, {4}, b},
        {"scalar", DTRAIN_HF_F32, 0, {0}, s},
        {"empty", DTRAIN_HF_BF16, 2, {0, 5}, NULL},
    };
    const char *meta[] = {"format", "pt", NULL};
    ok(dtrain_st_write(in_dir("rt.safetensors"), t, 4, meta, err, sizeof err) == DTRAIN_OK, "write 4 tensors %s", err);
    struct stat st;
    stat(in_dir("rt.safetensors"), &st);
    FILE *fp = fopen(path, "rb");
    unsigned char h8[8] = {0};
    unsigned long long hlen = 0;
    if (fp != NULL && fread(h8, 1, 8, fp) == 8)
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | h8[i];
    ok(hlen % 8 == 0 && (unsigned long long)st.st_size == 8 + hlen + 24 + 8 + 4,
       "the header is padded to a multiple of 8 (%llu bytes), the data follows (%lld bytes in all)", hlen,
       (long long)st.st_size);
    char head[512] = "";
    if (fp != NULL && hlen < sizeof head && fread(head, 1, hlen, fp) == hlen)
        ok(strstr(head, "{\"__metadata__\":{\"format\":\"pt\"},\"scalar\":{\"dtype\":\"F32\",\"shape\":[],"
                        "\"data_offsets\":[0,4]},\"z.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                        "\"data_offsets\":[4,28]},\"a.bias\":{\"dtype\":\"BF16\"") == head,
           "the header is Python's: metadata first, F32 tensors by name, then BF16: %.160s", head);
    if (fp != NULL)
        fclose(fp);

    struct dtrain_st_file *f = NULL;
    ok(dtrain_st_open(in_dir("rt.safetensors"), &f, err, sizeof err) == DTRAIN_OK, "read it back %s", err);
    if (f == NULL)
        return;
    ok(dtrain_st_count(f) == 4 && strcmp(dtrain_st_tensor(f, 0)->name, "scalar") == 0 &&
           strcmp(dtrain_st_tensor(f, 3)->name, "empty") == 0 && dtrain_st_tensor(f, 4) == NULL,
       "4 tensors in the header's order");
    ok(dtrain_st_metadata(f, "format") != NULL && strcmp(dtrain_st_metadata(f, "format"), "pt") == 0 &&
           dtrain_st_metadata(f, "other") == NULL, "the metadata");
    const struct dtrain_hf_tensor *z = dtrain_st_find(f, "z.weight");
    ok(z != NULL && z->dtype == DTRAIN_HF_F32 && z->rank == 2 && z->shape[0] == 2 && z->shape[1] == 3 &&
           z->count == 6, "z.weight: F32 [2, 3]");
    float out[8];
    int64_t want[2] = {2, 3}, wrong[2] = {3, 2};
    ok(dtrain_st_read_f32(f, "z.weight", 2, want, out, err, sizeof err) == DTRAIN_OK && memcmp(out, a, sizeof a) == 0,
       "F32 values bit for bit");
    ok(dtrain_st_read_f32(f, "z.weight", 2, wrong, out, err, sizeof err) == DTRAIN_ERR_INPUT &&
           strstr(err, "tensor z.weight has shape [2, 3], the model needs [3, 2]") != NULL, "a shape mismatch: %s", err);
    ok(dtrain_st_read_f32(f, "nope", 0, NULL, out, err, sizeof err) == DTRAIN_ERR_INPUT &&
           strstr(err, "no tensor nope") != NULL, "a missing tensor: %s", err);
    int same = dtrain_st_read_f32(f, "a.bias", 1, (int64_t[]){4}, out, err, sizeof err) == DTRAIN_OK;
    for (int i = 0; i < 4; i++)
        same = same && out[i] == dtrain_bf16_to_f32(dtrain_bf16_from_f32(b[i]));
    ok(same, "BF16 values rounded to nearest even and widened exactly");
    ok(dtrain_st_read_f32(f, "scalar", 0, (int64_t[]){0}, out, err, sizeof err) == DTRAIN_OK && out[0] == 42.0f,
       "a rank-0 tensor");
    ok(dtrain_st_read_f32(f, "empty", 2, (int64_t[]){0, 5}, out, err, sizeof err) == DTRAIN_OK, "an empty tensor");
    dtrain_st_close(f);

    /* F16: every bit pattern against a reference widening through double */
    static uint16_t h[65536];
    char header[128];
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    snprintf(header, sizeof header, "{\"h\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[0,131072]}}");
    FILE *w = fopen(in_dir("f16.safetensors"), "wb");
    unsigned long long len = strlen(header);
    fwrite(&len, 8, 1, w);
    fputs(header, w);
    fwrite(h, 2, 65536, w);
    fclose(w);
    static float hf[65536];
    int bad = 0;
    if (dtrain_st_open(in_dir("f16.safetensors"), &f, err, sizeof err) == DTRAIN_OK &&
        dtrain_st_read_f32(f, "h", 1, NULL, hf, err, sizeof err) == DTRAIN_OK) {
        for (int i = 0; i < 65536; i++) {
            int e = (i >> 10) & 31, m = i & 1023;
            double ref = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
            if (i & 0x8000)
                ref = -ref;
            uint32_t bits;
            memcpy(&bits, &hf[i], 4);
            if (e == 31 && m) /* NaN: sign and payload kept, made quiet */
                bad += !(isnan(hf[i]) && (bits >> 31) == (unsigned)(i >> 15) &&
                         ((bits >> 13) & 1023) == ((unsigned)m | 0x200));
            else
                bad += !((double)hf[i] == ref && !signbit(hf[i]) == !signbit(ref));
        }
    } else
        bad = -1;
    ok(bad == 0, "F16: all 65536 values widened exactly (subnormals, inf, NaN payloads made quiet, -0): %d wrong %s", bad, err);
    dtrain_st_close(f);
}

static void test_folders(void)
{
    char err[512] = "", sub[1100];
    float v[12];
    for (int i = 0; i < 12; i++)
        v[i] = (float)i * 0.5f;
    struct dtrain_hf_out_tensor t[] = {
        {"embed", DTRAIN_HF_F32, 2, {3, 2}, v},
        {"layer.0", DTRAIN_HF_F32, 1, {4}, v + 6},
        {"layer.1", DTRAIN_HF_BF16, 1, {2}, v + 10},
    };
    /* one file */
    snprintf(sub, sizeof sub, "%s/one", dir);
    mkdir(sub, 0755);
    ok(dtrain_hf_dir_write(sub, t, 3, 0, err, sizeof err) == DTRAIN_OK, "a folder with model.safetensors %s", err);
    struct dtrain_hf_dir *d = NULL;
    ok(dtrain_hf_dir_open(sub, &d, err, sizeof err) == DTRAIN_OK && dtrain_hf_dir_count(d) == 3,
       "opened: 3 tensors %s", err);
    dtrain_hf_dir_close(d);
    /* sharded: 24 + 16 + 4 bytes, at most 30 a shard: 3 shards */
    snprintf(sub, sizeof sub, "%s/shards", dir);
    mkdir(sub, 0755);
    ok(dtrain_hf_dir_write(sub, t, 3, 30, err, sizeof err) == DTRAIN_OK, "a sharded folder %s", err);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", sub);
    struct stat st;
    ok(stat(path, &st) == 0, "two shards (24 bytes, then 16 + 4): model-00002-of-00002.safetensors");
    ok(dtrain_hf_dir_open(sub, &d, err, sizeof err) == DTRAIN_OK && dtrain_hf_dir_count(d) == 3,
       "opened through the index: 3 tensors %s", err);
    if (d != NULL) {
        float out[6];
        ok(dtrain_hf_dir_read_f32(d, "layer.0", 1, (int64_t[]){4}, out, err, sizeof err) == DTRAIN_OK &&
               memcmp(out, v + 6, 16) == 0 && dtrain_hf_dir_find(d, "embed") != NULL &&
               dtrain_hf_dir_find(d, "layer.1")->dtype == DTRAIN_HF_BF16,
           "a tensor of the second shard read through the folder");
        ok(dtrain_hf_dir_read_f32(d, "missing", 0, NULL, out, err, sizeof err) == DTRAIN_ERR_INPUT &&
               strstr(err, "no tensor missing") != NULL, "a missing tensor: %s", err);
    }
    dtrain_hf_dir_close(d);

    /* hostile indexes */
    static const struct {
        const char *index, *needle, *what;
    } bad[] = {
        {"{\"weight_map\":{\"embed\":\"../one/model.safetensors\"}}", "not a plain file name", "a shard with '/'"},
        {"{\"weight_map\":{\"embed\":\"..\"}}", "not a plain file name", "a shard named .."},
        {"{\"weight_map\":{\"embed\":\"/etc/passwd\"}}", "not a plain file name", "an absolute shard path"},
        {"{\"weight_map\":{\"embed\":7}}", "not a plain file name", "a shard that is not a string"},
        {"{\"weight_map\":{\"layer.0\":\"model-00002-of-00002.safetensors\"}}", "not in the weight map",
         "a shard tensor the map does not name"},
        {"{\"weight_map\":{\"embed\":\"model-00002-of-00002.safetensors\", \"layer.0\":\"model-00002-of-00002.safetensors\","
         "\"layer.1\":\"model-00002-of-00002.safetensors\"}}",
         "tensor embed is not in", "a map that names the wrong shard"},
        {"{\"weight_map\":{\"x\":\"nothere.safetensors\"}}", "cannot open", "a missing shard"},
        {"{\"weight_map\":[]}", "no \"weight_map\"", "no weight map"},
        {"not json", "not valid JSON", "an index that is not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", sub);
        FILE *f = fopen(path, "w");
        fputs(bad[i].index, f);
        fclose(f);
        d = NULL;
        int rc = dtrain_hf_dir_open(sub, &d, err, sizeof err);
        ok(rc != DTRAIN_OK && d == NULL && strstr(err, bad[i].needle) != NULL, "%s: %s", bad[i].what, err);
        dtrain_hf_dir_close(d);
    }
    snprintf(sub, sizeof sub, "%s/empty", dir);
    mkdir(sub, 0755);
    ok(dtrain_hf_dir_open(sub, &d, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "model.safetensors") != NULL,
       "a folder without weights: %s", err);
    /* the writer never replaces a link */
    snprintf(sub, sizeof sub, "%s/link", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", sub);
    ok(symlink("/dev/null", path) == 0 && dtrain_hf_dir_write(sub, t, 3, 0, err, sizeof err) == DTRAIN_ERR_INPUT &&
           strstr(err, "symbolic link") != NULL, "model.safetensors a symbolic link: refused: %s", err);
    ok(dtrain_st_write(in_dir("dup.safetensors"),
                       (struct dtrain_hf_out_tensor[]){{"a", DTRAIN_HF_F32, 1, {1}, v}, {"a", DTRAIN_HF_BF16, 1, {1}, v}},
                       2, NULL, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "given twice") != NULL,
       "a name given twice to the writer: %s", err);
}

static const char llama_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"vocab_size\": 100, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, \"hidden_act\": \"silu\","
    " \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", \"factor\": 8.0,"
    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64},"
    " \"bos_token_id\": 1, \"eos_token_id\": [2, 3], \"dtype\": \"bfloat16\", \"head_dim\": 16}";

/* The Llama config with key set to the JSON value `value` (NULL: as is). */
static int parse_llama(const char *key, const char *value, struct dtrain_hf_config *c, char *err, size_t errlen)
{
    json_t *o = json_loads(llama_json, 0, NULL);
    if (key != NULL)
        json_object_set_new(o, key, json_loads(value, JSON_DECODE_ANY, NULL));
    char *text = json_dumps(o, 0);
    int rc = dtrain_hf_config_parse(text, strlen(text), "config.json", c, err, errlen);
    free(text);
    json_decref(o);
    return rc;
}

static void test_config(void)
{
    char err[512] = "";
    struct dtrain_hf_config c, back;
    ok(parse_llama(NULL, NULL, &c, err, sizeof err) == DTRAIN_OK && c.arch == DTRAIN_HF_LLAMA && c.hidden_size == 64 &&
           c.num_kv_heads == 2 && c.head_dim == 16 && c.rope_type == DTRAIN_HF_ROPE_LLAMA3 &&
           c.rope_theta == 500000.0 && c.rope_factor == 8.0 && c.rope_original_max_positions == 64 &&
           c.tie_word_embeddings == 0 && c.n_eos == 2 && c.eos_token_id[1] == 3 && strcmp(c.dtype, "bfloat16") == 0,
       "a Llama config (GQA, llama3 rope, untied) %s", err);
    static const struct {
        const char *key, *value, *needle;
    } bad[] = {
        {"hidden_act", "\"gelu\"", "hidden_act"},
        {"attention_bias", "true", "no biases"},
        {"mlp_bias", "true", "no biases"},
        {"head_dim", "32", "head_dim 32"},
        {"num_key_value_heads", "3", "key-value heads"},
        {"rms_norm_eps", "-1", "rms_norm_eps"},
        {"hidden_size", "0", "hidden_size"},
        {"rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 2}", "rope type yarn"},
        {"rope_parameters", "{\"rope_type\": \"llama3\", \"factor\": 0.5, \"low_freq_factor\": 1,"
         " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8}", "factor >= 1"},
        {"sliding_window", "4096", "sliding_window"},
        {"eos_token_id", "-1", "eos_token_id"},
        {"architectures", "[\"BertModel\"]", "architecture BertModel"},
        {"model_type", "\"gpt2\"", "architecture LlamaForCausalLM (model_type gpt2)"},
        {"vocab_size", "\"100\"", "vocab_size"},
        {"dtype", "\"float64\"", "float64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse_llama(bad[i].key, bad[i].value, &c, err, sizeof err);
        ok(rc == DTRAIN_ERR_INPUT && strstr(err, bad[i].needle) != NULL && strncmp(err, "config.json: ", 13) == 0,
           "refused: %s", err);
    }
    const char *dup = "{\"model_type\": \"llama\", \"model_type\": \"gpt2\"}";
    ok(dtrain_hf_config_parse(dup, strlen(dup), "config.json", &c, err, sizeof err) == DTRAIN_ERR_INPUT &&
           strstr(err, "duplicate") != NULL, "a key given twice: %s", err);
    const char *legacy = "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16,"
                         " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 10,"
                         " \"max_position_embeddings\": 16, \"rope_theta\": 1000.0, \"rope_scaling\": null}";
    ok(dtrain_hf_config_parse(legacy, strlen(legacy), "legacy", &c, err, sizeof err) == DTRAIN_OK &&
           c.rope_theta == 1000.0 && c.rope_type == DTRAIN_HF_ROPE_DEFAULT && c.num_kv_heads == 2 &&
           c.bos_token_id == -1 && c.n_eos == 0 && c.norm_eps == 1e-6,
       "the older form (top-level rope_theta, no kv heads: = heads) %s", err);
    const char *gpt2 = "{\"model_type\": \"gpt2\", \"n_embd\": 768, \"n_layer\": 12, \"n_head\": 12,"
                       " \"n_positions\": 1024, \"vocab_size\": 50257, \"activation_function\": \"gelu_new\","
                       " \"bos_token_id\": 50256, \"eos_token_id\": 50256, \"n_inner\": null}";
    ok(dtrain_hf_config_parse(gpt2, strlen(gpt2), "gpt2", &c, err, sizeof err) == DTRAIN_OK &&
           c.arch == DTRAIN_HF_GPT2 && c.intermediate_size == 3072 && c.tie_word_embeddings == 1 &&
           c.norm_eps == 1e-5 && c.max_positions == 1024,
       "GPT-2's config (tied, 4x MLP, eps 1e-5) %s", err);
    const char *mistral = "{\"model_type\": \"mistral\", \"hidden_size\": 8, \"intermediate_size\": 16,"
                          " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 10,"
                          " \"max_position_embeddings\": 16, \"sliding_window\": null}";
    ok(dtrain_hf_config_parse(mistral, strlen(mistral), "m", &c, err, sizeof err) == DTRAIN_OK &&
           c.arch == DTRAIN_HF_MISTRAL, "Mistral without a sliding window %s", err);

    /* written and read back */
    parse_llama(NULL, NULL, &c, err, sizeof err);
    ok(dtrain_hf_config_write(dir, &c, err, sizeof err) == DTRAIN_OK &&
           dtrain_hf_config_read(dir, &back, err, sizeof err) == DTRAIN_OK && memcmp(&c, &back, sizeof c) == 0,
       "a Llama config written and read back the same %s", err);
    char *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "r");
    text = calloc(1, 8192);
    len = f != NULL ? fread(text, 1, 8191, f) : 0;
    if (f != NULL)
        fclose(f);
    ok(len > 0 && strstr(text, "\n  \"rms_norm_eps\": 1e-05,\n") != NULL &&
           strstr(text, "\n    \"rope_theta\": 500000.0,\n") != NULL &&
           strstr(text, "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n") == text,
       "written as Python's json.dumps(indent=2, sort_keys=True) (1e-05, 500000.0)");
    free(text);
    dtrain_hf_config_parse(gpt2, strlen(gpt2), "gpt2", &c, err, sizeof err);
    ok(dtrain_hf_config_write(dir, &c, err, sizeof err) == DTRAIN_OK &&
           dtrain_hf_config_read(dir, &back, err, sizeof err) == DTRAIN_OK && memcmp(&c, &back, sizeof c) == 0,
       "a GPT-2 config written and read back the same %s", err);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/dtrain-test-hf-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL)
        return 1;
    test_hostile();
    test_round_trip();
    test_folders();
    test_config();
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return tap_done();
}
