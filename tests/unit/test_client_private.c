/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for LDR_ATTACH_WRITABLE (client/loaderd.h): the arena mapped
 * private and writable in host delivery.
 *
 * The daemon's side is a scripted peer on a real listening socket, with the
 * real proto/wire code, and an arena made as the daemon makes it: a memfd of
 * mode 0400, sealed against size changes, mapped shared and writable by the
 * peer, then sealed against writes (F_SEAL_FUTURE_WRITE, F_SEAL_SEAL); the
 * library gets a read-only reopen of it, as clients do. Checked:
 * - with the flag, a write into a batch's tensors does not crash, is seen by
 *   this process only (the arena keeps its bytes), and is dropped at
 *   release: the next batch in the slot shows the arena's bytes, also the
 *   new ones the daemon wrote into the slot after the release (written
 *   pages apart from one another, and next to unwritten ones);
 * - without it the mapping stays shared and read-only: a write kills the
 *   writer (in a child process) and the arena keeps its bytes;
 * - an unknown flag bit is refused before anything is sent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "loaderd.h"
#include "proto/wire.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define SLOT_BYTES 12288u
#define ARENA_BYTES (3 * SLOT_BYTES) /* a header, then two slots */
#define BATCH 4u
#define RECORD 100u
#define LABEL_OFFSET 8192u /* page 2: page 1 between the two is never written */

struct peer {
	char dir[64];
	char path[96];
	int listen_fd;
	int conn;
	struct ldr_client *c;
	int arena_fd;     /* the daemon's: read-write, sealed after mapping */
	int client_fd;    /* the read-only reopen clients get */
	uint8_t *arena;   /* the daemon's shared writable mapping */
};

