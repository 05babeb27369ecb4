/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_decoder: libFuzzer harness for the checks of the messages between
 * the daemon's decoding thread and a decoder process (daemon/gpu/decoder_msg.c):
 * a job, which a decoder reads from its socket, and an answer, which the
 * daemon reads from a process it does not trust further than a worker.
 *
 * The input's first byte picks the message (even: a job, odd: an answer);
 * then come the receiver's side (a job: its sets, batch, arena and buffer
 * sizes; an answer: how many images were asked and, for each, the size
 * given, the region, the pitch and the destination's bytes), and the rest
 * is the message. Any message may be refused, with a reason; an accepted
 * one must keep every promise of decoder_proto.h, checked here again from
 * the raw bytes: a job's images inside the arena and the set's buffer, an
 * answer's decoded images at the size asked and inside their
 * destinations, its messages for images it was given. Any breach aborts
 * (ASan/UBSan catch the rest).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/gpu/decoder_proto.h"
#include "fuzz/fuzz_bytes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* per image asked: given w, h; region w, h; pitch; dst_bytes; planes */
#define ASKED_BYTES 21

static void fuzz_job(const uint8_t *data, size_t size)
{
	if (size < 16)
		return;
	uint32_t sets = data[0] % (DECODER_SETS_MAX + 1), max_batch = (uint32_t)le(data + 1, 2);
	uint64_t arena = le(data + 3, 6), buf = le(data + 9, 6);
	const uint8_t *msg = data + 16;
	size_t len = size - 16;
	struct decoder_job job;
	const char *why = decoder_job_check(msg, len, sets, max_batch, arena, buf, &job);
	if (why) {
		if (!*why)
			abort();
		return;
	}
	if (job.magic != DECODER_MAGIC || job.set >= sets || job.n > max_batch ||
	    len != sizeof(job) + (size_t)job.n * sizeof(struct decoder_image))
		abort();
	for (uint32_t i = 0; i < job.n; i++) {
		struct decoder_image x;
		memcpy(&x, msg + sizeof(job) + (size_t)i * sizeof(x), sizeof(x));
		/* in 128-bit arithmetic, which cannot wrap */
		if ((unsigned __int128)x.data_offset + x.len > arena ||
		    (unsigned __int128)x.dst_offset + x.dst_bytes > buf)
			abort();
	}
}

/* The bytes of the planes of a w x h image (nvjd.h), worked out again
 * here; more than any destination for a class nvjd does not know. */
static unsigned __int128 planes_bytes(enum nvjd_planes planes, uint32_t w, uint32_t h)
{
	uint32_t sh = planes == NVJD_PLANES_422 || planes == NVJD_PLANES_420 ? 2 : 1;
	uint32_t sv = planes == NVJD_PLANES_420 || planes == NVJD_PLANES_440 ? 2 : 1;
	if (planes < NVJD_PLANES_GRAY || planes > NVJD_PLANES_440)
		return (unsigned __int128)1 << 100;
	unsigned __int128 y = (unsigned __int128)w * h;
	unsigned __int128 cw = ((unsigned __int128)w + sh - 1) / sh;
	unsigned __int128 c = cw * (((unsigned __int128)h + sv - 1) / sv);
	unsigned __int128 a = NVJD_PLANE_ALIGN;
	return (y + a - 1) / a * a + (c + a - 1) / a * a + c;
}

static void fuzz_done(const uint8_t *data, size_t size)
{
	if (size < 1)
		return;
	uint32_t n = data[0] % 9;
	if (size < 1 + (size_t)n * ASKED_BYTES)
		return;
	struct nvjd_image asked[8];
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = data + 1 + i * ASKED_BYTES;
		asked[i] = (struct nvjd_image){
			.given_w = (uint32_t)le(p, 2), .given_h = (uint32_t)le(p + 2, 2),
			.roi_w = (uint32_t)le(p + 4, 2), .roi_h = (uint32_t)le(p + 6, 2),
			.pitch = le(p + 8, 4), .dst_bytes = le(p + 12, 8),
			.planes = (enum nvjd_planes)(p[20] % 7)}; /* 6: none known */
	}
	const uint8_t *msg = data + 1 + n * ASKED_BYTES;
	size_t len = size - 1 - n * ASKED_BYTES;
	struct decoder_done done;
	const char *why = decoder_done_check(msg, len, asked, n, &done);
	if (why) {
		if (!*why)
			abort();
		return;
	}
	if (done.magic != DECODER_MAGIC || done.n != n || done.n_err > n ||
	    len != sizeof(done) + (size_t)n * sizeof(struct decoder_result) +
			   (size_t)done.n_err * sizeof(struct decoder_err))
		abort();
	const uint8_t *at = msg + sizeof(done);
	for (uint32_t i = 0; i < n; i++) {
		struct decoder_result r;
		memcpy(&r, at + (size_t)i * sizeof(r), sizeof(r));
		const struct nvjd_image *a = &asked[i];
		if (r.status > 0)
			abort();
		if (r.status < 0)
			continue;
		if (a->given_w && (r.width != a->given_w || r.height != a->given_h))
			abort();
		uint32_t w = a->roi_w ? a->roi_w : a->given_w ? a->given_w : r.width;
		uint32_t h = a->roi_w ? a->roi_h : a->given_w ? a->given_h : r.height;
		if (r.out_w != w || r.out_h != h || w == 0 || h == 0)
			abort();
		if (a->planes != NVJD_PLANES_NONE) {
			if (planes_bytes(a->planes, w, h) > a->dst_bytes)
				abort();
		} else if ((uint64_t)w * 3 > a->pitch ||
			   (unsigned __int128)(h - 1) * a->pitch + (uint64_t)w * 3 > a->dst_bytes) {
			abort();
		}
	}
	at += (size_t)n * sizeof(struct decoder_result);
	for (uint32_t k = 0; k < done.n_err; k++) {
		uint32_t index;
		memcpy(&index, at + (size_t)k * sizeof(struct decoder_err), sizeof(index));
		if (index >= n)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		fuzz_done(data + 1, size - 1);
	else
		fuzz_job(data + 1, size - 1);
	return 0;
}
