/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_proto_device: WELCOME with device delivery (proto/proto.c) against
 * proto/PROTOCOL.md §5.2: the device block's layout, its rules, the fields
 * of a decoding client (decode, pipeline, decode_memory), and the decoder's
 * order of checks. test_proto.c covers everything else.
 *
 * As there, malformed frames are made by encoding a valid message and then
 * editing its bytes at the documented offsets, so these tests also pin the
 * documented layout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto/proto.h"
#include "proto_frames.h"

static size_t frame_len; /* bytes of frame in use, header included */

/* D_MAX: 32 slots, 8 tensors of 4 dims with 31-byte names, a decoding
 * client (the largest WELCOME). D_MIN: 1 slot, one 1-dim tensor named "x",
 * decode 0 (the smallest device WELCOME). */
enum sample { D_MAX, D_MIN, D_COUNT };

/* Payload offsets (PROTOCOL.md §5.2), and sizes. */
enum {
	MIN_TENSOR_OFFSET = 103, /* tensor 0: name length 84, "x" 86, dtype 87, ndim 91, shape 95 */
	MIN_DELIVERY = 111,
	MIN_SLOTS = 115,
	MIN_SLOT_BYTES = 119,
	MIN_RING_BYTES = 127,
	MIN_MEM_HANDLE = 135,
	MIN_READY = 199,
	MIN_RELEASED = 263,
	MIN_DATA = 327,
	MIN_DECODE = 335,
	MIN_PIPELINE = 339,
	MIN_DECODE_MEMORY = 343,
	MIN_NAME = 351,
	MIN_PAYLOAD = 358, /* the name "train" */
	MIN_DEVICE_BLOCK = MIN_DATA - MIN_SLOTS, /* 84 + 128 x 1 */
	MAX_DELIVERY = 732,                         /* 84 + 8 x 81 */
	MAX_SLOTS = 736,
	MAX_SLOT_BYTES = 740,
	MAX_RING_BYTES = 748,
	MAX_MEM_HANDLE = 756,
	MAX_READY = 820,
	MAX_RELEASED = 2868,
	MAX_DATA = 4916,
	MAX_DECODE = 4924,
	MAX_PIPELINE = 4928,
	MAX_DECODE_MEMORY = 4932,
	MAX_NAME = 4940,
	MAX_PAYLOAD = 4947, /* the largest WELCOME but for its name (of version 7) */
};

#define MIN_STAGING_BYTES 8192u
#define MIN_DEVICE_SLOT_BYTES 4096u
#define MAX_DEVICE_SLOT_BYTES (8ull << 20)
#define RING_2MIB (2ull << 20)
#define TENSOR7_BYTES 84480u /* uint8 [64, 10, 11, 12], at offset 7 MiB */
#define MAX_PIPELINE_INDEX 63u
#define MAX_DECODE_MEMORY_BYTES (6ull << 30)

/* A recognisable handle: tag names which one (mem, ready d, released d). */
static void fill_handle(uint8_t *h, uint8_t tag)
{
	for (int i = 0; i < PROTO_IPC_HANDLE_BYTES; i++)
		h[i] = (uint8_t)(tag ^ (i * 7));
}

#define TAG_MEM 0x01
#define TAG_READY(d) (0x40 + (d))
#define TAG_RELEASED(d) (0x80 + (d))

static void make_device(struct proto_welcome *w, uint32_t slots, uint64_t slot_bytes,
			uint64_t ring_bytes)
{
	w->delivery = PROTO_DELIVERY_DEVICE;
	w->depth = slots;
	w->device.slots = slots;
	w->device.slot_bytes = slot_bytes;
	w->device.ring_bytes = ring_bytes;
	fill_handle(w->device.mem_handle, TAG_MEM);
	for (uint32_t d = 0; d < slots; d++) {
		fill_handle(w->device.ready[d], (uint8_t)TAG_READY(d));
		fill_handle(w->device.released[d], (uint8_t)TAG_RELEASED(d));
	}
}

