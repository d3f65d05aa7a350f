/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-fault: sharded checkpoint write and read bandwidth against a
 * plain sequential write and read of the same bytes, measured in the same
 * run on the same filesystem.
 *
 * W ranks (local processes with real communicators, the tests' stand-in
 * for srun + PMI2: tests/parallel/local_boot.h) each own 1/W of a model's
 * parameters and AdamW moments and write them with dtrain_sckpt_save (the
 * whole commit protocol: checksums, temporary names, fsync, the gather,
 * rank 0's manifest and rename); the time is the slowest rank's.  Then
 * they resume from it with dtrain_sckpt_resume (every shard read whole and
 * checksummed, then each rank's runs read).  The baseline is one process
 * writing the same number of bytes to one file (write + fsync) and reading
 * them back.  Before every read the files are dropped from the page cache
 * (posix_fadvise DONTNEED), so both reads come from the disk alike.
 *
 *   bench/dtrain-bench-fault [--ranks W] [--layers L] [--channels C] [--repeat N] [--dir DIR]
 *
 * Prints both bandwidths and their ratio (median of N repetitions). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_parallel.h"
#include "bench_util.h"
#include "dtrain_parse.h"
#include "dtrain_shard_ckpt.h"
#include "local_boot.h"
#include "dtrain_clock.h"

#define PROG "dtrain-bench-fault"

struct job {
    struct dtrain_train_config cfg;
    char dir[512];
};

struct result {
    int ok;
    char err[256];
    double write_s, read_s;
    unsigned long long bytes_read;
};

/* Drop a checkpoint folder's files from the page cache (its step folders'
 * files), written back first. */
static void drop_cache(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char sub[1024];
        if (e->d_name[0] == '.' || snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) >= (int)sizeof sub)
            continue;
        DIR *s = opendir(sub);
        struct dirent *f;
        while (s != NULL && (f = readdir(s)) != NULL) {
            char path[1400];
            if (f->d_name[0] == '.' || snprintf(path, sizeof path, "%s/%s", sub, f->d_name) >= (int)sizeof path)
                continue;
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                fdatasync(fd);
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
            }
        }
        if (s != NULL)
            closedir(s);
    }
    if (d != NULL)
        closedir(d);
}

static int rank_main(struct dtrain_bootstrap *bs, void *area, void *ctx)
{
    const struct job *j = ctx;
    struct result *res = area;
    struct dtrain_comms comms;
    struct dtrain_comm_options o;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = 600000;
    if (dtrain_comm_init_all(bs, &o, &comms, NULL, res->err, sizeof res->err) != DTRAIN_OK)
        return 1;
    dtrain_comm *world = comms.group[DTRAIN_GROUP_WORLD];
    uint64_t n = dtrain_model_param_count(&j->cfg.model), lo = n * (uint64_t)bs->rank / (uint64_t)bs->world_size,
             hi = n * (uint64_t)(bs->rank + 1) / (uint64_t)bs->world_size, count = hi - lo;
    float *buf = malloc(3 * count * sizeof(float) + 4);
    int rc = DTRAIN_ERR_SYSTEM;
    if (buf == NULL) {
        snprintf(res->err, sizeof res->err, "out of memory for %llu floats", (unsigned long long)(3 * count));
        goto out;
    }
    for (uint64_t i = 0; i < 3 * count; i++)
        buf[i] = (float)((lo * 3 + i) % 1000003) * 1e-6f; /* not compressible by a filesystem */
    struct dtrain_sckpt_piece piece = {lo, count, buf, buf + count, buf + 2 * count};
    struct dtrain_sckpt_layout L = {.pos = dtrain_grid_pos_of(1, 1, bs->world_size, bs->rank), .zero1 = 1, .virtual_stages = 1};
    struct dtrain_sckpt_stats st;
    dtrain_comm_barrier(world);
    double t0 = dtrain_clock_s();
    rc = dtrain_sckpt_save(j->dir, &j->cfg, &L, 1, 1, NULL, world, &piece, 1, 1, 0, &st, res->err, sizeof res->err);
    double t1 = dtrain_clock_s();
    if (rc != DTRAIN_OK)
        goto out;
    if (bs->rank == 0)
        drop_cache(j->dir);
    dtrain_comm_barrier(world);
    struct dtrain_sckpt_resumed found;
    double t2 = dtrain_clock_s();
    rc = dtrain_sckpt_resume(j->dir, &j->cfg, world, &piece, 1, stderr, PROG, &found, &st, res->err,
                             sizeof res->err);
    double t3 = dtrain_clock_s();
    if (rc == DTRAIN_OK && !found.found) {
        snprintf(res->err, sizeof res->err, "the checkpoint just written was not found");
        rc = DTRAIN_ERR_SYSTEM;
    }
    res->write_s = t1 - t0;
    res->read_s = t3 - t2;
    res->bytes_read = st.bytes;
out:
    res->ok = rc == DTRAIN_OK;
    free(buf);
    dtrain_comm_destroy_all(&comms);
    return rc == DTRAIN_OK ? 0 : 1;
}

