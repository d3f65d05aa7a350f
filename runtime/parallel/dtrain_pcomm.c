/* Comm results and double sums for the parallel trainer; see dtrain_pcomm.h. */
#include "dtrain_pcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dtrain_pcomm_status(dtrain_comm *c, int rc, const char *what, char *err, size_t errlen)
{
    if (rc == DTRAIN_COMM_OK)
        return DTRAIN_OK;
    const char *msg = c != NULL ? dtrain_comm_error_message(c) : "";
    snprintf(err, errlen, "%s: %s%s%s", what, dtrain_comm_result_name(rc), msg[0] ? ": " : "", msg);
    switch (rc) {
    case DTRAIN_COMM_ETIMEDOUT:
    case DTRAIN_COMM_EPEER:
    case DTRAIN_COMM_EABORTED:
    case DTRAIN_COMM_ESYS:
        return DTRAIN_ERR_FAULT;
    default:
        return DTRAIN_ERR_SYSTEM;
    }
}

#define MAX_DOUBLES 8

int dtrain_pcomm_sum_doubles(dtrain_comm *c, const double *in, double *out, int n,
                             const char *what, char *err, size_t errlen)
{
    if (n < 1 || n > MAX_DOUBLES) {
        snprintf(err, errlen, "%s: %d values to sum (1 to %d)", what, n, MAX_DOUBLES);
        return DTRAIN_ERR_SYSTEM;
    }
    int size = dtrain_comm_size(c);
    /* The bits of each double travel as floats that all_gather only copies. */
    size_t per = (size_t)n * sizeof(double) / sizeof(float);
    float mine[MAX_DOUBLES * sizeof(double) / sizeof(float)];
    float *all = malloc((size_t)size * per * sizeof(float));
    if (all == NULL) {
        snprintf(err, errlen, "%s: out of memory", what);
        return DTRAIN_ERR_SYSTEM;
    }
    memcpy(mine, in, (size_t)n * sizeof(double));
    int rc = dtrain_pcomm_status(c, dtrain_comm_all_gather(c, mine, all, per), what, err, errlen);
    if (rc == DTRAIN_OK) {
        for (int i = 0; i < n; i++)
            out[i] = 0.0;
        for (int r = 0; r < size; r++) {
            double v[MAX_DOUBLES];
            memcpy(v, all + (size_t)r * per, (size_t)n * sizeof(double));
            for (int i = 0; i < n; i++)
                out[i] += v[i];
        }
    }
    free(all);
    return rc;
}
