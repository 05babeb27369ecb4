/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/config/config: defaults, a file that sets every key, one
 * case per error with the exact "FILE:LINE: " prefix and message, size and
 * integer edge cases, relative source paths, long lines, and the example
 * configuration shipped in systemd/loaderd.conf. (split, document_shuffle
 * and llmc sources: test_config_tokens.c; the fixture: config_text.h.)
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config_text.h"
#include "daemon/config/config.h"

/* The CPUs this process may run on. */
static uint32_t cpus_allowed(void)
{
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	return (uint32_t)CPU_COUNT(&set);
}

static void test_defaults(void **state)
{
	uint32_t cpus = cpus_allowed();
	uint32_t workers = cpus > 1 ? cpus - 1 : 1;
	for (int i = 0; i < 3; i++) {
		if (i == 0)
			assert_int_equal(config_load(NULL, cfg, err, sizeof(err)), 0);
		else if (i == 1)
			assert_int_equal(config_load("", cfg, err, sizeof(err)), 0);
		else
			config_defaults(cfg);
		assert_string_equal(cfg->file, "");
		assert_string_equal(cfg->socket, "");
		assert_string_equal(cfg->socket_group, "");
		assert_int_equal(cfg->socket_mode, 0660);
		assert_int_equal(cfg->workers, workers > ARENA_WORKERS_MAX ? ARENA_WORKERS_MAX : workers);
		assert_int_equal(cfg->shm_bytes, 1ull << 30);
		assert_int_equal(cfg->staging_slots, 16);
		assert_int_equal(cfg->default_depth, 4);
		assert_int_equal(cfg->max_depth, 16);
		assert_int_equal(cfg->max_clients, 256);
		assert_int_equal(cfg->handshake_timeout_ms, 5000);
		assert_int_equal(cfg->max_handshakes, 64);
		assert_int_equal(cfg->group_timeout_ms, 600000);
		assert_int_equal(cfg->worker_nice, 10);
		assert_string_equal(cfg->worker_program, "");
		assert_int_equal(cfg->log_level, LOG_LEVEL_INFO);
		assert_int_equal(cfg->n_pipelines, 0);
	}
	/* An empty file and one with only [daemon] are the defaults too. */
	assert_int_equal(load_text(""), 0);
	assert_int_equal(cfg->n_pipelines, 0);
	assert_int_equal(load_text("[daemon]\n"), 0);
	assert_int_equal(cfg->max_clients, 256);
	assert_string_equal(cfg->file, conf_path);
}

static void test_full_file(void **state)
{
	static const char text[] =
		"\xEF\xBB\xBF; every key, with comments, indentation and CRLF\r\n"
		"[daemon]\r\n"
		"  socket = /run/x/loaderd.sock   ; inline comment\n"
		"workers = 7\n"
		"shm_bytes = 3GiB\n"
		"staging_slots = 32\n"
		"default_depth = 8\n"
		"max_depth = 64\n"
		"max_clients = 9\n"
		"handshake_timeout_ms = 100\n"
		"max_handshakes = 4096\n"
		"socket_group = train\n"
		"socket_mode = 0640\n"
		"worker_program = /opt/loaderd/bin/loaderd-worker\n"
		"log_level = debug\n"
		"# a hash comment\n"
		"\n"
		"[pipeline.imagenet-raw_1.0] ; a comment after a header\n"
		"source = raw:/var/lib/loaderd/train.bin\n"
		"batch_size = 256\n"
		"shuffle = off\n"
		"seed = 18446744073709551615\n"
		"drop_last = YES\n"
		"chunk = 64\n"
		"record_bytes = 1073741824\n"
		"\t[pipeline.gpt]\n"
		"source: tokens:/var/lib/loaderd/tokens.bin\n"
		"batch_size = 65536\n"
		"token_dtype = uint32\n"
		"seq_len = 16777216\n"
		"token_output = int32\n"
		"chunk = 0\n";
	assert_int_equal(load_text(text), 0);
	assert_string_equal(err, "");
	assert_string_equal(cfg->socket, "/run/x/loaderd.sock");
	assert_int_equal(cfg->workers, 7);
	assert_int_equal(cfg->shm_bytes, 3ull << 30);
	assert_int_equal(cfg->staging_slots, 32);
	assert_int_equal(cfg->default_depth, 8);
	assert_int_equal(cfg->max_depth, 64);
	assert_int_equal(cfg->max_clients, 9);
	assert_int_equal(cfg->handshake_timeout_ms, 100);
	assert_int_equal(cfg->max_handshakes, 4096);
	assert_string_equal(cfg->socket_group, "train");
	assert_int_equal(cfg->socket_mode, 0640);
	assert_string_equal(cfg->worker_program, "/opt/loaderd/bin/loaderd-worker");
	assert_int_equal(cfg->log_level, LOG_LEVEL_DEBUG);
	assert_int_equal(cfg->n_pipelines, 2);

	const struct pipeline_cfg *raw = config_pipeline(cfg, "imagenet-raw_1.0");
	assert_ptr_equal(raw, &cfg->pipelines[0]);
	assert_int_equal(raw->line, 18);
	assert_int_equal(raw->kind, SOURCE_RAW);
	assert_string_equal(raw->path, "/var/lib/loaderd/train.bin");
	assert_int_equal(raw->batch_size, 256);
	assert_false(raw->shuffle);
	assert_int_equal(raw->seed, UINT64_MAX);
	assert_true(raw->drop_last);
	assert_int_equal(raw->chunk, 64);
	assert_int_equal(raw->record_bytes, 1ull << 30);

	const struct pipeline_cfg *tok = config_pipeline(cfg, "gpt");
	assert_ptr_equal(tok, &cfg->pipelines[1]);
	assert_int_equal(tok->line, 26);
	assert_int_equal(tok->kind, SOURCE_TOKENS);
	assert_string_equal(tok->path, "/var/lib/loaderd/tokens.bin");
	assert_int_equal(tok->batch_size, 65536);
	assert_true(tok->shuffle);
	assert_int_equal(tok->seed, 0);
	assert_false(tok->drop_last);
	assert_int_equal(tok->chunk, 0);
	assert_int_equal(tok->token_bytes, 4);
	assert_int_equal(tok->seq_len, 1u << 24);
	assert_int_equal(tok->token_out_dtype, PROTO_DTYPE_INT32);
	assert_null(config_pipeline(cfg, "nope"));
	assert_null(config_pipeline(cfg, "gp"));
}

static void test_token_output(void **state)
{
	static const struct {
		const char *stored, *output;
		uint32_t bytes, dtype;
	} ok[] = {
		{"uint16", NULL, 2, PROTO_DTYPE_UINT16}, {"uint32", NULL, 4, PROTO_DTYPE_UINT32},
		{"uint16", "uint16", 2, PROTO_DTYPE_UINT16}, {"uint16", "uint32", 2, PROTO_DTYPE_UINT32},
		{"uint16", "int32", 2, PROTO_DTYPE_INT32}, {"uint16", "int64", 2, PROTO_DTYPE_INT64},
		{"uint32", "uint32", 4, PROTO_DTYPE_UINT32}, {"uint32", "int32", 4, PROTO_DTYPE_INT32},
		{"uint32", "int64", 4, PROTO_DTYPE_INT64},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(load_text(textf("[pipeline.t]\n%s%s%ssource = tokens:/t\n"
						 "batch_size = 1\ntoken_dtype = %s\nseq_len = 1\n",
						 ok[i].output ? "token_output = " : "",
						 ok[i].output ? ok[i].output : "",
						 ok[i].output ? "\n" : "", ok[i].stored)), 0);
		assert_int_equal(cfg->pipelines[0].token_bytes, ok[i].bytes);
		assert_int_equal(cfg->pipelines[0].token_out_dtype, ok[i].dtype);
	}
	expect_error("[pipeline.t]\nsource = tokens:/t\nbatch_size = 1\ntoken_output = uint16\n"
		     "token_dtype = uint32\nseq_len = 1\n", 4,
		     "[pipeline.t] token_output: \"uint16\" is narrower than token_dtype uint32");
}

