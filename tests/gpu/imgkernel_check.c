/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imgkernel_check: the GPU resample and store (gpudecode/imgkernel.h) against
 * the worker's CPU path, on a real GPU: rs_resize_rgb over the decoded
 * region, as image/image_sample.c calls it, then image/pixel.h's
 * conversion into the layout and dtype.
 *
 *   imgkernel_check [--seed N]
 *
 * Batches of random images, in every layout and dtype, outputs from 1 x 1
 * to 512 x 384, random mean and std. Images of 1 x 1 to 1500 x 1500
 * source pixels, most decoded at full size (regions from imgk_region),
 * some at a DCT scale of 1/2, 1/4 or 1/8 (regions from jd_box_range), of
 * random pixels. Boxes inside the image, across its edges, wholly outside
 * it, tiny (under 3 pixels), the whole image; from 4x upscales to 20x
 * downscales; mirrored or not. Regions lie in device memory with junk in
 * their row padding and between them, output rows are written with gaps
 * of junk between them, and the scratch starts as NaNs: a read outside a
 * region, a write outside a row or a read of scratch never written shows.
 *
 * Limits: uint8 outputs within 1 level of the CPU's; float outputs within
 * 1 level, 1 / (255 * std), plus one float16 step where it applies; the
 * gaps untouched. The kernel is meant to give resize.c's bytes exactly:
 * each format's line prints the largest and the mean difference, in
 * levels, and the fraction of values that are equal. A second reference,
 * rs_resize_rgb over the whole decoded image instead of the region (the
 * definition in resize.h, where only the rounding of the box's coordinates
 * differs), is held to the same limits.
 *
 * Then the time of one launch for a batch of 256 regions of about 400 x 400
 * pixels into 224 x 224 float16 NCHW, and images per second (informational).
 *
 * The API's argument checks are imgkernel_args.c's. Exit: 0 pass, 1 a
 * difference over the limits, a byte written outside the rows or a call
 * of the API that failed, 2 usage, 4 a CUDA call failed, 77 no GPU here.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpudecode/imgkernel.h"
#include "image/jpeg.h"
#include "image/pixel.h"
#include "image/resize.h"
#include "proto/proto.h"

#define CUDA_PROG_NAME "imgkernel_check"
#define RNG_SEED 0x1359acf0e1d2b3a4ull /* then mixed with --seed */
#include "tests/unit/rng.h"
#include "tools/cuda_prog.h"

#define EXIT_FAIL 1
#define JUNK 0xA5
#define GAP_BYTES 64 /* between rows and between regions; a multiple of every element size */
#define SRC_MAX 1500
#define TIMED_IMAGES 256
#define TIMED_RUNS 20

static const char synopsis[] = "usage: imgkernel_check [--seed N]\n";

/* Log-uniform in [lo, hi). */
static double rng_log(double lo, double hi)
{
	return exp(rng_real(log(lo), log(hi)));
}

static void rng_fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rng_next();
		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

/* One image of a batch, as a GPU decoder would hand it over. */
struct img_case {
	uint32_t dec_w, dec_h; /* the decoded image */
	double s;              /* decoded pixels per source pixel */
	double x, y, w, h;     /* the box, source pixels */
	bool flip;
	int32_t x0, y0; /* the region */
	uint32_t rw, rh;
	size_t pitch;
	uint8_t *region;     /* rh rows of pitch bytes, junk after 3 * rw */
	uint8_t *ref_region; /* the row the CPU makes from the region */
	uint8_t *ref_image;  /* the row the CPU makes from the whole image */
};

static void case_free(struct img_case *c)
{
	free(c->region);
	free(c->ref_region);
	free(c->ref_image);
}

