/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Malformed input: truncated, corrupted or hostile topology files give
 * DTRAIN_ERR_INPUT (or a valid model) with one line of text, never a
 * crash, a hang or a leak (run-suite repeats this under ASan/UBSan). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlfcn.h>
#include <hwloc.h>
#include <libxml/globals.h>

#include "dtrain_bounded.h"
#include "fixtures.h"
#include "tap.h"

static char tmpdir[] = "/tmp/dtrain-topo-malformed.XXXXXX";

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    char chunk[8192];
    while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (n + r + 1 > cap) {
            cap = (n + r + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        memcpy(buf + n, chunk, r);
        n += r;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

static const char *write_tmp(const char *name, const char *data, size_t len)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    if (fwrite(data, 1, len, f) != len) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    return path;
}

/* Returns 1 when loading gave OK with a sane model, or INPUT with a one-line
 * message; 0 otherwise. */
static int loads_or_refuses(const char *path, int *refused)
{
    dtrain_topo *t = NULL;
    char err[512] = "";
    int rc = dtrain_topo_load_xml(path, &t, err, sizeof(err));
    *refused = rc != DTRAIN_OK;
    if (rc == DTRAIN_OK) {
        int n = dtrain_topo_gpu_count(t);
        int sane = t && n >= 0 && n <= DTRAIN_TOPO_MAX_GPUS && dtrain_topo_largest_island(t) <= n;
        dtrain_topo_free(t);
        return sane;
    }
    return rc == DTRAIN_ERR_INPUT && t == NULL && err[0] && !strchr(err, '\n');
}

/* xorshift: a seeded, portable stream of corruption positions. */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const char *const files[] = {"power8gpudistances.xml", "g4dnmetal.xml", "dgx1-v100.xml", "dgx-h100.xml",
                                    "amd-mi250x.xml", "pcie-a100-bridged-pairs.xml"};

static void truncations(const char *name)
{
    size_t len;
    char *data = read_all(fixture_path(name), &len);
    if (!ok(data != NULL, "%s: read", name))
        return;
    int all_refused = 1, all_clean = 1;
    for (int k = 1; k <= 16; k++) {
        size_t cut = len * (size_t)k / 17;
        const char *p = write_tmp("trunc.xml", data, cut);
        int refused;
        if (!p || !loads_or_refuses(p, &refused))
            all_clean = 0;
        else if (!refused)
            all_refused = 0;
    }
    ok(all_clean && all_refused, "%s: 16 truncations all refused with one line", name);
    free(data);
}

static void corruptions(const char *name, uint64_t seed)
{
    size_t len;
    char *data = read_all(fixture_path(name), &len);
    if (!data || len == 0) {
        ok(0, "%s: read", name);
        free(data);
        return;
    }
    static const char junk[] = "<>\"&0x9-,: \n\0zQ";
    int clean = 1, nrefused = 0;
    for (int round = 0; round < 24; round++) {
        char *copy = malloc(len);
        if (!copy)
            break;
        memcpy(copy, data, len);
        for (int k = 0; k < 1 + round % 6; k++)
            copy[next_rand(&seed) % len] = junk[next_rand(&seed) % (sizeof(junk) - 1)];
        const char *p = write_tmp("corrupt.xml", copy, len);
        int refused;
        if (!p || !loads_or_refuses(p, &refused))
            clean = 0;
        nrefused += refused;
        free(copy);
    }
    ok(clean, "%s: 24 randomly corrupted copies load or are refused cleanly (%d refused)", name, nrefused);
    free(data);
}

/* Hand-written hostile cases around the distances matrix. */
static void hostile(void)
{
    size_t len;
    char *data = read_all(fixture_path("power8gpudistances.xml"), &len);
    if (!ok(data != NULL, "power8: read"))
        return;
    struct { const char *what, *from, *to; } edits[] = {
        {"matrix naming an unknown object", "OSDev:332 ", "OSDev:999 "},
        {"matrix with too few values", "<u64values length=\"26\">0 0 40000 40000 0 1000000 </u64values>", ""},
        {"absurd bandwidth value", "1000000 40000 0 0 40000 0", "1000000 99999999999999999999 0 0 40000 0"},
        {"negative-looking value", "1000000 40000 0 0 40000 0", "1000000 -40000 0 0 40000 0"},
        {"nbobjs larger than the indexes", "nbobjs=\"6\" kind=\"25\"", "nbobjs=\"60\" kind=\"25\""},
        {"nbobjs of zero", "nbobjs=\"6\" kind=\"25\"", "nbobjs=\"0\" kind=\"25\""},
        {"unknown object type in the matrix", "Package:3 ", "Bogus:3 "},
        {"bad cpuset text", "cpuset=\"0x03030303\"", "cpuset=\"0xzz\""},
        /* tests/fuzz found it: hwloc_bitmap_sscanf asserts on a leading comma */
        {"nodeset with a leading comma", "nodeset=\"0x00000003\"", "nodeset=\",0x00000003\""},
        {"cpuset word longer than 8 digits", "cpuset=\"0x03030303\"", "cpuset=\"0x0303030303\""},
        {"PCI device with a broken pci_type", "pci_type=\"0302 [10de:15f9] [10de:116b] a1\"", "pci_type=\"03\""},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char *at = strstr(data, edits[i].from);
        if (!at) {
            ok(0, "hostile edit '%s' applies", edits[i].what);
            continue;
        }
        size_t flen = strlen(edits[i].from), tlen = strlen(edits[i].to);
        size_t nlen = len - flen + tlen;
        char *copy = malloc(nlen);
        if (!copy)
            continue;
        size_t head = (size_t)(at - data);
        memcpy(copy, data, head);
        memcpy(copy + head, edits[i].to, tlen);
        memcpy(copy + head + tlen, at + flen, len - head - flen);
        const char *p = write_tmp("hostile.xml", copy, nlen);
        int refused = 0;
        int clean = p && loads_or_refuses(p, &refused);
        ok(clean, "%s: %s cleanly", edits[i].what, refused ? "refused" : "loaded");
        free(copy);
    }
    free(data);
}

/* Replace the first `from` in text by `to` (fresh string). */
static char *edit(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at)
        return NULL;
    size_t head = (size_t)(at - text), flen = strlen(from), tlen = strlen(to), len = strlen(text);
    char *out = malloc(len - flen + tlen + 1);
    if (!out)
        return NULL;
    memcpy(out, text, head);
    memcpy(out + head, to, tlen);
    memcpy(out + head + tlen, at + flen, len - head - flen + 1);
    return out;
}

