/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transform_plan: where one sample's transform chain takes it (transform.h,
 * tf_plan_sample): the box of the source image it covers, the output size,
 * whether it is mirrored.
 *
 * The planner follows torchvision's code step by step
 * (RandomResizedCrop.get_params, F.resize's output size, F.center_crop),
 * including Python's round-half-to-even and truncating int(); the notes at
 * each step name the torchvision line it reproduces. Its randomness comes
 * from a stream of its own per sample (seed, epoch, index), so a plan
 * depends on nothing else.
 */
#include "image/transform.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/hash.h"

/* xoshiro256**, seeded through splitmix64 from a hash of (seed, epoch,
 * index): one short independent stream per sample. */
struct tf_rng {
	uint64_t s[4];
};

static void tf_rng_seed(struct tf_rng *r, uint64_t seed, uint64_t epoch, uint64_t index)
{
	uint64_t k = hash_sample(seed, 0x7472616e73666f72ull /* "transfor" */, epoch, index);
	for (uint64_t i = 0; i < 4; i++) /* splitmix64's outputs 1..4 from k */
		r->s[i] = hash_mix64(k + i * HASH_GOLDEN);
}

static uint64_t tf_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t tf_rng_next(struct tf_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = tf_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = tf_rotl(s[3], 45);
	return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double tf_rng_unit(struct tf_rng *r)
{
	return (double)(tf_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi), torch's uniform_(lo, hi). */
static double tf_rng_uniform(struct tf_rng *r, double lo, double hi)
{
	return lo + (hi - lo) * tf_rng_unit(r);
}

/* Uniform in [lo, hi] inclusive, torch.randint(lo, hi + 1). Rejects the
 * lowest 2^64 mod n draws so every residue is equally likely. */
static uint64_t tf_rng_int(struct tf_rng *r, uint64_t lo, uint64_t hi)
{
	uint64_t n = hi - lo + 1;
	if (n == 0) /* the whole 64-bit range */
		return tf_rng_next(r);
	uint64_t threshold = (0 - n) % n;
	uint64_t x;
	do
		x = tf_rng_next(r);
	while (x < threshold);
	return lo + x % n;
}

/* Python's round(): halves go to the even neighbour. Exact for any double
 * below 2^52, since x - floor(x) is then computed exactly. */
static double tf_round_half_even(double x)
{
	double f = floor(x), frac = x - f;
	if (frac > 0.5)
		return f + 1.0;
	if (frac < 0.5)
		return f;
	return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

/*
 * Where the sample stands while the chain runs: the box in source pixels
 * that the virtual image (vw x vh, what torchvision would hold at this
 * point) covers, and whether that virtual image is mirrored.
 *
 * Virtual sizes stay below 2^49: images are below 2^32 a side, ops set
 * sizes up to 2^16, and a shorter-edge resize never raises long/short
 * above the image's 2^32 or 2^16 for op-made sizes, so products and
 * areas fit in doubles with room to spare.
 */
struct tf_walk {
	double x, y, w, h;
	uint64_t vw, vh;
	bool flip;
};

/* Crops the virtual image at (left, top) to cw x ch, as torchvision's
 * F.crop; the virtual image becomes the crop. */
static void tf_walk_crop(struct tf_walk *st, int64_t left, int64_t top, uint64_t cw, uint64_t ch)
{
	double sx = st->w / (double)st->vw, sy = st->h / (double)st->vh;
	if (st->flip) /* the virtual image is mirrored: its x runs right to left */
		left = (int64_t)st->vw - left - (int64_t)cw;
	st->x += (double)left * sx;
	st->y += (double)top * sy;
	st->w = (double)cw * sx;
	st->h = (double)ch * sy;
	st->vw = cw;
	st->vh = ch;
}

/* RandomResizedCrop.get_params on a W x H image: (left, top, w, h). */
static void tf_random_resized_box(const struct tf_op *op, uint64_t W, uint64_t H, struct tf_rng *r,
				  int64_t *left, int64_t *top, uint64_t *w, uint64_t *h)
{
	const double area = (double)W * (double)H;
	const double log_lo = log(op->ratio_lo), log_hi = log(op->ratio_hi);

	for (int attempt = 0; attempt < 10; attempt++) {
		double target_area = area * tf_rng_uniform(r, op->scale_lo, op->scale_hi);
		double aspect = exp(tf_rng_uniform(r, log_lo, log_hi));
		double wd = tf_round_half_even(sqrt(target_area * aspect));
		double hd = tf_round_half_even(sqrt(target_area / aspect));
		if (wd > 0.0 && wd <= (double)W && hd > 0.0 && hd <= (double)H) {
			*w = (uint64_t)wd;
			*h = (uint64_t)hd;
			*top = (int64_t)tf_rng_int(r, 0, H - *h);
			*left = (int64_t)tf_rng_int(r, 0, W - *w);
			return;
		}
	}
	/* Fallback: the largest centred box whose aspect is clamped into the
	 * ratio range. Sides are kept in 1..W and 1..H where torchvision would
	 * fail on a zero-sized crop (a ratio far beyond the image's shape). */
	double in_ratio = (double)W / (double)H;
	uint64_t fw = W, fh = H;
	if (in_ratio < op->ratio_lo)
		fh = (uint64_t)tf_round_half_even((double)W / op->ratio_lo);
	else if (in_ratio > op->ratio_hi)
		fw = (uint64_t)tf_round_half_even((double)H * op->ratio_hi);
	fw = fw < 1 ? 1 : (fw > W ? W : fw);
	fh = fh < 1 ? 1 : (fh > H ? H : fh);
	*w = fw;
	*h = fh;
	*top = (int64_t)((H - fh) / 2);
	*left = (int64_t)((W - fw) / 2);
}

/* F.resize's output size for an int: the shorter edge becomes size, the
 * longer int(size * long / short), truncated. */
static void tf_walk_resize(struct tf_walk *st, const struct tf_op *op)
{
	if (op->w != 0) {
		st->vw = op->w;
		st->vh = op->h;
		return;
	}
	uint64_t size = op->h;
	if (st->vw <= st->vh) {
		st->vh = (uint64_t)((double)size * (double)st->vh / (double)st->vw);
		st->vw = size;
	} else {
		st->vw = (uint64_t)((double)size * (double)st->vw / (double)st->vh);
		st->vh = size;
	}
}

/* F.center_crop's offset along one side. A crop larger than the side is
 * first padded by (crop - side) // 2 before it (the rest after), and then
 * cropped at 0; otherwise the offset is int(round((side - crop) / 2.0)). */
static int64_t tf_center_offset(uint64_t side, uint64_t crop)
{
	if (crop > side)
		return -(int64_t)((crop - side) / 2);
	return (int64_t)tf_round_half_even((double)(side - crop) / 2.0);
}

void tf_plan_sample(const struct tf_chain *c, uint64_t seed, uint64_t epoch,
		    uint64_t index, uint32_t img_w, uint32_t img_h, struct tf_plan *out)
{
	struct tf_rng r;
	tf_rng_seed(&r, seed, epoch, index);
	if (img_w == 0)
		img_w = 1;
	if (img_h == 0)
		img_h = 1;
	struct tf_walk st = {0.0, 0.0, img_w, img_h, img_w, img_h, false};

	for (uint32_t i = 0; i < c->n && i < TF_OPS_MAX; i++) {
		const struct tf_op *op = &c->ops[i];
		switch (op->kind) {
		case TF_RANDOM_RESIZED_CROP: {
			int64_t left, top;
			uint64_t w, h;
			tf_random_resized_box(op, st.vw, st.vh, &r, &left, &top, &w, &h);
			tf_walk_crop(&st, left, top, w, h);
			st.vw = op->w; /* then resized to the op's size */
			st.vh = op->h;
			break;
		}
		case TF_RESIZE:
			tf_walk_resize(&st, op);
			break;
		case TF_CENTER_CROP:
			tf_walk_crop(&st, tf_center_offset(st.vw, op->w), tf_center_offset(st.vh,
											   op->h),
				     op->w, op->h);
			break;
		case TF_HFLIP:
			/* RandomHorizontalFlip draws even when p is 0 or 1, so the
			 * ops after it see the same stream whatever p is. */
			if (tf_rng_unit(&r) < op->p)
				st.flip = !st.flip;
			break;
		}
	}
	out->x = st.x;
	out->y = st.y;
	out->w = st.w;
	out->h = st.h;
	/* tf_parse guarantees the chain ends on a fixed size, so this is
	 * c->out_h x c->out_w for every image. */
	out->out_w = (uint32_t)st.vw;
	out->out_h = (uint32_t)st.vh;
	out->flip = st.flip;
}