/* Sizes, scale, box, flip, region; `timed`: the timing batch's kind. */
static void case_geometry(struct img_case *c, const struct imgk_format *f, bool timed)
{
	uint32_t src_w, src_h, m = 8;
	double w, h, x, y;
	if (timed) {
		src_w = rng_range(450, 550);
		src_h = rng_range(450, 550);
		w = rng_real(380, 420);
		h = rng_real(380, 420);
		x = rng_real(0, src_w - w);
		y = rng_real(0, src_h - h);
	} else {
		src_w = (uint32_t)rng_log(1, SRC_MAX + 1);
		src_h = (uint32_t)rng_log(1, SRC_MAX + 1);
		uint32_t pick = rng_range(0, 9);
		m = pick < 7 ? 8 : pick == 7 ? 4 : pick == 8 ? 2 : 1;
		double factor = rng_log(0.25, 20.0); /* 4x upscale to 20x downscale */
		w = f->out_w * factor;
		h = f->out_h * factor * rng_log(0.75, 4.0 / 3.0);
		switch (rng_range(0, 19)) {
		case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: /* inside */
			x = w <= src_w ? rng_real(0, src_w - w) : rng_real(src_w - w, 0);
			y = h <= src_h ? rng_real(0, src_h - h) : rng_real(src_h - h, 0);
			break;
		case 8: case 9: case 10: case 11: case 12: /* across an edge */
			x = rng_real(-w, src_w);
			y = rng_real(-h, src_h);
			break;
		case 13: case 14: /* wholly outside, on one side or at a corner */
			x = rng_range(0, 1) ? src_w + rng_real(0, 40) : -w - rng_real(0, 40);
			y = rng_range(0, 1) ? rng_real(-h, src_h) : src_h + rng_real(0, 40);
			break;
		case 15: case 16: /* tiny */
			w = rng_real(0.01, 3);
			h = rng_real(0.01, 3);
			x = rng_real(-1, src_w);
			y = rng_real(-1, src_h);
			break;
		default: /* the whole image */
			x = y = 0;
			w = src_w;
			h = src_h;
		}
	}
	c->s = m / 8.0;
	c->dec_w = (src_w * m + 7) / 8; /* libjpeg's scaled size */
	c->dec_h = (src_h * m + 7) / 8;
	c->x = x;
	c->y = y;
	c->w = w;
	c->h = h;
	c->flip = rng_range(0, 1);
	if (m == 8) {
		imgk_region(c->dec_w, c->dec_h, x, y, w, h, f->out_w, f->out_h, &c->x0, &c->y0,
			    &c->rw, &c->rh);
	} else {
		uint32_t lo, hi;
		jd_box_range(x, w, c->s, f->out_w, c->dec_w, &lo, &hi);
		c->x0 = (int32_t)lo;
		c->rw = hi - lo;
		jd_box_range(y, h, c->s, f->out_h, c->dec_h, &lo, &hi);
		c->y0 = (int32_t)lo;
		c->rh = hi - lo;
	}
	c->pitch = 3 * (size_t)c->rw + rng_range(0, 67);
}

/* The worker's image_store_row: uint8 HWC into the format's row. */
static void store_row(const struct imgk_format *f, const uint8_t *rgb, uint8_t *row)
{
	const size_t plane = (size_t)f->out_w * f->out_h;
	float scale[3], shift[3];
	px_norm_coeffs(f->mean, f->std, scale, shift);
	for (size_t i = 0; i < plane; i++) {
		for (size_t c = 0; c < 3; c++) {
			size_t at = f->layout == 1 ? 3 * i + c : c * plane + i;
			float v = px_norm(rgb[3 * i + c], scale[c], shift[c]);
			uint16_t half = px_half_from_float(v);
			if (f->dtype == PROTO_DTYPE_UINT8)
				row[at] = rgb[3 * i + c];
			else if (f->dtype == PROTO_DTYPE_FLOAT32)
				memcpy(row + 4 * at, &v, 4);
			else
				memcpy(row + 2 * at, &half, 2);
		}
	}
}

/* The decoded image's pixels (random), the region copied out of them, and
 * unless `timed` the two CPU references. 0 or -errno. */
