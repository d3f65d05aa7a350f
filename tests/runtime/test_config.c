/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The training config: JSON file and flags, and one clear line for every
 * kind of bad input (unknown key, wrong type, impossible shape, T > maxT,
 * out-of-range value, malformed JSON, missing file). */
#include "dtrain_train.h"
#include "tap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[1024];
static char path[2048];

static const char *config_file(const char *name, const char *json)
{
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        abort();
    fputs(json, f);
    fclose(f);
    return path;
}

/* Load json on top of the defaults; 0 or the status, err filled. */
static int load(const char *json, struct dtrain_train_config *c, char *err, size_t errlen)
{
    dtrain_train_config_defaults(c);
    return dtrain_train_config_load_json(c, config_file("c.json", json), err, errlen);
}

static void bad_json(const char *json, const char *needle, const char *what)
{
    struct dtrain_train_config c;
    char err[1024] = "";
    int rc = load(json, &c, err, sizeof err);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, needle) != NULL, "%s: %s", what, err);
}

static void test_json(void)
{
    struct dtrain_train_config c;
    char err[1024] = "";
    int rc = load("{\"model\": {\"num_layers\": 3, \"channels\": 48, \"num_heads\": 6, \"vocab_size\": 300,"
                  " \"padded_vocab_size\": 384, \"max_seq_len\": 64},"
                  " \"data\": {\"train\": \"x.bin\", \"order\": \"shuffled\", \"seed\": 9},"
                  " \"optimizer\": {\"lr\": 0.001, \"beta1\": 0.8, \"beta2\": 0.95, \"eps\": 1e-6,"
                  " \"weight_decay\": 0.1, \"grad_clip\": 1, \"schedule\": \"cosine\", \"warmup_steps\": 10,"
                  " \"min_lr\": 0.0001},"
                  " \"run\": {\"batch\": 2, \"seq\": 32, \"steps\": 7, \"seed\": 5, \"threads\": 1,"
                  " \"metrics\": \"m.jsonl\", \"checkpoint\": \"c.ckpt\", \"checkpoint_every\": 3,"
                  " \"save_llmc\": \"o.bin\", \"log_every\": 2}}", &c, err, sizeof err);
    ok(rc == DTRAIN_OK, "a config with every section loads%s%s", rc ? ": " : "", err);
    ok(c.model.num_layers == 3 && c.model.channels == 48 && c.model.num_heads == 6 &&
       c.model.vocab_size == 300 && c.model.padded_vocab_size == 384 && c.model.max_seq_len == 64,
       "model keys");
    ok(strcmp(c.data, "x.bin") == 0 && c.data_order == DTRAIN_ORDER_SHUFFLED && c.data_seed == 9, "data keys");
    ok(c.optim.lr == 0.001 && c.optim.beta1 == 0.8 && c.optim.beta2 == 0.95 && c.optim.eps == 1e-6 &&
       c.optim.weight_decay == 0.1 && c.optim.grad_clip == 1.0 && c.optim.schedule == DTRAIN_LR_COSINE &&
       c.optim.warmup_steps == 10 && c.optim.min_lr == 0.0001, "optimizer keys (an integer is a valid real)");
    ok(c.batch == 2 && c.seq == 32 && c.steps == 7 && c.seed == 5 && c.threads == 1 &&
       strcmp(c.metrics, "m.jsonl") == 0 && strcmp(c.checkpoint, "c.ckpt") == 0 &&
       c.checkpoint_every == 3 && strcmp(c.save_llmc, "o.bin") == 0 && c.log_every == 2, "run keys");

    dtrain_train_config_defaults(&c);
    ok(c.optim.schedule == DTRAIN_LR_CONSTANT && c.optim.grad_clip == 0.0 && c.threads >= 1,
       "defaults: constant learning rate, no clipping, threads from the CPUs we may use");

    bad_json("{\"model\": {\"layers\": 3}}", "unknown key 'model.layers' (model keys: num_layers", "an unknown key");
    bad_json("{\"modle\": {}}", "unknown section 'modle'", "an unknown section");
    bad_json("{\"run\": {\"batch\": \"8\"}}", "run.batch must be an integer, not a string", "a string for an integer");
    bad_json("{\"run\": {\"batch\": 8.5}}", "run.batch must be an integer, not a real number", "a real for an integer");
    bad_json("{\"optimizer\": {\"lr\": \"fast\"}}", "optimizer.lr must be a number", "a string for a number");
    bad_json("{\"data\": {\"train\": 5}}", "data.train must be a string, not an integer", "a number for a path");
    bad_json("{\"data\": {\"order\": \"random\"}}", "not one of sequential, shuffled", "an unknown data order");
    bad_json("{\"optimizer\": {\"schedule\": \"linear\"}}", "not one of constant, cosine", "an unknown schedule");
    bad_json("{\"optimizer\": {\"beta1\": 1.5}}", "optimizer.beta1: use a number from 0 to", "beta1 out of range");
    bad_json("{\"run\": {\"batch\": 0}}", "run.batch: use a whole number from 1", "batch 0");
    bad_json("{\"run\": {\"steps\": -1}}", "run.steps: use a whole number of at least 0", "negative steps");
    bad_json("{\"run\": 3}", "section run must be an object", "a section that is not an object");
    bad_json("[1, 2]", "top level must be an object", "a top level that is not an object");
    bad_json("{\"run\": {\"batch\": 2,}}", "line 1", "malformed JSON (with its line and column)");
    bad_json("{\"run\": {\"batch\": 2, \"batch\": 3}}", "duplicate", "a duplicated key");
    snprintf(path, sizeof path, "%s/none.json", dir);
    dtrain_train_config_defaults(&c);
    rc = dtrain_train_config_load_json(&c, path, err, sizeof err);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "none.json"), "a missing config file: %s", err);
}

