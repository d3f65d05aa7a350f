/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The bootstrap in a process's environment: how dtrain-launch hands every
 * communicator to a child PROGRAM, and how that program finds them again
 * (dtrain_comm_bootstrap_from_env in dtrain_comm.h reads what
 * dtrain_bootstrap_env_export writes; doc/bootstrap.md).
 *
 * For every group kind K in WORLD, TP, PP, DP, PP_NEXT, PP_PREV
 * (dtrain_group_kind_name):
 *   DTRAIN_COMM_<K>_ID      the group's bootstrap id (dtrain_bootstrap.h)
 *   DTRAIN_COMM_<K>_RANK    this task's rank in the group (0 = leader)
 *   DTRAIN_COMM_<K>_SIZE    members
 *   DTRAIN_COMM_<K>_FIRST   global rank of member 0
 *   DTRAIN_COMM_<K>_STRIDE  member i = FIRST + i * STRIDE
 *   DTRAIN_COMM_<K>_FD      leader with the cpu backend: the inherited
 *                           listening socket (FD_CLOEXEC cleared)
 * plus DTRAIN_COMM_BACKEND (cpu | nccl).  The variables of a group the task
 * does not have (PP_NEXT on the last stage...) are absent. */
#ifndef DTRAIN_BOOTSTRAP_ENV_H
#define DTRAIN_BOOTSTRAP_ENV_H

#include <stddef.h>

#include "dtrain_bootstrap.h"

/* Set the variables above in this process's environment (removing those
 * of absent groups) and let the listening sockets survive exec.  Returns
 * 0, or -1 with one line in err. */
int dtrain_bootstrap_env_export(const struct dtrain_bootstrap *bs, char *err, size_t errlen);

#endif
