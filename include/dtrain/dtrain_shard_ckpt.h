/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain: sharded checkpoints of the parallel trainer.
 *
 * A checkpoint is a folder DIR/step-NNNNNNNN (the step, 8 digits or more)
 * holding one file per rank, shard-RRRRR.bin, and manifest.json.  Every
 * value is placed by its offset in the whole model's flat parameter vector
 * (llm.c's order, dtrain_model.h): each rank writes the elements it
 * owns as runs (whole offset, count) with their parameters and AdamW
 * moments, and each element of the model is written by exactly one rank.
 * A rank of any layout loads by asking for the runs it needs, so a
 * checkpoint loads into a different D (after losing nodes), with ZeRO-1 on
 * or off, and into other T and P as well.
 *
 * Commit protocol (dtrain_sckpt_save, a collective over WORLD):
 *   1. every rank writes DIR/step-N.tmp/shard-R.bin under a temporary name,
 *      fsyncs it, renames it into place and fsyncs the folder;
 *   2. an all-gather of every rank's outcome, file size and checksum (the
 *      barrier: nobody goes on before every shard is on disk);
 *   3. rank 0 writes manifest.json (temporary name, fsync, rename), renames
 *      step-N.tmp to step-N (atomic: a step folder without ".tmp" is
 *      complete), fsyncs DIR and removes all but the newest `keep` complete
 *      checkpoints;
 *   4. rank 0 broadcasts the outcome, so that every rank returns the same.
 * A failed write on any rank leaves step-N.tmp behind (removed) and the
 * older checkpoints untouched.
 *
 * Resume (dtrain_sckpt_resume, collective): rank 0 removes leftovers of
 * interrupted saves (*.tmp) and lists the complete checkpoints, newest
 * first.  For each: every rank reads the manifest and checks it against
 * the run's config; shard file i is read whole and its size and checksum
 * compared with the manifest by rank (i mod world size); if every shard
 * verifies, every rank reads the runs it asked for (or, with its DP
 * group, a share of the shards: dtrain_sckpt_resume_group).  A damaged checkpoint
 * (manifest unreadable, a shard missing, short, or with another checksum)
 * is renamed step-N.damaged, reported on one line, and the one before is
 * tried.  A checkpoint of another model, batch shape, data order or seed
 * is refused (DTRAIN_ERR_INPUT): that is a wrong folder, not damage.
 *
 * Shard file, little-endian:
 *   256-byte header: "DTRNSHRD", u32 version 2 (1 is still read), u32
 *     header bytes 256,
 *     u32 rank, world size, T, P, D, tp rank, pp rank, dp rank, zero1,
 *     zero, u64 step, data batches consumed, model parameters, runs,
 *     floats (the sum of the runs' counts), u64 checksum
 *     (struct dtrain_sckpt_sum of the version over the whole file with
 *     this field 0), zeros;
 *   run table: runs x (u64 whole offset, u64 count), increasing, disjoint;
 *   payload: params[floats], m[floats], v[floats], fp32, in run order.
 * manifest.json: {"format": "dtrain-sharded-checkpoint", "version": 2 (its
 *   shards' version),
 *   "step", "data_batches", "nparams", "config": {model, batch, seq, data
 *   order and seed, seed, optimizer}, "layout": {"tp", "pp", "dp",
 *   "world_size", "zero1", and "virtual_stages" when above 1}, "shards": [{"rank", "file", "bytes", "floats",
 *   "checksum" (16 hex digits)}, ...], and for a run with dynamic loss
 *   scaling (fp16) "loss_scale": {"scale", "good_steps", "overflow_steps"}}
 *   (doc/fault-tolerance.md). */
#ifndef DTRAIN_SHARD_CKPT_H
#define DTRAIN_SHARD_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain_comm.h"
#include "dtrain_grid_pos.h"
#include "dtrain_train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_SCKPT_MAGIC "DTRNSHRD"
#define DTRAIN_SCKPT_VERSION 2     /* written; 1 and 2 are read */
#define DTRAIN_SCKPT_VERSION_OLDEST 1
#define DTRAIN_SCKPT_HEADER_BYTES 256
#define DTRAIN_SCKPT_MANIFEST "manifest.json"

/* The checksum of a shard file, fed its bytes in order (any split):
 *   version 2: 8 lanes, each starting at INIT + k and taking the
 *     little-endian 64-bit words k, k+8, k+16, ... of the file (the last
 *     64-byte block zero-padded) by the step h = rotl64((h ^ w) * P, 31)
 *     (P: FNV's 64-bit prime); the value is the same step from INIT over
 *     the 8 lanes and then the file's length in bytes.  Eight
 *     independent multiplies run at memory speed where version 1's one
 *     chain ran at a fifth of it;
 *   version 1: 64-bit FNV-1a over the little-endian 32-bit words. */
#define DTRAIN_SCKPT_CHECKSUM_INIT 0xcbf29ce484222325ULL
#define DTRAIN_SCKPT_SUM_LANES 8
struct dtrain_sckpt_sum {
    uint32_t version;
    uint32_t pending;                               /* bytes in block[] */
    uint64_t bytes;                                 /* fed so far */
    uint64_t lane[DTRAIN_SCKPT_SUM_LANES];          /* version 1: lane[0] */
    unsigned char block[8 * DTRAIN_SCKPT_SUM_LANES]; /* a block not yet full */
};
void dtrain_sckpt_sum_init(struct dtrain_sckpt_sum *s, uint32_t version);
void dtrain_sckpt_sum_add(struct dtrain_sckpt_sum *s, const void *data, size_t bytes);
uint64_t dtrain_sckpt_sum_value(const struct dtrain_sckpt_sum *s);

/* A run of the whole model's vector and where its values are in this
 * process: count floats each at params, m and v (host memory).  Saving
 * needs all three; loading fills those that are not NULL. */
struct dtrain_sckpt_piece {
    uint64_t whole, count;
    float *params, *m, *v;
};

/* The layout of the writing job, and this rank's place in it. */
struct dtrain_sckpt_layout {
    DTRAIN_GRID_POS_MEMBERS; /* the writing job's T, P, D, world size; this rank and its coordinates */
    int zero1;
    int virtual_stages; /* V chunks per stage (interleaved 1F1B); 0 or 1: plain.  Values are placed by
                         * their whole-model offsets, so any V loads any other V's checkpoint */
};

/* The dynamic loss scaler's state (fp16): the scale, the steps without an
 * overflow since it last changed, the steps skipped for an overflow. */
struct dtrain_sckpt_scaler {
    int on;
    double scale;
    uint64_t good_steps, overflow_steps;
};

struct dtrain_sckpt_stats {
    uint64_t bytes;       /* this rank's shard file (save), or bytes it read (resume) */
    uint64_t total_bytes; /* every shard of the checkpoint (save: known on rank 0 only) */
    double seconds;       /* wall time of the call on this rank */
    int failed_here;      /* save: this rank's write failed (err then says why, here) */
    uint64_t received;    /* resume from the node-local tier: bytes of files this rank received from others
                           * (the ones its node lacked) */
    uint64_t shards_opened; /* resume: shard files this rank opened to load its pieces (those holding runs;
                             * the verification, split across the ranks, not counted) */
};

/* Write checkpoint `step` (data_batches: the next batch index) into dir,
 * a collective over world (the job's WORLD communicator; NULL: one rank).
 * The ranks wait for each other's writes in rounds of a small all-reduce
 * (so a write slower than the comm's timeout is waited for), then commit.
 * pieces: this rank's owned runs, increasing and disjoint, params, m and v
 * all set.  scaler: the loss scaler's state, recorded when on (may be
 * NULL).  keep >= 1: complete checkpoints kept afterwards.  fail_write
 * (fault injection): this rank's write fails as on a full disk.
 * Returns on every rank: DTRAIN_OK (committed); DTRAIN_ERR_SYSTEM when a
 * rank could not write (err names the rank and why; nothing committed);
 * DTRAIN_ERR_FAULT when the communicator failed. */
int dtrain_sckpt_save(const char *dir, const struct dtrain_train_config *cfg,
                      const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                      const struct dtrain_sckpt_scaler *scaler, dtrain_comm *world, const struct dtrain_sckpt_piece *pieces, size_t npieces,
                      int keep, int fail_write, struct dtrain_sckpt_stats *st, char *err, size_t errlen);

/* The two halves of dtrain_sckpt_save, for a save in the background
 * (dtrain_ckpt_async.h): dtrain_sckpt_write_shard is step 1 of the commit
 * protocol for this rank only (files, no communication: any thread may
 * run it while another uses the communicators), its outcome in *w;
 * dtrain_sckpt_commit is steps 2-4 (the collective: every rank passes its
 * own outcome, the same step and keep), returning as dtrain_sckpt_save;
 * keep DTRAIN_SCKPT_PRUNE_LATER: nothing is removed there, the committing
 * rank removes the older ones later (dtrain_ckpt_async: in its thread).
 * Between the two a crash leaves only step-N.tmp, which resume removes. */
#define DTRAIN_SCKPT_PRUNE_LATER 0
struct dtrain_sckpt_written {
    int error;                 /* 0, or the errno of the failed write */
    int invalid;               /* the pieces were unusable (a caller's bug; error is EINVAL) */
    uint64_t bytes, floats, checksum;
    double seconds;            /* wall time of the write */
    char why[512];             /* what failed, when error is not 0 */
};
int dtrain_sckpt_write_shard(const char *dir, const struct dtrain_train_config *cfg,
                             const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                             const struct dtrain_sckpt_piece *pieces, size_t npieces, int fail_write,
                             struct dtrain_sckpt_written *w);
int dtrain_sckpt_commit(const char *dir, const struct dtrain_train_config *cfg,
                        const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                        const struct dtrain_sckpt_scaler *scaler, dtrain_comm *world, int keep,
                        const struct dtrain_sckpt_written *w, struct dtrain_sckpt_stats *st, char *err, size_t errlen);

struct dtrain_sckpt_resumed {
    int found;                         /* 0: dir holds no usable checkpoint (start afresh) */
    uint64_t step, data_batches;
    struct dtrain_sckpt_layout writer; /* the layout that wrote it (rank fields 0) */
    struct dtrain_sckpt_scaler scaler; /* the writer's loss scaler (on 0: it had none) */
    int damaged;                       /* newer checkpoints found damaged and skipped */
    int damaged_local;                 /* ... of them in the node-local tier (dtrain_sckpt_resume_tiers) */
    int loaded_partly;                 /* found 0, but a damaged one was read into the pieces in part */
    char path[DTRAIN_PATH_MAX];        /* the step folder loaded */
    const char *tier;                  /* "shared" or "node-local" (dtrain_sckpt_resume_tiers) */
};

/* Load the newest good checkpoint of dir into pieces (any runs of the whole
 * vector; they may overlap), a collective over world.  Messages (a damaged
 * checkpoint, the fallback) go to msgs on rank 0 (and the rank that found
 * the damage), prefixed "PROG: ".  Returns on every rank: DTRAIN_OK (with
 * out->found 0 when there is nothing to resume); DTRAIN_ERR_INPUT when the
 * checkpoints belong to another model or batch shape, or dir is unusable;
 * DTRAIN_ERR_FAULT when the communicator failed; DTRAIN_ERR_SYSTEM
 * otherwise. */
int dtrain_sckpt_resume(const char *dir, const struct dtrain_train_config *cfg, dtrain_comm *world,
                        const struct dtrain_sckpt_piece *pieces, size_t npieces, FILE *msgs,
                        const char *prog, struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st,
                        char *err, size_t errlen);

/* A rank's DP group for a resume that reads a share of the files
 * (dtrain_sckpt_resume_group): comm, the DP group (NULL or size 1: no
 * group, every rank reads all it needs itself); slice, the runs the
 * members load between them (whole and count; the pointers unused),
 * increasing and disjoint, the same on every member: the TP/PP slice of
 * the model they share, whose parameters and moments they hold between
 * them, which each member's pieces lie in.  The members read the shards
 * apart (writer DP rank d' by member d' * members / D: a member opens at
 * most ceil(D / members) shards of each writing (tp, pp) slice, not every
 * one that holds a part of its pieces), and what each read goes to every
 * member (one broadcast per member over comm), where the pieces are
 * copied out of the slice.  The bits are those of a resume without a
 * group.  Memory: the slice's parameters and both moments on the host
 * for the time of the load (3 floats per element), and one member's part
 * to broadcast. */
struct dtrain_sckpt_group {
    dtrain_comm *comm;
    const struct dtrain_sckpt_piece *slice;
    size_t nslice;
    long read_delay_ms; /* fault injection (slowload): this rank's reads of each candidate wait so long first */
};

/* dtrain_sckpt_resume with the load done as a group (above; group NULL:
 * dtrain_sckpt_resume).  Every member of a DP group passes its group. */
int dtrain_sckpt_resume_group(const char *dir, const struct dtrain_train_config *cfg, dtrain_comm *world,
                              const struct dtrain_sckpt_group *group, const struct dtrain_sckpt_piece *pieces,
                              size_t npieces, FILE *msgs, const char *prog, struct dtrain_sckpt_resumed *out,
                              struct dtrain_sckpt_stats *st, char *err, size_t errlen);

/* ------------------------------------------------------------ the node-local tier
 * (doc/fault-tolerance.md).  With a node-local folder LOCAL on every node
 * (--ckpt-local-dir), a checkpoint may go there instead of the shared
 * folder: each rank writes its shard into its node's LOCAL/step-N.tmp
 * (dtrain_sckpt_write_shard with LOCAL), then sends the file's bytes to its
 * peer, a rank on another node, which keeps them in its own node's
 * LOCAL/step-N.tmp under the same name (dtrain_sckpt_write_copy; in the
 * background writer over copy_comm, dtrain_sckpt_swap_copies); then
 * dtrain_sckpt_commit_local: the gather of every rank's outcome (its shard
 * and the copy it keeps), and the lowest rank of each node writes the
 * manifest into its node's folder and renames it step-N.  So a node's
 * folder holds its ranks' shards and copies of another node's, and losing
 * one node's disk leaves every shard somewhere. */
struct dtrain_sckpt_peers {
    int peer;        /* the rank that keeps a copy of this rank's shard; -1: none (one node) */
    int src;         /* the rank whose shard this rank keeps a copy of; -1: none */
    int leader;      /* the lowest rank of this rank's node (it commits and tidies the node's folder) */
    int nodes;       /* nodes of the job */
    int same_node;   /* 1: some rank's peer is on its own node (uneven ranks per node) */
    dtrain_comm *copy_comm; /* the copies' own communicator (made by the trainer), used by the
                             * background writer only; NULL: they go over world on the main thread */
};
/* Collective over world: the peers of the ranks from their node indices
 * (bs->node): ranks ordered by (node, rank), each one's peer m places on
 * (m: the most ranks of a node), so with even nodes the copy of every
 * shard is on the next node. */
int dtrain_sckpt_peers(dtrain_comm *world, long node, struct dtrain_sckpt_peers *out, char *err, size_t errlen);
/* The exchange of one checkpoint's copies over c (every rank of c calls
 * it, any thread): mine (len bytes; 0: none, this rank's write failed) to
 * the peer, *theirs_len bytes (0: none) from src into *theirs, sizes
 * first.  *theirs (malloc'ed, *theirs_cap bytes of room, the caller's to
 * free) is kept when it has room, so that a run's checkpoints reuse it.
 * 0, or an errno with one line in why (the comm's failure, or no memory:
 * c is then aborted so that the sender does not wait). */
int dtrain_sckpt_swap_copies(dtrain_comm *c, int peer, int src, const void *mine, size_t len, void **theirs,
                             size_t *theirs_cap, size_t *theirs_len, char *why, size_t whylen);
/* A copy of rank's shard (its file's bytes) into dir/step-N.tmp, fsynced.
 * 0, or an errno with one line in why. */
int dtrain_sckpt_write_copy(const char *dir, uint64_t step, int rank, const void *bytes, size_t len, char *why,
                            size_t whylen);
/* As dtrain_sckpt_commit for the node-local tier: copy_error is the errno
 * of writing the peer's copy (0: fine); the node leaders commit (and
 * prune).  Returns on every rank alike. */
int dtrain_sckpt_commit_local(const char *dir, const struct dtrain_train_config *cfg,
                              const struct dtrain_sckpt_layout *layout, uint64_t step, uint64_t data_batches,
                              const struct dtrain_sckpt_scaler *scaler, dtrain_comm *world, int keep,
                              const struct dtrain_sckpt_peers *peers, const struct dtrain_sckpt_written *w,
                              int copy_error, const char *copy_why, struct dtrain_sckpt_stats *st, char *err,
                              size_t errlen);
/* Resume from the newest complete checkpoint of either tier: the shared
 * folder (as dtrain_sckpt_resume) and the node-local folders (a step is
 * complete there when every shard has a good copy on some node: each rank
 * checks its own shard and the copy it keeps against its node's manifest;
 * each node then receives, point to point from a rank holding a good copy,
 * only the files its ranks lack: their own shards, the copies they keep
 * and the shards their loads open (every file to every node only when a
 * rank lacks more than 16); then read as from the shared folder, with
 * group as dtrain_sckpt_resume_group; NULL: none; st->received counts the
 * bytes this rank received).  Newest step
 * first; at one step the node-local tier before the shared one; a damaged
 * node folder is renamed step-N.damaged there.  out->tier says which. */
int dtrain_sckpt_resume_tiers(const char *shared, const char *local, const struct dtrain_sckpt_peers *peers,
                              const struct dtrain_train_config *cfg, dtrain_comm *world,
                              const struct dtrain_sckpt_group *group, const struct dtrain_sckpt_piece *pieces,
                              size_t npieces, FILE *msgs, const char *prog,
                              struct dtrain_sckpt_resumed *out, struct dtrain_sckpt_stats *st, char *err,
                              size_t errlen);

/* The model shape of dir's newest complete checkpoint, from its manifest
 * (not collective, nothing verified: the run's resume does that), so that
 * --resume DIR needs no model flags.  DTRAIN_ERR_INPUT with one line in
 * err when dir is a file, unreadable, or holds no complete checkpoint. */
int dtrain_sckpt_read_model(const char *dir, struct dtrain_model_config *model, char *err, size_t errlen);

/* The step folders of dir, complete or not (not collective): fills
 * steps[] (at most max, newest first) and returns how many complete
 * checkpoints there are, or -1 with one line in err when dir cannot be
 * read.  For tests and tools. */
int dtrain_sckpt_list(const char *dir, uint64_t *steps, int max, char *err, size_t errlen);

/* ------------------------------------------------------------ reading without training
 * (dtrain-generate, dtrain-ckpt): nothing in dir is changed (no leftovers
 * removed, nothing renamed). */

#define DTRAIN_SCKPT_NEWEST UINT64_MAX

/* Read the whole model out of checkpoint `step` of dir, or with
 * DTRAIN_SCKPT_NEWEST out of the newest whose manifest and shards verify
 * (older ones are tried when it does not), written by any layout.
 * params is malloc'ed (dtrain_model_param_count(&model) floats, llm.c's
 * order): free() it.  DTRAIN_ERR_INPUT with one line when there is no good
 * checkpoint. */
struct dtrain_sckpt_model {
    struct dtrain_model_config model;
    float *params;
    uint64_t step;
    struct dtrain_sckpt_layout writer; /* the writing job's layout (its rank fields 0) */
    uint64_t bytes;                    /* read */
    int skipped;                       /* newer checkpoints that did not verify */
    char path[DTRAIN_PATH_MAX];        /* the step folder read */
};
int dtrain_sckpt_load_model(const char *dir, uint64_t step, struct dtrain_sckpt_model *out, char *err,
                            size_t errlen);

/* What checkpoint `step` of dir holds, from its manifest, and with verify
 * every shard's size and checksum checked.  DTRAIN_OK with state saying
 * what was found (why: the reason of a bad manifest); another status only
 * for a path too long or no memory.  Free with dtrain_sckpt_info_free. */
enum dtrain_sckpt_state {
    DTRAIN_SCKPT_UNCHECKED = 0, /* the manifest reads; shards not checked */
    DTRAIN_SCKPT_VERIFIED,      /* every shard matches the manifest */
    DTRAIN_SCKPT_DAMAGED,       /* a shard does not (its why says how) */
    DTRAIN_SCKPT_BAD_MANIFEST,  /* the manifest is missing or unreadable */
};
struct dtrain_sckpt_shard_info {
    uint64_t bytes, floats, checksum; /* as the manifest says */
    int verified;                     /* 1 good, -1 damaged, 0 not checked */
    char why[256];
};
struct dtrain_sckpt_info {
    char path[DTRAIN_PATH_MAX];
    enum dtrain_sckpt_state state;
    char why[512];
    uint64_t step, data_batches, nparams, bytes; /* bytes: the shards' */
    struct dtrain_train_config run;   /* model, batch, seq, data order and seed, seed */
    struct dtrain_sckpt_layout writer;
    struct dtrain_sckpt_shard_info *shards;
    int nshards;
};
int dtrain_sckpt_inspect(const char *dir, uint64_t step, int verify, struct dtrain_sckpt_info *out, char *err,
                         size_t errlen);
void dtrain_sckpt_info_free(struct dtrain_sckpt_info *info);

#ifdef __cplusplus
}
#endif

#endif