static void test_finish(void)
{
    struct dtrain_train_config c;
    char err[1024] = "";
    dtrain_train_config_defaults(&c);
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "--data"),
       "no token file: %s", err);
    dtrain_train_config_defaults(&c);
    strcpy(c.data, "x.bin");
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_OK && c.model.num_layers == 4 &&
       c.model.channels == 256 && c.model.vocab_size == 256 && c.model.padded_vocab_size == 256 &&
       c.optim.total_steps == c.steps, "a default model when none is given");
    dtrain_train_config_defaults(&c);
    strcpy(c.data, "x.bin");
    c.model.channels = 30;
    c.model.num_heads = 4;
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "multiple"),
       "impossible shape C %% NH != 0: %s", err);
    dtrain_train_config_defaults(&c);
    strcpy(c.data, "x.bin");
    c.model.max_seq_len = 32;
    c.seq = 64;
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "max_seq_len 32"),
       "T > max T: %s", err);
    dtrain_train_config_defaults(&c);
    strcpy(c.data, "x.bin");
    c.model.vocab_size = 300;
    c.model.padded_vocab_size = 200;
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT, "Vp < V: %s", err);
    dtrain_train_config_defaults(&c);
    strcpy(c.data, "x.bin");
    snprintf(c.init_llmc, sizeof c.init_llmc, "%s/none.bin", dir);
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "cannot open"),
       "a missing --init-llmc file: %s", err);
    strcpy(c.resume, "r.ckpt");
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "not both"),
       "--init-llmc and --resume together: %s", err);
    dtrain_train_config_defaults(&c);
    strcpy(c.data, "x.bin");
    strcpy(c.val_data, "v.bin");
    c.val_fraction = 0.1;
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "--val-fraction, not both"),
       "--val-data and --val-fraction together: %s", err);
    char a0[] = "dtrain-train", a1[] = "--val-fraction=0.6";
    char *av[] = {a0, a1};
    int help = 0;
    dtrain_train_config_defaults(&c);
    ok(dtrain_train_config_parse_args(&c, 2, av, &help, err, sizeof err) == DTRAIN_ERR_INPUT &&
       strstr(err, "val-fraction") != NULL, "--val-fraction above 0.5 is refused: %s", err);
    dtrain_train_config_defaults(&c);
    strcpy(c.data, "x.bin");
    c.optim.schedule = DTRAIN_LR_COSINE;
    c.optim.min_lr = 1.0;
    ok(dtrain_train_config_finish(&c, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "min_lr"),
       "min_lr above lr: %s", err);
}

