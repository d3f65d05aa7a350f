/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Shard files: written, verified, read into pieces; see sckpt_internal.h. */
#include "sckpt_internal.h"
#include "dtrain_file.h"
#include "dtrain_grow.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FNV_PRIME 0x100000001b3ULL
#define SUM_BLOCK (8 * DTRAIN_SCKPT_SUM_LANES)
#define IMAGE_CHUNK (256u << 10) /* bytes copied into a shard's image, then summed while in cache */

static uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8); /* any alignment; little-endian hosts only (configure) */
    return w;
}

/* A lane's step: FNV-1a's, then the top bits rotated down.  Without the
 * rotation a flip of bit 63 only ever flips bit 63 (the multiplier is
 * odd), so two of them in one lane (the sign bits of two floats 16 apart)
 * would cancel; rotated, the next multiply spreads it over the lane. */
static inline uint64_t lane_step(uint64_t h, uint64_t w)
{
    h = (h ^ w) * FNV_PRIME;
    return h << 31 | h >> 33;
}

/* Whole blocks of SUM_BLOCK bytes. */
static void sum_blocks(struct dtrain_sckpt_sum *s, const unsigned char *p, size_t blocks)
{
    if (s->version == 1) {
        uint64_t h = s->lane[0];
        for (size_t i = 0; i < blocks * SUM_BLOCK; i += 4) {
            uint32_t w;
            memcpy(&w, p + i, 4);
            h = (h ^ w) * FNV_PRIME;
        }
        s->lane[0] = h;
        return;
    }
    uint64_t h[DTRAIN_SCKPT_SUM_LANES];
    memcpy(h, s->lane, sizeof h);
    for (size_t b = 0; b < blocks; b++, p += SUM_BLOCK)
        for (int k = 0; k < DTRAIN_SCKPT_SUM_LANES; k++)
            h[k] = lane_step(h[k], load64(p + 8 * k));
    memcpy(s->lane, h, sizeof h);
}

void dtrain_sckpt_sum_init(struct dtrain_sckpt_sum *s, uint32_t version)
{
    memset(s, 0, sizeof *s);
    s->version = version;
    for (int k = 0; k < DTRAIN_SCKPT_SUM_LANES; k++)
        s->lane[k] = DTRAIN_SCKPT_CHECKSUM_INIT + (version == 1 ? 0 : (uint64_t)k); /* lanes start apart */
}

void dtrain_sckpt_sum_add(struct dtrain_sckpt_sum *s, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    s->bytes += bytes;
    if (s->pending > 0) {
        size_t take = SUM_BLOCK - s->pending < bytes ? SUM_BLOCK - s->pending : bytes;
        memcpy(s->block + s->pending, p, take);
        s->pending += (uint32_t)take;
        p += take;
        bytes -= take;
        if (s->pending < SUM_BLOCK)
            return;
        sum_blocks(s, s->block, 1);
        s->pending = 0;
    }
    sum_blocks(s, p, bytes / SUM_BLOCK);
    memcpy(s->block, p + bytes / SUM_BLOCK * SUM_BLOCK, bytes % SUM_BLOCK);
    s->pending = (uint32_t)(bytes % SUM_BLOCK);
}

uint64_t dtrain_sckpt_sum_value(const struct dtrain_sckpt_sum *s)
{
    struct dtrain_sckpt_sum t = *s;
    if (t.version == 1) { /* the words of the last partial block (the format's sizes are whole words) */
        uint64_t h = t.lane[0];
        for (uint32_t i = 0; i + 4 <= t.pending; i += 4) {
            uint32_t w;
            memcpy(&w, t.block + i, 4);
            h = (h ^ w) * FNV_PRIME;
        }
        return h;
    }
    if (t.pending > 0) {
        memset(t.block + t.pending, 0, SUM_BLOCK - t.pending);
        sum_blocks(&t, t.block, 1);
    }
    uint64_t h = DTRAIN_SCKPT_CHECKSUM_INIT;
    for (int k = 0; k < DTRAIN_SCKPT_SUM_LANES; k++)
        h = lane_step(h, t.lane[k]);
    return lane_step(h, t.bytes);
}

