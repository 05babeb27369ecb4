/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/position: the token's text form is exact in both
 * directions; every field is bounded and checked, and a refusal names the
 * field and why; a token names its pipeline and data, and one of the older
 * format, which names neither, is refused as such; a position saved after
 * some batches at one world size resumes at another so that every sample
 * of the epoch is consumed once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/position.h"
#include "common/sampler.h"
#include "common/split.h"

/* The PIPELINE and DATA fields of the tokens below, then SEED... */
#define V2 "ldr2:p:0123456789abcdef:"
#define DATA 0x0123456789abcdefull

/* A position of pipeline "p" with data DATA. */
static struct position pos(uint64_t seed, uint64_t n, uint64_t epoch, uint64_t offset,
			   uint32_t split)
{
	struct position p = {.seed = seed, .n_samples = n, .epoch = epoch, .offset = offset,
			     .split = split, .data = DATA};
	strcpy(p.pipeline, "p");
	return p;
}
#define pos_p(...) ((const struct position[]){pos(__VA_ARGS__)})

static void check_round_trip(const struct position *p, const char *expect)
{
	char buf[POSITION_TEXT_MAX];
	struct position q;
	assert_int_equal(position_format(p, buf, sizeof(buf)), 0);
	assert_string_equal(buf, expect);
	memset(&q, 0xa5, sizeof(q));
	assert_int_equal(position_parse(buf, &q, NULL, 0), 0);
	assert_int_equal(q.seed, p->seed);
	assert_int_equal(q.n_samples, p->n_samples);
	assert_int_equal(q.epoch, p->epoch);
	assert_int_equal(q.offset, p->offset);
	assert_int_equal(q.split, p->split);
	assert_int_equal(q.data, p->data);
	assert_string_equal(q.pipeline, p->pipeline);
}

static void test_format_parse_round_trip(void **state)
{
	check_round_trip(pos_p(0, 1, 0, 0, SPLIT_TRAIN), V2 "0:1:0:0");
	check_round_trip(pos_p(42, 1000, 3, 640, SPLIT_TRAIN), V2 "42:1000:3:640");
	check_round_trip(pos_p(7, 1000, 0, 1000, SPLIT_TRAIN), V2 "7:1000:0:1000");
	/* The largest value of every field (EPOCH's is 2^32 - 1). */
	check_round_trip(pos_p(UINT64_MAX, UINT64_MAX, POSITION_EPOCHS - 1, UINT64_MAX, SPLIT_TRAIN),
			 V2 "18446744073709551615:18446744073709551615:"
			 "4294967295:18446744073709551615");
	/* A stream of the valid or test split says so; train says nothing. */
	check_round_trip(pos_p(42, 30, 1, 8, SPLIT_VALID), V2 "42:30:1:8:valid");
	check_round_trip(pos_p(42, 30, 1, 8, SPLIT_TEST), V2 "42:30:1:8:test");
	check_round_trip(pos_p(42, 30, 1, 8, SPLIT_TRAIN), V2 "42:30:1:8");
	/* The longest token position_format can write fits POSITION_TEXT_MAX. */
	char buf[POSITION_TEXT_MAX];
	struct position longest = pos(UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, SPLIT_VALID);
	memset(longest.pipeline, 'x', POSITION_NAME_MAX);
	longest.data = UINT64_MAX;
	assert_int_equal(position_format(&longest, buf, sizeof(buf)), 0);
}

static void test_format_needs_room(void **state)
{
	const struct position p = pos(42, 1000, 3, 640, SPLIT_TRAIN);
	const char *expect = V2 "42:1000:3:640";
	size_t len = strlen(expect);
	char buf[POSITION_TEXT_MAX];
	assert_int_equal(position_format(&p, buf, len), -ENOSPC);
	assert_int_equal(position_format(&p, buf, 1), -ENOSPC);
	assert_int_equal(position_format(&p, NULL, 0), -ENOSPC);
	assert_int_equal(position_format(&p, buf, len + 1), 0);
	assert_string_equal(buf, expect);
}

