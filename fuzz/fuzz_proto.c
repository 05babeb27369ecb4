/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_proto: libFuzzer harness for the frame decoder (proto/proto.c).
 *
 * Any input may be refused, but a refusal must say why. An accepted input
 * must survive encode -> decode unchanged, and because the format has
 * exactly one encoding per message (fixed-width fields, exact lengths, no
 * padding, no trailing bytes), re-encoding must reproduce the input byte
 * for byte. Any breach aborts, which libFuzzer reports as a finding.
 *
 * Random bytes rarely make a valid frame, so with LOADERD_FUZZ_SEED_DIR=DIR
 * in the environment the harness first writes one valid frame of every type
 * into DIR, a WELCOME of each delivery, and the frames of a decoding client
 * (HELLO with DECODE, WELCOME with decode, READY with a staging slot, a
 * DECODED without bad rows); pass DIR as the corpus:
 *   LOADERD_FUZZ_SEED_DIR=corpus fuzz_proto -max_total_time=60 corpus
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/proto.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct proto_msg first, second;
static uint8_t frame[PROTO_MAX_FRAME];

static int same_msg(const struct proto_msg *a, const struct proto_msg *b)
{
	if (memcmp(&a->hdr, &b->hdr, sizeof(a->hdr)) != 0)
		return 0;
	switch (a->hdr.type) {
	case PROTO_HELLO: return !memcmp(&a->u.hello, &b->u.hello, sizeof(a->u.hello));
	case PROTO_WELCOME: return !memcmp(&a->u.welcome, &b->u.welcome, sizeof(a->u.welcome));
	case PROTO_READY: return !memcmp(&a->u.ready, &b->u.ready, sizeof(a->u.ready));
	case PROTO_RELEASE: return !memcmp(&a->u.release, &b->u.release, sizeof(a->u.release));
	case PROTO_DECODED: return !memcmp(&a->u.decoded, &b->u.decoded, sizeof(a->u.decoded));
	case PROTO_ERROR: return !memcmp(&a->u.error, &b->u.error, sizeof(a->u.error));
	case PROTO_STATUS:
		/* text[text_len] is the terminating NUL, compared too */
		return a->u.status.text_len == b->u.status.text_len &&
		       !memcmp(a->u.status.text, b->u.status.text, a->u.status.text_len + 1);
	default: return 1; /* BYE, STATUS_REQ, RELOAD_REQ: header only */
	}
}

static void write_seed(const char *dir, const char *name, const struct proto_msg *m)
{
	char path[4096];
	int n = proto_encode(m, frame, sizeof(frame)), fd;
	if (n < 0)
		abort();
	snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, frame, (size_t)n) != n)
		abort();
	close(fd);
}

/* A host WELCOME (the arena fd rides along): two tensors, depth 4. */
static void make_welcome(struct proto_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->hdr.type = PROTO_WELCOME;
	m->hdr.request_id = PROTO_WELCOME;
	m->hdr.flags = PROTO_FLAG_FD;
	m->u.welcome = (struct proto_welcome){.arena_bytes = 1 << 24,
		.slot_bytes = 1 << 20, .n_samples = 1000, .batch_size = 4,
		.world = 1, .depth = 4, .shuffle = 1, .n_tensors = 2,
		.delivery = PROTO_DELIVERY_HOST};
	strcpy(m->u.welcome.name, "train");
	for (int t = 0; t < 2; t++) {
		struct proto_tensor *x = &m->u.welcome.tensors[t];
		strcpy(x->name, t ? "labels" : "data");
		x->dtype = t ? PROTO_DTYPE_INT64 : PROTO_DTYPE_UINT8;
		x->ndim = t ? 1 : 4;
		x->shape[0] = 4;
		for (uint32_t d = 1; d < x->ndim; d++)
			x->shape[d] = 8;
		x->offset = t ? 4096 : 0;
	}
}

/* The same WELCOME with device delivery: no fd, a ring of depth (4) slots
 * and its IPC handles, which the codec carries as opaque bytes. */
