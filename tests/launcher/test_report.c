/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-launch's --print and --json lines (launcher/report.c) and the id
 * redaction they use (dtrain_bootstrap_id_redact): a job's output shows
 * where its groups' leaders listen, never the secret that lets one join a
 * group or derive the heartbeat key (issue 32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "report.h"
#include "tap.h"

#define SECRET "00112233445566778899aabbccddeeff"
#define MAGIC "a1b2c3d4e5f60718"

static char *report(int json, const struct dtrain_report *r)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL)
        return NULL;
    int rc = json ? dtrain_report_json(out, r) : dtrain_report_text(out, r);
    fclose(out);
    if (rc != 0) {
        free(text);
        return NULL;
    }
    return text;
}

int main(void)
{
    char shown[DTRAIN_BOOTSTRAP_ID_MAX], nccl[DTRAIN_BOOTSTRAP_ID_MAX];
    dtrain_bootstrap_id_redact("cpu:10.1.2.3:4242:" SECRET, shown, sizeof shown);
    ok(strcmp(shown, "cpu:10.1.2.3:4242:<secret>") == 0, "a cpu id shows its address and port, not its secret (%s)",
       shown);
    snprintf(nccl, sizeof nccl, "nccl:" MAGIC "%0240d", 7);
    dtrain_bootstrap_id_redact(nccl, shown, sizeof shown);
    ok(strncmp(shown, "nccl:<secret>0000", 17) == 0 && strstr(shown, MAGIC) == NULL && strlen(shown) == 13 + 240,
       "an nccl id shows its socket address, not the random magic before it");
    dtrain_bootstrap_id_redact("", shown, sizeof shown);
    int empty = shown[0] == '\0';
    dtrain_bootstrap_id_redact("local", shown, sizeof shown);
    int local = strcmp(shown, "local") == 0;
    dtrain_bootstrap_id_redact("cpu:10.1.2.3:4242:" SECRET "x", shown, sizeof shown);
    ok(empty && local && strcmp(shown, "<secret>") == 0, "no id stays empty, \"local\" stays, any other text is hidden");

    struct dtrain_bootstrap bs;
    memset(&bs, 0, sizeof bs);
    bs.tp = bs.pp = bs.dp = 1;
    bs.world_size = 2;
    bs.backend = DTRAIN_COMM_CPU;
    struct dtrain_comm_group *w = &bs.groups[DTRAIN_GROUP_WORLD];
    w->present = 1;
    w->size = 2;
    w->stride = 1;
    snprintf(w->key, sizeof w->key, "dt.w");
    snprintf(w->id, sizeof w->id, "cpu:10.1.2.3:4242:" SECRET);
    w->listen_fd = -1;
    struct dtrain_report r = {.bs = &bs, .placed_by = "launcher", .fences = 1};
    char *text = report(0, &r), *json = report(1, &r);
    ok(text != NULL && strstr(text, " world.id=cpu:10.1.2.3:4242:<secret>\n") != NULL && strstr(text, SECRET) == NULL,
       "--print: world.id without the secret");
    diag("%s", text != NULL ? text : "(none)");
    ok(json != NULL && strstr(json, "\"id\":\"cpu:10.1.2.3:4242:<secret>\"") != NULL && strstr(json, SECRET) == NULL,
       "--json: the same");
    free(text);
    free(json);
    return tap_done();
}
