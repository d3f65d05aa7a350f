/* SPDX-License-Identifier: GPL-2.0-or-later */
/* CPU lists in hwloc/Linux list syntax ("0-15,64-79") and binding a task to
 * the part of such a list that exists for it.
 *
 * A saved topology may describe more CPUs than the machine has (a test node
 * that claims 32 CPUs on a 2-CPU machine), and Slurm may already restrict a
 * task to some CPUs: the task is bound to the listed CPUs that it is allowed
 * to use now, and never failed for the rest. */
#ifndef DTRAIN_SPANK_CPUBIND_H
#define DTRAIN_SPANK_CPUBIND_H

#include <sched.h>
#include <stddef.h>

#define DTRAIN_CPU_MAX 8192 /* CPU numbers at or above this are refused */

/* Parse text into set (allocated with CPU_ALLOC(DTRAIN_CPU_MAX), cleared
 * first).  Returns 0, or -1 with err on a malformed list. */
int dtrain_cpulist_parse(const char *text, cpu_set_t *set, char *err, size_t errlen);

/* Format set (size CPU_ALLOC_SIZE(DTRAIN_CPU_MAX)) as a list.  Returns 0, or
 * -1 when it does not fit in len. */
int dtrain_cpulist_format(const cpu_set_t *set, char *buf, size_t len);

/* How many CPUs cpulist names (*listed) and how many of them the calling
 * process may use now (*usable).  0, or -1 with err. */
int dtrain_cpulist_usable(const char *cpulist, int *listed, int *usable, char *err, size_t errlen);

/* The calling process's allowed CPUs as a list.  0, or -1. */
int dtrain_cpus_allowed(char *buf, size_t len);

enum dtrain_bind_result {
    DTRAIN_BIND_ALL = 0,   /* bound to every listed CPU */
    DTRAIN_BIND_PART,      /* bound to the listed CPUs that exist; others ignored */
    DTRAIN_BIND_NONE,      /* none of the listed CPUs is usable: left unbound */
    DTRAIN_BIND_ERROR = -1 /* malformed list or a failing system call (err says) */
};

/* Bind the calling process to cpulist intersected with its current
 * affinity.  bound receives the list it is bound to ("" when unbound). */
enum dtrain_bind_result dtrain_bind_to_cpulist(const char *cpulist, char *bound, size_t boundlen,
                                               char *err, size_t errlen);

#endif
