// SPDX-License-Identifier: GPL-2.0-or-later
/* GPU stand-in: the host side of the CUDA runtime (devices, memory,
 * streams, events, errors) and the two driver API calls dtrain resolves
 * (cuInit, cuDeviceGetCount), on the CPU.  See standin.h.
 *
 * Faithful where defects hide:
 *  - every stream has its own worker thread; a call returns once its work is
 *    queued, so a host read without synchronisation can see old data;
 *  - the legacy default stream (0) of each device orders against the
 *    device's blocking streams, never against non-blocking ones;
 *  - cudaMemcpy from pageable memory to the device returns once the source
 *    is staged, before the copy lands (which the legacy stream delays by a
 *    seeded 0-2 ms);
 *  - device memory ends at a PROT_NONE page (an out-of-bounds access
 *    faults), starts filled with 0xff bytes (NaN floats), and is unmapped
 *    when freed (a use after free faults);
 *  - a device fault is sticky: every later call returns it. */
#include "standin.h"

#include <cuda.h>

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

const size_t kSharedDefault = 48 * 1024;    /* without the opt-in attribute */
const size_t kSharedOptin = 227 * 1024;     /* an H100's opt-in limit */
const size_t kTotalMem = 80ull << 30;        /* what the devices claim */
const size_t kAlign = 256;                   /* cudaMalloc's alignment */

struct Stream;

/* A point in a stream's FIFO: done once the stream completed ticket. */
struct Marker {
    std::shared_ptr<Stream> stream;
    uint64_t ticket = 0;
};

struct Item {
    std::function<void()> work;
    std::vector<Marker> waits;
    uint64_t ticket = 0;
};

struct Stream {
    int device = 0;
    bool legacy = false;
    bool nonblocking = false;
    unsigned flags = 0;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Item> q;
    uint64_t enqueued = 0;  /* tickets handed out */
    uint64_t completed = 0; /* tickets done (in order) */
    bool stop = false;      /* drain, then end the thread */
    bool abandon = false;   /* process exit: drop what has not started */
    bool exited = false;
    std::thread thread;
    uint64_t rng = 0;       /* the legacy stream's delays */
};

struct Alloc {
    size_t size;
    void *map_base;
    size_t map_len;
    int device;
    bool pinned;
};

struct EventStamp {
    Marker m;
    Clock::time_point t{};
};

struct Event {
    unsigned flags = 0;
    int device = 0;
    std::shared_ptr<EventStamp> stamp; /* null until recorded */
};

struct Device {
    int physical = 0;
    std::shared_ptr<Stream> legacy;              /* made on first use */
    std::vector<std::shared_ptr<Stream>> streams; /* live, created ones */
    size_t allocated = 0;
};

struct State {
    std::mutex mu; /* devices, stream and event registries; before any Stream::mu */
    std::vector<Device> devices;
    std::map<Stream *, std::shared_ptr<Stream>> streams;
    std::map<Event *, std::unique_ptr<Event>> events;
    std::mutex mem_mu;
    std::map<uintptr_t, Alloc> allocs;
    std::mutex func_mu;
    std::map<const void *, size_t> func_shared;
    uint64_t seed = 1;
    bool exiting = false;
};

std::atomic<int> g_sticky{0};
/* Set in a child forked after the runtime started: CUDA does not survive a
 * fork, so every call there fails with cudaErrorInitializationError. */
std::atomic<bool> g_forked{false};
thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
State *g_state;
std::once_flag g_once;

void shutdown_streams();

/* The devices: DTRAIN_STANDIN_GPUS of them, selected and renumbered by
 * CUDA_VISIBLE_DEVICES as the real driver parses it (stop at the first
 * invalid entry). */
std::vector<int> visible_devices()
{
    int n = 8;
    if (const char *g = getenv("DTRAIN_STANDIN_GPUS")) {
        char *end;
        long v = strtol(g, &end, 10);
        if (end != g && *end == '\0' && v >= 0 && v <= 1024)
            n = (int)v;
    }
    std::vector<int> out;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == nullptr) {
        for (int i = 0; i < n; i++)
            out.push_back(i);
        return out;
    }
    std::string s(cvd);
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t comma = s.find(',', pos);
        std::string e = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        /* surrounding blanks are tolerated, anything else ends the list */
        size_t b = e.find_first_not_of(" \t"), l = e.find_last_not_of(" \t");
        if (b == std::string::npos)
            break;
        e = e.substr(b, l - b + 1);
        if (e.find_first_not_of("0123456789") != std::string::npos || e.size() > 6)
            break;
        int v = atoi(e.c_str());
        if (v >= n || std::find(out.begin(), out.end(), v) != out.end())
            break;
        out.push_back(v);
        if (comma == std::string::npos)
            break;
        pos = comma + 1;
    }
    return out;
}

State &st()
{
    std::call_once(g_once, [] {
        /* Never destroyed: worker threads may outlive static destructors. */
        State *s = new State;
        for (int p : visible_devices()) {
            Device d;
            d.physical = p;
            s->devices.push_back(std::move(d));
        }
        if (const char *e = getenv("DTRAIN_STANDIN_SEED")) {
            char *end;
            unsigned long long v = strtoull(e, &end, 0);
            if (end != e)
                s->seed = v;
        }
        g_state = s;
        atexit(shutdown_streams);
        pthread_atfork(nullptr, nullptr, [] { g_forked = true; });
    });
    return *g_state;
}

cudaError_t sticky() { return (cudaError_t)g_sticky.load(std::memory_order_acquire); }

