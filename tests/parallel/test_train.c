/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Whole training runs of the parallel trainer (include/dtrain/dtrain_parallel.h)
 * as T*P*D local processes (local_boot.h), against one process training
 * the whole model (dtrain_gpt2.h, its own loop here) with the same config,
 * seed, data and global batch:
 *  - (1,1,1) with one micro-batch gives the same losses and parameters bit
 *    for bit (the same operations in the same order);
 *  - every other layout, micro-batch count, ZeRO stage 0, 1 or 2 and bucket
 *    overlap on or off gives every step's loss within the tolerance of
 *    doc/parallel.md and final parameters within a small bound;
 *  - the validation loss after the last step (forward only over VAL_BATCHES
 *    batches of another token file) is within the same tolerance of the
 *    reference's in every layout;
 *  - DP replicas, the tied embedding's two copies (P > 1) and the
 *    TP-replicated tensors stay equal bit for bit (each rank reports
 *    checksums of its final parameters);
 *  - activation recomputation (selective, full) gives the same layout's
 *    losses, norms and parameters without it bit for bit, with less
 *    activation memory (dtrain_ptrainer_memory), and every layout's
 *    model-state bytes are within 5% above the formula of
 *    dtrain_parallel.h (ZeRO stages 0-2);
 *  - sequence parallelism (T = 2 and 4, with P, D, ZeRO 1-2, recompute,
 *    V = 2, fp16) is within the same tolerances of the reference, its
 *    deviation from the same layout without it is reported, and rank 0's
 *    activations are smaller than without it;
 *  - ZeRO-3 with its prefetch off (the gathers synchronous) gives the same
 *    layout's losses, norms, parameters and validation loss with it on bit
 *    for bit (T, P, V, recomputation, sequence parallelism, fp16), and the
 *    run with it on did gather ahead.
 * The model is tiny (L=4 C=32 NH=4 V=256 padded to 256), the learning rate
 * high (1e-2, so that 8 steps move the loss from 5.55 to about 4) and
 * gradient clipping on, so that the global norm over all three dimensions
 * matters. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_data.h"
#include "trainer/dtrain_ft.h"
#include "dtrain_gpt2.h"
#include "dtrain_generate.h"
#include "dtrain_parallel.h"
#include "parallel/dtrain_shard.h"
#include "parallel/dtrain_stage.h"
#include "local_boot.h"
#include "tap.h"

#define STEPS 8
#define VAL_BATCHES 3
/* Relative loss tolerance of doc/parallel.md. */
#define LOSS_RTOL 1e-5
/* Parameters after STEPS AdamW steps of lr: an update moves an element by
 * at most about lr, so a wrong gradient shows as deviations near lr*STEPS;
 * rounding differences flip only elements whose gradient is near 0. */
#define PARAM_ATOL (1e-3)
/* fp16 runs against the (1,1,1) fp16 run (see the fp16 block of main). */
#define FP16_RTOL 1e-3
#define BF16_RTOL 1e-3 /* see the bf16 layouts: measured 7.8e-6 over 8 steps */

struct run_result {
    int ok;
    char err[512];
    float loss[STEPS];
    double norm[STEPS];
    double val_loss; /* after the last step */
    /* checksums of this rank's final parameters: all of them, its wte
     * slice, its TP-replicated tensors */
    uint64_t all, wte, replicated;
    int tp_rank, pp_rank, dp_rank;
    struct dtrain_ptrainer_memory mem;
    long overflows;    /* fp16: steps skipped for a gradient overflow */
    double last_scale; /* fp16: the loss scale of the last step */
    long prefetched;   /* ZeRO-3: this rank's gathers that ran ahead (dtrain_dp.h), over the steps */
};

/* What each rank writes; rank 0's area also holds the whole model. */
struct rank_area {
    struct run_result r;
    float params[]; /* rank 0: the gathered model */
};

struct job {
    struct dtrain_train_config cfg;
    size_t nparams;
    const char *save_dir; /* a sharded checkpoint of the last step goes here, or NULL */
};

static size_t area_bytes(const struct job *j)
{
    return sizeof(struct rank_area) + j->nparams * sizeof(float);
}

static uint64_t fnv(uint64_t h, const float *x, size_t n)
{
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int checksums(struct dtrain_ptrainer *t, const struct dtrain_bootstrap *bs, const struct job *j,
                     struct run_result *r)
{
    size_t n = dtrain_ptrainer_shard(t)->count;
    float *p = malloc((n + 1) * sizeof(float));
    struct dtrain_shard s;
    char err[256];
    if (p == NULL || dtrain_ptrainer_local_params(t, p, r->err, sizeof r->err) != DTRAIN_OK) {
        free(p);
        return DTRAIN_ERR_SYSTEM;
    }
    r->tp_rank = bs->tp_rank;
    r->pp_rank = bs->pp_rank;
    r->dp_rank = bs->dp_rank;
    r->all = fnv(14695981039346656037ULL, p, n);
    if (dtrain_shard_plan(&j->cfg.model, bs->tp, bs->pp, bs->tp_rank, bs->pp_rank, &s, err, sizeof err) != 0) {
        free(p);
        return DTRAIN_OK;
    }
    r->wte = fnv(14695981039346656037ULL, p + s.offset[DTRAIN_MODEL_WTE], s.size[DTRAIN_MODEL_WTE]);
    r->replicated = 14695981039346656037ULL;
    static const enum dtrain_model_tensor replicated[] = {
        DTRAIN_MODEL_WPE, DTRAIN_MODEL_LN1W, DTRAIN_MODEL_LN1B, DTRAIN_MODEL_ATTPROJB, DTRAIN_MODEL_LN2W,
        DTRAIN_MODEL_LN2B, DTRAIN_MODEL_FCPROJB, DTRAIN_MODEL_LNFW, DTRAIN_MODEL_LNFB};
    for (size_t k = 0; k < sizeof replicated / sizeof replicated[0]; k++)
        r->replicated = fnv(r->replicated, p + s.offset[replicated[k]], s.size[replicated[k]]);
    free(p);
    return DTRAIN_OK;
}

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct job *j = ctx;
    struct rank_area *a = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    int rc = local_boot_comms(bs, 30000, 0, &comms, NULL, a->r.err, sizeof a->r.err);
    if (rc != DTRAIN_OK)
        return 3;
    rc = dtrain_ptrainer_create(&j->cfg, bs, &comms, &t, a->r.err, sizeof a->r.err);
    if (rc == DTRAIN_OK)
        dtrain_ptrainer_memory(t, &a->r.mem);
    /* fp16: an overflow skips its step (dtrain_parallel.h), at most 64 of them */
    for (int tries = 0; rc == DTRAIN_OK && dtrain_ptrainer_steps_done(t) < STEPS && tries < STEPS + 64; tries++) {
        struct dtrain_pstep_result r;
        long s = dtrain_ptrainer_steps_done(t);
        rc = dtrain_ptrainer_step(t, &r, a->r.err, sizeof a->r.err);
        if (rc == DTRAIN_OK && r.overflow) {
            a->r.overflows++;
            continue;
        }
        if (rc == DTRAIN_OK && j->cfg.rank_metrics[0] != '\0') /* the metrics lines, as the loop writes them */
            rc = dtrain_ptrainer_log_step(t, NULL, &r, a->r.err, sizeof a->r.err);
        a->r.loss[s] = r.base.loss;
        a->r.norm[s] = r.base.grad_norm;
        a->r.prefetched += r.dp_prefetched;
        a->r.last_scale = r.loss_scale;
    }
    if (rc == DTRAIN_OK && dtrain_ptrainer_steps_done(t) < STEPS) {
        snprintf(a->r.err, sizeof a->r.err, "%d steps not done after %d tries", STEPS, STEPS + 64);
        rc = DTRAIN_ERR_SYSTEM;
    }
    if (rc == DTRAIN_OK)
        rc = dtrain_ptrainer_validate(t, &a->r.val_loss, a->r.err, sizeof a->r.err);
    if (rc == DTRAIN_OK)
        rc = dtrain_ptrainer_gather_params(t, a->params, a->r.err, sizeof a->r.err);
    if (rc == DTRAIN_OK && j->save_dir != NULL)
        rc = dtrain_ft_save(t, &j->cfg, bs, comms.group[DTRAIN_GROUP_WORLD], j->save_dir, a->r.err, sizeof a->r.err);
    if (rc == DTRAIN_OK)
        rc = checksums(t, bs, j, &a->r); /* a collective with ZeRO-3 */
    a->r.ok = rc == DTRAIN_OK;
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return rc == DTRAIN_OK ? 0 : 1;
}

