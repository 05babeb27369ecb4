/* SPDX-License-Identifier: Apache-2.0 */
/*
 * position: a client's resumable place in a pipeline's stream, as a short
 * text token ("ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET", with ":valid" or
 * ":test" after it for a stream of a dataset's valid or test split,
 * common/split.h) that a training checkpoint can store next to the model's
 * state.
 *
 * A token names the stream it is a place in: the pipeline's name and DATA,
 * the pipeline's data identity (16 hex digits, daemon/source/source_id.c: a hash
 * of what decides which sample each place of the stream is, taken from
 * file names and sizes, never their contents), so that a token is refused
 * by any other pipeline, and by its own once its data changed. Tokens of
 * the older format "ldr1:SEED:N:EPOCH:OFFSET" named neither and cannot be
 * checked: position_parse refuses them with a reason of their own.
 *
 * OFFSET counts the samples of EPOCH consumed by all ranks together, so a
 * token saved by a job of world size W resumes a job of any world size W':
 * the rest of the epoch is re-sharded over the new ranks (sampler.h,
 * "segment"). All ranks of a job are assumed to save at the same step, as
 * they do with synchronous data-parallel training.
 */
#ifndef LDR_COMMON_POSITION_H
#define LDR_COMMON_POSITION_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#define POSITION_TEXT_MAX 192 /* longest token, with its NUL */
/* A token's PIPELINE is a name a configuration can define (daemon/config/config.h):
 * 1 to POSITION_NAME_MAX bytes of A-Z a-z 0-9 _ . - (so never a ':'). */
#define POSITION_NAME_MAX 63
#define POSITION_DATA_DIGITS 16 /* DATA: a uint64_t as 16 lower-case hex digits */

/*
 * Epochs of a stream are 0 .. POSITION_EPOCHS - 1, and a token's EPOCH is
 * below POSITION_EPOCHS. 2^32 epochs is beyond any training run (a
 * million epochs already is), while it keeps `epoch + 1` and the epoch
 * arithmetic of every client (int64, or a double in a JSON checkpoint)
 * exact, far from a silent wrap. A stream that completes epoch
 * POSITION_EPOCHS - 1 has ended: the daemon delivers no further batch and
 * ends the session with an error instead of wrapping to epoch 0.
 */
#define POSITION_EPOCHS (1ull << 32)

struct position {
	uint64_t seed;      /* the pipeline's seed: a token resumes only its own stream */
	uint64_t n_samples; /* dataset size when saved: a changed dataset is refused */
	uint64_t epoch;
	uint64_t offset;    /* global samples of epoch consumed, <= n_samples */
	uint32_t split;     /* enum split_id: a token resumes only a stream of its split */
	uint64_t data;      /* the pipeline's data identity when saved */
	char pipeline[POSITION_NAME_MAX + 1]; /* the pipeline's name */
};

/* Whether name[0..len) is a pipeline name a token can carry (and a
 * configuration can define: daemon/config/config.c checks names with it). */
bool position_name_valid(const char *name, size_t len);

/* Writes the token; 0, -ENOSPC when cap is too small, or -EINVAL when
 * p->pipeline is not a valid name (buf then holds ""). */
int position_format(const struct position *p, char *buf, size_t cap);

/*
 * Parses a token; 0, or -EINVAL for anything that is not exactly a token,
 * with why (when why_cap > 0) naming the field at fault and why, e.g.
 * `EPOCH "18446744073709551615" is not below 4294967296 (2^32)`. PIPELINE
 * is a valid name (position_name_valid); DATA exactly 16 lower-case hex
 * digits; every other field is decimal as position_format writes it:
 * digits only (no sign, space or other byte), no leading zero, at most
 * 2^64 - 1; EPOCH below POSITION_EPOCHS; OFFSET at most N; after them,
 * either nothing (the train split) or ":valid" or ":test" (`SPLIT "train"
 * ...`: train is written as nothing, so that each position has one token).
 * A text starting "ldr1:", a token of the older format, is refused with
 * -EPROTONOSUPPORT and why saying so (position_parse_v1 reads its fields).
 * p is left alone on failure.
 */
int position_parse(const char *text, struct position *p, char *why, size_t why_cap);

/*
 * Parses a token of the older format, "ldr1:SEED:N:EPOCH:OFFSET[:SPLIT]",
 * with the same rules for those fields: 0 with p's pipeline "" and data
 * 0 (it names neither), or -EINVAL with why. For the message that refuses
 * such a token, which can offer the token it would be on a pipeline.
 */
int position_parse_v1(const char *text, struct position *p, char *why, size_t why_cap);

/* The position once a batch of `rows` samples, the first being the rank's
 * j-th of the segment (epoch, g), has been consumed; `last` says it was the
 * epoch's last batch. out->split is SPLIT_TRAIN: the caller sets a stream's
 * other split. out->pipeline and out->data are left as they are: the
 * stream's, which the caller keeps there. */
void position_after_batch(uint64_t seed, uint64_t n_samples, uint32_t world,
			  uint64_t epoch, uint64_t g, uint64_t first_j,
			  uint32_t rows, int last, struct position *out);

#endif
