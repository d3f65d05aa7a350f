/* Run one probe in a forked child with a deadline; see bounded.h. */
#include "bounded.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtrain_parse.h"

void health_stage_set(struct health_stage *stage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(stage->text, sizeof(stage->text), fmt, ap);
    va_end(ap);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until the child closes its end of the pipe (it exited, or exec'd)
 * or the deadline passes.  Returns 1 on EOF, 0 on timeout, -1 on error. */
static int wait_eof(int fd, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n == 0)
            return 1;
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            return -1;
    }
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

enum health_bounded_status health_run_bounded(health_probe_fn probe, const void *arg,
                                              void *out, size_t outsize, int timeout_ms,
                                              char *why, size_t whylen)
{
    enum health_bounded_status status = HEALTH_BOUNDED_FAILED;
    size_t shared_len = sizeof(struct health_stage) + outsize;
    int fds[2] = {-1, -1};
    struct health_stage *stage;
    void *shared;

    memset(out, 0, outsize);
    why[0] = '\0';
    shared = mmap(NULL, shared_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        dtrain_snprintf(why, whylen, "cannot map %zu bytes of shared memory: %s", shared_len, strerror(errno));
        return HEALTH_BOUNDED_FAILED;
    }
    stage = shared;
    dtrain_snprintf(stage->text, sizeof(stage->text), "starting");
    if (pipe2(fds, O_CLOEXEC) != 0) {
        dtrain_snprintf(why, whylen, "cannot create a pipe: %s", strerror(errno));
        goto out;
    }

    /* Flush our buffered output so the child cannot print it twice. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        dtrain_snprintf(why, whylen, "cannot fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        /* Own process group, so that a timeout kills helpers the probe
         * may have started too. */
        setpgid(0, 0);
        close(fds[0]);
        probe(arg, (char *)shared + sizeof(struct health_stage), stage);
        _exit(0);
    }
    setpgid(pid, pid); /* also from here: no race with the kill below */
    close(fds[1]);
    fds[1] = -1;

    int eof = wait_eof(fds[0], now_ms() + timeout_ms);
    if (eof <= 0) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        reap_briefly(pid);
        if (eof == 0)
            dtrain_snprintf(why, whylen, "did not finish within %d ms (stuck in %s)", timeout_ms, stage->text);
        else
            dtrain_snprintf(why, whylen, "lost track of the probe (%s) in %s", strerror(errno), stage->text);
        status = eof == 0 ? HEALTH_BOUNDED_TIMEOUT : HEALTH_BOUNDED_FAILED;
        goto out;
    }
    int wstatus = 0;
    pid_t r;
    while ((r = waitpid(pid, &wstatus, 0)) < 0 && errno == EINTR)
        ;
    if (r != pid) {
        dtrain_snprintf(why, whylen, "cannot wait for the probe: %s", strerror(errno));
    } else if (WIFSIGNALED(wstatus)) {
        dtrain_snprintf(why, whylen, "crashed with signal %d (%s) in %s", WTERMSIG(wstatus),
                        strsignal(WTERMSIG(wstatus)), stage->text);
    } else if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        dtrain_snprintf(why, whylen, "exited with status %d in %s", WEXITSTATUS(wstatus), stage->text);
    } else {
        memcpy(out, (char *)shared + sizeof(struct health_stage), outsize);
        status = HEALTH_BOUNDED_OK;
    }
out:
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    munmap(shared, shared_len);
    return status;
}
