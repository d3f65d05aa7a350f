/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: one function per check; see checks.h. */
#include "checks.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "dtrain_parse.h"
#include "imex.h"

enum { P = 1 << HEALTH_MODE_PROLOG, E = 1 << HEALTH_MODE_EPILOG, C = 1 << HEALTH_MODE_CHECK };
static const unsigned check_modes[HEALTH_CHECK_COUNT] = {
    [HEALTH_CHECK_GPU_COUNT] = P | E | C,
    [HEALTH_CHECK_GPU_MODEL] = P | E | C,
    [HEALTH_CHECK_NVLINK] = P | E | C,
    [HEALTH_CHECK_NVML] = P | E | C,
    [HEALTH_CHECK_ECC] = P | E | C,
    [HEALTH_CHECK_RETIRED_MEMORY] = P | E | C,
    [HEALTH_CHECK_XID] = P | E | C,
    [HEALTH_CHECK_NVLINK_ERRORS] = P | E | C,
    [HEALTH_CHECK_GPU_MEMORY] = P | E,
    [HEALTH_CHECK_GPU_PROCESSES] = E,
    [HEALTH_CHECK_CHECKPOINT_FS] = P | E | C,
    [HEALTH_CHECK_SHM] = P | E,
    [HEALTH_CHECK_INFINIBAND] = P | E | C,
    [HEALTH_CHECK_IMEX] = P | E | C,
};

const char *health_mode_name(enum health_mode mode)
{
    switch (mode) {
    case HEALTH_MODE_PROLOG: return "prolog";
    case HEALTH_MODE_EPILOG: return "epilog";
    case HEALTH_MODE_CHECK: return "check";
    }
    return "unknown";
}

const char *health_outcome_name(enum health_outcome outcome)
{
    switch (outcome) {
    case HEALTH_PASS: return "pass";
    case HEALTH_FAIL: return "fail";
    case HEALTH_SKIP: return "skip";
    }
    return "unknown";
}

int health_check_in_mode(enum health_check_id id, enum health_mode mode)
{
    return id >= 0 && id < HEALTH_CHECK_COUNT && (check_modes[id] & (1u << mode)) != 0;
}

int health_check_wanted(const struct health_config *cfg, enum health_check_id id, enum health_mode mode)
{
    return health_check_in_mode(id, mode) && cfg->enabled[id];
}

/* ------------------------------------------------------------ detail text
 * A check collects its problems as notes joined by "; "; what does not fit
 * is counted and said as "(and N more)". */
struct notes {
    struct health_result *r;
    size_t used;
    int count, dropped;
};

