/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AdamW, schedules, clipping; see dtrain_optim.h. */
#include "dtrain_optim.h"
#include "dtrain_file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct dtrain_adamw {
    struct dtrain_kernels *k;
    size_t n;
    float *m, *v;                /* backend memory (NONE) or pinned host memory (CPU); NULL: NVME */
    enum dtrain_offload_kind where;
    struct dtrain_kernels *host; /* offloaded: the CPU backend the update runs on (k itself on host memory) */
    size_t chunk;                /* floats per staging buffer */
    float *grad_buf, *param_buf; /* pinned host staging (device backends) */
    float *m_buf, *v_buf;        /* NVME: a chunk of each moment */
    float *master;               /* CPU: the fp32 master copy of the n parameters */
    uint8_t *have;               /* CPU: bit i set when master[i] holds parameter i */
    int params_host;             /* CPU: the updates' params are host memory, updated in place */
    int fd_m, fd_v;              /* NVME: the moments' files (unlinked) */
    int status;                  /* the first update error since dtrain_adamw_error */
    char why[256];
};

double dtrain_lr_at(const struct dtrain_optim_config *c, long step)
{
    if (c->schedule == DTRAIN_LR_CONSTANT)
        return c->lr;
    if (step < c->warmup_steps)
        return c->lr * (double)(step + 1) / (double)c->warmup_steps;
    long span = c->total_steps - c->warmup_steps - 1;
    double ratio = span > 0 ? (double)(step - c->warmup_steps) / (double)span : 1.0;
    if (ratio > 1.0)
        ratio = 1.0;
    return c->min_lr + 0.5 * (1.0 + cos(M_PI * ratio)) * (c->lr - c->min_lr);
}

float dtrain_clip_scale(const struct dtrain_optim_config *c, double norm)
{
    if (c->grad_clip <= 0.0 || !(norm > c->grad_clip))
        return 1.0f;
    return (float)(c->grad_clip / norm);
}

int dtrain_adamw_create(struct dtrain_kernels *k, size_t n, struct dtrain_adamw **out,
                        char *err, size_t errlen)
{
    return dtrain_adamw_create_offload(k, n, NULL, out, err, errlen);
}

int dtrain_offload_parse(const char *text, struct dtrain_offload *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (text == NULL || text[0] == '\0' || strcmp(text, "none") == 0)
        return DTRAIN_OK;
    if (strcmp(text, "cpu") == 0) {
        out->kind = DTRAIN_OFFLOAD_CPU;
        return DTRAIN_OK;
    }
    if (strncmp(text, "nvme:", 5) == 0 && text[5] != '\0') {
        out->kind = DTRAIN_OFFLOAD_NVME;
        out->dir = text + 5;
        return DTRAIN_OK;
    }
    snprintf(err, errlen, "--offload-optimizer %.200s: give cpu (pinned host memory) or nvme:DIR (files in a "
             "folder made inside DIR)", text);
    return DTRAIN_ERR_INPUT;
}

const char *dtrain_offload_name(enum dtrain_offload_kind kind)
{
    return kind == DTRAIN_OFFLOAD_CPU ? "cpu" : kind == DTRAIN_OFFLOAD_NVME ? "nvme" : "none";
}

/* NVME: the run's folder inside dir and the two files in it, which are
 * unlinked (and the folder removed) once open: the moments live as long
 * as the descriptors, and a killed run leaves nothing behind. */
