/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for shm/ring: FIFO order, full and empty, index wrap-around,
 * reset, and a producer process feeding a consumer process through a
 * shared mapping without loss, reordering or torn entries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/ring.h"

struct entry {
	uint64_t seq;
	uint64_t check[7]; /* derived from seq: a torn or stale copy shows */
};

static uint64_t entry_check(uint64_t seq, unsigned k)
{
	return (seq + k) * 0x9e3779b97f4a7c15ull ^ (uint64_t)k << 56;
}

static void entry_make(struct entry *e, uint64_t seq)
{
	e->seq = seq;
	for (unsigned k = 0; k < 7; k++)
		e->check[k] = entry_check(seq, k);
}

static bool entry_valid(const struct entry *e, uint64_t seq)
{
	if (e->seq != seq)
		return false;
	for (unsigned k = 0; k < 7; k++)
		if (e->check[k] != entry_check(seq, k))
			return false;
	return true;
}

enum { guard_bytes = 256 };

/* A ring in private memory with a guard pattern after its last byte. */
struct test_ring {
	uint8_t *mem;
	size_t bytes;
	struct ring ring;
};

static void test_ring_init(struct test_ring *t, uint32_t entry_bytes)
{
	t->bytes = ring_bytes(entry_bytes);
	assert_int_equal(t->bytes, sizeof(struct ring_header) + (size_t)RING_ENTRIES * entry_bytes);
	t->mem = aligned_alloc(64, (t->bytes + guard_bytes + 63) / 64 * 64);
	assert_non_null(t->mem);
	memset(t->mem, 0, t->bytes);
	memset(t->mem + t->bytes, 0x5a, guard_bytes);
	ring_view(&t->ring, t->mem, entry_bytes);
	ring_reset(&t->ring);
}

static void test_ring_fini(struct test_ring *t)
{
	for (size_t i = 0; i < guard_bytes; i++)
		assert_int_equal(t->mem[t->bytes + i], 0x5a);
	free(t->mem);
}

static void test_order_full_empty(void **state)
{
	struct test_ring t;
	test_ring_init(&t, sizeof(struct entry));
	struct entry e, out;

	assert_int_equal(ring_count(&t.ring), 0);
	memset(&out, 0xee, sizeof(out));
	assert_false(ring_pop(&t.ring, &out));
	for (size_t i = 0; i < sizeof(out); i++) /* an empty pop writes nothing */
		assert_int_equal(((uint8_t *)&out)[i], 0xee);

	for (uint64_t seq = 0; seq < RING_ENTRIES; seq++) {
		entry_make(&e, seq);
		assert_true(ring_push(&t.ring, &e));
		assert_int_equal(ring_count(&t.ring), seq + 1);
	}
	entry_make(&e, 999);
	assert_false(ring_push(&t.ring, &e)); /* full */
	assert_int_equal(ring_count(&t.ring), RING_ENTRIES);

	/* One slot freed, one push accepted, and the rejected entry never
	 * overwrote anything. */
	assert_true(ring_pop(&t.ring, &out));
	assert_true(entry_valid(&out, 0));
	entry_make(&e, RING_ENTRIES);
	assert_true(ring_push(&t.ring, &e));
	assert_false(ring_push(&t.ring, &e));
	for (uint64_t seq = 1; seq <= RING_ENTRIES; seq++) {
		assert_true(ring_pop(&t.ring, &out));
		assert_true(entry_valid(&out, seq));
		assert_int_equal(ring_count(&t.ring), RING_ENTRIES - seq);
	}
	assert_false(ring_pop(&t.ring, &out));
	test_ring_fini(&t);
}

/* Bursts of varying length keep the ring at every fill level in turn, and
 * the indices pass every slot many times. */
static void test_wrap_around(void **state)
{
	struct test_ring t;
	test_ring_init(&t, sizeof(struct entry));
	struct entry e, out;
	uint64_t pushed = 0, popped = 0;
	uint32_t x = 12345;
	while (popped < 200000) {
		x = x * 1103515245u + 12345u;
		unsigned burst = (x >> 16) % (RING_ENTRIES + 8);
		for (unsigned i = 0; i < burst; i++) {
			entry_make(&e, pushed);
			bool full = pushed - popped == RING_ENTRIES;
			assert_int_equal(ring_push(&t.ring, &e), !full);
			if (!full)
				pushed++;
		}
		x = x * 1103515245u + 12345u;
		burst = (x >> 16) % (RING_ENTRIES + 8);
		for (unsigned i = 0; i < burst; i++) {
			bool empty = pushed == popped;
			assert_int_equal(ring_pop(&t.ring, &out), !empty);
			if (!empty)
				assert_true(entry_valid(&out, popped++));
		}
		assert_int_equal(ring_count(&t.ring), pushed - popped);
	}
	test_ring_fini(&t);
}

/* The 32-bit indices themselves wrap: free-running counters must keep
 * working across 2^32. */
