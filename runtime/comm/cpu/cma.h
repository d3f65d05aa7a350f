/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The all-gather between the members of one host in one copy: each member
 * reads the others' blocks straight from their memory into its output
 * (cross-memory attach, process_vm_readv), where the ring moves every
 * byte twice (into a shared-memory ring, out of it).  Open MPI's
 * shared-memory transport does the same.  The all-reduce's gather half
 * likewise: after the ring's reduce half (ring.h) each member reads the
 * segments the others finished straight into its buffer; the sums are
 * the ring's, so the bits are the same either way.
 *
 * The members swap descriptors (pid, where the region is, its size) over
 * the ring, read, and swap outcomes over the ring again: no member
 * returns, and changes its region, before every member has read it.  The
 * first call checks that it works at all: each member reads a random
 * token every other one holds; a pid that is not the member's (members in
 * other PID namespaces) or no permission to read it (the kernel's ptrace
 * rules: Yama's ptrace_scope, a seccomp profile) fails the check on some
 * member, and then no member of the communicator uses it: the ring
 * carries every all-gather, as with DTRAIN_COMM_TRANSPORT=ring.  A member
 * whose memory becomes unreadable later (EPERM: it made itself not
 * dumpable, changed its credentials) sends that call and the rest to the
 * rings the same way; any other failed read (ESRCH: a member gone) fails
 * the call on every member. */
#ifndef DTRAIN_COMM_CPU_CMA_H
#define DTRAIN_COMM_CPU_CMA_H

#include <stddef.h>

#include "cpu_comm.h"

/* Below this many bytes per member the ring's latency is lower (two
 * small all-gathers around the reads cost a ring's worth each). */
#define CMA_MIN_BYTES (256u << 10)
/* The all-reduce's: its buffer is written again by the next call's
 * reduce half, and where the others' reads left its lines in their caches
 * those writes wait for them to be taken back: below about a core's L2
 * the ring, whose peers read only the shared rings, is faster
 * (dtrain-bench-collectives, 2 ranks: 512 KiB per member 208-221 us
 * against the ring's 137; 1 MiB 229-292 against 310-332). */
#define CMA_ALLREDUCE_MIN_BYTES (1u << 20)

/* Whether every member alike finds it usable for `each` bytes per
 * member: all on this host, the transport AUTO, at least min_bytes, not
 * found unusable. */
int cma_usable(const struct dtrain_comm *c, const struct cpu_comm *cc, size_t each, size_t min_bytes);

/* The all-gather of each bytes per member (in: this member's block, in
 * place or apart), where cma_usable(CMA_MIN_BYTES).  0, or the cause (comm_fail has said
 * why).  *used 0: not usable, or some member cannot read another's memory
 * (found at the first call, or refused now; nothing counted): the caller
 * gathers over the ring. */
int cma_all_gather(struct dtrain_comm *c, struct cpu_comm *cc, const void *in, void *out, size_t each, int *used);

/* The all-reduce's gather half on buf[count], after
 * ring_allreduce(RING_REDUCE), where cma_usable for count / n floats per
 * member and CMA_ALLREDUCE_MIN_BYTES; 0 or the cause, *used as above (0: the caller runs
 * ring_allreduce(RING_GATHER)). */
int cma_allreduce_gather(struct dtrain_comm *c, struct cpu_comm *cc, float *buf, size_t count, int *used);

#endif
