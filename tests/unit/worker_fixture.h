/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_fixture.h: what the worker's unit tests share: a real arena with
 * raw and token pipelines over real files, the real loaderd-worker
 * spawned the way the master spawns it (with io_uring, or under a seccomp
 * filter refusing io_uring_setup: pread), commands sent and completions
 * awaited. Included by test_worker.c and test_worker_tokens.c only.
 */
#ifndef LDR_TESTS_WORKER_FIXTURE_H
#define LDR_TESTS_WORKER_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/arena.h"
#include "worker/worker.h"

#define RAW_SAMPLES 300
#define RAW_RECORD_BYTES 1000
#define TOK_SEQ_LEN 7
#define TOK_SAMPLES 200
#define TOK_N_TOKENS (TOK_SAMPLES * TOK_SEQ_LEN + 1)
#define TOK_ROW_BYTES ((TOK_SEQ_LEN + 1) * 8)
#define SLOT_BYTES (2u << 20) /* 32 raw items of 64 rows fit in one slot */
#define N_SLOTS 2
#define N_WORKERS 2
#define DEADLINE_MS 20000
#define CHILD_NO_SECCOMP 77 /* the child could not install its filter */
#define INDEX_BYTES (4u * ARENA_ALIGN) /* document tables and shard lists */

enum {
	PIPE_RAW, PIPE_TOKENS, PIPE_MISSING,
	PIPE_FIFO, PIPE_FIFO_LINK, PIPE_DIR, PIPE_DEV_ZERO, PIPE_SOCKET, /* not regular files */
	PIPE_SPLIT, PIPE_DOCS, PIPE_LLMC, /* filled by test_worker_tokens.c */
	N_PIPES
};

struct fixture {
	bool no_uring; /* the worker runs under a filter refusing io_uring_setup */
	char dir[64];
	char raw_path[128];
	char tok_path[128];
	char idx_path[128];
	char missing_path[128];
	char fifo_path[128], link_path[128], socket_path[128];
	uint8_t raw[RAW_SAMPLES * RAW_RECORD_BYTES];
	uint16_t tokens[TOK_N_TOKENS];
	struct arena arena;
	int cmd_efd;
	int done_efd;
	pid_t pid;
	int pidfd;
	uint64_t next_item_id;
};

static inline const char *worker_path(void)
{
	static char path[4096];
	snprintf(path, sizeof(path), "%s/bin/loaderd-worker", getenv("LOADERD_BUILD_DIR"));
	return path;
}

static inline int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static inline void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

static inline void pipeline_fill(struct fixture *fx, uint32_t index, uint32_t kind, const char *path,
			  uint64_t n_samples, uint64_t read_bytes, uint64_t stride, uint32_t in,
			  uint32_t out)
{
	struct arena_pipeline *p = arena_pipeline(&fx->arena, index);
	*p = (struct arena_pipeline){
		.kind = kind, .n_tensors = 1, .n_samples = n_samples,
		.file_bytes = (n_samples - 1) * stride + read_bytes,
		.sample_read_bytes = read_bytes, .sample_stride = stride,
		.split_samples = {n_samples},
		.in_elem_bytes = in, .out_elem_bytes = out,
		.tensor_offset = {0}, .tensor_row_bytes = {read_bytes / in * out},
	};
	snprintf(p->name, sizeof(p->name), "p%u", index);
	snprintf(p->path, sizeof(p->path), "%s", path);
}

/* What the master does before spawning worker 0 (again). */
static inline void reset_rings(struct fixture *fx)
{
	struct ring cmd = arena_cmd_ring(&fx->arena, 0);
	struct ring done = arena_done_ring(&fx->arena, 0);
	ring_reset(&cmd);
	ring_reset(&done);
}

