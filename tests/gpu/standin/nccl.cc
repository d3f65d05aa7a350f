/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: NCCL across the processes of one machine, through POSIX
 * shared memory (include/nccl.h is the API; standin.h the runtime it runs
 * on).  Faithful to the real library where defects hide:
 *
 * - A non-blocking communicator (config.blocking = 0) returns ncclInProgress
 *   from init and split always, and from a collective or group always the
 *   first time per kind and otherwise with a seeded probability of 1/2.
 *   Such an operation is NOT on the stream yet: it is queued when
 *   ncclCommGetAsyncError says ncclSuccess (after 0..2 more ncclInProgress
 *   answers) or when a short seeded delay (5..50 ms) has passed, whichever
 *   comes first.  An event recorded right after the call can complete
 *   before the collective ran.  Any other call on the communicator while
 *   it is in progress fails as the real ncclCommEnsureReady does
 *   (ncclInvalidArgument, "Attempt to use communicator before the previous
 *   operation returned ncclSuccess").
 * - Collectives run on the stream's thread (standin_enqueue), where the
 *   ranks meet; buffers must be device memory (a host pointer faults the
 *   device, as the real kernel's illegal address does).
 * - Two ranks of one communicator on one physical device: init/split fail
 *   with ncclInvalidUsage on every rank ("Duplicate GPU detected ...").
 * - ncclCommAbort is local and immediate; a rank waiting on a peer that
 *   aborted, faulted, destroyed its communicator or died gets
 *   ncclRemoteError / ncclSystemError as its async error instead of
 *   hanging (and gives up after 10 minutes in any case).
 * - ncclAvg: floating types pre-multiply by 1/nranks then sum, integers
 *   sum then divide, as the real library; every rank reduces in rank order,
 *   so all get bit-identical results.
 *
 * Shared segment (one per communicator, created by the first rank to
 * arrive, unlinked once all have attached): a header with per-rank words,
 * one 4 MiB slot per rank for collectives (a collective is a sequence of
 * steps: post into the own slot, all posted, read the others', all read),
 * and a mailbox per ordered pair for send/recv.  Waits are futexes on one
 * "bell" word bumped on every change, with 100 ms slices for the abort
 * flags and peer liveness. */
#include <nccl.h>

#include "standin.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace {

constexpr int kMaxRanks = 256;
constexpr size_t kSlotBytes = size_t(4) << 20; /* per rank, collectives */
constexpr size_t kMboxMax = size_t(1) << 20;   /* per ordered pair, send/recv */
constexpr size_t kMboxMin = size_t(64) << 10;
constexpr size_t kMboxTotal = size_t(256) << 20; /* keep n*n mailboxes bounded */
constexpr size_t kPage = 4096;
constexpr uint32_t kMagic = 0x6e63636c;
constexpr int kSliceMs = 100;        /* futex wait slice: abort flags, peers */
constexpr int64_t kGiveUpMs = 600000; /* the last resort: nobody waits longer */
constexpr char kPrefix[] = "/dtrain-standin-nccl-";
/* internal: the waiting rank's own communicator was aborted */
constexpr ncclResult_t kAborted = ncclResult_t(100);

enum : uint32_t { kHere = 0, kGoneAbort = 1, kGoneDestroy = 2, kGoneFault = 3 };
enum Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kGroup, kKinds };

/* ------------------------------------------------------------ shared layout */

struct RankInfo {
    std::atomic<int32_t> pid;         /* 0 until the rank attached */
    std::atomic<uint32_t> gone;       /* kGone*: peers stop waiting for it */
    std::atomic<uint32_t> phase;      /* collective steps: 2k-1 posted, 2k read */
    std::atomic<uint32_t> split_seq;  /* the last split whose color/key are published */
    int64_t bus_id;
    int32_t split_color[2], split_key[2]; /* by split_seq parity */
    uint64_t host_hash;                   /* with bus_id: the GPU's identity */
    char pad[16];
};

struct Mailbox {
    std::atomic<uint32_t> sent;  /* chunks posted by the sender */
    std::atomic<uint32_t> taken; /* chunks consumed by the receiver */
    std::atomic<uint64_t> len;   /* bytes of the chunk in the box */
};

struct Header {
    std::atomic<uint32_t> magic; /* stored last by the creator */
    std::atomic<uint32_t> bell;  /* futex word: bumped on every change */
    std::atomic<uint32_t> attached;
    int32_t nranks;
    uint64_t total_bytes, mbox_bytes;
    RankInfo rank[kMaxRanks];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "process-shared atomics");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "process-shared atomics");

size_t round_page(size_t n)
{
    return (n + kPage - 1) / kPage * kPage;
}

struct Layout {
    size_t mboxes, slots, mdata, total, mbox_bytes;
};

Layout layout_of(int n)
{
    Layout l;
    size_t pairs = size_t(n) * size_t(n);
    l.mbox_bytes = std::max(kMboxMin, std::min(kMboxMax, kMboxTotal / pairs / kPage * kPage));
    l.mboxes = round_page(sizeof(Header));
    l.slots = l.mboxes + round_page(pairs * sizeof(Mailbox));
    l.mdata = l.slots + size_t(n) * kSlotBytes;
    l.total = l.mdata + pairs * l.mbox_bytes;
    return l;
}

/* ------------------------------------------------------------ errors */

std::mutex g_err_mu;
char g_last_error[1024] = "";

bool verbose()
{
    static const bool v = [] {
        const char *d = getenv("NCCL_DEBUG"), *s = getenv("DTRAIN_STANDIN_VERBOSE");
        return (d != nullptr && (strcasecmp(d, "WARN") == 0 || strcasecmp(d, "INFO") == 0 ||
                                 strcasecmp(d, "TRACE") == 0)) ||
               (s != nullptr && strcmp(s, "1") == 0);
    }();
    return v;
}

/* As the real WARN: the message ncclGetLastError returns (process-wide, as
 * the real one), on stderr with NCCL_DEBUG=WARN. */
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::lock_guard<std::mutex> lk(g_err_mu);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    if (verbose())
        fprintf(stderr, "gpu-standin: nccl: %d: %s\n", (int)getpid(), g_last_error);
}

int64_t now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, long(ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
}

void futex_wait(std::atomic<uint32_t> *w, uint32_t v, int ms)
{
    struct timespec ts = {ms / 1000, long(ms % 1000) * 1000000L};
    /* not FUTEX_PRIVATE: the word is shared between processes */
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(w), FUTEX_WAIT, v, &ts, nullptr, 0);
}

