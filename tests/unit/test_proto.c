/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_proto: the frame codec (proto/proto.c) against proto/PROTOCOL.md, and
 * the packet layer (proto/wire.c) over a real AF_UNIX SOCK_SEQPACKET pair.
 *
 * Malformed frames are made by encoding a valid message and then editing its
 * bytes at the offsets PROTOCOL.md documents, so these tests also pin the
 * documented layout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "proto_frames.h"

/* S_HELLO_MAX: device delivery, the DECODE flag, every string at its
 * maximum. S_READY_DECODE: a batch with rows for the client to decode.
 * S_DECODED: some rows bad; S_DECODED_CLEAN: none. */
enum sample {
	S_HELLO_MAX, S_HELLO_MIN, S_WELCOME_MAX, S_WELCOME_MIN, S_READY, S_READY_DECODE,
	S_RELEASE, S_DECODED, S_DECODED_CLEAN, S_BYE, S_ERROR_MAX, S_STATUS_REQ, S_STATUS_MAX,
	S_STATUS_SMALL, S_STATUS_EMPTY, S_RELOAD_REQ, S_COUNT
};

static void make_sample(enum sample s, struct proto_msg *m)
{
	static const uint16_t types[S_COUNT] = {
		PROTO_HELLO, PROTO_HELLO, PROTO_WELCOME, PROTO_WELCOME, PROTO_READY,
		PROTO_READY, PROTO_RELEASE, PROTO_DECODED, PROTO_DECODED, PROTO_BYE,
		PROTO_ERROR, PROTO_STATUS_REQ, PROTO_STATUS, PROTO_STATUS, PROTO_STATUS,
		PROTO_RELOAD_REQ};
	memset(m, 0, sizeof(*m));
	m->hdr.type = types[s];
	m->hdr.request_id = 0x8877665544332211ull + (uint64_t)s;
	switch (s) {
	case S_HELLO_MAX:
		m->u.hello.delivery = PROTO_DELIVERY_DEVICE;
		m->u.hello.rank = 6;
		m->u.hello.world = 7;
		m->u.hello.depth = 16;
		for (int i = 0; i < PROTO_UUID_BYTES; i++)
			m->u.hello.device_uuid[i] = (uint8_t)(0xf0 + i);
		memset(m->u.hello.pipeline, 'p', PROTO_NAME_MAX - 1);
		memset(m->u.hello.client_name, 'c', PROTO_NAME_MAX - 1);
		memset(m->u.hello.resume, 'r', PROTO_TOKEN_MAX - 1);
		memset(m->u.hello.split, 's', PROTO_SPLIT_MAX - 1);
		memset(m->u.hello.group, 'g', PROTO_GROUP_MAX - 1);
		m->u.hello.group_size = PROTO_GROUP_SIZE_MAX;
		m->u.hello.flags = PROTO_HELLO_DECODE;
		break;
	case S_HELLO_MIN: /* payload: 32 fixed, "x" (3), "" (2) x 4, group_size (4), flags (4),
			   * "" (2) x 2 = 55 bytes */
		m->u.hello.rank = 1;
		m->u.hello.world = 2;
		m->u.hello.group_size = 1;
		strcpy(m->u.hello.pipeline, "x");
		break;
	case S_WELCOME_MAX: make_welcome(&m->u.welcome, PROTO_TENSORS_MAX, PROTO_NDIM_MAX); break;
	case S_WELCOME_MIN: make_welcome(&m->u.welcome, 1, 2); break;
	case S_READY:
		m->u.ready = (struct proto_ready){.seq = UINT64_MAX, .epoch = 3, .epoch_offset = 5,
			.batch = 9, .first = 576, .slot_offset = 1ull << 33, .slot = 15,
			.generation = UINT32_MAX, .rows = 7, .flags = PROTO_READY_LAST_IN_EPOCH};
		break;
	case S_READY_DECODE:
		m->u.ready = (struct proto_ready){.seq = 11, .epoch = 2, .batch = 11, .first = 704,
			.slot_offset = 3ull << 24, .slot = 3, .generation = 5, .rows = 64,
			.flags = PROTO_READY_LAST_IN_EPOCH | PROTO_READY_DECODE,
			.staging_offset = (1ull << 40) - (1ull << 30), .staging_slot = 1023,
			.staging_generation = UINT32_MAX};
		break;
	case S_RELEASE:
		m->u.release = (struct proto_release){.seq = 42, .slot = 3, .generation = 9,
			.wait_ns = UINT64_MAX - 1};
		break;
	case S_DECODED:
		m->u.decoded = (struct proto_decoded){.seq = UINT64_MAX, .staging_slot = 1023,
			.staging_generation = UINT32_MAX, .gpu = 200, .cpu = 50, .bad = 6,
			.bad_sample = 1000002, .submit_ns = 1ull << 40};
		break;
	case S_DECODED_CLEAN:
		m->u.decoded = (struct proto_decoded){.seq = 3, .staging_slot = 0,
			.staging_generation = 1, .gpu = 64, .bad_sample = UINT64_MAX};
		break;
	case S_ERROR_MAX:
		m->u.error.code = EIO;
		memset(m->u.error.text, 'e', PROTO_ERROR_TEXT_MAX - 1);
		break;
	case S_STATUS_MAX:
	case S_STATUS_SMALL:
		m->u.status.text_len = s == S_STATUS_MAX ? PROTO_STATUS_TEXT_MAX : 10;
		for (uint32_t i = 0; i < m->u.status.text_len; i++)
			m->u.status.text[i] = (char)(i % 64 == 63 ? '\n' : 'a' + i % 26);
		break;
	default: break; /* BYE, STATUS_REQ, STATUS_EMPTY, RELOAD_REQ */
	}
}

static size_t encode_sample(enum sample s)
{
	make_sample(s, &in);
	return frames_encode();
}

/* Encodes sample s, overwrites n bytes at payload offset off with v, decodes. */
static int patched(enum sample s, size_t off, uint64_t v, size_t n)
{
	size_t len = encode_sample(s);
	assert_true(PROTO_HEADER_BYTES + off + n <= len);
	put_le(frame + PROTO_HEADER_BYTES + off, v, n);
	return frames_decode(len);
}

/* Encodes sample s, removes n payload bytes at off (fixing the length),
 * then writes v (vn bytes) at payload offset voff, decodes. */
static int cut(enum sample s, size_t off, size_t n, size_t voff, uint64_t v, size_t vn)
{
	size_t len = frames_drop(encode_sample(s), off, n);
	put_le(frame + PROTO_HEADER_BYTES + voff, v, vn);
	return frames_decode(len);
}

static void assert_msg_equal(const struct proto_msg *a, const struct proto_msg *b)
{
	assert_int_equal(a->hdr.type, b->hdr.type);
	assert_int_equal(a->hdr.flags, b->hdr.flags);
	assert_true(a->hdr.request_id == b->hdr.request_id);
	switch (a->hdr.type) {
	case PROTO_HELLO: assert_memory_equal(&a->u.hello, &b->u.hello, sizeof(a->u.hello)); break;
	case PROTO_WELCOME: assert_memory_equal(&a->u.welcome, &b->u.welcome, sizeof(a->u.welcome)); break;
	case PROTO_READY: assert_memory_equal(&a->u.ready, &b->u.ready, sizeof(a->u.ready)); break;
	case PROTO_RELEASE: assert_memory_equal(&a->u.release, &b->u.release, sizeof(a->u.release)); break;
	case PROTO_DECODED: assert_memory_equal(&a->u.decoded, &b->u.decoded, sizeof(a->u.decoded)); break;
	case PROTO_ERROR: assert_memory_equal(&a->u.error, &b->u.error, sizeof(a->u.error)); break;
	case PROTO_STATUS:
		assert_int_equal(a->u.status.text_len, b->u.status.text_len);
		if (a->u.status.text_len)
			assert_memory_equal(a->u.status.text, b->u.status.text, a->u.status.text_len);
		assert_int_equal(b->u.status.text[b->u.status.text_len], 0);
		break;
	default: break;
	}
}

