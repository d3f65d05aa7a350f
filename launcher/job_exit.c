/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The batch script's exit code after the training step; see job_exit.h. */
#include "job_exit.h"
#include "expedite.h"
#include "dtrain_exit.h"
#include "dtrain_fault.h"
#include "dtrain_file.h"
#include "dtrain_parse.h"
#include "dtrain_env.h"
#include "dtrain_drain.h"
#include "dtrain_slurm_compat.h"

#include <errno.h>
#include <signal.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *status_meaning(long status, char *buf, size_t len)
{
    switch (status) {
    case DTRAIN_EXIT_FAILURE: return "an internal error";
    case DTRAIN_EXIT_USAGE: return "bad input";
    case DTRAIN_EXIT_REFUSED: return "a refused job shape";
    case DTRAIN_EXIT_REQUEUE: return "a task detected a fault";
    default:
        break;
    }
    if (status > 128 && status < 128 + 65)
        snprintf(buf, len, "a task was killed by signal %ld (%s)", status - 128, strsignal((int)(status - 128)));
    else
        snprintf(buf, len, "an unexpected status");
    return buf;
}

int dtrain_job_exit_code(long status, char *line, size_t linelen)
{
    char meaning[128], why[256], err[256];
    const char *m = status_meaning(status, meaning, sizeof meaning);
    line[0] = '\0';
    if (status == DTRAIN_EXIT_OK)
        return DTRAIN_EXIT_OK;
    if (status == DTRAIN_EXIT_FAILURE || status == DTRAIN_EXIT_USAGE || status == DTRAIN_EXIT_REFUSED) {
        snprintf(line, linelen, "the job step ended with exit %ld (%s): not requeued (retrying cannot help)",
                 status, m);
        return (int)status;
    }
    struct dtrain_restarts r;
    if (dtrain_restarts_read(&r, err, sizeof err) != 0) {
        snprintf(line, linelen, "%s", err);
        return DTRAIN_EXIT_USAGE;
    }
    r.supervised = 0; /* the batch script's verdict is a requeue, also after in-job restarts (--supervise) */
    int code = dtrain_restarts_exit(&r, why, sizeof why);
    snprintf(line, linelen, "the job step ended with exit %ld (%s): exit %d (%s)", status, m, code, why);
    return code;
}

#define DRAIN_TIMEOUT_MS 10000

/* Whether node is one plain node name of the job (SLURM_JOB_NODELIST). */
static int job_has_node(const char *node)
{
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (!dtrain_plain_node_name(node) || list == NULL || list[0] == '\0')
        return 0;
    DTRAIN_SLURM_HOSTLIST hl = slurm_hostlist_create(list); /* hostlist_t, or its struct on Slurm >= 23.02 (configure) */
    if (hl == NULL)
        return 0;
    int found = slurm_hostlist_find(hl, node) >= 0;
    slurm_hostlist_destroy(hl);
    return found;
}

int dtrain_job_take_drain_request(char *node, size_t nodelen, char *reason, size_t reasonlen, char *line,
                                  size_t linelen)
{
    const char *dir = getenv(DTRAIN_ENV_CKPT_DIR);
    char path[4096 + 32], text[1024], err[600];
    if (dir == NULL || dir[0] == '\0' || dtrain_snprintf(path, sizeof path, "%s/" DTRAIN_DRAIN_REQUEST, dir) != 0)
        return 0;
    if (access(path, F_OK) != 0)
        return 0; /* no request: the usual case */
    /* never a blocking open (a FIFO put there) */
    FILE *f = dtrain_fopen_regular(path, 0, "the drain request", NULL, err, sizeof err);
    if (f == NULL) {
        snprintf(line, linelen, "%s: no node drained", err);
        return -1;
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    text[strcspn(text, "\n")] = '\0';
    char *tab = strchr(text, '\t');
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(line, linelen, "cannot remove the drain request %s: %s (remove it by hand)", path, strerror(errno));
        return -1;
    }
    if (tab == NULL || tab == text || (size_t)(tab - text) >= nodelen) {
        snprintf(line, linelen, "the drain request %s is malformed (not NODE<TAB>REASON): removed, no node drained",
                 path);
        return -1;
    }
    *tab = '\0';
    if (!job_has_node(text)) { /* a host list ("node[1-3]") would drain every node it names */
        const char *list = getenv("SLURM_JOB_NODELIST");
        snprintf(line, linelen, "the drain request %s names '%.64s', not one node of this job (%.128s): removed, "
                 "no node drained", path, text, list && list[0] ? list : "SLURM_JOB_NODELIST is not set");
        return -1;
    }
    snprintf(node, nodelen, "%s", text);
    snprintf(reason, reasonlen, "%.400s", tab + 1);
    return 1;
}

