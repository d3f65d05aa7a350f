/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: kernel launches and the SIMT executor (standin.h,
 * include/standin_device.h).
 *
 * standin_launch checks the configuration as the real runtime does and
 * queues the launch on the stream.  On the stream's thread the blocks run
 * one after another in a seeded random order; a block's threads are fibers
 * on that thread.  A fiber runs until it reaches a barrier or returns, and
 * the next one is drawn at random among those that can run: between
 * barriers the threads' order is random (reshuffled at every step), so a
 * missing __syncthreads/__syncwarp or a wrong shuffle gives wrong results
 * for some seed, deterministically for a given seed.  When no thread can
 * run while some have not returned, the block is deadlocked: a device
 * fault, and the rest of the launch is skipped.
 *
 * Fibers switch with a few instructions of assembly on x86-64 (glibc's
 * swapcontext makes a system call per switch); ucontext elsewhere.  Their
 * stacks are allocated once per OS thread and reused, each with a guard
 * page below it so that an overflow faults instead of corrupting the next.
 * A fiber takes a stack when it first runs and gives it back when it
 * returns, so a kernel without barriers runs every thread on the same few
 * stacks, warm in the caches, instead of touching one per thread. */
#include "standin.h"

#include <standin_device.h>
#include <mma.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <vector>

/* -DSTANDIN_UCONTEXT tries the portable path on x86-64 */
#if defined(__x86_64__) && !defined(STANDIN_UCONTEXT)
#define STANDIN_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

/* Under AddressSanitizer (--enable-sanitizers) every switch is announced,
 * so that ASan knows which stack is live. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define STANDIN_ASAN 1
#endif

/* initial-exec: the library is loaded with the program, and every
 * threadIdx in a kernel reads this (no __tls_get_addr call per read) */
__thread standin_thread_ctx *standin_cur STANDIN_TLS_IE;

namespace {

constexpr size_t STACK_BYTES = 128 * 1024; /* per fiber; the flash kernels' frames are a few KiB */
constexpr unsigned MAX_THREADS = 1024;
constexpr size_t MAX_SHARED = 227 * 1024;  /* opt-in limit of sm_90 */
constexpr size_t DEFAULT_SHARED = 48 * 1024;

enum fiber_state { NOT_STARTED, RUNNABLE, AT_BLOCK, AT_WARP, EXITED };

struct fiber {
    standin_thread_ctx ctx;
#if defined(STANDIN_ASM_SWITCH)
    void *sp;
#else
    ucontext_t uc;
#endif
    char *stack_bottom;
    unsigned stack;            /* its index in tl_stacks, while it runs */
    fiber_state state;
    unsigned mask;             /* at a warp barrier: the lanes it waits for */
    standin_collective_fn fn;  /* and what it does there */
    void *arg;
};

/* A warp's lanes as bit masks, kept up to date so that an arrival costs
 * O(1) until the barrier can open. */
struct warp_state {
    unsigned waiting; /* at a warp barrier */
    unsigned gone;    /* exited, or beyond the block's last thread */
    unsigned partial; /* waiting with a mask other than the full warp */
};

/* The block running on this OS thread. */
struct block_state {
    std::vector<fiber> fibers;
    std::vector<warp_state> warps;
    std::vector<unsigned> runq; /* runnable fibers, drawn at random */
    std::vector<unsigned> free_stacks; /* indices into tl_stacks, the last one taken first */
    unsigned n = 0, live = 0, at_block = 0;
    uint64_t rng = 0;
    fiber *cur = nullptr;
    const std::function<void()> *body = nullptr;
    const void *func = nullptr;
    bool aborted = false;
    unsigned char *dyn = nullptr;
    unsigned char garbage = 0xff;
    std::vector<void *> shared_fresh; /* static __shared__ filled in this block */
    const void *sched_bottom = nullptr; /* the scheduler's stack, for ASan */
    size_t sched_size = 0;
#if defined(STANDIN_ASM_SWITCH)
    void *sched_sp = nullptr;
#else
    ucontext_t sched_uc;
#endif
};
__thread block_state *tl_block STANDIN_TLS_IE;

/* The stacks of this OS thread's fibers, grown to the largest block seen. */
struct stack_pool {
    char *base = nullptr;
    size_t count = 0, page = 0;
    ~stack_pool()
    {
        if (base != nullptr)
            munmap(base, count * (STACK_BYTES + page));
    }
    bool ensure(size_t n)
    {
        if (n <= count)
            return true;
        if (page == 0)
            page = (size_t)sysconf(_SC_PAGESIZE);
        if (base != nullptr)
            munmap(base, count * (STACK_BYTES + page));
        base = nullptr;
        count = 0;
        size_t each = STACK_BYTES + page, bytes = n * each;
        void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return false;
        base = (char *)p;
        count = n;
        for (size_t i = 0; i < n; i++)
            mprotect(base + i * each, page, PROT_NONE); /* the guard under stack i */
        return true;
    }
    char *top(size_t i) const { return base + (i + 1) * (STACK_BYTES + page); }
};
thread_local stack_pool tl_stacks;

std::atomic<uint64_t> launch_counter{0};

} // namespace

