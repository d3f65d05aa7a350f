/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of launcher/spares.c: the job's nodes by role (ranks, spares,
 * failed) through failures and replacements, and which node each of srun's
 * report lines blames (the lines as Slurm 22.05 prints them). */
#include <stdio.h>
#include <string.h>

#include "spares.h"
#include "tap.h"

static void test_roles(void)
{
    static const char *const names[] = {"node1", "node2", "node3", "node4"};
    struct dtrain_node_roles r;
    char err[256], list[256];

    ok(dtrain_roles_init(&r, names, 2, 2, err, sizeof err) == -1 && strstr(err, "no node is left for the ranks"),
       "2 nodes, 2 spares: refused (%s)", err);
    ok(dtrain_roles_init(&r, names, 4, -1, err, sizeof err) == -1, "negative spares: refused");
    ok(dtrain_roles_init(&r, names, 4, 0, err, sizeof err) == 0 && dtrain_roles_count(&r, DTRAIN_NODE_ACTIVE) == 4 &&
       dtrain_roles_count(&r, DTRAIN_NODE_SPARE) == 0, "no spares: every node runs ranks");
    ok(dtrain_roles_fail(&r, "node3") == 1 && dtrain_roles_replace(&r) == -1 &&
       dtrain_roles_count(&r, DTRAIN_NODE_FAILED) == 1, "no spares: a failed node cannot be replaced");
    dtrain_roles_free(&r);

    ok(dtrain_roles_init(&r, names, 4, 2, err, sizeof err) == 0 &&
       dtrain_roles_list(&r, DTRAIN_NODE_ACTIVE, list, sizeof list) == 0 && strcmp(list, "node1,node2") == 0,
       "4 nodes, 2 spares: the first 2 run ranks (%s)", list);
    ok(dtrain_roles_list(&r, DTRAIN_NODE_SPARE, list, sizeof list) == 0 && strcmp(list, "node3,node4") == 0,
       "the last 2 are spares (%s)", list);
    ok(dtrain_roles_fail(&r, "node3") == 0 && dtrain_roles_fail(&r, "node9") == 0 && r.failed_now == 0,
       "a spare or an unknown node is not marked failed");
    ok(dtrain_roles_fail(&r, "node1") == 1 && dtrain_roles_fail(&r, "node1") == 0 && dtrain_roles_replace(&r) == 1,
       "node1 fails (once) and is replaced");
    ok(dtrain_roles_list(&r, DTRAIN_NODE_ACTIVE, list, sizeof list) == 0 && strcmp(list, "node2,node3") == 0 &&
       dtrain_roles_list(&r, DTRAIN_NODE_FAILED, list, sizeof list) == 0 && strcmp(list, "node1") == 0,
       "the step now runs on node2,node3; node1 is excluded");
    ok(dtrain_roles_fail(&r, "node2") == 1 && dtrain_roles_fail(&r, "node3") == 1 && dtrain_roles_replace(&r) == -1 &&
       dtrain_roles_count(&r, DTRAIN_NODE_SPARE) == 1, "two nodes fail with one spare left: no replacement, spare kept");
    ok(dtrain_roles_list(&r, DTRAIN_NODE_FAILED, list, 8) == -1, "a list that does not fit is refused");
    dtrain_roles_free(&r);

    char longname[DTRAIN_NODE_NAME_MAX + 4];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    const char *const bad[] = {"node1", longname};
    ok(dtrain_roles_init(&r, bad, 2, 0, err, sizeof err) == -1 && strstr(err, "longer than") != NULL,
       "a node name too long is refused");
}

