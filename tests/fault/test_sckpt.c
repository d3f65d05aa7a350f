/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Sharded checkpoints (runtime/ckpt/dtrain_shard_ckpt.h) written and read by
 * real ranks (tests/parallel/local_boot.h: local processes, the launcher's
 * ids, real communicators):
 *  - a checkpoint of a (2,1,2) ZeRO-1 run loads into (2,1,2), (1,1,1),
 *    (1,2,1) ZeRO-1, (2,2,2) and (1,1,4) ZeRO-1: saved again there it holds
 *    the same bits (parameters, both AdamW moments), and the next step's
 *    loss is the original run's (bit for bit in the same layout, within
 *    doc/parallel.md's 1e-5 elsewhere);
 *  - damage (a flipped byte, a missing shard, a garbage manifest, a short
 *    shard) makes the resume fall back to the checkpoint before, which is
 *    renamed step-N.damaged, down to "none left"; leftovers of interrupted
 *    saves (*.tmp) go;
 *  - a checkpoint written by one process (dtrain_train.h, dtrain-train's
 *    trainer) loads into (2,2,2) ZeRO-1, and one process resumes the
 *    (2,1,2) checkpoint;
 *  - a checkpoint of another model or seed is refused, not skipped;
 *  - a shard write that fails (injected ENOSPC) fails the save on every
 *    rank and commits nothing; the older checkpoints stay;
 *  - only the newest --ckpt-keep checkpoints are kept;
 *  - at ZeRO >= 1 the resume loads as a DP group (dtrain_ft_pieces_group,
 *    as the trainer does): a rank of (1,1,4) opens 1 of the 4 shards of a
 *    (1,1,4) ZeRO-1 or ZeRO-3 checkpoint at stages 1, 2 and 3, a rank of
 *    (1,1,2) 2, counted by the resume (shards_opened), the bits saved
 *    again the same;
 *  - virtual stages and sequence parallelism change across a resume. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer/dtrain_ft.h"
#include "ft/dtrain_inject.h"
#include "dtrain_parallel.h"
#include "dtrain_shard_ckpt.h"
#include "dtrain_train.h"
#include "harness.h"
#include "local_boot.h"
#include "tap.h"

#define MAX_STEPS 8
#define LOSS_RTOL 1e-5

struct job {
    struct dtrain_train_config cfg;
    char load_dir[512]; /* "": start afresh */
    char save_dir[512];
    int steps;          /* trained after loading */
    int save_every;     /* save after steps done % this == 0; 0: never */
    int save_after_load;
    int fail_rank, fail_step; /* this rank's save at this step fails (ENOSPC) */
};

struct area {
    int ok;
    char err[512];
    int found;
    long resumed;
    int nsaves;
    int save_rc[MAX_STEPS + 1];
    float loss[MAX_STEPS];
    uint64_t opened; /* shard files the resume opened */
};

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct job *j = ctx;
    struct area *a = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    struct dtrain_ft_pieces pieces = {0};
    struct dtrain_comm_options o;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = 20000;
    if (dtrain_comm_init_all(bs, &o, &comms, NULL, a->err, sizeof a->err) != DTRAIN_OK)
        return 3;
    dtrain_comm *world = comms.group[DTRAIN_GROUP_WORLD];
    struct dtrain_sckpt_layout L = {
        .pos = bs->pos, .zero1 = j->cfg.zero_stage >= 1, .virtual_stages = j->cfg.virtual_stages};
    struct dtrain_sckpt_stats st;
    int rc = dtrain_ptrainer_create(&j->cfg, bs, &comms, &t, a->err, sizeof a->err);
    if (rc == DTRAIN_OK)
        rc = dtrain_ft_pieces(t, &j->cfg, bs, &pieces, a->err, sizeof a->err);
    if (rc == DTRAIN_OK && j->load_dir[0] != '\0') {
        struct dtrain_sckpt_resumed res;
        FILE *quiet = fopen("/dev/null", "w");
        /* as the trainer loads (dtrain_ft_ckpt.c): at ZeRO >= 1 as a DP group */
        const struct dtrain_sckpt_group group = dtrain_ft_pieces_group(&pieces);
        rc = dtrain_sckpt_resume_group(j->load_dir, &j->cfg, world, &group, pieces.load, pieces.nload, quiet, "test",
                                       &res, &st, a->err, sizeof a->err);
        if (quiet != NULL)
            fclose(quiet);
        a->found = res.found;
        a->resumed = (long)res.step;
        a->opened = st.shards_opened;
        if (rc == DTRAIN_OK && res.found) {
            rc = dtrain_ft_pieces_upload(&pieces, a->err, sizeof a->err); /* the pieces are a host copy of the trainer's memory */
            dtrain_ptrainer_set_position(t, (long)res.step, res.data_batches);
        }
    }
    if (rc == DTRAIN_OK)
        rc = dtrain_ft_pieces_download(&pieces, a->err, sizeof a->err);
    if (rc == DTRAIN_OK && j->save_after_load)
        rc = dtrain_sckpt_save(j->save_dir, &j->cfg, &L, (uint64_t)dtrain_ptrainer_steps_done(t),
                               dtrain_ptrainer_data_batches(t), NULL, world, pieces.save, pieces.nsave, 100, 0, &st,
                               a->err, sizeof a->err);
    for (int s = 0; rc == DTRAIN_OK && s < j->steps; s++) {
        struct dtrain_pstep_result r;
        rc = dtrain_ptrainer_step(t, &r, a->err, sizeof a->err);
        a->loss[s] = r.base.loss;
        long done = dtrain_ptrainer_steps_done(t);
        if (rc == DTRAIN_OK && j->save_every > 0 && done % j->save_every == 0) {
            int fail = bs->rank == j->fail_rank && done == j->fail_step;
            char why[512];
            if ((rc = dtrain_ft_pieces_download(&pieces, a->err, sizeof a->err)) != DTRAIN_OK)
                break;
            int src = dtrain_sckpt_save(j->save_dir, &j->cfg, &L, (uint64_t)done, dtrain_ptrainer_data_batches(t),
                                        NULL, world, pieces.save, pieces.nsave, j->cfg.ckpt_keep, fail, &st, why,
                                        sizeof why);
            a->save_rc[a->nsaves++] = src;
            if (src != DTRAIN_OK && src != DTRAIN_ERR_SYSTEM) {
                rc = src;
                snprintf(a->err, sizeof a->err, "%s", why);
            }
        }
    }
    a->ok = rc == DTRAIN_OK;
    dtrain_ft_pieces_free(&pieces);
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return rc == DTRAIN_OK ? 0 : 1;
}

