/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto: the loaderd wire format (see proto/PROTOCOL.md for the byte-level
 * description; this header and that document change together).
 *
 * Every frame is a fixed 24-byte little-endian header followed by a typed
 * payload of `length` bytes. Frames travel on a SOCK_SEQPACKET Unix socket,
 * one frame per packet; an fd may ride along with SCM_RIGHTS (proto/wire.h).
 *
 * proto_encode / proto_decode are pure: no I/O, no allocation, no logging.
 * The decoder is the one place untrusted bytes are checked, and it checks
 * everything before returning: header magic and version, the length against
 * PROTO_MAX_PAYLOAD and against the bytes received, every count against its
 * maximum, every enum against its range, every string for length and for
 * embedded NULs. Decoded strings are NUL-terminated copies in fixed buffers,
 * so a decoded message holds no pointer into the frame.
 *
 * Thread-safety: all functions are reentrant.
 */
#ifndef LDR_PROTO_PROTO_H
#define LDR_PROTO_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_MAGIC 0x4452444cu /* bytes "LDRD" */
#define PROTO_VERSION 7
#define PROTO_HEADER_BYTES 24
#define PROTO_MAX_FRAME 65536
#define PROTO_MAX_PAYLOAD (PROTO_MAX_FRAME - PROTO_HEADER_BYTES)

#define PROTO_NAME_MAX 64        /* pipeline / client name, with NUL */
#define PROTO_TOKEN_MAX 192      /* resume token, with NUL */
#define PROTO_SPLIT_MAX 16       /* split name, with NUL */
#define PROTO_GROUP_MAX 64       /* group key, with NUL */
#define PROTO_JOB_MAX 128        /* job key, with NUL */
#define PROTO_DECLARE_MAX 4096   /* a declared pipeline's text, with NUL */
#define PROTO_GROUP_SIZE_MAX 64  /* members of a group */
#define PROTO_TENSOR_NAME_MAX 32 /* tensor name, with NUL */
#define PROTO_TENSORS_MAX 8      /* tensors per batch */
#define PROTO_NDIM_MAX 4         /* dims per tensor, the batch dim included */
#define PROTO_ERROR_TEXT_MAX 1024
#define PROTO_STATUS_TEXT_MAX (PROTO_MAX_PAYLOAD - 8)
/* The JSON status travels in up to 256 STATUS frames (PROTO_FLAG_MORE). */
#define PROTO_STATUS_JSON_FRAMES 256
#define PROTO_STATUS_JSON_MAX (PROTO_STATUS_JSON_FRAMES * PROTO_STATUS_TEXT_MAX)
#define PROTO_UUID_BYTES 16
#define PROTO_DEVICE_SLOTS_MAX 32  /* device ring slots per client */
#define PROTO_IPC_HANDLE_BYTES 64  /* a CUDA IPC memory or event handle */

enum proto_type {
	PROTO_HELLO = 1,      /* client -> daemon, first frame of a data session */
	PROTO_WELCOME = 2,    /* daemon -> client, answers HELLO; carries the arena fd */
	PROTO_READY = 3,      /* daemon -> client, one batch is ready */
	PROTO_RELEASE = 4,    /* client -> daemon, done with a batch */
	PROTO_BYE = 5,        /* either way: orderly close */
	PROTO_ERROR = 6,      /* either way: the sender closes after it */
	PROTO_STATUS_REQ = 7, /* loaderctl -> daemon, first frame of a control session */
	PROTO_STATUS = 8,     /* daemon -> loaderctl, human-readable status text */
	PROTO_RELOAD_REQ = 9, /* loaderctl -> daemon, first frame of a control session:
			       * reload the configuration; answered by STATUS or ERROR */
	PROTO_DECODED = 10,   /* client -> daemon, a decoding client is done with a
			       * batch's compressed images (its staging slot) */
	PROTO_TYPE_MAX = PROTO_DECODED,
};

