/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The bootstrap id a group's leader makes, as PMI2-safe text, and its parsing.
 *
 *   nccl: "nccl:<256 hex>"  ncclGetUniqueId (only when built with CUDA/NCCL).
 *         NCCL's bootstrap root runs as a thread of the process that made the
 *         id, so that process must live until the members have connected.
 *   cpu:  "cpu:<IPv4>:<port>:<32 hex>"  a TCP socket the leader has bound on
 *         its address and listens on (the fd is returned; it stays open), and
 *         16 random bytes (getrandom) that a peer must present: only tasks
 *         of the same job, which got the id through PMI2, know them.
 * Ids are at most 261 bytes, far below PMI2's 1024.  Errors: -1 and one line
 * in err (no program prefix). */
#ifndef DTRAIN_LAUNCH_BOOTSTRAP_ID_H
#define DTRAIN_LAUNCH_BOOTSTRAP_ID_H

#include <netinet/in.h>
#include <stddef.h>

#include "dtrain_bootstrap.h"

#define DTRAIN_NCCL_ID_LEN 128 /* NCCL_UNIQUE_ID_BYTES */

struct dtrain_cpu_id {
    char addr[INET_ADDRSTRLEN]; /* dotted IPv4 */
    unsigned port;              /* 1..65535 */
    unsigned char secret[DTRAIN_BOOTSTRAP_SECRET_LEN];
};

/* "cpu" / "nccl"; parse returns 0 or -1 for any other text. */
const char *dtrain_backend_name(enum dtrain_comm_backend backend);
int dtrain_backend_parse(const char *text, enum dtrain_comm_backend *out);

/* 1 when this build can make ids for the backend (nccl needs CUDA/NCCL). */
int dtrain_backend_built(enum dtrain_comm_backend backend);

/* The backend to use when none is asked for: nccl when built with CUDA and a
 * GPU is visible to this process, else cpu. */
enum dtrain_comm_backend dtrain_backend_default(void);

/* The IPv4 address this task advertises for CPU-backend sockets: that of
 * interface `iface` when given (error when it has none), else the first up,
 * non-loopback IPv4 interface, else 127.0.0.1.  addr holds INET_ADDRSTRLEN. */
int dtrain_comm_addr_pick(const char *iface, char *addr, size_t addrlen, char *err, size_t errlen);

/* Make a CPU-backend id: bind a TCP socket on addr (port chosen by the
 * kernel), listen with the largest queue the kernel allows (`peers` is kept
 * for callers; strangers must not fill a queue sized to the group), draw a secret.
 * The socket is close-on-exec; *listen_fd receives it. */
int dtrain_bootstrap_id_make_cpu(const char *addr, int peers, char *id, size_t idlen,
                                 int *listen_fd, char *err, size_t errlen);

/* Make an NCCL id (ncclGetUniqueId).  Fails when built without NCCL. */
int dtrain_bootstrap_id_make_nccl(char *id, size_t idlen, char *err, size_t errlen);

/* Which backend an id text belongs to, or -1 when it is neither. */
int dtrain_bootstrap_id_backend(const char *id);

/* The id as it may be shown (--print, --json, messages): its secret
 * replaced by DTRAIN_ID_SECRET_SHOWN, so that a job's output (often
 * readable by others) cannot be used to join its groups or to derive its
 * heartbeat key.  cpu: "cpu:<IPv4>:<port>:<secret>"; nccl: the random
 * "magic" that leads NCCL's unique id (8 bytes) replaced, its socket
 * address (the rest) kept, so that two groups' ids still differ; "" and
 * "local" as they are; any other text "<secret>" whole.  out holds
 * DTRAIN_BOOTSTRAP_ID_MAX bytes. */
#define DTRAIN_ID_SECRET_SHOWN "<secret>"
void dtrain_bootstrap_id_redact(const char *id, char *out, size_t outlen);

/* Strict parsers: 0, or -1 on any malformed text. */
int dtrain_cpu_id_parse(const char *id, struct dtrain_cpu_id *out);
int dtrain_nccl_id_parse(const char *id, unsigned char out[DTRAIN_NCCL_ID_LEN]);

#endif
