/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-generate: text from a trained model (dtrain_generate.h; GPT-2 or
 * Llama), read from a sharded checkpoint folder of any layout, an llm.c
 * model file or a Hugging Face model folder. */
#include "data/dtrain_bpe.h"
#include "dtrain_generate.h"
#include "dtrain_llmc.h"
#include "dtrain_parse.h"
#include "dtrain_shard_ckpt.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "dtrain-generate"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " (--checkpoint DIR | --model FILE | --hf DIR) [--prompt TEXT | --prompt-tokens IDS]\n"
            "       [options]\n"
            "Continue a prompt with a trained GPT-2 or Llama model (one token at a time, KV cache, on the CPU).\n"
            "  --checkpoint DIR     a folder of sharded checkpoints (dtrain-train --checkpoint, dtrain-launch\n"
            "                       --ckpt-dir), written by any layout: its newest good one (read only)\n"
            "  --model FILE         or an llm.c model file (--save-llmc)\n"
            "  --hf DIR             or a Hugging Face model folder (config.json, model.safetensors):\n"
            "                       LlamaForCausalLM, MistralForCausalLM, GPT2LMHeadModel\n"
            "  --prompt TEXT        the prompt as bytes, one token per byte (dtrain-tokenize's vocabulary)\n"
            "  --tokenizer FILE     or a Hugging Face byte-level BPE tokenizer.json: it encodes --prompt\n"
            "                       and decodes the ids to text (dtrain-tokenize --tokenizer)\n"
            "  --prompt-tokens IDS  or token ids, e.g. 50256,464,2068 (llm.c's GPT-2 tokens)\n"
            "                       (default: the single token 10, a newline)\n"
            "  --max-tokens N       tokens to generate (64; fewer when the model's max_seq_len is reached)\n"
            "  --temperature T      1.0; 0 = always the most likely token\n"
            "  --top-k K            sample among the K most likely (0 = all; default 0)\n"
            "  --seed S             the sampling seed (1337): the same seed gives the same text\n"
            "  --tokens             print token ids (one line) instead of the prompt and text as bytes\n"
            "  --help, --version\n"
            "Exit codes: 0 done, 2 bad input (one line on stderr), 1 internal error.\n");
}