static inline int fixture_setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	assert_non_null(fx);
	fx->no_uring = *(const bool *)*state;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_worker.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->raw_path, sizeof(fx->raw_path), "%s/raw.bin", fx->dir);
	snprintf(fx->tok_path, sizeof(fx->tok_path), "%s/tokens.bin", fx->dir);
	snprintf(fx->missing_path, sizeof(fx->missing_path), "%s/missing.bin", fx->dir);
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < sizeof(fx->raw); i++)
		fx->raw[i] = (uint8_t)rng_next(&seed);
	for (size_t i = 0; i < TOK_N_TOKENS; i++)
		fx->tokens[i] = (uint16_t)rng_next(&seed); /* half have the top bit set */
	write_file(fx->raw_path, fx->raw, sizeof(fx->raw));
	write_file(fx->tok_path, fx->tokens, sizeof(fx->tokens));

	struct arena_plan plan = {.n_pipelines = N_PIPES, .n_workers = N_WORKERS,
				  .n_slots = N_SLOTS, .slot_bytes = SLOT_BYTES,
				  .indexes_bytes = INDEX_BYTES};
	assert_int_equal(arena_create(&plan, &fx->arena), 0);
	pipeline_fill(fx, PIPE_RAW, ARENA_SOURCE_RAW, fx->raw_path, RAW_SAMPLES, RAW_RECORD_BYTES,
		      RAW_RECORD_BYTES, 1, 1);
	pipeline_fill(fx, PIPE_TOKENS, ARENA_SOURCE_TOKENS, fx->tok_path, TOK_SAMPLES,
		      (TOK_SEQ_LEN + 1) * 2, TOK_SEQ_LEN * 2, 2, 8);
	pipeline_fill(fx, PIPE_MISSING, ARENA_SOURCE_RAW, fx->missing_path, 10, RAW_RECORD_BYTES,
		      RAW_RECORD_BYTES, 1, 1);
	snprintf(fx->fifo_path, sizeof(fx->fifo_path), "%s/fifo.bin", fx->dir);
	snprintf(fx->link_path, sizeof(fx->link_path), "%s/link.bin", fx->dir);
	snprintf(fx->socket_path, sizeof(fx->socket_path), "%s/socket.bin", fx->dir);
	assert_int_equal(mkfifo(fx->fifo_path, 0600), 0);
	assert_int_equal(symlink(fx->fifo_path, fx->link_path), 0);
	assert_int_equal(mknod(fx->socket_path, S_IFSOCK | 0600, 0), 0); /* as bind(2) leaves one */
	const char *odd[] = {
		[PIPE_FIFO] = fx->fifo_path, [PIPE_FIFO_LINK] = fx->link_path, [PIPE_DIR] = fx->dir,
		[PIPE_DEV_ZERO] = "/dev/zero", [PIPE_SOCKET] = fx->socket_path,
	};
	for (uint32_t i = PIPE_FIFO; i <= PIPE_SOCKET; i++)
		pipeline_fill(fx, i, ARENA_SOURCE_RAW, odd[i], 10, RAW_RECORD_BYTES, RAW_RECORD_BYTES,
			      1, 1);
	reset_rings(fx);
	/* Non-blocking, as an event loop would make them: the worker must
	 * cope with either. */
	fx->cmd_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	fx->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(fx->cmd_efd >= 0 && fx->done_efd >= 0);
	fx->pid = -1;
	fx->pidfd = -1;
	fx->next_item_id = 100;
	*state = fx;
	return 0;
}

static inline void child_deny_io_uring(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		_exit(CHILD_NO_SECCOMP);
}

/* fork+exec the worker with fds[0..2] as 3/4/5 (-1: left closed). argv
 * NULL: the master's arguments for worker `index`. */
static inline void spawn(struct fixture *fx, char *const *argv, const int fds[3], uint32_t index)
{
	char index_text[16], parent_text[16];
	snprintf(index_text, sizeof(index_text), "%u", index);
	snprintf(parent_text, sizeof(parent_text), "%d", (int)getpid());
	char *const default_argv[] = {"loaderd-worker", "--index", index_text,
				      "--parent", parent_text, NULL};
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (fx->no_uring)
			child_deny_io_uring();
		int tmp[3];
		for (int i = 0; i < 3; i++)
			tmp[i] = fds[i] < 0 ? -1 : fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
		for (int i = 0; i < 3; i++) {
			if (tmp[i] < 0)
				close(3 + i);
			else if (dup2(tmp[i], 3 + i) < 0)
				_exit(126);
		}
		execv(worker_path(), argv != NULL ? argv : default_argv);
		_exit(127);
	}
	fx->pid = pid;
	fx->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	assert_true(fx->pidfd >= 0);
}

