/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Choosing the kernel backend and its precision, on any machine.
 *
 * With a CUDA device: "cuda" is listed, starts, computes in bf16 unless
 * asked for fp32, and reports no error.  Without one (or without a driver,
 * as on CI): asking for "cuda" fails with one line that says "no CUDA
 * device".  Either way: the CPU backend computes in fp32 by default and in bf16 (rounded operands),
 * an unknown precision is refused, and an unknown backend's message lists
 * the backends this build has. */
#include "dtrain_kernels.h"
#include "gpu_pair.h"
#include "tap.h"

#include <stdio.h>
#include <string.h>

#ifdef DTRAIN_HAVE_CUDA
#include "dtrain_cuda.h"
#endif

static int listed(const char *name)
{
    for (const char *const *b = dtrain_kernels_backends(); *b != NULL; b++)
        if (strcmp(*b, name) == 0)
            return 1;
    return 0;
}

static void test_cpu(void)
{
    char err[256] = "";
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options opt = {.threads = 1};
    ok(dtrain_kernels_create("cpu", &opt, &k, err, sizeof err) == 0 &&
       dtrain_kernels_precision(k) == DTRAIN_PRECISION_FP32,
       "cpu: the default precision is fp32");
    ok(k != NULL && dtrain_kernels_error(k, err, sizeof err) == 0, "cpu: never reports an error");
    dtrain_kernels_destroy(k);
    k = NULL;
    opt.precision = DTRAIN_PRECISION_BF16;
    int rc = dtrain_kernels_create("cpu", &opt, &k, err, sizeof err);
    ok(rc == 0 && k != NULL && dtrain_kernels_precision(k) == DTRAIN_PRECISION_BF16,
       "cpu: bf16 is accepted (operands rounded, fp32 GEMMs): %s", err);
    dtrain_kernels_destroy(k);
    k = NULL;
    opt.precision = (enum dtrain_kernels_precision)7;
    rc = dtrain_kernels_create("cpu", &opt, &k, err, sizeof err);
    ok(rc != 0 && k == NULL && strstr(err, "unknown precision") != NULL, "an unknown precision is refused: %s",
       err);
    opt.precision = DTRAIN_PRECISION_DEFAULT;
    rc = dtrain_kernels_create("tpu", &opt, &k, err, sizeof err);
#ifdef DTRAIN_HAVE_CUDA
    ok(rc != 0 && strstr(err, "cpu, cuda") != NULL, "an unknown backend lists cpu and cuda: %s", err);
#else
    ok(rc != 0 && strstr(err, "cpu)") != NULL, "an unknown backend lists cpu: %s", err);
#endif
    ok(strcmp(dtrain_kernels_precision_name(DTRAIN_PRECISION_BF16), "bf16") == 0 &&
       strcmp(dtrain_kernels_precision_name(DTRAIN_PRECISION_FP32), "fp32") == 0, "precision names");
}

#ifdef DTRAIN_HAVE_CUDA
static void test_cuda(void)
{
    char why[256] = "", err[256] = "";
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options opt = {.threads = 1};
    ok(listed("cuda"), "cuda is listed among the backends");
    int devices = dtrain_cuda_device_count(why, sizeof why);
    int rc = dtrain_kernels_create("cuda", &opt, &k, err, sizeof err);
    if (devices == 0) {
        diag("no device here: %s", why);
        if (gpu_required())
            ok(0, "a CUDA device (DTRAIN_GPU_REQUIRED=1): %s", why);
        ok(strncmp(why, "no CUDA device", 14) == 0, "the device check says why: %s", why);
        ok(rc != 0 && k == NULL && strstr(err, "no CUDA device") != NULL,
           "creating cuda kernels without a device fails clearly: %s", err);
        skip("no CUDA device: cuda's default precision");
        skip("no CUDA device: cuda in fp32");
        return;
    }
    ok(devices > 0, "%d CUDA device(s)", devices);
    ok(rc == 0 && k != NULL && dtrain_kernels_precision(k) == DTRAIN_PRECISION_BF16,
       "cuda starts and computes in bf16 by default%s%s", rc ? ": " : "", rc ? err : "");
    if (k != NULL) {
        char name[128];
        dtrain_cuda_device_name(k, name, sizeof name);
        diag("device: %s", name);
        ok(dtrain_kernels_error(k, err, sizeof err) == 0, "a fresh cuda instance reports no error");
        dtrain_kernels_destroy(k);
        k = NULL;
    } else {
        skip("cuda did not start");
    }
    opt.precision = DTRAIN_PRECISION_FP32;
    rc = dtrain_kernels_create("cuda", &opt, &k, err, sizeof err);
    ok(rc == 0 && k != NULL && dtrain_kernels_precision(k) == DTRAIN_PRECISION_FP32, "cuda in fp32 on request");
    dtrain_kernels_destroy(k);
}
#endif

int main(void)
{
    test_cpu();
#ifdef DTRAIN_HAVE_CUDA
    test_cuda();
#else
    ok(!listed("cuda"), "a build without CUDA lists no cuda backend");
#endif
    return tap_done();
}
