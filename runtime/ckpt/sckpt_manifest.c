/* SPDX-License-Identifier: GPL-2.0-or-later */
/* manifest.json, written and read; see sckpt_internal.h. */
#include "sckpt_internal.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_lora.h"
#include "parallel/dtrain_pcomm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *order_name(int order)
{
    return order == DTRAIN_ORDER_SHUFFLED ? "shuffled" : "sequential";
}

json_t *sckpt_model_json(const struct dtrain_model_config *m)
{
    json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "num_layers", m->num_layers, "channels", m->channels,
                          "num_heads", m->num_heads, "vocab_size", m->vocab_size,
                          "padded_vocab_size", m->padded_vocab_size, "max_seq_len", m->max_seq_len);
    if (j == NULL || m->family == DTRAIN_FAMILY_GPT2)
        return j;
    json_t *own = json_pack("{s:s, s:i, s:i, s:b, s:f, s:f, s:f, s:f, s:f, s:i}",
                            "family", dtrain_model_family_name(m->family), "num_kv_heads", m->num_kv_heads,
                            "intermediate_size", m->intermediate_size, "untied_head", m->untied_head,
                            "norm_eps", (double)m->norm_eps, "rope_theta", (double)m->rope_theta,
                            "rope_factor", (double)m->rope_factor, "rope_low_freq_factor",
                            (double)m->rope_low_freq_factor, "rope_high_freq_factor",
                            (double)m->rope_high_freq_factor, "rope_original_max_positions",
                            m->rope_original_max_positions);
    if (own == NULL || json_object_update(j, own) != 0) {
        json_decref(own);
        json_decref(j);
        return NULL;
    }
    json_decref(own);
    return j;
}

int sckpt_model_parse(json_t *model, struct dtrain_model_config *out)
{
    json_int_t v[6], kv = 0, inter = 0, orig = 0;
    double eps = 0, theta = 0, factor = 0, lowf = 0, highf = 0;
    int untied = 0;
    const char *family = "gpt2";
    if (json_unpack(model, "{s:I, s:I, s:I, s:I, s:I, s:I, s?s}", "num_layers", &v[0], "channels", &v[1],
                    "num_heads", &v[2], "vocab_size", &v[3], "padded_vocab_size", &v[4], "max_seq_len", &v[5],
                    "family", &family) != 0)
        return -1;
    for (int i = 0; i < 6; i++)
        if (v[i] < 1 || v[i] > INT32_MAX)
            return -1;
    int f = dtrain_model_family_of(family);
    if (f < 0 || (f != DTRAIN_FAMILY_GPT2 &&
                  json_unpack(model, "{s:I, s:I, s:b, s:F, s:F, s:F, s:F, s:F, s:I}", "num_kv_heads", &kv,
                              "intermediate_size", &inter, "untied_head", &untied, "norm_eps", &eps, "rope_theta",
                              &theta, "rope_factor", &factor, "rope_low_freq_factor", &lowf,
                              "rope_high_freq_factor", &highf, "rope_original_max_positions", &orig) != 0))
        return -1;
    if (kv < 0 || kv > INT32_MAX || inter < 0 || inter > INT32_MAX || orig < 0 || orig > INT32_MAX)
        return -1;
    struct dtrain_model_config m = {.num_layers = (int)v[0], .channels = (int)v[1], .num_heads = (int)v[2],
                                    .vocab_size = (int)v[3], .padded_vocab_size = (int)v[4],
                                    .max_seq_len = (int)v[5], .family = (enum dtrain_model_family)f,
                                    .num_kv_heads = (int)kv, .intermediate_size = (int)inter,
                                    .untied_head = untied, .norm_eps = (float)eps, .rope_theta = (float)theta,
                                    .rope_factor = (float)factor, .rope_low_freq_factor = (float)lowf,
                                    .rope_high_freq_factor = (float)highf,
                                    .rope_original_max_positions = (int)orig};
    char why[256];
    if (dtrain_model_config_check(&m, why, sizeof why) != DTRAIN_OK)
        return -1;
    *out = m;
    return 0;
}