/* Header flags. */
#define PROTO_FLAG_FD 0x1u   /* an fd rides along with this frame (SCM_RIGHTS) */
#define PROTO_FLAG_JSON 0x2u /* STATUS_REQ: answer with the status as JSON */
#define PROTO_FLAG_MORE 0x4u /* STATUS: another STATUS frame continues this text */
#define PROTO_FLAGS_KNOWN (PROTO_FLAG_FD | PROTO_FLAG_JSON | PROTO_FLAG_MORE)

enum proto_delivery {
	PROTO_DELIVERY_HOST = 0,   /* batches stay in shared memory */
	PROTO_DELIVERY_DEVICE = 1, /* batches on the client's GPU, through CUDA IPC */
	PROTO_DELIVERY_MAX = PROTO_DELIVERY_DEVICE,
};

enum proto_dtype {
	PROTO_DTYPE_UINT8 = 1,
	PROTO_DTYPE_UINT16 = 2,
	PROTO_DTYPE_UINT32 = 3,
	PROTO_DTYPE_INT32 = 4,
	PROTO_DTYPE_INT64 = 5,
	PROTO_DTYPE_FLOAT16 = 6,
	PROTO_DTYPE_FLOAT32 = 7,
	PROTO_DTYPE_MAX = PROTO_DTYPE_FLOAT32,
};

/* Bytes per element of a valid dtype; 0 for an invalid one. */
size_t proto_dtype_bytes(uint32_t dtype);
/* "uint8", "int64", ...; "invalid" for an invalid one. */
const char *proto_dtype_name(uint32_t dtype);
/* "HELLO", ...; "invalid" for an invalid type. */
const char *proto_type_name(uint32_t type);
/* HELLO's pipeline, resume, split and group are words: bytes 0x21..0x7e (printable
 * ASCII, no space), as pipeline names and position tokens are. The offset
 * of the first other byte of the NUL-terminated s, or -1 when there is none. */
long proto_word_bad_byte(const char *s);

struct proto_header {
	uint32_t magic;      /* PROTO_MAGIC */
	uint16_t version;    /* PROTO_VERSION */
	uint16_t type;       /* enum proto_type */
	uint32_t flags;      /* PROTO_FLAG_* */
	uint32_t length;     /* payload bytes, <= PROTO_MAX_PAYLOAD */
	uint64_t request_id; /* echoed in the answer (WELCOME, ERROR, STATUS) */
};

struct proto_hello {
	uint32_t delivery; /* enum proto_delivery */
	uint32_t rank;     /* < world */
	uint32_t world;    /* >= 1 */
	uint32_t depth;    /* batches the client wants in flight; 0 = daemon default */
	uint8_t device_uuid[PROTO_UUID_BYTES]; /* zero for host delivery */
	char pipeline[PROTO_NAME_MAX];         /* a word (proto_word_bad_byte); empty exactly
						* when the client declares its pipeline */
	char client_name[PROTO_NAME_MAX];      /* free text for status, may be empty */
	char resume[PROTO_TOKEN_MAX];          /* position token, a word; empty = start of epoch 0 */
	char split[PROTO_SPLIT_MAX];           /* the dataset split, a word; empty = "train" */
	/* A group of clients that see the same batches from one read (a
	 * tensor-parallel group): its key, a word, empty when group_size is 1;
	 * group_size 1..PROTO_GROUP_SIZE_MAX, 1 = no group. */
	char group[PROTO_GROUP_MAX];
	uint32_t group_size;
	uint32_t flags; /* PROTO_HELLO_* */
	/* A pipeline the client declares instead of naming one: its keys as a
	 * [pipeline.NAME] section's lines ("key = value\n", printable ASCII,
	 * tabs and newlines), and the job it is for, a word: the pipeline is
	 * the job's, shared by that job's ranks (docs/clients.md, "Declaring a
	 * pipeline"). Both empty when the client names a pipeline. */
	char job[PROTO_JOB_MAX];
	char declaration[PROTO_DECLARE_MAX];
};