/* Waits for the worker to exit; returns its wait status. */
static inline int wait_exit(struct fixture *fx)
{
	struct pollfd pfd = {.fd = fx->pidfd, .events = POLLIN};
	int n;
	do
		n = poll(&pfd, 1, DEADLINE_MS);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		fail_msg("worker %d did not exit within %d ms", (int)fx->pid, DEADLINE_MS);
	int status = 0;
	assert_int_equal(waitpid(fx->pid, &status, 0), fx->pid);
	close(fx->pidfd);
	fx->pidfd = -1;
	fx->pid = -1;
	return status;
}

static inline void expect_exit_code(struct fixture *fx, int code)
{
	int status = wait_exit(fx);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != code)
		fail_msg("worker wait status 0x%x, expected exit %d", (unsigned)status, code);
}

/* The next completion of worker 0, waiting on the done eventfd; fails at
 * once if the worker exits first. Returns false when the worker exited
 * with CHILD_NO_SECCOMP. */
static inline bool wait_done(struct fixture *fx, struct work_done *out)
{
	struct ring done = arena_done_ring(&fx->arena, 0);
	int64_t deadline = now_ms() + DEADLINE_MS;
	while (!ring_pop(&done, out)) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			fail_msg("no completion within %d ms", DEADLINE_MS);
		struct pollfd pfd[2] = {{.fd = fx->done_efd, .events = POLLIN},
					{.fd = fx->pidfd, .events = POLLIN}};
		if (poll(pfd, 2, (int)left) < 0) {
			assert_int_equal(errno, EINTR);
			continue;
		}
		if (pfd[0].revents & POLLIN) {
			uint64_t v;
			assert_int_equal(read(fx->done_efd, &v, sizeof(v)), (ssize_t)sizeof(v));
			continue;
		}
		if ((pfd[1].revents & POLLIN) && !ring_pop(&done, out)) {
			int status = wait_exit(fx);
			if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_NO_SECCOMP)
				return false;
			fail_msg("worker exited (wait status 0x%x) with no completion",
				 (unsigned)status);
		}
		if (pfd[1].revents & POLLIN)
			return true;
	}
	return true;
}