static void test_round_trip(void **state)
{
	(void)state;
	for (enum sample s = 0; s < S_COUNT; s++) {
		size_t len = encode_sample(s);
		memset(&out, 0x5a, sizeof(out));
		expect(frames_decode(len), 0, NULL);
		assert_int_equal(out.hdr.magic, PROTO_MAGIC);
		assert_int_equal(out.hdr.version, PROTO_VERSION);
		assert_int_equal(out.hdr.length, len - PROTO_HEADER_BYTES);
		assert_msg_equal(&in, &out);
	}
	/* The fd flag is a known bit and survives. */
	make_sample(S_BYE, &in);
	in.hdr.flags = PROTO_FLAG_FD;
	expect(frames_decode((size_t)proto_encode(&in, frame, sizeof(frame))), 0, NULL);
	assert_int_equal(out.hdr.flags, PROTO_FLAG_FD);
}

/* The exact bytes of the frames PROTOCOL.md spells out (§5.8). */
static void test_golden_bytes(void **state)
{
	static const uint8_t release[] = {
		'L', 'D', 'R', 'D', 7, 0, 4, 0, 0, 0, 0, 0, 24, 0, 0, 0,
		0x2a, 0, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 10, 0, 0, 0,
		0x60, 0xe3, 0x16, 0, 0, 0, 0, 0};
	static const uint8_t hello_payload[] = {
		0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		5, 0, 't', 'r', 'a', 'i', 'n', 2, 0, 'c', 'l', 0, 0, 5, 0, 'v', 'a', 'l', 'i', 'd',
		3, 0, 't', 'p', '0', 2, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0}; /* no job key, no declaration */
	static const uint8_t ready_payload[] = {
		5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0,
		0x40, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0,
		2, 0, 0, 0, 7, 0, 0, 0, 64, 0, 0, 0, 2, 0, 0, 0,
		0, 0, 0, 0x0a, 0, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0, 0};
	static const uint8_t decoded[] = {
		'L', 'D', 'R', 'D', 7, 0, 10, 0, 0, 0, 0, 0, 48, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
		5, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0, 0,
		60, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		0x92, 0x10, 0, 0, 0, 0, 0, 0, 0x50, 0xf8, 0x0c, 0, 0, 0, 0, 0};
	(void)state;
	memset(&in, 0, sizeof(in));
	in.hdr.type = PROTO_RELEASE;
	in.hdr.request_id = 42;
	in.u.release = (struct proto_release){.seq = 0x0102030405060708ull, .slot = 9, .generation = 10,
		.wait_ns = 1500000};
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), sizeof(release));
	assert_memory_equal(frame, release, sizeof(release));

	memset(&in, 0, sizeof(in));
	in.hdr.type = PROTO_READY;
	in.u.ready = (struct proto_ready){.seq = 5, .epoch = 1, .batch = 5, .first = 320,
		.slot_offset = 2ull << 20, .slot = 2, .generation = 7, .rows = 64,
		.flags = PROTO_READY_DECODE, .staging_offset = 0x0a000000, .staging_slot = 9,
		.staging_generation = 3};
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), 24 + sizeof(ready_payload));
	assert_memory_equal(frame + 24, ready_payload, sizeof(ready_payload));

	memset(&in, 0, sizeof(in));
	in.hdr.type = PROTO_DECODED;
	in.u.decoded = (struct proto_decoded){.seq = 5, .staging_slot = 9, .staging_generation = 3,
		.gpu = 60, .cpu = 3, .bad = 1, .bad_sample = 4242, .submit_ns = 850000};
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), sizeof(decoded));
	assert_memory_equal(frame, decoded, sizeof(decoded));

	memset(&in, 0, sizeof(in));
	in.hdr.type = PROTO_HELLO;
	in.u.hello = (struct proto_hello){.rank = 1, .world = 2, .depth = 4};
	strcpy(in.u.hello.pipeline, "train");
	strcpy(in.u.hello.client_name, "cl");
	strcpy(in.u.hello.split, "valid");
	strcpy(in.u.hello.group, "tp0");
	in.u.hello.group_size = 2;
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), 24 + sizeof(hello_payload));
	assert_memory_equal(frame + 24, hello_payload, sizeof(hello_payload));
}

static void test_names(void **state)
{
	(void)state;
	assert_int_equal(proto_dtype_bytes(PROTO_DTYPE_UINT8), 1);
	assert_int_equal(proto_dtype_bytes(PROTO_DTYPE_FLOAT16), 2);
	assert_int_equal(proto_dtype_bytes(PROTO_DTYPE_INT64), 8);
	assert_int_equal(proto_dtype_bytes(0), 0);
	assert_int_equal(proto_dtype_bytes(PROTO_DTYPE_MAX + 1), 0);
	assert_string_equal(proto_dtype_name(PROTO_DTYPE_UINT32), "uint32");
	assert_string_equal(proto_dtype_name(99), "invalid");
	assert_string_equal(proto_type_name(PROTO_STATUS_REQ), "STATUS_REQ");
	assert_string_equal(proto_type_name(PROTO_RELOAD_REQ), "RELOAD_REQ");
	assert_string_equal(proto_type_name(PROTO_DECODED), "DECODED");
	assert_int_equal(PROTO_DECODED, 10);
	assert_int_equal(PROTO_TYPE_MAX, PROTO_DECODED);
	assert_string_equal(proto_type_name(0), "invalid");
	assert_string_equal(proto_type_name(PROTO_TYPE_MAX + 1), "invalid");
}

static void test_bad_header(void **state)
{
	size_t len;
	(void)state;
	len = encode_sample(S_RELEASE);
	for (size_t n = 0; n < PROTO_HEADER_BYTES; n++)
		expect(frames_decode(n), -EBADMSG, "short frame");
	frame[0] ^= 1;
	expect(frames_decode(len), -EBADMSG, "magic");
	static const uint16_t bad_versions[] = {0, 5, 6, 8, 0xffff}; /* only PROTO_VERSION (7) is spoken */
	for (size_t i = 0; i < sizeof(bad_versions) / sizeof(bad_versions[0]); i++) {
		len = encode_sample(S_RELEASE);
		put_le(frame + 4, bad_versions[i], 2);
		expect(frames_decode(len), -EPROTONOSUPPORT, "version");
	}
	len = encode_sample(S_RELEASE);
	assert_int_equal(get_le(frame + 4, 2), 7);
	put_le(frame + 4, 6, 2);
	expect(frames_decode(len), -EPROTONOSUPPORT, NULL);
	assert_string_equal(why, "protocol version 6 not supported (this side speaks 7)");
	len = encode_sample(S_RELEASE);
	expect(frames_decode(len - 1), -EBADMSG, "disagrees"); /* length says more than received */
	frame[len] = 0;
	expect(frames_decode(len + 1), -EBADMSG, "disagrees"); /* received more than length says */
	put_le(frame + 12, 70000, 4);
	expect(frames_decode(len), -EMSGSIZE, NULL);
	assert_string_equal(why, "frame length 70000 over maximum 65512");
	len = encode_sample(S_BYE); /* an over-long frame whose length is honest */
	memset(frame + len, 0, PROTO_MAX_PAYLOAD + 1);
	put_le(frame + 12, PROTO_MAX_PAYLOAD + 1, 4);
	expect(frames_decode(PROTO_MAX_FRAME + 1), -EMSGSIZE, "over maximum");
	static const uint16_t bad_types[] = {0, PROTO_TYPE_MAX + 1, 0xffff};
	for (size_t i = 0; i < 3; i++) {
		len = encode_sample(S_BYE);
		put_le(frame + 6, bad_types[i], 2);
		expect(frames_decode(len), -EPROTO, "unknown message type");
	}
	static const uint32_t bad_flags[] = {0x8, 0x80000000u, 0xffffffffu};
	for (size_t i = 0; i < 3; i++) {
		len = encode_sample(S_BYE);
		put_le(frame + 8, bad_flags[i], 4);
		expect(frames_decode(len), -EBADMSG, "flag");
	}
	/* JSON belongs to STATUS_REQ, MORE to STATUS: elsewhere refused */
	len = encode_sample(S_BYE);
	put_le(frame + 8, PROTO_FLAG_JSON, 4);
	expect(frames_decode(len), -EPROTO, "flag 0x2 on BYE");
	len = encode_sample(S_BYE);
	put_le(frame + 8, PROTO_FLAG_MORE, 4);
	expect(frames_decode(len), -EPROTO, "flag 0x4 on BYE");
	make_sample(S_BYE, &in);
	in.hdr.flags = PROTO_FLAG_MORE;
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), -EINVAL);
	memset(&in.hdr, 0, sizeof(in.hdr));
	in.hdr.type = PROTO_STATUS_REQ;
	in.hdr.flags = PROTO_FLAG_JSON;
	len = (size_t)proto_encode(&in, frame, sizeof(frame));
	expect(frames_decode(len), 0, NULL);
	assert_int_equal(out.hdr.flags, PROTO_FLAG_JSON);
}

