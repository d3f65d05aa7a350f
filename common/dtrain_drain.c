/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Drain a node through libslurm, and ask for its state; see dtrain_drain.h. */
#include "dtrain_drain.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dtrain_bounded.h"
#include "dtrain_slurm_compat.h"
#include "dtrain_parse.h"

/* libslurm's error text, and ours about it: one line. */
#define DRAIN_ERROR_LEN 256
#define DRAIN_REASON_LEN 1024 /* a reason is cut to this (the bytes with the end) */

struct drain_request {
    const char *node;
    const char *reason;
    long job;    /* the job asked about or updated */
    int log_fd;  /* libslurm's stderr goes here (-1: left alone) */
};

/* LeakSanitizer's switch, present only in sanitizer builds.  libslurm may
 * exit() from slurm_init (no config, no slurmctld); its allocations are not
 * ours to report, and the report would bury libslurm's own message. */
extern void __lsan_disable(void) __attribute__((weak));

struct drain_answer {
    int ok;
    char error[DRAIN_ERROR_LEN];
};

/* In a bounded child, before any libslurm call: libslurm logs to stderr,
 * several lines, and may exit() from slurm_init; keep its words for the
 * one line said about it. */
static void child_slurm_init(const struct drain_request *req, struct dtrain_stage *stage)
{
    if (req->log_fd >= 0)
        dup2(req->log_fd, STDERR_FILENO);
    if (__lsan_disable)
        __lsan_disable();
    dtrain_stage_set(stage, "slurm_init");
    slurm_init(NULL);
}

static void drain_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    const struct drain_request *req = arg;
    struct drain_answer *answer = out;
    update_node_msg_t msg;

    child_slurm_init(req, stage);
    slurm_init_update_node_msg(&msg);
    /* libslurm takes char *, but does not write through these. */
    msg.node_names = (char *)req->node;
    msg.reason = (char *)req->reason;
    msg.node_state = NODE_STATE_DRAIN;
#ifdef HAVE_UPDATE_NODE_MSG_T_REASON_UID
    msg.reason_uid = getuid(); /* Slurm 26.05 has no such field: slurmctld records the caller */
#endif
    dtrain_stage_set(stage, "slurm_update_node (is slurmctld up?)");
    if (slurm_update_node(&msg) == SLURM_SUCCESS)
        answer->ok = 1;
    else
        dtrain_snprintf(answer->error, sizeof(answer->error), "%s", slurm_strerror(errno)); /* libslurm sets errno */
    slurm_fini();
}

/* The last line libslurm logged, without its "prog: " prefix, or "". */
static void last_log_line(int fd, char *out, size_t len)
{
    char buf[4096];
    out[0] = '\0';
    if (fd < 0 || lseek(fd, 0, SEEK_SET) != 0)
        return;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    char *level = strstr(line, ": error: ");
    if (!level)
        level = strstr(line, ": fatal: ");
    dtrain_snprintf(out, len, "%s", level ? level + 2 : line);
}

/* fn(req, answer) in a bounded child (libslurm may hang or crash), its
 * stderr kept in a memfd: 0 when it answered, else -1 with err saying
 * "WHAT: libslurm WHY: its last log line". */
static int run_libslurm(dtrain_probe_fn fn, struct drain_request *req,
                        void *answer, size_t answer_len, int timeout_ms, const char *what, char *err, size_t errlen)
{
    char why[DRAIN_ERROR_LEN], log[DRAIN_ERROR_LEN];
    req->log_fd = memfd_create("dtrain-libslurm-log", MFD_CLOEXEC);
    enum dtrain_bounded_status st = dtrain_run_bounded(fn, req, answer, answer_len, timeout_ms, why, sizeof(why));
    last_log_line(req->log_fd, log, sizeof(log));
    if (req->log_fd >= 0)
        close(req->log_fd);
    if (st == DTRAIN_BOUNDED_OK)
        return 0;
    dtrain_snprintf(err, errlen, "%s: libslurm %s%s%s", what, why, log[0] ? ": " : "", log);
    return -1;
}

int dtrain_drain_node(const char *node, const char *reason, int timeout_ms, char *err, size_t errlen)
{
    /* slurmctld keeps and shows the reason: printable ASCII, bounded */
    char clean[DRAIN_REASON_LEN];
    dtrain_snprintf(clean, sizeof clean, "%s", reason);
    dtrain_printable(clean);
    struct drain_request req = {.node = node, .reason = clean};
    struct drain_answer answer;
    char what[96];

    dtrain_snprintf(what, sizeof what, "cannot drain %s", node);
    if (run_libslurm(drain_child, &req, &answer, sizeof answer, timeout_ms, what, err, errlen) != 0)
        return -1;
    if (!answer.ok) {
        dtrain_snprintf(err, errlen, "cannot drain %s: slurmctld answered: %s", node, answer.error);
        return -1;
    }
    return 0;
}

