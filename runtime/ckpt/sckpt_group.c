/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The group load of a resume: the members of a DP group read the shards
 * apart and send each other what they read, so that a rank opens a share
 * of the files its slice is in instead of all of them (at ZeRO >= 1 every
 * writing DP rank holds a part of every slice: without the group each
 * rank would open all D of them).  See struct dtrain_sckpt_group in
 * dtrain_shard_ckpt.h and sckpt_load_group in sckpt_internal.h. */
#include "sckpt_internal.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"
#include "dtrain_ckpt_async.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A run of the slice and where its values are in the slice's buffers. */
struct slot {
    uint64_t whole, count, at;
};

static int by_whole(const void *a, const void *b)
{
    const struct slot *x = a, *y = b;
    return x->whole < y->whole ? -1 : x->whole > y->whole;
}

/* Copy the count values at whole offset w between the slice's buffers
 * (buf[3]: params, m, v) and ext[3] (NULL entries skipped): into the slice
 * (into) or out of it.  Returns the values found in the slice (fewer when
 * a part of [w, w + count) lies outside it). */
static uint64_t copy_span(const struct slot *s, size_t n, float *const buf[3], uint64_t w, uint64_t count,
                          float *const ext[3], int into)
{
    size_t a = 0, b = n;
    while (a < b) { /* the first slot ending after w */
        size_t mid = a + (b - a) / 2;
        if (s[mid].whole + s[mid].count <= w)
            a = mid + 1;
        else
            b = mid;
    }
    uint64_t done = 0, end = w + count;
    for (size_t k = a; k < n && s[k].whole < end; k++) {
        uint64_t from = s[k].whole > w ? s[k].whole : w, to = s[k].whole + s[k].count < end ? s[k].whole + s[k].count : end;
        if (from >= to)
            continue;
        for (int arr = 0; arr < 3; arr++) {
            if (ext[arr] == NULL)
                continue;
            float *slice = buf[arr] + s[k].at + (from - s[k].whole), *other = ext[arr] + (from - w);
            memcpy(into ? slice : other, into ? other : slice, (size_t)(to - from) * sizeof(float));
        }
        done += to - from;
    }
    return done;
}

/* What a member read, as every member learns it before the broadcasts. */
struct part {
    int32_t verdict, pad;
    uint64_t segs, floats;
};
#define PART_INTS ((int)(sizeof(struct part) / sizeof(int32_t)))

/* This rank's reads of a group load: its pieces (a group of one), or its
 * part of the slice (verdict GOOD before: the room is there). */
struct group_read {
    const char *path;
    const struct manifest *m;
    const struct dtrain_sckpt_group *group;
    const struct dtrain_sckpt_piece *pieces;
    size_t n;
    int member, members, verdict;
    struct sckpt_segs *filled;
    struct dtrain_sckpt_stats *st;
    char *why;
    size_t whylen;
};

static void group_read(void *p)
{
    struct group_read *r = p;
    if (r->group != NULL)
        sckpt_hold_ms(r->group->read_delay_ms);
    if (r->members <= 1)
        r->verdict = sckpt_load_pieces(r->path, r->m, r->pieces, r->n, &r->st->bytes, &r->st->shards_opened, r->why,
                                       r->whylen);
    else if (r->verdict == GOOD)
        r->verdict = sckpt_read_group_part(r->path, r->m, r->member, r->members, r->pieces, r->n, r->filled,
                                           &r->st->bytes, &r->st->shards_opened, r->why, r->whylen);
}

int sckpt_load_group(const char *path, const struct manifest *m, const struct dtrain_sckpt_group *group,
                     dtrain_comm *world, const struct dtrain_sckpt_piece *pieces, size_t n,
                     struct dtrain_sckpt_stats *st, char *why, size_t whylen, int *comm_rc, char *err, size_t errlen)
{
    *comm_rc = DTRAIN_OK;
    dtrain_comm *c = group != NULL ? group->comm : NULL;
    int members = c != NULL ? dtrain_comm_size(c) : 1;
    if (members <= 1) {
        struct group_read r = {path, m, group, pieces, n, 0, 1, GOOD, NULL, st, why, whylen};
        *comm_rc = dtrain_ckpt_io_rounds(world, group_read, &r, "resume: waiting for the ranks' reads", err, errlen);
        return r.verdict;
    }
    int member = dtrain_comm_rank(c);
    size_t ns = group->nslice;
    struct slot *slot = malloc((ns + 1) * sizeof *slot);
    struct dtrain_sckpt_piece *q = malloc((ns + 1) * sizeof *q);
    struct part mine = {GOOD, 0, 0, 0}, *all = malloc((size_t)members * sizeof *all);
    struct sckpt_segs filled = {0};
    float *buf[3] = {NULL, NULL, NULL};
    unsigned char *msg = NULL;
    uint64_t total = 0;
    if (all == NULL) { /* cannot take part in the exchange: a fault of this rank */
        free(slot);
        free(q);
        *comm_rc = DTRAIN_ERR_SYSTEM;
        dtrain_snprintf(err, errlen, "resume: out of memory for the outcomes of %d DP group members", members);
        return NO_MEMORY;
    }
    if (slot == NULL || q == NULL) {
        mine.verdict = NO_MEMORY;
        dtrain_snprintf(why, whylen, "out of memory for the %zu runs of the group's slice", ns);
    }
    for (size_t i = 0; mine.verdict == GOOD && i < ns; i++)
        slot[i] = (struct slot){group->slice[i].whole, group->slice[i].count, 0};
    if (mine.verdict == GOOD)
        qsort(slot, ns, sizeof *slot, by_whole);
    for (size_t i = 0; mine.verdict == GOOD && i < ns; i++) {
        if (slot[i].count == 0 || slot[i].whole > m->nparams || slot[i].count > m->nparams - slot[i].whole ||
            (i > 0 && slot[i].whole < slot[i - 1].whole + slot[i - 1].count)) {
            mine.verdict = DAMAGED_COVERAGE; /* a caller's bug: the same on every member */
            dtrain_snprintf(why, whylen, "%s: the DP group's slice has an empty, overlapping or out-of-model run", path);
        }
        slot[i].at = total;
        total += slot[i].count;
    }
    for (int a = 0; mine.verdict == GOOD && a < 3; a++)
        if ((buf[a] = malloc((size_t)(total + 1) * sizeof(float))) == NULL) {
            mine.verdict = NO_MEMORY;
            dtrain_snprintf(why, whylen, "out of memory for the %" PRIu64 " values of the group's slice", total);
        }
    for (size_t i = 0; mine.verdict == GOOD && i < ns; i++)
        q[i] = (struct dtrain_sckpt_piece){slot[i].whole, slot[i].count, buf[0] + slot[i].at, buf[1] + slot[i].at,
                                           buf[2] + slot[i].at};
    /* every rank's reads waited for in rounds over world (a member that
     * read first does not wait for a slower one in the gather below) */
    struct group_read r = {path, m, group, q, ns, member, members, mine.verdict, &filled, st, why, whylen};
    *comm_rc = dtrain_ckpt_io_rounds(world, group_read, &r, "resume: waiting for the ranks' reads", err, errlen);
    mine.verdict = r.verdict;
    mine.segs = filled.n;
    mine.floats = filled.floats;

