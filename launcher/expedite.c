/* SPDX-License-Identifier: GPL-2.0-or-later */
/* How a job with Slurm's expedited requeue is brought back; see expedite.h. */
#include "expedite.h"

#include <string.h>

#include "dtrain_exit.h"
#include "dtrain_parse.h"

int dtrain_expedite_allowed(const char *env_value)
{
    return env_value == NULL || strcmp(env_value, "0") != 0;
}

enum dtrain_expedite_action dtrain_expedite_decide(int code, const struct dtrain_job_facts *f, int allowed, char *text,
                                                   size_t textlen)
{
    text[0] = '\0';
    if (code == DTRAIN_EXIT_OK || f == NULL || !f->flagged)
        return DTRAIN_EXPEDITE_NONE;
    if (f->expediting || !f->running) {
        /* Slurm requeued the job when a node of it failed (job_mgr.c: the node-failure
         * requeue sets JOB_EXPEDITING and counts as a failed epilog) */
        dtrain_snprintf(text, textlen, f->expediting ? "requeued, expedited: Slurm requeued the job itself (a node "
                        "of it failed)" : "Slurm no longer runs the job (requeued or ended): nothing asked");
        return DTRAIN_EXPEDITE_BY_SLURM;
    }
    if (code != DTRAIN_EXIT_REQUEUE) {
        dtrain_snprintf(text, textlen, "the job's requeue is turned off, so that its expedited requeue "
                        "(--requeue=expedite) neither requeues nor holds it");
        return DTRAIN_EXPEDITE_NO_REQUEUE;
    }
    if (!allowed) {
        dtrain_snprintf(text, textlen, "requeued, not expedited (the site turned dtrain's use of it off: "
                        "expedited_requeue=no): a plain requeue asked of Slurm");
        return DTRAIN_EXPEDITE_PLAIN;
    }
    if (!f->site_allows) { /* the job's flag still acts (_set_job_requeue_exit_value checks the job alone) */
        dtrain_snprintf(text, textlen, "requeued, not expedited (slurm.conf's SlurmctldParameters no longer has "
                        "enable_expedited_requeue): a plain requeue asked of Slurm");
        return DTRAIN_EXPEDITE_PLAIN;
    }
    if (f->node[0] != '\0') {
        dtrain_snprintf(text, textlen, "requeued, expedited: %.64s is out of service (drained: %.200s): the job "
                        "is pending at once, ahead of the queue, when its epilog fails", f->node, f->node_reason);
        return DTRAIN_EXPEDITE_KEEP;
    }
    dtrain_snprintf(text, textlen, "requeued, not expedited: no node of the job is out of service, and Slurm holds "
                    "an expedited job whose epilogs all pass: a plain requeue asked of Slurm");
    return DTRAIN_EXPEDITE_PLAIN;
}