/* The reference: one process training the whole model (dtrain_gpt2.h's
 * forward and backward of every layer, checked against finite differences
 * and llm.c in tests/runtime) with AdamW, written out here so that it does
 * not share the parallel trainer's code: the steps of the trainer of old. */
static int reference(const struct job *j, struct run_result *r, float *params)
{
    const struct dtrain_train_config *c = &j->cfg;
    struct dtrain_kernels *k = NULL;
    struct dtrain_gpt2 *m = NULL;
    struct dtrain_adamw *opt = NULL;
    struct dtrain_tokens *data = NULL, *val = NULL;
    struct dtrain_kernels_options kopt = {.threads = c->threads};
    int B = c->batch, T = c->seq, rc = -1;
    int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    size_t n = dtrain_model_param_count(&c->model);
    if (in == NULL || tg == NULL || dtrain_kernels_create("cpu", &kopt, &k, r->err, sizeof r->err) != 0 ||
        dtrain_tokens_open(c->data, &data, r->err, sizeof r->err) != DTRAIN_OK ||
        dtrain_tokens_open(c->val_data, &val, r->err, sizeof r->err) != DTRAIN_OK ||
        dtrain_gpt2_create(k, &c->model, B, T, &m, r->err, sizeof r->err) != DTRAIN_OK ||
        dtrain_adamw_create(k, n, &opt, r->err, sizeof r->err) != DTRAIN_OK)
        goto out;
    dtrain_model_init_params(&c->model, c->seed, params);
    dtrain_gpt2_set_params(m, params);
    for (int s = 0; s < STEPS; s++) {
        float loss = 0.0f;
        dtrain_tokens_batch(data, B, T, c->data_order, c->data_seed, (uint64_t)s, in, tg);
        if (dtrain_gpt2_forward(m, in, tg, B, T, &loss, r->err, sizeof r->err) != DTRAIN_OK)
            goto out;
        dtrain_gpt2_zero_grad(m);
        if (dtrain_gpt2_backward(m, r->err, sizeof r->err) != DTRAIN_OK)
            goto out;
        double norm = sqrt(dtrain_k_sumsq(k, dtrain_gpt2_grads(m), n));
        dtrain_adamw_update(opt, dtrain_gpt2_params(m), dtrain_gpt2_grads(m), &c->optim, s,
                            dtrain_lr_at(&c->optim, s), dtrain_clip_scale(&c->optim, norm));
        r->loss[s] = loss;
        r->norm[s] = norm;
    }
    /* the validation loss: the mean of the first VAL_BATCHES batches' mean losses */
    double vsum = 0.0;
    for (int v = 0; v < VAL_BATCHES; v++) {
        float loss = 0.0f;
        dtrain_tokens_batch(val, B, T, DTRAIN_ORDER_SEQUENTIAL, 0, (uint64_t)v, in, tg);
        if (dtrain_gpt2_forward(m, in, tg, B, T, &loss, r->err, sizeof r->err) != DTRAIN_OK)
            goto out;
        vsum += loss;
    }
    r->val_loss = vsum / VAL_BATCHES;
    dtrain_gpt2_get_params(m, params);
    r->ok = 1;
    rc = 0;
out:
    dtrain_adamw_destroy(opt);
    dtrain_gpt2_destroy(m);
    dtrain_tokens_close(data);
    dtrain_tokens_close(val);
    dtrain_kernels_destroy(k);
    free(in);
    free(tg);
    return rc;
}

struct layout {
    int tp, pp, dp, micro, zero, overlap; /* zero: the ZeRO stage */
    int recompute;                        /* enum dtrain_recompute */
    int bits_of;                          /* 1 + the layout whose bits this one gives; 0: none */
    int vs;                               /* virtual stages (interleaved 1F1B); 0: 1 */
    int sp;                               /* sequence parallelism */
    int no_prefetch;                      /* ZeRO-3 with --zero-prefetch 0 (bits_of: the same with it on) */
};

static double max_rel_loss(const struct run_result *a, const struct run_result *b)
{
    double worst = 0.0;
    for (int s = 0; s < STEPS; s++) {
        double d = fabs((double)a->loss[s] - b->loss[s]) / fabs((double)b->loss[s]);
        if (!(d <= worst))
            worst = d;
    }
    return worst;
}

static double max_rel_norm(const struct run_result *a, const struct run_result *b)
{
    double worst = 0.0;
    for (int s = 0; s < STEPS; s++) {
        double d = fabs(a->norm[s] - b->norm[s]) / b->norm[s];
        if (!(d <= worst))
            worst = d;
    }
    return worst;
}

static double max_abs(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst))
            worst = d;
    }
    return worst;
}

/* A checkpoint written by (2,2,2), read into one process (the sharded
 * format put together), holds the (2,2,2) job's parameters bit for bit, and
 * generates the same text as those parameters gathered by the job, run
 * after run. */