static void test_parse_rejects_malformed(void **state)
{
	/* n_samples is 20 wherever the offset field is valid, so that only
	 * the defect named rejects a token. */
	static const char *const bad[] = {
		"",
		"ldr1",
		V2 "",
		V2 "1:20:3",          /* missing field */
		V2 "1:20:3:",         /* empty field */
		V2 ":20:3:4",
		V2 "1::3:4",
		V2 "1:20::4",
		V2 "1:20:3:4:5",      /* extra field */
		V2 "1:20:3:4:",
		"ldr0:1:20:3:4",        /* wrong prefix or version */
		"ldr2:1:20:3:4",
		"LDR1:1:20:3:4",
		"ldr:1:20:3:4",
		"ldr1;1:20:3:4",
		":1:20:3:4",
		"1:20:3:4",
		"xldr1:1:20:3:4",
		V2 "+1:20:3:4",       /* signs */
		V2 "-1:20:3:4",
		V2 "1:20:-3:4",
		V2 "1:20:3:+4",
		" ldr1:1:20:3:4",       /* spaces and other stray bytes */
		V2 " 1:20:3:4",
		V2 "1 :20:3:4",
		V2 "1:20:3:4 ",
		V2 "1:20:3:4\n",
		V2 "1:20:3:4\t",
		V2 "1;20:3:4",
		V2 "0x1:20:3:4",      /* not decimal */
		V2 "1.0:20:3:4",
		V2 "1e3:20:3:4",
		V2 "18446744073709551616:20:3:4", /* overflow, in every field */
		V2 "1:18446744073709551616:3:4",
		V2 "1:20:18446744073709551616:4",
		V2 "1:20:3:18446744073709551616",
		V2 "99999999999999999999999:20:3:4",
		V2 "1:10:0:11",       /* offset > n_samples */
		V2 "1:0:0:1",
		V2 "1:18446744073709551614:0:18446744073709551615",
		V2 "1:20:4294967296:4", /* epoch not below 2^32 */
		V2 "1:20:18446744073709551615:0",
		V2 "1:20:99999999999:0",
		V2 "01:20:3:4",       /* leading zeros: not as position_format writes */
		V2 "1:020:3:4",
		V2 "1:20:00:4",
		V2 "1:20:3:0000000000000000000000004",
		V2 "1:2\x80:3:4",     /* bytes beyond ASCII */
		V2 "\xd9\xa1:20:3:4", /* a non-ASCII digit (Arabic-Indic one) */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct position p = pos(11, 22, 33, 44, SPLIT_TRAIN);
		if (position_parse(bad[i], &p, NULL, 0) != -EINVAL)
			fail_msg("accepted \"%s\"", bad[i]);
		/* A rejected token leaves the output alone. */
		assert_int_equal(p.seed, 11);
		assert_int_equal(p.n_samples, 22);
		assert_int_equal(p.epoch, 33);
		assert_int_equal(p.offset, 44);
	}
	/* The largest values and the boundaries just inside are accepted. */
	struct position p;
	assert_int_equal(position_parse(V2 "18446744073709551615:2:3:0", &p, NULL, 0), 0);
	assert_int_equal(p.seed, UINT64_MAX);
	assert_int_equal(position_parse(V2 "1:10:0:10", &p, NULL, 0), 0);
	assert_int_equal(p.offset, 10);
	assert_int_equal(position_parse(V2 "1:0:0:0", &p, NULL, 0), 0);
	assert_int_equal(position_parse(V2 "0:0:4294967295:0", &p, NULL, 0), 0);
	assert_int_equal(p.epoch, POSITION_EPOCHS - 1);
}

/* Each refusal names the field at fault and why, with the field's bytes
 * quoted so that a client's token cannot forge a log line. */
