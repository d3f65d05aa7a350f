/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The bytes of a training step, group by group; see dtrain_step_bytes.h. */
#include "dtrain_step_bytes.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"

const char *dtrain_explain_group_name(enum dtrain_explain_group g)
{
    static const char *const name[DTRAIN_EXPLAIN_GROUPS] = {"TP", "PP", "DP", "WORLD"};
    return (int)g >= 0 && g < DTRAIN_EXPLAIN_GROUPS ? name[g] : "?";
}

int dtrain_explain_group_size(enum dtrain_explain_group g, int T, int P, int D)
{
    return g == DTRAIN_EXPLAIN_TP ? T : g == DTRAIN_EXPLAIN_PP ? P : g == DTRAIN_EXPLAIN_DP ? D : T * P * D;
}

static double padded_vocab(const struct dtrain_model_size *m, int T)
{
    return m->padded_vocab > 0 ? (double)m->padded_vocab : (double)((m->vocab + T - 1) / T * T);
}

static double max_seq(const struct dtrain_model_size *m)
{
    return (double)(m->max_seq > 0 ? m->max_seq : m->seq);
}

/* n floats padded to a multiple of D */
static double pad(double n, int D)
{
    long long f = (long long)n;
    return (double)((f + D - 1) / D * D);
}

/* A layer's parameters held by one of T ranks: GPT-2's qkv (3C^2 + 3C),
 * attproj C^2, fc (4C^2 + 4C), fcproj 4C^2 split over T, its LayerNorms
 * (4C) and the two row-parallel biases (2C) whole; another family's sizes
 * as given. */
static double layer_params(const struct dtrain_model_size *m, double C, int T)
{
    double split = m->layer_split > 0 ? m->layer_split : 12.0 * C * C + 7.0 * C;
    return split / T + (m->layer_whole > 0 ? m->layer_whole : 6.0 * C);
}

static double final_norm(const struct dtrain_model_size *m, double C)
{
    return m->final_norm > 0 ? m->final_norm : 2.0 * C;
}

double dtrain_explain_stage_params(const struct dtrain_model_size *m, int T, int P, int stage)
{
    double C = (double)m->hidden, nl = (double)(m->layers / P), maxT = max_seq(m);
    double wte = padded_vocab(m, T) / T * C;
    int first = stage == 0, last = stage == P - 1;
    double n = nl * layer_params(m, C, T);
    if (first || last)
        n += wte; /* wte: stage 0 and the last hold twin copies (untied: the last its own head) */
    if (first && last && m->untied_head)
        n += wte; /* one stage: wte and the untied head */
    if (first && !m->no_wpe)
        n += maxT * C; /* wpe */
    if (last)
        n += final_norm(m, C);
    return n;
}

double dtrain_explain_group_bytes(const struct dtrain_model_size *m, int T, int P, int D,
                                  enum dtrain_explain_group g, int stage)
{
    if (T < 1 || P < 1 || D < 1 || stage < 0 || stage >= P || m->layers % P != 0)
        return -1;
    double C = (double)m->hidden, N = (double)m->micro_batch * (double)m->seq, X = N * C;
    double mb = (double)m->micro_batches, nl = (double)(m->layers / P), t1 = T - 1.0;
    int sp = m->sequence_parallel && T > 1, v = m->virtual_stages > 0 ? m->virtual_stages : 1;
    int first = stage == 0, last = stage == P - 1;
    double ab = m->act_bytes, gb = m->grad_bytes, bytes = 0;
    switch (g) {
    case DTRAIN_EXPLAIN_TP: {
        /* per micro-batch, group totals: all-reduce of n: 2(T-1)n; all-gather
         * or reduce-scatter of n per member: (T-1)Tn = (T-1)X for X/T rows */
        double layer = (sp ? 10.0 : 8.0) * t1 * X + (m->recompute_full ? 4.0 * t1 * X : 0.0);
        double per = nl * layer * ab;
        if (first)
            per += 2.0 * t1 * X * ab; /* embedding: all-reduce (SP: reduce-scatter + all-gather) */
        if (last)
            per += (sp ? 3.0 : 2.0) * t1 * X * ab            /* LM head input (gradient) */
                   + (t1 * T * N + 2.0 * t1 * 2.0 * N) * 4.0; /* loss: row maxima, sums (fp32) */
        bytes = mb * per;
        if (sp) /* norm weight gradient sums */
            bytes += (m->zero_stage == 3 ? mb : 1.0) *
                     ((m->norm_vectors > 0 ? m->norm_vectors : 4.0) * nl + (last ? final_norm(m, C) / C : 0.0)) *
                     2.0 * t1 * C * gb;
        break;
    }
    case DTRAIN_EXPLAIN_PP:
        if (P > 1) {
            double act = sp ? X / T : X;
            bytes = 2.0 * ((double)P * v - 1.0) * mb * act * ab      /* activations forward, gradients back */
                    + (m->untied_head ? 0.0 : 2.0 * padded_vocab(m, T) / T * C * gb); /* the tied embedding's swap */
        }
        break;
    case DTRAIN_EXPLAIN_DP: {
        if (m->zero_stage != 3) {
            bytes = 2.0 * (D - 1.0) * dtrain_explain_stage_params(m, T, P, stage) * gb;
            break;
        }
        /* ZeRO-3: each unit (a layer, wpe, wte, the final LayerNorm) padded
         * to a multiple of D; per micro-batch every unit gathered for the
         * forward and again for the backward (wte by the embedding and by
         * the head), the gradients of all but wte reduce-scattered at each
         * backward, wte's once per step */
        double layer = pad(layer_params(m, C, T), D), vocab = padded_vocab(m, T) / T * C, wte = pad(vocab, D);
        double wpe = m->no_wpe ? 0 : pad(max_seq(m) * C, D);
        /* an untied head is in the head unit (with the final norm): no wte on the last stage */
        double head = pad(final_norm(m, C) + (m->untied_head ? vocab : 0), D), tied = m->untied_head ? 0 : 1;
        double per = 3.0 * nl * layer + (first ? 2.0 * wte + 3.0 * wpe : 0) + (last ? 3.0 * head + tied * 2.0 * wte : 0);
        bytes = (D - 1.0) * (mb * per + (first || (last && tied) ? wte : 0)) * gb;
        break;
    }
    case DTRAIN_EXPLAIN_WORLD: {
        double W = (double)T * P * D, k = m->step_sums > 0 ? m->step_sums : 4;
        bytes = W * (W - 1.0) * 8.0 * k; /* an all-gather of k doubles */
        break;
    }
    default:
        return -1;
    }
    return bytes;
}