static int peer_setup(void **state)
{
	struct peer *p = calloc(1, sizeof *p);
	assert_non_null(p);
	snprintf(p->dir, sizeof p->dir, "/tmp/ldr-private-XXXXXX");
	assert_non_null(mkdtemp(p->dir));
	snprintf(p->path, sizeof p->path, "%s/sock", p->dir);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", p->path);
	p->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(p->listen_fd >= 0);
	assert_int_equal(bind(p->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
	assert_int_equal(listen(p->listen_fd, 4), 0);
	assert_int_equal(ldr_connect(p->path, &p->c), 0);
	p->conn = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(p->conn >= 0);

	p->arena_fd = memfd_create("arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(p->arena_fd >= 0);
	assert_int_equal(fchmod(p->arena_fd, 0400), 0);
	assert_int_equal(ftruncate(p->arena_fd, ARENA_BYTES), 0);
	assert_int_equal(fcntl(p->arena_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", p->arena_fd);
	p->client_fd = open(proc, O_RDONLY | O_CLOEXEC);
	assert_true(p->client_fd >= 0);
	p->arena = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, p->arena_fd, 0);
	assert_true(p->arena != MAP_FAILED);
	for (size_t i = 0; i < ARENA_BYTES; i++)
		p->arena[i] = (uint8_t)(i * 7 + i / 251);
	assert_int_equal(fcntl(p->arena_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL), 0);
	*state = p;
	return 0;
}

static int peer_teardown(void **state)
{
	struct peer *p = *state;
	ldr_close(p->c);
	close(p->conn);
	close(p->listen_fd);
	munmap(p->arena, ARENA_BYTES);
	close(p->client_fd);
	close(p->arena_fd);
	unlink(p->path);
	rmdir(p->dir);
	free(p);
	return 0;
}

static void attach(struct peer *p, unsigned flags)
{
	static struct proto_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.hdr.type = PROTO_WELCOME;
	msg.hdr.request_id = 1;
	struct proto_welcome *w = &msg.u.welcome;
	*w = (struct proto_welcome){
		.session = 1, .arena_bytes = ARENA_BYTES, .slot_bytes = SLOT_BYTES, .n_samples = 100,
		.seed = 5, .batch_size = BATCH, .world = 1, .depth = 2, .n_tensors = 2,
		.data = 0x3f2a09c1d4e5b677ull, .name = "p",
	};
	w->tensors[0] = (struct proto_tensor){ .name = "data", .dtype = PROTO_DTYPE_UINT8,
					       .ndim = 2, .shape = { BATCH, RECORD }, .offset = 0 };
	w->tensors[1] = (struct proto_tensor){ .name = "label", .dtype = PROTO_DTYPE_INT64,
					       .ndim = 1, .shape = { BATCH }, .offset = LABEL_OFFSET };
	assert_int_equal(wire_send(p->conn, &msg, p->client_fd), 0);
	struct ldr_attach_opts o = { .pipeline = "p", .flags = flags };
	assert_int_equal(ldr_attach(p->c, &o), 0);
	char why[256];
	int fd;
	assert_int_equal(wire_recv(p->conn, &msg, &fd, why, sizeof why), 0); /* the HELLO */
	assert_int_equal(msg.hdr.type, PROTO_HELLO);
}

/* READY for batch `seq` in slot `slot` (its bytes at (slot + 1) * SLOT_BYTES). */
static void send_ready(struct peer *p, uint64_t seq, uint32_t slot, uint32_t generation)
{
	static struct proto_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.hdr.type = PROTO_READY;
	msg.u.ready = (struct proto_ready){
		.seq = seq, .batch = seq, .first = seq * BATCH,
		.slot_offset = (uint64_t)(slot + 1) * SLOT_BYTES, .slot = slot,
		.generation = generation, .rows = BATCH,
	};
	assert_int_equal(wire_send(p->conn, &msg, -1), 0);
}

static void peer_recv_release(struct peer *p, uint64_t seq)
{
	static struct proto_msg msg;
	char why[256];
	int fd;
	assert_int_equal(wire_recv(p->conn, &msg, &fd, why, sizeof why), 0);
	assert_int_equal(msg.hdr.type, PROTO_RELEASE);
	assert_int_equal(msg.u.release.seq, seq);
}

static const uint8_t *slot_bytes(const struct peer *p, uint32_t slot)
{
	return p->arena + (size_t)(slot + 1) * SLOT_BYTES;
}

static void test_private_write_dropped(void **state)
{
	struct peer *p = *state;
	attach(p, LDR_ATTACH_WRITABLE);
	static uint8_t before[SLOT_BYTES];
	memcpy(before, slot_bytes(p, 0), SLOT_BYTES);

	struct ldr_batch b;
	send_ready(p, 0, 0, 10);
	assert_int_equal(ldr_next(p->c, &b, 1000), 0);
	assert_memory_equal(b.tensors[0].data, slot_bytes(p, 0), BATCH * RECORD);
	/* A write through the batch's pointers (a torch tensor's label[0] = 5). */
	memset((void *)b.tensors[0].data, 0xab, BATCH * RECORD);
	((int64_t *)b.tensors[1].data)[0] = 5;
	assert_int_equal(((const uint8_t *)b.tensors[0].data)[17], 0xab);
	assert_int_equal(((const int64_t *)b.tensors[1].data)[0], 5);
	assert_memory_equal(slot_bytes(p, 0), before, SLOT_BYTES); /* the arena never sees it */
	assert_int_equal(ldr_release(p->c, &b), 0);
	peer_recv_release(p, 0);

	/* The slot again, unchanged by the daemon: its bytes, not the write. */
	send_ready(p, 1, 0, 11);
	assert_int_equal(ldr_next(p->c, &b, 1000), 0);
	assert_memory_equal(b.tensors[0].data, before, BATCH * RECORD);
	assert_memory_equal(b.tensors[1].data, before + LABEL_OFFSET, BATCH * 8);
	memset((void *)b.tensors[0].data, 0xcd, 64);
	((int64_t *)b.tensors[1].data)[3] = -1;
	assert_int_equal(ldr_release(p->c, &b), 0);
	peer_recv_release(p, 1);

	/* The daemon writes the slot's next batch: that is what the client sees. */
	for (size_t i = 0; i < SLOT_BYTES; i++)
		p->arena[SLOT_BYTES + i] = (uint8_t)(i * 13 + 1);
	send_ready(p, 2, 0, 12);
	assert_int_equal(ldr_next(p->c, &b, 1000), 0);
	assert_memory_equal(b.tensors[0].data, slot_bytes(p, 0), BATCH * RECORD);
	assert_memory_equal(b.tensors[1].data, slot_bytes(p, 0) + LABEL_OFFSET, BATCH * 8);
	assert_int_equal(((const uint8_t *)b.tensors[0].data)[3], (uint8_t)(3 * 13 + 1));
	assert_int_equal(ldr_release(p->c, &b), 0);
	peer_recv_release(p, 2);
}

static void test_shared_read_only_by_default(void **state)
{
	struct peer *p = *state;
	attach(p, 0);
	static uint8_t before[SLOT_BYTES];
	memcpy(before, slot_bytes(p, 1), SLOT_BYTES);
	struct ldr_batch b;
	send_ready(p, 0, 1, 10);
	assert_int_equal(ldr_next(p->c, &b, 1000), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* cmocka's handler would go on running tests */
		((volatile uint8_t *)b.tensors[0].data)[0] = 0xab;
		_exit(0); /* reached only if the write went through */
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	/* Killed by SIGSEGV; under AddressSanitizer, its report and exit 1. */
	assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_memory_equal(slot_bytes(p, 1), before, SLOT_BYTES);
	assert_int_equal(ldr_release(p->c, &b), 0);
}

static void test_unknown_flag_refused(void **state)
{
	struct peer *p = *state;
	struct ldr_attach_opts o = { .pipeline = "p", .flags = 0x6 };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "unknown bits 0x6"));
	struct pollfd pfd = { .fd = p->conn, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 0), 0); /* nothing sent */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_private_write_dropped, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_shared_read_only_by_default, peer_setup,
						peer_teardown),
		cmocka_unit_test_setup_teardown(test_unknown_flag_refused, peer_setup, peer_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