void ring(Header *h)
{
    h->bell.fetch_add(1, std::memory_order_acq_rel);
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&h->bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

/* A zombie still answers kill(pid, 0): /proc tells it is dead. */
bool pid_alive(pid_t p)
{
    if (kill(p, 0) != 0 && errno == ESRCH)
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
    FILE *f = fopen(path, "r");
    if (f == nullptr)
        return errno != ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close = strrchr(buf, ')');
    return close == nullptr || close[1] == '\0' || (close[2] != 'Z' && close[2] != 'X');
}

/* ------------------------------------------------------------ communicator */

struct Op {
    Kind kind; /* kGroup: send (peer >= 0, send) or recv */
    bool is_send;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root; /* broadcast root, or send/recv peer */
    cudaStream_t stream;
};

struct CommState {
    int rank = 0, nranks = 0, device = 0, phys = 0;
    int64_t bus_id = 0;
    uint64_t host_hash = 0;
    bool blocking = true;
    std::string shm_name;
    /* the mapping: set before `registered` (release) */
    char *base = nullptr;
    size_t bytes = 0;
    Header *h = nullptr;
    Layout lay{};
    std::atomic<int> registered{0};
    std::atomic<int> abort{0};
    std::atomic<int> async_err{ncclSuccess};
    std::atomic<int> ready{0};    /* init/split finished (either way) */
    std::atomic<int> busy{0};     /* a split of this (parent) is exchanging colors */
    std::atomic<int> inflight{0}; /* items queued on streams, not finished */
    std::atomic<int> finalizing{0};
    uint32_t step = 0;            /* collective steps (stream threads, in order) */
    uint32_t split_seq = 0;       /* host side, calls in order */
    std::mutex mu;                /* guards the pending operation and rng */
    std::mutex run_mu;            /* one item at a time (items on two streams) */
    bool has_pending = false;
    std::function<void()> pending;
    cudaStream_t pending_stream = nullptr;
    int polls_left = 0;
    uint64_t pending_id = 0;
    uint64_t rng = 0;
    unsigned kinds_seen = 0;

    ~CommState()
    {
        if (base != nullptr)
            munmap(base, bytes);
    }
    char *slot(int r) const { return base + lay.slots + size_t(r) * kSlotBytes; }
    Mailbox *mbox(int src, int dst) const
    {
        return reinterpret_cast<Mailbox *>(base + lay.mboxes) + size_t(src) * size_t(nranks) + size_t(dst);
    }
    char *mdata(int src, int dst) const
    {
        return base + lay.mdata + (size_t(src) * size_t(nranks) + size_t(dst)) * lay.mbox_bytes;
    }
};

} // namespace

/* The handle the application holds: a tombstone after abort/destroy (never
 * freed, so a late call is a clean ncclInvalidUsage, not a crash). */
struct ncclComm {
    std::shared_ptr<CommState> s;
    bool dead = false;
};

namespace {

std::atomic<uint64_t> g_comm_index{0};

/* Live communicators, for the exit: a process that leaves without
 * destroying them aborts them, so that its stream threads (which the
 * runtime waits for at exit) stop waiting on peers at once. */
std::mutex g_live_mu;
std::vector<std::weak_ptr<CommState>> *g_live;

void abort_all_at_exit();

void track(const std::shared_ptr<CommState> &s)
{
    std::lock_guard<std::mutex> lk(g_live_mu);
    if (g_live == nullptr) {
        g_live = new std::vector<std::weak_ptr<CommState>>; /* never freed: used at exit */
        /* after the runtime's own handler, so this runs first */
        atexit(abort_all_at_exit);
    }
    g_live->erase(std::remove_if(g_live->begin(), g_live->end(),
                                 [](const std::weak_ptr<CommState> &w) { return w.expired(); }),
                  g_live->end());
    g_live->push_back(s);
}

/* Leave the communicator: peers waiting for this rank stop waiting. */
void mark_gone(CommState &s, uint32_t how)
{
    if (s.registered.load(std::memory_order_acquire)) {
        uint32_t here = kHere;
        s.h->rank[s.rank].gone.compare_exchange_strong(here, how);
        ring(s.h);
    }
}

/* The first error of the communicator sticks; peers learn it is broken. */
void set_async_error(CommState &s, ncclResult_t r)
{
    int ok = ncclSuccess;
    s.async_err.compare_exchange_strong(ok, r);
    mark_gone(s, kGoneFault);
}

/* Wait until pred() holds, watching the peers in `peers` (all when empty):
 * ncclSuccess, kAborted (this rank's abort), ncclRemoteError (a peer left
 * the communicator), ncclSystemError (a peer died, or the last-resort
 * timeout), with a message set. */
template <class Pred>
ncclResult_t wait_until(CommState &s, Pred pred, const std::vector<int> &peers, const char *what)
{
    Header *h = s.h;
    int64_t start = now_ms(), checked = start;
    int n = peers.empty() ? s.nranks : int(peers.size());
    for (;;) {
        uint32_t v = h->bell.load(std::memory_order_acquire);
        if (pred())
            return ncclSuccess;
        if (s.abort.load(std::memory_order_acquire))
            return kAborted;
        int64_t t = now_ms();
        bool slow = t - checked >= kSliceMs;
        if (slow)
            checked = t;
        for (int i = 0; i < n; i++) {
            int q = peers.empty() ? i : peers[size_t(i)];
            if (q == s.rank)
                continue;
            uint32_t g = h->rank[q].gone.load(std::memory_order_acquire);
            pid_t pid = h->rank[q].pid.load(std::memory_order_acquire);
            if (g == kHere && !(slow && pid > 0 && !pid_alive(pid)))
                continue;
            if (pred()) /* it finished its part before it left */
                return ncclSuccess;
            if (g != kHere) {
                warn("%s: rank %d (pid %d) %s", what, q, (int)pid,
                     g == kGoneAbort ? "aborted its communicator" :
                     g == kGoneDestroy ? "destroyed its communicator" : "failed");
                return ncclRemoteError;
            }
            warn("%s: rank %d (pid %d) is gone (the process exited)", what, q, (int)pid);
            return ncclSystemError;
        }
        if (t - start > kGiveUpMs) {
            warn("%s: no progress for %lld s (a peer stuck, or calling something else)", what,
                 (long long)(kGiveUpMs / 1000));
            return ncclSystemError;
        }
        futex_wait(&h->bell, v, kSliceMs);
    }
}

bool reached(uint32_t value, uint32_t target)
{
    return int32_t(value - target) >= 0;
}

void abort_all_at_exit()
{
    std::lock_guard<std::mutex> lk(g_live_mu);
    for (auto &w : *g_live)
        if (auto s = w.lock()) {
            s->abort.store(1, std::memory_order_release);
            mark_gone(*s, kGoneAbort);
        }
}

/* ------------------------------------------------------------ data types */

float half_to_float(uint16_t h)
{
    uint32_t sign = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        float f = std::ldexp(float(m), -24);
        return (h & 0x8000) ? -f : f;
    }
    if (e == 31)
        u = sign | 0x7f800000u | (m << 13);
    else
        u = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t float_to_half(float f) /* round to nearest even */
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = uint16_t((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u)
        return uint16_t(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 : 0));
    if (x >= 0x477ff000u) /* 65520 and above round to infinity */
        return uint16_t(sign | 0x7c00);
    if (x < 0x38800000u) { /* below 2^-14: a subnormal half */
        float a;
        memcpy(&a, &x, sizeof a);
        return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
    }
    uint32_t e = x - 0x38000000u;
    e += 0xfffu + ((e >> 13) & 1);
    return uint16_t(sign | (e >> 13));
}

