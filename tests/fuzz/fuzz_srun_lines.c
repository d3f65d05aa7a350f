/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: the lines dtrain-launch --supervise reads from its steps
 * (launcher/spares.h): srun's stderr, which carries every task's (a node's
 * blame, rank 0's layout line), and the report step's stdout (where a node
 * is); then the choice of a spare with what was read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spares.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"node1", "node2", "node3", "node4"};
    char *text = malloc(size + 1), node[DTRAIN_NODE_NAME_MAX], err[512];
    struct dtrain_node_roles r;
    struct dtrain_spare_layout layout = {0};
    struct dtrain_spare_pick picks[4];
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (dtrain_roles_init(&r, names, 4, 2, err, sizeof err) != 0) {
        free(text);
        return 0;
    }
    /* one line at a time, as the supervisor reads them */
    for (char *line = text, *nl; line != NULL; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        (void)dtrain_srun_blame(line, node, sizeof node);
        (void)dtrain_layout_parse(line, &layout);
        (void)dtrain_roles_note_where(&r, line);
    }
    /* layouts of at most 1024 ranks: the check is O(ranks) */
    if (!layout.known || (long long)layout.tp * layout.pp * layout.dp <= 1024) {
        dtrain_roles_fail(&r, "node1");
        if (dtrain_roles_replace_near(&r, &layout, picks, err, sizeof err) > 0)
            (void)dtrain_spare_pick_text(&r, &picks[0], err, sizeof err);
    }
    dtrain_roles_free(&r);
    free(text);
    return 0;
}
