/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of launcher/groups.c: the communicator groups of T x P x D
 * jobs, from 1 task to 2^20, and the PMI2 key scheme's sizes.  Also prints
 * (as TAP comments) the key/value volume of the bootstrap at 10^5 ranks that
 * doc/bootstrap.md quotes. */
#include <stdlib.h>
#include <string.h>

#include "dtrain_plan.h"
#include "groups.h"
#include "tap.h"

#define PMI2_KEY_LIMIT 64   /* PMI2_MAX_KEYLEN, NUL included */
#define PMI2_VALUE_LIMIT 1024
#define NCCL_ID_TEXT 261    /* "nccl:" + 256 hex */

/* For one shape and kind: every rank is in exactly one group, at its
 * my_rank; every group has the declared size; its leader is member 0 and
 * sees the same group; keys are short and differ between groups. */
static int check_kind(const struct dtrain_grid *g, enum dtrain_group_kind kind, char *why, size_t whylen)
{
    const int world = g->tp * g->pp * g->dp;
    long count = dtrain_group_count(g, kind);
    int *seen = calloc((size_t)(count > 0 ? count : 1), sizeof *seen);
    int *size_of = calloc((size_t)(count > 0 ? count : 1), sizeof *size_of);
    int rc = -1;
    if (seen == NULL || size_of == NULL) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    long absent = 0;
    for (int r = 0; r < world; r++) {
        struct dtrain_comm_group grp, lead;
        if (dtrain_group_of(g, r, kind, &grp) != 0) {
            snprintf(why, whylen, "rank %d: dtrain_group_of failed", r);
            goto out;
        }
        if (!grp.present) {
            absent++;
            continue;
        }
        if (grp.index < 0 || grp.index >= count || grp.my_rank < 0 || grp.my_rank >= grp.size ||
            dtrain_group_member(&grp, grp.my_rank) != r) {
            snprintf(why, whylen, "rank %d: index %ld of %ld, my_rank %d of %d, member %d", r, grp.index, count,
                     grp.my_rank, grp.size, dtrain_group_member(&grp, grp.my_rank));
            goto out;
        }
        if (strlen(grp.key) + 1 > PMI2_KEY_LIMIT) {
            snprintf(why, whylen, "key %s is too long", grp.key);
            goto out;
        }
        /* The leader (member 0) computes the same group and leads it. */
        if (dtrain_group_of(g, grp.first, kind == DTRAIN_GROUP_PP_PREV ? DTRAIN_GROUP_PP_NEXT : kind, &lead) != 0 ||
            !lead.present || lead.index != grp.index || lead.my_rank != 0 || strcmp(lead.key, grp.key) != 0 ||
            lead.size != grp.size || lead.stride != grp.stride) {
            snprintf(why, whylen, "rank %d: its leader %d does not see group %s", r, grp.first, grp.key);
            goto out;
        }
        if (size_of[grp.index] != 0 && size_of[grp.index] != grp.size) {
            snprintf(why, whylen, "group %s: members disagree on its size", grp.key);
            goto out;
        }
        size_of[grp.index] = grp.size;
        seen[grp.index]++;
    }
    /* A pair counts once per kind (only one end has it as PP_NEXT). */
    for (long i = 0; i < count; i++) {
        if (seen[i] != (kind >= DTRAIN_GROUP_PP_NEXT ? 1 : size_of[i])) {
            snprintf(why, whylen, "group %ld has %d members, expected %d", i, seen[i], size_of[i]);
            goto out;
        }
    }
    long expect_absent = kind >= DTRAIN_GROUP_PP_NEXT ? (long)g->tp * g->dp : 0;
    if (absent != expect_absent) {
        snprintf(why, whylen, "%ld ranks have no group (expected %ld)", absent, expect_absent);
        goto out;
    }
    rc = 0;
out:
    free(seen);
    free(size_of);
    return rc;
}

static void check_shape(int T, int P, int D)
{
    struct dtrain_grid g = {.tp = T, .pp = P, .dp = D};
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        char why[256] = "";
        ok(check_kind(&g, (enum dtrain_group_kind)k, why, sizeof why) == 0, "T=%d P=%d D=%d: %s groups partition the ranks %s",
           T, P, D, dtrain_group_kind_name((enum dtrain_group_kind)k), why);
    }
}

/* The PP pair seen from both ends is the same group. */
static int pairs_agree(const struct dtrain_grid *g)
{
    const int world = g->tp * g->pp * g->dp, step = g->tp * g->dp;
    for (int r = 0; r + step < world; r++) {
        struct dtrain_comm_group next, prev;
        if (dtrain_group_of(g, r, DTRAIN_GROUP_PP_NEXT, &next) != 0 ||
            dtrain_group_of(g, r + step, DTRAIN_GROUP_PP_PREV, &prev) != 0 || !next.present || !prev.present ||
            strcmp(next.key, prev.key) != 0 || next.my_rank != 0 || prev.my_rank != 1 || prev.first != r)
            return 0;
    }
    return 1;
}

