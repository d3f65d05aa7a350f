/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Training behaviour end to end through the trainer API: the loss falls on
 * a tiny dataset, runs repeat bit for bit, checkpoints round-trip exactly
 * and a resumed run continues with identical losses, llm.c model files
 * round-trip, the metrics file holds one line per step, and the learning-
 * rate schedule and clipping follow their formulas. */
#include "dtrain_bootstrap.h"
#include "dtrain_comm.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_llmc.h"
#include "dtrain_train.h"
#include "tap.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <unistd.h>

#define STEPS 30

static char dir[1024];

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static int make_data(void)
{
    static const char text[] = "the quick brown fox jumps over the lazy dog; ";
    char err[256] = "", path[DTRAIN_PATH_MAX];
    size_t n = 4000, len = sizeof text - 1;
    uint16_t *tok = malloc(n * sizeof *tok);
    if (tok == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        tok[i] = (unsigned char)text[i % len];
    path_in(path, sizeof path, "data.bin");
    int rc = dtrain_tokens_write(path, tok, n, err, sizeof err);
    free(tok);
    return rc;
}

static void tiny_config(struct dtrain_train_config *c)
{
    char err[256] = "";
    dtrain_train_config_defaults(c);
    path_in(c->data, sizeof c->data, "data.bin");
    c->model = (struct dtrain_model_config){.max_seq_len = 32, .vocab_size = 256,
                                           .padded_vocab_size = 256, .num_layers = 2,
                                           .num_heads = 4, .channels = 32};
    c->batch = 4;
    c->seq = 16;
    c->steps = STEPS;
    c->optim.lr = 3e-3;
    c->threads = 2;
    c->log_every = 0;
    if (dtrain_train_config_finish(c, err, sizeof err) != DTRAIN_OK) {
        diag("config: %s", err);
        abort();
    }
}

/* Run steps [done, until) and record the losses; 0 on success. */
static int run_steps(struct dtrain_trainer *t, long until, float *losses)
{
    char err[256] = "";
    struct dtrain_step_result r;
    while (dtrain_trainer_steps_done(t) < until) {
        if (dtrain_trainer_step(t, &r, err, sizeof err) != DTRAIN_OK) {
            diag("step: %s", err);
            return -1;
        }
        losses[r.step] = r.loss;
    }
    return 0;
}

static float *params_of(struct dtrain_trainer *t)
{
    char err[256] = "";
    float *p = malloc(dtrain_trainer_num_params(t) * sizeof(float));
    if (p == NULL || dtrain_trainer_params(t, p, err, sizeof err) != DTRAIN_OK) {
        diag("params: %s", err);
        abort();
    }
    return p;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* rm -r of a checkpoint folder the test made */
static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The checkpoint in folder ck of step k, read back whole on a communicator
 * of one process: parameters, moments, and where the run was. */
static int read_back(const struct dtrain_train_config *c, const char *ck, float *p, float *m, float *v,
                     struct dtrain_sckpt_resumed *res, char *err, size_t errlen)
{
    struct dtrain_bootstrap bs;
    struct dtrain_comms comms;
    struct dtrain_sckpt_stats st;
    dtrain_bootstrap_local(&bs);
    if (dtrain_comm_init_all(&bs, NULL, &comms, NULL, err, errlen) != DTRAIN_OK)
        return DTRAIN_ERR_SYSTEM;
    struct dtrain_sckpt_piece all = {0, dtrain_model_param_count(&c->model), p, m, v};
    int rc = dtrain_sckpt_resume(ck, c, comms.group[DTRAIN_GROUP_WORLD], &all, 1, stderr, "test", res, &st, err,
                                 errlen);
    dtrain_comm_destroy_all(&comms);
    return rc;
}

static int files_equal(const char *a, const char *b);

static int shard_files_equal(const char *a, const char *b, long step)
{
    char fa[DTRAIN_PATH_MAX + 64], fb[DTRAIN_PATH_MAX + 64];
    snprintf(fa, sizeof fa, "%s/step-%08ld/shard-00000.bin", a, step);
    snprintf(fb, sizeof fb, "%s/step-%08ld/shard-00000.bin", b, step);
    return files_equal(fa, fb);
}

static int create(const struct dtrain_train_config *c, struct dtrain_trainer **t)
{
    char err[256] = "";
    int rc = dtrain_trainer_create(c, t, err, sizeof err);
    if (rc != DTRAIN_OK)
        diag("create: %s", err);
    return rc;
}

static int files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa != NULL && fb != NULL;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_learning_and_determinism(void)
{
    struct dtrain_train_config c;
    struct dtrain_trainer *a = NULL, *b = NULL;
    float la[STEPS], lb[STEPS];
    tiny_config(&c);
    if (!ok(create(&c, &a) == DTRAIN_OK && create(&c, &b) == DTRAIN_OK, "two trainers from one config"))
        goto out;
    int ra = run_steps(a, STEPS, la), rb = run_steps(b, STEPS, lb);
    ok(ra == 0 && rb == 0, "%d steps run", STEPS);
    diag("loss %.4f at step 0, %.4f at step %d", la[0], la[STEPS - 1], STEPS - 1);
    ok(fabsf(la[0] - logf(256.0f)) < 0.3f, "the first loss is about ln(256) = 5.55 (%.4f)", la[0]);
    ok(la[STEPS - 1] < 0.6f * la[0], "the loss falls on a tiny dataset: %.4f -> %.4f", la[0], la[STEPS - 1]);
    ok(memcmp(la, lb, sizeof la) == 0, "same seed and threads: identical losses, bit for bit");
    float *pa = params_of(a), *pb = params_of(b);
    ok(memcmp(pa, pb, dtrain_trainer_num_params(a) * sizeof(float)) == 0,
       "same seed and threads: identical parameters after training");
    free(pa);
    free(pb);
    dtrain_trainer_destroy(b);
    b = NULL;
    c.seed = 99;
    float lc[STEPS];
    if (create(&c, &b) == DTRAIN_OK && run_steps(b, 3, lc) == 0)
        ok(lc[0] != la[0], "another seed gives another run");
    else
        ok(0, "another seed gives another run");
out:
    dtrain_trainer_destroy(a);
    dtrain_trainer_destroy(b);
}

static void test_checkpoint_resume(void)
{
    struct dtrain_train_config c;
    struct dtrain_trainer *whole = NULL, *first = NULL, *second = NULL;
    char err[256] = "", ck[DTRAIN_PATH_MAX], ck2[DTRAIN_PATH_MAX];
    float lw[STEPS], lr[STEPS];
    const long k = 11;
    tiny_config(&c);
    c.data_order = DTRAIN_ORDER_SHUFFLED;
    c.data_seed = 7;
    c.optim.schedule = DTRAIN_LR_COSINE;
    c.optim.warmup_steps = 5;
    c.optim.min_lr = 1e-4;
    c.optim.grad_clip = 1.0;
    path_in(ck, sizeof ck, "run.ckpt");
    path_in(ck2, sizeof ck2, "again.ckpt");
    if (create(&c, &whole) != DTRAIN_OK || run_steps(whole, STEPS, lw) != 0 ||
        create(&c, &first) != DTRAIN_OK || run_steps(first, k, lr) != 0) {
        ok(0, "runs for the resume test");
        goto out;
    }
    ok(dtrain_trainer_save_checkpoint(first, ck, err, sizeof err) == DTRAIN_OK, "checkpoint after %ld steps%s%s",
       k, *err ? ": " : "", err);

    /* round trip: what the folder holds is exactly the trainer's state */
    struct dtrain_sckpt_resumed res;
    size_t n = dtrain_trainer_num_params(first);
    float *p = calloc(n, sizeof(float)), *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    float *live = params_of(first);
    int rc = read_back(&c, ck, p, m, v, &res, err, sizeof err);
    ok(rc == DTRAIN_OK && res.found && memcmp(p, live, n * sizeof(float)) == 0,
       "checkpoint round trip: the parameters read back are bit-identical%s%s", *err ? ": " : "", err);
    ok(rc == DTRAIN_OK && res.step == (uint64_t)k && res.data_batches == (uint64_t)k && res.writer.tp == 1 &&
       res.writer.pp == 1 && res.writer.dp == 1 && res.writer.world_size == 1,
       "checkpoint manifest: step, data position, a layout of one process");
    int moments = 0;
    for (size_t i = 0; i < n; i++)
        moments |= m[i] != 0.0f && v[i] > 0.0f;
    ok(moments, "checkpoint holds the AdamW moments");
    free(p); free(m); free(v); free(live);

    /* resume: the remaining steps give bit-identical losses and parameters */
    struct dtrain_train_config rcfg;
    tiny_config(&rcfg);
    rcfg.data_order = DTRAIN_ORDER_SHUFFLED;
    rcfg.data_seed = 7;
    rcfg.optim = c.optim;
    snprintf(rcfg.resume, sizeof rcfg.resume, "%s", ck);
    memset(&rcfg.model, 0, sizeof rcfg.model); /* the shape comes from the checkpoint */
    if (dtrain_train_config_finish(&rcfg, err, sizeof err) != DTRAIN_OK || create(&rcfg, &second) != DTRAIN_OK) {
        ok(0, "resume from the checkpoint: %s", err);
        goto out;
    }
    ok(dtrain_trainer_steps_done(second) == k, "the resumed trainer starts at step %ld", k);
    ok(dtrain_trainer_save_checkpoint(second, ck2, err, sizeof err) == DTRAIN_OK && shard_files_equal(ck, ck2, k),
       "checkpoint -> resume -> checkpoint: the two shard files are byte-identical");
    if (run_steps(second, STEPS, lr) != 0) {
        ok(0, "resumed steps run");
        goto out;
    }
    ok(memcmp(lw + k, lr + k, (STEPS - k) * sizeof(float)) == 0,
       "resumed run: steps %ld..%d have bit-identical losses to the unbroken run", k, STEPS - 1);
    float *pw = params_of(whole), *pr = params_of(second);
    ok(memcmp(pw, pr, n * sizeof(float)) == 0, "resumed run: identical final parameters");
    free(pw); free(pr);

    /* refusing a checkpoint that does not fit the run */
    dtrain_trainer_destroy(second);
    second = NULL;
    rcfg.batch = 2;
    ok(dtrain_trainer_create(&rcfg, &second, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "batch 4 x 16") &&
       strstr(err, "--batch"), "resume with another batch shape is refused: %s", err);
    rcfg.batch = c.batch;
    rcfg.data_order = DTRAIN_ORDER_SEQUENTIAL;
    ok(dtrain_trainer_create(&rcfg, &second, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "--order"),
       "resume with another data order is refused: %s", err);
out:
    rm_tree(ck);
    rm_tree(ck2);
    dtrain_trainer_destroy(whole);
    dtrain_trainer_destroy(first);
    dtrain_trainer_destroy(second);
}

static void test_llmc_roundtrip(void)
{
    struct dtrain_train_config c, ic;
    struct dtrain_trainer *a = NULL, *b = NULL;
    char err[256] = "", path[DTRAIN_PATH_MAX], path2[DTRAIN_PATH_MAX];
    float l[STEPS];
    tiny_config(&c);
    path_in(path, sizeof path, "model.bin");
    path_in(path2, sizeof path2, "model2.bin");
    if (create(&c, &a) != DTRAIN_OK || run_steps(a, 3, l) != 0 ||
        dtrain_trainer_save_llmc(a, path, err, sizeof err) != DTRAIN_OK) {
        ok(0, "export an llm.c model file: %s", err);
        goto out;
    }
    struct dtrain_model_config got;
    ok(dtrain_llmc_read_config(path, &got, err, sizeof err) == DTRAIN_OK &&
       memcmp(&got, &c.model, sizeof got) == 0, "the llm.c header holds the model shape");
    FILE *f = fopen(path, "rb");
    int32_t h[8] = {0};
    ok(f != NULL && fread(h, sizeof h, 1, f) == 1 && h[0] == 20240326 && h[1] == 3 && h[2] == 32 &&
       h[3] == 256 && h[4] == 2 && h[5] == 4 && h[6] == 32 && h[7] == 256,
       "header ints: magic 20240326, version 3, maxT, V, L, NH, C, Vp");
    if (f)
        fclose(f);
    dtrain_train_config_defaults(&ic);
    snprintf(ic.data, sizeof ic.data, "%s", c.data);
    snprintf(ic.init_llmc, sizeof ic.init_llmc, "%s", path);
    ic.batch = c.batch;
    ic.seq = c.seq;
    ic.threads = 2;
    if (dtrain_train_config_finish(&ic, err, sizeof err) != DTRAIN_OK || create(&ic, &b) != DTRAIN_OK) {
        ok(0, "start from the llm.c model file: %s", err);
        goto out;
    }
    float *pa = params_of(a), *pb = params_of(b);
    size_t n = dtrain_trainer_num_params(a);
    ok(memcmp(pa, pb, n * sizeof(float)) == 0, "llm.c export -> --init-llmc: bit-identical parameters");
    ok(dtrain_trainer_save_llmc(b, path2, err, sizeof err) == DTRAIN_OK && files_equal(path, path2),
       "import -> export gives a byte-identical llm.c file");
    free(pa); free(pb);
    /* the config may repeat the file's shape, not contradict it */
    ic.model.channels = 64;
    ok(dtrain_train_config_finish(&ic, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "channels"),
       "a config shape that contradicts the llm.c file is refused: %s", err);
out:
    unlink(path);
    unlink(path2);
    dtrain_trainer_destroy(a);
    dtrain_trainer_destroy(b);
}

static void test_run_metrics(void)
{
    struct dtrain_train_config c;
    struct dtrain_trainer *t = NULL, *ref = NULL;
    char err[256] = "", path[DTRAIN_PATH_MAX];
    float l[STEPS];
    tiny_config(&c);
    c.steps = 5;
    c.optim.total_steps = 5;
    path_in(path, sizeof path, "metrics.jsonl");
    snprintf(c.metrics, sizeof c.metrics, "%s", path);
    if (create(&c, &t) != DTRAIN_OK || create(&c, &ref) != DTRAIN_OK || run_steps(ref, 5, l) != 0) {
        ok(0, "trainers for the metrics test");
        goto out;
    }
    ok(dtrain_trainer_run(t, NULL, err, sizeof err) == DTRAIN_OK && dtrain_trainer_steps_done(t) == 5,
       "dtrain_trainer_run trains until steps are done");
    FILE *f = fopen(path, "r");
    char line[1024];
    int lines = 0, good = 1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_t *step = json_object_get(o, "step"), *loss = json_object_get(o, "loss");
        good &= o != NULL && json_is_integer(step) && json_integer_value(step) == lines &&
                json_is_number(loss) && (float)json_number_value(loss) == l[lines] &&
                json_object_get(o, "lr") && json_object_get(o, "ms") &&
                json_object_get(o, "tokens_per_s") && json_object_get(o, "gflops");
        json_decref(o);
        lines++;
    }
    if (f)
        fclose(f);
    ok(lines == 5 && good, "metrics: one JSON object per step, step from 0, the batch's loss before the update");
out:
    unlink(path);
    dtrain_trainer_destroy(t);
    dtrain_trainer_destroy(ref);
}

/* --val-fraction, --val-every, --val-batches through the loop: the
 * validation loss in the metrics lines of the steps it was computed after,
 * and in their progress lines. */
static void test_run_validation(void)
{
    struct dtrain_train_config c;
    struct dtrain_trainer *t = NULL;
    char err[256] = "", path[DTRAIN_PATH_MAX];
    tiny_config(&c);
    c.steps = 5;
    c.optim.total_steps = 5;
    c.val_fraction = 0.25;
    c.val_every = 2;
    c.val_batches = 2;
    c.log_every = 100; /* only the first, the last and the validated steps print */
    path_in(path, sizeof path, "val-metrics.jsonl");
    snprintf(c.metrics, sizeof c.metrics, "%s", path);
    FILE *progress = tmpfile();
    if (progress == NULL || create(&c, &t) != DTRAIN_OK) {
        ok(0, "a trainer with --val-fraction");
        goto out;
    }
    ok(dtrain_trainer_run(t, progress, err, sizeof err) == DTRAIN_OK, "a run with validation every 2 steps (%s)",
       err[0] ? err : "ok");
    FILE *f = fopen(path, "r");
    char line[1024];
    int lines = 0, good = 1;
    double first = NAN, last = NAN;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je), *v = json_object_get(o, "val_loss");
        int want = lines == 1 || lines == 3 || lines == 4; /* after steps 2, 4 and the last */
        good &= o != NULL && (want ? json_is_number(v) && isfinite(json_number_value(v)) : v == NULL);
        if (want && json_is_number(v)) {
            if (isnan(first))
                first = json_number_value(v);
            last = json_number_value(v);
        }
        json_decref(o);
        lines++;
    }
    if (f)
        fclose(f);
    ok(lines == 5 && good, "val_loss in the metrics lines of steps 1, 3 and 4 only");
    ok(last < first, "the validation loss falls on the held-out tail of the same text (%.4f -> %.4f)", first, last);
    rewind(progress);
    int printed = 0;
    while (fgets(line, sizeof line, progress) != NULL)
        printed += strstr(line, "| val loss ") != NULL;
    ok(printed == 3, "the progress lines of those 3 steps show the validation loss (%d)", printed);