/* ---------------------------------------------------------------- switching */

extern "C" __attribute__((visibility("hidden"))) void standin_fiber_entry(fiber *f);

#if defined(STANDIN_ASM_SWITCH)
extern "C" __attribute__((visibility("hidden"))) void standin_ctx_switch(void **save_sp, void *to_sp);
extern "C" __attribute__((visibility("hidden"))) void standin_fiber_trampoline(void);
/* Saves the callee-saved registers, MXCSR and the x87 control word on the
 * current stack, stores the stack pointer in *save_sp, and resumes the
 * context saved at to_sp.  A new fiber's stack is laid out as if it had
 * switched away just before standin_fiber_trampoline, with the fiber in r12. */
asm(R"(
    .text
    .globl standin_ctx_switch
    .hidden standin_ctx_switch
    .type standin_ctx_switch, @function
standin_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size standin_ctx_switch, .-standin_ctx_switch

    .globl standin_fiber_trampoline
    .hidden standin_fiber_trampoline
    .type standin_fiber_trampoline, @function
standin_fiber_trampoline:
    movq %r12, %rdi
    call standin_fiber_entry
    ud2
    .size standin_fiber_trampoline, .-standin_fiber_trampoline
)");

/* The scheduler's MXCSR and x87 control word, which a new fiber starts
 * with (read once a block: fnstcw is slow) */
static uint64_t fiber_fp_control(void)
{
    uint32_t csr;
    uint16_t cw;
    __asm__ volatile("stmxcsr %0" : "=m"(csr));
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    return (uint64_t)csr | ((uint64_t)cw << 32);
}
static void fiber_init(fiber *f, char *top, uint64_t fp_control)
{
    uintptr_t t = (uintptr_t)top & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(t - 80); /* after the switch's ret, rsp = t - 16: aligned for the call */
    sp[0] = fp_control;
    sp[1] = sp[2] = sp[3] = 0; /* r15 r14 r13 */
    sp[4] = (uint64_t)f;       /* r12 */
    sp[5] = sp[6] = 0;         /* rbx rbp */
    sp[7] = (uint64_t)(uintptr_t)&standin_fiber_trampoline;
    f->sp = sp;
}
static inline void raw_to_fiber(block_state *b, fiber *f) { standin_ctx_switch(&b->sched_sp, f->sp); }
static inline void raw_to_sched(block_state *b, fiber *f) { standin_ctx_switch(&f->sp, b->sched_sp); }
#else
static void fiber_start(unsigned hi, unsigned lo)
{
    standin_fiber_entry((fiber *)(((uintptr_t)hi << 32) | lo));
}
static uint64_t fiber_fp_control(void) { return 0; }
static void fiber_init(fiber *f, char *top, uint64_t)
{
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = top - STACK_BYTES;
    f->uc.uc_stack.ss_size = STACK_BYTES;
    f->uc.uc_link = nullptr;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)())fiber_start, 2, (unsigned)(p >> 32), (unsigned)p);
}
static inline void raw_to_fiber(block_state *b, fiber *f) { swapcontext(&b->sched_uc, &f->uc); }
static inline void raw_to_sched(block_state *b, fiber *f) { swapcontext(&f->uc, &b->sched_uc); }
#endif

