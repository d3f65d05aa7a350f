/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPUs that Slurm's GRES gave the step; see gres.h. */
#include "gres.h"

#include <string.h>

#include "dtrain_parse.h"

/* Copy the i-th comma-separated field of list into buf.  Returns its length,
 * or -1 when there is no such field or it does not fit. */
static int list_field(const char *list, int i, char *buf, size_t len)
{
    const char *p = list;
    for (; i > 0; i--) {
        p = strchr(p, ',');
        if (p == NULL)
            return -1;
        p++;
    }
    size_t n = strcspn(p, ",");
    if (n >= len)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return (int)n;
}

static int list_count(const char *list)
{
    int n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    return n;
}

int dtrain_gres_parse(const char *step_gpus, const char *cuda_visible, int node_gpus,
                      struct dtrain_gres_gpus *out, char *err, size_t errlen)
{
    char field[DTRAIN_GRES_TOKEN_MAX], msg[256];
    memset(out, 0, sizeof *out);
    if (step_gpus == NULL || step_gpus[0] == '\0')
        return 0;

    int n = list_count(step_gpus);
    if (n > DTRAIN_TOPO_MAX_GPUS || n > node_gpus) {
        dtrain_snprintf(err, errlen, "SLURM_STEP_GPUS=%.128s names %d GPUs but this node has %d", step_gpus, n,
                        node_gpus);
        return -1;
    }
    /* Slurm's CUDA_VISIBLE_DEVICES pairs with SLURM_STEP_GPUS only when the
     * counts agree; otherwise the indices themselves are what CUDA sees. */
    int use_visible = cuda_visible != NULL && list_count(cuda_visible) == n;
    for (int i = 0; i < n; i++) {
        long idx;
        if (list_field(step_gpus, i, field, sizeof field) < 0) {
            dtrain_snprintf(err, errlen, "SLURM_STEP_GPUS=%.128s: entry %d is too long", step_gpus, i + 1);
            return -1;
        }
        if (dtrain_parse_int(field, 0, node_gpus - 1, "SLURM_STEP_GPUS", &idx, msg, sizeof msg) != 0) {
            dtrain_snprintf(err, errlen, "%s (this node has %d GPUs)", msg, node_gpus);
            return -1;
        }
        /* Insert sorted by index, keeping the pairing with the visible value. */
        int at = out->count;
        while (at > 0 && out->index[at - 1] > idx)
            at--;
        if (at > 0 && out->index[at - 1] == idx) {
            dtrain_snprintf(err, errlen, "SLURM_STEP_GPUS=%.128s names GPU %ld twice", step_gpus, idx);
            return -1;
        }
        memmove(&out->index[at + 1], &out->index[at], sizeof out->index[0] * (size_t)(out->count - at));
        memmove(&out->visible[at + 1], &out->visible[at], sizeof out->visible[0] * (size_t)(out->count - at));
        out->index[at] = (int)idx;
        if (!use_visible || list_field(cuda_visible, i, out->visible[at], sizeof out->visible[at]) <= 0)
            dtrain_snprintf(out->visible[at], sizeof out->visible[at], "%ld", idx);
        out->count++;
    }
    return 0;
}
