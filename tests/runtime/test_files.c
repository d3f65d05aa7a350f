/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Token files, llm.c model files and what --resume reads of a checkpoint
 * folder: the layouts, the batch order, and a clear DTRAIN_ERR_INPUT for
 * every kind of bad file (missing, wrong magic or version, truncated, too
 * long, impossible or mismatched shape, a file where a folder belongs). */
#include "dtrain_shard_ckpt.h"
#include "dtrain_data.h"
#include "dtrain_llmc.h"
#include "dtrain_rng.h"
#include "tap.h"

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

/* A file of a 256-int header (first ints given) and `payload` bytes of pattern. */
static const char *write_file(const char *name, const int32_t *head, int nhead, size_t payload)
{
    int32_t h[256] = {0};
    memcpy(h, head, (size_t)nhead * sizeof(int32_t));
    const char *p = in_dir(name);
    FILE *f = fopen(p, "wb");
    if (f == NULL)
        abort();
    fwrite(h, sizeof h, 1, f);
    for (size_t i = 0; i < payload; i++)
        fputc((int)(i % 7), f);
    fclose(f);
    return p;
}

/* Expect DTRAIN_ERR_INPUT and `needle` in the message. */
static void expect_bad(int rc, const char *err, const char *needle, const char *what)
{
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, needle) != NULL, "%s: %s", what, err);
}

