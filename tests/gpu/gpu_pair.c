/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Test helpers for the GPU tests; see gpu_pair.h. */
#include "gpu_pair.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtrain_rng.h"
#ifdef DTRAIN_HAVE_CUDA
#include "dtrain_cuda.h"
#endif

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (p == NULL) {
        printf("Bail out! out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void *xdev(struct dtrain_kernels *k, size_t bytes)
{
    void *p = dtrain_k_alloc(k, bytes > 0 ? bytes : 4);
    if (p == NULL) {
        printf("Bail out! out of %s memory (%zu bytes)\n", dtrain_kernels_name(k), bytes);
        exit(1);
    }
    return p;
}

uint64_t gpu_test_seed(void)
{
    const char *env = getenv("DTRAIN_TEST_SEED");
    uint64_t seed;
    if (env != NULL && env[0] != '\0') {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    }
    printf("# seed %llu (DTRAIN_TEST_SEED=%llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    return seed;
}

int gpu_available(char *why, size_t whylen)
{
#ifdef DTRAIN_CUDA_STANDIN
    printf("# on the GPU stand-in (tests/gpu/standin: the CUDA runtime, cuBLASLt and NCCL on the CPU)\n");
#endif
#ifdef DTRAIN_HAVE_CUDA
    return dtrain_cuda_device_count(why, whylen) > 0;
#else
    snprintf(why, whylen, "dtrain was configured without CUDA");
    return 0;
#endif
}

int gpu_devices_in_child(char *why, size_t whylen)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, whylen, "pipe failed");
        return 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        char w[512] = "";
        int n = gpu_available(w, sizeof w) ? gpu_device_count() : 0;
        ssize_t k = write(fds[1], w, strlen(w));
        (void)k;
        _exit(n > 100 ? 100 : n);
    }
    close(fds[1]);
    ssize_t got = pid > 0 ? read(fds[0], why, whylen - 1) : -1;
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 0;
    return WEXITSTATUS(status);
}

int gpu_device_count(void)
{
#ifdef DTRAIN_HAVE_CUDA
    return dtrain_cuda_device_count(NULL, 0);
#else
    return 0;
#endif
}

int gpu_required(void)
{
    const char *r = getenv("DTRAIN_GPU_REQUIRED");
    return r != NULL && strcmp(r, "1") == 0;
}

int gpu_skip_all(const char *why)
{
    if (gpu_required()) {
        printf("not ok 1 - a CUDA device (DTRAIN_GPU_REQUIRED=1): %s\n1..1\n", why);
        return 1;
    }
    printf("1..0 # SKIP %s\n", why);
    return 0;
}

static int cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

static void pair_open(struct gpu_pair *p, enum dtrain_kernels_precision cpu_precision,
                      enum dtrain_kernels_precision precision)
{
    char err[256];
    struct dtrain_kernels_options cpu_opt = {.threads = cpu_count(), .precision = cpu_precision};
    struct dtrain_kernels_options gpu_opt = {.threads = 1, .precision = precision};
    uint64_t seed = p->seed;
    memset(p, 0, sizeof *p);
    p->seed = seed;
    p->stream = 1;
    if (dtrain_kernels_create("cpu", &cpu_opt, &p->cpu, err, sizeof err) != 0 ||
        dtrain_kernels_create("cuda", &gpu_opt, &p->gpu, err, sizeof err) != 0) {
        printf("Bail out! %s\n", err);
        exit(1);
    }
}

void gpu_pair_open(struct gpu_pair *p, enum dtrain_kernels_precision precision)
{
    pair_open(p, DTRAIN_PRECISION_DEFAULT, precision);
}

void gpu_pair_open_matched(struct gpu_pair *p, enum dtrain_kernels_precision precision)
{
    pair_open(p, precision, precision);
}

void gpu_pair_close(struct gpu_pair *p)
{
    dtrain_kernels_destroy(p->gpu);
    dtrain_kernels_destroy(p->cpu);
    p->cpu = p->gpu = NULL;
}

static struct mirror mirror_from_host(struct gpu_pair *p, const float *host, size_t n)
{
    struct mirror m = {xdev(p->cpu, n * sizeof(float)), xdev(p->gpu, n * sizeof(float)), n};
    dtrain_k_upload(p->cpu, m.cpu, host, n * sizeof(float));
    dtrain_k_upload(p->gpu, m.gpu, host, n * sizeof(float));
    return m;
}

struct mirror mirror_random(struct gpu_pair *p, size_t n, float scale)
{
    float *h = xmalloc(n * sizeof(float));
    uint64_t s = p->stream++;
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((2.0 * dtrain_rng_uniform(p->seed, s, i) - 1.0) * scale);
    struct mirror m = mirror_from_host(p, h, n);
    free(h);
    return m;
}

struct mirror mirror_poisoned(struct gpu_pair *p, size_t n)
{
    float *h = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    struct mirror m = mirror_from_host(p, h, n);
    free(h);
    return m;
}

struct mirror_i32 mirror_tokens(struct gpu_pair *p, size_t n, int V)
{
    int32_t *h = xmalloc(n * sizeof(int32_t));
    uint64_t s = p->stream++;
    for (size_t i = 0; i < n; i++)
        h[i] = (int32_t)(dtrain_rng_bits(p->seed, s, i) % (uint64_t)V);
    struct mirror_i32 m = {xdev(p->cpu, n * sizeof(int32_t)), xdev(p->gpu, n * sizeof(int32_t)), n};
    dtrain_k_upload(p->cpu, m.cpu, h, n * sizeof(int32_t));
    dtrain_k_upload(p->gpu, m.gpu, h, n * sizeof(int32_t));
    free(h);
    return m;
}

