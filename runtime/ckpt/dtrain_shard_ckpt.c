/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Sharded checkpoints: shard files, the manifest, the commit protocol,
 * verification and loading into any layout; see dtrain_shard_ckpt.h. */
#include "dtrain_shard_ckpt.h"
#include "dtrain_file.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "dtrain_pcomm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shard files are little-endian; this code writes them natively"
#endif

#define FORMAT_NAME "dtrain-sharded-checkpoint"
#define MAX_CANDIDATES 64      /* complete checkpoints looked at when resuming */
#define MAX_WORLD (1L << 20)   /* dtrain_plan.h's largest world */
#define VERIFY_CHUNK (1 << 20) /* bytes read at a time when verifying a shard */
#define MAX_MANIFEST_BYTES (512L << 20)   /* ~500 bytes per shard entry at MAX_WORLD */
#define MAX_SHARD_BYTES (1LL << 50)       /* 1 PiB: more is a corrupt size, not a shard */

/* Header fields at fixed offsets. */
enum {
    OFF_MAGIC = 0, OFF_VERSION = 8, OFF_HEADER_BYTES = 12,
    OFF_RANK = 16, OFF_WORLD = 20, OFF_TP = 24, OFF_PP = 28, OFF_DP = 32,
    OFF_TP_RANK = 36, OFF_PP_RANK = 40, OFF_DP_RANK = 44, OFF_ZERO1 = 48,
    OFF_STEP = 56, OFF_DATA_BATCHES = 64, OFF_NPARAMS = 72, OFF_RUNS = 80, OFF_FLOATS = 88,
    OFF_CHECKSUM = 96,
};

#define FNV_PRIME 0x100000001b3ULL

uint64_t dtrain_sckpt_checksum(uint64_t h, const void *data, size_t words)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < words; i++) {
        uint32_t w;
        memcpy(&w, p + 4 * i, 4); /* any alignment; compiles to a load */
        h = (h ^ w) * FNV_PRIME;
    }
    return h;
}

static void put32(unsigned char *h, size_t off, uint32_t v) { memcpy(h + off, &v, 4); }
static void put64(unsigned char *h, size_t off, uint64_t v) { memcpy(h + off, &v, 8); }
static uint32_t get32(const unsigned char *h, size_t off) { uint32_t v; memcpy(&v, h + off, 4); return v; }
static uint64_t get64(const unsigned char *h, size_t off) { uint64_t v; memcpy(&v, h + off, 8); return v; }

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ names and folders */

static int step_path(char *out, size_t len, const char *dir, uint64_t step, const char *suffix)
{
    return dtrain_snprintf(out, len, "%s/step-%08" PRIu64 "%s", dir, step, suffix);
}

static int shard_name(char *out, size_t len, long rank)
{
    return dtrain_snprintf(out, len, "shard-%05ld.bin", rank);
}

/* "step-<8 or more digits><suffix>": 1 and *step, else 0. */
static int parse_step_name(const char *name, const char *suffix, uint64_t *step)
{
    if (strncmp(name, "step-", 5) != 0)
        return 0;
    const char *d = name + 5;
    size_t n = 0;
    while (d[n] >= '0' && d[n] <= '9')
        n++;
    if (n < 8 || n > 18 || strcmp(d + n, suffix) != 0)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (uint64_t)(d[i] - '0');
    *step = v;
    return 1;
}

