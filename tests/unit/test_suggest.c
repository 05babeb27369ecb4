/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/suggest: the distance (insertions, deletions,
 * substitutions, adjacent transpositions, letter case), the closeness
 * threshold, the misspellings the config, the transform parser and the
 * daemon's pipeline lookup meet, and the text refusing an unknown name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/suggest.h"

static size_t dist(const char *a, const char *b)
{
	return suggest_distance(a, strlen(a), b, strlen(b));
}

static void test_distance(void **state)
{
	(void)state;
	assert_int_equal(dist("", ""), 0);
	assert_int_equal(dist("abc", ""), 3);
	assert_int_equal(dist("", "abc"), 3);
	assert_int_equal(dist("train", "train"), 0);
	assert_int_equal(dist("trian", "train"), 1);          /* transposition */
	assert_int_equal(dist("batchsize", "batch_size"), 1); /* insertion */
	assert_int_equal(dist("gpuu", "gpu"), 1);             /* deletion */
	assert_int_equal(dist("wokers", "workers"), 1);
	assert_int_equal(dist("kitten", "sitting"), 3);       /* the textbook case */
	assert_int_equal(dist("ca", "abc"), 3);               /* OSA, not the unrestricted distance (2) */
	assert_int_equal(dist("Train", "tRAIN"), 0);          /* case is ignored */
	/* symmetric */
	assert_int_equal(dist("imagefoler", "imagefolder"), dist("imagefolder", "imagefoler"));
	char longer[SUGGEST_NAME_MAX + 2];
	memset(longer, 'a', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_int_equal(dist(longer, "a"), SIZE_MAX);
}

static void test_among(void **state)
{
	(void)state;
	static const char *const keys[] = {"source", "batch_size", "shuffle", "seed", "transform",
					   "drop_last", NULL};
	assert_string_equal(suggest_among("batchsize", 9, keys), "batch_size");
	assert_string_equal(suggest_among("transfrom", 9, keys), "transform");
	assert_string_equal(suggest_among("sorce", 5, keys), "source");
	assert_string_equal(suggest_among("Shuffle", 7, keys), "shuffle");
	/* nothing close: no suggestion */
	assert_null(suggest_among("workers", 7, keys));
	assert_null(suggest_among("x", 1, keys));
	/* an exact match is no suggestion */
	assert_null(suggest_among("seed", 4, keys));
	/* the length given, not the string's */
	assert_string_equal(suggest_among("seedy", 4, (const char *const[]){"seeds", NULL}), "seeds");

	static const char *const choices[] = {"auto", "cpu", "gpu", NULL};
	assert_string_equal(suggest_among("gpuu", 4, choices), "gpu");
	assert_string_equal(suggest_among("atuo", 4, choices), "auto");
	assert_null(suggest_among("tpu2", 4, choices));

	static const char *const pipelines[] = {"train", "valid", NULL};
	assert_string_equal(suggest_among("trian", 5, pipelines), "train");
	assert_string_equal(suggest_among("vaild", 5, pipelines), "valid");
	assert_null(suggest_among("test", 4, pipelines));

	static const char *const kinds[] = {"raw", "tokens", "imagefolder", "tar", "megatron",
					    "llmc", NULL};
	assert_string_equal(suggest_among("imagefoler", 10, kinds), "imagefolder");
	assert_string_equal(suggest_among("megatorn", 8, kinds), "megatron");
	/* three letters: one edit at most, and never all of them */
	assert_string_equal(suggest_among("rwa", 3, kinds), "raw");
	assert_null(suggest_among("zip", 3, kinds));
}

/* Of two equally close candidates the first offered wins; a closer later
 * one replaces it. */
static void test_order(void **state)
{
	(void)state;
	struct suggest s;
	suggest_init(&s, "cat", 3);
	assert_null(suggest_best(&s));
	suggest_offer(&s, "bat");
	suggest_offer(&s, "hat");
	assert_string_equal(suggest_best(&s), "bat");
	suggest_init(&s, "random_resize_crop", 18);
	suggest_offer(&s, "resize");
	suggest_offer(&s, "random_resized_crop");
	suggest_offer(&s, "center_crop");
	assert_string_equal(suggest_best(&s), "random_resized_crop");
}

/* The refusal of an unknown name: the closest, the names, cut to fit
 * with "and N more". */
static void test_unknown_text(void **state)
{
	(void)state;
	char buf[256];
	static const char *const two[] = {"train", "valid"};
	assert_string_equal(suggest_unknown_text("pipeline", "trian", "trian", two, 2, buf, sizeof(buf)),
			    "unknown pipeline \"trian\" (did you mean \"train\"? pipelines: train, valid)");
	assert_string_equal(suggest_unknown_text("pipeline", "zzz", "zzz", two, 2, buf, sizeof(buf)),
			    "unknown pipeline \"zzz\" (pipelines: train, valid)");
	assert_string_equal(suggest_unknown_text("pipeline", "a\n", "a\\n", two, 0, buf, sizeof(buf)),
			    "unknown pipeline \"a\\n\" (no pipelines)");
	/* 64 names in 200 bytes: whole names, then how many more */
	char names[64][16];
	const char *list[64];
	for (int i = 0; i < 64; i++) {
		snprintf(names[i], sizeof(names[i]), "pipeline_%02d", i);
		list[i] = names[i];
	}
	char small[200];
	suggest_unknown_text("pipeline", "pipeline_7", "pipeline_7", list, 64, small, sizeof(small));
	assert_true(strlen(small) < sizeof(small));
	assert_memory_equal(small, "unknown pipeline \"pipeline_7\" (did you mean \"pipeline_07\"? "
			    "pipelines: pipeline_00, pipeline_01", 92);
	const char *more = strstr(small, ", and ");
	assert_non_null(more);
	unsigned shown = 0, rest = 0;
	for (const char *p = small; (p = strstr(p, "pipeline_")) && p < more; p++)
		shown++;
	assert_int_equal(sscanf(more, ", and %u more)", &rest), 1);
	assert_int_equal(shown - 2 + rest, 64); /* the word and the suggestion are not in the list */
	assert_int_equal(small[strlen(small) - 1], ')');
	/* every length of buffer: terminated, never past it */
	for (size_t cap = 1; cap < sizeof(small); cap++) {
		memset(small, 'x', sizeof(small));
		suggest_unknown_text("pipeline", "p", "p", list, 64, small, cap);
		assert_true(strlen(small) < cap);
		assert_int_equal(small[cap], 'x');
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_distance),
		cmocka_unit_test(test_among),
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_unknown_text),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
