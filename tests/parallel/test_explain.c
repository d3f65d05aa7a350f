/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The explain model (common/dtrain_step_bytes.h: dtrain-topo --explain and
 * the trainer's DTRAIN_VERBOSE report) against what the real trainer sends
 * on the cpu backend: T*P*D local processes (local_boot.h, real
 * communicators over shared memory, one layout over TCP), two steps of
 * dtrain_ptrainer_step each; every rank counts the payload bytes its
 * communicators sent during each step (dtrain_traffic_sample: the
 * communicators' own counters), and the members' counts of each group are
 * added up:
 *  - TP (every layer's all-reduces, sequence parallelism's all-gathers and
 *    reduce-scatters, full recomputation's second forward, the
 *    vocabulary-parallel embedding and loss, the LayerNorm weight sums),
 *    PP (activations and gradients over V=1's neighbour pairs and V=2's
 *    pipeline group, the tied embedding's swap) and WORLD (the loss and
 *    norm sums) equal the model to the byte, in every group of every
 *    layout;
 *  - DP equals it to the byte without ZeRO and with ZeRO-3 (each unit's
 *    padding to a multiple of D is in the model: D = 3 pads); with ZeRO-1/2
 *    each bucket is padded to a multiple of D before its reduce-scatter and
 *    all-gather, so the measured bytes lie in [model, model + 2(D-1)^2 *
 *    buckets * 4]: the model leaves out that padding (< D floats a bucket),
 *    which depends on the bucket split (the largest difference is printed);
 *  - each stage's local parameter count (the shard plan) equals the
 *    model's dtrain_explain_stage_params;
 *  - the step's measured waits (pipeline sends and receives, TP
 *    communication, DP exposed, the whole step; the slowest rank) are
 *    printed next to the model's bytes per member and the time they would
 *    take at a nominal 25 GB/s: shown, not asserted (a loaded machine). */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_data.h"
#include "parallel/dtrain_dp.h"
#include "dtrain_parallel.h"
#include "parallel/dtrain_shard.h"
#include "trainer/dtrain_traffic.h"
#include "local_boot.h"
#include "tap.h"

#define STEPS 2
#define NOMINAL_GBPS 25.0

struct rank_area {
    int ok;
    char err[512];
    int tp_rank, pp_rank, dp_rank;
    uint64_t sent[STEPS][DTRAIN_EXPLAIN_GROUPS];
    double pipe_wait_ms[STEPS], tp_comm_ms[STEPS], dp_exposed_ms[STEPS], step_ms[STEPS];
    size_t local_params;
    int buckets;
};

struct job {
    struct dtrain_train_config cfg;
    int tcp;
};

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct job *j = ctx;
    struct rank_area *a = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    if (local_boot_comms(bs, 30000, j->tcp, &comms, NULL, a->err, sizeof a->err) != DTRAIN_OK)
        return 3;
    int rc = dtrain_ptrainer_create(&j->cfg, bs, &comms, &t, a->err, sizeof a->err);
    a->tp_rank = bs->tp_rank;
    a->pp_rank = bs->pp_rank;
    a->dp_rank = bs->dp_rank;
    if (rc == DTRAIN_OK) {
        a->local_params = dtrain_ptrainer_shard(t)->count;
        a->buckets = dtrain_dp_buckets(dtrain_ptrainer_dp(t));
    }
    for (int s = 0; s < STEPS && rc == DTRAIN_OK; s++) {
        uint64_t before[DTRAIN_EXPLAIN_GROUPS];
        struct dtrain_pstep_result r;
        dtrain_traffic_sample(&comms, before);
        rc = dtrain_ptrainer_step(t, &r, a->err, sizeof a->err);
        dtrain_traffic_sample(&comms, a->sent[s]);
        for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++)
            a->sent[s][g] -= before[g];
        a->pipe_wait_ms[s] = r.pipe_wait_ms;
        a->tp_comm_ms[s] = r.tp_comm_ms;
        a->dp_exposed_ms[s] = r.dp_exposed_ms;
        a->step_ms[s] = r.base.ms;
    }
    a->ok = rc == DTRAIN_OK;
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return rc == DTRAIN_OK ? 0 : 1;
}

struct layout {
    int tp, pp, dp, micro, vs, sp, zero, recompute, tcp;
};

/* Are the ranks of x and y in one group of kind g? */
static int same_group(const struct rank_area *x, const struct rank_area *y, enum dtrain_explain_group g)
{
    switch (g) {
    case DTRAIN_EXPLAIN_TP: return x->pp_rank == y->pp_rank && x->dp_rank == y->dp_rank;
    case DTRAIN_EXPLAIN_PP: return x->tp_rank == y->tp_rank && x->dp_rank == y->dp_rank;
    case DTRAIN_EXPLAIN_DP: return x->pp_rank == y->pp_rank && x->tp_rank == y->tp_rank;
    default: return 1;
    }
}