float bf16_to_float(uint16_t b)
{
    uint32_t u = uint32_t(b) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return uint16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return uint16_t(u >> 16);
}

size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0; /* fp8 and unknown: refused */
    }
}

template <class T> T combine(T a, T b, ncclRedOp_t op)
{
    if constexpr (std::is_integral<T>::value) {
        using U = typename std::make_unsigned<T>::type; /* wraps, as the GPU does */
        switch (op) {
        case ncclProd: return T(U(a) * U(b));
        case ncclMax: return a > b ? a : b;
        case ncclMin: return a < b ? a : b;
        default: return T(U(a) + U(b));
        }
    } else {
        switch (op) {
        case ncclProd: return a * b;
        case ncclMax: return std::fmax(a, b);
        case ncclMin: return std::fmin(a, b);
        default: return a + b;
        }
    }
}

/* out[i] = in[0][i] op in[1][i] op ... in rank order (every rank the same). */
template <class T> void reduce_native(void *out, char *const *in, size_t n, int nranks, ncclRedOp_t op)
{
    T *o = static_cast<T *>(out);
    for (size_t i = 0; i < n; i++) {
        T v[1];
        memcpy(v, in[0] + i * sizeof(T), sizeof(T));
        T acc = v[0];
        if constexpr (!std::is_integral<T>::value)
            if (op == ncclAvg)
                acc = acc * (T(1) / T(nranks)); /* PreMulSum, as the real library */
        for (int q = 1; q < nranks; q++) {
            memcpy(v, in[q] + i * sizeof(T), sizeof(T));
            T x = v[0];
            if constexpr (!std::is_integral<T>::value)
                if (op == ncclAvg)
                    x = x * (T(1) / T(nranks));
            acc = combine(acc, x, op);
        }
        if constexpr (std::is_integral<T>::value)
            if (op == ncclAvg)
                acc = T(acc / T(nranks)); /* SumPostDiv */
        memcpy(o + i, &acc, sizeof acc);
    }
}

/* fp16/bf16: every operation rounds back to 16 bits, as __hadd does. */
template <float (*load)(uint16_t), uint16_t (*store)(float)>
void reduce_16(void *out, char *const *in, size_t n, int nranks, ncclRedOp_t op)
{
    float scale = load(store(1.0f / float(nranks)));
    for (size_t i = 0; i < n; i++) {
        uint16_t v;
        memcpy(&v, in[0] + 2 * i, 2);
        uint16_t acc = v;
        if (op == ncclAvg)
            acc = store(load(acc) * scale);
        for (int q = 1; q < nranks; q++) {
            memcpy(&v, in[q] + 2 * i, 2);
            if (op == ncclAvg)
                v = store(load(v) * scale);
            acc = store(combine(load(acc), load(v), op));
        }
        memcpy(static_cast<char *>(out) + 2 * i, &acc, 2);
    }
}

void reduce(ncclDataType_t t, void *out, char *const *in, size_t n, int nranks, ncclRedOp_t op)
{
    switch (t) {
    case ncclInt8: reduce_native<int8_t>(out, in, n, nranks, op); break;
    case ncclUint8: reduce_native<uint8_t>(out, in, n, nranks, op); break;
    case ncclInt32: reduce_native<int32_t>(out, in, n, nranks, op); break;
    case ncclUint32: reduce_native<uint32_t>(out, in, n, nranks, op); break;
    case ncclInt64: reduce_native<int64_t>(out, in, n, nranks, op); break;
    case ncclUint64: reduce_native<uint64_t>(out, in, n, nranks, op); break;
    case ncclFloat32: reduce_native<float>(out, in, n, nranks, op); break;
    case ncclFloat64: reduce_native<double>(out, in, n, nranks, op); break;
    case ncclFloat16: reduce_16<half_to_float, float_to_half>(out, in, n, nranks, op); break;
    case ncclBfloat16: reduce_16<bf16_to_float, float_to_bf16>(out, in, n, nranks, op); break;
    default: break;
    }
}

/* ------------------------------------------------------------ stream side */

/* One step: wait until every rank has read the previous step's slots, post
 * into the own slot, wait until every rank posted, consume, say so. */
ncclResult_t coll_step(CommState &s, const char *what, const std::function<void(char *)> &post,
                       const std::function<void()> &consume)
{
    Header *h = s.h;
    uint32_t k = ++s.step;
    static const std::vector<int> all;
    /* a peer that left after posting but before finishing the step broke
     * it (as a real ring needs every rank's kernel to the end): wait for
     * it, and learn it is gone */
    auto all_reached = [&](uint32_t target) {
        return [&s, h, target] {
            for (int q = 0; q < s.nranks; q++) {
                uint32_t ph = h->rank[q].phase.load(std::memory_order_acquire);
                if (!reached(ph, target) ||
                    (!reached(ph, target + 1) && h->rank[q].gone.load(std::memory_order_acquire) != kHere))
                    return false;
            }
            return true;
        };
    };
    ncclResult_t r = wait_until(s, all_reached(2 * k - 2), all, what);
    if (r != ncclSuccess)
        return r;
    post(s.slot(s.rank));
    h->rank[s.rank].phase.store(2 * k - 1, std::memory_order_release);
    ring(h);
    if ((r = wait_until(s, all_reached(2 * k - 1), all, what)) != ncclSuccess)
        return r;
    consume();
    h->rank[s.rank].phase.store(2 * k, std::memory_order_release);
    ring(h);
    return ncclSuccess;
}

const char *kind_name(const Op &o)
{
    switch (o.kind) {
    case kAllReduce: return "ncclAllReduce";
    case kReduceScatter: return "ncclReduceScatter";
    case kAllGather: return "ncclAllGather";
    case kBroadcast: return "ncclBroadcast";
    default: return o.is_send ? "ncclSend" : "ncclRecv";
    }
}

