// SPDX-License-Identifier: GPL-2.0-or-later
/* The GPU stand-in's host runtime, cuBLASLt and CUB, checked for the
 * faithfulness that lets them find defects: asynchronous streams, the
 * legacy stream's implicit synchronisation (and its absence for
 * non-blocking streams), pageable copies that land late, guard pages,
 * CUDA_VISIBLE_DEVICES, sticky faults, cuBLASLt against a naive product
 * and its refusals, CUB's stable sort.
 *
 * The checks that fork (guard pages, device selection) run first, before
 * the runtime starts any thread; the sticky fault runs last (it ends the
 * process's "context"). */
#include "standin.h"
#include "tap.h"

#include <cub/device/device_radix_sort.cuh>
#include <cublasLt.h>
#include <cuda.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STANDIN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STANDIN_ASAN 1
#endif
#endif

namespace {

void sleep_ms(int ms)
{
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

/* Queue a pause on s: what follows on s runs that much later. */
void stall(cudaStream_t s, int ms)
{
    (void)standin_enqueue(s, [ms] { sleep_ms(ms); });
}

/* Queue a wait on s until the host opens the gate: what follows on s runs
 * only after the host has looked (no timing: a loaded machine cannot make
 * the host look too late). */
struct Gate {
    std::atomic<int> open{0};
};
void hold(cudaStream_t s, Gate &g)
{
    (void)standin_enqueue(s, [&g] {
        while (g.open.load() == 0)
            sleep_ms(1);
    });
}

/* Run fn in a child; its wait status. */
template <class F> int in_child(F fn)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

[[maybe_unused]] bool died_of_segv(int status)
{
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

/* In a child: the devices under these variables, as "count:phys,phys". */
std::string devices_under(const char *gpus, const char *cvd)
{
    int fd[2];
    if (pipe(fd) != 0)
        return "pipe";
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (gpus)
            setenv("DTRAIN_STANDIN_GPUS", gpus, 1);
        else
            unsetenv("DTRAIN_STANDIN_GPUS");
        if (cvd)
            setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        int n = -1;
        cudaError_t e = cudaGetDeviceCount(&n);
        int drv = -1;
        CUresult ci = cuInit(0);
        (void)cuDeviceGetCount(&drv);
        std::string out = std::to_string(n) + (e == cudaErrorNoDevice ? "!" : "") + (ci == CUDA_SUCCESS ? "" : "?") +
                          (drv == n ? "" : "#") + ":";
        for (int i = 0; i < n; i++)
            out += (i ? "," : "") + std::to_string(standin_physical_device(i));
        ssize_t w = write(fd[1], out.data(), out.size());
        _exit(w == (ssize_t)out.size() ? 0 : 1);
    }
    close(fd[1]);
    std::string out;
    char buf[256];
    ssize_t r;
    while ((r = read(fd[0], buf, sizeof buf)) > 0)
        out.append(buf, (size_t)r);
    close(fd[0]);
    waitpid(pid, nullptr, 0);
    return out;
}

void test_fork_first()
{
#ifdef STANDIN_ASAN
    skip("gpu-standin: guard page faults (the sanitizer takes SIGSEGV over)");
    skip("gpu-standin: use after free faults (the sanitizer takes SIGSEGV over)");
#else
    int st = in_child([] {
        char *p = nullptr;
        if (cudaMalloc((void **)&p, 1024) != cudaSuccess)
            _exit(2);
        /* one byte past the end, from the stream's thread as a kernel would */
        (void)standin_enqueue(0, [p] { ((volatile char *)p)[1024] = 1; });
        (void)cudaDeviceSynchronize();
        _exit(0);
    });
    ok(died_of_segv(st), "gpu-standin: a write one byte past a cudaMalloc block faults (status %#x)", st);
    st = in_child([] {
        char *p = nullptr;
        if (cudaMalloc((void **)&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
            _exit(2);
        (void)standin_enqueue(0, [p] { ((volatile char *)p)[0] = 1; });
        (void)cudaDeviceSynchronize();
        _exit(0);
    });
    ok(died_of_segv(st), "gpu-standin: a write after cudaFree faults (status %#x)", st);
#endif
    /* exit with work queued: what runs finishes, the rest is dropped, no hang */
    auto t0 = std::chrono::steady_clock::now();
    int ex = in_child([] {
        cudaStream_t s;
        (void)cudaStreamCreate(&s);
        stall(s, 200);
        for (int i = 0; i < 1000; i++)
            stall(s, 100);
        stall(0, 200);
        exit(0);
    });
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ok(WIFEXITED(ex) && WEXITSTATUS(ex) == 0 && took < 60.0,
       "gpu-standin: exit with 100 s of work queued takes %.2f s (queued work is dropped, not waited for)", took);
    std::string s;
    s = devices_under(nullptr, nullptr);
    ok(s == "8:0,1,2,3,4,5,6,7", "gpu-standin: 8 devices by default (%s)",
       s.c_str());
    s = devices_under("4", nullptr);
    ok(s == "4:0,1,2,3", "gpu-standin: DTRAIN_STANDIN_GPUS=4 (%s)", s.c_str());
    s = devices_under(nullptr, "3,1");
    ok(s == "2:3,1", "gpu-standin: CUDA_VISIBLE_DEVICES=3,1 renumbers (%s)",
       s.c_str());
    s = devices_under(nullptr, "0,9,1");
    ok(s == "1:0", "gpu-standin: CUDA_VISIBLE_DEVICES stops at 9 of 8 (%s)",
       s.c_str());
    s = devices_under(nullptr, "2,x,1");
    ok(s == "1:2", "gpu-standin: CUDA_VISIBLE_DEVICES stops at x (%s)",
       s.c_str());
    s = devices_under(nullptr, "1,1");
    ok(s == "1:1", "gpu-standin: CUDA_VISIBLE_DEVICES stops at a repeat (%s)",
       s.c_str());
    s = devices_under(nullptr, "");
    ok(s == "0!?:", "gpu-standin: empty CUDA_VISIBLE_DEVICES: no device (%s)",
       s.c_str());
    s = devices_under("2", "5");
    ok(s == "0!?:", "gpu-standin: CUDA_VISIBLE_DEVICES=5 of 2: no device (%s)",
       s.c_str());
}

float *dev_floats(size_t n)
{
    float *p = nullptr;
    if (cudaMalloc((void **)&p, n * sizeof(float)) != cudaSuccess)
        return nullptr;
    return p;
}

void set_floats(float *d, size_t n, float v)
{
    std::vector<float> h(n, v);
    (void)cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    (void)cudaDeviceSynchronize();
}

void test_memory()
{
    const size_t n = 1000;
    float *d = dev_floats(n);
    ok(d != nullptr && ((uintptr_t)d % 256) == 0, "gpu-standin: cudaMalloc gives 256-byte aligned memory");
    std::vector<float> h(n, 0.0f);
    ok(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess && std::isnan(h[0]) &&
           std::isnan(h[n - 1]),
       "gpu-standin: fresh device memory reads as NaN");
    ok(standin_is_device(d, n * sizeof(float)) && !standin_is_device(d, n * sizeof(float) + 1) &&
           standin_is_device(d + 10, 4) && !standin_is_device(h.data(), 4),
       "gpu-standin: standin_is_device knows the block's bounds");
    ok(cudaMemcpy(h.data(), d, (n + 1) * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
       "gpu-standin: a copy past the block is refused");
    (void)cudaGetLastError();
    ok(cudaFree(d + 64) == cudaErrorInvalidValue && cudaGetLastError() == cudaErrorInvalidValue &&
           cudaGetLastError() == cudaSuccess,
       "gpu-standin: cudaFree of an inner pointer: invalid value, reported once by cudaGetLastError");
    ok(cudaFree(h.data()) == cudaErrorInvalidValue, "gpu-standin: cudaFree of host memory: invalid value");
    (void)cudaGetLastError();
    cudaPointerAttributes a;
    void *pin = nullptr;
    (void)cudaMallocHost(&pin, 64);
    bool attrs = cudaPointerGetAttributes(&a, d) == cudaSuccess && a.type == cudaMemoryTypeDevice;
    attrs = attrs && cudaPointerGetAttributes(&a, pin) == cudaSuccess && a.type == cudaMemoryTypeHost;
    attrs = attrs && cudaPointerGetAttributes(&a, h.data()) == cudaSuccess && a.type == cudaMemoryTypeUnregistered;
    ok(attrs && standin_is_pinned(pin) && !standin_is_pinned(d), "gpu-standin: pointer attributes by kind");
    ok(cudaFree(d) == cudaSuccess && !standin_is_device(d, 4) && cudaFreeHost(pin) == cudaSuccess,
       "gpu-standin: cudaFree and cudaFreeHost");
    size_t fr = 0, tot = 0;
    ok(cudaMemGetInfo(&fr, &tot) == cudaSuccess && tot == (80ull << 30) && fr <= tot, "gpu-standin: cudaMemGetInfo");
}

void test_devices()
{
    cudaDeviceProp p;
    ok(cudaGetDeviceProperties(&p, 0) == cudaSuccess && p.major == 9 && p.minor == 0 &&
           p.multiProcessorCount == 132 && p.sharedMemPerBlockOptin == 227 * 1024 &&
           strcmp(p.name, "dtrain GPU stand-in (CPU)") == 0,
       "gpu-standin: device properties (sm_90, 132 SMs, 227 KiB opt-in)");
    ok(cudaGetDeviceProperties(&p, 99) == cudaErrorInvalidDevice && cudaSetDevice(99) == cudaErrorInvalidDevice,
       "gpu-standin: device 99: invalid device");
    (void)cudaGetLastError();
    (void)cudaSetDevice(1);
    int other = -1, mine = -1;
    std::thread t([&] { (void)cudaGetDevice(&other); });
    t.join();
    (void)cudaGetDevice(&mine);
    ok(mine == 1 && other == 0, "gpu-standin: the current device is per host thread (%d here, %d there)", mine,
       other);
    (void)cudaSetDevice(0);
    static int kernel_stub;
    ok(standin_func_max_dynamic_shared(&kernel_stub) == 48 * 1024 &&
           cudaFuncSetAttribute(&kernel_stub, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000) == cudaSuccess &&
           standin_func_max_dynamic_shared(&kernel_stub) == 100000 &&
           cudaFuncSetAttribute(&kernel_stub, cudaFuncAttributeMaxDynamicSharedMemorySize, 300000) ==
               cudaErrorInvalidValue,
       "gpu-standin: cudaFuncSetAttribute's dynamic shared memory (48 KiB default, 227 KiB limit)");
    (void)cudaGetLastError();
    /* CUDA does not survive a fork: the child's calls fail, its exit does not hang */
    int st = in_child([] {
        void *p = nullptr;
        int n = -1;
        bool ok_child = cudaMalloc(&p, 16) == cudaErrorInitializationError &&
                        cudaGetDeviceCount(&n) == cudaErrorInitializationError && n == 0 &&
                        cuInit(0) == CUDA_ERROR_NOT_INITIALIZED;
        exit(ok_child ? 0 : 1);
    });
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
       "gpu-standin: in a child forked after the runtime started, calls fail with an initialization error");
    ok(strcmp(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress") == 0 &&
           strcmp(cudaGetErrorString(cudaErrorNotReady), "device not ready") == 0,
       "gpu-standin: error names and strings");
}

void test_streams()
{
    const size_t n = 256;
    float *d = dev_floats(n);
    float *pin = nullptr;
    (void)cudaMallocHost((void **)&pin, n * sizeof(float));
    set_floats(d, n, 2.0f);
    cudaStream_t s, s2, nb;
    (void)cudaStreamCreate(&s);
    (void)cudaStreamCreate(&s2);
    (void)cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);

    /* pinned D2H is asynchronous: the host may read before it lands */
    for (size_t i = 0; i < n; i++)
        pin[i] = 1.0f;
    Gate g1;
    hold(s, g1);
    ok(cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess && pin[0] == 1.0f &&
           cudaStreamQuery(s) == cudaErrorNotReady,
       "gpu-standin: right after a pinned cudaMemcpyAsync D2H the host sees the old data");
    g1.open = 1;
    ok(cudaStreamSynchronize(s) == cudaSuccess && pin[0] == 2.0f && pin[n - 1] == 2.0f &&
           cudaStreamQuery(s) == cudaSuccess,
       "gpu-standin: after cudaStreamSynchronize it sees the new");

    /* pageable D2H cudaMemcpyAsync waits */
    std::vector<float> page(n, 1.0f);
    stall(s, 50);
    ok(cudaMemcpyAsync(page.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess &&
           page[0] == 2.0f,
       "gpu-standin: a pageable cudaMemcpyAsync D2H is synchronous");

    /* across streams, only an event orders */
    for (size_t i = 0; i < n; i++)
        pin[i] = 0.0f;
    Gate g2;
    hold(s, g2);
    (void)cudaMemsetAsync(d, 0, n * sizeof(float), s); /* 0.0f */
    (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, s2);
    (void)cudaStreamSynchronize(s2);
    ok(pin[0] == 2.0f, "gpu-standin: without an event a second stream reads before the first wrote (%g)",
       (double)pin[0]);
    g2.open = 1;
    (void)cudaStreamSynchronize(s);
    set_floats(d, n, 2.0f);
    cudaEvent_t e, e0;
    (void)cudaEventCreate(&e);
    (void)cudaEventCreate(&e0);
    (void)cudaEventRecord(e0, s);
    stall(s, 100);
    Gate g3;
    hold(s, g3);
    (void)cudaMemsetAsync(d, 0, n * sizeof(float), s);
    (void)cudaEventRecord(e, s);
    ok(cudaEventQuery(e) == cudaErrorNotReady, "gpu-standin: an event not yet reached is not ready");
    g3.open = 1;
    (void)cudaStreamWaitEvent(s2, e, 0);
    (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, s2);
    (void)cudaStreamSynchronize(s2);
    ok(pin[0] == 0.0f, "gpu-standin: with cudaStreamWaitEvent the second stream reads after the write (%g)",
       (double)pin[0]);
    float ms = 0.0f;
    bool timed = cudaEventSynchronize(e) == cudaSuccess && cudaEventQuery(e) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, e0, e) == cudaSuccess;
    ok(timed && ms >= 90.0f,
       "gpu-standin: cudaEventElapsedTime across the stall (%.1f ms)", (double)ms);
    cudaEvent_t nt;
    (void)cudaEventCreateWithFlags(&nt, cudaEventDisableTiming);
    (void)cudaEventRecord(nt, s);
    (void)cudaEventSynchronize(nt);
    ok(cudaEventElapsedTime(&ms, e0, nt) == cudaErrorInvalidResourceHandle,
       "gpu-standin: no elapsed time with cudaEventDisableTiming");
    (void)cudaGetLastError();

    /* the legacy stream waits for blocking streams, not non-blocking ones */
    set_floats(d, n, 2.0f);
    for (size_t i = 0; i < n; i++)
        pin[i] = 9.0f;
    stall(s, 100);
    (void)cudaMemsetAsync(d, 0, n * sizeof(float), s);
    (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, 0);
    (void)cudaStreamSynchronize(0);
    ok(pin[0] == 0.0f, "gpu-standin: the legacy stream waits for a blocking stream (%g)", (double)pin[0]);
    set_floats(d, n, 2.0f);
    Gate g4;
    hold(nb, g4);
    (void)cudaMemsetAsync(d, 0, n * sizeof(float), nb);
    (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, 0);
    (void)cudaStreamSynchronize(0);
    ok(pin[0] == 2.0f, "gpu-standin: the legacy stream does not wait for a non-blocking one (%g)", (double)pin[0]);
    g4.open = 1;
    (void)cudaDeviceSynchronize();
    ok(cudaStreamQuery(nb) == cudaSuccess, "gpu-standin: cudaDeviceSynchronize waits for every stream");
    set_floats(d, n, 2.0f);
    stall(0, 100);
    (void)cudaMemsetAsync(d, 0, n * sizeof(float), 0);
    (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    (void)cudaStreamSynchronize(s);
    ok(pin[0] == 0.0f, "gpu-standin: a blocking stream waits for the legacy stream (%g)", (double)pin[0]);

    /* a pageable cudaMemcpy H2D returns before the data lands: 100 ms late
     * here, so that even a loaded machine reads before it lands */
    setenv("DTRAIN_STANDIN_PAGEABLE_DELAY_US", "100000", 1);
    int early = 0, tries = 5;
    bool blocking_right = true;
    for (int t = 0; t < tries; t++) {
        set_floats(d, n, 2.0f);
        std::vector<float> src(n, 7.0f + (float)t);
        (void)cudaMemcpy(d, src.data(), n * sizeof(float), cudaMemcpyHostToDevice);
        (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, nb);
        (void)cudaStreamSynchronize(nb);
        early += pin[0] != 7.0f + (float)t;
        (void)cudaDeviceSynchronize();
        src.assign(n, 100.0f + (float)t);
        (void)cudaMemcpy(d, src.data(), n * sizeof(float), cudaMemcpyHostToDevice);
        (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, s);
        (void)cudaStreamSynchronize(s);
        blocking_right = blocking_right && pin[n - 1] == 100.0f + (float)t;
    }
    ok(early > 0, "gpu-standin: a non-blocking stream read the old data after a pageable cudaMemcpy H2D "
                  "(%d of %d tries)", early, tries);
    ok(blocking_right, "gpu-standin: a blocking stream always read the new data (the legacy stream orders it)");
    unsetenv("DTRAIN_STANDIN_PAGEABLE_DELAY_US");
    std::vector<float> src(n, 42.0f);
    (void)cudaMemcpy(d, src.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    (void)cudaDeviceSynchronize();
    (void)cudaMemcpyAsync(pin, d, n * sizeof(float), cudaMemcpyDeviceToHost, nb);
    (void)cudaStreamSynchronize(nb);
    ok(pin[0] == 42.0f, "gpu-standin: after cudaDeviceSynchronize the non-blocking stream reads it");

    /* destroy drains */
    std::atomic<int> done{0};
    stall(s2, 50);
    (void)standin_enqueue(s2, [&done] { done = 1; });
    ok(cudaStreamDestroy(s2) == cudaSuccess && done == 1, "gpu-standin: cudaStreamDestroy lets queued work finish");
    ok(cudaStreamDestroy(s2) == cudaErrorInvalidResourceHandle &&
           cudaStreamSynchronize(s2) == cudaErrorInvalidResourceHandle,
       "gpu-standin: a destroyed stream is an invalid handle");
    (void)cudaGetLastError();
    (void)cudaEventDestroy(e);
    (void)cudaEventDestroy(e0);
    (void)cudaEventDestroy(nt);
    (void)cudaStreamDestroy(s);
    (void)cudaStreamDestroy(nb);
    (void)cudaFree(d);
    (void)cudaFreeHost(pin);
}

/* ------------------------------------------------------------ cuBLASLt */

uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct Gemm {
    int m, n, k, ta, tb;
    cudaDataType_t ab, cd;
    bool bias;
    float beta;
};

/* Run one GEMM through cuBLASLt and compare with a naive one in double. */
bool run_gemm(cublasLtHandle_t lt, const Gemm &g, double *worst)
{
    int ra = g.ta ? g.k : g.m, ca = g.ta ? g.m : g.k, rb = g.tb ? g.n : g.k, cb = g.tb ? g.k : g.n;
    int lda = ra + (g.ab == CUDA_R_32F ? 3 : 8), ldb = rb + (g.ab == CUDA_R_32F ? 1 : 8), ldc = g.m + 8;
    size_t esab = g.ab == CUDA_R_32F ? 4 : 2, escd = g.cd == CUDA_R_32F ? 4 : 2;
    std::vector<float> A((size_t)lda * ca), B((size_t)ldb * cb), C((size_t)ldc * g.n), bias(g.m);
    uint64_t r = 12345;
    auto rnd = [&] { return (float)((double)(standin_rand(&r) % 2001) / 1000.0 - 1.0); };
    auto q = [&](float v, cudaDataType_t t) { return t == CUDA_R_32F ? v : from_bf16(to_bf16(v)); };
    for (auto &v : A)
        v = q(rnd(), g.ab);
    for (auto &v : B)
        v = q(rnd(), g.ab);
    for (auto &v : C)
        v = q(rnd(), g.cd);
    for (auto &v : bias)
        v = q(rnd(), g.cd);
    auto upload = [&](const std::vector<float> &h, cudaDataType_t t) {
        void *d = nullptr;
        size_t es = t == CUDA_R_32F ? 4 : 2;
        (void)cudaMalloc(&d, h.size() * es);
        if (t == CUDA_R_32F) {
            (void)cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
        } else {
            std::vector<uint16_t> b(h.size());
            for (size_t i = 0; i < h.size(); i++)
                b[i] = to_bf16(h[i]);
            (void)cudaMemcpy(d, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
        }
        return d;
    };
    void *dA = upload(A, g.ab), *dB = upload(B, g.ab), *dC = upload(C, g.cd), *dbias = upload(bias, g.cd);
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    cublasOperation_t opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    bool okk = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    okk = okk && cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == 0;
    okk = okk && cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == 0;
    okk = okk && cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0;
    okk = okk && cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias) == 0;
    okk = okk && cublasLtMatrixLayoutCreate(&la, g.ab, (uint64_t)ra, (uint64_t)ca, lda) == 0;
    okk = okk && cublasLtMatrixLayoutCreate(&lb, g.ab, (uint64_t)rb, (uint64_t)cb, ldb) == 0;
    okk = okk && cublasLtMatrixLayoutCreate(&lc, g.cd, (uint64_t)g.m, (uint64_t)g.n, ldc) == 0;
    okk = okk && cublasLtMatmulPreferenceCreate(&pref) == 0;
    uint32_t al = 256;
    okk = okk && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al,
                                                      sizeof al) == 0;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    okk = okk && cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &res, &found) == 0 && found == 1;
    float alpha = 1.0f, beta = g.beta;
    okk = okk && cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dC, lc, &res.algo, nullptr, 0, 0) ==
                     CUBLAS_STATUS_SUCCESS;
    std::vector<float> out((size_t)ldc * g.n);
    if (g.cd == CUDA_R_32F) {
        (void)cudaMemcpy(out.data(), dC, out.size() * 4, cudaMemcpyDeviceToHost);
    } else {
        std::vector<uint16_t> b(out.size());
        (void)cudaMemcpy(b.data(), dC, b.size() * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < b.size(); i++)
            out[i] = from_bf16(b[i]);
    }
    *worst = 0.0;
    for (int j = 0; j < g.n; j++) {
        for (int i = 0; i < g.m; i++) {
            double acc = 0.0;
            for (int l = 0; l < g.k; l++) {
                double a = g.ta ? A[(size_t)i * lda + l] : A[(size_t)l * lda + i];
                double b = g.tb ? B[(size_t)l * ldb + j] : B[(size_t)j * ldb + l];
                acc += a * b;
            }
            acc += g.beta * C[(size_t)j * ldc + i] + (g.bias ? bias[i] : 0.0);
            /* fp32: accumulation error; bf16: one rounding (half an ulp, 2^-9 relative) */
            double tol = g.cd == CUDA_R_32F ? 1e-5 * (1 + std::fabs(acc)) : std::fabs(acc) * (1.0 / 256) + 1e-6;
            double err = std::fabs(out[(size_t)j * ldc + i] - acc);
            *worst = std::max(*worst, err);
            okk = okk && err <= tol;
        }
    }
    /* the padding between columns is untouched */
    okk = okk && out[g.m] == q(C[g.m], g.cd);
    (void)escd;
    (void)esab;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    (void)cudaFree(dA);
    (void)cudaFree(dB);
    (void)cudaFree(dC);
    (void)cudaFree(dbias);
    return okk;
}

/* The heuristic's answer for a bf16 (or typed) GEMM under these alignments. */
cublasStatus_t heuristic(cublasLtHandle_t lt, cudaDataType_t ab, cudaDataType_t cd, int ld, uint32_t align,
                         int32_t bias_type)
{
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lc;
    cublasLtMatmulPreference_t pref;
    (void)cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (bias_type >= 0) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        (void)cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        (void)cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
    }
    (void)cublasLtMatrixLayoutCreate(&la, ab, 64, 64, ld);
    (void)cublasLtMatrixLayoutCreate(&lc, cd, 64, 64, 64);
    (void)cublasLtMatmulPreferenceCreate(&pref);
    (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, la, lc, lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    return s;
}

/* fp16: D = alpha I B with an 8x8 identity, B's first column chosen to
 * show the widening (subnormals, 65504) and the rounding (ties to even,
 * overflow to inf) of the fp16 result. */
bool fp16_identity(cublasLtHandle_t lt, float alpha, const std::vector<uint16_t> &col, cudaDataType_t cd,
                   std::vector<uint16_t> *out16, std::vector<float> *out32)
{
    const int n = 8;
    std::vector<uint16_t> I(n * n, 0), B(n * n, 0);
    for (int i = 0; i < n; i++)
        I[i * n + i] = 0x3c00; /* 1.0 */
    for (int i = 0; i < n; i++)
        B[i] = col[i];
    void *dI, *dB, *dD;
    (void)cudaMalloc(&dI, n * n * 2);
    (void)cudaMalloc(&dB, n * n * 2);
    (void)cudaMalloc(&dD, n * n * 4);
    (void)cudaMemcpy(dI, I.data(), n * n * 2, cudaMemcpyHostToDevice);
    (void)cudaMemcpy(dB, B.data(), n * n * 2, cudaMemcpyHostToDevice);
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l16, lc;
    (void)cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    (void)cublasLtMatrixLayoutCreate(&l16, CUDA_R_16F, n, n, n);
    (void)cublasLtMatrixLayoutCreate(&lc, cd, n, n, n);
    float beta = 0.0f;
    bool good = cublasLtMatmul(lt, desc, &alpha, dI, l16, dB, l16, &beta, dD, lc, dD, lc, nullptr, nullptr, 0, 0) ==
                CUBLAS_STATUS_SUCCESS;
    if (cd == CUDA_R_16F) {
        out16->assign(n, 0);
        (void)cudaMemcpy(out16->data(), dD, n * 2, cudaMemcpyDeviceToHost);
    } else {
        out32->assign(n, 0.0f);
        (void)cudaMemcpy(out32->data(), dD, n * 4, cudaMemcpyDeviceToHost);
    }
    cublasLtMatrixLayoutDestroy(l16);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    (void)cudaFree(dI);
    (void)cudaFree(dB);
    (void)cudaFree(dD);
    return good;
}

void test_cublaslt(cublasLtHandle_t lt)
{
    {
        std::vector<uint16_t> col = {0x3c00, 0x0001, 0x7bff, 0xc000, 0x03ff, 0x3c01, 0x4248, 0x3555};
        std::vector<uint16_t> o16;
        std::vector<float> o32;
        bool good = fp16_identity(lt, 1.0f, col, CUDA_R_32F, &o16, &o32);
        ok(good && o32[0] == 1.0f && o32[1] == std::ldexp(1.0f, -24) && o32[2] == 65504.0f && o32[3] == -2.0f &&
               o32[4] == std::ldexp(1023.0f, -24) && o32[5] == 1.0f + std::ldexp(1.0f, -10) && o32[6] == 3.140625f,
           "gpu-standin: cuBLASLt fp16 inputs widen exactly (subnormals, 65504)");
        good = fp16_identity(lt, 1.0f, col, CUDA_R_16F, &o16, &o32);
        ok(good && o16 == col, "gpu-standin: cuBLASLt fp16 result of an exact product: the same bits");
        good = fp16_identity(lt, 1.0f + std::ldexp(1.0f, -11), col, CUDA_R_16F, &o16, &o32);
        ok(good && o16[0] == 0x3c00 && o16[2] == 0x7c00 && o16[5] == 0x3c02 && o16[1] == 0x0001,
           "gpu-standin: cuBLASLt fp16 rounding: ties to even, inf beyond 65504 (%#x %#x %#x)", o16[0], o16[2],
           o16[5]);
    }
    double w = 0.0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            ok(run_gemm(lt, Gemm{37, 29, 53, ta, tb, CUDA_R_32F, CUDA_R_32F, ta == tb, 0.0f}, &w),
               "gpu-standin: cuBLASLt fp32 %c%c%s matches a naive product (worst %.2g)", ta ? 'T' : 'N',
               tb ? 'T' : 'N', ta == tb ? " with bias" : "", w);
    ok(run_gemm(lt, Gemm{40, 24, 64, 1, 0, CUDA_R_32F, CUDA_R_32F, false, 1.0f}, &w),
       "gpu-standin: cuBLASLt fp32 accumulate (beta 1) (worst %.2g)", w);
    ok(run_gemm(lt, Gemm{48, 40, 72, 1, 0, CUDA_R_16BF, CUDA_R_16BF, true, 0.0f}, &w),
       "gpu-standin: cuBLASLt bf16 TN with bf16 bias, rounded once (worst %.2g)", w);
    ok(run_gemm(lt, Gemm{48, 40, 72, 0, 1, CUDA_R_16BF, CUDA_R_16BF, false, 1.0f}, &w),
       "gpu-standin: cuBLASLt bf16 NT accumulate (worst %.2g)", w);
    ok(run_gemm(lt, Gemm{32, 16, 40, 0, 0, CUDA_R_16BF, CUDA_R_32F, true, 0.0f}, &w),
       "gpu-standin: cuBLASLt bf16 inputs, fp32 result and bias (worst %.2g)", w);

    ok(heuristic(lt, CUDA_R_16BF, CUDA_R_16BF, 64, 256, -1) == CUBLAS_STATUS_SUCCESS,
       "gpu-standin: bf16 aligned: an algorithm");
    ok(heuristic(lt, CUDA_R_16BF, CUDA_R_16BF, 64, 2, -1) == CUBLAS_STATUS_SUCCESS &&
           heuristic(lt, CUDA_R_16BF, CUDA_R_16BF, 67, 256, -1) == CUBLAS_STATUS_SUCCESS,
       "gpu-standin: bf16 with 2-byte alignment or an odd leading dimension: an (unaligned) algorithm");
    ok(heuristic(lt, CUDA_R_16BF, CUDA_R_16BF, 64, 1, -1) == CUBLAS_STATUS_NOT_SUPPORTED,
       "gpu-standin: bf16 with 1-byte alignment (below the element): not supported");
    ok(heuristic(lt, CUDA_R_32F, CUDA_R_32F, 67, 4, -1) == CUBLAS_STATUS_SUCCESS &&
           heuristic(lt, CUDA_R_32F, CUDA_R_32F, 64, 2, -1) == CUBLAS_STATUS_NOT_SUPPORTED,
       "gpu-standin: fp32 with 4-byte alignment: an algorithm; with 2: not supported");
    {
        /* an algorithm chosen for 256-byte aligned pointers, used with a
         * pointer 4 bytes off */
        float *dA = dev_floats(64 * 64 + 1), *dC = dev_floats(64 * 64);
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t l;
        cublasLtMatmulPreference_t pref;
        (void)cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        (void)cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 64, 64, 64);
        (void)cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        float alpha = 1.0f, beta = 0.0f;
        bool got = cublasLtMatmulAlgoGetHeuristic(lt, desc, l, l, l, l, pref, 1, &res, &found) == 0 && found == 1;
        ok(got && cublasLtMatmul(lt, desc, &alpha, dA + 1, l, dA, l, &beta, dC, l, dC, l, &res.algo, nullptr, 0, 0) ==
                      CUBLAS_STATUS_NOT_SUPPORTED &&
               cublasLtMatmul(lt, desc, &alpha, dA, l, dA, l, &beta, dC, l, dC, l, &res.algo, nullptr, 0, 0) ==
                   CUBLAS_STATUS_SUCCESS,
           "gpu-standin: cublasLtMatmul refuses a pointer less aligned than its algorithm was chosen for");
        (void)cudaDeviceSynchronize();
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(l);
        cublasLtMatmulDescDestroy(desc);
        (void)cudaFree(dA);
        (void)cudaFree(dC);
    }
    ok(heuristic(lt, CUDA_R_32F, CUDA_R_16BF, 64, 256, -1) == CUBLAS_STATUS_NOT_SUPPORTED,
       "gpu-standin: fp32 inputs with a bf16 result: not supported");
    ok(heuristic(lt, CUDA_R_16BF, CUDA_R_16BF, 64, 256, CUDA_R_32F) == CUBLAS_STATUS_NOT_SUPPORTED &&
           heuristic(lt, CUDA_R_16BF, CUDA_R_16BF, 64, 256, CUDA_R_16BF) == CUBLAS_STATUS_SUCCESS,
       "gpu-standin: the bias is of D's type");
}

/* ------------------------------------------------------------ CUB */

void test_cub()
{
    const int n = 2000;
    std::vector<int32_t> keys(n), vals(n);
    uint64_t r = 7;
    for (int i = 0; i < n; i++) {
        keys[i] = (int32_t)(standin_rand(&r) % 41) - 20; /* many repeats, negatives */
        vals[i] = i;
    }
    int32_t *d[4];
    for (auto &p : d)
        (void)cudaMalloc((void **)&p, n * sizeof(int32_t));
    (void)cudaMemcpy(d[0], keys.data(), n * 4, cudaMemcpyHostToDevice);
    (void)cudaMemcpy(d[1], vals.data(), n * 4, cudaMemcpyHostToDevice);
    size_t temp_bytes = 0;
    cudaError_t sized = cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const int32_t *)nullptr,
                                                        (int32_t *)nullptr, (const int32_t *)nullptr,
                                                        (int32_t *)nullptr, n, 0, 32, 0);
    ok(sized == cudaSuccess && temp_bytes > 0,
       "gpu-standin: SortPairs sizes its temporary storage (%zu bytes)", temp_bytes);
    void *temp = nullptr;
    (void)cudaMalloc(&temp, temp_bytes);
    cudaStream_t s;
    (void)cudaStreamCreate(&s);
    ok(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const int32_t *)d[0], d[2], (const int32_t *)d[1], d[3], n,
                                       0, 32, s) == cudaSuccess,
       "gpu-standin: SortPairs queued");
    std::vector<int32_t> ko(n), vo(n);
    (void)cudaStreamSynchronize(s);
    (void)cudaMemcpy(ko.data(), d[2], n * 4, cudaMemcpyDeviceToHost);
    (void)cudaMemcpy(vo.data(), d[3], n * 4, cudaMemcpyDeviceToHost);
    bool sorted = true;
    for (int i = 1; i < n; i++)
        sorted = sorted && (ko[i - 1] < ko[i] || (ko[i - 1] == ko[i] && vo[i - 1] < vo[i]));
    for (int i = 0; i < n; i++)
        sorted = sorted && keys[vo[i]] == ko[i];
    ok(sorted, "gpu-standin: SortPairs is a stable sort, negative keys first");
    /* bits [0, 4) only: the order of (key & 15), stable */
    (void)cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const int32_t *)d[0], d[2], (const int32_t *)d[1], d[3],
                                          n, 0, 4, s);
    (void)cudaStreamSynchronize(s);
    (void)cudaMemcpy(ko.data(), d[2], n * 4, cudaMemcpyDeviceToHost);
    (void)cudaMemcpy(vo.data(), d[3], n * 4, cudaMemcpyDeviceToHost);
    sorted = true;
    for (int i = 1; i < n; i++)
        sorted = sorted && ((ko[i - 1] & 15) < (ko[i] & 15) || ((ko[i - 1] & 15) == (ko[i] & 15) && vo[i - 1] < vo[i]));
    ok(sorted, "gpu-standin: SortPairs on bits [0, 4) sorts by those bits only, stably");
    (void)cudaStreamDestroy(s);
    for (auto &p : d)
        (void)cudaFree(p);
    (void)cudaFree(temp);
}

