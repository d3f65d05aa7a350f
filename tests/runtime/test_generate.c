/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Generation (include/dtrain/dtrain_generate.h): the KV-cached forward, one
 * token at a time, gives the losses of the whole-sequence forward
 * (dtrain_gpt2, the trainer's) at every position; n tokens take n forward
 * steps; sampling (greedy, top-k, temperature) and its determinism. */
#include "dtrain_generate.h"
#include "dtrain_gpt2.h"
#include "dtrain_kernels.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T 24

int main(void)
{
    char err[512] = "";
    struct dtrain_model_config c = {.max_seq_len = T, .vocab_size = 200, .padded_vocab_size = 256,
                                   .num_layers = 3, .num_heads = 4, .channels = 32};
    size_t n = dtrain_model_param_count(&c);
    float *params = malloc(n * sizeof(float)), *logits = malloc(256 * sizeof(float));
    dtrain_model_init_params(&c, 21, params);
    /* a sharper model than the initialisation's (std 0.02 gives near-uniform
     * logits): scale the weights up so that attention and MLP matter */
    for (size_t i = 0; i < n; i++)
        params[i] *= 8.0f;
    int32_t in[T], tg[T];
    for (int t = 0; t < T; t++) {
        in[t] = (t * 37 + 5) % 200;
        tg[t] = (t * 53 + 11) % 200;
    }
    /* the whole sequence through the trainer's model: mean loss over T */
    struct dtrain_kernels *k = NULL;
    struct dtrain_gpt2 *m = NULL;
    struct dtrain_kernels_options kopt = {.threads = 1};
    float full = 0.0f;
    int ready = dtrain_kernels_create("cpu", &kopt, &k, err, sizeof err) == 0 &&
                dtrain_gpt2_create(k, &c, 1, T, &m, err, sizeof err) == DTRAIN_OK;
    if (ready) {
        dtrain_gpt2_set_params(m, params);
        ready = dtrain_gpt2_forward(m, in, tg, 1, T, &full, err, sizeof err) == DTRAIN_OK;
    }
    ok(ready, "the whole-sequence forward (%s)", ready ? "ok" : err);
    /* the same, one position at a time with the KV cache */
    struct dtrain_gen *g = NULL;
    double sum = 0.0;
    int stepped = dtrain_gen_create(&c, params, &g, err, sizeof err) == DTRAIN_OK;
    for (int t = 0; stepped && t < T; t++) {
        stepped = dtrain_gen_step(g, in[t], logits, err, sizeof err) == DTRAIN_OK;
        double mx = logits[0], z = 0.0;
        for (int v = 1; v < c.vocab_size; v++)
            mx = logits[v] > mx ? logits[v] : mx;
        for (int v = 0; v < c.vocab_size; v++)
            z += exp(logits[v] - mx);
        sum += -(logits[tg[t]] - mx - log(z));
    }
    double cached = sum / T, rel = fabs(cached - full) / full;
    ok(stepped && rel < 1e-5, "KV cache: the mean loss over %d positions, one forward step each, %.7f; the "
       "whole-sequence forward's %.7f (relative difference %.1e < 1e-5)", T, cached, (double)full, rel);
    ok(stepped && dtrain_gen_position(g) == T && dtrain_gen_step(g, 1, logits, err, sizeof err) == DTRAIN_ERR_INPUT &&
       strstr(err, "max_seq_len") != NULL, "the cache holds max_seq_len positions; one more is refused: %s", err);
    ok(dtrain_gen_step(g, 200, logits, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "vocabulary"),
       "a token outside the vocabulary is refused: %s", err);

    /* generation: n new tokens after a prompt of p cost p + n - 1 forward steps */
    int32_t prompt[4] = {1, 2, 3, 4}, a[16], b[16], d[16], e[16];
    int na = 0, nb = 0, nd = 0, ne = 0;
    int gen_ok = dtrain_generate(g, prompt, 4, 16, 1.0, 0, 7, a, &na, err, sizeof err) == DTRAIN_OK;
    int steps = dtrain_gen_position(g);
    ok(gen_ok && na == 16 && steps == 4 + 16 - 1, "16 tokens after a prompt of 4: %d forward steps (O(n), no "
       "re-run of the prefix)", steps);
    dtrain_generate(g, prompt, 4, 16, 1.0, 0, 7, b, &nb, err, sizeof err);
    dtrain_generate(g, prompt, 4, 16, 1.0, 0, 8, d, &nd, err, sizeof err);
    ok(nb == na && memcmp(a, b, sizeof a) == 0, "the same seed: the same tokens");
    ok(nd == na && memcmp(a, d, sizeof a) != 0, "another seed: other tokens");
    int in_vocab = 1;
    for (int i = 0; i < na; i++)
        in_vocab &= a[i] >= 0 && a[i] < c.vocab_size;
    ok(in_vocab, "sampled tokens lie in the real vocabulary (V = 200 of Vp = 256)");
    dtrain_generate(g, prompt, 4, 16, 0.0, 0, 7, d, &nd, err, sizeof err);
    dtrain_generate(g, prompt, 4, 16, 2.0, 1, 99, e, &ne, err, sizeof err);
    ok(memcmp(d, e, sizeof d) == 0, "temperature 0 and top-k 1 both take the most likely token");

    /* sampling by hand: logits 0, ln 2, ln 3 (probabilities 1/6, 2/6, 3/6) */
    float l3[3] = {0.0f, (float)log(2.0), (float)log(3.0)};
    int counts[3] = {0, 0, 0}, top2[3] = {0, 0, 0};
    for (uint64_t i = 0; i < 6000; i++) {
        counts[dtrain_gen_sample(l3, 3, 1.0, 0, 5, i)]++;
        top2[dtrain_gen_sample(l3, 3, 1.0, 2, 5, i)]++;
    }
    ok(abs(counts[0] - 1000) < 150 && abs(counts[1] - 2000) < 200 && abs(counts[2] - 3000) < 200,
       "6000 draws from probabilities 1/6, 2/6, 3/6: %d %d %d", counts[0], counts[1], counts[2]);
    ok(top2[0] == 0 && abs(top2[1] - 2400) < 200, "top-k 2 never draws the least likely; 2/5 of the draws are "
       "token 1: %d %d %d", top2[0], top2[1], top2[2]);
    float tie[3] = {1.0f, 1.0f, 0.0f};
    ok(dtrain_gen_sample(tie, 3, 0.0, 0, 1, 0) == 0, "greedy: a tie goes to the lower id");

    dtrain_gen_destroy(g);
    dtrain_gpt2_destroy(m);
    dtrain_kernels_destroy(k);
    free(params);
    free(logits);
    return tap_done();
}