struct raw_arg {
    const char *buf;
    size_t len;
};

/* hwloc alone, without the pre-check: what the bounded loader guards. */
static void raw_hwloc(const void *argp, void *out, struct dtrain_stage *stage)
{
    const struct raw_arg *a = argp;
    hwloc_topology_t t;
    dtrain_stage_set(stage, "hwloc_topology_load");
    if (hwloc_topology_init(&t) < 0)
        return;
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_set_xmlbuffer(t, a->buf, (int)a->len) == 0)
        *(int *)out = hwloc_topology_load(t) == 0 ? 1 : 2;
    hwloc_topology_destroy(t);
}

/* Legal XML that the old tag scanner let through to hwloc's crash
 * (issue 16): the XML parser refuses every one with one line. */
static void precheck_bypasses(void)
{
    size_t len;
    char *data = read_all(fixture_path("power8gpudistances.xml"), &len);
    if (!ok(data != NULL, "power8: read"))
        return;
    char *base = edit(data, " complete_cpuset=\"0x00000303,0x03030000,,0x03030303\"", "");
    struct { const char *what, *from, *to; } cases[] = {
        {"no complete_cpuset", "", ""},
        {"spaces around '='", " cpuset=", " cpuset = "},
        {"a newline before the attribute", " cpuset=", "\n cpuset="},
        {"'>' inside an earlier quoted value", " os_index=\"0\"", " os_index=\"0\" name=\"a>b\""},
        {"single quotes", " cpuset=\"0x00000303,0x03030000,,0x03030303\"", " cpuset='0x00000303,0x03030000,,0x03030303'"},
    };
    for (size_t i = 0; base && i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *text = cases[i].from[0] ? edit(base, cases[i].from, cases[i].to) : strdup(base);
        if (!ok(text != NULL, "bypass '%s' applies", cases[i].what))
            continue;
        const char *p = write_tmp("bypass.xml", text, strlen(text));
        dtrain_topo *t = NULL;
        char err[512] = "";
        int rc = p ? dtrain_topo_load_xml(p, &t, err, sizeof err) : -99;
        ok(rc == DTRAIN_ERR_INPUT && strstr(err, "cpuset/nodeset without its complete_") && !strchr(err, '\n'),
           "pre-check bypass '%s': refused (%s)", cases[i].what, err);
        rc = p ? dtrain_topo_load_bounded(p, 0, 20000, &t, err, sizeof err) : -99;
        ok(rc == DTRAIN_ERR_INPUT && strstr(err, "cpuset/nodeset"), "... and by the bounded loader (%s)", err);
        if (i == 1) {
            /* Without the pre-check hwloc 2.9 crashes on it: in a bounded
             * child that is one line, not a crash of the caller. */
            struct raw_arg a = {text, strlen(text)};
            int out = 0;
            char why[DTRAIN_WHY_LEN] = "";
            enum dtrain_bounded_status st = dtrain_run_bounded(raw_hwloc, &a, &out, sizeof out, 20000, why,
                                                               sizeof why);
            /* (under ASan the crash is its report and exit status 1) */
            ok(st == DTRAIN_BOUNDED_OK ||
                   (st == DTRAIN_BOUNDED_FAILED && (strstr(why, "signal") || strstr(why, "exited with status"))),
               "hwloc alone on it, in a bounded child: %s", st == DTRAIN_BOUNDED_OK ? "no crash" : why);
        }
        dtrain_topo_free(t);
        free(text);
    }
    /* The other way: an <object> in a comment is not an object. */
    char *commented = edit(data, "<topology version=\"2.0\">",
                           "<topology version=\"2.0\"><!-- <object type=\"Machine\" cpuset=\"0x1\"> -->");
    const char *p = commented ? write_tmp("bypass.xml", commented, strlen(commented)) : NULL;
    dtrain_topo *t = NULL;
    char err[512] = "";
    int rc = p ? dtrain_topo_load_xml(p, &t, err, sizeof err) : -99;
    ok((rc == DTRAIN_OK || rc == DTRAIN_ERR_INPUT) && !strstr(err, "cpuset/nodeset"),
       "an <object> inside a comment is not taken for one by the pre-check (%s)", rc ? err : "loaded");
    dtrain_topo_free(t);
    free(commented);
    free(base);
    free(data);
}

