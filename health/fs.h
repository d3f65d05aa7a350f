/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: free space of a filesystem, in a bounded child.
 *
 * statvfs() on a hung network filesystem (the checkpoint store is often
 * NFS or Lustre) blocks forever; here it is cut off after timeout_ms. */
#ifndef DTRAIN_HEALTH_FS_H
#define DTRAIN_HEALTH_FS_H

#include "dtrain_bounded.h"
#include "facts.h"

/* Start looking at the directory at path (valid until the wait);
 * dtrain_probe_wait_all() completes it.  out->ok = 0 with out->error when
 * the path is missing, not a directory, or did not answer in time. */
void health_fs_start(const char *path, int timeout_ms, struct health_fs_facts *out, struct dtrain_probe *probe);

/* Start and wait. */
void health_fs_probe(const char *path, int timeout_ms, struct health_fs_facts *out);

#endif
