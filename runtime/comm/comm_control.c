/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The control plane's reductions, built on dtrain_comm_all_gather_bytes:
 * every member gathers every member's values and reduces them itself, in
 * member order, so all get the same result (also the same bits of a double
 * sum); see dtrain_comm.h.  The messages are small: gathering costs
 * (n-1)/n more bytes than a reduction would, and keeps one wire path. */
#include "dtrain_comm.h"

#include <stdlib.h>
#include <string.h>

#include "comm_backend.h"

enum control_op { CONTROL_SUM_INT64, CONTROL_MAX_INT64, CONTROL_SUM_DOUBLES };

/* Gather buf[count] (8-byte values) of every member, then reduce in place. */
static int control_reduce(dtrain_comm *c, void *buf, size_t count, enum control_op op)
{
    if (c == NULL || (buf == NULL && count > 0))
        return DTRAIN_COMM_EINVAL;
    if (count > SIZE_MAX / 8 / (size_t)c->size)
        return DTRAIN_COMM_EINVAL;
    if (count == 0)
        return comm_all_gather_bytes(c, buf, buf, 0); /* the sticky error, or 0 */
    size_t each = count * 8, n = (size_t)c->size;
    unsigned char *all = malloc(each * n);
    if (all == NULL) {
        int failed = atomic_load(&c->failed);
        return failed != 0 ? failed : comm_fail(c, DTRAIN_COMM_ESYS, -1, "reduction of %zu values: out of memory "
                                                "for every member's copy", count);
    }
    int rc = comm_all_gather_bytes(c, buf, all, each);
    for (size_t i = 0; rc == DTRAIN_COMM_OK && i < count; i++) {
        if (op == CONTROL_SUM_DOUBLES) {
            double sum = 0.0, v;
            for (size_t r = 0; r < n; r++) {
                memcpy(&v, all + r * each + i * 8, 8);
                sum += v;
            }
            ((double *)buf)[i] = sum;
        } else {
            int64_t v;
            uint64_t sum = 0; /* unsigned: wraps instead of overflowing */
            int64_t max = INT64_MIN;
            for (size_t r = 0; r < n; r++) {
                memcpy(&v, all + r * each + i * 8, 8);
                sum += (uint64_t)v;
                if (v > max)
                    max = v;
            }
            ((int64_t *)buf)[i] = op == CONTROL_MAX_INT64 ? max : (int64_t)sum;
        }
    }
    free(all);
    return rc;
}

enum dtrain_status dtrain_comm_sum_int64(dtrain_comm *c, int64_t *buf, size_t count)
{
    return comm_answer(c, control_reduce(c, buf, count, CONTROL_SUM_INT64));
}

enum dtrain_status dtrain_comm_max_int64(dtrain_comm *c, int64_t *buf, size_t count)
{
    return comm_answer(c, control_reduce(c, buf, count, CONTROL_MAX_INT64));
}

enum dtrain_status dtrain_comm_sum_doubles_ordered(dtrain_comm *c, double *buf, size_t count)
{
    return comm_answer(c, control_reduce(c, buf, count, CONTROL_SUM_DOUBLES));
}
