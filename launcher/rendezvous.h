/* SPDX-License-Identifier: GPL-2.0-or-later */
/* MASTER_ADDR / MASTER_PORT for a PROGRAM when dtrain-launch placed the step
 * itself (no dtrain plugin; with the plugin its values pass through).
 *
 * Rank 0 binds a TCP socket to a port the kernel picks (a free one, by
 * construction) with SO_REUSEADDR and does not listen on it; the socket stays
 * open, inherited by PROGRAM across exec, so that the port stays bound: the
 * kernel never hands a bound port to another bind(0) or connect(), and a
 * bind without SO_REUSEADDR is refused, while rank 0's TCPStore (which sets
 * SO_REUSEADDR) binds and listens on it.  Rank 0 puts "ADDR:PORT" under the
 * key dtrain-master before the exchange's one fence; every other rank gets
 * it after.  No extra fence. */
#ifndef DTRAIN_LAUNCH_RENDEZVOUS_H
#define DTRAIN_LAUNCH_RENDEZVOUS_H

#include <stddef.h>

#include "pmi.h"

#define DTRAIN_RDV_KEY "dtrain-master"

struct dtrain_launch_rdv {
    char addr[64]; /* IPv4 text */
    int port;
    int fd;        /* rank 0: the socket holding the port; -1 elsewhere */
};

/* Rank 0: bind, put.  Others: nothing yet.  iface as --comm-iface (NULL:
 * the address others reach this node at).  Returns a status with one line
 * in err. */
enum dtrain_status dtrain_launch_rdv_put(dtrain_pmi *pmi, int rank, const char *iface, struct dtrain_launch_rdv *r,
                                         char *err, size_t errlen);

/* After the fence: ranks > 0 get rank 0's ADDR:PORT.  Returns a status. */
enum dtrain_status dtrain_launch_rdv_get(dtrain_pmi *pmi, int rank, struct dtrain_launch_rdv *r, char *err,
                                         size_t errlen);

#endif
