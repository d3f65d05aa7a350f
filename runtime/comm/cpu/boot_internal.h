/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu backend's bootstrap, private to its files: what one step's file
 * uses of another's (boot_accept.c: accepting hellos; boot_lookup.c: the
 * address lookups).  The steps themselves are declared in cpu_comm.h. */
#ifndef DTRAIN_COMM_CPU_BOOT_INTERNAL_H
#define DTRAIN_COMM_CPU_BOOT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_comm.h"

/* boot_accept.c: close a connection that is not a member's, counted in
 * c->refused; TCP_NODELAY; wait for a hello (see there) */
void cpu_refuse(struct dtrain_comm *c, int fd);
int cpu_set_nodelay(int fd);
int cpu_accept_hello(struct dtrain_comm *c, struct cpu_comm *cc, enum wire_hello_kind kind, int from,
                     int64_t deadline_ms, int *fd_out, struct wire_hello *h, char *why, size_t whylen);

/* boot_lookup.c: the leader's directory thread; a member's address */
int cpu_directory_start(struct dtrain_comm *c, struct cpu_comm *cc, char *why, size_t whylen);
void cpu_directory_stop(struct cpu_directory *d);
int cpu_lookup(struct dtrain_comm *c, struct cpu_comm *cc, int peer, int64_t deadline_ms, char *why,
               size_t whylen);

#endif