static void test_index_overflow(void **state)
{
	struct test_ring t;
	test_ring_init(&t, sizeof(struct entry));
	struct entry e, out;
	atomic_store(&t.ring.hdr->head, UINT32_MAX - 20);
	atomic_store(&t.ring.hdr->tail, UINT32_MAX - 20);
	assert_int_equal(ring_count(&t.ring), 0);
	uint64_t pushed = 0, popped = 0;
	for (int round = 0; round < 4; round++) {
		for (;;) {
			entry_make(&e, pushed);
			if (!ring_push(&t.ring, &e))
				break;
			pushed++;
		}
		assert_int_equal(pushed - popped, RING_ENTRIES);
		assert_int_equal(ring_count(&t.ring), RING_ENTRIES);
		for (int i = 0; i < RING_ENTRIES / 2 + round; i++) {
			assert_true(ring_pop(&t.ring, &out));
			assert_true(entry_valid(&out, popped++));
		}
	}
	while (ring_pop(&t.ring, &out))
		assert_true(entry_valid(&out, popped++));
	assert_int_equal(popped, pushed);
	assert_true(atomic_load(&t.ring.hdr->tail) < 1000); /* it did wrap */
	test_ring_fini(&t);
}

static void test_reset(void **state)
{
	struct test_ring t;
	test_ring_init(&t, sizeof(struct entry));
	struct entry e, out;
	for (uint64_t seq = 0; seq < 10; seq++) {
		entry_make(&e, seq);
		assert_true(ring_push(&t.ring, &e));
	}
	for (int i = 0; i < 3; i++)
		assert_true(ring_pop(&t.ring, &out));
	ring_reset(&t.ring);
	assert_int_equal(ring_count(&t.ring), 0);
	assert_false(ring_pop(&t.ring, &out));
	/* Full capacity again, in order from the new first entry. */
	for (uint64_t seq = 100; seq < 100 + RING_ENTRIES; seq++) {
		entry_make(&e, seq);
		assert_true(ring_push(&t.ring, &e));
	}
	assert_false(ring_push(&t.ring, &e));
	for (uint64_t seq = 100; seq < 100 + RING_ENTRIES; seq++) {
		assert_true(ring_pop(&t.ring, &out));
		assert_true(entry_valid(&out, seq));
	}
	test_ring_fini(&t);
}

/* The arena's entry types, and an odd size: entries are copied whole. */
static void test_entry_sizes(void **state)
{
	static const uint32_t sizes[] = {1, 3, sizeof(struct work_done), sizeof(struct work_cmd)};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t size = sizes[s];
		struct test_ring t;
		test_ring_init(&t, size);
		uint8_t in[sizeof(struct work_cmd)], out[sizeof(struct work_cmd)];
		for (int round = 0; round < 3 * RING_ENTRIES; round++) {
			for (uint32_t i = 0; i < size; i++)
				in[i] = (uint8_t)(round * 31 + i);
			assert_true(ring_push(&t.ring, in));
			memset(out, 0, sizeof(out));
			assert_true(ring_pop(&t.ring, out));
			assert_memory_equal(in, out, size);
		}
		test_ring_fini(&t);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { stress_entries = 1000000 };
static const double stress_deadline_s = 45.0;

/* The child: produce every entry in order; exit 0, or 2 past the deadline. */
static void produce(struct ring *r, double deadline)
{
	struct entry e;
	for (uint64_t seq = 0; seq < stress_entries; seq++) {
		entry_make(&e, seq);
		while (!ring_push(r, &e)) {
			if (now_s() > deadline)
				_exit(2);
			sched_yield();
		}
	}
	_exit(0);
}

static void test_cross_process(void **state)
{
	size_t bytes = ring_bytes(sizeof(struct entry));
	void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(mem != MAP_FAILED);
	struct ring r;
	ring_view(&r, mem, sizeof(struct entry));
	ring_reset(&r);
	double deadline = now_s() + stress_deadline_s;

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		produce(&r, deadline);

	struct entry out;
	uint64_t next = 0, bad = 0;
	bool late = false;
	while (next < stress_entries) {
		if (ring_pop(&r, &out)) {
			if (!entry_valid(&out, next))
				bad++;
			next++;
			continue;
		}
		if (now_s() > deadline) {
			late = true;
			break;
		}
		sched_yield();
	}
	if (late)
		kill(pid, SIGKILL);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	uint32_t left = ring_count(&r);
	munmap(mem, bytes);
	if (late)
		fail_msg("only %lu of %d entries arrived before the deadline", (unsigned long)next,
			 stress_entries);
	assert_int_equal(bad, 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* Nothing more than was sent. */
	assert_int_equal(left, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_full_empty),
		cmocka_unit_test(test_wrap_around),
		cmocka_unit_test(test_index_overflow),
		cmocka_unit_test(test_reset),
		cmocka_unit_test(test_entry_sizes),
		cmocka_unit_test(test_cross_process),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
