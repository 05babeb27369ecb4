/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/config/config, the keys of token datasets as LLM training
 * reads them: a megatron pipeline's split (Megatron's --split weights) and
 * document_shuffle, and llmc:PATTERN sources; each refusal with its exact
 * "FILE:LINE: " prefix and message.
 */
#include <stdbool.h>

#include "config_text.h"

/* split = A,B,C (Megatron's --split): one to three weights, as written,
 * the missing ones 0; refused on its line with the value and why; only
 * for megatron sources. */
static void test_split(void **state)
{
	static const struct {
		const char *text;
		double w[3];
	} ok[] = {
		{"969,30,1", {969, 30, 1}}, {"98,2", {98, 2, 0}}, {"1", {1, 0, 0}},
		{"0.5,0.25,0.25", {0.5, 0.25, 0.25}}, {"8/1/1", {8, 1, 1}}, {"0,1,0", {0, 1, 0}},
		{"1.,.5,0", {1, 0.5, 0}},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(load_text(textf("[pipeline.m]\nsource = megatron:/d/web\nbatch_size = 4\n"
						 "seq_len = 8\nsplit = %s\n", ok[i].text)), 0);
		assert_memory_equal(cfg->pipelines[0].split, ok[i].w, sizeof(ok[i].w));
	}
	assert_int_equal(load_text("[pipeline.m]\nsource = megatron:/d/web\nbatch_size = 4\n"
				   "seq_len = 8\n"), 0);
	assert_true(cfg->pipelines[0].split[0] == 0 && cfg->pipelines[0].split[1] == 0 &&
		    cfg->pipelines[0].split[2] == 0);
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"969,30,1,1", "\"969,30,1,1\" has more than three weights (train, valid, test)"},
		{"0,0,0", "\"0,0,0\" has no weight above 0"},
		{"-1,2,0", "\"-1,2,0\" is not one to three numbers A,B,C"},
		{"1e3,1,1", "\"1e3,1,1\" is not one to three numbers A,B,C"},
		{"1,,1", "\"1,,1\" is not one to three numbers A,B,C"},
		{"1, 2", "\"1, 2\" is not one to three numbers A,B,C"},
		{"1.2.3", "\"1.2.3\" is not one to three numbers A,B,C"},
		{".", "\".\" is not one to three numbers A,B,C"},
		{"1,2/3", "\"1,2/3\" is not one to three numbers A,B,C"},
		{"nan", "\"nan\" is not one to three numbers A,B,C"},
		{"", "\"\" is not one to three numbers A,B,C"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[256];
		snprintf(want, sizeof(want), "[pipeline.m] split: %s", bad[i].why);
		expect_error(textf("[pipeline.m]\nsource = megatron:/d/web\nbatch_size = 4\n"
				   "seq_len = 8\nsplit = %s\n", bad[i].text), 5, want);
	}
	expect_error("[pipeline.t]\nsource = tokens:/t\nbatch_size = 1\ntoken_dtype = uint16\n"
		     "split = 1,1,1\nseq_len = 1\n", 5,
		     "[pipeline.t] split does not apply to a tokens source");
}

/* document_shuffle: megatron only; default shuffle's value; not with
 * direct = on, refused on direct's line. */
static void test_document_shuffle(void **state)
{
	static const struct {
		const char *keys;
		bool want;
	} ok[] = {
		{"", true}, {"shuffle = false\n", false}, {"document_shuffle = off\n", false},
		{"shuffle = false\ndocument_shuffle = on\n", true},
		{"direct = on\ndocument_shuffle = off\n", false},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(load_text(textf("[pipeline.m]\nsource = megatron:/d/web\nbatch_size = 4\n"
						 "seq_len = 8\n%s", ok[i].keys)), 0);
		assert_int_equal(cfg->pipelines[0].document_shuffle, ok[i].want);
	}
	expect_error("[pipeline.m]\nsource = megatron:/d/web\nbatch_size = 4\nseq_len = 8\n"
		     "direct = on\n", 5, "[pipeline.m] direct: on reads each sample as one range of "
		     "the file, but document_shuffle (on, as shuffle is) makes a sample of several "
		     "documents in the epoch's order: set document_shuffle = off");
	expect_error("[pipeline.m]\nsource = megatron:/d/web\nbatch_size = 4\nseq_len = 8\n"
		     "document_shuffle = on\ndirect = on\n", 6, "direct: on reads each sample as one "
		     "range of the file, but document_shuffle = on makes");
	expect_error("[pipeline.t]\nsource = tokens:/t\nbatch_size = 1\ntoken_dtype = uint16\n"
		     "seq_len = 1\ndocument_shuffle = on\n", 6,
		     "[pipeline.t] document_shuffle does not apply to a tokens source");
}

/* llmc:PATTERN: uint16 tokens (llm.c's), widened as tokens: are; the
 * pattern's braces checked on the source line; keys of other kinds
 * refused. */
static void test_llmc(void **state)
{
	(void)state;
	assert_int_equal(load_text("[pipeline.l]\nsource = llmc:/d/fineweb_train_{000001..000009}.bin\n"
				   "batch_size = 8\nseq_len = 1024\noutputs = tokens positions\n"
				   "eod_token = 50256\n"), 0);
	const struct pipeline_cfg *pl = &cfg->pipelines[0];
	assert_int_equal(pl->kind, SOURCE_LLMC);
	assert_string_equal(pl->path, "/d/fineweb_train_{000001..000009}.bin");
	assert_int_equal(pl->token_bytes, 2);
	assert_int_equal(pl->token_out_dtype, PROTO_DTYPE_UINT16);
	assert_int_equal(pl->eod_token, 50256);
	assert_int_equal(load_text("[pipeline.l]\nsource = llmc:/d/s.bin\nbatch_size = 8\n"
				   "seq_len = 16\ntoken_output = int64\n"), 0);
	assert_int_equal(cfg->pipelines[0].token_out_dtype, PROTO_DTYPE_INT64);
	expect_error("[pipeline.l]\nbatch_size = 8\nsource = llmc:/d/s_{1..9.bin\nseq_len = 16\n", 3,
		     "[pipeline.l] source: \"llmc:/d/s_{1..9.bin\": a '{' without its '}'");
	expect_error("[pipeline.l]\nsource = llmc:/d/s.bin\nbatch_size = 8\n", 1,
		     "[pipeline.l] missing required key \"seq_len\"");
	expect_error("[pipeline.l]\nsource = llmc:/d/s.bin\nbatch_size = 8\nseq_len = 16\n"
		     "split = 1,1,1\n", 5, "[pipeline.l] split does not apply to an llmc source");
	expect_error("[pipeline.l]\nsource = llmc:\nbatch_size = 8\nseq_len = 16\n", 2,
		     "source: \"llmc:\" has an empty path");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_document_shuffle),
		cmocka_unit_test(test_llmc),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