static void test_generate_from_222(const struct job *base, const char *dir)
{
    struct job j = *base;
    char err[512], ck[300];
    snprintf(ck, sizeof ck, "%s/ck222", dir);
    j.save_dir = ck;
    j.cfg.micro_batches = 2;
    size_t bytes = area_bytes(&j);
    unsigned char *areas = calloc(8, bytes);
    int codes[LOCAL_BOOT_MAX_WORLD];
    int rc = local_boot_run(2, 2, 2, rank_main, &j, bytes, areas, codes, 120, err, sizeof err);
    ok(rc == 0, "(2,2,2) trains %d steps and writes a sharded checkpoint (%s)", STEPS, rc == 0 ? "ok" : err);
    struct dtrain_sckpt_model m = {0};
    const float *gathered = ((const struct rank_area *)areas)->params;
    int loaded = rc == 0 && dtrain_sckpt_load_model(ck, DTRAIN_SCKPT_NEWEST, &m, err, sizeof err) == DTRAIN_OK;
    ok(loaded && m.step == STEPS && m.writer.tp == 2 && m.writer.pp == 2 && m.writer.dp == 2 &&
       memcmp(m.params, gathered, j.nparams * sizeof(float)) == 0,
       "read into one process: step %d, written by (2,2,2), the job's parameters bit for bit (%s)", STEPS,
       loaded ? "ok" : err);
    if (loaded) {
        int32_t prompt[3] = {'t', 'h', 'e'}, a[40], b[40], c[40];
        int na = 0, nb = 0, nc = 0;
        struct dtrain_gen *g1 = NULL, *g2 = NULL;
        int okg = dtrain_gen_create(&m.model, m.params, &g1, err, sizeof err) == DTRAIN_OK &&
                  dtrain_gen_create(&m.model, gathered, &g2, err, sizeof err) == DTRAIN_OK &&
                  dtrain_generate(g1, prompt, 3, 40, 0.8, 20, 11, a, &na, err, sizeof err) == DTRAIN_OK &&
                  dtrain_generate(g1, prompt, 3, 40, 0.8, 20, 11, b, &nb, err, sizeof err) == DTRAIN_OK &&
                  dtrain_generate(g2, prompt, 3, 40, 0.8, 20, 11, c, &nc, err, sizeof err) == DTRAIN_OK;
        ok(okg && na == 32 - 3 + 1 && nb == na && nc == na && memcmp(a, b, sizeof a[0] * (size_t)na) == 0 &&
           memcmp(a, c, sizeof a[0] * (size_t)na) == 0,
           "generation (temperature 0.8, top-k 20, seed 11) from the checkpoint: %d tokens up to max_seq_len, the "
           "same twice and the same as from the job's gathered parameters (%s)", na, okg ? "ok" : err);
        dtrain_gen_destroy(g1);
        dtrain_gen_destroy(g2);
    }
    free(m.params);
    free(areas);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ck);
    if (system(cmd) != 0)
        diag("could not remove %s", ck);
}

/* --rank-metrics in (T,P,D) = (2,2,2): every rank's file has a line per
 * step with its time split; rank 0's metrics name the slowest rank. */
static void test_rank_metrics(const struct job *base, const char *dir)
{
    struct job j = *base;
    char err[512], metrics[300], rdir[300], path[400], line[1024];
    snprintf(rdir, sizeof rdir, "%s/ranks", dir);
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
    snprintf(j.cfg.rank_metrics, sizeof j.cfg.rank_metrics, "%s", rdir);
    snprintf(j.cfg.metrics, sizeof j.cfg.metrics, "%s", metrics);
    j.cfg.micro_batches = 2;
    if (!ok(dtrain_train_config_check_outputs(&j.cfg, err, sizeof err) == DTRAIN_OK, "the per-rank metrics folder "
            "is made (%s)", err[0] ? err : "ok"))
        return;
    size_t bytes = area_bytes(&j);
    unsigned char *areas = calloc(8, bytes);
    int codes[LOCAL_BOOT_MAX_WORLD];
    int rc = local_boot_run(2, 2, 2, rank_main, &j, bytes, areas, codes, 120, err, sizeof err);
    ok(rc == 0, "(2,2,2) trains with --rank-metrics (%s)", rc == 0 ? "ok" : err);
    int files_ok = 1;
    for (int r = 0; r < 8; r++) {
        snprintf(path, sizeof path, "%s/rank-%05d.jsonl", rdir, r);
        FILE *f = fopen(path, "r");
        int lines = 0, good = 1;
        while (f != NULL && fgets(line, sizeof line, f) != NULL) {
            char want[64];
            snprintf(want, sizeof want, "{\"step\": %d, \"rank\": %d, ", lines, r);
            good &= strncmp(line, want, strlen(want)) == 0 && strstr(line, "\"compute_ms\": ") &&
                    strstr(line, "\"tp_comm_ms\": ") && strstr(line, "\"pipe_wait_ms\": ") &&
                    strstr(line, "\"dp_exposed_ms\": ");
            lines++;
        }
        if (f != NULL)
            fclose(f);
        files_ok &= good && lines == STEPS;
        unlink(path);
    }
    ok(files_ok, "each of the 8 ranks wrote rank-N.jsonl: one line per step with ms, compute, TP, pipeline wait, DP");
    FILE *f = fopen(metrics, "r");
    int lines = 0, named = 0, slow;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "\"slowest_rank\": ");
        lines++;
        named += p != NULL && sscanf(p, "\"slowest_rank\": %d", &slow) == 1 && slow >= 0 && slow < 8 &&
                 strstr(line, "\"compute_spread_ms\": ") != NULL;
    }
    if (f != NULL)
        fclose(f);
    ok(lines == STEPS && named == STEPS, "rank 0's metrics name the slowest rank and the spread at every step (%d/%d)",
       named, lines);
    unlink(metrics);
    rmdir(rdir);
    free(areas);
}

/* Interleaved 1F1B at P = 4 with V = 2 needs 8 layers (one per chunk): a
 * reference of its own, then (1,4,1) m = 4 with V = 1 and V = 2. */
