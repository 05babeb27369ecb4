/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imgkernel: a batch's resample and store on the GPU (imgkernel.h).
 *
 * Three kernels, each over the whole batch, in stream order:
 *   imgk__tables  a block per image and axis: every output's taps and
 *                 weights (resize_taps.h) and the axis's totals (the source
 *                 pixels the taps reach, the widest window, the number of
 *                 taps), from which the passes pick their order as resize.c
 *                 does;
 *   imgk__first   the first pass into the float intermediate: vertical, a
 *                 thread per value of a filtered row (3 per source column
 *                 the taps reach), or horizontal, a thread per output pixel
 *                 of each source row the taps reach;
 *   imgk__second  the other pass, a thread per output pixel: rounded to
 *                 uint8, converted (pixel.h) and stored in the layout.
 * The two passes give each image `spread` blocks, which take its rows in
 * turn; spread is picked so that a batch, large or small, makes a few
 * waves of blocks on a large GPU.
 *
 * Each image's part of the scratch (struct imgk__parts): the axis totals,
 * the x and the y table (spans, then weights, `stride` per output), the
 * intermediate. imgk_plan sizes it on the host and the kernels find their
 * way in it with the same function, imgk__parts_of.
 *
 * Float arithmetic goes through __fmul_rn and __fadd_rn, which are never
 * fused into multiply-adds: resize.c rounds every product and every sum.
 * The double arithmetic of resize_taps.h needs nvcc's --fmad=false
 * (image/CMakeLists.txt) for the same reason.
 *
 * Items reach the kernels through device memory; each kernel checks its
 * image's item again (imgk__item_ok), its output row against dst's size
 * and its scratch part against the scratch's, and skips an image that
 * fails: a damaged item costs its own row at most. Taps never leave the
 * region (clipped to it in imgk__tables).
 */
#include "gpudecode/imgkernel.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "image/pixel.h"
#include "image/resize_taps.h"
#include "image/yuv.h"
#include "proto/proto.h"

extern "C" { /* a C header without C++ linkage of its own */
#include "image/jpeg.h"
}

#define IMGK__THREADS 256
/* Blocks of one pass over a batch: about 4 waves of an H100 (132 SMs,
 * 8 blocks of 256 threads each). */
#define IMGK__PASS_BLOCKS 4096u
#define IMGK__SPREAD_MAX 256u
#define IMGK__ITEM_ALIGN 256u /* of each image's scratch part */

/* Items cross from the host's compiler to the device's: one layout. */
static_assert(sizeof(struct imgk_item) == 112 && offsetof(struct imgk_item, sx) == 40 &&
		      offsetof(struct imgk_item, scratch_offset) == 104,
	      "struct imgk_item layout");

/* The source pixels [first, first + count) an output reads. */
struct imgk__span {
	uint32_t first;
	uint32_t count; /* 0: no tap, the output is black */
};

/* One axis's totals over its outputs. */
struct imgk__axis_sum {
	uint32_t lo, hi; /* the source pixels some tap reads; lo >= hi: none */
	uint32_t window; /* the most taps of one output */
	uint32_t pad;
	unsigned long long taps; /* the sum of the counts */
};

/* Byte offsets in an image's scratch part. */
struct imgk__parts {
	uint64_t sums;             /* struct imgk__axis_sum [2]: x, y */
	uint64_t xspan, xweight;   /* [out_w], [out_w][xstride] */
	uint64_t yspan, yweight;   /* [out_h], [out_h][ystride] */
	uint64_t mid;              /* floats: out_h x 3 * cols, or rows x 3 * out_w */
	uint64_t bytes;
	uint32_t xstride, ystride; /* weights per output */
};

/* What the kernels receive, by value. */
struct imgk__args {
	const struct imgk_item *items;
	uint8_t *scratch;
	uint64_t scratch_bytes;
	uint8_t *dst;
	uint64_t dst_bytes;
	uint64_t row_bytes;    /* of one image's output */
	uint32_t out_w, out_h, layout, dtype;
	uint32_t elem;         /* bytes per element of dtype */
	float scale[3], shift[3];
};

