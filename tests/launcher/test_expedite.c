/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of launcher/expedite.c: what dtrain-launch --job-exit does
 * with a job that has Slurm's expedited requeue (sbatch
 * --requeue=expedite), for each exit code and what slurmctld says about
 * the job; the same decisions run against Slurm 26.05 in
 * tests/fault/expedite.sh. */
#include <string.h>

#include "dtrain_exit.h"
#include "expedite.h"
#include "tap.h"

static void test_allowed(void)
{
    ok(dtrain_expedite_allowed(NULL) && dtrain_expedite_allowed("1") && dtrain_expedite_allowed("") &&
           !dtrain_expedite_allowed("0"),
       "DTRAIN_EXPEDITED_REQUEUE: only 0 turns dtrain's use off");
}

static void test_decide(void)
{
    char text[512];
    struct dtrain_job_facts plain = {.site_allows = 1, .running = 1};
    struct dtrain_job_facts flagged = {.site_allows = 1, .flagged = 1, .running = 1};
    struct dtrain_job_facts drained = flagged;
    strcpy(drained.node, "node2");
    strcpy(drained.node_reason, "dtrain: xid: GPU 0000:0b:00.0: XID 79");

    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &plain, 1, text, sizeof text) == DTRAIN_EXPEDITE_NONE &&
           text[0] == '\0' &&
           dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, NULL, 1, text, sizeof text) == DTRAIN_EXPEDITE_NONE,
       "a job without --requeue=expedite (or unknown facts): as before, nothing said");
    ok(dtrain_expedite_decide(DTRAIN_EXIT_OK, &drained, 1, text, sizeof text) == DTRAIN_EXPEDITE_NONE,
       "exit 0: nothing to do");
    for (int code = DTRAIN_EXIT_FAILURE; code <= DTRAIN_EXIT_REFUSED; code++)
        ok(dtrain_expedite_decide(code, &drained, 1, text, sizeof text) == DTRAIN_EXPEDITE_NO_REQUEUE &&
               strstr(text, "requeue is turned off"),
           "exit %d (a verdict, or the budget spent): the job's requeue turned off, even with a drained node (%s)",
           code, text);
    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &drained, 1, text, sizeof text) == DTRAIN_EXPEDITE_KEEP &&
           strstr(text, "requeued, expedited: node2 is out of service (drained: dtrain: xid:"),
       "a fault, a node of the job drained: the expedite kept (%s)", text);
    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &flagged, 1, text, sizeof text) == DTRAIN_EXPEDITE_PLAIN &&
           strstr(text, "requeued, not expedited: no node of the job is out of service"),
       "a fault, no node out of service: a plain requeue (%s)", text);
    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &drained, 0, text, sizeof text) == DTRAIN_EXPEDITE_PLAIN &&
           strstr(text, "expedited_requeue=no"),
       "the site turned it off: a plain requeue even with a drained node (%s)", text);
    struct dtrain_job_facts disabled = drained;
    disabled.site_allows = 0;
    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &disabled, 1, text, sizeof text) == DTRAIN_EXPEDITE_PLAIN &&
           strstr(text, "no longer has enable_expedited_requeue") &&
           dtrain_expedite_decide(DTRAIN_EXIT_USAGE, &disabled, 1, text, sizeof text) == DTRAIN_EXPEDITE_NO_REQUEUE,
       "slurm.conf no longer enables it, the job has the flag: a plain requeue, the verdicts' requeue off (%s)", text);
    struct dtrain_job_facts by_slurm = flagged;
    by_slurm.running = 0;
    by_slurm.expediting = 1;
    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &by_slurm, 1, text, sizeof text) == DTRAIN_EXPEDITE_BY_SLURM &&
           strstr(text, "Slurm requeued the job itself") &&
           dtrain_expedite_decide(DTRAIN_EXIT_USAGE, &by_slurm, 1, text, sizeof text) == DTRAIN_EXPEDITE_BY_SLURM,
       "Slurm requeues the job already (a node failed): nothing asked, whatever the code (%s)", text);
    by_slurm.expediting = 0;
    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &by_slurm, 1, text, sizeof text) == DTRAIN_EXPEDITE_BY_SLURM &&
           strstr(text, "no longer runs the job"),
       "the job no longer runs (requeued or ended by Slurm): nothing asked (%s)", text);
    ok(dtrain_expedite_decide(DTRAIN_EXIT_REQUEUE, &drained, 1, text, 24) == DTRAIN_EXPEDITE_KEEP &&
           strlen(text) == 23, "the words are cut to the buffer");
}

int main(void)
{
    test_allowed();
    test_decide();
    return tap_done();
}
