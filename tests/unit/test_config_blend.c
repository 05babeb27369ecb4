/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for a blend's configuration (daemon/config/config_source.c): the list
 * "SOURCE WEIGHT, ..." parsed into members (kinds, paths resolved against
 * the file's directory, weights as written), a comma inside a pattern's
 * braces or in a path not taken for a list, the keys of every member's
 * kind applying, token_output left unset unless given, the errors of a
 * bad list on its line, and config_diff seeing a changed member.
 */
#include "config_text.h"

static const char *member_path(const struct pipeline_cfg *pl, uint32_t m)
{
	return pl->member_paths + pl->members[m].path_at;
}

static void test_members(void **state)
{
	(void)state;
	assert_int_equal(load_text("[pipeline.m]\nsource = megatron:/data/web 0.7 ,  llmc:rel/c_{1,2}.bin "
				   "2e-1,tokens:/t.bin 0.1\nseq_len = 8\nbatch_size = 4\n"
				   "token_dtype = uint32\nblend_samples = 1000\n"), 0);
	const struct pipeline_cfg *pl = &cfg->pipelines[0];
	char rel[PATH_MAX + 64];
	snprintf(rel, sizeof(rel), "%s/rel/c_{1,2}.bin", tmp_dir);
	assert_int_equal(pl->n_members, 3);
	assert_int_equal(pl->members[0].kind, SOURCE_MEGATRON);
	assert_int_equal(pl->members[1].kind, SOURCE_LLMC);
	assert_int_equal(pl->members[2].kind, SOURCE_TOKENS);
	assert_string_equal(member_path(pl, 0), "/data/web");
	assert_string_equal(member_path(pl, 1), rel);
	assert_string_equal(member_path(pl, 2), "/t.bin");
	assert_true(pl->members[0].weight == 0.7 && pl->members[1].weight == 0.2 &&
		    pl->members[2].weight == 0.1);
	assert_int_equal(pl->kind, SOURCE_MEGATRON); /* the first member's */
	assert_string_equal(pl->path, "/data/web");
	assert_int_equal(pl->blend_samples, 1000);
	assert_int_equal(pl->token_bytes, 4);
	assert_int_equal(pl->token_out_dtype, 0); /* as stored: checked at start */
	assert_true(pl->document_shuffle);        /* shuffle's value */

	/* commas that do not start another source: one source, as before */
	assert_int_equal(load_text("[pipeline.l]\nsource = llmc:/d/s_{1,2}.bin\nseq_len = 8\n"
				   "batch_size = 4\n"), 0);
	assert_int_equal(cfg->pipelines[0].n_members, 0);
	assert_string_equal(cfg->pipelines[0].path, "/d/s_{1,2}.bin");
	assert_int_equal(load_text("[pipeline.r]\nsource = raw:/d/a,b.bin\nrecord_bytes = 8\n"
				   "batch_size = 4\n"), 0);
	assert_int_equal(cfg->pipelines[0].n_members, 0);
	assert_string_equal(cfg->pipelines[0].path, "/d/a,b.bin");
}

static void test_errors(void **state)
{
	(void)state;
	const char *keys = "seq_len = 8\nbatch_size = 4\n";
	char text[1024];
	snprintf(text, sizeof(text), "[pipeline.m]\n%ssource = megatron:/a 1, megatron:/b nan\n", keys);
	expect_error(text, 4, "member 2 \"megatron:/b nan\": weight \"nan\" is not a positive number");
	snprintf(text, sizeof(text), "[pipeline.m]\nsource = megatron:/a 1, megatron:/b inf\n%s", keys);
	expect_error(text, 2, "weight \"inf\" is not a positive number");
	snprintf(text, sizeof(text), "[pipeline.m]\nsource = megatron:/a 1, , megatron:/b 1\n%s", keys);
	expect_error(text, 2, "member 2 is empty");
	snprintf(text, sizeof(text), "[pipeline.m]\nsource = megatron:/a 1, tar:/b_{1..2}.tar 1\n%s",
		 keys);
	expect_error(text, 2, "member 2 \"tar:/b_{1..2}.tar\" is not a token source");
	snprintf(text, sizeof(text), "[pipeline.m]\nsource = megatron:/a 1, llmc:/b_{1.. 1\n%s", keys);
	expect_error(text, 2, "[pipeline.m] source: \"llmc:/b_{1..\"");
	char many[2048] = "[pipeline.m]\nsource = ";
	for (int m = 0; m < CONFIG_BLEND_MAX + 1; m++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%smegatron:/d%d 1",
			 m ? ", " : "", m);
	snprintf(many + strlen(many), sizeof(many) - strlen(many), "\n%s", keys);
	expect_error(many, 2, "more than 16 members");
	/* each member's kind's keys: eod_token for outputs, token_dtype for tokens */
	snprintf(text, sizeof(text), "[pipeline.m]\nsource = llmc:/a 1, megatron:/b 1\n%s"
		 "outputs = tokens positions\n", keys);
	expect_error(text, 5, "need eod_token");
	snprintf(text, sizeof(text), "[pipeline.m]\nsource = tokens:/a 1, llmc:/b 1\n%s"
		 "token_dtype = uint32\ntoken_output = uint16\n", keys);
	expect_error(text, 6, "token_output: \"uint16\" is narrower than the 4-byte tokens of a "
		     "tokens member");
	snprintf(text, sizeof(text), "[pipeline.m]\nsource = megatron:/a 1, megatron:/b 1\n%s"
		 "transform = resize(8, 8)\n", keys);
	expect_error(text, 5, "transform does not apply to a blend of megatron sources");
}

static void note(void *ctx, const char *pipeline, const char *key)
{
	(void)pipeline;
	if (!*(char *)ctx) /* the first changed key: an llmc member also sets token_dtype's */
		snprintf(ctx, 64, "%s", key);
}

static void test_diff(void **state)
{
	(void)state;
	struct config *old = malloc(sizeof(*old));
	assert_non_null(old);
	assert_int_equal(load_text("[pipeline.m]\nsource = megatron:/a 1, megatron:/b 1\n"
				   "seq_len = 8\nbatch_size = 4\n"), 0);
	memcpy(old, cfg, sizeof(*old));
	const char *changed[] = {"megatron:/a 1, megatron:/b 2", "megatron:/a 1, megatron:/c 1",
				 "megatron:/a 1, llmc:/b 1", "megatron:/a 1, megatron:/b 1, megatron:/c 1",
				 "megatron:/a"};
	for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++) {
		char text[512], seen[64] = "";
		snprintf(text, sizeof(text), "[pipeline.m]\nsource = %s\nseq_len = 8\nbatch_size = 4\n",
			 changed[i]);
		assert_int_equal(load_text(text), 0);
		config_diff(old, cfg, note, seen);
		if (strcmp(seen, "source") != 0)
			fail_msg("source = %s: config_diff saw \"%s\"", changed[i], seen);
	}
	free(old);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_members),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_diff),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
