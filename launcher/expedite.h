/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-launch --job-exit (and --supervise's fallback) with Slurm's
 * expedited requeue: how a job submitted with `sbatch --requeue=expedite`
 * (Slurm 25.11 and later, SlurmctldParameters=enable_expedited_requeue) is
 * brought back, or not.
 *
 * What Slurm does with such a job (Slurm 26.05, src/slurmctld/job_mgr.c):
 * any non-zero exit of the batch script, checked before RequeueExit
 * (_set_job_requeue_exit_value), requeues it as JOB_REQUEUE|JOB_EXPEDITING;
 * after its epilogs (batch_requeue_fini) it is pending at once (begin_time
 * 0) and sorted before every other job when an epilog failed (its node is
 * drained "Epilog error") or a node of it failed, and HELD ("job requeued
 * in held state", priority 0) when no epilog failed.  An explicit requeue
 * (slurm_requeue) is not expedited: never held, and with the job's
 * EXPEDITED_REQUEUE flag still eligible at once (begin_time 0, no
 * requeue_delay).  The flag itself cannot be cleared (update_job never
 * writes a job's bit_flags); Requeue=0 (details->requeue) turns every
 * requeue off, the expedited one too.
 *
 * So dtrain decides, once the step has ended (code: the --job-exit
 * mapping, job_exit.h):
 *   0                 nothing (Slurm requeues no exit 0);
 *   1, 2, 3           a verdict retrying cannot change (or the restart
 *                     budget spent): the job's requeue is turned off, so
 *                     it ends FAILED, never requeued nor held;
 *   75, a node of the job out of service (slurmctld holds it drained,
 *                     by a health check, Slurm or an admin, not by
 *                     dtrain-launch for a task's end): exit 75 and let
 *                     Slurm expedite: that node's epilog is expected to
 *                     fail (dtrain-health --epilog on a broken GPU);
 *   75 otherwise      (a crashed or killed rank, a hang, a timeout on
 *                     healthy nodes: no epilog will fail) a plain requeue
 *                     asked of slurmctld before exiting, so the job is not
 *                     held; also for every fault when the site turned
 *                     dtrain's use off (DTRAIN_EXPEDITED_REQUEUE=0, from
 *                     the plugin's site key expedited_requeue=no) or
 *                     slurm.conf no longer enables it (the job's flag
 *                     acts all the same);
 *   Slurm requeues it already (a node failed while it ran: JOB_EXPEDITING,
 *                     or it is no longer running): nothing is asked.
 * A job without the flag is left as before (RequeueExit=75).
 *
 * Pure code: no Slurm calls (common/dtrain_drain.h gathers the facts). */
#ifndef DTRAIN_LAUNCH_EXPEDITE_H
#define DTRAIN_LAUNCH_EXPEDITE_H

#include <stddef.h>

#include "dtrain_drain.h"

enum dtrain_expedite_action {
    DTRAIN_EXPEDITE_NONE,       /* not an expedited job, or exit 0: as before */
    DTRAIN_EXPEDITE_NO_REQUEUE, /* turn the job's requeue off (Requeue=0): it ends FAILED */
    DTRAIN_EXPEDITE_KEEP,       /* exit 75: Slurm requeues it expedited */
    DTRAIN_EXPEDITE_PLAIN,      /* ask slurmctld for a plain requeue (slurm_requeue), then exit 75 */
    DTRAIN_EXPEDITE_BY_SLURM,   /* Slurm has requeued (or ended) the job already: ask nothing */
};

/* Whether dtrain may keep an expedited requeue: the value of
 * DTRAIN_EXPEDITED_REQUEUE (dtrain_env.h; NULL: unset) is not "0". */
int dtrain_expedite_allowed(const char *env_value);

/* The action for the --job-exit code `code` (0, 1, 2, 3 or 75) of a job
 * with facts f (NULL: unknown, as without the flag) where `allowed` says
 * whether dtrain may keep the expedite; text gets the words the fault line
 * ends with ("" for NONE). */
enum dtrain_expedite_action dtrain_expedite_decide(int code, const struct dtrain_job_facts *f, int allowed, char *text,
                                                   size_t textlen);

#endif