/* Every payload cut short at every byte, and every payload with one byte
 * too many, is refused. */
static void test_truncated_and_trailing(void **state)
{
	(void)state;
	for (enum sample s = 0; s < S_COUNT; s++) {
		size_t len = encode_sample(s);
		for (size_t cut_at = 0; cut_at < len - PROTO_HEADER_BYTES; cut_at++) {
			put_le(frame + 12, cut_at, 4);
			expect(frames_decode(PROTO_HEADER_BYTES + cut_at), -EPROTO, NULL);
		}
		if (len + 1 > PROTO_MAX_FRAME)
			continue;
		frame[len] = 0;
		put_le(frame + 12, len + 1 - PROTO_HEADER_BYTES, 4);
		expect(frames_decode(len + 1), -EPROTO,
		       len == PROTO_HEADER_BYTES ? "payload must be empty" : "after the last field");
	}
}

static void test_bad_hello(void **state)
{
	(void)state;
	expect(patched(S_HELLO_MIN, 0, 2, 4), -EPROTO, "HELLO: delivery 2");
	expect(patched(S_HELLO_MIN, 4, 3, 4), -EPROTO, NULL);
	assert_string_equal(why, "HELLO: rank 3 >= world 2");
	expect(patched(S_HELLO_MIN, 4, 2, 4), -EPROTO, "rank 2 >= world 2");
	expect(patched(S_HELLO_MIN, 8, 0, 4), -EPROTO, "world 0");
	expect(cut(S_HELLO_MIN, 34, 1, 32, 0, 2), -EPROTO, "pipeline name is empty");
	expect(patched(S_HELLO_MIN, 34, 0, 1), -EPROTO, "pipeline contains a NUL");
	/* lengths one over each buffer (at the limit is in the round trip) */
	expect(patched(S_HELLO_MAX, 32, PROTO_NAME_MAX, 2), -EPROTO, "pipeline length 64 over maximum 63");
	expect(patched(S_HELLO_MAX, 97, PROTO_NAME_MAX, 2), -EPROTO, "client_name length 64");
	expect(patched(S_HELLO_MAX, 162, PROTO_TOKEN_MAX, 2), -EPROTO, "resume length 192 over maximum 191");
	expect(patched(S_HELLO_MAX, 162, 0xffff, 2), -EPROTO, "resume length 65535");
	expect(patched(S_HELLO_MAX, 99 + 10, 0, 1), -EPROTO, "client_name contains a NUL");
	expect(patched(S_HELLO_MAX, 164 + 190, 0, 1), -EPROTO, "resume contains a NUL");
	expect(patched(S_HELLO_MAX, 355, PROTO_SPLIT_MAX, 2), -EPROTO, "split length 16 over maximum 15");
	expect(patched(S_HELLO_MAX, 357 + 3, 0, 1), -EPROTO, "split contains a NUL");
	/* the group: key length at 372, bytes at 374..436, group_size at 437 */
	expect(patched(S_HELLO_MAX, 372, PROTO_GROUP_MAX, 2), -EPROTO, "group length 64 over maximum 63");
	expect(patched(S_HELLO_MAX, 374 + 7, 0, 1), -EPROTO, "group contains a NUL");
	expect(patched(S_HELLO_MAX, 374 + 62, ' ', 1), -EPROTO,
	       "HELLO: group byte 62 is 0x20, outside 0x21..0x7e");
	expect(patched(S_HELLO_MAX, 437, 0, 4), -EPROTO, "HELLO: group_size 0, must be 1..64");
	expect(patched(S_HELLO_MAX, 437, PROTO_GROUP_SIZE_MAX + 1, 4), -EPROTO, "group_size 65");
	expect(patched(S_HELLO_MAX, 437, 1, 4), -EPROTO, "a group key with group_size 1");
	expect(patched(S_HELLO_MAX, 437, 2, 4), 0, NULL);
	assert_int_equal(out.u.hello.group_size, 2);
	expect(patched(S_HELLO_MIN, 43, 2, 4), -EPROTO, "HELLO: group_size 2 without a group key");
	expect(cut(S_HELLO_MIN, 43, 4, 43, 0, 0), -EPROTO, NULL);
}

/* HELLO's flags, the last field: at 47 of S_HELLO_MIN (host delivery), at
 * 441 of S_HELLO_MAX (device delivery, DECODE set). */
static void test_hello_flags(void **state)
{
	size_t len;
	(void)state;
	assert_int_equal(encode_sample(S_HELLO_MIN), PROTO_HEADER_BYTES + 55);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 47, 4), 0);
	assert_int_equal(encode_sample(S_HELLO_MAX), PROTO_HEADER_BYTES + 449);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 441, 4), PROTO_HELLO_DECODE);
	/* bits other than DECODE */
	expect(patched(S_HELLO_MIN, 47, 2, 4), -EPROTO, NULL);
	assert_string_equal(why, "HELLO: unknown flag bits 0x2");
	expect(patched(S_HELLO_MAX, 441, 0x80000001u, 4), -EPROTO, "HELLO: unknown flag bits 0x80000000");
	expect(patched(S_HELLO_MAX, 441, UINT32_MAX, 4), -EPROTO, "HELLO: unknown flag bits 0xfffffffe");
	/* DECODE only with device delivery; unknown bits are named first */
	expect(patched(S_HELLO_MIN, 47, PROTO_HELLO_DECODE, 4), -EPROTO, NULL);
	assert_string_equal(why, "HELLO: DECODE with host delivery (a client decodes only for its GPU)");
	expect(patched(S_HELLO_MIN, 47, PROTO_HELLO_DECODE | 4, 4), -EPROTO, "HELLO: unknown flag bits 0x4");
	expect(patched(S_HELLO_MAX, 0, PROTO_DELIVERY_HOST, 4), -EPROTO, "HELLO: DECODE with host delivery");
	expect(patched(S_HELLO_MAX, 441, 0, 4), 0, NULL);
	assert_int_equal(out.u.hello.flags, 0);
	expect(patched(S_HELLO_MAX, 441, PROTO_HELLO_DECODE, 4), 0, NULL);
	assert_int_equal(out.u.hello.flags, PROTO_HELLO_DECODE);
	/* the flags are checked after group_size */
	len = encode_sample(S_HELLO_MAX);
	put_le(frame + PROTO_HEADER_BYTES + 437, 0, 4);
	put_le(frame + PROTO_HEADER_BYTES + 441, 2, 4);
	expect(frames_decode(len), -EPROTO, "HELLO: group_size 0");
	/* a HELLO of version 5 (no flags) is short of them */
	expect(cut(S_HELLO_MIN, 47, 8, 0, 0, 0), -EPROTO, NULL);
	assert_string_equal(why, "HELLO: payload truncated in flags: need 4 bytes at offset 47, 0 left");
	/* a HELLO of version 6 (no job key, no declaration) is short of them */
	expect(cut(S_HELLO_MIN, 51, 4, 0, 0, 0), -EPROTO, NULL);
	assert_string_equal(why, "HELLO: payload truncated in job: need 2 bytes at offset 51, 0 left");
}

