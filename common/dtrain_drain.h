/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Drain a node through libslurm (dtrain-health, and dtrain-launch's
 * --job-exit and --supervise), and ask slurmctld about nodes and about a
 * job's requeue (dtrain-launch).
 *
 * The same request as `scontrol update NodeName=N State=DRAIN Reason=R`
 * (slurm_update_node), sent from a bounded child so that a slurmctld that
 * does not answer cannot hang the prolog.  libslurm finds slurmctld through
 * SLURM_CONF or /etc/slurm/slurm.conf, as scontrol does.  Needs SlurmUser
 * or root, which the prolog and epilog run as. */
#ifndef DTRAIN_DRAIN_H
#define DTRAIN_DRAIN_H

#include <stddef.h>

/* Returns 0 when slurmctld accepted the drain, or -1 with one line in err.
 * The reason sent is printable ASCII (other bytes as '?', dtrain_printable)
 * and at most 1023 bytes. */
int dtrain_drain_node(const char *node, const char *reason, int timeout_ms, char *err, size_t errlen);

/* Whether slurmctld holds the node failed: 1 when it is DOWN, FAIL or not
 * responding (slurm_load_node_single, bounded as above), 0 when not, -1
 * with one line in err when slurmctld could not be asked.  Needs no
 * privilege.  dtrain-launch --supervise believes srun's "Node failure on
 * NODE" only when slurmctld says so. */
int dtrain_node_failed(const char *node, int timeout_ms, char *err, size_t errlen);

/* The prefix of the reasons dtrain-launch drains a node with (--supervise
 * --drain: "dtrain: job J: srun: error: ..."): a node it blamed for a
 * task's end, not one that a health check found broken. */
#define DTRAIN_DRAIN_JOB_REASON "dtrain: job "

/* What slurmctld says about a batch job for Slurm's expedited requeue
 * (sbatch --requeue=expedite, Slurm 25.11 and later; dtrain-launch
 * --job-exit decides with it: launcher/expedite.h). */
struct dtrain_job_facts {
    int site_allows; /* SlurmctldParameters has enable_expedited_requeue */
    int flagged;     /* the job has EXPEDITED_REQUEUE (scontrol: ExpeditedRequeue=Yes) */
    int running;     /* its JobState is RUNNING: Slurm has not requeued it */
    int expediting;  /* JOB_EXPEDITING: Slurm requeues it, expedited (a node of it failed) */
    /* The first node of the job's allocation that slurmctld holds drained
     * or draining, with a reason not of DTRAIN_DRAIN_JOB_REASON ("" none):
     * out of service since the job started (a health check, Slurm, an
     * admin). */
    char node[64];
    char node_reason[256];
};

/* Fill f for job `job`: slurm_load_ctl_conf, slurm_load_job and
 * slurm_load_node in a bounded child, as above.  Returns 0; 1 when this
 * build's Slurm has no expedited requeue (configure:
 * DTRAIN_SLURM_EXPEDITED_REQUEUE), f all zero and nothing asked; -1 with
 * one line in err when slurmctld could not be asked or knows no such job.
 * Needs no privilege. */
int dtrain_job_facts(long job, int timeout_ms, struct dtrain_job_facts *f, char *err, size_t errlen);

/* Turn job `job`'s requeue off, as `scontrol update JobId=J Requeue=0`
 * (slurm_update_job, bounded): Slurm then neither requeues it on its exit
 * code (RequeueExit, the expedited requeue) nor through slurm_requeue.  The
 * job's owner may do it while the job runs.  Returns 0, or -1 with one line
 * in err. */
int dtrain_job_no_requeue(long job, int timeout_ms, char *err, size_t errlen);

/* Whether name is one plain node name (letters, digits, '-', '_', '.'):
 * never a Slurm host list such as "node[1-3]" or "a,b", which slurmctld
 * would expand. */
int dtrain_plain_node_name(const char *name);

#endif
