/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: status codes of the runtime's functions.
 *
 * 0 is success; the negative codes tell the caller which exit code of
 * common/dtrain_exit.h to use.  Every failing function also writes one line
 * (without a program prefix) into the caller's err buffer. */
#ifndef DTRAIN_STATUS_H
#define DTRAIN_STATUS_H

#include "dtrain_exit.h"

enum dtrain_status {
    DTRAIN_OK = 0,
    DTRAIN_ERR_INPUT = -1,  /* bad config, option, data, model or checkpoint file */
    DTRAIN_ERR_SYSTEM = -3, /* out of memory, I/O error, a failed kernel or hook */
    DTRAIN_ERR_FAULT = -4,  /* a peer of the job failed (died, timed out, aborted): requeue */
};

/* The process exit code for a status. */
static inline int dtrain_status_exit(int status)
{
    return status == DTRAIN_OK ? DTRAIN_EXIT_OK
         : status == DTRAIN_ERR_INPUT ? DTRAIN_EXIT_USAGE
         : status == DTRAIN_ERR_FAULT ? DTRAIN_EXIT_REQUEUE
         : DTRAIN_EXIT_FAILURE;
}

#endif
