/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-topo output: a node model and (optionally) a plan as readable
 * tables or JSON (the picture: dtrain_plan_picture of dtrain_explain.h)
 * (doc/topo-json.md).  plan may be NULL: then only the node is shown. */
#ifndef DTRAIN_TOPO_REPORT_H
#define DTRAIN_TOPO_REPORT_H

#include <stdio.h>

#include "dtrain_plan.h"
#include "dtrain_topo.h"

/* GPUs, link matrix, islands, then the plan's tasks. */
void topo_report_table(FILE *out, const dtrain_topo *topo, const dtrain_plan *plan);

/* The JSON document; `source` names where the topology came from (a file
 * path, or "live").  Returns DTRAIN_OK, or DTRAIN_ERR_SYSTEM with one line
 * in err. */
enum dtrain_status topo_report_json(FILE *out, const dtrain_topo *topo, const dtrain_plan *plan,
                                    const char *source, char *err, size_t errlen);

#endif
