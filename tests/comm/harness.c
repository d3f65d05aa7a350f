/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Local multi-process runs of comm tests; see harness.h. */
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "dtrain_parse.h"

void harness_diag(int rank, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("# rank %d: %s\n", rank, line);
    fflush(stdout);
}

int harness_part_failed(const struct harness_result *res, int n, int part)
{
    for (int i = 0; i < n; i++) {
        int code = res->exit_code[i];
        if (code != 0 && (code < 0 || code >= 128 || (code & (1 << part))))
            return 1;
    }
    return 0;
}

void harness_options(struct dtrain_comm_options *o, int rank, int n, int hosts, enum dtrain_comm_transport t,
                     int timeout_ms, char host_buf[DTRAIN_COMM_HOST_ID_MAX])
{
    dtrain_comm_options_defaults(o);
    o->timeout_ms = timeout_ms;
    o->transport = t;
    dtrain_snprintf(host_buf, DTRAIN_COMM_HOST_ID_MAX, "test-host-%d", hosts > 0 ? rank * hosts / n : 0);
    o->host_id = host_buf;
}

int harness_init(struct dtrain_comm_group *g, const struct dtrain_comm_options *o, dtrain_comm **out)
{
    char err[256];
    enum dtrain_comm_cause cause;
    int rc = dtrain_comm_init(g, DTRAIN_COMM_CPU, o, out, &cause, err, sizeof err);
    g->listen_fd = -1; /* taken over */
    if (rc != DTRAIN_OK)
        harness_diag(g->my_rank, "init failed: %s: %s", dtrain_comm_cause_name(cause), err);
    return rc;
}

static void make_group(struct dtrain_comm_group *g, int n, int rank, const char *id, int listen_fd, int index)
{
    memset(g, 0, sizeof *g);
    g->present = 1;
    g->index = index;
    g->size = n;
    g->first = 0;
    g->stride = 1;
    g->my_rank = rank;
    dtrain_snprintf(g->key, sizeof g->key, "test.%d", index);
    dtrain_snprintf(g->id, sizeof g->id, "%s", id);
    g->listen_fd = rank == 0 ? listen_fd : -1;
}

int harness_run(int n, int ngroups, harness_fn fn, void *arg, int bound_s,
                void (*after_start)(const struct harness_started *s, void *arg), struct harness_result *res)
{
    struct harness_started st;
    char(*ids)[DTRAIN_BOOTSTRAP_ID_MAX] = st.ids, err[256];
    pid_t *pids = st.pids;
    int fds[HARNESS_MAX_GROUPS];
    int started = 0, rc = -1;

    memset(res, 0, sizeof *res);
    memset(&st, 0, sizeof st);
    if (n < 1 || n > HARNESS_MAX_RANKS || ngroups < 1 || ngroups > HARNESS_MAX_GROUPS) {
        printf("# harness: bad n %d or ngroups %d\n", n, ngroups);
        return -1;
    }
    for (int k = 0; k < ngroups; k++)
        fds[k] = -1;
    for (int k = 0; k < ngroups; k++) {
        if (dtrain_bootstrap_id_make_cpu("127.0.0.1", n, ids[k], sizeof ids[k], &fds[k], err, sizeof err) != 0) {
            printf("# harness: making an id: %s\n", err);
            goto out;
        }
    }
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            printf("# harness: fork: %s\n", strerror(errno));
            goto out;
        }
        if (pid == 0) {
            struct dtrain_comm_group groups[HARNESS_MAX_GROUPS];
            for (int k = 0; k < ngroups; k++) {
                make_group(&groups[k], n, i, ids[k], fds[k], k);
                if (i != 0)
                    close(fds[k]); /* only the leader keeps its listening socket */
            }
            int failed = fn(i, n, groups, ngroups, arg) & 0x7f; /* 128 and up mean a signal */
            for (int k = 0; k < ngroups; k++)
                if (groups[k].listen_fd >= 0)
                    close(groups[k].listen_fd);
            fflush(NULL);
            exit(failed); /* exit, not _exit: LeakSanitizer checks the child too */
        }
        pids[started++] = pid;
    }
    for (int k = 0; k < ngroups; k++) { /* the leader child has them now */
        close(fds[k]);
        fds[k] = -1;
    }
    st.n = n;
    if (after_start != NULL)
        after_start(&st, arg);
    rc = 0;
out:
    for (int k = 0; k < ngroups; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    /* Reap, killing whatever is still running at the bound. */
    struct timespec t0, now, pause = {.tv_sec = 0, .tv_nsec = 5000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int left = started;
    int done[HARNESS_MAX_RANKS] = {0};
    while (left > 0) {
        for (int i = 0; i < started; i++) {
            int status;
            if (done[i] || waitpid(pids[i], &status, WNOHANG) != pids[i])
                continue;
            done[i] = 1;
            left--;
            if (res->exit_code[i] != -1)
                res->exit_code[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (left > 0 && now.tv_sec - t0.tv_sec >= bound_s) {
            for (int i = 0; i < started; i++) {
                if (!done[i] && res->exit_code[i] != -1) {
                    printf("# harness: rank %d still running after %d s: killed\n", i, bound_s);
                    kill(pids[i], SIGKILL);
                    res->exit_code[i] = -1;
                    res->hung++;
                }
            }
        }
        if (left > 0)
            nanosleep(&pause, NULL);
    }
    for (int i = 0; i < started; i++)
        if (res->exit_code[i] != 0)
            res->failed++;
    if (started < n)
        res->failed += n - started;
    fflush(stdout);
    return rc;
}

int harness_check_bytes(int rank, struct dtrain_comm_stats *before, dtrain_comm *c, uint64_t sent,
                        uint64_t received, const char *what)
{
    struct dtrain_comm_stats now;
    dtrain_comm_get_stats(c, &now);
    uint64_t s = now.bytes_sent - before->bytes_sent, r = now.bytes_received - before->bytes_received;
    *before = now;
    if (s == sent && r == received)
        return 0;
    harness_diag(rank, "%s: sent %llu received %llu, want %llu and %llu", what, (unsigned long long)s,
                 (unsigned long long)r, (unsigned long long)sent, (unsigned long long)received);
    return 1;
}
