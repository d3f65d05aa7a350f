/* SPDX-License-Identifier: GPL-2.0-or-later */
/* --print / --json lines; see report.h. */
#include "report.h"

#include <jansson.h>
#include <stdlib.h>

#include "bootstrap_id.h"
#include "groups.h"

/* The integer facts of a line, in print order, shared by both formats. */
struct named_long {
    const char *name;
    long value;
};

static size_t placement_facts(const struct dtrain_report *r, struct named_long *f)
{
    const struct dtrain_bootstrap *bs = r->bs;
    size_t n = 0;
    f[n++] = (struct named_long){"rank", bs->rank};
    f[n++] = (struct named_long){"size", bs->world_size};
    f[n++] = (struct named_long){"T", bs->tp};
    f[n++] = (struct named_long){"P", bs->pp};
    f[n++] = (struct named_long){"D", bs->dp};
    f[n++] = (struct named_long){"tp_rank", bs->tp_rank};
    f[n++] = (struct named_long){"pp_rank", bs->pp_rank};
    f[n++] = (struct named_long){"dp_rank", bs->dp_rank};
    f[n++] = (struct named_long){"node", bs->node};
    f[n++] = (struct named_long){"local_rank", bs->local_rank};
    f[n++] = (struct named_long){"local_size", bs->local_size};
    return n;
}

static size_t timing_facts(const struct dtrain_report *r, struct named_long *f)
{
    size_t n = 0;
    f[n++] = (struct named_long){"bootstrap", r->bootstrap_us};
    f[n++] = (struct named_long){"init", r->init_us};
    f[n++] = (struct named_long){"place", r->place_us};
    f[n++] = (struct named_long){"ids", r->exchange.ids_us};
    f[n++] = (struct named_long){"put", r->exchange.put_us};
    f[n++] = (struct named_long){"fence", r->exchange.fence_us};
    f[n++] = (struct named_long){"get", r->exchange.get_us};
    return n;
}

int dtrain_report_text(FILE *out, const struct dtrain_report *r)
{
    struct named_long f[16];
    size_t n = placement_facts(r, f);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%s=%ld", i ? " " : "", f[i].name, f[i].value);
    fprintf(out, " placed_by=%s backend=%s fences=%d", r->placed_by, dtrain_backend_name(r->bs->backend), r->fences);
    n = timing_facts(r, f);
    for (size_t i = 0; i < n; i++)
        fprintf(out, " %s_us=%ld", f[i].name, f[i].value);
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        const struct dtrain_comm_group *g = &r->bs->groups[k];
        const char *kind = dtrain_group_kind_name((enum dtrain_group_kind)k);
        char shown[DTRAIN_BOOTSTRAP_ID_MAX];
        dtrain_bootstrap_id_redact(g->id, shown, sizeof shown);
        if (g->present)
            fprintf(out, " %s.key=%s %s.first=%d %s.stride=%d %s.size=%d %s.rank=%d %s.id=%s", kind, g->key, kind,
                    g->first, kind, g->stride, kind, g->size, kind, g->my_rank, kind, shown);
    }
    fputc('\n', out);
    return fflush(out) == 0 && !ferror(out) ? 0 : -1;
}

int dtrain_report_json(FILE *out, const struct dtrain_report *r)
{
    struct named_long f[16];
    int rc = -1;
    json_t *root = json_object(), *timing = json_object(), *groups = json_object();
    char *text = NULL;
    if (root == NULL || timing == NULL || groups == NULL)
        goto out;
    size_t n = placement_facts(r, f);
    for (size_t i = 0; i < n; i++)
        if (json_object_set_new(root, f[i].name, json_integer(f[i].value)) != 0)
            goto out;
    n = timing_facts(r, f);
    for (size_t i = 0; i < n; i++)
        if (json_object_set_new(timing, f[i].name, json_integer(f[i].value)) != 0)
            goto out;
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        const struct dtrain_comm_group *g = &r->bs->groups[k];
        if (!g->present)
            continue;
        char shown[DTRAIN_BOOTSTRAP_ID_MAX];
        dtrain_bootstrap_id_redact(g->id, shown, sizeof shown);
        json_t *group = json_pack("{s:s, s:i, s:i, s:i, s:i, s:s}", "key", g->key, "first", g->first, "stride",
                                  g->stride, "size", g->size, "rank", g->my_rank, "id", shown);
        if (group == NULL || json_object_set_new(groups, dtrain_group_kind_name((enum dtrain_group_kind)k), group) != 0)
            goto out;
    }
    if (json_object_set_new(root, "placed_by", json_string(r->placed_by)) != 0 ||
        json_object_set_new(root, "backend", json_string(dtrain_backend_name(r->bs->backend))) != 0 ||
        json_object_set_new(root, "fences", json_integer(r->fences)) != 0)
        goto out;
    /* set_new takes the references even on failure: clear ours first. */
    json_t *t = timing, *g = groups;
    timing = groups = NULL;
    if (json_object_set_new(root, "timing_us", t) != 0 || json_object_set_new(root, "groups", g) != 0)
        goto out;
    text = json_dumps(root, JSON_COMPACT);
    if (text == NULL)
        goto out;
    fprintf(out, "%s\n", text);
    rc = fflush(out) == 0 && !ferror(out) ? 0 : -1;
out:
    free(text);
    json_decref(timing);
    json_decref(groups);
    json_decref(root);
    return rc;
}
