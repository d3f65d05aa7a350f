/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Data parallelism (runtime/parallel/dtrain_dp.h) with D = 2 and D = 3 local
 * processes: each rank brings its own gradients for 3 steps; the bucketed
 * all-reduce (overlapped in the reducer thread, or not, units reported in
 * any order) and ZeRO-1 (reduce-scatter, AdamW on the shard, all-gather)
 * must give every rank the parameters of plain AdamW on the summed
 * gradients, and the ranks' norm shares must add up to the summed
 * gradient's norm.  ZeRO-1 keeps about 1/D of the optimizer state (D = 3
 * pads every bucket to a multiple of 3).  ZeRO-2 (the reduce-scatter into
 * a scratch, only the share kept) gives ZeRO-1's bits and keeps about 1/D
 * of the reduced gradients.  ZeRO-3 (the parameters sharded too: each unit
 * gathered when asked for, its gradient reduce-scattered when given back)
 * gives the same parameters and norms within the same bound, every
 * gathered unit holding the local vector's slices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/dtrain_dp.h"
#include "parallel/dtrain_pcomm.h"
#include "dtrain_rng.h"
#include "parallel/dtrain_stage.h"
#include "local_boot.h"
#include "tap.h"

#define STEPS 3

static const struct dtrain_model_config model = {
    .max_seq_len = 8, .vocab_size = 60, .padded_vocab_size = 64, .num_layers = 3, .num_heads = 2, .channels = 8,
};

enum mode { PLAIN_OVERLAP, PLAIN_REVERSED, ZERO1, ZERO2, ZERO3, ZERO3_PF, MODES }; /* ZERO3_PF: with the prefetch */

struct result {
    int ran;
    char err[256];
    double vs_ref[MODES];     /* max |params - reference| */
    int plain_same;           /* overlap on/off (units in reverse order): the same bits */
    double norm_err[MODES];   /* relative error of the global norm against the reference */
    size_t state[MODES];      /* optimizer floats */
    struct dtrain_dp_memory mem[MODES];
    int zero2_same;           /* ZeRO-2 gives ZeRO-1's bits */
    int gathered_same;        /* ZeRO-3: every unit gathered equals the local vector's slices */
    int prefetch_same;        /* ZeRO-3 with the prefetch gives the same bits as without */
    int prefetched[MODES];    /* ZeRO-3: units gathered ahead over the steps */
    int buckets;
    size_t n;
};

/* ZeRO-3's step: each unit asked for, checked against the gathered local
 * vector (forward), asked for again with its gradient buffer, which gets
 * this rank's gradients of the unit, and given back (backward). */
static int zero3_units(struct dtrain_dp *dp, const struct dtrain_shard *sh, const float *grads, float *cur,
                       int *same, char *err, size_t errlen)
{
    int rc = dtrain_dp_params_gather(dp, cur, err, errlen);
    for (int u = 0; rc == DTRAIN_OK && u < dtrain_shard_units(sh); u++) {
        struct dtrain_shard_range r[DTRAIN_SHARD_UNIT_RANGES];
        struct dtrain_stage_unit v;
        int nr = dtrain_shard_unit_ranges(sh, u, r);
        for (int pass = 0; rc == DTRAIN_OK && pass < 2; pass++) {
            if ((rc = dtrain_dp_acquire(dp, u, pass, &v, err, errlen)) != DTRAIN_OK)
                break;
            size_t at = 0;
            for (int i = 0; i < nr; i++) {
                *same = *same && memcmp(v.params + at, cur + r[i].offset, r[i].count * sizeof(float)) == 0;
                if (pass == 1)
                    memcpy(v.grads + at, grads + r[i].offset, r[i].count * sizeof(float));
                at += r[i].count;
            }
            rc = dtrain_dp_release(dp, u, err, errlen);
        }
    }
    return rc;
}

/* Rank r's gradient of step s. */
static void grads_of(float *g, size_t n, int r, int s)
{
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(0.3 * dtrain_rng_normal(17, (uint64_t)(r * STEPS + s), i));
}

