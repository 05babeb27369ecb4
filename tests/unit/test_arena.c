/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for shm/arena: the layout a plan produces, creating a real
 * arena (a nameless memfd, fully reserved, sealed against size changes),
 * the seal against writes (after which only the mappings made before it,
 * and their forks, can write: no descriptor, reopen or mprotect can),
 * the read-only descriptor clients receive (which can change nothing),
 * attaching it read-only and read-write from another fd, and refusing
 * anything that is not an arena of this version.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/arena.h"

static const struct arena_plan small_plan = {
	.n_pipelines = 2, .n_workers = 3, .n_slots = 4, .slot_bytes = 2 * ARENA_ALIGN,
};

static uint64_t align4k(uint64_t v)
{
	return (v + 4095) / 4096 * 4096;
}

static void test_plan_bytes(void **state)
{
	/* header, pipeline table, ring pairs, slots, each region 4 KiB-aligned */
	uint64_t pipelines = 4096;
	uint64_t rings = align4k(pipelines + 2 * sizeof(struct arena_pipeline));
	uint64_t pair = align4k(sizeof(struct ring_header) + RING_ENTRIES * sizeof(struct work_cmd)) +
			align4k(sizeof(struct ring_header) + RING_ENTRIES * sizeof(struct work_done)) +
			align4k(sizeof(struct worker_beat)) + align4k(sizeof(struct worker_stats));
	uint64_t slots = rings + 3 * pair;
	assert_int_equal(arena_plan_bytes(&small_plan), slots + 4 * 2 * ARENA_ALIGN);
	/* pinned for these sizes: 4 KiB header page, 4 pages of pipelines,
	 * 37 pages per worker (command ring, completion ring, beat, stats) */
	assert_int_equal(arena_plan_bytes(&small_plan), 4096 + 16384 + 3 * 151552 + 4 * 8192);

	struct arena_plan bare = {.n_pipelines = 0, .n_workers = 0, .n_slots = 1,
				  .slot_bytes = ARENA_ALIGN};
	assert_int_equal(arena_plan_bytes(&bare), 4096 + ARENA_ALIGN);

	/* Each term grows the total by exactly its share. */
	struct arena_plan p = small_plan;
	p.n_slots++;
	assert_int_equal(arena_plan_bytes(&p), arena_plan_bytes(&small_plan) + p.slot_bytes);
	p = small_plan;
	p.n_workers++;
	assert_int_equal(arena_plan_bytes(&p), arena_plan_bytes(&small_plan) + pair);
}

/* A plan whose size does not fit in 64 bits must not look small to a
 * caller comparing it with the configured limit, nor be created. */
static void test_plan_overflow(void **state)
{
	struct arena_plan huge = {.n_pipelines = 1, .n_workers = 1, .n_slots = 2,
				  .slot_bytes = 1ull << 63};
	assert_int_equal(arena_plan_bytes(&huge), UINT64_MAX);
	huge.n_slots = UINT32_MAX;
	huge.slot_bytes = UINT64_MAX / 4096 * 4096;
	assert_int_equal(arena_plan_bytes(&huge), UINT64_MAX);
	struct arena a = {.fd = -1};
	huge.n_slots = 2;
	huge.slot_bytes = 1ull << 63;
	assert_true(arena_create(&huge, &a) < 0);
	assert_int_equal(a.fd, -1);
}

static void test_create_rejects_bad_plans(void **state)
{
	struct arena a = {.fd = -1};
	struct arena_plan p = small_plan;
	p.slot_bytes = ARENA_ALIGN + 1;
	assert_int_equal(arena_create(&p, &a), -EINVAL);
	p = small_plan;
	p.n_slots = 0;
	assert_int_equal(arena_create(&p, &a), -EINVAL);
	p = small_plan;
	p.n_pipelines = ARENA_PIPELINES_MAX + 1;
	assert_int_equal(arena_create(&p, &a), -EINVAL);
	p = small_plan;
	p.n_workers = ARENA_WORKERS_MAX + 1;
	assert_int_equal(arena_create(&p, &a), -EINVAL);
	assert_int_equal(a.fd, -1);
	assert_null(a.base);
}

