/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The one training program: dtrain-train (one process, on a local 1x1x1
 * bootstrap) and the trainer inside dtrain-launch (its PMI2 bootstrap) run
 * the same parallel trainer and fault-tolerant loop; see dtrain_train.h
 * and dtrain_parallel.h. */
#include "dtrain_parallel.h"
#include "dtrain_blas.h"
#include "dtrain_fault.h"
#include "trainer/dtrain_ft.h"
#include "dtrain_train.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every rank's exit code after setup; each rank then leaves with the same
 * verdict: bad input (2) wins over anything, else the highest code.  A rank
 * that failed has printed why; the others say that they stop. */
static int agree(dtrain_comm *world, int mine, int *worst, char *err, size_t errlen)
{
    int size = dtrain_comm_size(world);
    int32_t code = mine, *all = malloc((size_t)size * sizeof *all);
    if (all == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = dtrain_comm_all_gather_bytes(world, &code, all, sizeof code), usage = 0;
    *worst = DTRAIN_EXIT_OK;
    for (int r = 0; rc == DTRAIN_OK && r < size; r++) {
        int c = all[r];
        usage |= c == DTRAIN_EXIT_USAGE;
        if (c > *worst)
            *worst = c;
    }
    if (usage)
        *worst = DTRAIN_EXIT_USAGE;
    free(all);
    if (rc != DTRAIN_OK) {
        snprintf(err, errlen, "agreeing on the start: %s: %s", dtrain_comm_cause_name(dtrain_comm_cause(world)),
                 dtrain_comm_error_message(world));
        return DTRAIN_ERR_FAULT;
    }
    return DTRAIN_OK;
}

static void print_header(const char *prog, const struct dtrain_train_config *c,
                         const struct dtrain_bootstrap *bs, int launched, const struct dtrain_ptrainer *t)
{
    const struct dtrain_model_config *m = &c->model;
    char words[160];
    const char *from = c->init_hf[0] ? c->init_hf : c->init_llmc;
    dtrain_model_describe(m, words, sizeof words);
    printf("%s: model %s, %zu parameters%s%s\n", prog, words, dtrain_model_param_count(m), from[0] ? ", from " : "",
           from);
    if (launched) /* one process has no layout to tell */
        printf("%s: layout T=%d P=%d D=%d (%d rank%s), %d micro-batch%s of %d x %d per rank, ZeRO stage %d, "
               "gradient buckets of %.3g MB%s\n", prog, bs->tp, bs->pp, bs->dp, bs->world_size,
               bs->world_size == 1 ? "" : "s", c->micro_batches, c->micro_batches == 1 ? "" : "es",
               c->batch / (bs->dp * c->micro_batches), c->seq, c->zero_stage, c->bucket_mb,
               c->dp_overlap ? " overlapped with backward" : "");
    printf("%s: data %s (%s), global batch %d x %d, %ld steps, %d thread%s per rank, %.3f GFLOP per step\n",
           prog, c->data, c->data_order == DTRAIN_ORDER_SHUFFLED ? "shuffled" : "sequential", c->batch, c->seq,
           c->steps, c->threads, c->threads == 1 ? "" : "s", dtrain_model_flops_per_step(m, c->batch, c->seq) * 1e-9);
    if (strcmp(c->backend, "cpu") == 0) { /* which GEMM kernels run (dtrain_blas.h) */
        char blas[256];
        dtrain_blas_describe(blas, sizeof blas);
        printf("%s: kernels cpu: %s\n", prog, blas);
    }
    int measured;
    double peak = dtrain_ptrainer_peak_flops(t, &measured);
    if (peak > 0.0)
        printf("%s: MFU against %.4g GFLOP/s per device x %d device%s (%s)\n", prog, peak * 1e-9, bs->world_size,
               bs->world_size == 1 ? "" : "s", measured ? "measured at start: this backend's 512^3 GEMM rate on rank 0; "
               "give --peak-flops for the hardware's peak" : "declared by --peak-flops");
    int k = dtrain_ptrainer_val_batches(t);
    if (k > 0) {
        char every[64] = "";
        if (c->val_every > 0)
            snprintf(every, sizeof every, "every %ld steps and ", c->val_every);
        printf("%s: validation loss over %d batch%s of %s, %safter the last step\n", prog, k, k == 1 ? "" : "es",
               c->val_fraction > 0.0 ? "the held-out tail of the training data" : c->val_data, every);
    }
    fflush(stdout);
}

/* The program on a bootstrap: dtrain-launch's (launched = 1) or
 * dtrain-train's local one. */
static int run(const char *prog, int argc, char **argv, struct dtrain_bootstrap *bs, int launched)
{
    struct dtrain_train_config cfg;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    char err[1024] = "";
    int help = 0, rc, code = DTRAIN_EXIT_OK, worst;
    char who[128]; /* the messages' prefix: "dtrain-launch: rank 3", or "dtrain-train" */
    if (launched)
        snprintf(who, sizeof who, "%s: rank %d", prog, bs->rank);
    else
        snprintf(who, sizeof who, "%s", prog);

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-V") == 0) {
            if (bs->rank == 0)
                printf("%s %s\n", prog, PACKAGE_VERSION);
            return DTRAIN_EXIT_OK;
        }
    }
    dtrain_train_config_defaults(&cfg);
    rc = dtrain_train_config_parse_args(&cfg, argc, argv, &help, err, sizeof err);
    if (rc == DTRAIN_OK && help) {
        if (bs->rank == 0)
            dtrain_train_usage(stdout);
        return DTRAIN_EXIT_OK;
    }
    if (rc == DTRAIN_OK && launched && cfg.checkpoint[0] != '\0') {
        snprintf(err, sizeof err, "--checkpoint is dtrain-train's: with dtrain-launch give --ckpt-dir DIR (sharded "
                 "checkpoints; the run resumes from DIR by itself)");
        rc = DTRAIN_ERR_INPUT;
    }
    /* --ckpt-dir and --inject from the environment too (sbatch --dtrain-ckpt-dir) */
    if (rc == DTRAIN_OK)
        rc = launched ? dtrain_ft_config_from_env(&cfg, err, sizeof err)
                      : dtrain_train_config_single_process(&cfg, err, sizeof err);
    /* the restart budget and the fault line (SLURM_RESTART_COUNT, DTRAIN_MAX_RESTARTS) */
    struct dtrain_fault fault;
    if (rc == DTRAIN_OK && dtrain_fault_init(&fault, prog, bs->rank, err, sizeof err) != 0)
        rc = DTRAIN_ERR_INPUT;
    if (rc != DTRAIN_OK) { /* the same on every rank: each says it and leaves */
        fprintf(stderr, "%s: %s\n", who, err);
        return dtrain_status_exit(rc);
    }

    /* NCCL moves device memory only: the kernels must be the GPU's. */
    if (bs->backend == DTRAIN_COMM_NCCL && strcmp(cfg.backend, "cuda") != 0) {
        fprintf(stderr, "%s: the nccl comm backend moves GPU memory, and run.backend is %s: give "
                "--backend cuda, or run dtrain-launch --comm-backend cpu\n", who, cfg.backend);
        return DTRAIN_EXIT_USAGE;
    }
    memset(&comms, 0, sizeof comms);
    struct dtrain_comm_options opts;
    dtrain_comm_options_defaults(&opts);
    /* a stage may wait a whole pipeline's forward and backward for a gradient */
    opts.timeout_ms = cfg.comm_timeout * 1000;
    /* the watchdog (dtrain_ft.h) stops every communicator at once through it */
    atomic_int abort_flag;
    atomic_init(&abort_flag, 0);
    opts.abort_flag = &abort_flag;
    char why[512];
    enum dtrain_comm_cause crc;
    dtrain_comm_init_all(bs, &opts, &comms, &crc, why, sizeof why);
    if (crc == DTRAIN_COMM_ENOTSUP || crc == DTRAIN_COMM_EINVAL) {
        fprintf(stderr, "%s: cannot build the communicators: %s%s\n", who, why,
                crc == DTRAIN_COMM_ENOTSUP ? " (dtrain-launch --comm-backend cpu)" : "");
        return crc == DTRAIN_COMM_ENOTSUP ? DTRAIN_EXIT_USAGE : DTRAIN_EXIT_FAILURE;
    }
    if (crc != DTRAIN_COMM_OK) { /* a peer died or never came: requeue while restarts remain */
        snprintf(err, sizeof err, "cannot build the communicators: %s", why);
        return dtrain_fault_report(&fault, 0, err);
    }
    /* Everything that can fail on some ranks only, before they agree. */
    if (rc == DTRAIN_OK)
        rc = dtrain_train_config_finish(&cfg, err, sizeof err);
    if (rc == DTRAIN_OK)
        rc = dtrain_ptrainer_create(&cfg, bs, &comms, &t, err, sizeof err);
    if (rc != DTRAIN_OK)
        fprintf(stderr, "%s: %s\n", who, err);
    int mine = dtrain_status_exit(rc);
    if ((rc = agree(comms.group[DTRAIN_GROUP_WORLD], mine, &worst, err, sizeof err)) != DTRAIN_OK) {
        code = rc == DTRAIN_ERR_FAULT ? dtrain_fault_report(&fault, 0, err) : dtrain_status_exit(rc);
        if (rc != DTRAIN_ERR_FAULT)
            fprintf(stderr, "%s: %s\n", who, err);
        goto out;
    }
    if (worst != DTRAIN_EXIT_OK) {
        if (mine == DTRAIN_EXIT_OK && bs->rank == 0)
            fprintf(stderr, "%s: another rank failed to start (see its message): stopping\n", who);
        code = worst;
        goto out;
    }
    if (bs->rank == 0)
        print_header(prog, &cfg, bs, launched, t);
    struct dtrain_ft_summary sum;
    rc = dtrain_ft_run(t, &cfg, bs, &comms, &abort_flag, &fault, stdout, &sum, err, sizeof err);
    if (rc == DTRAIN_ERR_FAULT) {
        code = dtrain_fault_report(&fault, dtrain_ptrainer_steps_done(t), err);
    } else if (rc != DTRAIN_OK) {
        fprintf(stderr, "%s: %s\n", who, err);
        code = dtrain_status_exit(rc);
    }
out:
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return code;
}

int dtrain_parallel_main(int argc, char **argv, struct dtrain_bootstrap *bs)
{
    return run(argc > 0 && argv[0] != NULL ? argv[0] : "dtrain", argc, argv, bs, 1);
}

int dtrain_train_main(int argc, char **argv)
{
    struct dtrain_bootstrap bs;
    enum dtrain_status rc = dtrain_blas_select("dtrain-train", argv); /* may execute the program again */
    if (rc != DTRAIN_OK)
        return dtrain_status_exit(rc);
    dtrain_bootstrap_local(&bs);
    return run("dtrain-train", argc, argv, &bs, 0);
}