static void make_sample(enum sample s, struct proto_msg *m)
{
	struct proto_welcome *w = &m->u.welcome;
	memset(m, 0, sizeof(*m));
	m->hdr.type = PROTO_WELCOME;
	m->hdr.request_id = 0x1122334455667788ull + (uint64_t)s;
	if (s == D_MIN) {
		welcome_stream(w);
		w->arena_bytes = 1ull << 20;
		w->slot_bytes = MIN_STAGING_BYTES;
		w->world = 1;
		w->n_tensors = 1;
		strcpy(w->tensors[0].name, "x");
		w->tensors[0].dtype = PROTO_DTYPE_UINT8;
		w->tensors[0].ndim = 1;
		w->tensors[0].shape[0] = 64;
		make_device(w, 1, MIN_DEVICE_SLOT_BYTES, RING_2MIB);
		return;
	}
	make_welcome(w, PROTO_TENSORS_MAX, PROTO_NDIM_MAX); /* test_proto.c's largest */
	w->rank = 7;
	make_device(w, PROTO_DEVICE_SLOTS_MAX, MAX_DEVICE_SLOT_BYTES,
		    PROTO_DEVICE_SLOTS_MAX * MAX_DEVICE_SLOT_BYTES);
	w->decode = 1;
	w->pipeline = MAX_PIPELINE_INDEX;
	w->decode_memory = MAX_DECODE_MEMORY_BYTES;
}

static size_t encode_sample(enum sample s)
{
	make_sample(s, &in);
	frame_len = frames_encode();
	return frame_len;
}

/* Overwrites n bytes at payload offset off of the frame encoded last. */
static void poke(size_t off, uint64_t v, size_t n)
{
	assert_true(PROTO_HEADER_BYTES + off + n <= frame_len);
	put_le(frame + PROTO_HEADER_BYTES + off, v, n);
}

/* Removes n payload bytes at off from the frame encoded last, fixing its
 * length field. */
static void drop(size_t off, size_t n)
{
	assert_true(PROTO_HEADER_BYTES + off + n <= frame_len);
	frame_len = frames_drop(frame_len, off, n);
}

static int decode(void)
{
	return frames_decode(frame_len);
}

/* Encodes sample s, overwrites n bytes at payload offset off with v, decodes. */
static int patched(enum sample s, size_t off, uint64_t v, size_t n)
{
	encode_sample(s);
	poke(off, v, n);
	return decode();
}

/* Encodes sample s, removes n payload bytes at off (fixing the length),
 * then writes v (vn bytes) at payload offset voff, decodes. */
static int cut(enum sample s, size_t off, size_t n, size_t voff, uint64_t v, size_t vn)
{
	encode_sample(s);
	drop(off, n);
	poke(voff, v, vn);
	return decode();
}

static void test_round_trip(void **state)
{
	static const size_t payload[D_COUNT] = {[D_MAX] = MAX_PAYLOAD, [D_MIN] = MIN_PAYLOAD};
	(void)state;
	for (enum sample s = 0; s < D_COUNT; s++) {
		size_t len = encode_sample(s);
		assert_int_equal(len, PROTO_HEADER_BYTES + payload[s]);
		memset(&out, 0x5a, sizeof(out));
		expect(decode(), 0, NULL);
		assert_int_equal(out.hdr.type, PROTO_WELCOME);
		assert_int_equal(out.hdr.flags, 0);
		assert_true(out.hdr.request_id == in.hdr.request_id);
		/* the whole struct: unused handles decode as zero */
		assert_memory_equal(&in.u.welcome, &out.u.welcome, sizeof(in.u.welcome));
	}
	assert_true(MAX_PAYLOAD <= PROTO_MAX_PAYLOAD);

	/* A device HELLO with a zero UUID is well-formed: refusing it (EINVAL)
	 * is the session's rule, not the decoder's. */
	memset(&in, 0, sizeof(in));
	in.hdr.type = PROTO_HELLO;
	in.u.hello = (struct proto_hello){.delivery = PROTO_DELIVERY_DEVICE, .world = 1, .group_size = 1};
	strcpy(in.u.hello.pipeline, "train");
	frame_len = (size_t)proto_encode(&in, frame, sizeof(frame));
	expect(decode(), 0, NULL);
	assert_int_equal(out.u.hello.delivery, PROTO_DELIVERY_DEVICE);
	assert_int_equal(out.u.hello.flags, 0);
	/* and one that asks to decode */
	in.u.hello.flags = PROTO_HELLO_DECODE;
	frame_len = (size_t)proto_encode(&in, frame, sizeof(frame));
	expect(decode(), 0, NULL);
	assert_memory_equal(&in.u.hello, &out.u.hello, sizeof(in.u.hello));
}

