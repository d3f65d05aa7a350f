/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fault injection's hooks into a run: the step faults armed at each step
 * and carried into the trainer's step, the checkpoint faults; see
 * dtrain_inject.h.  (Apart from dtrain_inject.c, which parses the specs
 * and is fuzzed alone.) */
#include "dtrain_inject.h"
#include "dtrain_fault.h"
#include "dtrain_parse.h"
#include "dtrain_shard_ckpt.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

void dtrain_inject_run_init(struct dtrain_inject_run *r, const struct dtrain_inject *spec, int rank, long restart,
                            const char *prog, struct dtrain_fault *fault)
{
    *r = (struct dtrain_inject_run){.spec = *spec, .rank = rank, .restart = restart, .prog = prog, .fault = fault,
                                    .nan_armed = -1};
}

void dtrain_inject_step_begin(struct dtrain_inject_run *r, long step)
{
    const struct dtrain_inject_fault *nan = dtrain_inject_find(&r->spec, DTRAIN_INJECT_NAN, r->rank, step, r->restart);
    if (nan != NULL && step > r->nan_armed) {
        r->nan_left = nan->count;
        r->nan_armed = step;
    }
    r->poison = r->nan_left > 0;
    r->hang = 0;
    r->delay_ms = dtrain_inject_delay_ms(&r->spec, r->rank, step, r->restart);
    if (dtrain_inject_due(&r->spec, DTRAIN_INJECT_KILL, r->rank, step, r->restart)) {
        fprintf(stderr, "%s: inject: rank %d kills itself (SIGKILL) at step %ld\n", r->prog, r->rank, step);
        fflush(NULL);
        dtrain_fault_event(r->fault, "inject", step, "kill");
        raise(SIGKILL);
    }
    if (dtrain_inject_due(&r->spec, DTRAIN_INJECT_HANG, r->rank, step, r->restart)) {
        fprintf(stderr, "%s: inject: rank %d hangs in the first forward of step %ld\n", r->prog, r->rank, step);
        fflush(NULL);
        dtrain_fault_event(r->fault, "inject", step, "hang");
        r->hang = 1;
    }
    if (r->poison) {
        r->nan_left--;
        fprintf(stderr, "%s: inject: rank %d's loss is NaN at step %ld\n", r->prog, r->rank, step);
        dtrain_fault_event(r->fault, "inject", step, "nan");
    }
}

static void first_forward(void *ctx)
{
    const struct dtrain_inject_run *r = ctx;
    if (r->delay_ms > 0)
        usleep((useconds_t)(r->delay_ms * 1000));
    while (r->hang)
        sleep(3600); /* deaf to signals but SIGKILL: the watchdog or Slurm must end it */
}

static int poison_loss(void *ctx)
{
    const struct dtrain_inject_run *r = ctx;
    return r->poison;
}

struct dtrain_inject_hooks dtrain_inject_hooks_of(struct dtrain_inject_run *r)
{
    return (struct dtrain_inject_hooks){first_forward, poison_loss, r};
}

int dtrain_inject_ckpt_nospace(const struct dtrain_inject_run *r, long step)
{
    if (!dtrain_inject_due(&r->spec, DTRAIN_INJECT_NOSPACE, r->rank, step, r->restart))
        return 0;
    fprintf(stderr, "%s: inject: rank %d fails its checkpoint write of step %ld (no space)\n", r->prog, r->rank,
            step);
    dtrain_fault_event(r->fault, "inject", step, "nospace");
    return 1;
}

long dtrain_inject_ckpt_slow_ms(const struct dtrain_inject_run *r, long step)
{
    long slow = dtrain_inject_ms(&r->spec, DTRAIN_INJECT_SLOWCKPT, r->rank, step, r->restart);
    if (slow > 0) {
        fprintf(stderr, "%s: inject: rank %d's write of the checkpoint of step %ld waits %ld ms\n",
                r->prog, r->rank, step, slow);
        dtrain_fault_event(r->fault, "inject", step, "slowckpt");
    }
    return slow;
}

long dtrain_inject_load_slow_ms(const struct dtrain_inject_run *r, long at)
{
    long slow = dtrain_inject_ms(&r->spec, DTRAIN_INJECT_SLOWLOAD, r->rank, -1, r->restart);
    if (slow > 0) {
        fprintf(stderr, "%s: inject: rank %d's reads of the checkpoint to load wait %ld ms\n", r->prog, r->rank, slow);
        dtrain_fault_event(r->fault, "inject", at, "slowload");
    }
    return slow;
}

void dtrain_inject_corruption(const struct dtrain_inject_run *r, const char *dir)
{
    char path[DTRAIN_PATH_MAX], why[512];
    uint64_t newest;
    if (!dtrain_inject_due(&r->spec, DTRAIN_INJECT_CORRUPT, r->rank, 0, r->restart) ||
        dtrain_sckpt_list(dir, &newest, 1, why, sizeof why) < 1)
        return;
    if (dtrain_snprintf(path, sizeof path, "%s/step-%08" PRIu64 "/shard-%05d.bin", dir, newest, r->rank) != 0 ||
        dtrain_inject_corrupt_file(path, why, sizeof why) != 0) {
        fprintf(stderr, "%s: inject: rank %d: %s\n", r->prog, r->rank, why);
        return;
    }
    fprintf(stderr, "%s: inject: rank %d corrupted %s\n", r->prog, r->rank, path);
    dtrain_fault_event(r->fault, "inject", (long)newest, "corrupt");
}
