/* SPDX-License-Identifier: Apache-2.0 */
/*
 * arena: the daemon's one shared-memory segment (layout in shm/layout.h).
 *
 * The master creates it at start as a memfd: nameless from birth (nothing
 * is ever left in /dev/shm), every page reserved with fallocate (a lack of
 * memory is an error now rather than a SIGBUS later), sealed against any
 * change of size (F_SEAL_SHRINK, F_SEAL_GROW) and given mode 0400, and it
 * fills in the header and pipeline table.
 *
 * Who may write it is settled once, at start: the master maps it
 * read-write in arena_create, the worker zygote (worker/zygote.h) maps it
 * read-write from the fd it is started with, and then the master calls
 * arena_seal_writes: F_SEAL_FUTURE_WRITE and F_SEAL_SEAL. From then on no
 * process, root included, can map the object writable again, write(2) it,
 * punch it or make a read-only mapping of it writable with mprotect,
 * whichever descriptor it holds or reopens (through /proc/PID/fd, or
 * /proc/PID/map_files): the seal belongs to the object, not to a
 * descriptor. The mappings made before the seal keep working and are
 * inherited across fork (never across exec): that is how every worker,
 * a fork of the zygote, writes it. A process exec'd after the seal can
 * map it read-only only (arena_attach with writable fails with -EPERM).
 *
 * Two descriptors of it exist. fd is the master's own (read-write, which
 * after the seal no longer lets anyone map it writable). Clients, and the
 * GPU decoder processes, which only read it, receive client_fd, a
 * read-only reopen of the same object. The 0400 mode is a second wall: a
 * process of another user cannot even reopen it read-write.
 *
 * Who writes what: the master writes the header, the pipeline table and
 * the indexes before spawning workers, and later an entry of the table and
 * its lists in the index area for a pipeline a reload adds, before any
 * work item names it (shm/layout.h); a worker writes only into the staging slot rows named
 * by its commands, into its own rings' producer side, its beat and its
 * stats; the zygote
 * holds its mapping only to hand it down and never touches the contents.
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

/* Creates, sizes (fallocate), seals against size changes and maps a fresh
 * arena, writes its header and opens client_fd. Writes are not sealed yet:
 * arena_seal_writes does that once every writer has its mapping. Both fds are O_CLOEXEC; the caller hands
 * them to children and clients explicitly. Needs /proc (for the read-only
 * reopen). Returns 0 or -errno (-ENOSPC or -ENOMEM: not enough memory for
 * the plan; the caller checks the plan against the memory first, since a
 * shmem object larger than memory is filled page by page until it fails). */
int arena_create(const struct arena_plan *plan, struct arena *out);

/* Seals the arena against every writable mapping and write made from now
 * on (F_SEAL_FUTURE_WRITE), and against any further change of its seals
 * (F_SEAL_SEAL). Mappings made before keep their rights. Called once, by
 * the master, after the zygote has mapped it and before any client or
 * worker exists. Returns 0 or -errno (-EINVAL: the kernel predates
 * F_SEAL_FUTURE_WRITE, Linux 5.1; -EPERM: sealed already). */
int arena_seal_writes(struct arena *a);

/* Whether fd's object is sealed against new writable mappings. */
bool arena_writes_sealed(int fd);

/* Maps an arena received from elsewhere (a worker's inherited fd) and
 * validates its header (magic, version, sizes against the fd's size).
 * Takes ownership of fd on success; client_fd is -1.
 * Returns 0 or -errno (-EPROTO: not a loaderd arena of this version;
 * -EPERM: writable asked of an arena arena_seal_writes has sealed). */
int arena_attach(int fd, bool writable, struct arena *out);

/* Unmaps and closes; accepts a zeroed or already-closed arena. */
void arena_close(struct arena *a);

struct arena_pipeline *arena_pipeline(const struct arena *a, uint32_t index);
struct ring arena_cmd_ring(const struct arena *a, uint32_t worker);
struct ring arena_done_ring(const struct arena *a, uint32_t worker);
/* Worker `worker`'s beat (shm/layout.h): it writes, the master reads. */
struct worker_beat *arena_worker_beat(const struct arena *a, uint32_t worker);
/* Worker `worker`'s time and stage figures (shm/layout.h): it writes, the
 * master reads. */
struct worker_stats *arena_worker_stats(const struct arena *a, uint32_t worker);
uint64_t arena_slot_offset(const struct arena *a, uint32_t slot);
/* Start of the indexes region: the master copies each image pipeline's
 * sample list there at start (arena_image_params says where). */
uint64_t arena_indexes_offset(const struct arena *a);

/* Pointer to [offset, offset+len) or NULL when that range is outside. */
void *arena_range(const struct arena *a, uint64_t offset, uint64_t len);

#endif