static void test_blame(void)
{
    static const struct { const char *line, *node; } lines[] = {
        {"srun: error: node2: task 1: Killed", "node2"},
        {"srun: error: node1: tasks 0,2: Segmentation fault (core dumped)", "node1"},
        {"srun: error: gpu-a17: tasks 4-7: Aborted", "gpu-a17"},
        {"srun: error: node3: task 5: Exited with exit code 137", "node3"},
        {"srun: error: Node failure on node2", "node2"},
        {"srun: error: Task launch for StepId=12.0 failed on node node4: Communication connection failure", "node4"},
        {"srun: error: node1: task 0: Exited with exit code 75", NULL},
        {"srun: error: node1: tasks 0-3: Exited with exit code 1", NULL},
        {"srun: Force Terminated StepId=3.0", NULL},
        {"dtrain-launch: fault: rank 0 on node1 (vm): tensor-parallel all-reduce: EPEER: ...", NULL},
        {"srun: error: Unable to create step for job 2: More processors requested than permitted", NULL},
        /* a neighbour's heartbeat verdict names the hung or silent rank's node */
        {"dtrain-launch: fault: rank 2 on node2 (vm): heartbeat: rank 3 (node node2, GPU 0000:41:00.0) hangs in "
         "forward of micro-batch 0 at step 10: alive but no progress for 1.0 s outside any communicator call, "
         "while rank 2 waits on it in a TP call: exit 75", "node2"},
        {"dtrain-launch: fault: rank 0 on node1 (vm): heartbeat: rank 1 (node gpu-b3, GPU -) sent no heartbeat for "
         "2.1 s (last seen in backward at step 4): it is stopped or its node unreachable; rank 0 waits in a DP call",
         "gpu-b3"},
        {"dtrain-launch: fault: rank 0 on n1 (vm): heartbeat: rank 1 (node -, GPU -) hangs in forward", NULL},
        {"echo heartbeat: rank 1 (node node9, GPU -) hangs in forward", NULL},
        {"dtrain-launch: heartbeat: rank 1 (node node9, GPU -) is fine", NULL},
        {"", NULL},
    };
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++) {
        char node[DTRAIN_NODE_NAME_MAX] = "";
        int got = dtrain_srun_blames(lines[k].line, node, sizeof node);
        ok(lines[k].node ? got == 1 && strcmp(node, lines[k].node) == 0 : got == 0, "'%s': %s", lines[k].line,
           got ? node : "no node blamed");
    }
}

/* What a line blames a node for, and when Slurm's facts bear it out. */
static void test_blame_confirmed(void)
{
    char node[DTRAIN_NODE_NAME_MAX];
    ok(dtrain_srun_blame("srun: error: node2: task 1: Killed", node, sizeof node) == DTRAIN_BLAME_TASK &&
       dtrain_srun_blame("srun: error: Node failure on node2", node, sizeof node) == DTRAIN_BLAME_NODE &&
       dtrain_srun_blame("srun: error: Task launch for StepId=1.0 failed on node node2: x", node, sizeof node) ==
           DTRAIN_BLAME_NODE, "a task blame and a node blame");
    ok(dtrain_srun_blame("cannot open data /x/srun: error: node1: task 0: Killed", node, sizeof node) ==
           DTRAIN_BLAME_NONE &&
       dtrain_srun_blame(" srun: error: Node failure on node1", node, sizeof node) == DTRAIN_BLAME_NONE,
       "srun's words inside a longer line are not srun's");
    ok(dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 137, -1) && dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 129, -1) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 75, -1) && !dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 1, -1) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 128, -1),
       "a task blame holds only when srun's status says a task died of a signal");
    ok(dtrain_blame_confirmed(DTRAIN_BLAME_NODE, 1, 1) && !dtrain_blame_confirmed(DTRAIN_BLAME_NODE, 137, 0) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_NODE, 75, -1), "a node blame holds only when slurmctld holds it failed");
    ok(dtrain_blame_confirmed(DTRAIN_BLAME_HEARTBEAT, 75, -1) && !dtrain_blame_confirmed(DTRAIN_BLAME_HEARTBEAT, 1, -1) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_HEARTBEAT, 137, -1) && !dtrain_blame_confirmed(DTRAIN_BLAME_NONE, 137, 1),
       "a heartbeat verdict holds only when every task exited 75");
}