/* The baseline: bytes written to one file (write + fsync), then read back
 * from the disk. */
static int plain(const char *dir, uint64_t bytes, double *write_s, double *read_s)
{
    char path[600];
    snprintf(path, sizeof path, "%s/plain.bin", dir);
    size_t chunk = 4u << 20;
    char *buf = malloc(chunk);
    if (buf == NULL)
        return -1;
    for (size_t i = 0; i < chunk; i++)
        buf[i] = (char)(i * 2654435761u >> 13);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), rc = -1;
    if (fd < 0)
        goto out;
    double t0 = dtrain_clock_s();
    for (uint64_t done = 0; done < bytes;) {
        size_t n = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
        ssize_t w = write(fd, buf, n);
        if (w <= 0)
            goto out_close;
        done += (uint64_t)w;
    }
    if (fsync(fd) != 0)
        goto out_close;
    *write_s = dtrain_clock_s() - t0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        goto out;
    t0 = dtrain_clock_s();
    for (;;) {
        ssize_t r = read(fd, buf, chunk);
        if (r < 0)
            goto out_close;
        if (r == 0)
            break;
    }
    *read_s = dtrain_clock_s() - t0;
    rc = 0;
out_close:
    close(fd);
    unlink(path);
out:
    free(buf);
    return rc;
}