/* [a, a+alen) and [b, b+blen) share no byte. */
static bool disjoint(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a + alen <= b || b + blen <= a;
}

static uint64_t ring_offset(const struct arena *a, const struct ring *r)
{
	return (uint64_t)((uint8_t *)r->hdr - a->base);
}

static uint64_t ring_extent(const struct ring *r)
{
	return ring_bytes(r->entry_bytes);
}

static void test_create_layout(void **state)
{
	struct arena a;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	const struct arena_header *h = a.hdr;
	uint64_t total = arena_plan_bytes(&small_plan);

	assert_ptr_equal((void *)h, a.base);
	assert_int_equal(a.bytes, total);
	assert_int_equal(h->magic, ARENA_MAGIC);
	assert_int_equal(h->version, ARENA_VERSION);
	assert_int_equal(h->n_pipelines, 2);
	assert_int_equal(h->n_workers_max, 3);
	assert_int_equal(h->n_slots, 4);
	assert_int_equal(h->slot_bytes, 2 * ARENA_ALIGN);
	assert_int_equal(h->total_bytes, total);

	/* Regions in order, aligned, each large enough, none overlapping. */
	assert_true(h->pipelines_offset >= sizeof(*h));
	assert_int_equal(h->pipelines_offset % ARENA_ALIGN, 0);
	assert_int_equal(h->rings_offset % ARENA_ALIGN, 0);
	assert_int_equal(h->slots_offset % ARENA_ALIGN, 0);
	assert_int_equal(h->ring_pair_bytes % ARENA_ALIGN, 0);
	assert_true(h->rings_offset >= h->pipelines_offset + 2 * sizeof(struct arena_pipeline));
	assert_true(h->slots_offset >= h->rings_offset + 3 * h->ring_pair_bytes);
	assert_true(total >= h->slots_offset + 4 * h->slot_bytes);

	for (uint32_t i = 0; i < 2; i++) {
		uint64_t off = (uint64_t)((uint8_t *)arena_pipeline(&a, i) - a.base);
		assert_true(off >= h->pipelines_offset);
		assert_true(off + sizeof(struct arena_pipeline) <= h->rings_offset);
		assert_non_null(arena_range(&a, off, sizeof(struct arena_pipeline)));
	}
	assert_ptr_equal(arena_pipeline(&a, 1), arena_pipeline(&a, 0) + 1);

	/* Every ring inside the ring region, 4 KiB-aligned, sized for its
	 * entries, empty, and no two sharing a byte. */
	uint64_t off[6], len[6];
	for (uint32_t w = 0; w < 3; w++) {
		struct ring cmd = arena_cmd_ring(&a, w), done = arena_done_ring(&a, w);
		assert_int_equal(cmd.entry_bytes, sizeof(struct work_cmd));
		assert_int_equal(done.entry_bytes, sizeof(struct work_done));
		assert_ptr_equal(cmd.entries, (uint8_t *)cmd.hdr + sizeof(struct ring_header));
		assert_ptr_equal(done.entries, (uint8_t *)done.hdr + sizeof(struct ring_header));
		off[2 * w] = ring_offset(&a, &cmd);
		len[2 * w] = ring_extent(&cmd);
		off[2 * w + 1] = ring_offset(&a, &done);
		len[2 * w + 1] = ring_extent(&done);
		assert_int_equal(ring_count(&cmd), 0);
		assert_int_equal(ring_count(&done), 0);
	}
	for (int i = 0; i < 6; i++) {
		assert_int_equal(off[i] % ARENA_ALIGN, 0);
		assert_true(off[i] >= h->rings_offset);
		assert_true(off[i] + len[i] <= h->slots_offset);
		for (int j = 0; j < i; j++)
			assert_true(disjoint(off[i], len[i], off[j], len[j]));
	}

	/* Slots after the rings, back to back, inside the arena. */
	for (uint32_t s = 0; s < 4; s++) {
		uint64_t so = arena_slot_offset(&a, s);
		assert_int_equal(so % ARENA_ALIGN, 0);
		assert_int_equal(so, h->slots_offset + s * h->slot_bytes);
		assert_true(so + h->slot_bytes <= total);
		uint8_t *p = arena_range(&a, so, h->slot_bytes);
		assert_ptr_equal(p, a.base + so);
		memset(p, (int)s + 1, h->slot_bytes); /* writable, and mapped to the end */
	}

	/* The fd: sized, every page reserved, not inherited by exec. */
	struct stat st;
	assert_int_equal(fstat(a.fd, &st), 0);
	assert_int_equal((uint64_t)st.st_size, total);
	assert_true((uint64_t)st.st_blocks * 512 >= total);
	assert_true(fcntl(a.fd, F_GETFD) & FD_CLOEXEC);
	arena_close(&a);
	assert_int_equal(a.fd, -1);
	assert_null(a.base);
}

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* The arena is a memfd: in no filesystem, so nothing survives a crash;
 * mode 0400 and sealed against any change of size; writes are sealed
 * later (arena_seal_writes), once the zygote has its mapping. */
