/*
 * Unit tests for common/position: the token's text form is exact in both
 * directions; every field is bounded and checked, and a refusal names the
 * field and why; a position saved after some batches at one world size
 * resumes at another so that every sample of the epoch is consumed once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/position.h"
#include "common/sampler.h"
#include "common/split.h"

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
}

static void test_format_parse_round_trip(void **state)
{
	check_round_trip(&(struct position){0, 1, 0, 0, SPLIT_TRAIN}, "ldr1:0:1:0:0");
	check_round_trip(&(struct position){42, 1000, 3, 640, SPLIT_TRAIN}, "ldr1:42:1000:3:640");
	check_round_trip(&(struct position){7, 1000, 0, 1000, SPLIT_TRAIN}, "ldr1:7:1000:0:1000");
	/* The largest value of every field (EPOCH's is 2^32 - 1). */
	check_round_trip(&(struct position){UINT64_MAX, UINT64_MAX, POSITION_EPOCHS - 1, UINT64_MAX, SPLIT_TRAIN},
			 "ldr1:18446744073709551615:18446744073709551615:"
			 "4294967295:18446744073709551615");
	/* A stream of the valid or test split says so; train says nothing. */
	check_round_trip(&(struct position){42, 30, 1, 8, SPLIT_VALID}, "ldr1:42:30:1:8:valid");
	check_round_trip(&(struct position){42, 30, 1, 8, SPLIT_TEST}, "ldr1:42:30:1:8:test");
	check_round_trip(&(struct position){42, 30, 1, 8, SPLIT_TRAIN}, "ldr1:42:30:1:8");
	/* The longest token position_format can write fits POSITION_TEXT_MAX. */
	char buf[POSITION_TEXT_MAX];
	assert_int_equal(position_format(&(struct position){UINT64_MAX, UINT64_MAX, UINT64_MAX,
							      UINT64_MAX, SPLIT_VALID}, buf, sizeof(buf)), 0);
}

static void test_format_needs_room(void **state)
{
	const struct position p = {42, 1000, 3, 640, SPLIT_TRAIN};
	const char *expect = "ldr1:42:1000:3:640";
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
		"ldr1:",
		"ldr1:1:20:3",          /* missing field */
		"ldr1:1:20:3:",         /* empty field */
		"ldr1::20:3:4",
		"ldr1:1::3:4",
		"ldr1:1:20::4",
		"ldr1:1:20:3:4:5",      /* extra field */
		"ldr1:1:20:3:4:",
		"ldr0:1:20:3:4",        /* wrong prefix or version */
		"ldr2:1:20:3:4",
		"LDR1:1:20:3:4",
		"ldr:1:20:3:4",
		"ldr1;1:20:3:4",
		":1:20:3:4",
		"1:20:3:4",
		"xldr1:1:20:3:4",
		"ldr1:+1:20:3:4",       /* signs */
		"ldr1:-1:20:3:4",
		"ldr1:1:20:-3:4",
		"ldr1:1:20:3:+4",
		" ldr1:1:20:3:4",       /* spaces and other stray bytes */
		"ldr1: 1:20:3:4",
		"ldr1:1 :20:3:4",
		"ldr1:1:20:3:4 ",
		"ldr1:1:20:3:4\n",
		"ldr1:1:20:3:4\t",
		"ldr1:1;20:3:4",
		"ldr1:0x1:20:3:4",      /* not decimal */
		"ldr1:1.0:20:3:4",
		"ldr1:1e3:20:3:4",
		"ldr1:18446744073709551616:20:3:4", /* overflow, in every field */
		"ldr1:1:18446744073709551616:3:4",
		"ldr1:1:20:18446744073709551616:4",
		"ldr1:1:20:3:18446744073709551616",
		"ldr1:99999999999999999999999:20:3:4",
		"ldr1:1:10:0:11",       /* offset > n_samples */
		"ldr1:1:0:0:1",
		"ldr1:1:18446744073709551614:0:18446744073709551615",
		"ldr1:1:20:4294967296:4", /* epoch not below 2^32 */
		"ldr1:1:20:18446744073709551615:0",
		"ldr1:1:20:99999999999:0",
		"ldr1:01:20:3:4",       /* leading zeros: not as position_format writes */
		"ldr1:1:020:3:4",
		"ldr1:1:20:00:4",
		"ldr1:1:20:3:0000000000000000000000004",
		"ldr1:1:2\x80:3:4",     /* bytes beyond ASCII */
		"ldr1:\xd9\xa1:20:3:4", /* a non-ASCII digit (Arabic-Indic one) */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct position p = {11, 22, 33, 44, SPLIT_TRAIN};
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
	assert_int_equal(position_parse("ldr1:18446744073709551615:2:3:0", &p, NULL, 0), 0);
	assert_int_equal(p.seed, UINT64_MAX);
	assert_int_equal(position_parse("ldr1:1:10:0:10", &p, NULL, 0), 0);
	assert_int_equal(p.offset, 10);
	assert_int_equal(position_parse("ldr1:1:0:0:0", &p, NULL, 0), 0);
	assert_int_equal(position_parse("ldr1:0:0:4294967295:0", &p, NULL, 0), 0);
	assert_int_equal(p.epoch, POSITION_EPOCHS - 1);
}