/* Key and value bytes one fence carries for a shape, as Slurm packs them
 * (packstr: 4-byte length + text + NUL, for key and value). */
/* The keys one exchange round puts and their bytes: with every_group, one
 * per group of two or more (the design before WORLD's id alone went through
 * PMI2, for comparison); else the launcher's rule, dtrain_group_in_kvs. */
static void volume(const struct dtrain_grid *g, int id_len, int every_group, long *keys, long long *bytes,
                   int *longest_key)
{
    *keys = 0;
    *bytes = 0;
    *longest_key = 0;
    for (int k = 0; k <= DTRAIN_GROUP_PP_NEXT; k++) { /* PP_PREV is the same pairs */
        long n = dtrain_group_count(g, (enum dtrain_group_kind)k);
        for (long i = 0; i < n; i++) {
            char key[PMI2_KEY_LIMIT];
            if (dtrain_group_key((enum dtrain_group_kind)k, i, key, sizeof key) != 0)
                continue;
            int klen = (int)strlen(key);
            if (klen > *longest_key)
                *longest_key = klen;
            /* Groups of one are made locally: nothing is put. */
            int size = k == DTRAIN_GROUP_WORLD ? g->tp * g->pp * g->dp
                     : k == DTRAIN_GROUP_TP ? g->tp : k == DTRAIN_GROUP_PP ? g->pp
                     : k == DTRAIN_GROUP_DP ? g->dp : 2;
            struct dtrain_comm_group grp = {.present = 1, .size = size};
            if (size < 2 || (!every_group && !dtrain_group_in_kvs((enum dtrain_group_kind)k, &grp)))
                continue;
            (*keys)++;
            *bytes += 4 + klen + 1 + 4 + id_len + 1;
        }
    }
}