static int run_mode(struct dtrain_kernels *k, dtrain_comm *dp_comm, const struct dtrain_shard *sh, enum mode m,
                    const struct dtrain_optim_config *oc, float *params, double *norms, size_t *state,
                    struct dtrain_dp_memory *mem, int *buckets, int *same, int *prefetched, char *err,
                    size_t errlen)
{
    size_t n = sh->count;
    float *grads = malloc(n * sizeof(float));
    struct dtrain_dp *dp = NULL;
    int z3 = m == ZERO3 || m == ZERO3_PF;
    struct dtrain_dp_options o = {.zero_stage = m == ZERO1 ? 1 : m == ZERO2 ? 2 : z3 ? 3 : 0,
                                  .overlap = m != PLAIN_REVERSED, .bucket_floats = 300, .prefetch = m == ZERO3_PF};
    int rc = grads == NULL ? DTRAIN_ERR_SYSTEM : dtrain_dp_create(k, dp_comm, sh, z3 ? NULL : params,
                                                                  z3 ? NULL : grads, &o, &dp, err, errlen);
    if (rc == DTRAIN_OK && z3)
        dtrain_dp_params_upload(dp, params);
    for (int s = 0; rc == DTRAIN_OK && s < STEPS; s++) {
        grads_of(grads, n, dtrain_comm_rank(dp_comm), s);
        dtrain_dp_begin_step(dp);
        int units = dtrain_shard_units(sh);
        for (int u = 0; u < units; u++)
            dtrain_dp_unit_ready(dp, m == PLAIN_REVERSED ? units - 1 - u : u);
        if (z3 && (rc = zero3_units(dp, sh, grads, params, same, err, errlen)) != DTRAIN_OK)
            break;
        if ((rc = dtrain_dp_finish(dp, err, errlen)) != DTRAIN_OK)
            break;
        *prefetched += dtrain_dp_prefetched(dp);
        double share = dtrain_dp_norm_sumsq(dp), total;
        if ((rc = dtrain_pcomm_sum_doubles(dp_comm, &share, &total, 1, "norm", err, errlen)) != DTRAIN_OK)
            break;
        norms[s] = sqrt(total);
        rc = dtrain_dp_update(dp, oc, s, oc->lr, dtrain_clip_scale(oc, norms[s]), err, errlen);
    }
    if (rc == DTRAIN_OK && z3) /* the parameters after the last update */
        rc = dtrain_dp_params_gather(dp, params, err, errlen);
    if (dp != NULL) {
        *state = dtrain_dp_optimizer_floats(dp);
        dtrain_dp_memory(dp, mem);
        *buckets = dtrain_dp_buckets(dp);
    }
    dtrain_dp_destroy(dp);
    free(grads);
    return rc;
}

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    struct result *r = result;
    struct dtrain_comms comms;
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options ko = {.threads = 1};
    struct dtrain_shard sh;
    struct dtrain_adamw *ref_opt = NULL;
    float *init = NULL, *ref = NULL, *sum = NULL, *g = NULL, *out[MODES] = {NULL};
    (void)ctx;
    if (local_boot_comms(bs, 20000, 0, &comms, NULL, r->err, sizeof r->err) != DTRAIN_OK)
        return 3;
    struct dtrain_optim_config oc = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                     .grad_clip = 2.0, .schedule = DTRAIN_LR_CONSTANT};
    if (dtrain_kernels_create("cpu", &ko, &k, r->err, sizeof r->err) != 0 ||
        dtrain_shard_plan(&model, 1, 1, 0, 0, &sh, r->err, sizeof r->err) != DTRAIN_OK)
        goto out;
    size_t n = sh.count, D = (size_t)bs->dp;
    r->n = n;
    init = malloc(n * sizeof(float));
    ref = malloc(n * sizeof(float));
    sum = malloc(n * sizeof(float));
    g = malloc(n * sizeof(float));
    if (init == NULL || ref == NULL || sum == NULL || g == NULL ||
        dtrain_adamw_create(k, n, &ref_opt, r->err, sizeof r->err) != DTRAIN_OK)
        goto out;
    dtrain_model_init_params(&model, 5, init);
    /* the reference: AdamW on the sum of every rank's gradients */
    memcpy(ref, init, n * sizeof(float));
    double ref_norm[STEPS];
    for (int s = 0; s < STEPS; s++) {
        memset(sum, 0, n * sizeof(float));
        for (size_t q = 0; q < D; q++) {
            grads_of(g, n, (int)q, s);
            for (size_t i = 0; i < n; i++)
                sum[i] += g[i];
        }
        ref_norm[s] = sqrt(dtrain_k_sumsq(k, sum, n));
        dtrain_adamw_update(ref_opt, ref, sum, &oc, s, oc.lr, dtrain_clip_scale(&oc, ref_norm[s]));
    }
    for (int m = 0; m < MODES; m++) {
        double norms[STEPS];
        out[m] = malloc(n * sizeof(float));
        if (out[m] == NULL)
            goto out;
        memcpy(out[m], init, n * sizeof(float));
        int buckets = 0;
        if (m == ZERO3)
            r->gathered_same = 1;
        if (run_mode(k, comms.group[DTRAIN_GROUP_DP], &sh, (enum mode)m, &oc, out[m], norms, &r->state[m],
                     &r->mem[m], m >= ZERO3 ? &buckets : &r->buckets, &r->gathered_same, &r->prefetched[m], r->err,
                     sizeof r->err) != DTRAIN_OK)
            goto out;
        r->vs_ref[m] = 0.0;
        for (size_t i = 0; i < n; i++)
            r->vs_ref[m] = fmax(r->vs_ref[m], fabs((double)out[m][i] - ref[i]));
        r->norm_err[m] = 0.0;
        for (int s = 0; s < STEPS; s++)
            r->norm_err[m] = fmax(r->norm_err[m], fabs(norms[s] - ref_norm[s]) / ref_norm[s]);
    }
    r->plain_same = memcmp(out[PLAIN_OVERLAP], out[PLAIN_REVERSED], n * sizeof(float)) == 0;
    r->zero2_same = memcmp(out[ZERO1], out[ZERO2], n * sizeof(float)) == 0;
    r->prefetch_same = memcmp(out[ZERO3], out[ZERO3_PF], n * sizeof(float)) == 0;
    r->ran = 1;