static int parse_ids(const char *text, int32_t **ids, int *n)
{
    size_t cap = 16;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    const char *p = text;
    while (*ids != NULL && *p != '\0') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0'))
            return -1;
        if ((size_t)*n == cap) {
            int32_t *more = realloc(*ids, 2 * cap * sizeof **ids);
            if (more == NULL)
                return -1;
            *ids = more;
            cap *= 2;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    return *ids != NULL && *n > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    enum { O_CKPT = 256, O_MODEL, O_PROMPT, O_IDS, O_MAX, O_TEMP, O_TOPK, O_SEED, O_TOKENS, O_HELP, O_VERSION,
           O_TOKENIZER, O_HF };
    static const struct option longopts[] = {
        {"checkpoint", required_argument, NULL, O_CKPT}, {"model", required_argument, NULL, O_MODEL},
        {"prompt", required_argument, NULL, O_PROMPT}, {"prompt-tokens", required_argument, NULL, O_IDS},
        {"max-tokens", required_argument, NULL, O_MAX}, {"temperature", required_argument, NULL, O_TEMP},
        {"top-k", required_argument, NULL, O_TOPK}, {"seed", required_argument, NULL, O_SEED},
        {"tokens", no_argument, NULL, O_TOKENS}, {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION}, {"tokenizer", required_argument, NULL, O_TOKENIZER},
        {"hf", required_argument, NULL, O_HF},
        {NULL, 0, NULL, 0},
    };
    const char *ckpt = NULL, *model = NULL, *hf = NULL, *prompt = NULL, *ids_text = NULL, *tok_path = NULL;
    struct dtrain_bpe *bpe = NULL;
    long max_new = 64, top_k = 0, seed = 1337;
    double temperature = 1.0;
    int as_tokens = 0, c, rc = 2;
    char err[1024];
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case O_CKPT: ckpt = optarg; break;
        case O_MODEL: model = optarg; break;
        case O_HF: hf = optarg; break;
        case O_PROMPT: prompt = optarg; break;
        case O_IDS: ids_text = optarg; break;
        case O_TOKENIZER: tok_path = optarg; break;
        case O_MAX:
            if (dtrain_parse_int(optarg, 1, 1 << 20, "--max-tokens", &max_new, err, sizeof err) != 0)
                goto bad;
            break;
        case O_TOPK:
            if (dtrain_parse_int(optarg, 0, 1 << 30, "--top-k", &top_k, err, sizeof err) != 0)
                goto bad;
            break;
        case O_SEED:
            if (dtrain_parse_int(optarg, 0, 9000000000000000000L, "--seed", &seed, err, sizeof err) != 0)
                goto bad;
            break;
        case O_TEMP:
            temperature = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(temperature >= 0.0 && temperature <= 100.0)) {
                snprintf(err, sizeof err, "--temperature: '%.64s' is not a number from 0 to 100", optarg);
                goto bad;
            }
            break;
        case O_TOKENS: as_tokens = 1; break;
        case O_HELP: usage(stdout); return 0;
        case O_VERSION: printf(PROG " " PACKAGE_VERSION "\n"); return 0;
        default:
            snprintf(err, sizeof err, "unknown option or missing value: %s (see " PROG " --help)", argv[optind - 1]);
            goto bad;
        }
    }
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%.64s' (see " PROG " --help)", argv[optind]);
        goto bad;
    }
    if ((ckpt != NULL) + (model != NULL) + (hf != NULL) != 1) {
        snprintf(err, sizeof err,
                 "give either --checkpoint DIR or --model FILE or --hf DIR, one of them (see " PROG " --help)");
        goto bad;
    }
    if (prompt != NULL && ids_text != NULL) {
        snprintf(err, sizeof err, "give either --prompt or --prompt-tokens, not both");
        goto bad;
    }
    if (tok_path != NULL && (rc = dtrain_bpe_load(tok_path, &bpe, err, sizeof err)) != DTRAIN_OK) {
        rc = rc == DTRAIN_ERR_INPUT ? 2 : 1;
        goto bad;
    }
    struct dtrain_model_config cfg;
    float *params = NULL;
    if (ckpt != NULL) {
        struct dtrain_sckpt_model m;
        if ((rc = dtrain_sckpt_load_model(ckpt, DTRAIN_SCKPT_NEWEST, &m, err, sizeof err)) != DTRAIN_OK) {
            rc = rc == DTRAIN_ERR_INPUT ? 2 : 1;
            dtrain_bpe_free(bpe);
            goto bad;
        }
        cfg = m.model;
        params = m.params;
        fprintf(stderr, PROG ": %s (step %llu, written by T=%d P=%d D=%d)%s\n", m.path, (unsigned long long)m.step,
                m.writer.tp, m.writer.pp, m.writer.dp, m.skipped ? ", newer ones did not verify" : "");
    } else if (hf != NULL) {
        if ((rc = dtrain_model_load_hf(hf, &cfg, &params, err, sizeof err)) != DTRAIN_OK) {
            rc = rc == DTRAIN_ERR_INPUT ? 2 : 1;
            dtrain_bpe_free(bpe);
            goto bad;
        }
    } else {
        if (dtrain_llmc_read_config(model, &cfg, err, sizeof err) != DTRAIN_OK) {
            dtrain_bpe_free(bpe);
            goto bad;
        }
        params = malloc(dtrain_model_param_count(&cfg) * sizeof(float));
        if (params == NULL || dtrain_llmc_load(model, &cfg, params, err, sizeof err) != DTRAIN_OK) {
            if (params == NULL)
                snprintf(err, sizeof err, "out of memory");
            free(params);
            dtrain_bpe_free(bpe);
            goto bad;
        }
    }
    int32_t *ids = NULL, *out = NULL;
    int n = 0, nout = 0;
    if (bpe != NULL && dtrain_bpe_max_id(bpe) >= (uint32_t)cfg.vocab_size) {
        snprintf(err, sizeof err, "the tokenizer's vocabulary (%lu) is larger than the model's (%d)",
                 (unsigned long)dtrain_bpe_max_id(bpe) + 1, cfg.vocab_size);
        rc = 2;
        goto out;
    }
    if (ids_text != NULL) {
        if (parse_ids(ids_text, &ids, &n) != 0) {
            snprintf(err, sizeof err, "--prompt-tokens: '%.64s' is not a comma-separated list of token ids", ids_text);
            rc = 2;
            goto out;
        }
    } else if (bpe != NULL) {
        const char *p = prompt != NULL && *prompt != '\0' ? prompt : "\n";
        uint32_t *u = NULL;
        size_t nu = 0;
        if ((rc = dtrain_bpe_encode(bpe, (const unsigned char *)p, strlen(p), &u, &nu, err, sizeof err)) != DTRAIN_OK) {
            rc = rc == DTRAIN_ERR_INPUT ? 2 : 1;
            goto out;
        }
        ids = nu > 0 && nu <= INT32_MAX ? malloc(nu * sizeof *ids) : NULL;
        for (size_t i = 0; ids != NULL && i < nu; i++)
            ids[i] = (int32_t)u[i];
        n = (int)nu;
        free(u);
    } else {
        const char *p = prompt != NULL && *prompt != '\0' ? prompt : "\n";
        n = (int)strlen(p);
        ids = malloc((size_t)n * sizeof *ids);
        for (int i = 0; ids != NULL && i < n; i++)
            ids[i] = (unsigned char)p[i];
    }
    struct dtrain_gen *g = NULL;
    out = malloc((size_t)max_new * sizeof *out);
    if (ids == NULL || out == NULL) {
        snprintf(err, sizeof err, "out of memory");
        rc = 1;
        goto out;
    }
    rc = dtrain_gen_create(&cfg, params, &g, err, sizeof err);
    if (rc == DTRAIN_OK)
        rc = dtrain_generate(g, ids, n, (int)max_new, temperature, (int)top_k, (uint64_t)seed, out, &nout, err,
                             sizeof err);
    dtrain_gen_destroy(g);
    if (rc != DTRAIN_OK) {
        rc = rc == DTRAIN_ERR_INPUT ? 2 : 1;
        goto out;
    }
    if (!as_tokens && bpe != NULL) {
        /* ids the tokenizer lacks (a padded vocabulary's tail) print nothing */
        size_t len;
        for (int i = 0; i < n + nout; i++) {
            const unsigned char *t = dtrain_bpe_token_bytes(bpe, (uint32_t)(i < n ? ids[i] : out[i - n]), &len);
            if (t != NULL)
                fwrite(t, 1, len, stdout);
        }
        putchar('\n');
    } else if (as_tokens || cfg.vocab_size > 256) {
        for (int i = 0; i < nout; i++)
            printf("%s%d", i ? " " : "", (int)out[i]);
        printf("\n");
    } else {
        for (int i = 0; i < n; i++)
            putchar(ids[i]);
        for (int i = 0; i < nout; i++)
            putchar(out[i]);
        putchar('\n');
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
    if (rc != 0)
        snprintf(err, sizeof err, "cannot write the text");
out:
    dtrain_bpe_free(bpe);
    free(ids);
    free(out);
    free(params);
    if (rc == 0)
        return 0;
bad:
    fprintf(stderr, PROG ": %s\n", err);
    return rc == 1 ? 1 : 2;
}