    /* every member's outcome and size: all broadcast, or none does */
    if (*comm_rc == DTRAIN_OK)
        *comm_rc = sckpt_gather_ints(c, (const int32_t *)(const void *)&mine, PART_INTS, (int32_t *)(void *)all,
                                     "resume: the DP group's parts of the checkpoint", err, errlen);
    int v = mine.verdict;
    size_t most = 0;
    uint64_t placed = 0;
    for (int k = 0; *comm_rc == DTRAIN_OK && k < members; k++) {
        if (v == GOOD && all[k].verdict != GOOD) {
            v = all[k].verdict;
            dtrain_snprintf(why, whylen, "%s: DP group member %d could not read its part: %s", path, k,
                            sckpt_verdict_text(v));
        }
        size_t bytes = (size_t)(16 * all[k].segs + 12 * all[k].floats);
        if (bytes > most)
            most = bytes;
    }
    if (*comm_rc != DTRAIN_OK || v != GOOD)
        goto out;
    if (most > 0 && (msg = malloc(most)) == NULL) {
        /* no way to tell the others without a further exchange: a fault of this rank */
        *comm_rc = DTRAIN_ERR_SYSTEM;
        dtrain_snprintf(err, errlen, "resume: out of memory for a %zu-byte part of the checkpoint", most);
        goto out;
    }
    for (int k = 0; k < members; k++) {
        uint64_t segs = all[k].segs, floats = all[k].floats;
        size_t bytes = (size_t)(16 * segs + 12 * floats);
        placed += floats;
        if (bytes == 0)
            continue;
        uint64_t *table = (uint64_t *)(void *)msg;
        float *vals = (float *)(void *)(msg + 16 * segs);
        if (k == member) { /* pack: the parts' runs, then their params, m and v */
            uint64_t at = 0;
            for (size_t i = 0; i < filled.n; i++) {
                const struct sckpt_seg *g = &filled.s[i];
                float *ext[3] = {vals + at, vals + floats + at, vals + 2 * floats + at};
                table[2 * i] = g->whole;
                table[2 * i + 1] = g->count;
                copy_span(slot, ns, buf, g->whole, g->count, ext, 0);
                at += g->count;
            }
        }
        *comm_rc = dtrain_pcomm_status(c, dtrain_comm_broadcast(c, msg, bytes, k),
                                       "resume: a DP group member's part of the checkpoint", err, errlen);
        if (*comm_rc != DTRAIN_OK)
            goto out;
        if (k == member)
            continue;
        uint64_t at = 0;
        for (uint64_t i = 0; i < segs && v == GOOD; i++) {
            uint64_t w = table[2 * i], count = table[2 * i + 1];
            float *ext[3] = {vals + at, vals + floats + at, vals + 2 * floats + at};
            if (count > floats - at || copy_span(slot, ns, buf, w, count, ext, 1) != count) {
                v = DAMAGED_COVERAGE;
                dtrain_snprintf(why, whylen, "%s: DP group member %d sent a part outside the slice", path, k);
            }
            at += count;
        }
    }
    if (v == GOOD && placed != total) {
        v = DAMAGED_COVERAGE;
        dtrain_snprintf(why, whylen, "%s: the shards hold %" PRIu64 " of the %" PRIu64 " values of the DP group's slice",
                        path, placed, total);
    }
    /* this rank's pieces, out of the slice */
    for (size_t i = 0; v == GOOD && i < n; i++) {
        const struct dtrain_sckpt_piece *p = &pieces[i];
        float *ext[3] = {p->params, p->m, p->v};
        if (copy_span(slot, ns, buf, p->whole, p->count, ext, 0) != p->count) {
            v = DAMAGED_COVERAGE;
            dtrain_snprintf(why, whylen, "%s: the values at offset %" PRIu64 " are outside the DP group's slice", path,
                            p->whole);
        }
    }
out:
    free(msg);
    for (int a = 0; a < 3; a++)
        free(buf[a]);
    free(filled.s);
    free(all);
    free(q);
    free(slot);
    return v;
}