/* Special files where a topology file is expected: refused at once. */
static void special_files(void)
{
    char fifo[600], err[512] = "";
    dtrain_topo *t = NULL;
    snprintf(fifo, sizeof fifo, "%s/fifo.xml", tmpdir);
    if (!ok(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno)))
        return;
    ok(dtrain_topo_load_xml(fifo, &t, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "a FIFO"),
       "a FIFO as topology file: refused without waiting (%s)", err);
    ok(dtrain_topo_load_bounded(fifo, 0, 20000, &t, err, sizeof err) == DTRAIN_ERR_INPUT &&
           strstr(err, "a FIFO"), "... by the bounded loader too (%s)", err);
    ok(dtrain_topo_load_bounded(fifo, 1, 20000, &t, err, sizeof err) == DTRAIN_ERR_INPUT &&
           strstr(err, "a FIFO"), "... and its trusted open (%s)", err);
    setenv("HWLOC_XMLFILE", fifo, 1);
    ok(dtrain_topo_load_live(&t, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "a FIFO"),
       "HWLOC_XMLFILE naming a FIFO: refused without waiting (%s)", err);
    unsetenv("HWLOC_XMLFILE");
    ok(dtrain_topo_load_xml("/dev/null", &t, err, sizeof err) == DTRAIN_ERR_INPUT &&
           strstr(err, "a character device"), "a device: refused (%s)", err);
    ok(dtrain_topo_load_xml(tmpdir, &t, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "is a directory"),
       "a directory: 'is a directory' (%s)", err);
    char link[600];
    snprintf(link, sizeof link, "%s/link.xml", tmpdir);
    if (symlink(fixture_path("g4dnmetal.xml"), link) == 0) {
        ok(dtrain_topo_load_bounded(link, 1, 20000, &t, err, sizeof err) == DTRAIN_ERR_INPUT &&
               strstr(err, "symbolic link"), "a trusted topology file may not be a link (%s)", err);
        unlink(link);
    }
    unlink(fifo);
}