/* An API call's result: errors other than "not ready" become the thread's
 * last error, as in the real runtime. */
cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady)
        t_last = e;
    return e;
}

/* The checks at the start of most calls: a sticky fault, no device. */
cudaError_t enter()
{
    State &s = st();
    if (g_forked)
        return cudaErrorInitializationError;
    if (cudaError_t e = sticky())
        return e;
    if (s.devices.empty())
        return cudaErrorNoDevice;
    return cudaSuccess;
}

void wait_marker(const Marker &m)
{
    if (!m.stream)
        return;
    std::unique_lock<std::mutex> lk(m.stream->mu);
    m.stream->cv.wait(lk, [&] { return m.stream->completed >= m.ticket || m.stream->abandon; });
}

bool marker_done(const Marker &m)
{
    if (!m.stream)
        return true;
    std::lock_guard<std::mutex> lk(m.stream->mu);
    return m.stream->completed >= m.ticket;
}

/* The stream's thread; it holds the stream alive while it runs. */
void worker(std::shared_ptr<Stream> s)
{
    std::unique_lock<std::mutex> lk(s->mu);
    for (;;) {
        s->cv.wait(lk, [&] { return !s->q.empty() || s->stop || s->abandon; });
        if (s->q.empty())
            break;
        Item it = std::move(s->q.front());
        s->q.pop_front();
        bool drop = s->abandon;
        lk.unlock();
        if (!drop) {
            for (const Marker &m : it.waits)
                wait_marker(m);
            /* after a fault the context is dead: queued work never runs */
            if (sticky() == cudaSuccess && it.work)
                it.work();
        }
        it.work = nullptr; /* release the captures outside the lock */
        it.waits.clear();
        lk.lock();
        s->completed = it.ticket;
        s->cv.notify_all();
    }
    s->exited = true;
    s->cv.notify_all();
}

std::shared_ptr<Stream> new_stream(int device, bool legacy, unsigned flags)
{
    auto s = std::make_shared<Stream>();
    s->device = device;
    s->legacy = legacy;
    s->flags = flags;
    s->nonblocking = (flags & cudaStreamNonBlocking) != 0;
    s->rng = st().seed ^ (0x5eed0000ull + (uint64_t)device);
    s->thread = std::thread(worker, s);
    return s;
}

/* The stream behind a handle (0 and cudaStreamLegacy: the current
 * device's legacy stream), or null for an unknown handle.  Under s.mu. */
std::shared_ptr<Stream> resolve_locked(State &s, cudaStream_t h)
{
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        int d = t_device;
        if (d < 0 || d >= (int)s.devices.size())
            return nullptr;
        Device &dev = s.devices[(size_t)d];
        if (!dev.legacy) {
            if (s.exiting)
                return nullptr;
            dev.legacy = new_stream(d, true, 0);
        }
        return dev.legacy;
    }
    auto it = s.streams.find((Stream *)h);
    return it == s.streams.end() ? nullptr : it->second;
}

/* Queue work on stream h after the markers in waits (and the legacy
 * stream's implicit ones); the ticket of the item in *ticket. */
cudaError_t enqueue(cudaStream_t h, std::function<void()> work, std::vector<Marker> waits,
                    std::shared_ptr<Stream> *out_stream = nullptr, uint64_t *ticket = nullptr)
{
    if (cudaError_t e = enter())
        return e;
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    std::shared_ptr<Stream> str = resolve_locked(s, h);
    if (!str)
        return cudaErrorInvalidResourceHandle;
    Device &dev = s.devices[(size_t)str->device];
    /* The legacy stream waits for everything queued before on the
     * device's blocking streams; a blocking stream waits for it. */
    if (str->legacy) {
        for (auto &b : dev.streams) {
            if (b->nonblocking)
                continue;
            std::lock_guard<std::mutex> lk(b->mu);
            if (b->enqueued > b->completed)
                waits.push_back(Marker{b, b->enqueued});
        }
    } else if (!str->nonblocking && dev.legacy) {
        std::lock_guard<std::mutex> lk(dev.legacy->mu);
        if (dev.legacy->enqueued > dev.legacy->completed)
            waits.push_back(Marker{dev.legacy, dev.legacy->enqueued});
    }
    std::lock_guard<std::mutex> lk(str->mu);
    if (str->stop || str->abandon)
        return cudaErrorInvalidResourceHandle;
    Item it;
    it.work = std::move(work);
    it.waits = std::move(waits);
    it.ticket = ++str->enqueued;
    if (ticket)
        *ticket = it.ticket;
    if (out_stream)
        *out_stream = str;
    str->q.push_back(std::move(it));
    str->cv.notify_all();
    return cudaSuccess;
}

/* Wait until everything queued on str so far is done. */
void drain(const std::shared_ptr<Stream> &str)
{
    uint64_t target;
    {
        std::lock_guard<std::mutex> lk(str->mu);
        target = str->enqueued;
    }
    wait_marker(Marker{str, target});
}

/* Queue and wait (the synchronous calls). */
cudaError_t enqueue_wait(cudaStream_t h, std::function<void()> work)
{
    std::shared_ptr<Stream> str;
    uint64_t ticket = 0;
    cudaError_t e = enqueue(h, std::move(work), {}, &str, &ticket);
    if (e != cudaSuccess)
        return e;
    wait_marker(Marker{str, ticket});
    return sticky();
}

