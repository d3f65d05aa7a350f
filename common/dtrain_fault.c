/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The restart budget, the fault line, the timeline and the stop signals;
 * see dtrain_fault.h. */
#include "dtrain_fault.h"
#include "dtrain_file.h"
#include "dtrain_env.h"
#include "dtrain_exit.h"
#include "dtrain_parse.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dtrain_restarts_read(struct dtrain_restarts *r, char *err, size_t errlen)
{
    const char *count = getenv(DTRAIN_ENV_RESTART_COUNT), *max = getenv(DTRAIN_ENV_MAX_RESTARTS);
    const char *in_job = getenv(DTRAIN_ENV_INJOB_RESTARTS);
    char why[256];
    memset(r, 0, sizeof *r);
    r->max = -1;
    if (count != NULL && count[0] != '\0' &&
        dtrain_parse_int(count, 0, 1000000, DTRAIN_ENV_RESTART_COUNT, &r->requeues, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (in_job != NULL && in_job[0] != '\0') {
        if (dtrain_parse_int(in_job, 0, 1000000, DTRAIN_ENV_INJOB_RESTARTS " (set by dtrain-launch --supervise)",
                             &r->in_job, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s", why);
            return -1;
        }
        r->supervised = 1;
    }
    r->count = r->requeues + r->in_job;
    if (max != NULL && max[0] != '\0' &&
        dtrain_parse_int(max, 0, 10000, DTRAIN_ENV_MAX_RESTARTS " (--dtrain-max-restarts)", &r->max, why,
                         sizeof why) != 0) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    return 0;
}

int dtrain_restarts_exit(const struct dtrain_restarts *r, char *why, size_t whylen)
{
    const char *next = r->supervised ? "" : "requeue, ";
    if (r->max < 0) {
        snprintf(why, whylen, "%srestart %ld", next, r->count + 1);
        return DTRAIN_EXIT_REQUEUE;
    }
    if (r->count < r->max) {
        snprintf(why, whylen, "%srestart %ld of at most %ld", next, r->count + 1, r->max);
        return DTRAIN_EXIT_REQUEUE;
    }
    snprintf(why, whylen, "not requeued: the job was already restarted %ld time%s (--dtrain-max-restarts=%ld)",
             r->count, r->count == 1 ? "" : "s", r->max);
    return DTRAIN_EXIT_FAILURE;
}

int dtrain_fault_init(struct dtrain_fault *f, const char *prog, int rank, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->prog = prog;
    f->rank = rank;
    atomic_init(&f->reported, 0);
    const char *node = getenv("SLURMD_NODENAME"), *log = getenv(DTRAIN_ENV_FAULT_LOG);
    snprintf(f->node, sizeof f->node, "%s", node != NULL && node[0] != '\0' ? node : "-");
    if (gethostname(f->host, sizeof f->host) != 0)
        snprintf(f->host, sizeof f->host, "?");
    f->host[sizeof f->host - 1] = '\0';
    if (log != NULL)
        snprintf(f->log_path, sizeof f->log_path, "%s", log);
    return dtrain_restarts_read(&f->restarts, err, errlen);
}

double dtrain_wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void json_escape(char *out, size_t len, const char *in)
{
    size_t o = 0;
    for (; in != NULL && *in != '\0' && o + 7 < len; in++) {
        unsigned char c = (unsigned char)*in;
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, len - o, "\\%c", c);
        else if (c < 0x20)
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = '\0';
}

void dtrain_fault_event(const struct dtrain_fault *f, const char *event, long step, const char *what)
{
    if (f == NULL || f->log_path[0] == '\0')
        return;
    char w[600], line[1024];
    json_escape(w, sizeof w, what);
    int n = snprintf(line, sizeof line, "{\"t\": %.6f, \"event\": \"%s\", \"rank\": %d, \"node\": \"%s\", "
                     "\"step\": %ld, \"restart\": %ld, \"what\": \"%s\"}\n", dtrain_wall_seconds(), event,
                     f->rank, f->node, step, f->restarts.count, w);
    if (n < 0 || (size_t)n >= sizeof line)
        return;
    /* one write with O_APPEND: lines of several processes do not mix */
    char why[600];
    int fd = dtrain_open_regular(f->log_path, O_WRONLY | O_APPEND | O_CREAT, "fault log", NULL, why, sizeof why);
    if (fd < 0)
        return;
    ssize_t unused = write(fd, line, (size_t)n);
    (void)unused; /* the timeline is best effort: a full disk must not turn into another fault */
    close(fd);
}

int dtrain_fault_report(struct dtrain_fault *f, long step, const char *reason)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&f->reported, &expected, 1)) {
        while (atomic_load(&f->reported) != 2)
            usleep(1000); /* the first reporter is still writing its line */
        return f->exit_code;
    }
    char why[256];
    f->exit_code = dtrain_restarts_exit(&f->restarts, why, sizeof why);
    fflush(stdout);
    if (f->rank >= 0)
        fprintf(stderr, "%s: fault: rank %d on %s (%s): %s: exit %d (%s)\n", f->prog, f->rank, f->node, f->host,
                reason, f->exit_code, why);
    else
        fprintf(stderr, "%s: fault: on %s (%s): %s: exit %d (%s)\n", f->prog, f->node, f->host, reason,
                f->exit_code, why);
    fflush(stderr);
    dtrain_fault_event(f, "detect", step, reason);
    atomic_store(&f->reported, 2);
    return f->exit_code;
}

/* ------------------------------------------------------------ signals */

/* Process-wide by nature: a signal handler has no context. */
static volatile sig_atomic_t signals_seen;
static struct sigaction old_term, old_usr1, old_int;
static int installed;

static void on_signal(int sig)
{
    if (sig == SIGINT && (signals_seen & DTRAIN_SIGNAL_INT)) {
        signal(SIGINT, SIG_DFL); /* the second Ctrl-C: now */
        raise(SIGINT);
    }
    signals_seen |= sig == SIGTERM ? DTRAIN_SIGNAL_TERM
                    : sig == SIGINT ? DTRAIN_SIGNAL_TERM | DTRAIN_SIGNAL_INT : DTRAIN_SIGNAL_USR1;
}

int dtrain_signals_install(char *err, size_t errlen)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    signals_seen = 0;
    if (sigaction(SIGTERM, &sa, &old_term) != 0 || sigaction(SIGUSR1, &sa, &old_usr1) != 0 ||
        sigaction(SIGINT, &sa, &old_int) != 0) {
        snprintf(err, errlen, "cannot install the SIGTERM/SIGUSR1/SIGINT handlers: %s", strerror(errno));
        return -1;
    }
    installed = 1;
    return 0;
}

int dtrain_signals_pending(void)
{
    return signals_seen;
}

void dtrain_signals_restore(void)
{
    if (!installed)
        return;
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGINT, &old_int, NULL);
    installed = 0;
}

const char *dtrain_signals_name(int bits)
{
    switch (bits & (DTRAIN_SIGNAL_TERM | DTRAIN_SIGNAL_USR1)) {
    case DTRAIN_SIGNAL_TERM: return bits & DTRAIN_SIGNAL_INT ? "SIGINT" : "SIGTERM";
    case DTRAIN_SIGNAL_USR1: return "SIGUSR1";
    case DTRAIN_SIGNAL_TERM | DTRAIN_SIGNAL_USR1: return "SIGTERM and SIGUSR1";
    default: return "no signal";
    }
}
