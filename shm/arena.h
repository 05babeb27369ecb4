/*
 * arena: the daemon's one shared-memory segment (layout in shm/layout.h).
 *
 * The master creates it at start as a memfd: nameless from birth (nothing
 * is ever left in /dev/shm), every page reserved with fallocate (a lack of
 * memory is an error now rather than a SIGBUS later), then sealed against
 * any change of size (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL) and given
 * mode 0400, and it fills in the header and pipeline table.
 *
 * Two descriptors of it exist. Workers inherit the read-write one (fd) and
 * map it read-write. Clients receive only client_fd, a read-only reopen of
 * the same object: it cannot be mapped writable, written, truncated or
 * punched; the seals stop anyone (root included) from changing the size,
 * so no client can make the daemon, a worker or another client die of
 * SIGBUS; and the 0400 mode stops a client of another user from reopening
 * it read-write through /proc/self/fd. Root and loaderd's own user can
 * still reopen it read-write, as they can ptrace the daemon anyway.
 *
 * Who writes what: the master writes the header, the pipeline table and
 * the indexes before spawning workers; a worker writes only into the staging slot rows named
 * by its commands and into its own rings' producer side.
 */
#ifndef LDR_SHM_ARENA_H
#define LDR_SHM_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"
#include "shm/ring.h"

struct arena {
	int fd;              /* read-write; -1 when closed */
	int client_fd;       /* read-only reopen for clients; -1 when none */
	uint8_t *base;
	size_t bytes;
	struct arena_header *hdr;
};

struct arena_plan {
	uint32_t n_pipelines; /* <= ARENA_PIPELINES_MAX */
	uint32_t n_workers;   /* ring pairs to reserve, <= ARENA_WORKERS_MAX */
	uint32_t n_slots;
	uint64_t slot_bytes;  /* a multiple of ARENA_ALIGN */
	uint64_t indexes_bytes; /* image pipelines' sample lists, < 2^48 */
};

/* bytes rounded up to ARENA_ALIGN, where every region of the arena starts
 * (the caller keeps bytes below 2^64 - ARENA_ALIGN). */
static inline uint64_t arena_align(uint64_t bytes)
{
	return (bytes + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
}

/* Bytes the arena of a plan occupies; UINT64_MAX when that overflows. */
uint64_t arena_plan_bytes(const struct arena_plan *plan);

/* Creates, sizes (fallocate), seals and maps a fresh arena, writes its
 * header and opens client_fd. Both fds are O_CLOEXEC; the caller hands
 * them to children and clients explicitly. Needs /proc (for the read-only
 * reopen). Returns 0 or -errno (-ENOSPC or -ENOMEM: not enough memory for
 * the plan; the caller checks the plan against the memory first, since a
 * shmem object larger than memory is filled page by page until it fails). */
int arena_create(const struct arena_plan *plan, struct arena *out);

/* Maps an arena received from elsewhere (a worker's inherited fd) and
 * validates its header (magic, version, sizes against the fd's size).
 * Takes ownership of fd on success; client_fd is -1.
 * Returns 0 or -errno (-EPROTO: not a loaderd arena of this version). */
int arena_attach(int fd, bool writable, struct arena *out);

/* Unmaps and closes; accepts a zeroed or already-closed arena. */
void arena_close(struct arena *a);

struct arena_pipeline *arena_pipeline(const struct arena *a, uint32_t index);
struct ring arena_cmd_ring(const struct arena *a, uint32_t worker);
struct ring arena_done_ring(const struct arena *a, uint32_t worker);
/* Worker `worker`'s beat (shm/layout.h): it writes, the master reads. */
struct worker_beat *arena_worker_beat(const struct arena *a, uint32_t worker);
uint64_t arena_slot_offset(const struct arena *a, uint32_t slot);
/* Start of the indexes region: the master copies each image pipeline's
 * sample list there at start (arena_image_params says where). */
uint64_t arena_indexes_offset(const struct arena *a);

/* Pointer to [offset, offset+len) or NULL when that range is outside. */
void *arena_range(const struct arena *a, uint64_t offset, uint64_t len);

#endif