/* Process exit: queued work that has not started is dropped (the context
 * goes away, as a real one does), running work gets a few seconds, then
 * threads still busy (a collective waiting for a peer that is gone) are
 * left behind rather than hang the exit. */
void shutdown_streams()
{
    if (g_forked)
        return; /* the streams' threads are the parent's */
    State &s = *g_state;
    std::vector<std::shared_ptr<Stream>> all;
    {
        std::lock_guard<std::mutex> g(s.mu);
        s.exiting = true;
        for (auto &d : s.devices) {
            if (d.legacy)
                all.push_back(d.legacy);
            for (auto &x : d.streams)
                all.push_back(x);
        }
    }
    for (auto &x : all) {
        std::lock_guard<std::mutex> lk(x->mu);
        x->abandon = true;
        x->cv.notify_all();
    }
    auto deadline = Clock::now() + std::chrono::seconds(5);
    for (auto &x : all) {
        std::unique_lock<std::mutex> lk(x->mu);
        bool done = x->cv.wait_until(lk, deadline, [&] { return x->exited; });
        lk.unlock();
        if (!x->thread.joinable())
            continue;
        if (done) {
            x->thread.join();
        } else {
            fprintf(stderr, "gpu-standin: exit with work still running on a stream; not waiting for it\n");
            x->thread.detach();
        }
    }
}

/* ------------------------------------------------------------ memory */