/* HELLO flags. DECODE (device delivery only): this client can decode on its
 * own GPU, in its own process, the JPEGs the daemon leaves to the GPU; the
 * daemon then stages them and their plans and lets the client decode them
 * (WELCOME.decode, READY's staging slot, DECODED). */
#define PROTO_HELLO_DECODE 0x1u
#define PROTO_HELLO_FLAGS_KNOWN PROTO_HELLO_DECODE

struct proto_tensor {
	char name[PROTO_TENSOR_NAME_MAX]; /* non-empty */
	uint32_t dtype;                   /* enum proto_dtype */
	uint32_t ndim;                    /* 1..PROTO_NDIM_MAX; shape[0] is the batch dim */
	uint64_t shape[PROTO_NDIM_MAX];   /* shape[0] = batch_size; unused dims 0 */
	uint64_t offset;                  /* byte offset of the tensor in a staging slot */
};

/* Device delivery: the client's ring on its GPU, exported once at attach.
 * Device slot d starts at byte d * slot_bytes of the ring; tensor offsets
 * are the same as within a staging slot. ready[d] is recorded by the
 * daemon after its copy into slot d; the client records released[d] when
 * its work on the slot is enqueued. Both are the daemon's events. */
struct proto_device {
	uint32_t slots;      /* 1..PROTO_DEVICE_SLOTS_MAX, = the granted depth */
	uint64_t slot_bytes; /* bytes between consecutive device slots */
	uint64_t ring_bytes; /* the allocation's size, >= slots * slot_bytes */
	uint8_t mem_handle[PROTO_IPC_HANDLE_BYTES];
	uint8_t ready[PROTO_DEVICE_SLOTS_MAX][PROTO_IPC_HANDLE_BYTES];
	uint8_t released[PROTO_DEVICE_SLOTS_MAX][PROTO_IPC_HANDLE_BYTES];
};

struct proto_welcome {
	uint64_t session;     /* daemon-unique id of this attachment */
	uint64_t arena_bytes; /* size of the shared-memory arena (fd in this frame) */
	uint64_t slot_bytes;  /* bytes of one staging slot */
	uint64_t n_samples;   /* dataset size */
	uint64_t seed;
	uint64_t epoch;       /* first epoch delivered */
	uint64_t offset;      /* global start offset within that epoch (sampler.h) */
	uint32_t batch_size;
	uint32_t rank;
	uint32_t world;
	uint32_t depth;       /* granted prefetch depth */
	uint32_t shuffle;     /* 0 or 1 */
	uint32_t drop_last;   /* 0 or 1 */
	uint32_t n_tensors;   /* 1..PROTO_TENSORS_MAX */
	struct proto_tensor tensors[PROTO_TENSORS_MAX];
	uint32_t delivery;    /* enum proto_delivery: host carries the arena fd */
	struct proto_device device; /* delivery device only; zero otherwise */
	uint64_t data;        /* the pipeline's data identity, for its position tokens
			       * (common/position.h) */
	/* 1: the client decodes (it asked with PROTO_HELLO_DECODE, device
	 * delivery, an image pipeline whose GPU takes JPEGs). The arena fd
	 * then rides along as with host delivery, `pipeline` is the pipeline's
	 * index in the arena's table (shm/layout.h: the image parameters, the
	 * paths, the slot's rows) and decode_memory the device memory the
	 * client's decoder may take. 0: neither is used. */
	uint32_t decode;
	uint32_t pipeline;
	uint64_t decode_memory;
	/* The pipeline's name, as its position tokens carry it: a configured
	 * one's, or the name the daemon gave a declared one (a word). */
	char name[PROTO_NAME_MAX];
};

