/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The training loop (dtrain_ft_run; see dtrain_ft.h), read as llm.c's
 * train_gpt2.c main: set up, load or init, then for each step: the step,
 * its report, the policies' verdicts (ft/dtrain_policy.h) carried out, the
 * checkpoint.  The step is dtrain_step.c, evaluation dtrain_eval.c,
 * reporting dtrain_metrics.c, checkpoints dtrain_ft_ckpt.c and
 * dtrain_ckpt_pieces.c, heartbeats and injection ft/. */
#include "dtrain_ft_internal.h"
#include "dtrain_env.h"
#include "ft/dtrain_heartbeat.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"
#include "ft/dtrain_policy.h"
#include "dtrain_ptrainer.h"
#include "ft/dtrain_watchdog.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GRACE_S 2.0 /* the watchdog's wait for the loop to unwind after an abort */

static int barrier(struct ft *f, const char *what, char *err, size_t errlen)
{
    return dtrain_pcomm_status(f->world, dtrain_comm_barrier(f->world), what, err, errlen);
}

/* ------------------------------------------------------------ carrying out the verdicts */

/* Checkpoint and stop on the stop signals the ranks saw together
 * (term, usr1: how many ranks got each).  Returns DTRAIN_ERR_FAULT with
 * the reason. */
static int stop_on_signals(struct ft *f, long term, long usr1, char *err, size_t errlen)
{
    long step = dtrain_ptrainer_steps_done(f->t);
    /* a Ctrl-C here counts as a SIGTERM in the sum; the rank that got it says SIGINT */
    int bits = (term ? DTRAIN_SIGNAL_TERM : 0) | (usr1 ? DTRAIN_SIGNAL_USR1 : 0) |
               (dtrain_signals_pending() & DTRAIN_SIGNAL_INT), rc;
    char saved[DTRAIN_PATH_MAX + 64] = "no checkpoint folder: nothing saved";
    dtrain_fault_event(f->fault, "signal", step, dtrain_signals_name(bits));
    /* the ranks leave together: nobody's links close while another is still
     * in the checkpoint's collectives (as at the end of dtrain_ft_run) */
    dtrain_watchdog_pause(f->wd);
    if (f->dir != NULL) {
        /* the write in flight is finished first (its commit is this boundary's) */
        if ((rc = dtrain_ft_finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
            return rc;
        rc = dtrain_ft_saved_in_dir(f, step) ? DTRAIN_OK : dtrain_ft_save_checkpoint(f, 0, 0, err, errlen);
        if (rc == DTRAIN_ERR_FAULT)
            return rc;
        snprintf(saved, sizeof saved, rc == DTRAIN_OK ? "checkpoint of step %ld written" :
                 "the checkpoint of step %ld failed (the run resumes from the one before)", step);
    }
    if ((rc = barrier(f, "stopping", err, errlen)) != DTRAIN_OK)
        return rc;
    snprintf(err, errlen, "stopping on %s (received by %ld rank%s): %s", dtrain_signals_name(bits),
             term + usr1, term + usr1 == 1 ? "" : "s", saved);
    return DTRAIN_ERR_FAULT;
}

/* The straggler leaves the drain request in the checkpoint folder
 * (DTRAIN_DRAIN_REQUEST: its node and the reason, for dtrain-launch
 * --job-exit). */
static void leave_drain_request(struct ft *f, const char *line)
{
    struct dtrain_out_file o;
    char path[DTRAIN_PATH_MAX + 32], text[700], why[512];
    int n = snprintf(text, sizeof text, "%s\t%s\n", f->fault->node, line);
    if (dtrain_snprintf(path, sizeof path, "%s/" DTRAIN_DRAIN_REQUEST, f->dir) != 0 ||
        dtrain_out_open(&o, path, why, sizeof why) != DTRAIN_OK) {
        fprintf(stderr, "%s: rank %d: cannot leave the drain request: %s\n", f->prog, f->bs->rank, why);
    } else {
        dtrain_out_write(&o, text, n > 0 && (size_t)n < sizeof text ? (size_t)n : strlen(text));
        if (dtrain_out_commit(&o, why, sizeof why) != DTRAIN_OK)
            fprintf(stderr, "%s: rank %d: cannot leave the drain request: %s\n", f->prog, f->bs->rank, why);
    }
}

/* After a logged step: a new straggler (the same verdict on every rank,
 * dtrain_ptrainer_straggler) says so itself on one line (it knows its node
 * and GPU) and records a "straggler" event.  With drain every rank
 * checkpoints this step, the straggler leaves the drain request and the
 * run stops as on a fault (DTRAIN_ERR_FAULT: exit 75, requeue). */
static int straggler(struct ft *f, char *err, size_t errlen)
{
    struct dtrain_straggler g;
    dtrain_ptrainer_straggler(f->t, &g);
    if (!g.is_new)
        return DTRAIN_OK;
    long step = dtrain_ptrainer_steps_done(f->t) - 1;
    const char *gpu = getenv(DTRAIN_ENV_GPU);
    char line[600];
    snprintf(line, sizeof line, "straggler: rank %d (node %s, GPU %s): compute %.1f ms a step, %.0f%% above the "
             "median %.1f ms of the %d ranks for %ld steps in a row (margin %.0f%%)", g.rank, f->fault->node,
             gpu != NULL && gpu[0] != '\0' ? gpu : "none", g.compute_ms, 100.0 * g.excess, g.median_ms,
             f->bs->world_size, g.steps, 100.0 * f->cfg->straggler_margin);
    if (f->bs->rank == g.rank) {
        fprintf(stderr, "%s: %s: %s\n", f->prog, line, f->cfg->straggler_drain ? "draining its node and restarting "
                "without it" : "reported");
        fflush(stderr);
        dtrain_fault_event(f->fault, "straggler", step, line);
    }
    if (dtrain_policy_straggler(&g, f->cfg->straggler_drain) != DTRAIN_VERDICT_CHECKPOINT_AND_STOP)
        return DTRAIN_OK;
    int rc;
    dtrain_watchdog_pause(f->wd); /* as for a stop signal: the ranks leave together */
    long done = step + 1;
    /* the write in flight is finished first (its commit is this boundary's) */
    if (f->dir != NULL && (rc = dtrain_ft_finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    if (f->dir != NULL && !dtrain_ft_saved_in_dir(f, done) &&
        (rc = dtrain_ft_save_checkpoint(f, 0, 0, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    if (f->bs->rank == g.rank && f->dir != NULL)
        leave_drain_request(f, line);
    if ((rc = barrier(f, "stopping for a straggler", err, errlen)) != DTRAIN_OK)
        return rc;
    snprintf(err, errlen, "%s: its node is to be drained (dtrain-launch --job-exit) and the job restarted without it",
             line);
    return DTRAIN_ERR_FAULT;
}

/* A step whose loss or norm was not finite (every rank skipped it): skip
 * it, or roll back to the last checkpoint, or stop: training diverged. */
static int nonfinite(struct ft *f, const struct dtrain_pstep_result *r, long *in_a_row, char *err, size_t errlen)
{
    const long skips = f->cfg->nonfinite_skips;
    (*in_a_row)++;
    f->sum->steps_skipped++;
    if (dtrain_policy_nonfinite(*in_a_row, skips) == DTRAIN_VERDICT_SKIP) {
        if (is_root(f)) {
            fprintf(stderr, "%s: step %ld: the %s is not finite (loss %g, norm %g): step skipped, its batch "
                    "consumed (%ld of at most %ld in a row)\n", f->prog, r->base.step,
                    isfinite(r->base.loss) ? "gradient norm" : "loss", (double)r->base.loss, r->base.grad_norm,
                    *in_a_row, skips);
        }
        return DTRAIN_OK;
    }
    int rc = dtrain_ft_finish_async(f, 1, err, errlen); /* the rollback reads the host copy the writer reads */
    if (rc == DTRAIN_ERR_FAULT)
        return rc;
    int have = f->last_dir != NULL && f->last_ckpt >= 0;
    if (dtrain_policy_rollback(have, f->sum->rollbacks) == DTRAIN_VERDICT_DIVERGED) {
        if (!have)
            snprintf(err, errlen, "step %ld: training diverged: %ld steps in a row had a non-finite loss or "
                     "gradient and there is no checkpoint to roll back to (lower the learning rate, set grad_clip, "
                     "or give --ckpt-dir)", r->base.step, *in_a_row);
        else
            snprintf(err, errlen, "step %ld: training diverged again after %d rollbacks to the last checkpoint "
                     "(lower the learning rate or set grad_clip)", r->base.step, DTRAIN_FT_MAX_ROLLBACKS);
        return DTRAIN_ERR_SYSTEM;
    }
    if (is_root(f))
        fprintf(stderr, "%s: step %ld: %ld steps in a row with a non-finite loss or gradient: rolling back to the "
                "checkpoint of step %ld\n", f->prog, r->base.step, *in_a_row, f->last_ckpt);
    f->sum->rollbacks++;
    *in_a_row = 0;
    return dtrain_ft_load_checkpoint(f, f->last_dir, 1, 0, err, errlen);
}

/* fp16: the scaled gradients overflowed; the scaler backed off (not a fault). */
static void overflow(struct ft *f, const struct dtrain_pstep_result *r)
{
    if (is_root(f) && f->cfg->log_every > 0)
        fprintf(f->progress, "%s: step %ld: gradient overflow at loss scale %g (fp16): step skipped, its "
                "batch consumed, scale now %g\n", f->prog, r->base.step, r->loss_scale, r->loss_scale / 2);
}

/* ------------------------------------------------------------ one step and its report */

/* The step, with this rank's stop signals and background write in ctl,
 * injection armed, and (DTRAIN_VERBOSE=1) the bytes it moved. */
static int step(struct ft *f, long step, struct dtrain_pstep_control *ctl, struct dtrain_pstep_result *r, char *err,
                size_t errlen)
{
    const struct dtrain_train_config *c = f->cfg;
    uint64_t sent0[DTRAIN_EXPLAIN_GROUPS], sent1[DTRAIN_EXPLAIN_GROUPS];
    int rc;
    *ctl = (struct dtrain_pstep_control){.writing = dtrain_ckpt_async_writing(&f->async)};
    dtrain_policy_signal_counts(dtrain_signals_pending(), &ctl->term, &ctl->usr1);
    dtrain_inject_step_begin(&f->inject, step);
    if (f->traffic)
        dtrain_traffic_sample(f->comms, sent0);
    if ((rc = dtrain_ptrainer_step_ctl(f->t, ctl, r, err, errlen)) != DTRAIN_OK)
        return rc;
    /* every rank: its run's first step and each step that has a progress line */
    if (f->traffic && (step == f->traffic_first || (c->log_every > 0 && step % c->log_every == 0))) {
        dtrain_traffic_sample(f->comms, sent1);
        dtrain_traffic_report(stderr, f->prog, c, f->bs, f->have_links ? &f->links : NULL, 4, step, sent0, sent1,
                              r->pipe_wait_ms, r->tp_comm_ms, r->dp_exposed_ms);
    }
    return DTRAIN_OK;
}

/* After a step: the validation loss every val_every steps and after the
 * last, into the step's result (its progress and metrics lines). */
static int validate_if_due(struct ft *f, struct dtrain_pstep_result *r, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = f->cfg;
    long done = dtrain_ptrainer_steps_done(f->t);
    if (dtrain_ptrainer_val_batches(f->t) == 0 || !((c->val_every > 0 && done % c->val_every == 0) || done == c->steps))
        return DTRAIN_OK;
    dtrain_watchdog_beat(f->wd, "validating", done);
    int rc = dtrain_ptrainer_validate(f->t, &r->base.val_loss, err, errlen);
    r->base.has_val_loss = rc == DTRAIN_OK;
    dtrain_watchdog_beat(f->wd, "training", done);
    return rc;
}

/* A step that made its update: validation, the progress and metrics
 * lines, the straggler verdict, a sample. */
static int report(struct ft *f, struct dtrain_pstep_result *r, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = f->cfg;
    int rc;
    if ((rc = validate_if_due(f, r, err, errlen)) != DTRAIN_OK)
        return rc;
    long after = dtrain_ptrainer_steps_done(f->t);
    /* metrics files (fsync) and sampling are not the step's work: outside it for the heartbeat */
    dtrain_watchdog_beat(f->wd, "writing the metrics", after);
    if ((rc = dtrain_ptrainer_log_step(f->t, f->progress, r, err, errlen)) != DTRAIN_OK ||
        (rc = straggler(f, err, errlen)) != DTRAIN_OK)
        return rc;
    dtrain_watchdog_beat(f->wd, "sampling", after);
    if (c->sample_every > 0 && after % c->sample_every == 0 &&
        (rc = dtrain_ptrainer_sample(f->t, is_root(f) ? f->progress : NULL, err, errlen)) != DTRAIN_OK)
        return rc;
    return DTRAIN_OK;
}

/* The periodic checkpoint after a step (with a node-local tier, the shared
 * folder every ckpt_shared_every steps). */
static int checkpoint_if_due(struct ft *f, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = f->cfg;
    long done = dtrain_ptrainer_steps_done(f->t);
    int local = f->local != NULL && !(c->ckpt_shared_every > 0 && done % c->ckpt_shared_every == 0), rc;
    if (f->dir != NULL && c->checkpoint_every > 0 && done % c->checkpoint_every == 0 &&
        !dtrain_ft_saved_in_tiers(f, done) && done < c->steps &&
        (rc = dtrain_ft_save_checkpoint(f, c->ckpt_async, local, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ the loop */

static int train(struct ft *f, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = f->cfg;
    long in_a_row = 0;
    int first_after_resume = f->sum->resumed_step >= 0, rc;
    while (dtrain_ptrainer_steps_done(f->t) < c->steps) {
        long at = dtrain_ptrainer_steps_done(f->t);
        struct dtrain_pstep_control ctl;
        struct dtrain_pstep_result r;
        dtrain_watchdog_beat(f->wd, "training", at);
        if ((rc = step(f, at, &ctl, &r, err, errlen)) != DTRAIN_OK)
            return rc;
        /* every rank's background write was done before this step: every
         * rank commits it here, between two steps' collectives */
        if (f->async.pending && ctl.writing == 0 &&
            (rc = dtrain_ft_finish_async(f, 0, err, errlen)) == DTRAIN_ERR_FAULT)
            return rc;
        if (ctl.skipped) {
            if ((rc = nonfinite(f, &r, &in_a_row, err, errlen)) != DTRAIN_OK)
                return rc;
        } else if (r.overflow && dtrain_policy_overflow() == DTRAIN_VERDICT_SKIP) {
            overflow(f, &r);
        } else {
            in_a_row = 0;
            if ((rc = report(f, &r, err, errlen)) != DTRAIN_OK)
                return rc;
            if (first_after_resume) {
                dtrain_fault_event(f->fault, "first_step", r.base.step, NULL);
                first_after_resume = 0;
            }
        }
        if (dtrain_policy_signals(ctl.term, ctl.usr1) == DTRAIN_VERDICT_CHECKPOINT_AND_STOP)
            return stop_on_signals(f, ctl.term, ctl.usr1, err, errlen);
        if ((rc = checkpoint_if_due(f, err, errlen)) != DTRAIN_OK)
            return rc;
    }
    if (f->dir != NULL && (rc = dtrain_ft_finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    if (f->dir != NULL && !dtrain_ft_saved_in_dir(f, c->steps) &&
        (rc = dtrain_ft_save_checkpoint(f, 0, 0, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ load or init */

/* A trainer at step 0 with a checkpoint folder (or --resume) loads the
 * newest good checkpoint there; one that has trained already
 * (dtrain_trainer.h's) goes on from where it is. */
static int load_or_init(struct ft *f, char *err, size_t errlen)
{
    int rc;
    if ((f->dir != NULL || f->resume != NULL) && dtrain_ptrainer_steps_done(f->t) == 0) {
        if (f->dir != NULL)
            dtrain_inject_corruption(&f->inject, f->dir);
        /* the same folder named twice is the folder: last_dir then says so */
        const char *from = f->resume != NULL && (f->dir == NULL || strcmp(f->resume, f->dir) != 0) ? f->resume : f->dir;
        if ((rc = barrier(f, "before resuming", err, errlen)) != DTRAIN_OK)
            return rc;
        return dtrain_ft_load_checkpoint(f, from, 0, f->resume != NULL, err, errlen);
    }
    return dtrain_ptrainer_metrics_from(f->t, dtrain_ptrainer_steps_done(f->t), err, errlen);
}

/* DTRAIN_VERBOSE=1: the plugin's links for predicted times, and rank 0's
 * explanation of the traffic before the first step. */
static void traffic_setup(struct ft *f)
{
    f->traffic_first = dtrain_ptrainer_steps_done(f->t);
    if (f->traffic) {
        char why[256];
        int lrc = dtrain_traffic_links(&f->links, why, sizeof why);
        f->have_links = lrc == 1;
        if (lrc < 0 && is_root(f))
            fprintf(stderr, "%s: warning: %s ignored (no predicted times): %s\n", f->prog, DTRAIN_ENV_GROUP_LINKS, why);
    }
    if (f->traffic && is_root(f))
        dtrain_traffic_explain(f->progress, f->prog, f->cfg, f->bs, f->comms, 4, f->have_links ? &f->links : NULL);
}

/* The watchdog (its stall limit from --watchdog, else twice the
 * communicator timeout) and the heartbeats it reads. */
static int start_watchdog(struct ft *f, atomic_int *abort_flag, char *err, size_t errlen)
{
    const struct dtrain_train_config *cfg = f->cfg;
    struct dtrain_watchdog_options wo = {
        .abort_flag = abort_flag, .comms = f->comms, .fault = f->fault,
        .stall_s = cfg->watchdog > 0 ? cfg->watchdog : 2.0 * cfg->comm_timeout, .grace_s = GRACE_S,
        .hang_s = cfg->hang_detect,
    };
    if (dtrain_watchdog_start(&wo, &f->wd, err, errlen) != 0)
        return DTRAIN_ERR_SYSTEM;
    return dtrain_hb_start(f->bs, f->world, f->fault, cfg->hang_detect, f->wd, err, errlen);
}

/* After the last step: the export, the summary.  Ranks that finish first
 * close their links, which a peer's watchdog would take for a fault.  Each
 * rank stops its watchdog before a last barrier: no rank leaves the
 * barrier before every rank has entered it, so every watchdog is off
 * before any link closes. */
static int finish(struct ft *f, char *err, size_t errlen)
{
    dtrain_ptrainer_set_watchdog(f->t, NULL);
    dtrain_watchdog_stop(f->wd);
    f->wd = NULL;
    int rc = barrier(f, "at the end of the run", err, errlen);
    if (rc == DTRAIN_OK)
        rc = dtrain_ptrainer_finish(f->t, err, errlen);
    if (rc == DTRAIN_OK)
        dtrain_ptrainer_summary(f->t, f->progress, f->prog, f->dir);
    return rc;
}

int dtrain_ft_run(struct dtrain_ptrainer *t, const struct dtrain_train_config *cfg,
                  const struct dtrain_bootstrap *bs, const struct dtrain_comms *comms, atomic_int *abort_flag,
                  struct dtrain_fault *fault, FILE *progress, struct dtrain_ft_summary *sum, char *err,
                  size_t errlen)
{
    struct ft f = {
        .t = t, .cfg = cfg, .bs = bs, .world = comms->group[DTRAIN_GROUP_WORLD], .fault = fault,
        .abort_flag = abort_flag,
        .prog = fault->prog, .progress = progress != NULL ? progress : stdout,
        .dir = cfg->ckpt_dir[0] != '\0' ? cfg->ckpt_dir : NULL,
        .resume = cfg->resume[0] != '\0' ? cfg->resume : NULL,
        .layout = dtrain_ft_layout(bs, cfg),
        .restart = fault->restarts.count, .last_ckpt = -1, .sum = sum, .comms = comms,
    };
    const char *verbose = getenv(DTRAIN_ENV_VERBOSE);
    f.traffic = verbose != NULL && strcmp(verbose, "1") == 0;
    int rc, signals = 0;
    struct dtrain_inject spec;
    memset(sum, 0, sizeof *sum);
    sum->resumed_step = -1;
    if (dtrain_inject_parse(cfg->inject, &spec, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    dtrain_inject_run_init(&f.inject, &spec, bs->rank, f.restart, f.prog, fault);
    dtrain_report_set_prog(t, f.prog);
    if ((rc = dtrain_ft_local_tier(&f, err, errlen)) != DTRAIN_OK ||
        (rc = dtrain_ft_pieces(t, cfg, bs, &f.pieces, err, errlen)) != DTRAIN_OK) {
        dtrain_comm_destroy(f.peers.copy_comm);
        return rc;
    }
    rc = DTRAIN_ERR_SYSTEM;
    if (dtrain_signals_install(err, errlen) != 0)
        goto out;
    signals = 1;
    if ((rc = start_watchdog(&f, abort_flag, err, errlen)) != DTRAIN_OK)
        goto out;
    dtrain_ptrainer_set_watchdog(t, f.wd);
    const struct dtrain_inject_hooks hooks = dtrain_inject_hooks_of(&f.inject);
    dtrain_ptrainer_set_inject(t, &hooks);
    if ((rc = load_or_init(&f, err, errlen)) != DTRAIN_OK)
        goto out;
    traffic_setup(&f);
    if ((rc = train(&f, err, errlen)) == DTRAIN_OK)
        rc = finish(&f, err, errlen);
out:
    if (rc == DTRAIN_ERR_FAULT && abort_flag != NULL)
        atomic_store(abort_flag, 1); /* stop every communicator of the process now */
    dtrain_ptrainer_set_watchdog(t, NULL);
    dtrain_ptrainer_set_inject(t, NULL);
    dtrain_ckpt_async_release(&f.async); /* a fault: its step-N.tmp stays for resume to remove */
    dtrain_comm_destroy(f.peers.copy_comm);
    dtrain_watchdog_stop(f.wd);
    if (signals)
        dtrain_signals_restore();
    dtrain_ft_pieces_free(&f.pieces);
    return rc;
}
