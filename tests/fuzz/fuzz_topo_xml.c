/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: hwloc XML text -> pre-check -> hwloc -> node model -> planner,
 * as the SPANK plugin does with a site's topology file (issue 16). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_plan.h"
#include "dtrain_topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    dtrain_topo *t = NULL;
    if (dtrain_topo_load_xml_buffer((const char *)data, size, "fuzz.xml", &t, err, sizeof err) != DTRAIN_OK)
        return 0;
    int n = dtrain_topo_gpu_count(t);
    for (int tp = 1; tp <= 8 && n > 0; tp *= 2) {
        struct dtrain_shape shape = {tp, 1, 0, 1, n < 8 ? n : 8};
        struct dtrain_policy policy = {.allow_pcie = tp % 4 == 0, .cpu_only = 0};
        const dtrain_topo *nodes[1] = {t};
        struct dtrain_plan *plan = NULL;
        if (dtrain_plan_place_tasks(&shape, nodes, &policy, &plan, err, sizeof err) == DTRAIN_OK)
            dtrain_plan_free(plan);
    }
    dtrain_topo_free(t);
    return 0;
}