/* The nodes n1..n<count>, the last `spares` spares, each with a report line. */
static void roles_with(struct dtrain_node_roles *r, int count, int spares, const char *const *reports)
{
    static const char *const names[] = {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"};
    char err[256];
    int rc = dtrain_roles_init(r, names, count, spares, err, sizeof err);
    for (int i = 0; rc == 0 && reports && reports[i]; i++)
        rc = dtrain_roles_note_where(r, reports[i]) == 1 ? 0 : -1;
    if (rc != 0)
        ok(0, "the roles of %d nodes and their reports", count);
}

/* The report lines and the layout line: written, read back, refused when malformed. */
static void test_where_lines(void)
{
    struct dtrain_node_roles r;
    char line[600];
    roles_with(&r, 2, 1, NULL);
    ok(dtrain_where_format("n1", "spine.leaf1.n1", "switch.switch.node", "6d1e/1", line, sizeof line) == 0 &&
           strcmp(line, "dtrain-node-report n1 spine.leaf1.n1 switch.switch.node 6d1e/1") == 0,
       "a report line: %s", line);
    ok(dtrain_roles_note_where(&r, line) == 1 && r.where[0].known && strcmp(r.where[0].addr, "spine.leaf1.n1") == 0 &&
           strcmp(r.where[0].pattern, "switch.switch.node") == 0 && strcmp(r.where[0].domain, "6d1e/1") == 0,
       "... read back for n1");
    ok(dtrain_where_format("n2", NULL, "", NULL, line, sizeof line) == 0 &&
           strcmp(line, "dtrain-node-report n2 - - -") == 0 && dtrain_roles_note_where(&r, line) == 1 &&
           r.where[1].known && !r.where[1].addr[0] && !r.where[1].domain[0],
       "a node without topology address or domain: '-' (%s)", line);
    ok(dtrain_where_format("", "a", "b", "c", line, sizeof line) == -1 &&
           dtrain_where_format("n1", "a b", "", "", line, sizeof line) == -1 &&
           dtrain_where_format("n1", "-", "", "", line, sizeof line) == -1 &&
           dtrain_where_format("n1", "", "", "x\ty", line, sizeof line) == -1,
       "no node name, a space, a lone '-' or a tab in a value: not written");
    static const char *const bad[] = {
        "dtrain-node-report n1 a b",            /* a field missing */
        "dtrain-node-report n1 a b c d",        /* one too many */
        "dtrain-node-report n9 a b c",          /* not a node of the job */
        "dtrain-node-report  n1 a b c",         /* an empty field */
        " dtrain-node-report n1 a b c",         /* not at the start */
        "srun: dtrain-node-report n1 a b c",
        "dtrain-node-report n1 a b c\x01",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        ok(dtrain_roles_note_where(&r, bad[k]) == 0, "not a report of the job: '%s'", bad[k]);
    ok(strcmp(r.where[0].domain, "6d1e/1") == 0, "... and n1's report is as it was");
    dtrain_roles_free(&r);

    struct dtrain_spare_layout l = {.known = 1, .tp = 4, .pp = 2, .dp = 3, .per_node = 2, .tp_domain = 1}, back = {0};
    ok(dtrain_layout_format(&l, line, sizeof line) == 0 &&
           strcmp(line, "dtrain-launch: layout T=4 P=2 D=3, 2 tasks per node; kept in one NVLink domain: TP groups") == 0,
       "the layout line: %s", line);
    ok(dtrain_layout_parse(line, &back) == 1 && back.known && back.tp == 4 && back.pp == 2 && back.dp == 3 &&
           back.per_node == 2 && back.tp_domain && !back.pp_domain, "... read back");
    for (int k = 0; k < 4; k++) {
        struct dtrain_spare_layout m = {.known = 1, .tp = 1, .pp = 2, .dp = 1, .per_node = 1, .tp_domain = k & 1,
                                        .pp_domain = (k & 2) != 0};
        back = (struct dtrain_spare_layout){0};
        ok(dtrain_layout_format(&m, line, sizeof line) == 0 && dtrain_layout_parse(line, &back) == 1 &&
               back.tp_domain == m.tp_domain && back.pp_domain == m.pp_domain, "kept: %s", strrchr(line, ':') + 2);
    }
    static const char *const badl[] = {
        "dtrain-launch: layout T=0 P=1 D=1, 2 tasks per node; kept in one NVLink domain: none",
        "dtrain-launch: layout T=2 P=1 D=1, 2 tasks per node; kept in one NVLink domain: DP groups",
        "dtrain-launch: layout T=2 P=1 D=1, 2 tasks per node; kept in one NVLink domain: none extra",
        "dtrain-launch: layout T=2 P=1 D=1; kept in one NVLink domain: none",
        "x dtrain-launch: layout T=2 P=1 D=1, 2 tasks per node; kept in one NVLink domain: none",
        "dtrain-launch: layout T=65536 P=65536 D=1, 2 tasks per node; kept in one NVLink domain: none",
    };
    for (size_t k = 0; k < sizeof badl / sizeof badl[0]; k++) {
        back = (struct dtrain_spare_layout){0};
        ok(dtrain_layout_parse(badl[k], &back) == 0 && !back.known, "not a layout: '%s'", badl[k]);
    }
}

/* Replace with layout L (NULL: none); 0 and the picks' texts joined by "; " in out, or the code and err. */
static int replace(struct dtrain_node_roles *r, const struct dtrain_spare_layout *L, char *out, size_t len)
{
    struct dtrain_spare_pick picks[8];
    char err[512], one[256];
    int n = dtrain_roles_replace_near(r, L, picks, err, sizeof err);
    out[0] = '\0';
    if (n < 0) {
        snprintf(out, len, "%s", n == -2 ? err : "no spare");
        return n;
    }
    for (int i = 0; i < n; i++) {
        dtrain_spare_pick_text(r, &picks[i], one, sizeof one);
        size_t o = strlen(out);
        snprintf(out + o, len - o, "%s%s", i ? "; " : "", one);
    }
    return 0;
}

#define TREE(n, leaf, dom) "dtrain-node-report " n " spine." leaf "." n " switch.switch.node " dom
#define BLOCK(n, block) "dtrain-node-report " n " " block "." n " block.node -"

static void test_choice(void)
{
    struct dtrain_node_roles r;
    char text[1024], list[256];
    struct dtrain_spare_layout tp_dom = {.known = 1, .tp = 4, .pp = 1, .dp = 1, .per_node = 2, .tp_domain = 1};

    /* leaf switch: n3 is the first spare but under the other leaf */
    const char *const tree[] = {TREE("n1", "leaf1", "-"), TREE("n2", "leaf2", "-"), TREE("n3", "leaf2", "-"),
                                TREE("n4", "leaf1", "-"), NULL};
    roles_with(&r, 4, 2, tree);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, NULL, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n1 (same leaf switch leaf1)") == 0,
       "leaf switch: n1 (leaf1) gets n4 (leaf1), not the first spare n3 (leaf2): %s", text);
    ok(dtrain_roles_list(&r, DTRAIN_NODE_ACTIVE, list, sizeof list) == 0 && strcmp(list, "n2,n4") == 0 &&
           r.failed_now == 0 && !r.fresh[0], "... the step runs on n2,n4 (%s)", list);
    dtrain_roles_free(&r);

    /* block: n3 (b2) first, n4 in n1's block b1 */
    const char *const blocks[] = {BLOCK("n1", "b1"), BLOCK("n2", "b2"), BLOCK("n3", "b2"), BLOCK("n4", "b1"), NULL};
    roles_with(&r, 4, 2, blocks);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, NULL, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n1 (same block b1)") == 0,
       "block: n1 (b1) gets n4 (b1) over n3 outside its block: %s", text);
    dtrain_roles_free(&r);

    /* ties: both spares under n2's leaf, then neither near: Slurm's order decides */
    const char *const ties[] = {TREE("n1", "leaf1", "-"), TREE("n2", "leaf2", "-"), TREE("n3", "leaf2", "-"),
                                TREE("n4", "leaf2", "-"), NULL};
    roles_with(&r, 4, 2, ties);
    ok(dtrain_roles_fail(&r, "n2") == 1 && replace(&r, NULL, text, sizeof text) == 0 &&
           strcmp(text, "spare n3 for n2 (same leaf switch leaf2)") == 0,
       "ties: two spares under n2's leaf: the first in Slurm's order, n3 (%s)", text);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, NULL, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n1 (the first left: none shares its NVLink domain, block or leaf switch)") == 0,
       "... then n1 (leaf1) gets the one left, saying none is near: %s", text);
    dtrain_roles_free(&r);

    /* nothing reported: the first spare, as before */
    roles_with(&r, 4, 2, NULL);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, NULL, text, sizeof text) == 0 &&
           strcmp(text, "spare n3 for n1 (the first left: where n1 is was not reported)") == 0,
       "no reports: the first spare, saying why: %s", text);
    dtrain_roles_free(&r);

    /* the NVLink domain comes before the leaf switch */
    const char *const dom[] = {TREE("n1", "leaf1", "c/1"), TREE("n2", "leaf2", "c/1"), TREE("n3", "leaf2", "c/2"),
                               TREE("n4", "leaf1", "c/1"), NULL};
    roles_with(&r, 4, 2, dom);
    ok(dtrain_roles_fail(&r, "n2") == 1 && replace(&r, NULL, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n2 (same NVLink domain c/1)") == 0,
       "domain first: n2 gets n4 (its domain c/1) over n3 (its leaf switch, domain c/2): %s", text);
    dtrain_roles_free(&r);

    /* two nodes fail in one step: each gets the spare under its leaf */
    roles_with(&r, 4, 2, tree);
    ok(dtrain_roles_fail(&r, "n2") == 1 && dtrain_roles_fail(&r, "n1") == 1 &&
           replace(&r, NULL, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n1 (same leaf switch leaf1); spare n3 for n2 (same leaf switch leaf2)") == 0,
       "two failed: n1 gets n4, n2 gets n3, in Slurm's order: %s", text);
    dtrain_roles_free(&r);

    /* domain required (T=4 over 2 nodes of 2 tasks) and no spare in it: refused, nothing changed */
    const char *const out_dom[] = {TREE("n1", "leaf1", "c/1"), TREE("n2", "leaf1", "c/1"), TREE("n3", "leaf1", "c/2"),
                                   TREE("n4", "leaf1", "c/2"), NULL};
    roles_with(&r, 4, 2, out_dom);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, &tp_dom, text, sizeof text) == -2 &&
           strstr(text, "no spare left keeps the step's TP groups in one NVLink domain (n1 is in c/1; with spare n3 "
                        "(NVLink domain c/2): the TP group of ranks 0-3 would hold n2 (NVLink domain c/1) and n3 "
                        "(NVLink domain c/2))") != NULL,
       "domain required, both spares outside it: refused: %s", text);
    ok(r.failed_now == 1 && dtrain_roles_count(&r, DTRAIN_NODE_SPARE) == 2 &&
           dtrain_roles_list(&r, DTRAIN_NODE_ACTIVE, list, sizeof list) == 0 && strcmp(list, "n2") == 0,
       "... and nothing changed (the job takes the requeue path)");
    struct dtrain_spare_layout none = tp_dom;
    none.tp_domain = 0;
    ok(replace(&r, &none, text, sizeof text) == 0 && strstr(text, "spare n3 for n1 (same leaf switch leaf1)"),
       "the same spares when no group must stay in a domain: taken (%s)", text);
    dtrain_roles_free(&r);

    /* domain required and a spare's domain not reported: refused */
    const char *const unknown[] = {TREE("n1", "leaf1", "c/1"), TREE("n2", "leaf1", "c/1"), NULL};
    roles_with(&r, 3, 1, unknown);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, &tp_dom, text, sizeof text) == -2 &&
           strstr(text, "with spare n3 (NVLink domain not reported)"),
       "domain required, the spare did not report: refused: %s", text);
    dtrain_roles_free(&r);

    /* domain required: a spare in the domain is taken */
    const char *const in_dom[] = {TREE("n1", "leaf1", "c/1"), TREE("n2", "leaf2", "c/1"), TREE("n3", "leaf2", "c/2"),
                                  TREE("n4", "leaf1", "c/1"), NULL};
    roles_with(&r, 4, 2, in_dom);
    ok(dtrain_roles_fail(&r, "n2") == 1 && replace(&r, &tp_dom, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n2 (same NVLink domain c/1)") == 0,
       "domain required: n2 gets n4 in its domain, not n3 under its leaf: %s", text);
    dtrain_roles_free(&r);

    /* Slurm orders the step's nodes: a spare in the domain may still shift a group across domains */
    const char *const shift[] = {TREE("n1", "l", "c/1"), TREE("n2", "l", "c/1"), TREE("n3", "l", "c/2"),
                                 TREE("n4", "l", "c/2"), TREE("n5", "l", "c/1"), TREE("n6", "l", "c/2"), NULL};
    struct dtrain_spare_layout tp_dom2 = tp_dom;
    tp_dom2.dp = 2;
    roles_with(&r, 6, 2, shift);
    ok(dtrain_roles_fail(&r, "n4") == 1 && replace(&r, &tp_dom2, text, sizeof text) == 0 &&
           strcmp(text, "spare n6 for n4 (same NVLink domain c/2)") == 0,
       "order: n4 (c/2) gets n6 (c/2): n1 n2 | n3 n6 keep their domains (%s)", text);
    dtrain_roles_free(&r);
    roles_with(&r, 6, 2, shift);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, &tp_dom2, text, sizeof text) == -2 &&
           strstr(text, "with spare n5 (NVLink domain c/1): the TP group of ranks 0-3 would hold n2 (NVLink domain "
                        "c/1) and n3 (NVLink domain c/2)"),
       "order: n1 (c/1) cannot take n5 (c/1): n2 n3 | n4 n5 would cross domains; refused: %s", text);
    dtrain_roles_free(&r);

    /* --dtrain-pp-in-domain: T=2 P=2 on 2 nodes of 2 tasks: PP groups {0,2} and {1,3} hold both nodes */
    struct dtrain_spare_layout pp_dom = {.known = 1, .tp = 2, .pp = 2, .dp = 1, .per_node = 2, .pp_domain = 1};
    roles_with(&r, 4, 2, out_dom);
    ok(dtrain_roles_fail(&r, "n2") == 1 && replace(&r, &pp_dom, text, sizeof text) == -2 &&
           strstr(text, "no spare left keeps the step's PP groups in one NVLink domain") &&
           strstr(text, "the PP group of ranks 0-2 would hold n1 (NVLink domain c/1) and n3"),
       "pp-in-domain, no spare in the domain: refused: %s", text);
    dtrain_roles_free(&r);
    roles_with(&r, 4, 2, in_dom);
    ok(dtrain_roles_fail(&r, "n1") == 1 && replace(&r, &pp_dom, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n1 (same NVLink domain c/1)") == 0, "pp-in-domain: a spare in the domain (%s)",
       text);
    dtrain_roles_free(&r);

    /* a layout that does not fit the node count: the spare must share the failed node's domain */
    struct dtrain_spare_layout odd = tp_dom;
    odd.dp = 3;
    roles_with(&r, 4, 2, in_dom);
    ok(dtrain_roles_fail(&r, "n2") == 1 && replace(&r, &odd, text, sizeof text) == 0 &&
           strcmp(text, "spare n4 for n2 (same NVLink domain c/1)") == 0,
       "a layout that does not fit: a spare in the failed node's domain is still taken (%s)", text);
    dtrain_roles_free(&r);
    roles_with(&r, 4, 2, out_dom);
    ok(dtrain_roles_fail(&r, "n2") == 1 && replace(&r, &odd, text, sizeof text) == -2 &&
           strstr(text, "does not fit 2 nodes"), "... and one outside it is not: %s", text);
    dtrain_roles_free(&r);
}

int main(void)
{
    test_roles();
    test_blame();
    test_blame_confirmed();
    test_where_lines();
    test_choice();
    return tap_done();
}
