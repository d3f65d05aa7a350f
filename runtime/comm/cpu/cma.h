/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Collectives between the members of one host by direct reads: each
 * member reads what it needs straight from the others' memory
 * (cross-memory attach, process_vm_readv), where the ring moves every
 * byte twice (into a shared-memory ring, out of it).  Open MPI's
 * shared-memory transport does the same.
 *   all-gather  each member reads the others' blocks into its output;
 *   all-reduce  each member sums its segment of every slice from the
 *               others' buffers (their values read into two cache-sized
 *               slices of scratch, added in the ring's order: the same
 *               bits as the ring), then reads their finished segments;
 *   reduce-scatter  each member sums its block from the others' inputs
 *               the same way, into its output.
 *
 * The members swap descriptors (pid, where the region is, its size) over
 * the ring, read, and swap outcomes over the ring again (the all-reduce
 * between its halves too): no member returns, or changes what another
 * reads, before every member has read it.  The first call checks that it
 * works at all: each member reads a random token every other one holds; a
 * pid that is not the member's (members in other PID namespaces) or no
 * permission to read it (the kernel's ptrace rules: Yama's ptrace_scope, a
 * seccomp profile) fails the check on some member, and then no member of
 * the communicator reads directly: the rings carry every call, as with
 * DTRAIN_COMM_TRANSPORT=ring.  Every later call checks the tokens again
 * once every member has entered it, so a member whose memory became
 * unreadable since (it made itself not dumpable, changed its credentials)
 * sends that call and the rest to the rings the same way, before any
 * buffer has changed.  A read refused after that check (a member turned
 * unreadable during the call, by another thread of it) sends the calls
 * after it to the rings, and this call too where no member's input has
 * changed yet (an all-gather, a reduce-scatter apart); an all-reduce or
 * a reduce-scatter in place has begun to overwrite its inputs with sums
 * by then, and fails on every member, as a read of a member gone (ESRCH)
 * does. */
#ifndef DTRAIN_COMM_CPU_CMA_H
#define DTRAIN_COMM_CPU_CMA_H

#include <stddef.h>

#include "cpu_comm.h"

/* Below this many bytes per member the ring's latency is lower (three
 * small all-gathers around the reads, the descriptors, the check and the
 * outcomes, cost a ring's worth each; an all-reduce has a fourth between
 * its halves).  At 256 KiB on 2 members an all-gather reads in 17-21 us,
 * the ring takes 27-33. */
#define CMA_MIN_BYTES (256u << 10)
/* The all-reduce's and the reduce-scatter's: a buffer is written again
 * by the next call (the all-reduce's, or the gradients a reduce-scatter
 * reads, written by the next backward), and where the others' reads left
 * its lines in their caches those writes wait for them to be taken back:
 * below about a core's L2 the ring, whose peers read only the shared
 * rings, is faster (dtrain-bench-collectives, all-reduce on 2 ranks:
 * 512 KiB per member 146-150 us against the ring's 128-131; 1 MiB about
 * even, 320-364 against 310-337; 4 MiB 815-871 against 1308-1353). */
#define CMA_REDUCE_MIN_BYTES (1u << 20)

/* The reduce-scatter apart writes its sums into a third buffer, whose
 * lines a plain store reads before it writes them (a write-allocate: a
 * third more memory traffic than in place, where the sums go to lines
 * just read); it streams them instead (reduce.h) when the call touches
 * more than the last-level cache holds, every member's block read and
 * this output written, (n + 1) x count floats: the output could not be
 * in the cache for whoever reads it next anyway (ZeRO-2's optimizer).
 * Measured on a Zen 4 VM, 64 MiB: busbw medians 4.30 GB/s plain, 5.81
 * streamed on 2 ranks, 3.04 and 3.57 on 4 (six alternated runs, doc/comm.md).
 * The all-gather apart copies this member's own block into its output
 * the same way past the cache (copy_bytes_streamed: glibc's memcpy would
 * stream it too, but decides by the cache size CPUID reports, which a VM
 * can misreport): 2 ranks 4.07 -> 4.94 GB/s busbw, 4 ranks 2.96 -> 3.17
 * (medians of six alternated runs).
 * cma_stream_min_bytes: that cache's size, the largest sysfs lists for
 * CPU 0, or CMA_STREAM_FALLBACK_BYTES where it lists none. */
#define CMA_STREAM_FALLBACK_BYTES (32u << 20)
size_t cma_stream_min_bytes(void);

/* Whether every member alike finds it usable for `each` bytes per
 * member: all on this host, the transport AUTO, at least min_bytes, not
 * found unusable. */
int cma_usable(const struct dtrain_comm *c, const struct cpu_comm *cc, size_t each, size_t min_bytes);

/* The all-gather of each bytes per member (in: this member's block, in
 * place or apart), where cma_usable(CMA_MIN_BYTES).  0, or the cause
 * (comm_fail has said why).  *used 0: not usable, or some member cannot
 * read another's memory, found before or during the reads (nothing
 * counted): the caller gathers over the ring. */
int cma_all_gather(struct dtrain_comm *c, struct cpu_comm *cc, const void *in, void *out, size_t each, int *used);

/* The all-reduce of buf[count] by direct reads, where cma_usable for
 * count / n floats per member and CMA_REDUCE_MIN_BYTES: each member
 * sums its segment of every slice (ring.h's layout) from the others'
 * values, in the ring's order (the same bits as the ring), then reads
 * their finished segments.  0 or the cause (comm_fail has said why);
 * *used 0: not usable, the caller runs the ring. */
int cma_allreduce(struct dtrain_comm *c, struct cpu_comm *cc, float *buf, size_t count, enum dtrain_reduce_op op,
                  int *used);

/* The reduce-scatter of in[n * count] into out[count] (in place: out is
 * in + rank * count; else apart) by direct reads, where cma_usable for
 * count floats and CMA_REDUCE_MIN_BYTES: this member's block of every
 * member's input summed in the ring's order (the same bits as the ring).
 * 0 or the cause; *used 0: not usable, or (apart) a read refused, the
 * caller runs the ring. */
int cma_reduce_scatter(struct dtrain_comm *c, struct cpu_comm *cc, const float *in, float *out, size_t count,
                       enum dtrain_reduce_op op, int *used);

#endif
