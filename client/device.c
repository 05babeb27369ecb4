/* SPDX-License-Identifier: Apache-2.0 */
/* device: the client's GPU side through the CUDA driver API (device.h). */
#include "device.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "common/gpu_uuid.h"

/* The few driver API types used, as cuda.h declares them (the library
 * builds without the toolkit; the ABI is stable). */
typedef int cu_result;
typedef int cu_device;
typedef struct cu_ctx_st *cu_context;
typedef struct cu_stream_st *cu_stream;
typedef struct cu_event_st *cu_event;
typedef unsigned long long cu_deviceptr;
typedef struct { char reserved[PROTO_IPC_HANDLE_BYTES]; } cu_ipc_mem_handle;
typedef struct { char reserved[PROTO_IPC_HANDLE_BYTES]; } cu_ipc_event_handle;
typedef struct { char bytes[PROTO_UUID_BYTES]; } cu_uuid;

#define CU_SUCCESS 0
#define CU_ERROR_NOT_READY 600
#define CU_ERROR_NO_DEVICE 100
#define CU_ERROR_INVALID_DEVICE 101
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

static struct device_driver {
	bool loaded;
	char error[256]; /* why loading failed */
	cu_result (*init)(unsigned);
	cu_result (*device_get_count)(int *);
	cu_result (*device_get)(cu_device *, int);
	cu_result (*device_get_uuid)(cu_uuid *, cu_device);
	cu_result (*primary_ctx_retain)(cu_context *, cu_device);
	cu_result (*primary_ctx_release)(cu_device);
	cu_result (*ctx_push)(cu_context);
	cu_result (*ctx_pop)(cu_context *);
	cu_result (*ipc_open_mem)(cu_deviceptr *, cu_ipc_mem_handle, unsigned);
	cu_result (*ipc_close_mem)(cu_deviceptr);
	cu_result (*ipc_open_event)(cu_event *, cu_ipc_event_handle);
	cu_result (*event_destroy)(cu_event);
	cu_result (*event_record)(cu_event, cu_stream);
	cu_result (*event_synchronize)(cu_event);
	cu_result (*event_query)(cu_event);
	cu_result (*stream_wait_event)(cu_stream, cu_event, unsigned);
	cu_result (*stream_query)(cu_stream);
	cu_result (*memcpy_dtoh)(void *, cu_deviceptr, size_t);
	cu_result (*get_error_string)(cu_result, const char **);
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

/* Versioned names: the ones cuda.h maps the API names to. */
static const struct {
	const char *name;
	size_t offset;
} drv_symbols[] = {
#define SYM(name, field) { name, offsetof(struct device_driver, field) }
	SYM("cuInit", init),
	SYM("cuDeviceGetCount", device_get_count),
	SYM("cuDeviceGet", device_get),
	SYM("cuDeviceGetUuid_v2", device_get_uuid),
	SYM("cuDevicePrimaryCtxRetain", primary_ctx_retain),
	SYM("cuDevicePrimaryCtxRelease_v2", primary_ctx_release),
	SYM("cuCtxPushCurrent_v2", ctx_push),
	SYM("cuCtxPopCurrent_v2", ctx_pop),
	SYM("cuIpcOpenMemHandle_v2", ipc_open_mem),
	SYM("cuIpcCloseMemHandle", ipc_close_mem),
	SYM("cuIpcOpenEventHandle", ipc_open_event),
	SYM("cuEventDestroy_v2", event_destroy),
	SYM("cuEventRecord", event_record),
	SYM("cuEventQuery", event_query),
	SYM("cuEventSynchronize", event_synchronize),
	SYM("cuStreamWaitEvent", stream_wait_event),
	SYM("cuStreamQuery", stream_query),
	SYM("cuMemcpyDtoH_v2", memcpy_dtoh),
	SYM("cuGetErrorString", get_error_string),
#undef SYM
};

static void drv_load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		errtext(drv.error, sizeof drv.error, -ENODEV, "the CUDA driver is not available (%s)",
			dlerror());
		return;
	}
	for (size_t i = 0; i < sizeof drv_symbols / sizeof drv_symbols[0]; i++) {
		void *f = dlsym(lib, drv_symbols[i].name);
		if (!f) {
			errtext(drv.error, sizeof drv.error, -ENODEV, "the CUDA driver lacks %s: too old",
				drv_symbols[i].name);
			return; /* lib stays loaded: harmless, and other users may share it */
		}
		memcpy((char *)&drv + drv_symbols[i].offset, &f, sizeof f);
	}
	cu_result r = drv.init(0);
	if (r != CU_SUCCESS) {
		const char *s = NULL;
		drv.get_error_string(r, &s);
		errtext(drv.error, sizeof drv.error, -ENODEV, "cuInit: %s", s ? s : "unknown error");
		return;
	}
	drv.loaded = true;
}

