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

#endif
