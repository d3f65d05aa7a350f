/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: InfiniBand ports from sysfs, in a bounded child.
 *
 * Reads <sysfs_root>/class/infiniband/<device>/ports/<n>/{state,phys_state,rate}
 * as the kernel writes them ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)").
 * The root is a parameter so that tests (and admins trying a config) can
 * point it at a folder tree shaped like /sys. */
#ifndef DTRAIN_HEALTH_IB_H
#define DTRAIN_HEALTH_IB_H

#include "dtrain_bounded.h"
#include "facts.h"
#include "site_config.h"

/* Start reading: with nports > 0 those ports (a missing one has present =
 * 0), with nports == 0 every port of every device found.
 * dtrain_probe_wait_all() completes it. */
void health_ib_start(const char *sysfs_root, const struct health_ib_port_spec *ports, int nports,
                     int timeout_ms, struct health_ib_facts *out, struct dtrain_probe *probe);

/* Start and wait. */
void health_ib_probe(const char *sysfs_root, const struct health_ib_port_spec *ports, int nports,
                     int timeout_ms, struct health_ib_facts *out);

#endif
