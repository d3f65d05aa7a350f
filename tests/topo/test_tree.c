/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The switch tree (dtrain_tree.h): parsing SLURM_TOPOLOGY_ADDR lines, the
 * node order (grouped under switches, Slurm's first node first) and the DP
 * ring traffic across leaf switches. */
#include <stdlib.h>
#include <string.h>

#include "dtrain_tree.h"
#include "tap.h"

static char err[512];

static int load(const char *text, struct dtrain_tree_node **nodes, int *n)
{
    err[0] = '\0';
    return dtrain_tree_parse(text, strlen(text), nodes, n, err, sizeof err);
}

/* The chosen order as "a b c". */
static const char *order_text(const struct dtrain_tree_node *nodes, int n)
{
    static char buf[1024];
    int order[64];
    buf[0] = '\0';
    if (n > 64 || dtrain_tree_order(nodes, n, order) != 0)
        return "(failed)";
    for (int p = 0; p < n; p++) {
        strcat(buf, p ? " " : "");
        strcat(buf, nodes[order[p]].name);
    }
    return buf;
}

int main(void)
{
    struct dtrain_tree_node *nodes = NULL;
    int n = 0, order[64], slurm[64];
    struct dtrain_tree_cost c;
    int rc;

    ok(load("# gathered\nnode1 spine.leaf1.node1\n\nnode2 spine.leaf2.node2\nnode3 spine.leaf1.node3\n"
            "node4  spine.leaf2.node4 \n", &nodes, &n) == 0 && n == 4 && strcmp(nodes[3].addr, "spine.leaf2.node4") == 0,
       "4 nodes parsed, comments and blank lines skipped (%s)", err);
    ok(strcmp(order_text(nodes, n), "node1 node3 node2 node4") == 0, "two interleaved leaves: grouped (%s)",
       order_text(nodes, n));
    for (int i = 0; i < n; i++)
        slurm[i] = i;
    rc = dtrain_tree_cost(nodes, slurm, n, 2, 1, 2, 1e9, &c, err, sizeof err);
    ok(rc == 0 && c.leaves == 2 &&
           c.ring_edges == 8 && c.cross_edges == 8 && c.cross_bytes == 12e9,
       "Slurm's order, T=2 K=2 D=4: 8 of 8 ring edges cross, 2*(3/4)*1 GB each = 12 GB (%ld, %.0f)", c.cross_edges,
       c.cross_bytes);
    dtrain_tree_order(nodes, n, order);
    rc = dtrain_tree_cost(nodes, order, n, 2, 1, 2, 1e9, &c, err, sizeof err);
    ok(rc == 0 && c.cross_edges == 4 &&
           c.cross_bytes == 6e9,
       "chosen order: 4 of 8, 6 GB (%ld, %.0f)", c.cross_edges, c.cross_bytes);
    rc = dtrain_tree_cost(nodes, order, n, 2, 2, 2, 1e9, &c, err, sizeof err);
    ok(rc == 0 && c.cross_edges == 0 &&
           c.pp_pairs == 4 && c.pp_cross == 4,
       "T=2 P=2: the chosen order keeps DP rings under one leaf, PP sends cross (%ld, %ld)", c.cross_edges, c.pp_cross);
    rc = dtrain_tree_cost(nodes, order, n, 4, 1, 2, 1e9, &c, err, sizeof err);
    ok(rc == 0 && c.ring_edges == 8,
       "T=4 over nodes of 2 (a multi-node NVLink TP group) is costed too");
    rc = dtrain_tree_cost(nodes, order, n, 3, 1, 2, 1e9, &c, err, sizeof err);
    ok(rc == -1 && strstr(err, "T=3"),
       "a shape that does not fit is refused: %s", err);
    free(nodes);

    /* Three levels: two spines, four leaves; Slurm's first node stays first. */
    ok(load("n1 core.sp2.l3.n1\nn2 core.sp1.l1.n2\nn3 core.sp2.l4.n3\nn4 core.sp1.l2.n4\nn5 core.sp1.l1.n5\n"
            "n6 core.sp2.l3.n6\nn7 core.sp1.l2.n7\nn8 core.sp2.l4.n8\n", &nodes, &n) == 0 && n == 8,
       "8 nodes under 2 spines (%s)", err);
    ok(strcmp(order_text(nodes, n), "n1 n6 n3 n8 n2 n5 n4 n7") == 0,
       "three levels: leaves grouped under their spine, each group where its first node stood (%s)",
       order_text(nodes, n));
    free(nodes);

    ok(load("n1 leafA.n1\nn2 n2\n", &nodes, &n) == 0 && strcmp(order_text(nodes, n), "n1 n2") == 0,
       "addresses of different depth still order");
    free(nodes);
    nodes = NULL;

    ok(load("node1\n", &nodes, &n) == -1 && strstr(err, "line 1") && nodes == NULL, "a line without address: %s", err);
    ok(load("a x.a\nb x.b extra\n", &nodes, &n) == -1 && strstr(err, "line 2"), "a line with three fields: %s", err);
    ok(load("a x.a\na x.b\n", &nodes, &n) == -1 && strstr(err, "twice"), "a node twice: %s", err);
    ok(load("# nothing\n", &nodes, &n) == -1 && strstr(err, "no nodes"), "no nodes: %s", err);
    /* Slurm's topology/block address (Slurm 24.11.5: "b1.node1", pattern "block.node") */
    char dom[64];
    ok(dtrain_tree_block_domain("b1.node1", "block.node", dom, sizeof dom, err, sizeof err) == 0 &&
           strcmp(dom, "slurm-block/b1") == 0,
       "block: b1.node1 with pattern block.node is in slurm-block/b1 (%s)", dom);
    ok(dtrain_tree_block_domain(NULL, NULL, dom, sizeof dom, err, sizeof err) == -1 &&
           strstr(err, "no SLURM_TOPOLOGY_ADDR") && strstr(err, "topology/block"),
       "block: no address (no topology plugin) says what to set: %s", err);
    ok(dtrain_tree_block_domain("spine.leaf1.node1", "switch.switch.node", dom, sizeof dom, err, sizeof err) == -1 &&
           strstr(err, "not Slurm's topology/block"),
       "block: a topology/tree address is not a block: %s", err);
    ok(dtrain_tree_block_domain("b1", "block.node", dom, sizeof dom, err, sizeof err) == -1 &&
           strstr(err, "does not match its pattern"),
       "block: an address with fewer parts than its pattern: %s", err);
    ok(dtrain_tree_block_domain("averyveryverylongblockname.node1", "block.node", dom, 20, err, sizeof err) == -1 &&
           strstr(err, "longer than"),
       "block: a block name longer than the buffer: %s", err);
    ok(dtrain_tree_unit_domain(DTRAIN_TREE_UNIT_RING, "r0:3.node4", "ring:position.node", dom, sizeof dom, err,
                               sizeof err) == 0 && strcmp(dom, "slurm-ring/r0") == 0,
       "ring: r0:3.node4 with pattern ring:position.node is in slurm-ring/r0 (%s)", dom);
    ok(dtrain_tree_unit_domain(DTRAIN_TREE_UNIT_RING, "b1.node1", "block.node", dom, sizeof dom, err, sizeof err) ==
               -1 && strstr(err, "not Slurm's topology/ring ('ring:position.node')"),
       "ring: a block address is not a ring: %s", err);
    ok(dtrain_tree_unit_domain(DTRAIN_TREE_UNIT_BLOCK, "r0:3.node4", "ring:position.node", dom, sizeof dom, err,
                               sizeof err) == -1 && strstr(err, "not Slurm's topology/block"),
       "block: a ring address is not a block: %s", err);
    ok(dtrain_tree_unit_domain(DTRAIN_TREE_UNIT_RING, NULL, NULL, dom, sizeof dom, err, sizeof err) == -1 &&
           strstr(err, "nvlink_domain_source=ring") && strstr(err, "topology/ring (Slurm 26.05+)"),
       "ring: no address says what to set: %s", err);
    ok(dtrain_tree_unit_domain(DTRAIN_TREE_UNIT_RING, "r0.node4", "ring:position.node", dom, sizeof dom, err,
                               sizeof err) == -1 && strstr(err, "does not match its pattern"),
       "ring: an address without a position: %s", err);
    {
        char ring[32];
        int pos = -1;
        ok(dtrain_tree_ring_position("r0:3.node4", "ring:position.node", ring, sizeof ring, &pos, err, sizeof err) ==
                   0 && strcmp(ring, "r0") == 0 && pos == 3,
           "ring: r0:3.node4 is position 3 of ring r0 (%s %d)", ring, pos);
        ok(dtrain_tree_ring_position("r0:x.node4", "ring:position.node", ring, sizeof ring, &pos, err, sizeof err) ==
                   -1 && pos == -1,
           "ring: a position that is not a number: %s", err);
    }
    /* A ring's nodes are under one unit: the ring (not "r0:0", "r0:1"). */
    ok(load("node1 r0:0.node1\nnode2 r1:0.node2\nnode3 r0:1.node3\nnode4 r1:1.node4\n", &nodes, &n) == 0 &&
           strcmp(order_text(nodes, n), "node1 node3 node2 node4") == 0,
       "ring addresses: the order groups each ring's nodes (%s)", order_text(nodes, n));
    for (int i = 0; i < n; i++)
        slurm[i] = i;
    ok(dtrain_tree_cost(nodes, slurm, n, 1, 1, 1, 0, &c, err, sizeof err) == 0 && c.leaves == 2 &&
           c.cross_edges == 4,
       "ring addresses: 2 rings; node1 node2 node3 node4 crosses between rings on all 4 DP edges (%d, %ld)",
       c.leaves, c.cross_edges);
    free(nodes);
    nodes = NULL;

    /* The node order in force, from Slurm's configuration. */
    ok(dtrain_node_order_of("topology/tree", "SwitchAsNodeRank", 0, 0, 0) == DTRAIN_NODE_ORDER_SWITCH_RANK,
       "order: topology/tree + SwitchAsNodeRank: Slurm's ranks by leaf switch");
    ok(dtrain_node_order_of("topology/tree", "RouteTree,switchasnoderank", 0, 1, 0) ==
           DTRAIN_NODE_ORDER_SWITCH_RANK,
       "order: the parameter among others, any case");
    ok(dtrain_node_order_of("topology/block", "SwitchAsNodeRank", 0, 0, 0) == DTRAIN_NODE_ORDER_SLURM,
       "order: SwitchAsNodeRank means nothing to topology/block (24.11 without the topology layout)");
    ok(dtrain_node_order_of("topology/block", "BlockAsNodeRank", 0, 1, 0) == DTRAIN_NODE_ORDER_BLOCK_RANK,
       "order: topology/block + BlockAsNodeRank (26.05)");
    ok(dtrain_node_order_of("topology/ring", NULL, 0, 1, 0) == DTRAIN_NODE_ORDER_TOPOLOGY,
       "order: 26.05's topology layout under topology/ring");
    ok(dtrain_node_order_of("topology/tree", NULL, 0, 1, 1) == DTRAIN_NODE_ORDER_SLURM,
       "order: ... not with CR_NO_DIST_TOPO_BLOCK");
    ok(dtrain_node_order_of("topology/tree", "SwitchAsNodeRank", 1, 1, 0) == DTRAIN_NODE_ORDER_HOSTFILE,
       "order: --distribution=arbitrary: the host file's");
    ok(dtrain_node_order_of(NULL, NULL, 0, 1, 0) == DTRAIN_NODE_ORDER_SLURM, "order: no topology plugin: Slurm's");
    ok(dtrain_node_order_parse(dtrain_node_order_name(DTRAIN_NODE_ORDER_BLOCK_RANK)) == DTRAIN_NODE_ORDER_BLOCK_RANK &&
           dtrain_node_order_parse("nonsense") == DTRAIN_NODE_ORDER_UNKNOWN,
       "order: names go both ways");
    /* the leaf switch of a topology/tree address (Slurm 22.05: pattern "switch.switch.node") */
    char leaf[16];
    ok(dtrain_tree_leaf("spine.leaf1.node1", "switch.switch.node", leaf, sizeof leaf) == 1 &&
           strcmp(leaf, "spine.leaf1") == 0,
       "leaf: spine.leaf1.node1 is under spine.leaf1 (%s)", leaf);
    ok(dtrain_tree_leaf("leaf2.node3", "switch.node", leaf, sizeof leaf) == 1 && strcmp(leaf, "leaf2") == 0,
       "leaf: one switch level (%s)", leaf);
    ok(dtrain_tree_leaf("b1.node1", "block.node", leaf, sizeof leaf) == 0 && leaf[0] == '\0' &&
           dtrain_tree_leaf("node1", "node", leaf, sizeof leaf) == 0 &&
           dtrain_tree_leaf(NULL, NULL, leaf, sizeof leaf) == 0 &&
           dtrain_tree_leaf("x.node1", "noswitch.node", leaf, sizeof leaf) == 0,
       "leaf: a block address, a node without switch, no address and a pattern not the tree's have none");
    ok(dtrain_tree_leaf("averyveryverylongspine.leaf1.node1", "switch.switch.node", leaf, sizeof leaf) == 0 &&
           leaf[0] == '\0', "leaf: a switch path longer than the buffer is none");
    return tap_done();
}