/* Run job in layout (tp, pp, dp); rank 0's area into *a0; 0 when every
 * rank ended well. */
static int run(const struct job *j, int tp, int pp, int dp, struct area *a0, struct area *all)
{
    int world = tp * pp * dp, codes[LOCAL_BOOT_MAX_WORLD];
    char err[512];
    memset(all, 0, (size_t)world * sizeof *all);
    int rc = local_boot_run(tp, pp, dp, rank_main, (void *)j, sizeof(struct area), all, codes, 120, err, sizeof err);
    *a0 = all[0];
    if (rc != 0) {
        diag("(%d,%d,%d): %s", tp, pp, dp, err);
        for (int r = 0; r < world; r++)
            if (!all[r].ok)
                diag("  rank %d (exit %d): %s", r, codes[r], all[r].err);
    }
    return rc;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static double rel(float a, float b)
{
    return fabs((double)a - b) / fabs((double)b);
}

/* ---- virtual stages (interleaved 1F1B) change across a resume: a 4-layer
 * model, (1,2,1) m = 2 with V = 2 writes step 3; the manifest records V;
 * V = 1, one process and V = 2 again load it, save the same bits and train
 * step 3 to the original's loss; V = 2 loads V = 1's checkpoint too. */
static void test_virtual_stages(const struct job *base, const char *top)
{
    struct job j = *base;
    struct area a0, all[LOCAL_BOOT_MAX_WORLD];
    char err[512], d3[300];
    j.cfg.model.num_layers = 4;
    j.cfg.micro_batches = 2;
    j.cfg.virtual_stages = 2;
    j.cfg.zero_stage = 0;
    j.cfg.ckpt_keep = 10;
    j.steps = 4;
    j.save_every = 1;
    snprintf(j.save_dir, sizeof j.save_dir, "%s/v", top);
    const size_t n = dtrain_model_param_count(&j.cfg.model);
    int rc = run(&j, 1, 2, 1, &a0, all);
    ok(rc == 0 && a0.nsaves == 4, "(1,2,1) V=2: trains 4 steps and writes a checkpoint after each");
    float loss_v[MAX_STEPS];
    memcpy(loss_v, a0.loss, sizeof loss_v);
    snprintf(d3, sizeof d3, "%s/v3", top);
    harness_sh("mkdir -p '%s' && cp -r '%s/v/step-00000003' '%s/'", d3, top, d3);
    float *p_v = NULL, *m_v = NULL, *v_v = NULL;
    struct dtrain_sckpt_resumed res;
    rc = harness_read_whole(d3, &j.cfg, &p_v, &m_v, &v_v, &res, err, sizeof err);
    ok(rc == DTRAIN_OK && res.found && res.step == 3 && res.writer.pp == 2 && res.writer.virtual_stages == 2,
       "one process reads the V=2 checkpoint back; the manifest says 2 virtual stages (%d)", res.writer.virtual_stages);
    static const struct { int pp, vs; const char *from; } loads[] = {
        {2, 1, "v3"}, {1, 1, "v3"}, {2, 2, "v3"}, {2, 2, "vl0"},
    };
    for (size_t k = 0; rc == DTRAIN_OK && k < sizeof loads / sizeof loads[0]; k++) {
        struct job b = j;
        b.cfg.virtual_stages = loads[k].vs;
        snprintf(b.load_dir, sizeof b.load_dir, "%s/%s", top, loads[k].from);
        snprintf(b.save_dir, sizeof b.save_dir, "%s/vl%zu", top, k);
        b.save_after_load = 1;
        b.save_every = 0;
        b.steps = 1;
        int r = run(&b, 1, loads[k].pp, 1, &a0, all);
        float *p_b = NULL, *m_b = NULL, *v_b = NULL;
        struct dtrain_sckpt_resumed rb;
        int rr = r == 0 ? harness_read_whole(b.save_dir, &j.cfg, &p_b, &m_b, &v_b, &rb, err, sizeof err) : -1;
        ok(r == 0 && a0.found && a0.resumed == 3 && rr == DTRAIN_OK && rb.found &&
           rb.writer.virtual_stages == (loads[k].vs > 1 ? loads[k].vs : 1) && harness_same_bits(p_v, p_b, n) &&
           harness_same_bits(m_v, m_b, n) && harness_same_bits(v_v, v_b, n) && rel(a0.loss[0], loss_v[3]) <= LOSS_RTOL,
           "(1,%d,1) V=%d loads the checkpoint of step 3 written with V=%d, saves the same bits (parameters, m, v) "
           "and trains step 3 to loss %.9g (the original %.9g, relative %.1e <= %g)", loads[k].pp, loads[k].vs,
           k == 3 ? 1 : 2, (double)a0.loss[0], (double)loss_v[3], rel(a0.loss[0], loss_v[3]), LOSS_RTOL);
        free(p_b);
        free(m_b);
        free(v_b);
    }
    free(p_v);
    free(m_v);
    free(v_v);
}

/* ---- sequence parallelism changes across a resume (it changes no
 * parameter's place): (2,1,2) ZeRO-1 with it writes step 3; without it,
 * one process and with it again load that checkpoint, save the same bits
 * and train step 3 to the original's loss within the tolerance (the same
 * bits with it again: the same layout and operations); with it loads the
 * checkpoint written without it too. */
static void test_sequence_parallel(const struct job *base, const char *top)
{
    struct job j = *base;
    struct area a0, all[LOCAL_BOOT_MAX_WORLD];
    char err[512], d3[300];
    j.cfg.zero_stage = 1;
    j.cfg.sequence_parallel = 1;
    j.cfg.ckpt_keep = 10;
    j.steps = 4;
    j.save_every = 1;
    snprintf(j.save_dir, sizeof j.save_dir, "%s/sp", top);
    const size_t n = dtrain_model_param_count(&j.cfg.model);
    int rc = run(&j, 2, 1, 2, &a0, all);
    ok(rc == 0 && a0.nsaves == 4, "(2,1,2) ZeRO-1 --sequence-parallel 1: trains 4 steps and writes a checkpoint "
       "after each");
    float loss_s[MAX_STEPS];
    memcpy(loss_s, a0.loss, sizeof loss_s);
    snprintf(d3, sizeof d3, "%s/sp3", top);
    harness_sh("mkdir -p '%s' && cp -r '%s/sp/step-00000003' '%s/'", d3, top, d3);
    float *p_s = NULL, *m_s = NULL, *v_s = NULL;
    struct dtrain_sckpt_resumed res;
    rc = harness_read_whole(d3, &j.cfg, &p_s, &m_s, &v_s, &res, err, sizeof err);
    ok(rc == DTRAIN_OK && res.found && res.step == 3, "one process reads the sequence-parallel checkpoint back%s%s",
       rc ? ": " : "", rc ? err : "");
    static const struct { int tp, dp, sp; const char *from; } loads[] = {
        {2, 2, 0, "sp3"}, {1, 1, 0, "sp3"}, {2, 2, 1, "sp3"}, {2, 2, 1, "spl0"},
    };
    for (size_t k = 0; rc == DTRAIN_OK && k < sizeof loads / sizeof loads[0]; k++) {
        struct job b = j;
        b.cfg.sequence_parallel = loads[k].sp;
        snprintf(b.load_dir, sizeof b.load_dir, "%s/%s", top, loads[k].from);
        snprintf(b.save_dir, sizeof b.save_dir, "%s/spl%zu", top, k);
        b.save_after_load = 1;
        b.save_every = 0;
        b.steps = 1;
        int r = run(&b, loads[k].tp, 1, loads[k].dp, &a0, all);
        float *p_b = NULL, *m_b = NULL, *v_b = NULL;
        struct dtrain_sckpt_resumed rb;
        int rr = r == 0 ? harness_read_whole(b.save_dir, &j.cfg, &p_b, &m_b, &v_b, &rb, err, sizeof err) : -1;
        int bits = k == 2 ? a0.loss[0] == loss_s[3] : 1;
        ok(r == 0 && a0.found && a0.resumed == 3 && rr == DTRAIN_OK && rb.found && harness_same_bits(p_s, p_b, n) &&
           harness_same_bits(m_s, m_b, n) && harness_same_bits(v_s, v_b, n) && rel(a0.loss[0], loss_s[3]) <= LOSS_RTOL &&
           bits,
           "(%d,1,%d) --sequence-parallel %d loads the checkpoint of step 3 written with %d, saves the same bits "
           "(parameters, m, v) and trains step 3 to loss %.9g (the original %.9g, relative %.1e <= %g%s)",
           loads[k].tp, loads[k].dp, loads[k].sp, k == 3 ? 0 : 1, (double)a0.loss[0], (double)loss_s[3],
           rel(a0.loss[0], loss_s[3]), LOSS_RTOL, k == 2 ? "; bit for bit" : "");
        free(p_b);
        free(m_b);
        free(v_b);
    }
    free(p_s);
    free(m_s);
    free(v_s);
}

/* ---- the checksum and the format before version 2 */

/* The checksums as doc/fault-tolerance.md defines them, written out here
 * apart from the library: version 1, one FNV-1a chain over 32-bit words;
 * version 2, 8 lanes over 64-bit words of the zero-padded bytes, folded
 * with the length. */
#define PRIME 0x100000001b3ULL
static uint64_t step2(uint64_t h, uint64_t w)
{
    h = (h ^ w) * PRIME;
    return (h << 31) | (h >> 33);
}

static uint64_t sum_v1(const unsigned char *p, size_t bytes)
{
    uint64_t h = DTRAIN_SCKPT_CHECKSUM_INIT;
    for (size_t i = 0; i + 4 <= bytes; i += 4)
        h = (h ^ ((uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24)) *
            PRIME;
    return h;
}

static uint64_t sum_v2(const unsigned char *p, size_t bytes)
{
    uint64_t lane[8];
    for (int k = 0; k < 8; k++)
        lane[k] = DTRAIN_SCKPT_CHECKSUM_INIT + (uint64_t)k;
    for (size_t w = 0; w < (bytes + 63) / 64 * 8; w++) {
        uint64_t x = 0;
        for (int b = 0; b < 8; b++)
            x |= (uint64_t)(8 * w + b < bytes ? p[8 * w + b] : 0) << (8 * b);
        lane[w % 8] = step2(lane[w % 8], x);
    }
    uint64_t h = DTRAIN_SCKPT_CHECKSUM_INIT;
    for (int k = 0; k < 8; k++)
        h = step2(h, lane[k]);
    return step2(h, (uint64_t)bytes);
}

static uint64_t library_sum(uint32_t version, const unsigned char *p, size_t bytes, size_t split)
{
    struct dtrain_sckpt_sum s;
    dtrain_sckpt_sum_init(&s, version);
    for (size_t at = 0; at < bytes; at += split)
        dtrain_sckpt_sum_add(&s, p + at, bytes - at < split ? bytes - at : split);
    return dtrain_sckpt_sum_value(&s);
}

static void test_checksums(void)
{
    unsigned char buf[1003];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 3));
    static const size_t splits[] = {1, 4, 7, 64, 100, 1003};
    static const size_t lens[] = {0, 4, 60, 64, 68, 1000};
    int v1 = 1, v2 = 1;
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
            v1 &= library_sum(1, buf, lens[l], splits[k]) == sum_v1(buf, lens[l]);
            v2 &= library_sum(2, buf, lens[l], splits[k]) == sum_v2(buf, lens[l]);
        }
    v2 &= library_sum(2, buf, 1003, 5) == sum_v2(buf, 1003);
    ok(v1, "version 1's checksum is FNV-1a over 32-bit words, whatever pieces it is fed in");
    ok(v2, "version 2's checksum is the 8-lane FNV-1a the format describes, whatever pieces it is fed in");
    unsigned char flip[1000];
    memcpy(flip, buf, sizeof flip);
    int seen = 1;
    for (size_t i = 0; i < sizeof flip; i += 37) { /* one flipped bit anywhere changes it */
        flip[i] ^= 0x80;
        seen &= library_sum(2, flip, sizeof flip, 1000) != library_sum(2, buf, sizeof flip, 1000);
        flip[i] ^= 0x80;
    }
    ok(seen, "a flipped bit anywhere in 1000 bytes changes version 2's checksum");
    /* the sign bits of two floats 16 apart: bit 63 of two words of one lane */
    flip[7] ^= 0x80;
    flip[7 + 64] ^= 0x80;
    ok(library_sum(2, flip, sizeof flip, 1000) != library_sum(2, buf, sizeof flip, 1000),
       "flipped sign bits of two floats 16 apart (bit 63 of one lane, twice) change it too");
}