/* The bounded loader gives the same model as a load in this process. */
static void bounded_same_model(void)
{
    dtrain_topo *a = NULL, *b = NULL;
    char err[512] = "";
    int ra = dtrain_topo_load_xml(fixture_path("dgx-h100.xml"), &a, err, sizeof err);
    int rb = dtrain_topo_load_bounded(fixture_path("dgx-h100.xml"), 0, 20000, &b, err, sizeof err);
    int same = ra == DTRAIN_OK && rb == DTRAIN_OK && dtrain_topo_gpu_count(a) == dtrain_topo_gpu_count(b) &&
               strcmp(dtrain_topo_summary(a), dtrain_topo_summary(b)) == 0 &&
               dtrain_topo_largest_island(a) == dtrain_topo_largest_island(b);
    for (int i = 0; same && i < dtrain_topo_gpu_count(a); i++)
        same = strcmp(dtrain_topo_gpu(a, i)->busid, dtrain_topo_gpu(b, i)->busid) == 0 &&
               strcmp(dtrain_topo_gpu(a, i)->cpulist, dtrain_topo_gpu(b, i)->cpulist) == 0 &&
               dtrain_topo_bandwidth(a, 0, i) == dtrain_topo_bandwidth(b, 0, i);
    ok(same, "the bounded loader returns the same model (%s)", rb == DTRAIN_OK ? dtrain_topo_summary(b) : err);
    dtrain_topo_free(a);
    dtrain_topo_free(b);
}

/* hwloc sizes bitmaps by the largest index: a PU without os_index (hwloc
 * takes 2^32-1) or with a huge one cost 512 MB and seconds per load, and
 * a bitmap of many commas a word each (found by tests/fuzz): refused by
 * the pre-check, with the line. */
