/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/gpu/decoder_msg.c, the checks of the messages between
 * the daemon's decoding thread and a decoder process (decoder_proto.h):
 *
 *   - a job: accepted as built; refused, with its reason, when shorter
 *     than its header, of another magic, for a set the decoder lacks,
 *     over its batch, of a length not its images', with an image's bytes
 *     outside the arena (past it, and a length that wraps) or its pixels
 *     outside the set's buffer;
 *   - an answer: accepted as built (decoded images at their given size,
 *     a region, a refused image with its message); refused when shorter
 *     than its header, of another magic, for another number of images,
 *     with more messages than images, of a length not its parts', with a
 *     positive status, an image's size other than the one given, decoded
 *     at a size other than asked (whole image or region), larger than its
 *     destination (interleaved RGB, or planes: one byte short of their
 *     layout, or a subsampling nvjd does not know), or a message for an
 *     image it was not given.
 *
 * Without CUDA (no decoder processes are built) the test skips.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#if LOADERD_HAVE_CUDA
#include <errno.h>

#include "daemon/gpu/decoder_proto.h"

#define ARENA 1000000u
#define BUF 500000u
#define SETS 2
#define BATCH 4

static uint8_t msg[sizeof(struct decoder_done) + BATCH * (sizeof(struct decoder_result) +
							   sizeof(struct decoder_err)) +
		   sizeof(struct decoder_job) + BATCH * sizeof(struct decoder_image)];

/* A job of n images, each 1000 bytes of the arena into 30000 bytes of the
 * buffer; its length. */
static size_t job_of(uint32_t n, struct decoder_image *img)
{
	struct decoder_job job = {.magic = DECODER_MAGIC, .set = 1, .n = n};
	memcpy(msg, &job, sizeof(job));
	for (uint32_t i = 0; i < n; i++) {
		img[i] = (struct decoder_image){.data_offset = 1000u * i, .len = 1000,
						.dst_offset = 30000u * i, .pitch = 300,
						.dst_bytes = 30000, .given_w = 100, .given_h = 100};
		memcpy(msg + sizeof(job) + i * sizeof(img[i]), &img[i], sizeof(img[i]));
	}
	return sizeof(job) + n * sizeof(struct decoder_image);
}

static const char *job_check(size_t len)
{
	struct decoder_job job;
	return decoder_job_check(msg, len, SETS, BATCH, ARENA, BUF, &job);
}

static void test_job(void **state)
{
	(void)state;
	struct decoder_image img[BATCH];
	size_t len = job_of(2, img);
	struct decoder_job job;
	assert_null(decoder_job_check(msg, len, SETS, BATCH, ARENA, BUF, &job));
	assert_int_equal(job.set, 1);
	assert_int_equal(job.n, 2);
	assert_string_equal(job_check(sizeof(job) - 1), "shorter than a job");
	assert_string_equal(job_check(len - 1), "a length that is not its images'");
	assert_string_equal(job_check(len + sizeof(struct decoder_image)),
			    "a length that is not its images'");

	struct decoder_job *h = (void *)msg;
	h->magic ^= 1;
	assert_string_equal(job_check(len), "not a job (its magic)");
	h->magic ^= 1;
	h->set = SETS;
	assert_string_equal(job_check(len), "a buffer set it does not have");
	h->set = 0;
	h->n = BATCH + 1;
	assert_string_equal(job_check(len), "more images than its batch");

	struct decoder_image *x = (void *)(msg + sizeof(job));
	job_of(2, img);
	x[1].data_offset = ARENA + 1;
	assert_string_equal(job_check(len), "an image's bytes outside the arena");
	job_of(2, img);
	x[1].data_offset = ARENA - 10;
	x[1].len = UINT64_MAX - 5; /* the sum wraps */
	assert_string_equal(job_check(len), "an image's bytes outside the arena");
	job_of(2, img);
	x[0].dst_offset = BUF - 100;
	assert_string_equal(job_check(len), "an image's pixels outside the set's buffer");
	job_of(2, img);
	x[0].dst_bytes = UINT64_MAX;
	assert_string_equal(job_check(len), "an image's pixels outside the set's buffer");
}

/* The images asked: 100 x 100 given, the third a 40 x 30 region, as
 * interleaved RGB. */
static void asked_of(struct nvjd_image *a)
{
	for (int i = 0; i < 3; i++)
		a[i] = (struct nvjd_image){.given_w = 100, .given_h = 100, .pitch = 300,
					   .dst_bytes = 30000};
	a[2].roi_x = 10;
	a[2].roi_y = 20;
	a[2].roi_w = 40;
	a[2].roi_h = 30;
}

/* An answer to asked_of's images: the first and third decoded, the second
 * refused with a message; its length. */
static size_t done_of(struct decoder_result *r, struct decoder_err *e)
{
	struct decoder_done done = {.magic = DECODER_MAGIC, .n = 3, .n_err = 1};
	r[0] = (struct decoder_result){.width = 100, .height = 100, .out_w = 100, .out_h = 100};
	r[1] = (struct decoder_result){.status = -ENOTSUP, .has_err = 1};
	r[2] = (struct decoder_result){.width = 100, .height = 100, .out_w = 40, .out_h = 30};
	e[0] = (struct decoder_err){.index = 1, .text = "the hardware decoder refused this image"};
	memcpy(msg, &done, sizeof(done));
	memcpy(msg + sizeof(done), r, 3 * sizeof(*r));
	memcpy(msg + sizeof(done) + 3 * sizeof(*r), e, sizeof(*e));
	return sizeof(done) + 3 * sizeof(*r) + sizeof(*e);
}