static void test_parse_explains(void **state)
{
	static const struct {
		const char *token, *why;
	} cases[] = {
		{"", "it does not start with \"ldr2:\" (ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT])"},
		{"ldr3:p:0123456789abcdef:1:2:3:0", "it does not start with \"ldr2:\" "
		 "(ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT])"},
		{"ldr2:p", "it has no DATA field after PIPELINE \"p\" "
		 "(ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT])"},
		{"ldr2:p:0123456789abcdef", "it has no SEED field after DATA \"0123456789abcdef\" "
		 "(ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT])"},
		{"ldr2::0123456789abcdef:1:20:3:4", "PIPELINE \"\" is not a pipeline name (1 to 63 "
		 "characters of A-Z a-z 0-9 _ . -)"},
		{"ldr2:a/b:0123456789abcdef:1:20:3:4", "PIPELINE \"a/b\" is not a pipeline name (1 to "
		 "63 characters of A-Z a-z 0-9 _ . -)"},
		{"ldr2:p\n:0123456789abcdef:1:20:3:4", "PIPELINE \"p\\n\" is not a pipeline name (1 "
		 "to 63 characters of A-Z a-z 0-9 _ . -)"},
		{"ldr2:p:0123456789ABCDEF:1:20:3:4", "DATA \"0123456789ABCDEF\" is not 16 lower-case "
		 "hex digits"},
		{"ldr2:p:123456789abcdef:1:20:3:4", "DATA \"123456789abcdef\" is not 16 lower-case hex "
		 "digits"},
		{"ldr2:p:00123456789abcdef:1:20:3:4", "DATA \"00123456789abcdef\" is not 16 lower-case "
		 "hex digits"},
		{"ldr2:p:0123456789abcdeg:1:20:3:4", "DATA \"0123456789abcdeg\" is not 16 lower-case "
		 "hex digits"},
		{"ldr2:p::1:20:3:4", "DATA \"\" is not 16 lower-case hex digits"},
		{V2 "1:20:3", "it has 3 fields where ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT] "
		 "has SEED:N:EPOCH:OFFSET"},
		{V2 "1", "it has 1 field where ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT] has "
		 "SEED:N:EPOCH:OFFSET"},
		{V2 "1:20:3:4:5", "SPLIT \"5\" is not valid or test (a token of the train split has "
		 "no SPLIT field)"},
		{V2 "1:20:3:4:train", "SPLIT \"train\" is not valid or test (a token of the train "
		 "split has no SPLIT field)"},
		{V2 "1:20:3:4:", "SPLIT \"\" is not valid or test (a token of the train split has "
		 "no SPLIT field)"},
		{V2 "1:20:3:4:Valid", "SPLIT \"Valid\" is not valid or test (a token of the train "
		 "split has no SPLIT field)"},
		{V2 "1:20:3:4:valid:1", "it has a field after SPLIT "
		 "(ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT])"},
		{V2 ":20:3:4", "SEED is empty"},
		{V2 "1::3:4", "N is empty"},
		{V2 "1:20::4", "EPOCH is empty"},
		{V2 "1:20:3:", "OFFSET is empty"},
		{V2 "+1:20:3:4", "SEED \"+1\" is not a decimal number (digits only)"},
		{V2 "1:-20:3:4", "N \"-20\" is not a decimal number (digits only)"},
		{V2 "1:20: 3:4", "EPOCH \" 3\" is not a decimal number (digits only)"},
		{V2 "1:20:3:4\n", "OFFSET \"4\\n\" is not a decimal number (digits only)"},
		{V2 "1:20:3:4\r\nINFO forged", "OFFSET \"4\\r\\nINFO forged\" is not a decimal "
		 "number (digits only)"},
		{V2 "18446744073709551616:20:3:4",
		 "SEED \"18446744073709551616\" is larger than 18446744073709551615"},
		{V2 "1:99999999999999999999999:3:4",
		 "N \"99999999999999999999999\" is larger than 18446744073709551615"},
		{V2 "1:20:007:4", "EPOCH \"007\" has a leading zero"},
		{V2 "1:20:18446744073709551615:0",
		 "EPOCH 18446744073709551615 is not below 4294967296 (2^32), the number of epochs a "
		 "stream has"},
		{V2 "1:20:4294967296:0",
		 "EPOCH 4294967296 is not below 4294967296 (2^32), the number of epochs a stream has"},
		{V2 "1:10:0:11", "OFFSET 11 is larger than N 10"},
		{V2 "1:20:3:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		 "OFFSET \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\" is not a decimal number (digits only)"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char why[200] = "(unset)";
		struct position p;
		assert_int_equal(position_parse(cases[i].token, &p, why, sizeof(why)), -EINVAL);
		if (strcmp(why, cases[i].why) != 0)
			fail_msg("token \"%s\": why is \"%s\", expected \"%s\"", cases[i].token, why,
				 cases[i].why);
	}
	/* A short buffer is cut, never overrun. */
	char small[8];
	struct position p;
	assert_int_equal(position_parse(V2 "1:20:4294967296:0", &p, small, sizeof(small)), -EINVAL);
	assert_int_equal(strlen(small), sizeof(small) - 1);
}

/* A stream's position after the last batch of its last epoch is past the
 * bound: position_after_batch does not wrap, and the token it gives is
 * refused (the daemon ends such a stream: daemon/sched/sched.c). */
static void test_last_epoch(void **state)
{
	struct position p;
	position_after_batch(5, 100, 1, POSITION_EPOCHS - 1, 0, 90, 10, 1, &p);
	strcpy(p.pipeline, "p"); /* position_after_batch leaves them alone */
	p.data = 1;
	assert_int_equal(p.epoch, POSITION_EPOCHS);
	assert_int_equal(p.offset, 0);
	char token[POSITION_TEXT_MAX], why[200];
	assert_int_equal(position_format(&p, token, sizeof(token)), 0);
	assert_string_equal(token, "ldr2:p:0000000000000001:5:100:4294967296:0");
	assert_int_equal(position_parse(token, &p, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "EPOCH 4294967296 is not below"));
}

/* position_after_batch(seed 5, n 1000, world, epoch, g, first_j, rows,
 * last) into *p, which must then stand at (want_epoch, want_offset). */
static void expect_after(uint32_t world, uint64_t epoch, uint64_t g, uint64_t first_j,
			 uint32_t rows, int last, uint64_t want_epoch, uint64_t want_offset,
			 struct position *p)
{
	position_after_batch(5, 1000, world, epoch, g, first_j, rows, last, p);
	assert_int_equal(p->epoch, want_epoch);
	assert_int_equal(p->offset, want_offset);
}

static void test_after_batch(void **state)
{
	struct position p = pos(0, 0, 0, 0, SPLIT_TRAIN);
	/* Mid-epoch: rank r's j-th sample is global position g + r + j*W, so
	 * once every rank has consumed j + rows samples, the epoch is
	 * consumed up to g + (j + rows) * W. */
	expect_after(4, 2, 0, 0, 32, 0, 2, 128, &p);
	assert_int_equal(p.seed, 5);
	assert_int_equal(p.n_samples, 1000);
	expect_after(4, 2, 100, 64, 32, 0, 2, 100 + 96 * 4, &p);
	/* At the epoch's end: the next epoch, from its start. */
	expect_after(4, 2, 0, 224, 26, 1, 3, 0, &p);
	assert_int_equal(p.seed, 5);
	assert_int_equal(p.n_samples, 1000);
	/* A short batch that reaches the end is capped at n. */
	expect_after(3, 0, 0, 330, 4, 0, 0, 1000, &p);
	/* The stream's identity is the caller's, left as it was. */
	assert_string_equal(p.pipeline, "p");
	assert_int_equal(p.data, DATA);
}

/*
 * A job at world `w1` consumes `k` batches per rank of a fresh epoch; a job
 * at world `w2` resumes from the parsed token and consumes the rest of the
 * epoch. Rows past the end of the epoch are DistributedSampler's padding
 * (repeats of the resumed segment's head); every other sample of the
 * epoch must have been consumed exactly once over both jobs.
 */
static void check_resume(uint64_t n, uint32_t batch_size, bool shuffle, uint32_t w1, uint64_t k,
			 uint32_t w2)
{
	const uint64_t seed = 1234, epoch = 5;
	uint32_t *count = calloc(n, sizeof(uint32_t));
	assert_non_null(count);
	char saved[POSITION_TEXT_MAX] = "";
	for (uint32_t rank = 0; rank < w1; rank++) {
		struct sampler s = {.n_samples = n, .seed = seed, .batch_size = batch_size,
				    .rank = rank, .world = w1, .shuffle = shuffle};
		assert_true(k < sampler_batches(&s, 0));
		struct position p = pos(seed, n, epoch, 0, SPLIT_TRAIN); /* saved before any batch */
		for (uint64_t b = 0; b < k; b++) {
			uint32_t rows = sampler_batch_rows(&s, 0, b);
			for (uint32_t i = 0; i < rows; i++)
				count[sampler_sample(&s, epoch, 0, b * batch_size + i)]++;
			position_after_batch(seed, n, w1, epoch, 0, b * batch_size, rows, 0, &p);
		}
		char token[POSITION_TEXT_MAX];
		assert_int_equal(position_format(&p, token, sizeof(token)), 0);
		/* Every rank saves the same token. */
		if (rank == 0)
			strcpy(saved, token);
		else
			assert_string_equal(token, saved);
	}

	struct position at;
	assert_int_equal(position_parse(saved, &at, NULL, 0), 0);
	assert_int_equal(at.seed, seed);
	assert_int_equal(at.n_samples, n);
	assert_int_equal(at.epoch, epoch);
	uint64_t g = at.offset;
	uint64_t padding = 0;
	for (uint32_t rank = 0; rank < w2; rank++) {
		struct sampler s = {.n_samples = n, .seed = seed, .batch_size = batch_size,
				    .rank = rank, .world = w2, .shuffle = shuffle};
		uint64_t batches = sampler_batches(&s, g);
		struct position p = {0};
		for (uint64_t b = 0; b < batches; b++) {
			uint32_t rows = sampler_batch_rows(&s, g, b);
			for (uint32_t i = 0; i < rows; i++) {
				uint64_t j = b * batch_size + i;
				uint64_t v = sampler_sample(&s, at.epoch, g, j);
				if (g + rank + j * (uint64_t)w2 >= n) {
					padding++;
					assert_true(count[v] >= 1); /* a repeat */
				} else {
					count[v]++;
				}
			}
			position_after_batch(seed, n, w2, at.epoch, g, b * batch_size, rows,
					     b + 1 == batches, &p);
		}
		/* The last batch moves every rank to the next epoch's start. */
		assert_int_equal(p.epoch, epoch + 1);
		assert_int_equal(p.offset, 0);
	}
	assert_int_equal(padding, (n - g + w2 - 1) / w2 * w2 - (n - g));
	for (uint64_t v = 0; v < n; v++)
		if (count[v] != 1)
			fail_msg("n %lu batch %u world %u -> %u after %lu batches: sample %lu "
				 "consumed %u times", (unsigned long)n, batch_size, w1, w2,
				 (unsigned long)k, (unsigned long)v, count[v]);
	free(count);
}

static void test_resume_with_other_world(void **state)
{
	static const uint64_t sizes[] = {960, 1000, 1009};  /* divisible by 1..8 and 64, or not */
	static const uint32_t batch_sizes[] = {1, 5, 16};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t b = 0; b < sizeof(batch_sizes) / sizeof(batch_sizes[0]); b++)
			for (uint32_t w1 = 1; w1 <= 8; w1++)
				for (uint32_t w2 = 1; w2 <= 8; w2++) {
					struct sampler s = {.n_samples = sizes[i],
							    .batch_size = batch_sizes[b],
							    .world = w1};
					uint64_t batches = sampler_batches(&s, 0);
					/* first batch, middle, and the one before last */
					check_resume(sizes[i], batch_sizes[b], true, w1, 1, w2);
					check_resume(sizes[i], batch_sizes[b], w2 & 1, w1,
						     batches / 2, w2);
					check_resume(sizes[i], batch_sizes[b], true, w1,
						     batches - 1, w2);
				}
}

