/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transform: an image pipeline's transform chain, parsed from its config
 * text, and the per-sample plan a worker executes (crop this box of the
 * source image, resample it to out_h x out_w, maybe mirror it).
 *
 * Pure logic: no I/O, no logging, no allocation; safe from any thread.
 *
 * Text: ops separated by spaces, each `name(args)`, spaces allowed inside
 * the parentheses. Two numbers are (height, width), torchvision's order.
 *   random_resized_crop(size [, width] [, scale=lo:hi] [, ratio=lo:hi])
 *       defaults scale=0.08:1, ratio=3/4:4/3 (written 0.75:1.3333333333333333)
 *   resize(size)          shorter edge -> size, longer = int(size*long/short)
 *   resize(height, width) exact
 *   center_crop(size) or center_crop(height, width)
 *   hflip([p])            mirror with probability p, default 0.5
 * Each op means what the torchvision.transforms (v1) class of that name
 * does, and that class's name is accepted for it (RandomResizedCrop,
 * Resize, CenterCrop, RandomHorizontalFlip: the same op, the same argument
 * syntax; tf_format writes the names above). Sizes are 1..65536, 0 < scale lo <= hi <= 1, 0 < ratio lo <= hi,
 * 0 <= p <= 1, at most TF_OPS_MAX ops, and the output size must not depend
 * on the image: the last op that sets a size is random_resized_crop,
 * center_crop or resize(height, width). Numbers are read and written in the
 * C locale (loaderd never calls setlocale).
 *
 * Plans compose the chain into one box in source pixels: resizes only
 * rescale the virtual image, crops shrink the box, flips toggle a flag, so
 * the worker decodes and resamples once. A center crop larger than the
 * image gives a box that extends beyond it; the resampler reads pixels
 * outside the image as 0, which is torchvision's zero padding.
 *
 * Randomness depends on (seed, epoch, index) only, so a sample's crop is
 * the same on every worker and every rerun. Its distribution matches
 * torchvision's (RandomResizedCrop.get_params, RandomHorizontalFlip); the
 * bit stream does not (torch's generator is not used).
 */
#ifndef LDR_IMAGE_TRANSFORM_H
#define LDR_IMAGE_TRANSFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TF_OPS_MAX 8
#define TF_SIZE_MAX 65536

enum tf_kind { TF_RANDOM_RESIZED_CROP, TF_RESIZE, TF_CENTER_CROP, TF_HFLIP };

struct tf_op {
	enum tf_kind kind;
	uint32_t h, w; /* output size; w == 0: TF_RESIZE of the shorter edge to h */
	double scale_lo, scale_hi; /* TF_RANDOM_RESIZED_CROP: area fraction */
	double ratio_lo, ratio_hi; /* TF_RANDOM_RESIZED_CROP: width / height */
	double p;                  /* TF_HFLIP: probability of mirroring */
};

struct tf_chain {
	uint32_t n;
	struct tf_op ops[TF_OPS_MAX];
	uint32_t out_h, out_w; /* size of every sample the chain produces */
};

/* Parses text into *out (fully overwritten, unused bytes zeroed). 0 or
 * -EINVAL; on error err (when err_cap > 0) holds one line naming the op,
 * the bad part and the op's expected form, e.g.
 *   random_resized_crop: scale "0.5:0.2": low bound above high bound;
 *   expected random_resized_crop(size [, width] [, scale=lo:hi] [,
 *   ratio=lo:hi]), e.g. random_resized_crop(224, scale=0.08:1.0)
 * An unknown op gets the closest one (common/suggest.h); torchvision's
 * syntax (a module prefix, tuples, lists) the text to write instead;
 * torchvision transforms that are keys here (Normalize, ToTensor, ...) the
 * keys. */
int tf_parse(const char *text, struct tf_chain *out, char *err, size_t err_cap);

/* Canonical text of a parsed chain, for status and logs: every parameter
 * explicit, numbers in their shortest exact form, so tf_parse gives back
 * the same chain. 0, -ENOSPC (buf too small; buf holds a truncated,
 * terminated prefix when cap > 0) or -EINVAL (not a chain tf_parse made). */
int tf_format(const struct tf_chain *c, char *buf, size_t cap);

struct tf_plan {
	double x, y, w, h; /* box in source pixels, may extend beyond the image */
	uint32_t out_h, out_w;
	bool flip; /* mirror the resampled output horizontally */
};

/* The plan for sample `index` of `epoch` under `seed`, for a source image
 * of img_w x img_h pixels (> 0; a 0 counts as 1). c comes from tf_parse.
 * out->out_h, out->out_w always equal c->out_h, c->out_w. */
void tf_plan_sample(const struct tf_chain *c, uint64_t seed, uint64_t epoch,
		    uint64_t index, uint32_t img_w, uint32_t img_h, struct tf_plan *out);

#endif
