/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: PCI bus ids in one spelling.
 *
 * NVML writes "00000000:07:00.0" (8-digit domain, upper case), hwloc and
 * libdtrain-topo "0000:07:00.0"; the checks compare GPUs across the two,
 * so both are normalised to "dddd:bb:dd.f" in lower case. */
#ifndef DTRAIN_HEALTH_BUSID_H
#define DTRAIN_HEALTH_BUSID_H

#include <stddef.h>

/* Normalise "domain:bus:device.function" (domain optional, any case).
 * Returns 0, or -1 when the text is not a bus id (out untouched). */
int health_busid_normalise(const char *in, char *out, size_t outlen);

#endif