struct node_state_answer {
    int ok;     /* slurmctld answered */
    int found;  /* it knows the node */
    int failed; /* DOWN, FAIL or not responding */
    char error[DRAIN_ERROR_LEN];
};

static void node_state_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    const struct drain_request *req = arg;
    struct node_state_answer *answer = out;
    node_info_msg_t *msg = NULL;

    child_slurm_init(req, stage);
    dtrain_stage_set(stage, "slurm_load_node_single (is slurmctld up?)");
    if (slurm_load_node_single(&msg, (char *)req->node, SHOW_ALL) != SLURM_SUCCESS) {
        dtrain_snprintf(answer->error, sizeof(answer->error), "%s", slurm_strerror(errno));
    } else {
        answer->ok = 1;
        for (uint32_t i = 0; msg != NULL && i < msg->record_count; i++) {
            const node_info_t *n = &msg->node_array[i];
            if (n->name == NULL || strcmp(n->name, req->node) != 0)
                continue;
            uint32_t base = n->node_state & NODE_STATE_BASE;
            answer->found = 1;
            answer->failed = base == NODE_STATE_DOWN || (n->node_state & (NODE_STATE_FAIL | NODE_STATE_NO_RESPOND));
        }
        slurm_free_node_info_msg(msg);
    }
    slurm_fini();
}

int dtrain_node_failed(const char *node, int timeout_ms, char *err, size_t errlen)
{
    struct drain_request req = {.node = node};
    struct node_state_answer answer;
    char what[96];

    dtrain_snprintf(what, sizeof what, "cannot ask slurmctld about %s", node);
    if (run_libslurm(node_state_child, &req, &answer, sizeof answer, timeout_ms, what, err, errlen) != 0)
        return -1;
    if (!answer.ok)
        dtrain_snprintf(err, errlen, "%s: %s", what, answer.error);
    else if (!answer.found)
        dtrain_snprintf(err, errlen, "slurmctld knows no node %s", node);
    else
        return answer.failed;
    return -1;
}

int dtrain_plain_node_name(const char *name)
{
    size_t len = strlen(name);
    return len > 0 && strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == len;
}

/* ---------------------------------------------------------------- a job's requeue */

#ifdef DTRAIN_SLURM_EXPEDITED_REQUEUE
struct job_facts_answer {
    int ok;
    struct dtrain_job_facts facts;
    char error[DRAIN_ERROR_LEN];
};

/* The job's first node that slurmctld holds drained by other hands than
 * dtrain-launch's (DTRAIN_DRAIN_JOB_REASON). */
static void drained_node(const char *job_nodes, struct dtrain_job_facts *f, char *error, size_t errlen)
{
    node_info_msg_t *msg = NULL;
    DTRAIN_SLURM_HOSTLIST hl = job_nodes && job_nodes[0] ? slurm_hostlist_create(job_nodes) : NULL;
    if (hl == NULL)
        return; /* no allocation (the job is no longer running) */
    if (slurm_load_node((time_t)0, &msg, SHOW_ALL) != SLURM_SUCCESS) {
        dtrain_snprintf(error, errlen, "slurm_load_node: %s", slurm_strerror(errno));
        slurm_hostlist_destroy(hl);
        return;
    }
    for (uint32_t i = 0; msg != NULL && i < msg->record_count && f->node[0] == '\0'; i++) {
        const node_info_t *n = &msg->node_array[i];
        const char *reason = n->reason ? n->reason : "";
        if (n->name == NULL || !(n->node_state & NODE_STATE_DRAIN) || slurm_hostlist_find(hl, n->name) < 0 ||
            strncmp(reason, DTRAIN_DRAIN_JOB_REASON, strlen(DTRAIN_DRAIN_JOB_REASON)) == 0)
            continue;
        dtrain_snprintf(f->node, sizeof f->node, "%s", n->name);
        dtrain_snprintf(f->node_reason, sizeof f->node_reason, "%s", reason[0] ? reason : "no reason given");
        dtrain_printable(f->node_reason);
    }
    slurm_free_node_info_msg(msg);
    slurm_hostlist_destroy(hl);
}