ncclResult_t run_collective(CommState &s, const Op &o)
{
    const int n = s.nranks, me = s.rank;
    const size_t elt = type_size(o.dt);
    const char *what = kind_name(o);
    const char *src = static_cast<const char *>(o.send);
    char *dst = static_cast<char *>(o.recv);
    std::vector<char *> in(size_t(n), nullptr);
    ncclResult_t r = ncclSuccess;
    switch (o.kind) {
    case kAllReduce: {
        size_t per = kSlotBytes / elt;
        for (size_t off = 0; off < o.count && r == ncclSuccess; off += per) {
            size_t len = std::min(per, o.count - off);
            r = coll_step(s, what, [&](char *slot) { memcpy(slot, src + off * elt, len * elt); },
                          [&] {
                              for (int q = 0; q < n; q++)
                                  in[size_t(q)] = s.slot(q);
                              reduce(o.dt, dst + off * elt, in.data(), len, n, o.op);
                          });
        }
        break;
    }
    case kReduceScatter: {
        size_t per = kSlotBytes / elt / size_t(n);
        for (size_t off = 0; off < o.count && r == ncclSuccess; off += per) {
            size_t len = std::min(per, o.count - off);
            r = coll_step(s, what,
                          [&](char *slot) {
                              for (int q = 0; q < n; q++)
                                  memcpy(slot + size_t(q) * len * elt, src + (size_t(q) * o.count + off) * elt,
                                         len * elt);
                          },
                          [&] {
                              for (int q = 0; q < n; q++)
                                  in[size_t(q)] = s.slot(q) + size_t(me) * len * elt;
                              reduce(o.dt, dst + off * elt, in.data(), len, n, o.op);
                          });
        }
        break;
    }
    case kAllGather: {
        size_t per = kSlotBytes / elt;
        for (size_t off = 0; off < o.count && r == ncclSuccess; off += per) {
            size_t len = std::min(per, o.count - off);
            r = coll_step(s, what, [&](char *slot) { memcpy(slot, src + off * elt, len * elt); },
                          [&] {
                              for (int q = 0; q < n; q++)
                                  memcpy(dst + (size_t(q) * o.count + off) * elt, s.slot(q), len * elt);
                          });
        }
        break;
    }
    case kBroadcast: {
        size_t per = kSlotBytes / elt;
        for (size_t off = 0; off < o.count && r == ncclSuccess; off += per) {
            size_t len = std::min(per, o.count - off);
            r = coll_step(s, what,
                          [&](char *slot) {
                              if (me == o.root)
                                  memcpy(slot, src + off * elt, len * elt);
                          },
                          [&] { memcpy(dst + off * elt, s.slot(o.root), len * elt); });
        }
        break;
    }
    default: break;
    }
    return r;
}

/* Sends and receives progress together (a pair that exchanges both ways
 * cannot deadlock), each peer's in call order, in mailbox-sized chunks. */
ncclResult_t run_p2p(CommState &s, const std::vector<Op> &ops)
{
    struct P {
        const Op *o;
        size_t bytes, done;
        bool finished;
    };
    std::vector<P> ps;
    std::vector<int> peers;
    for (const Op &o : ops)
        if (o.kind == kGroup && o.count > 0) {
            ps.push_back({&o, o.count * type_size(o.dt), 0, false});
            peers.push_back(o.root);
        }
    const size_t box = s.lay.mbox_bytes;
    for (;;) {
        bool all_done = true, progressed = false;
        std::vector<int> busy_send, busy_recv; /* peers with an earlier unfinished op */
        for (P &p : ps) {
            if (p.finished)
                continue;
            int peer = p.o->root;
            std::vector<int> &busy = p.o->is_send ? busy_send : busy_recv;
            if (std::find(busy.begin(), busy.end(), peer) != busy.end()) {
                all_done = false;
                continue;
            }
            if (p.o->is_send) {
                Mailbox *mb = s.mbox(s.rank, peer);
                uint32_t sent = mb->sent.load(std::memory_order_acquire);
                if (sent == mb->taken.load(std::memory_order_acquire)) {
                    size_t len = std::min(box, p.bytes - p.done);
                    memcpy(s.mdata(s.rank, peer), static_cast<const char *>(p.o->send) + p.done, len);
                    mb->len.store(len, std::memory_order_relaxed);
                    mb->sent.store(sent + 1, std::memory_order_release);
                    ring(s.h);
                    p.done += len;
                    progressed = true;
                }
            } else {
                Mailbox *mb = s.mbox(peer, s.rank);
                uint32_t taken = mb->taken.load(std::memory_order_acquire);
                if (mb->sent.load(std::memory_order_acquire) != taken) {
                    size_t len = std::min(size_t(mb->len.load(std::memory_order_relaxed)), p.bytes - p.done);
                    memcpy(static_cast<char *>(p.o->recv) + p.done, s.mdata(peer, s.rank), len);
                    mb->taken.store(taken + 1, std::memory_order_release);
                    ring(s.h);
                    p.done += len;
                    progressed = true;
                }
            }
            if (p.done >= p.bytes)
                p.finished = true;
            else {
                all_done = false;
                busy.push_back(peer);
            }
        }
        if (all_done)
            return ncclSuccess;
        if (progressed)
            continue;
        auto can_progress = [&] {
            for (const P &p : ps) {
                if (p.finished)
                    continue;
                if (p.o->is_send) {
                    Mailbox *mb = s.mbox(s.rank, p.o->root);
                    if (mb->sent.load(std::memory_order_acquire) == mb->taken.load(std::memory_order_acquire))
                        return true;
                } else {
                    Mailbox *mb = s.mbox(p.o->root, s.rank);
                    if (mb->sent.load(std::memory_order_acquire) != mb->taken.load(std::memory_order_acquire))
                        return true;
                }
            }
            return false;
        };
        ncclResult_t r = wait_until(s, can_progress, peers, "ncclSend/ncclRecv");
        if (r != ncclSuccess)
            return r;
    }
}

/* Buffers the "kernel" touches must be device memory; a host pointer is an
 * illegal address on the GPU. */
bool buffers_on_device(CommState &s, const Op &o)
{
    size_t elt = type_size(o.dt), n = size_t(s.nranks), in = 0, out = 0;
    switch (o.kind) {
    case kAllReduce: in = out = o.count * elt; break;
    case kReduceScatter: in = n * o.count * elt; out = o.count * elt; break;
    case kAllGather: in = o.count * elt; out = n * o.count * elt; break;
    case kBroadcast: in = s.rank == o.root ? o.count * elt : 0; out = o.count * elt; break;
    default: (o.is_send ? in : out) = o.count * elt; break;
    }
    const void *bad = nullptr;
    size_t bad_bytes = 0;
    if (in > 0 && !standin_is_device(o.send, in))
        bad = o.send, bad_bytes = in;
    else if (out > 0 && !standin_is_device(o.recv, out))
        bad = o.recv, bad_bytes = out;
    if (bad == nullptr)
        return true;
    warn("%s: %p (%zu bytes) is not device memory: an illegal address on the GPU", kind_name(o), bad, bad_bytes);
    standin_device_fault(cudaErrorIllegalAddress, "nccl: %s on rank %d: %p (%zu bytes) is not device memory",
                         kind_name(o), s.rank, bad, bad_bytes);
    return false;
}