/* A HELLO that declares its pipeline (protocol 7): the job key and the
 * declaration, the last two fields, after flags; exactly one of a
 * pipeline name and a declaration; the job key a word, the declaration
 * printable ASCII, tabs and newlines. */
static void test_hello_declaration(void **state)
{
	static const uint8_t tail[] = {
		0, 0, 0, 0,                        /* flags */
		3, 0, 'j', '-', '1',               /* job */
		14, 0, 'b', 'a', 't', 'c', 'h', '_', 's', 'i', 'z', 'e', ' ', '=', ' ', '8'};
	size_t len;
	(void)state;
	make_sample(S_HELLO_MIN, &in);
	in.u.hello.pipeline[0] = '\0';
	snprintf(in.u.hello.job, sizeof(in.u.hello.job), "j-1");
	snprintf(in.u.hello.declaration, sizeof(in.u.hello.declaration), "batch_size = 8");
	len = frames_encode();
	/* the pipeline's name is empty: its 2-byte length is 0 */
	assert_int_equal(len, PROTO_HEADER_BYTES + 55 - 5 + 5 + 16);
	assert_memory_equal(frame + len - sizeof(tail), tail, sizeof(tail));
	expect(frames_decode(len), 0, NULL);
	assert_string_equal(out.u.hello.job, "j-1");
	assert_string_equal(out.u.hello.declaration, "batch_size = 8");
	/* every byte a declaration may hold; a control byte it may not */
	memset(in.u.hello.declaration, 'k', PROTO_DECLARE_MAX - 1);
	in.u.hello.declaration[10] = '\n';
	in.u.hello.declaration[11] = '\t';
	expect(frames_decode(frames_encode()), 0, NULL);
	assert_int_equal(strlen(out.u.hello.declaration), PROTO_DECLARE_MAX - 1);
	len = frames_encode();
	put_le(frame + len - 5, 0x01, 1);
	expect(frames_decode(len), -EPROTO, "HELLO: declaration byte 4090 is 0x01");
	len = frames_encode();
	put_le(frame + len - PROTO_DECLARE_MAX - 1, PROTO_DECLARE_MAX, 2);
	expect(frames_decode(len), -EPROTO, "declaration length 4096 over maximum 4095");
	REJECT(S_HELLO_MIN, (in.u.hello.pipeline[0] = '\0', snprintf(in.u.hello.job, 8, "j"),
			     in.u.hello.declaration[0] = 'x', in.u.hello.declaration[1] = 1));
	/* a name and a declaration; a declaration without a job; a bad job */
	make_sample(S_HELLO_MIN, &in);
	snprintf(in.u.hello.job, sizeof(in.u.hello.job), "j");
	snprintf(in.u.hello.declaration, sizeof(in.u.hello.declaration), "seed = 1");
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), -EINVAL);
	in.u.hello.pipeline[0] = '\0';
	in.u.hello.job[0] = '\0';
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), -EINVAL);
	snprintf(in.u.hello.job, sizeof(in.u.hello.job), "my job");
	assert_int_equal(proto_encode(&in, frame, sizeof(frame)), -EINVAL);
	len = encode_sample(S_HELLO_MIN);
	put_le(frame + PROTO_HEADER_BYTES + 32, 0, 2); /* its name "x" emptied */
	len = frames_drop(len, 34, 1);
	expect(frames_decode(len), -EPROTO, "HELLO: pipeline name is empty and no pipeline is declared");
}

/* HELLO's pipeline, resume and split hold 0x21..0x7e only; client_name is
 * free text (escaped where the daemon shows it). S_HELLO_MAX: pipeline
 * bytes at 34..96, client_name bytes at 99..161, resume bytes at 164..354,
 * split bytes at 357..371. */
static void test_hello_words(void **state)
{
	(void)state;
	static const uint8_t bad[] = {0x01, '\t', '\n', '\r', 0x1b, ' ', 0x7f, 0x80, 0xc3, 0xff};
	char want[64];
	for (size_t i = 0; i < sizeof(bad); i++) {
		snprintf(want, sizeof(want), "HELLO: pipeline byte 5 is 0x%02x, outside 0x21..0x7e", bad[i]);
		expect(patched(S_HELLO_MAX, 34 + 5, bad[i], 1), -EPROTO, want);
		snprintf(want, sizeof(want), "HELLO: resume byte 190 is 0x%02x, outside 0x21..0x7e", bad[i]);
		expect(patched(S_HELLO_MAX, 164 + 190, bad[i], 1), -EPROTO, want);
		snprintf(want, sizeof(want), "HELLO: split byte 14 is 0x%02x, outside 0x21..0x7e", bad[i]);
		expect(patched(S_HELLO_MAX, 357 + 14, bad[i], 1), -EPROTO, want);
		expect(patched(S_HELLO_MIN, 34, bad[i], 1), -EPROTO, "HELLO: pipeline byte 0 is");
		/* the same byte in the client's name is accepted as it is */
		expect(patched(S_HELLO_MAX, 99 + 5, bad[i], 1), 0, NULL);
		assert_int_equal((uint8_t)out.u.hello.client_name[5], bad[i]);
	}
	/* the ends of the range are words */
	expect(patched(S_HELLO_MAX, 34, '!', 1), 0, NULL);
	expect(patched(S_HELLO_MAX, 34 + 62, '~', 1), 0, NULL);
	expect(patched(S_HELLO_MAX, 164, '!', 1), 0, NULL);
	expect(patched(S_HELLO_MAX, 164 + 190, '~', 1), 0, NULL);
	assert_int_equal(proto_word_bad_byte("ldr2:p:0123456789abcdef:0:1000:0:0"), -1);
	assert_int_equal(proto_word_bad_byte(""), -1);
	assert_int_equal(proto_word_bad_byte("ab c"), 2);
	assert_int_equal(proto_word_bad_byte("\xc3\xa9"), 0);
}

/* S_WELCOME_MIN payload (host delivery): fixed fields 0..83, n_tensors at 80,
 * then tensor 0: name length 84, "data" 86, dtype 90, ndim 94, shape 98 and
 * 106, offset 114; then delivery 122, data 126, decode 134, pipeline 138,
 * decode_memory 142; 150 bytes. Device delivery: test_proto_device.c. */
