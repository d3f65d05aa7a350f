/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain: the one status vocabulary of the parts' functions (topo, the
 * kernels, the launcher, common and the runtime).
 *
 * 0 is success; a negative code says what kind of failure it was, which is
 * all a caller needs to decide (and what dtrain_status_exit maps to the exit
 * code of common/dtrain_exit.h).  The cause's detail is the one line (without
 * a program prefix) every failing function writes into the caller's err
 * buffer. */
#ifndef DTRAIN_STATUS_H
#define DTRAIN_STATUS_H

#include "dtrain_exit.h"

enum dtrain_status {
    DTRAIN_OK = 0,
    /* bad config, option, data, model, checkpoint or topology file; a
     * program not started as it must be (no PMI2 environment) */
    DTRAIN_ERR_INPUT = -1,
    DTRAIN_ERR_REFUSED = -2, /* the job shape cannot be placed on these nodes */
    DTRAIN_ERR_SYSTEM = -3,  /* out of memory, I/O error, a failed kernel, hook or library call */
    DTRAIN_ERR_FAULT = -4,   /* a peer of the job failed (died, timed out, aborted; the PMI2 fence): requeue */
};

/* The process exit code for a status: the one mapping every program uses. */
static inline int dtrain_status_exit(int status)
{
    return status == DTRAIN_OK ? DTRAIN_EXIT_OK
         : status == DTRAIN_ERR_INPUT ? DTRAIN_EXIT_USAGE
         : status == DTRAIN_ERR_REFUSED ? DTRAIN_EXIT_REFUSED
         : status == DTRAIN_ERR_FAULT ? DTRAIN_EXIT_REQUEUE
         : DTRAIN_EXIT_FAILURE;
}

/* The goto-cleanup style: run call, keep its status in rc, and go to label
 * when it failed (NCCL's NCCLCHECKGOTO).
 *
 *     enum dtrain_status rc;
 *     DTRAIN_CHECK_GOTO(dtrain_topo_load_xml(path, &topo, err, errlen), rc, out);
 *     ...
 * out:
 *     dtrain_topo_free(topo);
 *     return rc; */
#define DTRAIN_CHECK_GOTO(call, rc, label) \
    do {                                   \
        (rc) = (call);                     \
        if ((rc) != DTRAIN_OK)             \
            goto label;                    \
    } while (0)

#endif