static void expect_handle(size_t off, uint8_t tag)
{
	uint8_t want[PROTO_IPC_HANDLE_BYTES];
	fill_handle(want, tag);
	assert_memory_equal(frame + PROTO_HEADER_BYTES + off, want, sizeof(want));
}

/* The device block sits where PROTOCOL.md says, `data`, `decode`,
 * `pipeline` and `decode_memory` after it, and a host WELCOME is the same
 * bytes up to and including `delivery`, then those. */
static void test_layout(void **state)
{
	const uint8_t *p = frame + PROTO_HEADER_BYTES;
	(void)state;
	encode_sample(D_MIN);
	assert_int_equal(get_le(p + MIN_TENSOR_OFFSET, 8), 0);
	assert_int_equal(get_le(p + MIN_DELIVERY, 4), PROTO_DELIVERY_DEVICE);
	assert_int_equal(get_le(p + MIN_SLOTS, 4), 1);
	assert_int_equal(get_le(p + MIN_SLOT_BYTES, 8), MIN_DEVICE_SLOT_BYTES);
	assert_int_equal(get_le(p + MIN_RING_BYTES, 8), RING_2MIB);
	expect_handle(MIN_MEM_HANDLE, TAG_MEM);
	expect_handle(MIN_READY, TAG_READY(0));
	expect_handle(MIN_RELEASED, TAG_RELEASED(0));
	assert_int_equal(get_le(p + MIN_DATA, 8), in.u.welcome.data);
	assert_true(in.u.welcome.data != 0);
	assert_int_equal(get_le(p + MIN_DECODE, 4), 0);
	assert_int_equal(get_le(p + MIN_PIPELINE, 4), 0);
	assert_int_equal(get_le(p + MIN_DECODE_MEMORY, 8), 0);

	encode_sample(D_MAX);
	assert_int_equal(get_le(p + MAX_DELIVERY, 4), PROTO_DELIVERY_DEVICE);
	assert_int_equal(get_le(p + MAX_SLOTS, 4), PROTO_DEVICE_SLOTS_MAX);
	assert_int_equal(get_le(p + MAX_SLOT_BYTES, 8), MAX_DEVICE_SLOT_BYTES);
	assert_int_equal(get_le(p + MAX_RING_BYTES, 8), PROTO_DEVICE_SLOTS_MAX * MAX_DEVICE_SLOT_BYTES);
	expect_handle(MAX_MEM_HANDLE, TAG_MEM);
	for (uint32_t d = 0; d < PROTO_DEVICE_SLOTS_MAX; d++) {
		expect_handle(MAX_READY + d * PROTO_IPC_HANDLE_BYTES, (uint8_t)TAG_READY(d));
		expect_handle(MAX_RELEASED + d * PROTO_IPC_HANDLE_BYTES, (uint8_t)TAG_RELEASED(d));
	}
	assert_int_equal(get_le(p + MAX_DATA, 8), in.u.welcome.data);
	assert_int_equal(get_le(p + MAX_DECODE, 4), 1);
	assert_int_equal(get_le(p + MAX_PIPELINE, 4), MAX_PIPELINE_INDEX);
	assert_int_equal(get_le(p + MAX_DECODE_MEMORY, 8), MAX_DECODE_MEMORY_BYTES);

	/* Without its device block and with delivery 0, D_MIN is a host WELCOME. */
	expect(cut(D_MIN, MIN_SLOTS, MIN_DEVICE_BLOCK, MIN_DELIVERY, PROTO_DELIVERY_HOST, 4), 0, NULL);
	assert_int_equal(out.u.welcome.delivery, PROTO_DELIVERY_HOST);
	assert_int_equal(out.u.welcome.depth, 1);
	assert_memory_equal(out.u.welcome.tensors, in.u.welcome.tensors, sizeof(in.u.welcome.tensors));
	assert_int_equal(out.u.welcome.data, in.u.welcome.data);
	static const struct proto_device zero;
	assert_memory_equal(&out.u.welcome.device, &zero, sizeof(zero));
}

