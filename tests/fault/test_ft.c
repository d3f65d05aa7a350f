/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The fault-tolerant loop (runtime/trainer/dtrain_loop.c, dtrain_ft.h) on real ranks
 * (tests/parallel/local_boot.h: local processes, real communicators with
 * the process's abort flag, the watchdog, the fault line and exit codes of
 * dtrain-launch's trainer).  Layout (1,2,2) with ZeRO-1 and 2 micro-
 * batches, 8 steps, a checkpoint every 2; the reference is the same run
 * without a fault.  Each fault is followed, where the job would be
 * requeued, by the run Slurm would start (SLURM_RESTART_COUNT=1):
 *  - rank 2 killed (SIGKILL) at step 5: the others exit 75; the second run
 *    resumes from step 4 and every step's loss is the reference's, bit for
 *    bit (the metrics file reads as one run);
 *  - rank 1 hung at step 3: the others time out (2 s), the hung rank's
 *    watchdog ends it: every rank exits 75; the resumed run is exact;
 *  - SIGTERM to rank 1 while it trains: every rank writes the checkpoint of
 *    the same step and exits 75; the resumed run is exact; SIGUSR1 alike;
 *  - a NaN loss for 2 steps: skipped, the run completes; for 4 steps (more
 *    than --nonfinite-skips 3): rolled back to the last checkpoint, every
 *    loss exact; without a checkpoint folder: exit 1 (diverged);
 *  - a checkpoint of (1,2,2) resumed by (1,2,1): losses within 1e-5;
 *  - the only checkpoint damaged: the resume stops with exit 2, it does not
 *    start over from step 0;
 *  - the restart budget spent (SLURM_RESTART_COUNT=1, DTRAIN_MAX_RESTARTS
 *    =1): the killed rank's peers exit 1, not 75;
 *  - background checkpoints (--ckpt-async, dtrain_ckpt_async.h): every
 *    loss and the checkpoint of step 6 equal the synchronous run's bit for
 *    bit, nothing left half written; rank 2 killed at step 5 while its
 *    write of step 4 is still in flight (slowckpt): the resumed run takes
 *    step 2 (step-4.tmp removed) and is exact; killed at step 6: it takes
 *    step 4 or 2 (whichever was committed) and is exact; a failed
 *    background write (nospace) is reported, the run completes; SIGTERM
 *    while writing: the write finished, the stop's checkpoint written, the
 *    resumed run exact;
 *  - a write slower than --comm-timeout (slowckpt 4.5 s, the timeout 2 s),
 *    in the background and synchronous: the others wait for it in rounds,
 *    the run completes with every checkpoint and loss; one that outlasts
 *    --watchdog: every rank exits 75, nothing committed; a requeued run
 *    whose rank 1 reads the checkpoint 4.5 s late: it resumes, exact;
 *  - the node-local tier (--ckpt-local-dir DIR/%n, ranks 0-1 on node0 and
 *    2-3 on node1, the shared folder every 4 steps): rank 2 killed at
 *    step 7, node1's local folder wiped: the resumed run takes step 6 from
 *    node0 (its shards and node1's copies), puts node1's folder back and is
 *    exact; rank 0's local shard damaged: its copy on node1 serves, the
 *    damaged folder is kept as step-N.damaged; the shard and its copy both
 *    damaged: the shared step 4 is taken, exact; in the background: every
 *    loss exact, both nodes' folders hold every shard of step 6; a write
 *    slower than --comm-timeout, in the background and synchronous: the
 *    peer copies wait for it, both nodes hold every shard; a requeued
 *    run whose rank 1 reads the node-local tier 4.5 s late resumes; an
 *    unwritable node-local folder: exit 2 on every rank before step 0. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_fault.h"
#include "trainer/dtrain_ft.h"
#include "ft/dtrain_inject.h"
#include "dtrain_parallel.h"
#include "harness.h"
#include "local_boot.h"
#include "tap.h"

#define STEPS 8
#define LOSS_RTOL 1e-5

struct job {
    struct dtrain_train_config cfg;
    int sigterm_rank; /* this rank raises `signal` once rank 0 has logged a step; -1: none */
    int signal;
    int nodes;        /* > 0: the ranks are spread over this many nodes (bs->node and SLURMD_NODENAME
                       * "nodeN" set as Slurm would: the stand-in for a multi-node step) */
};

struct area {
    char err[512];
    struct dtrain_ft_summary sum;
};

static void *send_sigterm(void *arg)
{
    const struct job *j = arg;
    struct stat st;
    for (int i = 0; i < 3000; i++) { /* rank 0 has finished a step: the handler is in */
        if (stat(j->cfg.metrics, &st) == 0 && st.st_size > 0)
            break;
        usleep(10000);
    }
    raise(j->signal);
    return NULL;
}

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct job *j = ctx;
    struct area *a = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    struct dtrain_fault fault;
    struct dtrain_comm_options o;
    atomic_int abort_flag;
    atomic_init(&abort_flag, 0);
    if (j->nodes > 0) { /* each rank is a process of its own: its environment is its node's */
        char name[32];
        bs->node = bs->rank * j->nodes / bs->world_size;
        snprintf(name, sizeof name, "node%d", bs->node);
        setenv("SLURMD_NODENAME", name, 1);
    }
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = j->cfg.comm_timeout * 1000;
    o.abort_flag = &abort_flag;
    if (dtrain_comm_init_all(bs, &o, &comms, NULL, a->err, sizeof a->err) != DTRAIN_OK)
        return 3;
    int code = DTRAIN_EXIT_FAILURE, rc = DTRAIN_ERR_INPUT;
    if (dtrain_fault_init(&fault, "test_ft", bs->rank, a->err, sizeof a->err) == 0)
        rc = dtrain_ptrainer_create(&j->cfg, bs, &comms, &t, a->err, sizeof a->err);
    pthread_t th;
    int signaller = rc == DTRAIN_OK && bs->rank == j->sigterm_rank &&
                    pthread_create(&th, NULL, send_sigterm, (void *)j) == 0;
    FILE *quiet = fopen("/dev/null", "w");
    if (rc == DTRAIN_OK)
        rc = dtrain_ft_run(t, &j->cfg, bs, &comms, &abort_flag, &fault, quiet, &a->sum, a->err, sizeof a->err);
    if (rc == DTRAIN_ERR_FAULT)
        code = dtrain_fault_report(&fault, t != NULL ? dtrain_ptrainer_steps_done(t) : 0, a->err);
    else
        code = dtrain_status_exit(rc);
    if (signaller)
        pthread_join(th, NULL);
    if (quiet != NULL)
        fclose(quiet);
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return code;
}

/* Run the job in (tp, pp, dp); codes[] get the ranks' exit codes. */
static void run(const struct job *j, int tp, int pp, int dp, struct area *areas, int *codes)
{
    char err[512];
    memset(areas, 0, (size_t)(tp * pp * dp) * sizeof *areas);
    if (local_boot_run(tp, pp, dp, rank_main, (void *)j, sizeof *areas, areas, codes, 120, err, sizeof err) != 0)
        diag("(%d,%d,%d): %s", tp, pp, dp, err);
}

static int all_codes(const int *codes, int n, int want, int except, int except_code)
{
    for (int r = 0; r < n; r++)
        if (codes[r] != (r == except ? except_code : want))
            return 0;
    return 1;
}

/* Losses of a metrics file (one per step, in order); returns how many. */
static int losses(const char *path, float *out, int max)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    long step;
    float loss;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "{\"step\": %ld, \"loss\": %f", &step, &loss) == 2 && step == n && n < max)
            out[n++] = loss;
    if (f != NULL)
        fclose(f);
    return n;
}

