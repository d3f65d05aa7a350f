/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The slowest link of each of a rank's groups (dtrain_explain_rank_links)
 * on saved topologies of real servers: NVSwitch, NVLink pairs bridged over
 * PCIe, XGMI, CPU-only; a node's share of the plan (what the SPANK plugin
 * has) gives every rank the whole plan's answer; and the text the plugin
 * hands the trainer in DTRAIN_GROUP_LINKS reads back, hostile text refused. */
#include <stdlib.h>
#include <string.h>

#include "dtrain_explain.h"
#include "fixtures.h"
#include "tap.h"

static char err[512];

static dtrain_plan *plan_of(const dtrain_topo *topo, int T, int P, int N, int K, int cpu_only, int node)
{
    const dtrain_topo *nodes[16];
    for (int i = 0; i < N; i++)
        nodes[i] = topo;
    struct dtrain_shape shape = {T, P, 0, N, K};
    struct dtrain_policy policy = {.allow_pcie = 1, .cpu_only = cpu_only};
    dtrain_plan *p = NULL;
    int rc = node < 0 ? dtrain_plan_place_tasks(&shape, nodes, &policy, &p, err, sizeof err)
                      : dtrain_plan_place_node(&shape, nodes, &policy, node, &p, err, sizeof err);
    if (rc != DTRAIN_OK)
        diag("plan T=%d P=%d N=%d K=%d: %s", T, P, N, K, err);
    return p;
}

static int same_links(const struct dtrain_group_links *a, const struct dtrain_group_links *b)
{
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++)
        if (a->gbps[g] != b->gbps[g] || strcmp(a->kind[g], b->kind[g]) != 0)
            return 0;
    return 1;
}

static void links_text(const struct dtrain_group_links *l, char *buf, size_t len)
{
    if (dtrain_group_links_format(l, buf, len) != 0)
        snprintf(buf, len, "(does not fit)");
}

/* Every rank's links from its node's share equal those from the whole plan. */
static void shares_agree(const char *fixture, int T, int P, int N, int K, int cpu_only)
{
    dtrain_topo *topo = load_fixture(fixture);
    dtrain_plan *whole = topo ? plan_of(topo, T, P, N, K, cpu_only, -1) : NULL;
    int W = whole ? dtrain_plan_world_size(whole) : 0, agree = 0, bad = -1;
    for (int n = 0; whole && n < N; n++) {
        dtrain_plan *share = plan_of(topo, T, P, N, K, cpu_only, n);
        for (int l = 0; share && l < K; l++) {
            struct dtrain_group_links a, b;
            int r = n * K + l;
            if (dtrain_explain_rank_links(whole, topo, r, 25, 16, 0, &a) == 0 &&
                dtrain_explain_rank_links(share, topo, r, 25, 16, 0, &b) == 0 && same_links(&a, &b))
                agree++;
            else if (bad < 0)
                bad = r;
        }
        dtrain_plan_free(share);
    }
    ok(W > 0 && agree == W, "%s T=%d P=%d, %d nodes x %d%s: all %d ranks' links from the node's share = the whole "
       "plan's (first differing rank: %d)", fixture, T, P, N, K, cpu_only ? ", cpu only" : "", W, bad);
    dtrain_plan_free(whole);
    dtrain_topo_free(topo);
}

static void expect(const char *fixture, int T, int P, int N, int K, int cpu_only, int rank, const char *want)
{
    dtrain_topo *topo = load_fixture(fixture);
    dtrain_plan *p = topo ? plan_of(topo, T, P, N, K, cpu_only, rank / K) : NULL;
    struct dtrain_group_links l;
    char got[DTRAIN_GROUP_LINKS_TEXT_MAX] = "(no plan)";
    if (p && dtrain_explain_rank_links(p, topo, rank, 25, 16, 0, &l) == 0)
        links_text(&l, got, sizeof got);
    ok(strcmp(got, want) == 0, "%s T=%d P=%d, %d x %d, rank %d: %s (got %s)", fixture, T, P, N, K, rank, want, got);
    dtrain_plan_free(p);
    dtrain_topo_free(topo);
}

static void outside_share(void)
{
    dtrain_topo *topo = load_fixture("dgx-h100.xml");
    dtrain_plan *p = topo ? plan_of(topo, 4, 2, 2, 8, 0, 1) : NULL;
    struct dtrain_group_links l;
    ok(p && dtrain_explain_rank_links(p, topo, 3, 25, 16, 0, &l) == -1 &&
           dtrain_explain_rank_links(p, topo, 16, 25, 16, 0, &l) == -1 &&
           dtrain_explain_rank_links(p, topo, -1, 25, 16, 0, &l) == -1 &&
           dtrain_explain_rank_links(p, topo, 11, 25, 16, 0, &l) == 0,
       "a rank of another node's share, or outside the world, is refused; one of the share is answered");
    dtrain_plan_free(p);
    dtrain_topo_free(topo);
}

