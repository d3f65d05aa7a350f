/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, internal: what the files of runtime/ckpt/ share about the
 * sharded checkpoint format (dtrain_shard_ckpt.h says the format and the
 * protocols): the constants and header offsets, the outcome record of a
 * save, the parsed manifest, an open shard file, and each file's functions.
 *   sckpt_folder.c     the folder: step names, listing, creating, removing
 *                      (never following a link, only what a save writes)
 *   sckpt_manifest.c   manifest.json: written by rank 0, read and checked
 *                      against the run's config
 *   sckpt_shard.c      shard files: written, verified against the
 *                      manifest, read into the pieces a rank asks for
 *   dtrain_shard_ckpt.c  the commit protocol (save) and the resume policy
 *                      (newest good one first, damaged ones renamed) */
#ifndef DTRAIN_SCKPT_INTERNAL_H
#define DTRAIN_SCKPT_INTERNAL_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "dtrain_ckpt_async.h" /* struct sckpt_image */
#include "dtrain_shard_ckpt.h"
#include "dtrain_clock.h"

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

static inline void put32(unsigned char *h, size_t off, uint32_t v) { memcpy(h + off, &v, 4); }
static inline void put64(unsigned char *h, size_t off, uint64_t v) { memcpy(h + off, &v, 8); }
static inline uint32_t get32(const unsigned char *h, size_t off) { uint32_t v; memcpy(&v, h + off, 4); return v; }
static inline uint64_t get64(const unsigned char *h, size_t off) { uint64_t v; memcpy(&v, h + off, 8); return v; }

/* One rank's outcome, gathered on every rank: 8 int32 (an errno, the
 * file's size, floats and checksum as halves). */
struct record {
    int32_t error;   /* 0, or the errno of the failed write */
    int32_t pad;
    uint64_t bytes, floats, checksum;
};
#define RECORD_INTS ((int)(sizeof(struct record) / sizeof(int32_t)))

struct shard_entry {
    uint64_t bytes, floats, checksum;
};