static int same_losses(const char *path, const float *ref)
{
    float l[STEPS + 1];
    return losses(path, l, STEPS + 1) == STEPS && memcmp(l, ref, sizeof l[0] * STEPS) == 0;
}

/* A job of the scenario `name`: its own checkpoint folder and metrics. */
/* Bytes of shard r of a step folder (0: none). */
static unsigned long long shard_bytes(const char *step_dir, int r)
{
    char path[800];
    struct stat sb;
    snprintf(path, sizeof path, "%s/shard-%05d.bin", step_dir, r);
    return stat(path, &sb) == 0 ? (unsigned long long)sb.st_size : 0;
}

static struct job scenario(const struct dtrain_train_config *base, const char *top, const char *name,
                           const char *inject)
{
    struct job j = {*base, -1, SIGTERM, 0};
    snprintf(j.cfg.ckpt_dir, sizeof j.cfg.ckpt_dir, "%s/%s.ckpt", top, name);
    snprintf(j.cfg.metrics, sizeof j.cfg.metrics, "%s/%s.jsonl", top, name);
    snprintf(j.cfg.inject, sizeof j.cfg.inject, "%s", inject);
    return j;
}

/* A scenario on the node-local tier: two "nodes", TOP/NAME.local/%n as
 * --ckpt-local-dir, the shared folder every 4 steps. */
static struct job tier_scenario(const struct dtrain_train_config *base, const char *top, const char *name,
                                const char *inject)
{
    struct job j = scenario(base, top, name, inject);
    j.nodes = 2;
    snprintf(j.cfg.ckpt_local_dir, sizeof j.cfg.ckpt_local_dir, "%s/%s.local/%%n", top, name);
    j.cfg.ckpt_shared_every = 4;
    return j;
}

