/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_worker: the real loaderd-worker executable, driven the way the
 * master drives it (worker/worker.h): a real arena, real data files, real
 * eventfds, fork+exec with fds 3/4/5. Every behaviour runs twice: with
 * io_uring, and with io_uring_setup refused by a seccomp filter (pread).
 * A data file that is not a regular file when the worker first opens it
 * (a FIFO, a symlink to one, a directory, a device, a socket: as if
 * swapped since start) fails its items with -ESPIPE, never blocking.
 */
#include "worker_fixture.h"

static void test_serves_rows(void **state)
{
	struct fixture *fx = *state;
	start_worker(fx);
	serve_batch(fx, PIPE_RAW, 1);
	serve_batch(fx, PIPE_TOKENS, 2);
	serve_batch(fx, PIPE_RAW, 3);
	stop_worker(fx);
}

struct expect {
	struct work_cmd cmd;
	int32_t status;
	uint32_t bad_row;
};

static void test_bad_commands(void **state)
{
	struct fixture *fx = *state;
	start_worker(fx);
	uint64_t ok[WORK_CHUNK_MAX], tok[WORK_CHUNK_MAX], bad[10];
	for (uint32_t k = 0; k < WORK_CHUNK_MAX; k++) {
		ok[k] = (k * 37) % RAW_SAMPLES;
		tok[k] = (k * 37) % TOK_SAMPLES;
	}
	for (uint32_t k = 0; k < 10; k++)
		bad[k] = k == 5 ? RAW_SAMPLES : k;
	uint64_t slot0 = arena_slot_offset(&fx->arena, 0);
	struct expect e[] = {
		{read_cmd(fx, PIPE_RAW, 0, 20, 10, bad), -EINVAL, 25},
		{read_cmd(fx, N_PIPES, 0, 3, 4, ok), -EINVAL, 3},
		{read_cmd(fx, PIPE_RAW, 0, 7, 0, ok), -EINVAL, 7},
		{read_cmd(fx, PIPE_RAW, 0, 8, WORK_CHUNK_MAX, ok), -EINVAL, 8}, /* count 65 below */
		{read_cmd(fx, PIPE_RAW, 0, 0, 4, ok), -EINVAL, 0},  /* slot: the header */
		{read_cmd(fx, PIPE_RAW, 0, 1, 4, ok), -EINVAL, 1},  /* slot: not a slot's start */
		{read_cmd(fx, PIPE_RAW, 0, 2, 4, ok), -EINVAL, 2},  /* slot: the arena's end */
		{read_cmd(fx, PIPE_RAW, 1, 2095, 3, ok), -EINVAL, 2097}, /* ends past the slot */
		{read_cmd(fx, PIPE_RAW, 0, 0, 4, ok), -EINVAL, 0},  /* op 99 below */
		{read_cmd(fx, PIPE_MISSING, 0, 11, 2, ok), -ENOENT, 11},
		{read_cmd(fx, PIPE_RAW, 1, 5, 37, ok), 0, 0},
		{read_cmd(fx, PIPE_TOKENS, 0, 100, WORK_CHUNK_MAX, tok), 0, 0},
	};
	e[3].cmd.count = WORK_CHUNK_MAX + 1;
	e[4].cmd.slot_offset = 0;
	e[5].cmd.slot_offset = slot0 + 4096;
	e[6].cmd.slot_offset = fx->arena.bytes;
	e[8].cmd.op = 99;
	size_t n = sizeof(e) / sizeof(e[0]);
	struct work_cmd cmds[sizeof(e) / sizeof(e[0])];
	for (size_t i = 0; i < n; i++)
		cmds[i] = e[i].cmd;
	struct arena_header hdr = *fx->arena.hdr;
	fill_slots(fx, 0xa5);
	send(fx, cmds, n);
	for (size_t i = 0; i < n; i++) {
		struct work_done d;
		assert_true(wait_done(fx, &d));
		size_t j = (size_t)(d.item_id - e[0].cmd.item_id);
		assert_true(j < n);
		if (d.status != e[j].status || (d.status != 0 && d.bad_row != e[j].bad_row))
			fail_msg("command %zu: status %d row %u, expected %d row %u", j, d.status,
				 d.bad_row, e[j].status, e[j].bad_row);
	}
	/* A bad command writes nothing, not even its good rows. */
	for (uint32_t row = 20; row < 30; row++) {
		const uint8_t *p = slot_row(fx, 0, row, RAW_RECORD_BYTES);
		for (uint32_t b = 0; b < RAW_RECORD_BYTES; b++)
			assert_int_equal(p[b], 0xa5);
	}
	assert_memory_equal(&hdr, fx->arena.hdr, sizeof(hdr));
	for (uint32_t k = 0; k < 37; k++)
		check_row(fx, PIPE_RAW, 1, 5 + k, ok[k]);
	for (uint32_t k = 0; k < WORK_CHUNK_MAX; k++)
		check_row(fx, PIPE_TOKENS, 0, 100 + k, tok[k]);

	/* The worker keeps serving, and an open that failed is tried again. */
	write_file(fx->missing_path, fx->raw, 10 * RAW_RECORD_BYTES);
	struct work_cmd again = read_cmd(fx, PIPE_MISSING, 1, 0, 3, (uint64_t[]){9, 0, 4});
	struct work_done d = run_one(fx, &again);
	assert_int_equal(d.item_id, again.item_id);
	assert_int_equal(d.status, 0);
	check_row(fx, PIPE_RAW, 1, 0, 9);
	check_row(fx, PIPE_RAW, 1, 2, 4);
	stop_worker(fx);
}

