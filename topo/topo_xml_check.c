/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: a pre-check of hwloc XML before hwloc reads it.
 *
 * hwloc 2.9 crashes (NULL bitmap in hwloc_bitmap_compare_first during
 * hwloc_topology_load) on an <object> that has a cpuset but no
 * complete_cpuset, or a nodeset but no complete_nodeset, and aborts on a
 * bitmap it cannot read (bitmap_ok below).  The check parses
 * the text with a real XML parser (libxml2: no network, no DTD loading, no
 * entity substitution), so attribute spacing, quoting, '>' inside a value,
 * comments or CDATA cannot hide such an object; text that is not
 * well-formed XML is refused with the parser's line.  hwloc is then given
 * the very bytes that were checked (hwloc_topology_set_xmlbuffer), never
 * the path again.
 *
 * This guards against the one crash known; inside slurmstepd the whole
 * load also runs in a forked child with a time bound (topo_bounded.c), so
 * a crash or hang not known yet fails the step, not slurmstepd. */
#include <stdio.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include "dtrain_parse.h"
#include "topo_model.h"

/* Deeper nesting than this is refused (real topologies nest < 20). */
#define TOPO_XML_MAX_DEPTH 256
/* hwloc sizes a bitmap by the largest index in it: a PU or NUMA node with
 * os_index 4000000000, or none at all (hwloc then uses 2^32-1), costs
 * 512 MB and seconds (found by tests/fuzz).  Real machines have < 2^16
 * CPUs; bitmaps of more than 2^20 bits (2^15 words) are refused. */
#define TOPO_XML_MAX_INDEX (1L << 20)
#define TOPO_XML_MAX_WORDS ((size_t)TOPO_XML_MAX_INDEX / 32)

/* hwloc's bitmap syntax, as hwloc_bitmap_snprintf writes it: an optional
 * "0xf...f" (infinite) head, then comma-separated words "0x" + 1..8 hex
 * digits, where a word after the first may be empty (",," is a zero word).
 * hwloc_bitmap_sscanf asserts (aborts) on some other texts, e.g. a leading
 * comma (found by tests/fuzz). */
static int bitmap_ok(const char *v)
{
    /* hwloc allocates a word per comma: a few MB of commas would be GBs. */
    size_t words = 1;
    for (const char *p = v; *p; p++)
        words += *p == ',';
    if (words > TOPO_XML_MAX_WORDS)
        return 0;
    if (strncmp(v, "0xf...f", 7) == 0) {
        v += 7;
        if (*v == '\0')
            return 1;
        if (*v++ != ',')
            return 0;
    }
    for (int first = 1;; first = 0) {
        if (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
            int n = 0;
            for (v += 2; (*v >= '0' && *v <= '9') || (*v >= 'a' && *v <= 'f') || (*v >= 'A' && *v <= 'F'); v++)
                n++;
            if (n < 1 || n > 8)
                return 0;
        } else if (first) {
            return 0;
        }
        if (*v == '\0')
            return 1;
        if (*v++ != ',')
            return 0;
    }
}

/* Every attribute named *cpuset or *nodeset holds a bitmap hwloc can read. */
static int bad_bitmap(const xmlNode *n)
{
    for (const xmlAttr *a = n->properties; a; a = a->next) {
        size_t len = strlen((const char *)a->name);
        if (len < 6 || (strcmp((const char *)a->name + len - 6, "cpuset") != 0 &&
                        (len < 7 || strcmp((const char *)a->name + len - 7, "nodeset") != 0)))
            continue;
        xmlChar *v = xmlNodeGetContent((const xmlNode *)a);
        int ok = v != NULL && bitmap_ok((const char *)v);
        xmlFree(v);
        if (!ok)
            return 1;
    }
    return 0;
}

/* A PU or NUMA node (whose os_index is a bit of a cpuset or nodeset)
 * needs an os_index below TOPO_XML_MAX_INDEX.  Other objects' os_index
 * sizes nothing and is left to hwloc. */
static int bad_index(const xmlNode *n)
{
    xmlChar *type = xmlGetProp(n, (const xmlChar *)"type");
    int needs = type != NULL && (xmlStrcmp(type, (const xmlChar *)"PU") == 0 ||
                                 xmlStrcmp(type, (const xmlChar *)"NUMANode") == 0);
    xmlFree(type);
    if (!needs)
        return 0;
    xmlChar *v = xmlGetProp(n, (const xmlChar *)"os_index");
    int bad = v == NULL;
    if (v != NULL) {
        const char *p = (const char *)v;
        long value = 0;
        if (*p == '\0')
            bad = 1;
        for (; *p && !bad; p++) {
            if (*p < '0' || *p > '9' || (value = value * 10 + (*p - '0')) >= TOPO_XML_MAX_INDEX)
                bad = 1;
        }
    }
    xmlFree(v);
    return bad;
}

static int bad_object(const xmlNode *n)
{
    int cpuset = xmlHasProp(n, (const xmlChar *)"cpuset") != NULL;
    int ccpuset = xmlHasProp(n, (const xmlChar *)"complete_cpuset") != NULL;
    int nodeset = xmlHasProp(n, (const xmlChar *)"nodeset") != NULL;
    int cnodeset = xmlHasProp(n, (const xmlChar *)"complete_nodeset") != NULL;
    return (cpuset && !ccpuset) || (nodeset && !cnodeset);
}

