/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cause a comm call failed with, as the tests assert it: every call
 * returns enum dtrain_status and keeps its cause (dtrain_comm.h).  These
 * give the cause only when the status agrees with it (DTRAIN_OK for OK;
 * DTRAIN_ERR_FAULT for ETIMEDOUT, EPEER, EABORTED, ESYS; DTRAIN_ERR_SYSTEM
 * for the others), else -1, which no test expects: an assertion on the
 * cause checks the status too. */
#ifndef DTRAIN_TESTS_COMM_CAUSE_H
#define DTRAIN_TESTS_COMM_CAUSE_H

#include "dtrain_comm.h"

static inline int comm_cause_checked(int status, int cause)
{
    int want = cause == DTRAIN_COMM_OK ? DTRAIN_OK
             : cause == DTRAIN_COMM_ETIMEDOUT || cause == DTRAIN_COMM_EPEER || cause == DTRAIN_COMM_EABORTED ||
                       cause == DTRAIN_COMM_ESYS
                 ? DTRAIN_ERR_FAULT
                 : DTRAIN_ERR_SYSTEM;
    return status == want ? cause : -1;
}

/* A call on c that returned status. */
static inline int comm_cause_of(const dtrain_comm *c, int status)
{
    return comm_cause_checked(status, dtrain_comm_cause(c));
}

/* dtrain_comm_get_async_error: the cause of its record. */
static inline int comm_async_cause(dtrain_comm *c, struct dtrain_comm_error *e)
{
    int status = dtrain_comm_get_async_error(c, e);
    return comm_cause_checked(status, e->cause);
}

#endif