static void test_bad_welcome(void **state)
{
	(void)state;
	expect(patched(S_WELCOME_MIN, 56, 0, 4), -EPROTO, "batch_size 0");
	expect(patched(S_WELCOME_MIN, 60, 1, 4), -EPROTO, "WELCOME: rank 1 >= world 1");
	expect(patched(S_WELCOME_MIN, 64, 0, 4), -EPROTO, "world 0");
	expect(patched(S_WELCOME_MIN, 72, 2, 4), -EPROTO, "shuffle 2");
	expect(patched(S_WELCOME_MIN, 76, 2, 4), -EPROTO, "drop_last 2");
	expect(patched(S_WELCOME_MIN, 80, 0, 4), -EPROTO, "n_tensors 0");
	expect(patched(S_WELCOME_MIN, 80, 9, 4), -EPROTO, "n_tensors 9");
	expect(patched(S_WELCOME_MIN, 80, 0xffffffffu, 4), -EPROTO, "n_tensors");
	/* a second tensor, read from the delivery and data bytes */
	expect(patched(S_WELCOME_MIN, 80, 2, 4), -EPROTO, "WELCOME: tensor 1 ndim");
	expect(patched(S_WELCOME_MIN, 16, 1ull << 41, 8), -EPROTO, "slot_bytes");
	expect(cut(S_WELCOME_MIN, 86, 4, 84, 0, 2), -EPROTO, "tensor 0 name is empty");
	expect(patched(S_WELCOME_MIN, 84, PROTO_TENSOR_NAME_MAX, 2), -EPROTO, "name length 32 over maximum 31");
	expect(patched(S_WELCOME_MIN, 87, 0, 1), -EPROTO, "name contains a NUL");
	expect(patched(S_WELCOME_MIN, 90, 0, 4), -EPROTO, "dtype 0");
	expect(patched(S_WELCOME_MIN, 90, PROTO_DTYPE_MAX + 1, 4), -EPROTO, "dtype 8");
	expect(patched(S_WELCOME_MIN, 94, 0, 4), -EPROTO, "ndim 0");
	expect(patched(S_WELCOME_MIN, 94, 5, 4), -EPROTO, "ndim 5");
	expect(patched(S_WELCOME_MIN, 94, 3, 4), -EPROTO, "truncated");
	expect(patched(S_WELCOME_MIN, 94, 1, 4), -EPROTO, "after the last field");
	expect(patched(S_WELCOME_MIN, 98, 63, 8), -EPROTO, "shape[0] 63 is not batch_size 64");
	expect(patched(S_WELCOME_MIN, 106, 0, 8), -EPROTO, "shape[1] 0");
	expect(patched(S_WELCOME_MIN, 106, 1ull << 62, 8), -EPROTO, "overflows");
	expect(patched(S_WELCOME_MIN, 114, (1ull << 30) - 100, 8), -EPROTO, "outside slot_bytes");
	expect(patched(S_WELCOME_MIN, 114, UINT64_MAX, 8), -EPROTO, "outside slot_bytes");
	expect(patched(S_WELCOME_MIN, 114, (1ull << 30) - 64 * 96, 8), 0, NULL); /* exactly fits */
}

