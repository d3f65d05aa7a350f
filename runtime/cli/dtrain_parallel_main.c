/* The parallel trainer as the program inside dtrain-launch; see
 * dtrain_parallel.h. */
#include "dtrain_parallel.h"
#include "dtrain_fault.h"
#include "dtrain_ft.h"

#include <stdlib.h>
#include <string.h>

/* Every rank's exit code after setup; each rank then leaves with the same
 * verdict: bad input (2) wins over anything, else the highest code.  A rank
 * that failed has printed why; the others say that they stop. */
static int agree(dtrain_comm *world, int mine, int *worst, char *err, size_t errlen)
{
    int size = dtrain_comm_size(world);
    float code = (float)mine, *all = malloc((size_t)size * sizeof(float));
    if (all == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    int rc = dtrain_comm_all_gather(world, &code, all, 1), usage = 0;
    *worst = DTRAIN_EXIT_OK;
    for (int r = 0; rc == DTRAIN_COMM_OK && r < size; r++) {
        int c = (int)all[r];
        usage |= c == DTRAIN_EXIT_USAGE;
        if (c > *worst)
            *worst = c;
    }
    if (usage)
        *worst = DTRAIN_EXIT_USAGE;
    free(all);
    if (rc != DTRAIN_COMM_OK) {
        snprintf(err, errlen, "agreeing on the start: %s: %s", dtrain_comm_result_name(rc),
                 dtrain_comm_error_message(world));
        return DTRAIN_ERR_FAULT;
    }
    return DTRAIN_OK;
}

static void print_header(const char *prog, const struct dtrain_train_config *c,
                         const struct dtrain_bootstrap *bs)
{
    const struct dtrain_gpt2_config *m = &c->model;
    printf("%s: model L=%d C=%d NH=%d V=%d (padded %d) maxT=%d, %zu parameters%s%s\n", prog,
           m->num_layers, m->channels, m->num_heads, m->vocab_size, m->padded_vocab_size, m->max_seq_len,
           dtrain_gpt2_param_count(m), c->init_llmc[0] ? ", from " : "", c->init_llmc);
    printf("%s: layout T=%d P=%d D=%d (%d ranks), %d micro-batch%s of %d x %d per rank, ZeRO-1 %s, "
           "gradient buckets of %.3g MB%s\n", prog, bs->tp, bs->pp, bs->dp, bs->world_size,
           c->micro_batches, c->micro_batches == 1 ? "" : "es", c->batch / (bs->dp * c->micro_batches),
           c->seq, c->zero1 ? "on" : "off", c->bucket_mb, c->dp_overlap ? " overlapped with backward" : "");
    printf("%s: data %s (%s), global batch %d x %d, %ld steps, %d thread%s per rank, %.3f GFLOP per step\n",
           prog, c->data, c->data_order == DTRAIN_ORDER_SHUFFLED ? "shuffled" : "sequential", c->batch, c->seq,
           c->steps, c->threads, c->threads == 1 ? "" : "s", dtrain_gpt2_flops_per_step(m, c->batch, c->seq) * 1e-9);
    fflush(stdout);
}

int dtrain_parallel_main(int argc, char **argv, struct dtrain_bootstrap *bs)
{
    const char *prog = argc > 0 && argv[0] != NULL ? argv[0] : "dtrain";
    struct dtrain_train_config cfg;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    char err[1024] = "";
    int help = 0, rc, code = DTRAIN_EXIT_OK, worst;

    dtrain_train_config_defaults(&cfg);
    rc = dtrain_train_config_parse_args(&cfg, argc, argv, &help, err, sizeof err);
    if (rc == DTRAIN_OK && help) {
        if (bs->rank == 0)
            dtrain_train_usage(stdout);
        return DTRAIN_EXIT_OK;
    }
    /* --ckpt-dir and --inject from the environment too (sbatch --dtrain-ckpt-dir) */
    if (rc == DTRAIN_OK)
        rc = dtrain_ft_config_from_env(&cfg, err, sizeof err);
    /* One task, one micro-batch, no ZeRO-1, no sharded checkpoints: the
     * single-process trainer, which this layout reproduces bit for bit. */
    if (rc == DTRAIN_OK && bs->world_size == 1 && cfg.micro_batches == 1 && !cfg.zero1 && cfg.ckpt_dir[0] == '\0')
        return dtrain_train_main(argc, argv);
    /* the restart budget and the fault line (SLURM_RESTART_COUNT, DTRAIN_MAX_RESTARTS) */
    struct dtrain_fault fault;
    if (rc == DTRAIN_OK && dtrain_fault_init(&fault, prog, bs->rank, err, sizeof err) != 0)
        rc = DTRAIN_ERR_INPUT;
    if (rc != DTRAIN_OK) { /* the same on every rank: each says it and leaves */
        fprintf(stderr, "%s: rank %d: %s\n", prog, bs->rank, err);
        return dtrain_status_exit(rc);
    }

    /* The parallel trainer keeps its tensors in host memory (cpu kernels),
     * which NCCL cannot move: refuse before building communicators. */
    if (bs->backend == DTRAIN_COMM_NCCL) {
        fprintf(stderr, "%s: rank %d: the parallel trainer runs on the cpu kernels, whose host buffers the nccl "
                "comm backend cannot move: run dtrain-launch --comm-backend cpu\n", prog, bs->rank);
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
    int crc = dtrain_comm_init_all(bs, &opts, &comms, why, sizeof why);
    if (crc == DTRAIN_COMM_ENOTSUP || crc == DTRAIN_COMM_EINVAL) {
        fprintf(stderr, "%s: rank %d: cannot build the communicators: %s%s\n", prog, bs->rank, why,
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
        fprintf(stderr, "%s: rank %d: %s\n", prog, bs->rank, err);
    int mine = dtrain_status_exit(rc);
    if ((rc = agree(comms.group[DTRAIN_GROUP_WORLD], mine, &worst, err, sizeof err)) != DTRAIN_OK) {
        code = rc == DTRAIN_ERR_FAULT ? dtrain_fault_report(&fault, 0, err) : dtrain_status_exit(rc);
        if (rc != DTRAIN_ERR_FAULT)
            fprintf(stderr, "%s: rank %d: %s\n", prog, bs->rank, err);
        goto out;
    }
    if (worst != DTRAIN_EXIT_OK) {
        if (mine == DTRAIN_EXIT_OK && bs->rank == 0)
            fprintf(stderr, "%s: rank %d: another rank failed to start (see its message): stopping\n", prog,
                    bs->rank);
        code = worst;
        goto out;
    }
    if (bs->rank == 0)
        print_header(prog, &cfg, bs);
    struct dtrain_ft_summary sum;
    rc = dtrain_ft_run(t, &cfg, bs, &comms, &abort_flag, &fault, stdout, &sum, err, sizeof err);
    if (rc == DTRAIN_ERR_FAULT) {
        code = dtrain_fault_report(&fault, dtrain_ptrainer_steps_done(t), err);
    } else if (rc != DTRAIN_OK) {
        fprintf(stderr, "%s: rank %d: %s\n", prog, bs->rank, err);
        code = dtrain_status_exit(rc);
    }
out:
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return code;
}
