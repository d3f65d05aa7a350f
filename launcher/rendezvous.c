/* SPDX-License-Identifier: GPL-2.0-or-later */
/* MASTER_ADDR / MASTER_PORT without the plugin; see rendezvous.h. */
#include "rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_id.h"
#include "dtrain_parse.h"

enum dtrain_status dtrain_launch_rdv_put(dtrain_pmi *pmi, int rank, const char *iface, struct dtrain_launch_rdv *r, char *err,
                                         size_t errlen)
{
    char why[256], value[96];
    memset(r, 0, sizeof *r);
    r->fd = -1;
    if (rank != 0)
        return DTRAIN_OK;
    if (dtrain_comm_addr_pick(iface, r->addr, sizeof r->addr, why, sizeof why) != 0) {
        dtrain_snprintf(err, errlen, "MASTER_ADDR: %s", why);
        return DTRAIN_ERR_INPUT;
    }
    /* Not SOCK_CLOEXEC: PROGRAM inherits it and so keeps the port bound. */
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof sa;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        dtrain_snprintf(err, errlen, "MASTER_PORT: binding a port: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return DTRAIN_ERR_SYSTEM;
    }
    r->fd = fd;
    r->port = ntohs(sa.sin_port);
    dtrain_snprintf(value, sizeof value, "%s:%d", r->addr, r->port);
    return dtrain_pmi_put(pmi, DTRAIN_RDV_KEY, value, err, errlen);
}

enum dtrain_status dtrain_launch_rdv_get(dtrain_pmi *pmi, int rank, struct dtrain_launch_rdv *r, char *err, size_t errlen)
{
    char value[96], why[128];
    long port;
    if (rank == 0)
        return DTRAIN_OK;
    enum dtrain_status rc = dtrain_pmi_get(pmi, 0, DTRAIN_RDV_KEY, value, sizeof value, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    char *colon = strrchr(value, ':');
    if (colon == NULL || (size_t)(colon - value) >= sizeof r->addr ||
        dtrain_parse_int(colon + 1, 1, 65535, "port", &port, why, sizeof why) != 0) {
        dtrain_snprintf(err, errlen, "rank 0 published '%.64s' under %s, not ADDR:PORT (is every task the same "
                                     "dtrain-launch?)", value, DTRAIN_RDV_KEY);
        return DTRAIN_ERR_SYSTEM;
    }
    memcpy(r->addr, value, (size_t)(colon - value));
    r->addr[colon - value] = '\0';
    r->port = (int)port;
    return DTRAIN_OK;
}