static int case_pixels(struct img_case *c, const struct imgk_format *f, bool timed,
		       struct rs_scratch *rs)
{
	const size_t stride = 3 * (size_t)c->dec_w, out_pixels = (size_t)f->out_w * f->out_h;
	const size_t row_bytes = imgk_row_bytes(f);
	uint8_t *image = malloc(stride * c->dec_h);
	uint8_t *rgb = malloc(3 * out_pixels);
	c->region = malloc(c->pitch * c->rh);
	c->ref_region = malloc(row_bytes);
	c->ref_image = malloc(row_bytes);
	int rc = -ENOMEM;
	if (!image || !rgb || !c->region || !c->ref_region || !c->ref_image)
		goto free_buffers;
	rng_fill(image, stride * c->dec_h);
	memset(c->region, JUNK, c->pitch * c->rh);
	for (uint32_t r = 0; r < c->rh; r++)
		memcpy(c->region + r * c->pitch, image + (c->y0 + r) * stride + 3 * (size_t)c->x0,
		       3 * (size_t)c->rw);
	rc = 0;
	if (timed)
		goto free_buffers;
	/* image_sample.c's call, box in the region's coordinates. */
	rc = rs_resize_rgb(c->region, c->rw, c->rh, c->pitch, c->x * c->s - c->x0,
			   c->y * c->s - c->y0, c->w * c->s, c->h * c->s, rgb, f->out_w, f->out_h,
			   3 * (size_t)f->out_w, c->flip, rs);
	if (rc < 0)
		goto free_buffers;
	store_row(f, rgb, c->ref_region);
	rc = rs_resize_rgb(image, c->dec_w, c->dec_h, stride, c->x * c->s, c->y * c->s,
			   c->w * c->s, c->h * c->s, rgb, f->out_w, f->out_h, 3 * (size_t)f->out_w,
			   c->flip, rs);
	if (rc < 0)
		goto free_buffers;
	store_row(f, rgb, c->ref_image);
free_buffers:
	free(image);
	free(rgb);
	return rc;
}

static float half_to_float(uint16_t h)
{
	int exp = (h >> 10) & 0x1f;
	int mant = h & 0x3ff;
	float v = exp == 0    ? ldexpf((float)mant, -24)
		  : exp == 31 ? (mant ? NAN : INFINITY)
			      : ldexpf((float)(mant | 0x400), exp - 25);
	return h & 0x8000 ? -v : v;
}

/* Spacing of float16 values at magnitude v. */
static double half_step(double v)
{
	return v < 0x1p-14 ? 0x1p-24 : ldexp(1.0, ilogb(v) - 10);
}

static double elem_at(const struct imgk_format *f, const uint8_t *row, size_t e)
{
	if (f->dtype == PROTO_DTYPE_UINT8)
		return row[e];
	if (f->dtype == PROTO_DTYPE_FLOAT32) {
		float v;
		memcpy(&v, row + 4 * e, 4);
		return v;
	}
	uint16_t h;
	memcpy(&h, row + 2 * e, 2);
	return half_to_float(h);
}

struct stats {
	uint64_t values, equal, over;
	double max_levels, sum_levels;
};

/* got against want, in levels of the uint8 value behind each element. */
static void compare_row(const struct imgk_format *f, const uint8_t *got, const uint8_t *want,
			struct stats *st)
{
	const size_t plane = (size_t)f->out_w * f->out_h;
	float scale[3], shift[3];
	px_norm_coeffs(f->mean, f->std, scale, shift);
	for (size_t e = 0; e < 3 * plane; e++) {
		size_t c = f->layout == 1 ? e % 3 : e / plane;
		double g = elem_at(f, got, e), w = elem_at(f, want, e);
		double level = f->dtype == PROTO_DTYPE_UINT8 ? 1.0 : scale[c];
		double big = fmax(fabs(g), fabs(w));
		double limit = level + (f->dtype == PROTO_DTYPE_FLOAT16 ? half_step(big)
					: f->dtype == PROTO_DTYPE_FLOAT32 ? 4 * FLT_EPSILON * big
									   : 0.0);
		double diff = fabs(g - w), levels = diff / level;
		st->values++;
		st->equal += diff == 0.0;
		if (!(diff <= limit)) /* NaN too */
			st->over++;
		st->sum_levels += isfinite(levels) ? levels : 0.0;
		if (!(levels <= st->max_levels))
			st->max_levels = levels;
	}
}

static void stats_print(const char *what, const struct stats *st)
{
	printf("  %-24s %9llu values, %llu unequal (%.4f%% equal), max %.3f levels, mean %.2e "
	       "levels, %llu over the limit\n",
	       what, (unsigned long long)st->values, (unsigned long long)(st->values - st->equal),
	       st->values ? 100.0 * (double)st->equal / (double)st->values : 100.0, st->max_levels,
	       st->values ? st->sum_levels / (double)st->values : 0.0,
	       (unsigned long long)st->over);
}

/* Device buffers of one batch. */
struct batch_dev {
	uint8_t *regions, *scratch, *dst;
	struct imgk_item *items;
	uint64_t scratch_bytes, dst_bytes;
};

static void batch_dev_free(struct batch_dev *d)
{
	cudaFree(d->regions);
	cudaFree(d->scratch);
	cudaFree(d->dst);
	cudaFree(d->items);
	memset(d, 0, sizeof(*d));
}

