/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-ckpt list|show|verify|export: the sharded checkpoints of a folder
 * as a user sees them, without training and without changing the folder
 * (dtrain_shard_ckpt.h's readers). */
#include "dtrain_llmc.h"
#include "dtrain_parse.h"
#include "dtrain_shard_ckpt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "dtrain-ckpt"
#define MAX_LIST 4096

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " list DIR                 the checkpoints of DIR: step, layout, size, state\n"
            "       " PROG " show DIR [STEP]          one checkpoint's manifest in words (default: the newest)\n"
            "       " PROG " verify DIR [STEP]        check every shard's size and checksum (default: all)\n"
            "       " PROG " export DIR OUT [STEP]    the whole model as an llm.c model file (default: the newest\n"
            "                                      good one), whatever layout wrote it\n"
            "       " PROG " --help | --version\n"
            "DIR is a folder of step-N checkpoints (dtrain-train --checkpoint, dtrain-launch --ckpt-dir); nothing\n"
            "in it is changed.\n"
            "Exit codes: 0 done (verify: every checkpoint checked is good), 1 a checkpoint is damaged or\n"
            "internal error, 2 bad usage, a folder without checkpoints, a step that is not there.\n");
}

static const char *state_name(enum dtrain_sckpt_state s)
{
    switch (s) {
    case DTRAIN_SCKPT_VERIFIED: return "good (verified)";
    case DTRAIN_SCKPT_DAMAGED: return "DAMAGED";
    case DTRAIN_SCKPT_BAD_MANIFEST: return "DAMAGED (manifest)";
    default: return "complete (not verified)";
    }
}

static int parse_step(const char *text, uint64_t *step, char *err, size_t errlen)
{
    long v;
    if (dtrain_parse_int(text, 0, 9000000000000000000L, "STEP", &v, err, errlen) != 0)
        return -1;
    *step = (uint64_t)v;
    return 0;
}

/* The complete checkpoints of dir, newest first; -1 (err) when none. */
static long steps_of(const char *dir, uint64_t *steps, char *err, size_t errlen)
{
    int n = dtrain_sckpt_list(dir, steps, MAX_LIST, err, errlen);
    if (n == 0)
        snprintf(err, errlen, "%s holds no complete checkpoint (step-N folders with a manifest.json)", dir);
    return n > 0 ? (n < MAX_LIST ? n : MAX_LIST) : -1;
}