int sckpt_model_same(const struct dtrain_model_config *a, const struct dtrain_model_config *b)
{
    return a->num_layers == b->num_layers && a->channels == b->channels && a->num_heads == b->num_heads &&
           a->vocab_size == b->vocab_size && a->padded_vocab_size == b->padded_vocab_size &&
           a->max_seq_len == b->max_seq_len && a->family == b->family &&
           dtrain_model_kv_heads(a) == dtrain_model_kv_heads(b) &&
           dtrain_model_mlp_width(a) == dtrain_model_mlp_width(b) && a->untied_head == b->untied_head &&
           a->norm_eps == b->norm_eps && a->rope_theta == b->rope_theta && a->rope_factor == b->rope_factor &&
           a->rope_low_freq_factor == b->rope_low_freq_factor && a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_max_positions == b->rope_original_max_positions;
}

uint64_t sckpt_nparams(const struct dtrain_train_config *cfg)
{
    struct dtrain_lora_spec spec;
    char err[256];
    if (cfg->lora_rank <= 0)
        return dtrain_model_param_count(&cfg->model);
    if (dtrain_lora_spec_make(&cfg->model, cfg->lora_rank, cfg->lora_alpha, cfg->lora_targets, &spec, err,
                              sizeof err) != DTRAIN_OK)
        return 0;
    return dtrain_lora_whole_count(&cfg->model, &spec);
}

/* LoRA's adapters in the manifest: {"rank", "alpha", "targets"} (PEFT's
 * names), or NULL without LoRA (the key is then left out). */
static json_t *lora_json(const struct dtrain_train_config *c)
{
    struct dtrain_lora_spec spec;
    char err[256], names[256];
    if (c->lora_rank <= 0 ||
        dtrain_lora_spec_make(&c->model, c->lora_rank, c->lora_alpha, c->lora_targets, &spec, err, sizeof err) != 0)
        return NULL;
    dtrain_lora_target_names(&spec, names, sizeof names);
    return json_pack("{s:i, s:f, s:s}", "rank", spec.rank, "alpha", spec.alpha, "targets", names);
}

/* The manifest's "lora" (NULL: a run without LoRA wrote it) against this
 * run's: 0 when they are the same adapters, else why in why. */
static int lora_same(json_t *held, const struct dtrain_train_config *cfg, const char *path, char *why, size_t whylen)
{
    struct dtrain_lora_spec mine, theirs;
    char err[256];
    const char *targets = NULL;
    json_int_t rank = 0;
    double alpha = 0.0;
    if (held == NULL && cfg->lora_rank <= 0)
        return 0;
    if (held == NULL || cfg->lora_rank <= 0) {
        dtrain_snprintf(why, whylen, "%s was written by a run %s LoRA, this run is %s: give the same --lora-rank, "
                        "--lora-alpha and --lora-targets (LoRA checkpoints hold the adapters; the base comes from "
                        "--init-hf), or another checkpoint folder", path, held ? "with" : "without",
                        held ? "without" : "with");
        return -1;
    }
    if (json_unpack(held, "{s:I, s:F, s:s}", "rank", &rank, "alpha", &alpha, "targets", &targets) != 0 ||
        rank < 1 || rank > 65536 ||
        dtrain_lora_spec_make(&cfg->model, (int)rank, alpha, targets, &theirs, err, sizeof err) != 0 ||
        dtrain_lora_spec_make(&cfg->model, cfg->lora_rank, cfg->lora_alpha, cfg->lora_targets, &mine, err,
                              sizeof err) != 0 ||
        theirs.rank != mine.rank || theirs.alpha != mine.alpha || theirs.targets != mine.targets) {
        dtrain_snprintf(why, whylen, "%s holds LoRA adapters of rank %lld, alpha %g on %.100s; this run's differ: "
                        "give the same --lora-rank, --lora-alpha and --lora-targets, or another checkpoint folder",
                        path, (long long)rank, alpha, targets != NULL ? targets : "?");
        return -1;
    }
    return 0;
}

