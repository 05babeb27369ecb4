/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device: the client library's GPU side (internal to client/).
 *
 * Talks to the CUDA driver API, loaded with dlopen("libcuda.so.1") on first
 * use, so the library links no CUDA library and host delivery works where
 * CUDA is absent. Everything runs in the device's primary context, the one
 * the CUDA runtime and the frameworks use, so device pointers, streams and
 * events are shared with them.
 *
 * A device_ring is one attachment's view of the daemon's ring: the mapped
 * memory (cuIpcOpenMemHandle) and the per-slot ready and released events
 * (cuIpcOpenEventHandle), opened once at attach and closed at close.
 *
 * Errors: 0 or -errno, with the reason (naming the driver call) in err.
 * Not thread-safe beyond what the client handle promises (loaderd.h).
 */
#ifndef LDR_CLIENT_DEVICE_H
#define LDR_CLIENT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

struct device_ring;

/* Resolves "N" (an ordinal of this process) or "GPU-<uuid>" to a device and
 * its UUID. -ENODEV (no driver, no such device), -EINVAL (malformed). */
int device_resolve(const char *spec, int *ordinal, uint8_t uuid[PROTO_UUID_BYTES], char *err,
		   size_t cap);

/* Opens the ring a WELCOME describes on device `ordinal`. */
int device_open(int ordinal, const struct proto_device *dev, struct device_ring **out, char *err,
		size_t cap);

/* Waits for every released event (the client's work on its batches), then
 * closes the events and the mapping and releases the context. NULL is fine. */
void device_close(struct device_ring *r);

/* Device address of byte `offset` of the ring. */
const void *device_ptr(const struct device_ring *r, uint64_t offset);

/* stream waits for ready[slot]. */
int device_wait(struct device_ring *r, uint32_t slot, void *stream, char *err, size_t cap);
/* released[slot] completes once the work enqueued on every one of the n
 * (>= 1) streams so far is done. */
int device_release(struct device_ring *r, uint32_t slot, void *const *streams, unsigned n,
		   char *err, size_t cap);

/* Waits for ready[slot], then copies bytes at src (a device address in the
 * ring) to host memory dst. */
int device_copy_to_host(struct device_ring *r, uint32_t slot, const void *src, void *dst,
			size_t bytes, char *err, size_t cap);

/* Blocks until every released event recorded so far has completed. */
int device_synchronize(struct device_ring *r, char *err, size_t cap);

#endif
