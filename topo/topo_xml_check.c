/* libdtrain-topo: a pre-check of hwloc XML before hwloc reads it.
 *
 * hwloc 2.9 crashes (NULL bitmap in hwloc_bitmap_compare_first during
 * hwloc_topology_load) on an <object> that has a cpuset but no
 * complete_cpuset, or a nodeset but no complete_nodeset.  The check parses
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

static int bad_object(const xmlNode *n)
{
    int cpuset = xmlHasProp(n, (const xmlChar *)"cpuset") != NULL;
    int ccpuset = xmlHasProp(n, (const xmlChar *)"complete_cpuset") != NULL;
    int nodeset = xmlHasProp(n, (const xmlChar *)"nodeset") != NULL;
    int cnodeset = xmlHasProp(n, (const xmlChar *)"complete_nodeset") != NULL;
    return (cpuset && !ccpuset) || (nodeset && !cnodeset);
}

/* Walk the element tree without recursion; returns the first bad node,
 * or sets *too_deep. */
static const xmlNode *find_bad(const xmlNode *root, int *too_deep)
{
    const xmlNode *n = root;
    int depth = 0;
    *too_deep = 0;
    while (n) {
        if (n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, (const xmlChar *)"object") == 0 && bad_object(n))
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

int topo_xml_precheck_buffer(const char *buf, size_t len, const char *name, char *err, size_t errlen)
{
    if (len == 0) {
        dtrain_snprintf(err, errlen, "%.512s is empty: not a valid hwloc XML topology", name);
        return -1;
    }
    if (len > (size_t)TOPO_XML_MAX_BYTES || len > 0x7fffffffu) {
        dtrain_snprintf(err, errlen, "%.512s is larger than %d MiB", name, TOPO_XML_MAX_BYTES >> 20);
        return -1;
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
        return -1;
    }
    int rc = 0, too_deep = 0;
    const xmlNode *root = xmlDocGetRootElement(doc);
    const xmlNode *bad = root ? find_bad(root, &too_deep) : NULL;
    if (root == NULL) {
        dtrain_snprintf(err, errlen, "%.512s has no root element: not a valid hwloc XML topology", name);
        rc = -1;
    } else if (too_deep) {
        dtrain_snprintf(err, errlen, "%.512s line %ld: nested deeper than %d elements: not a valid hwloc XML "
                        "topology", name, (long)xmlGetLineNo(bad), TOPO_XML_MAX_DEPTH);
        rc = -1;
    } else if (bad) {
        dtrain_snprintf(err, errlen, "%.512s line %ld: an <object> has a cpuset/nodeset without its complete_ "
                        "set: not a valid hwloc XML topology", name, (long)xmlGetLineNo(bad));
        rc = -1;
    }
    xmlFreeDoc(doc);
    return rc;
}