/* WELCOME's decode, pipeline and decode_memory with host delivery: all 0. */
static void test_welcome_decode_host(void **state)
{
	size_t len;
	(void)state;
	len = encode_sample(S_WELCOME_MIN);
	assert_int_equal(len, PROTO_HEADER_BYTES + 157); /* its name "train" last */
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 126, 8), in.u.welcome.data);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 134, 8), 0);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 142, 8), 0);
	expect(patched(S_WELCOME_MIN, 134, 1, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: decode with host delivery");
	expect(patched(S_WELCOME_MIN, 134, 2, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: decode 2 not 0 or 1");
	expect(patched(S_WELCOME_MIN, 134, UINT32_MAX, 4), -EPROTO, "WELCOME: decode 4294967295 not 0 or 1");
	expect(patched(S_WELCOME_MIN, 138, 1, 4), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: pipeline or decode_memory without decode");
	expect(patched(S_WELCOME_MIN, 138, UINT32_MAX, 4), -EPROTO, "or decode_memory without decode");
	expect(patched(S_WELCOME_MIN, 142, 1, 8), -EPROTO, "pipeline or decode_memory without decode");
	expect(patched(S_WELCOME_MIN, 142, 1ull << 63, 8), -EPROTO, "or decode_memory without decode");
	/* checked after the stream's fields and before the tensors */
	len = encode_sample(S_WELCOME_MIN);
	put_le(frame + PROTO_HEADER_BYTES + 72, 2, 4);
	put_le(frame + PROTO_HEADER_BYTES + 134, 2, 4);
	expect(frames_decode(len), -EPROTO, "WELCOME: shuffle 2");
	len = encode_sample(S_WELCOME_MIN);
	put_le(frame + PROTO_HEADER_BYTES + 90, 0, 4);
	put_le(frame + PROTO_HEADER_BYTES + 138, 1, 4);
	expect(frames_decode(len), -EPROTO, "WELCOME: pipeline or decode_memory without decode");
	/* a WELCOME of version 5 ends at data, one of version 6 at decode_memory */
	expect(cut(S_WELCOME_MIN, 134, 23, 0, 0, 0), -EPROTO, NULL);
	assert_string_equal(why, "WELCOME: payload truncated in decode: need 4 bytes at offset 134, 0 left");
	expect(cut(S_WELCOME_MIN, 146, 11, 0, 0, 0), -EPROTO,
	       "WELCOME: payload truncated in decode_memory: need 8 bytes at offset 142, 4 left");
	expect(cut(S_WELCOME_MIN, 150, 7, 0, 0, 0), -EPROTO,
	       "WELCOME: payload truncated in name: need 2 bytes at offset 150, 0 left");
	/* the name: a word, not empty */
	expect(cut(S_WELCOME_MIN, 152, 5, 150, 0, 2), -EPROTO, "WELCOME: the pipeline's name is empty");
	expect(patched(S_WELCOME_MIN, 152, ' ', 1), -EPROTO, "WELCOME: name byte 0 is 0x20");
}

static void test_bad_ready_error_status(void **state)
{
	(void)state;
	expect(patched(S_READY, 56, 0, 4), -EPROTO, "READY: rows 0");
	expect(patched(S_READY, 60, 4, 4), -EPROTO, NULL);
	assert_string_equal(why, "READY: unknown flag bits 0x4");
	expect(patched(S_READY, 60, UINT32_MAX, 4), -EPROTO, "READY: unknown flag bits 0xfffffffc");
	expect(patched(S_READY_DECODE, 60, PROTO_READY_DECODE | 0x100, 4), -EPROTO,
	       "READY: unknown flag bits 0x100");
	expect(patched(S_READY, 60, 0, 4), 0, NULL);
	expect(patched(S_READY, 60, PROTO_READY_LAST_IN_EPOCH | PROTO_READY_DECODE, 4), 0, NULL);
	expect(patched(S_ERROR_MAX, 0, 0, 4), -EPROTO, "ERROR: code 0");
	expect(patched(S_ERROR_MAX, 0, (uint32_t)-5, 4), -EPROTO, "ERROR: code -5");
	expect(patched(S_ERROR_MAX, 4, PROTO_ERROR_TEXT_MAX, 2), -EPROTO, "text length 1024 over maximum 1023");
	expect(patched(S_ERROR_MAX, 6 + 500, 0, 1), -EPROTO, "text contains a NUL");
	expect(cut(S_ERROR_MAX, 6, PROTO_ERROR_TEXT_MAX - 1, 4, 0, 2), -EPROTO, "ERROR: text is empty");
	expect(patched(S_STATUS_MAX, 0, PROTO_STATUS_TEXT_MAX + 1, 4), -EPROTO, "text_len 65505 over maximum 65504");
	expect(patched(S_STATUS_SMALL, 0, 0xffffffffu, 4), -EPROTO, "over maximum");
	expect(patched(S_STATUS_SMALL, 0, 11, 4), -EPROTO, "truncated");
	expect(patched(S_STATUS_SMALL, 4 + 3, 0, 1), -EPROTO, "STATUS: text contains a NUL");
	/* A STATUS text one byte over its maximum, bytes and all, still fits a frame. */
	size_t len = encode_sample(S_STATUS_MAX);
	frame[len] = 'z';
	put_le(frame + 12, len + 1 - PROTO_HEADER_BYTES, 4);
	put_le(frame + PROTO_HEADER_BYTES, PROTO_STATUS_TEXT_MAX + 1, 4);
	expect(frames_decode(len + 1), -EPROTO, "over maximum");
}

/* READY's staging slot: staging_offset at 64, staging_slot at 72,
 * staging_generation at 76; 80 bytes. Only with the DECODE flag (bit 1 of
 * flags, at 60), where any values are well-formed. */
static void test_ready_staging(void **state)
{
	const uint8_t *p = frame + PROTO_HEADER_BYTES;
	size_t len;
	(void)state;
	assert_int_equal(encode_sample(S_READY), PROTO_HEADER_BYTES + 80);
	assert_int_equal(get_le(p + 64, 8), 0);
	assert_int_equal(get_le(p + 72, 8), 0);
	encode_sample(S_READY_DECODE);
	assert_int_equal(get_le(p + 60, 4), PROTO_READY_LAST_IN_EPOCH | PROTO_READY_DECODE);
	assert_int_equal(get_le(p + 64, 8), in.u.ready.staging_offset);
	assert_int_equal(get_le(p + 72, 4), 1023);
	assert_int_equal(get_le(p + 76, 4), UINT32_MAX);
	/* each field without the flag */
	expect(patched(S_READY, 64, 1, 8), -EPROTO, NULL);
	assert_string_equal(why, "READY: a staging slot without the DECODE flag");
	expect(patched(S_READY, 64, 1ull << 63, 8), -EPROTO, "READY: a staging slot without the DECODE flag");
	expect(patched(S_READY, 72, 1, 4), -EPROTO, "READY: a staging slot without the DECODE flag");
	expect(patched(S_READY, 76, 1, 4), -EPROTO, "READY: a staging slot without the DECODE flag");
	expect(patched(S_READY_DECODE, 60, PROTO_READY_LAST_IN_EPOCH, 4), -EPROTO,
	       "READY: a staging slot without the DECODE flag");
	expect(patched(S_READY_DECODE, 60, 0, 4), -EPROTO, "READY: a staging slot without the DECODE flag");
	/* with the flag, slot 0 at offset 0 of generation 0 is a staging slot too */
	make_sample(S_READY_DECODE, &in);
	in.u.ready.staging_offset = 0;
	in.u.ready.staging_slot = 0;
	in.u.ready.staging_generation = 0;
	len = frames_encode();
	expect(frames_decode(len), 0, NULL);
	assert_int_equal(out.u.ready.flags, PROTO_READY_LAST_IN_EPOCH | PROTO_READY_DECODE);
	expect(patched(S_READY_DECODE, 64, UINT64_MAX, 8), 0, NULL);
	assert_true(out.u.ready.staging_offset == UINT64_MAX);
	/* rows, then the flags, then the staging slot */
	len = encode_sample(S_READY);
	put_le(frame + PROTO_HEADER_BYTES + 56, 0, 4);
	put_le(frame + PROTO_HEADER_BYTES + 72, 1, 4);
	expect(frames_decode(len), -EPROTO, "READY: rows 0");
	len = encode_sample(S_READY);
	put_le(frame + PROTO_HEADER_BYTES + 60, 8, 4);
	put_le(frame + PROTO_HEADER_BYTES + 72, 1, 4);
	expect(frames_decode(len), -EPROTO, "READY: unknown flag bits 0x8");
	/* a READY of version 5 ends at flags */
	expect(cut(S_READY, 64, 16, 0, 0, 0), -EPROTO, NULL);
	assert_string_equal(why,
			    "READY: payload truncated in staging_offset: need 8 bytes at offset 64, 0 left");
}

/* RELEASE's wait_ns at 16, 24 bytes: any value. */
static void test_release_wait(void **state)
{
	(void)state;
	assert_int_equal(encode_sample(S_RELEASE), PROTO_HEADER_BYTES + 24);
	assert_true(get_le(frame + PROTO_HEADER_BYTES + 16, 8) == UINT64_MAX - 1);
	expect(patched(S_RELEASE, 16, 0, 8), 0, NULL);
	assert_true(out.u.release.wait_ns == 0);
	expect(patched(S_RELEASE, 16, UINT64_MAX, 8), 0, NULL);
	assert_true(out.u.release.wait_ns == UINT64_MAX);
	/* a RELEASE of version 5 ends at generation */
	expect(cut(S_RELEASE, 16, 8, 0, 0, 0), -EPROTO, NULL);
	assert_string_equal(why, "RELEASE: payload truncated in wait_ns: need 8 bytes at offset 16, 0 left");
}

/* DECODED: seq 0, staging_slot 8, staging_generation 12, gpu 16, cpu 20,
 * bad 24, reserved 28, bad_sample 32, submit_ns 40; 48 bytes. S_DECODED
 * has gpu 200, cpu 50, bad 6, bad_sample 1000002. */
static void test_bad_decoded(void **state)
{
	size_t len;
	(void)state;
	assert_int_equal(encode_sample(S_DECODED), PROTO_HEADER_BYTES + 48);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 16, 4), 200);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 24, 4), 6);
	assert_int_equal(get_le(frame + PROTO_HEADER_BYTES + 32, 8), 1000002);
	/* reserved */
	expect(patched(S_DECODED, 28, 1, 4), -EPROTO, NULL);
	assert_string_equal(why, "DECODED: reserved 1, must be 0");
	expect(patched(S_DECODED_CLEAN, 28, 0x80000000u, 4), -EPROTO,
	       "DECODED: reserved 2147483648, must be 0");
	/* gpu + cpu + bad fits 32 bits, computed without wrapping */
	expect(patched(S_DECODED, 16, UINT32_MAX - 55, 4), -EPROTO, NULL);
	assert_string_equal(why, "DECODED: gpu + cpu + bad overflows");
	expect(patched(S_DECODED, 16, UINT32_MAX - 56, 4), 0, NULL); /* exactly UINT32_MAX */
	expect(patched(S_DECODED, 20, UINT32_MAX, 4), -EPROTO, "DECODED: gpu + cpu + bad overflows");
	expect(patched(S_DECODED, 24, UINT32_MAX, 4), -EPROTO, "DECODED: gpu + cpu + bad overflows");
	len = encode_sample(S_DECODED);
	for (size_t off = 16; off <= 24; off += 4)
		put_le(frame + PROTO_HEADER_BYTES + off, UINT32_MAX, 4); /* 3 x (2^32 - 1) */
	expect(frames_decode(len), -EPROTO, "DECODED: gpu + cpu + bad overflows");
	len = encode_sample(S_DECODED);
	put_le(frame + PROTO_HEADER_BYTES + 16, 0x80000000u, 4);
	put_le(frame + PROTO_HEADER_BYTES + 20, 0x80000000u, 4); /* wraps to 6 in 32 bits */
	expect(frames_decode(len), -EPROTO, "DECODED: gpu + cpu + bad overflows");
	/* bad_sample is UINT64_MAX exactly when bad is 0 */
	expect(patched(S_DECODED, 32, UINT64_MAX, 8), -EPROTO, NULL);
	assert_string_equal(why, "DECODED: bad 6 with bad_sample 18446744073709551615 "
			    "(UINT64_MAX exactly when bad is 0)");
	expect(patched(S_DECODED, 24, 0, 4), -EPROTO, "DECODED: bad 0 with bad_sample 1000002");
	expect(patched(S_DECODED_CLEAN, 32, 0, 8), -EPROTO, "DECODED: bad 0 with bad_sample 0 ");
	expect(patched(S_DECODED_CLEAN, 32, UINT64_MAX - 1, 8), -EPROTO,
	       "DECODED: bad 0 with bad_sample 18446744073709551614");
	expect(patched(S_DECODED_CLEAN, 24, 1, 4), -EPROTO,
	       "DECODED: bad 1 with bad_sample 18446744073709551615");
	expect(patched(S_DECODED, 32, 0, 8), 0, NULL); /* sample 0 can be bad */
	assert_int_equal(out.u.decoded.bad_sample, 0);
	/* the other fields take any value */
	expect(patched(S_DECODED, 0, 0, 8), 0, NULL);
	expect(patched(S_DECODED, 8, UINT64_MAX, 8), 0, NULL);
	assert_int_equal(out.u.decoded.staging_slot, UINT32_MAX);
	expect(patched(S_DECODED_CLEAN, 40, UINT64_MAX, 8), 0, NULL);
	assert_true(out.u.decoded.submit_ns == UINT64_MAX);
	/* all zero is not a DECODED: bad_sample 0 says a bad row */
	expect(patched(S_DECODED_CLEAN, 16, 0, 4), 0, NULL);
	len = encode_sample(S_DECODED_CLEAN);
	memset(frame + PROTO_HEADER_BYTES, 0, 48);
	expect(frames_decode(len), -EPROTO, "DECODED: bad 0 with bad_sample 0");
	/* reserved, then the sum, then bad_sample */
	len = encode_sample(S_DECODED);
	put_le(frame + PROTO_HEADER_BYTES + 16, UINT32_MAX, 4);
	put_le(frame + PROTO_HEADER_BYTES + 28, 7, 4);
	put_le(frame + PROTO_HEADER_BYTES + 32, UINT64_MAX, 8);
	expect(frames_decode(len), -EPROTO, "DECODED: reserved 7");
	put_le(frame + PROTO_HEADER_BYTES + 28, 0, 4);
	expect(frames_decode(len), -EPROTO, "DECODED: gpu + cpu + bad overflows");
	/* cut short in each field */
	expect(cut(S_DECODED, 47, 1, 0, 0, 0), -EPROTO,
	       "DECODED: payload truncated in submit_ns: need 8 bytes at offset 40, 7 left");
	expect(cut(S_DECODED, 28, 20, 0, 0, 0), -EPROTO, "DECODED: payload truncated in reserved");
	expect(cut(S_DECODED, 10, 38, 0, 0, 0), -EPROTO, "DECODED: payload truncated in staging_slot");
}

