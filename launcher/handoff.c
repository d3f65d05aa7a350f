/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The child PROGRAM's environment, exec or fork; see handoff.h. */
#include "handoff.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap_env.h"
#include "dtrain_exit.h"
#include "dtrain_parse.h"

enum dtrain_status dtrain_handoff_export(const struct dtrain_bootstrap *bs, char *err, size_t errlen)
{
    static const char *const pmi_vars[] = {"PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_SPAWNED"};
    if (dtrain_bootstrap_env_export(bs, err, errlen) != 0)
        return DTRAIN_ERR_SYSTEM;
    for (size_t i = 0; i < sizeof pmi_vars / sizeof pmi_vars[0]; i++)
        unsetenv(pmi_vars[i]);
    return DTRAIN_OK;
}

static int fill_forwarded(sigset_t *set)
{
    static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};
    if (sigemptyset(set) != 0)
        return -1;
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        if (sigaddset(set, forwarded[i]) != 0)
            return -1;
    return 0;
}

/* Fork, forward signals, wait: NCCL's bootstrap roots stay alive here. */
static enum dtrain_status fork_and_wait(char *const argv[], int *exit_code, char *err, size_t errlen)
{
    sigset_t waited, old;
    if (fill_forwarded(&waited) != 0 || sigaddset(&waited, SIGCHLD) != 0 ||
        sigprocmask(SIG_BLOCK, &waited, &old) != 0) {
        dtrain_snprintf(err, errlen, "sigprocmask: %s", strerror(errno));
        return DTRAIN_ERR_SYSTEM;
    }
    char failed[300]; /* the child's message if execvp fails, made before fork */
    dtrain_snprintf(failed, sizeof failed, "dtrain-launch: cannot run '%.200s': not found or not executable\n",
                    argv[0]);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        dtrain_snprintf(err, errlen, "fork: %s", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        return DTRAIN_ERR_SYSTEM;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls here: the parent may have threads. */
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(argv[0], argv);
        ssize_t n = write(STDERR_FILENO, failed, strlen(failed));
        (void)n;
        _exit(DTRAIN_EXIT_USAGE);
    }
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&waited, &info);
        if (sig < 0) {
            if (errno == EINTR)
                continue;
            dtrain_snprintf(err, errlen, "sigwaitinfo: %s", strerror(errno));
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return DTRAIN_ERR_SYSTEM;
        }
        if (sig != SIGCHLD) {
            kill(pid, sig);
            continue;
        }
        int status;
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == 0)
            continue; /* stopped or continued, not ended */
        if (done < 0) {
            dtrain_snprintf(err, errlen, "waitpid: %s", strerror(errno));
            return DTRAIN_ERR_SYSTEM;
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            return DTRAIN_OK;
        }
    }
}

enum dtrain_status dtrain_handoff_run(char *const argv[], int keep_alive, int *exit_code, char *err, size_t errlen)
{
    if (keep_alive)
        return fork_and_wait(argv, exit_code, err, errlen);
    fflush(NULL);
    execvp(argv[0], argv);
    dtrain_snprintf(err, errlen, "cannot run '%.200s': %s", argv[0], strerror(errno));
    return DTRAIN_ERR_INPUT;
}