static inline void switch_to_fiber(block_state *b, fiber *f)
{
#ifdef STANDIN_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack_bottom, STACK_BYTES);
    raw_to_fiber(b, f);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    raw_to_fiber(b, f);
#endif
}

/* exiting: the fiber's frames are not coming back */
static inline void switch_to_sched(block_state *b, fiber *f, bool exiting = false)
{
#ifdef STANDIN_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, b->sched_bottom, b->sched_size);
    raw_to_sched(b, f);
    __sanitizer_finish_switch_fiber(fake, &b->sched_bottom, &b->sched_size);
#else
    (void)exiting;
    raw_to_sched(b, f);
#endif
}

/* ---------------------------------------------------------------- barriers */

static void make_runnable(block_state *b, fiber *f)
{
    f->state = RUNNABLE;
    b->runq.push_back((unsigned)(f - b->fibers.data()));
}

static void block_fault(block_state *b, cudaError_t e, const char *what)
{
    if (b->aborted)
        return;
    b->aborted = true;
    const uint3 &bi = b->fibers[0].ctx.block_idx;
    standin_device_fault(e, "%s in block (%u,%u,%u) of kernel %p", what, bi.x, bi.y, bi.z, b->func);
}

/* Releases the lanes of warp w whose masks are satisfied: every lane of the
 * mask waits at a warp barrier or has exited (or does not exist: a partial
 * last warp).  Their collectives run first, each once with the lanes that
 * arrived with it. */
static void try_release_warp(block_state *b, unsigned w)
{
    warp_state &ws = b->warps[w];
    unsigned ok = ws.waiting | ws.gone, rel = 0;
    if (ws.waiting == 0 || (ws.partial == 0 && ok != ~0u))
        return; /* the usual case: full masks, not every lane there yet */
    fiber *lanes = &b->fibers[w * 32];
    if (ok == ~0u) {
        rel = ws.waiting;
    } else {
        for (unsigned l = 0; l < 32; l++)
            if ((ws.partial >> l & 1u) && (lanes[l].mask & ~ok) == 0)
                rel |= 1u << l;
        if (rel == 0)
            return;
    }
    ws.waiting &= ~rel;
    ws.partial &= ~rel;
    unsigned done = 0;
    for (unsigned l = 0; l < 32; l++) {
        if (!(rel >> l & 1u) || (done >> l & 1u) || lanes[l].fn == nullptr)
            continue;
        standin_collective_fn fn = lanes[l].fn;
        void *args[32];
        for (unsigned m = 0; m < 32; m++) {
            bool with = (rel >> m & 1u) && lanes[m].fn == fn;
            args[m] = with ? lanes[m].arg : nullptr;
            if (with)
                done |= 1u << m;
        }
        const char *err = fn(args);
        if (err != nullptr)
            block_fault(b, cudaErrorIllegalInstruction, err);
    }
    for (unsigned l = 0; l < 32; l++)
        if (rel >> l & 1u)
            make_runnable(b, &lanes[l]);
}

static void try_release_block(block_state *b)
{
    if (b->live == 0 || b->at_block != b->live)
        return;
    for (fiber &f : b->fibers)
        if (f.state == AT_BLOCK)
            make_runnable(b, &f);
    b->at_block = 0;
}

void standin_syncthreads(void)
{
    block_state *b = tl_block;
    fiber *f = b->cur;
    f->state = AT_BLOCK;
    b->at_block++;
    try_release_block(b);
    switch_to_sched(b, f); /* even when released at once: the next thread is drawn anew */
}