static int nvme_open(struct dtrain_adamw *o, const char *dir, char *err, size_t errlen)
{
    char reason[160], name[64];
    struct stat st;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(err, errlen, "--offload-optimizer nvme:%.300s: %s (give an existing folder of this user, "
                 "not a link)", dir, errno == ELOOP || errno == ENOTDIR ? "not a folder (a link or a file)"
                                                                           : strerror(errno));
        return DTRAIN_ERR_INPUT;
    }
    if (fstat(dfd, &st) != 0 || dtrain_untrusted_reason(&st, reason, sizeof reason) != NULL) {
        snprintf(err, errlen, "--offload-optimizer nvme:%.300s: the folder is %s: give a folder of this user "
                 "that nobody else can write", dir, reason);
        close(dfd);
        return DTRAIN_ERR_INPUT;
    }
    int made = 0;
    for (unsigned tries = 0; tries < 100 && !made; tries++) {
        snprintf(name, sizeof name, "dtrain-offload.%ld.%u", (long)getpid(), tries);
        if (mkdirat(dfd, name, 0700) == 0)
            made = 1;
        else if (errno != EEXIST)
            break;
    }
    if (!made) {
        snprintf(err, errlen, "--offload-optimizer nvme:%.300s: cannot make a folder there: %s", dir, strerror(errno));
        close(dfd);
        return DTRAIN_ERR_INPUT;
    }
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = DTRAIN_OK;
    if (sub < 0) {
        snprintf(err, errlen, "--offload-optimizer nvme:%.300s: cannot open %s: %s", dir, name, strerror(errno));
        rc = DTRAIN_ERR_SYSTEM;
    }
    static const char *const file[2] = {"adamw-m.f32", "adamw-v.f32"};
    int *fd[2] = {&o->fd_m, &o->fd_v};
    for (int i = 0; i < 2 && rc == DTRAIN_OK; i++) {
        *fd[i] = openat(sub, file[i], O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (*fd[i] < 0 || ftruncate(*fd[i], (off_t)(o->n * sizeof(float))) != 0) {
            snprintf(err, errlen, "--offload-optimizer nvme:%.300s: cannot make %s/%s of %zu bytes: %s", dir, name,
                     file[i], o->n * sizeof(float), strerror(errno));
            rc = DTRAIN_ERR_SYSTEM;
        }
    }
    for (int i = 0; i < 2 && sub >= 0; i++)
        if (*fd[i] >= 0)
            (void)unlinkat(sub, file[i], 0);
    if (sub >= 0)
        close(sub);
    (void)unlinkat(dfd, name, AT_REMOVEDIR);
    close(dfd);
    return rc;
}

