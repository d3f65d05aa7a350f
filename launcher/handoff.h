/* Handing the bootstrap to a child PROGRAM through its environment.
 *
 * For every group kind K in WORLD, TP, PP, DP, PP_NEXT, PP_PREV the child
 * gets (doc/bootstrap.md):
 *   DTRAIN_COMM_<K>_ID      the group's bootstrap id (dtrain_bootstrap.h)
 *   DTRAIN_COMM_<K>_RANK    this task's rank in the group (0 = leader)
 *   DTRAIN_COMM_<K>_SIZE    members
 *   DTRAIN_COMM_<K>_FIRST   global rank of member 0
 *   DTRAIN_COMM_<K>_STRIDE  member i = FIRST + i * STRIDE
 *   DTRAIN_COMM_<K>_FD      leader with the cpu backend: the inherited
 *                           listening socket (FD_CLOEXEC cleared)
 * plus DTRAIN_COMM_BACKEND (cpu | nccl).  Variables of a group the task does
 * not have (PP_NEXT on the last stage...) are removed, as are the PMI_*
 * variables: PMI2 is finalized before the child runs, so it is no PMI2
 * client. */
#ifndef DTRAIN_LAUNCH_HANDOFF_H
#define DTRAIN_LAUNCH_HANDOFF_H

#include <stddef.h>

#include "dtrain_bootstrap.h"

/* Set the variables above in this process's environment and let the
 * listening sockets survive exec.  Returns 0, or -1 with one line in err. */
int dtrain_handoff_export(const struct dtrain_bootstrap *bs, char *err, size_t errlen);

/* Run argv[0] with argv.  keep_alive = 0: execvp, returning only on failure.
 * keep_alive = 1 (nccl: NCCL's bootstrap root threads live in this
 * process): fork, forward SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2
 * and SIGCONT to the child, wait, and set *exit_code to its exit code (128 +
 * signal when it was killed).  Returns 0 when the child ran, or -1 with one
 * line in err and *exit_code set (2 when PROGRAM cannot be run, else 1). */
int dtrain_handoff_run(char *const argv[], int keep_alive, int *exit_code, char *err, size_t errlen);

#endif
