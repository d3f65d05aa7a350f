/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A stand-in for srun + PMI2 on one host, for the tests and benchmarks of
 * the parallel trainer: each rank's struct dtrain_bootstrap built the way
 * dtrain-launch's exchange builds it (launcher/groups.h for the groups,
 * runtime/comm/bootstrap/bootstrap_id.h for the cpu ids: every leader's listening socket
 * on 127.0.0.1), then the ranks forked from this process.  Only the id
 * distribution is stood in for; the communicators are the real comm layer's
 * (shared memory and TCP on this host). */
#ifndef DTRAIN_TEST_LOCAL_BOOT_H
#define DTRAIN_TEST_LOCAL_BOOT_H

#include <stddef.h>

#include "dtrain_bootstrap.h"
#include "dtrain_comm.h"

#define LOCAL_BOOT_MAX_WORLD 16

/* The code a rank runs: its bootstrap (listening sockets of the groups it
 * leads still open), a shared result area (result_bytes, zeroed, visible to
 * the parent after the rank ends) and ctx.  Returns the rank's exit code. */
typedef int (*local_boot_rank_fn)(struct dtrain_bootstrap *bs, void *result, void *ctx);

/* Fork T*P*D ranks (<= LOCAL_BOOT_MAX_WORLD) running fn; wait for them at
 * most timeout_s seconds (then kill them).  results receives each rank's
 * result area (world * result_bytes, may be NULL when result_bytes is 0)
 * and codes each rank's exit code (128 + signal when killed; -1 when it
 * did not end in time).  Returns 0 when every rank ended with 0, else -1
 * with one line in err. */
int local_boot_run(int tp, int pp, int dp, local_boot_rank_fn fn, void *ctx, size_t result_bytes,
                   void *results, int *codes, int timeout_s, char *err, size_t errlen);

/* The same on a comm backend of choice: DTRAIN_COMM_NCCL makes the ids
 * with ncclGetUniqueId (TP, PP and DP split off WORLD, as dtrain-launch
 * --comm-backend nccl does); each rank then picks its own GPU. */
int local_boot_run_backend(enum dtrain_comm_backend backend, int tp, int pp, int dp, local_boot_rank_fn fn,
                           void *ctx, size_t result_bytes, void *results, int *codes, int timeout_s, char *err,
                           size_t errlen);

/* Inside a rank: every communicator of bs (dtrain_comm_init_all with a
 * timeout of timeout_ms and TCP between ranks when tcp is set; its cause
 * into *cause when not NULL). */
int local_boot_comms(struct dtrain_bootstrap *bs, int timeout_ms, int tcp, struct dtrain_comms *out,
                     enum dtrain_comm_cause *cause, char *err, size_t errlen);

#endif