/* The header of a shard, its checksum field 0. */
static void shard_header(unsigned char *h, const struct dtrain_sckpt_layout *L, uint64_t step,
                         uint64_t data_batches, uint64_t nparams, size_t runs, uint64_t floats)
{
    memset(h, 0, DTRAIN_SCKPT_HEADER_BYTES);
    memcpy(h + OFF_MAGIC, DTRAIN_SCKPT_MAGIC, 8);
    put32(h, OFF_VERSION, DTRAIN_SCKPT_VERSION);
    put32(h, OFF_HEADER_BYTES, DTRAIN_SCKPT_HEADER_BYTES);
    const int fields[] = {L->rank, L->world_size, L->tp, L->pp, L->dp, L->tp_rank, L->pp_rank, L->dp_rank, L->zero1};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        put32(h, OFF_RANK + 4 * i, (uint32_t)fields[i]);
    put64(h, OFF_STEP, step);
    put64(h, OFF_DATA_BATCHES, data_batches);
    put64(h, OFF_NPARAMS, nparams);
    put64(h, OFF_RUNS, runs);
    put64(h, OFF_FLOATS, floats);
}

/* The file after its header, in the format's order: the run table, then
 * the parameters, m and v of every run; each part handed to fn. */
static void shard_body(const struct dtrain_sckpt_piece *p, size_t n, void (*fn)(void *ctx, const void *part,
                                                                                size_t len), void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t run[2] = {p[i].whole, p[i].count};
        fn(ctx, run, sizeof run);
    }
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n; i++)
            fn(ctx, a == 0 ? p[i].params : a == 1 ? p[i].m : p[i].v, p[i].count * sizeof(float));
}

static void sum_part(void *s, const void *part, size_t len)
{
    dtrain_sckpt_sum_add(s, part, len);
}

static void write_part(void *o, const void *part, size_t len)
{
    dtrain_out_write(o, part, len);
}

struct image_at {
    unsigned char *at;
    struct dtrain_sckpt_sum sum;
};

/* A part copied into the image chunk by chunk, each chunk summed while it
 * is in cache. */
static void image_part(void *ctx, const void *part, size_t len)
{
    struct image_at *m = ctx;
    const unsigned char *from = part;
    while (len > 0) {
        size_t k = len < IMAGE_CHUNK ? len : IMAGE_CHUNK;
        memcpy(m->at, from, k);
        dtrain_sckpt_sum_add(&m->sum, m->at, k);
        m->at += k;
        from += k;
        len -= k;
    }
}

/* The file's bytes assembled in img (its room kept for the next
 * checkpoint), summed as they are copied: one pass over the pieces, and
 * the bytes stay for the peer copy. */
static int shard_image(struct sckpt_image *img, const unsigned char *h, const struct dtrain_sckpt_piece *p,
                       size_t n, uint64_t bytes, uint64_t *sum, char *err, size_t errlen)
{
    if (bytes > SIZE_MAX - 1) {
        dtrain_snprintf(err, errlen, "a shard of %" PRIu64 " bytes does not fit in memory", bytes);
        return ENOMEM;
    }
    if (img->cap < bytes) {
        free(img->bytes);
        img->len = img->cap = 0;
        if ((img->bytes = malloc((size_t)bytes)) == NULL) {
            dtrain_snprintf(err, errlen, "out of memory for the shard's copy (%" PRIu64 " bytes)", bytes);
            return ENOMEM;
        }
        img->cap = (size_t)bytes;
    }
    struct image_at m;
    m.at = img->bytes;
    dtrain_sckpt_sum_init(&m.sum, DTRAIN_SCKPT_VERSION);
    image_part(&m, h, DTRAIN_SCKPT_HEADER_BYTES);
    shard_body(p, n, image_part, &m);
    *sum = dtrain_sckpt_sum_value(&m.sum);
    put64(img->bytes, OFF_CHECKSUM, *sum);
    img->len = (size_t)bytes;
    return 0;
}