/* The stream item of one call or group: collectives in order, then the
 * sends and receives together. */
void run_item(CommState &s, const std::vector<Op> &ops)
{
    std::lock_guard<std::mutex> lk(s.run_mu);
    if (s.abort.load() || s.async_err.load() != ncclSuccess)
        return; /* a broken communicator's kernels do nothing */
    for (const Op &o : ops)
        if (!buffers_on_device(s, o)) {
            set_async_error(s, ncclUnhandledCudaError);
            return;
        }
    ncclResult_t r = ncclSuccess;
    bool p2p = false;
    for (const Op &o : ops) {
        if (o.kind == kGroup)
            p2p = true;
        else if ((r = run_collective(s, o)) != ncclSuccess)
            break;
    }
    if (r == ncclSuccess && p2p)
        r = run_p2p(s, ops);
    if (r != ncclSuccess && r != kAborted)
        set_async_error(s, r);
}

/* ------------------------------------------------------------ host side */

/* The state ncclCommGetAsyncError reports, without moving it. */
ncclResult_t peek_state(CommState &s)
{
    int e = s.async_err.load(std::memory_order_acquire);
    if (e != ncclSuccess)
        return ncclResult_t(e);
    if (!s.ready.load(std::memory_order_acquire) || s.busy.load(std::memory_order_acquire) > 0)
        return ncclInProgress;
    if (s.has_pending)
        return ncclInProgress;
    if (s.finalizing.load() && s.inflight.load() > 0)
        return ncclInProgress;
    return ncclSuccess;
}

/* As the real ncclCommEnsureReady (plus the tombstone of an aborted comm). */
ncclResult_t ensure_ready(ncclComm_t comm, const char *what)
{
    if (comm == nullptr) {
        warn("%s: comm argument is NULL", what);
        return ncclInvalidArgument;
    }
    if (comm->dead) {
        warn("%s: the communicator was aborted or destroyed", what);
        return ncclInvalidUsage;
    }
    CommState &s = *comm->s;
    ncclResult_t r;
    {
        std::lock_guard<std::mutex> lk(s.mu);
        r = peek_state(s);
    }
    if (r == ncclInProgress) {
        warn("Attempt to use communicator before the previous operation returned ncclSuccess");
        return ncclInvalidArgument;
    }
    return r;
}

/* Queue the pending operation now (s.mu held). */
void release_locked(CommState &s)
{
    if (!s.has_pending)
        return;
    std::function<void()> item = std::move(s.pending);
    s.has_pending = false;
    s.pending = nullptr;
    if (standin_enqueue(s.pending_stream, std::move(item)) != cudaSuccess) {
        s.inflight.fetch_sub(1);
        warn("the stream of the operation was destroyed before it was queued");
        set_async_error(s, ncclUnhandledCudaError);
    }
}

/* Queue one call or group on stream: at once, or (non-blocking, seeded)
 * later, returning ncclInProgress. */