/* direct = on: raw, and tokens delivered in their stored width; widened
 * tokens need the CPU, so direct is refused on the direct line. */
static void test_direct(void **state)
{
	assert_int_equal(load_text("[pipeline.r]\nsource = raw:/r\nbatch_size = 1\nrecord_bytes = 4\n"), 0);
	assert_false(cfg->pipelines[0].direct);
	assert_int_equal(load_text("[pipeline.r]\nsource = raw:/r\nbatch_size = 1\nrecord_bytes = 4\n"
				   "direct = on\n"), 0);
	assert_true(cfg->pipelines[0].direct);
	assert_int_equal(load_text("[pipeline.t]\ndirect = yes\nsource = tokens:/t\nbatch_size = 1\n"
				   "token_dtype = uint32\ntoken_output = int32\nseq_len = 8\n"), 0);
	assert_true(cfg->pipelines[0].direct);
	expect_error("[pipeline.t]\nsource = tokens:/t\nbatch_size = 1\ndirect = on\n"
		     "token_dtype = uint16\nseq_len = 8\ntoken_output = int32\n", 4,
		     "[pipeline.t] direct: on needs tokens delivered as stored, but token_output "
		     "int32 widens token_dtype uint16 on the CPU");
	expect_error("[pipeline.r]\nsource = raw:/r\nbatch_size = 1\nrecord_bytes = 4\n"
		     "direct = sometimes\n", 5,
		     "[pipeline.r] direct: \"sometimes\" is not a boolean");
}

/* imagefolder and tar: their keys, defaults and cross-checks; the transform text is
 * checked by image/transform.h and its message kept. */
static void test_images(void **state)
{
	assert_int_equal(load_text("[pipeline.i]\nsource = imagefolder:/data/train\nbatch_size = 8\n"
				   "transform = random_resized_crop(224) hflip(0.5)\n"), 0);
	const struct pipeline_cfg *pl = &cfg->pipelines[0];
	assert_int_equal(pl->kind, SOURCE_IMAGEFOLDER);
	assert_string_equal(pl->path, "/data/train");
	assert_int_equal(pl->layout, IMAGE_NCHW);
	assert_int_equal(pl->dtype, IMAGE_UINT8);
	assert_int_equal(pl->on_error, ON_ERROR_SUBSTITUTE);
	assert_int_equal(pl->max_image_pixels, IMAGE_PIXELS_DEFAULT);
	assert_true(pl->std[0] == 1.0 && pl->mean[2] == 0.0);
	assert_int_equal(load_text("[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\n"
				   "transform = resize(256) center_crop(224)\ndtype = float16\n"
				   "layout = nhwc\nmean = 0.485,0.456,0.406\nstd = 0.229,0.224,0.225\n"
				   "on_error = fail\nmax_image_pixels = 1000\n"), 0);
	pl = &cfg->pipelines[0];
	assert_int_equal(pl->dtype, IMAGE_FLOAT16);
	assert_int_equal(pl->layout, IMAGE_NHWC);
	assert_int_equal(pl->on_error, ON_ERROR_FAIL);
	assert_true(pl->mean[1] == 0.456 && pl->std[2] == 0.225);
	expect_error("[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\n", 1,
		     "[pipeline.i] missing required key \"transform\"");
	expect_error("[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\ntransform = resize(256)\n",
		     4, "[pipeline.i] transform: ");
	expect_error("[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\ntransform = blur(3)\n",
		     4, "[pipeline.i] transform: ");
	expect_error("[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\n"
		     "transform = center_crop(8)\nmean = 0.5,0.5,0.5\n", 5,
		     "[pipeline.i] mean needs dtype float16 or float32");
	expect_error("[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\n"
		     "transform = center_crop(8)\ndtype = float32\nstd = 1,0,1\n", 6,
		     "[pipeline.i] std: \"1,0,1\" is not three positive numbers R,G,B");
	expect_error("[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\n"
		     "transform = center_crop(8)\ndirect = on\n", 5,
		     "[pipeline.i] direct does not apply to an imagefolder source");
	expect_error("[pipeline.r]\nsource = raw:/r\nbatch_size = 1\nrecord_bytes = 4\n"
		     "transform = center_crop(8)\n", 5,
		     "[pipeline.r] transform does not apply to a raw source");
	/* tar: the same keys; the pattern's braces checked on its line */
	assert_int_equal(load_text("[pipeline.t]\nsource = tar:/s/train-{000..127}.tar\n"
				   "batch_size = 8\ntransform = center_crop(8)\non_error = fail\n"), 0);
	pl = &cfg->pipelines[0];
	assert_int_equal(pl->kind, SOURCE_TAR);
	assert_string_equal(pl->path, "/s/train-{000..127}.tar");
	assert_int_equal(pl->on_error, ON_ERROR_FAIL);
	expect_error("[pipeline.t]\nbatch_size = 8\nsource = tar:/s/train-{000..127.tar\n", 3,
		     "[pipeline.t] source: \"tar:/s/train-{000..127.tar\": a '{' without its '}'");
	expect_error("[pipeline.t]\nsource = tar:/s/{a,,b}.tar\n", 2,
		     "a brace list has an empty item: \"{a,,b}\"");
	expect_error("[pipeline.t]\nsource = tar:/s/a.tar\nbatch_size = 8\n"
		     "transform = center_crop(8)\nrecord_bytes = 4\n", 5,
		     "[pipeline.t] record_bytes does not apply to a tar source");
}

/* GPU decoding's keys: defaults, values, and decode = gpu refused (on its
 * line) where the daemon cannot decode on a GPU; decode = auto then means
 * the workers. */
