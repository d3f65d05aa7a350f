/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Run probes in forked children with deadlines; see dtrain_bounded.h. */
#include "dtrain_bounded.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtrain_parse.h"
#include "dtrain_clock.h"

void dtrain_stage_set(struct dtrain_stage *stage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(stage->text, sizeof(stage->text), fmt, ap);
    va_end(ap);
}

/* The probe's answer follows the stage in the shared memory, aligned for
 * any type. */
#define OUT_OFFSET ((sizeof(struct dtrain_stage) + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) * \
                    _Alignof(max_align_t))

static const char *stage_of(const struct dtrain_probe *p)
{
    return ((const struct dtrain_stage *)p->shared)->text;
}

void dtrain_probe_start(struct dtrain_probe *p, dtrain_probe_fn probe, const void *arg, void *out,
                        size_t outsize, int timeout_ms, dtrain_probe_failed_fn failed, const void *ctx)
{
    int fds[2] = {-1, -1};
    memset(p, 0, sizeof(*p));
    p->pid = -1;
    p->fd = -1;
    p->out = out;
    p->outsize = outsize;
    p->timeout_ms = timeout_ms;
    p->failed = failed;
    p->failed_ctx = ctx;
    p->busy = 1;
    p->status = DTRAIN_BOUNDED_FAILED;
    p->start_ms = 1e3 * dtrain_clock_s();
    memset(out, 0, outsize);

    p->shared_len = OUT_OFFSET + outsize;
    p->shared = mmap(NULL, p->shared_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p->shared == MAP_FAILED) {
        p->shared = NULL;
        dtrain_snprintf(p->why, sizeof(p->why), "cannot map %zu bytes of shared memory: %s", p->shared_len,
                        strerror(errno));
        return;
    }
    struct dtrain_stage *stage = p->shared;
    dtrain_snprintf(stage->text, sizeof(stage->text), "starting");
    if (pipe2(fds, O_CLOEXEC) != 0) {
        dtrain_snprintf(p->why, sizeof(p->why), "cannot create a pipe: %s", strerror(errno));
        return;
    }
    /* Flush buffered output so that the child cannot print it twice. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        dtrain_snprintf(p->why, sizeof(p->why), "cannot fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (pid == 0) {
        /* Own process group, so that a timeout kills what the probe
         * started too.  The write end stays open until the child exits:
         * the parent sees end-of-file then. */
        setpgid(0, 0);
        close(fds[0]);
        probe(arg, (char *)p->shared + OUT_OFFSET, stage);
        stage->done = 1;
        _exit(0);
    }
    setpgid(pid, pid); /* from here too: no race with a kill of the group */
    close(fds[1]);
    p->pid = pid;
    p->fd = fds[0];
}

/* Reap the killed child if it goes within a short bound; a child stuck in
 * uninterruptible sleep is left behind (init reaps it when it wakes). */
static void reap_briefly(pid_t pid)
{
    for (int i = 0; i < 50; i++) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return;
        usleep(2000);
    }
}

/* The child closed its pipe (it exited): collect its status and answer. */
static void collect(struct dtrain_probe *p)
{
    int wstatus = 0;
    pid_t r;
    while ((r = waitpid(p->pid, &wstatus, 0)) < 0 && errno == EINTR)
        ;
    if (r != p->pid && errno == ECHILD && ((const struct dtrain_stage *)p->shared)->done) {
        /* Someone else reaped it, after it finished. */
        memcpy(p->out, (char *)p->shared + OUT_OFFSET, p->outsize);
        p->status = DTRAIN_BOUNDED_OK;
    } else if (r != p->pid)
        dtrain_snprintf(p->why, sizeof(p->why), "cannot wait for the probe: %s", strerror(errno));
    else if (WIFSIGNALED(wstatus))
        dtrain_snprintf(p->why, sizeof(p->why), "crashed with signal %d (%s) in %s", WTERMSIG(wstatus),
                        strsignal(WTERMSIG(wstatus)), stage_of(p));
    else if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        dtrain_snprintf(p->why, sizeof(p->why), "exited with status %d in %s", WEXITSTATUS(wstatus), stage_of(p));
    else if (!((const struct dtrain_stage *)p->shared)->done)
        /* a library that calls exit(0) itself: no answer was written */
        dtrain_snprintf(p->why, sizeof(p->why), "exited with status 0 before answering, in %s", stage_of(p));
    else {
        memcpy(p->out, (char *)p->shared + OUT_OFFSET, p->outsize);
        p->status = DTRAIN_BOUNDED_OK;
    }
}

