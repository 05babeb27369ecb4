/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the configuration's problem report: every problem of a
 * file in one load, each "FILE:LINE: message" in line order, a close
 * match for a misspelt key, section, kind, choice or transform op, no
 * problem that only follows from another, and the text cut to a limit
 * with "and N more".
 */
#include "config_text.h"

/* The number of lines in err. */
static unsigned error_lines(void)
{
	unsigned n = err[0] != '\0';
	for (const char *s = err; *s; s++)
		n += *s == '\n';
	return n;
}

/* Loads text and expects exactly n problems, among them each of the
 * n_want of want[] (line and text), in line order. */
struct want {
	int line;
	const char *text;
};

static void expect_problems(const char *text, const struct want *want, size_t n_want,
			    unsigned n)
{
	char prefix[PATH_MAX + 64];
	int ret = load_text(text);
	if (ret != -EINVAL || error_lines() != n)
		fail_msg("config:\n%s\nreturned %d with %u problems:\n%s\nexpected %u", text, ret,
			 error_lines(), err, n);
	int last = 0;
	for (size_t i = 0; i < n_want; i++) {
		snprintf(prefix, sizeof(prefix), "%s:%d: ", conf_path, want[i].line);
		if (!error_has(prefix, want[i].text))
			fail_msg("config:\n%s\nproblems:\n%s\nnone is \"%s%s\"", text, err, prefix,
				 want[i].text);
		assert_true(want[i].line >= last);
		last = want[i].line;
	}
	/* in line order */
	const char *s = err;
	last = 0;
	while (*s) {
		const char *colon = s + strlen(conf_path) + 1;
		int line = atoi(colon);
		assert_true(line >= last);
		last = line;
		const char *nl = strchr(s, '\n');
		s = nl ? nl + 1 : s + strlen(s);
	}
}

#define EXPECT_PROBLEMS(text, want, n) \
	expect_problems(text, want, sizeof(want) / sizeof(want[0]), n)

/* Five different problems in five sections: all five, with their lines. */
static void test_five_sections(void **state)
{
	(void)state;
	static const char text[] =
		"[daemon]\n"                              /* 1 */
		"wokers = 4\n"                            /* 2: unknown key */
		"[pipline.x]\n"                           /* 3: unknown section */
		"batch_size = 1\n"                        /* 4: not checked (no section) */
		"[pipeline.train]\n"                      /* 5: missing batch_size */
		"source = imagefoler:/data/train\n"       /* 6: unknown kind */
		"[pipeline.valid]\n"                      /* 7 */
		"source = imagefolder:/data/valid\n"      /* 8 */
		"batch_size = 8\n"                        /* 9 */
		"transform = random_resize_crop(224)\n"   /* 10: unknown op */
		"decode = gpuu\n"                         /* 11: bad choice */
		"[pipeline.tok]\n"                        /* 12 */
		"source = raw:/d\nbatch_size = 2\nrecord_bytes = 4\n"
		"token_dtype = uint16\n";                 /* 16: key of another kind */
	static const struct want want[] = {
		{2, "unknown key \"wokers\" in [daemon]; did you mean \"workers\"?"},
		{3, "unknown section [pipline.x]; did you mean [pipeline.x]?"},
		{5, "[pipeline.train] missing required key \"batch_size\": add \"batch_size = 256\""},
		{6, "[pipeline.train] source: \"imagefoler:/data/train\" is not raw:PATH"},
		{6, "did you mean \"imagefolder:/data/train\"?"},
		{10, "[pipeline.valid] transform: random_resize_crop: unknown op; did you mean "
		     "random_resized_crop?"},
		{11, "[pipeline.valid] decode: \"gpuu\" is not one of auto|cpu|gpu; did you mean \"gpu\"?"},
		{16, "[pipeline.tok] token_dtype does not apply to a raw source"},
	};
	/* seven problems: line 6 has one, with its suggestion */
	EXPECT_PROBLEMS(text, want, 7);
}

