/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The env:// rendezvous of a placed step: MASTER_ADDR and MASTER_PORT (the
 * first port of the step's block of ports_per_step ports, DTRAIN_PORTS).
 *
 * MASTER_ADDR is the step's first node (the node of rank 0) as Slurm itself
 * reaches it: its NodeAddr from slurmstepd's configuration, else its name.
 * The block comes from the site's range (common/dtrain_master_port.h).
 * On the first node the plugin, as root in slurmstepd, claims every port of
 * the block for the step's lifetime: an exclusive lock on
 * /run/dtrain/master-port-P.lock for each port P, held until the step ends
 * (so two dtrain steps on one node can never share a port, even when they
 * start together or the site changed ports_per_step between them), and a
 * bind+listen probe of each that finds another program listening there.
 * Between the claim and the moment rank 0's stores bind the ports, nothing
 * else can take them: dtrain steps are locked out and the kernel does not
 * hand out ports of a range in net.ipv4.ip_local_reserved_ports.
 *
 * No other user can hold a claim: the folder is root's and 0700, the lock
 * files 0600, opened without following a link, and a lock file is removed
 * when its step ends.  A block with a busy port (another step's lock,
 * another program listening) is passed over for the range's next block when
 * the step may move (the caller knows whether every task will learn the
 * block it gets). */
#ifndef DTRAIN_SPANK_RENDEZVOUS_H
#define DTRAIN_SPANK_RENDEZVOUS_H

#include <stddef.h>

#include "dtrain_master_port.h"

#define DTRAIN_RDV_LOCK_DIR "/run/dtrain"

/* The first host of a Slurm host list ("node[1-4]") and its address.
 * Returns 0, or -1 with err. */
int dtrain_rdv_master_addr(const char *nodelist, char *out, size_t outlen, char *err, size_t errlen);

#define DTRAIN_RDV_ERR_MAX 512

/* A claimed block of ports: held until dtrain_rdv_release. */
struct dtrain_rdv_claim {
    int port;    /* the block's first port (MASTER_PORT), 0 none */
    int count;   /* ports in the block: port .. port+count-1 */
    int dir_fd;  /* DTRAIN_RDV_LOCK_DIR, -1 when it could not be made or opened */
    int lock_fd[DTRAIN_PORTS_PER_STEP_MAX]; /* the lock on each port's file, -1 none (no folder: the probe alone ran) */
};

/* Claim a block of per_step ports for this step (first node only): the
 * block that starts at `first`, then, when may_move, the range's next
 * blocks in turn (wrapping), until one whose every port is free: each
 * port's lock taken, then each probed.  Blocks are those of
 * dtrain_master_port (aligned on lo).  Returns 0 with c filled; -1 with
 * err saying why `first`'s block is busy when no block tried is free; -2
 * with err when something not ours is where the lock folder or a lock file
 * should be (a link, a FIFO or device, another user's or a
 * group/other-writable one).  c needs no release on failure. */
int dtrain_rdv_claim_ports(int first, int lo, int hi, int per_step, int may_move, struct dtrain_rdv_claim *c,
                           char *err, size_t errlen);

/* Give the ports back at the end of the step: remove their lock files, close. */
void dtrain_rdv_release(struct dtrain_rdv_claim *c);

#endif