int main(void)
{
    char top[256], err[512];
    struct dtrain_train_config cfg;
    if (harness_setup("ft", top, sizeof top, &cfg, err, sizeof err) != 0) {
        printf("1..0 # SKIP %s\n", err);
        return 0;
    }
    cfg.steps = STEPS;
    cfg.zero_stage = 1;
    cfg.micro_batches = 2;
    cfg.checkpoint_every = 2;
    cfg.comm_timeout = 2;
    cfg.optim.total_steps = STEPS;
    unsetenv("SLURM_RESTART_COUNT");
    unsetenv("DTRAIN_MAX_RESTARTS");
    unsetenv("DTRAIN_FAULT_LOG");
    struct area areas[LOCAL_BOOT_MAX_WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD];
    float ref[STEPS + 1];

    struct job j = scenario(&cfg, top, "ref", "");
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && losses(j.cfg.metrics, ref, STEPS + 1) == STEPS &&
       areas[0].sum.checkpoints == 4, "the reference: (1,2,2) ZeRO-1, 8 steps, 4 checkpoints, exit 0");

    /* ---- a killed rank */
    j = scenario(&cfg, top, "kill", "kill:rank=2:step=5");
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 75, 2, 128 + SIGKILL), "rank 2 killed at step 5: it dies of SIGKILL, the others "
       "exit 75 (%d %d %d %d)", codes[0], codes[1], codes[2], codes[3]);
    harness_sh("cp -r '%s' '%s/kill4.ckpt' && cp '%s' '%s/kill4.jsonl'", j.cfg.ckpt_dir, top, j.cfg.metrics,
               top); /* for the smaller D below */
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 4, "the requeued run resumes from step 4 "
       "and completes (resumed from %ld)", areas[0].sum.resumed_step);
    ok(same_losses(j.cfg.metrics, ref), "every step's loss equals the unbroken run's, bit for bit");
    unsetenv("SLURM_RESTART_COUNT");

    /* ---- every checkpoint damaged: no silent start from step 0 */
    j = scenario(&cfg, top, "alldamaged", "kill:rank=1:step=3,corrupt:rank=0:restart=1");
    run(&j, 1, 2, 2, areas, codes);
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 2, -1, 0) && strstr(areas[0].err, "every checkpoint in") != NULL,
       "the only checkpoint damaged before the resume: every rank exits 2: %s", areas[0].err);
    unsetenv("SLURM_RESTART_COUNT");

    /* ---- a hung rank */
    j = scenario(&cfg, top, "hang", "hang:rank=1:step=3");
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 75, -1, 0), "rank 1 hangs at step 3: a neighbour's heartbeat finds it, its watchdog ends it: "
       "every rank exits 75 (%d %d %d %d)", codes[0], codes[1], codes[2], codes[3]);
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 2 && same_losses(j.cfg.metrics, ref),
       "the requeued run resumes from step 2; every loss equals the unbroken run's");
    unsetenv("SLURM_RESTART_COUNT");

    /* ---- SIGTERM (preemption) on one rank */
    j = scenario(&cfg, top, "term", "delay:rank=0:step=0:ms=150:count=8");
    j.sigterm_rank = 1;
    run(&j, 1, 2, 2, areas, codes);
    uint64_t newest = 0;
    dtrain_sckpt_list(j.cfg.ckpt_dir, &newest, 1, err, sizeof err);
    ok(all_codes(codes, 4, 75, -1, 0) && strstr(areas[0].err, "stopping on SIGTERM (received by 1 rank)") &&
       strstr(areas[3].err, "stopping on SIGTERM") && newest > 0 && newest < STEPS && areas[0].sum.checkpoints > 0,
       "SIGTERM to rank 1: every rank stops after the same step with its checkpoint (step %llu) and exits 75: %s",
       (unsigned long long)newest, areas[0].err);
    j.sigterm_rank = -1;
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == (long)newest && same_losses(j.cfg.metrics, ref),
       "the requeued run resumes from step %llu; every loss equals the unbroken run's", (unsigned long long)newest);
    unsetenv("SLURM_RESTART_COUNT");
    j = scenario(&cfg, top, "usr1", "delay:rank=0:step=0:ms=150:count=8");
    j.sigterm_rank = 2;
    j.signal = SIGUSR1;
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 75, -1, 0) && strstr(areas[1].err, "stopping on SIGUSR1 (received by 1 rank): checkpoint "
       "of step") != NULL, "SIGUSR1 (sbatch --signal) to rank 2: the same: %s", areas[1].err);

    /* ---- non-finite losses */
    j = scenario(&cfg, top, "nan2", "nan:rank=3:step=3:count=2");
    run(&j, 1, 2, 2, areas, codes);
    float l[STEPS + 1];
    int nl = losses(j.cfg.metrics, l, STEPS + 1);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.steps_skipped == 2 && areas[0].sum.rollbacks == 0 &&
       nl == STEPS && memcmp(l, ref, 3 * sizeof l[0]) == 0 && l[3] != ref[3],
       "a NaN loss at step 3 twice: 2 steps skipped (their batches consumed), the run completes");
    j = scenario(&cfg, top, "nan4", "nan:rank=3:step=3:count=4");
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.steps_skipped == 4 && areas[0].sum.rollbacks == 1 &&
       same_losses(j.cfg.metrics, ref), "4 NaN losses in a row (more than 3): rolled back to step 2, every loss "
       "equals the unbroken run's");
    j = scenario(&cfg, top, "nan4nodir", "nan:rank=3:step=3:count=4");
    j.cfg.ckpt_dir[0] = '\0';
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 1, -1, 0) && strstr(areas[0].err, "training diverged") != NULL,
       "the same without a checkpoint folder: exit 1 on every rank: %s", areas[0].err);

    /* ---- a smaller D */
    j = scenario(&cfg, top, "kill4", "");
    run(&j, 1, 2, 1, areas, codes);
    nl = losses(j.cfg.metrics, l, STEPS + 1);
    double worst = 0.0;
    for (int s = 4; s < nl; s++)
        worst = fmax(worst, fabs((double)l[s] - ref[s]) / fabs((double)ref[s]));
    ok(all_codes(codes, 2, 0, -1, 0) && areas[0].sum.resumed_step == 4 && nl == STEPS && worst <= LOSS_RTOL,
       "(1,2,2)'s checkpoint of step 4 resumed by (1,2,1): steps 4..7 within %g of the unbroken run (%.2e)",
       LOSS_RTOL, worst);

    /* ---- background checkpoints */
    j = scenario(&cfg, top, "async", "");
    j.cfg.ckpt_async = 1;
    run(&j, 1, 2, 2, areas, codes);
    char leftover[1024];
    snprintf(leftover, sizeof leftover, "ls -d '%s'/*.tmp >/dev/null 2>&1", j.cfg.ckpt_dir);
    uint64_t have[4] = {0};
    int complete = dtrain_sckpt_list(j.cfg.ckpt_dir, have, 4, err, sizeof err);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.checkpoints == 4 && areas[0].sum.checkpoint_failures == 0 &&
       same_losses(j.cfg.metrics, ref) && complete == 2 && have[0] == 8 && have[1] == 6 && harness_sh("%s", leftover) != 0,
       "--ckpt-async: 4 checkpoints committed (steps 6 and 8 kept, no step-N.tmp left), every loss equals the "
       "synchronous run's (%d complete, newest %llu)", complete, (unsigned long long)have[0]);
    struct dtrain_sckpt_model sync6, async6;
    char ref_dir[600];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref.ckpt", top);
    int l1 = dtrain_sckpt_load_model(ref_dir, 6, &sync6, err, sizeof err);
    int l2 = dtrain_sckpt_load_model(j.cfg.ckpt_dir, 6, &async6, err, sizeof err);
    ok(l1 == DTRAIN_OK && l2 == DTRAIN_OK &&
       harness_same_bits(sync6.params, async6.params, dtrain_model_param_count(&cfg.model)),
       "the background checkpoint of step 6 holds the synchronous one's parameters bit for bit");
    if (l1 == DTRAIN_OK)
        free(sync6.params);
    if (l2 == DTRAIN_OK)
        free(async6.params);

    j = scenario(&cfg, top, "asynckill", "slowckpt:rank=2:step=4:ms=2000,kill:rank=2:step=5");
    j.cfg.ckpt_async = 1;
    run(&j, 1, 2, 2, areas, codes);
    complete = dtrain_sckpt_list(j.cfg.ckpt_dir, have, 4, err, sizeof err);
    snprintf(leftover, sizeof leftover, "test -d '%s/step-00000004.tmp'", j.cfg.ckpt_dir);
    ok(all_codes(codes, 4, 75, 2, 128 + SIGKILL) && complete >= 1 && have[0] == 2 && harness_sh("%s", leftover) == 0,
       "rank 2 killed at step 5 while writing step 4 in the background: the others exit 75, step 4 is not "
       "committed (step-00000004.tmp, newest complete %llu)", (unsigned long long)have[0]);
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 2 && same_losses(j.cfg.metrics, ref) &&
       harness_sh("%s", leftover) != 0, "the requeued run removes step-00000004.tmp, resumes from step 2 (%ld) and "
       "every loss equals the unbroken run's", areas[0].sum.resumed_step);
    unsetenv("SLURM_RESTART_COUNT");

    j = scenario(&cfg, top, "asynckill6", "kill:rank=2:step=6");
    j.cfg.ckpt_async = 1;
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 75, 2, 128 + SIGKILL), "--ckpt-async, rank 2 killed at step 6: the others exit 75");
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && (areas[0].sum.resumed_step == 4 || areas[0].sum.resumed_step == 2) &&
       same_losses(j.cfg.metrics, ref), "the requeued run resumes from the newest committed checkpoint (step %ld) "
       "and every loss equals the unbroken run's", areas[0].sum.resumed_step);
    unsetenv("SLURM_RESTART_COUNT");

    j = scenario(&cfg, top, "asyncnospace", "nospace:rank=1:step=4");
    j.cfg.ckpt_async = 1;
    run(&j, 1, 2, 2, areas, codes);
    snprintf(leftover, sizeof leftover, "ls -d '%s'/*.tmp >/dev/null 2>&1", j.cfg.ckpt_dir);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.checkpoints == 3 && areas[0].sum.checkpoint_failures == 1 &&
       areas[1].sum.checkpoint_failures == 1 && same_losses(j.cfg.metrics, ref) && harness_sh("%s", leftover) != 0,
       "rank 1's background write of step 4 fails (no space): every rank counts the failure, nothing half "
       "written stays, the run completes with every loss exact");

    j = scenario(&cfg, top, "asyncterm", "delay:rank=0:step=0:ms=150:count=8,slowckpt:rank=1:step=2:ms=300");
    j.cfg.ckpt_async = 1;
    j.sigterm_rank = 1;
    run(&j, 1, 2, 2, areas, codes);
    newest = 0;
    dtrain_sckpt_list(j.cfg.ckpt_dir, &newest, 1, err, sizeof err);
    ok(all_codes(codes, 4, 75, -1, 0) && strstr(areas[0].err, "stopping on SIGTERM") && newest > 0 && newest < STEPS,
       "--ckpt-async, SIGTERM to rank 1: every rank stops with the checkpoint of step %llu and exits 75: %s",
       (unsigned long long)newest, areas[0].err);
    j.sigterm_rank = -1;
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == (long)newest && same_losses(j.cfg.metrics, ref),
       "the requeued run resumes from step %llu; every loss equals the unbroken run's", (unsigned long long)newest);
    unsetenv("SLURM_RESTART_COUNT");

    /* A write that takes longer than --comm-timeout (2 s here) on one rank:
     * the ranks whose writes are done wait for it in rounds, not in the
     * commit's collective, which would time out; the watchdog (30 s) is
     * the bound on a write that stops moving. */
    for (int bg = 1; bg >= 0; bg--) {
        j = scenario(&cfg, top, bg ? "asyncslow" : "syncslow", "slowckpt:rank=1:step=4:ms=4500");
        j.cfg.ckpt_async = bg;
        j.cfg.watchdog = 30;
        run(&j, 1, 2, 2, areas, codes);
        newest = 0;
        dtrain_sckpt_list(j.cfg.ckpt_dir, &newest, 1, err, sizeof err);
        ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.checkpoints == STEPS / 2 && newest == STEPS &&
               same_losses(j.cfg.metrics, ref),
           "%s, rank 1's write of step 4 takes 4.5 s, past --comm-timeout 2: the others wait for it, the run "
           "completes with every checkpoint and loss (codes %d %d %d %d, %d checkpoints: %s)",
           bg ? "--ckpt-async" : "synchronous checkpoints", codes[0], codes[1], codes[2], codes[3],
           areas[0].sum.checkpoints, areas[0].err);
    }

    /* A requeued run whose rank 1 reads the checkpoint slower than
     * --comm-timeout (4.5 s before each of its two reads: the check and
     * the load): the others wait for it in rounds, the run resumes. */
    j = scenario(&cfg, top, "slowload", "kill:rank=2:step=5,slowload:rank=1:ms=4500:restart=1");
    j.cfg.watchdog = 30;
    run(&j, 1, 2, 2, areas, codes);
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    unsetenv("SLURM_RESTART_COUNT");
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 4 && same_losses(j.cfg.metrics, ref),
       "rank 1 of the requeued run reads the checkpoint 4.5 s late, past --comm-timeout 2: it resumes from step 4 "
       "(%ld), every loss exact (codes %d %d %d %d: %s)", areas[0].sum.resumed_step, codes[0], codes[1], codes[2],
       codes[3], areas[0].err);

    /* ... and one that never ends (here: 10 minutes, past --watchdog 3 s)
     * is a hang: that rank's watchdog ends it, the others' rounds fail,
     * the checkpoint is not committed.  (A run that waited for the write
     * instead would outlast the harness's 120 s and its ranks be killed.) */
    j = scenario(&cfg, top, "slowhang", "slowckpt:rank=1:step=2:ms=600000");
    j.cfg.watchdog = 3;
    run(&j, 1, 2, 2, areas, codes);
    newest = 0;
    dtrain_sckpt_list(j.cfg.ckpt_dir, &newest, 1, err, sizeof err);
    ok(all_codes(codes, 4, 75, -1, 0) && newest == 0,
       "a write of step 2 on rank 1 that outlasts --watchdog 3: every rank exits 75 (%d %d %d %d), nothing committed "
       "(newest %llu)", codes[0], codes[1], codes[2], codes[3], (unsigned long long)newest);

    /* ---- the node-local tier with peer copies */
    j = tier_scenario(&cfg, top, "tier", "kill:rank=2:step=7");
    run(&j, 1, 2, 2, areas, codes);
    char node0[600], node1[600];
    snprintf(node0, sizeof node0, "%s/tier.local/node0", top);
    snprintf(node1, sizeof node1, "%s/tier.local/node1", top);
    uint64_t on0 = 0, on1 = 0, shared = 0;
    dtrain_sckpt_list(node0, &on0, 1, err, sizeof err);
    dtrain_sckpt_list(node1, &on1, 1, err, sizeof err);
    dtrain_sckpt_list(j.cfg.ckpt_dir, &shared, 1, err, sizeof err);
    ok(all_codes(codes, 4, 75, 2, 128 + SIGKILL) && on0 == 6 && on1 == 6 && shared == 4 &&
       harness_sh("test -f '%s/step-00000006/shard-00002.bin' && test -f '%s/step-00000006/shard-00000.bin'", node0,
                  node1) == 0,
       "--ckpt-local-dir: step 6 on both nodes' folders (each with the other node's shards), step 4 in the shared "
       "folder (%llu %llu %llu)", (unsigned long long)on0, (unsigned long long)on1, (unsigned long long)shared);
    harness_sh("cp -r '%s/tier.local' '%s/tier.local.saved' && cp -r '%s' '%s/tier.ckpt.saved' && cp '%s' '%s/tier.saved.jsonl'",
               top, top, j.cfg.ckpt_dir, top, j.cfg.metrics, top);
    harness_sh("rm -rf '%s'", node1); /* node1's disk is lost */
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 6 && same_losses(j.cfg.metrics, ref) &&
       harness_sh("test -f '%s/step-00000006/shard-00003.bin'", node1) == 0,
       "node1's local folder wiped: the resumed run takes step 6 from node0's shards and copies (%ld), puts node1's "
       "back, and every loss equals the unbroken run's", areas[0].sum.resumed_step);
    char saved6[700];
    snprintf(saved6, sizeof saved6, "%s/tier.local.saved/node0/step-00000006", top);
    unsigned long long sz[4];
    for (int r = 0; r < 4; r++)
        sz[r] = shard_bytes(saved6, r);
    ok(sz[0] > 0 && areas[0].sum.load_received == 0 && areas[1].sum.load_received == 0 &&
       areas[2].sum.load_received == sz[2] + sz[0] && areas[3].sum.load_received == sz[3] + sz[1],
       "only what node1 lacks moves: each of its ranks receives its own shard and the copy it keeps (%llu %llu "
       "bytes), node0's ranks nothing (%llu %llu)", areas[2].sum.load_received, areas[3].sum.load_received,
       areas[0].sum.load_received, areas[1].sum.load_received);
    /* the saved state again, rank 0's own shard on node0 damaged */
    const char *restore = "rm -rf '%s/tier.local' '%s' && cp -r '%s/tier.local.saved' '%s/tier.local' && "
                          "cp -r '%s/tier.ckpt.saved' '%s' && cp '%s/tier.saved.jsonl' '%s'";
    harness_sh(restore, top, j.cfg.ckpt_dir, top, top, top, j.cfg.ckpt_dir, top, j.cfg.metrics);
    char shard0[700];
    snprintf(shard0, sizeof shard0, "%s/step-00000006/shard-00000.bin", node0);
    ok(dtrain_inject_corrupt_file(shard0, err, sizeof err) == 0, "rank 0's shard of step 6 on node0 damaged");
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 6 && same_losses(j.cfg.metrics, ref) &&
       harness_sh("test -d '%s/step-00000006.damaged' && test -f '%s'", node0, shard0) == 0,
       "its copy on node1 serves: resumed from step 6 (%ld), exact; node0's folder kept as step-00000006.damaged "
       "and put back", areas[0].sum.resumed_step);
    ok(areas[0].sum.load_received == sz[0] && areas[1].sum.load_received == 0 && areas[2].sum.load_received == 0 &&
       areas[3].sum.load_received == 0, "only shard 0 moves, to rank 0 (%llu bytes; the others %llu %llu %llu)",
       areas[0].sum.load_received, areas[1].sum.load_received, areas[2].sum.load_received,
       areas[3].sum.load_received);
    harness_sh(restore, top, j.cfg.ckpt_dir, top, top, top, j.cfg.ckpt_dir, top, j.cfg.metrics);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 6 && same_losses(j.cfg.metrics, ref) &&
       areas[0].sum.load_received + areas[1].sum.load_received + areas[2].sum.load_received +
       areas[3].sum.load_received == 0,
       "nothing lost: resumed from step 6 (%ld), exact, and no file moves between the ranks",
       areas[0].sum.resumed_step);
    harness_sh(restore, top, j.cfg.ckpt_dir, top, top, top, j.cfg.ckpt_dir, top, j.cfg.metrics);
    char copy0[700];
    snprintf(copy0, sizeof copy0, "%s/step-00000006/shard-00000.bin", node1);
    ok(dtrain_inject_corrupt_file(shard0, err, sizeof err) == 0 && dtrain_inject_corrupt_file(copy0, err, sizeof err) == 0,
       "rank 0's shard of step 6 and its copy on node1 both damaged");
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 4 && same_losses(j.cfg.metrics, ref),
       "no good copy of shard 0 at step 6: the shared tier's step 4 is taken (%ld), every loss exact",
       areas[0].sum.resumed_step);
    unsetenv("SLURM_RESTART_COUNT");

    j = scenario(&cfg, top, "tierro", "");
    j.nodes = 2;
    snprintf(j.cfg.ckpt_local_dir, sizeof j.cfg.ckpt_local_dir, "/proc/1");
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 2, -1, 0) && strstr(areas[0].err, "node-local checkpoint folder (--ckpt-local-dir) /proc/1") != NULL,
       "an unwritable --ckpt-local-dir: every rank exits 2 before step 0: %s", areas[0].err);

    j = tier_scenario(&cfg, top, "tierasync", "");
    j.cfg.ckpt_async = 1;
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.checkpoints == 4 && same_losses(j.cfg.metrics, ref) &&
       harness_sh("for n in 0 1; do for r in 0 1 2 3; do test -f '%s/tierasync.local/node'$n/step-00000006/shard-0000$r.bin "
                  "|| exit 1; done; done; ! ls -d '%s/tierasync.local'/node*/*.tmp >/dev/null 2>&1", top, top) == 0,
       "--ckpt-async with --ckpt-local-dir: 4 checkpoints (2 node-local), every loss exact, both nodes hold every "
       "shard of step 6, nothing half written");
    /* the background writer's peer copies are complete: node1 lost, step 8 gone from the shared folder */
    harness_sh("rm -rf '%s/step-00000008' '%s/tierasync.local/node1'", j.cfg.ckpt_dir, top);
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    unsetenv("SLURM_RESTART_COUNT");
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 6 && same_losses(j.cfg.metrics, ref) &&
       areas[0].sum.load_received == 0 && areas[2].sum.load_received > 0 && areas[3].sum.load_received > 0,
       "then node1's folder lost and the shared step 8 removed: the run resumes from node0's step 6 (%ld: the "
       "copies the background writer sent), exact", areas[0].sum.resumed_step);

    /* a write slower than --comm-timeout on the node-local tier, in the
     * background and synchronous: the copies wait for every shard */
    for (int bg = 1; bg >= 0; bg--) {
        j = tier_scenario(&cfg, top, bg ? "tierslow" : "tierslowsync", "slowckpt:rank=1:step=2:ms=4500");
        j.cfg.ckpt_async = bg;
        j.cfg.watchdog = 30;
        run(&j, 1, 2, 2, areas, codes);
        ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.checkpoints == 4 && areas[0].sum.checkpoint_failures == 0 &&
               same_losses(j.cfg.metrics, ref) &&
               harness_sh("for s in 2 6; do for n in 0 1; do for r in 0 1 2 3; do test -f '%s/%s.local/node'$n/step-0000000$s/shard-0000$r.bin "
                          "|| exit 1; done; done; done", top, bg ? "tierslow" : "tierslowsync") == 0,
           "--ckpt-local-dir%s, rank 1's write of step 2 takes 4.5 s, past --comm-timeout 2: the peer copies wait for "
           "it, both nodes hold every shard of steps 2 and 6, every loss exact (codes %d %d %d %d, %d checkpoints, %d "
           "failed: %s)", bg ? " --ckpt-async" : "", codes[0], codes[1], codes[2], codes[3], areas[0].sum.checkpoints,
           areas[0].sum.checkpoint_failures, areas[0].err);
    }

    /* a requeued run whose rank 1 reads the node-local tier 4.5 s late */
    j = tier_scenario(&cfg, top, "tierslowload", "kill:rank=2:step=7,slowload:rank=1:ms=4500:restart=1");
    j.cfg.watchdog = 30;
    run(&j, 1, 2, 2, areas, codes);
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    unsetenv("SLURM_RESTART_COUNT");
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 6 && same_losses(j.cfg.metrics, ref),
       "--ckpt-local-dir, rank 1 of the requeued run reads the node-local step 6 4.5 s late, past --comm-timeout 2: "
       "it resumes from it (%ld), every loss exact (codes %d %d %d %d: %s)", areas[0].sum.resumed_step, codes[0],
       codes[1], codes[2], codes[3], areas[0].err);

    /* ... and one whose node1 lost its folder while rank 0, which sends
     * node1 its shards, reads 4.5 s late: node1's ranks wait in rounds,
     * not in the receive */
    j = tier_scenario(&cfg, top, "tierlostslow", "kill:rank=2:step=7,slowload:rank=0:ms=4500:restart=1");
    j.cfg.watchdog = 60;
    run(&j, 1, 2, 2, areas, codes);
    harness_sh("rm -rf '%s/tierlostslow.local/node1'", top);
    setenv("SLURM_RESTART_COUNT", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    unsetenv("SLURM_RESTART_COUNT");
    ok(all_codes(codes, 4, 0, -1, 0) && areas[0].sum.resumed_step == 6 && same_losses(j.cfg.metrics, ref) &&
           areas[2].sum.load_received > 0 &&
           harness_sh("test -f '%s/tierlostslow.local/node1/step-00000006/shard-00002.bin'", top) == 0,
       "--ckpt-local-dir, node1's folder lost and rank 0 (which sends node1 its shards) reading 4.5 s late, past "
       "--comm-timeout 2: node1's folder is put back from node0's and the run resumes from step 6 (%ld), every loss "
       "exact (codes %d %d %d %d: %s)", areas[0].sum.resumed_step, codes[0], codes[1], codes[2], codes[3],
       areas[2].err);

    /* ---- trust (doc/fault-tolerance.md): no link written through, no stranger's folder read */
    j = scenario(&cfg, top, "trustasync", "");
    j.cfg.ckpt_async = 1;
    harness_sh("mkdir -p '%s' '%s/trustasync.target' && ln -s '%s/trustasync.target' '%s/step-00000002.tmp'",
               j.cfg.ckpt_dir, top, top, j.cfg.ckpt_dir);
    run(&j, 1, 2, 2, areas, codes);
    ok(areas[0].sum.checkpoint_failures >= 1 &&
       harness_sh("test -L '%s/step-00000002.tmp' && test ! -e '%s/step-00000002' && test -z \"$(ls -A '%s/trustasync.target')\"",
                  j.cfg.ckpt_dir, j.cfg.ckpt_dir, top) == 0,
       "--ckpt-async, a link planted as step-00000002.tmp: the save of step 2 fails (%d failed, exit %d), nothing is "
       "written through the link", areas[0].sum.checkpoint_failures, codes[0]);

    j = tier_scenario(&cfg, top, "tierlink", "");
    harness_sh("mkdir -p '%s/tierlink.local/node1' '%s/tierlink.target' && ln -s '%s/tierlink.target' "
               "'%s/tierlink.local/node1/step-00000002.tmp'", top, top, top, top);
    run(&j, 1, 2, 2, areas, codes);
    ok(areas[0].sum.checkpoint_failures >= 1 &&
       harness_sh("test -L '%s/tierlink.local/node1/step-00000002.tmp' && test -z \"$(ls -A '%s/tierlink.target')\"",
                  top, top) == 0,
       "--ckpt-local-dir, a link planted as node1's step-00000002.tmp: the node-local save of step 2 fails (%d "
       "failed), neither node1's shards nor node0's peer copies are written through the link",
       areas[0].sum.checkpoint_failures);

    j = tier_scenario(&cfg, top, "tiergarbage", "");
    harness_sh("mkdir -p '%s/tiergarbage.local/node0/step-00000999' && echo garbage >"
               "'%s/tiergarbage.local/node0/step-00000999/manifest.json'", top, top);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 2, -1, 0) && strstr(areas[0].err, "tiergarbage.local/node0") != NULL &&
       strstr(areas[0].err, ".ckpt") == NULL,
       "a garbage step-00000999 planted in node0's local folder: every rank exits 2, naming the node-local "
       "folder, not the (empty) shared one: %s", areas[0].err);

    if (geteuid() == 0) {
        j = tier_scenario(&cfg, top, "tierstranger", "");
        harness_sh("mkdir -p '%s/tierstranger.local/node1' && chown nobody '%s/tierstranger.local/node1'", top, top);
        run(&j, 1, 2, 2, areas, codes);
        ok(all_codes(codes, 4, 2, -1, 0) &&
           strstr(areas[2].err, "tierstranger.local/node1 is not trusted: owned by uid") != NULL &&
           strstr(areas[0].err, "rank 2's node is not trusted") != NULL,
           "node1's local folder owned by nobody: every rank exits 2; node1's ranks name the folder and why (%s), "
           "the others the rank to look at (%s)", areas[2].err, areas[0].err);
    } else {
        skip("a node-local folder owned by nobody: needs root to chown");
    }

    /* ---- the restart budget spent */
    j = scenario(&cfg, top, "budget", "kill:rank=0:step=1:restart=any");
    setenv("SLURM_RESTART_COUNT", "1", 1);
    setenv("DTRAIN_MAX_RESTARTS", "1", 1);
    run(&j, 1, 2, 2, areas, codes);
    ok(all_codes(codes, 4, 1, 0, 128 + SIGKILL), "restarted once of at most 1: rank 0 killed, the others exit 1 "
       "(%d %d %d %d), not 75", codes[0], codes[1], codes[2], codes[3]);
    unsetenv("SLURM_RESTART_COUNT");
    unsetenv("DTRAIN_MAX_RESTARTS");

    if (tap_state_.failed == 0)
        harness_cleanup(top);
    else
        diag("files kept in %s", top);
    return tap_done();
}