/* Several saves and resumes in one epoch, each at another world size. */
static void test_resume_chain(void **state)
{
	const uint64_t n = 1009, seed = 3, epoch = 0;
	const uint32_t batch_size = 7;
	static const uint32_t worlds[] = {4, 7, 1, 8, 3};
	uint32_t *count = calloc(n, sizeof(uint32_t));
	assert_non_null(count);
	struct position at = pos(seed, n, epoch, 0, SPLIT_TRAIN);
	for (size_t hop = 0; hop < sizeof(worlds) / sizeof(worlds[0]); hop++) {
		uint32_t w = worlds[hop];
		bool final = hop + 1 == sizeof(worlds) / sizeof(worlds[0]);
		char token[POSITION_TEXT_MAX];
		assert_int_equal(position_format(&at, token, sizeof(token)), 0);
		assert_int_equal(position_parse(token, &at, NULL, 0), 0);
		uint64_t g = at.offset;
		struct position next = pos(0, 0, 0, 0, SPLIT_TRAIN);
		for (uint32_t rank = 0; rank < w; rank++) {
			struct sampler s = {.n_samples = n, .seed = seed, .batch_size = batch_size,
					    .rank = rank, .world = w, .shuffle = true};
			uint64_t batches = sampler_batches(&s, g);
			uint64_t take = final ? batches : 3;
			assert_true(take <= batches);
			for (uint64_t b = 0; b < take; b++) {
				uint32_t rows = sampler_batch_rows(&s, g, b);
				for (uint32_t i = 0; i < rows; i++) {
					uint64_t j = b * batch_size + i;
					if (g + rank + j * (uint64_t)w < n)
						count[sampler_sample(&s, at.epoch, g, j)]++;
				}
				position_after_batch(seed, n, w, at.epoch, g, b * batch_size, rows,
						     b + 1 == batches, &next);
			}
		}
		at = next;
	}
	assert_int_equal(at.epoch, epoch + 1);
	assert_int_equal(at.offset, 0);
	for (uint64_t v = 0; v < n; v++)
		assert_int_equal(count[v], 1);
	free(count);
}

