/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Drain a node through libslurm (dtrain-health, and dtrain-launch's
 * --job-exit and --supervise).
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

/* Whether name is one plain node name (letters, digits, '-', '_', '.'):
 * never a Slurm host list such as "node[1-3]" or "a,b", which slurmctld
 * would expand. */
int dtrain_plain_node_name(const char *name);

#endif
