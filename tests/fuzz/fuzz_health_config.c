/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: dtrain-health's site config (JSON), read from a file as the
 * prolog does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "site_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (path[0] == '\0')
        snprintf(path, sizeof path, "/tmp/dtrain-fuzz-health.%ld.json", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct health_config cfg;
    char err[1024];
    (void)health_config_load(path, "node1", &cfg, err, sizeof err);
    unlink(path);
    return 0;
}