void mirror_free(struct gpu_pair *p, struct mirror *m)
{
    dtrain_k_free(p->cpu, m->cpu);
    dtrain_k_free(p->gpu, m->gpu);
    m->cpu = m->gpu = NULL;
}

void mirror_i32_free(struct gpu_pair *p, struct mirror_i32 *m)
{
    dtrain_k_free(p->cpu, m->cpu);
    dtrain_k_free(p->gpu, m->gpu);
    m->cpu = m->gpu = NULL;
}

/* Largest |g - c| / largest |c|; infinite at a NaN or infinity. */
static double rel_error(const float *c, const float *g, size_t n)
{
    double ref = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(g[i]) || !isfinite(c[i]))
            return INFINITY;
        double d = fabs((double)g[i] - (double)c[i]);
        if (d > diff)
            diff = d;
        if (fabs((double)c[i]) > ref)
            ref = fabs((double)c[i]);
    }
    return diff / (ref > 1e-30 ? ref : 1e-30);
}

double mirror_error(struct gpu_pair *p, const struct mirror *m)
{
    float *c = xmalloc(m->n * sizeof(float)), *g = xmalloc(m->n * sizeof(float));
    dtrain_k_download(p->cpu, c, m->cpu, m->n * sizeof(float));
    dtrain_k_download(p->gpu, g, m->gpu, m->n * sizeof(float));
    double e = rel_error(c, g, m->n);
    free(c);
    free(g);
    return e;
}

int gpu_same_bits(struct gpu_pair *p, const float *a, const float *b, size_t n)
{
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
    dtrain_k_download(p->gpu, x, a, n * sizeof(float));
    dtrain_k_download(p->gpu, y, b, n * sizeof(float));
    int same = memcmp(x, y, n * sizeof(float)) == 0;
    free(x);
    free(y);
    return same;
}

float *gpu_clone(struct gpu_pair *p, const float *src, size_t n)
{
    float *h = xmalloc(n * sizeof(float));
    float *d = xdev(p->gpu, n * sizeof(float));
    dtrain_k_download(p->gpu, h, src, n * sizeof(float));
    dtrain_k_upload(p->gpu, d, h, n * sizeof(float));
    free(h);
    return d;
}

int gpu_error(struct gpu_pair *p)
{
    char err[256];
    dtrain_k_sync(p->gpu);
    if (dtrain_kernels_error(p->gpu, err, sizeof err) == 0)
        return 0;
    printf("# cuda error: %s\n", err);
    return -1;
}

/* fp32 values as n elements of dtype, uploaded to both sides */
static struct tmirror tmirror_from_host(struct gpu_pair *p, enum dtrain_dtype dtype, const float *host, size_t n)
{
    size_t es = dtrain_dtype_size(dtype);
    struct tmirror m = {xdev(p->cpu, n * es), xdev(p->gpu, n * es), n, dtype};
    void *h = (void *)host;
    uint16_t *h16 = NULL;
    if (dtype == DTRAIN_BF16) {
        h = h16 = xmalloc(n * sizeof *h16);
        for (size_t i = 0; i < n; i++)
            h16[i] = dtrain_bf16_from_f32(host[i]);
    }
    dtrain_k_upload(p->cpu, m.cpu, h, n * es);
    dtrain_k_upload(p->gpu, m.gpu, h, n * es);
    free(h16);
    return m;
}

struct tmirror tmirror_random(struct gpu_pair *p, enum dtrain_dtype dtype, size_t n, float scale)
{
    float *h = xmalloc(n * sizeof(float));
    uint64_t s = p->stream++;
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((2.0 * dtrain_rng_uniform(p->seed, s, i) - 1.0) * scale);
    struct tmirror m = tmirror_from_host(p, dtype, h, n);
    free(h);
    return m;
}

struct tmirror tmirror_poisoned(struct gpu_pair *p, enum dtrain_dtype dtype, size_t n)
{
    float *h = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    struct tmirror m = tmirror_from_host(p, dtype, h, n);
    free(h);
    return m;
}

/* One side's elements widened to fp32 (a new host array). */
static float *tmirror_download(struct dtrain_kernels *k, const void *src, enum dtrain_dtype dtype, size_t n)
{
    float *f = xmalloc(n * sizeof(float));
    if (dtype == DTRAIN_F32) {
        dtrain_k_download(k, f, src, n * sizeof(float));
        return f;
    }
    uint16_t *h = xmalloc(n * sizeof *h);
    dtrain_k_download(k, h, src, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        f[i] = dtrain_bf16_to_f32(h[i]);
    free(h);
    return f;
}

double tmirror_error(struct gpu_pair *p, const struct tmirror *m)
{
    float *c = tmirror_download(p->cpu, m->cpu, m->dtype, m->n), *g = tmirror_download(p->gpu, m->gpu, m->dtype, m->n);
    double e = rel_error(c, g, m->n);
    free(c);
    free(g);
    return e;
}

void tmirror_free(struct gpu_pair *p, struct tmirror *m)
{
    dtrain_k_free(p->cpu, m->cpu);
    dtrain_k_free(p->gpu, m->gpu);
    m->cpu = m->gpu = NULL;
}

struct dtrain_tensor tmirror_cpu(const struct tmirror *m)
{
    return dtrain_tensor_of(m->dtype, m->cpu);
}

struct dtrain_tensor tmirror_gpu(const struct tmirror *m)
{
    return dtrain_tensor_of(m->dtype, m->gpu);
}
