/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: the switch tree and the node order; see dtrain_tree.h. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

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

static int switch_levels(const char *addr)
{
    int dots = 0;
    for (const char *p = addr; *p; p++)
        dots += *p == '.';
    return dots;
}

/* The first `levels` units of a and b are the same: the switches from the
 * top (topology/tree), the block, or the ring ("ring0:3": a unit is its
 * text before ':', so the nodes of one ring share it). */
static int same_units(const char *a, const char *b, int levels)
{
    if (switch_levels(a) < levels || switch_levels(b) < levels)
        return 0;
    for (int l = 0; l < levels; l++) {
        const char *fa, *fb;
        size_t na = dot_field(a, l, &fa), nb = dot_field(b, l, &fb);
        const char *ca = memchr(fa, ':', na), *cb = memchr(fb, ':', nb);
        if (ca)
            na = (size_t)(ca - fa);
        if (cb)
            nb = (size_t)(cb - fb);
        if (na != nb || strncmp(fa, fb, na) != 0)
            return 0;
    }
    return 1;
}

/* Same switch at `level` (1 = the top switch, levels(a) = the leaf). */
static int same_prefix(const char *a, const char *b, int level)
{
    return same_units(a, b, level);
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

/* The leaf switch (block, ring) of a node: its address without the last component. */
static int same_leaf(const struct dtrain_tree_node *a, const struct dtrain_tree_node *b)
{
    int la = switch_levels(a->addr);
    return la == switch_levels(b->addr) && same_units(a->addr, b->addr, la);
}

/* The length of a node's leaf switch path: its address without the last component. */
static size_t leaf_len(const char *addr)
{
    const char *dot = strrchr(addr, '.');
    return dot ? (size_t)(dot - addr) : 0;
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

/* The field of pattern named `want` ("block", "ring:position"), or -1. */
static int pattern_field(const char *pattern, const char *want)
{
    int fields = 1;
    size_t wl = strlen(want);
    for (const char *p = pattern; *p; p++)
        fields += *p == '.';
    for (int i = 0; i < fields; i++) {
        const char *f;
        size_t n = dot_field(pattern, i, &f);
        if (n == wl && strncmp(f, want, wl) == 0)
            return i;
    }
    return -1;
}

/* The unit's field of addr (its name, for a ring without ":POSITION"):
 * start and length into *f, *n; 0, or -1 with one line in err. */
static int unit_field(enum dtrain_tree_unit unit, const char *addr, const char *pattern, const char **f, size_t *n,
                      char *err, size_t errlen)
{
    const int ring = unit == DTRAIN_TREE_UNIT_RING;
    const char *plugin = ring ? "topology/ring (Slurm 26.05+)" : "topology/block (Slurm 23.11+)";
    const char *source = ring ? "rings" : "blocks";
    if (!addr || !*addr || !pattern || !*pattern) {
        dtrain_snprintf(err, errlen, "Slurm gave this task no SLURM_TOPOLOGY_ADDR/_PATTERN: the site declares "
                        "Slurm's %s NVLink domains (nvlink_domain_source=%s), which needs TopologyPlugin=%s",
                        source, ring ? "ring" : "block", plugin);
        return -1;
    }
    int field = pattern_field(pattern, ring ? "ring:position" : "block");
    if (field < 0) {
        dtrain_snprintf(err, errlen, "SLURM_TOPOLOGY_ADDR_PATTERN is '%.64s', not Slurm's %s ('%s'): the site "
                        "declares %s NVLink domains (nvlink_domain_source=%s) but this cluster runs another "
                        "TopologyPlugin", pattern, ring ? "topology/ring" : "topology/block",
                        ring ? "ring:position.node" : "block.node", source, ring ? "ring" : "block");
        return -1;
    }
    *n = dot_field(addr, field, f);
    if (switch_levels(addr) != switch_levels(pattern) || *n == 0) {
        dtrain_snprintf(err, errlen, "SLURM_TOPOLOGY_ADDR '%.64s' does not match its pattern '%.64s'", addr,
                        pattern);
        return -1;
    }
    if (ring) {
        const char *colon = memchr(*f, ':', *n);
        if (colon == NULL || colon == *f || (size_t)(colon - *f) + 1 == *n) {
            dtrain_snprintf(err, errlen, "SLURM_TOPOLOGY_ADDR '%.64s' does not match its pattern '%.64s'", addr,
                            pattern);
            return -1;
        }
        *n = (size_t)(colon - *f);
    }
    return 0;
}

enum dtrain_status dtrain_tree_unit_domain(enum dtrain_tree_unit unit, const char *addr, const char *pattern,
                                           char *out, size_t len, char *err, size_t errlen)
{
    const char *f = NULL, *prefix = unit == DTRAIN_TREE_UNIT_RING ? DTRAIN_TREE_RING_PREFIX : DTRAIN_TREE_BLOCK_PREFIX;
    size_t n = 0;
    if (unit_field(unit, addr, pattern, &f, &n, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    if (dtrain_snprintf(out, len, "%s%.*s", prefix, (int)n, f) != 0) {
        dtrain_snprintf(err, errlen, "Slurm's %s name in '%.64s' is longer than %zu bytes",
                        unit == DTRAIN_TREE_UNIT_RING ? "ring" : "block", addr,
                        len > strlen(prefix) + 1 ? len - strlen(prefix) - 1 : 0);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

enum dtrain_status dtrain_tree_block_domain(const char *addr, const char *pattern, char *out, size_t len, char *err,
                                            size_t errlen)
{
    return dtrain_tree_unit_domain(DTRAIN_TREE_UNIT_BLOCK, addr, pattern, out, len, err, errlen);
}

enum dtrain_status dtrain_tree_ring_position(const char *addr, const char *pattern, char *name, size_t len,
                                             int *pos, char *err, size_t errlen)
{
    const char *f = NULL;
    size_t n = 0;
    char text[16];
    long v;
    *pos = -1;
    if (unit_field(DTRAIN_TREE_UNIT_RING, addr, pattern, &f, &n, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    const char *p = f + n + 1;
    size_t pl = strcspn(p, ".");
    if (pl >= sizeof text) {
        dtrain_snprintf(err, errlen, "the ring position in '%.64s' is not a number", addr);
        return DTRAIN_ERR_INPUT;
    }
    memcpy(text, p, pl);
    text[pl] = '\0';
    if (dtrain_parse_int(text, 0, 65535, "ring position", &v, err, errlen) != 0)
        return DTRAIN_ERR_INPUT;
    if (dtrain_snprintf(name, len, "%.*s", (int)n, f) != 0) {
        dtrain_snprintf(err, errlen, "Slurm's ring name in '%.64s' is longer than %zu bytes", addr, len - 1);
        return DTRAIN_ERR_INPUT;
    }
    *pos = (int)v;
    return DTRAIN_OK;
}

static const char *const order_names[] = {
    [DTRAIN_NODE_ORDER_UNKNOWN] = "unknown",         [DTRAIN_NODE_ORDER_SLURM] = "slurm",
    [DTRAIN_NODE_ORDER_SWITCH_RANK] = "switch-rank", [DTRAIN_NODE_ORDER_BLOCK_RANK] = "block-rank",
    [DTRAIN_NODE_ORDER_TOPOLOGY] = "topology",       [DTRAIN_NODE_ORDER_HOSTFILE] = "hostfile",
};

const char *dtrain_node_order_name(enum dtrain_node_order order)
{
    return (unsigned)order < sizeof order_names / sizeof order_names[0] ? order_names[order] : "unknown";
}

enum dtrain_node_order dtrain_node_order_parse(const char *name)
{
    for (unsigned i = 1; name && i < sizeof order_names / sizeof order_names[0]; i++)
        if (strcmp(name, order_names[i]) == 0)
            return (enum dtrain_node_order)i;
    return DTRAIN_NODE_ORDER_UNKNOWN;
}

const char *dtrain_node_order_describe(enum dtrain_node_order order)
{
    switch (order) {
    case DTRAIN_NODE_ORDER_SLURM:
        return "Slurm's node order (SLURM_NODEID, no topology ranking)";
    case DTRAIN_NODE_ORDER_SWITCH_RANK:
        return "Slurm's node ranks by leaf switch (TopologyParam=SwitchAsNodeRank)";
    case DTRAIN_NODE_ORDER_BLOCK_RANK:
        return "Slurm's node ranks by base block (TopologyParam=BlockAsNodeRank)";
    case DTRAIN_NODE_ORDER_TOPOLOGY:
        return "Slurm's topology-ordered step layout (Slurm 26.05: task ids by leaf switch, block or ring position)";
    case DTRAIN_NODE_ORDER_HOSTFILE:
        return "dtrain's own order (SLURM_HOSTFILE with --distribution=arbitrary)";
    default:
        return "an unknown node order (no word from srun)";
    }
}

/* Whether a comma-separated list holds word (case-insensitive, as Slurm reads it). */
static int has_word(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; p && *p;) {
        size_t n = strcspn(p, ",");
        if (n == wl && strncasecmp(p, word, wl) == 0)
            return 1;
        p += n;
        p += *p == ',';
    }
    return 0;
}

enum dtrain_node_order dtrain_node_order_of(const char *topology_plugin, const char *topology_param, int arbitrary,
                                            int topo_layout, int no_dist_topo)
{
    const char *plugin = topology_plugin ? topology_plugin : "";
    int tree = strcmp(plugin, "topology/tree") == 0, block = strcmp(plugin, "topology/block") == 0,
        ring = strcmp(plugin, "topology/ring") == 0;
    if (arbitrary)
        return DTRAIN_NODE_ORDER_HOSTFILE;
    if (tree && has_word(topology_param, "SwitchAsNodeRank"))
        return DTRAIN_NODE_ORDER_SWITCH_RANK;
    if (block && has_word(topology_param, "BlockAsNodeRank"))
        return DTRAIN_NODE_ORDER_BLOCK_RANK;
    if (topo_layout && !no_dist_topo && (tree || block || ring))
        return DTRAIN_NODE_ORDER_TOPOLOGY;
    return DTRAIN_NODE_ORDER_SLURM;
}