/* mkdir -p; 0 or -1 with errno. */
static int make_dirs(const char *path)
{
    char buf[DTRAIN_PATH_MAX];
    if (dtrain_snprintf(buf, sizeof buf, "%s", path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Is `name` a file a save writes into a step folder: the manifest, a
 * shard, or one of their temporary names (dtrain_io.h's NAME.tmp.PID)? */
static int our_file_name(const char *name)
{
    size_t n = 0;
    if (strncmp(name, DTRAIN_SCKPT_MANIFEST, strlen(DTRAIN_SCKPT_MANIFEST)) == 0)
        n = strlen(DTRAIN_SCKPT_MANIFEST);
    else if (strncmp(name, "shard-", 6) == 0) {
        n = 6;
        while (name[n] >= '0' && name[n] <= '9')
            n++;
        if (n < 11 || strncmp(name + n, ".bin", 4) != 0)
            return 0;
        n += 4;
    } else
        return 0;
    if (name[n] == '\0')
        return 1;
    if (strncmp(name + n, ".tmp.", 5) != 0 || name[n + 5] == '\0')
        return 0;
    for (n += 5; name[n] != '\0'; n++)
        if (name[n] < '0' || name[n] > '9')
            return 0;
    return 1;
}

/* Say once why a folder was left alone (stderr: there is no other stream
 * here); errno is kept. */
static void left_alone(const char *path, const char *why)
{
    int e = errno;
    fprintf(stderr, "dtrain: checkpoint: leaving %s alone: %s\n", path, why);
    fflush(stderr);
    errno = e;
}

/* Remove a step folder this run's saves made: only a real folder (never a
 * link, never a folder someone else owns), only the files a save writes
 * (manifest, shards and their temporary names), each removed with
 * unlinkat() relative to the folder's own descriptor, opened with
 * O_NOFOLLOW relative to the checkpoint folder's.  Anything else (a link,
 * a foreign file, a sub-folder) is reported, left where it is, and the
 * folder kept.  0 when removed (or absent), -1 with errno otherwise. */
static int remove_step_dir(const char *path)
{
    char parent[DTRAIN_PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL || dtrain_snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    const char *name = slash + 1;
    int pfd = open(parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat st;
    int rc = -1;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = errno == ENOENT ? 0 : -1;
        close(pfd);
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        left_alone(path, S_ISLNK(st.st_mode) ? "a symbolic link, not a step folder of this run"
                                             : "not a folder");
        close(pfd);
        return -1;
    }
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        close(pfd);
        return -1;
    }
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
        errno = EPERM;
        left_alone(path, "owned by another user, not a step folder of this run");
        goto out;
    }
    int foreign = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat fst;
        if (!our_file_name(e->d_name) || fstatat(fd, e->d_name, &fst, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(fst.st_mode)) {
            if (foreign++ == 0) {
                char what[400];
                dtrain_snprintf(what, sizeof what, "it holds %.200s, which no save writes", e->d_name);
                left_alone(path, what);
            }
            continue;
        }
        if (unlinkat(fd, e->d_name, 0) != 0 && errno != ENOENT)
            foreign++;
    }
    if (foreign) {
        errno = ENOTEMPTY;
        goto out;
    }
    rc = unlinkat(pfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
out:
    closedir(d);
    close(pfd);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of dir's folders with this suffix ("" = complete, with a
 * manifest), newest first; at most max kept, the count of all returned.
 * -1 when dir cannot be read (0 when it does not exist). */
static long list_steps(const char *dir, const char *suffix, uint64_t *steps, long max)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : -1;
    long n = 0, cap = 64;
    uint64_t *all = malloc((size_t)cap * sizeof *all);
    struct dirent *e;
    int dfd = dirfd(d);
    while (all != NULL && (e = readdir(d)) != NULL) {
        uint64_t step;
        struct stat st;
        if (!parse_step_name(e->d_name, suffix, &step))
            continue;
        /* Real folders only: a link named like a step is not ours (said
         * when looking for leftovers to remove, the one place it matters). */
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
            char shown[DTRAIN_PATH_MAX];
            if (suffix[0] != '\0' && S_ISLNK(st.st_mode) &&
                dtrain_snprintf(shown, sizeof shown, "%s/%s", dir, e->d_name) == 0)
                left_alone(shown, "a symbolic link, not a step folder of this run");
            continue;
        }
        if (suffix[0] == '\0') {
            char m[DTRAIN_PATH_MAX];
            if (dtrain_snprintf(m, sizeof m, "%s/%s", e->d_name, DTRAIN_SCKPT_MANIFEST) != 0 ||
                fstatat(dfd, m, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
                continue;
        }
        if (n == cap) {
            uint64_t *more = realloc(all, 2 * (size_t)cap * sizeof *all);
            if (more == NULL) {
                free(all);
                all = NULL;
                break;
            }
            all = more;
            cap *= 2;
        }
        all[n++] = step;
    }
    closedir(d);
    if (all == NULL) {
        errno = ENOMEM;
        return -1;
    }
    qsort(all, (size_t)n, sizeof *all, cmp_desc);
    for (long i = 0; i < n && i < max; i++)
        steps[i] = all[i];
    free(all);
    return n;
}

int dtrain_sckpt_list(const char *dir, uint64_t *steps, int max, char *err, size_t errlen)
{
    long n = list_steps(dir, "", steps, max);
    if (n < 0) {
        dtrain_snprintf(err, errlen, "cannot read checkpoint folder %s: %s", dir, strerror(errno));
        return -1;
    }
    return (int)n;
}

/* Keep the newest `keep` complete checkpoints of dir. */
static void prune(const char *dir, int keep)
{
    long n = list_steps(dir, "", NULL, 0);
    if (n <= keep)
        return;
    uint64_t *steps = malloc((size_t)n * sizeof *steps);
    if (steps == NULL)
        return;
    n = list_steps(dir, "", steps, n);
    for (long i = keep; i < n; i++) {
        char path[DTRAIN_PATH_MAX];
        if (step_path(path, sizeof path, dir, steps[i], "") == 0)
            remove_step_dir(path);
    }
    free(steps);
}

/* Leftovers of saves that never committed. */
static void remove_partial(const char *dir)
{
    uint64_t steps[MAX_CANDIDATES];
    long n;
    while ((n = list_steps(dir, ".tmp", steps, MAX_CANDIDATES)) > 0) {
        long removed = 0;
        for (long i = 0; i < n && i < MAX_CANDIDATES; i++) {
            char path[DTRAIN_PATH_MAX];
            if (step_path(path, sizeof path, dir, steps[i], ".tmp") == 0 && remove_step_dir(path) == 0)
                removed++;
        }
        if (removed == 0)
            break;
    }
}

/* ------------------------------------------------------------ agreement */

/* Every rank's n int32 values (bits carried as floats, which all_gather
 * only copies) into all[size * n].  world NULL: one rank. */
static int gather_ints(dtrain_comm *world, const int32_t *mine, int n, int32_t *all, const char *what,
                       char *err, size_t errlen)
{
    if (world == NULL) {
        memcpy(all, mine, (size_t)n * sizeof *mine);
        return DTRAIN_OK;
    }
    int rc = dtrain_comm_all_gather(world, (const float *)(const void *)mine, (float *)(void *)all, (size_t)n);
    return dtrain_pcomm_status(world, rc, what, err, errlen);
}

static int bcast(dtrain_comm *world, void *buf, size_t bytes, const char *what, char *err, size_t errlen)
{
    if (world == NULL)
        return DTRAIN_OK;
    return dtrain_pcomm_status(world, dtrain_comm_broadcast(world, buf, bytes, 0), what, err, errlen);
}

/* ------------------------------------------------------------ saving */

/* One rank's outcome, gathered on every rank: 8 int32 (an errno, the
 * file's size, floats and checksum as halves). */
struct record {
    int32_t error;   /* 0, or the errno of the failed write */
    int32_t pad;
    uint64_t bytes, floats, checksum;
};
#define RECORD_INTS ((int)(sizeof(struct record) / sizeof(int32_t)))

static int write_shard(const char *path, const struct dtrain_sckpt_layout *L, uint64_t step,
                       uint64_t data_batches, uint64_t nparams, const struct dtrain_sckpt_piece *p, size_t n,
                       int fail_write, struct record *rec, char *err, size_t errlen)
{
    unsigned char h[DTRAIN_SCKPT_HEADER_BYTES] = {0};
    uint64_t floats = 0;
    for (size_t i = 0; i < n; i++)
        floats += p[i].count;
    memcpy(h + OFF_MAGIC, DTRAIN_SCKPT_MAGIC, 8);
    put32(h, OFF_VERSION, DTRAIN_SCKPT_VERSION);
    put32(h, OFF_HEADER_BYTES, DTRAIN_SCKPT_HEADER_BYTES);
    const int fields[] = {L->rank, L->world_size, L->tp, L->pp, L->dp, L->tp_rank, L->pp_rank, L->dp_rank, L->zero1};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        put32(h, OFF_RANK + 4 * i, (uint32_t)fields[i]);
    put64(h, OFF_STEP, step);
    put64(h, OFF_DATA_BATCHES, data_batches);
    put64(h, OFF_NPARAMS, nparams);
    put64(h, OFF_RUNS, n);
    put64(h, OFF_FLOATS, floats);

    uint64_t sum = dtrain_sckpt_checksum(DTRAIN_SCKPT_CHECKSUM_INIT, h, sizeof h / 4);
    for (size_t i = 0; i < n; i++) {
        uint64_t run[2] = {p[i].whole, p[i].count};
        sum = dtrain_sckpt_checksum(sum, run, 4);
    }
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n; i++)
            sum = dtrain_sckpt_checksum(sum, a == 0 ? p[i].params : a == 1 ? p[i].m : p[i].v, p[i].count);
    put64(h, OFF_CHECKSUM, sum);

    struct dtrain_out_file o;
    int rc = dtrain_out_open(&o, path, err, errlen);
    if (rc != DTRAIN_OK) {
        rec->error = errno ? errno : EIO;
        return rc;
    }
    dtrain_out_write(&o, h, sizeof h);
    if (fail_write && o.write_errno == 0)
        o.write_errno = ENOSPC; /* fault injection: the disk is full from here on */
    for (size_t i = 0; i < n; i++) {
        uint64_t run[2] = {p[i].whole, p[i].count};
        dtrain_out_write(&o, run, sizeof run);
    }
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n; i++)
            dtrain_out_write(&o, a == 0 ? p[i].params : a == 1 ? p[i].m : p[i].v, p[i].count * sizeof(float));
    int write_errno = o.write_errno;
    if ((rc = dtrain_out_commit(&o, err, errlen)) != DTRAIN_OK) {
        rec->error = write_errno ? write_errno : (o.write_errno ? o.write_errno : EIO);
        return rc;
    }
    rec->bytes = DTRAIN_SCKPT_HEADER_BYTES + 16 * (uint64_t)n + 12 * floats;
    rec->floats = floats;
    rec->checksum = sum;
    return DTRAIN_OK;
}

static const char *order_name(int order)
{
    return order == DTRAIN_ORDER_SHUFFLED ? "shuffled" : "sequential";
}

static json_t *config_json(const struct dtrain_train_config *c)
{
    const struct dtrain_gpt2_config *m = &c->model;
    const struct dtrain_optim_config *o = &c->optim;
    return json_pack("{s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:i, s:i, s:s, s:I, s:I, s:I, s:i,"
                     " s:{s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:I, s:f}}",
                     "model", "num_layers", m->num_layers, "channels", m->channels, "num_heads", m->num_heads,
                     "vocab_size", m->vocab_size, "padded_vocab_size", m->padded_vocab_size,
                     "max_seq_len", m->max_seq_len,
                     "batch", c->batch, "seq", c->seq, "data_order", order_name(c->data_order),
                     "data_seed", (json_int_t)c->data_seed, "seed", (json_int_t)c->seed,
                     "steps", (json_int_t)c->steps, "micro_batches", c->micro_batches,
                     "optimizer", "lr", o->lr, "beta1", o->beta1, "beta2", o->beta2, "eps", o->eps,
                     "weight_decay", o->weight_decay, "grad_clip", o->grad_clip,
                     "schedule", o->schedule == DTRAIN_LR_COSINE ? "cosine" : "constant",
                     "warmup_steps", (json_int_t)o->warmup_steps, "min_lr", o->min_lr);
}

/* Rank 0: manifest.json into tmp, then tmp renamed to final. */
static int commit(const char *dir, const char *tmp, const char *final, const struct dtrain_train_config *cfg,
                  const struct dtrain_sckpt_layout *L, uint64_t step, uint64_t data_batches,
                  const struct record *all, char *err, size_t errlen)
{
    int rc = DTRAIN_ERR_SYSTEM;
    json_t *shards = json_array(), *root = NULL;
    char *text = NULL;
    for (int r = 0; shards != NULL && r < L->world_size; r++) {
        char name[32], sum[17];
        shard_name(name, sizeof name, r);
        snprintf(sum, sizeof sum, "%016" PRIx64, all[r].checksum);
        if (json_array_append_new(shards, json_pack("{s:i, s:s, s:I, s:I, s:s}", "rank", r, "file", name,
                                                    "bytes", (json_int_t)all[r].bytes,
                                                    "floats", (json_int_t)all[r].floats, "checksum", sum)) != 0)
            goto oom;
    }
    root = json_pack("{s:s, s:i, s:I, s:I, s:I, s:o, s:{s:i, s:i, s:i, s:i, s:b}, s:o}", "format", FORMAT_NAME,
                     "version", DTRAIN_SCKPT_VERSION, "step", (json_int_t)step, "data_batches",
                     (json_int_t)data_batches, "nparams", (json_int_t)dtrain_gpt2_param_count(&cfg->model),
                     "config", config_json(cfg), "layout", "tp", L->tp, "pp", L->pp, "dp", L->dp,
                     "world_size", L->world_size, "zero1", L->zero1, "shards", shards);
    shards = NULL; /* stolen by "o", also on failure */
    if (root == NULL ||
        (text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10))) == NULL)
        goto oom;
    char path[DTRAIN_PATH_MAX];
    if (dtrain_snprintf(path, sizeof path, "%s/%s", tmp, DTRAIN_SCKPT_MANIFEST) != 0) {
        dtrain_snprintf(err, errlen, "checkpoint path too long: %.80s...", tmp);
        goto out;
    }
    struct dtrain_out_file o;
    if ((rc = dtrain_out_open(&o, path, err, errlen)) != DTRAIN_OK)
        goto out;
    dtrain_out_write(&o, text, strlen(text));
    dtrain_out_write(&o, "\n", 1);
    if ((rc = dtrain_out_commit(&o, err, errlen)) != DTRAIN_OK)
        goto out;
    rc = DTRAIN_ERR_SYSTEM;
    /* A folder of this step may be there from an earlier attempt (a
     * damaged one renamed away, or a run that got further before a fault). */
    if (remove_step_dir(final) != 0 || fsync_dir(tmp) != 0 || rename(tmp, final) != 0 || fsync_dir(dir) != 0) {
        dtrain_snprintf(err, errlen, "cannot commit checkpoint %s: %s", final, strerror(errno));
        goto out;
    }
    rc = DTRAIN_OK;
    goto out;
oom:
    dtrain_snprintf(err, errlen, "out of memory for the checkpoint manifest");
out:
    free(text);
    json_decref(root);
    json_decref(shards);
    return rc;
}