int dtrain_adamw_create_offload(struct dtrain_kernels *k, size_t n, const struct dtrain_offload *where,
                                struct dtrain_adamw **out, char *err, size_t errlen)
{
    struct dtrain_adamw *o = calloc(1, sizeof *o);
    int rc;
    *out = NULL;
    if (o == NULL)
        goto oom;
    o->k = k;
    o->n = n;
    o->fd_m = o->fd_v = -1;
    o->where = where != NULL ? where->kind : DTRAIN_OFFLOAD_NONE;
    int device = !dtrain_kernels_host_memory(k);
    if (o->where == DTRAIN_OFFLOAD_NONE) {
        o->m = dtrain_k_alloc(k, n * sizeof(float));
        o->v = dtrain_k_alloc(k, n * sizeof(float));
        if (o->m == NULL || o->v == NULL)
            goto oom;
        *out = o;
        return DTRAIN_OK;
    }
    if (o->where == DTRAIN_OFFLOAD_CPU && !device) {
        snprintf(err, errlen, "--offload-optimizer cpu: the %s kernels keep the optimizer state in host memory "
                 "already (use nvme:DIR to move it out of memory)", dtrain_kernels_name(k));
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    o->chunk = where->chunk_floats > 0 ? where->chunk_floats : DTRAIN_OFFLOAD_CHUNK;
    if (o->chunk > n)
        o->chunk = n > 0 ? n : 1;
    if (device) {
        struct dtrain_kernels_options kopt = {.threads = dtrain_kernels_threads(k)};
        if (dtrain_kernels_create("cpu", &kopt, &o->host, err, errlen) != DTRAIN_OK) {
            rc = DTRAIN_ERR_SYSTEM;
            goto fail;
        }
        o->grad_buf = dtrain_k_host_alloc(k, o->chunk * sizeof(float));
        if (o->grad_buf == NULL)
            goto oom;
    } else {
        o->host = k;
    }
    if (o->where == DTRAIN_OFFLOAD_CPU) {
        o->params_host = where->params_on_host;
        o->m = dtrain_k_host_alloc(k, n * sizeof(float));
        o->v = dtrain_k_host_alloc(k, n * sizeof(float));
        if (!o->params_host) {
            o->master = dtrain_k_host_alloc(k, n * sizeof(float));
            o->have = calloc(n / 8 + 1, 1);
        }
        if (o->m == NULL || o->v == NULL || (!o->params_host && (o->master == NULL || o->have == NULL)))
            goto oom;
        memset(o->m, 0, n * sizeof(float));
        memset(o->v, 0, n * sizeof(float));
    } else {
        o->m_buf = dtrain_k_host_alloc(k, o->chunk * sizeof(float));
        o->v_buf = dtrain_k_host_alloc(k, o->chunk * sizeof(float));
        if (o->m_buf == NULL || o->v_buf == NULL || (device && (o->param_buf = dtrain_k_host_alloc(
                                                                    k, o->chunk * sizeof(float))) == NULL))
            goto oom;
        if ((rc = nvme_open(o, where->dir, err, errlen)) != DTRAIN_OK)
            goto fail;
    }
    *out = o;
    return DTRAIN_OK;
oom:
    snprintf(err, errlen, "out of memory for the AdamW state of %zu parameters%s%s", n,
             o != NULL && o->where != DTRAIN_OFFLOAD_NONE ? " offloaded to " : "",
             o != NULL && o->where != DTRAIN_OFFLOAD_NONE ? dtrain_offload_name(o->where) : "");
    rc = DTRAIN_ERR_SYSTEM;
fail:
    dtrain_adamw_destroy(o);
    return rc;
}

void dtrain_adamw_destroy(struct dtrain_adamw *o)
{
    if (o == NULL)
        return;
    if (o->where == DTRAIN_OFFLOAD_NONE) {
        dtrain_k_free(o->k, o->m);
        dtrain_k_free(o->k, o->v);
    } else {
        dtrain_k_host_free(o->k, o->m);
        dtrain_k_host_free(o->k, o->v);
        dtrain_k_host_free(o->k, o->master);
        dtrain_k_host_free(o->k, o->grad_buf);
        dtrain_k_host_free(o->k, o->param_buf);
        dtrain_k_host_free(o->k, o->m_buf);
        dtrain_k_host_free(o->k, o->v_buf);
        free(o->have);
        if (o->host != NULL && o->host != o->k)
            dtrain_kernels_destroy(o->host);
        if (o->fd_m >= 0)
            close(o->fd_m);
        if (o->fd_v >= 0)
            close(o->fd_v);
    }
    free(o);
}

size_t dtrain_adamw_size(const struct dtrain_adamw *o) { return o->n; }
float *dtrain_adamw_m(struct dtrain_adamw *o) { return o->where == DTRAIN_OFFLOAD_NONE ? o->m : NULL; }
float *dtrain_adamw_v(struct dtrain_adamw *o) { return o->where == DTRAIN_OFFLOAD_NONE ? o->v : NULL; }
enum dtrain_offload_kind dtrain_adamw_offload(const struct dtrain_adamw *o) { return o->where; }

void dtrain_adamw_bytes(const struct dtrain_adamw *o, struct dtrain_adamw_bytes *b)
{
    size_t f = sizeof(float), staging = (o->grad_buf != NULL) + (o->param_buf != NULL) + (o->m_buf != NULL) +
                                        (o->v_buf != NULL);
    memset(b, 0, sizeof *b);
    if (o->where == DTRAIN_OFFLOAD_NONE) {
        b->device = 2 * o->n * f;
        return;
    }
    b->pinned_host = staging * o->chunk * f + (o->master != NULL ? o->n * f : 0) +
                     (o->where == DTRAIN_OFFLOAD_CPU ? 2 * o->n * f : 0);
    b->nvme = o->where == DTRAIN_OFFLOAD_NVME ? 2 * o->n * f : 0;
}

static void set_error(struct dtrain_adamw *o, const char *what, int e)
{
    if (o->status != DTRAIN_OK)
        return;
    o->status = DTRAIN_ERR_SYSTEM;
    snprintf(o->why, sizeof o->why, "offloaded AdamW state: %s: %s", what, e != 0 ? strerror(e) : "short transfer");
}

int dtrain_adamw_error(struct dtrain_adamw *o, char *err, size_t errlen)
{
    int rc = o->status;
    if (rc != DTRAIN_OK)
        snprintf(err, errlen, "%s", o->why);
    o->status = DTRAIN_OK;
    return rc;
}

/* NVME: n floats at float index `at` of a moment's file, whole or an error. */
static int file_io(struct dtrain_adamw *o, int fd, int write, float *buf, size_t at, size_t n)
{
    char *p = (char *)buf;
    size_t left = n * sizeof(float);
    off_t pos = (off_t)(at * sizeof(float));
    while (left > 0) {
        ssize_t got = write ? pwrite(fd, p, left, pos) : pread(fd, p, left, pos);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            set_error(o, write ? "writing a moment's file" : "reading a moment's file", got < 0 ? errno : 0);
            return -1;
        }
        p += got;
        left -= (size_t)got;
        pos += got;
    }
    return 0;
}

static int state_io(struct dtrain_adamw *o, int write, size_t offset, size_t n, float *m, float *v, char *err,
                    size_t errlen)
{
    if (offset > o->n || n > o->n - offset) {
        snprintf(err, errlen, "AdamW state [%zu, +%zu) asked for outside its %zu floats", offset, n, o->n);
        return DTRAIN_ERR_SYSTEM;
    }
    if (o->where == DTRAIN_OFFLOAD_NONE) {
        if (write) {
            dtrain_k_upload(o->k, o->m + offset, m, n * sizeof(float));
            dtrain_k_upload(o->k, o->v + offset, v, n * sizeof(float));
        } else {
            dtrain_k_download(o->k, m, o->m + offset, n * sizeof(float));
            dtrain_k_download(o->k, v, o->v + offset, n * sizeof(float));
        }
        return DTRAIN_OK;
    }
    if (write && o->have != NULL) /* the parameters were loaded with the moments */
        memset(o->have, 0, o->n / 8 + 1);
    if (o->where == DTRAIN_OFFLOAD_CPU) {
        memcpy(write ? o->m + offset : m, write ? m : o->m + offset, n * sizeof(float));
        memcpy(write ? o->v + offset : v, write ? v : o->v + offset, n * sizeof(float));
        return DTRAIN_OK;
    }
    if (file_io(o, o->fd_m, write, m, offset, n) != 0 || file_io(o, o->fd_v, write, v, offset, n) != 0)
        return dtrain_adamw_error(o, err, errlen);
    return DTRAIN_OK;
}

