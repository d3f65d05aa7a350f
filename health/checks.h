/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: judging the probed facts against the site config.
 *
 * One function per check (checks.c); each reads only the facts and the
 * config, never the machine, and gives pass, fail or skip with one line of
 * detail.  A failure's detail is what the node's drain reason says, so it
 * names the GPU (by PCI bus id), the value found and the value expected.
 *
 * Which checks run in which mode:
 *
 *   check            prolog epilog check   needs
 *   gpu_count          x      x      x     topology (+ NVML when loaded)
 *   gpu_model          x      x      x     topology or NVML, gpus.model
 *   nvlink             x      x      x     topology (+ NVML for active links)
 *   nvml               x      x      x     NVML
 *   ecc                x      x      x     NVML
 *   retired_memory     x      x      x     NVML
 *   xid                x      x      x     NVML
 *   nvlink_errors      x      x      x     NVML
 *   gpu_memory         x      x            NVML   (jobs own the GPUs while running)
 *   gpu_processes             x            NVML   (leftovers of the job just ended)
 *   checkpoint_fs      x      x      x     statvfs
 *   shm                x      x            statvfs (jobs fill /dev/shm while running)
 *   infiniband         x      x      x     sysfs
 *   imex               x      x      x     NVML (the fabric), nvidia-imex-ctl -q:
 *                                          skipped on nodes without a multi-node
 *                                          NVLink fabric unless imex.always
 *
 * When a probe could not look (a hung NVML, an unreadable topology), the
 * first check that needs it fails with the reason and the others that need
 * it are skipped, so one fault gives one line. */
#ifndef DTRAIN_HEALTH_CHECKS_H
#define DTRAIN_HEALTH_CHECKS_H

#include "site_config.h"
#include "facts.h"

enum health_mode {
    HEALTH_MODE_PROLOG,  /* before a job: Slurm's Prolog */
    HEALTH_MODE_EPILOG,  /* after a job: Slurm's Epilog */
    HEALTH_MODE_CHECK,   /* any time: HealthCheckProgram, NHC, by hand */
};

const char *health_mode_name(enum health_mode mode); /* "prolog", "epilog", "check" */

/* 1 when the check runs in this mode (the table above). */
int health_check_in_mode(enum health_check_id id, enum health_mode mode);

/* 1 when the check is enabled in cfg and runs in this mode. */
int health_check_wanted(const struct health_config *cfg, enum health_check_id id, enum health_mode mode);

enum health_outcome { HEALTH_PASS, HEALTH_FAIL, HEALTH_SKIP };

const char *health_outcome_name(enum health_outcome outcome); /* "pass", "fail", "skip" */

#define HEALTH_DETAIL_LEN 512

struct health_result {
    enum health_check_id id;
    enum health_outcome outcome;
    char detail[HEALTH_DETAIL_LEN]; /* "GPU 0000:07:00.0: XID 79" */
};

/* What the probes found; a NULL member means that probe did not run. */
struct health_facts {
    const struct health_topo_facts *topo;
    const struct health_nvml_facts *nvml;
    const struct health_fs_facts *checkpoint_fs;
    const struct health_fs_facts *shm;
    const struct health_ib_facts *ib;
    const struct health_imex_facts *imex;
};

/* 1 when NVML reports a multi-node NVLink fabric for one of the node's
 * GPUs (the imex check runs there). */
int health_imex_node_in_domain(const struct health_facts *facts);

/* GPUs the node should have: gpus.count when given, else the NVIDIA GPUs
 * of the topology (0 when it could not be read). */
int health_expected_gpus(const struct health_config *cfg, const struct health_facts *facts);

/* Judge one check. */
void health_check_judge(enum health_check_id id, const struct health_config *cfg, enum health_mode mode,
                        const struct health_facts *facts, struct health_result *out);

#endif