/* A refused value is not reported again by the checks that involve it. */
static void test_no_cascade(void **state)
{
	(void)state;
	/* a bad source: no "does not apply", no "missing transform" */
	static const struct want bad_source[] = {
		{2, "source: \"jpeg:/d\" is not"},
	};
	EXPECT_PROBLEMS("[pipeline.a]\nsource = jpeg:/d\nbatch_size = 1\nrecord_bytes = 4\n"
			"transform = resize(2, 2)\n", bad_source, 1);
	/* a bad dtype: mean is not said to need a float dtype */
	static const struct want bad_dtype[] = {
		{5, "dtype: \"float64\" is not one of uint8|float16|float32"},
	};
	EXPECT_PROBLEMS("[pipeline.a]\nsource = imagefolder:/d\nbatch_size = 1\n"
			"transform = resize(2, 2)\ndtype = float64\nmean = 0.5,0.5,0.5\n", bad_dtype, 1);
	/* a bad workers: max_workers is not compared with it */
	static const struct want bad_workers[] = {
		{2, "workers: \"many\" is not an integer"},
	};
	EXPECT_PROBLEMS("[daemon]\nworkers = many\nmax_workers = 1\n", bad_workers, 1);
	/* a broken header: its keys are not reported as outside any section */
	static const struct want broken_header[] = {
		{1, "syntax error: a section header without its \"]\""},
	};
	EXPECT_PROBLEMS("[daemon\nworkers = 1\nwokers = 2\n", broken_header, 1);
}

/* Every problem of each kind, not the first. */
static void test_every_problem(void **state)
{
	(void)state;
	static const struct want syntax[] = {
		{2, "syntax error: expected \"key = value\""},
		{4, "syntax error"},
		{5, "unknown key \"wokers\""},
	};
	EXPECT_PROBLEMS("[daemon]\nnot ini\nworkers = 1\nnor this\nwokers = 1\n", syntax, 3);
	static const struct want missing[] = {
		{1, "missing required key \"batch_size\""},
		{1, "missing required key \"transform\""},
	};
	EXPECT_PROBLEMS("[pipeline.a]\nsource = tar:/s.tar\n", missing, 2);
	static const struct want other_kind[] = {
		{4, "[pipeline.a] seq_len does not apply to a raw source"},
		{5, "[pipeline.a] transform does not apply to a raw source"},
	};
	EXPECT_PROBLEMS("[pipeline.a]\nsource = raw:/d\nbatch_size = 1\nseq_len = 4\n"
			"transform = resize(2, 2)\nrecord_bytes = 1\n", other_kind, 2);
	/* a duplicate pipeline's own keys are checked too */
	static const struct want duplicate[] = {
		{4, "duplicate pipeline \"a\" (first defined on line 1): give this one another name"},
		{6, "[pipeline.a] batch_size: \"x\" is not an integer"},
	};
	EXPECT_PROBLEMS("[pipeline.a]\nsource = raw:/d\nbatch_size = 1\n[pipeline.a]\n"
			"source = raw:/d\nbatch_size = x\nrecord_bytes = 1\n", duplicate, 3);
	assert_true(error_has(conf_path, "missing required key \"record_bytes\""));
}

