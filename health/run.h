/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: one run, from the config to the verdict.
 *
 * Decides which probes the wanted checks need (checks.h lists the checks
 * per mode), runs each probe bounded in time, then judges every wanted
 * check.  In the epilog, GPU processes still exiting get the configured
 * grace period before they count as left over. */
#ifndef DTRAIN_HEALTH_RUN_H
#define DTRAIN_HEALTH_RUN_H

#include "checks.h"
#include "site_config.h"

struct health_report {
    enum health_mode mode;
    int nresults;                                   /* the wanted checks, in table order */
    struct health_result results[HEALTH_CHECK_COUNT];
    int failed;                                     /* results with HEALTH_FAIL */
    /* Wall time of each probe and of the whole run, in milliseconds
     * (-1: the probe did not run). */
    double topology_ms, nvml_ms, filesystem_ms, infiniband_ms, imex_ms, total_ms;
};

/* Run the checks.  Returns 0 with *out filled (out->failed says whether
 * the node is healthy), or -1 with one line in err when the run itself
 * could not be done (out of memory). */
int health_run(const struct health_config *cfg, enum health_mode mode, struct health_report *out,
               char *err, size_t errlen);

#endif