int sckpt_write_shard(int dirfd, const char *path, const struct dtrain_sckpt_layout *L, uint64_t step,
                      uint64_t data_batches, uint64_t nparams, const struct dtrain_sckpt_piece *p, size_t n,
                      int fail_write, struct sckpt_image *img, struct record *rec, char *err, size_t errlen)
{
    unsigned char h[DTRAIN_SCKPT_HEADER_BYTES];
    uint64_t floats = 0, sum = 0;
    for (size_t i = 0; i < n; i++)
        floats += p[i].count;
    const uint64_t bytes = DTRAIN_SCKPT_HEADER_BYTES + 16 * (uint64_t)n + 12 * floats;
    shard_header(h, L, step, data_batches, nparams, n, floats);
    if (img != NULL) {
        img->len = 0;
        int e = shard_image(img, h, p, n, bytes, &sum, err, errlen);
        if (e != 0) {
            rec->error = e;
            return DTRAIN_ERR_SYSTEM;
        }
    } else {
        struct dtrain_sckpt_sum s;
        dtrain_sckpt_sum_init(&s, DTRAIN_SCKPT_VERSION);
        dtrain_sckpt_sum_add(&s, h, sizeof h);
        shard_body(p, n, sum_part, &s);
        sum = dtrain_sckpt_sum_value(&s);
        put64(h, OFF_CHECKSUM, sum);
    }

    struct dtrain_out_file o;
    int rc = dtrain_out_openat(&o, dirfd, path, err, errlen);
    if (rc != DTRAIN_OK) {
        rec->error = errno ? errno : EIO;
        return rc;
    }
    dtrain_out_write(&o, img != NULL ? img->bytes : h, sizeof h);
    if (fail_write && o.write_errno == 0)
        o.write_errno = ENOSPC; /* fault injection: the disk is full from here on */
    if (img != NULL)
        dtrain_out_write(&o, img->bytes + sizeof h, img->len - sizeof h);
    else
        shard_body(p, n, write_part, &o);
    int write_errno = o.write_errno;
    if ((rc = dtrain_out_commit(&o, err, errlen)) != DTRAIN_OK) {
        rec->error = write_errno ? write_errno : (o.write_errno ? o.write_errno : EIO);
        return rc;
    }
    rec->bytes = bytes;
    rec->floats = floats;
    rec->checksum = sum;
    return DTRAIN_OK;
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
 * manifest (size, rank, step, data cursor, counts).  With want_table, also read and
 * check the run table.  Returns GOOD or a DAMAGED_* verdict (why set). */
static int shard_open(const char *path, long r, const struct manifest *m, int want_table, struct shard_file *f,
                      char *why, size_t whylen)
{
    char file[DTRAIN_PATH_MAX], name[32];
    unsigned char h[DTRAIN_SCKPT_HEADER_BYTES];
    const struct shard_entry *e = &m->shards[r];
    memset(f, 0, sizeof *f);
    f->fd = -1;
    sckpt_shard_name(name, sizeof name, r);
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
    if (memcmp(h + OFF_MAGIC, DTRAIN_SCKPT_MAGIC, 8) != 0 || get32(h, OFF_VERSION) != m->version ||
        get32(h, OFF_HEADER_BYTES) != DTRAIN_SCKPT_HEADER_BYTES || get32(h, OFF_RANK) != (uint32_t)r ||
        get32(h, OFF_WORLD) != (uint32_t)m->layout.world_size || get64(h, OFF_STEP) != m->step ||
        get64(h, OFF_DATA_BATCHES) != m->data_batches || /* the data cursor a resume goes on from */
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

int sckpt_shard_verify(const char *path, long r, const struct manifest *m, uint64_t *bytes_read, char *why,
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
    uint64_t size = m->shards[r].bytes, sum;
    struct dtrain_sckpt_sum s;
    dtrain_sckpt_sum_init(&s, m->version);
    for (uint64_t off = 0; off < size;) {
        size_t n = size - off < VERIFY_CHUNK ? (size_t)(size - off) : VERIFY_CHUNK;
        if (pread_full(f.fd, buf, n, off) != 0) {
            dtrain_snprintf(why, whylen, "%s/shard-%05ld.bin: read error at byte %" PRIu64, path, r, off);
            v = DAMAGED_READ;
            goto out;
        }
        if (off == 0)
            memset(buf + OFF_CHECKSUM, 0, 8); /* the header is summed with its checksum field 0 */
        dtrain_sckpt_sum_add(&s, buf, n);
        off += n;
        *bytes_read += n;
    }
    if ((sum = dtrain_sckpt_sum_value(&s)) != m->shards[r].checksum) {
        dtrain_snprintf(why, whylen, "%s/shard-%05ld.bin: checksum %016" PRIx64 ", the manifest says %016" PRIx64,
                 path, r, sum, m->shards[r].checksum);
        v = DAMAGED_CHECKSUM;
    }
out:
    free(buf);
    shard_close(&f);
    return v;
}

int sckpt_segs_add(struct sckpt_segs *l, uint64_t whole, uint64_t count)
{
    l->floats += count;
    if (l->n > 0 && l->s[l->n - 1].whole + l->s[l->n - 1].count == whole) {
        l->s[l->n - 1].count += count; /* goes on from the last part: one segment */
        return 0;
    }
    if (dtrain_grow((void **)&l->s, &l->cap, l->n, sizeof *l->s, 64) != 0)
        return -1;
    l->s[l->n++] = (struct sckpt_seg){whole, count};
    return 0;
}

/* Copy what shard f holds of each piece into it; covered[i] counts, and
 * filled (may be NULL) gets each part copied, as whole offset and count. */
static int shard_read_pieces(struct shard_file *f, const struct dtrain_sckpt_piece *pieces, size_t n,
                             uint64_t *covered, struct sckpt_segs *filled, uint64_t *bytes_read)
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
            if (filled != NULL && sckpt_segs_add(filled, from, to - from) != 0)
                return NO_MEMORY;
        }
    }
    return GOOD;
}