/* Close matches: keys, sections, kinds, choices, and where a key belongs. */
static void test_suggestions(void **state)
{
	(void)state;
	expect_error("[pipeline.a]\nsource = raw:/d\nbatchsize = 4\n", 3,
		     "unknown key \"batchsize\" in [pipeline.a]; did you mean \"batch_size\"?");
	expect_error("[daemon]\nbatch_size = 4\n", 2,
		     "unknown key \"batch_size\" in [daemon]: it is a key of a [pipeline.NAME] section");
	expect_error("[pipeline.a]\nworkers = 4\n", 2,
		     "unknown key \"workers\" in [pipeline.a]: it is a key of [daemon]");
	expect_error("[daemon]\nzzzz = 4\n", 2, "unknown key \"zzzz\" in [daemon] (docs/config.md");
	expect_error("[deamon]\n", 1, "unknown section [deamon]; did you mean [daemon]?");
	expect_error("[Daemon]\n", 1, "unknown section [Daemon]; did you mean [daemon]?");
	expect_error("[pipeline]\n", 1, "a pipeline's section is [pipeline.NAME]");
	expect_error("[pipelines.train]\n", 1, "did you mean [pipeline.train]?");
	expect_error("[nope]\n", 1, "unknown section [nope] (sections are [daemon] and [pipeline.NAME])");
	expect_error("[pipeline.a]\nsource = megatorn:/d/x\n", 2, "did you mean \"megatron:/d/x\"?");
	expect_error("[pipeline.a]\nsource = /data/train\n", 2,
		     "name the kind before the path, e.g. imagefolder:/data/train");
	expect_error("[daemon]\ngpu = requried\n", 2, "did you mean \"required\"?");
	expect_error("[daemon]\nlog_level = debgu\n", 2, "did you mean \"debug\"?");
	expect_error("[pipeline.a]\nshuffle = ture\n", 2, "did you mean \"true\"?");
	expect_error("[pipeline.a]\ntoken_dtype = unit16\n", 2, "did you mean \"uint16\"?");
	expect_error("[pipeline.a]\nlayout = nwhc\n", 2, "did you mean \"nhwc\"?");
	/* the key a misspelt one was taken for is not reported missing too */
	static const struct want taken_for[] = {
		{3, "unknown key \"batchsize\" in [pipeline.a]; did you mean \"batch_size\"?"},
	};
	EXPECT_PROBLEMS("[pipeline.a]\nsource = raw:/d\nbatchsize = 4\nrecord_bytes = 1\n", taken_for, 1);
	/* where each problem is, for the checks of the sections without one */
	struct config_problems *pr = calloc(1, sizeof(*pr));
	assert_non_null(pr);
	static const char sections[] = "[daemon]\nwokers = 1\n[pipeline.a]\nsource = raw:/d\n"
		"batch_size = 1\nrecord_bytes = 1\n[pipeline.b]\nsource = raw:/d\n[pipeline.c]\n"
		"source = raw:/d\nbatch_size = 1\nrecord_bytes = 1\n";
	write_file(conf_path, sections, strlen(sections));
	assert_int_equal(config_load_problems(conf_path, cfg, pr), -EINVAL);
	assert_true(pr->daemon_with_problems);
	assert_int_equal(pr->pipelines_with_problems, 0x2); /* b's missing keys */
	config_problems_free(pr);
	static const char value[] = "[pipeline.a]\nsource = raw:/d\nbatch_size = x\n";
	write_file(conf_path, value, strlen(value));
	assert_int_equal(config_load_problems(conf_path, cfg, pr), -EINVAL);
	assert_false(pr->daemon_with_problems);
	assert_int_equal(pr->pipelines_with_problems, 0x1);
	config_problems_free(pr);
	free(pr);
	/* nothing close: no suggestion */
	load_text("[pipeline.a]\ndecode = tpu2\n");
	assert_null(strstr(err, "did you mean"));
}

/* config_problems_text: whole problems while they fit, then "and N more". */
static void test_text_limit(void **state)
{
	(void)state;
	struct config_problems *pr = calloc(1, sizeof(*pr));
	assert_non_null(pr);
	char text[4096] = "[daemon]\n";
	for (int i = 0; i < 100; i++) /* 100 unknown keys: 64 kept, 100 counted */
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "k%d = 1\n", i);
	write_file(conf_path, text, strlen(text));
	assert_int_equal(config_load_problems(conf_path, cfg, pr), -EINVAL);
	assert_int_equal(pr->n, 100);
	assert_int_equal(pr->kept, CONFIG_PROBLEMS_MAX);
	char all[65536], some[1024];
	config_problems_text(pr, "\n", all, sizeof(all));
	assert_non_null(strstr(all, "\nand 36 more"));
	config_problems_text(pr, "; ", some, sizeof(some));
	assert_true(strlen(some) < sizeof(some));
	const char *more = strstr(some, "; and ");
	assert_non_null(more);
	unsigned shown = 1, rest = 0;
	for (const char *s = some; s < more; s++)
		shown += strncmp(s, "; ", 2) == 0;
	assert_int_equal(sscanf(more, "; and %u more", &rest), 1);
	assert_int_equal(shown + rest, 100);
	/* a buffer too small for one problem: that one, cut */
	char tiny[16];
	config_problems_text(pr, "; ", tiny, sizeof(tiny));
	assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
	config_problems_free(pr);
	assert_int_equal(pr->n, 0);
	/* a good file: none */
	write_file(conf_path, "[daemon]\nworkers = 1\n", 21);
	assert_int_equal(config_load_problems(conf_path, cfg, pr), 0);
	assert_int_equal(pr->n, 0);
	assert_string_equal(config_problems_text(pr, "\n", some, sizeof(some)), "");
	free(pr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_five_sections),
		cmocka_unit_test(test_no_cascade),
		cmocka_unit_test(test_every_problem),
		cmocka_unit_test(test_suggestions),
		cmocka_unit_test(test_text_limit),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
