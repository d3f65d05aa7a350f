/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The training config: defaults, JSON file, command-line flags, checks.
 * One table (common/dtrain_settings.h) describes every setting once; the
 * JSON reader, the flag parser and --help all work from it.  See
 * dtrain_train.h. */
#include "dtrain_train.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_llmc.h"
#include "model/dtrain_hf_model.h"
#include "trainer/dtrain_metrics.h"
#include "dtrain_parse.h"
#include "dtrain_settings.h"
#include "parallel/dtrain_lora.h"
#include "parallel/dtrain_stage.h"
#include "ft/dtrain_heartbeat.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The trainer's own value kinds (struct dtrain_setting.kind of a CUSTOM
 * setting). */
enum trainer_kind {
    T_BACKEND = 1, /* char[16]: a kernel backend this build has (dtrain_kernels_backends()) */
    T_PRECISION,   /* enum dtrain_kernels_precision: precision_words, from DTRAIN_PRECISION_FP32 on */
    T_RECOMPUTE,   /* int, enum dtrain_recompute: dtrain_recompute_name() */
};

static const char *const order_words[] = {"sequential", "shuffled", NULL};  /* enum dtrain_data_order */
static const char *const schedule_words[] = {"constant", "cosine", NULL};   /* enum dtrain_lr_schedule */
/* enum dtrain_kernels_precision less DTRAIN_PRECISION_FP32 (0 is "the backend's") */
static const char *const base_dtype_words[] = {"fp32", "nf4", NULL}; /* enum dtrain_base_dtype */
static const char *const precision_words[] = {"fp32", "bf16", "fp16", NULL};

/* One flat table: the JSON section is the group, the flag the alias.  BOOL
 * is int 0/1 (JSON true/false; flags 1/0, yes/no, true/false, on/off). */
#define OFF(member) offsetof(struct dtrain_train_config, member)
#define SIZE(member) sizeof(((struct dtrain_train_config *)0)->member)
#define BIG 9.2e18 /* about LONG_MAX: "no upper limit" */
#define NUMBER(sect, key, flag, t, member, lo, hi, text) \
    {.name = key, .type = DTRAIN_SETTING_##t, .offset = OFF(member), .min = lo, .max = hi, \
     .group = sect, .alias = flag, .help = text}
#define PATH(sect, key, flag, member, text) \
    {.name = key, .type = DTRAIN_SETTING_TEXT, .offset = OFF(member), .size = SIZE(member), \
     .group = sect, .alias = flag, .help = text}
#define WORDS(sect, key, flag, member, words, text) \
    {.name = key, .type = DTRAIN_SETTING_ENUM, .offset = OFF(member), .names = words, \
     .group = sect, .alias = flag, .help = text}
#define OWN(sect, key, flag, k, member, words, text) \
    {.name = key, .type = DTRAIN_SETTING_CUSTOM, .kind = k, .offset = OFF(member), .size = SIZE(member), \
     .names = words, .group = sect, .alias = flag, .help = text}