/* Regions to the GPU (junk between them), items planned and copied, the
 * scratch filled with NaNs and dst with junk. EXIT_FAIL when imgk_plan
 * refuses the items, CUDA_PROG_EXIT_CUDA, or 0. */
static int batch_upload(struct img_case *cases, uint32_t n, const struct imgk_format *f,
			struct batch_dev *d)
{
	size_t region_bytes = GAP_BYTES, row_bytes = imgk_row_bytes(f);
	for (uint32_t i = 0; i < n; i++)
		region_bytes += cases[i].pitch * cases[i].rh + GAP_BYTES;
	d->dst_bytes = (uint64_t)n * (row_bytes + GAP_BYTES);
	struct imgk_item *items = calloc(n, sizeof(*items));
	if (!items)
		return CUDA_PROG_EXIT_CUDA;
	int rc = CUDA_PROG_EXIT_CUDA;
	if (!cuda_prog_ok(cudaMalloc((void **)&d->regions, region_bytes), "cudaMalloc(regions)") ||
	    !cuda_prog_ok(cudaMemset(d->regions, JUNK, region_bytes), "cudaMemset(regions)"))
		goto free_items;
	size_t at = GAP_BYTES;
	for (uint32_t i = 0; i < n; i++) {
		const struct img_case *c = &cases[i];
		if (!cuda_prog_ok(cudaMemcpy(d->regions + at, c->region, c->pitch * c->rh,
					     cudaMemcpyHostToDevice),
				  "cudaMemcpy(region)"))
			goto free_items;
		items[i] = (struct imgk_item){
			.src = d->regions + at, .src_pitch = c->pitch, .src_w = c->rw,
			.src_h = c->rh, .x0 = c->x0, .y0 = c->y0, .img_w = c->dec_w,
			.img_h = c->dec_h, .sx = c->s, .sy = c->s, .x = c->x, .y = c->y,
			.w = c->w, .h = c->h, .flip = c->flip,
			.dst_offset = (uint64_t)i * (row_bytes + GAP_BYTES)};
		at += c->pitch * c->rh + GAP_BYTES;
	}
	int plan = imgk_plan(items, n, f, d->dst_bytes, &d->scratch_bytes);
	if (plan != 0) {
		fprintf(stderr, "imgkernel_check: imgk_plan: %s\n", strerror(-plan));
		rc = EXIT_FAIL;
		goto free_items;
	}
	if (!cuda_prog_ok(cudaMalloc((void **)&d->items, n * sizeof(*items)), "cudaMalloc(items)") ||
	    !cuda_prog_ok(cudaMemcpy(d->items, items, n * sizeof(*items), cudaMemcpyHostToDevice),
			  "cudaMemcpy(items)") ||
	    !cuda_prog_ok(cudaMalloc((void **)&d->scratch, d->scratch_bytes), "cudaMalloc(scratch)") ||
	    !cuda_prog_ok(cudaMemset(d->scratch, 0xff, d->scratch_bytes), "cudaMemset(scratch)") ||
	    !cuda_prog_ok(cudaMalloc((void **)&d->dst, d->dst_bytes), "cudaMalloc(dst)") ||
	    !cuda_prog_ok(cudaMemset(d->dst, JUNK, d->dst_bytes), "cudaMemset(dst)"))
		goto free_items;
	rc = 0;
free_items:
	free(items);
	return rc;
}

static int launch(const struct batch_dev *d, uint32_t n, const struct imgk_format *f,
		  cudaStream_t stream)
{
	cudaError_t e = cudaSuccess;
	int rc = imgk_launch(d->items, n, f, d->scratch, d->scratch_bytes, d->dst, d->dst_bytes,
			     stream, &e);
	if (rc == -EIO)
		return cuda_prog_ok(e, "imgk_launch") ? EXIT_FAIL : CUDA_PROG_EXIT_CUDA;
	if (rc != 0) {
		fprintf(stderr, "imgkernel_check: imgk_launch: %s\n", strerror(-rc));
		return EXIT_FAIL;
	}
	return 0;
}