static inline bool io_uring_works(void)
{
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	int fd = (int)syscall(__NR_io_uring_setup, 4, &p);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Spawns worker 0 and waits for its READY. */
static inline void start_worker(struct fixture *fx)
{
	int fds[3] = {fx->arena.fd, fx->cmd_efd, fx->done_efd};
	spawn(fx, NULL, fds, 0);
	struct work_done d;
	if (!wait_done(fx, &d))
		skip();
	assert_int_equal(d.status, WORK_STATUS_READY);
	assert_int_equal(d.item_id, 0);
	bool uring = !fx->no_uring && io_uring_works();
	assert_int_equal(d.flags, uring ? 0 : WORK_FLAG_NO_URING);
}

static inline void send(struct fixture *fx, const struct work_cmd *cmds, size_t n)
{
	struct ring cmd = arena_cmd_ring(&fx->arena, 0);
	for (size_t i = 0; i < n; i++)
		assert_true(ring_push(&cmd, &cmds[i]));
	uint64_t one = 1;
	assert_int_equal(write(fx->cmd_efd, &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* One command sent and its completion taken: the completion. */
static inline struct work_done run_one(struct fixture *fx, const struct work_cmd *c)
{
	struct work_done d;
	send(fx, c, 1);
	assert_true(wait_done(fx, &d));
	return d;
}

static inline struct work_cmd read_cmd(struct fixture *fx, uint32_t pipe, uint32_t slot,
				uint32_t first_row, uint32_t count, const uint64_t *samples)
{
	struct work_cmd c = {.item_id = fx->next_item_id++, .op = WORK_READ, .pipeline = pipe,
			     .slot_offset = arena_slot_offset(&fx->arena, slot),
			     .first_row = first_row, .count = count};
	memcpy(c.sample_index, samples, count * sizeof(samples[0]));
	return c;
}

static inline uint8_t *slot_row(struct fixture *fx, uint32_t slot, uint32_t row, uint64_t row_bytes)
{
	return fx->arena.base + arena_slot_offset(&fx->arena, slot) + row * row_bytes;
}

static inline void check_row(struct fixture *fx, uint32_t pipe, uint32_t slot, uint32_t row,
		      uint64_t sample)
{
	if (pipe == PIPE_RAW) {
		uint8_t *got = slot_row(fx, slot, row, RAW_RECORD_BYTES);
		if (memcmp(got, fx->raw + sample * RAW_RECORD_BYTES, RAW_RECORD_BYTES) != 0)
			fail_msg("raw slot %u row %u: not sample %lu", slot, row, (unsigned long)sample);
		return;
	}
	uint8_t *got = slot_row(fx, slot, row, TOK_ROW_BYTES);
	for (uint32_t j = 0; j <= TOK_SEQ_LEN; j++) {
		int64_t v;
		memcpy(&v, got + j * 8, sizeof(v));
		if (v != (int64_t)fx->tokens[sample * TOK_SEQ_LEN + j])
			fail_msg("tokens slot %u row %u token %u: %lld, expected %u", slot, row, j,
				 (long long)v, fx->tokens[sample * TOK_SEQ_LEN + j]);
	}
}

static inline void fill_slots(struct fixture *fx, uint8_t byte)
{
	memset(fx->arena.base + arena_slot_offset(&fx->arena, 0), byte,
	       (size_t)N_SLOTS * SLOT_BYTES);
}

/* RING_ENTRIES full chunks of shuffled samples, alternating between the two
 * slots, all sent at once: far more reads than the io_uring queue holds. */
static inline void serve_batch(struct fixture *fx, uint32_t pipe, uint64_t seed)
{
	uint64_t n = pipe == PIPE_RAW ? RAW_SAMPLES : TOK_SAMPLES;
	uint64_t perm[RAW_SAMPLES] = {0};
	for (uint64_t i = 0; i < n; i++) { /* inside-out Fisher-Yates */
		uint64_t j = rng_next(&seed) % (i + 1);
		perm[i] = perm[j];
		perm[j] = i;
	}
	static struct work_cmd cmds[RING_ENTRIES];
	for (uint32_t j = 0; j < RING_ENTRIES; j++) {
		uint64_t samples[WORK_CHUNK_MAX];
		for (uint32_t k = 0; k < WORK_CHUNK_MAX; k++)
			samples[k] = perm[(j * WORK_CHUNK_MAX + k) % n];
		cmds[j] = read_cmd(fx, pipe, j % 2, (j / 2) * WORK_CHUNK_MAX, WORK_CHUNK_MAX, samples);
	}
	fill_slots(fx, 0xa5);
	send(fx, cmds, RING_ENTRIES);
	bool seen[RING_ENTRIES] = {false};
	for (uint32_t i = 0; i < RING_ENTRIES; i++) {
		struct work_done d;
		assert_true(wait_done(fx, &d));
		uint64_t j = d.item_id - cmds[0].item_id;
		assert_true(j < RING_ENTRIES && !seen[j]);
		seen[j] = true;
		assert_int_equal(d.status, 0);
	}
	for (uint32_t j = 0; j < RING_ENTRIES; j++) {
		for (uint32_t k = 0; k < WORK_CHUNK_MAX; k++)
			check_row(fx, pipe, j % 2, cmds[j].first_row + k, cmds[j].sample_index[k]);
	}
}

static inline void stop_worker(struct fixture *fx)
{
	struct work_cmd c = {.item_id = fx->next_item_id++, .op = WORK_EXIT};
	send(fx, &c, 1);
	expect_exit_code(fx, WORKER_EXIT_OK);
}

static inline int fixture_teardown(void **state)
{
	struct fixture *fx = *state;
	if (fx->pid > 0 && kill(fx->pid, SIGKILL) == 0)
		waitpid(fx->pid, NULL, 0);
	if (fx->pidfd >= 0)
		close(fx->pidfd);
	close(fx->cmd_efd);
	close(fx->done_efd);
	arena_close(&fx->arena);
	unlink(fx->raw_path);
	unlink(fx->tok_path);
	unlink(fx->missing_path);
	unlink(fx->socket_path);
	unlink(fx->link_path);
	unlink(fx->fifo_path);
	rmdir(fx->dir);
	free(fx);
	return 0;
}

static bool mode_uring = false;
static bool mode_pread = true;

#define IN_MODE(f, mode) \
	cmocka_unit_test_prestate_setup_teardown(f, fixture_setup, fixture_teardown, &(mode))
#define BOTH_MODES(f) IN_MODE(f, mode_uring), IN_MODE(f, mode_pread)

#endif
