/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ring: a single-producer single-consumer queue of fixed-size entries in
 * shared memory, used between the master and each worker process (one
 * command ring master->worker, one completion ring worker->master).
 *
 * Contract: exactly one process pushes and one pops. push publishes the
 * entry with a release store of tail; pop reads it after an acquire load of
 * tail, so an entry (and everything the producer wrote before pushing it,
 * such as the samples in a staging slot) is visible once popped. Wake-ups
 * are not the ring's business: the caller pairs each ring with an eventfd.
 */
#ifndef LDR_SHM_RING_H
#define LDR_SHM_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"

struct ring {
	struct ring_header *hdr;
	uint8_t *entries;
	uint32_t entry_bytes;
};

/* Bytes a ring of RING_ENTRIES entries of entry_bytes occupies. */
size_t ring_bytes(uint32_t entry_bytes);

/* A view of the ring at mem (ring_bytes(entry_bytes) bytes). */
void ring_view(struct ring *r, void *mem, uint32_t entry_bytes);

/* Empties the ring. Only while neither side is using it (before a worker
 * is spawned, or after it has exited). */
void ring_reset(struct ring *r);

/* Producer: copies entry in; false when the ring is full. */
bool ring_push(struct ring *r, const void *entry);

/* Consumer: copies the oldest entry out; false when the ring is empty. */
bool ring_pop(struct ring *r, void *entry);

/* Entries waiting; exact for either side's own view, a snapshot otherwise. */
uint32_t ring_count(const struct ring *r);

#endif