out:
    if (progress != NULL)
        fclose(progress);
    unlink(path);
    dtrain_trainer_destroy(t);
}

/* MFU against a declared peak, checked with the FLOPs of tiny_config's
 * shape counted by hand: L=2, C=32, Vp=256, B=4, T=16, N = B*T = 64.
 *   matmuls per token, forward: 2 x (12 L C^2 + C Vp) = 2 x (24576 + 8192) = 65536
 *   attention, forward: 4 L B T^2 C = 4 x 2 x 4 x 256 x 32 = 262144
 *   a step (forward + backward = 3 x forward): 3 x (64 x 65536 + 262144) = 13369344 */
static void test_mfu(void)
{
    struct dtrain_train_config c;
    struct dtrain_trainer *t = NULL;
    struct dtrain_step_result r;
    char err[256] = "";
    tiny_config(&c);
    c.peak_flops = 1e9;
    if (create(&c, &t) != DTRAIN_OK || dtrain_trainer_step(t, &r, err, sizeof err) != DTRAIN_OK) {
        ok(0, "a trainer with --peak-flops 1e9 steps (%s)", err);
        dtrain_trainer_destroy(t);
        return;
    }
    double hand = 13369344.0, want = hand / (r.ms * 1e-3) / 1e9;
    ok(fabs(r.gflops - hand / (r.ms * 1e-3) * 1e-9) <= 1e-9 * r.gflops,
       "GFLOP/s is the hand-counted 13369344 FLOPs per step over the step's time (%.4f)", r.gflops);
    ok(r.mfu > 0.0 && fabs(r.mfu - want) <= 1e-9 * want,
       "MFU = 13369344 FLOPs / %.3f ms / 1e9 FLOP/s declared = %.6f (trainer: %.6f)", r.ms, want, r.mfu);
    dtrain_trainer_destroy(t);
}