static int read_file(const char *path, unsigned char **bytes, size_t *len)
{
    FILE *f = fopen(path, "rb");
    long size;
    *bytes = NULL;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        (*bytes = malloc((size_t)size + 1)) == NULL || fread(*bytes, 1, (size_t)size, f) != (size_t)size) {
        if (f != NULL)
            fclose(f);
        free(*bytes);
        return -1;
    }
    fclose(f);
    *len = (size_t)size;
    return 0;
}

static int write_file(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    int bad = fwrite(bytes, 1, len, f) != len;
    return fclose(f) != 0 || bad ? -1 : 0;
}

/* Replace the first "from" in text (len bytes, room for more) with "to" of
 * the same length. */
static int replace_same_len(char *text, const char *from, const char *to)
{
    char *at = strstr(text, from);
    if (at == NULL || strlen(from) != strlen(to))
        return -1;
    memcpy(at, to, strlen(to));
    return 0;
}

/* dir/step-N as the dtrain before version 2 wrote it: each of its world
 * shards' version field 1 and checksum version 1's (offsets 8 and 96,
 * doc/fault-tolerance.md), the manifest's version and checksums too. */
static int make_version1(const char *step_dir, int world)
{
    char path[700], *manifest = NULL;
    unsigned char *shard;
    size_t len, mlen;
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    if (read_file(path, (unsigned char **)&manifest, &mlen) != 0)
        return -1;
    manifest[mlen] = '\0';
    int bad = replace_same_len(manifest, "\"version\": 2", "\"version\": 1");
    for (int r = 0; r < world && !bad; r++) {
        snprintf(path, sizeof path, "%s/shard-%05d.bin", step_dir, r);
        if (read_file(path, &shard, &len) != 0 || len < 256) {
            bad = 1;
            break;
        }
        uint64_t old, sum;
        char from[20], to[20];
        memcpy(&old, shard + 96, 8);
        uint32_t one = 1;
        memcpy(shard + 8, &one, 4);
        memset(shard + 96, 0, 8);
        sum = sum_v1(shard, len);
        memcpy(shard + 96, &sum, 8);
        snprintf(from, sizeof from, "%016llx", (unsigned long long)old);
        snprintf(to, sizeof to, "%016llx", (unsigned long long)sum);
        bad = write_file(path, shard, len) != 0 || replace_same_len(manifest, from, to) != 0;
        free(shard);
    }
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    bad = bad || write_file(path, manifest, mlen) != 0;
    free(manifest);
    return bad ? -1 : 0;
}

