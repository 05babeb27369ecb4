/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_impl.h: the client library's handle, shared by its files; nothing
 * outside the library includes it (client/loaderd.h is the interface).
 *
 *   client.c   the connection (frames in and out, the handle's error
 *              text), attach and WELCOME, the pipeline's facts, close
 *   batch.c    batches: next, release, the device calls on a batch, sample
 *              indices, position tokens
 *   control.c  control requests without a handle: status, reload
 *   device.c   the GPU side through the driver API (device.h)
 *   decode.c   the client's own GPU JPEG decoding, on a thread (decode.h)
 *
 * A handle owns one SOCK_SEQPACKET connection and, once attached, one
 * mapping of the daemon's arena (host delivery: shared read-only, or
 * private copy-on-write with LDR_ATTACH_WRITABLE) or one device
 * ring (device delivery, device.h). The daemon is trusted to mean well but
 * not to be bug-free: every number it sends (sizes, offsets, sequence
 * numbers, row counts) is checked before a pointer is formed from it, and a
 * frame that breaks a rule is -EPROTO with a text saying which.
 *
 * After the connection fails (the daemon's ERROR, its close, a bad frame)
 * the handle stays failed: later calls return the same code and ldr_error()
 * keeps the first reason.
 */
#ifndef LDR_CLIENT_CLIENT_IMPL_H
#define LDR_CLIENT_CLIENT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gpu_uuid.h"
#include "common/position.h"
#include "common/sampler.h"
#include "common/split.h"
#include "decode.h"
#include "device.h"
#include "loaderd.h"
#include "proto/wire.h"

#define CLIENT_ERROR_MAX (PROTO_ERROR_TEXT_MAX + 3072) /* room for connect_why.h's text */

/* A batch handed out by ldr_next() and not yet released. */
struct client_held_batch {
	bool used;
	uint64_t seq;
	uint64_t epoch;
	uint64_t epoch_offset;
	uint64_t first;
	uint32_t slot;
	uint32_t generation;
	uint32_t rows;
	uint64_t slot_offset; /* in the arena (host delivery) */
	bool last;
	bool decoded;     /* its rows were decoded here (decode.h) */
	uint64_t wait_ns; /* how long ldr_next waited for it: RELEASE's wait_ns */
};

struct ldr_client {
	int sock;                   /* -1 when not connected */
	char socket_path[108];      /* connected to (sun_path's size) */
	int attach_timeout_ms;      /* ldr_set_attach_timeout: 0 the default, < 0 forever */
	int failed;                 /* 0, or the -errno the connection died with */
	bool attached;
	uint64_t next_request_id;
	char error[CLIENT_ERROR_MAX];

	/* WELCOME facts, valid once attached */
	const uint8_t *arena;       /* host delivery */
	size_t arena_bytes;
	bool arena_private;         /* mapped MAP_PRIVATE writable (LDR_ATTACH_WRITABLE) */
	int pagemap_fd;             /* /proc/self/pagemap when arena_private, else -1 */
	struct device_ring *ring;   /* device delivery */
	int device_ordinal;
	char device_uuid[GPU_UUID_TEXT_MAX]; /* "" for host delivery */
	struct proto_welcome welcome;
	uint64_t tensor_row_bytes[PROTO_TENSORS_MAX];
	struct sampler sampler;

	uint64_t next_seq;          /* seq the next READY must carry */
	uint32_t depth;             /* granted: most batches held at once */
	uint32_t n_held;
	struct client_held_batch *held; /* depth entries */

	struct position position;   /* after the highest-seq released batch */
	uint32_t split;             /* enum split_id: the split attached to */
	bool grouped;               /* a member of a group (ldr_attach_opts.group) */
	bool released_any;
	uint64_t position_seq;

	/* A client that decodes its GPU's JPEGs (decode.h): READYs are read
	 * by ldr_next (all that are there when it is called, then each as it
	 * arrives while it waits) and their rows queued for the decoding thread;
	 * pending holds them, in order, until ldr_next hands them out. An ERROR
	 * or BYE read behind them waits until they are handed out. */
	struct decoder *decoder;
	char decode_why_not[256];   /* device delivery without it: why */
	struct proto_ready pending[PROTO_DEVICE_SLOTS_MAX];
	uint32_t pending_head, n_pending;
	/* When each pending READY was read, for the decode waits of
	 * ldr_stats: in which ldr_next call (next_calls) and whether by its
	 * first look (READ_AT_CALL: it had waited in the socket) or while the
	 * call waited for it (READ_IN_WAIT). */
	struct {
		uint64_t call;
		uint8_t how;
	} pending_read[PROTO_DEVICE_SLOTS_MAX];
	uint64_t next_calls;        /* ldr_next calls of a decoding client */
	uint8_t reading;            /* READ_AT_CALL, READ_IN_WAIT or READ_AHEAD: who reads */
	struct client_ahead *ahead; /* the read-ahead thread (ahead.c), or NULL */
	uint64_t recv_seq;          /* seq the next READY read must carry */
	int deferred;               /* 0, or the failure read behind pending batches */
	int ahead_failed;           /* 0, or a failure of the read-ahead thread's read:
				     * the next ldr_next fails with it at once */
	char deferred_text[CLIENT_ERROR_MAX]; /* the text of either */

	struct ldr_stats stats;     /* batches and wait_ns; the rest from the decoder */
	uint64_t wait_carry;        /* waited by calls that timed out or were interrupted:
				     * counted to the batch the next call hands out */

	struct proto_msg msg;       /* the frame being sent or received (~64 KiB) */
};

/*
 * ahead.c: for a client that decodes its GPU's JPEGs, a thread of the
 * library that reads the daemon's frames while the caller is away from
 * ldr_next, so that a batch's decoding starts when its READY arrives, not
 * at the caller's next call ($LOADERD_CLIENT_READ_AHEAD=1; off by
 * default). The handle's frame state (c->msg, the pending READYs, the
 * depth count, the socket) is then shared with the thread: ldr_next and
 * ldr_release_streams hold client_lock while they use it, and the thread
 * holds it while it reads. Without the thread the lock is no lock.
 */
int client_ahead_start(struct ldr_client *c);   /* 0 or -errno with the reason set */
void client_ahead_stop(struct ldr_client *c);   /* joins the thread; NULL ahead is fine */
void client_lock(struct ldr_client *c);
void client_unlock(struct ldr_client *c);
/* batch.c, under the lock: reads every frame there now, queuing READYs for
 * the decoding thread, as ldr_next would; a failure to read is kept for
 * the next ldr_next (ahead_failed), which fails with it at once as when it
 * reads itself. Whether the thread should stop reading (the stream ended
 * or failed). */
bool client_read_ahead(struct ldr_client *c);

/* Writes the handle's error text (common/errtext.h) and returns code. */
int client_error(struct ldr_client *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Marks the connection dead with code r (the text is already set); r. */
int client_fail(struct ldr_client *c, int r);

/* A handle with no connection yet, or NULL (out of memory). */
struct ldr_client *client_new(void);

/* Connects c to path (NULL: the default): 0 or -errno with the reason set. */
int client_connect_socket(struct ldr_client *c, const char *path);

/* When the daemon at path is starting (its status says "state: starting"),
 * what it is doing, "daemon is starting: pipeline train: listing
 * /data/train: 1,200,000 files so far, 12.0 s", into buf; else "". Asks
 * for the status on a connection of its own, waiting at most a second
 * (control.c). */
void client_starting_text(const char *path, char *buf, size_t cap);

/*
 * Waits up to timeout_ms (< 0: forever) for one frame into c->msg. An fd
 * riding along goes to *fd_out, or is closed when fd_out is NULL. Frames
 * the decoder refuses are -EPROTO.
 */
int client_recv_frame(struct ldr_client *c, int timeout_ms, int *fd_out);

/*
 * Sends c->msg (`what` names it in an error). When the daemon is gone it
 * may have said why just before closing (an ERROR such as "daemon shutting
 * down", or a refused client), and that frame is still queued for us: it
 * is the reason reported.
 */
int client_send_frame(struct ldr_client *c, const char *what);

/* The daemon's ERROR frame (in c->msg) as a return value and text. */
int client_daemon_error(struct ldr_client *c);

#endif