/* One checked batch of n random images in format f. */
static int run_batch(const struct imgk_format *f, uint32_t n, cudaStream_t stream,
		     struct stats *vs_region, struct stats *vs_image)
{
	const size_t row_bytes = imgk_row_bytes(f);
	struct img_case *cases = calloc(n, sizeof(*cases));
	struct rs_scratch rs = {0};
	struct batch_dev d = {0};
	uint8_t *got = NULL;
	int rc = CUDA_PROG_EXIT_CUDA;
	if (!cases)
		goto free_cases;
	for (uint32_t i = 0; i < n; i++) {
		case_geometry(&cases[i], f, false);
		int prc = case_pixels(&cases[i], f, false, &rs);
		if (prc < 0) {
			fprintf(stderr, "imgkernel_check: reference: %s\n", strerror(-prc));
			rc = EXIT_FAIL;
			goto free_cases;
		}
	}
	rc = batch_upload(cases, n, f, &d);
	if (rc != 0)
		goto free_dev;
	rc = launch(&d, n, f, stream);
	if (rc != 0)
		goto free_dev;
	rc = CUDA_PROG_EXIT_CUDA;
	got = malloc(d.dst_bytes);
	if (!got || !cuda_prog_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize") ||
	    !cuda_prog_ok(cudaMemcpy(got, d.dst, d.dst_bytes, cudaMemcpyDeviceToHost),
			  "cudaMemcpy(dst)"))
		goto free_dev;
	rc = 0;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *row = got + (size_t)i * (row_bytes + GAP_BYTES);
		uint64_t over = vs_region->over + vs_image->over;
		compare_row(f, row, cases[i].ref_region, vs_region);
		compare_row(f, row, cases[i].ref_image, vs_image);
		for (size_t b = row_bytes; b < row_bytes + GAP_BYTES; b++)
			if (row[b] != JUNK) {
				fprintf(stderr, "imgkernel_check: image %u: byte %zu after its row "
						"written\n", i, b - row_bytes);
				rc = EXIT_FAIL;
				break;
			}
		if (vs_region->over + vs_image->over > over) {
			const struct img_case *c = &cases[i];
			fprintf(stderr, "imgkernel_check: image %u: %ux%u at scale %g, region "
					"%ux%u at (%d, %d), box (%.4f, %.4f, %.4f, %.4f), flip %d: "
					"over the limit\n",
				i, c->dec_w, c->dec_h, c->s, c->rw, c->rh, c->x0, c->y0, c->x, c->y,
				c->w, c->h, c->flip);
			rc = EXIT_FAIL;
		}
	}
free_dev:
	free(got);
	batch_dev_free(&d);
free_cases:
	for (uint32_t i = 0; cases && i < n; i++)
		case_free(&cases[i]);
	free(cases);
	rs_scratch_free(&rs);
	return rc;
}