/* Items of pipelines whose file is not a regular file fail with -ESPIPE
 * (REGFILE_NOT_REGULAR) at once: nothing waits for a FIFO's writer, and
 * /dev/zero's endless zeros are never delivered as data. The worker goes
 * on serving the other pipelines. */
static void test_not_regular(void **state)
{
	struct fixture *fx = *state;
	start_worker(fx);
	uint64_t samples[4] = {0, 3, 9, 1};
	struct work_cmd cmds[PIPE_SOCKET - PIPE_FIFO + 2];
	size_t n = 0;
	for (uint32_t pipe = PIPE_FIFO; pipe <= PIPE_SOCKET; pipe++)
		cmds[n++] = read_cmd(fx, pipe, 0, 8 * pipe, 4, samples);
	cmds[n++] = read_cmd(fx, PIPE_RAW, 1, 0, 4, samples);
	fill_slots(fx, 0xa5);
	send(fx, cmds, n);
	for (size_t i = 0; i < n; i++) {
		struct work_done d;
		assert_true(wait_done(fx, &d));
		size_t j = (size_t)(d.item_id - cmds[0].item_id);
		assert_true(j < n);
		if (cmds[j].pipeline == PIPE_RAW) {
			assert_int_equal(d.status, 0);
			continue;
		}
		if (d.status != -ESPIPE || d.bad_row != cmds[j].first_row)
			fail_msg("pipeline %u: status %d row %u, expected %d (not a regular file) row %u",
				 cmds[j].pipeline, d.status, d.bad_row, -ESPIPE, cmds[j].first_row);
	}
	for (uint32_t k = 0; k < 4; k++)
		check_row(fx, PIPE_RAW, 1, k, samples[k]);
	/* Nothing was written for the failed items (/dev/zero's zeros
	 * included). */
	const uint8_t *p = slot_row(fx, 0, 0, 1);
	for (uint64_t b = 0; b < (uint64_t)8 * (PIPE_SOCKET + 1) * RAW_RECORD_BYTES; b++)
		assert_int_equal(p[b], 0xa5);
	stop_worker(fx);
}