void standin_warp_collective(unsigned mask, standin_collective_fn fn, void *arg)
{
    block_state *b = tl_block;
    fiber *f = b->cur;
    if (!(mask >> f->ctx.lane & 1u))
        standin_thread_fault(cudaErrorIllegalInstruction, "warp operation with mask %#x not naming the calling lane %u",
                             mask, f->ctx.lane);
    f->state = AT_WARP;
    f->mask = mask;
    f->fn = fn;
    f->arg = arg;
    warp_state &ws = b->warps[f->ctx.linear / 32];
    ws.waiting |= 1u << f->ctx.lane;
    if (mask != 0xffffffffu)
        ws.partial |= 1u << f->ctx.lane;
    try_release_warp(b, f->ctx.linear / 32);
    switch_to_sched(b, f);
}

unsigned standin_active_mask(void)
{
    block_state *b = tl_block;
    fiber *f = b->cur;
    unsigned first = f->ctx.linear / 32 * 32, m = 0;
    for (unsigned l = 0; l < 32 && first + l < b->n; l++)
        if (b->fibers[first + l].state != EXITED)
            m |= 1u << l;
    return m;
}

void *standin_dynamic_shared(void) { return tl_block->dyn; }

void standin_shared_fresh(void *p, size_t bytes)
{
    block_state *b = tl_block;
    if (b == nullptr)
        return; /* not in a kernel */
    for (void *q : b->shared_fresh)
        if (q == p)
            return;
    b->shared_fresh.push_back(p);
    memset(p, b->garbage, bytes);
}

void standin_thread_fault(cudaError_t e, const char *fmt, ...)
{
    block_state *b = tl_block;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const standin_thread_ctx &c = b->cur->ctx;
    if (!b->aborted) {
        b->aborted = true;
        standin_device_fault(e, "%s (thread (%u,%u,%u) of block (%u,%u,%u) of kernel %p)", msg, c.thread_idx.x,
                             c.thread_idx.y, c.thread_idx.z, c.block_idx.x, c.block_idx.y, c.block_idx.z, b->func);
    }
    switch_to_sched(b, b->cur, true); /* never resumed */
    abort();
}

/* Lanes whose source did not take part read garbage, as in CUDA. */
const char *standin_shfl_collect(void *const lanes[32])
{
    for (unsigned l = 0; l < 32; l++) {
        if (lanes[l] == nullptr)
            continue;
        standin_shfl_arg *a = static_cast<standin_shfl_arg *>(lanes[l]);
        unsigned src = (unsigned)a->src;
        a->result = src < 32 && lanes[src] != nullptr ? static_cast<standin_shfl_arg *>(lanes[src])->value
                                                      : 0xdeadbeefdeadbeefull;
    }
    return nullptr;
}

const char *standin_vote_collect(void *const lanes[32])
{
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; l++)
        if (lanes[l] != nullptr && static_cast<standin_vote_arg *>(lanes[l])->pred)
            ballot |= 1u << l;
    for (unsigned l = 0; l < 32; l++)
        if (lanes[l] != nullptr)
            static_cast<standin_vote_arg *>(lanes[l])->result = ballot;
    return nullptr;
}

const char *nvcuda::wmma::standin::mem_collect(void *const lanes[32])
{
    const mem_arg *a0 = static_cast<const mem_arg *>(lanes[0]);
    for (unsigned l = 0; l < 32; l++) {
        const mem_arg *a = static_cast<const mem_arg *>(lanes[l]);
        if (a == nullptr)
            return "wmma load/store: not every lane of the warp took part";
        if (a->ptr != a0->ptr || a->ldm != a0->ldm)
            return "wmma load/store: the lanes of the warp passed different pointers or ldm";
    }
    return nullptr;
}

/* ---------------------------------------------------------------- running */

