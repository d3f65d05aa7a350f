/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: the node's GPU topology (libdtrain-topo), in a bounded child.
 *
 * Loads the node (live hwloc, which honours HWLOC_XMLFILE, or a saved XML
 * file) and, when the config names one, the reference topology of a healthy
 * node of the same kind, and copies what the checks need (GPUs, models, the
 * bandwidth matrix, the largest NVLink island) into plain facts. */
#ifndef DTRAIN_HEALTH_TOPOLOGY_H
#define DTRAIN_HEALTH_TOPOLOGY_H

#include "dtrain_bounded.h"
#include "facts.h"

/* Start loading: node_xml "" for live, else a saved hwloc XML path;
 * reference_xml "" for none.  dtrain_probe_wait_all() completes it; after
 * timeout_ms the load is abandoned: out->node.ok = 0 with the reason in
 * out->node.error.  The strings must stay valid until the wait. */
void health_topology_start(const char *node_xml, const char *reference_xml, int timeout_ms,
                           struct health_topo_facts *out, struct dtrain_probe *probe);

/* Start and wait. */
void health_topology_probe(const char *node_xml, const char *reference_xml, int timeout_ms,
                           struct health_topo_facts *out);

#endif
