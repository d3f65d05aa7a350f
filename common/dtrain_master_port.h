/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The rendezvous port of a job step (MASTER_PORT), from the site's range.
 *
 * The site gives the plugin a range of ports that only dtrain hands out
 * (master_ports=LO-HI, default 29500-29999; the admin keeps the kernel's
 * ephemeral ports out of it with net.ipv4.ip_local_reserved_ports).  A step's
 * port is a pure function of its job and step ids, so every node of the
 * step computes the same one without talking to the others:
 *
 *   port = LO + (job_id * 8 + step_id mod 8) mod (HI - LO + 1)
 *
 * Consecutive jobs get ports 8 apart and a job's first 8 steps get their
 * own; two steps collide only when their job ids are a multiple of
 * (HI-LO+1)/gcd apart, which the plugin detects on the first node and
 * refuses (doc/frameworks.md).  Pure code. */
#ifndef DTRAIN_MASTER_PORT_H
#define DTRAIN_MASTER_PORT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_status.h"

#define DTRAIN_MASTER_PORTS_DEFAULT_LO 29500
#define DTRAIN_MASTER_PORTS_DEFAULT_HI 29999

/* "LO-HI" (1024 <= LO <= HI <= 65535).  Returns DTRAIN_OK, or
 * DTRAIN_ERR_INPUT with one line in err naming `what` and the accepted
 * form. */
enum dtrain_status dtrain_master_ports_parse(const char *text, const char *what, int *lo, int *hi, char *err,
                                             size_t errlen);

/* The port of step step_id of job job_id in [lo, hi]. */
int dtrain_master_port(int lo, int hi, uint32_t job_id, uint32_t step_id);

#endif
