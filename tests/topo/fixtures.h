/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Helpers shared by the topo tests: where the fixtures are, and loading one. */
#ifndef DTRAIN_TEST_TOPO_FIXTURES_H
#define DTRAIN_TEST_TOPO_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>

#include "dtrain_topo.h"

/* Path of fixture `name` in $DTRAIN_FIXTURES (set by the Makefile). */
static inline const char *fixture_path(const char *name)
{
    static char path[4096];
    const char *dir = getenv("DTRAIN_FIXTURES");
    snprintf(path, sizeof(path), "%s/%s", dir ? dir : "../fixtures/topology", name);
    return path;
}

/* Load a fixture; NULL (with a diagnostic) on failure. */
static inline dtrain_topo *load_fixture(const char *name)
{
    dtrain_topo *topo = NULL;
    char err[512];
    if (dtrain_topo_load_xml(fixture_path(name), &topo, err, sizeof(err)) != DTRAIN_OK) {
        printf("# loading %s failed: %s\n", name, err);
        return NULL;
    }
    return topo;
}

#endif
