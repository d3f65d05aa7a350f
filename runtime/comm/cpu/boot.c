/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Bootstrap of the cpu backend, step 5 (done, and the watch on the
 * bootstrap's connections) and closing a communicator; the steps before
 * are in boot_join.c (1-3), boot_links.c (4) and boot_accept.c, the
 * lookups in boot_lookup.c; see cpu_comm.h for the sequence. */
#include "boot_internal.h"
#include "dtrain_hugemem.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "comm/comm_backend.h"
#include "dtrain_parse.h"
#include "net.h"

/* ------------------------------------------------------------------ step 5: done */

int cpu_boot_watch(struct dtrain_comm *c, char *why, size_t whylen)
{
    struct cpu_comm *cc = c->impl;
    if (cc == NULL || (cc->boot_fds == NULL && cc->boot_fd < 0))
        return 0;
    int64_t now = dtrain_clock_ms();
    if (now < cc->boot_watch_ms)
        return 0;
    cc->boot_watch_ms = now + CPU_BOOT_WATCH_MS;
    char byte;
    if (cc->boot_fd >= 0) {
        ssize_t n = recv(cc->boot_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            dtrain_snprintf(why, whylen, "the leader (rank 0) ended the bootstrap while the ring links were set "
                            "up: a member died or failed (the leader's message names it), or the leader did");
            return -DTRAIN_COMM_EPEER;
        }
        return 0;
    }
    for (int i = 1; i < c->size; i++) {
        if (cc->boot_fds[i] < 0)
            continue;
        ssize_t n = recv(cc->boot_fds[i], &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            dtrain_snprintf(why, whylen, "rank %d closed its bootstrap connection before its ring links were up "
                            "(it died, or failed)", i);
            return -DTRAIN_COMM_EPEER;
        }
    }
    return 0;
}

static void close_boot(struct cpu_comm *cc, int size)
{
    for (int i = 0; cc->boot_fds != NULL && i < size; i++)
        if (cc->boot_fds[i] >= 0)
            close(cc->boot_fds[i]);
    free(cc->boot_fds);
    cc->boot_fds = NULL;
    if (cc->boot_fd >= 0)
        close(cc->boot_fd);
    cc->boot_fd = -1;
}

int cpu_boot_done(struct dtrain_comm *c, struct cpu_comm *cc, int64_t deadline_ms, char *why, size_t whylen)
{
    unsigned char byte = WIRE_BOOT_READY;
    int rc = 0;
    if (cc->boot_fds == NULL && cc->boot_fd < 0)
        return 0; /* a group of one */
    if (c->rank != 0) {
        if ((rc = net_write_all(c, cc->boot_fd, &byte, 1, deadline_ms, why, whylen)) != 0 ||
            (rc = net_read_all(c, cc->boot_fd, &byte, 1, deadline_ms, why, whylen)) != 0) {
            char step[200];
            dtrain_snprintf(step, sizeof step, "%s", why);
            dtrain_snprintf(why, whylen, "waiting for the other members' ring links: %s", step);
        } else if (byte != WIRE_BOOT_DONE) {
            dtrain_snprintf(why, whylen, "the leader ended the bootstrap with byte 0x%02x, not 0x%02x", byte,
                            WIRE_BOOT_DONE);
            rc = -DTRAIN_COMM_EPEER;
        }
        if (rc == 0) { /* kept: where this member looks addresses up */
            cc->lookup_fd = cc->boot_fd;
            cc->boot_fd = -1;
        }
        close_boot(cc, c->size);
        return rc;
    }
    /* The leader: every member's READY (the watch sees any that closes
     * meanwhile), then DONE to all. */
    for (int i = 1; i < c->size && rc == 0; i++) {
        if ((rc = net_read_all(c, cc->boot_fds[i], &byte, 1, deadline_ms, why, whylen)) == -DTRAIN_COMM_EPEER &&
            strstr(why, "rank ") == NULL)
            dtrain_snprintf(why, whylen, "rank %d closed its bootstrap connection before its ring links were up "
                            "(it died, or failed)", i);
        else if (rc == -DTRAIN_COMM_ETIMEDOUT)
            dtrain_snprintf(why, whylen, "rank %d did not set up its ring links within %d ms", i, c->timeout_ms);
        else if (rc == 0 && byte != WIRE_BOOT_READY) {
            dtrain_snprintf(why, whylen, "rank %d sent byte 0x%02x for its ring links, not 0x%02x", i, byte,
                            WIRE_BOOT_READY);
            rc = -DTRAIN_COMM_EPEER;
        }
    }
    byte = WIRE_BOOT_DONE;
    for (int i = 1; i < c->size && rc == 0; i++)
        rc = net_write_all(c, cc->boot_fds[i], &byte, 1, deadline_ms, why, whylen);
    if (rc == 0 && (rc = cpu_directory_start(c, cc, why, whylen)) == 0)
        cc->boot_fds = NULL; /* the lookup thread's now */
    close_boot(cc, c->size);
    return rc;
}

void cpu_comm_close(struct cpu_comm *cc, int size)
{
    for (int i = 0; i < cc->npending; i++)
        close(cc->pending[i].fd);
    cc->npending = 0;
    if (cc->stash_fd >= 0)
        close(cc->stash_fd);
    for (int i = 0; i < size; i++) {
        if (cc->p2p_out != NULL)
            link_free(cc->p2p_out[i]);
        if (cc->p2p_in != NULL)
            link_free(cc->p2p_in[i]);
    }
    link_free(cc->next);
    link_free(cc->prev);
    cpu_directory_stop(cc->directory);
    if (cc->lookup_fd >= 0)
        close(cc->lookup_fd);
    close_boot(cc, size);
    if (cc->listen_fd >= 0)
        close(cc->listen_fd);
    free(cc->p2p_out);
    free(cc->p2p_in);
    free(cc->table);
    free(cc->scratch);
    dtrain_hugemem_free(cc->cma_sum);
    free(cc->pending);
    free(cc->poll);
    free(cc);
}