/* decode (0 or 1, 1 only with device delivery), then pipeline and
 * decode_memory (0 unless decode). */
static void test_decode(void **state)
{
	(void)state;
	/* D_MIN asks for no decoding: either field set is refused */
	expect(patched(D_MIN, MIN_PIPELINE, 1, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: pipeline or decode_memory without decode");
	expect(patched(D_MIN, MIN_DECODE_MEMORY, 1, 8), -EPROTO,
	       "WELCOME: pipeline or decode_memory without decode");
	expect(patched(D_MAX, MAX_DECODE, 0, 4), -EPROTO,
	       "WELCOME: pipeline or decode_memory without decode");
	encode_sample(D_MAX);
	poke(MAX_DECODE, 0, 4);
	poke(MAX_PIPELINE, 0, 4);
	expect(decode(), -EPROTO, "WELCOME: pipeline or decode_memory without decode");
	poke(MAX_DECODE_MEMORY, 0, 8);
	expect(decode(), 0, NULL);
	assert_int_equal(out.u.welcome.decode, 0);
	/* with decode 1, any pipeline and decode_memory, 0 included */
	expect(patched(D_MIN, MIN_DECODE, 1, 4), 0, NULL);
	assert_int_equal(out.u.welcome.decode, 1);
	assert_int_equal(out.u.welcome.pipeline, 0);
	assert_int_equal(out.u.welcome.decode_memory, 0);
	expect(patched(D_MAX, MAX_PIPELINE, UINT32_MAX, 4), 0, NULL);
	expect(patched(D_MAX, MAX_DECODE_MEMORY, UINT64_MAX, 8), 0, NULL);
	/* decode is 0 or 1 */
	expect(patched(D_MAX, MAX_DECODE, 2, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: decode 2 not 0 or 1");
	expect(patched(D_MIN, MIN_DECODE, UINT32_MAX, 4), -EPROTO, "WELCOME: decode 4294967295 not 0 or 1");
	/* decode 1 with host delivery: D_MAX without its device block */
	encode_sample(D_MAX);
	drop(MAX_SLOTS, MAX_DATA - MAX_SLOTS);
	poke(MAX_DELIVERY, PROTO_DELIVERY_HOST, 4);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + MAX_SLOTS + 8, 4), 1);
	expect(decode(), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: decode with host delivery");
	poke(MAX_SLOTS + 8, 2, 4);
	expect(decode(), -EPROTO, "WELCOME: decode 2 not 0 or 1");
	poke(MAX_SLOTS + 8, 0, 4);
	expect(decode(), -EPROTO, "WELCOME: pipeline or decode_memory without decode");
	/* the device block is checked first, the tensors after */
	encode_sample(D_MAX);
	poke(68, 31, 4);
	poke(MAX_DECODE, 2, 4);
	expect(decode(), -EPROTO, "WELCOME: device slots 32 differ from depth 31");
	encode_sample(D_MIN);
	poke(MIN_TENSOR_OFFSET, UINT64_MAX, 8);
	poke(MIN_PIPELINE, 1, 4);
	expect(decode(), -EPROTO, "WELCOME: pipeline or decode_memory without decode");
	poke(MIN_PIPELINE, 0, 4);
	expect(decode(), -EPROTO, "WELCOME: tensor 0");
}

static void test_bad_delivery(void **state)
{
	(void)state;
	expect(cut(D_MIN, MIN_SLOTS, MIN_DEVICE_BLOCK, MIN_DELIVERY, 2, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: delivery 2 unknown (0 host, 1 device)");
	expect(cut(D_MIN, MIN_SLOTS, MIN_DEVICE_BLOCK, MIN_DELIVERY, UINT32_MAX, 4), -EPROTO,
	       "WELCOME: delivery 4294967295 unknown");
	/* Only delivery 1 has a device block: for any other value it is
	 * trailing bytes, found before the value is judged. */
	expect(patched(D_MIN, MIN_DELIVERY, 2, 4), -EPROTO, "WELCOME: name length");
	expect(patched(D_MIN, MIN_DELIVERY, PROTO_DELIVERY_HOST, 4), -EPROTO,
	       "WELCOME: name length");
}

static void test_bad_slots(void **state)
{
	(void)state;
	/* slots bounds the handle lists, so it is checked as soon as it is read */
	expect(patched(D_MIN, MIN_SLOTS, 0, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: device slots 0 not in 1..32");
	expect(patched(D_MAX, MAX_SLOTS, 33, 4), -EPROTO, "WELCOME: device slots 33 not in 1..32");
	expect(patched(D_MAX, MAX_SLOTS, UINT32_MAX, 4), -EPROTO, "device slots 4294967295 not in");
	/* slots decides how many handles are read */
	expect(patched(D_MAX, MAX_SLOTS, 31, 4), -EPROTO, "WELCOME: name length");
	expect(patched(D_MIN, MIN_SLOTS, 2, 4), -EPROTO, "payload truncated in device released event");
	/* slots must equal the granted depth */
	expect(patched(D_MAX, 68, 31, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: device slots 32 differ from depth 31");
	expect(patched(D_MIN, 68, 2, 4), -EPROTO, "device slots 1 differ from depth 2");
	expect(patched(D_MIN, 68, 0, 4), -EPROTO, "device slots 1 differ from depth 0");
}

static void test_bad_sizes(void **state)
{
	(void)state;
	expect(patched(D_MIN, MIN_SLOT_BYTES, 0, 8), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: 1 device slots of 0 bytes do not fit a ring of 2097152");
	/* the ring: one byte short, exactly, and larger */
	expect(patched(D_MAX, MAX_RING_BYTES, 32 * MAX_DEVICE_SLOT_BYTES - 1, 8), -EPROTO,
	       "32 device slots of 8388608 bytes do not fit a ring of 268435455");
	expect(patched(D_MIN, MIN_RING_BYTES, MIN_DEVICE_SLOT_BYTES - 1, 8), -EPROTO, "do not fit a ring");
	expect(patched(D_MIN, MIN_RING_BYTES, MIN_DEVICE_SLOT_BYTES, 8), 0, NULL);
	expect(patched(D_MAX, MAX_RING_BYTES, UINT64_MAX, 8), 0, NULL);
	/* 32 x (2^59 + 1) wraps to 32: only the overflow check refuses it (else
	 * it would be refused as over the staging slot, a later check) */
	encode_sample(D_MAX);
	poke(MAX_SLOT_BYTES, (1ull << 59) + 1, 8);
	poke(MAX_RING_BYTES, UINT64_MAX, 8);
	expect(decode(), -EPROTO, "do not fit a ring of 18446744073709551615");
	encode_sample(D_MAX);
	poke(MAX_SLOT_BYTES, UINT64_MAX, 8);
	poke(MAX_RING_BYTES, UINT64_MAX, 8);
	expect(decode(), -EPROTO, "do not fit a ring");
	/* a device slot is never larger than a staging slot */
	expect(patched(D_MIN, MIN_SLOT_BYTES, MIN_STAGING_BYTES + 4096, 8), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: device slot_bytes 12288 over staging slot_bytes 8192");
	expect(patched(D_MIN, MIN_SLOT_BYTES, MIN_STAGING_BYTES, 8), 0, NULL);
}

/* With device delivery a tensor must fit the device slot, which may be
 * smaller than the staging slot. */
static void test_tensor_outside_device_slot(void **state)
{
	(void)state;
	expect(patched(D_MIN, MIN_TENSOR_OFFSET, MIN_DEVICE_SLOT_BYTES - 63, 8), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: tensor 0 (64 bytes at offset 4033) outside slot_bytes 4096");
	expect(patched(D_MIN, MIN_TENSOR_OFFSET, MIN_DEVICE_SLOT_BYTES - 64, 8), 0, NULL);
	/* the same tensor in a host WELCOME fits the 8192-byte staging slot */
	encode_sample(D_MIN);
	poke(MIN_TENSOR_OFFSET, MIN_DEVICE_SLOT_BYTES - 63, 8);
	drop(MIN_SLOTS, MIN_DEVICE_BLOCK);
	poke(MIN_DELIVERY, PROTO_DELIVERY_HOST, 4);
	expect(decode(), 0, NULL);
	/* the last of 8 tensors: 84480 bytes at 7 MiB */
	expect(patched(D_MAX, MAX_SLOT_BYTES, 7ull << 20, 8), -EPROTO,
	       "tensor 7 (84480 bytes at offset 7340032) outside slot_bytes 7340032");
	expect(patched(D_MAX, MAX_SLOT_BYTES, (7ull << 20) + TENSOR7_BYTES, 8), 0, NULL);
	expect(patched(D_MAX, MAX_SLOT_BYTES, (7ull << 20) + TENSOR7_BYTES - 1, 8), -EPROTO,
	       "tensor 7");
}

/* Cut short anywhere (inside the handles included), or one byte long. */
static void test_truncated_and_trailing(void **state)
{
	static const struct {
		enum sample s;
		size_t at;
		const char *field;
	} cuts[] = {
		{D_MIN, MIN_DELIVERY + 3, "in delivery"},
		{D_MIN, MIN_SLOTS, "in device slots"},
		{D_MIN, MIN_SLOT_BYTES + 7, "in device slot_bytes"},
		{D_MIN, MIN_RING_BYTES, "in device ring_bytes"},
		{D_MIN, MIN_MEM_HANDLE + 10, "in device mem_handle"},
		{D_MIN, MIN_READY + 63, "in device ready event"},
		{D_MIN, MIN_RELEASED, "in device released event"},
		{D_MIN, MIN_DATA - 1, "in device released event: need 64 bytes at offset 263, 63 left"},
		{D_MIN, MIN_DECODE - 1, "in data: need 8 bytes at offset 327, 7 left"},
		{D_MIN, MIN_DECODE + 3, "in decode: need 4 bytes at offset 335, 3 left"},
		{D_MIN, MIN_PIPELINE, "in pipeline: need 4 bytes at offset 339, 0 left"},
		{D_MIN, MIN_NAME - 1, "in decode_memory: need 8 bytes at offset 343, 7 left"},
		{D_MIN, MIN_NAME + 1, "in name: need 2 bytes at offset 351, 1 left"},
		{D_MIN, MIN_PAYLOAD - 1, "in name: need 5 bytes at offset 353, 4 left"},
		{D_MAX, MAX_RELEASED - 1, "in device ready event"},
		{D_MAX, MAX_RELEASED + 64, "in device released event"},
		{D_MAX, MAX_DATA - 64, "in device released event: need 64 bytes at offset 4852, 0 left"},
		{D_MAX, MAX_DATA, "in data: need 8 bytes at offset 4916, 0 left"},
		{D_MAX, MAX_DECODE, "in decode: need 4 bytes at offset 4924, 0 left"},
		{D_MAX, MAX_DECODE_MEMORY + 4, "in decode_memory: need 8 bytes at offset 4932, 4 left"},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		encode_sample(cuts[i].s);
		drop(cuts[i].at, frame_len - PROTO_HEADER_BYTES - cuts[i].at);
		expect(decode(), -EPROTO, cuts[i].field);
	}
	for (enum sample s = 0; s < D_COUNT; s++) {
		size_t len = encode_sample(s);
		for (size_t at = 0; at < len - PROTO_HEADER_BYTES; at++) {
			put_le(frame + 12, at, 4);
			assert_int_equal(proto_decode(frame, PROTO_HEADER_BYTES + at, &out, why, sizeof(why)),
					 -EPROTO);
		}
		frame[len] = 0;
		put_le(frame + 12, len + 1 - PROTO_HEADER_BYTES, 4);
		frame_len = len + 1;
		expect(decode(), -EPROTO, "1 bytes after the last field");
	}
}

/* The encoder refuses what the decoder refuses, and short buffers. */
static void test_encode_rejects(void **state)
{
	(void)state;
	REJECT(D_MIN, in.u.welcome.delivery = 2);
	REJECT(D_MIN, in.u.welcome.device.slots = 0);
	REJECT(D_MAX, in.u.welcome.device.slots = PROTO_DEVICE_SLOTS_MAX + 1);
	REJECT(D_MAX, in.u.welcome.device.slots = in.u.welcome.depth = PROTO_DEVICE_SLOTS_MAX + 1);
	REJECT(D_MAX, in.u.welcome.device.slots = 31);
	REJECT(D_MAX, in.u.welcome.depth = 31);
	REJECT(D_MIN, in.u.welcome.device.slot_bytes = 0);
	REJECT(D_MIN, in.u.welcome.device.ring_bytes = MIN_DEVICE_SLOT_BYTES - 1);
	REJECT(D_MAX, (in.u.welcome.device.slot_bytes = (1ull << 59) + 1,
		       in.u.welcome.device.ring_bytes = UINT64_MAX));
	REJECT(D_MIN, in.u.welcome.device.slot_bytes = MIN_STAGING_BYTES + 1);
	REJECT(D_MIN, in.u.welcome.tensors[0].offset = MIN_DEVICE_SLOT_BYTES - 63);
	REJECT(D_MAX, in.u.welcome.device.slot_bytes = 7ull << 20);
	REJECT(D_MIN, in.u.welcome.decode = 2);
	REJECT(D_MAX, in.u.welcome.decode = 0);
	REJECT(D_MAX, in.u.welcome.delivery = PROTO_DELIVERY_HOST); /* decode with host delivery */
	REJECT(D_MIN, in.u.welcome.pipeline = 1);
	REJECT(D_MIN, in.u.welcome.decode_memory = 1);
	for (enum sample s = 0; s < D_COUNT; s++) {
		size_t len = encode_sample(s);
		for (size_t cap = 0; cap < len; cap += 1 + cap / 16)
			assert_int_equal(proto_encode(&in, frame, cap), -EMSGSIZE);
		assert_int_equal(proto_encode(&in, frame, len - 1), -EMSGSIZE);
		assert_int_equal(proto_encode(&in, frame, len), (int)len);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_decode),
		cmocka_unit_test(test_bad_delivery),
		cmocka_unit_test(test_bad_slots),
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_tensor_outside_device_slot),
		cmocka_unit_test(test_truncated_and_trailing),
		cmocka_unit_test(test_encode_rejects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