static void test_interleaved_p4(const struct job *base)
{
    struct job j = *base;
    char err[512] = "";
    j.cfg.model.num_layers = 8;
    j.nparams = dtrain_model_param_count(&j.cfg.model);
    struct run_result ref = {0}, got[2];
    float *ref_params = malloc(j.nparams * sizeof(float)), *params[2] = {NULL, NULL};
    memset(got, 0, sizeof got);
    int have = ref_params != NULL && reference(&j, &ref, ref_params) == 0;
    ok(have, "8 layers: the single-process reference trains (%s)", have ? "ok" : ref.err);
    for (int v = 0; have && v < 2; v++) {
        struct job lj = j;
        lj.cfg.micro_batches = 4;
        lj.cfg.virtual_stages = v + 1;
        size_t bytes = area_bytes(&lj);
        unsigned char *areas = calloc(4, bytes);
        int codes[LOCAL_BOOT_MAX_WORLD];
        int rc = areas != NULL ? local_boot_run(1, 4, 1, rank_main, &lj, bytes, areas, codes, 120, err, sizeof err) : -1;
        const struct rank_area *r0 = (const struct rank_area *)areas;
        if (rc != 0) {
            for (int r = 0; areas != NULL && r < 4; r++)
                if (((const struct rank_area *)(areas + (size_t)r * bytes))->r.err[0])
                    diag("rank %d: %s", r, ((const struct rank_area *)(areas + (size_t)r * bytes))->r.err);
            ok(0, "(T,P,D)=(1,4,1) m=4 V=%d, 8 layers: runs (%s)", v + 1, err);
            free(areas);
            continue;
        }
        got[v] = r0->r;
        if ((params[v] = malloc(j.nparams * sizeof(float))) != NULL)
            memcpy(params[v], r0->params, j.nparams * sizeof(float));
        double dl = max_rel_loss(&r0->r, &ref), dn = max_rel_norm(&r0->r, &ref);
        double dv = fabs(r0->r.val_loss - ref.val_loss) / ref.val_loss;
        double dp = params[v] != NULL ? max_abs(params[v], ref_params, j.nparams) : 1.0;
        ok(dl <= LOSS_RTOL && dn <= LOSS_RTOL && dv <= LOSS_RTOL && dp < PARAM_ATOL,
           "(T,P,D)=(1,4,1) m=4 V=%d, 8 layers: relative deviation from one process of the loss %.1e, the norm "
           "%.1e, the validation loss %.1e (<= %.0e); parameters %.1e (< %.0e)", v + 1, dl, dn, dv, LOSS_RTOL, dp,
           PARAM_ATOL);
        free(areas);
    }
    if (params[0] != NULL && params[1] != NULL) {
        double vl = max_rel_loss(&got[1], &got[0]), vn = max_rel_norm(&got[1], &got[0]);
        double vp = max_abs(params[0], params[1], j.nparams);
        ok(got[0].loss[0] == got[1].loss[0] && vl <= LOSS_RTOL && vn <= LOSS_RTOL && vp < PARAM_ATOL,
           "(1,4,1) m=4, 8 layers: V=2 against V=1: step 0's loss bit for bit, the losses within %.1e, the norms "
           "within %.1e (<= %.0e), the parameters within %.1e (< %.0e)", vl, vn, LOSS_RTOL, vp, PARAM_ATOL);
    }
    free(params[0]);
    free(params[1]);
    free(ref_params);
}

