/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Bounded PMI2 calls; see pmi.h. */
#include "pmi.h"

#include <errno.h>
#include <pthread.h>
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrain_exit.h"
#include "dtrain_parse.h"

struct dtrain_pmi {
    int rank, size;
    int fences;
    int timeout_s;
    int initialized; /* PMI2_Init succeeded */
    /* The watchdog: `what` is the PMI2 call in progress (NULL when none). */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    const char *what;
    struct timespec deadline;
    int stop;
};

static const char *pmi2_error_name(int rc)
{
    switch (rc) {
    case PMI2_FAIL: return "PMI2_FAIL";
    case PMI2_ERR_INIT: return "PMI2_ERR_INIT";
    case PMI2_ERR_NOMEM: return "PMI2_ERR_NOMEM";
    case PMI2_ERR_INVALID_ARG: return "PMI2_ERR_INVALID_ARG";
    case PMI2_ERR_INVALID_KEY: return "PMI2_ERR_INVALID_KEY";
    case PMI2_ERR_INVALID_KEY_LENGTH: return "PMI2_ERR_INVALID_KEY_LENGTH";
    case PMI2_ERR_INVALID_VAL: return "PMI2_ERR_INVALID_VAL";
    case PMI2_ERR_INVALID_VAL_LENGTH: return "PMI2_ERR_INVALID_VAL_LENGTH";
    case PMI2_ERR_INVALID_LENGTH: return "PMI2_ERR_INVALID_LENGTH";
    case PMI2_ERR_OTHER: return "PMI2_ERR_OTHER";
    default: return "PMI2 error";
    }
}

static void *watchdog_main(void *arg)
{
    struct dtrain_pmi *pmi = arg;
    pthread_mutex_lock(&pmi->lock);
    while (!pmi->stop) {
        if (pmi->what == NULL) {
            pthread_cond_wait(&pmi->wake, &pmi->lock);
            continue;
        }
        int rc = pthread_cond_timedwait(&pmi->wake, &pmi->lock, &pmi->deadline);
        if (rc == ETIMEDOUT && pmi->what != NULL && !pmi->stop) {
            /* The call cannot be interrupted: report and end the task. */
            dprintf(STDERR_FILENO,
                    "dtrain-launch: rank %d: %s did not return within %d s: a task of this step died "
                    "or hangs before it, or Slurm's PMI2 service stalled; exiting with %d so that the job "
                    "is requeued (raise --timeout if tasks start slowly)\n",
                    pmi->rank, pmi->what, pmi->timeout_s, DTRAIN_EXIT_REQUEUE);
            _exit(DTRAIN_EXIT_REQUEUE);
        }
    }
    pthread_mutex_unlock(&pmi->lock);
    return NULL;
}

static void arm(struct dtrain_pmi *pmi, const char *what)
{
    pthread_mutex_lock(&pmi->lock);
    clock_gettime(CLOCK_MONOTONIC, &pmi->deadline);
    pmi->deadline.tv_sec += pmi->timeout_s;
    pmi->what = what;
    pthread_cond_signal(&pmi->wake);
    pthread_mutex_unlock(&pmi->lock);
}

static void disarm(struct dtrain_pmi *pmi)
{
    pthread_mutex_lock(&pmi->lock);
    pmi->what = NULL;
    pthread_cond_signal(&pmi->wake);
    pthread_mutex_unlock(&pmi->lock);
}

static int watchdog_start(struct dtrain_pmi *pmi, char *err, size_t errlen)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc == 0)
        rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&pmi->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc == 0) {
        rc = pthread_mutex_init(&pmi->lock, NULL);
        if (rc != 0)
            pthread_cond_destroy(&pmi->wake);
    }
    if (rc == 0) {
        rc = pthread_create(&pmi->thread, NULL, watchdog_main, pmi);
        if (rc != 0) {
            pthread_mutex_destroy(&pmi->lock);
            pthread_cond_destroy(&pmi->wake);
        }
    }
    if (rc != 0) {
        dtrain_snprintf(err, errlen, "cannot start the PMI2 watchdog thread: %s", strerror(rc));
        return -1;
    }
    pmi->thread_started = 1;
    return 0;
}

static void watchdog_stop(struct dtrain_pmi *pmi)
{
    if (!pmi->thread_started)
        return;
    pthread_mutex_lock(&pmi->lock);
    pmi->stop = 1;
    pthread_cond_signal(&pmi->wake);
    pthread_mutex_unlock(&pmi->lock);
    pthread_join(pmi->thread, NULL);
    pthread_mutex_destroy(&pmi->lock);
    pthread_cond_destroy(&pmi->wake);
    pmi->thread_started = 0;
}