int main(void)
{
    char top[256], err[512];
    struct dtrain_train_config cfg;
    if (harness_setup("sckpt", top, sizeof top, &cfg, err, sizeof err) != 0) {
        printf("1..0 # SKIP %s\n", err);
        return 0;
    }
    const size_t n = dtrain_model_param_count(&cfg.model);
    struct area a0, all[LOCAL_BOOT_MAX_WORLD];
    struct job j;
    memset(&j, 0, sizeof j);
    j.cfg = cfg;
    j.fail_rank = -1;

    /* ---- A: (2,1,2) ZeRO-1, 4 steps, a checkpoint after each */
    j.cfg.zero_stage = 1;
    j.cfg.ckpt_keep = 10;
    j.steps = 4;
    j.save_every = 1;
    snprintf(j.save_dir, sizeof j.save_dir, "%s/a", top);
    int rc = run(&j, 2, 1, 2, &a0, all);
    ok(rc == 0, "(2,1,2) ZeRO-1 trains 4 steps and writes a checkpoint after each");
    float loss_a[MAX_STEPS];
    memcpy(loss_a, a0.loss, sizeof loss_a);
    int saves_ok = a0.nsaves == 4;
    for (int i = 0; i < a0.nsaves; i++)
        saves_ok &= a0.save_rc[i] == DTRAIN_OK;
    ok(saves_ok, "every save returned OK on rank 0 (%d saves)", a0.nsaves);
    uint64_t steps[8];
    int complete = dtrain_sckpt_list(j.save_dir, steps, 8, err, sizeof err);
    ok(complete == 4 && steps[0] == 4 && steps[3] == 1, "the folder holds the complete checkpoints of steps 4..1");

    /* the checkpoint of step 3 alone, for loading */
    char a3[300];
    snprintf(a3, sizeof a3, "%s/a3", top);
    harness_sh("mkdir -p '%s' && cp -r '%s/a/step-00000003' '%s/'", a3, top, a3);
    float *p_a, *m_a, *v_a;
    struct dtrain_sckpt_resumed res;
    rc = harness_read_whole(a3, &cfg, &p_a, &m_a, &v_a, &res, err, sizeof err);
    ok(rc == DTRAIN_OK && res.found && res.step == 3 && res.data_batches == 3 && res.writer.dp == 2 &&
       res.writer.zero1, "one process reads the whole step-3 checkpoint back (written by T=2 D=2 ZeRO-1)");

    /* ---- the format before version 2: the step-3 checkpoint as version 1 */
    test_checksums();
    {
        char v1[300], step_dir[400];
        snprintf(v1, sizeof v1, "%s/v1", top);
        snprintf(step_dir, sizeof step_dir, "%s/step-00000003", v1);
        harness_sh("mkdir -p '%s' && cp -r '%s/step-00000003' '%s/'", v1, a3, v1);
        int made = make_version1(step_dir, 4) == 0;
        float *p1 = NULL, *m1 = NULL, *v1p = NULL;
        struct dtrain_sckpt_resumed r1;
        rc = made ? harness_read_whole(v1, &cfg, &p1, &m1, &v1p, &r1, err, sizeof err) : -1;
        ok(made && rc == DTRAIN_OK && r1.found && r1.step == 3 && harness_same_bits(p_a, p1, n) && harness_same_bits(m_a, m1, n) && harness_same_bits(v_a, v1p, n),
           "the step-3 checkpoint in version 1 (the checksum before the lanes) reads back to the same bits%s%s",
           rc == DTRAIN_OK ? "" : ": ", rc == DTRAIN_OK ? "" : err);
        free(p1);
        free(m1);
        free(v1p);
        char shard[500];
        snprintf(shard, sizeof shard, "%s/shard-00001.bin", step_dir);
        dtrain_inject_corrupt_file(shard, err, sizeof err);
        rc = harness_read_whole(v1, &cfg, &p1, &m1, &v1p, &r1, err, sizeof err);
        ok(rc == DTRAIN_OK && !r1.found, "a flipped byte in a version-1 shard is caught by its checksum: none left");
        free(p1);
        free(m1);
        free(v1p);
    }

    /* ---- B: load step 3 into other layouts, save it again, one more step */
    static const struct { int tp, pp, dp, zero; } layouts[] = { /* zero: the ZeRO stage */
        {2, 1, 2, 1}, {1, 1, 1, 0}, {1, 2, 1, 1}, {2, 2, 2, 0}, {1, 1, 4, 1},
        {2, 1, 2, 2}, {1, 2, 2, 2}, {1, 1, 4, 2},
        {2, 1, 2, 3}, {1, 2, 2, 3}, {1, 1, 4, 3}, /* ZeRO-3: b8..b10, read back in D below */
    };
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        struct job b = j;
        b.cfg.zero_stage = layouts[k].zero;
        snprintf(b.load_dir, sizeof b.load_dir, "%s", a3);
        snprintf(b.save_dir, sizeof b.save_dir, "%s/b%zu", top, k);
        b.save_after_load = 1;
        b.save_every = 0;
        b.steps = 1;
        int tp = layouts[k].tp, pp = layouts[k].pp, dp = layouts[k].dp;
        rc = run(&b, tp, pp, dp, &a0, all);
        ok(rc == 0 && a0.found && a0.resumed == 3, "(%d,%d,%d) ZeRO stage %d: loads the (2,1,2) ZeRO-1 checkpoint of "
           "step 3, saves it again, trains a step", tp, pp, dp, layouts[k].zero);
        float *p_b = NULL, *m_b = NULL, *v_b = NULL;
        struct dtrain_sckpt_resumed rb;
        rc = harness_read_whole(b.save_dir, &cfg, &p_b, &m_b, &v_b, &rb, err, sizeof err);
        ok(rc == DTRAIN_OK && rb.found && harness_same_bits(p_a, p_b, n) && harness_same_bits(m_a, m_b, n) &&
           harness_same_bits(v_a, v_b, n), "(%d,%d,%d): its checkpoint holds the same bits: parameters, m and v",
           tp, pp, dp);
        if (k == 0)
            ok(a0.loss[0] == loss_a[3], "(2,1,2) again: step 3's loss %.9g is the original run's bit for bit",
               (double)a0.loss[0]);
        else
            ok(rel(a0.loss[0], loss_a[3]) <= LOSS_RTOL, "(%d,%d,%d): step 3's loss %.9g within %g of the original "
               "%.9g (relative %.2e)", tp, pp, dp, (double)a0.loss[0], LOSS_RTOL, (double)loss_a[3],
               rel(a0.loss[0], loss_a[3]));
        free(p_b);
        free(m_b);
        free(v_b);
    }

    /* ---- D: a checkpoint ZeRO-3 wrote (b9: (1,2,2) stage 3, each DP rank
     * its shares) resumes in ZeRO-1 at (2,1,2) (the original layout: the
     * same bits, so the original step 3 bit for bit), ZeRO-2 at (1,1,4) and
     * in one process */
    {
        char b9[300];
        snprintf(b9, sizeof b9, "%s/b9", top);
        static const struct { int tp, pp, dp, zero; } back[] = {{2, 1, 2, 1}, {1, 1, 4, 2}};
        for (size_t k = 0; k < sizeof back / sizeof back[0]; k++) {
            struct job d = j;
            d.cfg.zero_stage = back[k].zero;
            snprintf(d.load_dir, sizeof d.load_dir, "%s", b9);
            snprintf(d.save_dir, sizeof d.save_dir, "%s/d%zu", top, k);
            d.save_after_load = 0;
            d.save_every = 0;
            d.steps = 1;
            rc = run(&d, back[k].tp, back[k].pp, back[k].dp, &a0, all);
            ok(rc == 0 && a0.found && a0.resumed == 3 &&
               (k == 0 ? a0.loss[0] == loss_a[3] : rel(a0.loss[0], loss_a[3]) <= LOSS_RTOL),
               "(%d,%d,%d) ZeRO stage %d resumes the (1,2,2) ZeRO-3 checkpoint of step 3: step 3's loss %.9g, the "
               "original's %.9g (%s)", back[k].tp, back[k].pp, back[k].dp, back[k].zero, (double)a0.loss[0],
               (double)loss_a[3], k == 0 ? "bit for bit" : "within the tolerance");
        }
        struct dtrain_train_config r3 = cfg;
        struct dtrain_trainer *one = NULL;
        struct dtrain_step_result sr;
        snprintf(r3.resume, sizeof r3.resume, "%s", b9);
        int good = dtrain_trainer_create(&r3, &one, err, sizeof err) == DTRAIN_OK &&
                   dtrain_trainer_steps_done(one) == 3 && dtrain_trainer_step(one, &sr, err, sizeof err) == DTRAIN_OK;
        ok(good && rel(sr.loss, loss_a[3]) <= LOSS_RTOL, "one process resumes the (1,2,2) ZeRO-3 checkpoint of step 3: "
           "step 3's loss %.9g within %g of the original %.9g%s%s", good ? (double)sr.loss : 0.0, LOSS_RTOL,
           (double)loss_a[3], good ? "" : ": ", good ? "" : err);
        dtrain_trainer_destroy(one);
    }

    /* ---- C: dtrain-train's checkpoints (dtrain_train.h: the same trainer on
     * one process) load into other layouts, and the other way round */
    {
        struct dtrain_trainer *one = NULL;
        struct dtrain_step_result sr;
        char c3[300];
        snprintf(c3, sizeof c3, "%s/c3", top);
        int good = dtrain_trainer_create(&cfg, &one, err, sizeof err) == DTRAIN_OK;
        for (int s = 0; good && s < 3; s++)
            good = dtrain_trainer_step(one, &sr, err, sizeof err) == DTRAIN_OK;
        good = good && dtrain_trainer_save_checkpoint(one, c3, err, sizeof err) == DTRAIN_OK;
        good = good && dtrain_trainer_step(one, &sr, err, sizeof err) == DTRAIN_OK;
        ok(good, "one process (dtrain_train.h) trains 3 steps and writes a checkpoint%s%s", good ? "" : ": ", good ? "" : err);
        float one_loss3 = sr.loss;
        dtrain_trainer_destroy(one);
        struct job c = j;
        c.cfg.zero_stage = 1;
        snprintf(c.load_dir, sizeof c.load_dir, "%s", c3);
        snprintf(c.save_dir, sizeof c.save_dir, "%s/c", top);
        c.save_after_load = 0;
        c.save_every = 0;
        c.steps = 1;
        rc = run(&c, 2, 2, 2, &a0, all);
        ok(rc == 0 && a0.found && a0.resumed == 3 && rel(a0.loss[0], one_loss3) <= LOSS_RTOL,
           "(2,2,2) ZeRO-1 loads one process's checkpoint of step 3: its step 3 loss %.9g within %g of that "
           "process's %.9g", (double)a0.loss[0], LOSS_RTOL, (double)one_loss3);
        struct dtrain_train_config rc1 = cfg;
        snprintf(rc1.resume, sizeof rc1.resume, "%s", a3);
        good = dtrain_trainer_create(&rc1, &one, err, sizeof err) == DTRAIN_OK &&
               dtrain_trainer_steps_done(one) == 3 && dtrain_trainer_step(one, &sr, err, sizeof err) == DTRAIN_OK;
        ok(good && rel(sr.loss, loss_a[3]) <= LOSS_RTOL, "one process resumes the (2,1,2) ZeRO-1 checkpoint of step 3: "
           "step 3's loss %.9g within %g of the original %.9g%s%s", (double)sr.loss, LOSS_RTOL, (double)loss_a[3],
           good ? "" : ": ", good ? "" : err);
        dtrain_trainer_destroy(one);
    }

    /* ---- another model or seed: refused, not skipped */
    struct dtrain_train_config other = cfg;
    other.seed++;
    float *p_x, *m_x, *v_x;
    rc = harness_read_whole(a3, &other, &p_x, &m_x, &v_x, &res, err, sizeof err);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "seed") != NULL, "a checkpoint of another seed is refused: %s", err);
    free(p_x);
    free(m_x);
    free(v_x);
    other = cfg;
    other.model.num_layers = 3;
    rc = harness_read_whole(a3, &other, &p_x, &m_x, &v_x, &res, err, sizeof err);
    ok(rc == DTRAIN_ERR_INPUT && strstr(err, "L=2") != NULL, "a checkpoint of another model is refused: %s", err);
    free(p_x);
    free(m_x);
    free(v_x);

    /* ---- damage, newest first: each falls back to the one before */
    char *a = j.save_dir;
    static const struct { const char *what, *cmd; long expect; } damage[] = {
        {"a flipped byte in step 4's shard 1", NULL, 3},
        {"step 3's shard 2 missing", "rm '%s/step-00000003/shard-00002.bin'", 2},
        {"a garbage manifest in step 2", "echo '{\"format\": ' >'%s/step-00000002/manifest.json'", 1},
        {"step 1's shard 0 cut short", "truncate -s 1000 '%s/step-00000001/shard-00000.bin'", -1},
    };
    harness_sh("mkdir -p '%s/step-00000007.tmp' && touch '%s/step-00000007.tmp/shard-00000.bin'", a, a);
    for (size_t k = 0; k < sizeof damage / sizeof damage[0]; k++) {
        char cmd[1024], gone[600];
        if (damage[k].cmd != NULL) {
            snprintf(cmd, sizeof cmd, damage[k].cmd, a);
            harness_sh("%s", cmd);
        } else {
            snprintf(cmd, sizeof cmd, "%s/step-00000004/shard-00001.bin", a);
            dtrain_inject_corrupt_file(cmd, err, sizeof err);
        }
        float *p, *m, *v;
        rc = harness_read_whole(a, &cfg, &p, &m, &v, &res, err, sizeof err);
        long newest = damage[k].expect < 0 ? 1 : damage[k].expect + 1;
        snprintf(gone, sizeof gone, "%s/step-%08ld.damaged", a, newest);
        if (damage[k].expect > 0)
            ok(rc == DTRAIN_OK && res.found && (long)res.step == damage[k].expect && res.damaged == 1 && exists(gone),
               "%s: falls back to step %ld, the damaged one kept as step-%08ld.damaged", damage[k].what,
               damage[k].expect, newest);
        else
            ok(rc == DTRAIN_OK && !res.found && res.damaged == 1 && exists(gone),
               "%s: no good checkpoint left, nothing loaded", damage[k].what);
        free(p);
        free(m);
        free(v);
    }
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s/step-00000007.tmp", a);
    ok(!exists(tmp), "the leftover of an interrupted save (step-00000007.tmp) is removed when resuming");

    /* ---- a shard that cannot be written (injected ENOSPC on rank 1 at step 2) */
    struct job f = j;
    f.cfg.zero_stage = 0;
    f.steps = 2;
    f.save_every = 1;
    f.fail_rank = 1;
    f.fail_step = 2;
    snprintf(f.save_dir, sizeof f.save_dir, "%s/f", top);
    rc = run(&f, 1, 1, 2, &a0, all);
    ok(rc == 0 && all[0].nsaves == 2 && all[1].nsaves == 2 && all[0].save_rc[0] == DTRAIN_OK &&
       all[1].save_rc[0] == DTRAIN_OK && all[0].save_rc[1] == DTRAIN_ERR_SYSTEM &&
       all[1].save_rc[1] == DTRAIN_ERR_SYSTEM, "(1,1,2): rank 1's write fails at step 2: the save fails on both ranks");
    complete = dtrain_sckpt_list(f.save_dir, steps, 8, err, sizeof err);
    snprintf(tmp, sizeof tmp, "%s/step-00000002.tmp", f.save_dir);
    ok(complete == 1 && steps[0] == 1 && !exists(tmp), "step 1's checkpoint stays the newest; no step-2 folder is left");

    /* ---- keep the newest 2 */
    struct job k = j;
    k.cfg.zero_stage = 1;
    k.cfg.ckpt_keep = 2;
    k.steps = 4;
    k.save_every = 1;
    snprintf(k.save_dir, sizeof k.save_dir, "%s/k", top);
    rc = run(&k, 1, 1, 1, &a0, all);
    complete = dtrain_sckpt_list(k.save_dir, steps, 8, err, sizeof err);
    ok(rc == 0 && complete == 2 && steps[0] == 4 && steps[1] == 3, "--ckpt-keep 2: after 4 saves steps 4 and 3 remain");

    /* ---- cleanup never follows a link, never deletes what a save did not
     * write (issue 16): links named like a stale step-N.tmp and like an
     * old checkpoint point at another folder; a real step-N.tmp holds a
     * user's file.  Saves (which prune) and a resume (which removes
     * leftovers) must leave all of it alone. */
    char victim[600], kd[512];
    snprintf(victim, sizeof victim, "%s/victim", top);
    snprintf(kd, sizeof kd, "%s", k.save_dir);
    harness_sh("mkdir -p '%s' && echo precious >'%s/shard-00000.bin' && echo '{}' >'%s/manifest.json' && "
               "ln -s '%s' '%s/step-00000009.tmp' && ln -s '%s' '%s/step-00000001' && mkdir '%s/step-00000008.tmp' && "
               "echo mine >'%s/step-00000008.tmp/notes.txt' && echo stale >'%s/step-00000008.tmp/shard-00000.bin'",
               victim, victim, victim, victim, kd, victim, kd, kd, kd, kd);
    struct job k2 = k;
    k2.steps = 2;
    snprintf(k2.load_dir, sizeof k2.load_dir, "%s", kd);
    rc = run(&k2, 1, 1, 1, &a0, all);
    char probe[700];
    snprintf(probe, sizeof probe, "%s/shard-00000.bin", victim);
    int victim_ok = exists(probe);
    snprintf(probe, sizeof probe, "%s/manifest.json", victim);
    victim_ok &= exists(probe);
    snprintf(probe, sizeof probe, "%s/step-00000008.tmp/notes.txt", kd);
    int notes_ok = exists(probe);
    snprintf(probe, sizeof probe, "%s/step-00000009.tmp", kd);
    struct stat lst;
    int links_ok = lstat(probe, &lst) == 0 && S_ISLNK(lst.st_mode);
    snprintf(probe, sizeof probe, "%s/step-00000001", kd);
    links_ok &= lstat(probe, &lst) == 0 && S_ISLNK(lst.st_mode);
    complete = dtrain_sckpt_list(kd, steps, 8, err, sizeof err);
    ok(rc == 0 && victim_ok && notes_ok && links_ok && complete == 2 && steps[0] == 6 && steps[1] == 5,
       "resume + 2 saves + pruning next to links and a foreign file: the linked folder's files, the links and "
       "the user's file stay; steps 6 and 5 are the checkpoints");

    /* ---- sizes read from a manifest are bounded before arithmetic: a
     * layout whose tp*pp*dp wraps is damage, not a crash or UB. */
    harness_sh("sed -i 's/\"tp\": 1,/\"tp\": 9223372036854775807,/; s/\"pp\": 1,/\"pp\": 4,/' "
               "'%s/step-00000006/manifest.json'", kd);
    float *p_k, *m_k, *v_k;
    rc = harness_read_whole(kd, &cfg, &p_k, &m_k, &v_k, &res, err, sizeof err);
    ok(rc == DTRAIN_OK && res.found && res.step == 5 && res.damaged == 1,
       "a manifest with tp = 2^63-1: damaged, the resume falls back to step 5");
    free(p_k);
    free(m_k);
    free(v_k);
    /* ---- a FIFO where a shard belongs: damage found at once, no hang */
    harness_sh("rm '%s/step-00000005/shard-00000.bin' && mkfifo '%s/step-00000005/shard-00000.bin'", kd, kd);
    rc = harness_read_whole(kd, &cfg, &p_k, &m_k, &v_k, &res, err, sizeof err);
    ok(rc == DTRAIN_OK && !res.found && res.damaged == 1, "a FIFO as a shard: damaged, not waited on");
    free(p_k);
    free(m_k);
    free(v_k);

    /* ---- E: a resume opens only the shards that hold runs: b3, written at
     * (2,2,2) ZeRO off, has 4 empty shards (DP rank 1), never opened */
    {
        struct job e = j;
        e.cfg.zero_stage = 0;
        snprintf(e.load_dir, sizeof e.load_dir, "%s/b3", top);
        snprintf(e.save_dir, sizeof e.save_dir, "%s/e", top);
        e.save_after_load = 0;
        e.save_every = 0;
        e.steps = 1;
        rc = run(&e, 2, 2, 2, &a0, all);
        int four = rc == 0;
        for (int r = 0; r < 8; r++)
            four &= all[r].found && all[r].opened == 4;
        ok(four, "(2,2,2) resumes its ZeRO-off checkpoint opening 4 of the 8 shards on every rank (the 4 of DP rank 0; "
           "rank 0 opened %llu)", (unsigned long long)all[0].opened);
    }

    /* ---- F: at ZeRO >= 1 a rank opens its DP group's share of the shards,
     * not every one its slice is in: b4, written at (1,1,4) ZeRO-1 (4
     * shards, each a quarter of every bucket), loads at (1,1,4) with one
     * shard opened per rank at stages 1, 2 and 3 (each rank's slice is in
     * all 4), at (1,1,2) ZeRO-1 with 2; b10 (ZeRO-3 at (1,1,4)) with 1 */
    {
        static const struct { int dp, zero, from, opened; } opens[] = {
            {4, 1, 4, 1}, {4, 2, 4, 1}, {4, 3, 4, 1}, {2, 1, 4, 2}, {4, 3, 10, 1}};
        for (size_t k = 0; k < sizeof opens / sizeof opens[0]; k++) {
            struct job f = j;
            f.cfg.zero_stage = opens[k].zero;
            snprintf(f.load_dir, sizeof f.load_dir, "%s/b%d", top, opens[k].from);
            snprintf(f.save_dir, sizeof f.save_dir, "%s/f%zu", top, k);
            f.save_after_load = 1;
            f.save_every = 0;
            f.steps = 1;
            rc = run(&f, 1, 1, opens[k].dp, &a0, all);
            int each = rc == 0;
            for (int r = 0; r < opens[k].dp; r++)
                each &= all[r].found && all[r].resumed == 3 && all[r].opened == (uint64_t)opens[k].opened;
            float *p_f = NULL, *m_f = NULL, *v_f = NULL;
            struct dtrain_sckpt_resumed rf;
            int same = harness_read_whole(f.save_dir, &cfg, &p_f, &m_f, &v_f, &rf, err, sizeof err) == DTRAIN_OK &&
                       rf.found && harness_same_bits(p_a, p_f, n) && harness_same_bits(m_a, m_f, n) &&
                       harness_same_bits(v_a, v_f, n);
            ok(each && same, "(1,1,%d) ZeRO stage %d loads b%d (written at (1,1,4) ZeRO-%d) opening %d of its 4 "
               "shards on every rank (rank 0 opened %llu), and saves the same bits again", opens[k].dp,
               opens[k].zero, opens[k].from, opens[k].from == 10 ? 3 : 1, opens[k].opened,
               (unsigned long long)all[0].opened);
            free(p_f);
            free(m_f);
            free(v_f);
        }
    }

    free(p_a);
    free(m_a);
    free(v_a);
    test_virtual_stages(&j, top);
    test_sequence_parallel(&j, top);
    if (tap_state_.failed == 0)
        harness_cleanup(top);
    else
        diag("files kept in %s", top);
    return tap_done();
}
