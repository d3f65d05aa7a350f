/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: the switch tree and the node order; see dtrain_tree.h. */
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"
#include "dtrain_tree.h"

enum dtrain_status dtrain_tree_parse(const char *text, size_t len, struct dtrain_tree_node **nodes, int *n, char *err,
                                     size_t errlen)
{
    struct dtrain_tree_node *out = NULL;
    int count = 0, cap = 0, lineno = 0;
    size_t pos = 0;
    *nodes = NULL;
    *n = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        char line[DTRAIN_TREE_NAME_MAX + DTRAIN_TREE_ADDR_MAX + 8], name[DTRAIN_TREE_NAME_MAX],
            addr[DTRAIN_TREE_ADDR_MAX];
        lineno++;
        size_t l = end - pos;
        if (l >= sizeof line) {
            dtrain_snprintf(err, errlen, "line %d: longer than %zu bytes", lineno, sizeof line - 1);
            goto fail;
        }
        memcpy(line, text + pos, l);
        line[l] = '\0';
        pos = end + 1;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        size_t a = strcspn(p, " \t\r");
        char *q = p + a;
        while (*q == ' ' || *q == '\t')
            q++;
        size_t b = strcspn(q, " \t\r");
        char *rest = q + b;
        while (*rest == ' ' || *rest == '\t' || *rest == '\r')
            rest++;
        if (a == 0 || b == 0 || *rest != '\0' || a >= sizeof name || b >= sizeof addr) {
            dtrain_snprintf(err, errlen, "line %d: write 'NODE SLURM_TOPOLOGY_ADDR' (e.g. 'node1 spine.leaf1.node1')",
                            lineno);
            goto fail;
        }
        memcpy(name, p, a);
        name[a] = '\0';
        memcpy(addr, q, b);
        addr[b] = '\0';
        for (int i = 0; i < count; i++)
            if (strcmp(out[i].name, name) == 0) {
                dtrain_snprintf(err, errlen, "line %d: node %s is listed twice", lineno, name);
                goto fail;
            }
        if (count >= DTRAIN_TREE_MAX_NODES) {
            dtrain_snprintf(err, errlen, "more than %d nodes", DTRAIN_TREE_MAX_NODES);
            goto fail;
        }
        if (count == cap) {
            int ncap = cap ? cap * 2 : 16;
            struct dtrain_tree_node *grown = realloc(out, sizeof *out * (size_t)ncap);
            if (!grown) {
                dtrain_snprintf(err, errlen, "out of memory");
                goto fail;
            }
            out = grown;
            cap = ncap;
        }
        memcpy(out[count].name, name, sizeof name);
        memcpy(out[count].addr, addr, sizeof addr);
        count++;
    }
    if (count == 0) {
        dtrain_snprintf(err, errlen, "no nodes listed");
        goto fail;
    }
    *nodes = out;
    *n = count;
    return DTRAIN_OK;
fail:
    free(out);
    return DTRAIN_ERR_INPUT;
}

/* Length of the first `level` dot-separated switch components of addr
 * (the node's own name, the last component, never counts). */
static size_t prefix_len(const char *addr, int level)
{
    size_t len = 0;
    for (int l = 0; l < level; l++) {
        const char *dot = strchr(addr + len, '.');
        if (!dot)
            return (size_t)-1; /* no such level */
        len = (size_t)(dot - addr) + 1;
    }
    return len;
}

static int switch_levels(const char *addr)
{
    int dots = 0;
    for (const char *p = addr; *p; p++)
        dots += *p == '.';
    return dots;
}

/* Same switch at `level` (1 = the top switch, levels(a) = the leaf). */
static int same_prefix(const char *a, const char *b, int level)
{
    size_t la = prefix_len(a, level), lb = prefix_len(b, level);
    return la != (size_t)-1 && la == lb && strncmp(a, b, la) == 0;
}

struct sort_key {
    int index;
    int *first; /* per level: Slurm position of the first node under the same switch */
    int nlevels;
};