static void run_layout(const struct job *base, const struct layout *L)
{
    struct job j = *base;
    j.cfg.micro_batches = L->micro;
    j.cfg.virtual_stages = L->vs;
    j.cfg.sequence_parallel = L->sp;
    j.cfg.zero_stage = L->zero;
    j.cfg.recompute = L->recompute;
    j.tcp = L->tcp;
    int W = L->tp * L->pp * L->dp, codes[LOCAL_BOOT_MAX_WORLD];
    char name[160], err[512];
    snprintf(name, sizeof name, "(%d,%d,%d) m=%d%s%s ZeRO-%d%s%s", L->tp, L->pp, L->dp, L->micro,
             L->vs > 1 ? " V=2" : "", L->sp ? " SP" : "", L->zero, L->recompute == 2 ? " full recompute" : "",
             L->tcp ? " TCP" : "");
    struct rank_area *areas = calloc((size_t)W, sizeof *areas);
    int rc = areas == NULL ? -1
                           : local_boot_run(L->tp, L->pp, L->dp, rank_main, &j, sizeof *areas, areas, codes, 120, err,
                                            sizeof err);
    int all_ok = rc == 0;
    for (int r = 0; r < W && all_ok; r++)
        all_ok = areas[r].ok;
    if (!ok(all_ok, "%s: %d ranks train %d steps", name, W, STEPS)) {
        for (int r = 0; r < W && areas != NULL; r++)
            if (!areas[r].ok)
                diag("rank %d: %s", r, areas[r].err[0] ? areas[r].err : err);
        free(areas);
        for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS + 1; g++)
            ok(0, "%s: not run", name);
        return;
    }
    struct dtrain_model_size m;
    dtrain_traffic_model(&j.cfg, L->tp, L->dp, 2, &m); /* dtrain_ptrainer_step sums 2 doubles */

    /* each stage's parameter count */
    int params_ok = 1;
    for (int r = 0; r < W; r++)
        if ((double)areas[r].local_params != dtrain_explain_stage_params(&m, L->tp, L->pp, areas[r].pp_rank)) {
            diag("rank %d (stage %d): %zu local parameters, the model says %.0f", r, areas[r].pp_rank,
                 areas[r].local_params, dtrain_explain_stage_params(&m, L->tp, L->pp, areas[r].pp_rank));
            params_ok = 0;
        }
    ok(params_ok, "%s: every stage's local parameter count is the model's", name);

    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        int exact = !(g == DTRAIN_EXPLAIN_DP && (L->zero == 1 || L->zero == 2));
        int good = 1, groups = 0;
        double worst = 0, first_pred = 0;
        for (int q = 0; q < W; q++) {
            int leader = 1; /* q is the lowest rank of its group */
            for (int p = 0; p < q; p++)
                if (same_group(&areas[p], &areas[q], (enum dtrain_explain_group)g))
                    leader = 0;
            if (!leader)
                continue;
            groups++;
            double pred = dtrain_explain_group_bytes(&m, L->tp, L->pp, L->dp, (enum dtrain_explain_group)g,
                                                     areas[q].pp_rank);
            double slack = exact ? 0 : 2.0 * (L->dp - 1) * (L->dp - 1) * areas[q].buckets * 4.0;
            for (int s = 0; s < STEPS; s++) {
                uint64_t meas = 0;
                for (int r = 0; r < W; r++)
                    if (same_group(&areas[r], &areas[q], (enum dtrain_explain_group)g))
                        meas += areas[r].sent[s][g];
                if (groups == 1)
                    first_pred = pred;
                double d = fabs((double)meas - pred);
                worst = d > worst ? d : worst;
                if ((double)meas < pred || (double)meas > pred + slack) {
                    diag("%s: %s group of rank %d, step %d: %" PRIu64 " bytes sent, the model %.0f (+%.0f)", name,
                         dtrain_explain_group_name((enum dtrain_explain_group)g), q, s, meas, pred, slack);
                    good = 0;
                }
            }
        }
        ok(good, "%s: %s, %d group%s: in each, the members sent %s the model's bytes (%.0f in the first; largest "
           "difference %.0f)", name, dtrain_explain_group_name((enum dtrain_explain_group)g), groups,
           groups > 1 ? "s" : "", exact ? "exactly" : "at least and at most 2(D-1)^2*buckets floats of padding above",
           first_pred, worst);
    }
    /* times: shown, not asserted (the slowest rank's, last step) */
    double pw = 0, tc = 0, de = 0, ms = 0;
    for (int r = 0; r < W; r++) {
        const struct rank_area *a = &areas[r];
        pw = a->pipe_wait_ms[STEPS - 1] > pw ? a->pipe_wait_ms[STEPS - 1] : pw;
        tc = a->tp_comm_ms[STEPS - 1] > tc ? a->tp_comm_ms[STEPS - 1] : tc;
        de = a->dp_exposed_ms[STEPS - 1] > de ? a->dp_exposed_ms[STEPS - 1] : de;
        ms = a->step_ms[STEPS - 1] > ms ? a->step_ms[STEPS - 1] : ms;
    }
    double per[DTRAIN_EXPLAIN_GROUPS] = {0};
    int size[DTRAIN_EXPLAIN_GROUPS] = {L->tp, L->pp, L->dp, W};
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++)
        for (int s = 0; s < L->pp; s++) {
            double b = dtrain_explain_group_bytes(&m, L->tp, L->pp, L->dp, (enum dtrain_explain_group)g, s) / size[g];
            per[g] = b > per[g] ? b : per[g];
        }
    diag("%s: predicted per member (busiest stage) TP %.0f B = %.4f ms, PP %.0f B = %.4f ms, DP %.0f B = %.4f ms at "
         "a nominal %.0f GB/s; measured (slowest rank, step %d): TP comm %.3f ms, pipeline wait %.3f ms, DP exposed "
         "%.3f ms, step %.3f ms", name, per[0], per[0] / (NOMINAL_GBPS * 1e6), per[1], per[1] / (NOMINAL_GBPS * 1e6),
         per[2], per[2] / (NOMINAL_GBPS * 1e6), NOMINAL_GBPS, STEPS - 1, tc, pw, de, ms);
    free(areas);
}