static void test_decode_keys(void **state)
{
	const char *img = "[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\n"
			  "transform = center_crop(8)\n";
	char text[512];
	assert_int_equal(load_text(img), 0);
	const struct pipeline_cfg *pl = &cfg->pipelines[0];
	assert_int_equal(pl->decode, DECODE_AUTO);
	assert_int_equal(pl->gpu_decode_percent, 100);
	assert_int_equal(pl->max_image_bytes, 0);
	assert_int_equal(pl->gpu_decode_check, GPU_CHECK_STRUCTURE);
	assert_int_equal(cfg->gpu_decode_memory, 512ull << 20);
	assert_string_equal(cfg->nvjpeg_library, "");
	/* both follow MPS unless given */
	assert_int_equal(cfg->gpu_decode_helpers, GPU_DECODE_HELPERS_AUTO);
	assert_int_equal(cfg->gpu_decode_threads, 0);
	snprintf(text, sizeof(text), "[daemon]\ngpu_decode_helpers = threads\ngpu_decode_threads = 3\n%s",
		 img);
	assert_int_equal(load_text(text), 0);
	assert_int_equal(cfg->gpu_decode_helpers, GPU_DECODE_HELPERS_THREADS);
	assert_int_equal(cfg->gpu_decode_threads, 3);
	snprintf(text, sizeof(text), "[daemon]\ngpu_decode_threads = 9\n%s", img);
	expect_error(text, 2, "[daemon] gpu_decode_threads: ");
	snprintf(text, sizeof(text), "[daemon]\nnvjpeg_library = /opt/nv/libnvjpeg.so.13\n"
		 "gpu_decode_memory = 1G\ngpu_decode_helpers = processes\n"
		 "%sdecode = gpu\ngpu_decode_percent = 40\n"
		 "max_image_bytes = 2M\ngpu_decode_check = entropy\n", img);
	assert_int_equal(load_text(text), 0);
	pl = &cfg->pipelines[0];
	assert_int_equal(pl->decode, DECODE_GPU);
	assert_int_equal(pl->gpu_decode_percent, 40);
	assert_int_equal(pl->max_image_bytes, 2ull << 20);
	assert_int_equal(pl->gpu_decode_check, GPU_CHECK_ENTROPY);
	assert_int_equal(cfg->gpu_decode_memory, 1ull << 30);
	assert_string_equal(cfg->nvjpeg_library, "/opt/nv/libnvjpeg.so.13");
	assert_int_equal(cfg->gpu_decode_helpers, GPU_DECODE_HELPERS_PROCESSES);
	snprintf(text, sizeof(text), "[daemon]\ngpu_decode_helpers = fibers\n%s", img);
	expect_error(text, 2, "[daemon] gpu_decode_helpers: ");
	snprintf(text, sizeof(text), "%sdecode = gpus\n", img);
	expect_error(text, 5, "[pipeline.i] decode: ");
	snprintf(text, sizeof(text), "%sgpu_decode_percent = 101\n", img);
	expect_error(text, 5, "[pipeline.i] gpu_decode_percent: ");
	snprintf(text, sizeof(text), "%sgpu_decode_check = huffman\n", img);
	expect_error(text, 5, "[pipeline.i] gpu_decode_check: ");
	snprintf(text, sizeof(text), "%smax_image_bytes = 65M\n", img);
	expect_error(text, 5, "[pipeline.i] max_image_bytes: ");
	snprintf(text, sizeof(text), "[daemon]\ngpu_decode_memory = 1M\n%s", img);
	expect_error(text, 2, "[daemon] gpu_decode_memory: ");
	expect_error("[pipeline.r]\nsource = raw:/r\nbatch_size = 1\nrecord_bytes = 4\n"
		     "decode = gpu\n", 5, "[pipeline.r] decode does not apply to a raw source");
	/* where no GPU decodes: gpu refused on its line, auto the workers */
	snprintf(text, sizeof(text), "[daemon]\ngpu = off\n%s\ndecode = gpu\n", img);
	expect_error(text, 8, "[pipeline.i] decode = gpu is not possible with [daemon] gpu = off");
	snprintf(text, sizeof(text), "[daemon]\npin = copy\n%sdecode = gpu\n", img);
	expect_error(text, 7, "[pipeline.i] decode = gpu is not possible with [daemon] pin = copy");
	snprintf(text, sizeof(text), "[daemon]\ngpu = off\n%s", img);
	assert_int_equal(load_text(text), 0);
	assert_int_equal(cfg->pipelines[0].decode, DECODE_CPU);
}

/* worker_nice: 0..19, 10 by default; a value outside names the key and
 * its line. */
static void test_worker_nice(void **state)
{
	(void)state;
	assert_int_equal(load_text("[daemon]\nworker_nice = 0\n"), 0);
	assert_int_equal(cfg->worker_nice, 0);
	assert_int_equal(load_text("[daemon]\nworkers = 2\nworker_nice = 19\n"), 0);
	assert_int_equal(cfg->worker_nice, 19);
	assert_int_equal(config_key_line(cfg, NULL, "worker_nice"), 3);
	expect_error("[daemon]\nworkers = 2\nworker_nice = 20\n", 3, "[daemon] worker_nice: ");
	expect_error("[daemon]\nworker_nice = -1\n", 2, "[daemon] worker_nice: ");
	expect_error("[daemon]\nworker_nice = low\n", 2, "[daemon] worker_nice: ");
	expect_error("[pipeline.r]\nsource = raw:/r\nbatch_size = 1\nrecord_bytes = 4\n"
		     "worker_nice = 5\n", 5, "worker_nice");
}

/* runtime_index_bytes (16M by default) and staging_slot_bytes (0 by
 * default): sizes; a bad one names the key and its line. */
static void test_runtime_reserves(void **state)
{
	(void)state;
	assert_int_equal(load_text("[daemon]\n"), 0);
	assert_int_equal(cfg->runtime_index_bytes, 16ull << 20);
	assert_int_equal(cfg->staging_slot_bytes, 0);
	assert_int_equal(load_text("[daemon]\nruntime_index_bytes = 0\nstaging_slot_bytes = 8M\n"), 0);
	assert_int_equal(cfg->runtime_index_bytes, 0);
	assert_int_equal(cfg->staging_slot_bytes, 8ull << 20);
	expect_error("[daemon]\nruntime_index_bytes = 2T\n", 2, "[daemon] runtime_index_bytes: ");
	expect_error("[daemon]\nstaging_slot_bytes = big\n", 2, "[daemon] staging_slot_bytes: ");
}

/* A client's declaration (config_declare): a [pipeline.NAME] section's
 * lines, parsed by the file's code against the running daemon keys; each
 * error names the key, the client's pid and the line. */
