/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Test helpers for the GPU tests; see gpu_pair.h. */
#include "gpu_pair.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#ifdef DTRAIN_HAVE_CUDA
    return dtrain_cuda_device_count(why, whylen) > 0;
#else
    snprintf(why, whylen, "dtrain was configured without CUDA");
    return 0;
#endif
}

static int cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

void gpu_pair_open(struct gpu_pair *p, enum dtrain_kernels_precision precision)
{
    char err[256];
    struct dtrain_kernels_options cpu_opt = {.threads = cpu_count()};
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

double mirror_error(struct gpu_pair *p, const struct mirror *m)
{
    float *c = xmalloc(m->n * sizeof(float)), *g = xmalloc(m->n * sizeof(float));
    dtrain_k_download(p->cpu, c, m->cpu, m->n * sizeof(float));
    dtrain_k_download(p->gpu, g, m->gpu, m->n * sizeof(float));
    double ref = 0.0, diff = 0.0;
    for (size_t i = 0; i < m->n; i++) {
        if (!isfinite(g[i]) || !isfinite(c[i])) {
            diff = INFINITY;
            break;
        }
        double d = fabs((double)g[i] - (double)c[i]);
        if (d > diff)
            diff = d;
        if (fabs((double)c[i]) > ref)
            ref = fabs((double)c[i]);
    }
    free(c);
    free(g);
    return diff / (ref > 1e-30 ? ref : 1e-30);
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