static const char *done_check(size_t len, const struct nvjd_image *asked)
{
	struct decoder_done done;
	return decoder_done_check(msg, len, asked, 3, &done);
}

static void test_done(void **state)
{
	(void)state;
	struct nvjd_image asked[3];
	struct decoder_result r[3];
	struct decoder_err e[1];
	asked_of(asked);
	size_t len = done_of(r, e);
	struct decoder_done done;
	assert_null(decoder_done_check(msg, len, asked, 3, &done));
	assert_int_equal(done.n_err, 1);
	assert_string_equal(decoder_done_check(msg, len, asked, 2, &done),
			    "an answer for another number of images");
	assert_string_equal(done_check(sizeof(done) - 1, asked), "shorter than an answer");
	assert_string_equal(done_check(len - 1, asked),
			    "a length that is not its results' and messages'");

	struct decoder_done *h = (void *)msg;
	h->magic ^= 1;
	assert_string_equal(done_check(len, asked), "not an answer (its magic)");
	done_of(r, e);
	h->n_err = 4;
	assert_string_equal(done_check(len, asked), "more messages than images");

	struct decoder_result *x = (void *)(msg + sizeof(done));
	done_of(r, e);
	x[1].status = 5;
	assert_string_equal(done_check(len, asked), "a status that is not 0 or -errno");
	done_of(r, e);
	x[0].width = 101;
	assert_string_equal(done_check(len, asked), "an image's size other than the one given");
	done_of(r, e);
	x[0].out_h = 101;
	assert_string_equal(done_check(len, asked),
			    "an image decoded at a size other than the one asked");
	done_of(r, e);
	x[2].out_w = 100; /* the whole image, where a region was asked */
	assert_string_equal(done_check(len, asked),
			    "an image decoded at a size other than the one asked");

	/* Nothing given: the size reported is taken, inside the destination. */
	asked[0].given_w = asked[0].given_h = 0;
	done_of(r, e);
	x[0].width = x[0].out_w = 101;
	assert_string_equal(done_check(len, asked), "an image larger than its destination");
	x[0].width = x[0].out_w = 90;
	assert_null(done_check(len, asked));
	x[0].height = x[0].out_h = 0;
	assert_string_equal(done_check(len, asked),
			    "an image decoded at a size other than the one asked");
	asked_of(asked);

	/* Planes (NVJD_OUTPUT_YUV): 4:2:0 of 100 x 100 is Y (10000 bytes, to
	 * 10240 aligned), then Cb (2500, to 2560) and Cr (2500): 15300 bytes,
	 * whatever the pitch. */
	done_of(r, e);
	asked[0].planes = NVJD_PLANES_420;
	asked[0].pitch = 1;
	asked[0].dst_bytes = 15300;
	assert_int_equal(nvjd_planes_layout(NVJD_PLANES_420, 100, 100, NULL, NULL), 15300);
	assert_null(done_check(len, asked));
	asked[0].dst_bytes = 15299;
	assert_string_equal(done_check(len, asked), "an image larger than its destination");
	asked[0].dst_bytes = 1u << 20;
	asked[0].planes = (enum nvjd_planes)99; /* no such class */
	assert_string_equal(done_check(len, asked), "an image larger than its destination");
	assert_string_equal(nvjd_fits(&asked[0], 100, 100), "an unknown chroma subsampling");
	asked_of(asked);

	/* A size reported by the decoder, nothing given: the largest ones
	 * take more than 64 bits can count (even 4:2:0's 1.5 bytes a pixel),
	 * in every class's planes and in RGB's rows, and fit no destination,
	 * the largest there is included; a few rows or columns fit it. */
	static const enum nvjd_planes classes[] = {NVJD_PLANES_NONE, NVJD_PLANES_GRAY,
						   NVJD_PLANES_444,  NVJD_PLANES_422,
						   NVJD_PLANES_420,  NVJD_PLANES_440};
	static const uint32_t big[][2] = {{UINT32_MAX, UINT32_MAX},
					  {UINT32_MAX, UINT32_MAX - 1},
					  {0xf0000000u, UINT32_MAX},
					  {UINT32_MAX, 0xf0000000u},
					  {UINT32_MAX, 4},
					  {4, UINT32_MAX}};
	for (size_t c = 0; c < sizeof(classes) / sizeof(classes[0]); c++) {
		for (size_t b = 0; b < sizeof(big) / sizeof(big[0]); b++) {
			uint32_t bw = big[b][0], bh = big[b][1];
			bool fits = bw == 4 || bh == 4;
			asked_of(asked);
			done_of(r, e);
			asked[0].given_w = asked[0].given_h = 0;
			asked[0].planes = classes[c];
			asked[0].pitch = (uint64_t)bw * 3;
			asked[0].dst_bytes = UINT64_MAX;
			x[0].width = x[0].out_w = bw;
			x[0].height = x[0].out_h = bh;
			if (classes[c] != NVJD_PLANES_NONE)
				assert_true((nvjd_planes_layout(classes[c], bw, bh, NULL, NULL) <
					     UINT64_MAX) == fits);
			if (fits)
				assert_null(done_check(len, asked));
			else
				assert_string_equal(done_check(len, asked),
						    "an image larger than its destination");
		}
	}
	asked_of(asked);

	done_of(r, e);
	struct decoder_err *m = (void *)(msg + sizeof(done) + 3 * sizeof(*r));
	m->index = 3;
	assert_string_equal(done_check(len, asked), "a message for an image it was not given");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_job),
		cmocka_unit_test(test_done),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* no CUDA: no decoder processes */

int main(void)
{
	return 77;
}

#endif