static void note(struct notes *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct notes *n, const char *fmt, ...)
{
    char piece[HEALTH_DETAIL_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(piece, sizeof(piece), fmt, ap);
    va_end(ap);
    n->count++;
    /* Keep room for the "(and N more)" tail. */
    size_t room = sizeof(n->r->detail) - 24;
    size_t need = strlen(piece) + (n->used ? 2 : 0);
    if (n->used + need >= room) {
        n->dropped++;
        return;
    }
    snprintf(n->r->detail + n->used, sizeof(n->r->detail) - n->used, "%s%s", n->used ? "; " : "", piece);
    n->used += need;
}

/* FAIL with the notes when there are any, else PASS with pass_detail. */
static void conclude(struct notes *n, const char *pass_fmt, ...) __attribute__((format(printf, 2, 3)));
static void conclude(struct notes *n, const char *pass_fmt, ...)
{
    if (n->count) {
        n->r->outcome = HEALTH_FAIL;
        if (n->dropped)
            snprintf(n->r->detail + n->used, sizeof(n->r->detail) - n->used, " (and %d more)", n->dropped);
        return;
    }
    va_list ap;
    va_start(ap, pass_fmt);
    vsnprintf(n->r->detail, sizeof(n->r->detail), pass_fmt, ap);
    va_end(ap);
    n->r->outcome = HEALTH_PASS;
}

static void set_result(struct health_result *r, enum health_outcome outcome, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_result(struct health_result *r, enum health_outcome outcome, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
    va_end(ap);
    r->outcome = outcome;
}

/* "1.5 GiB", "512 MiB", "100 B" */
static const char *format_bytes(unsigned long long v, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double d = (double)v;
    int u = 0;
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", v);
    else
        snprintf(buf, len, "%.1f %s", d, units[u]);
    return buf;
}

/* ------------------------------------------------------------ shared logic */
int health_expected_gpus(const struct health_config *cfg, const struct health_facts *facts)
{
    if (cfg->gpu_count >= 0)
        return cfg->gpu_count;
    if (!facts->topo || !facts->topo->node.ok)
        return 0;
    int n = 0;
    for (int i = 0; i < facts->topo->node.ngpus; i++)
        n += facts->topo->node.gpus[i].vendor_id == 0x10de;
    return n;
}

static int nvlink_needs_topology(const struct health_config *cfg)
{
    return cfg->nvlink.min_bandwidth_gbps > 0 || cfg->nvlink.reference[0] || cfg->nvlink.min_largest_island > 0;
}

static int nvml_ok(const struct health_facts *facts)
{
    return facts->nvml && facts->nvml->ok;
}

/* Checks that cannot judge without the topology (gpu_model falls back to
 * NVML's names). */
static int needs_topology(const struct health_config *cfg, const struct health_facts *facts, enum health_check_id id)
{
    switch (id) {
    case HEALTH_CHECK_GPU_COUNT: return 1;
    case HEALTH_CHECK_GPU_MODEL: return cfg->gpu_model[0] != '\0' && !nvml_ok(facts);
    case HEALTH_CHECK_NVLINK: return nvlink_needs_topology(cfg);
    default: return 0;
    }
}

/* The topology could not be read: the first check that needs it fails with
 * the reason, the later ones are skipped. */
static void topology_unavailable(const struct health_config *cfg, enum health_mode mode,
                                 const struct health_facts *facts, struct health_result *r)
{
    const char *why = facts->topo ? facts->topo->node.error : "the topology was not read";
    for (int id = 0; id < HEALTH_CHECK_COUNT; id++) {
        if (!health_check_wanted(cfg, (enum health_check_id)id, mode) || !needs_topology(cfg, facts, (enum health_check_id)id))
            continue;
        if ((enum health_check_id)id == r->id)
            set_result(r, HEALTH_FAIL, "%s", why);
        else
            set_result(r, HEALTH_SKIP, "topology unavailable (see %s)", health_check_name((enum health_check_id)id));
        return;
    }
    set_result(r, HEALTH_FAIL, "%s", why);
}

static int topology_ok(const struct health_facts *facts)
{
    return facts->topo && facts->topo->node.ok;
}

/* NVML-based checks other than "nvml" itself skip when NVML is missing:
 * the nvml check says why, once. */
static int need_nvml(const struct health_facts *facts, struct health_result *r)
{
    if (nvml_ok(facts))
        return 1;
    set_result(r, HEALTH_SKIP, "NVML unavailable (see the nvml check)");
    return 0;
}

static int topo_find(const struct health_topo_model *m, const char *busid)
{
    for (int i = 0; i < m->ngpus; i++)
        if (strcmp(m->gpus[i].busid, busid) == 0)
            return i;
    return -1;
}

static const struct health_nvml_gpu *nvml_find(const struct health_nvml_facts *nv, const char *busid)
{
    for (int i = 0; i < nv->ngpus; i++)
        if (strcmp(nv->gpus[i].busid, busid) == 0)
            return &nv->gpus[i];
    return NULL;
}

/* Reference GPUs that the node lacks, as "0000:8a:00.0, 0000:8b:00.0". */
static void missing_gpus(const struct health_topo_facts *topo, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    if (!topo->have_reference || !topo->reference.ok)
        return;
    for (int i = 0; i < topo->reference.ngpus; i++) {
        const char *busid = topo->reference.gpus[i].busid;
        if (topo_find(&topo->node, busid) >= 0)
            continue;
        int n = snprintf(out + used, len - used, "%s%s", used ? ", " : "", busid);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
}

/* ------------------------------------------------------------ the checks */
static void check_gpu_count(const struct health_config *cfg, enum health_mode mode,
                            const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    if (!topology_ok(facts)) {
        topology_unavailable(cfg, mode, facts, r);
        return;
    }
    int found = facts->topo->node.ngpus;
    int expected = cfg->gpu_count;
    if (expected < 0) {
        if (!nvml_ok(facts)) {
            set_result(r, HEALTH_SKIP, "gpus.count not set (%d GPUs in the topology)", found);
            return;
        }
        if (facts->nvml->ngpus != found)
            note(&n, "the topology shows %d GPUs but NVML %d", found, facts->nvml->ngpus);
        conclude(&n, "%d GPUs (topology and NVML agree)", found);
        return;
    }
    char missing[256];
    missing_gpus(facts->topo, missing, sizeof(missing));
    if (found != expected)
        note(&n, "%d GPUs in the topology, %d expected%s%s%s", found, expected, missing[0] ? " (missing " : "",
             missing, missing[0] ? ")" : "");
    if (nvml_ok(facts) && facts->nvml->ngpus != expected)
        note(&n, "NVML sees %d GPUs, %d expected", facts->nvml->ngpus, expected);
    conclude(&n, "%d GPUs as expected", found);
}

static void check_gpu_model(const struct health_config *cfg, enum health_mode mode,
                            const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    if (!cfg->gpu_model[0]) {
        set_result(r, HEALTH_SKIP, "gpus.model not set");
        return;
    }
    /* NVML's name is the driver's word; the topology's is the fallback. */
    int ngpus = topology_ok(facts) ? facts->topo->node.ngpus : nvml_ok(facts) ? facts->nvml->ngpus : -1;
    if (ngpus < 0) {
        topology_unavailable(cfg, mode, facts, r);
        return;
    }
    for (int i = 0; i < ngpus; i++) {
        const char *busid, *model;
        if (topology_ok(facts)) {
            const struct health_topo_gpu *g = &facts->topo->node.gpus[i];
            const struct health_nvml_gpu *ng = nvml_ok(facts) ? nvml_find(facts->nvml, g->busid) : NULL;
            busid = g->busid;
            model = ng && ng->name[0] ? ng->name : g->model;
        } else {
            busid = facts->nvml->gpus[i].busid;
            model = facts->nvml->gpus[i].name;
        }
        if (!model[0])
            note(&n, "GPU %s: model unknown", busid);
        else if (!strcasestr(model, cfg->gpu_model))
            note(&n, "GPU %s is '%s', not '%s'", busid, model, cfg->gpu_model);
    }
    conclude(&n, "%d GPUs are '%s'", ngpus, cfg->gpu_model);
}

/* A GPU pair of the node whose link is below what is expected. */
struct weak_link {
    int a, b;           /* node GPU indices */
    float have, want;   /* GB/s */
};

/* Add or tighten the pair (a, b) in the list (at most HEALTH_MAX_GPUS^2/2). */
static void add_weak_link(struct weak_link *list, int *n, int a, int b, float have, float want)
{
    for (int i = 0; i < *n; i++)
        if (list[i].a == a && list[i].b == b) {
            if (want > list[i].want)
                list[i].want = want;
            return;
        }
    list[(*n)++] = (struct weak_link){a, b, have, want};
}

/* Say the weak links briefly: a GPU on several of them (the usual case:
 * one GPU lost links) is one note, "GPU X: NVLink to 7 GPUs degraded
 * (400 GB/s, 450 expected)"; the rest are pairs. */
static void note_weak_links(struct notes *n, const struct health_topo_model *m, struct weak_link *list, int nweak)
{
    unsigned char done[HEALTH_MAX_GPUS * HEALTH_MAX_GPUS / 2];
    int left = nweak;
    memset(done, 0, (size_t)nweak);
    while (left > 0) {
        int per_gpu[HEALTH_MAX_GPUS] = {0}, g = 0;
        for (int i = 0; i < nweak; i++)
            if (!done[i]) {
                per_gpu[list[i].a]++;
                per_gpu[list[i].b]++;
            }
        for (int k = 1; k < m->ngpus; k++)
            if (per_gpu[k] > per_gpu[g])
                g = k;
        float lo = 1e30f, hi = 0, want = 0;
        int first = -1;
        for (int i = 0; i < nweak; i++)
            if (!done[i] && (list[i].a == g || list[i].b == g)) {
                lo = list[i].have < lo ? list[i].have : lo;
                hi = list[i].have > hi ? list[i].have : hi;
                want = list[i].want > want ? list[i].want : want;
                first = first < 0 ? i : first;
                done[i] = 1;
                left--;
            }
        const char *state = hi <= 0 ? "down" : lo <= 0 ? "down or degraded" : "degraded";
        char found[48];
        if (lo == hi)
            snprintf(found, sizeof(found), "%.0f GB/s", lo);
        else
            snprintf(found, sizeof(found), "%.0f to %.0f GB/s", lo, hi);
        if (per_gpu[g] == 1)
            note(n, "NVLink %s <-> %s %s (%s, %.0f expected)", m->gpus[list[first].a].busid,
                 m->gpus[list[first].b].busid, state, found, want);
        else
            note(n, "GPU %s: NVLink to %d GPUs %s (%s, %.0f expected)", m->gpus[g].busid, per_gpu[g], state,
                 found, want);
    }
}

static void check_nvlink(const struct health_config *cfg, enum health_mode mode,
                         const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    struct weak_link weak[HEALTH_MAX_GPUS * HEALTH_MAX_GPUS / 2]; /* 32 KiB */
    int nweak = 0;
    int topo_part = nvlink_needs_topology(cfg);
    if (!topo_part && cfg->nvlink.min_active_links <= 0) {
        set_result(r, HEALTH_SKIP, "no NVLink expectations in the config");
        return;
    }
    if (topo_part && !topology_ok(facts)) {
        topology_unavailable(cfg, mode, facts, r);
        return;
    }
    const struct health_topo_facts *topo = facts->topo;
    const struct health_topo_model *node = &topo->node;
    if (cfg->nvlink.min_bandwidth_gbps > 0) {
        for (int a = 0; a < node->ngpus; a++)
            for (int b = a + 1; b < node->ngpus; b++)
                if (node->bandwidth_gbps[a][b] < cfg->nvlink.min_bandwidth_gbps)
                    add_weak_link(weak, &nweak, a, b, node->bandwidth_gbps[a][b],
                                  (float)cfg->nvlink.min_bandwidth_gbps);
    }
    if (cfg->nvlink.reference[0]) {
        const struct health_topo_model *ref = &topo->reference;
        if (!topo->have_reference || !ref->ok) {
            note(&n, "%s", topo->have_reference ? ref->error : "the reference topology was not read");
        } else {
            double keep = 1.0 - cfg->nvlink.tolerance_percent / 100.0;
            for (int a = 0; a < ref->ngpus; a++) {
                int na = topo_find(node, ref->gpus[a].busid);
                if (na < 0) {
                    note(&n, "GPU %s of the reference is missing", ref->gpus[a].busid);
                    continue;
                }
                for (int b = a + 1; b < ref->ngpus; b++) {
                    int nb = topo_find(node, ref->gpus[b].busid);
                    float want = ref->bandwidth_gbps[a][b];
                    if (nb < 0 || want <= 0)
                        continue;
                    float have = node->bandwidth_gbps[na][nb];
                    if (have < want * keep - 1e-6)
                        add_weak_link(weak, &nweak, na < nb ? na : nb, na < nb ? nb : na, have, want);
                }
            }
        }
    }
    note_weak_links(&n, node, weak, nweak);
    if (cfg->nvlink.min_largest_island > 0 && node->largest_island < cfg->nvlink.min_largest_island)
        note(&n, "the largest NVLink island has %d GPUs, %d expected", node->largest_island,
             cfg->nvlink.min_largest_island);
    const char *links_note = "";
    if (cfg->nvlink.min_active_links > 0) {
        if (!nvml_ok(facts)) {
            links_note = " (active links not checked: NVML unavailable)";
            if (!topo_part) {
                set_result(r, HEALTH_SKIP, "NVML unavailable (see the nvml check)");
                return;
            }
        } else {
            for (int g = 0; g < facts->nvml->ngpus; g++) {
                const struct health_nvml_gpu *gpu = &facts->nvml->gpus[g];
                int active = 0;
                for (int l = 0; l < gpu->nlinks; l++)
                    active += gpu->link_active[l];
                if (active < cfg->nvlink.min_active_links)
                    note(&n, "GPU %s has %d NVLinks active, %d expected", gpu->busid, active,
                         cfg->nvlink.min_active_links);
            }
        }
    }
    conclude(&n, "NVLink as expected%s", links_note);
}

static void check_nvml(const struct health_config *cfg, enum health_mode mode,
                       const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    const struct health_nvml_facts *nv = facts->nvml;
    (void)mode;
    int expected = health_expected_gpus(cfg, facts);
    if (!nv) {
        set_result(r, HEALTH_SKIP, "NVML not queried");
        return;
    }
    if (!nv->ok) {
        if (nv->probe_failed)
            set_result(r, HEALTH_FAIL, "%s", nv->error);
        else if (expected > 0)
            set_result(r, HEALTH_FAIL, "the node should have %d GPUs but NVML is unusable: %s", expected, nv->error);
        else
            set_result(r, HEALTH_SKIP, "no GPUs expected and no NVML (%s)", nv->error);
        return;
    }
    for (int g = 0; g < nv->ngpus; g++) {
        const struct health_nvml_gpu *gpu = &nv->gpus[g];
        if (gpu->lost)
            note(&n, "GPU %s has fallen off the bus (NVML: GPU is lost)", gpu->busid);
        else if (gpu->error[0])
            note(&n, "GPU %s: %s", gpu->busid, gpu->error);
    }
    conclude(&n, "NVML answers for %d GPUs", nv->ngpus);
}

static void check_ecc(const struct health_config *cfg, enum health_mode mode,
                      const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    int known = 0;
    const char *counter = cfg->ecc.aggregate ? "aggregate" : "volatile";
    (void)mode;
    if (!need_nvml(facts, r))
        return;
    for (int g = 0; g < facts->nvml->ngpus; g++) {
        const struct health_nvml_gpu *gpu = &facts->nvml->gpus[g];
        if (!gpu->ecc_known)
            continue;
        known++;
        if (cfg->ecc.max_uncorrected != HEALTH_NO_LIMIT && gpu->ecc_uncorrected > (unsigned long long)cfg->ecc.max_uncorrected)
            note(&n, "GPU %s: %llu uncorrected ECC errors (%s; at most %lld allowed)", gpu->busid,
                 gpu->ecc_uncorrected, counter, cfg->ecc.max_uncorrected);
        if (cfg->ecc.max_corrected != HEALTH_NO_LIMIT && gpu->ecc_corrected > (unsigned long long)cfg->ecc.max_corrected)
            note(&n, "GPU %s: %llu corrected ECC errors (%s; at most %lld allowed)", gpu->busid,
                 gpu->ecc_corrected, counter, cfg->ecc.max_corrected);
    }
    if (!known && !n.count) {
        set_result(r, HEALTH_SKIP, "ECC is off or not supported on every GPU");
        return;
    }
    conclude(&n, "ECC counts within limits on %d GPUs", known);
}

static void check_retired_memory(const struct health_config *cfg, enum health_mode mode,
                                 const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    int known = 0;
    (void)mode;
    if (!need_nvml(facts, r))
        return;
    for (int g = 0; g < facts->nvml->ngpus; g++) {
        const struct health_nvml_gpu *gpu = &facts->nvml->gpus[g];
        if (gpu->remap_known) {
            known++;
            if (gpu->remap_failed)
                note(&n, "GPU %s: a row remapping failed (the GPU needs service)", gpu->busid);
            if (gpu->remap_pending)
                note(&n, "GPU %s: row remapping pending (reset the GPU)", gpu->busid);
            if (cfg->retired.max_uncorrected_rows != HEALTH_NO_LIMIT &&
                gpu->remap_uncorrected > (unsigned long long)cfg->retired.max_uncorrected_rows)
                note(&n, "GPU %s: %u rows remapped after uncorrected errors (at most %lld)", gpu->busid,
                     gpu->remap_uncorrected, cfg->retired.max_uncorrected_rows);
        } else if (gpu->retired_known) {
            known++;
            unsigned long long pages = (unsigned long long)gpu->retired_sbe + gpu->retired_dbe;
            if (gpu->retired_pending)
                note(&n, "GPU %s: pages pending retirement (reset the GPU)", gpu->busid);
            if (cfg->retired.max_retired_pages != HEALTH_NO_LIMIT &&
                pages > (unsigned long long)cfg->retired.max_retired_pages)
                note(&n, "GPU %s: %llu retired pages (at most %lld)", gpu->busid, pages,
                     cfg->retired.max_retired_pages);
        }
    }
    if (!known) {
        set_result(r, HEALTH_SKIP, "neither row remapping nor page retirement is reported by any GPU");
        return;
    }
    conclude(&n, "no pending or failed memory retirement on %d GPUs", known);
}

static int xid_ignored(const struct health_config *cfg, unsigned long long xid)
{
    for (int i = 0; i < cfg->xid.nignore; i++)
        if (cfg->xid.ignore[i] == xid)
            return 1;
    return 0;
}

static void check_xid(const struct health_config *cfg, enum health_mode mode,
                      const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    int known = 0, ignored = 0;
    (void)mode;
    if (!need_nvml(facts, r))
        return;
    for (int g = 0; g < facts->nvml->ngpus; g++) {
        const struct health_nvml_gpu *gpu = &facts->nvml->gpus[g];
        known += gpu->xid_known;
        for (unsigned i = 0; i < gpu->nxids && i < HEALTH_MAX_XIDS; i++) {
            if (xid_ignored(cfg, gpu->xids[i]))
                ignored++;
            else
                note(&n, "GPU %s: XID %llu", gpu->busid, gpu->xids[i]);
        }
        if (gpu->nxids > HEALTH_MAX_XIDS)
            note(&n, "GPU %s: %u XID events in all", gpu->busid, gpu->nxids);
    }
    if (!known) {
        set_result(r, HEALTH_SKIP, "no GPU reports XID events");
        return;
    }
    conclude(&n, "no XID events (listened %d ms%s)", cfg->xid.wait_ms, ignored ? ", ignored some listed in xid.ignore" : "");
}

static void check_nvlink_errors(const struct health_config *cfg, enum health_mode mode,
                                const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    int links = 0;
    (void)mode;
    if (!need_nvml(facts, r))
        return;
    for (int g = 0; g < facts->nvml->ngpus; g++) {
        const struct health_nvml_gpu *gpu = &facts->nvml->gpus[g];
        if (!gpu->link_errors_known)
            continue;
        for (int l = 0; l < gpu->nlinks; l++) {
            const struct { const char *what; unsigned long long count; long long max; } counters[] = {
                {"replay", gpu->link_replay[l], cfg->nvlink_errors.max_replay},
                {"recovery", gpu->link_recovery[l], cfg->nvlink_errors.max_recovery},
                {"CRC", gpu->link_crc[l], cfg->nvlink_errors.max_crc},
            };
            links++;
            for (size_t k = 0; k < sizeof(counters) / sizeof(counters[0]); k++)
                if (counters[k].max != HEALTH_NO_LIMIT && counters[k].count > (unsigned long long)counters[k].max)
                    note(&n, "GPU %s NVLink %d: %llu %s errors (at most %lld)", gpu->busid, l, counters[k].count,
                         counters[k].what, counters[k].max);
        }
    }
    if (!links) {
        set_result(r, HEALTH_SKIP, "no NVLink error counters (no NVLink, or not supported)");
        return;
    }
    conclude(&n, "NVLink error counters within limits on %d links", links);
}

static void check_gpu_memory(const struct health_config *cfg, enum health_mode mode,
                             const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    int known = 0;
    char used[32], limit[32];
    (void)mode;
    if (!need_nvml(facts, r))
        return;
    for (int g = 0; g < facts->nvml->ngpus; g++) {
        const struct health_nvml_gpu *gpu = &facts->nvml->gpus[g];
        if (!gpu->memory_known)
            continue;
        known++;
        if (gpu->memory_used > (unsigned long long)cfg->gpu_memory_max_used)
            note(&n, "GPU %s: %s of memory in use (at most %s)", gpu->busid,
                 format_bytes(gpu->memory_used, used, sizeof(used)),
                 format_bytes((unsigned long long)cfg->gpu_memory_max_used, limit, sizeof(limit)));
    }
    if (!known) {
        set_result(r, HEALTH_SKIP, "no GPU reports its memory use");
        return;
    }
    conclude(&n, "GPU memory in use below %s on %d GPUs",
             format_bytes((unsigned long long)cfg->gpu_memory_max_used, limit, sizeof(limit)), known);
}

static void check_gpu_processes(const struct health_config *cfg, enum health_mode mode,
                                const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    int known = 0;
    (void)cfg;
    (void)mode;
    if (!need_nvml(facts, r))
        return;
    for (int g = 0; g < facts->nvml->ngpus; g++) {
        const struct health_nvml_gpu *gpu = &facts->nvml->gpus[g];
        if (!gpu->procs_known)
            continue;
        known++;
        if (gpu->nprocs == 0)
            continue;
        char list[200] = "";
        size_t used = 0;
        for (unsigned i = 0; i < gpu->nprocs && i < HEALTH_MAX_PROCS; i++) {
            const struct health_gpu_process *p = &gpu->procs[i];
            int w = snprintf(list + used, sizeof(list) - used, "%s%u%s%s%s", used ? ", " : "", p->pid,
                             p->name[0] ? " (" : "", p->name, p->name[0] ? ")" : "");
            if (w < 0 || (size_t)w >= sizeof(list) - used)
                break;
            used += (size_t)w;
        }
        note(&n, "GPU %s still runs %u process%s after the job%s%s", gpu->busid, gpu->nprocs,
             gpu->nprocs == 1 ? "" : "es", list[0] ? ": pid " : "", list);
    }
    if (!known) {
        set_result(r, HEALTH_SKIP, "no GPU reports its processes");
        return;
    }
    conclude(&n, "no processes on %d GPUs", known);
}

static void judge_fs(const char *what, const struct health_fs_spec *spec, const struct health_fs_facts *fs,
                     struct health_result *r)
{
    char have[32], want[32];
    if (!spec->path[0]) {
        set_result(r, HEALTH_SKIP, "no %s path in the config", what);
        return;
    }
    if (!fs) {
        set_result(r, HEALTH_SKIP, "%s not probed", spec->path);
        return;
    }
    if (!fs->ok) {
        set_result(r, HEALTH_FAIL, "%s: %s", what, fs->error);
        return;
    }
    format_bytes(fs->free_bytes, have, sizeof(have));
    format_bytes((unsigned long long)spec->min_free_bytes, want, sizeof(want));
    if (fs->free_bytes < (unsigned long long)spec->min_free_bytes)
        set_result(r, HEALTH_FAIL, "only %s free on %s (%s %s needed)", have, spec->path, want, what);
    else
        set_result(r, HEALTH_PASS, "%s free on %s", have, spec->path);
}

static void check_checkpoint_fs(const struct health_config *cfg, enum health_mode mode,
                                const struct health_facts *facts, struct health_result *r)
{
    (void)mode;
    judge_fs("checkpoint", &cfg->checkpoint_fs, facts->checkpoint_fs, r);
}

static void check_shm(const struct health_config *cfg, enum health_mode mode,
                      const struct health_facts *facts, struct health_result *r)
{
    (void)mode;
    judge_fs("shm", &cfg->shm, facts->shm, r);
}

static void check_infiniband(const struct health_config *cfg, enum health_mode mode,
                             const struct health_facts *facts, struct health_result *r)
{
    struct notes n = {.r = r};
    const struct health_ib_facts *ib = facts->ib;
    (void)mode;
    if (!ib) {
        set_result(r, HEALTH_SKIP, "InfiniBand not probed");
        return;
    }
    if (!ib->ok) {
        set_result(r, HEALTH_FAIL, "%s", ib->error);
        return;
    }
    if (ib->nports == 0) {
        set_result(r, HEALTH_SKIP, "no InfiniBand ports under %s/class/infiniband", cfg->sysfs_root);
        return;
    }
    for (int i = 0; i < ib->nports; i++) {
        const struct health_ib_port_facts *p = &ib->ports[i];
        if (!p->present)
            note(&n, "%s port %u not found under %s/class/infiniband", p->device, p->port, cfg->sysfs_root);
        else if (strcmp(p->state, "ACTIVE") != 0)
            note(&n, "%s port %u is %s (physical state %s)", p->device, p->port, p->state[0] ? p->state : "unknown",
                 p->phys_state[0] ? p->phys_state : "unknown");
        else if (cfg->infiniband.min_rate_gbps > 0 && p->rate_gbps < cfg->infiniband.min_rate_gbps)
            note(&n, "%s port %u runs at %.0f Gb/s, %.0f expected", p->device, p->port, p->rate_gbps,
                 cfg->infiniband.min_rate_gbps);
    }
    conclude(&n, "%d InfiniBand port%s ACTIVE", ib->nports, ib->nports == 1 ? "" : "s");
}

/* The node is on a multi-node NVLink fabric: NVML reports one for a GPU. */
int health_imex_node_in_domain(const struct health_facts *facts)
{
    if (!nvml_ok(facts))
        return 0;
    for (int g = 0; g < facts->nvml->ngpus; g++)
        if (facts->nvml->gpus[g].fabric)
            return 1;
    return 0;
}

static void check_imex(const struct health_config *cfg, enum health_mode mode, const struct health_facts *facts,
                       struct health_result *r)
{
    const struct health_imex_facts *imex = facts->imex;
    (void)mode;
    if (!cfg->imex.always && !nvml_ok(facts)) {
        set_result(r, HEALTH_SKIP, "NVML cannot say whether the node is in a multi-node NVLink domain");
        return;
    }
    if (!cfg->imex.always && !health_imex_node_in_domain(facts)) {
        set_result(r, HEALTH_SKIP, "no GPU reports a multi-node NVLink fabric (NVML): no IMEX daemon needed");
        return;
    }
    if (!imex) {
        set_result(r, HEALTH_SKIP, "IMEX not probed");
        return;
    }
    if (!imex->ok) {
        set_result(r, HEALTH_FAIL, "IMEX daemon state unknown: %s", imex->error);
        return;
    }
    if (imex->exit_status == 0 && strcmp(imex->output, "READY") == 0) {
        set_result(r, HEALTH_PASS, "IMEX daemon READY (nvidia-imex-ctl -q)");
        return;
    }
    if (imex->exit_status == 0 && health_imex_known_state(imex->output)) {
        set_result(r, HEALTH_FAIL, "IMEX daemon %s, not READY (nvidia-imex-ctl -q): the domain's other nodes or the "
                   "GPUs are not ready; see journalctl -u nvidia-imex", imex->output);
        return;
    }
    set_result(r, HEALTH_FAIL, "IMEX daemon not answering (nvidia-imex-ctl -q exit %d: %.120s): start it (systemctl "
               "start nvidia-imex) with IMEX_CMD_ENABLED=1 in /etc/nvidia-imex/config.cfg",
               imex->exit_status, imex->output[0] ? imex->output : "no output");
}

typedef void (*check_fn)(const struct health_config *, enum health_mode, const struct health_facts *,
                         struct health_result *);
static const check_fn check_table[HEALTH_CHECK_COUNT] = {
    [HEALTH_CHECK_GPU_COUNT] = check_gpu_count,
    [HEALTH_CHECK_GPU_MODEL] = check_gpu_model,
    [HEALTH_CHECK_NVLINK] = check_nvlink,
    [HEALTH_CHECK_NVML] = check_nvml,
    [HEALTH_CHECK_ECC] = check_ecc,
    [HEALTH_CHECK_RETIRED_MEMORY] = check_retired_memory,
    [HEALTH_CHECK_XID] = check_xid,
    [HEALTH_CHECK_NVLINK_ERRORS] = check_nvlink_errors,
    [HEALTH_CHECK_GPU_MEMORY] = check_gpu_memory,
    [HEALTH_CHECK_GPU_PROCESSES] = check_gpu_processes,
    [HEALTH_CHECK_CHECKPOINT_FS] = check_checkpoint_fs,
    [HEALTH_CHECK_SHM] = check_shm,
    [HEALTH_CHECK_INFINIBAND] = check_infiniband,
    [HEALTH_CHECK_IMEX] = check_imex,
};

void health_check_judge(enum health_check_id id, const struct health_config *cfg, enum health_mode mode,
                        const struct health_facts *facts, struct health_result *out)
{
    memset(out, 0, sizeof(*out));
    out->id = id;
    if (id < 0 || id >= HEALTH_CHECK_COUNT) {
        set_result(out, HEALTH_FAIL, "internal error: no check number %d", (int)id);
        return;
    }
    check_table[id](cfg, mode, facts, out);
}
