/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: the nvidia-imex daemon's state, in a bounded child.
 *
 * A node of a multi-node NVLink domain (GB200 NVL72) shares GPU memory
 * with the other nodes only through NVIDIA's IMEX service, the nvidia-imex
 * daemon.  Its state is read the way NVIDIA documents (IMEX guide, "IMEX
 * Service Command Service"): `nvidia-imex-ctl -q` asks the local daemon
 * through its command service (IMEX_CMD_ENABLED=1 in
 * /etc/nvidia-imex/config.cfg) and prints one word, the daemon's state;
 * NVIDIA's DCGM (DcgmImexManager.h, the IMEX fields of dcgm_fields.h) names
 * them: INITIALIZING, STARTING_AUTH_SERVER, WAITING_FOR_PEERS,
 * WAITING_FOR_RECOVERY, INIT_GPU, READY, SHUTTING_DOWN, UNAVAILABLE.  READY
 * is the one a job can use.  A daemon that is not running does not answer:
 * the program then fails (its exact words are not documented, so nothing
 * depends on them).
 *
 * The program is the config's checks.imex.ctl (an admin's path), checked
 * as the config is (common/dtrain_file.h: as root no link and root's
 * folders and file) and run without a shell, with stdin from /dev/null, a
 * fixed PATH and nothing else of the caller's environment.  Its first line
 * of output (stdout and stderr together) is kept as printable ASCII.  The
 * child runs in the probe's process group, so a hung program is killed
 * with the probe (timeouts_ms.imex).  Tests stand a script in for the
 * program (tests/health/fake-nvidia-imex-ctl), as fake_nvml.so stands in
 * for NVML. */
#ifndef DTRAIN_HEALTH_IMEX_H
#define DTRAIN_HEALTH_IMEX_H

#include "dtrain_bounded.h"
#include "facts.h"

/* 1 when word is one of the daemon states NVIDIA's tools name. */
int health_imex_known_state(const char *word);

/* Start `ctl -q` (ctl must stay valid until the wait);
 * dtrain_probe_wait_all() completes it. */
void health_imex_start(const char *ctl, int timeout_ms, struct health_imex_facts *out, struct dtrain_probe *probe);

/* Start and wait. */
void health_imex_probe(const char *ctl, int timeout_ms, struct health_imex_facts *out);

#endif