out:
    for (int m = 0; m < MODES; m++)
        free(out[m]);
    free(init);
    free(ref);
    free(sum);
    free(g);
    dtrain_adamw_destroy(ref_opt);
    dtrain_kernels_destroy(k);
    dtrain_comm_destroy_all(&comms);
    return r->ran ? 0 : 1;
}

int main(void)
{
    for (int D = 2; D <= 3; D++) {
        struct result res[3];
        int codes[LOCAL_BOOT_MAX_WORLD];
        char err[256];
        memset(res, 0, sizeof res);
        int rc = local_boot_run(1, 1, D, rank_main, NULL, sizeof res[0], res, codes, 60, err, sizeof err);
        int ran = rc == 0, same = 1, same2 = 1, gathered = 1, pf_same = 1, ahead = 1;
        double z3 = 0;
        double plain = 0, zero = 0, norm = 0;
        for (int r = 0; r < D; r++) {
            if (res[r].err[0])
                diag("D=%d rank %d: %s", D, r, res[r].err);
            ran = ran && res[r].ran;
            same = same && res[r].plain_same;
            same2 = same2 && res[r].zero2_same;
            gathered = gathered && res[r].gathered_same;
            pf_same = pf_same && res[r].prefetch_same;
            ahead = ahead && res[r].prefetched[ZERO3_PF] > 0 && res[r].prefetched[ZERO3] == 0;
            z3 = fmax(z3, res[r].vs_ref[ZERO3]);
            plain = fmax(plain, fmax(res[r].vs_ref[PLAIN_OVERLAP], res[r].vs_ref[PLAIN_REVERSED]));
            zero = fmax(zero, fmax(res[r].vs_ref[ZERO1], res[r].vs_ref[ZERO2]));
            for (int m = 0; m < MODES; m++)
                norm = fmax(norm, res[r].norm_err[m]);
        }
        ok(ran, "D=%d: %d ranks reduce 3 steps of gradients in %d buckets, three ways (%s)", D, D, res[0].buckets,
           ran ? "ok" : err);
        ok(ran && plain < 1e-6, "D=%d: bucketed all-reduce + AdamW: every rank's parameters within %.1e of AdamW on the "
           "summed gradients", D, plain);
        ok(ran && same, "D=%d: overlapped in the reducer thread or not, units reported in any order: the same bits", D);
        ok(ran && zero < 1e-6, "D=%d: ZeRO-1 and ZeRO-2 (reduce-scatter, AdamW on the shard, all-gather): within %.1e "
           "of the same", D, zero);
        ok(ran && same2, "D=%d: ZeRO-2 (only the share of each bucket kept) gives ZeRO-1's parameters bit for bit", D);
        ok(ran && norm < 1e-6, "D=%d: the ranks' norm shares add up to the summed gradient's norm (%.1e), with and "
           "without ZeRO-1, so clipping acts alike", D, norm);
        ok(ran && gathered && z3 < 1e-6 && norm < 1e-6, "D=%d: ZeRO-3 (parameters sharded, each unit gathered when "
           "asked for, its gradient reduce-scattered when given back): every gathered unit holds the local vector's "
           "slices; parameters within %.1e of AdamW on the summed gradients", D, z3);
        /* steps 2 and 3 follow step 1's order of units (the first gathered
         * ahead is dropped: the checkpoint gather of zero3_units comes first) */
        size_t p3f = res[0].mem[ZERO3_PF].param_bytes, p3s = res[0].mem[ZERO3].param_bytes;
        ok(ran && pf_same && ahead && gathered && p3f > p3s,
           "D=%d: ZeRO-3 with the prefetch (the next unit gathered in a thread, %d units ahead on rank 0 over %d "
           "steps): the same parameters bit for bit as without; parameter bytes %zu instead of %zu (the third "
           "buffer)", D, res[0].prefetched[ZERO3_PF], STEPS, p3f, p3s);
        size_t n = res[0].n, zs = res[0].state[ZERO1];
        size_t p3 = res[0].mem[ZERO3].param_bytes, a3 = res[0].state[ZERO3], g3 = res[0].mem[ZERO3].grad_bytes;
        size_t units = (size_t)model.num_layers + 3, f = sizeof(float); /* a unit's padding: < D floats */
        ok(ran && a3 >= 2 * n / D && a3 <= 2 * (n / D + units) && g3 >= n * f / D && g3 <= (n / D + units) * f &&
           p3 >= (a3 / 2) * f && p3 < n * f,
           "D=%d: ZeRO-3 per rank: AdamW state %zu floats (2n/D = %zu), gradient shares %zu bytes, parameters %zu "
           "bytes (shares and two units' buffers; unsharded %zu)", D, a3, 2 * n / D, g3, p3, n * f);
        ok(ran && res[0].state[PLAIN_OVERLAP] == 2 * n && zs >= 2 * n / (size_t)D &&
           zs <= 2 * (n / (size_t)D + (size_t)res[0].buckets),
           "D=%d: AdamW state per rank: %zu floats without ZeRO-1, %zu with it (2n/D = %zu)", D,
           res[0].state[PLAIN_OVERLAP], zs, 2 * n / (size_t)D);
        size_t g1 = res[0].mem[ZERO1].grad_bytes, g2 = res[0].mem[ZERO2].grad_bytes, nb = (size_t)res[0].buckets;
        ok(ran && res[0].state[ZERO2] == zs && g1 >= n * sizeof(float) && g2 >= n * sizeof(float) / D &&
           g2 <= (n / D + nb) * sizeof(float) && res[0].mem[ZERO2].comm_bytes < res[0].mem[ZERO1].comm_bytes,
           "D=%d: reduced gradients kept per rank: %zu bytes with ZeRO-1, %zu with ZeRO-2 (4n/D = %zu); "
           "communication buffers %zu -> %zu bytes; the same AdamW state", D, g1, g2, n * sizeof(float) / D,
           res[0].mem[ZERO1].comm_bytes, res[0].mem[ZERO2].comm_bytes);
    }
    return tap_done();
}
