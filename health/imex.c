/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: the IMEX daemon's state; see imex.h. */
#include "imex.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrain_file.h"
#include "dtrain_parse.h"

#define IMEX_OUTPUT_MAX 4096 /* read and kept at most; the rest is drained */

int health_imex_known_state(const char *word)
{
    static const char *const states[] = {"INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS",
                                         "WAITING_FOR_RECOVERY", "INIT_GPU", "READY", "SHUTTING_DOWN",
                                         "UNAVAILABLE"};
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
        if (strcmp(word, states[i]) == 0)
            return 1;
    return 0;
}

/* The first line of text, printable ASCII only ('?' for other bytes),
 * surrounding blanks dropped. */
static void first_line(const char *text, size_t len, char *out, size_t outlen)
{
    size_t i = 0, o = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
    for (; i < len && text[i] != '\n' && text[i] != '\r' && o + 1 < outlen; i++)
        out[o++] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
    while (o > 0 && (out[o - 1] == ' ' || out[o - 1] == '\t'))
        o--;
    out[o] = '\0';
}

static void imex_child(const void *arg, void *outp, struct dtrain_stage *stage)
{
    const char *ctl = arg;
    struct health_imex_facts *out = outp;
    char why[1200];
    dtrain_snprintf(out->ctl, sizeof(out->ctl), "%s", ctl);
    dtrain_stage_set(stage, "checking %.120s", ctl);
    /* A program the prolog runs as root: trusted as the config is. */
    int fd = geteuid() == 0 ? dtrain_open_trusted(ctl, "the IMEX control program", 0, why, sizeof(why))
                            : dtrain_open_regular(ctl, O_RDONLY, "the IMEX control program", NULL, why, sizeof(why));
    if (fd < 0) {
        dtrain_snprintf(out->error, sizeof(out->error), "%s", why);
        return;
    }
    close(fd);
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        dtrain_snprintf(out->error, sizeof(out->error), "pipe: %s", strerror(errno));
        return;
    }
    dtrain_stage_set(stage, "%.120s -q", ctl);
    pid_t pid = fork();
    if (pid < 0) {
        dtrain_snprintf(out->error, sizeof(out->error), "fork: %s", strerror(errno));
        close(pipefd[0]);
        close(pipefd[1]);
        return;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0 || dup2(pipefd[1], 1) < 0 || dup2(pipefd[1], 2) < 0)
            _exit(127);
        signal(SIGPIPE, SIG_DFL);
        char *const argv[] = {(char *)ctl, (char *)"-q", NULL};
        char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C", NULL};
        execve(ctl, argv, envp);
        char msg[300];
        int n = snprintf(msg, sizeof(msg), "cannot run %.200s: %s\n", ctl, strerror(errno));
        if (n > 0 && write(1, msg, (size_t)n) < 0)
            _exit(127);
        _exit(127);
    }
    close(pipefd[1]);
    char buf[IMEX_OUTPUT_MAX], scratch[512];
    size_t len = 0;
    for (;;) {
        ssize_t got = len < sizeof(buf) ? read(pipefd[0], buf + len, sizeof(buf) - len)
                                        : read(pipefd[0], scratch, sizeof(scratch));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (len < sizeof(buf))
            len += (size_t)got;
    }
    close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    out->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
    first_line(buf, len, out->output, sizeof(out->output));
    out->ok = 1;
}

static void imex_failed(void *outp, const void *ctx, const char *why)
{
    struct health_imex_facts *out = outp;
    const char *ctl = ctx;
    out->ok = 0;
    dtrain_snprintf(out->ctl, sizeof(out->ctl), "%s", ctl);
    dtrain_snprintf(out->error, sizeof(out->error), "%.200s -q %s", ctl, why);
}

void health_imex_start(const char *ctl, int timeout_ms, struct health_imex_facts *out, struct dtrain_probe *probe)
{
    dtrain_probe_start(probe, imex_child, ctl, out, sizeof(*out), timeout_ms, imex_failed, ctl);
}

void health_imex_probe(const char *ctl, int timeout_ms, struct health_imex_facts *out)
{
    struct dtrain_probe probe;
    health_imex_start(ctl, timeout_ms, out, &probe);
    dtrain_probe_wait(&probe);
}
