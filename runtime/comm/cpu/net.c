/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Sockets with deadlines; see net.h. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_backend.h"
#include "cpu_comm.h"
#include "dtrain_parse.h"

/* How long one poll may sleep before the abort flag is looked at again;
 * during a bootstrap (cpu_comm.h: booting) as long as the watch's interval:
 * thousands of members waiting for the leader on a few CPUs, each waking
 * every 20 ms for nothing, would take the CPU the leader needs to let them
 * in (a wait still ends at once when its socket is ready). */
#define NET_POLL_SLICE_MS 20

static int slice_ms(const struct dtrain_comm *c)
{
    const struct cpu_comm *cc = c->impl;
    return cc != NULL && cc->booting ? CPU_BOOT_WATCH_MS : NET_POLL_SLICE_MS;
}

int net_check(struct dtrain_comm *c, int64_t deadline_ms, char *why, size_t whylen)
{
    if (comm_should_abort(c)) {
        dtrain_snprintf(why, whylen, "aborted");
        return -DTRAIN_COMM_EABORTED;
    }
    if (dtrain_clock_ms() >= deadline_ms) {
        dtrain_snprintf(why, whylen, "timed out after %d ms", c->timeout_ms);
        return -DTRAIN_COMM_ETIMEDOUT;
    }
    /* During the bootstrap: a member or the leader that is gone ends the
     * wait now (cpu_comm.h, step 5). */
    return cpu_boot_watch(c, why, whylen);
}

/* Poll one fd for events, at most one slice; 1 when ready, 0 when not yet,
 * negative on abort, timeout or poll failure. */
static int wait_fd(struct dtrain_comm *c, int fd, short events, int64_t deadline_ms, char *why, size_t whylen)
{
    int rc = net_check(c, deadline_ms, why, whylen);
    if (rc != 0)
        return rc;
    int64_t left = deadline_ms - dtrain_clock_ms();
    struct pollfd p = {.fd = fd, .events = events};
    int slice = slice_ms(c);
    int n = poll(&p, 1, (int)(left < slice ? left : slice));
    if (n < 0 && errno != EINTR) {
        dtrain_snprintf(why, whylen, "poll: %s", strerror(errno));
        return -DTRAIN_COMM_ESYS;
    }
    return n > 0;
}

int net_set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ? -1 : 0;
}

const char *net_addr_text(const struct sockaddr_in *sin, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip) == NULL)
        dtrain_snprintf(ip, sizeof ip, "?");
    dtrain_snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(sin->sin_port));
    return buf;
}

/* Errors after which the peer may still come up: try again. */
static int retryable(int e)
{
    return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH || e == ETIMEDOUT || e == EAGAIN;
}

/* One connection attempt: 1 connected, 0 refused/unreachable (retry), <0 error. */
static int connect_once(struct dtrain_comm *c, const struct sockaddr_in *to, int64_t deadline_ms, int *fd_out,
                        char *why, size_t whylen)
{
    char text[32];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        dtrain_snprintf(why, whylen, "socket: %s", strerror(errno));
        return -DTRAIN_COMM_ESYS;
    }
    int rc;
    if (connect(fd, (const struct sockaddr *)to, sizeof *to) != 0) {
        if (errno != EINPROGRESS) {
            rc = 0;
            if (!retryable(errno)) {
                dtrain_snprintf(why, whylen, "connect to %s: %s", net_addr_text(to, text, sizeof text),
                                strerror(errno));
                rc = -DTRAIN_COMM_EPEER;
            }
            goto fail;
        }
        while ((rc = wait_fd(c, fd, POLLOUT, deadline_ms, why, whylen)) == 0)
            ;
        if (rc < 0)
            goto fail;
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
            soerr = errno;
        if (soerr != 0) {
            rc = 0;
            if (!retryable(soerr)) {
                dtrain_snprintf(why, whylen, "connect to %s: %s", net_addr_text(to, text, sizeof text),
                                strerror(soerr));
                rc = -DTRAIN_COMM_EPEER;
            }
            goto fail;
        }
    }
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        dtrain_snprintf(why, whylen, "setsockopt TCP_NODELAY: %s", strerror(errno));
        rc = -DTRAIN_COMM_ESYS;
        goto fail;
    }
    *fd_out = fd;
    return 1;
fail:
    close(fd);
    return rc;
}

int net_connect(struct dtrain_comm *c, const struct sockaddr_in *to, int64_t deadline_ms, int *fd_out,
                char *why, size_t whylen)
{
    char text[32];
    for (;;) {
        int rc = connect_once(c, to, deadline_ms, fd_out, why, whylen);
        if (rc > 0)
            return 0;
        if (rc < 0)
            return rc;
        /* Refused: nobody listens there (yet, or any more). */
        rc = net_check(c, deadline_ms, why, whylen);
        if (rc == -DTRAIN_COMM_ETIMEDOUT)
            dtrain_snprintf(why, whylen, "nobody accepted a connection at %s within %d ms (is the peer alive?)",
                            net_addr_text(to, text, sizeof text), c->timeout_ms);
        if (rc != 0)
            return rc;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = NET_RETRY_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
}

int net_write_all(struct dtrain_comm *c, int fd, const void *buf, size_t len, int64_t deadline_ms, char *why,
                  size_t whylen)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            atomic_fetch_add(&c->setup_bytes_sent, (uint64_t)n);
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            dtrain_snprintf(why, whylen, "send: %s", strerror(errno));
            return -DTRAIN_COMM_EPEER;
        }
        int rc = wait_fd(c, fd, POLLOUT, deadline_ms, why, whylen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int net_read_all(struct dtrain_comm *c, int fd, void *buf, size_t len, int64_t deadline_ms, char *why,
                 size_t whylen)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            dtrain_snprintf(why, whylen, "connection closed by the peer");
            return -DTRAIN_COMM_EPEER;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            dtrain_snprintf(why, whylen, "recv: %s", strerror(errno));
            return -DTRAIN_COMM_EPEER;
        }
        int rc = wait_fd(c, fd, POLLIN, deadline_ms, why, whylen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int net_listen(const struct in_addr *addr, int *fd_out, char *why, size_t whylen)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr = *addr, .sin_port = 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        dtrain_snprintf(why, whylen, "socket: %s", strerror(errno));
        return -DTRAIN_COMM_ESYS;
    }
    char text[32];
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(fd, SOMAXCONN) != 0) {
        dtrain_snprintf(why, whylen, "listening on %s: %s", net_addr_text(&sin, text, sizeof text),
                        strerror(errno));
        close(fd);
        return -DTRAIN_COMM_ESYS;
    }
    *fd_out = fd;
    return 0;
}

int net_secret_equal(const unsigned char *a, const unsigned char *b, size_t len)
{
    volatile unsigned char diff = 0;
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}