static void test_create_memfd_sealed(void **state)
{
	struct arena a;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	char link[64], target[256];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", a.fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_true(strncmp(target, "/memfd:loaderd-arena", 20) == 0);
	struct stat st;
	assert_int_equal(fstat(a.fd, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0400);
	int seals = fcntl(a.fd, F_GET_SEALS);
	assert_true(seals >= 0);
	assert_int_equal(seals & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
	/* workers write the slots: not sealed yet, and the seals still open */
	assert_int_equal(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL), 0);
	assert_false(arena_writes_sealed(a.fd));
	/* Not even the read-write descriptor changes the size. */
	assert_int_equal(ftruncate(a.fd, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(a.fd, (off_t)a.bytes * 2), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(arena_seal_writes(&a), 0);
	seals = fcntl(a.fd, F_GET_SEALS);
	assert_int_equal(seals & (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL),
			 F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
	assert_true(arena_writes_sealed(a.fd));
	assert_int_equal(fcntl(a.fd, F_ADD_SEALS, F_SEAL_WRITE), -1); /* F_SEAL_SEAL */
	assert_int_equal(errno, EPERM);
	assert_int_equal(arena_seal_writes(&a), -EPERM);
	assert_int_equal(fstat(a.fd, &st), 0);
	assert_int_equal((uint64_t)st.st_size, a.bytes);
	arena_close(&a);
}

/* What a client receives: the same bytes, and no way to change them or
 * the object's size. */
static void test_client_fd_changes_nothing(void **state)
{
	struct arena a;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	assert_true(a.client_fd >= 0);
	assert_int_not_equal(a.client_fd, a.fd);
	assert_true(fcntl(a.client_fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(fcntl(a.client_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	uint8_t *slot0 = arena_range(&a, arena_slot_offset(&a, 0), a.hdr->slot_bytes);
	memset(slot0, 0x5a, a.hdr->slot_bytes);

	/* Read-only mapping: the same bytes. */
	uint8_t *ro = mmap(NULL, a.bytes, PROT_READ, MAP_SHARED, a.client_fd, 0);
	assert_true(ro != MAP_FAILED);
	assert_int_equal(ro[arena_slot_offset(&a, 0)], 0x5a);
	/* ...which cannot be made writable. */
	assert_int_equal(mprotect(ro, a.bytes, PROT_READ | PROT_WRITE), -1);
	assert_int_equal(errno, EACCES);
	munmap(ro, a.bytes);
	/* No writable mapping, no write, no truncation, no hole, no upgrade. */
	assert_true(mmap(NULL, a.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a.client_fd, 0) ==
		    MAP_FAILED);
	assert_int_equal(errno, EACCES);
	uint8_t byte = 0;
	assert_int_equal(pwrite(a.client_fd, &byte, 1, (off_t)arena_slot_offset(&a, 0)), -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(ftruncate(a.client_fd, 0), -1);
	assert_int_equal(fallocate(a.client_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096),
			 -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(fcntl(a.client_fd, F_SETFL, O_RDWR), 0); /* access mode bits are ignored */
	assert_int_equal(fcntl(a.client_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_int_equal(slot0[0], 0x5a);

	/* A client of another user cannot reopen it for writing. */
	if (geteuid() == 0) {
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			if (setgid(65534) < 0 || setuid(65534) < 0)
				_exit(2);
			char path[64];
			snprintf(path, sizeof(path), "/proc/self/fd/%d", a.client_fd);
			if (open(path, O_RDWR) >= 0 || errno != EACCES)
				_exit(3);
			if (fchmod(a.client_fd, 0666) == 0 || errno != EPERM)
				_exit(4);
			_exit(0);
		}
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	int fd = a.client_fd;
	arena_close(&a);
	assert_true(fcntl(fd, F_GETFD) < 0);
	assert_int_equal(a.client_fd, -1);
}

/* Whether a fresh shared writable mapping of fd can be made. */
static int map_writable(int fd, size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	munmap(p, bytes);
	return 0;
}

/* After arena_seal_writes: the mappings made before it, and a fork's
 * inherited copy of one, still write; nothing else can, through any
 * descriptor (the master's read-write one included), a reopen of it,
 * mprotect, write(2), fallocate or ftruncate, root or not. */
static void test_seal_writes(void **state)
{
	struct arena a, before;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	assert_int_equal(arena_attach(dup(a.fd), true, &before), 0); /* the zygote's, in effect */
	assert_int_equal(arena_seal_writes(&a), 0);
	const size_t bytes = a.bytes;
	const uint64_t at = arena_slot_offset(&a, 1);

	/* Those made before: the master's and the one attached before. */
	a.base[at] = 0x11;
	assert_int_equal(before.base[at], 0x11);
	before.base[at + 1] = 0x22;
	assert_int_equal(a.base[at + 1], 0x22);
	/* A fork's inherited mapping writes, and the parent sees it. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		before.base[at + 2] = 0x33;
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(a.base[at + 2], 0x33);

	/* No new writable mapping, even from the read-write descriptor... */
	assert_int_equal(map_writable(a.fd, bytes), -EPERM);
	struct arena late;
	assert_int_equal(arena_attach(dup(a.fd), true, &late), -EPERM);
	assert_int_equal(arena_attach(dup(a.fd), false, &late), 0); /* reading stays possible */
	arena_close(&late);
	/* ...no read-only one made writable... */
	uint8_t *ro = mmap(NULL, bytes, PROT_READ, MAP_SHARED, a.fd, 0);
	assert_true(ro != MAP_FAILED);
	assert_int_equal(mprotect(ro, bytes, PROT_READ | PROT_WRITE), -1);
	assert_int_equal(errno, EACCES);
	munmap(ro, bytes);
	/* ...no write(2), no hole, no truncation... */
	uint8_t byte = 0xee;
	assert_int_equal(pwrite(a.fd, &byte, 1, (off_t)at), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(write(a.fd, &byte, 1), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(a.fd, 0), -1);
	/* ...and nothing through a reopen, whatever the mode allows: the seal
	 * is the object's. (Only the owner or root can chmod it; both try.) */
	assert_int_equal(fchmod(a.client_fd, 0666), 0);
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a.client_fd);
	int rw = open(path, O_RDWR | O_CLOEXEC);
	assert_true(rw >= 0);
	assert_int_equal(fcntl(rw, F_GETFL) & O_ACCMODE, O_RDWR);
	assert_int_equal(map_writable(rw, bytes), -EPERM);
	assert_int_equal(pwrite(rw, &byte, 1, (off_t)at), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fcntl(rw, F_ADD_SEALS, F_SEAL_WRITE), -1);
	close(rw);
	/* The mapping's own entry in /proc/self/map_files (root only). */
	if (geteuid() == 0) {
		snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", (unsigned long)a.base,
			 (unsigned long)(a.base + bytes));
		rw = open(path, O_RDWR | O_CLOEXEC);
		assert_true(rw >= 0);
		assert_int_equal(map_writable(rw, bytes), -EPERM);
		close(rw);
	}
	/* A private writable mapping is allowed: its writes are its own. */
	uint8_t *priv = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, a.fd, 0);
	assert_true(priv != MAP_FAILED);
	priv[at] = 0x99;
	munmap(priv, bytes);
	assert_int_equal(a.base[at], 0x11);
	assert_int_equal(a.base[at + 1], 0x22);
	assert_int_equal(a.base[at + 2], 0x33);
	arena_close(&before);
	arena_close(&a);
}

static void test_attach_shares_bytes(void **state)
{
	struct arena a, ro, rw;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	uint8_t *slot0 = arena_range(&a, arena_slot_offset(&a, 0), a.hdr->slot_bytes);
	memset(slot0, 0xc3, a.hdr->slot_bytes);
	arena_pipeline(&a, 1)->n_samples = 123456;

	int fd_ro = dup(a.fd), fd_rw = dup(a.fd);
	assert_true(fd_ro >= 0 && fd_rw >= 0);
	assert_int_equal(arena_attach(fd_ro, false, &ro), 0);
	assert_int_equal(arena_attach(fd_rw, true, &rw), 0);
	assert_int_equal(ro.fd, fd_ro);
	assert_int_equal(ro.bytes, a.bytes);
	assert_int_equal(rw.bytes, a.bytes);
	assert_memory_equal(ro.hdr, a.hdr, sizeof(struct arena_header));
	assert_memory_equal(ro.base, a.base, a.bytes);
	assert_int_equal(arena_pipeline(&ro, 1)->n_samples, 123456);

	/* Writes through one mapping are seen through the others. */
	uint8_t *rw_slot1 = arena_range(&rw, arena_slot_offset(&rw, 1), rw.hdr->slot_bytes);
	memset(rw_slot1, 0x3c, rw.hdr->slot_bytes);
	assert_int_equal(((uint8_t *)arena_range(&a, arena_slot_offset(&a, 1), 1))[0], 0x3c);
	assert_memory_equal(arena_range(&ro, arena_slot_offset(&ro, 1), ro.hdr->slot_bytes),
			    rw_slot1, ro.hdr->slot_bytes);

	/* A ring pushed through one mapping pops through another. */
	struct ring master = arena_cmd_ring(&a, 2), worker = arena_cmd_ring(&rw, 2);
	struct work_cmd cmd = {.item_id = 77, .op = WORK_READ, .count = 1, .sample_index = {5}};
	struct work_cmd got;
	assert_true(ring_push(&master, &cmd));
	assert_int_equal(ring_count(&worker), 1);
	assert_true(ring_pop(&worker, &got));
	assert_memory_equal(&got, &cmd, sizeof(cmd));

	/* The read-only mapping really is: the kernel refuses to write it. */
	int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	assert_true(zero >= 0);
	errno = 0;
	assert_int_equal(read(zero, ro.base + arena_slot_offset(&ro, 0), 16), -1);
	assert_int_equal(errno, EFAULT);
	close(zero);

	/* Closing an attached arena leaves the creator's fd and mapping. */
	arena_close(&ro);
	arena_close(&rw);
	assert_true(fcntl(fd_ro, F_GETFD) < 0);
	assert_true(fcntl(a.fd, F_GETFD) >= 0);
	assert_int_equal(slot0[0], 0xc3);

	/* An fd opened read-only maps read-only, and only so. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a.fd);
	int fd_rdonly = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd_rdonly >= 0);
	assert_int_equal(arena_attach(fd_rdonly, true, &rw), -EACCES);
	assert_int_equal(arena_attach(fd_rdonly, false, &ro), 0);
	arena_close(&ro);
	arena_close(&a);
}

/* A memfd holding `len` bytes of `data` in a file of `size` bytes. */
static int memfd_with(const void *data, size_t len, size_t size)
{
	int fd = memfd_create("test-arena", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(pwrite(fd, data, len, 0), (ssize_t)len);
	return fd;
}

/* attach must refuse fd; refusing does not take or close it. */
static void expect_refused(int fd)
{
	struct arena out = {.fd = -1};
	assert_int_equal(arena_attach(fd, false, &out), -EPROTO);
	assert_int_equal(arena_attach(fd, true, &out), -EPROTO);
	assert_int_equal(out.fd, -1);
	assert_null(out.base);
	assert_true(fcntl(fd, F_GETFD) >= 0);
	close(fd);
}

static void test_attach_rejects(void **state)
{
	struct arena a, b;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	const struct arena_header good = *a.hdr;
	size_t total = a.bytes;

	/* A faithful copy is accepted: what follows fails for its one defect. */
	int fd = memfd_with(&good, sizeof(good), total);
	assert_int_equal(arena_attach(fd, false, &b), 0);
	arena_close(&b);

	uint8_t garbage[8192];
	memset(garbage, 0xab, sizeof(garbage));
	expect_refused(memfd_with(garbage, sizeof(garbage), sizeof(garbage)));
	expect_refused(memfd_with(garbage, 0, 0));                      /* empty */
	expect_refused(memfd_with(&good, 10, 10));                      /* shorter than a header */
	expect_refused(memfd_with(&good, sizeof(good), sizeof(good)));  /* header only */
	expect_refused(memfd_with(&good, sizeof(good), total - ARENA_ALIGN)); /* truncated */
	expect_refused(memfd_with(&good, sizeof(good), total + ARENA_ALIGN)); /* longer */

	struct arena_header h = good;
	h.version = ARENA_VERSION + 1;
	expect_refused(memfd_with(&h, sizeof(h), total));
	h = good;
	h.magic ^= 1;
	expect_refused(memfd_with(&h, sizeof(h), total));
	/* Offsets that disagree with the counts, sizes kept consistent. */
	h = good;
	h.slots_offset += ARENA_ALIGN;
	h.total_bytes += ARENA_ALIGN;
	expect_refused(memfd_with(&h, sizeof(h), total + ARENA_ALIGN));
	h = good;
	h.n_slots++;
	expect_refused(memfd_with(&h, sizeof(h), total));
	h = good;
	h.n_workers_max = ARENA_WORKERS_MAX + 1;
	h.slots_offset = h.rings_offset + (uint64_t)h.n_workers_max * h.ring_pair_bytes;
	h.total_bytes = h.slots_offset + (uint64_t)h.n_slots * h.slot_bytes;
	expect_refused(memfd_with(&h, sizeof(h), h.total_bytes));
	/* Slots whose size wraps 64 bits, the total made to match the file. */
	h = good;
	h.n_slots = 2;
	h.slot_bytes = 1ull << 63;
	h.total_bytes = h.slots_offset;
	expect_refused(memfd_with(&h, sizeof(h), h.total_bytes));

	/* Not a file at all. */
	int pipefd[2];
	assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
	expect_refused(pipefd[0]);
	close(pipefd[1]);
	assert_int_equal(arena_attach(-1, false, &b), -EBADF);

	/* The real one still attaches after all that. */
	fd = dup(a.fd);
	assert_int_equal(arena_attach(fd, false, &b), 0);
	arena_close(&b);
	arena_close(&a);
}

static void test_range(void **state)
{
	struct arena a;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	uint64_t total = a.bytes;
	assert_ptr_equal(arena_range(&a, 0, total), a.base);
	assert_ptr_equal(arena_range(&a, total - 1, 1), a.base + total - 1);
	assert_null(arena_range(&a, 0, total + 1));
	assert_null(arena_range(&a, total, 1));
	assert_null(arena_range(&a, total + 1, 0));
	assert_null(arena_range(&a, 1, total));
	assert_null(arena_range(&a, UINT64_MAX, 1));
	assert_null(arena_range(&a, 1, UINT64_MAX));
	assert_null(arena_range(&a, 4096, UINT64_MAX - 4095)); /* wraps to a small end */
	assert_null(arena_range(&a, arena_slot_offset(&a, 3), a.hdr->slot_bytes + 1));
	arena_close(&a);
}

static void test_close_is_safe(void **state)
{
	/* fd 0 must be open for the zeroed arena's fd to mean something. */
	int zero_fd = -1;
	if (fcntl(0, F_GETFD) < 0) {
		zero_fd = open("/dev/null", O_RDONLY);
		assert_int_equal(zero_fd, 0);
	}
	struct stat before, after;
	assert_int_equal(fstat(0, &before), 0);

	struct arena zeroed;
	memset(&zeroed, 0, sizeof(zeroed));
	arena_close(&zeroed);
	assert_int_equal(zeroed.fd, -1);
	assert_null(zeroed.base);
	/* A zeroed arena owns nothing, fd 0 included. */
	assert_true(fcntl(0, F_GETFD) >= 0);
	assert_int_equal(fstat(0, &after), 0);
	assert_int_equal(before.st_ino, after.st_ino);
	assert_int_equal(before.st_dev, after.st_dev);

	struct arena a;
	assert_int_equal(arena_create(&small_plan, &a), 0);
	int fd = a.fd;
	arena_close(&a);
	assert_true(fcntl(fd, F_GETFD) < 0);
	arena_close(&a); /* twice */
	assert_int_equal(a.fd, -1);
	struct arena closed = {.fd = -1};
	arena_close(&closed);
	if (zero_fd == 0)
		close(zero_fd);
}

static int count_open_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	assert_non_null(dir);
	int n = 0;
	while (readdir(dir) != NULL)
		n++;
	closedir(dir);
	return n;
}

/*
 * An arena the system cannot size fails at creation and leaks nothing: a
 * plan beyond the largest file the kernel allows (ftruncate says EFBIG or
 * EINVAL). A plan merely larger than memory is not tried: shmem fills it
 * page by page until memory runs out, which is why the daemon checks the
 * plan against the memory available before creating it.
 */
static void test_create_too_large(void **state)
{
	const uint64_t slot = 1ull << 40;
	struct arena_plan p = {.n_pipelines = 1, .n_workers = 1, .slot_bytes = slot,
			       .n_slots = 1u << 23}; /* 2^63 bytes of slots */
	assert_true(arena_plan_bytes(&p) > (1ull << 62));
	int fds = count_open_fds();
	struct arena a = {.fd = -1, .client_fd = -1};
	int rc = arena_create(&p, &a);
	assert_true(rc == -EFBIG || rc == -EINVAL);
	assert_int_equal(a.fd, -1);
	assert_int_equal(count_open_fds(), fds); /* nothing leaked */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan_bytes),
		cmocka_unit_test(test_plan_overflow),
		cmocka_unit_test(test_create_rejects_bad_plans),
		cmocka_unit_test(test_create_layout),
		cmocka_unit_test(test_create_memfd_sealed),
		cmocka_unit_test(test_seal_writes),
		cmocka_unit_test(test_client_fd_changes_nothing),
		cmocka_unit_test(test_attach_shares_bytes),
		cmocka_unit_test(test_attach_rejects),
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_close_is_safe),
		cmocka_unit_test(test_create_too_large),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
