/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd_planes: where an image's pixels lie in its destination, in either
 * of nvjd's output formats (nvjd.h), and whether a decode of a given size
 * fits there. Pure: the daemon's checks of a decoder process's answer
 * (decoder_msg.c) use it as nvjd itself does, without CUDA.
 */
#include "gpudecode/nvjd.h"

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

uint64_t nvjd_planes_layout(enum nvjd_planes planes, uint32_t w, uint32_t h, uint64_t offset[3],
			    uint64_t pitch[3])
{
	uint32_t sh, sv; /* chroma's subsampling across and down */
	switch (planes) {
	case NVJD_PLANES_GRAY:
	case NVJD_PLANES_444: sh = 1, sv = 1; break;
	case NVJD_PLANES_422: sh = 2, sv = 1; break;
	case NVJD_PLANES_420: sh = 2, sv = 2; break;
	case NVJD_PLANES_440: sh = 1, sv = 2; break;
	default: return 0;
	}
	if (w == 0 || h == 0)
		return 0;
	uint64_t cw = ((uint64_t)w + sh - 1) / sh, ch = ((uint64_t)h + sv - 1) / sv;
	/* GRAY has chroma planes too, as 4:4:4's: nvJPEG is given three
	 * planes whatever the image, and unused ones are left alone. */
	/* w * h fits 64 bits, and so does its rounding up; the sums of the
	 * planes need not, for sizes from a decoder process's answer. */
	uint64_t y = (uint64_t)w * h, c = cw * ch, at_cb = round_up(y, NVJD_PLANE_ALIGN), at_cr,
		 end;
	if (__builtin_add_overflow(at_cb, round_up(c, NVJD_PLANE_ALIGN), &at_cr) ||
	    __builtin_add_overflow(at_cr, c, &end))
		return UINT64_MAX;
	if (offset) {
		offset[0] = 0;
		offset[1] = at_cb;
		offset[2] = at_cr;
	}
	if (pitch) {
		pitch[0] = w;
		pitch[1] = pitch[2] = cw;
	}
	return end;
}

const char *nvjd_fits(const struct nvjd_image *im, uint32_t out_w, uint32_t out_h)
{
	if (out_w == 0 || out_h == 0)
		return "an empty image";
	if (im->planes != NVJD_PLANES_NONE) {
		uint64_t bytes = nvjd_planes_layout(im->planes, out_w, out_h, NULL, NULL);
		if (bytes == 0)
			return "an unknown chroma subsampling";
		return bytes == UINT64_MAX || bytes > im->dst_bytes
			       ? "its planes do not fit in its destination"
			       : NULL;
	}
	uint64_t row = (uint64_t)out_w * 3;
	if (row > im->pitch)
		return "a pitch less than its row of 3-byte pixels";
	if (row > im->dst_bytes || (out_h - 1) > (im->dst_bytes - row) / im->pitch)
		return "its rows do not fit in its destination";
	return NULL;
}