int main(void)
{
    char dir[] = "/tmp/dtrain-test-parallel-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        printf("1..0 # SKIP cannot make a temporary folder\n");
        return 0;
    }
    /* byte-level text with some structure: the loss must fall */
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    size_t ntok = 20000;
    uint16_t *tok = malloc(ntok * sizeof *tok);
    const char *words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. "};
    for (size_t i = 0, w = 0; i < ntok; w++)
        for (const char *c = words[(w * 7 + w / 9) % 9]; *c && i < ntok; c++)
            tok[i++] = (uint16_t)(unsigned char)*c;
    int wrote = dtrain_tokens_write(path, tok, ntok, err, sizeof err);
    /* validation text: the same words in another order */
    char val_path[256];
    snprintf(val_path, sizeof val_path, "%s/val.bin", dir);
    size_t nval = 2000;
    for (size_t i = 0, w = 0; i < nval; w++)
        for (const char *c = words[(w * 5 + w / 7) % 9]; *c && i < nval; c++)
            tok[i++] = (uint16_t)(unsigned char)*c;
    if (wrote == DTRAIN_OK)
        wrote = dtrain_tokens_write(val_path, tok, nval, err, sizeof err);
    free(tok);

    struct job j;
    dtrain_train_config_defaults(&j.cfg);
    snprintf(j.cfg.data, sizeof j.cfg.data, "%s", path);
    snprintf(j.cfg.val_data, sizeof j.cfg.val_data, "%s", val_path);
    j.cfg.val_batches = VAL_BATCHES;
    j.cfg.model = (struct dtrain_model_config){.max_seq_len = 32, .vocab_size = 256, .padded_vocab_size = 256,
                                              .num_layers = 4, .num_heads = 4, .channels = 32};
    j.cfg.batch = 8;
    j.cfg.seq = 16;
    j.cfg.steps = STEPS;
    j.cfg.seed = 7;
    j.cfg.threads = 1;
    j.cfg.optim.lr = 1e-2;
    j.cfg.optim.weight_decay = 0.01;
    j.cfg.optim.grad_clip = 1.0; /* the norm is near 2-4 here: clipping acts */
    j.cfg.log_every = 0;
    j.cfg.bucket_mb = 0.02; /* a few buckets per stage */
    int fin = wrote == DTRAIN_OK ? dtrain_train_config_finish(&j.cfg, err, sizeof err) : wrote;
    j.nparams = dtrain_model_param_count(&j.cfg.model);

    struct run_result ref = {0};
    float *ref_params = malloc(j.nparams * sizeof(float));
    int have_ref = fin == DTRAIN_OK && reference(&j, &ref, ref_params) == 0;
    ok(have_ref, "the single-process reference trains %d steps (%s)", STEPS,
       have_ref ? "ok" : ref.err[0] ? ref.err : err);
    if (!have_ref) {
        free(ref_params);
        return tap_done();
    }
    ok(ref.loss[STEPS - 1] < ref.loss[0] && ref.norm[0] > j.cfg.optim.grad_clip,
       "the reference's loss falls (%.4f -> %.4f) and its first norm %.3f is clipped", ref.loss[0],
       ref.loss[STEPS - 1], ref.norm[0]);

    /* sequence parallelism needs T > 1 dividing the sequence: refused up
     * front with the options named */
    struct dtrain_train_config bad = j.cfg;
    bad.sequence_parallel = 1;
    int brc = dtrain_parallel_check(&bad, 1, 1, 2, err, sizeof err);
    ok(brc == DTRAIN_ERR_INPUT && strstr(err, "--sequence-parallel needs a tensor-parallel size T > 1") &&
       strstr(err, "T=1") && strstr(err, "--dtrain-tp"), "--sequence-parallel with T=1 is refused: %s", err);
    bad.seq = 10;
    brc = dtrain_parallel_check(&bad, 4, 1, 1, err, sizeof err);
    ok(brc == DTRAIN_ERR_INPUT && strstr(err, "(here T=4, --seq 10)"), "--sequence-parallel with T=4 not dividing "
       "--seq 10 is refused: %s", err);
    bad.seq = 12;
    brc = dtrain_parallel_check(&bad, 4, 1, 1, err, sizeof err);
    ok(brc == DTRAIN_OK, "--sequence-parallel with T=4 and --seq 12 passes the check%s%s", brc ? ": " : "",
       brc ? err : "");

    const struct layout layouts[] = {
        {1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0}, {1, 1, 1, 2, 1, 1, 0, 0, 0, 0, 0}, {2, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0}, {1, 2, 1, 2, 0, 1, 0, 0, 0, 0, 0},
        {1, 1, 2, 1, 0, 1, 0, 0, 0, 0, 0}, {1, 1, 2, 2, 1, 0, 0, 0, 0, 0, 0}, {2, 2, 1, 2, 0, 1, 0, 0, 0, 0, 0}, {2, 2, 2, 2, 0, 1, 0, 0, 0, 0, 0},
        {2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0}, {1, 4, 1, 4, 0, 1, 0, 0, 0, 0, 0}, {4, 1, 2, 1, 1, 1, 0, 0, 0, 0, 0},
        /* ZeRO-2 at D = 2 and 4, with T = 2 and with P = 2 */
        {1, 1, 2, 2, 2, 1, 0, 0, 0, 0, 0}, {2, 1, 2, 1, 2, 1, 0, 0, 0, 0, 0}, {1, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0}, {2, 1, 4, 1, 2, 1, 0, 0, 0, 0, 0}, {1, 2, 4, 2, 2, 1, 0, 0, 0, 0, 0},
        /* recomputation: the bits of layouts 1, 4, 8 and 15 (1-based) */
        {1, 1, 1, 1, 0, 1, DTRAIN_RECOMPUTE_FULL, 1, 0, 0, 0}, {1, 1, 1, 1, 0, 1, DTRAIN_RECOMPUTE_SELECTIVE, 1, 0, 0, 0},
        {1, 2, 1, 2, 0, 1, DTRAIN_RECOMPUTE_FULL, 4, 0, 0, 0}, {2, 2, 2, 2, 0, 1, DTRAIN_RECOMPUTE_SELECTIVE, 8, 0, 0, 0},
        {2, 2, 2, 2, 0, 1, DTRAIN_RECOMPUTE_FULL, 8, 0, 0, 0}, {2, 1, 4, 1, 2, 1, DTRAIN_RECOMPUTE_FULL, 15, 0, 0, 0},
        /* interleaved 1F1B, V = 2 (2 chunks of 1 layer per stage): against the
         * same layout with V = 1 (layouts 4, 8, 9, 14 and 20) */
        {1, 2, 1, 2, 0, 1, 0, 4, 2, 0, 0}, {2, 2, 2, 2, 0, 1, 0, 8, 2, 0, 0}, {2, 2, 2, 2, 1, 1, 0, 9, 2, 0, 0},
        {1, 2, 2, 2, 2, 0, 0, 14, 2, 0, 0}, {2, 2, 2, 2, 0, 1, DTRAIN_RECOMPUTE_SELECTIVE, 20, 2, 0, 0},
        /* sequence parallelism: against the same layout without it (layouts
         * 3, 11, 8, 13, 15: 28-32), then recomputation and V = 2 against
         * the SP layout 30 (bits for recomputation, step 0's loss for V) */
        {2, 1, 1, 1, 0, 1, 0, 3, 0, 1, 0}, {4, 1, 2, 1, 1, 1, 0, 11, 0, 1, 0}, {2, 2, 2, 2, 0, 1, 0, 8, 0, 1, 0},
        {2, 1, 2, 1, 2, 1, 0, 13, 0, 1, 0}, {2, 1, 4, 1, 2, 1, 0, 15, 0, 1, 0},
        {2, 2, 2, 2, 0, 1, DTRAIN_RECOMPUTE_FULL, 30, 0, 1, 0}, {2, 2, 2, 2, 0, 1, DTRAIN_RECOMPUTE_SELECTIVE, 30, 0, 1, 0},
        {2, 2, 2, 2, 0, 1, 0, 30, 2, 1, 0},
        /* ZeRO-3 (sharded parameters) at D = 2 and 4, with T = 2 and with P = 2
         * (36-40), with (T,P,D) = (2,2,2); full recomputation against 39 bit
         * for bit, V = 2 against 38; sequence parallelism on ZeRO-3 against
         * layout 37 without it */
        {1, 1, 2, 2, 3, 1, 0, 0, 0, 0, 0}, {2, 1, 2, 1, 3, 1, 0, 0, 0, 0, 0}, {1, 2, 2, 2, 3, 0, 0, 0, 0, 0, 0}, {2, 1, 4, 1, 3, 1, 0, 0, 0, 0, 0},
        {1, 2, 4, 2, 3, 1, 0, 0, 0, 0, 0}, {2, 2, 2, 2, 3, 1, 0, 0, 0, 0, 0}, {2, 1, 4, 1, 3, 1, DTRAIN_RECOMPUTE_FULL, 39, 0, 0, 0},
        {1, 2, 2, 2, 3, 0, 0, 38, 2, 0, 0}, {2, 1, 2, 1, 3, 1, 0, 37, 0, 1, 0},
        /* ZeRO-3 with the prefetch off against the same layouts with it on
         * (38, 41, 42, 43, 44: P = 2; (2,2,2); recompute full, D = 4; V = 2;
         * sequence parallelism) */
        {1, 2, 2, 2, 3, 0, 0, 38, 0, 0, 1}, {2, 2, 2, 2, 3, 1, 0, 41, 0, 0, 1},
        {2, 1, 4, 1, 3, 1, DTRAIN_RECOMPUTE_FULL, 42, 0, 0, 1}, {1, 2, 2, 2, 3, 0, 0, 43, 2, 0, 1},
        {2, 1, 2, 1, 3, 1, 0, 44, 0, 1, 1},
    };
    enum { NLAYOUTS = sizeof layouts / sizeof layouts[0] };
    struct run_result kept[NLAYOUTS];
    float *kept_params[NLAYOUTS] = {NULL};
    double worst_state = 0.0, lowest_state = 0.0;
    memset(kept, 0, sizeof kept);
    double worst_loss = 0.0, worst_val = 0.0;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        const struct layout *L = &layouts[i];
        int world = L->tp * L->pp * L->dp;
        struct job lj = j;
        lj.cfg.micro_batches = L->micro;
        lj.cfg.zero_stage = L->zero;
        lj.cfg.recompute = L->recompute;
        lj.cfg.dp_overlap = L->overlap;
        lj.cfg.virtual_stages = L->vs > 1 ? L->vs : 1;
        lj.cfg.sequence_parallel = L->sp;
        lj.cfg.zero_prefetch = !L->no_prefetch;
        size_t bytes = area_bytes(&lj);
        unsigned char *areas = calloc((size_t)world, bytes);
        int codes[LOCAL_BOOT_MAX_WORLD];
        int rc = local_boot_run(L->tp, L->pp, L->dp, rank_main, &lj, bytes, areas, codes, 120, err, sizeof err);
        const struct rank_area *r0 = (const struct rank_area *)areas;
        char name[96];
        snprintf(name, sizeof name, "(T,P,D)=(%d,%d,%d) m=%d ZeRO stage %d%s%s%s%s%s%s", L->tp, L->pp, L->dp,
                 L->micro, L->zero, L->overlap ? "" : " no overlap", L->recompute ? " recompute " : "",
                 L->recompute ? dtrain_recompute_name(L->recompute) : "", L->vs > 1 ? " V=2" : "",
                 L->sp ? " sequence-parallel" : "", L->no_prefetch ? " prefetch off" : "");
        if (rc != 0) {
            for (int r = 0; r < world; r++) {
                const struct rank_area *a = (const struct rank_area *)(areas + (size_t)r * bytes);
                if (a->r.err[0])
                    diag("rank %d: %s", r, a->r.err);
            }
            ok(0, "%s: runs (%s)", name, err);
            free(areas);
            continue;
        }
        /* every rank reports the same loss and norm */
        int same = 1;
        for (int r = 1; r < world; r++) {
            const struct rank_area *a = (const struct rank_area *)(areas + (size_t)r * bytes);
            same = same && memcmp(a->r.loss, r0->r.loss, sizeof a->r.loss) == 0 &&
                   memcmp(a->r.norm, r0->r.norm, sizeof a->r.norm) == 0;
        }
        /* DP replicas hold the same parameters; the tied wte copies (stage
         * 0 and P-1 of one (tp, dp)) and the TP replicas are equal */
        int replicas = 1, twins = 1, tp_same = 1;
        for (int r = 0; r < world; r++) {
            const struct run_result *x = &((const struct rank_area *)(areas + (size_t)r * bytes))->r;
            for (int q = 0; q < world; q++) {
                const struct run_result *y = &((const struct rank_area *)(areas + (size_t)q * bytes))->r;
                if (x->tp_rank == y->tp_rank && x->pp_rank == y->pp_rank && x->all != y->all)
                    replicas = 0;
                if (x->tp_rank == y->tp_rank && x->dp_rank == y->dp_rank && x->pp_rank == 0 &&
                    y->pp_rank == L->pp - 1 && x->wte != y->wte)
                    twins = 0;
                if (x->pp_rank == y->pp_rank && x->dp_rank == y->dp_rank && x->replicated != y->replicated)
                    tp_same = 0;
            }
        }
        if (world > 1)
            ok(replicas && twins && tp_same, "%s: DP replicas, the tied wte's two copies and TP-replicated tensors "
               "end bit-identical", name);
        kept[i] = r0->r;
        if ((kept_params[i] = malloc(j.nparams * sizeof(float))) != NULL)
            memcpy(kept_params[i], r0->params, j.nparams * sizeof(float));
        double state = (double)r0->r.mem.model_state / (double)r0->r.mem.model_state_formula - 1.0;
        if (!(state <= worst_state))
            worst_state = state;
        if (!(state >= lowest_state))
            lowest_state = state;
        if (L->bits_of > 0 && L->no_prefetch) {
            /* the same gathers, only not ahead: the same bits */
            const struct run_result *b = &kept[L->bits_of - 1];
            const float *bp = kept_params[L->bits_of - 1];
            ok(bp != NULL && kept_params[i] != NULL && b->ok && memcmp(b->loss, r0->r.loss, sizeof b->loss) == 0 &&
               memcmp(b->norm, r0->r.norm, sizeof b->norm) == 0 && b->val_loss == r0->r.val_loss &&
               memcmp(bp, kept_params[i], j.nparams * sizeof(float)) == 0 && b->prefetched > 0 &&
               r0->r.prefetched == 0 && r0->r.mem.params < b->mem.params,
               "%s: the losses, norms, validation loss and parameters of layout %d (prefetch on: rank 0 gathered %ld "
               "units ahead over %d steps) bit for bit, none ahead here; rank 0's parameter bytes %zu instead of %zu "
               "(no third buffer)", name, L->bits_of, b->prefetched, STEPS, r0->r.mem.params, b->mem.params);
        } else if (L->bits_of > 0 && L->vs > 1) {
            /* Each layer's forward and backward, the loss sum and each
             * gradient's accumulation over micro-batches go in the same
             * order as with V = 1, so step 0's loss is the same bits; the
             * norm's sum of squares is not (each stage sums its own layers,
             * other ones with V = 2), so the clip factor and what follows
             * may differ in the last bits */
            const struct run_result *b = &kept[L->bits_of - 1];
            const float *bp = kept_params[L->bits_of - 1];
            double vl = max_rel_loss(&r0->r, b), vn = max_rel_norm(&r0->r, b);
            double vp = bp != NULL && kept_params[i] != NULL ? max_abs(bp, kept_params[i], j.nparams) : 1.0;
            int bits = memcmp(b->loss, r0->r.loss, sizeof b->loss) == 0;
            ok(b->ok && (L->tp != 2 || b->loss[0] == r0->r.loss[0]) && vl <= LOSS_RTOL && vn <= LOSS_RTOL && vp < PARAM_ATOL,
               "%s: step 0's loss that of layout %d (V = 1) bit for bit; over %d steps the loss within %.1e "
               "(%s), the norm within %.1e (<= %.0e), the parameters within %.1e (< %.0e); rank 0's activations "
               "%zu bytes (V = 1: %zu)", name, L->bits_of, STEPS, vl, bits ? "every step bit for bit" : "not bit for bit",
               vn, LOSS_RTOL, vp, PARAM_ATOL, r0->r.mem.activations, b->mem.activations);
        } else if (L->bits_of > 0 && L->sp && !layouts[L->bits_of - 1].sp) {
            /* Sequence parallelism against the same layout without it: the
             * forward does the same row-wise operations, and at T = 2 its
             * reduce-scatters give the all-reduce's sums (a + b = b + a),
             * so step 0's loss is the same bits (checked; at T = 4 the ring
             * orders of the two collectives give it too here, reported);
             * the LN weight gradients are summed
             * per rank's rows, then over TP, instead of over all rows at
             * once, so the updates and later steps differ in the last bits.
             * The deviation is reported next to the non-SP layout's own
             * from the reference (checked against the tolerance below). */
            const struct run_result *b = &kept[L->bits_of - 1];
            const float *bp = kept_params[L->bits_of - 1];
            double vl = max_rel_loss(&r0->r, b), vn = max_rel_norm(&r0->r, b);
            double vp = bp != NULL && kept_params[i] != NULL ? max_abs(bp, kept_params[i], j.nparams) : 1.0;
            double bl = max_rel_loss(b, &ref);
            int bits = memcmp(b->loss, r0->r.loss, sizeof b->loss) == 0;
            ok(b->ok && b->loss[0] == r0->r.loss[0] && vl <= LOSS_RTOL && vn <= LOSS_RTOL && vp < PARAM_ATOL &&
               r0->r.mem.activations < b->mem.activations,
               "%s: against layout %d without it the loss within %.1e (%s, step 0's %s; layout %d's own from the "
               "reference %.1e), the norm within %.1e (<= %.0e), the parameters within %.1e (< %.0e); rank 0's "
               "activations %zu bytes instead of %zu (%.0f%%)", name, L->bits_of, vl,
               bits ? "bit for bit" : "not bit for bit", b->loss[0] == r0->r.loss[0] ? "bit for bit" : "not",
               L->bits_of, bl, vn, LOSS_RTOL, vp, PARAM_ATOL, r0->r.mem.activations, b->mem.activations,
               100.0 * (double)r0->r.mem.activations / (double)b->mem.activations);
        } else if (L->bits_of > 0) {
            const struct run_result *b = &kept[L->bits_of - 1];
            const float *bp = kept_params[L->bits_of - 1];
            ok(bp != NULL && kept_params[i] != NULL && b->ok && memcmp(b->loss, r0->r.loss, sizeof b->loss) == 0 &&
               memcmp(b->norm, r0->r.norm, sizeof b->norm) == 0 &&
               memcmp(bp, kept_params[i], j.nparams * sizeof(float)) == 0 &&
               r0->r.mem.activations < b->mem.activations,
               "%s: the losses, norms and parameters of layout %d without recomputation, bit for bit; rank 0's "
               "activations %zu bytes instead of %zu (%.0f%%)", name, L->bits_of, r0->r.mem.activations,
               b->mem.activations, 100.0 * (double)r0->r.mem.activations / (double)b->mem.activations);
        }
        double dl = max_rel_loss(&r0->r, &ref), dn = max_rel_norm(&r0->r, &ref);
        double dv = fabs(r0->r.val_loss - ref.val_loss) / ref.val_loss;
        int same_val = 1;
        for (int r = 1; r < world; r++)
            same_val = same_val && ((const struct rank_area *)(areas + (size_t)r * bytes))->r.val_loss == r0->r.val_loss;
        if (dv > worst_val)
            worst_val = dv;
        ok(same_val && dv <= LOSS_RTOL, "%s: every rank has the validation loss %.6f over %d batches, relative "
           "deviation from the reference's %.6f: %.1e (<= %.0e)", name, r0->r.val_loss, VAL_BATCHES, ref.val_loss, dv,
           LOSS_RTOL);
        double dp = max_abs(r0->params, ref_params, j.nparams);
        if (i == 0) {
            ok(same && dl == 0.0 && dp == 0.0 && memcmp(r0->r.norm, ref.norm, sizeof ref.norm) == 0,
               "%s: the same losses, norms and parameters as the single-process trainer, bit for bit", name);
        } else {
            if (dl > worst_loss)
                worst_loss = dl;
            ok(same && dl <= LOSS_RTOL && dn <= LOSS_RTOL && dp < PARAM_ATOL,
               "%s: every rank has the job's loss and norm; max relative deviation of the loss %.1e, of the "
               "clipped global norm %.1e (<= %.0e), max parameter deviation %.1e (< %.0e) after %d steps", name, dl,
               dn, LOSS_RTOL, dp, PARAM_ATOL, STEPS);
        }
        free(areas);
    }
    diag("largest relative loss deviation over the layouts: %.3e", worst_loss);
    ok(lowest_state >= 0.0 && worst_state <= 0.05, "every layout: rank 0's model-state bytes (parameters, gradients, "
       "reduced gradients, AdamW) from %.2f%% to %.2f%% above the formula of dtrain_parallel.h (0 to 5%%)",
       100.0 * lowest_state, 100.0 * worst_state);
    for (int i = 0; i < NLAYOUTS; i++)
        free(kept_params[i]);

    /* fp16 (emulated on the cpu kernels) with dynamic loss scaling from
     * 2^30: the first backward passes overflow fp16, the scale backs off
     * (halved per skipped step, whose batch is consumed) and grows again
     * after 3 good steps.  Every layout sees the same overflows and ends
     * with the same scale, and its
     * losses match the (1,1,1) fp16 run within FP16_RTOL: rounding operands
     * to fp16 (unit roundoff 2^-11 = 4.9e-4) turns the layouts' different
     * fp32 sums into differences of up to one fp16 ulp of an operand. */
    static const struct layout half[] = {
        {1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0}, {2, 1, 2, 1, 0, 1, 0, 0, 0, 0, 0}, {1, 2, 2, 2, 2, 1, 0, 0, 0, 0, 0},
        {2, 2, 2, 2, 1, 1, DTRAIN_RECOMPUTE_FULL, 0, 0, 0, 0}, {2, 2, 2, 2, 1, 1, DTRAIN_RECOMPUTE_FULL, 0, 0, 1, 0},
        {1, 2, 2, 2, 3, 1, 0, 0, 0, 0, 0}, {1, 2, 2, 2, 3, 1, 0, 6, 0, 0, 1},
    };
    struct run_result half0 = {0}, half_kept[sizeof half / sizeof half[0]];
    memset(half_kept, 0, sizeof half_kept);
    for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) {
        const struct layout *L = &half[i];
        int world = L->tp * L->pp * L->dp;
        struct job hj = j;
        hj.cfg.precision = DTRAIN_PRECISION_FP16;
        hj.cfg.loss_scale = 1073741824.0;
        hj.cfg.loss_scale_window = 3;
        hj.cfg.micro_batches = L->micro;
        hj.cfg.zero_stage = L->zero;
        hj.cfg.recompute = L->recompute;
        hj.cfg.sequence_parallel = L->sp;
        hj.cfg.zero_prefetch = !L->no_prefetch;
        size_t bytes = area_bytes(&hj);
        unsigned char *areas = calloc((size_t)world, bytes);
        int codes[LOCAL_BOOT_MAX_WORLD];
        int rc = areas == NULL ? -1 : local_boot_run(L->tp, L->pp, L->dp, rank_main, &hj, bytes, areas, codes, 120,
                                                     err, sizeof err);
        char name[96];
        snprintf(name, sizeof name, "fp16 (T,P,D)=(%d,%d,%d) m=%d ZeRO stage %d%s%s%s", L->tp, L->pp, L->dp, L->micro,
                 L->zero, L->recompute ? " recompute full" : "", L->sp ? " sequence-parallel" : "",
                 L->no_prefetch ? " prefetch off" : "");
        if (rc != 0) {
            for (int r = 0; areas != NULL && r < world; r++) {
                const struct rank_area *a = (const struct rank_area *)(areas + (size_t)r * bytes);
                if (a->r.err[0])
                    diag("rank %d: %s", r, a->r.err);
            }
            ok(0, "%s: runs (%s)", name, err);
            free(areas);
            continue;
        }
        const struct run_result *r0 = &((const struct rank_area *)areas)->r;
        int same = 1;
        for (int r = 1; r < world; r++) {
            const struct run_result *x = &((const struct rank_area *)(areas + (size_t)r * bytes))->r;
            same = same && x->overflows == r0->overflows && x->last_scale == r0->last_scale &&
                   memcmp(x->loss, r0->loss, sizeof x->loss) == 0;
        }
        half_kept[i] = *r0;
        if (L->no_prefetch) {
            const struct run_result *b = &half_kept[L->bits_of - 1];
            ok(same && b->ok && memcmp(b->loss, r0->loss, sizeof b->loss) == 0 &&
               memcmp(b->norm, r0->norm, sizeof b->norm) == 0 && b->overflows == r0->overflows &&
               b->last_scale == r0->last_scale && b->prefetched > 0 && r0->prefetched == 0,
               "%s: the losses, norms, %ld overflows and last scale %g of layout %d (prefetch on, %ld units gathered "
               "ahead by rank 0) bit for bit", name, r0->overflows, r0->last_scale, L->bits_of, b->prefetched);
        } else if (i == 0) {
            half0 = *r0;
            int finite = 1;
            for (int q = 0; q < STEPS; q++)
                finite = finite && isfinite(r0->loss[q]) && isfinite(r0->norm[q]);
            /* the skipped steps consumed their batches: not comparable with
             * the fp32 reference's batches */
            ok(same && finite && r0->overflows >= 1 && r0->last_scale < 1073741824.0,
               "%s: %ld steps skipped for an fp16 overflow, the scale backs off from 2^30 (last step's %g), "
               "finite losses (%.4f -> %.4f)", name, r0->overflows, r0->last_scale, (double)r0->loss[0],
               (double)r0->loss[STEPS - 1]);
        } else {
            double dl = max_rel_loss(r0, &half0);
            ok(same && r0->overflows == half0.overflows && r0->last_scale == half0.last_scale && dl <= FP16_RTOL,
               "%s: every rank agrees; the same %ld overflows and last scale %g as (1,1,1) fp16; max relative loss "
               "deviation %.1e (<= %.0e)", name, r0->overflows, r0->last_scale, dl, FP16_RTOL);
        }
        free(areas);
    }
    diag("largest relative validation loss deviation over the layouts: %.3e", worst_val);

    /* bf16: the blocks' inner activations stored in bf16 (typed tensors)
     * across TP, PP, DP, ZeRO, sequence parallelism and both recompute
     * modes.  Every rank agrees; recomputation gives the bits of the same
     * layout without it (it recomputes the same bf16 values); every layout's
     * losses match (1,1,1) bf16 within BF16_RTOL: rounding operands and
     * stored activations to bf16 (unit roundoff 2^-9) turns the layouts'
     * different fp32 sums into differences of up to one bf16 ulp of an
     * element, which the loss averages (fp16's bound, 2^-11, is the same
     * size: the losses move far less than one ulp). */
    static const struct layout bf[] = {
        {1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0}, {2, 1, 2, 1, 0, 1, 0, 0, 0, 0, 0}, {1, 2, 2, 2, 2, 1, 0, 0, 0, 0, 0},
        {2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0}, {2, 2, 2, 2, 1, 1, DTRAIN_RECOMPUTE_FULL, 4, 0, 0, 0},
        {2, 2, 2, 2, 1, 1, DTRAIN_RECOMPUTE_SELECTIVE, 4, 0, 0, 0}, {2, 2, 2, 2, 1, 1, 0, 0, 0, 1, 0},
    };
    struct run_result bf_kept[sizeof bf / sizeof bf[0]];
    memset(bf_kept, 0, sizeof bf_kept);
    double bf_worst = 0.0;
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) {
        const struct layout *L = &bf[i];
        int world = L->tp * L->pp * L->dp;
        struct job bj = j;
        bj.cfg.precision = DTRAIN_PRECISION_BF16;
        bj.cfg.micro_batches = L->micro;
        bj.cfg.zero_stage = L->zero;
        bj.cfg.recompute = L->recompute;
        bj.cfg.sequence_parallel = L->sp;
        size_t bytes = area_bytes(&bj);
        unsigned char *areas = calloc((size_t)world, bytes);
        int codes[LOCAL_BOOT_MAX_WORLD];
        int rc = areas == NULL ? -1 : local_boot_run(L->tp, L->pp, L->dp, rank_main, &bj, bytes, areas, codes, 120,
                                                     err, sizeof err);
        char name[96];
        snprintf(name, sizeof name, "bf16 (T,P,D)=(%d,%d,%d) m=%d ZeRO stage %d%s%s", L->tp, L->pp, L->dp, L->micro,
                 L->zero, L->recompute == DTRAIN_RECOMPUTE_FULL ? " recompute full"
                          : L->recompute == DTRAIN_RECOMPUTE_SELECTIVE ? " recompute selective" : "",
                 L->sp ? " sequence-parallel" : "");
        if (rc != 0) {
            for (int r = 0; areas != NULL && r < world; r++) {
                const struct rank_area *a = (const struct rank_area *)(areas + (size_t)r * bytes);
                if (a->r.err[0])
                    diag("rank %d: %s", r, a->r.err);
            }
            ok(0, "%s: runs (%s)", name, err);
            free(areas);
            continue;
        }
        const struct run_result *r0 = &((const struct rank_area *)areas)->r;
        int same = 1;
        for (int r = 1; r < world; r++) {
            const struct run_result *x = &((const struct rank_area *)(areas + (size_t)r * bytes))->r;
            same = same && memcmp(x->loss, r0->loss, sizeof x->loss) == 0;
        }
        bf_kept[i] = *r0;
        if (L->bits_of) {
            const struct run_result *b = &bf_kept[L->bits_of - 1];
            ok(same && b->ok && memcmp(b->loss, r0->loss, sizeof b->loss) == 0 &&
                   memcmp(b->norm, r0->norm, sizeof b->norm) == 0,
               "%s: every rank agrees; the losses and norms of layout %d (no recomputation) bit for bit", name,
               L->bits_of);
        } else if (i == 0) {
            int finite = 1;
            for (int q = 0; q < STEPS; q++)
                finite = finite && isfinite(r0->loss[q]) && isfinite(r0->norm[q]);
            ok(same && finite && r0->loss[STEPS - 1] < r0->loss[0],
               "%s: finite losses that fall (%.4f -> %.4f)", name, (double)r0->loss[0], (double)r0->loss[STEPS - 1]);
        } else {
            double dl = max_rel_loss(r0, &bf_kept[0]);
            if (dl > bf_worst)
                bf_worst = dl;
            ok(same && dl <= BF16_RTOL, "%s: every rank agrees; max relative loss deviation from (1,1,1) bf16 %.1e "
               "(<= %.0e)", name, dl, BF16_RTOL);
        }
        free(areas);
    }
    diag("bf16: largest relative loss deviation over the layouts: %.3e", bf_worst);

    test_rank_metrics(&j, dir);
    test_generate_from_222(&j, dir);
    test_interleaved_p4(&j);
    free(ref_params);
    unlink(path);
    unlink(val_path);
    rmdir(dir);
    return tap_done();
}