static __host__ __device__ uint64_t imgk__round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

/* Bytes per element, or 0 for a format imgk_launch refuses. */
static uint32_t imgk__elem_bytes(const struct imgk_format *f)
{
	if (f->out_w < 1 || f->out_w > IMGK_SIZE_MAX || f->out_h < 1 || f->out_h > IMGK_SIZE_MAX ||
	    f->layout > 1)
		return 0;
	for (int c = 0; c < 3; c++)
		if (!isfinite(f->mean[c]) || !isfinite(f->std[c]) || !(f->std[c] > 0.0f))
			return 0;
	switch (f->dtype) {
	case PROTO_DTYPE_UINT8:
		return 1;
	case PROTO_DTYPE_FLOAT16:
		return 2;
	case PROTO_DTYPE_FLOAT32:
		return 4;
	default:
		return 0;
	}
}

static __host__ __device__ bool imgk__side_ok(uint32_t v)
{
	return v >= 1 && v <= IMGK_SIZE_MAX;
}

/* The ranges imgkernel.h gives, and the output row inside dst: elem and
 * row_bytes are the format's. */
static __host__ __device__ bool imgk__item_ok(const struct imgk_item *it, uint32_t elem,
					      uint64_t row_bytes, uint64_t dst_bytes)
{
	return it->src != NULL && imgk__side_ok(it->src_w) && imgk__side_ok(it->src_h) &&
	       it->src_pitch >= 3ull * it->src_w && imgk__side_ok(it->img_w) &&
	       imgk__side_ok(it->img_h) && it->x0 >= 0 && it->y0 >= 0 &&
	       (uint64_t)it->x0 + it->src_w <= it->img_w &&
	       (uint64_t)it->y0 + it->src_h <= it->img_h && it->sx > 0.0 && it->sy > 0.0 &&
	       it->w > 0.0 && it->h > 0.0 && isfinite(it->x * it->sx) &&
	       isfinite(it->y * it->sy) && isfinite(it->w * it->sx) && isfinite(it->h * it->sy) &&
	       isfinite(it->x) && isfinite(it->y) && isfinite(it->w) && isfinite(it->h) &&
	       it->reserved == 0 && it->dst_offset % elem == 0 && it->dst_offset <= dst_bytes &&
	       row_bytes <= dst_bytes - it->dst_offset;
}

static __host__ __device__ struct imgk__parts imgk__parts_of(const struct imgk_item *it,
							     uint32_t out_w, uint32_t out_h)
{
	struct imgk__parts p;
	p.xstride = rs_axis_stride(it->src_w, it->w * it->sx, out_w);
	p.ystride = rs_axis_stride(it->src_h, it->h * it->sy, out_h);
	uint64_t at = 0;
	p.sums = at;
	at += imgk__round_up(2 * sizeof(struct imgk__axis_sum), 16);
	p.xspan = at;
	at += imgk__round_up((uint64_t)out_w * sizeof(struct imgk__span), 16);
	p.xweight = at;
	at += imgk__round_up((uint64_t)out_w * p.xstride * sizeof(float), 16);
	p.yspan = at;
	at += imgk__round_up((uint64_t)out_h * sizeof(struct imgk__span), 16);
	p.yweight = at;
	at += imgk__round_up((uint64_t)out_h * p.ystride * sizeof(float), 16);
	/* Vertical first: out_h rows of at most src_w columns; horizontal
	 * first: at most src_h rows of out_w pixels. */
	uint64_t v_first = (uint64_t)out_h * 3 * it->src_w, h_first = (uint64_t)it->src_h * 3 * out_w;
	p.mid = at;
	at += (v_first > h_first ? v_first : h_first) * sizeof(float);
	p.bytes = at;
	return p;
}

/* One image as a kernel sees it. */
struct imgk__image {
	struct imgk_item it;
	struct imgk__parts parts;
	uint8_t *base; /* its scratch part */
};

