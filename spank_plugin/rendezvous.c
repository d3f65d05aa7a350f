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
 * effective user (root in slurmstepd), of the right type.  Anything else at
 * those names is not ours to lock or to write: 0, or -1 with err.  Ours but
 * open to others (a folder or file of an older dtrain, 0755/0644) is closed
 * to them: a stranger who can open a lock file can flock it. */
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
    mode_t want = dir ? 0700 : 0600;
    if ((st.st_mode & 07777) != want && fchmod(fd, want) != 0) {
        dtrain_snprintf(err, errlen, "cannot make %s mode %04o: %s", path, (unsigned)want, strerror(errno));
        return -1;
    }
    return 0;
}

/* The lock folder, opened without following a link and checked; -1 when
 * it cannot be made or opened (then the probe alone guards the port), -2
 * with err when something not ours is there. */
static int open_lock_dir(char *err, size_t errlen)
{
    if (mkdir(DTRAIN_RDV_LOCK_DIR, 0700) != 0 && errno != EEXIST)
        return -1;
    int dfd = open(DTRAIN_RDV_LOCK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
        dtrain_snprintf(err, errlen, "%s is a link or a file, not a folder: remove it", DTRAIN_RDV_LOCK_DIR);
        return -2;
    }
    if (dfd < 0)
        return -1;
    if (own_lock_node(dfd, 1, DTRAIN_RDV_LOCK_DIR, err, errlen) != 0) {
        close(dfd);
        return -2;
    }
    return dfd;
}

static void lock_name(int port, char *name, size_t len)
{
    dtrain_snprintf(name, len, "master-port-%d.lock", port);
}

/* Give up a held lock: its file goes first, while still locked, so that a
 * step that opened it meanwhile finds, once it has the lock, that the name
 * is no longer that file (lock_port). */
static void unlock_port(int dfd, int fd, int port)
{
    char name[32];
    struct stat held, named;
    lock_name(port, name, sizeof name);
    if (fstat(fd, &held) == 0 && fstatat(dfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
        unlinkat(dfd, name, 0);
    close(fd);
}

/* The lock of one port, taken without blocking.  Returns the locked
 * descriptor; -1 with err when the port is busy (another step holds the
 * lock); -2 with err when something not ours is at the lock's name. */
static int lock_port(int dfd, int port, char *err, size_t errlen)
{
    char path[128], name[32];
    lock_name(port, name, sizeof name);
    dtrain_snprintf(path, sizeof path, DTRAIN_RDV_LOCK_DIR "/%s", name);
    /* A step that releases a port unlinks its lock file while holding it,
     * so a lock taken on a file that was unlinked meanwhile is no lock:
     * after locking, the name must still be the locked file, else open
     * again.  Bounded: a releasing step unlinks once. */
    for (int attempt = 0; attempt < 8; attempt++) {
        /* No link followed, and no blocking open: a FIFO or device there
         * must neither hang slurmstepd nor be locked as if it were ours. */
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0600);
        if (fd < 0 && errno == ELOOP) {
            dtrain_snprintf(err, errlen, "the lock file %s is a symbolic link: remove it", path);
            return -2;
        }
        if (fd < 0) {
            dtrain_snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
            return -2;
        }
        if (own_lock_node(fd, 0, path, err, errlen) != 0) {
            close(fd);
            return -2;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            dtrain_snprintf(err, errlen, "port %d is held by another dtrain job step on this node (%s is locked)",
                            port, path);
            close(fd);
            return -1;
        }
        struct stat held, named;
        if (fstat(fd, &held) == 0 && fstatat(dfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            return fd;
        close(fd);
    }
    dtrain_snprintf(err, errlen, "port %d: %s keeps being replaced while it is locked", port, path);
    return -1;
}

/* Release the first n locks of c's block. */
static void unlock_block(struct dtrain_rdv_claim *c, int base, int n)
{
    for (int k = 0; k < n; k++) {
        if (c->lock_fd[k] >= 0)
            unlock_port(c->dir_fd, c->lock_fd[k], base + k);
        c->lock_fd[k] = -1;
    }
}

/* Lock, then probe, every port of the block base..base+n-1.  0 with the
 * locks in c->lock_fd; -1 with err (a port busy: nothing held); -2 with err
 * (something not ours: nothing held). */
static int claim_block(struct dtrain_rdv_claim *c, int base, int n, char *err, size_t errlen)
{
    for (int k = 0; k < n; k++) {
        c->lock_fd[k] = -1;
        if (c->dir_fd < 0)
            continue;
        int fd = lock_port(c->dir_fd, base + k, err, errlen);
        if (fd < 0) {
            unlock_block(c, base, k);
            return fd;
        }
        c->lock_fd[k] = fd;
    }
    /* Every lock held: no dtrain step can take a port of the block now,
     * so what the probes find busy is another program. */
    for (int k = 0; k < n; k++) {
        if (probe_port(base + k, err, errlen) != 0) {
            unlock_block(c, base, n);
            return -1;
        }
    }
    return 0;
}

int dtrain_rdv_claim_ports(int first, int lo, int hi, int per_step, int may_move, struct dtrain_rdv_claim *c,
                           char *err, size_t errlen)
{
    char why[DTRAIN_RDV_ERR_MAX];
    c->port = 0;
    c->count = 0;
    for (int k = 0; k < DTRAIN_PORTS_PER_STEP_MAX; k++)
        c->lock_fd[k] = -1;
    const int blocks = dtrain_master_port_blocks(lo, hi, per_step);
    if (per_step > DTRAIN_PORTS_PER_STEP_MAX || blocks < 1 || first < lo || (first - lo) % per_step != 0 ||
        (first - lo) / per_step >= blocks) {
        dtrain_snprintf(err, errlen, "port %d does not start a block of %d ports of %d-%d", first, per_step, lo,
                        hi);
        c->dir_fd = -1;
        return -1;
    }
    c->dir_fd = open_lock_dir(err, errlen);
    if (c->dir_fd == -2) {
        c->dir_fd = -1;
        return -2;
    }
    /* first's block, then the range's next blocks in turn (wrapping): a
     * block where another step or program holds a port is passed over, not
     * a refusal. */
    const int first_block = (first - lo) / per_step;
    const int count = may_move ? blocks : 1;
    for (int i = 0; i < count; i++) {
        int base = lo + per_step * ((first_block + i) % blocks);
        int rc = claim_block(c, base, per_step, i == 0 ? err : why, i == 0 ? errlen : sizeof why);
        if (rc == -2) {
            if (i != 0)
                dtrain_snprintf(err, errlen, "%s", why);
            dtrain_rdv_release(c);
            return -2;
        }
        if (rc != 0)
            continue;
        c->port = base;
        c->count = per_step;
        return 0;
    }
    dtrain_rdv_release(c);
    return -1;
}

void dtrain_rdv_release(struct dtrain_rdv_claim *c)
{
    unlock_block(c, c->port, c->port > 0 ? c->count : 0);
    if (c->dir_fd >= 0)
        close(c->dir_fd);
    c->dir_fd = -1;
    c->port = 0;
    c->count = 0;
}