static void test_file_shrank(void **state)
{
	struct fixture *fx = *state;
	start_worker(fx);
	struct work_cmd c = read_cmd(fx, PIPE_RAW, 0, 0, 2, (uint64_t[]){299, 0});
	struct work_done d = run_one(fx, &c);
	assert_int_equal(d.status, 0);

	/* Sample 150 is now half there; sample 200 not at all. */
	assert_int_equal(truncate(fx->raw_path, 150 * RAW_RECORD_BYTES + 500), 0);
	c = read_cmd(fx, PIPE_RAW, 0, 3, 4, (uint64_t[]){10, 150, 200, 20});
	d = run_one(fx, &c);
	assert_int_equal(d.item_id, c.item_id);
	assert_int_equal(d.status, -ENODATA);
	assert_int_equal(d.bad_row, 4);
	assert_int_equal(d.detail, 500);

	c = read_cmd(fx, PIPE_RAW, 1, 0, 2, (uint64_t[]){149, 5});
	d = run_one(fx, &c);
	assert_int_equal(d.status, 0);
	check_row(fx, PIPE_RAW, 1, 0, 149);
	check_row(fx, PIPE_RAW, 1, 1, 5);
	stop_worker(fx);
}

/* WORK_EXIT behind items: the items complete first, then exit 0. */
static void test_exit_finishes_items(void **state)
{
	struct fixture *fx = *state;
	start_worker(fx);
	uint64_t samples[WORK_CHUNK_MAX];
	for (uint32_t k = 0; k < WORK_CHUNK_MAX; k++)
		samples[k] = RAW_SAMPLES - 1 - k;
	struct work_cmd cmds[4];
	for (uint32_t j = 0; j < 3; j++)
		cmds[j] = read_cmd(fx, PIPE_RAW, j % 2, j * WORK_CHUNK_MAX, WORK_CHUNK_MAX, samples);
	cmds[3] = (struct work_cmd){.item_id = fx->next_item_id++, .op = WORK_EXIT};
	send(fx, cmds, 4);
	for (uint32_t j = 0; j < 3; j++) {
		struct work_done d;
		assert_true(wait_done(fx, &d));
		assert_int_equal(d.status, 0);
	}
	expect_exit_code(fx, WORKER_EXIT_OK);
	struct ring done = arena_done_ring(&fx->arena, 0);
	assert_int_equal(ring_count(&done), 0);
	for (uint32_t j = 0; j < 3; j++) {
		for (uint32_t k = 0; k < WORK_CHUNK_MAX; k++)
			check_row(fx, PIPE_RAW, j % 2, j * WORK_CHUNK_MAX + k, samples[k]);
	}
}

static void test_sigterm(void **state)
{
	struct fixture *fx = *state;
	start_worker(fx);
	assert_int_equal(kill(fx->pid, SIGTERM), 0);
	expect_exit_code(fx, WORKER_EXIT_OK);
}

/* A worker killed mid-batch: after ring_reset, a fresh one serves. */
static void test_sigkill_respawn(void **state)
{
	struct fixture *fx = *state;
	start_worker(fx);
	static struct work_cmd cmds[RING_ENTRIES];
	uint64_t samples[WORK_CHUNK_MAX];
	for (uint32_t k = 0; k < WORK_CHUNK_MAX; k++)
		samples[k] = k;
	for (uint32_t j = 0; j < RING_ENTRIES; j++)
		cmds[j] = read_cmd(fx, PIPE_RAW, j % 2, (j / 2) * WORK_CHUNK_MAX, WORK_CHUNK_MAX,
				   samples);
	send(fx, cmds, RING_ENTRIES);
	assert_int_equal(kill(fx->pid, SIGKILL), 0);
	int status = wait_exit(fx);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	reset_rings(fx);
	start_worker(fx);
	serve_batch(fx, PIPE_RAW, 4);
	serve_batch(fx, PIPE_TOKENS, 5);
	stop_worker(fx);
}

