/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-launch --supervise: in-job restart on spare nodes.
 *
 *   #SBATCH -N2 --dtrain-spares=1 --dtrain-max-restarts=3 ...
 *   exec dtrain-launch --supervise -- srun --mpi=pmi2 --ntasks-per-node=2 dtrain-launch config.json
 *
 * In the batch script, in place of `srun ...; exec dtrain-launch
 * --job-exit $?`.  It runs the srun step on the job's nodes that are not
 * spares (spares.h: the last DTRAIN_SPARES of SLURM_JOB_NODELIST), adding
 * --nodes=K --nodelist=ACTIVE [--exclude=FAILED] right after `srun`, and
 * passes srun's stderr through, reading which node it blames.  When the
 * step ends:
 *   0, 1, 2, 3   the step's verdict: the script exits with it (job_exit.h),
 *                unless srun blamed a node (Slurm 24.11's srun exits 1 after
 *                "Node failure on NODE"): that is a fault;
 *   a fault      (75, 128 + n, other) with a node to blame, a spare for
 *                each such node (the nearest, spares.h "Which spare") and
 *                the restart budget not spent
 *                (dtrain_fault.h, in-job restarts counted in
 *                DTRAIN_INJOB_RESTARTS): says so on one line, optionally
 *                drains the failed node with a reason (--drain, as
 *                dtrain-health does), and starts the step again at once on
 *                the healthy nodes plus spares; the ranks bootstrap again
 *                through PMI2 and resume from the newest good checkpoint;
 *   otherwise    (no spare left, none that keeps the step's groups in
 *                their NVLink domain, no node to blame, the budget spent, or the
 *                supervisor itself got SIGTERM/SIGUSR1/SIGINT: the job is
 *                being stopped) the --job-exit mapping: 75 to requeue the
 *                job while the budget lasts, 1 after.
 * With spares, before the first step: a step of one task per node of the
 * job, `dtrain-launch --node-report` with DTRAIN_NODE_REPORT=1 (the plugin
 * then gives each task its node's NVLink domain and places nothing), whose
 * lines say where each node is (spares.h); under the supervisor, rank 0
 * of each step says the step's layout on stderr (spares.h).
 * Timeline events (DTRAIN_FAULT_LOG): step_start before each step,
 * step_end after it (rank -1). */
#ifndef DTRAIN_LAUNCH_SUPERVISE_H
#define DTRAIN_LAUNCH_SUPERVISE_H

/* Run program (NULL-terminated argv, program[0] must be srun) as above.
 * Returns -1 with *step_status set to the last step's status (0..255) for
 * the caller to map as --job-exit does (the fallback), or the exit code
 * itself (0 done; 2 bad input, said on one line). */
int dtrain_supervise(char **program, int drain, long *step_status);

#endif