/* Loads the driver once per process: 0, or -ENODEV with why in err. */
static int device_driver(char *err, size_t cap)
{
	pthread_once(&drv_once, drv_load);
	return drv.loaded ? 0 : errtext(err, cap, -ENODEV, "%s", drv.error);
}

/* Driver errors become text in exactly one place. */
static int cu_fail(cu_result r, char *err, size_t cap, const char *what)
{
	const char *s = NULL;
	if (drv.get_error_string(r, &s) != CU_SUCCESS || !s)
		s = "unknown error";
	return errtext(err, cap, r == CU_ERROR_NO_DEVICE || r == CU_ERROR_INVALID_DEVICE ? -ENODEV : -EIO,
		       "%s: %s (CUDA error %d)", what, s, r);
}

struct device_ring {
	cu_device device;
	cu_context ctx;
	cu_deviceptr base;
	uint32_t slots;
	uint64_t ring_bytes;
	cu_event ready[PROTO_DEVICE_SLOTS_MAX];
	cu_event released[PROTO_DEVICE_SLOTS_MAX];
};

int device_resolve(const char *spec, int *ordinal, uint8_t uuid[PROTO_UUID_BYTES], char *err,
		   size_t cap)
{
	uint8_t want[PROTO_UUID_BYTES];
	bool by_uuid = gpu_uuid_parse(spec, want) == 0;
	char *end = NULL;
	long n = by_uuid ? 0 : strtol(spec, &end, 10);
	if (!by_uuid && (end == spec || *end != '\0' || n < 0 || n > 1024))
		return errtext(err, cap, -EINVAL, "device \"%s\" is neither a CUDA device ordinal nor a "
			       "GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", spec);
	int rc = device_driver(err, cap);
	if (rc < 0)
		return rc;
	int count = 0;
	cu_result r = drv.device_get_count(&count);
	if (r != CU_SUCCESS)
		return cu_fail(r, err, cap, "cuDeviceGetCount");
	for (int i = 0; i < count; i++) {
		cu_device d;
		cu_uuid u;
		if (by_uuid ? false : i != n)
			continue;
		r = drv.device_get(&d, i);
		if (r == CU_SUCCESS)
			r = drv.device_get_uuid(&u, d);
		if (r != CU_SUCCESS)
			return cu_fail(r, err, cap, "cuDeviceGetUuid");
		if (by_uuid && memcmp(u.bytes, want, PROTO_UUID_BYTES) != 0)
			continue;
		*ordinal = i;
		memcpy(uuid, u.bytes, PROTO_UUID_BYTES);
		return 0;
	}
	const char *visible = getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset";
	if (by_uuid)
		return errtext(err, cap, -ENODEV, "no GPU with UUID %s is visible to this process (%d "
			       "device%s; CUDA_VISIBLE_DEVICES=%s)", spec, count, count == 1 ? "" : "s",
			       visible);
	return errtext(err, cap, -ENODEV, "CUDA device %ld does not exist: this process sees %d "
		       "(CUDA_VISIBLE_DEVICES=%s)", n, count, visible);
}

/* Makes the ring's context current for one call sequence. */
static int device_push(struct device_ring *r, char *err, size_t cap)
{
	cu_result e = drv.ctx_push(r->ctx);
	return e == CU_SUCCESS ? 0 : cu_fail(e, err, cap, "cuCtxPushCurrent");
}

static void device_pop(void)
{
	cu_context unused;
	drv.ctx_pop(&unused);
}

