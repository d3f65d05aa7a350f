/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The job's nodes by role, and srun's lines that blame one; see spares.h. */
#include "spares.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"
#include "dtrain_plan.h"

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
    r->where = calloc((size_t)count, sizeof *r->where);
    r->fresh = calloc((size_t)count, sizeof *r->fresh);
    if (r->name == NULL || r->role == NULL || r->where == NULL || r->fresh == NULL) {
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
    free(r->where);
    free(r->fresh);
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
            r->fresh[i] = 1;
            r->failed_now++;
            return 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- where */

/* A report field: printable, no space, shorter than len; "-" for "". */
static int field_ok(const char *v, size_t len)
{
    size_t n = strlen(v);
    if (n >= len || strcmp(v, "-") == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] <= ' ' || v[i] == 0x7f)
            return 0;
    return 1;
}

int dtrain_where_format(const char *node, const char *addr, const char *pattern, const char *domain, char *out,
                        size_t len)
{
    addr = addr ? addr : "";
    pattern = pattern ? pattern : "";
    domain = domain ? domain : "";
    if (!node || !node[0] || !field_ok(node, DTRAIN_NODE_NAME_MAX) || (addr[0] && !field_ok(addr, DTRAIN_TREE_ADDR_MAX)) ||
        (pattern[0] && !field_ok(pattern, DTRAIN_WHERE_PATTERN_MAX)) ||
        (domain[0] && !field_ok(domain, DTRAIN_WHERE_DOMAIN_MAX)))
        return -1;
    return dtrain_snprintf(out, len, DTRAIN_WHERE_PREFIX "%s %s %s %s", node, addr[0] ? addr : "-",
                           pattern[0] ? pattern : "-", domain[0] ? domain : "-");
}

/* The next space-separated field of *p into out ("-": ""); 0, or -1 when
 * missing or too long. */
static int take_field(const char **p, char *out, size_t len)
{
    const char *s = *p;
    size_t n = strcspn(s, " ");
    if (n == 0 || n >= len)
        return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < ' ' || out[i] == 0x7f)
            return -1;
    if (strcmp(out, "-") == 0)
        out[0] = '\0';
    *p = s + n + (s[n] == ' ');
    return 0;
}