static const struct dtrain_setting settings[] = {
    NUMBER("model", "num_layers", "layers", INT, model.num_layers, 1, DTRAIN_MODEL_MAX_LAYERS, "L, transformer blocks"),
    NUMBER("model", "channels", "channels", INT, model.channels, 1, DTRAIN_MODEL_MAX_CHANNELS, "C, model width"),
    NUMBER("model", "num_heads", "heads", INT, model.num_heads, 1, DTRAIN_MODEL_MAX_CHANNELS, "NH, attention heads (C % NH == 0)"),
    NUMBER("model", "vocab_size", "vocab-size", INT, model.vocab_size, 1, DTRAIN_MODEL_MAX_VOCAB, "V, token ids 0..V-1"),
    NUMBER("model", "padded_vocab_size", "padded-vocab-size", INT, model.padded_vocab_size, 1, DTRAIN_MODEL_MAX_VOCAB, "Vp >= V, rows of wte (default V rounded up to 128)"),
    NUMBER("model", "max_seq_len", "max-seq-len", INT, model.max_seq_len, 1, DTRAIN_MODEL_MAX_SEQ, "maxT, positions the model knows"),
    PATH("model", "config", "model-config", model_config, "a Hugging Face config.json (LlamaForCausalLM, MistralForCausalLM, GPT2LMHeadModel): the model, from random weights"),
    PATH("data", "train", "data", data, "token file (llm.c layout; see dtrain-tokenize), or a quoted glob of llm.c shards"),
    WORDS("data", "order", "order", data_order, order_words, "sequential | shuffled"),
    NUMBER("data", "seed", "data-seed", U64, data_seed, 0, BIG, "seed of the shuffled order"),
    PATH("data", "val", "val-data", val_data, "validation token file or glob (default: none, or --val-fraction)"),
    NUMBER("data", "val_fraction", "val-fraction", REAL, val_fraction, 0, 0.5, "hold out this last fraction of the training tokens for validation; 0 = none"),
    NUMBER("run", "val_every", "val-every", LONG, val_every, 0, BIG, "validation loss every this many steps (and after the last); 0 = after the last only"),
    NUMBER("run", "val_batches", "val-batches", INT, val_batches, 1, 1 << 20, "batches of B x T in each validation (the first ones of the validation data)"),
    NUMBER("optimizer", "lr", "lr", REAL, optim.lr, 0, 1e3, "learning rate (peak rate with cosine)"),
    NUMBER("optimizer", "beta1", "beta1", REAL, optim.beta1, 0, 0.999999, "AdamW beta1"),
    NUMBER("optimizer", "beta2", "beta2", REAL, optim.beta2, 0, 0.999999999, "AdamW beta2"),
    NUMBER("optimizer", "eps", "eps", REAL, optim.eps, 1e-30, 1, "AdamW epsilon"),
    NUMBER("optimizer", "weight_decay", "weight-decay", REAL, optim.weight_decay, 0, 10, "AdamW decoupled weight decay"),
    NUMBER("optimizer", "grad_clip", "grad-clip", REAL, optim.grad_clip, 0, 1e12, "clip the global gradient norm; 0 = off"),
    PATH("optimizer", "offload", "offload-optimizer", offload_optimizer, "ZeRO-Offload: cpu (AdamW moments and fp32 master weights in pinned host memory, updated by a vectorised CPU AdamW; device backends) | nvme:DIR (moments in files of a folder made inside DIR, updated in chunks; lets a CPU run's optimizer state exceed RAM); default: backend memory"),
    WORDS("optimizer", "schedule", "schedule", optim.schedule, schedule_words, "constant | cosine (linear warm-up, cosine to min_lr)"),
    NUMBER("optimizer", "warmup_steps", "warmup", LONG, optim.warmup_steps, 0, BIG, "cosine: warm-up steps"),
    NUMBER("optimizer", "min_lr", "min-lr", REAL, optim.min_lr, 0, 1e3, "cosine: rate at the last step"),
    NUMBER("run", "batch", "batch", INT, batch, 1, 1 << 20, "B, sequences per step"),
    NUMBER("run", "seq", "seq", INT, seq, 1, DTRAIN_MODEL_MAX_SEQ, "T, tokens per sequence (<= max_seq_len)"),
    NUMBER("run", "steps", "steps", LONG, steps, 0, BIG, "train until this many steps are done"),
    NUMBER("run", "seed", "seed", U64, seed, 0, BIG, "seed of the model initialisation"),
    NUMBER("run", "threads", "threads", INT, threads, 1, 1024, "CPU threads (own kernels and OpenBLAS)"),
    OWN("run", "backend", "backend", T_BACKEND, backend, NULL, "kernels: cpu | cuda (one GPU; fails without a CUDA device)"),
    OWN("run", "precision", "precision", T_PRECISION, precision, precision_words, "fp32 | bf16 | fp16 (matmul operands rounded, fp32 accumulation and master weights; fp16 with dynamic loss scaling); default: cpu fp32, cuda bf16"),
    PATH("run", "init_llmc", "init-llmc", init_llmc, "start from this llm.c model file"),
    PATH("run", "init_hf", "init-hf", init_hf, "start from this Hugging Face model folder (config.json, model.safetensors or its sharded index)"),
    PATH("run", "resume", "resume", resume, "continue from the newest checkpoint in this folder (any layout wrote it)"),
    PATH("run", "checkpoint", "checkpoint", checkpoint, "dtrain-train: write checkpoints into this folder at the end (sharded format, one shard); the run resumes from it"),
    NUMBER("run", "checkpoint_every", "checkpoint-every", LONG, checkpoint_every, 0, BIG, "and every this many steps"),
    PATH("run", "save_llmc", "save-llmc", save_llmc, "export an llm.c model file at the end"),
    PATH("run", "save_hf", "save-hf", save_hf, "write a Hugging Face model folder at the end (config.json, model.safetensors)"),
    PATH("run", "metrics", "metrics", metrics, "JSON-lines metrics file, one object per step"),
    PATH("run", "prom_textfile", "prom-textfile", prom_textfile, "Prometheus textfile (node_exporter) with step, loss, tokens/s; NAME.prom"),
    NUMBER("run", "sample_every", "sample-every", LONG, sample_every, 0, BIG, "print 64 tokens the model writes (after a newline, seed 1337, temperature 0.8, top-k 40) every N steps; 0 = never"),
    PATH("run", "rank_metrics", "rank-metrics", rank_metrics, "folder: every rank writes its step time split (compute, TP, pipeline wait, DP) to rank-N.jsonl there; rank 0's metrics name the slowest"),
    NUMBER("run", "peak_flops", "peak-flops", REAL, peak_flops, 0, 1e18, "peak FLOP/s of one device for MFU (e.g. 989e12: an H100's dense bf16); 0 = measured at start (the backend's GEMM rate)"),
    NUMBER("run", "log_every", "log-every", LONG, log_every, 0, BIG, "print a progress line every this many steps; 0 = never"),
    NUMBER("parallel", "micro_batches", "micro-batches", INT, micro_batches, 1, 1 << 16, "dtrain-launch: micro-batches per step on each data-parallel rank (pipeline)"),
    NUMBER("parallel", "virtual_stages", "virtual-stages", INT, virtual_stages, 1, 1024, "dtrain-launch: V chunks of layers per pipeline stage (interleaved 1F1B, Megatron's virtual pipeline); V > 1 needs P >= 2, P*V dividing the layers and the micro-batches a multiple of P"),
    NUMBER("parallel", "zero_stage", "zero-stage", INT, zero_stage, 0, 3, "dtrain-launch: ZeRO over the data-parallel ranks: 0 none, 1 shard the AdamW state, 2 also the reduced gradients, 3 also the parameters (FSDP: each layer gathered on use)"),
    NUMBER("parallel", "zero1", "zero1", BOOL, zero_stage, 0, 1, "dtrain-launch: alias: 1 = zero_stage 1, 0 = zero_stage 0"),
    PATH("parallel", "offload_params", "offload-params", offload_params, "cpu: ZeRO-3's parameter shares in pinned host memory (the optimizer's fp32 master copy), uploaded and gathered to the device unit by unit; needs --zero-stage 3, --offload-optimizer cpu and a device backend"),
    NUMBER("parallel", "zero_prefetch", "zero-prefetch", BOOL, zero_prefetch, 0, 1, "dtrain-launch: ZeRO-3: all-gather the unit the stage uses next (the previous step's order) in a thread while it computes with the current one (host-memory kernels; results bit for bit the same as 0)"),
    OWN("parallel", "recompute", "recompute", T_RECOMPUTE, recompute, NULL, "none | selective (attention probabilities) | full (each layer from its input): recomputed in backward instead of kept"),
    NUMBER("parallel", "sequence_parallel", "sequence-parallel", BOOL, sequence_parallel, 0, 1, "dtrain-launch: Megatron sequence parallelism: LayerNorm and residual regions split by rows over the T tensor-parallel ranks (all-gather / reduce-scatter instead of all-reduce); needs T > 1 dividing seq"),
    NUMBER("parallel", "memory_report", "memory-report", BOOL, memory_report, 0, 1, "each rank prints one JSON line of its memory (parameters, gradients, optimizer, activations, buffers) at the start"),
    NUMBER("parallel", "loss_scale", "loss-scale", REAL, loss_scale, 1, 1e30, "fp16: initial loss scale; halved on a gradient overflow (the step is skipped)"),
    NUMBER("parallel", "loss_scale_window", "loss-scale-window", LONG, loss_scale_window, 1, BIG, "fp16: steps without an overflow after which the loss scale doubles"),
    NUMBER("parallel", "bucket_mb", "bucket-mb", REAL, bucket_mb, 1e-3, 1 << 16, "dtrain-launch: data-parallel gradient bucket size in MB"),
    NUMBER("parallel", "dp_overlap", "dp-overlap", BOOL, dp_overlap, 0, 1, "dtrain-launch: reduce gradient buckets during the backward pass"),
    NUMBER("parallel", "comm_timeout", "comm-timeout", INT, comm_timeout, 1, 86400, "dtrain-launch: seconds a communicator may make no progress before the job is requeued"),
    PATH("fault", "ckpt_dir", "ckpt-dir", ckpt_dir, "dtrain-launch: sharded checkpoints go here (default: $DTRAIN_CKPT_DIR, --dtrain-ckpt-dir); the run resumes from the newest good one"),
    NUMBER("fault", "ckpt_keep", "ckpt-keep", INT, ckpt_keep, 1, 1000000, "dtrain-launch: complete checkpoints kept"),
    NUMBER("fault", "ckpt_async", "ckpt-async", BOOL, ckpt_async, 0, 1, "dtrain-launch: 1 = write the periodic checkpoints in the background while training goes on (committed at a later step)"),
    PATH("fault", "ckpt_local_dir", "ckpt-local-dir", ckpt_local_dir, "dtrain-launch: node-local checkpoint folder (%n: the node's name; default: $DTRAIN_CKPT_LOCAL_DIR): checkpoints go there, each shard copied to a rank on another node; needs --ckpt-dir"),
    NUMBER("fault", "ckpt_shared_every", "ckpt-shared-every", LONG, ckpt_shared_every, 0, BIG, "dtrain-launch: with --ckpt-local-dir, the checkpoint of every this many steps goes to --ckpt-dir instead (0: only at the end and when stopping)"),
    NUMBER("fault", "nonfinite_skips", "nonfinite-skips", INT, nonfinite_skips, 0, 1000000, "dtrain-launch: steps in a row with a non-finite loss or gradient skipped before rolling back to the last checkpoint"),
    NUMBER("fault", "watchdog", "watchdog", INT, watchdog, 0, 604800, "dtrain-launch: seconds without progress after which a rank counts as hung; 0 = twice comm_timeout"),
    NUMBER("fault", "hang_detect", "hang-detect", REAL, hang_detect, 0, 86400, "dtrain-launch: heartbeats between ranks: a neighbour silent, or stuck outside communication, for this many seconds (at least 1) while a rank waits on it is hung; 0 = off"),
    NUMBER("fault", "straggler_steps", "straggler-steps", INT, straggler_steps, 0, 1000000, "dtrain-launch: a rank whose compute time exceeds the median by straggler_margin this many steps in a row is a straggler; 0 = off (default $DTRAIN_STRAGGLER: 5)"),
    NUMBER("fault", "straggler_margin", "straggler-margin", REAL, straggler_margin, 0.01, 1000, "dtrain-launch: how far above the median compute time a straggler is, as a fraction (0.5 = 50%)"),
    NUMBER("fault", "straggler_drain", "straggler-drain", BOOL, straggler_drain, 0, 1, "dtrain-launch: a straggler ends the run with the requeue code and a drain request for its node (default: $DTRAIN_STRAGGLER=drain)"),
    PATH("fault", "inject", "inject", inject, "dtrain-launch: fault injection for tests, e.g. kill:rank=1:step=5 (default: $DTRAIN_INJECT)"),
    NUMBER("lora", "rank", "lora-rank", INT, lora_rank, 0, 65536, "LoRA: train rank-r adapters on the targeted linears, the base frozen; 0 = off (every parameter trained)"),
    NUMBER("lora", "alpha", "lora-alpha", REAL, lora_alpha, 0, 1e9, "LoRA: the adapters' scaling is alpha / rank; 0 = rank (scaling 1)"),
    PATH("lora", "targets", "lora-targets", lora_targets, "LoRA: the linears with adapters, e.g. q,k,v,o,gate,up,down (Llama; q_proj ... too) or c_attn,c_proj,c_fc (GPT-2; attn.c_proj, mlp.c_proj); default q,v (GPT-2: c_attn)"),
    PATH("lora", "init", "init-lora", init_lora, "LoRA: start the adapters from this PEFT folder (adapter_config.json, adapter_model.safetensors)"),
    PATH("lora", "save", "save-lora", save_lora, "LoRA: write the trained adapters as a PEFT folder at the end (made when absent)"),
    NUMBER("lora", "merge", "merge-lora", BOOL, merge_lora, 0, 1, "LoRA: --save-hf writes the base with the adapters merged into it"),
    WORDS("lora", "base_dtype", "base-dtype", base_dtype, base_dtype_words, "LoRA: fp32 | nf4 (QLoRA: every block linear's frozen weight in 4-bit NormalFloat, dequantised inside the matmuls)"),
    {.name = NULL},
};