ncclResult_t launch(const std::shared_ptr<CommState> &sp, std::vector<Op> ops, cudaStream_t stream, Kind kind)
{
    CommState &s = *sp;
    s.inflight.fetch_add(1);
    std::function<void()> item = [sp, ops] {
        run_item(*sp, ops);
        sp->inflight.fetch_sub(1);
    };
    std::unique_lock<std::mutex> lk(s.mu);
    bool first = !(s.kinds_seen & (1u << kind));
    s.kinds_seen |= 1u << kind;
    if (!s.blocking && (first || (standin_rand(&s.rng) & 1))) {
        /* as while the real library connects: not on the stream yet */
        s.has_pending = true;
        s.pending = std::move(item);
        s.pending_stream = stream;
        s.polls_left = int(standin_rand(&s.rng) % 3);
        uint64_t id = ++s.pending_id;
        int delay = 5 + int(standin_rand(&s.rng) % 46);
        lk.unlock();
        std::thread([sp, id, delay] {
            sleep_ms(delay);
            (void)cudaSetDevice(sp->device); /* stream 0 is the current device's */
            std::lock_guard<std::mutex> g(sp->mu);
            if (sp->has_pending && sp->pending_id == id)
                release_locked(*sp);
        }).detach();
        return ncclInProgress;
    }
    if (standin_enqueue(stream, std::move(item)) != cudaSuccess) {
        s.inflight.fetch_sub(1);
        warn("cannot queue on stream %p (destroyed?)", (void *)stream);
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

/* ------------------------------------------------------------ groups */

struct Queued {
    std::shared_ptr<CommState> s;
    Op op;
};

/* NCCL's group state is the calling thread's */
thread_local int g_depth = 0;
thread_local std::vector<Queued> g_ops;
thread_local ncclResult_t g_group_err = ncclSuccess;

Kind kind_of(const std::vector<Op> &ops)
{
    return ops.size() == 1 && ops[0].kind != kGroup ? ops[0].kind : kGroup;
}

/* Outside a group: launch at once; inside: collect until ncclGroupEnd. */
ncclResult_t submit(ncclComm_t comm, const Op &op)
{
    if (g_depth > 0) {
        g_ops.push_back({comm->s, op});
        return ncclSuccess;
    }
    std::vector<Op> ops{op};
    Kind k = kind_of(ops);
    return launch(comm->s, std::move(ops), op.stream, k);
}

/* The checks of the real ArgsCheck that matter here; inside a group an
 * error is remembered and ends the group. */
ncclResult_t check_call(ncclComm_t comm, const char *what, ncclDataType_t dt, int op, int root)
{
    ncclResult_t r = ensure_ready(comm, what);
    if (r == ncclSuccess && (int(dt) < 0 || int(dt) >= int(ncclNumTypes) || type_size(dt) == 0)) {
        warn("%s : invalid type %d%s", what, int(dt),
             dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2 ? " (fp8: not in the GPU stand-in)" : "");
        r = ncclInvalidArgument;
    }
    if (r == ncclSuccess && (op < 0 || op >= int(ncclNumOps))) {
        warn("%s : invalid reduction operation %d", what, op);
        r = ncclInvalidArgument;
    }
    if (r == ncclSuccess && (root < 0 || root >= comm->s->nranks)) {
        warn("%s : invalid root/peer %d (root should be in the 0..%d range)", what, root, comm->s->nranks);
        r = ncclInvalidArgument;
    }
    if (r != ncclSuccess && g_depth > 0 && g_group_err == ncclSuccess)
        g_group_err = r;
    return r;
}

/* ------------------------------------------------------------ init */

/* Attach to (or create) the segment `name` of nranks ranks, register this
 * rank and its device, wait for all, refuse duplicate GPUs. */
ncclResult_t rendezvous(CommState &s)
{
    const char *name = s.shm_name.c_str();
    Layout want = layout_of(s.nranks);
    int64_t start = now_ms();
    char *base = nullptr;
    size_t bytes = 0;
    while (base == nullptr) {
        if (s.abort.load())
            return kAborted;
        if (now_ms() - start > kGiveUpMs) {
            warn("init: the shared segment %s did not come up in %lld s", name, (long long)(kGiveUpMs / 1000));
            return ncclSystemError;
        }
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0) { /* the first to arrive creates it */
            if (ftruncate(fd, off_t(want.total)) != 0) {
                warn("init: ftruncate of %s to %zu bytes: %s", name, want.total, strerror(errno));
                close(fd);
                shm_unlink(name);
                return ncclSystemError;
            }
            void *p = mmap(nullptr, want.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED) {
                warn("init: mmap of %s: %s", name, strerror(errno));
                shm_unlink(name);
                return ncclSystemError;
            }
            Header *h = static_cast<Header *>(p);
            h->nranks = s.nranks;
            h->total_bytes = want.total;
            h->mbox_bytes = want.mbox_bytes;
            h->magic.store(kMagic, std::memory_order_release);
            base = static_cast<char *>(p);
            bytes = want.total;
            break;
        }
        if (errno != EEXIST) {
            warn("init: shm_open %s: %s", name, strerror(errno));
            return ncclSystemError;
        }
        fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) {
            if (errno != ENOENT) {
                warn("init: shm_open %s: %s", name, strerror(errno));
                return ncclSystemError;
            }
            continue; /* unlinked meanwhile: try again */
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_size == 0) { /* the creator has not sized it yet */
            close(fd);
            sleep_ms(1);
            continue;
        }
        void *p = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            warn("init: mmap of %s: %s", name, strerror(errno));
            return ncclSystemError;
        }
        Header *h = static_cast<Header *>(p);
        while (h->magic.load(std::memory_order_acquire) != kMagic && !s.abort.load() &&
               now_ms() - start <= kGiveUpMs)
            sleep_ms(1);
        if (h->magic.load(std::memory_order_acquire) != kMagic) {
            munmap(p, size_t(st.st_size));
            continue; /* aborted or timed out: the loop says which */
        }
        if (h->nranks != s.nranks || h->total_bytes != uint64_t(st.st_size)) {
            warn("init: rank %d was told of %d ranks, another rank of %d", s.rank, s.nranks, h->nranks);
            munmap(p, size_t(st.st_size));
            return ncclInvalidUsage;
        }
        base = static_cast<char *>(p);
        bytes = size_t(st.st_size);
    }
    s.base = base;
    s.bytes = bytes;
    s.h = reinterpret_cast<Header *>(base);
    s.lay = want;
    Header *h = s.h;
    RankInfo &me = h->rank[s.rank];
    int32_t none = 0;
    if (!me.pid.compare_exchange_strong(none, int32_t(getpid()))) {
        warn("init: rank %d given twice (pids %d and %d)", s.rank, (int)none, (int)getpid());
        return ncclInvalidUsage;
    }
    me.bus_id = s.bus_id;
    me.host_hash = s.host_hash;
    s.registered.store(1, std::memory_order_release);
    if (h->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(s.nranks))
        shm_unlink(name); /* all are here: nothing lingers after a crash */
    ring(h);
    static const std::vector<int> all;
    ncclResult_t r = wait_until(s, [h, &s] { return h->attached.load(std::memory_order_acquire) ==
                                                    uint32_t(s.nranks); },
                                all, "init (waiting for every rank)");
    if (r != ncclSuccess)
        return r;
    /* as the real library after its first all-gather; every rank refuses */
    for (int i = 0; i < s.nranks; i++)
        if (i != s.rank && h->rank[i].bus_id == s.bus_id && h->rank[i].host_hash == s.host_hash) {
            warn("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", s.rank, i,
                 (unsigned long)s.bus_id);
            return ncclInvalidUsage;
        }
    for (int i = 0; i < s.nranks; i++)
        for (int j = i + 1; j < s.nranks; j++)
            if (h->rank[i].bus_id == h->rank[j].bus_id && h->rank[i].host_hash == h->rank[j].host_hash) {
                warn("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", i, j,
                     (unsigned long)h->rank[i].bus_id);
                return ncclInvalidUsage;
            }
    return ncclSuccess;
}

/* The end of init/split (either way). */
void finish_init(CommState &s, ncclResult_t r)
{
    /* a failed rendezvous that not every rank reached: nothing may linger
     * (a rank still to come makes a fresh segment, and fails alone) */
    if (r != ncclSuccess && s.registered.load() && s.h->attached.load() < uint32_t(s.nranks))
        shm_unlink(s.shm_name.c_str());
    if (r == kAborted) {
        mark_gone(s, kGoneAbort);
        r = ncclInvalidUsage;
    }
    if (r != ncclSuccess)
        set_async_error(s, r);
    s.ready.store(1, std::memory_order_release);
}

bool config_ok(const ncclConfig_t *config, const char *what)
{
    if (config == nullptr)
        return true;
    if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, splitShare)) {
        warn("%s: the config was not initialized with NCCL_CONFIG_INITIALIZER", what);
        return false;
    }
    return true;
}

/* The node, as NCCL's hostHash: the stand-in's devices are per node, and
 * the nodes of a local Slurm cluster share one machine, so the node name
 * Slurm gives the task (SLURMD_NODENAME) counts before the host name. */