int dtrain_sckpt_save(const char *dir, const struct dtrain_train_config *cfg,
                      const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                      dtrain_comm *world, const struct dtrain_sckpt_piece *pieces, size_t npieces,
                      int keep, int fail_write, struct dtrain_sckpt_stats *st, char *err, size_t errlen)
{
    double t0 = now_seconds();
    const struct dtrain_sckpt_layout *L = layout;
    const uint64_t nparams = dtrain_gpt2_param_count(&cfg->model);
    char tmp[DTRAIN_PATH_MAX], final[DTRAIN_PATH_MAX], path[DTRAIN_PATH_MAX], name[32], why[512] = "";
    struct record mine = {0};
    struct record *all = NULL;
    int rc;
    memset(st, 0, sizeof *st);
    for (size_t i = 0; i < npieces; i++) {
        const struct dtrain_sckpt_piece *p = &pieces[i];
        if (p->params == NULL || p->m == NULL || p->v == NULL || p->count == 0 || p->whole > nparams ||
            p->count > nparams - p->whole || (i > 0 && p->whole < pieces[i - 1].whole + pieces[i - 1].count)) {
            dtrain_snprintf(err, errlen, "checkpoint: run %zu of rank %d is empty, out of order or outside the model",
                     i, L->rank);
            return DTRAIN_ERR_SYSTEM;
        }
    }
    shard_name(name, sizeof name, L->rank);
    if (step_path(tmp, sizeof tmp, dir, step, ".tmp") != 0 || step_path(final, sizeof final, dir, step, "") != 0 ||
        dtrain_snprintf(path, sizeof path, "%s/%s", tmp, name) != 0) {
        mine.error = ENAMETOOLONG;
        dtrain_snprintf(why, sizeof why, "checkpoint folder path too long: %.80s...", dir);
    } else if (make_dirs(tmp) != 0) {
        mine.error = errno;
        dtrain_snprintf(why, sizeof why, "cannot create %s: %s", tmp, strerror(errno));
    } else if (write_shard(path, L, step, data_batches, nparams, pieces, npieces, fail_write, &mine, why,
                           sizeof why) == DTRAIN_OK) {
        if (fsync_dir(tmp) != 0) {
            mine.error = errno;
            dtrain_snprintf(why, sizeof why, "cannot sync %s: %s", tmp, strerror(errno));
        }
    }
    if (mine.error == 0)
        st->bytes = mine.bytes;
    st->failed_here = mine.error != 0;

    /* The barrier: every rank's outcome on every rank. */
    all = malloc((size_t)L->world_size * sizeof *all);
    if (all == NULL) {
        dtrain_snprintf(err, errlen, "out of memory for %d checkpoint records", L->world_size);
        return DTRAIN_ERR_SYSTEM;
    }
    rc = gather_ints(world, (const int32_t *)(const void *)&mine, RECORD_INTS, (int32_t *)(void *)all,
                     "checkpoint: gathering the shards' outcomes", err, errlen);
    if (rc != DTRAIN_OK)
        goto out;

    struct { int32_t rc, pad; char msg[504]; } outcome = {DTRAIN_OK, 0, ""};
    if (L->rank == 0) {
        int failed = 0, first = -1;
        for (int r = 0; r < L->world_size; r++)
            if (all[r].error != 0 && failed++ == 0)
                first = r;
        if (failed > 0) {
            outcome.rc = DTRAIN_ERR_SYSTEM;
            dtrain_snprintf(outcome.msg, sizeof outcome.msg, "checkpoint of step %" PRIu64 " not written: rank %d "
                     "could not write its shard (%s)%s", step, first, strerror(all[first].error),
                     failed > 1 ? ", and other ranks too" : "");
            remove_step_dir(tmp);
        } else {
            outcome.rc = commit(dir, tmp, final, cfg, L, step, data_batches, all, outcome.msg, sizeof outcome.msg);
            if (outcome.rc == DTRAIN_OK)
                prune(dir, keep > 0 ? keep : 1);
            else
                remove_step_dir(tmp);
        }
        for (int r = 0; r < L->world_size; r++)
            st->total_bytes += all[r].bytes;
    }
    if ((rc = bcast(world, &outcome, sizeof outcome, "checkpoint: the outcome", err, errlen)) != DTRAIN_OK)
        goto out;
    rc = outcome.rc;
    if (rc != DTRAIN_OK && mine.error != 0) /* the failing rank says what failed here */
        dtrain_snprintf(err, errlen, "checkpoint of step %" PRIu64 " not written: rank %d: %s", step, L->rank, why);
    else if (rc != DTRAIN_OK)
        dtrain_snprintf(err, errlen, "%s", outcome.msg);
out:
    free(all);
    st->seconds = now_seconds() - t0;
    return rc;
}