static void job_facts_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    const struct drain_request *req = arg;
    struct job_facts_answer *answer = out;
    struct dtrain_job_facts *f = &answer->facts;
    slurm_conf_t *conf = NULL;
    job_info_msg_t *jobs = NULL;

    child_slurm_init(req, stage);
    dtrain_stage_set(stage, "slurm_load_ctl_conf (is slurmctld up?)");
    if (slurm_load_ctl_conf((time_t)0, &conf) != SLURM_SUCCESS) {
        dtrain_snprintf(answer->error, sizeof answer->error, "slurm_load_ctl_conf: %s", slurm_strerror(errno));
        goto done;
    }
    /* slurmctld reads the same word (Slurm 26.05, job_mgr.c _expedited_requeue_enabled: xstrstr) */
    f->site_allows = conf->slurmctld_params != NULL && strstr(conf->slurmctld_params, "enable_expedited_requeue") != NULL;
    dtrain_slurm_free_conf(conf);
    dtrain_stage_set(stage, "slurm_load_job");
    if (slurm_load_job(&jobs, dtrain_slurm_job((uint32_t)req->job), SHOW_ALL) != SLURM_SUCCESS) {
        dtrain_snprintf(answer->error, sizeof answer->error, "slurm_load_job of job %ld: %s", req->job,
                        slurm_strerror(errno));
        goto done;
    }
    if (jobs == NULL || jobs->record_count < 1) {
        dtrain_snprintf(answer->error, sizeof answer->error, "slurmctld knows no job %ld", req->job);
        goto done;
    }
    const job_info_t *j = &jobs->job_array[0];
    f->flagged = (j->bitflags & EXPEDITED_REQUEUE) != 0;
    f->running = (j->job_state & JOB_STATE_BASE) == JOB_RUNNING;
    f->expediting = (j->job_state & JOB_EXPEDITING) != 0;
    dtrain_stage_set(stage, "slurm_load_node");
    if (f->flagged && f->running)
        drained_node(j->nodes, f, answer->error, sizeof answer->error);
    answer->ok = answer->error[0] == '\0';
done:
    slurm_free_job_info_msg(jobs);
    slurm_fini();
}

static void no_requeue_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    const struct drain_request *req = arg;
    struct drain_answer *answer = out;
    job_desc_msg_t desc;

    child_slurm_init(req, stage);
    slurm_init_job_desc_msg(&desc);
#ifdef DTRAIN_SLURM_REQUEUE_STEP_ID
    desc.step_id.job_id = (uint32_t)req->job; /* Slurm 26.05 names the job so (configure) */
#else
    desc.job_id = (uint32_t)req->job;
#endif
    desc.requeue = 0;
    dtrain_stage_set(stage, "slurm_update_job (is slurmctld up?)");
    if (slurm_update_job(&desc) == SLURM_SUCCESS)
        answer->ok = 1;
    else
        dtrain_snprintf(answer->error, sizeof(answer->error), "%s", slurm_strerror(errno));
    slurm_fini();
}
#endif

int dtrain_job_facts(long job, int timeout_ms, struct dtrain_job_facts *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
#ifdef DTRAIN_SLURM_EXPEDITED_REQUEUE
    struct drain_request req = {.job = job};
    struct job_facts_answer answer;
    char what[96];

    dtrain_snprintf(what, sizeof what, "cannot ask slurmctld about job %ld", job);
    if (run_libslurm(job_facts_child, &req, &answer, sizeof answer, timeout_ms, what, err, errlen) != 0)
        return -1;
    if (!answer.ok) {
        dtrain_snprintf(err, errlen, "%s: %s", what, answer.error);
        return -1;
    }
    *f = answer.facts;
    return 0;
#else
    (void)job;
    (void)timeout_ms;
    (void)err;
    (void)errlen;
    return 1;
#endif
}

int dtrain_job_no_requeue(long job, int timeout_ms, char *err, size_t errlen)
{
#ifdef DTRAIN_SLURM_EXPEDITED_REQUEUE
    struct drain_request req = {.job = job};
    struct drain_answer answer;
    char what[96];

    dtrain_snprintf(what, sizeof what, "cannot turn job %ld's requeue off", job);
    if (run_libslurm(no_requeue_child, &req, &answer, sizeof answer, timeout_ms, what, err, errlen) != 0)
        return -1;
    if (!answer.ok) {
        dtrain_snprintf(err, errlen, "%s: slurmctld answered: %s", what, answer.error);
        return -1;
    }
    return 0;
#else
    (void)timeout_ms;
    dtrain_snprintf(err, errlen, "cannot turn job %ld's requeue off: this dtrain was built without Slurm's "
                    "expedited requeue", job);
    return -1;
#endif
}
