/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: text and JSON output; see report.h. */
#include "report.h"

#include <jansson.h>
#include <string.h>

#include "dtrain_parse.h"

#define PROG "dtrain-health"

void health_reason(const struct health_report *rep, char *out, size_t len)
{
    const struct health_result *first = NULL;
    for (int i = 0; i < rep->nresults && !first; i++)
        if (rep->results[i].outcome == HEALTH_FAIL)
            first = &rep->results[i];
    if (!first) {
        dtrain_snprintf(out, len, "dtrain: healthy");
        return;
    }
    char more[48] = "";
    if (rep->failed > 1)
        dtrain_snprintf(more, sizeof(more), " (+%d more)", rep->failed - 1);
    /* Cut the detail rather than the "(+N more)" tail. */
    size_t fixed = strlen("dtrain: ") + strlen(health_check_name(first->id)) + 2 + strlen(more);
    int keep = len > fixed + 1 ? (int)(len - fixed - 1) : 0;
    snprintf(out, len, "dtrain: %s: %.*s%s", health_check_name(first->id), keep, first->detail, more);
    /* the reason goes to slurmctld and scontrol: the detail may quote bytes
     * read from the machine (sysfs, NVML names) */
    dtrain_printable(out);
}

void health_print_text(const struct health_report *rep, const struct health_verdict *v, int verbose,
                       FILE *out, FILE *errs)
{
    int passed = 0, skipped = 0;
    for (int i = 0; i < rep->nresults; i++) {
        const struct health_result *r = &rep->results[i];
        passed += r->outcome == HEALTH_PASS;
        skipped += r->outcome == HEALTH_SKIP;
        if (r->outcome == HEALTH_FAIL)
            fprintf(errs, PROG ": FAIL %s: %s\n", health_check_name(r->id), r->detail);
        else if (verbose)
            fprintf(out, PROG ": %s %s: %s\n", r->outcome == HEALTH_PASS ? "pass" : "skip",
                    health_check_name(r->id), r->detail);
    }
    if (!rep->failed) {
        fprintf(out, PROG ": %s %s: healthy (%d passed, %d skipped) in %.0f ms\n", v->node,
                health_mode_name(rep->mode), passed, skipped, rep->total_ms);
        return;
    }
    if (v->drained)
        fprintf(errs, PROG ": %s %s: unhealthy (%d failed); drained with reason '%s'\n", v->node,
                health_mode_name(rep->mode), rep->failed, v->reason);
    else if (v->drain_error)
        fprintf(errs, PROG ": %s %s: unhealthy (%d failed); %s\n", v->node, health_mode_name(rep->mode),
                rep->failed, v->drain_error);
    else
        fprintf(errs, PROG ": %s %s: unhealthy (%d failed); not drained\n", v->node,
                health_mode_name(rep->mode), rep->failed);
}

/* json_object_set_new that remembers a failure instead of returning it. */
static void put(json_t *obj, const char *key, json_t *value, int *bad)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        *bad = 1;
}

static json_t *ms_or_null(double ms)
{
    return ms < 0 ? json_null() : json_real((double)(long long)(ms * 10 + 0.5) / 10);
}

static json_t *text_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static int dump(json_t *root, FILE *out)
{
    int rc = json_dumpf(root, out, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0 && fputc('\n', out) != EOF ? 0 : -1;
    if (fflush(out) != 0)
        rc = -1;
    return rc;
}

int health_print_json(const struct health_report *rep, const struct health_verdict *v, FILE *out)
{
    int bad = 0, rc = -1;
    json_t *root = json_object(), *elapsed = json_object(), *checks = json_array();
    if (!root || !elapsed || !checks) {
        json_decref(elapsed);
        json_decref(checks);
        goto done;
    }
    put(root, "program", json_string(PROG), &bad);
    put(root, "version", json_string(PACKAGE_VERSION), &bad);
    put(root, "mode", json_string(health_mode_name(rep->mode)), &bad);
    put(root, "node", text_or_null(v->node), &bad);
    put(root, "config", text_or_null(v->config), &bad);
    put(root, "healthy", json_boolean(rep->failed == 0), &bad);
    put(root, "drained", json_boolean(v->drained), &bad);
    put(root, "reason", text_or_null(v->reason), &bad);
    put(root, "drain_error", text_or_null(v->drain_error), &bad);
    put(elapsed, "total", ms_or_null(rep->total_ms), &bad);
    put(elapsed, "topology", ms_or_null(rep->topology_ms), &bad);
    put(elapsed, "nvml", ms_or_null(rep->nvml_ms), &bad);
    put(elapsed, "filesystem", ms_or_null(rep->filesystem_ms), &bad);
    put(elapsed, "infiniband", ms_or_null(rep->infiniband_ms), &bad);
    put(elapsed, "imex", ms_or_null(rep->imex_ms), &bad);
    put(root, "elapsed_ms", elapsed, &bad);
    for (int i = 0; i < rep->nresults; i++) {
        const struct health_result *r = &rep->results[i];
        json_t *c = json_object();
        if (!c) {
            bad = 1;
            break;
        }
        put(c, "name", json_string(health_check_name(r->id)), &bad);
        put(c, "result", json_string(health_outcome_name(r->outcome)), &bad);
        put(c, "detail", json_string(r->detail), &bad);
        if (json_array_append_new(checks, c) != 0)
            bad = 1;
    }
    put(root, "checks", checks, &bad);
    if (!bad)
        rc = dump(root, out);
done:
    json_decref(root);
    return rc;
}

int health_print_json_error(const char *mode, const char *node, const char *error, FILE *out)
{
    int bad = 0, rc = -1;
    json_t *root = json_object();
    if (!root)
        return -1;
    put(root, "program", json_string(PROG), &bad);
    put(root, "version", json_string(PACKAGE_VERSION), &bad);
    put(root, "mode", text_or_null(mode), &bad);
    put(root, "node", text_or_null(node), &bad);
    put(root, "error", json_string(error), &bad);
    if (!bad)
        rc = dump(root, out);
    json_decref(root);
    return rc;
}
