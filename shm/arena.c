/* SPDX-License-Identifier: Apache-2.0 */
/* arena: create, attach and navigate the shared-memory arena (arena.h). */
#include "shm/arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* One worker's region: command ring, completion ring, beat, stats. */
static uint64_t arena_ring_pair_bytes(void)
{
	return arena_align(ring_bytes(sizeof(struct work_cmd))) +
	arena_align(ring_bytes(sizeof(struct work_done))) + arena_align(sizeof(struct worker_beat)) +
	arena_align(sizeof(struct worker_stats));
}

/* Fills in every offset of the header for a plan. */
static void arena_plan_header(const struct arena_plan *plan, struct arena_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = ARENA_MAGIC;
	h->version = ARENA_VERSION;
	h->n_pipelines = plan->n_pipelines;
	h->pipelines_offset = arena_align(sizeof(*h));
	h->rings_offset = arena_align(h->pipelines_offset +
				      (uint64_t)plan->n_pipelines * sizeof(struct arena_pipeline));
	h->ring_pair_bytes = arena_ring_pair_bytes();
	h->n_workers_max = plan->n_workers;
	h->indexes_offset = h->rings_offset + (uint64_t)plan->n_workers * h->ring_pair_bytes;
	h->indexes_bytes = plan->indexes_bytes;
	h->slots_offset = arena_align(h->indexes_offset + plan->indexes_bytes);
	h->slot_bytes = plan->slot_bytes;
	h->n_slots = plan->n_slots;
	/* Saturates rather than wraps: a plan too large for 64 bits must not
	 * look small to a caller comparing it with a limit, and a header
	 * claiming such slots must not match a small file in arena_attach. */
	uint64_t slots_bytes;
	if (__builtin_mul_overflow((uint64_t)plan->n_slots, plan->slot_bytes, &slots_bytes) ||
	    __builtin_add_overflow(h->slots_offset, slots_bytes, &h->total_bytes))
		h->total_bytes = UINT64_MAX;
}

uint64_t arena_plan_bytes(const struct arena_plan *plan)
{
	struct arena_header h;
	arena_plan_header(plan, &h);
	return h.total_bytes;
}