/* The throughput line. */
static int run_timing(cudaStream_t stream)
{
	const struct imgk_format f = {224, 224, 0, PROTO_DTYPE_FLOAT16,
				      {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
	struct img_case *cases = calloc(TIMED_IMAGES, sizeof(*cases));
	struct batch_dev d = {0};
	cudaEvent_t start = NULL, stop = NULL;
	double region_px = 0;
	float ms = 0;
	int rc = CUDA_PROG_EXIT_CUDA;
	if (!cases)
		goto free_cases;
	for (uint32_t i = 0; i < TIMED_IMAGES; i++) {
		case_geometry(&cases[i], &f, true);
		if (case_pixels(&cases[i], &f, true, NULL) < 0)
			goto free_cases;
		region_px += (double)cases[i].rw * cases[i].rh;
	}
	rc = batch_upload(cases, TIMED_IMAGES, &f, &d);
	if (rc != 0)
		goto free_dev;
	rc = CUDA_PROG_EXIT_CUDA;
	if (!cuda_prog_ok(cudaEventCreate(&start), "cudaEventCreate") ||
	    !cuda_prog_ok(cudaEventCreate(&stop), "cudaEventCreate"))
		goto free_events;
	for (int i = 0; i < 3; i++) /* warm-up */
		if ((rc = launch(&d, TIMED_IMAGES, &f, stream)) != 0)
			goto free_events;
	rc = CUDA_PROG_EXIT_CUDA;
	if (!cuda_prog_ok(cudaEventRecord(start, stream), "cudaEventRecord"))
		goto free_events;
	for (int i = 0; i < TIMED_RUNS; i++)
		if ((rc = launch(&d, TIMED_IMAGES, &f, stream)) != 0)
			goto free_events;
	rc = CUDA_PROG_EXIT_CUDA;
	if (!cuda_prog_ok(cudaEventRecord(stop, stream), "cudaEventRecord") ||
	    !cuda_prog_ok(cudaEventSynchronize(stop), "cudaEventSynchronize") ||
	    !cuda_prog_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime"))
		goto free_events;
	ms /= TIMED_RUNS;
	printf("imgkernel_check: %u images, regions of %.0f px on average (about %.0f x %.0f) -> "
	       "224 x 224 float16 nchw: %.3f ms per launch, %.0f images/s\n",
	       TIMED_IMAGES, region_px / TIMED_IMAGES, sqrt(region_px / TIMED_IMAGES),
	       sqrt(region_px / TIMED_IMAGES), ms, TIMED_IMAGES / (ms / 1e3));
	rc = 0;
free_events:
	if (start)
		cudaEventDestroy(start);
	if (stop)
		cudaEventDestroy(stop);
free_dev:
	batch_dev_free(&d);
free_cases:
	for (uint32_t i = 0; cases && i < TIMED_IMAGES; i++)
		case_free(&cases[i]);
	free(cases);
	return rc;
}

int main(int argc, char **argv)
{
	uint64_t seed = 1;
	if (argc == 3 && strcmp(argv[1], "--seed") == 0) {
		if (!cuda_prog_parse_u64(argv[2], UINT64_MAX, &seed))
			return cuda_prog_usage("--seed: not a number", synopsis);
	} else if (argc != 1) {
		return cuda_prog_usage("unexpected arguments", synopsis);
	}
	rng_state ^= seed * 0x9e3779b97f4a7c15ull;

	int count = 0;
	cudaError_t err = cudaGetDeviceCount(&count);
	/* No device, or no driver to reach one: nothing to check here. */
	if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
	    (err == cudaSuccess && count == 0)) {
		fprintf(stderr, "imgkernel_check: no GPU: %s\n",
			err == cudaSuccess ? "the CUDA runtime sees 0 devices" : cudaGetErrorString(err));
		return CUDA_PROG_EXIT_SKIP;
	}
	if (!cuda_prog_ok(err, "cudaGetDeviceCount") || !cuda_prog_start())
		return CUDA_PROG_EXIT_CUDA;
	struct cudaDeviceProp prop;
	cudaStream_t stream = NULL;
	if (!cuda_prog_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties") ||
	    !cuda_prog_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
			  "cudaStreamCreateWithFlags"))
		return CUDA_PROG_EXIT_CUDA;
	printf("imgkernel_check: %s, seed %llu\n", prop.name, (unsigned long long)seed);

	static const uint32_t dtypes[3] = {PROTO_DTYPE_UINT8, PROTO_DTYPE_FLOAT16,
					   PROTO_DTYPE_FLOAT32};
	static const char *const dtype_names[3] = {"uint8", "float16", "float32"};
	/* Per format, out sizes: the extremes, the usual one, two random. */
	static const uint32_t fixed[3][2] = {{1, 1}, {512, 384}, {224, 224}};
	int rc = 0;
	for (uint32_t layout = 0; layout < 2 && rc != CUDA_PROG_EXIT_CUDA; layout++) {
		for (int t = 0; t < 3 && rc != CUDA_PROG_EXIT_CUDA; t++) {
			struct stats vs_region = {0}, vs_image = {0};
			for (int b = 0; b < 5; b++) {
				struct imgk_format f = {.layout = layout, .dtype = dtypes[t]};
				f.out_w = b < 3 ? fixed[b][0] : rng_range(1, 512);
				f.out_h = b < 3 ? fixed[b][1] : rng_range(1, 384);
				for (int c = 0; c < 3; c++) {
					f.mean[c] = (float)rng_real(0, 1);
					f.std[c] = (float)rng_log(0.05, 1.5);
				}
				int brc = run_batch(&f, rng_range(8, 40), stream, &vs_region,
						    &vs_image);
				if (brc != 0)
					rc = brc;
				if (rc == CUDA_PROG_EXIT_CUDA)
					break;
			}
			printf("imgkernel_check: %s %s\n", layout ? "nhwc" : "nchw", dtype_names[t]);
			stats_print("vs the CPU, region:", &vs_region);
			stats_print("vs the CPU, whole image:", &vs_image);
		}
	}
	if (rc != CUDA_PROG_EXIT_CUDA) {
		int trc = run_timing(stream);
		if (trc != 0)
			rc = trc;
	}
	cudaStreamDestroy(stream);
	printf("imgkernel_check: %s\n", rc == 0 ? "pass" : "FAIL");
	return rc;
}
