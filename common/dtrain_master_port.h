/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The rendezvous ports of a job step (MASTER_PORT and the block from it),
 * from the site's range.
 *
 * The site gives the plugin a range of ports that only dtrain hands out
 * (master_ports=LO-HI, default 29500-29999; the admin keeps the kernel's
 * ephemeral ports out of it with net.ipv4.ip_local_reserved_ports).  The
 * range is cut into aligned blocks of K = ports_per_step ports (default 3:
 * Megatron-LM's in-process restart opens TCPStores on MASTER_PORT+1 and +2),
 * block b being LO+b*K .. LO+b*K+K-1; the (HI-LO+1) mod K ports past the
 * last whole block are not used.  A step's block is a pure function of its
 * job and step ids, so every node of the step computes the same one without
 * talking to the others:
 *
 *   blocks = (HI - LO + 1) / K
 *   MASTER_PORT = LO + K * ((job_id * 8 + step_id mod 8) mod blocks)
 *
 * (K = 1 is dtrain's single port of before.)  Consecutive jobs get blocks 8
 * apart and a job's first 8 steps get their own; two steps collide only
 * when their job ids are a multiple of blocks/gcd apart, which the plugin
 * detects on the first node (doc/frameworks.md).  Blocks never overlap, so
 * a step that moves moves to another whole block.  Pure code. */
#ifndef DTRAIN_MASTER_PORT_H
#define DTRAIN_MASTER_PORT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_status.h"

#define DTRAIN_MASTER_PORTS_DEFAULT_LO 29500
#define DTRAIN_MASTER_PORTS_DEFAULT_HI 29999
#define DTRAIN_PORTS_PER_STEP_DEFAULT 3 /* MASTER_PORT, +1 and +2 (Megatron-LM's in-process restart) */
#define DTRAIN_PORTS_PER_STEP_MAX 16

/* "LO-HI" (1024 <= LO <= HI <= 65535).  Returns DTRAIN_OK, or
 * DTRAIN_ERR_INPUT with one line in err naming `what` and the accepted
 * form. */
enum dtrain_status dtrain_master_ports_parse(const char *text, const char *what, int *lo, int *hi, char *err,
                                             size_t errlen);

/* Whole blocks of per_step ports in [lo, hi] (0: the range is too small). */
int dtrain_master_port_blocks(int lo, int hi, int per_step);

/* 0 when [lo, hi] holds at least one block of per_step ports; else -1 with
 * one line in err naming both keys and the fix. */
int dtrain_master_ports_check(int lo, int hi, int per_step, char *err, size_t errlen);

/* The first port (MASTER_PORT) of the block of step step_id of job job_id
 * in [lo, hi]; the range must hold a block (dtrain_master_ports_check). */
int dtrain_master_port(int lo, int hi, int per_step, uint32_t job_id, uint32_t step_id);

#endif