extern "C" void standin_fiber_entry(fiber *f)
{
    block_state *b = tl_block;
#ifdef STANDIN_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b->sched_bottom, &b->sched_size);
#endif
    (*b->body)();
    f->state = EXITED;
    b->live--;
    b->warps[f->ctx.linear / 32].gone |= 1u << f->ctx.lane;
    try_release_warp(b, f->ctx.linear / 32);
    try_release_block(b);
    switch_to_sched(b, f, true);
    abort(); /* never resumed */
}

static void run_block(block_state *b)
{
    b->runq.clear();
    b->free_stacks.clear();
    const uint64_t fp_control = fiber_fp_control();
    for (unsigned i = 0; i < b->n; i++) {
        fiber *f = &b->fibers[i];
        f->state = NOT_STARTED;
        f->fn = nullptr;
        f->arg = nullptr;
        f->mask = 0;
        b->runq.push_back(i);
        b->free_stacks.push_back(b->n - 1 - i);
    }
    b->live = b->n;
    b->at_block = 0;
    b->shared_fresh.clear();
    for (size_t w = 0; w < b->warps.size(); w++) {
        unsigned nl = b->n - (unsigned)w * 32;
        b->warps[w] = warp_state{0u, nl >= 32 ? 0u : ~0u << nl, 0u};
    }
    while (b->live > 0 && !b->aborted) {
        if (b->runq.empty()) {
            unsigned at_block = 0, at_warp = 0;
            for (const fiber &f : b->fibers) {
                at_block += f.state == AT_BLOCK;
                at_warp += f.state == AT_WARP;
            }
            char what[160];
            snprintf(what, sizeof what, "barrier deadlock (%u threads at __syncthreads, %u at warp barriers)",
                     at_block, at_warp);
            block_fault(b, cudaErrorIllegalInstruction, what);
            break;
        }
        /* a uniform index by multiplication: no division per switch */
        size_t k = (size_t)(((unsigned __int128)standin_rand(&b->rng) * b->runq.size()) >> 64);
        fiber *f = &b->fibers[b->runq[k]];
        b->runq[k] = b->runq.back();
        b->runq.pop_back();
        if (f->state == NOT_STARTED) {
            unsigned s = b->free_stacks.back(); /* never empty: at most n fibers hold one */
            b->free_stacks.pop_back();
            f->stack = s;
            f->stack_bottom = tl_stacks.top(s) - STACK_BYTES;
#ifdef STANDIN_ASAN
            /* frames of a fiber abandoned in an earlier block may still be poisoned */
            ASAN_UNPOISON_MEMORY_REGION(f->stack_bottom, STACK_BYTES);
#endif
            fiber_init(f, tl_stacks.top(s), fp_control);
            f->state = RUNNABLE;
        }
        b->cur = f;
        standin_cur = &f->ctx;
        switch_to_fiber(b, f);
        standin_cur = nullptr;
        b->cur = nullptr;
        if (f->state == EXITED)
            b->free_stacks.push_back(f->stack);
    }
}