/* False when the image is to be skipped: a bad item, or a scratch part
 * outside the scratch. The same in every kernel. Thread 0 of a block calls
 * it, for the block. */
static __device__ bool imgk__image_get(const struct imgk__args *a, uint32_t i,
				       struct imgk__image *im)
{
	im->it = a->items[i];
	if (!imgk__item_ok(&im->it, a->elem, a->row_bytes, a->dst_bytes) ||
	    im->it.scratch_offset % IMGK__ITEM_ALIGN != 0 ||
	    im->it.scratch_offset > a->scratch_bytes)
		return false;
	im->parts = imgk__parts_of(&im->it, a->out_w, a->out_h);
	if (im->parts.bytes > a->scratch_bytes - im->it.scratch_offset)
		return false;
	im->base = a->scratch + im->it.scratch_offset;
	return true;
}

__global__ void __launch_bounds__(IMGK__THREADS) imgk__tables(struct imgk__args a)
{
	__shared__ struct imgk__image im;
	__shared__ bool ok;
	__shared__ uint32_t lo, hi, window;
	__shared__ unsigned long long taps;
	if (threadIdx.x == 0) {
		ok = imgk__image_get(&a, blockIdx.y, &im);
		lo = UINT32_MAX;
		hi = 0;
		window = 0;
		taps = 0;
	}
	__syncthreads();
	if (!ok)
		return;
	const struct imgk_item *it = &im.it;
	const bool y_axis = blockIdx.x == 1;
	const uint32_t n = y_axis ? a.out_h : a.out_w;
	const uint32_t src_len = y_axis ? it->src_h : it->src_w;
	const uint32_t img_len = y_axis ? it->img_h : it->img_w;
	const int32_t origin = y_axis ? it->y0 : it->x0;
	/* In the region's coordinates, as image_sample.c passes the box to
	 * rs_resize_rgb, so that the doubles round as they do there. */
	const struct rs_axis_geom g =
		y_axis ? rs_axis_geom_make(it->y * it->sy - it->y0, it->h * it->sy, n)
		       : rs_axis_geom_make(it->x * it->sx - it->x0, it->w * it->sx, n);
	/* The outside rule is the image's: [-origin, img_len - origin] here.
	 * Taps are clipped to the region, which lies inside the image
	 * (imgk__item_ok). One the region rule made holds every image pixel a
	 * tap reaches, so that is resize.c's clipping to the image; one that
	 * holds less is still never read outside. */
	const double in_lo = -(double)origin, in_hi = (double)img_len - (double)origin;
	const uint32_t stride = y_axis ? im.parts.ystride : im.parts.xstride;
	struct imgk__span *span =
		(struct imgk__span *)(im.base + (y_axis ? im.parts.yspan : im.parts.xspan));
	float *weight = (float *)(im.base + (y_axis ? im.parts.yweight : im.parts.xweight));
	const bool mirror = !y_axis && it->flip != 0;

	uint32_t t_lo = UINT32_MAX, t_hi = 0, t_window = 0;
	unsigned long long t_taps = 0;
	for (uint32_t o = threadIdx.x; o < n; o += blockDim.x) {
		uint32_t first = 0;
		uint32_t count = rs_output_taps(&g, mirror ? n - 1 - o : o, in_lo, in_hi, 0, src_len,
						stride, &first, weight + (size_t)o * stride, 1);
		span[o] = imgk__span{count > 0 ? first : 0, count};
		if (count == 0)
			continue;
		t_lo = min(t_lo, first);
		t_hi = max(t_hi, first + count);
		t_window = max(t_window, count);
		t_taps += count;
	}
	atomicMin(&lo, t_lo);
	atomicMax(&hi, t_hi);
	atomicMax(&window, t_window);
	atomicAdd(&taps, t_taps);
	__syncthreads();
	if (threadIdx.x == 0) {
		struct imgk__axis_sum *s = (struct imgk__axis_sum *)(im.base + im.parts.sums);
		s[y_axis] = imgk__axis_sum{lo, hi, window, 0, taps};
	}
}