/* The encoder refuses what the decoder refuses, and short buffers. */
static void test_encode_rejects(void **state)
{
	uint8_t small[4096];
	(void)state;
	REJECT(S_BYE, in.hdr.type = 0);
	REJECT(S_BYE, in.hdr.type = PROTO_TYPE_MAX + 1);
	REJECT(S_BYE, in.hdr.flags = 0x2);
	REJECT(S_HELLO_MIN, in.u.hello.rank = 2);
	REJECT(S_HELLO_MIN, in.u.hello.world = 0);
	REJECT(S_HELLO_MIN, in.u.hello.delivery = 2);
	REJECT(S_HELLO_MIN, in.u.hello.pipeline[0] = 0);
	REJECT(S_HELLO_MAX, in.u.hello.pipeline[PROTO_NAME_MAX - 1] = 'p');
	REJECT(S_HELLO_MAX, in.u.hello.client_name[PROTO_NAME_MAX - 1] = 'c');
	REJECT(S_HELLO_MAX, in.u.hello.resume[PROTO_TOKEN_MAX - 1] = 'r');
	REJECT(S_HELLO_MIN, in.u.hello.pipeline[0] = '\n');
	REJECT(S_HELLO_MAX, in.u.hello.resume[3] = '\x1b');
	REJECT(S_HELLO_MAX, in.u.hello.split[PROTO_SPLIT_MAX - 1] = 's');
	REJECT(S_HELLO_MAX, in.u.hello.split[2] = ' ');
	REJECT(S_HELLO_MAX, in.u.hello.group[PROTO_GROUP_MAX - 1] = 'g');
	REJECT(S_HELLO_MAX, in.u.hello.group_size = 1);
	REJECT(S_HELLO_MIN, in.u.hello.group_size = 0);
	REJECT(S_HELLO_MIN, in.u.hello.flags = PROTO_HELLO_DECODE);
	REJECT(S_HELLO_MIN, in.u.hello.flags = 0x2);
	REJECT(S_HELLO_MAX, in.u.hello.flags = PROTO_HELLO_DECODE | 0x80000000u);
	REJECT(S_HELLO_MAX, in.u.hello.delivery = PROTO_DELIVERY_HOST);
	REJECT(S_WELCOME_MAX, in.u.welcome.n_tensors = 0);
	REJECT(S_WELCOME_MAX, in.u.welcome.n_tensors = PROTO_TENSORS_MAX + 1);
	REJECT(S_WELCOME_MAX, in.u.welcome.batch_size = 0);
	REJECT(S_WELCOME_MAX, in.u.welcome.rank = 8);
	REJECT(S_WELCOME_MAX, in.u.welcome.world = 0);
	REJECT(S_WELCOME_MAX, in.u.welcome.shuffle = 2);
	REJECT(S_WELCOME_MAX, in.u.welcome.drop_last = 2);
	REJECT(S_WELCOME_MAX, in.u.welcome.slot_bytes = in.u.welcome.arena_bytes + 1);
	REJECT(S_WELCOME_MAX, in.u.welcome.tensors[7].name[0] = 0);
	REJECT(S_WELCOME_MAX, in.u.welcome.tensors[7].name[PROTO_TENSOR_NAME_MAX - 1] = 'x');
	REJECT(S_WELCOME_MAX, in.u.welcome.tensors[7].dtype = 0);
	REJECT(S_WELCOME_MAX, in.u.welcome.tensors[7].dtype = PROTO_DTYPE_MAX + 1);
	REJECT(S_WELCOME_MAX, in.u.welcome.tensors[7].ndim = 0);
	REJECT(S_WELCOME_MAX, in.u.welcome.tensors[7].ndim = PROTO_NDIM_MAX + 1);
	REJECT(S_WELCOME_MIN, in.u.welcome.tensors[0].shape[2] = 1); /* unused dim not 0 */
	REJECT(S_WELCOME_MIN, in.u.welcome.tensors[0].shape[0] = 63);
	REJECT(S_WELCOME_MIN, in.u.welcome.tensors[0].offset = in.u.welcome.slot_bytes);
	REJECT(S_WELCOME_MIN, in.u.welcome.decode = 1);
	REJECT(S_WELCOME_MIN, in.u.welcome.decode = 2);
	REJECT(S_WELCOME_MAX, in.u.welcome.pipeline = 1);
	REJECT(S_WELCOME_MAX, in.u.welcome.decode_memory = 1);
	REJECT(S_READY, in.u.ready.rows = 0);
	REJECT(S_READY, in.u.ready.flags = 0x4);
	REJECT(S_READY, in.u.ready.staging_offset = 1);
	REJECT(S_READY, in.u.ready.staging_slot = 1);
	REJECT(S_READY, in.u.ready.staging_generation = 1);
	REJECT(S_READY_DECODE, in.u.ready.flags = PROTO_READY_LAST_IN_EPOCH);
	REJECT(S_DECODED, in.u.decoded.reserved = 1);
	REJECT(S_DECODED, in.u.decoded.gpu = UINT32_MAX);
	REJECT(S_DECODED, in.u.decoded.bad = 0);
	REJECT(S_DECODED, in.u.decoded.bad_sample = UINT64_MAX);
	REJECT(S_DECODED_CLEAN, in.u.decoded.bad_sample = 0);
	REJECT(S_DECODED_CLEAN, in.u.decoded.bad = 1);
	REJECT(S_ERROR_MAX, in.u.error.code = 0);
	REJECT(S_ERROR_MAX, in.u.error.code = -1);
	REJECT(S_ERROR_MAX, in.u.error.text[0] = 0);
	REJECT(S_ERROR_MAX, in.u.error.text[PROTO_ERROR_TEXT_MAX - 1] = 'e');
	REJECT(S_STATUS_MAX, in.u.status.text_len = PROTO_STATUS_TEXT_MAX + 1);
	REJECT(S_STATUS_SMALL, in.u.status.text[5] = 0);
	for (enum sample s = 0; s < S_COUNT; s++) {
		size_t len = encode_sample(s);
		size_t step = len > sizeof(small) ? len / 64 : 1;
		for (size_t cap = 0; cap < len; cap += step)
			assert_int_equal(proto_encode(&in, cap <= sizeof(small) ? small : frame, cap), -EMSGSIZE);
		assert_int_equal(proto_encode(&in, frame, len - 1), -EMSGSIZE);
		assert_int_equal(proto_encode(&in, frame, len), (int)len);
	}
}