static int parse(struct dtrain_train_config *c, int *help, char *err, size_t errlen, ...)
{
    char *argv[32] = {"dtrain-train"};
    int argc = 1;
    va_list ap;
    va_start(ap, errlen);
    for (char *a; argc < 31 && (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    dtrain_train_config_defaults(c);
    return dtrain_train_config_parse_args(c, argc, argv, help, err, errlen);
}

static void test_flags(void)
{
    struct dtrain_train_config c;
    char err[1024] = "", cfg[2048];
    int help = 0;
    snprintf(cfg, sizeof cfg, "%s", config_file("f.json", "{\"run\": {\"batch\": 3, \"seq\": 16, \"steps\": 9},"
                                                " \"optimizer\": {\"lr\": 0.5}}"));
    int rc = parse(&c, &help, err, sizeof err, "--batch", "5", cfg, "--lr=0.01", "--init-llmc", "m.bin",
                   "--data", "d.bin", "--beta1", "0.8", "--beta2", "0.9", "--eps", "1e-7",
                   "--weight-decay", "0.05", "--seed", "77", "--threads", "3", "--metrics", "x.jsonl",
                   "--steps", "12", NULL);
    ok(rc == DTRAIN_OK && !help, "config file plus flags parse%s%s", rc ? ": " : "", err);
    ok(c.batch == 5 && c.optim.lr == 0.01 && c.steps == 12 && c.seq == 16,
       "flags override the config file, before or after it; unset keys keep the file's value");
    ok(strcmp(c.init_llmc, "m.bin") == 0 && strcmp(c.data, "d.bin") == 0 && c.optim.beta1 == 0.8 &&
       c.optim.beta2 == 0.9 && c.optim.eps == 1e-7 && c.optim.weight_decay == 0.05 && c.seed == 77 &&
       c.threads == 3 && strcmp(c.metrics, "x.jsonl") == 0,
       "--init-llmc --data --beta1 --beta2 --eps --weight-decay --seed --threads --metrics");
    rc = parse(&c, &help, err, sizeof err, "--seq", "8", "--help", NULL);
    ok(rc == DTRAIN_OK && help, "--help is recognised");
    rc = parse(&c, &help, err, sizeof err, "--bacth", "8", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "unknown option '--bacth'"), "an unknown flag: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--batch", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "needs a value"), "a flag without its value: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--batch", "eight", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "--batch"), "a flag with a bad number: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--lr", "1e-3x", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "not a number"), "a flag with a bad real: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--lr", "nan", NULL);
    ok(rc == DTRAIN_ERR_INPUT, "a NaN learning rate: %s", err);
    rc = parse(&c, &help, err, sizeof err, "a.json", "b.json", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "one config file"), "two config files: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--order", "shuffled", "--data-seed", "4", "--schedule", "cosine",
               "--warmup", "3", "--min-lr", "0", "--grad-clip", "1.5", NULL);
    ok(rc == DTRAIN_OK && c.data_order == DTRAIN_ORDER_SHUFFLED && c.data_seed == 4 &&
       c.optim.schedule == DTRAIN_LR_COSINE && c.optim.warmup_steps == 3 && c.optim.grad_clip == 1.5,
       "--order --data-seed --schedule --warmup --min-lr --grad-clip");
    rc = parse(&c, &help, err, sizeof err, "--zero-stage", "2", "--recompute", "selective", "--memory-report", "1",
               NULL);
    ok(rc == DTRAIN_OK && c.zero_stage == 2 && c.recompute == 1 && c.memory_report == 1,
       "--zero-stage 2 --recompute selective --memory-report 1");
    rc = parse(&c, &help, err, sizeof err, "--zero-stage", "2", "--zero1", "1", "--recompute", "full", NULL);
    ok(rc == DTRAIN_OK && c.zero_stage == 1 && c.recompute == 2, "--zero1 1 is an alias of --zero-stage 1 (the "
       "last one given wins); --recompute full");
    rc = parse(&c, &help, err, sizeof err, "--zero1", "0", NULL);
    ok(rc == DTRAIN_OK && c.zero_stage == 0 && c.recompute == 0, "--zero1 0 is stage 0; recompute defaults to none");
    ok(rc == DTRAIN_OK && c.zero_prefetch == 1, "--zero-prefetch defaults to 1 (ZeRO-3 gathers the next unit ahead)");
    rc = parse(&c, &help, err, sizeof err, "--zero-stage", "3", "--zero-prefetch", "0", NULL);
    ok(rc == DTRAIN_OK && c.zero_stage == 3 && c.zero_prefetch == 0, "--zero-stage 3 --zero-prefetch 0");
    rc = parse(&c, &help, err, sizeof err, "--zero-prefetch", "2", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "--zero-prefetch"), "--zero-prefetch 2 is refused: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--zero-stage", "4", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "--zero-stage") && strstr(err, "0 to 3"), "--zero-stage 4: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--recompute", "some", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "none, selective, full"), "--recompute some: %s", err);
    rc = parse(&c, &help, err, sizeof err, NULL);
    ok(rc == DTRAIN_OK && c.virtual_stages == 1, "--virtual-stages defaults to 1 (plain 1F1B)");
    rc = parse(&c, &help, err, sizeof err, "--virtual-stages", "2", NULL);
    ok(rc == DTRAIN_OK && c.virtual_stages == 2, "--virtual-stages 2");
    rc = parse(&c, &help, err, sizeof err, "--virtual-stages", "0", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "--virtual-stages"), "--virtual-stages 0: %s", err);
    rc = load("{\"parallel\": {\"virtual_stages\": 4}}", &c, err, sizeof err);
    ok(rc == DTRAIN_OK && c.virtual_stages == 4, "parallel.virtual_stages in the config file%s%s", rc ? ": " : "",
       rc ? err : "");
    rc = parse(&c, &help, err, sizeof err, NULL);
    ok(rc == DTRAIN_OK && c.sequence_parallel == 0, "--sequence-parallel defaults to off");
    rc = parse(&c, &help, err, sizeof err, "--sequence-parallel", "1", NULL);
    ok(rc == DTRAIN_OK && c.sequence_parallel == 1, "--sequence-parallel 1");
    rc = parse(&c, &help, err, sizeof err, "--sequence-parallel", "maybe", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "--sequence-parallel") && strstr(err, "not a boolean"),
       "--sequence-parallel maybe: %s", err);
    /* a boolean flag alone means on: last, or before another option */
    rc = parse(&c, &help, err, sizeof err, "--memory-report", "--metrics", "m.jsonl", NULL);
    ok(rc == DTRAIN_OK && c.memory_report == 1 && strcmp(c.metrics, "m.jsonl") == 0,
       "--memory-report --metrics m.jsonl: on, and the metrics file is m.jsonl%s%s", rc ? ": " : "", rc ? err : "");
    rc = parse(&c, &help, err, sizeof err, "--batch", "3", "--sequence-parallel", NULL);
    ok(rc == DTRAIN_OK && c.sequence_parallel == 1 && c.batch == 3, "--sequence-parallel last: on%s%s",
       rc ? ": " : "", rc ? err : "");
    rc = parse(&c, &help, err, sizeof err, "--memory-report", "off", "--zero-prefetch", "false", "--dp-overlap",
               "on", "--ckpt-async", "true", NULL);
    ok(rc == DTRAIN_OK && c.memory_report == 0 && c.zero_prefetch == 0 && c.dp_overlap == 1 && c.ckpt_async == 1,
       "boolean values: off, false, on, true%s%s", rc ? ": " : "", rc ? err : "");
    rc = parse(&c, &help, err, sizeof err, "--memory-report=maybe", "--metrics", "m.jsonl", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "--memory-report") && strstr(err, "not a boolean"),
       "--memory-report=maybe is refused: %s", err);
    /* time flags: heartbeats need several polls within the limit */
    rc = parse(&c, &help, err, sizeof err, "--hang-detect", "0.001", NULL);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "--hang-detect") && strstr(err, "at least 1"),
       "--hang-detect 0.001 is refused: %s", err);
    rc = load("{\"fault\": {\"hang_detect\": 0.5}}", &c, err, sizeof err);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "hang_detect") && strstr(err, "at least 1"),
       "fault.hang_detect 0.5 is refused: %s", err);
    rc = parse(&c, &help, err, sizeof err, "--hang-detect", "0", NULL);
    ok(rc == DTRAIN_OK && c.hang_detect == 0.0, "--hang-detect 0 is off");
    rc = parse(&c, &help, err, sizeof err, "--hang-detect", "1", NULL);
    ok(rc == DTRAIN_OK && c.hang_detect == 1.0, "--hang-detect 1 is the shortest limit");
    rc = load("{\"parallel\": {\"sequence_parallel\": true}}", &c, err, sizeof err);
    ok(rc == DTRAIN_OK && c.sequence_parallel == 1, "parallel.sequence_parallel in the config file%s%s",
       rc ? ": " : "", rc ? err : "");
    rc = load("{\"parallel\": {\"zero_stage\": 2, \"recompute\": \"full\"}}", &c, err, sizeof err);
    ok(rc == DTRAIN_OK && c.zero_stage == 2 && c.recompute == 2, "parallel.zero_stage and parallel.recompute in "
       "the config file%s%s", rc ? ": " : "", rc ? err : "");
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dtrain-test-config-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!ok(mkdtemp(dir) != NULL, "a temporary folder"))
        return tap_done();
    test_json();
    test_finish();
    test_flags();
    snprintf(path, sizeof path, "%s/c.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/f.json", dir);
    unlink(path);
    rmdir(dir);
    return tap_done();
}