/* Each refusal names the field at fault and why, with the field's bytes
 * quoted so that a client's token cannot forge a log line. */
static void test_parse_explains(void **state)
{
	static const struct {
		const char *token, *why;
	} cases[] = {
		{"", "it does not start with \"ldr1:\""},
		{"ldr2:1:2:3:0", "it does not start with \"ldr1:\""},
		{"ldr1:1:20:3", "it has 3 fields after \"ldr1:\", not 4 (SEED:N:EPOCH:OFFSET)"},
		{"ldr1:1", "it has 1 field after \"ldr1:\", not 4 (SEED:N:EPOCH:OFFSET)"},
		{"ldr1:1:20:3:4:5", "SPLIT \"5\" is not valid or test (a token of the train split has "
		 "no SPLIT field)"},
		{"ldr1:1:20:3:4:train", "SPLIT \"train\" is not valid or test (a token of the train "
		 "split has no SPLIT field)"},
		{"ldr1:1:20:3:4:", "SPLIT \"\" is not valid or test (a token of the train split has "
		 "no SPLIT field)"},
		{"ldr1:1:20:3:4:Valid", "SPLIT \"Valid\" is not valid or test (a token of the train "
		 "split has no SPLIT field)"},
		{"ldr1:1:20:3:4:valid:1", "it has more than 5 fields after \"ldr1:\" "
		 "(SEED:N:EPOCH:OFFSET[:SPLIT])"},
		{"ldr1::20:3:4", "SEED is empty"},
		{"ldr1:1::3:4", "N is empty"},
		{"ldr1:1:20::4", "EPOCH is empty"},
		{"ldr1:1:20:3:", "OFFSET is empty"},
		{"ldr1:+1:20:3:4", "SEED \"+1\" is not a decimal number (digits only)"},
		{"ldr1:1:-20:3:4", "N \"-20\" is not a decimal number (digits only)"},
		{"ldr1:1:20: 3:4", "EPOCH \" 3\" is not a decimal number (digits only)"},
		{"ldr1:1:20:3:4\n", "OFFSET \"4\\n\" is not a decimal number (digits only)"},
		{"ldr1:1:20:3:4\r\nINFO forged", "OFFSET \"4\\r\\nINFO forged\" is not a decimal "
		 "number (digits only)"},
		{"ldr1:18446744073709551616:20:3:4",
		 "SEED \"18446744073709551616\" is larger than 18446744073709551615"},
		{"ldr1:1:99999999999999999999999:3:4",
		 "N \"99999999999999999999999\" is larger than 18446744073709551615"},
		{"ldr1:1:20:007:4", "EPOCH \"007\" has a leading zero"},
		{"ldr1:1:20:18446744073709551615:0",
		 "EPOCH 18446744073709551615 is not below 4294967296 (2^32), the number of epochs a "
		 "stream has"},
		{"ldr1:1:20:4294967296:0",
		 "EPOCH 4294967296 is not below 4294967296 (2^32), the number of epochs a stream has"},
		{"ldr1:1:10:0:11", "OFFSET 11 is larger than N 10"},
		{"ldr1:1:20:3:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
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
	assert_int_equal(position_parse("ldr1:1:20:4294967296:0", &p, small, sizeof(small)), -EINVAL);
	assert_int_equal(strlen(small), sizeof(small) - 1);
}

/* A stream's position after the last batch of its last epoch is past the
 * bound: position_after_batch does not wrap, and the token it gives is
 * refused (the daemon ends such a stream: daemon/sched.c). */
static void test_last_epoch(void **state)
{
	struct position p;
	position_after_batch(5, 100, 1, POSITION_EPOCHS - 1, 0, 90, 10, 1, &p);
	assert_int_equal(p.epoch, POSITION_EPOCHS);
	assert_int_equal(p.offset, 0);
	char token[POSITION_TEXT_MAX], why[200];
	assert_int_equal(position_format(&p, token, sizeof(token)), 0);
	assert_string_equal(token, "ldr1:5:100:4294967296:0");
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
	struct position p;
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
		struct position p = {seed, n, epoch, 0, SPLIT_TRAIN}; /* saved before any batch */
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
	struct position at = {seed, n, epoch, 0, SPLIT_TRAIN};
	for (size_t hop = 0; hop < sizeof(worlds) / sizeof(worlds[0]); hop++) {
		uint32_t w = worlds[hop];
		bool final = hop + 1 == sizeof(worlds) / sizeof(worlds[0]);
		char token[POSITION_TEXT_MAX];
		assert_int_equal(position_format(&at, token, sizeof(token)), 0);
		assert_int_equal(position_parse(token, &at, NULL, 0), 0);
		uint64_t g = at.offset;
		struct position next = {0};
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_parse_round_trip),
		cmocka_unit_test(test_format_needs_room),
		cmocka_unit_test(test_parse_rejects_malformed),
		cmocka_unit_test(test_parse_explains),
		cmocka_unit_test(test_last_epoch),
		cmocka_unit_test(test_after_batch),
		cmocka_unit_test(test_resume_with_other_world),
		cmocka_unit_test(test_resume_chain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
