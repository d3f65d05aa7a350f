/* SPDX-License-Identifier: GPL-2.0-or-later */
/* MASTER_ADDR / MASTER_PORT of a placed step; see rendezvous.h. */
#include "rendezvous.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "dtrain_parse.h"

int dtrain_rdv_master_addr(const char *nodelist, char *out, size_t outlen, char *err, size_t errlen)
{
    DTRAIN_SLURM_HOSTLIST hl = nodelist ? slurm_hostlist_create(nodelist) : NULL;
    char *first = hl ? slurm_hostlist_shift(hl) : NULL;
    int rc = -1;
    if (first == NULL) {
        dtrain_snprintf(err, errlen, "cannot read the first node of the step's node list '%.64s'",
                        nodelist ? nodelist : "(unset)");
        goto out;
    }
    /* slurmstepd's own table NodeName -> NodeAddr, the address Slurm itself
     * reaches the node at: slurm_conf_get_addr() of libslurm (not in
     * slurm.h, so looked up; the node name is used when it is missing). */
    int (*get_addr)(const char *, struct sockaddr_storage *, uint16_t) =
        (int (*)(const char *, struct sockaddr_storage *, uint16_t))dlsym(RTLD_DEFAULT, "slurm_conf_get_addr");
    struct sockaddr_storage sa;
    char text[INET6_ADDRSTRLEN] = "";
    memset(&sa, 0, sizeof sa);
    if (get_addr != NULL && get_addr(first, &sa, 0) == 0) {
        if (sa.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, text, sizeof text);
        else if (sa.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, text, sizeof text);
    }
    if (dtrain_snprintf(out, outlen, "%s", text[0] ? text : first) != 0)
        dtrain_snprintf(err, errlen, "the address of node %.64s is longer than %zu bytes", first, outlen - 1);
    else
        rc = 0;
out:
    free(first);
    if (hl)
        slurm_hostlist_destroy(hl);
    return rc;
}

/* Whether a program listens on port (any address): 0 free, -1 with err. */
static int probe_port(int port, char *err, size_t errlen)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, rc = -1;
    if (fd < 0) {
        dtrain_snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    /* SO_REUSEADDR as TCPStore sets it: connections of an earlier store in
     * TIME_WAIT do not count, a listener does. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1) != 0)
        dtrain_snprintf(err, errlen, "port %d is taken on this node (%s): another program uses it", port,
                        strerror(errno));
    else
        rc = 0;
    close(fd);
    return rc;
}

/* fd (the lock folder or a lock file) is this process's own: of its
 * effective user, not writable by group or others, of the right type.
 * Anything else at those names is not ours to lock or to write: 0, or -1
 * with err. */
static int own_lock_node(int fd, int dir, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        dtrain_snprintf(err, errlen, "cannot check %s: %s", path, strerror(errno));
        return -1;
    }
    if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        dtrain_snprintf(err, errlen, "%s is not a %s: remove it", path, dir ? "folder" : "regular file");
        return -1;
    }
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        dtrain_snprintf(err, errlen, "%s belongs to uid %u with mode %04o, not to uid %u and writable by it "
                        "alone: remove it", path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                        (unsigned)geteuid());
        return -1;
    }
    return 0;
}

int dtrain_rdv_claim_port(int port, int *lock_fd, char *err, size_t errlen)
{
    char path[128], name[64];
    *lock_fd = -1;
    if (mkdir(DTRAIN_RDV_LOCK_DIR, 0755) != 0 && errno != EEXIST)
        return probe_port(port, err, errlen);
    /* The folder and the file are checked on the descriptors that are
     * used (no link followed, nothing swapped in between), and the file
     * is opened without blocking: a FIFO or a device there must neither
     * hang slurmstepd nor be locked and kept as if it were our lock. */
    int dfd = open(DTRAIN_RDV_LOCK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
        dtrain_snprintf(err, errlen, "%s is a link or a file, not a folder: remove it", DTRAIN_RDV_LOCK_DIR);
        return -1;
    }
    if (dfd < 0) /* not ours to use (as before: the probe alone) */
        return probe_port(port, err, errlen);
    if (own_lock_node(dfd, 1, DTRAIN_RDV_LOCK_DIR, err, errlen) != 0) {
        close(dfd);
        return -1;
    }
    dtrain_snprintf(name, sizeof name, "master-port-%d.lock", port);
    dtrain_snprintf(path, sizeof path, DTRAIN_RDV_LOCK_DIR "/%s", name);
    int fd = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
    int open_errno = errno;
    close(dfd);
    if (fd < 0 && open_errno == ELOOP) {
        dtrain_snprintf(err, errlen, "the lock file %s is a symbolic link: remove it", path);
        return -1;
    }
    if (fd < 0)
        return probe_port(port, err, errlen);
    if (own_lock_node(fd, 0, path, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        dtrain_snprintf(err, errlen, "port %d is held by another dtrain job step on this node (%s is locked)",
                        port, path);
        close(fd);
        return -1;
    }
    if (probe_port(port, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    *lock_fd = fd;
    return 0;
}