/* What both passes need of an image's totals. */
struct imgk__order {
	struct imgk__axis_sum x, y;
	bool empty;   /* no output has taps on some axis: all black */
	bool v_first; /* resize.c's order */
};

static __device__ struct imgk__order imgk__order_of(const struct imgk__args *a,
						    const struct imgk__image *im)
{
	const struct imgk__axis_sum *s = (const struct imgk__axis_sum *)(im->base + im->parts.sums);
	struct imgk__order o;
	o.x = s[0];
	o.y = s[1];
	o.empty = o.x.lo >= o.x.hi || o.y.lo >= o.y.hi;
	o.v_first = !o.empty && rs_vertical_first(o.y.taps, o.x.window, o.x.hi - o.x.lo,
						  o.y.hi - o.y.lo, a->out_w, a->out_h);
	return o;
}

/* A pass's block: thread 0 reads the image's item and totals for all.
 * False when the image is skipped. */
static __device__ bool imgk__pass_setup(const struct imgk__args *a, struct imgk__image *im,
					struct imgk__order *ord)
{
	__shared__ bool ok;
	if (threadIdx.x == 0) {
		ok = imgk__image_get(a, blockIdx.y, im);
		if (ok)
			*ord = imgk__order_of(a, im);
	}
	__syncthreads();
	return ok;
}

__global__ void __launch_bounds__(IMGK__THREADS) imgk__first(struct imgk__args a)
{
	__shared__ struct imgk__image im;
	__shared__ struct imgk__order ord;
	if (!imgk__pass_setup(&a, &im, &ord) || ord.empty)
		return;
	const uint8_t *src = im.it.src;
	const uint64_t pitch = im.it.src_pitch;
	float *mid = (float *)(im.base + im.parts.mid);

	if (ord.v_first) {
		/* Output row r: the columns [x.lo, x.hi) of its source rows. */
		const struct imgk__span *span = (const struct imgk__span *)(im.base + im.parts.yspan);
		const float *weight = (const float *)(im.base + im.parts.yweight);
		const uint32_t len = 3 * (ord.x.hi - ord.x.lo);
		for (uint32_t r = blockIdx.x; r < a.out_h; r += gridDim.x) {
			const struct imgk__span sp = span[r];
			if (sp.count == 0)
				continue; /* black; imgk__second reads nothing here */
			const uint8_t *in = src + sp.first * pitch + 3 * (size_t)ord.x.lo;
			const float *w = weight + (size_t)r * im.parts.ystride;
			float *out = mid + (size_t)r * len;
			for (uint32_t c = threadIdx.x; c < len; c += blockDim.x) {
				float acc = 0.0f;
				for (uint32_t k = 0; k < sp.count; k++)
					acc = __fadd_rn(acc, __fmul_rn(w[k], (float)in[k * pitch + c]));
				out[c] = acc;
			}
		}
		return;
	}
	/* Source row y.lo + r: every output column. */
	const struct imgk__span *span = (const struct imgk__span *)(im.base + im.parts.xspan);
	const float *weight = (const float *)(im.base + im.parts.xweight);
	const uint32_t rows = ord.y.hi - ord.y.lo;
	for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
		const uint8_t *in = src + (ord.y.lo + r) * pitch;
		float *out = mid + (size_t)r * 3 * a.out_w;
		for (uint32_t o = threadIdx.x; o < a.out_w; o += blockDim.x) {
			const struct imgk__span sp = span[o];
			const uint8_t *p = in + 3 * (size_t)sp.first;
			const float *w = weight + (size_t)o * im.parts.xstride;
			float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
			for (uint32_t k = 0; k < sp.count; k++) {
				acc0 = __fadd_rn(acc0, __fmul_rn(w[k], (float)p[3 * k]));
				acc1 = __fadd_rn(acc1, __fmul_rn(w[k], (float)p[3 * k + 1]));
				acc2 = __fadd_rn(acc2, __fmul_rn(w[k], (float)p[3 * k + 2]));
			}
			out[3 * (size_t)o] = acc0;
			out[3 * (size_t)o + 1] = acc1;
			out[3 * (size_t)o + 2] = acc2;
		}
	}
}