static void text_round_trip(void)
{
    struct dtrain_group_links l = {.gbps = {450, 22.5, 0, 25}}, back;
    snprintf(l.kind[0], sizeof l.kind[0], "NVLink");
    snprintf(l.kind[1], sizeof l.kind[1], "NVLink domain");
    snprintf(l.kind[2], sizeof l.kind[2], "-");
    snprintf(l.kind[3], sizeof l.kind[3], "CPU memory/network");
    char text[DTRAIN_GROUP_LINKS_TEXT_MAX], small[16];
    int rc = dtrain_group_links_format(&l, text, sizeof text);
    ok(rc == 0 && strcmp(text, "TP=450:NVLink,PP=22.5:NVLink domain,DP=-,WORLD=25:CPU memory/network") == 0,
       "links as text: %s", text);
    ok(dtrain_group_links_parse(text, &back, err, sizeof err) == 0 && same_links(&l, &back),
       "the text reads back to the same links");
    ok(dtrain_group_links_format(&l, small, sizeof small) == -1, "a buffer too small is refused, not cut");

    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "byte 0 does not name TP"},
        {"TP=450:NVLink", "does not name PP"},
        {"PP=25:network,TP=450:NVLink,DP=-,WORLD=-", "does not name TP"},
        {"TP=450:NVLink,PP=25:network,DP=-,WORLD=-,X=1:y", "more after WORLD"},
        {"TP=0:NVLink,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=-5:NVLink,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=2e6:NVLink,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=inf:NVLink,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=nan:NVLink,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=1e999:NVLink,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=450,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=450:,PP=-,DP=-,WORLD=-", "link kind must be"},
        {"TP=450:NV;Link,PP=-,DP=-,WORLD=-", "link kind must be"},
        {"TP=450:NVLink\n,PP=-,DP=-,WORLD=-", "link kind must be"},
        {"TP=450:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,PP=-,DP=-,WORLD=-", "link kind must be"},
        {"TP=--,PP=-,DP=-,WORLD=-", "not a number of GB/s"},
        {"TP=-,PP=-,DP=-,WORLD=-,", "more after WORLD"},
    };
    int refused = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (dtrain_group_links_parse(bad[i].text, &back, err, sizeof err) == -1 && strstr(err, bad[i].why) &&
            strchr(err, '\n') == NULL)
            refused++;
        else
            diag("'%s': %s", bad[i].text, err);
    }
    ok(refused == (int)(sizeof bad / sizeof bad[0]), "%d of %zu malformed texts refused, each with one line naming "
       "what is wrong", refused, sizeof bad / sizeof bad[0]);
}

int main(void)
{
    /* NVSwitch: every pair 450 GB/s; the pipeline's stages on two nodes. */
    expect("dgx-h100.xml", 4, 2, 2, 8, 0, 0, "TP=450:NVLink,PP=25:network,DP=450:NVLink,WORLD=25:network");
    expect("dgx-h100.xml", 4, 2, 2, 8, 0, 13, "TP=450:NVLink,PP=25:network,DP=450:NVLink,WORLD=25:network");
    /* One node: the pipeline stays inside it too. */
    expect("dgx-h100.xml", 2, 4, 1, 8, 0, 5, "TP=450:NVLink,PP=450:NVLink,DP=-,WORLD=450:NVLink");
    /* NVLink bridges between pairs, PCIe between the pairs (pcie_gbps 16). */
    expect("pcie-a100-bridged-pairs.xml", 2, 1, 1, 4, 0, 0, "TP=300:NVLink,PP=-,DP=16:PCIe,WORLD=16:PCIe");
    /* XGMI on MI250X: the TP pair on one package's two dies; the world's
     * ring has a pair of dies without XGMI between them (PCIe). */
    expect("amd-mi250x.xml", 2, 2, 2, 8, 0, 0, "TP=200:XGMI,PP=25:network,DP=50:XGMI,WORLD=16:PCIe");
    /* No GPUs: ranks share a node's memory (the comm layer's), else the network. */
    expect("dgx-h100.xml", 2, 2, 2, 4, 1, 6, "TP=25:CPU memory/network,PP=25:network,DP=25:CPU memory/network,WORLD=25:CPU memory/network");
    /* T=1, P=1: groups of one. */
    expect("dgx-h100.xml", 1, 1, 1, 8, 0, 7, "TP=-,PP=-,DP=450:NVLink,WORLD=450:NVLink");

    shares_agree("dgx-h100.xml", 4, 2, 2, 8, 0);
    shares_agree("dgx1-v100.xml", 2, 2, 4, 8, 0);
    shares_agree("amd-mi250x.xml", 2, 4, 4, 8, 0);
    shares_agree("pcie-a100-bridged-pairs.xml", 2, 2, 2, 4, 0);
    shares_agree("dgx-h100.xml", 2, 2, 2, 4, 1);
    outside_share();
    text_round_trip();
    {
        long cr, ring, own;
        ok(dtrain_leaf_edges_parse("8 8 4", &cr, &ring, &own) == 0 && cr == 8 && ring == 8 && own == 4 &&
               dtrain_leaf_edges_parse("9 8 4", &cr, &ring, &own) == -1 &&
               dtrain_leaf_edges_parse("8 8", &cr, &ring, &own) == -1 &&
               dtrain_leaf_edges_parse("8 8 4 x", &cr, &ring, &own) == -1,
           "DTRAIN_LEAF_EDGES: \"8 8 4\" reads; more crossings than edges, a missing or an extra field does not");
    }
    return tap_done();
}