static json_t *config_json(const struct dtrain_train_config *c)
{
    const struct dtrain_optim_config *o = &c->optim;
    return json_pack("{s:o, s:i, s:i, s:s, s:I, s:I, s:I, s:i,"
                     " s:{s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:I, s:f}}",
                     "model", sckpt_model_json(&c->model),
                     "batch", c->batch, "seq", c->seq, "data_order", order_name(c->data_order),
                     "data_seed", (json_int_t)c->data_seed, "seed", (json_int_t)c->seed,
                     "steps", (json_int_t)c->steps, "micro_batches", c->micro_batches,
                     "optimizer", "lr", o->lr, "beta1", o->beta1, "beta2", o->beta2, "eps", o->eps,
                     "weight_decay", o->weight_decay, "grad_clip", o->grad_clip,
                     "schedule", o->schedule == DTRAIN_LR_COSINE ? "cosine" : "constant",
                     "warmup_steps", (json_int_t)o->warmup_steps, "min_lr", o->min_lr);
}

int sckpt_commit(const char *dir, const char *tmp, const char *final, const struct dtrain_train_config *cfg,
                  const struct dtrain_sckpt_layout *L, uint64_t step, uint64_t data_batches,
                  const struct dtrain_sckpt_scaler *scaler, const struct record *all, char *err, size_t errlen)
{
    int rc = DTRAIN_ERR_SYSTEM;
    json_t *shards = json_array(), *root = NULL;
    char *text = NULL;
    for (int r = 0; shards != NULL && r < L->world_size; r++) {
        char name[32], sum[17];
        sckpt_shard_name(name, sizeof name, r);
        snprintf(sum, sizeof sum, "%016" PRIx64, all[r].checksum);
        if (json_array_append_new(shards, json_pack("{s:i, s:s, s:I, s:I, s:s}", "rank", r, "file", name,
                                                    "bytes", (json_int_t)all[r].bytes,
                                                    "floats", (json_int_t)all[r].floats, "checksum", sum)) != 0)
            goto oom;
    }
    root = json_pack("{s:s, s:i, s:I, s:I, s:I, s:o, s:{s:i, s:i, s:i, s:i, s:b}, s:o}", "format", FORMAT_NAME,
                     "version", DTRAIN_SCKPT_VERSION, "step", (json_int_t)step, "data_batches",
                     (json_int_t)data_batches, "nparams", (json_int_t)sckpt_nparams(cfg),
                     "config", config_json(cfg), "layout", "tp", L->tp, "pp", L->pp, "dp", L->dp,
                     "world_size", L->world_size, "zero1", L->zero1, "shards", shards);
    shards = NULL; /* stolen by "o", also on failure */
    /* optional: written by a run with LoRA (absent: none) */
    json_t *lora = lora_json(cfg);
    if (root != NULL && lora != NULL && json_object_set_new(root, "lora", lora) != 0)
        goto oom;
    /* optional: written by a run with virtual stages (absent: 1) */
    if (root != NULL && L->virtual_stages > 1 &&
        json_object_set_new(json_object_get(root, "layout"), "virtual_stages", json_integer(L->virtual_stages)) != 0)
        goto oom;
    if (root != NULL && scaler != NULL && scaler->on &&
        json_object_set_new(root, "loss_scale", json_pack("{s:f, s:I, s:I}", "scale", scaler->scale, "good_steps",
                                                           (json_int_t)scaler->good_steps, "overflow_steps",
                                                           (json_int_t)scaler->overflow_steps)) != 0)
        goto oom;
    if (root == NULL ||
        (text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10))) == NULL)
        goto oom;
    char path[DTRAIN_PATH_MAX];
    if (dtrain_snprintf(path, sizeof path, "%s/%s", tmp, DTRAIN_SCKPT_MANIFEST) != 0) {
        dtrain_snprintf(err, errlen, "checkpoint path too long: %.80s...", tmp);
        goto out;
    }
    struct dtrain_out_file o;
    /* the step folder the shards went into: still a real folder of ours */
    int tmp_fd = sckpt_open_step_dir(tmp, err, errlen);
    if (tmp_fd < 0)
        goto out;
    if ((rc = dtrain_out_openat(&o, tmp_fd, path, err, errlen)) == DTRAIN_OK) {
        dtrain_out_write(&o, text, strlen(text));
        dtrain_out_write(&o, "\n", 1);
        rc = dtrain_out_commit(&o, err, errlen);
    }
    close(tmp_fd);
    if (rc != DTRAIN_OK)
        goto out;
    rc = DTRAIN_ERR_SYSTEM;
    /* A folder of this step may be there from an earlier attempt (a
     * damaged one renamed away, or a run that got further before a fault). */
    if (sckpt_remove_step_dir(final) != 0 || sckpt_fsync_dir(tmp) != 0 || rename(tmp, final) != 0 || sckpt_fsync_dir(dir) != 0) {
        dtrain_snprintf(err, errlen, "cannot sckpt_commit checkpoint %s: %s", final, strerror(errno));
        goto out;
    }
    rc = DTRAIN_OK;
    goto out;