namespace {

struct launch {
    const void *func;
    dim3 grid, block;
    size_t shared_bytes;
    uint64_t seed;
    std::function<void()> body;
};

/* A permutation of [0, n): Fisher-Yates up to 4M blocks, beyond that an
 * affine map with a multiplier prime to n (no memory for huge grids). */
struct block_order {
    std::vector<uint32_t> perm;
    uint64_t n, a = 1, c = 0;
    block_order(uint64_t count, uint64_t *rng) : n(count)
    {
        if (n <= (1u << 22)) {
            perm.resize(n);
            for (uint64_t i = 0; i < n; i++)
                perm[i] = (uint32_t)i;
            for (uint64_t i = n; i > 1; i--) {
                uint64_t j = standin_rand(rng) % i;
                std::swap(perm[i - 1], perm[j]);
            }
        } else {
            c = standin_rand(rng) % n;
            for (a = standin_rand(rng) % n | 1; gcd(a, n) != 1; a += 2)
                ;
        }
    }
    static uint64_t gcd(uint64_t x, uint64_t y) { return y == 0 ? x : gcd(y, x % y); }
    uint64_t operator[](uint64_t i) const
    {
        return perm.empty() ? (uint64_t)(((unsigned __int128)a * i + c) % n) : perm[i];
    }
};

void run_launch(launch &L)
{
    unsigned nthreads = L.block.x * L.block.y * L.block.z;
    if (!tl_stacks.ensure(nthreads)) {
        standin_device_fault(cudaErrorLaunchOutOfResources, "cannot map the stacks of %u fibers", nthreads);
        return;
    }
    uint64_t rng = L.seed;
    /* dynamic shared memory: 128-byte aligned, fresh garbage per block
     * (NaN bits, a large float or a small one, chosen per launch) */
    static const unsigned char patterns[] = {0xff, 0x7e, 0xa5};
    unsigned char garbage = patterns[standin_rand(&rng) % 3];
    size_t dyn_bytes = (L.shared_bytes + 127) & ~(size_t)127;
    std::unique_ptr<unsigned char, void (*)(void *)> dyn((unsigned char *)aligned_alloc(128, dyn_bytes ? dyn_bytes : 128),
                                                        free);
    block_state b;
    b.fibers.resize(nthreads);
    b.warps.resize((nthreads + 31) / 32);
    b.runq.reserve(nthreads);
    b.free_stacks.reserve(nthreads);
    b.body = &L.body;
    b.func = L.func;
    b.n = nthreads;
    b.dyn = dyn.get();
    b.garbage = garbage;
    b.rng = standin_rand(&rng);
    for (unsigned i = 0; i < nthreads; i++) {
        standin_thread_ctx &c = b.fibers[i].ctx;
        c.thread_idx = uint3{i % L.block.x, i / L.block.x % L.block.y, i / (L.block.x * L.block.y)};
        c.block_dim = L.block;
        c.grid_dim = L.grid;
        c.linear = i;
        c.lane = i % 32;
    }
    uint64_t nblocks = (uint64_t)L.grid.x * L.grid.y * L.grid.z;
    block_order order(nblocks, &rng);
    block_state *saved = tl_block;
    tl_block = &b;
    for (uint64_t i = 0; i < nblocks && !b.aborted; i++) {
        uint64_t id = order[i];
        uint3 bi = {(unsigned)(id % L.grid.x), (unsigned)(id / L.grid.x % L.grid.y),
                    (unsigned)(id / ((uint64_t)L.grid.x * L.grid.y))};
        for (fiber &f : b.fibers)
            f.ctx.block_idx = bi;
        memset(b.dyn, garbage, L.shared_bytes);
        run_block(&b);
    }
    tl_block = saved;
}

} // namespace

void standin_launch(const void *func, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                    std::function<void()> body)
{
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (threads == 0 || threads > MAX_THREADS || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
        grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        standin_set_last_error(cudaErrorInvalidConfiguration);
        return;
    }
    /* Too much dynamic shared memory is "invalid argument" on the real
     * runtime: over 48 KiB without the function's opt-in
     * (cudaFuncAttributeMaxDynamicSharedMemorySize), over 227 KiB ever. */
    size_t limit = func != nullptr ? standin_func_max_dynamic_shared(func) : DEFAULT_SHARED;
    if (shared_bytes > limit || shared_bytes > MAX_SHARED) {
        standin_set_last_error(cudaErrorInvalidValue);
        return;
    }
    auto L = std::make_shared<launch>();
    L->func = func;
    L->grid = grid;
    L->block = block;
    L->shared_bytes = shared_bytes;
    uint64_t state = standin_seed() ^ (0x9e3779b97f4a7c15ull * (launch_counter.fetch_add(1) + 1));
    L->seed = standin_rand(&state);
    L->body = std::move(body);
    cudaError_t e = standin_enqueue(stream, [L] { run_launch(*L); });
    if (e != cudaSuccess)
        standin_set_last_error(e);
}
