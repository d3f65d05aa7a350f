/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libFuzzer: the fault-injection spec (DTRAIN_INJECT, fault.inject). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ft/dtrain_inject.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *spec = malloc(size + 1), err[512];
    if (spec == NULL)
        return 0;
    memcpy(spec, data, size);
    spec[size] = '\0';
    struct dtrain_inject in;
    (void)dtrain_inject_parse(spec, &in, err, sizeof err);
    free(spec);
    return 0;
}
