/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The env:// rendezvous of a placed step: MASTER_ADDR and MASTER_PORT.
 *
 * MASTER_ADDR is the step's first node (the node of rank 0) as Slurm itself
 * reaches it: its NodeAddr from slurmstepd's configuration, else its name.
 * MASTER_PORT comes from the site's range (common/dtrain_master_port.h).
 * On the first node the plugin, as root in slurmstepd, claims the port for
 * the step's lifetime: an exclusive lock on /run/dtrain/master-port-P.lock
 * held until the step ends (so two dtrain steps on one node can never share
 * a port, even when they start together), and a bind+listen probe that
 * finds another program listening there.  Between the claim and the moment
 * rank 0's TCPStore binds the port, nothing else can take it: dtrain steps
 * are locked out and the kernel does not hand out ports of a range in
 * net.ipv4.ip_local_reserved_ports. */
#ifndef DTRAIN_SPANK_RENDEZVOUS_H
#define DTRAIN_SPANK_RENDEZVOUS_H

#include <stddef.h>

#define DTRAIN_RDV_LOCK_DIR "/run/dtrain"

/* The first host of a Slurm host list ("node[1-4]") and its address.
 * Returns 0, or -1 with err. */
int dtrain_rdv_master_addr(const char *nodelist, char *out, size_t outlen, char *err, size_t errlen);

/* Claim port for this step (first node only).  *lock_fd: the lock to keep
 * open until the step ends (-1 when none could be taken because the lock
 * folder cannot be made or opened: then only the probe ran).  Returns 0,
 * or -1 with err when another step or program holds the port, or when
 * something not ours is where the lock folder or file should be (a link,
 * a FIFO or device, another user's or a group/other-writable one). */
int dtrain_rdv_claim_port(int port, int *lock_fd, char *err, size_t errlen);

#endif
