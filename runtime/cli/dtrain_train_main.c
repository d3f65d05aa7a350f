/* dtrain-train's program logic, callable as a library function (the
 * launcher's single-process mode runs it); see dtrain_train.h. */
#include "dtrain_train.h"

#define PROG "dtrain-train"

int dtrain_train_main(int argc, char **argv)
{
    struct dtrain_train_config cfg;
    struct dtrain_trainer *t = NULL;
    char err[1024];
    int help = 0, rc;

    dtrain_train_config_defaults(&cfg);
    if ((rc = dtrain_train_config_parse_args(&cfg, argc, argv, &help, err, sizeof err)) != DTRAIN_OK)
        goto fail;
    if (help) {
        dtrain_train_usage(stdout);
        return DTRAIN_EXIT_OK;
    }
    if ((rc = dtrain_train_config_finish(&cfg, err, sizeof err)) != DTRAIN_OK)
        goto fail;
    if ((rc = dtrain_trainer_create(&cfg, &t, err, sizeof err)) != DTRAIN_OK)
        goto fail;

    const struct dtrain_gpt2_config *m = &cfg.model;
    printf(PROG ": model L=%d C=%d NH=%d V=%d (padded %d) maxT=%d, %zu parameters%s%s\n",
           m->num_layers, m->channels, m->num_heads, m->vocab_size, m->padded_vocab_size,
           m->max_seq_len, dtrain_gpt2_param_count(m),
           cfg.resume[0] ? ", resumed from " : cfg.init_llmc[0] ? ", from " : "",
           cfg.resume[0] ? cfg.resume : cfg.init_llmc);
    printf(PROG ": data %s (%s), batch %d x %d, steps %ld..%ld, %d threads, %.3f GFLOP per step\n",
           cfg.data, cfg.data_order == DTRAIN_ORDER_SHUFFLED ? "shuffled" : "sequential",
           cfg.batch, cfg.seq, dtrain_trainer_steps_done(t), cfg.steps, cfg.threads,
           dtrain_gpt2_flops_per_step(m, cfg.batch, cfg.seq) * 1e-9);
    fflush(stdout);
    if ((rc = dtrain_trainer_run(t, stdout, err, sizeof err)) != DTRAIN_OK)
        goto fail;
    dtrain_trainer_destroy(t);
    return DTRAIN_EXIT_OK;
fail:
    fprintf(stderr, PROG ": %s\n", err);
    dtrain_trainer_destroy(t);
    return dtrain_status_exit(rc);
}