static void test_token_files(void)
{
    char err[512] = "";
    struct dtrain_tokens *t = NULL;
    expect_bad(dtrain_tokens_open(in_dir("missing.bin"), &t, err, sizeof err), err, "cannot open",
               "a missing token file");
    int32_t good[3] = {20240520, 1, 100};
    int32_t magic[3] = {20240326, 1, 100}, version[3] = {20240520, 2, 100}, neg[3] = {20240520, 1, -5};
    expect_bad(dtrain_tokens_open(write_file("m.bin", magic, 3, 200), &t, err, sizeof err), err,
               "not a token file", "a token file with the wrong magic");
    expect_bad(dtrain_tokens_open(write_file("v.bin", version, 3, 200), &t, err, sizeof err), err,
               "version 2", "a token file with the wrong version");
    expect_bad(dtrain_tokens_open(write_file("t.bin", good, 3, 150), &t, err, sizeof err), err,
               "truncated", "a truncated token file");
    expect_bad(dtrain_tokens_open(write_file("l.bin", good, 3, 202), &t, err, sizeof err), err,
               "too long", "a token file longer than its header says");
    expect_bad(dtrain_tokens_open(write_file("n.bin", neg, 3, 0), &t, err, sizeof err), err,
               "negative", "a negative token count");
    FILE *f = fopen(in_dir("s.bin"), "wb");
    fwrite(good, sizeof good, 1, f);
    fclose(f);
    expect_bad(dtrain_tokens_open(in_dir("s.bin"), &t, err, sizeof err), err, "truncated",
               "a file shorter than the header");
    expect_bad(dtrain_tokens_open(dir, &t, err, sizeof err), err, "is a directory",
               "a folder given as a token file");
    ok(t == NULL, "no handle is returned for a bad file");

    /* a good one: 1000 tokens, token i = i */
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++)
        tok[i] = (uint16_t)i;
    ok(dtrain_tokens_write(in_dir("good.bin"), tok, 1000, err, sizeof err) == DTRAIN_OK &&
       dtrain_tokens_open(in_dir("good.bin"), &t, err, sizeof err) == DTRAIN_OK,
       "write and open a token file");
    if (t == NULL)
        return;
    ok(dtrain_tokens_count(t) == 1000 && dtrain_tokens_max_id(t) == 999, "count and largest token id");
    uint64_t nb = 0;
    expect_bad(dtrain_tokens_batches(t, 10, 100, &nb, err, sizeof err), err, "needs at least 1001",
               "a batch larger than the file");
    ok(dtrain_tokens_batches(t, 3, 33, &nb, err, sizeof err) == DTRAIN_OK && nb == 10,
       "batches of 3 x 33 in 1000 tokens: (1000-1)/99 = 10");
    int32_t in[99], tg[99];
    dtrain_tokens_batch(t, 3, 33, DTRAIN_ORDER_SEQUENTIAL, 0, 2, in, tg);
    int seq_ok = 1;
    for (int i = 0; i < 99; i++)
        seq_ok &= in[i] == 2 * 99 + i && tg[i] == 2 * 99 + i + 1;
    ok(seq_ok, "sequential batch k = tokens k*B*T .. +B*T, targets shifted by one");
    int32_t in2[99], tg2[99];
    dtrain_tokens_batch(t, 3, 33, DTRAIN_ORDER_SEQUENTIAL, 0, 12, in2, tg2);
    ok(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0,
       "sequential order wraps to the start after the last whole batch");

    /* shuffled: every epoch a permutation of the batches, fixed by the seed */
    int seen[10] = {0}, differs = 0, repeat = 1, other_seed = 0;
    for (uint64_t k = 0; k < 10; k++) {
        dtrain_tokens_batch(t, 3, 33, DTRAIN_ORDER_SHUFFLED, 5, k, in, tg);
        int slot = in[0] / 99; /* the batch starts at token slot * B*T */
        if (in[0] % 99 == 0 && slot < 10)
            seen[slot]++;
        differs |= slot != (int)k;
        dtrain_tokens_batch(t, 3, 33, DTRAIN_ORDER_SHUFFLED, 5, k, in2, tg2);
        repeat &= memcmp(in, in2, sizeof in) == 0;
        dtrain_tokens_batch(t, 3, 33, DTRAIN_ORDER_SHUFFLED, 6, k, in2, tg2);
        other_seed |= memcmp(in, in2, sizeof in) != 0;
    }
    int perm = 1;
    for (int s = 0; s < 10; s++)
        perm &= seen[s] == 1;
    ok(perm && differs, "shuffled order: one epoch visits every batch once, not in file order");
    ok(repeat && other_seed, "shuffled order is fixed by its seed and changes with it");

    /* --val-fraction: the tail held out, the head left to training */
    struct dtrain_tokens *val = NULL;
    expect_bad(dtrain_tokens_split(t, 0.0001, &val, err, sizeof err), err, "validation part",
               "a fraction that holds out no token");
    ok(val == NULL && dtrain_tokens_count(t) == 1000, "a refused split leaves the file whole");
    ok(dtrain_tokens_split(t, 0.1, &val, err, sizeof err) == DTRAIN_OK && val != NULL &&
       dtrain_tokens_count(t) == 900 && dtrain_tokens_count(val) == 100, "a split of 0.1: 900 tokens train, 100 validate");
    if (val != NULL) {
        dtrain_tokens_batch(val, 3, 33, DTRAIN_ORDER_SEQUENTIAL, 0, 0, in, tg);
        ok(in[0] == 900 && tg[98] == 999, "validation batch 0 starts at the first held-out token");
        ok(dtrain_tokens_batches(t, 3, 33, &nb, err, sizeof err) == DTRAIN_OK && nb == 9,
           "the training part's last batch ends before the held-out tokens: (900-1)/99 = 9 batches");
    }
    dtrain_tokens_close(val);
    dtrain_tokens_close(t);
    t = NULL;

    int bij = 1;
    uint64_t sizes[] = {1, 2, 3, 5, 17, 64, 1000, 4097};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        char *hit = calloc(n, 1);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t j = dtrain_rng_permute(i, n, 12345);
            if (j >= n || hit[j])
                bij = 0;
            else
                hit[j] = 1;
        }
        free(hit);
    }
    ok(bij, "dtrain_rng_permute is a bijection of [0, n) for n = 1, 2, 3, 5, 17, 64, 1000, 4097");
}

static const struct dtrain_model_config shape = {
    .max_seq_len = 8, .vocab_size = 10, .padded_vocab_size = 16,
    .num_layers = 1, .num_heads = 2, .channels = 4,
};

