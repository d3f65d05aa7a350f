/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Handing the bootstrap to a child PROGRAM through its environment.
 *
 * The child gets the DTRAIN_COMM_* variables of
 * runtime/comm/bootstrap/bootstrap_env.h (doc/bootstrap.md), and loses the
 * PMI_* variables: PMI2 is finalized before the child runs, so it is no
 * PMI2 client. */
#ifndef DTRAIN_LAUNCH_HANDOFF_H
#define DTRAIN_LAUNCH_HANDOFF_H

#include <stddef.h>

#include "dtrain_bootstrap.h"
#include "dtrain_status.h"

/* Set the variables above in this process's environment and let the
 * listening sockets survive exec.  Returns DTRAIN_OK, or DTRAIN_ERR_SYSTEM
 * with one line in err. */
enum dtrain_status dtrain_handoff_export(const struct dtrain_bootstrap *bs, char *err, size_t errlen);

/* Run argv[0] with argv.  keep_alive = 0: execvp, returning only on failure.
 * keep_alive = 1 (nccl: NCCL's bootstrap root threads live in this
 * process): fork, forward SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2
 * and SIGCONT to the child, wait, and set *exit_code to its exit code (128 +
 * signal when it was killed).  Returns DTRAIN_OK when the child ran, or,
 * with one line in err, DTRAIN_ERR_INPUT when PROGRAM cannot be run,
 * DTRAIN_ERR_SYSTEM when the fork or the wait failed. */
enum dtrain_status dtrain_handoff_run(char *const argv[], int keep_alive, int *exit_code, char *err, size_t errlen);

#endif