static void test_declaration(void **state)
{
	(void)state;
	static struct pipeline_cfg pl;
	char why[512];
	assert_int_equal(load_text("[daemon]\nworker_timeout_ms = 6000\n"), 0);
	assert_int_equal(config_declare(cfg, "d.x", "source = raw:/d/x.bin\n  record_bytes = 16\n"
					"batch_size = 4\nshuffle = off\n", 77, &pl, why, sizeof(why)), 0);
	assert_string_equal(pl.name, "d.x");
	assert_int_equal(pl.kind, SOURCE_RAW);
	assert_string_equal(pl.path, "/d/x.bin");
	assert_int_equal(pl.record_bytes, 16);
	assert_int_equal(pl.batch_size, 4);
	assert_false(pl.shuffle);
	static const struct {
		const char *text, *says;
	} bad[] = {
		{"source = raw:/d/x.bin\nbogus = 1\n", "declared by client pid 77, line 2: unknown key "
		 "\"bogus\" in [declared pipeline]"},
		{"source = raw:/d/x.bin\nrecord_bytes = 16\nbatch_size = none\n",
		 "declared by client pid 77, line 3: [declared pipeline] batch_size: \"none\""},
		{"[daemon]\nworkers = 1\n", "declared by client pid 77, line 1: a declaration is the "
		 "keys of one pipeline, without a section header"},
		{"record_bytes = 16\nbatch_size = 4\n", "declared by client pid 77, line 1: [declared "
		 "pipeline] missing required key \"source\""},
		{"source = imagefolder:/d\nbatch_size = 4\ntransform = resize(8, 8)\n"
		 "max_decode_ms = 7000\n", "must be below [daemon] worker_timeout_ms (6000)"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (config_declare(cfg, "d.x", bad[i].text, 77, &pl, why, sizeof(why)) != -EINVAL)
			fail_msg("declaration %zu was not refused", i);
		if (!strstr(why, bad[i].says))
			fail_msg("declaration %zu: \"%s\" does not say \"%s\"", i, why, bad[i].says);
	}
}

/* A default default_depth yields to a smaller max_depth; an explicit one
 * must not exceed it. */
static void test_depths(void **state)
{
	assert_int_equal(load_text("[daemon]\nmax_depth = 2\n"), 0);
	assert_int_equal(cfg->default_depth, 2);
	assert_int_equal(cfg->max_depth, 2);
	assert_int_equal(load_text("[daemon]\ndefault_depth = 3\nmax_depth = 3\n"), 0);
	assert_int_equal(cfg->default_depth, 3);
	expect_error("[daemon]\ndefault_depth = 17\n", 2,
		     "[daemon] default_depth: \"17\" is not an integer in 1..16");
	expect_error("[daemon]\nworkers = 1\ndefault_depth = 8\nmax_depth = 4\n", 3,
		     "[daemon] default_depth: \"8\" is not an integer in 1..4");
}

static void test_max_workers(void **state)
{
	uint32_t cpus = cpus_allowed();
	/* Default: max(workers, CPUs), and not given. */
	assert_int_equal(load_text("[daemon]\nworkers = 1\n"), 0);
	assert_int_equal(cfg->max_workers, cpus > 1 ? cpus : 1);
	assert_false(cfg->max_workers_given);
	assert_int_equal(load_text("[daemon]\nworkers = 200\n"), 0);
	assert_int_equal(cfg->max_workers, cpus > 200 ? cpus : 200);
	assert_int_equal(load_text("[daemon]\nmax_workers = 9\nworkers = 9\n"), 0);
	assert_int_equal(cfg->max_workers, 9);
	assert_true(cfg->max_workers_given);
	expect_error("[daemon]\nworkers = 3\nmax_workers = 2\n", 3,
		     "[daemon] max_workers: \"2\" is less than workers (3)");
	expect_error("[daemon]\nmax_workers = 257\n", 2,
		     "[daemon] max_workers: \"257\" is not an integer in 1..256");
}

/* workers = auto, its bounds and its CPU budget. */
static void test_workers_auto(void **state)
{
	(void)state;
	long cpus = config_cpus();
	assert_int_equal(load_text("[daemon]\nworkers = 4\n"), 0);
	assert_false(cfg->workers_auto);
	assert_int_equal(cfg->min_workers, 1);
	assert_true(config_cpu_budget_cores(cfg, 16) == 15.0);
	assert_true(config_cpu_budget_cores(cfg, 1) == 1.0);
	/* auto starts at min_workers */
	assert_int_equal(load_text("[daemon]\nworkers = auto\n"), 0);
	assert_true(cfg->workers_auto);
	assert_int_equal(cfg->workers, 1);
	assert_int_equal(cfg->max_workers, cpus > 1 ? cpus : 1);
	assert_int_equal(load_text("[daemon]\nworkers = auto\nmin_workers = 3\nmax_workers = 8\n"
				   "worker_cpu_budget = 6.5\n"), 0);
	assert_int_equal(cfg->workers, 3);
	assert_true(config_cpu_budget_cores(cfg, 16) == 6.5);
	assert_int_equal(load_text("[daemon]\nworkers = auto\nworker_cpu_budget = 75%\n"), 0);
	assert_true(config_cpu_budget_cores(cfg, 16) == 12.0);
	assert_int_equal(load_text("[daemon]\nworker_cpu_budget = 0.25\n"), 0);
	assert_true(config_cpu_budget_cores(cfg, 16) == 0.25);
	expect_error("[daemon]\nworkers = auto\nmin_workers = 9\nmax_workers = 4\n", 3,
		     "[daemon] min_workers: \"9\" is more than max_workers (4)");
	expect_error("[daemon]\nworkers = Auto\n", 2,
		     "[daemon] workers: \"Auto\" is not an integer in 1..256 or auto");
	expect_error("[daemon]\nworker_cpu_budget = 0\n", 2,
		     "[daemon] worker_cpu_budget: \"0\" is not a number of cores in 0.001..4096");
	expect_error("[daemon]\nworker_cpu_budget = 101%\n", 2,
		     "[daemon] worker_cpu_budget: \"101%\" is not a percent in 1..100");
	const char *bad[] = {"", "%", "7.", ".5", "7.5%", "12 cores", "-1", "1e3", "5%%", NULL};
	for (int i = 0; bad[i]; i++)
		expect_error(textf("[daemon]\nworker_cpu_budget = %s\n", bad[i]), 2,
			     "is not a number of cores (\"12\", \"7.5\") or a percent");
}

struct diff_seen {
	char text[512];
};

static void note_diff(void *ctx, const char *pipeline, const char *key)
{
	struct diff_seen *d = ctx;
	size_t len = strlen(d->text);
	snprintf(d->text + len, sizeof(d->text) - len, "%s%s:%s", len ? " " : "",
		 pipeline ? pipeline : "daemon", key);
}

/* config_diff names each changed key, and only those. */
static void test_diff(void **state)
{
	static const char base[] = "[daemon]\nworkers = 2\nmax_workers = 4\n"
				   "[pipeline.a]\nsource = raw:/d\nbatch_size = 4\nrecord_bytes = 8\n"
				   "[pipeline.b]\nsource = tokens:/t\ntoken_dtype = uint16\nseq_len = 9\n"
				   "batch_size = 2\n";
	static const struct {
		const char *text;
		const char *want;
	} cases[] = {
		{base, ""},
		/* the same pipelines in another order: no change */
		{"[daemon]\nworkers = 2\nmax_workers = 4\n"
		 "[pipeline.b]\nsource = tokens:/t\ntoken_dtype = uint16\nseq_len = 9\nbatch_size = 2\n"
		 "[pipeline.a]\nsource = raw:/d\nbatch_size = 4\nrecord_bytes = 8\n", ""},
		{"[daemon]\nworkers = 3\nmax_workers = 4\nlog_level = debug\nshm_bytes = 2G\n"
		 "[pipeline.a]\nsource = tokens:/d\ntoken_dtype = uint16\nseq_len = 9\nbatch_size = 4\n"
		 "[pipeline.c]\nsource = raw:/d\nbatch_size = 4\nrecord_bytes = 8\n",
		 "daemon:workers daemon:shm_bytes daemon:log_level a:source a:record_bytes "
		 "a:token_dtype a:seq_len a:token_output b:(removed) c:(added)"},
	};
	struct config *old = malloc(sizeof(*old));
	assert_non_null(old);
	assert_int_equal(load_text(base), 0);
	memcpy(old, cfg, sizeof(*old));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct diff_seen seen = {{0}};
		if (load_text(cases[i].text) != 0)
			fail_msg("case %zu: %s", i, err);
		config_diff(old, cfg, note_diff, &seen);
		if (strcmp(seen.text, cases[i].want) != 0)
			fail_msg("case %zu: config_diff saw \"%s\", expected \"%s\"", i, seen.text,
				 cases[i].want);
	}
	free(old);
}

/* decode_scale: fast by default, full when given, nothing else; image
 * sources only; a change is a change config_diff names (so a reload
 * refuses it: it takes a restart). */