/* PIPELINE and DATA: any name a configuration can define, written as it
 * is; DATA always 16 digits; the fields name the stream, so two tokens of
 * the same place in other pipelines or data differ. */
static void test_identity(void **state)
{
	struct position p = pos(7, 20000, 0, 640, SPLIT_TRAIN);
	strcpy(p.pipeline, "imagenet-1k_v2.train");
	p.data = 0;
	check_round_trip(&p, "ldr2:imagenet-1k_v2.train:0000000000000000:7:20000:0:640");
	p.data = UINT64_MAX;
	check_round_trip(&p, "ldr2:imagenet-1k_v2.train:ffffffffffffffff:7:20000:0:640");
	memset(p.pipeline, 'N', POSITION_NAME_MAX); /* the longest name */
	char buf[POSITION_TEXT_MAX], again[POSITION_TEXT_MAX];
	assert_int_equal(position_format(&p, buf, sizeof(buf)), 0);
	struct position q;
	assert_int_equal(position_parse(buf, &q, NULL, 0), 0);
	assert_int_equal(strlen(q.pipeline), POSITION_NAME_MAX);
	assert_int_equal(position_format(&q, again, sizeof(again)), 0);
	assert_string_equal(again, buf);
	/* A name one byte longer, or one a configuration cannot define, is no token. */
	char text[POSITION_TEXT_MAX + 8];
	snprintf(text, sizeof(text), "ldr2:%sN:ffffffffffffffff:7:20000:0:640", q.pipeline);
	assert_int_equal(position_parse(text, &q, NULL, 0), -EINVAL);
	static const char *const names[] = {"", "a b", "a:b", "a\"b", "caf\xc3\xa9", "a/b", "a\\b"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		assert_false(position_name_valid(names[i], strlen(names[i])));
		struct position bad = pos(1, 2, 0, 0, SPLIT_TRAIN);
		snprintf(bad.pipeline, sizeof(bad.pipeline), "%s", names[i]);
		strcpy(buf, "unchanged");
		assert_int_equal(position_format(&bad, buf, sizeof(buf)), -EINVAL);
		assert_string_equal(buf, ""); /* no token rather than one that does not parse */
	}
	assert_true(position_name_valid("A-z_0.9", 7));
	/* The same place of two streams: tokens that differ. */
	struct position a = pos(7, 20000, 1, 64, SPLIT_TRAIN), b = a, c = a;
	strcpy(b.pipeline, "q");
	c.data ^= 1;
	char ta[POSITION_TEXT_MAX], tb[POSITION_TEXT_MAX], tc[POSITION_TEXT_MAX];
	assert_int_equal(position_format(&a, ta, sizeof(ta)), 0);
	assert_int_equal(position_format(&b, tb, sizeof(tb)), 0);
	assert_int_equal(position_format(&c, tc, sizeof(tc)), 0);
	assert_string_not_equal(ta, tb);
	assert_string_not_equal(ta, tc);
}

