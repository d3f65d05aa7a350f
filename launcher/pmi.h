/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A thin, bounded wrapper around Slurm's PMI2 client (libpmi2).
 *
 * Every call is checked, says in one line what failed, and is bounded: a
 * watchdog thread ends the process with DTRAIN_EXIT_REQUEUE (75) when a PMI2
 * call has not returned after `timeout_s` seconds (typically a fence that
 * waits for a task that died or hangs: retrying the job can help).  libpmi2
 * blocks in read() with no timeout of its own, so exiting is the only way to
 * bound it.
 *
 * PMI2 facts this relies on: keys are at most PMI2_MAX_KEYLEN (64) bytes and
 * values PMI2_MAX_VALLEN (1024), NUL included, text only; a key is put once
 * per fence; PMI2_KVS_Fence is collective over the whole job step and makes
 * every put visible to every task (Slurm sends all pairs to every node).
 * libpmi2 holds one connection per process, so one handle per process. */
#ifndef DTRAIN_LAUNCH_PMI_H
#define DTRAIN_LAUNCH_PMI_H

#include <stddef.h>

#include "dtrain_status.h"

/* The calls return DTRAIN_OK or, with one line in err: DTRAIN_ERR_INPUT
 * when not started by srun --mpi=pmi2 (PMI_FD, PMI_RANK, PMI_SIZE missing),
 * DTRAIN_ERR_FAULT when the step's PMI2 exchange (the fence) failed, so
 * that requeueing can help, DTRAIN_ERR_SYSTEM for a failure retrying will
 * not fix. */
typedef struct dtrain_pmi dtrain_pmi;

/* Connect (PMI2_Init) and start the watchdog. */
enum dtrain_status dtrain_pmi_init(int timeout_s, dtrain_pmi **out, char *err, size_t errlen);

int dtrain_pmi_rank(const dtrain_pmi *pmi);
int dtrain_pmi_size(const dtrain_pmi *pmi);
int dtrain_pmi_fences(const dtrain_pmi *pmi); /* fences completed so far */

/* Put one key (< 64 bytes) and value (< 1024 bytes, text). */
enum dtrain_status dtrain_pmi_put(dtrain_pmi *pmi, const char *key, const char *value, char *err, size_t errlen);

/* Collective over the step: commit every task's puts. */
enum dtrain_status dtrain_pmi_fence(dtrain_pmi *pmi, char *err, size_t errlen);

/* Get a key put by task `owner` before the last fence. */
enum dtrain_status dtrain_pmi_get(dtrain_pmi *pmi, int owner, const char *key, char *value, size_t valuelen,
                                  char *err, size_t errlen);

/* A failure only this task has (it cannot make its id, a get failed...):
 * PMI2_Abort, so that Slurm ends the whole step now instead of leaving the
 * other tasks in the fence until their timeout.  Does not return; the task
 * exits with 1 and srun reports the others as killed. */
void dtrain_pmi_abort(dtrain_pmi *pmi, const char *msg) __attribute__((noreturn));

/* PMI2_Finalize (bounded), stop the watchdog, free.  NULL is fine. */
void dtrain_pmi_finalize(dtrain_pmi *pmi);

#endif
