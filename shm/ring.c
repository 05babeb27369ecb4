/* SPDX-License-Identifier: Apache-2.0 */
/* ring: SPSC ring in shared memory (ring.h). */
#include "shm/ring.h"

#include <string.h>

_Static_assert((RING_ENTRIES & (RING_ENTRIES - 1)) == 0, "RING_ENTRIES is a power of two");

size_t ring_bytes(uint32_t entry_bytes)
{
	return sizeof(struct ring_header) + (size_t)RING_ENTRIES * entry_bytes;
}

void ring_view(struct ring *r, void *mem, uint32_t entry_bytes)
{
	r->hdr = mem;
	r->entries = (uint8_t *)mem + sizeof(struct ring_header);
	r->entry_bytes = entry_bytes;
}

void ring_reset(struct ring *r)
{
	atomic_store_explicit(&r->hdr->head, 0, memory_order_relaxed);
	atomic_store_explicit(&r->hdr->tail, 0, memory_order_release);
}

bool ring_push(struct ring *r, const void *entry)
{
	uint32_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
	if (tail - head >= RING_ENTRIES)
		return false;
	memcpy(r->entries + (size_t)(tail & (RING_ENTRIES - 1)) * r->entry_bytes, entry, r->entry_bytes);
	atomic_store_explicit(&r->hdr->tail, tail + 1, memory_order_release);
	return true;
}

bool ring_pop(struct ring *r, void *entry)
{
	uint32_t head = atomic_load_explicit(&r->hdr->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	if (head == tail)
		return false;
	memcpy(entry, r->entries + (size_t)(head & (RING_ENTRIES - 1)) * r->entry_bytes, r->entry_bytes);
	atomic_store_explicit(&r->hdr->head, head + 1, memory_order_release);
	return true;
}

uint32_t ring_count(const struct ring *r)
{
	uint32_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	uint32_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
	return tail - head;
}