/* A token of the older format names no pipeline and no data: position_parse
 * refuses it as such (not as malformed), and position_parse_v1 reads its
 * fields with the same rules as ever. */
static void test_older_format(void **state)
{
	char why[200] = "";
	struct position p = pos(11, 22, 33, 4, SPLIT_TRAIN);
	assert_int_equal(position_parse("ldr1:7:20000:3:1200", &p, why, sizeof(why)),
			 -EPROTONOSUPPORT);
	assert_string_equal(why, "it is a token of an older format (ldr1), which names no pipeline "
			    "and no data, so it cannot be checked");
	assert_int_equal(p.seed, 11); /* left alone */
	assert_string_equal(p.pipeline, "p");
	assert_int_equal(position_parse("ldr1:garbage", &p, NULL, 0), -EPROTONOSUPPORT);

	assert_int_equal(position_parse_v1("ldr1:7:20000:3:1200:valid", &p, why, sizeof(why)), 0);
	assert_int_equal(p.seed, 7);
	assert_int_equal(p.n_samples, 20000);
	assert_int_equal(p.epoch, 3);
	assert_int_equal(p.offset, 1200);
	assert_int_equal(p.split, SPLIT_VALID);
	assert_string_equal(p.pipeline, "");
	assert_int_equal(p.data, 0);
	assert_int_equal(position_parse_v1("ldr1:7:20000:3:20001", &p, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "OFFSET 20001 is larger than N 20000");
	assert_int_equal(position_parse_v1("ldr1:7:20000:3", &p, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "it has 3 fields where ldr1:SEED:N:EPOCH:OFFSET[:SPLIT] has "
			    "SEED:N:EPOCH:OFFSET");
	assert_int_equal(position_parse_v1(V2 "7:20000:3:0", &p, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "it does not start with \"ldr1:\"");
	assert_int_equal(p.seed, 7); /* left alone */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_parse_round_trip),
		cmocka_unit_test(test_format_needs_room),
		cmocka_unit_test(test_parse_rejects_malformed),
		cmocka_unit_test(test_parse_explains),
		cmocka_unit_test(test_last_epoch),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_older_format),
		cmocka_unit_test(test_after_batch),
		cmocka_unit_test(test_resume_with_other_world),
		cmocka_unit_test(test_resume_chain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
