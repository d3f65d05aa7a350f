/* SPDX-License-Identifier: GPL-2.0-or-later */
/* lora_run T P D [dtrain-train flags]: the parallel trainer on a T x P x D
 * world of local processes (local_boot.h: the launcher's ids, the real
 * communicators), for lora_layouts.sh: the flags' steps, each step's loss on
 * stdout ("loss STEP VALUE", rank 0's), then dtrain_ptrainer_finish (so
 * --save-lora and --save-hf --merge-lora write from the gathered model),
 * and with --checkpoint DIR a checkpoint of the last step there (the
 * loop's format, dtrain_ft_save).
 * Exit 0, or 1 with each failing rank's line on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parallel.h"
#include "dtrain_train.h"
#include "local_boot.h"
#include "trainer/dtrain_ft.h"

#define MAX_STEPS 256

struct area {
    int ok;
    float loss[MAX_STEPS];
    char err[512];
};

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct dtrain_train_config *c = ctx;
    struct area *a = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    int rc = local_boot_comms(bs, 60000, 0, &comms, NULL, a->err, sizeof a->err);
    if (rc != DTRAIN_OK)
        return 3;
    rc = dtrain_ptrainer_create(c, bs, &comms, &t, a->err, sizeof a->err);
    while (rc == DTRAIN_OK && dtrain_ptrainer_steps_done(t) < c->steps) {
        struct dtrain_pstep_result r;
        long s = dtrain_ptrainer_steps_done(t);
        rc = dtrain_ptrainer_step(t, &r, a->err, sizeof a->err);
        if (rc == DTRAIN_OK)
            a->loss[s] = r.base.loss;
    }
    if (rc == DTRAIN_OK)
        rc = dtrain_ptrainer_finish(t, a->err, sizeof a->err);
    if (rc == DTRAIN_OK && c->checkpoint[0] != '\0')
        rc = dtrain_ft_save(t, c, bs, comms.group[DTRAIN_GROUP_WORLD], c->checkpoint, a->err, sizeof a->err);
    a->ok = rc == DTRAIN_OK;
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return rc == DTRAIN_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct dtrain_train_config c;
    char err[512];
    int help = 0;
    if (argc < 4) {
        fprintf(stderr, "usage: lora_run T P D [dtrain-train flags]\n");
        return 2;
    }
    int T = atoi(argv[1]), P = atoi(argv[2]), D = atoi(argv[3]), world = T * P * D;
    argv[3] = argv[0];
    dtrain_train_config_defaults(&c);
    if (world < 1 || world > LOCAL_BOOT_MAX_WORLD ||
        dtrain_train_config_parse_args(&c, argc - 3, argv + 3, &help, err, sizeof err) != DTRAIN_OK ||
        dtrain_train_config_finish(&c, err, sizeof err) != DTRAIN_OK || c.steps > MAX_STEPS) {
        fprintf(stderr, "lora_run: %s\n", world < 1 || world > LOCAL_BOOT_MAX_WORLD ? "bad layout"
                                          : c.steps > MAX_STEPS ? "too many steps" : err);
        return 2;
    }
    struct area *areas = calloc((size_t)world, sizeof *areas);
    int *codes = calloc((size_t)world, sizeof *codes);
    if (areas == NULL || codes == NULL)
        return 1;
    int rc = local_boot_run(T, P, D, rank_main, &c, sizeof *areas, areas, codes, 300, err, sizeof err);
    for (int r = 0; r < world; r++)
        if (!areas[r].ok)
            fprintf(stderr, "lora_run: rank %d (exit %d): %s\n", r, codes[r], areas[r].err);
    if (rc == 0)
        for (long s = 0; s < c.steps; s++)
            printf("loss %ld %.9g\n", s, areas[0].loss[s]);
    free(areas);
    free(codes);
    return rc == 0 ? 0 : 1;
}
