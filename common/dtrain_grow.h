/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The one growth rule of dtrain's growable arrays (a pointer, a count, a
 * capacity): double the capacity when the array is full. */
#ifndef DTRAIN_GROW_H
#define DTRAIN_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Room for item n of *items (size bytes each, *cap of them allocated):
 * when n == *cap, *cap doubles (from `first` when 0) through realloc.
 * Returns 0, or -1 when out of memory or the bytes would overflow; *items
 * and *cap are then unchanged (the caller still owns and frees *items). */
static inline int dtrain_grow(void **items, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return 0;
    size_t next = *cap ? *cap * 2 : first;
    if (next <= *cap || next > SIZE_MAX / size)
        return -1;
    void *p = realloc(*items, next * size);
    if (p == NULL)
        return -1;
    *items = p;
    *cap = next;
    return 0;
}

#endif
