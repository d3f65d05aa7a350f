/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A Hugging Face byte-level BPE tokenizer (GPT-2's and Llama 3's kind),
 * read from its tokenizer.json.
 *
 * What is supported, everything else refused with one line: model "BPE"
 * (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges; no
 * dropout, byte fallback, subword prefix or suffix), no normalizer, the
 * pre-tokenizer ByteLevel (add_prefix_space false; use_regex: GPT-2's
 * split pattern), alone or after Split pre-tokenizers (a Regex pattern,
 * behavior Isolated, not inverted) in a Sequence, the decoder ByteLevel,
 * and added tokens (not lstrip, rstrip or single_word), matched literally
 * in the text before pre-tokenization as tokenizers does: leftmost-longest,
 * the normalized: false ones first.  The post-processor is not applied
 * (tokenizers' add_special_tokens=False).  The split patterns run with
 * PCRE2 (UTF, Unicode properties); bytes that are not UTF-8 match no class
 * and become pieces of their own, so any input encodes and decodes back to
 * itself byte for byte.
 *
 * The file is untrusted: its size, the vocabulary, the merges, the added
 * tokens and every string are bounded, every field is type-checked. */
#ifndef DTRAIN_BPE_H
#define DTRAIN_BPE_H

#include <stddef.h>
#include <stdint.h>

#define DTRAIN_BPE_MAX_FILE_BYTES (256L << 20) /* Llama 3's is 9 MB */
#define DTRAIN_BPE_MAX_VOCAB (1 << 22)         /* ids are below this too */
#define DTRAIN_BPE_MAX_MERGES (1 << 22)
#define DTRAIN_BPE_MAX_ADDED 65536
#define DTRAIN_BPE_MAX_TOKEN_BYTES 4096 /* one vocabulary or added token */
#define DTRAIN_BPE_MAX_PATTERN_BYTES 4096

struct dtrain_bpe; /* opaque: a loaded, checked tokenizer */

/* Load tokenizer.json from path.  DTRAIN_ERR_INPUT with one line naming the
 * file and the field for a file that is not a supported, well-formed
 * tokenizer; DTRAIN_ERR_SYSTEM when out of memory. */
int dtrain_bpe_load(const char *path, struct dtrain_bpe **out, char *err, size_t errlen);
/* The same from text already in memory (name is used in messages). */
int dtrain_bpe_load_text(const char *text, size_t len, const char *name, struct dtrain_bpe **out, char *err,
                         size_t errlen);
void dtrain_bpe_free(struct dtrain_bpe *bpe);

/* The largest token id of the vocabulary and added tokens. */
uint32_t dtrain_bpe_max_id(const struct dtrain_bpe *bpe);

/* Encode len bytes of text: *ids (malloc'd, free() it) gets *n ids.
 * DTRAIN_ERR_INPUT when a split pattern exceeds its match limit,
 * DTRAIN_ERR_SYSTEM when out of memory. */
int dtrain_bpe_encode(const struct dtrain_bpe *bpe, const unsigned char *text, size_t len, uint32_t **ids,
                      size_t *n, char *err, size_t errlen);

/* The bytes of token id (added tokens: their content; the others through
 * the byte-level map), or NULL with *len 0 for an id the tokenizer does
 * not have. */
const unsigned char *dtrain_bpe_token_bytes(const struct dtrain_bpe *bpe, uint32_t id, size_t *len);

#endif