/* Last: a host pointer handed to cuBLASLt is an illegal address, and the
 * fault is sticky. */
void test_sticky(cublasLtHandle_t lt)
{
    std::vector<float> hostA(64 * 64, 1.0f);
    float *dB = dev_floats(64 * 64), *dC = dev_floats(64 * 64);
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l;
    (void)cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    (void)cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 64, 64, 64);
    float alpha = 1.0f, beta = 0.0f;
    ok(cublasLtMatmul(lt, desc, &alpha, hostA.data(), l, dB, l, &beta, dC, l, dC, l, nullptr, nullptr, 0, 0) ==
           CUBLAS_STATUS_SUCCESS,
       "gpu-standin: cublasLtMatmul with a host operand returns (the fault is asynchronous)");
    fprintf(stderr, "gpu-standin: (the test expects the illegal address below)\n");
    ok(cudaDeviceSynchronize() == cudaErrorIllegalAddress, "gpu-standin: ... and the device faults");
    void *p = nullptr;
    ok(cudaMalloc(&p, 16) == cudaErrorIllegalAddress && cudaGetLastError() == cudaErrorIllegalAddress &&
           cudaGetLastError() == cudaErrorIllegalAddress,
       "gpu-standin: the fault is sticky: every later call returns it");
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
}

} // namespace

int main()
{
    /* the checks assume the default 8 devices, all visible */
    unsetenv("DTRAIN_STANDIN_GPUS");
    unsetenv("CUDA_VISIBLE_DEVICES");
    test_fork_first();
    test_devices();
    test_memory();
    test_streams();
    cublasLtHandle_t lt = nullptr;
    ok(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "gpu-standin: cublasLtCreate");
    test_cublaslt(lt);
    test_cub();
    test_sticky(lt);
    cublasLtDestroy(lt);
    return tap_done();
}