enum dtrain_status dtrain_pmi_init(int timeout_s, dtrain_pmi **out, char *err, size_t errlen)
{
    /* libpmi2 runs as a singleton (size 1) without PMI_FD: detect that first. */
    if (getenv("PMI_FD") == NULL || getenv("PMI_RANK") == NULL || getenv("PMI_SIZE") == NULL) {
        dtrain_snprintf(err, errlen, "not started by srun --mpi=pmi2 (no PMI2 environment): "
                                     "run it as `srun --mpi=pmi2 dtrain-launch ...`");
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_pmi *pmi = calloc(1, sizeof *pmi);
    if (pmi == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    pmi->rank = -1;
    pmi->timeout_s = timeout_s;
    if (watchdog_start(pmi, err, errlen) != 0) {
        free(pmi);
        return DTRAIN_ERR_SYSTEM;
    }
    int spawned = 0, appnum = 0;
    arm(pmi, "PMI2_Init");
    int rc = PMI2_Init(&spawned, &pmi->size, &pmi->rank, &appnum);
    disarm(pmi);
    if (rc != PMI2_SUCCESS) {
        dtrain_snprintf(err, errlen, "PMI2_Init failed (%s, PMI_FD=%.16s): the PMI2 connection to "
                                     "slurmstepd is not usable; run dtrain-launch directly under "
                                     "`srun --mpi=pmi2`, not from a program it started",
                        pmi2_error_name(rc), getenv("PMI_FD"));
        watchdog_stop(pmi);
        free(pmi);
        return DTRAIN_ERR_SYSTEM;
    }
    pmi->initialized = 1;
    if (pmi->size < 1 || pmi->rank < 0 || pmi->rank >= pmi->size) {
        dtrain_snprintf(err, errlen, "PMI2_Init gave rank %d of size %d: not a valid rank", pmi->rank, pmi->size);
        dtrain_pmi_finalize(pmi);
        return DTRAIN_ERR_SYSTEM;
    }
    *out = pmi;
    return DTRAIN_OK;
}

int dtrain_pmi_rank(const dtrain_pmi *pmi) { return pmi->rank; }
int dtrain_pmi_size(const dtrain_pmi *pmi) { return pmi->size; }
int dtrain_pmi_fences(const dtrain_pmi *pmi) { return pmi->fences; }

enum dtrain_status dtrain_pmi_put(dtrain_pmi *pmi, const char *key, const char *value, char *err, size_t errlen)
{
    if (strlen(key) >= PMI2_MAX_KEYLEN || strlen(value) >= PMI2_MAX_VALLEN) {
        dtrain_snprintf(err, errlen, "PMI2 key '%.64s' (%zu bytes) or its value (%zu bytes) is longer than "
                                     "PMI2 allows (%d, %d)",
                        key, strlen(key), strlen(value), PMI2_MAX_KEYLEN - 1, PMI2_MAX_VALLEN - 1);
        return DTRAIN_ERR_SYSTEM;
    }
    arm(pmi, "PMI2_KVS_Put");
    int rc = PMI2_KVS_Put(key, value);
    disarm(pmi);
    if (rc != PMI2_SUCCESS) {
        dtrain_snprintf(err, errlen, "PMI2_KVS_Put(%s) failed (%s)", key, pmi2_error_name(rc));
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

enum dtrain_status dtrain_pmi_fence(dtrain_pmi *pmi, char *err, size_t errlen)
{
    arm(pmi, "PMI2_KVS_Fence");
    int rc = PMI2_KVS_Fence();
    disarm(pmi);
    if (rc != PMI2_SUCCESS) {
        dtrain_snprintf(err, errlen, "PMI2_KVS_Fence failed (%s): Slurm's PMI2 service could not complete "
                                     "the exchange (a node or its slurmstepd failed?)",
                        pmi2_error_name(rc));
        return DTRAIN_ERR_FAULT;
    }
    pmi->fences++;
    return DTRAIN_OK;
}

enum dtrain_status dtrain_pmi_get(dtrain_pmi *pmi, int owner, const char *key, char *value, size_t valuelen,
                                  char *err, size_t errlen)
{
    int len = 0;
    int maxlen = valuelen > PMI2_MAX_VALLEN ? PMI2_MAX_VALLEN : (int)valuelen;
    arm(pmi, "PMI2_KVS_Get");
    int rc = PMI2_KVS_Get(NULL, owner, key, value, maxlen, &len);
    disarm(pmi);
    if (rc != PMI2_SUCCESS) {
        dtrain_snprintf(err, errlen, "PMI2_KVS_Get(%s) failed (%s): rank %d did not publish it; do all tasks "
                                     "run the same dtrain-launch with the same options?",
                        key, pmi2_error_name(rc), owner);
        return DTRAIN_ERR_SYSTEM;
    }
    if (len < 0 || len >= maxlen || memchr(value, '\0', (size_t)maxlen) == NULL) {
        dtrain_snprintf(err, errlen, "PMI2_KVS_Get(%s): value of %d bytes does not fit in %d", key,
                        len < 0 ? -len : len, maxlen);
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

void dtrain_pmi_abort(dtrain_pmi *pmi, const char *msg)
{
    arm(pmi, "PMI2_Abort");
    PMI2_Abort(1, msg); /* Slurm's libpmi2 exits here */
    _exit(DTRAIN_EXIT_FAILURE);
}

void dtrain_pmi_finalize(dtrain_pmi *pmi)
{
    if (pmi == NULL)
        return;
    if (pmi->initialized) {
        arm(pmi, "PMI2_Finalize");
        PMI2_Finalize(); /* nothing useful to do if it fails: the exchange is over */
        disarm(pmi);
    }
    watchdog_stop(pmi);
    free(pmi);
}