static int by_key(const void *pa, const void *pb)
{
    const struct sort_key *a = pa, *b = pb;
    int levels = a->nlevels < b->nlevels ? a->nlevels : b->nlevels;
    for (int l = 0; l < levels; l++)
        if (a->first[l] != b->first[l])
            return a->first[l] < b->first[l] ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

enum dtrain_status dtrain_tree_order(const struct dtrain_tree_node *nodes, int n, int *order)
{
    int maxl = 0;
    for (int i = 0; i < n; i++)
        if (switch_levels(nodes[i].addr) > maxl)
            maxl = switch_levels(nodes[i].addr);
    struct sort_key *keys = calloc((size_t)n, sizeof *keys);
    int *first = calloc((size_t)n * (size_t)(maxl + 1), sizeof *first);
    if (!keys || !first) {
        free(keys);
        free(first);
        return DTRAIN_ERR_SYSTEM;
    }
    /* O(n^2 * levels) string compares: the job's nodes, once per step. */
    for (int i = 0; i < n; i++) {
        keys[i].index = i;
        keys[i].first = first + (size_t)i * (size_t)(maxl + 1);
        keys[i].nlevels = switch_levels(nodes[i].addr);
        for (int l = 0; l < keys[i].nlevels; l++) {
            int j = 0;
            while (j < i && !same_prefix(nodes[j].addr, nodes[i].addr, l + 1))
                j++;
            keys[i].first[l] = j;
        }
    }
    qsort(keys, (size_t)n, sizeof *keys, by_key);
    for (int p = 0; p < n; p++)
        order[p] = keys[p].index;
    free(keys);
    free(first);
    return DTRAIN_OK;
}

/* The length of a node's leaf switch path: its address without the last component. */
static size_t leaf_len(const char *addr)
{
    const char *dot = strrchr(addr, '.');
    return dot ? (size_t)(dot - addr) : 0;
}

static int same_leaf(const struct dtrain_tree_node *a, const struct dtrain_tree_node *b)
{
    size_t la = leaf_len(a->addr), lb = leaf_len(b->addr);
    return la == lb && strncmp(a->addr, b->addr, la) == 0;
}

int dtrain_tree_leaf(const char *addr, const char *pattern, char *out, size_t len)
{
    static const char tail[] = "switch.node";
    size_t pl = pattern ? strlen(pattern) : 0, l = addr ? leaf_len(addr) : 0;
    if (len > 0)
        out[0] = '\0';
    if (l == 0 || pl < sizeof tail - 1 || strcmp(pattern + pl - (sizeof tail - 1), tail) != 0 ||
        (pl > sizeof tail - 1 && pattern[pl - sizeof tail] != '.') || l >= len)
        return 0;
    memcpy(out, addr, l);
    out[l] = '\0';
    return 1;
}

enum dtrain_status dtrain_tree_cost(const struct dtrain_tree_node *nodes, const int *order, int n, int T, int P, int K,
                                    double grad_bytes, struct dtrain_tree_cost *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    long world = (long)n * K;
    if (n < 1 || T < 1 || P < 1 || K < 1 || world % ((long)T * P) != 0 || (K % T != 0 && T % K != 0)) {
        dtrain_snprintf(err, errlen, "T=%d P=%d on %d nodes of %d tasks is not a dtrain shape", T, P, n, K);
        return DTRAIN_ERR_INPUT;
    }
    long D = world / ((long)T * P);
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < i && !same_leaf(&nodes[j], &nodes[i]))
            j++;
        out->leaves += j == i;
    }
    double per_edge = D > 1 ? 2.0 * (double)(D - 1) / (double)D * grad_bytes : 0;
    /* DP ring of (tp, pp): members dp = 0..D-1, member dp sends to dp+1 (mod D). */
    for (long pp = 0; pp < P; pp++)
        for (long tp = 0; tp < T; tp++)
            for (long dp = 0; dp < D && D > 1; dp++) {
                long r = tp + T * (dp + D * pp), s = tp + T * ((dp + 1) % D + D * pp);
                const struct dtrain_tree_node *a = &nodes[order[r / K]], *b = &nodes[order[s / K]];
                out->ring_edges++;
                if (!same_leaf(a, b)) {
                    out->cross_edges++;
                    out->cross_bytes += per_edge;
                }
            }
    for (long pp = 0; pp + 1 < P; pp++)
        for (long dp = 0; dp < D; dp++)
            for (long tp = 0; tp < T; tp++) {
                long r = tp + T * (dp + D * pp), s = tp + T * (dp + D * (pp + 1));
                out->pp_pairs++;
                out->pp_cross += !same_leaf(&nodes[order[r / K]], &nodes[order[s / K]]);
            }
    return DTRAIN_OK;
}

/* Component i of a dot-separated list: its start in *start (NULL past the end) and length. */
static size_t dot_field(const char *s, int i, const char **start)
{
    for (; i > 0 && s; i--) {
        s = strchr(s, '.');
        if (s)
            s++;
    }
    *start = s;
    return s ? strcspn(s, ".") : 0;
}

enum dtrain_status dtrain_tree_block_domain(const char *addr, const char *pattern, char *out, size_t len, char *err,
                                            size_t errlen)
{
    if (!addr || !*addr || !pattern || !*pattern) {
        dtrain_snprintf(err, errlen, "Slurm gave this task no SLURM_TOPOLOGY_ADDR/_PATTERN: the site declares "
                        "Slurm's blocks NVLink domains (nvlink_domain_source=block), which needs "
                        "TopologyPlugin=topology/block (Slurm 23.11+)");
        return DTRAIN_ERR_INPUT;
    }
    int fields = 1, block = -1, addr_fields = 1;
    for (const char *p = pattern; *p; p++)
        fields += *p == '.';
    for (const char *p = addr; *p; p++)
        addr_fields += *p == '.';
    for (int i = 0; i < fields && block < 0; i++) {
        const char *f;
        size_t n = dot_field(pattern, i, &f);
        if (n == 5 && strncmp(f, "block", 5) == 0)
            block = i;
    }
    if (block < 0) {
        dtrain_snprintf(err, errlen, "SLURM_TOPOLOGY_ADDR_PATTERN is '%.64s', not Slurm's topology/block "
                        "('block.node'): the site declares blocks NVLink domains (nvlink_domain_source=block) "
                        "but this cluster runs another TopologyPlugin", pattern);
        return DTRAIN_ERR_INPUT;
    }
    const char *f;
    size_t n = dot_field(addr, block, &f);
    if (addr_fields != fields || n == 0) {
        dtrain_snprintf(err, errlen, "SLURM_TOPOLOGY_ADDR '%.64s' does not match its pattern '%.64s'", addr,
                        pattern);
        return DTRAIN_ERR_INPUT;
    }
    if (dtrain_snprintf(out, len, "%s%.*s", DTRAIN_TREE_BLOCK_PREFIX, (int)n, f) != 0) {
        dtrain_snprintf(err, errlen, "Slurm's block name in '%.64s' is longer than %zu bytes", addr,
                        len - sizeof DTRAIN_TREE_BLOCK_PREFIX);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}