static void resource_bounds(void)
{
    size_t len;
    char *data = read_all(fixture_path("power8gpudistances.xml"), &len);
    if (!ok(data != NULL, "power8: read"))
        return;
    char *commas = malloc(200000);
    if (commas == NULL) {
        free(data);
        return;
    }
    strcpy(commas, "cpuset=\"0x00000001");
    size_t at = strlen(commas);
    for (int i = 0; i < 40000; i++)
        commas[at++] = ',';
    strcpy(commas + at, "\"");
    struct { const char *what, *from, *to, *why; } cases[] = {
        {"a PU without os_index", "<object type=\"PU\" os_index=\"0\"", "<object type=\"PU\"", "os_index"},
        {"a PU with os_index 4000000000", "<object type=\"PU\" os_index=\"0\"",
         "<object type=\"PU\" os_index=\"4000000000\"", "os_index"},
        {"a NUMANode without os_index", "<object type=\"NUMANode\" os_index=\"0\"", "<object type=\"NUMANode\"",
         "os_index"},
        {"an os_index that is not a number", "<object type=\"PU\" os_index=\"0\"",
         "<object type=\"PU\" os_index=\"0x10\"", "os_index"},
        {"a cpuset of 40000 words", "cpuset=\"0x03030303\"", commas, "not an hwloc bitmap"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *copy = edit(data, cases[i].from, cases[i].to), err[512] = "";
        const char *p = copy ? write_tmp("hostile.xml", copy, strlen(copy)) : NULL;
        dtrain_topo *t = NULL;
        ok(p && dtrain_topo_load_xml(p, &t, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, cases[i].why) &&
               strstr(err, " line "), "%s: refused before hwloc (%s)", cases[i].what, err);
        dtrain_topo_free(t);
        free(copy);
    }
    free(commas);
    free(data);
}

/* Loads leave libxml2 with an error function that is mapped: hwloc's
 * libxml2 plugin sets one of its own and hwloc unloads the plugin with the
 * last topology, which once let the fuzzer's ~1000th load jump into
 * unmapped memory (issue 16).  Checked directly: the function libxml2
 * would call lies in a loaded object, after several loads, good and bad. */
static void libxml_error_function_mapped(void)
{
    dtrain_topo *t = NULL;
    char err[512] = "";
    int loads = 0;
    for (int i = 0; i < 3; i++) {
        loads += dtrain_topo_load_xml(fixture_path("dgx-h100.xml"), &t, err, sizeof err) == DTRAIN_OK;
        dtrain_topo_free(t);
        t = NULL;
        const char *bad = "<topology><object type=\"Machine\"/>";
        const char *p = write_tmp("text.xml", bad, strlen(bad));
        if (p)
            dtrain_topo_load_xml(p, &t, err, sizeof err);
        dtrain_topo_free(t);
        t = NULL;
    }
    Dl_info where;
    void *fn = (void *)xmlGenericError;
    int mapped = dladdr(fn, &where) != 0 && where.dli_fname != NULL;
    ok(loads == 3 && mapped, "after %d loads libxml2's error function %p is in a loaded object (%s)", loads, fn,
       mapped ? where.dli_fname : "none: it dangles");
}

static void bad_paths(void)
{
    dtrain_topo *t = NULL;
    char err[512];
    ok(dtrain_topo_load_xml("/nonexistent/x.xml", &t, err, sizeof(err)) == DTRAIN_ERR_INPUT &&
           strstr(err, "/nonexistent/x.xml"),
       "missing file: %s", err);
    ok(dtrain_topo_load_xml(tmpdir, &t, err, sizeof(err)) == DTRAIN_ERR_INPUT, "a directory: %s", err);
    ok(dtrain_topo_load_xml("", &t, err, sizeof(err)) == DTRAIN_ERR_INPUT, "empty path: %s", err);
    ok(dtrain_topo_load_xml(NULL, &t, err, sizeof(err)) == DTRAIN_ERR_INPUT, "NULL path: %s", err);
    const char *p = write_tmp("empty.xml", "", 0);
    ok(p && dtrain_topo_load_xml(p, &t, err, sizeof(err)) == DTRAIN_ERR_INPUT, "empty file: %s", err);
    p = write_tmp("text.xml", "not xml at all\n", 15);
    ok(p && dtrain_topo_load_xml(p, &t, err, sizeof(err)) == DTRAIN_ERR_INPUT, "plain text: %s", err);
    char small[8];
    ok(dtrain_topo_load_xml("/nonexistent/x.xml", &t, small, sizeof(small)) == DTRAIN_ERR_INPUT &&
           strlen(small) < sizeof(small),
       "a small error buffer is never overrun");
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temporary folder\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        truncations(files[i]);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        corruptions(files[i], 0x9e3779b97f4a7c15ULL + i);
    hostile();
    bad_paths();
    precheck_bypasses();
    special_files();
    bounded_same_model();
    libxml_error_function_mapped();
    resource_bounds();

    char path[600];
    const char *names[] = {"trunc.xml", "corrupt.xml", "hostile.xml", "empty.xml", "text.xml", "bypass.xml"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
    return tap_done();
}