size_t page_size()
{
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

/* size bytes at a 256-byte aligned address, ending as close to a
 * PROT_NONE page as the alignment allows, with one before it too. */
void *guarded_alloc(size_t size, int device, bool pinned)
{
    size_t pg = page_size();
    size_t body = (size + kAlign - 1 + pg - 1) / pg * pg;
    size_t len = body + 2 * pg;
    void *base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        return nullptr;
    char *b = (char *)base;
    if (mprotect(b, pg, PROT_NONE) != 0 || mprotect(b + pg + body, pg, PROT_NONE) != 0) {
        munmap(base, len);
        return nullptr;
    }
    uintptr_t end = (uintptr_t)(b + pg + body);
    uintptr_t p = (end - size) & ~(uintptr_t)(kAlign - 1);
    /* uninitialised memory reads as NaN */
    memset((void *)p, 0xff, size);
    State &s = st();
    std::lock_guard<std::mutex> lk(s.mem_mu);
    s.allocs[p] = Alloc{size, base, len, device, pinned};
    if (!pinned)
        s.devices[(size_t)device].allocated += size;
    return (void *)p;
}

/* The allocation holding [p, p + bytes), or null.  Under mem_mu. */
const Alloc *find_alloc_locked(State &s, const void *p, size_t bytes, uintptr_t *start)
{
    uintptr_t a = (uintptr_t)p;
    auto it = s.allocs.upper_bound(a);
    if (it == s.allocs.begin())
        return nullptr;
    --it;
    uintptr_t lo = it->first, hi = lo + it->second.size;
    if (a < lo || a > hi || (bytes > 0 && (a == hi || bytes > hi - a)))
        return nullptr;
    if (bytes == 0 && a == hi && it->second.size > 0)
        return nullptr;
    if (start)
        *start = lo;
    return &it->second;
}

enum class Mem { Pageable, Pinned, Device };

Mem classify(const void *p, size_t bytes, bool *in_range)
{
    State &s = st();
    std::lock_guard<std::mutex> lk(s.mem_mu);
    const Alloc *a = find_alloc_locked(s, p, 1, nullptr);
    if (a == nullptr) {
        *in_range = true;
        return Mem::Pageable;
    }
    *in_range = find_alloc_locked(s, p, bytes, nullptr) != nullptr;
    return a->pinned ? Mem::Pinned : Mem::Device;
}

/* Unmap a live allocation (the registry entry is removed first). */
cudaError_t release(void *p, bool pinned)
{
    State &s = st();
    Alloc a;
    {
        std::lock_guard<std::mutex> lk(s.mem_mu);
        auto it = s.allocs.find((uintptr_t)p);
        if (it == s.allocs.end() || it->second.pinned != pinned)
            return cudaErrorInvalidValue;
        a = it->second;
        s.allocs.erase(it);
        if (!pinned)
            s.devices[(size_t)a.device].allocated -= a.size;
    }
    munmap(a.map_base, a.map_len);
    return cudaSuccess;
}

/* All work queued so far on every stream of device d (or all devices). */
void sync_device(int d)
{
    State &s = st();
    std::vector<std::shared_ptr<Stream>> all;
    {
        std::lock_guard<std::mutex> g(s.mu);
        for (size_t i = 0; i < s.devices.size(); i++) {
            if (d >= 0 && (int)i != d)
                continue;
            if (s.devices[i].legacy)
                all.push_back(s.devices[i].legacy);
            for (auto &x : s.devices[i].streams)
                all.push_back(x);
        }
    }
    for (auto &x : all)
        drain(x);
}

struct ErrName {
    cudaError_t e;
    const char *name;
    const char *text;
};

#define E(n, t) {n, #n, t}
const ErrName kErrors[] = {
    E(cudaSuccess, "no error"),
    E(cudaErrorInvalidValue, "invalid argument"),
    E(cudaErrorMemoryAllocation, "out of memory"),
    E(cudaErrorInitializationError, "initialization error"),
    E(cudaErrorCudartUnloading, "driver shutting down"),
    E(cudaErrorProfilerDisabled, "profiler disabled"),
    E(cudaErrorProfilerNotInitialized, "profiler not initialized"),
    E(cudaErrorProfilerAlreadyStarted, "profiler already started"),
    E(cudaErrorProfilerAlreadyStopped, "profiler already stopped"),
    E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    E(cudaErrorInvalidSymbol, "invalid device symbol"),
    E(cudaErrorInvalidHostPointer, "invalid host pointer"),
    E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    E(cudaErrorInvalidTexture, "invalid texture"),
    E(cudaErrorInvalidTextureBinding, "invalid texture binding"),
    E(cudaErrorInvalidChannelDescriptor, "invalid channel descriptor"),
    E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    E(cudaErrorAddressOfConstant, "address of constant"),
    E(cudaErrorTextureFetchFailed, "texture fetch failed"),
    E(cudaErrorTextureNotBound, "texture not bound"),
    E(cudaErrorSynchronizationError, "synchronization error"),
    E(cudaErrorInvalidFilterSetting, "invalid filter setting"),
    E(cudaErrorInvalidNormSetting, "invalid norm setting"),
    E(cudaErrorMixedDeviceExecution, "mixed device execution"),
    E(cudaErrorNotYetImplemented, "not yet implemented"),
    E(cudaErrorMemoryValueTooLarge, "memory value too large"),
    E(cudaErrorStubLibrary, "stub library"),
    E(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    E(cudaErrorCallRequiresNewerDriver, "call requires newer driver"),
    E(cudaErrorInvalidSurface, "invalid surface"),
    E(cudaErrorDuplicateVariableName, "duplicate variable name"),
    E(cudaErrorDuplicateTextureName, "duplicate texture name"),
    E(cudaErrorDuplicateSurfaceName, "duplicate surface name"),
    E(cudaErrorDevicesUnavailable, "devices unavailable"),
    E(cudaErrorIncompatibleDriverContext, "incompatible driver context"),
    E(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
    E(cudaErrorPriorLaunchFailure, "unspecified launch failure in prior launch"),
    E(cudaErrorLaunchMaxDepthExceeded, "launch max depth exceeded"),
    E(cudaErrorLaunchFileScopedTex, "launch file scoped tex"),
    E(cudaErrorLaunchFileScopedSurf, "launch file scoped surf"),
    E(cudaErrorSyncDepthExceeded, "sync depth exceeded"),
    E(cudaErrorLaunchPendingCountExceeded, "launch pending count exceeded"),
    E(cudaErrorInvalidDeviceFunction, "invalid device function"),
    E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    E(cudaErrorInvalidDevice, "invalid device ordinal"),
    E(cudaErrorDeviceNotLicensed, "device not licensed"),
    E(cudaErrorSoftwareValidityNotEstablished, "software validity not established"),
    E(cudaErrorStartupFailure, "system not yet initialized"),
    E(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    E(cudaErrorDeviceUninitialized, "device uninitialized"),
    E(cudaErrorMapBufferObjectFailed, "map buffer object failed"),
    E(cudaErrorUnmapBufferObjectFailed, "unmap buffer object failed"),
    E(cudaErrorArrayIsMapped, "array is mapped"),
    E(cudaErrorAlreadyMapped, "already mapped"),
    E(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"),
    E(cudaErrorAlreadyAcquired, "already acquired"),
    E(cudaErrorNotMapped, "not mapped"),
    E(cudaErrorNotMappedAsArray, "not mapped as array"),
    E(cudaErrorNotMappedAsPointer, "not mapped as pointer"),
    E(cudaErrorECCUncorrectable, "eccuncorrectable"),
    E(cudaErrorUnsupportedLimit, "unsupported limit"),
    E(cudaErrorDeviceAlreadyInUse, "device already in use"),
    E(cudaErrorPeerAccessUnsupported, "peer access unsupported"),
    E(cudaErrorInvalidPtx, "invalid ptx"),
    E(cudaErrorInvalidGraphicsContext, "invalid graphics context"),
    E(cudaErrorNvlinkUncorrectable, "nvlink uncorrectable"),
    E(cudaErrorJitCompilerNotFound, "jit compiler not found"),
    E(cudaErrorUnsupportedPtxVersion, "unsupported ptx version"),
    E(cudaErrorJitCompilationDisabled, "jit compilation disabled"),
    E(cudaErrorUnsupportedExecAffinity, "unsupported exec affinity"),
    E(cudaErrorUnsupportedDevSideSync, "unsupported dev side sync"),
    E(cudaErrorContained, "contained"),
    E(cudaErrorInvalidSource, "invalid source"),
    E(cudaErrorFileNotFound, "file not found"),
    E(cudaErrorSharedObjectSymbolNotFound, "shared object symbol not found"),
    E(cudaErrorSharedObjectInitFailed, "shared object init failed"),
    E(cudaErrorOperatingSystem, "operating system"),
    E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    E(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    E(cudaErrorLossyQuery, "lossy query"),
    E(cudaErrorSymbolNotFound, "symbol not found"),
    E(cudaErrorNotReady, "device not ready"),
    E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    E(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    E(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
    E(cudaErrorLaunchIncompatibleTexturing, "launch incompatible texturing"),
    E(cudaErrorPeerAccessAlreadyEnabled, "peer access already enabled"),
    E(cudaErrorPeerAccessNotEnabled, "peer access not enabled"),
    E(cudaErrorSetOnActiveProcess, "set on active process"),
    E(cudaErrorContextIsDestroyed, "context is destroyed"),
    E(cudaErrorAssert, "device-side assert triggered"),
    E(cudaErrorTooManyPeers, "too many peers"),
    E(cudaErrorHostMemoryAlreadyRegistered, "host memory already registered"),
    E(cudaErrorHostMemoryNotRegistered, "host memory not registered"),
    E(cudaErrorHardwareStackError, "an illegal memory access was encountered"),
    E(cudaErrorIllegalInstruction, "an illegal instruction was encountered"),
    E(cudaErrorMisalignedAddress, "misaligned address"),
    E(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space"),
    E(cudaErrorInvalidPc, "invalid program counter"),
    E(cudaErrorLaunchFailure, "unspecified launch failure"),
    E(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch"),
    E(cudaErrorTensorMemoryLeak, "tensor memory leak"),
    E(cudaErrorNotPermitted, "operation not permitted"),
    E(cudaErrorNotSupported, "operation not supported"),
    E(cudaErrorSystemNotReady, "system not ready"),
    E(cudaErrorSystemDriverMismatch, "system driver mismatch"),
    E(cudaErrorCompatNotSupportedOnDevice, "compat not supported on device"),
    E(cudaErrorMpsConnectionFailed, "mps connection failed"),
    E(cudaErrorMpsRpcFailure, "mps rpc failure"),
    E(cudaErrorMpsServerNotReady, "mps server not ready"),
    E(cudaErrorMpsMaxClientsReached, "mps max clients reached"),
    E(cudaErrorMpsMaxConnectionsReached, "mps max connections reached"),
    E(cudaErrorMpsClientTerminated, "mps client terminated"),
    E(cudaErrorCdpNotSupported, "cdp not supported"),
    E(cudaErrorCdpVersionMismatch, "cdp version mismatch"),
    E(cudaErrorStreamCaptureUnsupported, "stream capture unsupported"),
    E(cudaErrorStreamCaptureInvalidated, "stream capture invalidated"),
    E(cudaErrorStreamCaptureMerge, "stream capture merge"),
    E(cudaErrorStreamCaptureUnmatched, "stream capture unmatched"),
    E(cudaErrorStreamCaptureUnjoined, "stream capture unjoined"),
    E(cudaErrorStreamCaptureIsolation, "stream capture isolation"),
    E(cudaErrorStreamCaptureImplicit, "stream capture implicit"),
    E(cudaErrorCapturedEvent, "captured event"),
    E(cudaErrorStreamCaptureWrongThread, "stream capture wrong thread"),
    E(cudaErrorTimeout, "timeout reached"),
    E(cudaErrorGraphExecUpdateFailure, "graph exec update failure"),
    E(cudaErrorExternalDevice, "external device"),
    E(cudaErrorInvalidClusterSize, "invalid cluster size"),
    E(cudaErrorFunctionNotLoaded, "function not loaded"),
    E(cudaErrorInvalidResourceType, "invalid resource type"),
    E(cudaErrorInvalidResourceConfiguration, "invalid resource configuration"),
    E(cudaErrorUnknown, "unknown error"),
};
#undef E

} // namespace

/* ------------------------------------------------------------ standin.h */

cudaError_t standin_enqueue(cudaStream_t s, std::function<void()> work)
{
    return enqueue(s, std::move(work), {});
}

void standin_device_fault(cudaError_t e, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int expected = 0;
    g_sticky.compare_exchange_strong(expected, (int)e);
    fprintf(stderr, "gpu-standin: %s (%s)\n", msg, cudaGetErrorName(e));
}

cudaError_t standin_set_last_error(cudaError_t e)
{
    t_last = e;
    return e;
}

int standin_current_device(void)
{
    return t_device;
}

int standin_physical_device(int device)
{
    State &s = st();
    if (device < 0 || device >= (int)s.devices.size())
        return -1;
    return s.devices[(size_t)device].physical;
}

int standin_is_device(const void *p, size_t bytes)
{
    State &s = st();
    std::lock_guard<std::mutex> lk(s.mem_mu);
    const Alloc *a = find_alloc_locked(s, p, bytes, nullptr);
    return a != nullptr && !a->pinned;
}

int standin_is_pinned(const void *p)
{
    State &s = st();
    std::lock_guard<std::mutex> lk(s.mem_mu);
    const Alloc *a = find_alloc_locked(s, p, 1, nullptr);
    return a != nullptr && a->pinned;
}

uint64_t standin_seed(void)
{
    return st().seed;
}

size_t standin_func_max_dynamic_shared(const void *func)
{
    State &s = st();
    std::lock_guard<std::mutex> lk(s.func_mu);
    auto it = s.func_shared.find(func);
    return it == s.func_shared.end() ? kSharedDefault : it->second;
}

/* ------------------------------------------------------------ errors */

extern "C" {

cudaError_t cudaGetLastError(void)
{
    if (cudaError_t e = sticky())
        return e;
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    if (cudaError_t e = sticky())
        return e;
    return t_last;
}

const char *cudaGetErrorString(cudaError_t error)
{
    for (const ErrName &n : kErrors)
        if (n.e == error)
            return n.text;
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
    for (const ErrName &n : kErrors)
        if (n.e == error)
            return n.name;
    return "unrecognized error code";
}

/* ------------------------------------------------------------ devices */

cudaError_t cudaGetDeviceCount(int *count)
{
    if (count == nullptr)
        return ret(cudaErrorInvalidValue);
    *count = 0;
    if (cudaError_t e = enter(); e != cudaSuccess && e != cudaErrorNoDevice)
        return ret(e);
    *count = (int)st().devices.size();
    return *count == 0 ? ret(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (device < 0 || device >= (int)st().devices.size())
        return ret(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (device == nullptr)
        return ret(cudaErrorInvalidValue);
    *device = t_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (prop == nullptr)
        return ret(cudaErrorInvalidValue);
    if (device < 0 || device >= (int)st().devices.size())
        return ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "dtrain GPU stand-in (CPU)");
    prop->totalGlobalMem = kTotalMem;
    prop->sharedMemPerBlock = kSharedDefault;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->memPitch = 2147483647;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->clockRate = 1980000;
    prop->totalConstMem = 65536;
    prop->major = 9;
    prop->minor = 0;
    prop->textureAlignment = 512;
    prop->multiProcessorCount = 132;
    prop->canMapHostMemory = 1;
    prop->concurrentKernels = 1;
    prop->ECCEnabled = 1;
    prop->pciBusID = st().devices[(size_t)device].physical + 1;
    prop->asyncEngineCount = 3;
    prop->unifiedAddressing = 1;
    prop->memoryClockRate = 2619000;
    prop->memoryBusWidth = 5120;
    prop->l2CacheSize = 50 * 1024 * 1024;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->regsPerMultiprocessor = 65536;
    prop->managedMemory = 1;
    prop->cooperativeLaunch = 1;
    prop->sharedMemPerBlockOptin = kSharedOptin;
    prop->maxBlocksPerMultiProcessor = 32;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device)
{
    return cudaGetDeviceProperties(prop, device);
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (cudaError_t e = enter())
        return ret(e);
    sync_device(t_device);
    return ret(sticky());
}

cudaError_t cudaDeviceReset(void)
{
    if (cudaError_t e = enter())
        return ret(e);
    sync_device(t_device);
    return ret(sticky());
}

cudaError_t cudaDriverGetVersion(int *version)
{
    if (version == nullptr)
        return ret(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    return cudaDriverGetVersion(version);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (free_bytes == nullptr || total_bytes == nullptr)
        return ret(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::mutex> lk(s.mem_mu);
    size_t used = s.devices[(size_t)t_device].allocated;
    *total_bytes = kTotalMem;
    *free_bytes = used < kTotalMem ? kTotalMem - used : 0;
    return cudaSuccess;
}

/* ------------------------------------------------------------ memory */

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (ptr == nullptr)
        return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (size == 0)
        return cudaSuccess;
    void *p = guarded_alloc(size, t_device, false);
    if (p == nullptr)
        return ret(cudaErrorMemoryAllocation);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (ptr == nullptr)
        return cudaSuccess;
    if (!standin_is_device(ptr, 1))
        return ret(cudaErrorInvalidValue);
    /* cudaFree synchronises: work still using the memory completes first */
    sync_device(-1);
    return ret(release(ptr, false));
}

cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (ptr == nullptr)
        return ret(cudaErrorInvalidValue);
    {
        State &s = st();
        std::lock_guard<std::mutex> g(s.mu);
        if (!resolve_locked(s, stream))
            return ret(cudaErrorInvalidResourceHandle);
    }
    /* The memory exists at once; using it out of stream order is the
     * caller's bug, which the stand-in does not see. */
    return cudaMalloc(ptr, size);
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (ptr == nullptr)
        return cudaSuccess;
    {
        State &s = st();
        std::lock_guard<std::mutex> lk(s.mem_mu);
        auto it = s.allocs.find((uintptr_t)ptr);
        if (it == s.allocs.end() || it->second.pinned)
            return ret(cudaErrorInvalidValue);
    }
    /* freed in stream order: a later use on this stream faults */
    return ret(enqueue(stream, [ptr] { (void)release(ptr, false); }, {}));
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (ptr == nullptr)
        return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (size == 0)
        return cudaSuccess;
    void *p = guarded_alloc(size, t_device, true);
    if (p == nullptr)
        return ret(cudaErrorMemoryAllocation);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    (void)flags;
    return cudaMallocHost(ptr, size);
}

cudaError_t cudaFreeHost(void *ptr)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (ptr == nullptr)
        return cudaSuccess;
    /* as cudaFree: the copies still reading or writing it complete first */
    sync_device(-1);
    return ret(release(ptr, true));
}

static cudaError_t memcpy_impl(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                               cudaStream_t stream, bool async)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (count == 0)
        return cudaSuccess;
    if ((int)kind < 0 || (int)kind > 4)
        return ret(cudaErrorInvalidMemcpyDirection);
    if (dst == nullptr || src == nullptr)
        return ret(cudaErrorInvalidValue);
    bool dst_ok, src_ok;
    Mem dm = classify(dst, count, &dst_ok), sm = classify(src, count, &src_ok);
    /* a copy past the end of an allocation is refused, as by the driver */
    if (!dst_ok || !src_ok)
        return ret(cudaErrorInvalidValue);
    bool dd = dm == Mem::Device, sd = sm == Mem::Device;
    if (kind != cudaMemcpyDefault) {
        bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
        bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
        if (want_sd != sd || want_dd != dd)
            return ret(cudaErrorInvalidValue);
    }
    if (!async)
        stream = nullptr; /* the legacy stream */
    uint64_t delay_us = 0;
    {
        State &s = st();
        std::lock_guard<std::mutex> g(s.mu);
        auto str = resolve_locked(s, stream);
        if (!str)
            return ret(cudaErrorInvalidResourceHandle);
        /* the legacy stream's seeded delay of a pageable cudaMemcpy */
        if (!async && dd && !sd && sm == Mem::Pageable) {
            /* DTRAIN_STANDIN_PAGEABLE_DELAY_US: a fixed delay instead (the
             * self-test's, so that a loaded machine still shows the race) */
            const char *fixed = getenv("DTRAIN_STANDIN_PAGEABLE_DELAY_US");
            delay_us = fixed != nullptr ? strtoull(fixed, nullptr, 10) % 1000000 : standin_rand(&str->rng) % 2000;
        }
    }
    if (!sd && !dd) {
        /* host to host: done by the host, in stream order */
        return ret(enqueue_wait(stream, [dst, src, count] { memmove(dst, src, count); }));
    }
    if (dd && !sd) {
        if (sm == Mem::Pageable) {
            /* staged now; the write lands later (the real driver may return
             * once the source is staged, before the DMA completes) */
            auto buf = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src,
                                                                    (const unsigned char *)src + count);
            std::function<void()> w = [dst, buf, delay_us, count] {
                if (delay_us > 0)
                    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
                memcpy(dst, buf->data(), count);
            };
            return ret(enqueue(stream, std::move(w), {}));
        }
        /* pinned source: cudaMemcpy is synchronous, cudaMemcpyAsync not */
        if (!async)
            return ret(enqueue_wait(stream, [dst, src, count] { memcpy(dst, src, count); }));
        return ret(enqueue(stream, [dst, src, count] { memcpy(dst, src, count); }, {}));
    }
    if (sd && !dd) {
        /* into pageable memory, or by cudaMemcpy: the host waits */
        if (!async || dm == Mem::Pageable)
            return ret(enqueue_wait(stream, [dst, src, count] { memcpy(dst, src, count); }));
        return ret(enqueue(stream, [dst, src, count] { memcpy(dst, src, count); }, {}));
    }
    /* device to device: asynchronous even for cudaMemcpy (the CUDA
     * documentation, "API synchronization behavior").  Overlapping regions
     * are undefined on a GPU (many threads copy at once): here 256-byte
     * pieces in a seeded order straight from src to dst, so code that
     * relies on memmove's semantics sees a wrong result. */
    const char *d = (const char *)dst, *sp = (const char *)src;
    if (d != sp && d < sp + count && sp < d + count) {
        uint64_t seed = standin_seed() ^ (uint64_t)(uintptr_t)dst;
        return ret(enqueue(stream, [dst, src, count, seed] {
            size_t pieces = (count + 255) / 256;
            std::vector<size_t> order(pieces);
            for (size_t i = 0; i < pieces; i++)
                order[i] = i;
            uint64_t r = seed;
            for (size_t i = pieces; i > 1; i--)
                std::swap(order[i - 1], order[standin_rand(&r) % i]);
            for (size_t i : order) {
                size_t at = i * 256, n = count - at < 256 ? count - at : 256;
                memmove((char *)dst + at, (const char *)src + at, n);
            }
        }, {}));
    }
    return ret(enqueue(stream, [dst, src, count] { memcpy(dst, src, count); }, {}));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return memcpy_impl(dst, src, count, kind, nullptr, false);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    return memcpy_impl(dst, src, count, kind, stream, true);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (count == 0)
        return cudaSuccess;
    if (!standin_is_device(ptr, count))
        return ret(cudaErrorInvalidValue);
    return ret(enqueue(stream, [ptr, value, count] { memset(ptr, value, count); }, {}));
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    /* asynchronous on device memory (the CUDA documentation) */
    return cudaMemsetAsync(ptr, value, count, nullptr);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (attributes == nullptr)
        return ret(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::mutex> lk(s.mem_mu);
    const Alloc *a = find_alloc_locked(s, ptr, 1, nullptr);
    if (a == nullptr) {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->devicePointer = nullptr;
        attributes->hostPointer = (void *)ptr;
    } else if (a->pinned) {
        attributes->type = cudaMemoryTypeHost;
        attributes->device = a->device;
        attributes->devicePointer = (void *)ptr;
        attributes->hostPointer = (void *)ptr;
    } else {
        attributes->type = cudaMemoryTypeDevice;
        attributes->device = a->device;
        attributes->devicePointer = (void *)ptr;
        attributes->hostPointer = nullptr;
    }
    return cudaSuccess;
}

/* ------------------------------------------------------------ streams */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (stream == nullptr || (flags & ~(unsigned)cudaStreamNonBlocking) != 0)
        return ret(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    auto str = new_stream(t_device, false, flags);
    s.streams[str.get()] = str;
    s.devices[(size_t)t_device].streams.push_back(str);
    *stream = (cudaStream_t)str.get();
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    if (cudaError_t e = enter())
        return ret(e);
    State &s = st();
    std::shared_ptr<Stream> str;
    {
        std::lock_guard<std::mutex> g(s.mu);
        auto it = s.streams.find((Stream *)stream);
        if (it == s.streams.end())
            return ret(cudaErrorInvalidResourceHandle);
        str = it->second;
        s.streams.erase(it);
        auto &v = s.devices[(size_t)str->device].streams;
        v.erase(std::remove(v.begin(), v.end(), str), v.end());
    }
    /* queued work finishes, as the real runtime lets it */
    {
        std::lock_guard<std::mutex> lk(str->mu);
        str->stop = true;
        str->cv.notify_all();
    }
    if (str->thread.joinable()) {
        if (str->thread.get_id() != std::this_thread::get_id())
            str->thread.join();
        else
            str->thread.detach(); /* destroyed from its own work: it ends after this item */
    }
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    if (cudaError_t e = enter())
        return ret(e);
    std::shared_ptr<Stream> str;
    {
        State &s = st();
        std::lock_guard<std::mutex> g(s.mu);
        str = resolve_locked(s, stream);
    }
    if (!str)
        return ret(cudaErrorInvalidResourceHandle);
    drain(str);
    return ret(sticky());
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    if (cudaError_t e = enter())
        return ret(e);
    std::shared_ptr<Stream> str;
    {
        State &s = st();
        std::lock_guard<std::mutex> g(s.mu);
        str = resolve_locked(s, stream);
    }
    if (!str)
        return ret(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> lk(str->mu);
    return str->completed >= str->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (flags == nullptr)
        return ret(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    auto str = resolve_locked(s, stream);
    if (!str)
        return ret(cudaErrorInvalidResourceHandle);
    *flags = str->flags;
    return cudaSuccess;
}

/* ------------------------------------------------------------ events */

static Event *find_event(cudaEvent_t e)
{
    State &s = st();
    auto it = s.events.find((Event *)e);
    return it == s.events.end() ? nullptr : it->second.get();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (event == nullptr || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming |
                                                 cudaEventInterprocess)) != 0)
        return ret(cudaErrorInvalidValue);
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    auto ev = std::make_unique<Event>();
    ev->flags = flags;
    ev->device = t_device;
    *event = (cudaEvent_t)ev.get();
    s.events[ev.get()] = std::move(ev);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    if (cudaError_t e = enter())
        return ret(e);
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    /* a pending record keeps its stamp alive through the queued item */
    if (s.events.erase((Event *)event) == 0)
        return ret(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    if (cudaError_t e = enter())
        return ret(e);
    State &s = st();
    {
        std::lock_guard<std::mutex> g(s.mu);
        if (find_event(event) == nullptr)
            return ret(cudaErrorInvalidResourceHandle);
    }
    auto stamp = std::make_shared<EventStamp>();
    std::shared_ptr<Stream> str;
    uint64_t ticket = 0;
    cudaError_t e = enqueue(stream, [stamp] { stamp->t = Clock::now(); }, {}, &str, &ticket);
    if (e != cudaSuccess)
        return ret(e);
    stamp->m = Marker{str, ticket};
    std::lock_guard<std::mutex> g(s.mu);
    Event *ev = find_event(event);
    if (ev == nullptr)
        return ret(cudaErrorInvalidResourceHandle);
    ev->stamp = stamp;
    return cudaSuccess;
}

/* The event's last record (null: never recorded), or an error. */
static cudaError_t event_stamp(cudaEvent_t event, std::shared_ptr<EventStamp> *out, unsigned *flags = nullptr)
{
    State &s = st();
    std::lock_guard<std::mutex> g(s.mu);
    Event *ev = find_event(event);
    if (ev == nullptr)
        return cudaErrorInvalidResourceHandle;
    *out = ev->stamp;
    if (flags)
        *flags = ev->flags;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    if (cudaError_t e = enter())
        return ret(e);
    std::shared_ptr<EventStamp> stamp;
    if (cudaError_t e = event_stamp(event, &stamp))
        return ret(e);
    if (!stamp || marker_done(stamp->m))
        return cudaSuccess;
    return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    if (cudaError_t e = enter())
        return ret(e);
    std::shared_ptr<EventStamp> stamp;
    if (cudaError_t e = event_stamp(event, &stamp))
        return ret(e);
    if (stamp)
        wait_marker(stamp->m);
    return ret(sticky());
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (ms == nullptr)
        return ret(cudaErrorInvalidValue);
    std::shared_ptr<EventStamp> a, b;
    unsigned fa = 0, fb = 0;
    if (cudaError_t e = event_stamp(start, &a, &fa))
        return ret(e);
    if (cudaError_t e = event_stamp(end, &b, &fb))
        return ret(e);
    if (!a || !b || ((fa | fb) & cudaEventDisableTiming))
        return ret(cudaErrorInvalidResourceHandle);
    if (!marker_done(a->m) || !marker_done(b->m))
        return cudaErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (flags != 0)
        return ret(cudaErrorInvalidValue);
    std::shared_ptr<EventStamp> stamp;
    if (cudaError_t e = event_stamp(event, &stamp))
        return ret(e);
    std::vector<Marker> waits;
    if (stamp)
        waits.push_back(stamp->m);
    /* work queued on stream after this waits for the event's record */
    return ret(enqueue(stream, nullptr, std::move(waits)));
}

/* ------------------------------------------------------------ functions */

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (cudaError_t e = enter())
        return ret(e);
    if (func == nullptr)
        return ret(cudaErrorInvalidDeviceFunction);
    switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize: {
        if (value < 0 || (size_t)value > kSharedOptin)
            return ret(cudaErrorInvalidValue);
        State &s = st();
        std::lock_guard<std::mutex> lk(s.func_mu);
        s.func_shared[func] = (size_t)value;
        return cudaSuccess;
    }
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        return value < -1 || value > 100 ? ret(cudaErrorInvalidValue) : cudaSuccess;
    default:
        return ret(cudaErrorInvalidValue);
    }
}

/* ------------------------------------------------------------ driver API */

CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (st().devices.size() > 0 && g_forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    return st().devices.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (count == nullptr)
        return CUDA_ERROR_INVALID_VALUE;
    *count = 0;
    if (g_forked && (st(), true))
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = (int)st().devices.size();
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version)
{
    if (version == nullptr)
        return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

} // extern "C"