static void make_device_welcome(struct proto_msg *m)
{
	struct proto_device *d = &m->u.welcome.device;
	make_welcome(m);
	m->hdr.flags = 0;
	m->u.welcome.delivery = PROTO_DELIVERY_DEVICE;
	d->slots = m->u.welcome.depth;
	d->slot_bytes = 8192;
	d->ring_bytes = 2 << 20;
	memset(d->mem_handle, 0x11, sizeof(d->mem_handle));
	for (uint32_t i = 0; i < d->slots; i++) {
		memset(d->ready[i], 0x20 + (int)i, PROTO_IPC_HANDLE_BYTES);
		memset(d->released[i], 0x30 + (int)i, PROTO_IPC_HANDLE_BYTES);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("LOADERD_FUZZ_SEED_DIR");
	struct proto_msg *m = &first;
	if (!dir)
		return 0;
	for (uint16_t type = 1; type <= PROTO_TYPE_MAX; type++) {
		memset(m, 0, sizeof(*m));
		m->hdr.type = type;
		m->hdr.request_id = type;
		switch (type) {
		case PROTO_HELLO:
			m->u.hello = (struct proto_hello){.rank = 1, .world = 2, .depth = 4};
			strcpy(m->u.hello.pipeline, "train");
			strcpy(m->u.hello.client_name, "consume");
			strcpy(m->u.hello.resume, "ldr1:0:1000:0:0:valid");
			strcpy(m->u.hello.split, "valid");
			strcpy(m->u.hello.group, "job7-dp1");
			m->u.hello.group_size = 2;
			break;
		case PROTO_WELCOME:
			make_welcome(m);
			break;
		case PROTO_READY:
			m->u.ready = (struct proto_ready){.seq = 1, .batch = 1, .first = 4,
				.slot_offset = 1 << 20, .slot = 1, .generation = 3, .rows = 4,
				.flags = PROTO_READY_LAST_IN_EPOCH};
			break;
		case PROTO_RELEASE:
			m->u.release = (struct proto_release){.seq = 1, .slot = 1, .generation = 3,
				.wait_ns = 2500000};
			break;
		case PROTO_DECODED:
			m->u.decoded = (struct proto_decoded){.seq = 1, .staging_slot = 5,
				.staging_generation = 2, .gpu = 2, .cpu = 1, .bad = 1,
				.bad_sample = 17, .submit_ns = 120000};
			break;
		case PROTO_ERROR:
			m->u.error.code = 71;
			strcpy(m->u.error.text, "HELLO: rank 3 >= world 2");
			break;
		case PROTO_STATUS:
			m->u.status.text_len = 12;
			memcpy(m->u.status.text, "loaderd 0.1\n", 12);
			break;
		default: break;
		}
		write_seed(dir, proto_type_name(type), m);
	}
	make_device_welcome(m);
	write_seed(dir, "WELCOME-device", m);
	m->u.welcome.decode = 1;
	m->u.welcome.pipeline = 2;
	m->u.welcome.decode_memory = 256 << 20;
	write_seed(dir, "WELCOME-decode", m);

	/* The other frames of a client that decodes its GPU's JPEGs. */
	memset(m, 0, sizeof(*m));
	m->hdr.type = PROTO_HELLO;
	m->hdr.request_id = PROTO_HELLO;
	m->u.hello = (struct proto_hello){.delivery = PROTO_DELIVERY_DEVICE, .world = 1,
		.depth = 4, .group_size = 1, .flags = PROTO_HELLO_DECODE};
	memset(m->u.hello.device_uuid, 0xa5, sizeof(m->u.hello.device_uuid));
	strcpy(m->u.hello.pipeline, "images");
	write_seed(dir, "HELLO-decode", m);
	/* a HELLO that declares its pipeline for its job (protocol 7) */
	m->u.hello = (struct proto_hello){.rank = 1, .world = 2, .depth = 4, .group_size = 1};
	strcpy(m->u.hello.job, "torchelastic-5f3a");
	strcpy(m->u.hello.declaration, "source = imagefolder:/data/train\n"
	       "transform = random_resized_crop(224) hflip\nbatch_size = 256\nshuffle = true\n"
	       "seed = 1\n");
	write_seed(dir, "HELLO-declare", m);
	memset(m, 0, sizeof(*m));
	m->hdr.type = PROTO_READY;
	m->u.ready = (struct proto_ready){.seq = 1, .batch = 1, .first = 4, .slot_offset = 8192,
		.slot = 1, .generation = 3, .rows = 4, .flags = PROTO_READY_DECODE,
		.staging_offset = 5 << 20, .staging_slot = 5, .staging_generation = 2};
	write_seed(dir, "READY-decode", m);
	memset(m, 0, sizeof(*m));
	m->hdr.type = PROTO_DECODED;
	m->u.decoded = (struct proto_decoded){.seq = 1, .staging_slot = 5, .staging_generation = 2,
		.gpu = 3, .cpu = 1, .bad_sample = UINT64_MAX, .submit_ns = 90000};
	write_seed(dir, "DECODED-clean", m);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	int rc, n;

	rc = proto_decode(data, size, &first, why, sizeof(why));
	if (proto_decode(data, size, &second, NULL, 0) != rc)
		abort(); /* asking for no reason changes nothing */
	if (rc < 0) {
		if (why[0] == '\0' || !memchr(why, '\0', sizeof(why)))
			abort();
		return 0;
	}
	n = proto_encode(&first, frame, sizeof(frame));
	if (n < 0 || (size_t)n != size || memcmp(frame, data, size) != 0)
		abort();
	if (proto_decode(frame, (size_t)n, &second, why, sizeof(why)) != 0)
		abort();
	if (!same_msg(&first, &second))
		abort();
	return 0;
}