int device_open(int ordinal, const struct proto_device *dev, struct device_ring **out, char *err,
		size_t cap)
{
	int rc = device_driver(err, cap);
	if (rc < 0)
		return rc;
	struct device_ring *r = calloc(1, sizeof *r);
	if (!r)
		return errtext(err, cap, -ENOMEM, "out of memory");
	cu_result e = drv.device_get(&r->device, ordinal);
	if (e != CU_SUCCESS) {
		rc = cu_fail(e, err, cap, "cuDeviceGet");
		free(r);
		return rc;
	}
	e = drv.primary_ctx_retain(&r->ctx, r->device);
	if (e != CU_SUCCESS) {
		rc = cu_fail(e, err, cap, "cuDevicePrimaryCtxRetain");
		free(r);
		return rc;
	}
	rc = device_push(r, err, cap);
	if (rc < 0)
		goto release_ctx;
	cu_ipc_mem_handle mh;
	memcpy(mh.reserved, dev->mem_handle, sizeof mh.reserved);
	e = drv.ipc_open_mem(&r->base, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (e != CU_SUCCESS) {
		rc = cu_fail(e, err, cap, "cuIpcOpenMemHandle of the daemon's device ring");
		r->base = 0;
		goto pop_ctx;
	}
	r->ring_bytes = dev->ring_bytes;
	for (uint32_t d = 0; d < dev->slots; d++) {
		cu_ipc_event_handle eh;
		memcpy(eh.reserved, dev->ready[d], sizeof eh.reserved);
		e = drv.ipc_open_event(&r->ready[d], eh);
		if (e == CU_SUCCESS) {
			memcpy(eh.reserved, dev->released[d], sizeof eh.reserved);
			e = drv.ipc_open_event(&r->released[d], eh);
		}
		if (e != CU_SUCCESS) {
			rc = cu_fail(e, err, cap, "cuIpcOpenEventHandle of the ring's events");
			goto pop_ctx;
		}
		r->slots = d + 1;
	}
	device_pop();
	*out = r;
	return 0;
pop_ctx:
	device_pop();
release_ctx:
	device_close(r);
	return rc;
}

void device_close(struct device_ring *r)
{
	if (!r)
		return;
	if (drv.ctx_push(r->ctx) == CU_SUCCESS) {
		for (uint32_t d = 0; d < r->slots; d++) {
			/* Work the client ordered before its releases may still read the
			 * ring: it must finish before the mapping goes. */
			if (r->released[d])
				drv.event_synchronize(r->released[d]);
		}
		for (uint32_t d = 0; d < PROTO_DEVICE_SLOTS_MAX; d++) {
			if (r->ready[d])
				drv.event_destroy(r->ready[d]);
			if (r->released[d])
				drv.event_destroy(r->released[d]);
		}
		if (r->base)
			drv.ipc_close_mem(r->base);
		device_pop();
	}
	drv.primary_ctx_release(r->device);
	free(r);
}

const void *device_ptr(const struct device_ring *r, uint64_t offset)
{
	return (const void *)(uintptr_t)(r->base + offset);
}

int device_wait(struct device_ring *r, uint32_t slot, void *stream, char *err, size_t cap)
{
	int rc = device_push(r, err, cap);
	if (rc < 0)
		return rc;
	/* The daemon sends READY once the copy has landed, so the ready event
	 * has completed and the stream needs no wait; a GPU-side wait on
	 * another process's event would cost the stream some 160 us. The wait
	 * stays for an event not yet complete (a daemon that sent READY
	 * earlier). */
	cu_result e = drv.event_query(r->ready[slot]);
	if (e == CU_ERROR_NOT_READY)
		e = drv.stream_wait_event((cu_stream)stream, r->ready[slot], 0);
	device_pop();
	return e == CU_SUCCESS ? 0 : cu_fail(e, err, cap, "cuStreamWaitEvent on the ready event");
}

int device_release(struct device_ring *r, uint32_t slot, void *const *streams, unsigned n,
		   char *err, size_t cap)
{
	int rc = device_push(r, err, cap);
	if (rc < 0)
		return rc;
	/* Streams with nothing left to run have finished reading the batch:
	 * with every one of them idle the slot is free now, and the event,
	 * whose last record is complete or orders only older work, needs no
	 * new record. A record would have to wait for this process's turn on
	 * the GPU, and so would the daemon's next copy into the slot. */
	cu_result e = CU_SUCCESS;
	unsigned idle = 0;
	while (idle < n && (e = drv.stream_query((cu_stream)streams[idle])) == CU_SUCCESS)
		idle++;
	if (idle == n) {
		device_pop();
		return 0;
	}
	if (e != CU_ERROR_NOT_READY) {
		device_pop();
		return cu_fail(e, err, cap, "cuStreamQuery of a stream that read the batch");
	}
	/* Each further stream waits for the event as last recorded, then
	 * records it again: it completes once every stream's work is done. */
	e = drv.event_record(r->released[slot], (cu_stream)streams[0]);
	for (unsigned i = 1; e == CU_SUCCESS && i < n; i++) {
		e = drv.stream_wait_event((cu_stream)streams[i], r->released[slot], 0);
		if (e == CU_SUCCESS)
			e = drv.event_record(r->released[slot], (cu_stream)streams[i]);
	}
	device_pop();
	return e == CU_SUCCESS ? 0 : cu_fail(e, err, cap, "cuEventRecord of the released event");
}

int device_copy_to_host(struct device_ring *r, uint32_t slot, const void *src, void *dst,
			size_t bytes, char *err, size_t cap)
{
	int rc = device_push(r, err, cap);
	if (rc < 0)
		return rc;
	cu_result e = drv.event_synchronize(r->ready[slot]);
	if (e != CU_SUCCESS) {
		device_pop();
		return cu_fail(e, err, cap, "cuEventSynchronize on the ready event");
	}
	e = drv.memcpy_dtoh(dst, (cu_deviceptr)(uintptr_t)src, bytes);
	device_pop();
	return e == CU_SUCCESS ? 0 : cu_fail(e, err, cap, "cuMemcpyDtoH");
}

int device_synchronize(struct device_ring *r, char *err, size_t cap)
{
	int rc = device_push(r, err, cap);
	if (rc < 0)
		return rc;
	for (uint32_t d = 0; d < r->slots; d++) {
		cu_result e = drv.event_synchronize(r->released[d]);
		if (e != CU_SUCCESS) {
			device_pop();
			return cu_fail(e, err, cap, "cuEventSynchronize on a released event");
		}
	}
	device_pop();
	return 0;
}