uint64_t host_hash()
{
    char host[256] = "";
    const char *name = getenv("SLURMD_NODENAME");
    if (name == nullptr || *name == '\0') {
        if (gethostname(host, sizeof host - 1) != 0)
            host[0] = '\0';
        name = host;
    }
    uint64_t h = 1469598103934665603ull;
    for (const char *c = name; *c != '\0'; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return h;
}

std::shared_ptr<CommState> new_state(int nranks, int rank, bool blocking)
{
    auto s = std::make_shared<CommState>();
    s->nranks = nranks;
    s->rank = rank;
    s->blocking = blocking;
    s->device = standin_current_device();
    s->phys = standin_physical_device(s->device);
    /* a PCI bus id per physical device, as the real busId ("0000:18:00.0") */
    s->bus_id = (int64_t(s->phys + 1) * 0x10 + 0x08) << 12;
    s->host_hash = host_hash();
    /* the seed mixed with the rank and the process's communicator count:
     * reproducible, different per rank and communicator */
    s->rng = standin_seed() * 0x9e3779b97f4a7c15ull + uint64_t(rank) * 0xd1b54a32d192ed03ull +
             g_comm_index.fetch_add(1) * 0x8cb92ba72f3d8dd7ull;
    track(s);
    return s;
}

/* Run job inline (blocking) or on its own thread (ncclInProgress). */
ncclResult_t start_job(const std::shared_ptr<CommState> &s, std::function<ncclResult_t()> job)
{
    if (s->blocking) {
        ncclResult_t r = job();
        return r == ncclSuccess ? ncclSuccess : ncclResult_t(s->async_err.load());
    }
    std::thread([job] { (void)job(); }).detach();
    return ncclInProgress;
}

uint64_t fnv1a(const std::string &text, uint64_t h)
{
    for (unsigned char c : text)
        h = (h ^ c) * 0x100000001b3ull;
    return h;
}

} // namespace

/* ================================================================ the API */

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    if (version == nullptr)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* 128 random bytes; the first ones name the shared segment, NUL-ended. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (uniqueId == nullptr) {
        warn("ncclGetUniqueId: uniqueId argument is NULL");
        return ncclInvalidArgument;
    }
    unsigned char r[NCCL_UNIQUE_ID_BYTES];
    if (getrandom(r, sizeof r, 0) != ssize_t(sizeof r)) {
        warn("ncclGetUniqueId: getrandom: %s", strerror(errno));
        return ncclSystemError;
    }
    memcpy(uniqueId->internal, r, sizeof r);
    int n = snprintf(uniqueId->internal, 64, "%s", kPrefix);
    for (int i = 0; i < 16; i++)
        snprintf(uniqueId->internal + n + 2 * i, 3, "%02x", r[i]);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
    if (comm == nullptr) {
        warn("ncclCommInitRankConfig: comm argument is NULL");
        return ncclInvalidArgument;
    }
    *comm = nullptr;
    if (!config_ok(config, "ncclCommInitRankConfig"))
        return ncclInvalidArgument;
    if (nranks < 1 || nranks > kMaxRanks) {
        warn("invalid device count (%d) requested%s", nranks, nranks > kMaxRanks ? " (the stand-in's limit: 256)" : "");
        return ncclInvalidArgument;
    }
    if (rank < 0 || rank >= nranks) {
        warn("rank %d exceeds ndev=%d", rank, nranks);
        return ncclInvalidArgument;
    }
    const size_t plen = sizeof kPrefix - 1;
    if (memcmp(commId.internal, kPrefix, plen) != 0 || memchr(commId.internal, '\0', 64) == nullptr) {
        warn("ncclCommInitRank: the unique id is not one of ncclGetUniqueId's (the GPU stand-in's)");
        return ncclInvalidArgument;
    }
    bool blocking = config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
    auto s = new_state(nranks, rank, blocking);
    s->shm_name = commId.internal;
    ncclComm *h = new ncclComm;
    h->s = s;
    ncclResult_t r = start_job(s, [s] {
        ncclResult_t rr = rendezvous(*s);
        finish_init(*s, rr);
        return rr;
    });
    if (r != ncclSuccess && r != ncclInProgress) {
        h->dead = true; /* a failed blocking init leaves no communicator */
        mark_gone(*s, kGoneFault);
        h->s.reset();
        return r;
    }
    *comm = h;
    return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    ncclResult_t r = ensure_ready(comm, "ncclCommSplit");
    if (r != ncclSuccess)
        return r;
    if (newcomm == nullptr) {
        warn("ncclCommSplit: newcomm argument is NULL");
        return ncclInvalidArgument;
    }
    *newcomm = nullptr;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
        warn("ncclCommSplit: invalid color %d", color);
        return ncclInvalidArgument;
    }
    if (!config_ok(config, "ncclCommSplit"))
        return ncclInvalidArgument;
    std::shared_ptr<CommState> ps = comm->s;
    bool blocking = config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT ? ps->blocking
                                                                                    : config->blocking != 0;
    uint32_t seq = ++ps->split_seq;
    std::shared_ptr<CommState> cs;
    ncclComm *h = nullptr;
    if (color != NCCL_SPLIT_NOCOLOR) {
        cs = new_state(1, 0, blocking); /* size and rank known after the exchange */
        h = new ncclComm;
        h->s = cs;
    }
    ps->busy.fetch_add(1);
    auto job = [ps, cs, seq, color, key]() -> ncclResult_t {
        Header *hd = ps->h;
        RankInfo &me = hd->rank[ps->rank];
        me.split_color[seq & 1] = color;
        me.split_key[seq & 1] = key;
        me.split_seq.store(seq, std::memory_order_release);
        ring(hd);
        static const std::vector<int> all;
        ncclResult_t rr = wait_until(*ps, [&] {
            for (int q = 0; q < ps->nranks; q++)
                if (!reached(hd->rank[q].split_seq.load(std::memory_order_acquire), seq))
                    return false;
            return true;
        }, all, "ncclCommSplit");
        std::vector<std::pair<int, int>> members; /* (key, parent rank) of my color */
        if (rr == ncclSuccess)
            for (int q = 0; q < ps->nranks; q++)
                if (hd->rank[q].split_color[seq & 1] == color)
                    members.push_back({hd->rank[q].split_key[seq & 1], q});
        /* the slot may be reused once every rank published the next split */
        ps->busy.fetch_sub(1);
        if (rr != ncclSuccess && rr != kAborted)
            set_async_error(*ps, rr);
        if (cs == nullptr)
            return rr == kAborted ? ncclInvalidUsage : rr;
        if (rr != ncclSuccess) {
            finish_init(*cs, rr == kAborted ? ncclInvalidUsage : rr);
            return rr;
        }
        std::sort(members.begin(), members.end());
        cs->nranks = int(members.size());
        for (size_t i = 0; i < members.size(); i++)
            if (members[i].second == ps->rank)
                cs->rank = int(i);
        /* a name every member derives alike: parent, split number, color */
        std::string tag = ps->shm_name + "/" + std::to_string(seq) + "/" + std::to_string(color);
        char name[64];
        snprintf(name, sizeof name, "%s%016llx%016llx", kPrefix,
                 (unsigned long long)fnv1a(tag, 0xcbf29ce484222325ull),
                 (unsigned long long)fnv1a(tag, 0x84222325cbf29ce4ull));
        cs->shm_name = name;
        rr = rendezvous(*cs);
        finish_init(*cs, rr);
        return rr;
    };
    if (blocking) {
        r = job();
        if (r != ncclSuccess) {
            r = cs != nullptr ? ncclResult_t(cs->async_err.load()) : ncclResult_t(ps->async_err.load());
            if (r == ncclSuccess)
                r = ncclInvalidUsage;
            if (h != nullptr) {
                h->dead = true;
                h->s.reset();
            }
            return r;
        }
        *newcomm = h;
        return ncclSuccess;
    }
    std::thread([job] { (void)job(); }).detach();
    *newcomm = h;
    return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (comm == nullptr || asyncError == nullptr) {
        warn("ncclCommGetAsyncError: comm or asyncError argument is NULL");
        return ncclInvalidArgument;
    }
    if (comm->dead) {
        warn("ncclCommGetAsyncError: the communicator was aborted or destroyed");
        return ncclInvalidUsage;
    }
    CommState &s = *comm->s;
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.has_pending) {
        if (s.polls_left > 0)
            s.polls_left--;
        else
            release_locked(s);
    }
    *asyncError = peek_state(s);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (comm == nullptr)
        return ncclSuccess;
    if (comm->dead) {
        warn("ncclCommAbort: the communicator was already aborted or destroyed");
        return ncclInvalidUsage;
    }
    std::shared_ptr<CommState> s = std::move(comm->s);
    comm->dead = true;
    s->abort.store(1, std::memory_order_release);
    {
        std::lock_guard<std::mutex> lk(s->mu);
        if (s->has_pending) { /* never reaches the stream */
            s->has_pending = false;
            s->pending = nullptr;
            s->inflight.fetch_sub(1);
        }
    }
    /* wakes this rank's stream thread as well as the peers */
    mark_gone(*s, kGoneAbort);
    /* as the real one, return once this communicator's kernels have exited
     * (their events complete): a caller polling an event sees it done right
     * after the abort.  Bounded: an item still queued behind other work
     * ends as soon as it starts. */
    for (int64_t deadline = now_ms() + 5000; s->inflight.load() > 0 && now_ms() < deadline;)
        sleep_ms(1);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t r = ensure_ready(comm, "ncclCommFinalize");
    if (r != ncclSuccess)
        return r;
    CommState &s = *comm->s;
    s.finalizing.store(1);
    if (!s.blocking)
        return ncclInProgress;
    while (s.inflight.load() > 0 && s.async_err.load() == ncclSuccess)
        sleep_ms(1);
    return ncclResult_t(s.async_err.load());
}