static void test_schedule_and_clip(void)
{
    struct dtrain_optim_config c = {.lr = 1.0, .schedule = DTRAIN_LR_CONSTANT};
    ok(dtrain_lr_at(&c, 0) == 1.0 && dtrain_lr_at(&c, 1000) == 1.0, "constant schedule");
    c = (struct dtrain_optim_config){.lr = 1.0, .schedule = DTRAIN_LR_COSINE, .warmup_steps = 4,
                                     .min_lr = 0.1, .total_steps = 14};
    ok(fabs(dtrain_lr_at(&c, 0) - 0.25) < 1e-12 && fabs(dtrain_lr_at(&c, 3) - 1.0) < 1e-12,
       "cosine: linear warm-up (step 0 -> lr/4, step 3 -> lr)");
    ok(fabs(dtrain_lr_at(&c, 4) - 1.0) < 1e-12 && fabs(dtrain_lr_at(&c, 13) - 0.1) < 1e-12 &&
       fabs(dtrain_lr_at(&c, 8) - (0.1 + 0.5 * 0.9 * (1 + cos(M_PI * 4.0 / 9.0)))) < 1e-12,
       "cosine: from lr after warm-up down to min_lr at the last step");
    ok(dtrain_lr_at(&c, 9) < dtrain_lr_at(&c, 8), "cosine decreases after warm-up");
    struct dtrain_optim_config clip = {.grad_clip = 2.0};
    ok(dtrain_clip_scale(&clip, 8.0) == 0.25f && dtrain_clip_scale(&clip, 1.0) == 1.0f,
       "clipping scales a norm above grad_clip down to grad_clip, leaves smaller ones");
    clip.grad_clip = 0.0;
    ok(dtrain_clip_scale(&clip, 1e9) == 1.0f, "grad_clip 0 means no clipping");
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dtrain-test-train-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!ok(mkdtemp(dir) != NULL && make_data() == DTRAIN_OK, "a temporary folder with a token file"))
        return tap_done();
    test_learning_and_determinism();
    test_checkpoint_resume();
    test_llmc_roundtrip();
    test_run_metrics();
    test_run_validation();
    test_mfu();
    test_schedule_and_clip();
    char path[DTRAIN_PATH_MAX];
    path_in(path, sizeof path, "data.bin");
    unlink(path);
    rmdir(dir);
    return tap_done();
}