oom:
    dtrain_snprintf(err, errlen, "out of memory for the checkpoint manifest");
out:
    free(text);
    json_decref(root);
    json_decref(shards);
    return rc;
}

static int parse_checksum(const char *text, uint64_t *out)
{
    uint64_t v = 0;
    if (strlen(text) != 16)
        return -1;
    for (int i = 0; i < 16; i++) {
        int c = text[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* A manifest's JSON, opened without blocking (a FIFO there is damage, not
 * a hang) and bounded in size; NULL with one line in why. */
static json_t *load_manifest_json(const char *file, char *why, size_t whylen)
{
    off_t size = 0;
    json_error_t je;
    int fd = dtrain_open_regular(file, O_RDONLY, "checkpoint manifest", &size, why, whylen);
    if (fd < 0)
        return NULL;
    if (size > MAX_MANIFEST_BYTES) {
        dtrain_snprintf(why, whylen, "%s: %lld bytes, larger than a manifest can be", file, (long long)size);
        close(fd);
        return NULL;
    }
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
    if (root == NULL)
        dtrain_snprintf(why, whylen, "%s: line %d: %s", file, je.line, je.text);
    return root;
}

int sckpt_read_manifest(const char *path, uint64_t step, const struct dtrain_train_config *cfg,
                         struct manifest *m, char *why, size_t whylen)
{
    char file[DTRAIN_PATH_MAX];
    json_error_t je;
    json_t *root = NULL, *config, *shards;
    const char *format, *order;
    json_int_t v[6], nstep, ndata, nparams, version, batch, seq, data_seed, seed;
    int zero1, verdict = DAMAGED_MANIFEST;
    memset(m, 0, sizeof *m);
    if (dtrain_snprintf(file, sizeof file, "%s/%s", path, DTRAIN_SCKPT_MANIFEST) != 0) {
        dtrain_snprintf(why, whylen, "%s: path too long", path);
        return DAMAGED_MANIFEST;
    }
    if ((root = load_manifest_json(file, why, whylen)) == NULL)
        return DAMAGED_MANIFEST;
    json_int_t tp, pp, dp, world;
    if (json_unpack_ex(root, &je, 0, "{s:s, s:I, s:I, s:I, s:I, s:o, s:{s:I, s:I, s:I, s:I, s:b}, s:o}",
                       "format", &format, "version", &version, "step", &nstep, "data_batches", &ndata,
                       "nparams", &nparams, "config", &config, "layout", "tp", &tp, "pp", &pp, "dp", &dp,
                       "world_size", &world, "zero1", &zero1, "shards", &shards) != 0 ||
        json_unpack_ex(config, &je, 0, "{s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:I, s:s, s:I, s:I}",
                       "model", "num_layers", &v[0], "channels", &v[1], "num_heads", &v[2], "vocab_size", &v[3],
                       "padded_vocab_size", &v[4], "max_seq_len", &v[5], "batch", &batch, "seq", &seq,
                       "data_order", &order, "data_seed", &data_seed, "seed", &seed) != 0) {
        dtrain_snprintf(why, whylen, "%s: %s", file, je.text);
        goto out;
    }
    struct dtrain_model_config held;
    if (sckpt_model_parse(json_object_get(config, "model"), &held) != 0) {
        dtrain_snprintf(why, whylen, "%s: config.model is not a valid model", file);
        goto out;
    }
    if (strcmp(format, FORMAT_NAME) != 0 || version < DTRAIN_SCKPT_VERSION_OLDEST || version > DTRAIN_SCKPT_VERSION) {
        dtrain_snprintf(why, whylen, "%s: format %.40s version %lld; this dtrain reads %s versions %d to %d", file,
                        format, (long long)version, FORMAT_NAME, DTRAIN_SCKPT_VERSION_OLDEST, DTRAIN_SCKPT_VERSION);
        goto out;
    }
    m->version = (uint32_t)version;
    /* Every count bounded before any arithmetic on it (no wrap-around). */
    if (nstep < 0 || (uint64_t)nstep != step || ndata < 0 || tp < 1 || pp < 1 || dp < 1 || tp > MAX_WORLD ||
        pp > MAX_WORLD || dp > MAX_WORLD || world < 1 || world > MAX_WORLD ||
        (uint64_t)world != (uint64_t)tp * (uint64_t)pp * (uint64_t)dp || !json_is_array(shards) ||
        json_array_size(shards) != (size_t)world) {
        dtrain_snprintf(why, whylen, "%s: step, layout or shard list inconsistent", file);
        goto out;
    }
    const struct dtrain_model_config *mc = &cfg->model;
    if (lora_same(json_object_get(root, "lora"), cfg, path, why, whylen) != 0) {
        verdict = INCOMPATIBLE;
        goto out;
    }
    const long want[6] = {mc->num_layers, mc->channels, mc->num_heads, mc->vocab_size, mc->padded_vocab_size,
                          mc->max_seq_len};
    if (v[0] != want[0] || v[1] != want[1] || v[2] != want[2] || v[3] != want[3] || v[4] != want[4] ||
        v[5] != want[5] || !sckpt_model_same(&held, mc) || nparams != (json_int_t)sckpt_nparams(cfg)) {
        dtrain_snprintf(why, whylen, "%s holds a %s model L=%lld C=%lld NH=%lld V=%lld (padded %lld) maxT=%lld; "
                 "this run's is a %s L=%ld C=%ld NH=%ld V=%ld (padded %ld) maxT=%ld%s: give the same model, or another "
                 "checkpoint folder", path, dtrain_model_family_name(held.family), (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3],
                 (long long)v[4], (long long)v[5], dtrain_model_family_name(mc->family), want[0], want[1], want[2], want[3],
                 want[4], want[5], sckpt_model_same(&held, mc) || held.family != mc->family ? ""
                 : " (the same sizes, other attention, MLP, head or RoPE settings)");
        verdict = INCOMPATIBLE;
        goto out;
    }
    if (batch != cfg->batch || seq != cfg->seq || strcmp(order, order_name(cfg->data_order)) != 0 ||
        (uint64_t)data_seed != cfg->data_seed || (uint64_t)seed != cfg->seed) {
        dtrain_snprintf(why, whylen, "%s was written by a run with batch %lld x %lld, %s data (seed %lld), seed %lld; "
                 "this run has %d x %d, %s (seed %" PRIu64 "), seed %" PRIu64 ": resume with the same --batch, "
                 "--seq, --order, --data-seed and --seed, or use another checkpoint folder", path,
                 (long long)batch, (long long)seq, order, (long long)data_seed, (long long)seed, cfg->batch,
                 cfg->seq, order_name(cfg->data_order), cfg->data_seed, cfg->seed);
        verdict = INCOMPATIBLE;
        goto out;
    }
    m->step = (uint64_t)nstep;
    m->data_batches = (uint64_t)ndata;
    m->nparams = (uint64_t)nparams;
    m->layout = (struct dtrain_sckpt_layout){
        .tp = (int)tp, .pp = (int)pp, .dp = (int)dp, .world_size = (int)world, .zero1 = zero1, .virtual_stages = 1};
    json_t *vs = json_object_get(json_object_get(root, "layout"), "virtual_stages");
    if (vs != NULL) { /* optional: absent, the plain pipeline */
        if (!json_is_integer(vs) || json_integer_value(vs) < 1 || json_integer_value(vs) > 1024) {
            dtrain_snprintf(why, whylen, "%s: layout.virtual_stages: not a count from 1 to 1024", file);
            goto out;
        }
        m->layout.virtual_stages = (int)json_integer_value(vs);
    }
    json_t *ls = json_object_get(root, "loss_scale");
    if (ls != NULL) { /* optional: runs with dynamic loss scaling */
        double scale;
        json_int_t good, over;
        if (json_unpack_ex(ls, &je, 0, "{s:F, s:I, s:I}", "scale", &scale, "good_steps", &good, "overflow_steps",
                           &over) != 0 || !(scale > 0.0) || !isfinite(scale) || good < 0 || over < 0) {
            dtrain_snprintf(why, whylen, "%s: loss_scale: not a positive scale and two counts", file);
            goto out;
        }
        m->scaler = (struct dtrain_sckpt_scaler){1, scale, (uint64_t)good, (uint64_t)over};
    }
    if ((m->shards = calloc((size_t)world, sizeof *m->shards)) == NULL) {
        dtrain_snprintf(why, whylen, "out of memory for %lld shard entries", (long long)world);
        goto out;
    }
    for (json_int_t r = 0; r < world; r++) {
        json_int_t rank, bytes, floats;
        const char *name, *sum;
        char expect[32];
        sckpt_shard_name(expect, sizeof expect, (long)r);
        if (json_unpack_ex(json_array_get(shards, (size_t)r), &je, 0, "{s:I, s:s, s:I, s:I, s:s}", "rank", &rank,
                           "file", &name, "bytes", &bytes, "floats", &floats, "checksum", &sum) != 0 ||
            rank != r || strcmp(name, expect) != 0 || floats < 0 || bytes < DTRAIN_SCKPT_HEADER_BYTES ||
            bytes > MAX_SHARD_BYTES ||
            (uint64_t)floats > m->nparams || parse_checksum(sum, &m->shards[r].checksum) != 0) {
            dtrain_snprintf(why, whylen, "%s: shard entry %lld is malformed", file, (long long)r);
            goto out;
        }
        m->shards[r].bytes = (uint64_t)bytes;
        m->shards[r].floats = (uint64_t)floats;
    }
    verdict = GOOD;
out:
    if (verdict != GOOD) {
        free(m->shards);
        m->shards = NULL;
    }
    json_decref(root);
    return verdict;
}

/* ------------------------------------------------------------ the model a folder holds */

int dtrain_sckpt_read_model(const char *dir, struct dtrain_model_config *model, char *err, size_t errlen)
{
    uint64_t newest;
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        dtrain_snprintf(err, errlen, "checkpoint %s is a file, not a folder: dtrain checkpoints are folders of "
                        "step-N checkpoints (--checkpoint DIR writes them)", dir);
        return DTRAIN_ERR_INPUT;
    }
    int n = dtrain_sckpt_list(dir, &newest, 1, err, errlen);
    if (n < 0)
        return DTRAIN_ERR_INPUT;
    if (n == 0) {
        dtrain_snprintf(err, errlen, "checkpoint folder %s holds no complete checkpoint (step-N with a %s)", dir,
                        DTRAIN_SCKPT_MANIFEST);
        return DTRAIN_ERR_INPUT;
    }
    char step[DTRAIN_PATH_MAX], file[DTRAIN_PATH_MAX];
    if (sckpt_step_path(step, sizeof step, dir, newest, "") != 0 ||
        dtrain_snprintf(file, sizeof file, "%s/%s", step, DTRAIN_SCKPT_MANIFEST) != 0) {
        dtrain_snprintf(err, errlen, "checkpoint folder %s: path too long", dir);
        return DTRAIN_ERR_INPUT;
    }
    char why[600] = "";
    json_t *root = load_manifest_json(file, why, sizeof why);
    int rc = root != NULL && sckpt_model_parse(json_object_get(json_object_get(root, "config"), "model"), model) == 0
                 ? DTRAIN_OK : DTRAIN_ERR_INPUT;
    if (rc != DTRAIN_OK && root == NULL)
        dtrain_snprintf(err, errlen, "%s", why);
    else if (rc != DTRAIN_OK)
        dtrain_snprintf(err, errlen, "%s: no valid config.model in it", file);
    json_decref(root);
    return rc;
}