/* Local: waits for this rank's queued operations, as the real one. */
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (comm == nullptr)
        return ncclSuccess;
    if (comm->dead) {
        warn("ncclCommDestroy: the communicator was already aborted or destroyed");
        return ncclInvalidUsage;
    }
    std::shared_ptr<CommState> s = comm->s;
    if (!s->ready.load()) /* init still under way: nothing to flush */
        return ncclCommAbort(comm);
    {
        std::lock_guard<std::mutex> lk(s->mu);
        release_locked(*s);
    }
    while (s->inflight.load() > 0 && !s->abort.load())
        sleep_ms(1);
    comm->s.reset();
    comm->dead = true;
    mark_gone(*s, kGoneDestroy);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm; /* process-wide, as the real one */
    return g_last_error;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    ncclResult_t r = ensure_ready(comm, "ncclCommCount");
    if (r != ncclSuccess)
        return r;
    if (count == nullptr)
        return ncclInvalidArgument;
    *count = comm->s->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    ncclResult_t r = ensure_ready(comm, "ncclCommUserRank");
    if (r != ncclSuccess)
        return r;
    if (rank == nullptr)
        return ncclInvalidArgument;
    *rank = comm->s->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    ncclResult_t r = ensure_ready(comm, "ncclCommCuDevice");
    if (r != ncclSuccess)
        return r;
    if (device == nullptr)
        return ncclInvalidArgument;
    *device = comm->s->device;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t r = check_call(comm, "AllReduce", datatype, int(op), 0);
    if (r != ncclSuccess)
        return r;
    return submit(comm, {kAllReduce, false, sendbuff, recvbuff, count, datatype, op, 0, stream});
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t r = check_call(comm, "ReduceScatter", datatype, int(op), 0);
    if (r != ncclSuccess)
        return r;
    return submit(comm, {kReduceScatter, false, sendbuff, recvbuff, recvcount, datatype, op, 0, stream});
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t r = check_call(comm, "AllGather", datatype, int(ncclSum), 0);
    if (r != ncclSuccess)
        return r;
    return submit(comm, {kAllGather, false, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream});
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t r = check_call(comm, "Broadcast", datatype, int(ncclSum), root);
    if (r != ncclSuccess)
        return r;
    return submit(comm, {kBroadcast, false, sendbuff, recvbuff, count, datatype, ncclSum, root, stream});
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    ncclResult_t r = check_call(comm, "Send", datatype, int(ncclSum), peer);
    if (r != ncclSuccess)
        return r;
    return submit(comm, {kGroup, true, sendbuff, nullptr, count, datatype, ncclSum, peer, stream});
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    ncclResult_t r = check_call(comm, "Recv", datatype, int(ncclSum), peer);
    if (r != ncclSuccess)
        return r;
    return submit(comm, {kGroup, false, nullptr, recvbuff, count, datatype, ncclSum, peer, stream});
}

ncclResult_t ncclGroupStart(void)
{
    if (g_depth++ == 0) {
        g_ops.clear();
        g_group_err = ncclSuccess;
    }
    return ncclSuccess;
}

/* One stream item per communicator (on the stream of its first call),
 * queued together: ncclInProgress when any of them is. */
ncclResult_t ncclGroupEnd(void)
{
    if (g_depth == 0) {
        warn("ncclGroupEnd: not in a group call.");
        return ncclInvalidUsage;
    }
    if (--g_depth > 0)
        return ncclSuccess;
    std::vector<Queued> ops;
    ops.swap(g_ops);
    ncclResult_t err = g_group_err;
    g_group_err = ncclSuccess;
    if (err != ncclSuccess)
        return err; /* the group is dropped, as the real one */
    ncclResult_t result = ncclSuccess;
    std::vector<bool> done(ops.size(), false);
    for (size_t i = 0; i < ops.size(); i++) {
        if (done[i])
            continue;
        std::vector<Op> mine;
        for (size_t j = i; j < ops.size(); j++)
            if (!done[j] && ops[j].s == ops[i].s) {
                mine.push_back(ops[j].op);
                done[j] = true;
            }
        Kind k = kind_of(mine);
        ncclResult_t r = launch(ops[i].s, std::move(mine), ops[i].op.stream, k);
        if (r == ncclInProgress && result == ncclSuccess)
            result = ncclInProgress;
        else if (r != ncclSuccess && r != ncclInProgress && (result == ncclSuccess || result == ncclInProgress))
            result = r;
    }
    return result;
}

} /* extern "C" */
