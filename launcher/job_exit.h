/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The batch script's half of a requeue: what the script exits with once
 * its `srun ... dtrain-launch` step has ended.
 *
 *   srun --mpi=pmi2 dtrain-launch ...
 *   exec dtrain-launch --job-exit $?
 *
 * srun's status is the highest of its tasks' (128 + n for a task killed by
 * signal n).  So a step whose tasks detected a fault ends with 75, and one
 * where a task crashed or was killed with 128 + n, whatever the others
 * said.  The mapping:
 *   0, 1, 2, 3        the step's own verdict, passed on (done, internal
 *                     error, bad input, refused shape: retrying cannot help);
 *   75, > 128, other  a fault: 75 while the restart budget lasts
 *                     (dtrain_fault.h: SLURM_RESTART_COUNT against
 *                     DTRAIN_MAX_RESTARTS), so that RequeueExit=75 requeues
 *                     the job; 1 once it is spent (the job ends FAILED).
 * With `api`, a requeue is also asked of slurmctld (libslurm
 * slurm_requeue of SLURM_JOB_ID), for clusters without RequeueExit=75.
 * Every verdict but 0 is said on one line on stderr. */
#ifndef DTRAIN_LAUNCH_JOB_EXIT_H
#define DTRAIN_LAUNCH_JOB_EXIT_H

#include <stddef.h>

#include "expedite.h"

/* The exit code for step status `status` (0..255) and, in line, what is
 * printed ("" for 0).  Reads the restart variables (a malformed one is
 * bad input: 2).  Does not call Slurm. */
int dtrain_job_exit_code(long status, char *line, size_t linelen);

/* A straggler drain (dtrain_ft.h): when the checkpoint folder
 * (DTRAIN_CKPT_DIR) holds a drain request "NODE<TAB>REASON", drain NODE
 * with the reason "dtrain: REASON" (dtrain_drain_node: libslurm, bounded; needs
 * root, SlurmUser or a Slurm operator) and remove the request, so that
 * the requeued job is not placed there again.  NODE must be one plain node
 * name of the job (SLURM_JOB_NODELIST), never a host list: any other
 * request is removed and nothing drained.  Returns 0 when there was
 * none, 1 when it was handled, with one line in line saying what
 * happened (the drain, or why it failed). */
int dtrain_job_drain_request(char *line, size_t linelen);

/* Take the drain request (read it and remove it) without draining: 1 with
 * the node and the reason ("straggler: ...") filled, 0 when there is none;
 * -1 when it is unreadable, malformed or names no node of the job (see
 * above), with one line in line (it is
 * removed when it can be).  dtrain-launch --supervise restarts the step
 * in the job without that node. */
int dtrain_job_take_drain_request(char *node, size_t nodelen, char *reason, size_t reasonlen, char *line,
                                  size_t linelen);

/* For a job with Slurm's expedited requeue (sbatch --requeue=expedite;
 * expedite.h says why each): the action for the --job-exit code `code`,
 * from what slurmctld says about SLURM_JOB_ID (dtrain_job_facts, bounded)
 * and DTRAIN_EXPEDITED_REQUEUE; text gets the words the fault line ends
 * with.  DTRAIN_EXPEDITE_NONE, as before, for exit 0, outside a batch job,
 * with a Slurm without it, or (one line in warn) when slurmctld could not
 * be asked. */
enum dtrain_expedite_action dtrain_job_expedite(int code, char *text, size_t textlen, char *warn, size_t warnlen);

/* Do what the action asks of slurmctld: turn the job's requeue off
 * (NO_REQUEUE), or requeue it (PLAIN, dtrain_job_requeue); nothing for the
 * others.  Returns 0, or -1 with one line in err. */
int dtrain_job_expedite_apply(enum dtrain_expedite_action action, char *err, size_t errlen);

/* Ask slurmctld to requeue SLURM_JOB_ID.  Returns 0, or -1 with one line
 * in err. */
int dtrain_job_requeue(char *err, size_t errlen);

#endif