/* resize.c's final rounding: half up, into 0..255. */
static __device__ uint8_t imgk__to_u8(float v)
{
	v = __fadd_rn(v, 0.5f);
	if (!(v > 0.0f))
		return 0;
	if (v >= 255.0f)
		return 255;
	return (uint8_t)v;
}

/* Output pixel i (of plane = out_w * out_h) of the row at row. */
static __device__ void imgk__store(const struct imgk__args *a, uint8_t *row, uint64_t plane,
				   uint64_t i, const float acc[3])
{
	for (int c = 0; c < 3; c++) {
		uint8_t u = imgk__to_u8(acc[c]);
		uint64_t at = a->layout == 1 ? 3 * i + (uint64_t)c : (uint64_t)c * plane + i;
		if (a->dtype == PROTO_DTYPE_UINT8) {
			row[at] = u;
			continue;
		}
		float v = __fadd_rn(__fmul_rn((float)u, a->scale[c]), a->shift[c]);
		if (a->dtype == PROTO_DTYPE_FLOAT32)
			((float *)row)[at] = v;
		else
			((__half *)row)[at] = __float2half_rn(v);
	}
}

__global__ void __launch_bounds__(IMGK__THREADS) imgk__second(struct imgk__args a)
{
	__shared__ struct imgk__image im;
	__shared__ struct imgk__order ord;
	if (!imgk__pass_setup(&a, &im, &ord))
		return;
	const struct imgk__span *xspan = (const struct imgk__span *)(im.base + im.parts.xspan);
	const struct imgk__span *yspan = (const struct imgk__span *)(im.base + im.parts.yspan);
	const float *xweight = (const float *)(im.base + im.parts.xweight);
	const float *yweight = (const float *)(im.base + im.parts.yweight);
	const float *mid = (const float *)(im.base + im.parts.mid);
	const uint64_t plane = (uint64_t)a.out_w * a.out_h;
	uint8_t *row = a.dst + im.it.dst_offset;
	const size_t v_len = 3 * (size_t)(ord.x.hi - ord.x.lo), h_len = 3 * (size_t)a.out_w;

	for (uint32_t r = blockIdx.x; r < a.out_h; r += gridDim.x) {
		const struct imgk__span sy = yspan[r];
		for (uint32_t o = threadIdx.x; o < a.out_w; o += blockDim.x) {
			const struct imgk__span sx = xspan[o];
			float acc[3] = {0.0f, 0.0f, 0.0f};
			/* An output without taps on either axis is black. */
			const bool black = ord.empty || sy.count == 0 || sx.count == 0;
			if (!black && ord.v_first) { /* along x, over the filtered rows */
				const float *in = mid + r * v_len + 3 * (size_t)(sx.first - ord.x.lo);
				const float *w = xweight + (size_t)o * im.parts.xstride;
				for (uint32_t k = 0; k < sx.count; k++)
					for (int c = 0; c < 3; c++)
						acc[c] = __fadd_rn(acc[c], __fmul_rn(w[k], in[3 * k + c]));
			} else if (!black) { /* along y, over the filtered columns */
				const float *in = mid + (sy.first - ord.y.lo) * h_len + 3 * (size_t)o;
				const float *w = yweight + (size_t)r * im.parts.ystride;
				for (uint32_t k = 0; k < sy.count; k++)
					for (int c = 0; c < 3; c++)
						acc[c] = __fadd_rn(acc[c],
								   __fmul_rn(w[k], in[k * h_len + c]));
			}
			imgk__store(&a, row, plane, (uint64_t)r * a.out_w + o, acc);
		}
	}
}