static void test_decode_scale(void **state)
{
	const char *img = "[pipeline.i]\nsource = imagefolder:/d\nbatch_size = 8\n"
			  "transform = center_crop(8)\n";
	char text[512];
	assert_int_equal(load_text(img), 0);
	assert_int_equal(cfg->pipelines[0].decode_scale, DECODE_SCALE_FAST);
	snprintf(text, sizeof(text), "%sdecode_scale = fast\n", img);
	assert_int_equal(load_text(text), 0);
	assert_int_equal(cfg->pipelines[0].decode_scale, DECODE_SCALE_FAST);
	snprintf(text, sizeof(text), "%sdecode_scale = full\n", img);
	assert_int_equal(load_text(text), 0);
	assert_int_equal(cfg->pipelines[0].decode_scale, DECODE_SCALE_FULL);
	assert_int_equal(config_key_line(cfg, &cfg->pipelines[0], "decode_scale"), 5);

	struct config *old = malloc(sizeof(*old));
	assert_non_null(old);
	memcpy(old, cfg, sizeof(*old));
	assert_int_equal(load_text(img), 0);
	struct diff_seen seen = {{0}};
	config_diff(old, cfg, note_diff, &seen);
	assert_string_equal(seen.text, "i:decode_scale");
	free(old);

	snprintf(text, sizeof(text), "%sdecode_scale = exact\n", img);
	expect_error(text, 5, "[pipeline.i] decode_scale: ");
	snprintf(text, sizeof(text), "%sdecode_scale = 8\n", img);
	expect_error(text, 5, "[pipeline.i] decode_scale: ");
	expect_error("[pipeline.r]\nsource = raw:/r\nbatch_size = 1\nrecord_bytes = 4\n"
		     "decode_scale = full\n", 5, "[pipeline.r] decode_scale does not apply to a raw source");
}

static const struct error_case {
	const char *text;
	int line;
	const char *want;
} error_cases[] = {
	/* The messages promised in the config reference. */
	{"[pipeline.train]\nsource = raw:/d\nbatch_size = abc\nrecord_bytes = 4\n", 3,
	 "[pipeline.train] batch_size: \"abc\" is not an integer in 1..65536"},
	{"[daemon]\nworkers = 2\nwokers = 3\n", 3, "unknown key \"wokers\" in [daemon]"},
	{"[daemon]\n\n[pipline.x]\n", 3, "unknown section [pipline.x]"},
	{"[daemon]\n[pipeline.train]\nsource = raw:/d\nbatch_size = 1\nrecord_bytes = 1\n"
	 "[daemon.x]\nworkers = 1\n", 6, "unknown section [daemon.x]"},
	{"[pipeline.train]\nsource = raw:/d\nbatch_size = 1\nrecord_bytes = 1\n\n"
	 "[pipeline.other]\nsource = raw:/d\nbatch_size = 1\nrecord_bytes = 1\n"
	 "[pipeline.train]\nsource = raw:/e\n", 10,
	 "duplicate pipeline \"train\" (first defined on line 1)"},
	{"[pipeline.train]\nsource = raw:/d\nseed = 1\nseed = 2\n", 4,
	 "duplicate key \"seed\" in [pipeline.train]"},
	{"[daemon]\nworkers = 1\nworkers = 1\n", 3, "duplicate key \"workers\" in [daemon]"},
	{"[daemon]\nworkers = 1\n[daemon]\n", 3, "duplicate section [daemon] (first defined on line 1)"},
	{"[daemon]\nworkers = 1\n\nthis is not ini\n", 4, "syntax error"},
	{"[daemon\nworkers = 1\n", 1, "syntax error"},
	{"[daemon] workers = 1\n", 1, "syntax error"},
	{"[daemon]\nworkers\n", 2, "syntax error"},
	{"[daemon]\n  workers = 1\n    max_depth = 2\n  default_depth\n", 4, "syntax error"},
	{"workers = 1\n[daemon]\n", 1, "key \"workers\" is outside any section"},
	/* Required keys, reported at the header. */
	{"[daemon]\n[pipeline.train]\nsource = raw:/d\nrecord_bytes = 8\n[daemon.x]\n", 2,
	 "[pipeline.train] missing required key \"batch_size\""},
	{"[pipeline.train]\nbatch_size = 8\nrecord_bytes = 8\n", 1,
	 "[pipeline.train] missing required key \"source\""},
	{"[pipeline.a]\n", 1, "[pipeline.a] missing required key \"source\""},
	{"[pipeline.a]\nsource = raw:/d\nbatch_size = 8\n", 1,
	 "[pipeline.a] missing required key \"record_bytes\""},
	{"[pipeline.a]\nsource = tokens:/d\nbatch_size = 8\nseq_len = 4\n", 1,
	 "[pipeline.a] missing required key \"token_dtype\""},
	{"[pipeline.a]\nsource = tokens:/d\nbatch_size = 8\ntoken_dtype = uint16\n", 1,
	 "[pipeline.a] missing required key \"seq_len\""},
	/* Keys of the other source kind, wherever source is. */
	{"[pipeline.a]\nsource = tokens:/d\nbatch_size = 8\ntoken_dtype = uint16\nseq_len = 4\n"
	 "record_bytes = 4\n", 6, "[pipeline.a] record_bytes does not apply to a tokens source"},
	{"[pipeline.a]\nseq_len = 4\nbatch_size = 8\nsource = raw:/d\nrecord_bytes = 4\n", 2,
	 "[pipeline.a] seq_len does not apply to a raw source"},
	{"[pipeline.a]\nsource = raw:/d\nbatch_size = 8\nrecord_bytes = 4\ntoken_output = int64\n"
	 "token_dtype = uint16\n", 5, "[pipeline.a] token_output does not apply to a raw source"},
	/* Pipeline names. */
	{"[pipeline.b@d]\n", 1, "invalid pipeline name \"b@d\""},
	{"[pipeline.]\n", 1, "invalid pipeline name \"\""},
	{"[pipeline]\n", 1, "unknown section [pipeline]"},
	{"[ daemon ]\n", 1, "unknown section [ daemon ]"},
	{"[Daemon]\n", 1, "unknown section [Daemon]"},
	{"[daemon]\nWorkers = 1\n", 2, "unknown key \"Workers\" in [daemon]"},
	{"[pipeline.a b]\n", 1, "invalid pipeline name \"a b\""},
	{"[pipeline.0123456789012345678901234567890123456789012345678901234567890123]\n", 1,
	 "invalid pipeline name"},
	/* Integers: decimal only, range-checked, nothing around them. */
	{"[daemon]\nworkers = 0\n", 2, "[daemon] workers: \"0\" is not an integer in 1..256"},
	{"[daemon]\nworkers = 257\n", 2, "[daemon] workers: \"257\" is not an integer in 1..256"},
	{"[daemon]\nworkers = -1\n", 2, "[daemon] workers: \"-1\" is not an integer in 1..256"},
	{"[daemon]\nworkers = +1\n", 2, "[daemon] workers: \"+1\" is not an integer in 1..256"},
	{"[daemon]\nworkers = 0x10\n", 2, "[daemon] workers: \"0x10\" is not an integer"},
	{"[daemon]\nworkers = 1 2\n", 2, "[daemon] workers: \"1 2\" is not an integer"},
	{"[daemon]\nworkers = 4 # four\n", 2, "[daemon] workers: \"4 # four\" is not an integer"},
	{"[daemon]\nworkers =\n", 2, "[daemon] workers: \"\" is not an integer"},
	{"[daemon]\nworkers = 4294967297\n", 2, "[daemon] workers: \"4294967297\" is not an integer"},
	{"[daemon]\nstaging_slots = 1025\n", 2, "staging_slots: \"1025\" is not an integer in 1..1024"},
	{"[daemon]\nmax_depth = 0\n", 2, "max_depth: \"0\" is not an integer in 1..1024"},
	{"[daemon]\nmax_depth = 1025\n", 2, "max_depth: \"1025\" is not an integer in 1..1024"},
	{"[daemon]\nmax_clients = 4097\n", 2, "max_clients: \"4097\" is not an integer in 1..4096"},
	{"[daemon]\nhandshake_timeout_ms = 99\n", 2,
	 "[daemon] handshake_timeout_ms: \"99\" is not an integer in 100..600000"},
	{"[daemon]\nhandshake_timeout_ms = 600001\n", 2,
	 "[daemon] handshake_timeout_ms: \"600001\" is not an integer in 100..600000"},
	{"[daemon]\nmax_handshakes = 0\n", 2, "max_handshakes: \"0\" is not an integer in 1..4096"},
	{"[daemon]\nmax_handshakes = 4097\n", 2, "max_handshakes: \"4097\" is not an integer in 1..4096"},
	{"[daemon]\ngroup_timeout_ms = 86400001\n", 2,
	 "[daemon] group_timeout_ms: \"86400001\" is not an integer in 0..86400000"},
	{"[daemon]\ngroup_timeout_ms = -1\n", 2, "[daemon] group_timeout_ms: \"-1\" is not an integer"},
	{"[pipeline.a]\nseed = 18446744073709551616\n", 2,
	 "seed: \"18446744073709551616\" is not an integer in 0..18446744073709551615"},
	{"[pipeline.a]\nbatch_size = 65537\n", 2, "batch_size: \"65537\" is not an integer in 1..65536"},
	{"[pipeline.a]\nbatch_size = 0\n", 2, "batch_size: \"0\" is not an integer in 1..65536"},
	{"[pipeline.a]\nchunk = 65\n", 2, "chunk: \"65\" is not an integer in 0..64"},
	{"[pipeline.a]\nrecord_bytes = 1073741825\n", 2,
	 "record_bytes: \"1073741825\" is not an integer in 1..1073741824"},
	{"[pipeline.a]\nseq_len = 16777217\n", 2, "seq_len: \"16777217\" is not an integer in 1..16777216"},
	/* Other value types. */
	{"[daemon]\nshm_bytes = 1X\n", 2, "[daemon] shm_bytes: \"1X\" is not a size"},
	{"[daemon]\nshm_bytes = 0\n", 2, "[daemon] shm_bytes: \"0\" is not a size in 1.."},
	{"[daemon]\nshm_bytes = 16777216T\n", 2, "[daemon] shm_bytes: \"16777216T\" is not a size in 1.."},
	{"[daemon]\nshm_bytes = 8388608T\n", 2, "[daemon] shm_bytes: \"8388608T\" is not a size in 1.."},
	{"[daemon]\nsocket_mode = 0778\n", 2, "socket_mode: \"0778\" is not an octal mode in 0..0777"},
	{"[daemon]\nsocket_mode = 01000\n", 2, "socket_mode: \"01000\" is not an octal mode"},
	{"[daemon]\nsocket_mode = rw\n", 2, "socket_mode: \"rw\" is not an octal mode"},
	{"[daemon]\nsocket_mode =\n", 2, "socket_mode: \"\" is not an octal mode"},
	{"[daemon]\nlog_level = loud\n", 2,
	 "log_level: \"loud\" is not one of error|warning|notice|info|debug"},
	{"[daemon]\nsocket_group = 0123456789012345678901234567890123456789012345678901234567890123\n",
	 2, "socket_group: \"0123456789012345678901234567890123456789012345678901234567890123\" is "
	 "too long (64 bytes, at most 63)"},
	{"[daemon]\nsocket = /run/0123456789012345678901234567890123456789012345678901234567890123"
	 "4567890123456789012345678901234567890123456789/s\n", 2, "socket: \"/run/0123456789"},
	{"[pipeline.a]\nshuffle = maybe\n", 2,
	 "[pipeline.a] shuffle: \"maybe\" is not a boolean (true/false/yes/no/on/off/1/0)"},
	{"[pipeline.a]\ndrop_last = 2\n", 2, "drop_last: \"2\" is not a boolean"},
	{"[pipeline.a]\ntoken_dtype = int32\n", 2, "token_dtype: \"int32\" is not one of uint16|uint32"},
	{"[pipeline.a]\ntoken_output = float32\n", 2,
	 "token_output: \"float32\" is not one of uint16|uint32|int32|int64"},
	{"[pipeline.a]\nsource = jpeg:/d\n", 2, "source: \"jpeg:/d\" is not raw:PATH, tokens:PATH, imagefolder:ROOT, tar:PATTERN, megatron:PREFIX or llmc:PATTERN"},
	{"[pipeline.a]\nsource = /d\n", 2, "source: \"/d\" is not raw:PATH, tokens:PATH, imagefolder:ROOT, tar:PATTERN, megatron:PREFIX or llmc:PATTERN"},
	{"[pipeline.a]\nsource = raw:\n", 2, "source: \"raw:\" has an empty path"},
	{"[pipeline.a]\nsource = tokens:   ; comment\n", 2, "source: \"tokens:\" has an empty path"},
	{"[pipeline.a]\nsource =\n", 2, "source: \"\" is not raw:PATH, tokens:PATH, imagefolder:ROOT, tar:PATTERN, megatron:PREFIX or llmc:PATTERN"},
	/* Each problem is reported, whatever else is wrong in the file
	 * (test_config_report.c checks that all of them are). */
	{"[daemon]\nworkers = x\nwokers = 1\n[nope]\n", 2, "workers: \"x\""},
	{"[daemon]\nnot ini\nwokers = 1\n", 2, "syntax error"},
	{"[daemon]\nwokers = 1\nnot ini\n", 2, "unknown key \"wokers\""},
	{"[pipeline.a]\nsource = raw:/d\n\nnot ini\n[daemon]\n", 1, "missing required key \"batch_size\""},
	{"[pipeline.a]\nsource = raw:/d\nbatch_size = x\n[daemon]\n", 3, "batch_size: \"x\""},
	{"[daemon]\nworkers = 1\n[pipeline.a]\nsource = raw:/d\nbatch_size = 2\nrecord_bytes = 1\n"
	 "[pipeline.a]\n", 7, "duplicate pipeline \"a\" (first defined on line 3)"},
};

