/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto_frames: what the codec's tests (test_proto.c, test_proto_device.c)
 * share: the frame buffer and the messages encoded into and decoded out of
 * it, the little-endian edits that make a malformed frame from a valid one
 * at the offsets proto/PROTOCOL.md documents, a WELCOME with every field
 * set, and the check of a decode's result and reason.
 *
 * Header only, every function static inline (a test is one file: no
 * warning for what it does not use). Include it after cmocka.h.
 */
#ifndef LDR_TESTS_PROTO_FRAMES_H
#define LDR_TESTS_PROTO_FRAMES_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "proto/proto.h"

/* Large objects live here, not on the stack. */
static uint8_t frame[PROTO_MAX_FRAME + 64];
static struct proto_msg in, out;
static char why[512];

static inline void put_le(uint8_t *p, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static inline uint64_t get_le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = n; i-- > 0;)
		v = (v << 8) | p[i];
	return v;
}

/* Encodes `in` into frame: its length, at least a header. */
static inline size_t frames_encode(void)
{
	int n = proto_encode(&in, frame, sizeof(frame));
	assert_true(n >= PROTO_HEADER_BYTES);
	return (size_t)n;
}

static inline int frames_decode(size_t len)
{
	return proto_decode(frame, len, &out, why, sizeof(why));
}

/* Removes n payload bytes at off from the frame of len bytes, fixing its
 * length field: the new length. */
static inline size_t frames_drop(size_t len, size_t off, size_t n)
{
	uint8_t *p = frame + PROTO_HEADER_BYTES + off;
	memmove(p, p + n, len - PROTO_HEADER_BYTES - off - n);
	len -= n;
	put_le(frame + 12, len - PROTO_HEADER_BYTES, 4);
	return len;
}

/* The stream fields every sample WELCOME of these tests has. */
static inline void welcome_stream(struct proto_welcome *w)
{
	w->session = 0x0102030405060708ull;
	w->n_samples = 1000003;
	w->seed = UINT64_MAX;
	w->data = 0x91c0ffee3f2a0001ull;
	w->epoch = 7;
	w->offset = 12345;
	w->batch_size = 64;
	w->shuffle = 1;
	strcpy(w->name, "train");
}

/* A WELCOME of n_tensors tensors of ndim dimensions, every field set (a
 * single tensor makes a payload of exactly 150 bytes with ndim 2). */
static inline void make_welcome(struct proto_welcome *w, uint32_t n_tensors, uint32_t ndim)
{
	welcome_stream(w);
	w->arena_bytes = 1ull << 40;
	w->slot_bytes = 1ull << 30;
	w->rank = 1;
	w->world = 8;
	w->depth = 4;
	w->drop_last = 1;
	w->n_tensors = n_tensors;
	for (uint32_t t = 0; t < n_tensors; t++) {
		struct proto_tensor *x = &w->tensors[t];
		if (n_tensors == 1)
			strcpy(x->name, "data");
		else
			memset(x->name, 'a' + (int)t, PROTO_TENSOR_NAME_MAX - 1);
		x->dtype = 1 + t % PROTO_DTYPE_MAX;
		x->ndim = ndim;
		x->shape[0] = 64;
		for (uint32_t d = 1; d < ndim; d++)
			x->shape[d] = 2 + d + t;
		x->offset = (uint64_t)t << 20;
	}
	if (n_tensors == 1) {
		w->rank = 0;
		w->world = 1;
		w->tensors[0].shape[1] = 96;
	}
}

/* Sample s (the test's make_sample()) edited by a statement: the encoder
 * must refuse it, as the decoder refuses it. */
#define REJECT(s, edit)                                                            \
	do {                                                                       \
		make_sample(s, &in);                                               \
		edit;                                                              \
		assert_int_equal(proto_encode(&in, frame, sizeof(frame)), -EINVAL); \
	} while (0)

/* rc must be want, and why must hold why_part when one is given. */
static inline void expect(int rc, int want, const char *why_part)
{
	if (rc != want || (why_part && !strstr(why, why_part))) {
		print_error("got %d (%s), want %d with \"%s\"\n", rc, why, want,
			    why_part ? why_part : "");
		fail();
	}
}

#endif