/*
 * Launches through cudaLaunchKernel, not <<< >>>: its error is this
 * launch's, where cudaGetLastError could return an earlier call's, and
 * nvcc's <<< >>> stubs, which guard a function-local static with the C++
 * runtime, never run, so the library needs none (image/CMakeLists.txt
 * builds it without exceptions and without thread-safe statics, and C
 * programs link it with the C compiler).
 */
static cudaError_t imgk__run(const void *kernel, dim3 grid, struct imgk__args *a,
			     cudaStream_t stream)
{
	void *args[1] = {a};
	return cudaLaunchKernel(kernel, grid, dim3(IMGK__THREADS), args, 0, stream);
}

void imgk_region(uint32_t img_w, uint32_t img_h, double x, double y, double w, double h,
		 uint32_t out_w, uint32_t out_h, int32_t *rx, int32_t *ry, uint32_t *rw,
		 uint32_t *rh)
{
	uint32_t c0, c1, r0, r1;
	jd_box_range(x, w, 1.0, out_w > 0 ? out_w : 1, img_w > 0 ? img_w : 1, &c0, &c1);
	jd_box_range(y, h, 1.0, out_h > 0 ? out_h : 1, img_h > 0 ? img_h : 1, &r0, &r1);
	*rx = (int32_t)c0;
	*ry = (int32_t)r0;
	*rw = c1 - c0;
	*rh = r1 - r0;
}

/* One block row of images: blockIdx.y is the image, the threads of the
 * x blocks stride over its output pixels. */
/* The sums of each channel of src's pixels [x0, x1) x [y0, y1), and how
 * many pixels that is. */
__device__ static uint32_t imgk__rgb_sum(const struct imgk_shrink &s, uint32_t x0, uint32_t x1,
					 uint32_t y0, uint32_t y1, uint32_t sum[3])
{
	sum[0] = sum[1] = sum[2] = 0;
	for (uint32_t y = y0; y < y1; y++) {
		const uint8_t *row = s.src + y * s.src_pitch + 3 * (uint64_t)x0;
		for (uint32_t x = 0; x < x1 - x0; x++)
			for (int c = 0; c < 3; c++)
				sum[c] += row[3 * x + c];
	}
	return (x1 - x0) * (y1 - y0);
}

/* Plane k (0 Y, 1 Cb, 2 Cr) of JFIF's YCbCr (yuv.h's inverse) of the
 * mean of count pixels whose channels sum to sum, rounded as a plane of
 * libjpeg's holds it. */
__device__ static int imgk__ycc(const uint32_t sum[3], uint32_t count, int k)
{
	const float r = (float)sum[0] / count, g = (float)sum[1] / count, b = (float)sum[2] / count;
	float v;
	if (k == 0)
		v = 0.299f * r + 0.587f * g + 0.114f * b;
	else if (k == 1)
		v = -0.168736f * r - 0.331264f * g + 0.5f * b + 128.0f;
	else
		v = 0.5f * r - 0.418688f * g - 0.081312f * b + 128.0f;
	return yuv_clamp((int)floorf(v + 0.5f));
}

/* The chroma grid of a 4:2:2 or 4:4:0 image at 1/f: libjpeg leaves its
 * chroma IDCT at luma's reduced size (jdmaster.c doubles it only when that
 * spares upsampling both ways), so a grid sample covers f x f chroma
 * samples, (f sh) x (f sv) source pixels, and is upsampled by sh across
 * and sv down. */
struct imgk__grid {
	const struct imgk_shrink *s;
	uint32_t bw, bh; /* source pixels a grid sample covers */
	uint32_t rw, rh; /* the grid's samples */
	int fancy;       /* jdsample.c: the triangle filter, not at 1/8 */
};