static int arena_map_fd(int fd, size_t bytes, bool writable, uint8_t **out)
{
	int prot = PROT_READ | (writable ? PROT_WRITE : 0);
	void *p = mmap(NULL, bytes, prot, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

#ifndef F_SEAL_FUTURE_WRITE /* Linux 5.1; older C libraries lack the name */
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* Seals that make the object's size final from birth: nobody, root
 * included, can shrink it (the SIGBUS every mapper would die of) or grow
 * it. F_SEAL_WRITE is not among them: it would stop the writes of the
 * mappings the workers hold too. */
#define ARENA_SIZE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)
/* arena_seal_writes: no new writable mapping and no write(2), for anyone,
 * while the writable mappings that exist go on working; and no seal can
 * be added or lifted after these. */
#define ARENA_WRITE_SEALS (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

/* A read-only descriptor of the same object, for clients: a new open file
 * description, so it cannot be turned writable with fcntl, and mmap with
 * PROT_WRITE, write, ftruncate and fallocate all refuse it. */
static int arena_reopen_readonly(int fd)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int ro = open(path, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

int arena_create(const struct arena_plan *plan, struct arena *out)
{
	if (plan->n_pipelines > ARENA_PIPELINES_MAX || plan->n_workers > ARENA_WORKERS_MAX ||
	    plan->slot_bytes % ARENA_ALIGN != 0 || plan->n_slots == 0)
		return -EINVAL;
	struct arena_header h;
	arena_plan_header(plan, &h);

	/* A memfd has no name in any filesystem: nothing is left behind after
	 * a crash. 0400: a client of another user cannot reopen it for
	 * writing through /proc/self/fd (a memfd starts at 0777). */
	int fd = memfd_create("loaderd-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int err;
	if (fchmod(fd, 0400) < 0 || ftruncate(fd, (off_t)h.total_bytes) < 0) {
		err = -errno;
		goto close_fd;
	}
	/* Reserve every page now: a lack of memory fails here, not as a SIGBUS
	 * in a worker halfway through an epoch. posix_fallocate returns the
	 * error rather than setting errno. */
	err = posix_fallocate(fd, 0, (off_t)h.total_bytes);
	if (err != 0) {
		err = -err;
		goto close_fd;
	}
	if (fcntl(fd, F_ADD_SEALS, ARENA_SIZE_SEALS) < 0) {
		err = -errno;
		goto close_fd;
	}
	int client_fd = arena_reopen_readonly(fd);
	if (client_fd < 0) {
		err = client_fd;
		goto close_fd;
	}
	uint8_t *base = NULL;
	err = arena_map_fd(fd, h.total_bytes, true, &base);
	if (err < 0)
		goto close_client_fd;
	memcpy(base, &h, sizeof(h));
	out->fd = fd;
	out->client_fd = client_fd;
	out->base = base;
	out->bytes = h.total_bytes;
	out->hdr = (struct arena_header *)base;
	return 0;
close_client_fd:
	close(client_fd);
close_fd:
	close(fd);
	return err;
}

int arena_seal_writes(struct arena *a)
{
	if (fcntl(a->fd, F_ADD_SEALS, ARENA_WRITE_SEALS) < 0)
		return -errno;
	return 0;
}

bool arena_writes_sealed(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);
	return seals >= 0 && (seals & F_SEAL_FUTURE_WRITE);
}

int arena_attach(int fd, bool writable, struct arena *out)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < sizeof(struct arena_header))
		return -EPROTO;
	uint8_t *base = NULL;
	int err = arena_map_fd(fd, (size_t)st.st_size, writable, &base);
	if (err < 0)
		return err;
	const struct arena_header *h = (const struct arena_header *)base;
	struct arena_plan plan = {
		.n_pipelines = h->n_pipelines, .n_workers = h->n_workers_max,
		.n_slots = h->n_slots, .slot_bytes = h->slot_bytes,
		.indexes_bytes = h->indexes_bytes < (1ull << 48) ? h->indexes_bytes : 0,
	};
	struct arena_header expect;
	arena_plan_header(&plan, &expect);
	if (h->magic != ARENA_MAGIC || h->version != ARENA_VERSION ||
	    h->n_pipelines > ARENA_PIPELINES_MAX || h->n_workers_max > ARENA_WORKERS_MAX ||
	    memcmp(h, &expect, sizeof(expect)) != 0 || h->total_bytes != (uint64_t)st.st_size) {
		munmap(base, (size_t)st.st_size);
		return -EPROTO;
	}
	out->fd = fd;
	out->client_fd = -1;
	out->base = base;
	out->bytes = (size_t)st.st_size;
	out->hdr = (struct arena_header *)base;
	return 0;
}

void arena_close(struct arena *a)
{
	/* base is set exactly when the arena owns a mapping and its fd: a
	 * zeroed arena has fd 0, which is not its to close. */
	if (a->base) {
		munmap(a->base, a->bytes);
		if (a->fd >= 0)
			close(a->fd);
		if (a->client_fd >= 0)
			close(a->client_fd);
	}
	a->base = NULL;
	a->hdr = NULL;
	a->bytes = 0;
	a->fd = -1;
	a->client_fd = -1;
}

struct arena_pipeline *arena_pipeline(const struct arena *a, uint32_t index)
{
	return (struct arena_pipeline *)(a->base + a->hdr->pipelines_offset) + index;
}

struct ring arena_cmd_ring(const struct arena *a, uint32_t worker)
{
	struct ring r;
	uint8_t *pair = a->base + a->hdr->rings_offset + (uint64_t)worker * a->hdr->ring_pair_bytes;
	ring_view(&r, pair, sizeof(struct work_cmd));
	return r;
}

struct ring arena_done_ring(const struct arena *a, uint32_t worker)
{
	struct ring r;
	uint8_t *pair = a->base + a->hdr->rings_offset + (uint64_t)worker * a->hdr->ring_pair_bytes;
	ring_view(&r, pair + arena_align(ring_bytes(sizeof(struct work_cmd))),
		  sizeof(struct work_done));
	return r;
}

struct worker_beat *arena_worker_beat(const struct arena *a, uint32_t worker)
{
	uint8_t *pair = a->base + a->hdr->rings_offset + (uint64_t)worker * a->hdr->ring_pair_bytes;
	return (struct worker_beat *)(pair + arena_align(ring_bytes(sizeof(struct work_cmd))) +
				      arena_align(ring_bytes(sizeof(struct work_done))));
}

struct worker_stats *arena_worker_stats(const struct arena *a, uint32_t worker)
{
	return (struct worker_stats *)((uint8_t *)arena_worker_beat(a, worker) +
				       arena_align(sizeof(struct worker_beat)));
}

uint64_t arena_indexes_offset(const struct arena *a)
{
	return a->hdr->indexes_offset;
}

uint64_t arena_slot_offset(const struct arena *a, uint32_t slot)
{
	return a->hdr->slots_offset + (uint64_t)slot * a->hdr->slot_bytes;
}

void *arena_range(const struct arena *a, uint64_t offset, uint64_t len)
{
	if (offset > a->bytes || len > a->bytes - offset)
		return NULL;
	return a->base + offset;
}