/* The sections, in the order the messages list them; each holds its group
 * of settings[]. */
#define SECTION(sect) {.name = sect, .type = DTRAIN_SETTING_OBJECT, .fields = settings}
static const struct dtrain_setting sections[] = {
    SECTION("model"), SECTION("data"), SECTION("optimizer"), SECTION("run"), SECTION("parallel"),
    SECTION("fault"), SECTION("lora"), {.name = NULL},
};

static int affinity_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

void dtrain_train_config_defaults(struct dtrain_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->data_order = DTRAIN_ORDER_SEQUENTIAL;
    c->optim.lr = 3e-4;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.999;
    c->optim.eps = 1e-8;
    c->optim.schedule = DTRAIN_LR_CONSTANT;
    c->batch = 4;
    c->seq = 64;
    c->steps = 100;
    c->seed = 1337;
    c->threads = affinity_cpus();
    snprintf(c->backend, sizeof c->backend, "cpu");
    c->precision = DTRAIN_PRECISION_DEFAULT;
    c->log_every = 1;
    c->micro_batches = 1;
    c->virtual_stages = 1;
    c->zero_stage = 0;
    c->zero_prefetch = 1;
    c->loss_scale = 65536.0;
    c->loss_scale_window = 2000;
    c->bucket_mb = 4.0;
    c->dp_overlap = 1;
    c->comm_timeout = 300;
    c->hang_detect = 1.0;
    c->straggler_margin = 0.5;
    c->ckpt_keep = 2;
    c->nonfinite_skips = 3;
    c->val_batches = 8;
}

