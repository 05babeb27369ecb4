/*
 * arena: the daemon's one shared-memory segment (layout in shm/layout.h).
 *
 * The master creates it at start (shm_open with a unique name, unlinked at
 * once so nothing is left in /dev/shm after a crash; fallocate so a full
 * /dev/shm is an error now rather than a SIGBUS later) and fills in the
 * header and pipeline table. Workers inherit the fd and map it read-write;
 * clients receive the fd over the socket and map it read-only.
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
	int fd;              /* -1 when closed */
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

/* Bytes the arena of a plan occupies; UINT64_MAX when that overflows. */
uint64_t arena_plan_bytes(const struct arena_plan *plan);

/* Creates, sizes (fallocate) and maps a fresh arena and writes its header.
 * The fd is O_CLOEXEC; the caller hands it to children explicitly.
 * Returns 0 or -errno (-ENOSPC: /dev/shm too small for the plan). */
int arena_create(const struct arena_plan *plan, struct arena *out);

/* Maps an arena received from elsewhere and validates its header (magic,
 * version, sizes against the fd's size). Takes ownership of fd on success.
 * Returns 0 or -errno (-EPROTO: not a loaderd arena of this version). */
int arena_attach(int fd, bool writable, struct arena *out);

/* Unmaps and closes; accepts a zeroed or already-closed arena. */
void arena_close(struct arena *a);

struct arena_pipeline *arena_pipeline(const struct arena *a, uint32_t index);
struct ring arena_cmd_ring(const struct arena *a, uint32_t worker);
struct ring arena_done_ring(const struct arena *a, uint32_t worker);
uint64_t arena_slot_offset(const struct arena *a, uint32_t slot);
/* Start of the indexes region: the master copies each image pipeline's
 * sample list there at start (arena_image_params says where). */
uint64_t arena_indexes_offset(const struct arena *a);

/* Pointer to [offset, offset+len) or NULL when that range is outside. */
void *arena_range(const struct arena *a, uint64_t offset, uint64_t len);

#endif