double dtrain_explain_seconds(double bytes, double gbps)
{
    return gbps > 0 ? bytes / (gbps * 1e9) : 0.0;
}

int dtrain_group_links_format(const struct dtrain_group_links *l, char *buf, size_t len)
{
    size_t at = 0;
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        int w = l->gbps[g] > 0 ? snprintf(buf + at, len - at, "%s%s=%.6g:%s", g ? "," : "",
                                          dtrain_explain_group_name((enum dtrain_explain_group)g), l->gbps[g],
                                          l->kind[g])
                               : snprintf(buf + at, len - at, "%s%s=-", g ? "," : "",
                                          dtrain_explain_group_name((enum dtrain_explain_group)g));
        if (w < 0 || (size_t)w >= len - at)
            return -1;
        at += (size_t)w;
    }
    return 0;
}

static int link_kind_char(char c)
{
    return isalnum((unsigned char)c) || c == ' ' || c == '/' || c == '+' || c == '-' || c == '_' || c == '.';
}

enum dtrain_status dtrain_group_links_parse(const char *text, struct dtrain_group_links *l, char *err, size_t errlen)
{
    const char *p = text;
    memset(l, 0, sizeof *l);
    for (int g = 0; g < DTRAIN_EXPLAIN_GROUPS; g++) {
        const char *name = dtrain_explain_group_name((enum dtrain_explain_group)g);
        size_t n = strlen(name);
        if ((g > 0 && *p++ != ',') || strncmp(p, name, n) != 0 || p[n] != '=') {
            dtrain_snprintf(err, errlen, "byte %zu does not name %s next (expected TP=GBPS:KIND,PP=...,DP=...,"
                            "WORLD=..., a group of one '-')", (size_t)(p - text), name);
            return DTRAIN_ERR_INPUT;
        }
        p += n + 1;
        if (*p == '-' && (p[1] == ',' || p[1] == '\0')) {
            snprintf(l->kind[g], sizeof l->kind[g], "-");
            p++;
            continue;
        }
        char *end;
        errno = 0;
        double v = isdigit((unsigned char)*p) ? strtod(p, &end) : -1;
        if (v <= 0 || errno != 0 || !isfinite(v) || v > 1e6 || *end != ':') {
            dtrain_snprintf(err, errlen, "byte %zu: %s's bandwidth is not a number of GB/s in (0, 1e6] "
                            "followed by ':KIND'", (size_t)(p - text), name);
            return DTRAIN_ERR_INPUT;
        }
        l->gbps[g] = v;
        p = end + 1;
        size_t k = 0;
        while (p[k] != ',' && p[k] != '\0' && link_kind_char(p[k]) && k < DTRAIN_LINK_KIND_MAX - 1)
            k++;
        if (k == 0 || (p[k] != ',' && p[k] != '\0')) {
            dtrain_snprintf(err, errlen, "byte %zu: %s's link kind must be 1 to %d letters, digits, spaces or "
                            "/+-_.", (size_t)(p - text), name, DTRAIN_LINK_KIND_MAX - 1);
            return DTRAIN_ERR_INPUT;
        }
        memcpy(l->kind[g], p, k);
        l->kind[g][k] = '\0';
        p += k;
    }
    if (*p != '\0') {
        dtrain_snprintf(err, errlen, "byte %zu: more after WORLD's link", (size_t)(p - text));
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

int dtrain_leaf_edges_parse(const char *text, long *cross, long *ring, long *cross_own)
{
    char extra;
    if (text == NULL || sscanf(text, "%ld %ld %ld %c", cross, ring, cross_own, &extra) != 3 || *ring < 0 ||
        *cross < 0 || *cross > *ring || *cross_own < 0 || *cross_own > *ring)
        return -1;
    return 0;
}