static void expect_argv_exit(struct fixture *fx, char *const *argv, int code)
{
	int fds[3] = {fx->arena.fd, fx->cmd_efd, fx->done_efd};
	spawn(fx, argv, fds, 0);
	expect_exit_code(fx, code);
}

static void test_bad_argv(void **state)
{
	struct fixture *fx = *state;
	char me[16], grandparent[16];
	snprintf(me, sizeof(me), "%d", (int)getpid());
	snprintf(grandparent, sizeof(grandparent), "%d", (int)getppid());
	char *const cases[][8] = {
		{"loaderd-worker", NULL},
		{"loaderd-worker", "--index", NULL},
		{"loaderd-worker", "--index", "0", NULL},
		{"loaderd-worker", "--parent", me, NULL},
		{"loaderd-worker", "--index", "x", "--parent", me, NULL},
		{"loaderd-worker", "--index", "-1", "--parent", me, NULL},
		{"loaderd-worker", "--index", " 1", "--parent", me, NULL},
		{"loaderd-worker", "--index", "0", "--parent", "0", NULL},
		{"loaderd-worker", "--index", "0", "--parent", me, "--verbose", NULL},
		{"loaderd-worker", "--index", "0", "--index", "1", "--parent", me, NULL},
		{"loaderd-worker", "--index", "256", "--parent", me, NULL},
		/* The arena holds rings for N_WORKERS workers only. */
		{"loaderd-worker", "--index", "2", "--parent", me, NULL},
		/* --probe is a mode of its own, alone */
		{"loaderd-worker", "--probe", "--index", "0", "--parent", me, NULL},
		{"loaderd-worker", "--index", "0", "--parent", me, "--probe", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_argv_exit(fx, cases[i], WORKER_EXIT_USAGE);
	/* Reversed order is fine; a parent that is not ours means the master
	 * is already gone. */
	char *const gone[] = {"loaderd-worker", "--parent", grandparent, "--index", "1", NULL};
	expect_argv_exit(fx, gone, WORKER_EXIT_OK);
}

static void test_bad_arena(void **state)
{
	struct fixture *fx = *state;
	char path[128];
	snprintf(path, sizeof(path), "%s/not-an-arena", fx->dir);
	write_file(path, fx->raw, 8192);
	int file_fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(file_fd >= 0);
	unlink(path);

	struct arena other;
	struct arena_plan plan = {.n_pipelines = 1, .n_workers = 1, .n_slots = 1,
				  .slot_bytes = 4096};
	assert_int_equal(arena_create(&plan, &other), 0);
	other.hdr->version = ARENA_VERSION + 1;

	/* The last: without its eventfds the worker was not started by a master. */
	int cases[][4] = {
		{file_fd, fx->cmd_efd, fx->done_efd, WORKER_EXIT_ARENA},
		{other.fd, fx->cmd_efd, fx->done_efd, WORKER_EXIT_ARENA},
		{-1, fx->cmd_efd, fx->done_efd, WORKER_EXIT_ARENA},
		{fx->cmd_efd, fx->cmd_efd, fx->done_efd, WORKER_EXIT_ARENA},
		{fx->arena.fd, -1, fx->done_efd, WORKER_EXIT_USAGE},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		spawn(fx, NULL, cases[i], 0);
		expect_exit_code(fx, cases[i][3]);
	}
	arena_close(&other);
	close(file_fd);
}


int main(void)
{
	if (getenv("LOADERD_BUILD_DIR") == NULL) {
		fprintf(stderr, "test_worker: LOADERD_BUILD_DIR is not set: skipped\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		BOTH_MODES(test_serves_rows),
		BOTH_MODES(test_bad_commands),
		BOTH_MODES(test_not_regular),
		BOTH_MODES(test_file_shrank),
		BOTH_MODES(test_exit_finishes_items),
		BOTH_MODES(test_sigterm),
		BOTH_MODES(test_sigkill_respawn),
		IN_MODE(test_bad_argv, mode_uring),
		IN_MODE(test_bad_arena, mode_uring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