/* ------------------------------------------------------------ the manifest */

struct shard_entry {
    uint64_t bytes, floats, checksum;
};

struct manifest {
    uint64_t step, data_batches, nparams;
    struct dtrain_sckpt_layout layout;
    struct shard_entry *shards; /* layout.world_size */
};

enum verdict {
    GOOD = 0,
    DAMAGED_MANIFEST = 1,
    DAMAGED_MISSING = 2,
    DAMAGED_SIZE = 3,
    DAMAGED_HEADER = 4,
    DAMAGED_CHECKSUM = 5,
    DAMAGED_READ = 6,
    DAMAGED_COVERAGE = 7,
    INCOMPATIBLE = 8,
    NO_MEMORY = 9,
};

static const char *verdict_text(int v)
{
    switch (v) {
    case DAMAGED_MANIFEST: return "its manifest is unreadable or malformed";
    case DAMAGED_MISSING: return "a shard file is missing";
    case DAMAGED_SIZE: return "a shard file has another size than the manifest says";
    case DAMAGED_HEADER: return "a shard file's header does not match the manifest";
    case DAMAGED_CHECKSUM: return "a shard file's checksum does not match the manifest";
    case DAMAGED_READ: return "a shard file could not be read";
    case DAMAGED_COVERAGE: return "its shards do not cover the model";
    case NO_MEMORY: return "out of memory while reading it";
    default: return "it is unusable";
    }
}

