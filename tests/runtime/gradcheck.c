/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Test helpers; see gradcheck.h. */
#include "gradcheck.h"
#include "dtrain_rng.h"

#include <math.h>
#include <stdlib.h>

void fill_uniform(double *x, size_t n, uint64_t stream, double scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (2.0 * dtrain_rng_uniform(42, stream, i) - 1.0);
}

float *to_backend(struct dtrain_kernels *k, const double *x, size_t n)
{
    float *host = malloc(n * sizeof(float));
    float *dev = dtrain_k_alloc(k, n * sizeof(float));
    if (host == NULL || dev == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        host[i] = (float)x[i];
    dtrain_k_upload(k, dev, host, n * sizeof(float));
    free(host);
    return dev;
}

float *backend_filled(struct dtrain_kernels *k, size_t n, float value)
{
    float *host = malloc(n * sizeof(float));
    float *dev = dtrain_k_alloc(k, n * sizeof(float));
    if (host == NULL || dev == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        host[i] = value;
    dtrain_k_upload(k, dev, host, n * sizeof(float));
    free(host);
    return dev;
}

void from_backend(struct dtrain_kernels *k, double *out, const float *x, size_t n, double minus)
{
    float *host = malloc(n * sizeof(float));
    if (host == NULL)
        abort();
    dtrain_k_download(k, host, x, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        out[i] = (double)host[i] - minus;
    free(host);
}

double fd_max_rel_error(double (*loss)(void *ctx), void *ctx, double *x, size_t n,
                        const double *analytic)
{
    const double h = 1e-5;
    double max_fd = 0.0, max_diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + h;
        double lp = loss(ctx);
        x[i] = saved - h;
        double lm = loss(ctx);
        x[i] = saved;
        double fd = (lp - lm) / (2 * h);
        if (fabs(fd) > max_fd)
            max_fd = fabs(fd);
        if (fabs(fd - analytic[i]) > max_diff || isnan(analytic[i]))
            max_diff = isnan(analytic[i]) ? INFINITY : fabs(fd - analytic[i]);
    }
    return max_diff / (max_fd > 1e-6 ? max_fd : 1e-6);
}

double dot_d(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}