#define PROTO_READY_LAST_IN_EPOCH 0x1u
/* The batch has rows for the client to decode (WELCOME.decode): their JPEGs
 * and plans are in the staging slot at staging_offset of the arena, held for
 * the client until its DECODED. The device slot's other rows are copied. */
#define PROTO_READY_DECODE 0x2u
#define PROTO_READY_FLAGS_KNOWN (PROTO_READY_LAST_IN_EPOCH | PROTO_READY_DECODE)

struct proto_ready {
	uint64_t seq;        /* 0, 1, 2, ... per session, delivered in order */
	uint64_t epoch;
	uint64_t epoch_offset; /* the segment start g of this epoch (sampler.h) */
	uint64_t batch;      /* batch index within the segment */
	uint64_t first;      /* rank-local index j of the batch's first sample */
	uint64_t slot_offset; /* byte offset of the slot: in the arena (host), in the ring (device) */
	uint32_t slot;       /* staging slot index (host), device slot index (device) */
	uint32_t generation; /* slot generation, echoed by RELEASE */
	uint32_t rows;       /* samples in this batch, 1..batch_size */
	uint32_t flags;      /* PROTO_READY_* */
	/* PROTO_READY_DECODE: the staging slot with the batch's JPEGs; else 0 */
	uint64_t staging_offset;
	uint32_t staging_slot;
	uint32_t staging_generation;
};

struct proto_release {
	uint64_t seq;
	uint32_t slot;
	uint32_t generation;
	/* How long the client's call for this batch (ldr_next) waited, the
	 * batch not being ready: its data wait, in nanoseconds. */
	uint64_t wait_ns;
};

/* A decoding client is done reading the staging slot of batch seq (READY's
 * staging_slot, staging_generation): the daemon may reuse it. What became
 * of its rows, for status: decoded on the engines, decoded on the client's
 * CPU because the engines refused them, bad (neither took them; the first
 * such sample is bad_sample, else UINT64_MAX); and the host time the
 * client's decoding thread spent submitting them. */
struct proto_decoded {
	uint64_t seq;
	uint32_t staging_slot;
	uint32_t staging_generation;
	uint32_t gpu, cpu, bad;
	uint32_t reserved; /* 0 */
	uint64_t bad_sample;
	uint64_t submit_ns;
};

struct proto_error {
	int32_t code; /* a positive errno value describing the class of failure */
	char text[PROTO_ERROR_TEXT_MAX]; /* non-empty, names what was wrong */
};

struct proto_status {
	uint32_t text_len;
	char text[PROTO_STATUS_TEXT_MAX + 1]; /* NUL-terminated */
};

struct proto_msg {
	struct proto_header hdr; /* type and request_id are used by encode */
	union {
		struct proto_hello hello;
		struct proto_welcome welcome;
		struct proto_ready ready;
		struct proto_release release;
		struct proto_decoded decoded;
		struct proto_error error;
		struct proto_status status;
	} u; /* BYE and STATUS_REQ have no payload */
};

/*
 * Encodes msg (msg->hdr.type, .flags and .request_id; magic, version and
 * length are filled in) into buf. Returns the frame's length in bytes, or
 * -EINVAL when the message itself is invalid (the same rules the decoder
 * applies), or -EMSGSIZE when cap is too small.
 */
int proto_encode(const struct proto_msg *msg, uint8_t *buf, size_t cap);

/*
 * Decodes one whole frame of len bytes. Returns 0, or:
 *   -EBADMSG  header is wrong (magic, length disagreeing with len, unknown flag)
 *   -EPROTONOSUPPORT  version is not PROTO_VERSION
 *   -EMSGSIZE length over PROTO_MAX_PAYLOAD
 *   -EPROTO   unknown type, or a payload that breaks a rule above
 * On failure *msg is unspecified. `why`, when not NULL, receives a short
 * description of the first rule broken (for the ERROR frame sent back).
 */
int proto_decode(const uint8_t *buf, size_t len, struct proto_msg *msg,
		 char *why, size_t why_cap);

#endif