static void test_llmc_files(void)
{
    char err[512] = "";
    struct dtrain_model_config got;
    size_t bytes = dtrain_model_param_count(&shape) * sizeof(float);
    int32_t good[8] = {20240326, 3, 8, 10, 1, 2, 4, 16};
    float *params = calloc(dtrain_model_param_count(&shape), sizeof(float));
    ok(dtrain_llmc_read_config(write_file("ok.bin", good, 8, bytes), &got, err, sizeof err) == DTRAIN_OK &&
       memcmp(&got, &shape, sizeof got) == 0, "a well-formed llm.c model file is read");
    ok(dtrain_llmc_load(path, &shape, params, err, sizeof err) == DTRAIN_OK, "and loaded");
    expect_bad(dtrain_llmc_read_config(in_dir("none.bin"), &got, err, sizeof err), err, "cannot open",
               "a missing llm.c model file");
    int32_t h[8];
    memcpy(h, good, sizeof h);
    h[0] = 20240520;
    expect_bad(dtrain_llmc_read_config(write_file("bad.bin", h, 8, bytes), &got, err, sizeof err), err,
               "not an llm.c model file", "an llm.c model file with the wrong magic");
    memcpy(h, good, sizeof h);
    h[1] = 5;
    expect_bad(dtrain_llmc_read_config(write_file("bad.bin", h, 8, bytes), &got, err, sizeof err), err,
               "version 5", "an llm.c model file of another version (bf16)");
    expect_bad(dtrain_llmc_read_config(write_file("bad.bin", good, 8, bytes - 4), &got, err, sizeof err),
               err, "truncated", "a truncated llm.c model file");
    expect_bad(dtrain_llmc_read_config(write_file("bad.bin", good, 8, bytes + 4), &got, err, sizeof err),
               err, "too long", "an llm.c model file longer than its shape");
    memcpy(h, good, sizeof h);
    h[5] = 3; /* C=4, NH=3 */
    expect_bad(dtrain_llmc_read_config(write_file("bad.bin", h, 8, bytes), &got, err, sizeof err), err,
               "impossible shape", "an llm.c model file with C % NH != 0");
    memcpy(h, good, sizeof h);
    h[7] = 8; /* Vp < V */
    expect_bad(dtrain_llmc_read_config(write_file("bad.bin", h, 8, bytes), &got, err, sizeof err), err,
               "impossible shape", "an llm.c model file with Vp < V");
    struct dtrain_model_config other = shape;
    other.max_seq_len = 16;
    expect_bad(dtrain_llmc_load(write_file("ok.bin", good, 8, bytes), &other, params, err, sizeof err),
               err, "has shape", "an llm.c model file whose shape differs from the model");
    free(params);
}

/* What --resume reads before anything is built (dtrain_sckpt_read_model);
 * the checkpoints themselves are tested in tests/fault/test_sckpt.c. */
static void test_resume_folders(void)
{
    char err[512] = "";
    struct dtrain_model_config got;
    int32_t words[4] = {1, 2, 3, 4};
    expect_bad(dtrain_sckpt_read_model(write_file("old.ckpt", words, 4, 16), &got, err, sizeof err),
               err, "is a file, not a folder", "a file given as checkpoint folder (the single-file format of old)");
    expect_bad(dtrain_sckpt_read_model(in_dir("none"), &got, err, sizeof err), err, "holds no complete checkpoint",
               "a missing checkpoint folder");
    char empty[2048], step[2100];
    snprintf(empty, sizeof empty, "%s", in_dir("empty"));
    snprintf(step, sizeof step, "%s/step-00000003", empty);
    if (mkdir(empty, 0700) != 0 || mkdir(step, 0700) != 0)
        abort();
    expect_bad(dtrain_sckpt_read_model(empty, &got, err, sizeof err), err, "holds no complete checkpoint",
               "a folder whose only step has no manifest (an interrupted save)");
    char manifest[2200];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", step);
    FILE *f = fopen(manifest, "w");
    if (f == NULL)
        abort();
    fputs("{\"config\": {\"model\": {\"num_layers\": 2, \"channels\": 0}}}", f);
    fclose(f);
    expect_bad(dtrain_sckpt_read_model(empty, &got, err, sizeof err), err, "no valid config.model",
               "a manifest without a valid model shape");
    unlink(manifest);
    rmdir(step);
    rmdir(empty);
}