/* Grid sample (a, b): Cb into cbcr[0], Cr into cbcr[1], rounded. */
__device__ static void imgk__grid_at(const struct imgk__grid &q, uint32_t a, uint32_t b, int cbcr[2])
{
	uint32_t sum[3];
	const uint32_t count = imgk__rgb_sum(*q.s, a * q.bw, min(a * q.bw + q.bw, q.s->src_w),
					     b * q.bh, min(b * q.bh + q.bh, q.s->src_h), sum);
	cbcr[0] = imgk__ycc(sum, count, 1);
	cbcr[1] = imgk__ycc(sum, count, 2);
}

/* Pixel (i, j)'s Cb and Cr at 1/f: yuv.h's yuv_chroma for a grid
 * upsampled by 2 in one direction (h2v1 or h1v2). */
__device__ static void imgk__chroma(const struct imgk__grid &q, uint32_t i, uint32_t j, int out[2])
{
	const bool across = q.s->sh == 2;
	const uint32_t pos = across ? i : j, n = across ? q.rw : q.rh;
	const uint32_t c = pos / 2, a = across ? c : i, b = across ? j : c;
	int here[2];
	imgk__grid_at(q, a, b, here);
	/* h2v1: fancy only on grids wider than 2; h1v2: always (jdsample.c) */
	if (!q.fancy || (across && n <= 2)) {
		out[0] = here[0];
		out[1] = here[1];
		return;
	}
	const bool even = (pos & 1) == 0;
	if (across && (even ? c == 0 : c == n - 1)) { /* h2v1's edge columns: the sample */
		out[0] = here[0];
		out[1] = here[1];
		return;
	}
	/* the nearer sample 3/4, the next 1/4; h1v2 repeats the edge rows */
	const uint32_t other = even ? (c == 0 ? 0 : c - 1) : min(c + 1, n - 1);
	int next[2];
	imgk__grid_at(q, across ? other : a, across ? b : other, next);
	for (int k = 0; k < 2; k++)
		out[k] = (3 * here[k] + next[k] + (even ? 1 : 2)) >> 2;
}

__global__ void __launch_bounds__(IMGK__THREADS) imgk__shrink(const struct imgk_shrink *items)
{
	const struct imgk_shrink s = items[blockIdx.y];
	if (s.f != 2 && s.f != 4 && s.f != 8)
		return;
	const uint32_t ow = (s.src_w + s.f - 1) / s.f, oh = (s.src_h + s.f - 1) / s.f;
	const uint64_t n = (uint64_t)ow * oh;
	/* 4:2:2 or 4:4:0, not both: libjpeg upsamples its chroma at 1/f */
	const bool upsampled = (s.sh == 2) != (s.sv == 2);
	struct imgk__grid q;
	q.s = &s;
	q.bw = s.f * (s.sh == 2 ? 2 : 1);
	q.bh = s.f * (s.sv == 2 ? 2 : 1);
	q.rw = (s.src_w + q.bw - 1) / q.bw;
	q.rh = (s.src_h + q.bh - 1) / q.bh;
	q.fancy = s.f < 8;
	for (uint64_t p = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
	     p += (uint64_t)gridDim.x * blockDim.x) {
		const uint32_t i = (uint32_t)(p % ow), j = (uint32_t)(p / ow);
		const uint32_t x0 = i * s.f, y0 = j * s.f;
		uint32_t sum[3];
		const uint32_t count =
			imgk__rgb_sum(s, x0, min(x0 + s.f, s.src_w), y0, min(y0 + s.f, s.src_h), sum);
		uint8_t *out = s.dst + j * s.dst_pitch + 3 * (uint64_t)i;
		if (!upsampled) {
			for (int c = 0; c < 3; c++)
				out[c] = (uint8_t)((sum[c] + count / 2) / count);
			continue;
		}
		int cbcr[2];
		imgk__chroma(q, i, j, cbcr);
		yuv_to_rgb(imgk__ycc(sum, count, 0), cbcr[0], cbcr[1], out);
	}
}