int main(int argc, char **argv)
{
    char err[1024] = "";
    static uint64_t steps[MAX_LIST];
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
        printf(PROG " " PACKAGE_VERSION "\n");
        return 0;
    }
    const char *verb = argc > 1 ? argv[1] : "";
    int list = strcmp(verb, "list") == 0, show = strcmp(verb, "show") == 0, verify = strcmp(verb, "verify") == 0,
        export = strcmp(verb, "export") == 0;
    int need = export ? 4 : 3, most = list ? 3 : need + 1;
    if (!(list || show || verify || export) || argc < need || argc > most) {
        fprintf(stderr, PROG ": %s (see " PROG " --help)\n",
                list || show || verify || export ? "wrong number of arguments" : "give list, show, verify or export");
        return 2;
    }
    const char *dir = argv[2];
    uint64_t step = DTRAIN_SCKPT_NEWEST;
    if (argc == most && !list && parse_step(argv[most - 1], &step, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 2;
    }
    if (export) {
        struct dtrain_sckpt_model m;
        int rc = dtrain_sckpt_load_model(dir, step, &m, err, sizeof err);
        if (rc == DTRAIN_OK)
            rc = dtrain_llmc_save(argv[3], &m.model, m.params, err, sizeof err);
        if (rc != DTRAIN_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            free(m.params);
            return rc == DTRAIN_ERR_INPUT ? 2 : 1;
        }
        char words[160];
        dtrain_model_describe(&m.model, words, sizeof words);
        printf("%s: step %" PRIu64 " (written by T=%d P=%d D=%d) exported to %s: %s, %zu parameters\n", m.path,
               m.step, m.writer.tp, m.writer.pp, m.writer.dp, argv[3], words, dtrain_model_param_count(&m.model));
        free(m.params);
        return 0;
    }
    long n;
    if (step != DTRAIN_SCKPT_NEWEST) {
        steps[0] = step;
        n = 1;
    } else if ((n = steps_of(dir, steps, err, sizeof err)) < 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 2;
    }
    if (show)
        n = 1; /* the newest, or the one named */
    int bad = 0;
    if (list)
        printf("%-10s %-14s %-10s %12s  %s\n", "step", "layout", "ZeRO-1", "bytes", "state");
    for (long i = 0; i < n; i++) {
        struct dtrain_sckpt_info in;
        if (dtrain_sckpt_inspect(dir, steps[i], verify, &in, err, sizeof err) != DTRAIN_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            return 1;
        }
        if (step != DTRAIN_SCKPT_NEWEST && in.state == DTRAIN_SCKPT_BAD_MANIFEST && !verify) {
            fprintf(stderr, PROG ": %s: %s\n", in.path, in.why);
            dtrain_sckpt_info_free(&in);
            return 2;
        }
        bad |= in.state == DTRAIN_SCKPT_DAMAGED || in.state == DTRAIN_SCKPT_BAD_MANIFEST;
        char layout[48];
        snprintf(layout, sizeof layout, "T=%d P=%d D=%d", in.writer.tp, in.writer.pp, in.writer.dp);
        if (list) {
            printf("%-10" PRIu64 " %-14s %-10s %12" PRIu64 "  %s\n", in.step,
                   in.state == DTRAIN_SCKPT_BAD_MANIFEST ? "?" : layout,
                   in.state == DTRAIN_SCKPT_BAD_MANIFEST ? "?" : in.writer.zero1 ? "on" : "off", in.bytes,
                   state_name(in.state));
        } else if (show) {
            const struct dtrain_train_config *r = &in.run;
            if (in.state == DTRAIN_SCKPT_BAD_MANIFEST) {
                printf("%s: the manifest does not read: %s\n", in.path, in.why);
            } else {
                char words[160];
                dtrain_model_describe(&r->model, words, sizeof words);
                printf("checkpoint %s\n  step %" PRIu64 ", next data batch %" PRIu64 "\n"
                       "  model %s, %" PRIu64 " parameters\n"
                       "  written by T=%d P=%d D=%d (%d rank%s), ZeRO-1 %s; batch %d x %d, %s data (seed %" PRIu64
                       "), model seed %" PRIu64 "\n  %d shards, %" PRIu64 " bytes:\n",
                       in.path, in.step, in.data_batches, words, in.nparams, in.writer.tp, in.writer.pp, in.writer.dp, in.writer.world_size,
                       in.writer.world_size == 1 ? "" : "s", in.writer.zero1 ? "on" : "off", r->batch, r->seq,
                       r->data_order == DTRAIN_ORDER_SHUFFLED ? "shuffled" : "sequential", r->data_seed, r->seed,
                       in.nshards, in.bytes);
                for (int s = 0; s < in.nshards; s++)
                    printf("    shard-%05d.bin  %12" PRIu64 " bytes  %12" PRIu64 " floats  checksum %016" PRIx64 "\n",
                           s, in.shards[s].bytes, in.shards[s].floats, in.shards[s].checksum);
            }
        } else { /* verify */
            printf("%s: %s", in.path, state_name(in.state));
            if (in.state == DTRAIN_SCKPT_BAD_MANIFEST)
                printf(": %s", in.why);
            for (int s = 0; s < in.nshards; s++)
                if (in.shards[s].verified < 0)
                    printf("; shard-%05d.bin: %s", s, in.shards[s].why);
            printf("\n");
        }
        dtrain_sckpt_info_free(&in);
    }
    return verify && bad ? 1 : 0;
}
