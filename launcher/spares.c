/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The job's nodes by role, and srun's lines that blame one; see spares.h. */
#include "spares.h"

#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"

int dtrain_roles_init(struct dtrain_node_roles *r, const char *const *names, int count, int spares,
                      char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (spares < 0 || count - spares < 1) {
        dtrain_snprintf(err, errlen, "the job has %d node%s and %d of them are spares (--dtrain-spares): no node "
                        "is left for the ranks", count, count == 1 ? "" : "s", spares);
        return -1;
    }
    r->name = calloc((size_t)count, sizeof *r->name);
    r->role = calloc((size_t)count, sizeof *r->role);
    if (r->name == NULL || r->role == NULL) {
        dtrain_roles_free(r);
        dtrain_snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < count; i++) {
        if (dtrain_snprintf(r->name[i], sizeof r->name[i], "%s", names[i]) != 0 || names[i][0] == '\0') {
            dtrain_snprintf(err, errlen, "node name '%.64s' is empty or longer than %d bytes", names[i],
                            DTRAIN_NODE_NAME_MAX - 1);
            dtrain_roles_free(r);
            return -1;
        }
        r->role[i] = i < count - spares ? DTRAIN_NODE_ACTIVE : DTRAIN_NODE_SPARE;
    }
    r->count = count;
    return 0;
}

void dtrain_roles_free(struct dtrain_node_roles *r)
{
    free(r->name);
    free(r->role);
    memset(r, 0, sizeof *r);
}

int dtrain_roles_count(const struct dtrain_node_roles *r, enum dtrain_node_role role)
{
    int n = 0;
    for (int i = 0; i < r->count; i++)
        n += r->role[i] == role;
    return n;
}

int dtrain_roles_fail(struct dtrain_node_roles *r, const char *node)
{
    for (int i = 0; i < r->count; i++) {
        if (strcmp(r->name[i], node) == 0 && r->role[i] == DTRAIN_NODE_ACTIVE) {
            r->role[i] = DTRAIN_NODE_FAILED;
            r->failed_now++;
            return 1;
        }
    }
    return 0;
}

int dtrain_roles_replace(struct dtrain_node_roles *r)
{
    int n = r->failed_now;
    if (dtrain_roles_count(r, DTRAIN_NODE_SPARE) < n)
        return -1;
    for (int i = 0, left = n; i < r->count && left > 0; i++) {
        if (r->role[i] == DTRAIN_NODE_SPARE) {
            r->role[i] = DTRAIN_NODE_ACTIVE;
            left--;
        }
    }
    r->failed_now = 0;
    return n;
}

int dtrain_roles_list(const struct dtrain_node_roles *r, enum dtrain_node_role role, char *out, size_t outlen)
{
    size_t o = 0;
    if (outlen == 0)
        return -1;
    out[0] = '\0';
    for (int i = 0; i < r->count; i++) {
        if (r->role[i] != role)
            continue;
        size_t len = strlen(r->name[i]);
        if (o + (o > 0) + len + 1 > outlen)
            return -1;
        if (o > 0)
            out[o++] = ',';
        memcpy(out + o, r->name[i], len + 1);
        o += len;
    }
    return 0;
}

/* Copy the node name that ends at `end` (exclusive) from `start`. */
static int take_node(const char *start, const char *end, char *node, size_t nodelen)
{
    size_t len = (size_t)(end - start);
    if (len == 0 || len >= nodelen || len >= DTRAIN_NODE_NAME_MAX || memchr(start, ' ', len) != NULL)
        return 0;
    memcpy(node, start, len);
    node[len] = '\0';
    return 1;
}

/* A neighbour's heartbeat verdict: "heartbeat: rank N (node NODE, GPU ..." */
static int heartbeat_blames(const char *line, char *node, size_t nodelen)
{
    static const char prefix[] = "heartbeat: rank ";
    const char *p = strstr(line, prefix);
    if (p == NULL || strncmp(line, "dtrain-launch: ", 15) != 0)
        return 0;
    p += sizeof prefix - 1;
    if (*p < '0' || *p > '9')
        return 0;
    p += strspn(p, "0123456789");
    if (strncmp(p, " (node ", 7) != 0)
        return 0;
    p += 7;
    const char *end = p + strcspn(p, ",) \n\r");
    if (*end != ',' || (strstr(end, " hangs in ") == NULL && strstr(end, " sent no heartbeat ") == NULL))
        return 0;
    if (end - p == 1 && *p == '-')
        return 0; /* the rank did not know its node (no SLURMD_NODENAME) */
    return take_node(p, end, node, nodelen);
}

enum dtrain_blame dtrain_srun_blame(const char *line, char *node, size_t nodelen)
{
    static const char prefix[] = "srun: error: ";
    const char *p = line, *end;
    if (heartbeat_blames(line, node, nodelen))
        return DTRAIN_BLAME_HEARTBEAT;
    /* srun's own lines begin with its name: the same words inside a task's
     * line (a path it prints) are not srun's */
    if (strncmp(p, prefix, sizeof prefix - 1) != 0)
        return DTRAIN_BLAME_NONE;
    p += sizeof prefix - 1;
    if (strncmp(p, "Node failure on ", 16) == 0) {
        p += 16;
        end = p + strcspn(p, " \n\r");
        return take_node(p, end, node, nodelen) ? DTRAIN_BLAME_NODE : DTRAIN_BLAME_NONE;
    }
    if (strncmp(p, "Task launch for ", 16) == 0 && (end = strstr(p, " failed on node ")) != NULL) {
        p = end + 16;
        end = p + strcspn(p, ": \n\r");
        return take_node(p, end, node, nodelen) ? DTRAIN_BLAME_NODE : DTRAIN_BLAME_NONE;
    }
    /* NODE: task LIST: WHAT  or  NODE: tasks LIST: WHAT */
    end = strstr(p, ": task");
    if (end == NULL)
        return DTRAIN_BLAME_NONE;
    const char *what = strstr(end + 6, ": ");
    if (what == NULL)
        return DTRAIN_BLAME_NONE;
    what += 2;
    static const char exited[] = "Exited with exit code ";
    if (strncmp(what, exited, sizeof exited - 1) == 0) {
        char *stop;
        long code = strtol(what + sizeof exited - 1, &stop, 10);
        if (stop == what + sizeof exited - 1 || code <= 128)
            return DTRAIN_BLAME_NONE;
    }
    return take_node(p, end, node, nodelen) ? DTRAIN_BLAME_TASK : DTRAIN_BLAME_NONE;
}

int dtrain_srun_blames(const char *line, char *node, size_t nodelen)
{
    return dtrain_srun_blame(line, node, nodelen) != DTRAIN_BLAME_NONE;
}

int dtrain_blame_confirmed(enum dtrain_blame blame, long srun_status, int node_failed)
{
    switch (blame) {
    case DTRAIN_BLAME_TASK: return srun_status > 128;
    case DTRAIN_BLAME_NODE: return node_failed == 1;
    case DTRAIN_BLAME_HEARTBEAT: return srun_status == 75;
    case DTRAIN_BLAME_NONE: break;
    }
    return 0;
}