static void test_errors(void **state)
{
	for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++)
		expect_error(error_cases[i].text, error_cases[i].line, error_cases[i].want);
}

static void test_error_unreadable(void **state)
{
	char missing[PATH_MAX + 32];
	snprintf(missing, sizeof(missing), "%s/no-such.conf", tmp_dir);
	assert_int_equal(config_load(missing, cfg, err, sizeof(err)), -ENOENT);
	char want[PATH_MAX + 64];
	snprintf(want, sizeof(want), "%s: %s", missing, strerror(ENOENT));
	assert_string_equal(err, want);
	/* Not a regular file: refused from its stat, never opened (a FIFO
	 * would block until a writer came). */
	assert_int_equal(config_load(tmp_dir, cfg, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s: not a regular file (a directory)", tmp_dir);
	assert_string_equal(err, want);
	char fifo[PATH_MAX + 32];
	snprintf(fifo, sizeof(fifo), "%s/fifo.conf", tmp_dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(config_load(fifo, cfg, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s: not a regular file (a FIFO)", fifo);
	assert_string_equal(err, want);
	assert_int_equal(unlink(fifo), 0);
	assert_int_equal(config_load("/dev/null", cfg, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "/dev/null: not a regular file (a character device)");
	/* A small or absent message buffer is never overrun. */
	assert_int_equal(load_text("[daemon]\nwokers = 1\n"), -EINVAL);
	char small[8] = "xxxxxxx";
	assert_int_equal(config_load(conf_path, cfg, small, 4), -EINVAL);
	assert_int_equal(strlen(small), 3);
	assert_int_equal(config_load(conf_path, cfg, NULL, 0), -EINVAL);
}

/* config_key_line: the line each key was set on, 0 when left to its
 * default or not a key of the section. */
static void test_key_lines(void **state)
{
	assert_int_equal(load_text("; a comment\n"
				   "[daemon]\n"
				   "workers = 1\n"
				   "\n"
				   "socket_group = training\n"
				   "[pipeline.a]\n"
				   "batch_size = 4\n"
				   "source = raw:/data/a.bin\n"
				   "record_bytes = 8\n"
				   "[pipeline.b]\n"
				   "  source = tokens:/data/b.bin ; indented\n"
				   "token_dtype = uint16\n"
				   "seq_len = 3\n"
				   "batch_size = 1\n"), 0);
	assert_int_equal(config_key_line(cfg, NULL, "workers"), 3);
	assert_int_equal(config_key_line(cfg, NULL, "socket_group"), 5);
	assert_int_equal(config_key_line(cfg, NULL, "worker_program"), 0);
	assert_int_equal(config_key_line(cfg, NULL, "source"), 0);
	assert_int_equal(config_key_line(cfg, NULL, "nonsense"), 0);
	assert_int_equal(config_key_line(cfg, config_pipeline(cfg, "a"), "source"), 8);
	assert_int_equal(config_key_line(cfg, config_pipeline(cfg, "a"), "batch_size"), 7);
	assert_int_equal(config_key_line(cfg, config_pipeline(cfg, "a"), "seed"), 0);
	assert_int_equal(config_key_line(cfg, config_pipeline(cfg, "b"), "source"), 11);
	assert_int_equal(config_key_line(cfg, config_pipeline(cfg, "b"), "workers"), 0);
	/* A file without those keys: all 0, also after a load that set them. */
	assert_int_equal(load_text("[daemon]\nworkers = 2\n"), 0);
	assert_int_equal(config_key_line(cfg, NULL, "socket_group"), 0);
	assert_int_equal(config_key_line(cfg, NULL, "workers"), 2);
}

static void test_lines(void **state)
{
	/* Too many pipelines: the first header past the limit. */
	size_t cap = (size_t)(ARENA_PIPELINES_MAX + 1) * 96;
	char *text = malloc(cap);
	assert_non_null(text);
	size_t len = 0;
	for (int i = 0; i <= ARENA_PIPELINES_MAX; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"[pipeline.p%d]\nsource = raw:/d\nbatch_size = 1\nrecord_bytes = 1\n", i);
	expect_error(text, 4 * ARENA_PIPELINES_MAX + 1, "too many pipelines (at most 64)");
	*strrchr(text, '[') = '\0'; /* drop the last pipeline */
	assert_int_equal(load_text(text), 0);
	assert_int_equal(cfg->n_pipelines, ARENA_PIPELINES_MAX);
	free(text);

	/* Lines longer than inih's own buffer keep their whole value. */
	char path[ARENA_PATH_MAX + 1];
	memset(path, 'p', sizeof(path));
	path[0] = '/';
	path[ARENA_PATH_MAX - 1] = '\0'; /* the longest path: 4095 bytes */
	assert_int_equal(load_text(textf("[pipeline.a]\nbatch_size = 3\n  source =   raw:%s  ; c\n"
					 "record_bytes = 7\n", path)), 0);
	assert_string_equal(cfg->pipelines[0].path, path);
	assert_int_equal(cfg->pipelines[0].record_bytes, 7);
	assert_int_equal(load_text(textf("[daemon]\nworkers = 1\nworker_program = %s\n"
					 "max_depth = 1\n", path)), 0);
	assert_string_equal(cfg->worker_program, path);
	assert_int_equal(cfg->max_depth, 1);
	path[ARENA_PATH_MAX - 1] = 'p';
	path[ARENA_PATH_MAX] = '\0'; /* one byte too long */
	expect_error(textf("[pipeline.a]\nbatch_size = 3\nsource = raw:%s\n", path), 3,
		     "the path is too long (at most 4095 bytes)");
	expect_error(textf("[daemon]\nworkers = 1\nworker_program = %s\n", path), 3,
		     "(4096 bytes, at most 4095)");
	assert_non_null(strstr(err, "worker_program: \"/ppp"));
	expect_error(textf("[daemon]\nsocket_group = %s\n", path), 2, "socket_group: \"/ppp");
	expect_error(textf("[daemon]\nworkers = 1\n%s = 1\n", path), 3, "syntax error");
	expect_error(textf("[daemon]\nworkers = 1\n;%s%s\n", path, path), 3, "line is longer than");
	assert_int_equal(load_text(textf("[daemon]\nworkers = 1\n; %s\nmax_depth = 3\n", path)), 0);
	assert_int_equal(cfg->max_depth, 3);

	/* A NUL byte would hide the rest of its line. */
	write_file(conf_path, "[daemon]\nworkers = 1\0 2\n", 23);
	assert_int_equal(config_load(conf_path, cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, ":2: line contains a NUL byte"));
	/* A byte order mark before a header. */
	assert_int_equal(load_text("\xEF\xBB\xBF[daemon]\nworkers = 3\n"), 0);
	assert_int_equal(cfg->workers, 3);
	/* No newline at the end of the file. */
	assert_int_equal(load_text("[daemon]\nworkers = 5"), 0);
	assert_int_equal(cfg->workers, 5);
}

static void test_parse_size(void **state)
{
	static const struct {
		const char *text;
		int ret;
		uint64_t value;
	} cases[] = {
		{"0", 0, 0}, {"64", 0, 64}, {"4K", 0, 4096}, {"4KiB", 0, 4096},
		{"16M", 0, 16u << 20}, {"16MiB", 0, 16u << 20}, {"1G", 0, 1u << 30},
		{"1GiB", 0, 1u << 30}, {"2T", 0, 2ull << 40}, {"2TiB", 0, 2ull << 40},
		{"007K", 0, 7u << 10}, {"18446744073709551615", 0, UINT64_MAX},
		{"16777215T", 0, 16777215ull << 40}, {"17179869183G", 0, 17179869183ull << 30},
		{"18446744073709551616", -ERANGE, 0}, {"16777216T", -ERANGE, 0},
		{"17179869184G", -ERANGE, 0}, {"99999999999999999999999K", -ERANGE, 0},
		{"", -EINVAL, 0}, {"K", -EINVAL, 0}, {"1k", -EINVAL, 0}, {"1KB", -EINVAL, 0},
		{"1B", -EINVAL, 0}, {"1 K", -EINVAL, 0}, {" 1", -EINVAL, 0}, {"1 ", -EINVAL, 0},
		{"-1", -EINVAL, 0}, {"+1", -EINVAL, 0}, {"0x10", -EINVAL, 0}, {"1.5G", -EINVAL, 0},
		{"1Gi", -EINVAL, 0}, {"1GiBs", -EINVAL, 0}, {"1P", -EINVAL, 0},
		{"99999999999999999999999X", -EINVAL, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 12345;
		int ret = config_parse_size(cases[i].text, &v);
		if (ret != cases[i].ret || (ret == 0 && v != cases[i].value) || (ret != 0 && v != 12345))
			fail_msg("config_parse_size(\"%s\") = %d, %llu; expected %d, %llu", cases[i].text,
				 ret, (unsigned long long)v, cases[i].ret,
				 (unsigned long long)cases[i].value);
	}
	assert_int_equal(load_text("[daemon]\nshm_bytes = 9223372036854775807\n"), 0);
	assert_int_equal(cfg->shm_bytes, INT64_MAX);
	assert_int_equal(load_text("[daemon]\nshm_bytes = 1\n"), 0);
	assert_int_equal(cfg->shm_bytes, 1);
}

static void test_values(void **state)
{
	static const char *const yes[] = {"true", "yes", "on", "1", "TRUE", "On"};
	static const char *const no[] = {"false", "no", "off", "0", "False", "NO"};
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		assert_int_equal(load_text(textf("[pipeline.a]\nsource = raw:/d\nbatch_size = 1\n"
						 "record_bytes = 1\nshuffle = %s\ndrop_last = %s\n",
						 no[i], yes[i])), 0);
		assert_false(cfg->pipelines[0].shuffle);
		assert_true(cfg->pipelines[0].drop_last);
	}
	static const struct {
		const char *text;
		uint32_t mode;
	} modes[] = {{"0", 0}, {"0660", 0660}, {"660", 0660}, {"0777", 0777}, {"00600", 0600}};
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		assert_int_equal(load_text(textf("[daemon]\nsocket_mode = %s\n", modes[i].text)), 0);
		assert_int_equal(cfg->socket_mode, modes[i].mode);
	}
	static const char *const levels[] = {"error", "warning", "notice", "info", "debug"};
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(load_text(textf("[daemon]\nlog_level = %s\n", levels[i])), 0);
		assert_int_equal(cfg->log_level, LOG_LEVEL_ERROR + (int)i);
	}
	/* The longest pipeline name. */
	static const char name63[] = "-_.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	assert_int_equal(strlen(name63), 65);
	assert_int_equal(load_text(textf("[pipeline.%.63s]\nsource = raw:/d\nbatch_size = 1\n"
					 "record_bytes = 1\n", name63)), 0);
	assert_int_equal(strlen(cfg->pipelines[0].name), 63);
	assert_int_equal(strncmp(cfg->pipelines[0].name, name63, 63), 0);
	/* Empty strings keep the defaults; leading zeros are still decimal. */
	assert_int_equal(load_text("[daemon]\nsocket =\nsocket_group =\nworker_program =\n"
				   "workers = 010\n"), 0);
	assert_string_equal(cfg->socket, "");
	assert_string_equal(cfg->socket_group, "");
	assert_string_equal(cfg->worker_program, "");
	assert_int_equal(cfg->workers, 10);
	/* The longest socket path that fits sockaddr_un. */
	char sock[200];
	memset(sock, 's', sizeof(sock));
	sock[0] = '/';
	sock[107] = '\0';
	assert_int_equal(load_text(textf("[daemon]\nsocket = %s\n", sock)), 0);
	assert_string_equal(cfg->socket, sock);
	sock[107] = 's';
	sock[108] = '\0';
	expect_error(textf("[daemon]\nsocket = %s\n", sock), 2, "is too long (108 bytes, at most 107)");
}

static void test_relative_source(void **state)
{
	char dir[PATH_MAX + 32], path[PATH_MAX + 64], want[PATH_MAX + 64], cwd[PATH_MAX];
	static const char text[] = "[pipeline.a]\nsource = raw:data/a.bin\nbatch_size = 1\n"
				   "record_bytes = 1\n[pipeline.b]\nsource = tokens:/abs/b.bin\n"
				   "batch_size = 1\ntoken_dtype = uint16\nseq_len = 1\n"
				   "[pipeline.c]\nsource = raw:../c.bin\nbatch_size = 1\nrecord_bytes = 1\n";
	snprintf(dir, sizeof(dir), "%s/etc", tmp_dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/loaderd.conf", dir);
	write_file(path, text, strlen(text));

	assert_int_equal(config_load(path, cfg, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "%s/data/a.bin", dir);
	assert_string_equal(cfg->pipelines[0].path, want);
	assert_string_equal(cfg->pipelines[1].path, "/abs/b.bin");
	snprintf(want, sizeof(want), "%s/../c.bin", dir);
	assert_string_equal(cfg->pipelines[2].path, want);

	/* A relative config path is made absolute with the working directory. */
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(tmp_dir), 0);
	assert_int_equal(config_load("etc/loaderd.conf", cfg, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "%s/etc/data/a.bin", tmp_dir);
	assert_string_equal(cfg->pipelines[0].path, want);
	assert_int_equal(chdir(dir), 0);
	assert_int_equal(config_load("loaderd.conf", cfg, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "%s/data/a.bin", dir);
	assert_string_equal(cfg->pipelines[0].path, want);
	/* From the root directory, without a doubled slash. */
	assert_int_equal(chdir("/"), 0);
	snprintf(path, sizeof(path), "%s/loaderd.conf", dir + 1);
	assert_int_equal(config_load(path, cfg, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "%s/data/a.bin", dir);
	assert_string_equal(cfg->pipelines[0].path, want);
	assert_int_equal(chdir(cwd), 0);
}

static void test_example_config(void **state)
{
	const char *src = getenv("LOADERD_SOURCE_DIR");
	if (!src || !*src) {
		print_message("LOADERD_SOURCE_DIR is not set: skipping the example config\n");
		skip();
	}
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/systemd/loaderd.conf", src);
	int ret = config_load(path, cfg, err, sizeof(err));
	if (ret != 0)
		fail_msg("%s: %d: %s", path, ret, err);
	/* Installed as the service's configuration, it starts as it is: its
	 * example pipelines are commented out (test_install.py serves one). */
	assert_int_equal(cfg->n_pipelines, 0);
	/* The unit runs as an unprivileged user, for whom the default socket is
	 * under $XDG_RUNTIME_DIR: the example names the system path. */
	assert_string_equal(cfg->socket, "/run/loaderd/loaderd.sock");
	/* Otherwise the example documents the defaults: it must not change them. */
	struct config *defaults = malloc(sizeof(*defaults));
	assert_non_null(defaults);
	config_defaults(defaults);
	assert_int_equal(cfg->workers, defaults->workers);
	assert_int_equal(cfg->shm_bytes, defaults->shm_bytes);
	assert_int_equal(cfg->staging_slots, defaults->staging_slots);
	assert_int_equal(cfg->default_depth, defaults->default_depth);
	assert_int_equal(cfg->max_depth, defaults->max_depth);
	assert_int_equal(cfg->max_clients, defaults->max_clients);
	assert_int_equal(cfg->handshake_timeout_ms, defaults->handshake_timeout_ms);
	assert_int_equal(cfg->max_handshakes, defaults->max_handshakes);
	assert_int_equal(cfg->socket_mode, defaults->socket_mode);
	assert_int_equal(cfg->log_level, defaults->log_level);
	free(defaults);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_full_file),
		cmocka_unit_test(test_direct),
		cmocka_unit_test(test_images),
		cmocka_unit_test(test_token_output),
		cmocka_unit_test(test_decode_keys),
		cmocka_unit_test(test_worker_nice),
		cmocka_unit_test(test_runtime_reserves),
		cmocka_unit_test(test_declaration),
		cmocka_unit_test(test_depths),
		cmocka_unit_test(test_max_workers),
		cmocka_unit_test(test_diff),
		cmocka_unit_test(test_decode_scale),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_error_unreadable),
		cmocka_unit_test(test_key_lines),
		cmocka_unit_test(test_lines),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_workers_auto),
		cmocka_unit_test(test_relative_source),
		cmocka_unit_test(test_example_config),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