/* A file of llm.c's uint32 variant (magic 20240801, version 7). */
static void write_tokens32(const char *p, const uint32_t *tok, size_t n)
{
    int32_t h[256] = {DTRAIN_TOKENS32_MAGIC, DTRAIN_TOKENS32_VERSION, (int32_t)n};
    FILE *f = fopen(p, "wb");
    if (f == NULL)
        abort();
    fwrite(h, sizeof h, 1, f);
    fwrite(tok, sizeof *tok, n, f);
    fclose(f);
}

/* --data GLOB: llm.c's shards read as one stream; every batch, in either
 * order, and every data-parallel rank's rows equal those of one file. */
static void test_shards(void)
{
    char err[512] = "", sub[1100], pat[1200], name[1200];
    snprintf(sub, sizeof sub, "%s/shards", dir);
    if (!ok(mkdir(sub, 0700) == 0, "a folder for shards"))
        return;
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++)
        tok[i] = (uint16_t)((i * 37) % 1000);
    struct dtrain_tokens *one = NULL, *many = NULL;
    ok(dtrain_tokens_write(in_dir("whole.bin"), tok, 1000, err, sizeof err) == DTRAIN_OK &&
       dtrain_tokens_open(in_dir("whole.bin"), &one, err, sizeof err) == DTRAIN_OK, "one file of 1000 tokens");
    /* written last to first: the order is the names', not the files' age */
    static const size_t cut[4] = {0, 400, 750, 1000};
    int wrote = 1;
    for (int i = 2; i >= 0; i--) {
        snprintf(name, sizeof name, "%s/tiny_train_%06d.bin", sub, i);
        wrote &= dtrain_tokens_write(name, tok + cut[i], cut[i + 1] - cut[i], err, sizeof err) == DTRAIN_OK;
    }
    snprintf(pat, sizeof pat, "%s/tiny_train_*.bin", sub);
    ok(wrote && dtrain_tokens_open(pat, &many, err, sizeof err) == DTRAIN_OK && dtrain_tokens_files(many) == 3 &&
       dtrain_tokens_count(many) == 1000, "the same tokens as 3 shards, opened by a glob (%s)", err[0] ? err : "ok");
    if (one != NULL && many != NULL) {
        int same = 1, rows_same = 1;
        int32_t a[99], b[99], at[99], bt[99];
        for (int order = 0; order < 2; order++)
            for (uint64_t k = 0; k < 25; k++) {
                dtrain_tokens_batch(one, 3, 33, (enum dtrain_data_order)order, 9, k, a, at);
                dtrain_tokens_batch(many, 3, 33, (enum dtrain_data_order)order, 9, k, b, bt);
                same &= memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0;
                /* D = 3: each rank its row; D = 1 with the rows read 2 + 1 */
                for (int r = 0; r < 3; r++)
                    dtrain_tokens_rows(many, 3, 33, (enum dtrain_data_order)order, 9, k, r, 1, b + 33 * r, bt + 33 * r);
                rows_same &= memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0;
                dtrain_tokens_rows(many, 3, 33, (enum dtrain_data_order)order, 9, k, 0, 2, b, bt);
                dtrain_tokens_rows(many, 3, 33, (enum dtrain_data_order)order, 9, k, 2, 1, b + 66, bt + 66);
                rows_same &= memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0;
            }
        ok(same, "glob order: every batch of 25 steps, sequential and shuffled, equals the one file's "
           "(batches span the shards' boundaries)");
        ok(rows_same, "data-parallel slicing: the rows each of D = 3 or D = 1 ranks reads make up the one file's batch");
        ok(dtrain_tokens_max_id(many) == 999 && strstr(dtrain_tokens_max_id_file(many), "tiny_train_") != NULL,
           "the largest token id (%d) and the shard that holds it (%s)", dtrain_tokens_max_id(many),
           dtrain_tokens_max_id_file(many));
    }
    dtrain_tokens_close(many);
    many = NULL;
    dtrain_tokens_close(one);

    /* the uint32 variant: ids above 65535 */
    uint32_t big[300];
    for (int i = 0; i < 300; i++)
        big[i] = 70000u + (uint32_t)i;
    snprintf(name, sizeof name, "%s/tiny_train_000003.bin", sub);
    write_tokens32(name, big, 300);
    ok(dtrain_tokens_open(pat, &many, err, sizeof err) == DTRAIN_OK && dtrain_tokens_count(many) == 1300 &&
       dtrain_tokens_max_id(many) == 70299, "a uint32 shard (magic %d version %d) among uint16 ones: %s",
       DTRAIN_TOKENS32_MAGIC, DTRAIN_TOKENS32_VERSION, err[0] ? err : "ok");
    if (many != NULL) {
        int32_t in[10], tg[10];
        dtrain_tokens_rows(many, 1, 10, DTRAIN_ORDER_SEQUENTIAL, 0, 100, 0, 1, in, tg); /* tokens 1000.. */
        ok(in[0] == 70000 && tg[9] == 70010, "its tokens read as ids 70000.. (%d %d)", in[0], tg[9]);
    }
    dtrain_tokens_close(many);
    many = NULL;

    /* bad shards: refused with the file's name */
    snprintf(name, sizeof name, "%s/tiny_train_000004.bin", sub);
    FILE *f = fopen(name, "wb");
    int32_t h[256] = {DTRAIN_TOKENS_MAGIC, DTRAIN_TOKENS_VERSION, 500};
    fwrite(h, sizeof h, 1, f);
    fwrite(tok, 2, 100, f);
    fclose(f);
    expect_bad(dtrain_tokens_open(pat, &many, err, sizeof err), err, "tiny_train_000004.bin is truncated",
               "a truncated shard among good ones");
    h[0] = 12345;
    f = fopen(name, "wb");
    fwrite(h, sizeof h, 1, f);
    fclose(f);
    expect_bad(dtrain_tokens_open(pat, &many, err, sizeof err), err, "tiny_train_000004.bin is not a token file",
               "a shard with the wrong magic");
    unlink(name);
    snprintf(pat, sizeof pat, "%s/nothing_*.bin", sub);
    expect_bad(dtrain_tokens_open(pat, &many, err, sizeof err), err, "no token file matches", "a glob matching nothing");
    ok(many == NULL, "no handle for a bad data set");
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s/tiny_train_%06d.bin", sub, i);
        unlink(name);
    }
    unlink(in_dir("whole.bin"));
    rmdir(sub);
}