struct manifest {
    uint32_t version; /* of the format: its shards' checksum */
    uint64_t step, data_batches, nparams;
    struct dtrain_sckpt_layout layout;
    struct dtrain_sckpt_scaler scaler; /* "loss_scale", when there is one */
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

struct shard_file {
    int fd;
    uint64_t runs, floats;
    uint64_t *table; /* runs x (whole, count) */
    uint64_t *pos;   /* runs: each run's first float in the payload */
};

/* dtrain_shard_ckpt.c: agreement, and one candidate of a folder tried */
/* Every rank's n int32 values into all[size * n] (world NULL: one rank). */
int sckpt_gather_ints(dtrain_comm *world, const int32_t *mine, int n, int32_t *all, const char *what,
                      char *err, size_t errlen);
/* Every rank's flag (0 or 1) into *all, malloc'ed here (size entries; the
 * caller frees it); on failure *all is NULL: out of memory or the comm's
 * error, said in err. */
int sckpt_gather_flags(dtrain_comm *world, int size, int flag, int32_t **all, const char *what, char *err,
                       size_t errlen);
int sckpt_bcast(dtrain_comm *world, void *buf, size_t bytes, const char *what, char *err, size_t errlen);
/* Collective: load checkpoint `step` of dir (the shared protocol: every
 * shard verified, then read); a damaged one is renamed step-N.damaged and
 * said with `next` (what comes instead).  DTRAIN_OK with out->found 0 or
 * 1; DTRAIN_ERR_INPUT (another model), DTRAIN_ERR_FAULT (the comm). */
int sckpt_resume_one(const char *dir, uint64_t step, const char *next, const struct dtrain_train_config *cfg,
                     dtrain_comm *world, const struct dtrain_sckpt_group *group,
                     const struct dtrain_sckpt_piece *pieces, size_t npieces, FILE *msgs,
                     const char *prog, struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st, char *err,
                     size_t errlen);
const char *sckpt_verdict_text(int verdict);
/* Collective: rank 0 removes dir's leftovers (*.tmp) and lists its
 * complete checkpoints, newest first (at most MAX_CANDIDATES), for every
 * rank.  DTRAIN_ERR_INPUT when dir cannot be read. */
int sckpt_shared_list(const char *dir, dtrain_comm *world, uint64_t *steps, int *count, char *err, size_t errlen);

/* sckpt_folder.c: step-N names, the folder (created, fsynced, listed), removal */
int sckpt_step_path(char *out, size_t len, const char *dir, uint64_t step, const char *suffix);
int sckpt_shard_name(char *out, size_t len, long rank);
/* mkdir -p; 0 or -1 with errno. */
int sckpt_make_dirs(const char *path);
int sckpt_fsync_dir(const char *path);
/* The step folder a save writes into (DIR/step-N.tmp), made when absent
 * (DIR too, like mkdir -p) and opened with O_DIRECTORY|O_NOFOLLOW: a link
 * or anything else under the name, or a folder not this user's or
 * writable by others, is never written through (nor removed: it is not
 * the run's own).  Returns the descriptor, or -1 with errno and one line
 * in why naming the path and the reason. */
int sckpt_open_step_dir(const char *path, char *why, size_t whylen);
/* The resume's trust check (doc/fault-tolerance.md): dir (the folder the
 * user named; absent passes), and each of its step folders steps[0..n)
 * and everything in them, owned by this user or root, not writable by
 * group or others, no links (dtrain_untrusted_reason).  0, or -1 with one
 * line in err ("WHAT DIR ... is not trusted: REASON"). */
int sckpt_check_trusted(const char *dir, const char *what, const uint64_t *steps, long n, char *err,
                        size_t errlen);
/* Remove a step folder this run's saves made: only a real folder (never a
 * link, never a folder someone else owns), only the files a save writes
 * (manifest, shards and their temporary names), each removed with
 * unlinkat() relative to the folder's own descriptor, opened with
 * O_NOFOLLOW relative to the checkpoint folder's.  Anything else (a link,
 * a foreign file, a sub-folder) is reported, left where it is, and the
 * folder kept.  0 when removed (or absent), -1 with errno otherwise. */
int sckpt_remove_step_dir(const char *path);
/* Steps of dir's folders with this suffix ("" = complete, with a
 * manifest), newest first; at most max kept, the count of all returned.
 * -1 when dir cannot be read (0 when it does not exist). */
long sckpt_list_steps(const char *dir, const char *suffix, uint64_t *steps, long max);
/* Keep the newest `keep` complete checkpoints of dir. */
void sckpt_prune(const char *dir, int keep);
/* Leftovers of saves that never committed. */
void sckpt_remove_partial(const char *dir);

/* Floats of the vector a checkpoint holds: the model's parameters, or with
 * LoRA (cfg->lora_rank > 0) the whole model's adapters (the frozen base is
 * not saved; a resume reads it from --init-hf again). */
uint64_t sckpt_nparams(const struct dtrain_train_config *cfg);

/* sckpt_manifest.c: manifest.json, written and read */
/* Rank 0: manifest.json into tmp, then tmp renamed to final. */
/* config.model of a manifest: the six dimensions every model has, then,
 * for a family other than GPT-2 (so that GPT-2 manifests are those written
 * before Llama), "family" and its own fields.  _parse: 0, or -1 when a
 * field is missing, out of range or the model fails
 * dtrain_model_config_check. */
json_t *sckpt_model_json(const struct dtrain_model_config *m);
int sckpt_model_parse(json_t *model, struct dtrain_model_config *out);
/* 1 when two models are the same (every field). */
int sckpt_model_same(const struct dtrain_model_config *a, const struct dtrain_model_config *b);

int sckpt_commit(const char *dir, const char *tmp, const char *final, const struct dtrain_train_config *cfg,
                 const struct dtrain_sckpt_layout *L, uint64_t step, uint64_t data_batches,
                 const struct dtrain_sckpt_scaler *scaler, const struct record *all, char *err, size_t errlen);
/* Read path/manifest.json into *m and check it against cfg.  Returns GOOD,
 * DAMAGED_MANIFEST or INCOMPATIBLE (both with one line in why). */
int sckpt_read_manifest(const char *path, uint64_t step, const struct dtrain_train_config *cfg,
                        struct manifest *m, char *why, size_t whylen);
/* A resume's outcome once the checkpoint at path (manifest m, from tier
 * "shared" or "node-local") is loaded: found, its step, data cursor,
 * writer's layout and scaler (dtrain_shard_ckpt.c). */
void sckpt_resume_found(struct dtrain_sckpt_resumed *out, const struct manifest *m, const char *path,
                        const char *tier);

/* sckpt_shard.c: shard files, written, verified, read */
/* path (DIR/step-N.tmp/shard-R.bin, for messages) written in the step
 * folder open as dirfd (sckpt_open_step_dir). */
/* img (NULL: none): the file's bytes are also left in img->bytes
 * (img->len of them), for the node-local tier's peer copy; its room is
 * kept from one checkpoint to the next. */
int sckpt_write_shard(int dirfd, const char *path, const struct dtrain_sckpt_layout *L, uint64_t step,
                      uint64_t data_batches, uint64_t nparams, const struct dtrain_sckpt_piece *p, size_t n,
                      int fail_write, struct sckpt_image *img, struct record *rec, char *err, size_t errlen);
/* dtrain_sckpt_write_shard, keeping the bytes in img (as above). */
int sckpt_write_shard_kept(const char *dir, const struct dtrain_train_config *cfg,
                           const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                           const struct dtrain_sckpt_piece *pieces, size_t npieces, int fail_write,
                           struct sckpt_image *img, struct dtrain_sckpt_written *w);
/* Read shard r whole and compare its checksum with the manifest's. */
int sckpt_shard_verify(const char *path, long r, const struct manifest *m, uint64_t *bytes_read, char *why,
                       size_t whylen);
/* Read the pieces from the shards of the checkpoint at path that hold
 * runs (an empty shard, e.g. a DP rank's > 0 without ZeRO, is not opened:
 * its entry says 0 floats).  *opened (may be NULL) counts the shards
 * opened. */
int sckpt_load_pieces(const char *path, const struct manifest *m, const struct dtrain_sckpt_piece *pieces,
                      size_t n, uint64_t *bytes_read, uint64_t *opened, char *why, size_t whylen);

/* Parts of the whole vector (whole offset, count), in the order read. */
struct sckpt_seg {
    uint64_t whole, count;
};
struct sckpt_segs {
    struct sckpt_seg *s;
    size_t n, cap;
    uint64_t floats; /* the sum of the counts */
};
/* Append (merged with the last part when it goes on from it); -1: no memory. */
int sckpt_segs_add(struct sckpt_segs *l, uint64_t whole, uint64_t count);
/* The member of a reading DP group of `members` ranks that reads shard r:
 * the one whose block of the writer's DP ranks holds r's DP rank (writer
 * DP rank d' goes to member d' * members / D), so every shard has one
 * reader in the group and a member opens at most ceil(D / members) shards
 * of each writing (tp, pp) slice. */
int sckpt_group_member_of(const struct manifest *m, long r, int members);
/* The read of a group load (dtrain_sckpt_resume_group): from the
 * non-empty shards that fall to this member, what they hold of slice (the
 * runs the whole group loads, increasing, disjoint), each part read
 * listed in filled.  *opened (may be NULL) counts the shards opened. */
int sckpt_read_group_part(const char *path, const struct manifest *m, int member, int members,
                          const struct dtrain_sckpt_piece *slice, size_t n, struct sckpt_segs *filled,
                          uint64_t *bytes_read, uint64_t *opened, char *why, size_t whylen);
/* sckpt_group.c: the group load, collective over world and group->comm:
 * every member reads its part of the shards into the slice (the reads of
 * every rank waited for in rounds over world, dtrain_ckpt_io_rounds), the
 * parts go to every member (one broadcast per member), and each copies
 * its pieces out of the slice.  Returns the verdict (GOOD, or the first
 * member's damage, the same on every member); *comm_rc: DTRAIN_OK, or
 * the comm's failure (err says it; the verdict is then not agreed). */
int sckpt_load_group(const char *path, const struct manifest *m, const struct dtrain_sckpt_group *group,
                     dtrain_comm *world, const struct dtrain_sckpt_piece *pieces, size_t n,
                     struct dtrain_sckpt_stats *st, char *why, size_t whylen, int *comm_rc, char *err, size_t errlen);
/* Fault injection, a slow disk: the calling thread held back ms (> 0). */
void sckpt_hold_ms(long ms);

#endif