int dtrain_roles_note_where(struct dtrain_node_roles *r, const char *line)
{
    static const char prefix[] = DTRAIN_WHERE_PREFIX;
    struct dtrain_node_where w = {.known = 1};
    char node[DTRAIN_NODE_NAME_MAX];
    if (strncmp(line, prefix, sizeof prefix - 1) != 0)
        return 0;
    const char *p = line + sizeof prefix - 1;
    size_t n = strlen(p);
    if (n > 0 && p[n - 1] == '\n')
        n--;
    char rest[DTRAIN_NODE_NAME_MAX + DTRAIN_TREE_ADDR_MAX + DTRAIN_WHERE_PATTERN_MAX + DTRAIN_WHERE_DOMAIN_MAX + 8];
    if (n >= sizeof rest)
        return 0;
    memcpy(rest, p, n);
    rest[n] = '\0';
    p = rest;
    if (take_field(&p, node, sizeof node) != 0 || !node[0] || take_field(&p, w.addr, sizeof w.addr) != 0 ||
        take_field(&p, w.pattern, sizeof w.pattern) != 0 || take_field(&p, w.domain, sizeof w.domain) != 0 || *p)
        return 0;
    for (int i = 0; i < r->count; i++) {
        if (strcmp(r->name[i], node) == 0) {
            r->where[i] = w;
            return 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- layout */

#define LAYOUT_HEAD "dtrain-launch: layout "
#define LAYOUT_KEPT "kept in one NVLink domain: "

static const char *const kept_text[4] = {"none", "TP groups", "PP groups", "TP and PP groups"};

int dtrain_layout_format(const struct dtrain_spare_layout *l, char *out, size_t len)
{
    return dtrain_snprintf(out, len, LAYOUT_HEAD "T=%d P=%d D=%d, %d tasks per node; " LAYOUT_KEPT "%s", l->tp, l->pp,
                           l->dp, l->per_node, kept_text[(l->tp_domain ? 1 : 0) + (l->pp_domain ? 2 : 0)]);
}

int dtrain_layout_parse(const char *line, struct dtrain_spare_layout *l)
{
    struct dtrain_spare_layout got = {.known = 1};
    int used = -1;
    if (strncmp(line, LAYOUT_HEAD, sizeof LAYOUT_HEAD - 1) != 0 ||
        sscanf(line, LAYOUT_HEAD "T=%d P=%d D=%d, %d tasks per node; " LAYOUT_KEPT "%n", &got.tp, &got.pp, &got.dp,
               &got.per_node, &used) != 4 || used < 0)
        return 0;
    const char *kept = line + used;
    size_t n = strcspn(kept, "\r\n");
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (strlen(kept_text[i]) == n && strncmp(kept, kept_text[i], n) == 0)
            k = i;
    if (k < 0 || kept[n + strspn(kept + n, "\r\n")] != '\0' || got.tp < 1 || got.pp < 1 || got.dp < 1 ||
        got.per_node < 1 || got.tp > DTRAIN_PLAN_MAX_DIM || got.pp > DTRAIN_PLAN_MAX_DIM ||
        got.dp > DTRAIN_PLAN_MAX_DIM || (long long)got.tp * got.pp * got.dp > DTRAIN_PLAN_MAX_WORLD ||
        got.per_node > DTRAIN_PLAN_MAX_WORLD)
        return 0;
    got.tp_domain = k & 1;
    got.pp_domain = (k & 2) != 0;
    *l = got;
    return 1;
}

/* ---------------------------------------------------------------- the choice */

/* The last component of a dotted path ("spine.leaf1" -> "leaf1"). */
static const char *last_part(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

enum dtrain_spare_near dtrain_spare_near(const struct dtrain_node_where *a, const struct dtrain_node_where *b,
                                         char *shared, size_t len)
{
    char x[DTRAIN_TREE_ADDR_MAX], y[DTRAIN_TREE_ADDR_MAX], why[256];
    if (len > 0)
        shared[0] = '\0';
    if (!a->known || !b->known)
        return DTRAIN_NEAR_ANY;
    if (a->domain[0] && strcmp(a->domain, b->domain) == 0) {
        dtrain_snprintf(shared, len, "%s", a->domain);
        return DTRAIN_NEAR_DOMAIN;
    }
    if (dtrain_tree_block_domain(a->addr, a->pattern, x, sizeof x, why, sizeof why) == DTRAIN_OK &&
        dtrain_tree_block_domain(b->addr, b->pattern, y, sizeof y, why, sizeof why) == DTRAIN_OK &&
        strcmp(x, y) == 0) {
        dtrain_snprintf(shared, len, "%s", x + sizeof DTRAIN_TREE_BLOCK_PREFIX - 1);
        return DTRAIN_NEAR_BLOCK;
    }
    if (dtrain_tree_leaf(a->addr, a->pattern, x, sizeof x) && dtrain_tree_leaf(b->addr, b->pattern, y, sizeof y) &&
        strcmp(x, y) == 0) {
        dtrain_snprintf(shared, len, "%s", last_part(x));
        return DTRAIN_NEAR_LEAF;
    }
    return DTRAIN_NEAR_ANY;
}

int dtrain_spare_pick_text(const struct dtrain_node_roles *r, const struct dtrain_spare_pick *p, char *out,
                           size_t len)
{
    const char *f = r->name[p->failed], *s = r->name[p->spare];
    switch (p->near) {
    case DTRAIN_NEAR_DOMAIN: return dtrain_snprintf(out, len, "spare %s for %s (same NVLink domain %s)", s, f, p->shared);
    case DTRAIN_NEAR_BLOCK: return dtrain_snprintf(out, len, "spare %s for %s (same block %s)", s, f, p->shared);
    case DTRAIN_NEAR_LEAF: return dtrain_snprintf(out, len, "spare %s for %s (same leaf switch %s)", s, f, p->shared);
    case DTRAIN_NEAR_ANY: break;
    }
    if (!r->where[p->failed].known || !r->where[p->spare].known)
        return dtrain_snprintf(out, len, "spare %s for %s (the first left: where %s is was not reported)", s, f,
                               r->where[p->failed].known ? s : f);
    return dtrain_snprintf(out, len, "spare %s for %s (the first left: none shares its NVLink domain, block or leaf "
                           "switch)", s, f);
}

/* A node's domain as a message shows it. */
static const char *domain_shown(const struct dtrain_node_roles *r, int i)
{
    return !r->where[i].known ? "not reported" : r->where[i].domain[0] ? r->where[i].domain : "none";
}

/* Whether the step on the nodes `in` (in[i]: node i runs it; Slurm
 * orders them by index) keeps every group the layout names inside one
 * NVLink domain.  1 yes; 0 no, why in why; -1 when the layout does not
 * fit the node count (why says so). */
static int keeps_domains(const struct dtrain_node_roles *r, const unsigned char *in, const struct dtrain_spare_layout *L,
                         int *pos, char *why, size_t whylen)
{
    int n = 0;
    for (int i = 0; i < r->count; i++)
        if (in[i])
            pos[n++] = i;
    long long W = (long long)n * L->per_node, T = L->tp, D = L->dp, P = L->pp, K = L->per_node;
    if (W != T * P * D) {
        dtrain_snprintf(why, whylen, "the layout T=%lld P=%lld D=%lld with %lld tasks per node does not fit %d nodes",
                        T, P, D, K, n);
        return -1;
    }
    /* group g of a kind: ranks first(g) + stride*m, m < size */
    for (int kind = 0; kind < 2; kind++) {
        if (!(kind == 0 ? L->tp_domain : L->pp_domain))
            continue;
        long long groups = kind == 0 ? W / T : T * D, size = kind == 0 ? T : P, stride = kind == 0 ? 1 : T * D;
        for (long long g = 0; g < groups; g++) {
            long long first = kind == 0 ? g * T : g;
            int a = pos[first / K];
            for (long long m = 1; m < size; m++) {
                long long rank = first + stride * m;
                int b = pos[rank / K];
                if (b == a || (r->where[a].domain[0] && strcmp(r->where[a].domain, r->where[b].domain) == 0))
                    continue;
                dtrain_snprintf(why, whylen, "the %s group of ranks %lld-%lld would hold %s (NVLink domain %s) and "
                                "%s (NVLink domain %s)", kind == 0 ? "TP" : "PP", first, first + stride * (size - 1),
                                r->name[a], domain_shown(r, a), r->name[b], domain_shown(r, b));
                return 0;
            }
        }
    }
    return 1;
}

int dtrain_roles_replace_near(struct dtrain_node_roles *r, const struct dtrain_spare_layout *layout,
                              struct dtrain_spare_pick *picks, char *err, size_t errlen)
{
    int n = r->failed_now, made = 0, rc = -1;
    if (dtrain_roles_count(r, DTRAIN_NODE_SPARE) < n)
        return -1;
    const int kept = layout && layout->known && (layout->tp_domain || layout->pp_domain);
    unsigned char *in = calloc((size_t)r->count, 1), *taken = calloc((size_t)r->count, 1);
    int *pos = calloc((size_t)r->count, sizeof *pos);
    struct dtrain_spare_pick *got = calloc((size_t)(n > 0 ? n : 1), sizeof *got);
    if (!in || !taken || !pos || !got) {
        dtrain_snprintf(err, errlen, "out of memory");
        rc = -2;
        goto done;
    }
    for (int i = 0; i < r->count; i++)
        in[i] = r->role[i] == DTRAIN_NODE_ACTIVE || r->fresh[i];
    for (int f = 0; f < r->count; f++) {
        if (!r->fresh[f])
            continue;
        in[f] = 0;
        struct dtrain_spare_pick best = {.failed = f, .spare = -1};
        char first_why[512] = "";
        /* the spares by nearness, then Slurm's order: the first that keeps the groups */
        for (int level = DTRAIN_NEAR_DOMAIN; level <= DTRAIN_NEAR_ANY && best.spare < 0; level++) {
            for (int s = 0; s < r->count && best.spare < 0; s++) {
                char shared[sizeof best.shared], why[512];
                if (r->role[s] != DTRAIN_NODE_SPARE || taken[s] ||
                    dtrain_spare_near(&r->where[f], &r->where[s], shared, sizeof shared) != (enum dtrain_spare_near)level)
                    continue;
                if (kept) {
                    in[s] = 1;
                    int k = keeps_domains(r, in, layout, pos, why, sizeof why);
                    in[s] = 0;
                    /* a layout that does not fit: at least the failed node's own domain */
                    if (k < 0 && level == DTRAIN_NEAR_DOMAIN)
                        k = 1;
                    if (k != 1) {
                        if (!first_why[0])
                            dtrain_snprintf(first_why, sizeof first_why, "with spare %s (NVLink domain %s): %s",
                                            r->name[s], domain_shown(r, s), why);
                        continue;
                    }
                }
                best.spare = s;
                best.near = (enum dtrain_spare_near)level;
                memcpy(best.shared, shared, sizeof best.shared);
            }
        }
        if (best.spare < 0) {
            const char *kinds = layout->tp_domain && layout->pp_domain ? "TP and PP groups"
                              : layout->tp_domain                      ? "TP groups"
                                                                       : "PP groups";
            dtrain_snprintf(err, errlen, "no spare left keeps the step's %s in one NVLink domain (%s is in %s; %s)",
                            kinds, r->name[f], domain_shown(r, f), first_why);
            rc = -2;
            goto done;
        }
        in[best.spare] = 1;
        taken[best.spare] = 1;
        got[made++] = best;
    }
    for (int i = 0; i < made; i++) {
        r->role[got[i].spare] = DTRAIN_NODE_ACTIVE;
        if (picks)
            picks[i] = got[i];
    }
    for (int i = 0; i < r->count; i++)
        r->fresh[i] = 0;
    r->failed_now = 0;
    rc = made;
done:
    free(in);
    free(taken);
    free(pos);
    free(got);
    return rc;
}

int dtrain_roles_replace(struct dtrain_node_roles *r)
{
    char err[8];
    return dtrain_roles_replace_near(r, NULL, NULL, err, sizeof err);
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
