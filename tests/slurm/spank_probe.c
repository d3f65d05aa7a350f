/* SPDX-License-Identifier: GPL-2.0-or-later */
/* spank_probe.so: the smallest SPANK plugin, used to test that
 * `local-cluster start --plugin PATH --plugin-args ARGS` puts a working
 * `required PATH ARGS` line into the cluster's plugstack.conf.
 *
 * In each task (remote context, task_init) it exports
 *   LC_PROBE_ARGS=<its plugstack arguments, space-separated>
 *   LC_PROBE_HWLOC=<HWLOC_XMLFILE of the slurmstepd it runs in, or "unset">
 * so the test reads them with printenv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

SPANK_PLUGIN(lc_probe, 1);

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    char args[1024] = "";
    size_t used = 0;
    const char *xml = getenv("HWLOC_XMLFILE");

    for (int i = 0; i < ac; i++) {
        int n = snprintf(args + used, sizeof(args) - used, "%s%s", i ? " " : "", av[i]);
        if (n < 0 || (size_t)n >= sizeof(args) - used) {
            slurm_error("lc_probe: plugstack arguments longer than %zu bytes", sizeof(args) - 1);
            return ESPANK_ERROR;
        }
        used += (size_t)n;
    }
    if (spank_setenv(sp, "LC_PROBE_ARGS", args, 1) != ESPANK_SUCCESS ||
        spank_setenv(sp, "LC_PROBE_HWLOC", xml ? xml : "unset", 1) != ESPANK_SUCCESS) {
        slurm_error("lc_probe: spank_setenv failed");
        return ESPANK_ERROR;
    }
    return ESPANK_SUCCESS;
}
