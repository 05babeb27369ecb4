/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decoder_msg: the checks of the two messages that carry work between the
 * daemon's decoding thread and a decoder process (decoder_proto.h): a job,
 * which the decoder checks against what it mapped, and the answer, which
 * the daemon checks against what it asked before anything reads the
 * pixels. Pure: no CUDA call, no I/O; fuzz/fuzz_decoder.c feeds them
 * arbitrary bytes. The messages' records are read with memcpy, since a
 * datagram's bytes need not be aligned.
 */
#include <string.h>

#include "daemon/gpu/decoder_proto.h"

const char *decoder_job_check(const void *msg, size_t len, uint32_t sets, uint32_t max_batch,
			      uint64_t arena_bytes, uint64_t buf_bytes, struct decoder_job *job)
{
	if (len < sizeof(*job))
		return "shorter than a job";
	memcpy(job, msg, sizeof(*job));
	if (job->magic != DECODER_MAGIC)
		return "not a job (its magic)";
	if (job->set >= sets)
		return "a buffer set it does not have";
	if (job->n > max_batch)
		return "more images than its batch";
	if (len != sizeof(*job) + (size_t)job->n * sizeof(struct decoder_image))
		return "a length that is not its images'";
	const uint8_t *at = (const uint8_t *)msg + sizeof(*job);
	for (uint32_t i = 0; i < job->n; i++) {
		struct decoder_image x;
		memcpy(&x, at + (size_t)i * sizeof(x), sizeof(x));
		if (x.data_offset > arena_bytes || x.len > arena_bytes - x.data_offset)
			return "an image's bytes outside the arena";
		if (x.dst_offset > buf_bytes || x.dst_bytes > buf_bytes - x.dst_offset)
			return "an image's pixels outside the set's buffer";
	}
	return NULL;
}

/* Whether result r fits image a as asked: decoded at the size asked for
 * (its region, else the size it was given), inside its destination. */
static const char *result_check(const struct decoder_result *r, const struct nvjd_image *a)
{
	if (r->status > 0)
		return "a status that is not 0 or -errno";
	if (r->status < 0)
		return NULL;
	if (a->given_w && (r->width != a->given_w || r->height != a->given_h))
		return "an image's size other than the one given";
	uint32_t w = a->roi_w ? a->roi_w : r->width, h = a->roi_w ? a->roi_h : r->height;
	if (r->out_w != w || r->out_h != h || w == 0 || h == 0)
		return "an image decoded at a size other than the one asked";
	return nvjd_fits(a, w, h) ? "an image larger than its destination" : NULL;
}

const char *decoder_done_check(const void *msg, size_t len, const struct nvjd_image *asked,
			       uint32_t n, struct decoder_done *done)
{
	if (len < sizeof(*done))
		return "shorter than an answer";
	memcpy(done, msg, sizeof(*done));
	if (done->magic != DECODER_MAGIC)
		return "not an answer (its magic)";
	if (done->n != n)
		return "an answer for another number of images";
	if (done->n_err > n)
		return "more messages than images";
	if (len != sizeof(*done) + (size_t)n * sizeof(struct decoder_result) +
			   (size_t)done->n_err * sizeof(struct decoder_err))
		return "a length that is not its results' and messages'";
	const uint8_t *at = (const uint8_t *)msg + sizeof(*done);
	for (uint32_t i = 0; i < n; i++) {
		struct decoder_result r;
		memcpy(&r, at + (size_t)i * sizeof(r), sizeof(r));
		const char *why = result_check(&r, &asked[i]);
		if (why)
			return why;
	}
	at += (size_t)n * sizeof(struct decoder_result);
	for (uint32_t k = 0; k < done->n_err; k++) {
		uint32_t index;
		memcpy(&index, at + (size_t)k * sizeof(struct decoder_err), sizeof(index));
		if (index >= n)
			return "a message for an image it was not given";
	}
	return NULL;
}