/* Read pieces[0..n) from the non-empty shards that `member` of `members`
 * reads (members = 1: every shard), adding what each holds to covered[]
 * and, when filled is not NULL, listing the parts read. */
static int read_shards(const char *path, const struct manifest *m, int member, int members,
                       const struct dtrain_sckpt_piece *pieces, size_t n, uint64_t *covered, struct sckpt_segs *filled,
                       uint64_t *bytes_read, uint64_t *opened, char *why, size_t whylen)
{
    int v = GOOD;
    for (long r = 0; r < m->layout.world_size && v == GOOD; r++) {
        struct shard_file f;
        if (m->shards[r].floats == 0 || (members > 1 && sckpt_group_member_of(m, r, members) != member))
            continue; /* holds nothing (verified apart, split across the ranks), or another member's to read */
        if (opened != NULL)
            (*opened)++;
        v = shard_open(path, r, m, 1, &f, why, whylen);
        if (v == GOOD && (v = shard_read_pieces(&f, pieces, n, covered, filled, bytes_read)) != GOOD)
            dtrain_snprintf(why, whylen, "%s/shard-%05ld.bin: %s", path, r,
                            v == NO_MEMORY ? "out of memory for the list of parts read" : "read error");
        shard_close(&f);
    }
    return v;
}

int sckpt_load_pieces(const char *path, const struct manifest *m, const struct dtrain_sckpt_piece *pieces,
                       size_t n, uint64_t *bytes_read, uint64_t *opened, char *why, size_t whylen)
{
    uint64_t *covered = calloc(n + 1, sizeof *covered);
    if (covered == NULL) {
        dtrain_snprintf(why, whylen, "out of memory");
        return NO_MEMORY;
    }
    int v = read_shards(path, m, 0, 1, pieces, n, covered, NULL, bytes_read, opened, why, whylen);
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

int sckpt_group_member_of(const struct manifest *m, long r, int members)
{
    const struct dtrain_sckpt_layout *L = &m->layout;
    struct dtrain_grid_pos at = dtrain_grid_pos_of(L->tp, L->pp, L->dp, (int)r);
    return (int)((int64_t)at.dp_rank * members / L->dp);
}

int sckpt_read_group_part(const char *path, const struct manifest *m, int member, int members,
                          const struct dtrain_sckpt_piece *slice, size_t n, struct sckpt_segs *filled,
                          uint64_t *bytes_read, uint64_t *opened, char *why, size_t whylen)
{
    uint64_t *covered = calloc(n + 1, sizeof *covered);
    if (covered == NULL) {
        dtrain_snprintf(why, whylen, "out of memory");
        return NO_MEMORY;
    }
    int v = read_shards(path, m, member, members, slice, n, covered, filled, bytes_read, opened, why, whylen);
    free(covered);
    return v;
}