int imgk_shrink_launch(const struct imgk_shrink *items_dev, uint32_t n, cudaStream_t stream,
		       cudaError_t *cuda_err)
{
	if (cuda_err != NULL)
		*cuda_err = cudaSuccess;
	if (n > IMGK_BATCH_MAX || (n > 0 && items_dev == NULL))
		return -EINVAL;
	if (n == 0)
		return 0;
	void *args[1] = {&items_dev};
	cudaError_t e = cudaLaunchKernel((const void *)imgk__shrink, dim3(16, n), dim3(IMGK__THREADS),
					 args, 0, stream);
	if (e != cudaSuccess) {
		if (cuda_err != NULL)
			*cuda_err = e;
		return -EIO;
	}
	return 0;
}

uint64_t imgk_row_bytes(const struct imgk_format *fmt)
{
	uint32_t elem = fmt != NULL ? imgk__elem_bytes(fmt) : 0;
	return elem > 0 ? (uint64_t)fmt->out_w * fmt->out_h * 3 * elem : 0;
}

int imgk_plan(struct imgk_item *items, uint32_t n, const struct imgk_format *fmt,
	      uint64_t dst_bytes, uint64_t *scratch_bytes)
{
	if (fmt == NULL || scratch_bytes == NULL || (n > 0 && items == NULL) ||
	    n > IMGK_BATCH_MAX)
		return -EINVAL;
	const uint32_t elem = imgk__elem_bytes(fmt);
	if (elem == 0)
		return -EINVAL;
	/* Each part is below 2^37 bytes (IMGK_SIZE_MAX), so the sum of
	 * IMGK_BATCH_MAX of them cannot wrap. */
	uint64_t at = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!imgk__item_ok(&items[i], elem, imgk_row_bytes(fmt), dst_bytes))
			return -EINVAL;
		items[i].scratch_offset = at;
		at += imgk__round_up(imgk__parts_of(&items[i], fmt->out_w, fmt->out_h).bytes,
				     IMGK__ITEM_ALIGN);
	}
	*scratch_bytes = at;
	return 0;
}

int imgk_launch(const struct imgk_item *items_dev, uint32_t n, const struct imgk_format *fmt,
		void *scratch, uint64_t scratch_bytes, uint8_t *dst, uint64_t dst_bytes,
		cudaStream_t stream, cudaError_t *cuda_err)
{
	if (cuda_err != NULL)
		*cuda_err = cudaSuccess;
	if (fmt == NULL || n > IMGK_BATCH_MAX)
		return -EINVAL;
	const uint32_t elem = imgk__elem_bytes(fmt);
	if (elem == 0)
		return -EINVAL;
	if (n == 0)
		return 0;
	if (items_dev == NULL || scratch == NULL || dst == NULL || (uintptr_t)dst % elem != 0 ||
	    (uintptr_t)scratch % 16 != 0)
		return -EINVAL;

	struct imgk__args a;
	a.items = items_dev;
	a.scratch = (uint8_t *)scratch;
	a.scratch_bytes = scratch_bytes;
	a.dst = dst;
	a.dst_bytes = dst_bytes;
	a.row_bytes = imgk_row_bytes(fmt);
	a.out_w = fmt->out_w;
	a.out_h = fmt->out_h;
	a.layout = fmt->layout;
	a.dtype = fmt->dtype;
	a.elem = elem;
	px_norm_coeffs(fmt->mean, fmt->std, a.scale, a.shift);

	uint32_t spread = IMGK__PASS_BLOCKS / n;
	spread = spread < 1 ? 1 : spread > IMGK__SPREAD_MAX ? IMGK__SPREAD_MAX : spread;
	cudaError_t e = imgk__run((const void *)imgk__tables, dim3(2, n), &a, stream);
	if (e == cudaSuccess)
		e = imgk__run((const void *)imgk__first, dim3(spread, n), &a, stream);
	if (e == cudaSuccess)
		e = imgk__run((const void *)imgk__second, dim3(spread, n), &a, stream);
	if (e != cudaSuccess) {
		if (cuda_err != NULL)
			*cuda_err = e;
		return -EIO;
	}
	return 0;
}