int main(void)
{
    /* Small shapes, all checked exhaustively. */
    check_shape(1, 1, 1);
    check_shape(4, 2, 2);   /* the 16-task integration test */
    check_shape(2, 3, 5);
    check_shape(8, 1, 3);
    check_shape(1, 7, 1);

    struct dtrain_grid small = {.tp = 4, .pp = 2, .dp = 2};
    struct dtrain_comm_group grp;
    ok(dtrain_group_count(&small, DTRAIN_GROUP_TP) == 4 && dtrain_group_count(&small, DTRAIN_GROUP_PP) == 8 &&
       dtrain_group_count(&small, DTRAIN_GROUP_DP) == 8 && dtrain_group_count(&small, DTRAIN_GROUP_PP_NEXT) == 8,
       "4x2x2: 4 TP, 8 PP, 8 DP groups and 8 PP pairs");
    ok(dtrain_group_of(&small, 13, DTRAIN_GROUP_TP, &grp) == 0 && grp.first == 12 && grp.stride == 1 &&
       grp.my_rank == 1 && strcmp(grp.key, "dt.tp.3") == 0, "rank 13: TP group dt.tp.3 = ranks 12..15, rank 1 in it");
    ok(dtrain_group_of(&small, 13, DTRAIN_GROUP_DP, &grp) == 0 && grp.first == 9 && grp.stride == 4 &&
       grp.size == 2 && grp.my_rank == 1 && strcmp(grp.key, "dt.dp.5") == 0,
       "rank 13 (tp 1, dp 1, pp 1): DP group dt.dp.5 = {9, 13}");
    ok(dtrain_group_of(&small, 13, DTRAIN_GROUP_PP, &grp) == 0 && grp.first == 5 && grp.stride == 8 &&
       grp.my_rank == 1 && strcmp(grp.key, "dt.pp.5") == 0, "rank 13: PP group dt.pp.5 = {5, 13}");
    ok(dtrain_group_of(&small, 13, DTRAIN_GROUP_PP_PREV, &grp) == 0 && grp.present && grp.first == 5 &&
       strcmp(grp.key, "dt.pn.5") == 0, "rank 13: PP_PREV pair dt.pn.5 = {5, 13}");
    ok(dtrain_group_of(&small, 13, DTRAIN_GROUP_PP_NEXT, &grp) == 0 && !grp.present,
       "rank 13 is on the last stage: no PP_NEXT");
    ok(dtrain_group_of(&small, 2, DTRAIN_GROUP_PP_PREV, &grp) == 0 && !grp.present,
       "rank 2 is on the first stage: no PP_PREV");
    ok(dtrain_group_of(&small, 0, DTRAIN_GROUP_WORLD, &grp) == 0 && strcmp(grp.key, "dt.w") == 0 &&
       grp.size == 16, "world key dt.w, 16 members");
    ok(pairs_agree(&small), "4x2x2: each PP pair is the same group from both ends");

    /* Bad input is refused, not crashed on. */
    struct dtrain_grid bad = {.tp = 0, .pp = 1, .dp = 1}, huge = {.tp = 65536, .pp = 65536, .dp = 1};
    ok(dtrain_group_of(&bad, 0, DTRAIN_GROUP_TP, &grp) == -1, "T=0 is refused");
    ok(dtrain_group_of(&huge, 0, DTRAIN_GROUP_TP, &grp) == -1, "a world beyond 2^20 is refused");
    ok(dtrain_group_of(&small, 16, DTRAIN_GROUP_TP, &grp) == -1 && dtrain_group_of(&small, -1, DTRAIN_GROUP_TP, &grp) == -1,
       "ranks outside the world are refused");
    ok(dtrain_group_of(&small, 0, DTRAIN_GROUP_KINDS, &grp) == -1, "an unknown kind is refused");
    char key[8];
    ok(dtrain_group_key(DTRAIN_GROUP_PP_NEXT, 1048575, key, sizeof key) == -1, "a key that does not fit is refused");

    /* 10^5 ranks: T=8, P=10, D=1250, every rank and kind. */
    check_shape(8, 10, 1250);
    struct dtrain_grid big = {.tp = 8, .pp = 10, .dp = 1250};
    ok(pairs_agree(&big), "8x10x1250: PP pairs agree from both ends");

    /* The largest world dtrain_plan.h allows: keys stay short. */
    struct dtrain_grid max = {.tp = 1, .pp = 1024, .dp = 1024};
    char longest[PMI2_KEY_LIMIT] = "";
    int made = dtrain_group_key(DTRAIN_GROUP_PP_NEXT, dtrain_group_count(&max, DTRAIN_GROUP_PP_NEXT) - 1, longest,
                                sizeof longest) == 0;
    ok(made && strlen(longest) < 16, "2^20 ranks: the longest key '%s' has %zu bytes (< 64)", longest, strlen(longest));
    ok(NCCL_ID_TEXT < PMI2_VALUE_LIMIT, "an NCCL id as text (%d bytes) fits a PMI2 value (1024)", NCCL_ID_TEXT);

    long keys;
    long long bytes;
    int klen;
    /* Only WORLD's id goes into the KVS; the others come over WORLD. */
    int only_world = 1;
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        struct dtrain_comm_group grp = {.present = 1, .size = 2};
        only_world &= dtrain_group_in_kvs((enum dtrain_group_kind)k, &grp) == (k == DTRAIN_GROUP_WORLD);
    }
    struct dtrain_comm_group alone = {.present = 1, .size = 1};
    ok(only_world && !dtrain_group_in_kvs(DTRAIN_GROUP_WORLD, &alone),
       "the KVS carries WORLD's id only, and not for a world of one task");
    volume(&big, NCCL_ID_TEXT, 1, &keys, &bytes, &klen);
    diag("10^5 ranks (T=8 P=10 D=1250), one nccl id per group (before): %ld keys, longest key %d bytes, %lld bytes "
         "per fence (%.1f MiB) delivered to every node", keys, klen, bytes, bytes / 1048576.0);
    for (int k = 0; k <= DTRAIN_GROUP_PP_NEXT; k++)
        diag("  %-7s groups: %ld", dtrain_group_kind_name((enum dtrain_group_kind)k),
             dtrain_group_count(&big, (enum dtrain_group_kind)k));
    ok(keys == 1 + 12500 + 10000 + 80 + 90000, "10^5 ranks, one id per group: 112581 keys (1 world + 12500 TP + "
                                              "10000 PP + 80 DP + 90000 PP pairs)");
    long long before = bytes;
    volume(&big, NCCL_ID_TEXT, 0, &keys, &bytes, &klen);
    diag("10^5 ranks, WORLD's id only (now): %ld key, %lld bytes per fence (%.0fx less)", keys, bytes,
         (double)before / (double)bytes);
    ok(keys == 1 && bytes == 4 + 4 + 1 + 4 + NCCL_ID_TEXT + 1, "10^5 ranks: 1 key in the KVS (dt.w), %lld bytes",
       bytes);
    long long small_bytes;
    struct dtrain_grid k1 = {.tp = 8, .pp = 16, .dp = 8};
    volume(&k1, NCCL_ID_TEXT, 0, &keys, &small_bytes, &klen);
    volume(&max, NCCL_ID_TEXT, 0, &keys, &bytes, &klen);
    ok(bytes == small_bytes, "the KVS volume does not grow with the world: %lld bytes at 1024 ranks and at 2^20",
       bytes);
    return tap_done();
}