int main(int argc, char **argv)
{
    long ranks = 4, layers = 8, channels = 512, repeat = 3;
    const char *base = NULL;
    static const struct option longopts[] = {
        {"ranks", required_argument, NULL, 'r'}, {"layers", required_argument, NULL, 'l'},
        {"channels", required_argument, NULL, 'c'}, {"repeat", required_argument, NULL, 'n'},
        {"dir", required_argument, NULL, 'd'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "r:l:c:n:d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r': if (bench_parse_opt(PROG, "--ranks", optarg, 1, LOCAL_BOOT_MAX_WORLD, &ranks) != 0) return 2; break;
        case 'l': if (bench_parse_opt(PROG, "--layers", optarg, 1, 96, &layers) != 0) return 2; break;
        case 'c': if (bench_parse_opt(PROG, "--channels", optarg, 64, 4096, &channels) != 0) return 2; break;
        case 'n': if (bench_parse_opt(PROG, "--repeat", optarg, 1, 99, &repeat) != 0) return 2; break;
        case 'd': base = optarg; break;
        case 'h':
            printf("usage: " PROG " [--ranks W] [--layers L] [--channels C] [--repeat N] [--dir DIR]\n"
                   "Sharded checkpoint write/read bandwidth vs. a plain sequential write/read of the same bytes.\n");
            return 0;
        default:
            fprintf(stderr, PROG ": unknown option (see " PROG " --help)\n");
            return 2;
        }
    }
    struct job j;
    char err[512], top[400];
    dtrain_train_config_defaults(&j.cfg);
    j.cfg.model = (struct dtrain_model_config){.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304,
                                              .num_layers = (int)layers, .num_heads = 8, .channels = (int)channels};
    snprintf(top, sizeof top, "%s/dtrain-bench-fault.XXXXXX", base != NULL ? base : "/tmp");
    if (mkdtemp(top) == NULL) {
        fprintf(stderr, PROG ": cannot make a folder in %s: %s\n", base != NULL ? base : "/tmp", strerror(errno));
        return 1;
    }
    uint64_t n = dtrain_model_param_count(&j.cfg.model), bytes = 0, read_bytes = 0;
    double *w = calloc((size_t)repeat, sizeof *w), *r = calloc((size_t)repeat, sizeof *r);
    double *pw = calloc((size_t)repeat, sizeof *pw), *pr = calloc((size_t)repeat, sizeof *pr);
    struct result res[LOCAL_BOOT_MAX_WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD], rc = 1;
    if (w == NULL || r == NULL || pw == NULL || pr == NULL)
        goto out;
    printf("checkpoint bandwidth: %ld ranks, model L=%ld C=%ld V=50257: %.1fM parameters; folder %s; median of %ld\n",
           ranks, layers, channels, 1e-6 * (double)n, top, repeat);
    fflush(stdout);
    for (long k = 0; k < repeat; k++) {
        snprintf(j.dir, sizeof j.dir, "%s/ckpt", top);
        memset(res, 0, sizeof res);
        if (local_boot_run(1, 1, (int)ranks, rank_main, &j, sizeof res[0], res, codes, 600, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s%s%s\n", err, res[0].err[0] ? ": " : "", res[0].err);
            goto out;
        }
        w[k] = r[k] = 0.0;
        read_bytes = 0;
        for (long q = 0; q < ranks; q++) { /* the slowest rank */
            read_bytes += res[q].bytes_read;
            if (res[q].write_s > w[k])
                w[k] = res[q].write_s;
            if (res[q].read_s > r[k])
                r[k] = res[q].read_s;
        }
        /* the checkpoint's bytes: every shard file */
        bytes = 0;
        for (long q = 0; q < ranks; q++) {
            char path[700];
            struct stat st;
            snprintf(path, sizeof path, "%s/step-00000001/shard-%05ld.bin", j.dir, q);
            if (stat(path, &st) == 0)
                bytes += (uint64_t)st.st_size;
        }
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", j.dir);
        if (system(cmd) != 0)
            goto out;
        if (plain(top, bytes, &pw[k], &pr[k]) != 0) {
            fprintf(stderr, PROG ": the plain write or read in %s failed: %s\n", top, strerror(errno));
            goto out;
        }
    }
    double mw = bench_median(w, (int)repeat), mr = bench_median(r, (int)repeat), mpw = bench_median(pw, (int)repeat),
           mpr = bench_median(pr, (int)repeat), gb = 1e-9 * (double)bytes;
    printf("  %.3f GB in %ld shard files (parameters, m and v: 12 bytes per parameter)\n", gb, ranks);
    printf("  write  sharded checkpoint   %7.3f s  %6.2f GB/s   (slowest rank: checksums, fsync, gather, manifest, rename)\n",
           mw, gb / mw);
    printf("  write  plain sequential     %7.3f s  %6.2f GB/s   (one process, one file, write + fsync)\n", mpw, gb / mpw);
    printf("  read   resume               %7.3f s  %6.2f GB/s   (every shard read and checksummed, then each rank's "
           "runs: %.3f GB read in all)\n", mr, gb / mr, 1e-9 * (double)read_bytes);
    printf("  read   plain sequential     %7.3f s  %6.2f GB/s   (one process, one file, from the disk)\n", mpr, gb / mpr);
    printf("  ratio  write %.2f, read %.2f (checkpoint bandwidth / plain)\n", (gb / mw) / (gb / mpw),
           (gb / mr) / (gb / mpr));
    rc = 0;
out:
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
        if (system(cmd) != 0)
            fprintf(stderr, PROG ": could not remove %s\n", top);
    }
    free(w);
    free(r);
    free(pw);
    free(pr);
    return rc;
}
