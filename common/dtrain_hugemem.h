/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Zeroed, 64-byte aligned memory; a block of 2 MiB or more on transparent
 * huge pages.
 *
 * Such a block gets a mapping of its own, 2 MiB aligned and advised
 * MADV_HUGEPAGE: where the kernel's THP setting is "madvise" (Ubuntu's, and
 * this project's development VMs') only advised memory gets huge pages.
 * Two readers walk big tensors page by page: the GEMM kernels' packing (a
 * TLB entry per 4 KiB page otherwise) and, above all, the cpu comm
 * backend's direct reads of a peer's buffers (process_vm_readv pins and
 * looks up the source one page at a time: with 4 KiB pages that lookup was
 * a fifth of a 2-rank all-reduce's CPU time, doc/comm.md).  A fresh
 * mapping is zero-filled on first touch, so memory a run allocates and
 * never writes still costs no RAM (as calloc's large blocks); a huge page
 * is 2 MiB of RAM once any byte of it is written.  Where THP is off
 * ("never", or a kernel without it) the advice is ignored and the block is
 * plain pages.  Smaller blocks come from calloc.
 *
 * A block of physically contiguous 2 MiB also fills a core's L2 without
 * conflicts (its sets are chosen by physical address), which the cpu comm
 * backend's 1 MiB scratch of sums needs (cma.c).
 *
 * Header-only: the cpu kernels, the cpu comm backend's scratch and the
 * collectives benchmark use it. */
#ifndef DTRAIN_HUGEMEM_H
#define DTRAIN_HUGEMEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define DTRAIN_HUGEMEM_PAGE ((size_t)2 << 20) /* x86-64's PMD huge page */

/* What lies in the 16 bytes below a block: how to give it back. */
struct dtrain_hugemem_head {
    void *base;    /* calloc's pointer, or the mapping's start */
    size_t maplen; /* the mapping's length; 0: from calloc */
};

/* bytes of zeroed memory, 64-byte aligned (2 MiB aligned from 2 MiB on);
 * NULL when out of memory or bytes is 0. */
static inline void *dtrain_hugemem_alloc(size_t bytes)
{
    const size_t head = sizeof(struct dtrain_hugemem_head), huge = DTRAIN_HUGEMEM_PAGE;
    if (bytes == 0 || bytes > SIZE_MAX / 2)
        return NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (bytes < huge) {
        /* calloc's 16-byte alignment leaves 16 to 64 bytes below p */
        char *block = calloc(1, rounded + 64);
        if (block == NULL)
            return NULL;
        char *p = (char *)(((uintptr_t)block + 64) & ~(uintptr_t)63);
        ((struct dtrain_hugemem_head *)(void *)p)[-1] = (struct dtrain_hugemem_head){block, 0};
        return p;
    }
    /* room for the head below a 2 MiB boundary, and the block after it */
    size_t maplen = (rounded + huge + head + 4095) & ~(size_t)4095;
    char *base = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)base + head + huge - 1) & ~(uintptr_t)(huge - 1));
    size_t advised = (rounded + huge - 1) & ~(huge - 1);
    if (advised > (size_t)(base + maplen - p))
        advised = (size_t)(base + maplen - p);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, advised, MADV_HUGEPAGE); /* advice: no THP leaves plain pages */
#endif
    ((struct dtrain_hugemem_head *)(void *)p)[-1] = (struct dtrain_hugemem_head){base, maplen};
    return p;
}

/* A block from dtrain_hugemem_alloc back; NULL is fine. */
static inline void dtrain_hugemem_free(void *p)
{
    if (p == NULL)
        return;
    struct dtrain_hugemem_head h = ((struct dtrain_hugemem_head *)p)[-1];
    if (h.maplen == 0)
        free(h.base);
    else
        munmap(h.base, h.maplen);
}

#endif