int dtrain_job_drain_request(char *line, size_t linelen)
{
    char node[256], why[512], reason[600], err[600];
    int got = dtrain_job_take_drain_request(node, sizeof node, why, sizeof why, line, linelen);
    if (got <= 0)
        return got < 0;
    snprintf(reason, sizeof reason, "dtrain: %.200s", why);
    if (dtrain_drain_node(node, reason, DRAIN_TIMEOUT_MS, err, sizeof err) != 0)
        snprintf(line, linelen, "straggler drain: %s (draining needs root, SlurmUser or a Slurm operator; the "
                 "requeued job may land on %.64s again)", err, node);
    else
        snprintf(line, linelen, "straggler drain: node %.64s drained (%.300s)", node, reason);
    return 1;
}

/* SLURM_JOB_ID: 0, or -1 with why. */
static int job_id(long *job, char *why, size_t whylen)
{
    const char *id = getenv("SLURM_JOB_ID");
    if (id == NULL) {
        snprintf(why, whylen, "SLURM_JOB_ID is not set");
        return -1;
    }
    return dtrain_parse_int(id, 1, UINT32_MAX, "SLURM_JOB_ID", job, why, whylen);
}

enum dtrain_expedite_action dtrain_job_expedite(int code, char *text, size_t textlen, char *warn, size_t warnlen)
{
    struct dtrain_job_facts facts;
    char err[512];
    long job;
    text[0] = warn[0] = '\0';
    if (code == DTRAIN_EXIT_OK || job_id(&job, err, sizeof err) != 0)
        return DTRAIN_EXPEDITE_NONE; /* not in a batch job: nothing to ask */
    int rc = dtrain_job_facts(job, DRAIN_TIMEOUT_MS, &facts, err, sizeof err);
    if (rc > 0)
        return DTRAIN_EXPEDITE_NONE; /* this Slurm has no expedited requeue */
    if (rc < 0) {
        snprintf(warn, warnlen, "%s: whether the job has Slurm's expedited requeue is unknown, its requeue is left "
                 "to Slurm", err);
        return DTRAIN_EXPEDITE_NONE;
    }
    return dtrain_expedite_decide(code, &facts, dtrain_expedite_allowed(getenv(DTRAIN_ENV_EXPEDITED_REQUEUE)), text,
                                  textlen);
}

int dtrain_job_expedite_apply(enum dtrain_expedite_action action, char *err, size_t errlen)
{
    char why[512];
    long job;
    if (action == DTRAIN_EXPEDITE_PLAIN)
        return dtrain_job_requeue(err, errlen);
    if (action != DTRAIN_EXPEDITE_NO_REQUEUE)
        return 0;
    if (job_id(&job, why, sizeof why) != 0 || dtrain_job_no_requeue(job, DRAIN_TIMEOUT_MS, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    return 0;
}

int dtrain_job_requeue(char *err, size_t errlen)
{
    long job;
    char why[128];
    if (job_id(&job, why, sizeof why) != 0) {
        snprintf(err, errlen, "cannot ask Slurm to requeue: %s", why);
        return -1;
    }
    slurm_init(NULL); /* SLURM_CONF, else the default slurm.conf */
    int rc = slurm_requeue(dtrain_slurm_job((uint32_t)job), 0), e = rc == SLURM_SUCCESS ? 0 : errno; /* libslurm sets errno (slurm_get_errno() of 22.05 returns it; 24.11 has no such call) */
    slurm_fini();
    if (rc != SLURM_SUCCESS) {
        snprintf(err, errlen, "slurm_requeue of job %ld failed: %s", job, slurm_strerror(e));
        return -1;
    }
    return 0;
}