static void give_up(struct dtrain_probe *p, enum dtrain_bounded_status status, const char *what)
{
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
    reap_briefly(p->pid);
    p->status = status;
    if (status == DTRAIN_BOUNDED_TIMEOUT)
        dtrain_snprintf(p->why, sizeof(p->why), "did not finish within %d ms (stuck in %s)", p->timeout_ms,
                        stage_of(p));
    else
        dtrain_snprintf(p->why, sizeof(p->why), "lost track of the probe (%s) in %s", what, stage_of(p));
}

/* The probe is over: close it and, when it gave no answer, say so. */
static void finish(struct dtrain_probe *p)
{
    p->elapsed_ms = 1e3 * dtrain_clock_s() - p->start_ms;
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    if (p->shared)
        munmap(p->shared, p->shared_len);
    p->shared = NULL;
    p->pid = -1;
    p->busy = 0;
    if (p->status != DTRAIN_BOUNDED_OK && p->failed)
        p->failed(p->out, p->failed_ctx, p->why);
}

void dtrain_probe_wait_all(struct dtrain_probe *const *probes, int n)
{
    enum { MAX_WAIT = 16 };
    for (;;) {
        struct pollfd fds[MAX_WAIT];
        struct dtrain_probe *waiting[MAX_WAIT];
        int nw = 0;
        double soonest = -1, now = 1e3 * dtrain_clock_s();
        for (int i = 0; i < n; i++) {
            struct dtrain_probe *p = probes[i];
            if (!p || !p->busy)
                continue;
            if (p->fd < 0) { /* never started: already failed */
                finish(p);
                continue;
            }
            double deadline = p->start_ms + p->timeout_ms;
            if (now >= deadline) {
                give_up(p, DTRAIN_BOUNDED_TIMEOUT, NULL);
                finish(p);
                continue;
            }
            if (nw == MAX_WAIT)
                continue; /* the rest on the next round */
            fds[nw] = (struct pollfd){.fd = p->fd, .events = POLLIN};
            waiting[nw++] = p;
            if (soonest < 0 || deadline < soonest)
                soonest = deadline;
        }
        if (nw == 0)
            return;
        int wait = (int)(soonest - now) + 1;
        int rc = poll(fds, (nfds_t)nw, wait);
        if (rc < 0 && errno != EINTR) {
            char what[64];
            dtrain_snprintf(what, sizeof(what), "poll: %s", strerror(errno));
            for (int i = 0; i < nw; i++) {
                give_up(waiting[i], DTRAIN_BOUNDED_FAILED, what);
                finish(waiting[i]);
            }
            return;
        }
        for (int i = 0; rc > 0 && i < nw; i++) {
            if (!fds[i].revents)
                continue;
            char c;
            ssize_t got = read(fds[i].fd, &c, 1);
            if (got > 0 || (got < 0 && (errno == EINTR || errno == EAGAIN)))
                continue; /* the child wrote to the pipe: not its end */
            collect(waiting[i]);
            finish(waiting[i]);
        }
    }
}

void dtrain_probe_wait(struct dtrain_probe *probe)
{
    struct dtrain_probe *list[1] = {probe};
    dtrain_probe_wait_all(list, 1);
}

enum dtrain_bounded_status dtrain_run_bounded(dtrain_probe_fn probe, const void *arg, void *out,
                                              size_t outsize, int timeout_ms, char *why, size_t whylen)
{
    struct dtrain_probe p;
    dtrain_probe_start(&p, probe, arg, out, outsize, timeout_ms, NULL, NULL);
    dtrain_probe_wait(&p);
    if (why)
        dtrain_snprintf(why, whylen, "%s", p.why);
    return p.status;
}
