/* libdtrain, internal: what the parallel trainer's modules share about the
 * comm layer (runtime/comm/dtrain_comm.h): a comm result as a dtrain_status,
 * and exact-order sums of doubles (the comm layer reduces floats). */
#ifndef DTRAIN_PCOMM_H
#define DTRAIN_PCOMM_H

#include <stddef.h>

#include "dtrain_comm.h"
#include "dtrain_status.h"

/* DTRAIN_OK for DTRAIN_COMM_OK.  Otherwise one line "WHAT: <the comm's
 * first error>" in err and DTRAIN_ERR_FAULT when a peer or the machine let
 * the job down (timeout, dead peer, abort, a failed system call: requeue),
 * DTRAIN_ERR_SYSTEM for a mismatch or a bad argument (a bug here). */
int dtrain_pcomm_status(dtrain_comm *c, int rc, const char *what, char *err, size_t errlen);

/* out[i] = sum over the members of their in[i] (i < n, 1 <= n <= 8, the
 * same n on every member), added in member order, in double, on every
 * member: all get the same bits.  A collective over c. */
int dtrain_pcomm_sum_doubles(dtrain_comm *c, const double *in, double *out, int n,
                             const char *what, char *err, size_t errlen);

#endif
