/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Sockets with deadlines for the cpu backend's bootstrap and link setup.
 *
 * Every function that may wait takes an absolute deadline (dtrain_clock_ms()
 * clock) and an abort check, so that no setup step can block forever.
 * Results: 0, or a negative enum dtrain_comm_result (-DTRAIN_COMM_ETIMEDOUT,
 * -DTRAIN_COMM_EPEER, ...) with one line in why. */
#ifndef DTRAIN_COMM_CPU_NET_H
#define DTRAIN_COMM_CPU_NET_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain_clock.h"

struct dtrain_comm;

/* -DTRAIN_COMM_EABORTED when the communicator's abort flag or
 * dtrain_comm_abort() is set, -DTRAIN_COMM_ETIMEDOUT when deadline_ms has
 * passed, else 0. */
int net_check(struct dtrain_comm *c, int64_t deadline_ms, char *why, size_t whylen);

int net_set_nonblocking(int fd);

/* Pause between attempts to reach a peer that refuses (or drops) connections. */
#define NET_RETRY_MS 20

/* Connect a non-blocking TCP socket to addr:port, retrying a refused or
 * unreachable peer (it may not listen yet, or is restarting) until the
 * deadline.  *fd_out is non-blocking, close-on-exec, TCP_NODELAY. */
int net_connect(struct dtrain_comm *c, const struct sockaddr_in *to, int64_t deadline_ms, int *fd_out,
                char *why, size_t whylen);

/* Write / read exactly len bytes on a non-blocking socket before the deadline. */
int net_write_all(struct dtrain_comm *c, int fd, const void *buf, size_t len, int64_t deadline_ms,
                  char *why, size_t whylen);
int net_read_all(struct dtrain_comm *c, int fd, void *buf, size_t len, int64_t deadline_ms,
                 char *why, size_t whylen);

/* A listening, non-blocking TCP socket on addr (port chosen by the kernel). */
int net_listen(const struct in_addr *addr, int *fd_out, char *why, size_t whylen);

/* Whether two secrets are equal, in time independent of where they differ. */
int net_secret_equal(const unsigned char *a, const unsigned char *b, size_t len);

/* "a.b.c.d:port" of an address, for messages; buf holds at least 24 bytes. */
const char *net_addr_text(const struct sockaddr_in *sin, char *buf, size_t len);

#endif