/* ---- wire ---- */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;
	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void make_pair(int sv[2], int extra_type)
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | extra_type, 0, sv), 0);
}

/* Sends len bytes of frame with n_fds fds, bypassing wire_send's checks. */
static void raw_send(int sock, size_t len, const int *fds, size_t n_fds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 16)];
	} control;
	struct iovec iov = {.iov_base = frame, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	memset(&control, 0, sizeof(control));
	if (n_fds) {
		struct cmsghdr *c;
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	assert_int_equal(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

static void test_wire_fd_passing(void **state)
{
	int sv[2], p[2], fd = -2;
	char buf[4] = {0};
	(void)state;
	make_pair(sv, 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	make_sample(S_WELCOME_MAX, &in);
	assert_int_equal(wire_send(sv[0], &in, p[1]), 0);
	assert_true(in.hdr.flags & PROTO_FLAG_FD);
	assert_int_equal(wire_recv(sv[1], &out, &fd, why, sizeof(why)), 0);
	assert_true(fd >= 0 && fd != p[1]);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(out.hdr.flags, PROTO_FLAG_FD);
	assert_msg_equal(&in, &out);
	assert_int_equal(write(fd, "xyz", 3), 3);
	assert_int_equal(read(p[0], buf, 3), 3);
	assert_string_equal(buf, "xyz");
	close(fd);
	/* No fd: the flag is cleared even if the caller left it set. */
	make_sample(S_READY, &in);
	in.hdr.flags = PROTO_FLAG_FD;
	assert_int_equal(wire_send(sv[0], &in, -1), 0);
	assert_int_equal(wire_recv(sv[1], &out, &fd, why, sizeof(why)), 0);
	assert_int_equal(fd, -1);
	assert_int_equal(out.hdr.flags, 0);
	assert_msg_equal(&in, &out);
	/* An invalid message is not sent. */
	in.u.ready.rows = 0;
	assert_int_equal(wire_send(sv[0], &in, -1), -EINVAL);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_wire_peer_close(void **state)
{
	int sv[2], fd = -2;
	(void)state;
	make_pair(sv, 0);
	make_sample(S_BYE, &in);
	assert_int_equal(wire_send(sv[0], &in, -1), 0);
	close(sv[0]);
	/* What was sent before the close is still delivered, then the close. */
	assert_int_equal(wire_recv(sv[1], &out, &fd, why, sizeof(why)), 0);
	assert_int_equal(out.hdr.type, PROTO_BYE);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -ECONNRESET, "closed");
	assert_int_equal(fd, -1);
	/* Sending to a closed peer is -EPIPE, not a signal. */
	assert_int_equal(wire_send(sv[1], &in, -1), -EPIPE);
	close(sv[1]);
}

static void test_wire_nonblocking(void **state)
{
	int sv[2], fd = -2, rc = 0;
	(void)state;
	make_pair(sv, SOCK_NONBLOCK);
	assert_int_equal(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EAGAIN);
	assert_int_equal(fd, -1);
	make_sample(S_STATUS_MAX, &in);
	for (int i = 0; i < 100000 && rc == 0; i++)
		rc = wire_send(sv[0], &in, -1);
	assert_int_equal(rc, -EAGAIN);
	close(sv[0]);
	close(sv[1]);
}

static void test_wire_oversized(void **state)
{
	int sv[2], p[2], fd = -2, before;
	(void)state;
	make_pair(sv, 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	before = count_fds();
	encode_sample(S_BYE);
	memset(frame + PROTO_HEADER_BYTES, 0, PROTO_MAX_FRAME + 64 - PROTO_HEADER_BYTES);
	raw_send(sv[0], PROTO_MAX_FRAME + 1, NULL, 0);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EMSGSIZE, "larger");
	raw_send(sv[0], PROTO_MAX_FRAME + 64, p, 1);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EMSGSIZE, NULL);
	assert_int_equal(fd, -1);
	assert_int_equal(count_fds(), before);
	/* The largest valid frame passes. */
	make_sample(S_STATUS_MAX, &in);
	assert_int_equal(wire_send(sv[0], &in, -1), 0);
	assert_int_equal(wire_recv(sv[1], &out, &fd, why, sizeof(why)), 0);
	assert_msg_equal(&in, &out);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_wire_fd_mismatch(void **state)
{
	int sv[2], p[2], fd = -2, before, many[10];
	size_t len;
	(void)state;
	make_pair(sv, 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	before = count_fds();

	make_sample(S_BYE, &in);
	in.hdr.flags = PROTO_FLAG_FD; /* flag, no fd */
	len = (size_t)proto_encode(&in, frame, sizeof(frame));
	raw_send(sv[0], len, NULL, 0);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EBADMSG, "BYE: fd flag set but no fd");
	assert_int_equal(fd, -1);

	in.hdr.flags = 0; /* fd, no flag */
	len = (size_t)proto_encode(&in, frame, sizeof(frame));
	raw_send(sv[0], len, p, 1);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EBADMSG, "fd attached without the fd flag");
	assert_int_equal(fd, -1);
	assert_int_equal(count_fds(), before);

	in.hdr.flags = PROTO_FLAG_FD; /* two fds */
	len = (size_t)proto_encode(&in, frame, sizeof(frame));
	raw_send(sv[0], len, p, 2);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EBADMSG, "more than one fd");
	assert_int_equal(count_fds(), before);

	for (int i = 0; i < 10; i++) /* more fds than the receiver has room for */
		many[i] = p[i % 2];
	raw_send(sv[0], len, many, 10);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EBADMSG, NULL);
	assert_int_equal(count_fds(), before);

	frame[0] ^= 0xff; /* an invalid frame carrying an fd */
	raw_send(sv[0], len, p, 1);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -EBADMSG, "magic");
	assert_int_equal(fd, -1);
	assert_int_equal(count_fds(), before);

	close(sv[0]);
	expect(wire_recv(sv[1], &out, &fd, why, sizeof(why)), -ECONNRESET, NULL);
	assert_int_equal(count_fds(), before - 1);
	close(p[0]);
	close(p[1]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_golden_bytes),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_bad_header),
		cmocka_unit_test(test_truncated_and_trailing),
		cmocka_unit_test(test_bad_hello),
		cmocka_unit_test(test_hello_words),
		cmocka_unit_test(test_hello_flags),
		cmocka_unit_test(test_hello_declaration),
		cmocka_unit_test(test_bad_welcome),
		cmocka_unit_test(test_welcome_decode_host),
		cmocka_unit_test(test_bad_ready_error_status),
		cmocka_unit_test(test_ready_staging),
		cmocka_unit_test(test_release_wait),
		cmocka_unit_test(test_bad_decoded),
		cmocka_unit_test(test_encode_rejects),
		cmocka_unit_test(test_wire_fd_passing),
		cmocka_unit_test(test_wire_peer_close),
		cmocka_unit_test(test_wire_nonblocking),
		cmocka_unit_test(test_wire_oversized),
		cmocka_unit_test(test_wire_fd_mismatch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