int dtrain_adamw_state_read(struct dtrain_adamw *o, size_t offset, size_t n, float *m, float *v, char *err,
                            size_t errlen)
{
    return state_io(o, 0, offset, n, m, v, err, errlen);
}

int dtrain_adamw_state_write(struct dtrain_adamw *o, size_t offset, size_t n, const float *m, const float *v,
                             char *err, size_t errlen)
{
    return state_io(o, 1, offset, n, (float *)m, (float *)v, err, errlen);
}

/* CPU: master[at, at + n) holds the parameters once read from params (device). */
static void master_fill(struct dtrain_adamw *o, size_t at, size_t n, const float *params)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (o->have[(at + i) / 8] >> ((at + i) % 8) & 1))
            i++;
        size_t j = i;
        while (j < n && !(o->have[(at + j) / 8] >> ((at + j) % 8) & 1))
            o->have[(at + j) / 8] |= (uint8_t)(1u << ((at + j) % 8)), j++;
        if (j > i)
            dtrain_k_download(o->k, o->master + at + i, params + i, (j - i) * sizeof(float));
        i = j;
    }
}

/* An offloaded update of [offset, offset + n), chunk by chunk on the host. */
static void offloaded_update(struct dtrain_adamw *o, size_t offset, size_t n, float *params, const float *grads,
                             const struct dtrain_adamw_args *a)
{
    int device = o->host != o->k;
    for (size_t i = 0; i < n && o->status == DTRAIN_OK; i += o->chunk) {
        size_t c = n - i < o->chunk ? n - i : o->chunk, at = offset + i;
        const float *g = grads + i;
        float *p = params + i, *m, *v;
        if (device) {
            dtrain_k_download(o->k, o->grad_buf, g, c * sizeof(float));
            g = o->grad_buf;
        }
        if (o->where == DTRAIN_OFFLOAD_CPU) {
            if (!o->params_host)
                master_fill(o, at, c, params + i);
            p = o->params_host ? params + i : o->master + at;
            m = o->m + at;
            v = o->v + at;
        } else {
            if (device) {
                dtrain_k_download(o->k, o->param_buf, params + i, c * sizeof(float));
                p = o->param_buf;
            }
            m = o->m_buf;
            v = o->v_buf;
            if (file_io(o, o->fd_m, 0, m, at, c) != 0 || file_io(o, o->fd_v, 0, v, at, c) != 0)
                return;
        }
        dtrain_k_adamw_update(o->host, p, g, m, v, c, a);
        if (o->where == DTRAIN_OFFLOAD_NVME && (file_io(o, o->fd_m, 1, m, at, c) != 0 ||
                                                 file_io(o, o->fd_v, 1, v, at, c) != 0))
            return;
        if (device && !o->params_host)
            dtrain_k_upload(o->k, params + i, p, c * sizeof(float));
    }
    if (device)
        dtrain_k_sync(o->k);
}

void dtrain_adamw_update_range(struct dtrain_adamw *o, size_t offset, size_t n, float *params,
                               const float *grads, const struct dtrain_optim_config *c, long step,
                               double lr, float grad_scale)
{
    struct dtrain_adamw_args a = {
        .lr = (float)lr, .beta1 = (float)c->beta1, .beta2 = (float)c->beta2,
        .eps = (float)c->eps, .weight_decay = (float)c->weight_decay,
        .step = step + 1, .grad_scale = grad_scale,
    };
    if (offset > o->n || n > o->n - offset)
        return; /* a caller's bug; never write past the moments */
    if (o->where != DTRAIN_OFFLOAD_NONE) {
        offloaded_update(o, offset, n, params, grads, &a);
        return;
    }
    dtrain_k_adamw_update(o->k, params, grads, o->m + offset, o->v + offset, n, &a);
}

void dtrain_adamw_update(struct dtrain_adamw *o, float *params, const float *grads,
                         const struct dtrain_optim_config *c, long step, double lr,
                         float grad_scale)
{
    dtrain_adamw_update_range(o, 0, o->n, params, grads, c, step, lr, grad_scale);
}
