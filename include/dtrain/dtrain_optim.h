/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: AdamW, learning-rate schedules and gradient clipping.
 *
 * The optimizer state is the two moment vectors m and v, each as long as
 * the parameter slice it updates (the whole model here; a ZeRO-1 shard
 * later).  The global gradient norm is split into a local sum of squares
 * (dtrain_k_sumsq) and the clip factor, so a data-parallel caller can
 * all-reduce the sum in between. */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include <stddef.h>

#include "dtrain_kernels.h"
#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dtrain_lr_schedule {
    DTRAIN_LR_CONSTANT = 0, /* lr at every step */
    DTRAIN_LR_COSINE = 1,   /* linear warm-up to lr, then cosine down to min_lr at the last step */
};

struct dtrain_optim_config {
    double lr, beta1, beta2, eps, weight_decay;
    double grad_clip;        /* clip the global gradient norm to this; 0: no clipping */
    enum dtrain_lr_schedule schedule;
    long warmup_steps;       /* cosine: steps 0..warmup-1 ramp up linearly */
    double min_lr;           /* cosine: the rate at the last step */
    long total_steps;        /* cosine: the run's length */
};

/* The learning rate of 0-based step `step`. */
double dtrain_lr_at(const struct dtrain_optim_config *c, long step);

/* The factor that clips a gradient of global norm `norm` (1 when no clipping
 * applies: clipping off, or norm <= grad_clip). */
float dtrain_clip_scale(const struct dtrain_optim_config *c, double norm);

struct dtrain_adamw; /* opaque: m and v for n parameters, in backend memory */

int dtrain_adamw_create(struct dtrain_kernels *k, size_t n, struct dtrain_adamw **out,
                        char *err, size_t errlen);
void dtrain_adamw_destroy(struct dtrain_adamw *o);
size_t dtrain_adamw_size(const struct dtrain_adamw *o);
/* The moments in backend memory; NULL when they are offloaded (below):
 * then read and write them with dtrain_adamw_state_read/_write. */
float *dtrain_adamw_m(struct dtrain_adamw *o);
float *dtrain_adamw_v(struct dtrain_adamw *o);

/* ZeRO-Offload (--offload-optimizer): where the moments live and where the
 * update runs.
 *  CPU:  m, v and an fp32 master copy of the parameters in the backend's
 *        pinned host memory (dtrain_k_host_alloc); each update downloads
 *        the gradient slice, runs the CPU backend's AdamW (cpu_adamw.c:
 *        AVX-512/AVX2/plain chosen at run time) on the host and uploads the
 *        parameters.  Device backends only (on host-memory kernels the
 *        state is already on the host: DTRAIN_ERR_INPUT).
 *  NVME: m and v in two files of a folder the run makes inside dir
 *        (mode 0700; the files O_EXCL|O_NOFOLLOW, unlinked as soon as they
 *        are open, so that nothing is left even after SIGKILL), updated
 *        through a host buffer of chunk_floats per moment with
 *        pread/pwrite.  dir must be a folder owned by this user or root and
 *        writable by nobody else (dtrain_untrusted_reason), not a link.
 * The arithmetic is the CPU backend's AdamW in every case: on the CPU
 * backend an offloaded run's parameters are bit for bit the resident run's. */
enum dtrain_offload_kind { DTRAIN_OFFLOAD_NONE = 0, DTRAIN_OFFLOAD_CPU = 1, DTRAIN_OFFLOAD_NVME = 2 };
struct dtrain_offload {
    enum dtrain_offload_kind kind;
    const char *dir;     /* NVME: the folder the run's folder is made in */
    size_t chunk_floats; /* CPU, NVME: floats per host buffer (0: DTRAIN_OFFLOAD_CHUNK) */
    int params_on_host;  /* CPU: the params given to the updates are host memory (ZeRO-3's shares with
                          * --offload-params cpu): they are the master copy, updated in place */
};
#define DTRAIN_OFFLOAD_CHUNK ((size_t)1 << 20) /* 4 MiB per buffer */

/* Parse "cpu" or "nvme:DIR" (--offload-optimizer) into *out (dir points
 * into text); "" and "none" are NONE.  DTRAIN_ERR_INPUT with one line else. */
int dtrain_offload_parse(const char *text, struct dtrain_offload *out, char *err, size_t errlen);
const char *dtrain_offload_name(enum dtrain_offload_kind kind); /* "none", "cpu", "nvme" */

/* dtrain_adamw_create with the moments where `where` says (NULL or NONE:
 * dtrain_adamw_create). */
int dtrain_adamw_create_offload(struct dtrain_kernels *k, size_t n, const struct dtrain_offload *where,
                                struct dtrain_adamw **out, char *err, size_t errlen);
enum dtrain_offload_kind dtrain_adamw_offload(const struct dtrain_adamw *o);
/* Bytes of the state in each place: backend memory, pinned host memory
 * (moments, master copy and staging buffers), files. */
struct dtrain_adamw_bytes {
    size_t device, pinned_host, nvme;
};
void dtrain_adamw_bytes(const struct dtrain_adamw *o, struct dtrain_adamw_bytes *b);
/* Moments [offset, offset + n) to host arrays m and v, or from them,
 * wherever they live (checkpoints).  Writing them also drops the CPU
 * offload's master copy: the parameters were loaded with them, and the
 * next update reads them from the device again.  DTRAIN_OK, or
 * DTRAIN_ERR_SYSTEM with the reason in err (a file's I/O error). */
int dtrain_adamw_state_read(struct dtrain_adamw *o, size_t offset, size_t n, float *m, float *v, char *err,
                            size_t errlen);
int dtrain_adamw_state_write(struct dtrain_adamw *o, size_t offset, size_t n, const float *m, const float *v,
                             char *err, size_t errlen);
/* The first error of an update since the last call (offloaded updates
 * read and write files): DTRAIN_OK, or DTRAIN_ERR_SYSTEM with err. */
int dtrain_adamw_error(struct dtrain_adamw *o, char *err, size_t errlen);

/* Update params from grads (n floats each, backend memory) at 0-based step
 * `step` with learning rate lr and gradient factor grad_scale. */
void dtrain_adamw_update(struct dtrain_adamw *o, float *params, const float *grads,
                         const struct dtrain_optim_config *c, long step, double lr,
                         float grad_scale);

/* The same on the slice [offset, offset + n) of the moments: params and
 * grads point at that slice's n values (a ZeRO-1 shard, packed anywhere). */
void dtrain_adamw_update_range(struct dtrain_adamw *o, size_t offset, size_t n, float *params,
                               const float *grads, const struct dtrain_optim_config *c, long step,
                               double lr, float grad_scale);

#ifdef __cplusplus
}
#endif

#endif
