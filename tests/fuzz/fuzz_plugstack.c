/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: the plugin's plugstack.conf arguments, one per line (the
 * text slurmstepd hands the plugin), then topology_xml's %n expansion. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "site_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *av[64], err[512], out[DTRAIN_CONFIG_PATH_MAX];
    int ac = 0;
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    for (char *p = text, *line; ac < 64 && (line = strsep(&p, "\n")) != NULL;)
        av[ac++] = line;
    struct dtrain_site_config cfg;
    if (dtrain_config_parse(&cfg, ac, av, err, sizeof err) == 0) {
        (void)dtrain_config_topology_path(&cfg, "node1", out, sizeof out, err, sizeof err);
        (void)dtrain_config_pcie_allowed(&cfg, 1);
    }
    free(text);
    return 0;
}