static int parse_checksum(const char *text, uint64_t *out)
{
    uint64_t v = 0;
    if (strlen(text) != 16)
        return -1;
    for (int i = 0; i < 16; i++) {
        int c = text[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* A manifest's JSON, opened without blocking (a FIFO there is damage, not
 * a hang) and bounded in size; NULL with one line in why. */
static json_t *load_manifest_json(const char *file, char *why, size_t whylen)
{
    off_t size = 0;
    json_error_t je;
    int fd = dtrain_open_regular(file, O_RDONLY, "checkpoint manifest", &size, why, whylen);
    if (fd < 0)
        return NULL;
    if (size > MAX_MANIFEST_BYTES) {
        dtrain_snprintf(why, whylen, "%s: %lld bytes, larger than a manifest can be", file, (long long)size);
        close(fd);
        return NULL;
    }
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
    if (root == NULL)
        dtrain_snprintf(why, whylen, "%s: line %d: %s", file, je.line, je.text);
    return root;
}

/* Read path/manifest.json into *m and check it against cfg.  Returns GOOD,
 * DAMAGED_MANIFEST or INCOMPATIBLE (both with one line in why). */
static int read_manifest(const char *path, uint64_t step, const struct dtrain_train_config *cfg,
                         struct manifest *m, char *why, size_t whylen)
{
    char file[DTRAIN_PATH_MAX];
    json_error_t je;
    json_t *root = NULL, *config, *shards;
    const char *format, *order;
    json_int_t v[6], nstep, ndata, nparams, version, batch, seq, data_seed, seed;
    int zero1, verdict = DAMAGED_MANIFEST;
    memset(m, 0, sizeof *m);
    if (dtrain_snprintf(file, sizeof file, "%s/%s", path, DTRAIN_SCKPT_MANIFEST) != 0) {
        dtrain_snprintf(why, whylen, "%s: path too long", path);
        return DAMAGED_MANIFEST;
    }
    if ((root = load_manifest_json(file, why, whylen)) == NULL)
        return DAMAGED_MANIFEST;
    json_int_t tp, pp, dp, world;
    if (json_unpack_ex(root, &je, 0, "{s:s, s:I, s:I, s:I, s:I, s:o, s:{s:I, s:I, s:I, s:I, s:b}, s:o}",
                       "format", &format, "version", &version, "step", &nstep, "data_batches", &ndata,
                       "nparams", &nparams, "config", &config, "layout", "tp", &tp, "pp", &pp, "dp", &dp,
                       "world_size", &world, "zero1", &zero1, "shards", &shards) != 0 ||
        json_unpack_ex(config, &je, 0, "{s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:I, s:s, s:I, s:I}",
                       "model", "num_layers", &v[0], "channels", &v[1], "num_heads", &v[2], "vocab_size", &v[3],
                       "padded_vocab_size", &v[4], "max_seq_len", &v[5], "batch", &batch, "seq", &seq,
                       "data_order", &order, "data_seed", &data_seed, "seed", &seed) != 0) {
        dtrain_snprintf(why, whylen, "%s: %s", file, je.text);
        goto out;
    }
    if (strcmp(format, FORMAT_NAME) != 0 || version != DTRAIN_SCKPT_VERSION) {
        dtrain_snprintf(why, whylen, "%s: format %.40s version %lld; this dtrain reads %s version %d", file, format,
                 (long long)version, FORMAT_NAME, DTRAIN_SCKPT_VERSION);
        goto out;
    }
    /* Every count bounded before any arithmetic on it (no wrap-around). */
    if (nstep < 0 || (uint64_t)nstep != step || ndata < 0 || tp < 1 || pp < 1 || dp < 1 || tp > MAX_WORLD ||
        pp > MAX_WORLD || dp > MAX_WORLD || world < 1 || world > MAX_WORLD ||
        (uint64_t)world != (uint64_t)tp * (uint64_t)pp * (uint64_t)dp || !json_is_array(shards) ||
        json_array_size(shards) != (size_t)world) {
        dtrain_snprintf(why, whylen, "%s: step, layout or shard list inconsistent", file);
        goto out;
    }
    const struct dtrain_gpt2_config *mc = &cfg->model;
    const long want[6] = {mc->num_layers, mc->channels, mc->num_heads, mc->vocab_size, mc->padded_vocab_size,
                          mc->max_seq_len};
    if (v[0] != want[0] || v[1] != want[1] || v[2] != want[2] || v[3] != want[3] || v[4] != want[4] ||
        v[5] != want[5] || nparams != (json_int_t)dtrain_gpt2_param_count(mc)) {
        dtrain_snprintf(why, whylen, "%s holds a model L=%lld C=%lld NH=%lld V=%lld (padded %lld) maxT=%lld; "
                 "this run's is L=%ld C=%ld NH=%ld V=%ld (padded %ld) maxT=%ld: give the same model, or another checkpoint "
                 "folder", path, (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3],
                 (long long)v[4], (long long)v[5], want[0], want[1], want[2], want[3], want[4], want[5]);
        verdict = INCOMPATIBLE;
        goto out;
    }
    if (batch != cfg->batch || seq != cfg->seq || strcmp(order, order_name(cfg->data_order)) != 0 ||
        (uint64_t)data_seed != cfg->data_seed || (uint64_t)seed != cfg->seed) {
        dtrain_snprintf(why, whylen, "%s was written by a run with batch %lld x %lld, %s data (seed %lld), seed %lld; "
                 "this run has %d x %d, %s (seed %" PRIu64 "), seed %" PRIu64 ": resume with the same --batch, "
                 "--seq, --order, --data-seed and --seed, or use another checkpoint folder", path,
                 (long long)batch, (long long)seq, order, (long long)data_seed, (long long)seed, cfg->batch,
                 cfg->seq, order_name(cfg->data_order), cfg->data_seed, cfg->seed);
        verdict = INCOMPATIBLE;
        goto out;
    }
    m->step = (uint64_t)nstep;
    m->data_batches = (uint64_t)ndata;
    m->nparams = (uint64_t)nparams;
    m->layout = (struct dtrain_sckpt_layout){(int)tp, (int)pp, (int)dp, (int)world, zero1, 0, 0, 0, 0};
    if ((m->shards = calloc((size_t)world, sizeof *m->shards)) == NULL) {
        dtrain_snprintf(why, whylen, "out of memory for %lld shard entries", (long long)world);
        goto out;
    }
    for (json_int_t r = 0; r < world; r++) {
        json_int_t rank, bytes, floats;
        const char *name, *sum;
        char expect[32];
        shard_name(expect, sizeof expect, (long)r);
        if (json_unpack_ex(json_array_get(shards, (size_t)r), &je, 0, "{s:I, s:s, s:I, s:I, s:s}", "rank", &rank,
                           "file", &name, "bytes", &bytes, "floats", &floats, "checksum", &sum) != 0 ||
            rank != r || strcmp(name, expect) != 0 || floats < 0 || bytes < DTRAIN_SCKPT_HEADER_BYTES ||
            bytes > MAX_SHARD_BYTES ||
            (uint64_t)floats > m->nparams || parse_checksum(sum, &m->shards[r].checksum) != 0) {
            dtrain_snprintf(why, whylen, "%s: shard entry %lld is malformed", file, (long long)r);
            goto out;
        }
        m->shards[r].bytes = (uint64_t)bytes;
        m->shards[r].floats = (uint64_t)floats;
    }
    verdict = GOOD;
out:
    if (verdict != GOOD) {
        free(m->shards);
        m->shards = NULL;
    }
    json_decref(root);
    return verdict;
}

/* ------------------------------------------------------------ shard files */

static int pread_full(int fd, void *buf, size_t bytes, uint64_t off)
{
    unsigned char *p = buf;
    while (bytes > 0) {
        ssize_t n = pread(fd, p, bytes, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        bytes -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

struct shard_file {
    int fd;
    uint64_t runs, floats;
    uint64_t *table; /* runs x (whole, count) */
    uint64_t *pos;   /* runs: each run's first float in the payload */
};

static void shard_close(struct shard_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f->table);
    free(f->pos);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* Open shard r of the checkpoint at path and check its header against the
 * manifest (size, rank, step, counts).  With want_table, also read and
 * check the run table.  Returns GOOD or a DAMAGED_* verdict (why set). */
static int shard_open(const char *path, long r, const struct manifest *m, int want_table, struct shard_file *f,
                      char *why, size_t whylen)
{
    char file[DTRAIN_PATH_MAX], name[32];
    unsigned char h[DTRAIN_SCKPT_HEADER_BYTES];
    const struct shard_entry *e = &m->shards[r];
    memset(f, 0, sizeof *f);
    f->fd = -1;
    shard_name(name, sizeof name, r);
    if (dtrain_snprintf(file, sizeof file, "%s/%s", path, name) != 0) {
        dtrain_snprintf(why, whylen, "%s: path too long", path);
        return DAMAGED_MISSING;
    }
    /* Never a blocking open: a FIFO named like a shard must not hang the job. */
    off_t size = 0;
    if ((f->fd = dtrain_open_regular(file, O_RDONLY, "checkpoint shard", &size, why, whylen)) < 0)
        return DAMAGED_MISSING;
    if ((uint64_t)size != e->bytes) {
        dtrain_snprintf(why, whylen, "%s: %lld bytes, the manifest says %" PRIu64, file, (long long)size,
                        e->bytes);
        return DAMAGED_SIZE;
    }
    if (pread_full(f->fd, h, sizeof h, 0) != 0) {
        dtrain_snprintf(why, whylen, "%s: cannot read the header", file);
        return DAMAGED_READ;
    }
    f->runs = get64(h, OFF_RUNS);
    f->floats = get64(h, OFF_FLOATS);
    if (memcmp(h + OFF_MAGIC, DTRAIN_SCKPT_MAGIC, 8) != 0 || get32(h, OFF_VERSION) != DTRAIN_SCKPT_VERSION ||
        get32(h, OFF_HEADER_BYTES) != DTRAIN_SCKPT_HEADER_BYTES || get32(h, OFF_RANK) != (uint32_t)r ||
        get32(h, OFF_WORLD) != (uint32_t)m->layout.world_size || get64(h, OFF_STEP) != m->step ||
        get64(h, OFF_NPARAMS) != m->nparams || f->floats != e->floats || f->runs > m->nparams ||
        DTRAIN_SCKPT_HEADER_BYTES + 16 * f->runs + 12 * f->floats != e->bytes ||
        get64(h, OFF_CHECKSUM) != e->checksum) {
        dtrain_snprintf(why, whylen, "%s: the header does not match the manifest", file);
        return DAMAGED_HEADER;
    }
    if (!want_table)
        return GOOD;
    f->table = malloc((size_t)(2 * f->runs + 1) * sizeof *f->table);
    f->pos = malloc((size_t)(f->runs + 1) * sizeof *f->pos);
    if (f->table == NULL || f->pos == NULL) {
        dtrain_snprintf(why, whylen, "%s: out of memory for its %" PRIu64 " runs", file, f->runs);
        return NO_MEMORY;
    }
    if (pread_full(f->fd, f->table, (size_t)f->runs * 16, DTRAIN_SCKPT_HEADER_BYTES) != 0) {
        dtrain_snprintf(why, whylen, "%s: cannot read the run table", file);
        return DAMAGED_READ;
    }
    uint64_t at = 0, end = 0;
    for (uint64_t i = 0; i < f->runs; i++) {
        uint64_t whole = f->table[2 * i], count = f->table[2 * i + 1];
        if (count == 0 || whole < end || whole > m->nparams || count > m->nparams - whole) {
            dtrain_snprintf(why, whylen, "%s: run %" PRIu64 " is empty, out of order or outside the model", file, i);
            return DAMAGED_HEADER;
        }
        f->pos[i] = at;
        at += count;
        end = whole + count;
    }
    if (at != f->floats) {
        dtrain_snprintf(why, whylen, "%s: the runs hold %" PRIu64 " floats, the header says %" PRIu64, file, at,
                        f->floats);
        return DAMAGED_HEADER;
    }
    return GOOD;
}

/* Read shard r whole and compare its checksum with the manifest's. */
static int shard_verify(const char *path, long r, const struct manifest *m, uint64_t *bytes_read, char *why,
                        size_t whylen)
{
    struct shard_file f;
    int v = shard_open(path, r, m, 0, &f, why, whylen);
    unsigned char *buf = NULL;
    if (v != GOOD)
        goto out;
    if ((buf = malloc(VERIFY_CHUNK)) == NULL) {
        dtrain_snprintf(why, whylen, "out of memory to verify shard %ld", r);
        v = NO_MEMORY;
        goto out;
    }
    uint64_t size = m->shards[r].bytes, sum = DTRAIN_SCKPT_CHECKSUM_INIT;
    for (uint64_t off = 0; off < size;) {
        size_t n = size - off < VERIFY_CHUNK ? (size_t)(size - off) : VERIFY_CHUNK;
        if (pread_full(f.fd, buf, n, off) != 0) {
            dtrain_snprintf(why, whylen, "%s/shard-%05ld.bin: read error at byte %" PRIu64, path, r, off);
            v = DAMAGED_READ;
            goto out;
        }
        if (off == 0)
            memset(buf + OFF_CHECKSUM, 0, 8); /* the header is summed with its checksum field 0 */
        sum = dtrain_sckpt_checksum(sum, buf, n / 4);
        off += n;
        *bytes_read += n;
    }
    if (sum != m->shards[r].checksum) {
        dtrain_snprintf(why, whylen, "%s/shard-%05ld.bin: checksum %016" PRIx64 ", the manifest says %016" PRIx64,
                 path, r, sum, m->shards[r].checksum);
        v = DAMAGED_CHECKSUM;
    }
out:
    free(buf);
    shard_close(&f);
    return v;
}

/* Copy what shard f holds of each piece into it; covered[i] counts. */
static int shard_read_pieces(struct shard_file *f, const struct dtrain_sckpt_piece *pieces, size_t n,
                             uint64_t *covered, uint64_t *bytes_read)
{
    const uint64_t payload = DTRAIN_SCKPT_HEADER_BYTES + 16 * f->runs;
    for (size_t i = 0; i < n; i++) {
        const struct dtrain_sckpt_piece *p = &pieces[i];
        uint64_t lo = p->whole, hi = p->whole + p->count;
        /* the first run that ends after lo */
        uint64_t a = 0, b = f->runs;
        while (a < b) {
            uint64_t mid = a + (b - a) / 2;
            if (f->table[2 * mid] + f->table[2 * mid + 1] <= lo)
                a = mid + 1;
            else
                b = mid;
        }
        for (uint64_t k = a; k < f->runs && f->table[2 * k] < hi; k++) {
            uint64_t rs = f->table[2 * k], re = rs + f->table[2 * k + 1];
            uint64_t from = rs > lo ? rs : lo, to = re < hi ? re : hi;
            uint64_t at = f->pos[k] + (from - rs);
            float *dst[3] = {p->params, p->m, p->v};
            for (int arr = 0; arr < 3; arr++) {
                if (dst[arr] == NULL)
                    continue;
                uint64_t off = payload + 4 * ((uint64_t)arr * f->floats + at);
                if (pread_full(f->fd, dst[arr] + (from - lo), (size_t)(to - from) * sizeof(float), off) != 0)
                    return DAMAGED_READ;
                *bytes_read += (to - from) * sizeof(float);
            }
            covered[i] += to - from;
        }
    }
    return GOOD;
}

/* Every rank: read the pieces from every shard of the checkpoint at path. */
static int load_pieces(const char *path, const struct manifest *m, const struct dtrain_sckpt_piece *pieces,
                       size_t n, uint64_t *bytes_read, char *why, size_t whylen)
{
    uint64_t *covered = calloc(n + 1, sizeof *covered);
    if (covered == NULL) {
        dtrain_snprintf(why, whylen, "out of memory");
        return NO_MEMORY;
    }
    int v = GOOD;
    for (long r = 0; r < m->layout.world_size && v == GOOD; r++) {
        struct shard_file f;
        v = shard_open(path, r, m, 1, &f, why, whylen);
        if (v == GOOD && (v = shard_read_pieces(&f, pieces, n, covered, bytes_read)) != GOOD)
            dtrain_snprintf(why, whylen, "%s/shard-%05ld.bin: read error", path, r);
        shard_close(&f);
    }
    for (size_t i = 0; i < n && v == GOOD; i++) {
        if (covered[i] != pieces[i].count) {
            dtrain_snprintf(why, whylen, "%s: the shards hold %" PRIu64 " of the %" PRIu64 " values at offset %" PRIu64,
                     path, covered[i], pieces[i].count, pieces[i].whole);
            v = DAMAGED_COVERAGE;
        }
    }
    free(covered);
    return v;
}

/* ------------------------------------------------------------ resuming */

/* One candidate: manifest, verification of this rank's files, agreement,
 * loading, agreement.  Returns the agreed verdict; *bad_shard is the
 * first shard found damaged (-1 when none). */
static int try_candidate(const char *path, uint64_t step, const struct dtrain_train_config *cfg,
                         dtrain_comm *world, int rank, int size, const struct dtrain_sckpt_piece *pieces, size_t n,
                         FILE *msgs, const char *prog, struct manifest *m, int *bad_shard,
                         struct dtrain_sckpt_stats *st, int *loaded, char *why, size_t whylen, int *comm_rc,
                         char *err, size_t errlen)
{
    int32_t mine[2] = {GOOD, -1};
    int32_t *all = malloc((size_t)size * 2 * sizeof *all);
    int agreed = GOOD;
    *bad_shard = -1;
    *comm_rc = DTRAIN_OK;
    if (all == NULL) {
        *comm_rc = DTRAIN_ERR_SYSTEM;
        dtrain_snprintf(err, errlen, "out of memory");
        return NO_MEMORY;
    }
    mine[0] = read_manifest(path, step, cfg, m, why, whylen);
    for (long r = rank; mine[0] == GOOD && r < m->layout.world_size; r += size) {
        int v = shard_verify(path, r, m, &st->bytes, why, whylen);
        if (v != GOOD) {
            mine[0] = v;
            mine[1] = (int32_t)r;
            if (msgs != NULL)
                fprintf(msgs, "%s: rank %d: checkpoint %s is damaged: %s\n", prog, rank, path, why);
        }
    }
    for (int phase = 0; phase < 2; phase++) {
        if ((*comm_rc = gather_ints(world, mine, 2, all, "resume: agreeing on the checkpoint", err, errlen)) !=
            DTRAIN_OK)
            goto out;
        agreed = GOOD;
        for (int r = 0; r < size && agreed == GOOD; r++) {
            if (all[2 * r] != GOOD) {
                agreed = all[2 * r];
                *bad_shard = all[2 * r + 1];
            }
        }
        if (agreed == INCOMPATIBLE && mine[0] != INCOMPATIBLE) { /* every rank says the same line */
            free(m->shards);
            read_manifest(path, step, cfg, m, why, whylen);
        }
        if (agreed != GOOD || phase == 1)
            break;
        *loaded = 1;
        mine[0] = load_pieces(path, m, pieces, n, &st->bytes, why, whylen);
        if (mine[0] != GOOD && msgs != NULL)
            fprintf(msgs, "%s: rank %d: checkpoint %s: %s\n", prog, rank, path, why);
    }
out:
    free(all);
    return agreed;
}

int dtrain_sckpt_resume(const char *dir, const struct dtrain_train_config *cfg, dtrain_comm *world,
                        const struct dtrain_sckpt_piece *pieces, size_t npieces, FILE *msgs,
                        const char *prog, struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st,
                        char *err, size_t errlen)
{
    double t0 = now_seconds();
    int rank = world != NULL ? dtrain_comm_rank(world) : 0, size = world != NULL ? dtrain_comm_size(world) : 1;
    int rc;
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);

    /* Rank 0 tidies up and says which checkpoints there are. */
    struct { int32_t count, pad; uint64_t steps[MAX_CANDIDATES]; char msg[256]; } list;
    memset(&list, 0, sizeof list);
    if (rank == 0) {
        remove_partial(dir);
        long n = list_steps(dir, "", list.steps, MAX_CANDIDATES);
        if (n < 0)
            snprintf(list.msg, sizeof list.msg, "cannot read checkpoint folder %.200s: %s", dir, strerror(errno));
        list.count = (int32_t)(n < 0 ? -1 : n < MAX_CANDIDATES ? n : MAX_CANDIDATES);
    }
    if ((rc = bcast(world, &list, sizeof list, "resume: the list of checkpoints", err, errlen)) != DTRAIN_OK)
        goto out;
    if (list.count < 0) {
        dtrain_snprintf(err, errlen, "%s", list.msg);
        rc = DTRAIN_ERR_INPUT;
        goto out;
    }
    for (int i = 0; i < list.count; i++) {
        char path[DTRAIN_PATH_MAX], why[768] = "";
        struct manifest m;
        int bad_shard, comm_rc;
        if (step_path(path, sizeof path, dir, list.steps[i], "") != 0) {
            dtrain_snprintf(err, errlen, "checkpoint folder path too long: %.80s...", dir);
            rc = DTRAIN_ERR_INPUT;
            goto out;
        }
        int v = try_candidate(path, list.steps[i], cfg, world, rank, size, pieces, npieces, msgs, prog, &m,
                              &bad_shard, st, &out->loaded_partly, why, sizeof why, &comm_rc, err, errlen);
        if (comm_rc != DTRAIN_OK) {
            free(m.shards);
            rc = comm_rc;
            goto out;
        }
        if (v == GOOD) {
            out->found = 1;
            out->loaded_partly = 0;
            out->step = m.step;
            out->data_batches = m.data_batches;
            out->writer = m.layout;
            snprintf(out->path, sizeof out->path, "%s", path);
            free(m.shards);
            rc = DTRAIN_OK;
            goto out;
        }
        free(m.shards);
        if (v == INCOMPATIBLE) {
            dtrain_snprintf(err, errlen, "%s", why);
            rc = DTRAIN_ERR_INPUT;
            goto out;
        }
        out->damaged++;
        if (rank == 0) {
            char damaged[DTRAIN_PATH_MAX], shard[48] = "";
            if (bad_shard >= 0)
                snprintf(shard, sizeof shard, " (shard-%05d.bin)", bad_shard);
            if (msgs != NULL) {
                if (i + 1 < list.count)
                    fprintf(msgs, "%s: checkpoint %s is damaged: %s%s; falling back to step %" PRIu64 "\n", prog,
                            path, verdict_text(v), shard, list.steps[i + 1]);
                else
                    fprintf(msgs, "%s: checkpoint %s is damaged: %s%s; there is no older one\n", prog, path,
                            verdict_text(v), shard);
                if (v == DAMAGED_MANIFEST)
                    fprintf(msgs, "%s: %s\n", prog, why);
                fflush(msgs);
            }
            /* kept for a look, out of the way of later saves and resumes */
            if (step_path(damaged, sizeof damaged, dir, list.steps[i], ".damaged") == 0) {
                remove_step_dir(damaged);
                rename(path, damaged);
            }
        }
    }
    rc = DTRAIN_OK;
out:
    st->seconds = now_seconds() - t0;
    return rc;
}

/* ------------------------------------------------------------ the model a folder holds */

int dtrain_sckpt_read_model(const char *dir, struct dtrain_gpt2_config *model, char *err, size_t errlen)
{
    uint64_t newest;
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        dtrain_snprintf(err, errlen, "checkpoint %s is a file, not a folder: dtrain checkpoints are folders of "
                        "step-N checkpoints (--checkpoint DIR writes them)", dir);
        return DTRAIN_ERR_INPUT;
    }
    int n = dtrain_sckpt_list(dir, &newest, 1, err, errlen);
    if (n < 0)
        return DTRAIN_ERR_INPUT;
    if (n == 0) {
        dtrain_snprintf(err, errlen, "checkpoint folder %s holds no complete checkpoint (step-N with a %s)", dir,
                        DTRAIN_SCKPT_MANIFEST);
        return DTRAIN_ERR_INPUT;
    }
    char step[DTRAIN_PATH_MAX], file[DTRAIN_PATH_MAX];
    json_error_t je;
    json_int_t v[6];
    if (step_path(step, sizeof step, dir, newest, "") != 0 ||
        dtrain_snprintf(file, sizeof file, "%s/%s", step, DTRAIN_SCKPT_MANIFEST) != 0) {
        dtrain_snprintf(err, errlen, "checkpoint folder %s: path too long", dir);
        return DTRAIN_ERR_INPUT;
    }
    char why[600] = "";
    json_t *root = load_manifest_json(file, why, sizeof why);
    int rc = root != NULL &&
             json_unpack_ex(root, &je, 0, "{s:{s:{s:I, s:I, s:I, s:I, s:I, s:I}}}", "config", "model", "num_layers",
                            &v[0], "channels", &v[1], "num_heads", &v[2], "vocab_size", &v[3], "padded_vocab_size",
                            &v[4], "max_seq_len", &v[5]) == 0 ? DTRAIN_OK : DTRAIN_ERR_INPUT;
    for (int i = 0; rc == DTRAIN_OK && i < 6; i++)
        if (v[i] < 1 || v[i] > INT32_MAX)
            rc = DTRAIN_ERR_INPUT;
    if (rc == DTRAIN_OK)
        *model = (struct dtrain_gpt2_config){.num_layers = (int)v[0], .channels = (int)v[1], .num_heads = (int)v[2],
                                             .vocab_size = (int)v[3], .padded_vocab_size = (int)v[4],
                                             .max_seq_len = (int)v[5]};
    else if (root == NULL)
        dtrain_snprintf(err, errlen, "%s", why);
    else
        dtrain_snprintf(err, errlen, "%s: no valid config.model in it", file);
    json_decref(root);
    return rc;
}
