/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The rendezvous port of a step; see dtrain_master_port.h. */
#include "dtrain_master_port.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"

enum dtrain_status dtrain_master_ports_parse(const char *text, const char *what, int *lo, int *hi, char *err,
                                             size_t errlen)
{
    char buf[32];
    const char *dash = text ? strchr(text, '-') : NULL;
    long a, b;
    if (dash == NULL || (size_t)(dash - text) >= sizeof buf) {
        dtrain_snprintf(err, errlen, "%s '%.32s': give a port range LO-HI, e.g. %d-%d", what, text ? text : "",
                        DTRAIN_MASTER_PORTS_DEFAULT_LO, DTRAIN_MASTER_PORTS_DEFAULT_HI);
        return DTRAIN_ERR_INPUT;
    }
    memcpy(buf, text, (size_t)(dash - text));
    buf[dash - text] = '\0';
    char why[128];
    if (dtrain_parse_int(buf, 1024, 65535, what, &a, why, sizeof why) != 0 ||
        dtrain_parse_int(dash + 1, 1024, 65535, what, &b, why, sizeof why) != 0 || b < a) {
        dtrain_snprintf(err, errlen, "%s '%.32s': give LO-HI with 1024 <= LO <= HI <= 65535, e.g. %d-%d", what,
                        text, DTRAIN_MASTER_PORTS_DEFAULT_LO, DTRAIN_MASTER_PORTS_DEFAULT_HI);
        return DTRAIN_ERR_INPUT;
    }
    *lo = (int)a;
    *hi = (int)b;
    return DTRAIN_OK;
}

int dtrain_master_port_blocks(int lo, int hi, int per_step)
{
    if (per_step < 1 || hi < lo)
        return 0;
    return (hi - lo + 1) / per_step;
}

int dtrain_master_ports_check(int lo, int hi, int per_step, char *err, size_t errlen)
{
    if (dtrain_master_port_blocks(lo, hi, per_step) >= 1)
        return 0;
    dtrain_snprintf(err, errlen, "master_ports=%d-%d holds %d port%s, fewer than ports_per_step=%d (the ports each "
                    "step is given): widen master_ports or lower ports_per_step", lo, hi, hi - lo + 1,
                    hi == lo ? "" : "s", per_step);
    return -1;
}

int dtrain_master_port(int lo, int hi, int per_step, uint32_t job_id, uint32_t step_id)
{
    int blocks = dtrain_master_port_blocks(lo, hi, per_step);
    if (blocks < 1)
        return lo;
    uint64_t slot = ((uint64_t)job_id * 8u + step_id % 8u) % (uint64_t)blocks;
    return lo + per_step * (int)slot;
}