/* dtrain_tokens_write32: llm.c's llama-3 layout, ids beyond uint16 read back. */
static void test_token_files32(void)
{
    char err[512] = "";
    struct dtrain_tokens *t = NULL;
    uint32_t tok[300];
    for (int i = 0; i < 300; i++)
        tok[i] = 128000u + (uint32_t)i;
    ok(dtrain_tokens_write32(in_dir("w32.bin"), tok, 300, err, sizeof err) == DTRAIN_OK &&
       dtrain_tokens_open(in_dir("w32.bin"), &t, err, sizeof err) == DTRAIN_OK,
       "write and open a uint32 token file");
    if (t == NULL)
        return;
    ok(dtrain_tokens_count(t) == 300 && dtrain_tokens_max_id(t) == 128299, "uint32: count and largest id 128299");
    int32_t in[20], tg[20];
    dtrain_tokens_batch(t, 2, 10, DTRAIN_ORDER_SEQUENTIAL, 0, 1, in, tg);
    ok(in[0] == 128020 && tg[19] == 128040, "uint32: batch 1 of 2 x 10 holds ids 128020 .. 128040");
    dtrain_tokens_close(t);
    FILE *f = fopen(in_dir("w32.bin"), "rb");
    int32_t head[3] = {0};
    ok(f != NULL && fread(head, sizeof head, 1, f) == 1 && head[0] == 20240801 && head[1] == 7 && head[2] == 300,
       "uint32 header: magic 20240801, version 7, count");
    if (f != NULL)
        fclose(f);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dtrain-test-files-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!ok(mkdtemp(dir) != NULL, "a temporary folder"))
        return tap_done();
    test_token_files();
    test_token_files32();
    test_shards();
    test_llmc_files();
    test_resume_folders();
    static const char *const names[] = {"m.bin", "v.bin", "t.bin", "l.bin", "n.bin", "s.bin", "good.bin",
                                        "ok.bin", "bad.bin", "c.ckpt", "bad.ckpt", "w32.bin"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(in_dir(names[i]));
    rmdir(dir);
    return tap_done();
}
