/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pixel: how a resampled uint8 RGB value becomes an element of an image
 * pipeline's float output, (x / 255 - mean) / std, shared by the worker
 * (image/image_sample.c) and the GPU kernel (gpudecode/imgkernel.h) so that
 * both compute it with the same float operations: x * scale + shift, the
 * product and the sum each rounded to float (no fused multiply-add), then,
 * for float16, IEEE half rounding to nearest even.
 *
 * Header only, static inline, plain C (the GPU kernel computes the
 * coefficients on the host and does the rest with CUDA's own correctly
 * rounded operations).
 */
#ifndef LDR_IMAGE_PIXEL_H
#define LDR_IMAGE_PIXEL_H

#include <stdint.h>
#include <string.h>

/* The coefficients of channel c: (x / 255 - mean) / std = x * scale + shift. */
static inline void px_norm_coeffs(const float mean[3], const float std[3], float scale[3],
				  float shift[3])
{
	for (int c = 0; c < 3; c++) {
		scale[c] = 1.0f / (255.0f * std[c]);
		shift[c] = -mean[c] / std[c];
	}
}

/* Value x of channel c as a float element. */
static inline float px_norm(uint8_t x, float scale, float shift)
{
	return (float)x * scale + shift;
}

/* IEEE half from float, rounding to nearest even (values here are small
 * and finite). */
static inline uint16_t px_half_from_float(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof(x));
	uint32_t sign = (x >> 16) & 0x8000u;
	int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
	uint32_t mant = x & 0x7fffffu;
	if (exp >= 31) /* overflow (or inf/nan, which cannot occur here) */
		return (uint16_t)(sign | 0x7c00u);
	if (exp <= 0) { /* subnormal or zero */
		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000u;
		uint32_t shift = (uint32_t)(14 - exp);
		uint32_t bits = mant >> shift;
		uint32_t rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
		if (rest > mid || (rest == mid && (bits & 1)))
			bits++;
		return (uint16_t)(sign | bits);
	}
	uint32_t bits = ((uint32_t)exp << 10) | (mant >> 13);
	uint32_t rest = mant & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (bits & 1)))
		bits++; /* may carry into the exponent: still correct */
	return (uint16_t)(sign | bits);
}

#endif