/* Walk the element tree without recursion; returns the first bad node
 * (*bitmap set when a bitmap is malformed, *index when an os_index is
 * missing or too large), or sets *too_deep. */
static const xmlNode *find_bad(const xmlNode *root, int *too_deep, int *bitmap, int *index)
{
    const xmlNode *n = root;
    int depth = 0;
    *too_deep = 0;
    *bitmap = 0;
    *index = 0;
    while (n) {
        if (n->type == XML_ELEMENT_NODE && bad_bitmap(n)) {
            *bitmap = 1;
            return n;
        }
        int object = n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, (const xmlChar *)"object") == 0;
        if (object && bad_index(n)) {
            *index = 1;
            return n;
        }
        if (object && bad_object(n))
            return n;
        if (n->type == XML_ELEMENT_NODE && n->children) {
            if (++depth > TOPO_XML_MAX_DEPTH) {
                *too_deep = 1;
                return n;
            }
            n = n->children;
            continue;
        }
        while (n && !n->next && n != root) {
            n = n->parent;
            depth--;
        }
        if (!n || n == root)
            break;
        n = n->next;
    }
    return NULL;
}

/* libxml2's generic error function is process-wide (per thread) state.
 * hwloc's libxml2 plugin (hwloc_xml_libxml.so) sets it to a function of
 * its own on first use and never restores it, and hwloc dlcloses the plugin
 * when the last topology is destroyed: libxml2 is left calling into
 * unmapped memory, or into whatever is mapped there later (the fuzzer
 * found a jump into glibc's gconv-modules.cache after ~1000 loads, once
 * iconv had mapped it where the plugin had been).  So the pre-check, and
 * load() after each hwloc_topology_destroy(), hand libxml2 this silent
 * function of ours, which is mapped as long as this code is. */
static void silent_generic_error(void *ctx, const char *msg, ...)
{
    (void)ctx;
    (void)msg;
}

void topo_xml_own_errors(void)
{
    xmlSetGenericErrorFunc(NULL, silent_generic_error);
}

enum dtrain_status topo_xml_precheck_buffer(const char *buf, size_t len, const char *name, char *err, size_t errlen)
{
    topo_xml_own_errors();
    if (len == 0) {
        dtrain_snprintf(err, errlen, "%.512s is empty: not a valid hwloc XML topology", name);
        return DTRAIN_ERR_INPUT;
    }
    if (len > (size_t)TOPO_XML_MAX_BYTES || len > 0x7fffffffu) {
        dtrain_snprintf(err, errlen, "%.512s is larger than %d MiB", name, TOPO_XML_MAX_BYTES >> 20);
        return DTRAIN_ERR_INPUT;
    }
    xmlResetLastError();
    xmlDoc *doc = xmlReadMemory(buf, (int)len, NULL, NULL,
                                XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA);
    if (doc == NULL) {
        const xmlError *e = xmlGetLastError();
        char msg[200] = "unknown error";
        if (e && e->message) {
            dtrain_snprintf(msg, sizeof msg, "%s", e->message);
            size_t m = strlen(msg);
            while (m > 0 && (msg[m - 1] == '\n' || msg[m - 1] == ' '))
                msg[--m] = '\0';
        }
        dtrain_snprintf(err, errlen, "%.512s line %d: not well-formed XML (%s): not a valid hwloc XML topology",
                        name, e ? e->line : 0, msg);
        xmlResetLastError();
        return DTRAIN_ERR_INPUT;
    }
    enum dtrain_status rc = DTRAIN_OK;
    int too_deep = 0, bitmap = 0, index = 0;
    const xmlNode *root = xmlDocGetRootElement(doc);
    const xmlNode *bad = root ? find_bad(root, &too_deep, &bitmap, &index) : NULL;
    if (root == NULL) {
        dtrain_snprintf(err, errlen, "%.512s has no root element: not a valid hwloc XML topology", name);
        rc = DTRAIN_ERR_INPUT;
    } else if (too_deep) {
        dtrain_snprintf(err, errlen, "%.512s line %ld: nested deeper than %d elements: not a valid hwloc XML "
                        "topology", name, (long)xmlGetLineNo(bad), TOPO_XML_MAX_DEPTH);
        rc = DTRAIN_ERR_INPUT;
    } else if (bad && bitmap) {
        dtrain_snprintf(err, errlen, "%.512s line %ld: a cpuset/nodeset that is not an hwloc bitmap: not a valid "
                        "hwloc XML topology", name, (long)xmlGetLineNo(bad));
        rc = DTRAIN_ERR_INPUT;
    } else if (bad && index) {
        dtrain_snprintf(err, errlen, "%.512s line %ld: a PU or NUMANode <object> has no os_index, or one that is "
                        "not a number below %ld: not a valid hwloc XML topology", name,
                        (long)xmlGetLineNo(bad), TOPO_XML_MAX_INDEX);
        rc = DTRAIN_ERR_INPUT;
    } else if (bad) {
        dtrain_snprintf(err, errlen, "%.512s line %ld: an <object> has a cpuset/nodeset without its complete_ "
                        "set: not a valid hwloc XML topology", name, (long)xmlGetLineNo(bad));
        rc = DTRAIN_ERR_INPUT;
    }
    xmlFreeDoc(doc);
    return rc;
}
