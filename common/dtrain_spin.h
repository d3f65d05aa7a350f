/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The pause inside a spin-wait: the one place every part spells it.
 * Header only, as dtrain_clock.h. */
#ifndef DTRAIN_SPIN_H
#define DTRAIN_SPIN_H

/* One round of a spin on a value another thread or process will change:
 * x86's PAUSE (it frees the core's resources for the sibling thread and
 * avoids the memory-order flush when the loop ends); nothing elsewhere. */
static inline void dtrain_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

#endif