int main(void)
{
    char dir[] = "/tmp/dtrain-test-explain-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        printf("1..0 # SKIP cannot make a temporary folder\n");
        return 0;
    }
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    size_t ntok = 8000;
    uint16_t *tok = malloc(ntok * sizeof *tok);
    for (size_t i = 0; i < ntok && tok != NULL; i++)
        tok[i] = (uint16_t)((i * 7 + i / 13) % 250);
    int wrote = tok != NULL ? dtrain_tokens_write(path, tok, ntok, err, sizeof err) : DTRAIN_ERR_SYSTEM;
    free(tok);

    struct job j = {0};
    dtrain_train_config_defaults(&j.cfg);
    snprintf(j.cfg.data, sizeof j.cfg.data, "%s", path);
    /* V = 250 padded to 256: the loss and embedding over padded rows */
    j.cfg.model = (struct dtrain_model_config){.max_seq_len = 32, .vocab_size = 250, .padded_vocab_size = 256,
                                              .num_layers = 4, .num_heads = 4, .channels = 32};
    j.cfg.batch = 12; /* D = 2 and 3 */
    j.cfg.seq = 16;
    j.cfg.steps = STEPS;
    j.cfg.seed = 7;
    j.cfg.threads = 1;
    j.cfg.log_every = 0;
    j.cfg.bucket_mb = 0.01; /* several buckets per stage: padding in each */
    int fin = wrote == DTRAIN_OK ? dtrain_train_config_finish(&j.cfg, err, sizeof err) : wrote;
    if (!ok(fin == DTRAIN_OK, "the config and the token file are ready")) {
        diag("%s", err);
        return tap_done();
    }
    static const struct layout layouts[] = {
        {2, 1, 1, 1, 1, 0, 0, 0, 0},
        {1, 2, 1, 2, 1, 0, 0, 0, 0},
        {1, 1, 2, 1, 1, 0, 0, 0, 0},
        {2, 2, 2, 2, 1, 0, 0, 0, 0},
        {2, 2, 2, 2, 1, 0, 0, 0, 1},
        {2, 2, 2, 2, 1, 1, 1, 0, 0},
        {2, 2, 1, 4, 1, 1, 2, 2, 0},
        {4, 1, 2, 2, 1, 1, 0, 0, 0},
        {1, 2, 2, 2, 2, 0, 1, 0, 0},
        {2, 1, 2, 2, 1, 1, 3, 0, 0},
        {1, 2, 3, 2, 1, 0, 3, 2, 0},
        {2, 1, 3, 1, 1, 0, 1, 0, 0},
        {1, 1, 3, 2, 1, 0, 2, 0, 0},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        run_layout(&j, &layouts[i]);
    remove(path);
    rmdir(dir);
    return tap_done();
}