/* ------------------------------------------------------------------ setting values */

static int range_error(const struct dtrain_setting *s, const char *where, char *err, size_t errlen)
{
    if (s->type == DTRAIN_SETTING_REAL)
        snprintf(err, errlen, "%s: use a number from %g to %g", where, s->min, s->max);
    else if (s->max >= BIG)
        snprintf(err, errlen, "%s: use a whole number of at least %.0f", where, s->min);
    else
        snprintf(err, errlen, "%s: use a whole number from %.0f to %.0f", where, s->min, s->max);
    return DTRAIN_ERR_INPUT;
}

static int set_integer(struct dtrain_train_config *c, const struct dtrain_setting *s, long long v,
                       const char *where, char *err, size_t errlen)
{
    if (dtrain_setting_store_integer(s, c, v) != 0)
        return range_error(s, where, err, errlen);
    return DTRAIN_OK;
}

static int set_real(struct dtrain_train_config *c, const struct dtrain_setting *s, double v,
                    const char *where, char *err, size_t errlen)
{
    if (dtrain_setting_store_real(s, c, v) != 0)
        return range_error(s, where, err, errlen);
    if (s->offset == OFF(hang_detect) && v > 0.0 && v < DTRAIN_HANG_DETECT_MIN_S) {
        snprintf(err, errlen, "%s: %g s is too short for heartbeats to tell a hang from work: use 0 (off) or "
                 "at least %g s", where, v, DTRAIN_HANG_DETECT_MIN_S);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

static int set_text(struct dtrain_train_config *c, const struct dtrain_setting *s, const char *text,
                    const char *where, char *err, size_t errlen)
{
    char words[64] = "";
    size_t used = 0;
    if (s->type == DTRAIN_SETTING_TEXT) {
        if (dtrain_setting_store_text(s, c, text, strlen(text)) != 0) {
            snprintf(err, errlen, "%s: the path is longer than %zu bytes", where, s->size - 1);
            return DTRAIN_ERR_INPUT;
        }
        return DTRAIN_OK;
    }
    if (s->type == DTRAIN_SETTING_ENUM) {
        if (dtrain_setting_store_enum_word(s, c, text) == 0)
            return DTRAIN_OK;
        dtrain_setting_enum_words(s, words, sizeof words);
    } else if (s->kind == T_BACKEND) {
        for (const char *const *b = dtrain_kernels_backends(); *b != NULL; b++) {
            if (strcmp(text, *b) == 0 && strlen(text) < s->size) {
                strcpy((char *)dtrain_setting_field(s, c), text);
                return DTRAIN_OK;
            }
            dtrain_list_append(words, sizeof words, &used, *b);
        }
        snprintf(err, errlen, "%s: '%.64s' is not a kernel backend of this build (%s)%s", where, text, words,
                 strcmp(text, "cuda") == 0 ? ": configure with --with-cuda" : "");
        return DTRAIN_ERR_INPUT;
    } else if (s->kind == T_PRECISION) {
        if (dtrain_setting_store_enum_word(s, c, text) == 0) {
            *(int *)dtrain_setting_field(s, c) += DTRAIN_PRECISION_FP32;
            return DTRAIN_OK;
        }
        dtrain_setting_enum_words(s, words, sizeof words);
    } else { /* T_RECOMPUTE */
        for (int i = 0; i < DTRAIN_RECOMPUTE_MODES; i++) {
            if (strcmp(text, dtrain_recompute_name(i)) == 0) {
                *(int *)dtrain_setting_field(s, c) = i;
                return DTRAIN_OK;
            }
            dtrain_list_append(words, sizeof words, &used, dtrain_recompute_name(i));
        }
    }
    snprintf(err, errlen, "%s: '%.64s' is not one of %s", where, text, words);
    return DTRAIN_ERR_INPUT;
}

/* A strict real number: the whole text, finite, no leading space. */
static int parse_real(const char *text, double *out)
{
    char *end = NULL;
    if (text == NULL || *text == '\0' || *text == ' ' || *text == '\t')
        return -1;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int set_from_text(struct dtrain_train_config *c, const struct dtrain_setting *s, const char *text,
                         const char *where, char *err, size_t errlen)
{
    switch (s->type) {
    case DTRAIN_SETTING_INT: case DTRAIN_SETTING_LONG: case DTRAIN_SETTING_U64: {
        long v;
        char why[256];
        if (dtrain_parse_int(text, (long)s->min, (long)s->max, where, &v, why, sizeof why) != 0) {
            char bad[300];
            snprintf(bad, sizeof bad, "%s '%.64s'", where, text);
            return range_error(s, bad, err, errlen);
        }
        return set_integer(c, s, v, where, err, errlen);
    }
    case DTRAIN_SETTING_BOOL: {
        char why[256];
        if (dtrain_parse_bool(text, where, (int *)dtrain_setting_field(s, c), why, sizeof why) != 0) {
            snprintf(err, errlen, "%s: '%.64s' is not a boolean: use 1/0, yes/no, true/false "
                     "or on/off", where, text);
            return DTRAIN_ERR_INPUT;
        }
        return DTRAIN_OK;
    }
    case DTRAIN_SETTING_REAL: {
        double v;
        if (parse_real(text, &v) != 0) {
            snprintf(err, errlen, "%s: '%.64s' is not a number", where, text);
            return DTRAIN_ERR_INPUT;
        }
        return set_real(c, s, v, where, err, errlen);
    }
    default:
        return set_text(c, s, text, where, err, errlen);
    }
}

/* ------------------------------------------------------------------ JSON file */

/* The JSON reader's state: struct dtrain_settings_reader.ctx. */
struct json_ctx {
    const char *path;
    char *err;
    size_t errlen;
};

static int set_from_json(const struct dtrain_settings_reader *r, const struct dtrain_setting *s,
                         const char *key_path, json_t *v)
{
    const struct json_ctx *x = r->ctx;
    struct dtrain_train_config *c = r->base;
    const char *want = NULL;
    char where[512];
    snprintf(where, sizeof where, "config %s: %s", x->path, key_path);
    switch (s->type) {
    case DTRAIN_SETTING_INT: case DTRAIN_SETTING_LONG: case DTRAIN_SETTING_U64:
        if (json_is_integer(v))
            return set_integer(c, s, json_integer_value(v), where, x->err, x->errlen);
        want = "an integer";
        break;
    case DTRAIN_SETTING_REAL:
        if (json_is_number(v))
            return set_real(c, s, json_number_value(v), where, x->err, x->errlen);
        want = "a number";
        break;
    case DTRAIN_SETTING_BOOL:
        if (json_is_boolean(v))
            return dtrain_setting_store_integer(s, c, json_is_true(v));
        want = "true or false";
        break;
    default:
        if (json_is_string(v))
            return set_text(c, s, json_string_value(v), where, x->err, x->errlen);
        want = "a string";
        break;
    }
    snprintf(x->err, x->errlen, "%s must be %s, not %s", where, want, dtrain_settings_json_kind(r, v));
    return DTRAIN_ERR_INPUT;
}

/* parent is "" for a section, else the section. */
static int unknown_key(const struct dtrain_settings_reader *r, const char *parent, const char *where,
                       const char *key, const char *known)
{
    const struct json_ctx *x = r->ctx;
    (void)where;
    if (parent[0] == '\0')
        snprintf(x->err, x->errlen, "config %s: unknown section '%.64s' (use %s)", x->path, key, known);
    else
        snprintf(x->err, x->errlen, "config %s: unknown key '%s.%.64s' (%s keys: %s)",
                 x->path, parent, key, parent, known);
    return DTRAIN_ERR_INPUT;
}

/* where is "" for the top level, else a section. */
static int not_object(const struct dtrain_settings_reader *r, const char *where, json_t *value)
{
    const struct json_ctx *x = r->ctx;
    if (where[0] == '\0') /* fault is for dtrain-launch: not named here */
        snprintf(x->err, x->errlen, "config %s: the top level must be an object with sections "
                 "model, data, optimizer, run, parallel", x->path);
    else
        snprintf(x->err, x->errlen, "config %s: section %s must be an object, not %s",
                 x->path, where, dtrain_settings_json_kind(r, value));
    return DTRAIN_ERR_INPUT;
}

int dtrain_train_config_load_json(struct dtrain_train_config *c, const char *path,
                                  char *err, size_t errlen)
{
    json_error_t jerr;
    /* Never a blocking open (a FIFO), and a folder is "is a directory",
     * not a JSON syntax error. */
    int fd = dtrain_open_regular(path, O_RDONLY, "config", NULL, err, errlen);
    if (fd < 0)
        return DTRAIN_ERR_INPUT;
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (root == NULL) {
        if (jerr.line < 1)
            snprintf(err, errlen, "config %s: %s", path, jerr.text);
        else
            snprintf(err, errlen, "config %s line %d column %d: %s", path, jerr.line,
                     jerr.column, jerr.text);
        return DTRAIN_ERR_INPUT;
    }
    struct json_ctx x = {.path = path, .err = err, .errlen = errlen};
    const struct dtrain_settings_reader r = {
        .integer_words = "an integer", .real_words = "a real number", .base = c, .ctx = &x,
        .set_json = set_from_json, .unknown = unknown_key, .not_object = not_object,
    };
    int rc = dtrain_settings_walk_json(&r, sections, NULL, "", root);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------ flags */

static const struct dtrain_setting *find_flag(const char *name, size_t len)
{
    return dtrain_settings_find(settings, NULL, name, len, 1);
}

int dtrain_train_config_parse_args(struct dtrain_train_config *c, int argc, char **argv,
                                   int *help, char *err, size_t errlen)
{
    const char *config_path = NULL;
    int rc;
    *help = 0;
    /* Pass 1: --help, the config file, and the shape of every flag. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *help = 1;
            return DTRAIN_OK;
        }
        if (strncmp(a, "--", 2) == 0) {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (find_flag(a + 2, len) == NULL) {
                snprintf(err, errlen, "unknown option '%.64s' (see --help)", a);
                return DTRAIN_ERR_INPUT;
            }
            if (eq == NULL && find_flag(a + 2, len)->type == DTRAIN_SETTING_BOOL) {
                i += dtrain_bool_flag_takes(i + 1 < argc ? argv[i + 1] : NULL);
                continue;
            }
            if (eq == NULL && ++i >= argc) {
                snprintf(err, errlen, "option %.64s needs a value", a);
                return DTRAIN_ERR_INPUT;
            }
            continue;
        }
        if (config_path != NULL) {
            snprintf(err, errlen, "one config file only: '%.64s' follows '%.64s'", a, config_path);
            return DTRAIN_ERR_INPUT;
        }
        config_path = a;
    }
    if (config_path != NULL &&
        (rc = dtrain_train_config_load_json(c, config_path, err, errlen)) != DTRAIN_OK)
        return rc;
    /* Pass 2: the flags override the file. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            continue;
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        const struct dtrain_setting *s = find_flag(a + 2, len);
        const char *value;
        if (eq != NULL)
            value = eq + 1;
        else if (s->type != DTRAIN_SETTING_BOOL || dtrain_bool_flag_takes(i + 1 < argc ? argv[i + 1] : NULL))
            value = argv[++i];
        else
            value = "1"; /* a boolean flag alone: on */
        char where[96];
        snprintf(where, sizeof where, "--%s", s->alias);
        if ((rc = set_from_text(c, s, value, where, err, errlen)) != DTRAIN_OK)
            return rc;
    }
    return DTRAIN_OK;
}

/* A setting's default value in words, for --help. */
static void default_text(const struct dtrain_setting *s, char *out, size_t outlen)
{
    struct dtrain_train_config d;
    dtrain_train_config_defaults(&d);
    void *f = dtrain_setting_field(s, &d);
    switch (s->type) {
    case DTRAIN_SETTING_INT: snprintf(out, outlen, "%d", *(int *)f); break;
    case DTRAIN_SETTING_LONG: snprintf(out, outlen, "%ld", *(long *)f); break;
    case DTRAIN_SETTING_U64: snprintf(out, outlen, "%llu", (unsigned long long)*(uint64_t *)f); break;
    case DTRAIN_SETTING_REAL: snprintf(out, outlen, "%g", *(double *)f); break;
    case DTRAIN_SETTING_TEXT: snprintf(out, outlen, "%s", *(char *)f ? (char *)f : "-"); break;
    case DTRAIN_SETTING_ENUM: snprintf(out, outlen, "%s", s->names[*(int *)f]); break;
    case DTRAIN_SETTING_BOOL: snprintf(out, outlen, "%s", *(int *)f ? "on" : "off"); break;
    case DTRAIN_SETTING_CUSTOM:
        if (s->kind == T_BACKEND)
            snprintf(out, outlen, "%s", *(char *)f ? (char *)f : "-");
        else if (s->kind == T_PRECISION)
            snprintf(out, outlen, "backend's");
        else
            snprintf(out, outlen, "%s", dtrain_recompute_name(*(int *)f));
        break;
    default: snprintf(out, outlen, "-"); break;
    }
    /* 0 meaning "from somewhere else" */
    if (strcmp(s->group, "model") == 0 && strcmp(out, "0") == 0)
        snprintf(out, outlen, "see below");
}

void dtrain_train_usage(FILE *out)
{
    fprintf(out,
            "usage: dtrain-train [CONFIG.json] [--flag VALUE | --flag=VALUE]...   (or --help, --version)\n"
            "Train a GPT-2 model on a token file, on the CPU, in one process.\n"
            "CONFIG.json has the sections model, data, optimizer, run, parallel; flags override it.\n"
            "A boolean flag alone (last, or before another option) means on; its value is 1/0, yes/no, true/false or on/off.\n\n"
            "%-20s %-28s %-10s %s\n", "flag", "config key", "default", "meaning");
    for (const struct dtrain_setting *s = settings; s->name != NULL; s++) {
        char flag[64], key[64], def[64];
        snprintf(flag, sizeof flag, "--%s", s->alias ? s->alias : "");
        snprintf(key, sizeof key, "%s.%s", s->group, s->name);
        default_text(s, def, sizeof def);
        fprintf(out, "%-20s %-28s %-10s %s\n", s->alias ? flag : "", key, def, s->help);
    }
    fprintf(out, "\nThe model's shape, when not imported: L=4 C=256 NH=4 V=256 (Vp: V rounded up to 128) maxT=256.\n"
            "nanoGPT's choices are not the defaults (the defaults keep runs comparable with llm.c's CPU trainer):\n"
            "give --schedule cosine --warmup N --min-lr LR/10 --grad-clip 1.0 --weight-decay 0.1 for them.\n");
    fprintf(out, "\nExit codes: 0 done, 1 internal error, 2 bad input, 75 stopped by a signal or a fault after a\n"
            "checkpoint (requeue).\n");
}

/* ------------------------------------------------------------------ finishing */

static void shape_fields(const struct dtrain_model_config *c, int out[6])
{
    out[0] = c->max_seq_len;
    out[1] = c->vocab_size;
    out[2] = c->padded_vocab_size;
    out[3] = c->num_layers;
    out[4] = c->num_heads;
    out[5] = c->channels;
}

/* Model keys set in the config must agree with the file's shape; the rest
 * are taken from it. */
static int merge_shape(struct dtrain_model_config *cfg, const struct dtrain_model_config *file,
                       const char *what, const char *path, char *err, size_t errlen)
{
    static const char *const names[6] = {"max_seq_len", "vocab_size", "padded_vocab_size",
                                         "num_layers", "num_heads", "channels"};
    int want[6], have[6];
    shape_fields(cfg, want);
    shape_fields(file, have);
    for (int i = 0; i < 6; i++) {
        if (want[i] != 0 && want[i] != have[i]) {
            snprintf(err, errlen, "model.%s is %d in the config but %d in %s %s: remove it from "
                     "the config or use a matching file", names[i], want[i], have[i], what, path);
            return DTRAIN_ERR_INPUT;
        }
    }
    *cfg = *file;
    return DTRAIN_OK;
}

int dtrain_train_config_single_process(struct dtrain_train_config *c, char *err, size_t errlen)
{
    if (c->ckpt_dir[0] != '\0' || c->inject[0] != '\0' || c->ckpt_local_dir[0] != '\0') {
        snprintf(err, errlen, "%s is for the parallel trainer under srun: run `srun --mpi=pmi2 dtrain-launch ...` "
                 "(dtrain-train writes its checkpoints with --checkpoint DIR)",
                 c->ckpt_dir[0] != '\0' ? "fault.ckpt_dir" : c->inject[0] != '\0' ? "fault.inject" : "fault.ckpt_local_dir");
        return DTRAIN_ERR_INPUT;
    }
    memcpy(c->ckpt_dir, c->checkpoint, sizeof c->ckpt_dir);
    return DTRAIN_OK;
}

int dtrain_train_config_check_outputs(const struct dtrain_train_config *c, char *err, size_t errlen)
{
    struct stat st;
    int rc = DTRAIN_OK;
    /* --checkpoint: a folder that exists, or one its existing parent can hold */
    if (c->checkpoint[0] != '\0' && stat(c->checkpoint, &st) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "checkpoint %s is a file, not a folder: --checkpoint names a folder of step-N "
                 "checkpoints (give a new name)", c->checkpoint);
        return DTRAIN_ERR_INPUT;
    }
    if (c->checkpoint[0] != '\0')
        rc = stat(c->checkpoint, &st) == 0 ? dtrain_out_check_dir(c->checkpoint, "checkpoint folder", err, errlen)
                                            : dtrain_out_check(c->checkpoint, "checkpoint folder", err, errlen);
    if (rc == DTRAIN_OK)
        rc = dtrain_out_check(c->save_llmc, "llm.c model file (--save-llmc)", err, errlen);
    if (rc == DTRAIN_OK && c->save_hf[0] != '\0')
        rc = stat(c->save_hf, &st) == 0 ? dtrain_out_check_dir(c->save_hf, "Hugging Face model folder (--save-hf)", err, errlen)
                                         : dtrain_out_check(c->save_hf, "Hugging Face model folder (--save-hf)", err, errlen);
    if (rc == DTRAIN_OK && c->save_lora[0] != '\0')
        rc = stat(c->save_lora, &st) == 0 ? dtrain_out_check_dir(c->save_lora, "LoRA adapter folder (--save-lora)", err, errlen)
                                           : dtrain_out_check(c->save_lora, "LoRA adapter folder (--save-lora)", err, errlen);
    if (rc == DTRAIN_OK)
        rc = dtrain_out_check(c->metrics, "metrics file", err, errlen);
    if (rc == DTRAIN_OK)
        rc = dtrain_out_check(c->prom_textfile, "prom_textfile", err, errlen);
    if (rc == DTRAIN_OK)
        rc = dtrain_out_check_dir(c->ckpt_dir, "checkpoint folder (--ckpt-dir)", err, errlen);
    if (rc == DTRAIN_OK)
        rc = dtrain_out_check_dir(c->rank_metrics, "per-rank metrics folder (--rank-metrics)", err, errlen);
    return rc;
}

int dtrain_train_config_finish(struct dtrain_train_config *c, char *err, size_t errlen)
{
    int rc;
    struct dtrain_model_config *m = &c->model;
    if (c->data[0] == '\0') {
        snprintf(err, errlen, "no token file: give --data FILE or data.train in the config "
                 "(dtrain-tokenize makes one from any text file)");
        return DTRAIN_ERR_INPUT;
    }
    if (c->val_data[0] != '\0' && c->val_fraction > 0.0) {
        snprintf(err, errlen, "give either --val-data or --val-fraction, not both");
        return DTRAIN_ERR_INPUT;
    }
    /* where the model comes from: at most one source */
    const char *source[4] = {c->init_hf, c->init_llmc, c->model_config, c->resume}, *given[4];
    static const char *const flag[4] = {"--init-hf", "--init-llmc", "--model-config", "--resume"};
    int ngiven = 0;
    for (int i = 0; i < 4; i++)
        if (source[i][0] != '\0' && !(i == 3 && c->lora_rank > 0 && c->init_hf[0] != '\0'))
            given[ngiven++] = flag[i]; /* LoRA: --resume holds the adapters, --init-hf the frozen base */
    if (ngiven == 2) {
        snprintf(err, errlen, "give either %s or %s, not both", given[0], given[1]);
        return DTRAIN_ERR_INPUT;
    }
    if (ngiven > 2) {
        snprintf(err, errlen, "give one of --init-hf, --init-llmc, --model-config and --resume, not several");
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_prom prom; /* checked here, before the model is built */
    if (c->prom_textfile[0] != '\0' && (rc = dtrain_prom_init(&prom, c->prom_textfile, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->resume[0] != '\0' && c->init_hf[0] == '\0') {
        struct dtrain_model_config file;
        if ((rc = dtrain_sckpt_read_model(c->resume, &file, err, errlen)) != DTRAIN_OK)
            return rc;
        if ((rc = merge_shape(m, &file, "checkpoint", c->resume, err, errlen)) != DTRAIN_OK)
            return rc;
    } else if (c->init_hf[0] != '\0' || c->model_config[0] != '\0') {
        struct dtrain_model_config file;
        const char *path = c->init_hf[0] != '\0' ? c->init_hf : c->model_config;
        if ((rc = dtrain_hf_read_model_config(path, &file, err, errlen)) != DTRAIN_OK)
            return rc;
        if ((rc = merge_shape(m, &file, "Hugging Face model", path, err, errlen)) != DTRAIN_OK)
            return rc;
    } else if (c->init_llmc[0] != '\0') {
        struct dtrain_model_config file;
        if ((rc = dtrain_llmc_read_config(c->init_llmc, &file, err, errlen)) != DTRAIN_OK)
            return rc;
        if ((rc = merge_shape(m, &file, "llm.c model file", c->init_llmc, err, errlen)) != DTRAIN_OK)
            return rc;
    } else {
        if (m->num_layers == 0) m->num_layers = 4;
        if (m->channels == 0) m->channels = 256;
        if (m->num_heads == 0) m->num_heads = 4;
        if (m->vocab_size == 0) m->vocab_size = 256;
        if (m->max_seq_len == 0) m->max_seq_len = 256;
        if (m->padded_vocab_size == 0) m->padded_vocab_size = dtrain_model_pad_vocab(m->vocab_size);
    }
    if ((rc = dtrain_model_config_check(m, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->lora_rank == 0 && (c->merge_lora || c->init_lora[0] != '\0' || c->save_lora[0] != '\0' ||
                              c->lora_targets[0] != '\0' || c->lora_alpha != 0.0)) {
        snprintf(err, errlen, "%s needs LoRA: give --lora-rank R", c->merge_lora ? "--merge-lora"
                 : c->init_lora[0] != '\0' ? "--init-lora" : c->save_lora[0] != '\0' ? "--save-lora"
                 : c->lora_targets[0] != '\0' ? "--lora-targets" : "--lora-alpha");
        return DTRAIN_ERR_INPUT;
    }
    if (c->base_dtype == DTRAIN_BASE_NF4 && c->lora_rank == 0) {
        snprintf(err, errlen, "--base-dtype nf4 needs LoRA (an NF4 base is frozen): give --lora-rank R");
        return DTRAIN_ERR_INPUT;
    }
    if (c->base_dtype == DTRAIN_BASE_NF4 && (c->save_hf[0] != '\0' || c->save_llmc[0] != '\0')) {
        snprintf(err, errlen, "%s with --base-dtype nf4: the base is held in NF4 only; save the adapters with "
                 "--save-lora (the base is --init-hf's) or train with --base-dtype fp32",
                 c->save_hf[0] != '\0' ? "--save-hf" : "--save-llmc");
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_lora_spec lora;
    if (c->lora_rank > 0 &&
        (rc = dtrain_lora_spec_make(m, c->lora_rank, c->lora_alpha, c->lora_targets, &lora, err, errlen)) != DTRAIN_OK)
        return rc;
    if (c->seq > m->max_seq_len) {
        snprintf(err, errlen, "seq %d is longer than the model's max_seq_len %d: lower --seq",
                 c->seq, m->max_seq_len);
        return DTRAIN_ERR_INPUT;
    }
    if (!(c->optim.lr > 0.0)) {
        snprintf(err, errlen, "lr must be greater than 0");
        return DTRAIN_ERR_INPUT;
    }
    if (c->optim.schedule == DTRAIN_LR_COSINE && c->optim.min_lr > c->optim.lr) {
        snprintf(err, errlen, "min_lr %g is above lr %g", c->optim.min_lr, c->optim.lr);
        return DTRAIN_ERR_INPUT;
    }
    c->optim.total_steps = c->steps;
    struct dtrain_offload off;
    if ((rc = dtrain_offload_parse(c->offload_optimizer, &off, err, errlen)) != DTRAIN_OK)
        return rc;
    if (off.kind == DTRAIN_OFFLOAD_CPU && strcmp(c->backend, "cpu") == 0) {
        snprintf(err, errlen, "--offload-optimizer cpu: the cpu backend keeps the optimizer state in host memory "
                 "already (use nvme:DIR to move it out of memory)");
        return DTRAIN_ERR_INPUT;
    }
    if (off.kind != DTRAIN_OFFLOAD_NONE && c->lora_rank > 0) {
        snprintf(err, errlen, "--offload-optimizer with --lora-rank: LoRA's optimizer state is the adapters' "
                 "(a few MB), kept beside them; drop --offload-optimizer");
        return DTRAIN_ERR_INPUT;
    }
    if (c->offload_params[0] != '\0') {
        const char *why = strcmp(c->offload_params, "cpu") != 0 ? "give cpu (or leave it out)"
                          : c->zero_stage != 3 ? "it needs --zero-stage 3 (only there are the parameters sharded)"
                          : strcmp(c->backend, "cpu") == 0 ? "the cpu backend's parameters are in host memory already"
                          : off.kind != DTRAIN_OFFLOAD_CPU ? "it needs --offload-optimizer cpu (the host shares are the "
                                                             "optimizer's master copy)"
                          : NULL;
        if (why != NULL) {
            snprintf(err, errlen, "--offload-params %.16s: %s", c->offload_params, why);
            return DTRAIN_ERR_INPUT;
        }
    }
    /* Last: every input is fine, so check that the results can be kept. */
    return dtrain_train_config_check_outputs(c, err, errlen);
}
