/* libdtrain-topo: a pre-check of hwloc XML files before hwloc reads them.
 *
 * hwloc 2.9 crashes (NULL bitmap in hwloc_bitmap_compare_first during
 * hwloc_topology_load) on an <object> that has a cpuset but no
 * complete_cpuset, or a nodeset but no complete_nodeset; our fuzzing of the
 * fixtures (tests/topo/test_malformed.c) found no other crash.  Since the
 * plugin loads topologies inside slurmstepd, such a file must be refused
 * before hwloc sees it.  This is not an XML parser: it only scans the tags
 * of <object> elements for those attribute pairs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"
#include "topo_model.h"

/* A topology file larger than this is refused (the largest real machines
 * save a few MB). */
#define TOPO_XML_MAX_BYTES (256L * 1024 * 1024)

/* Is attribute `name` (e.g. "cpuset") in tag[0..len)?  An attribute name is
 * preceded by white space and followed by '='. */
static int has_attr(const char *tag, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 1; i + n < len; i++)
        if ((tag[i - 1] == ' ' || tag[i - 1] == '\t' || tag[i - 1] == '\n' || tag[i - 1] == '\r') &&
            memcmp(tag + i, name, n) == 0 && tag[i + n] == '=')
            return 1;
    return 0;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size;

    if (!f) {
        dtrain_snprintf(err, errlen, "cannot read topology file %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        dtrain_snprintf(err, errlen, "cannot read topology file %s: %s", path, strerror(errno));
        goto out;
    }
    if (size > TOPO_XML_MAX_BYTES) {
        dtrain_snprintf(err, errlen, "topology file %s is larger than %ld MiB", path, TOPO_XML_MAX_BYTES >> 20);
        goto out;
    }
    buf = malloc((size_t)size + 1);
    if (!buf) {
        dtrain_snprintf(err, errlen, "out of memory reading %s", path);
        goto out;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        dtrain_snprintf(err, errlen, "cannot read topology file %s: short read", path);
        free(buf);
        buf = NULL;
        goto out;
    }
    buf[size] = '\0';
    *len = (size_t)size;
out:
    fclose(f);
    return buf;
}

int topo_xml_precheck(const char *path, char *err, size_t errlen)
{
    size_t len = 0;
    char *text = read_file(path, &len, err, errlen);
    int rc = -1;

    if (!text)
        return -1;
    for (size_t i = 0; i + 7 < len; i++) {
        if (memcmp(text + i, "<object", 7) != 0)
            continue;
        const char *end = memchr(text + i, '>', len - i);
        if (!end)
            break; /* truncated: hwloc's parser refuses it cleanly */
        size_t tlen = (size_t)(end - (text + i));
        const char *tag = text + i;
        if ((has_attr(tag, tlen, "cpuset") && !has_attr(tag, tlen, "complete_cpuset")) ||
            (has_attr(tag, tlen, "nodeset") && !has_attr(tag, tlen, "complete_nodeset"))) {
            size_t line = 1;
            for (size_t k = 0; k < i; k++)
                line += text[k] == '\n';
            dtrain_snprintf(err, errlen,
                            "%s line %zu: an <object> has a cpuset/nodeset without its complete_ set: "
                            "not a valid hwloc XML topology",
                            path, line);
            goto out;
        }
        i += tlen;
    }
    rc = 0;
out:
    free(text);
    return rc;
}
