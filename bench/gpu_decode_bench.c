/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-gpu-decode-bench: an image pipeline's samples decoded on the
 * GPU, the whole way, against the CPU path on the same files in the same
 * run: for each JPEG, the header read without libjpeg (image/jpeghdr.h)
 * and the hardware decoder's rule, the transform chain's plan for
 * (seed, epoch 0, index), the image decoded on the GPU's hardware JPEG
 * engines (gpudecode/nvjd.h), shrunk by block means where the workers would
 * decode at a reduced DCT scale (imgk_shrink_launch), then crop, antialiased
 * resize, flip, layout, dtype and normalisation by one kernel launch per
 * batch (gpudecode/imgkernel.h).
 *
 * Prints, for each number of host threads (one decoder and stream each):
 * images/s of the GPU path and its CPU cost per image; the CPU path's
 * images/s on one core (image/image_sample.h: region decode at the DCT
 * scale the output needs, resize, conversion); how many files the
 * hardware decoder takes; and, on the first --check images, how far the
 * GPU path's uint8 output is from the CPU path's for the same sample
 * (mean absolute difference per image, in levels, and the largest).
 *
 * usage: loaderd-gpu-decode-bench --dir ROOT [--batch 256] [--threads 1,2,4]
 *            [--seconds 3] [--cpu-seconds 3] [--check 500]
 *            [--transform "random_resized_crop(224) hflip(0.5)"]
 *            [--dtype float16] [--layout nchw] [--library PATH]
 * Exit codes: 0; 1 an error; 77 no GPU, no nvJPEG or no hardware decoder.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpudecode/nvjd.h"
#include "gpudecode/imgkernel.h"
#include "image/jpeg.h"
#include "image/jpeghdr.h"
#include "image/transform.h"
#include "proto/proto.h"
#include "image/image_sample.h"

#define EXIT_SKIP 77
#define SEED 1

struct file {
	uint64_t offset, len; /* in the page-locked buffer */
	uint32_t w, h;
	bool gpu;             /* the hardware decoder takes it (jh_gpu_refusal) */
	struct tf_plan plan;
	int32_t rx, ry;       /* its region of interest */
	uint32_t rw, rh;
	uint32_t f;           /* shrunk by f first, as the workers' DCT scale (jd_pick_scale) */
	uint64_t bytes;       /* of the decode buffer it takes: the image and its shrunk copy */
};

static struct {
	char **paths;
	size_t n, cap;
} listing;

static struct file *files;
static size_t n_files;
static uint8_t *blob; /* every file, page-locked */
static struct tf_chain chain;
static struct imgk_format fmt;
#ifdef GPU_DECODE_BENCH_LIBRARY
static const char *library = GPU_DECODE_BENCH_LIBRARY; /* beside the nvjpeg.h built with */
#else
static const char *library;
#endif

static double now_s(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int collect(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	size_t len = strlen(path);
	if (type != FTW_F || len < 4 || strcmp(path + len - 4, ".jpg") != 0)
		return 0;
	if (listing.n == listing.cap) {
		listing.cap = listing.cap * 2 + 1024;
		listing.paths = realloc(listing.paths, listing.cap * sizeof(*listing.paths));
		if (!listing.paths)
			return -1;
	}
	listing.paths[listing.n++] = strdup(path);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads every file into one page-locked buffer and plans each sample. */
static int load(const char *dir)
{
	if (nftw(dir, collect, 32, FTW_PHYS) != 0 || listing.n == 0) {
		fprintf(stderr, "gpu-decode-bench: no .jpg under %s\n", dir);
		return -1;
	}
	qsort(listing.paths, listing.n, sizeof(*listing.paths), by_name);
	files = calloc(listing.n, sizeof(*files));
	uint64_t total = 0;
	for (size_t i = 0; i < listing.n; i++) {
		FILE *f = fopen(listing.paths[i], "rb");
		if (!f || fseek(f, 0, SEEK_END) != 0) {
			fprintf(stderr, "gpu-decode-bench: %s: %s\n", listing.paths[i], strerror(errno));
			return -1;
		}
		files[i].offset = total;
		files[i].len = (uint64_t)ftell(f);
		total += files[i].len;
		fclose(f);
	}
	if (cudaHostAlloc((void **)&blob, total, cudaHostAllocPortable) != cudaSuccess) {
		fprintf(stderr, "gpu-decode-bench: cudaHostAlloc of %" PRIu64 " bytes failed\n", total);
		return -1;
	}
	for (size_t i = 0; i < listing.n; i++) {
		FILE *f = fopen(listing.paths[i], "rb");
		if (!f || fread(blob + files[i].offset, 1, files[i].len, f) != files[i].len) {
			fprintf(stderr, "gpu-decode-bench: reading %s failed\n", listing.paths[i]);
			return -1;
		}
		fclose(f);
		struct jh_info info;
		char err[256];
		if (jh_parse(blob + files[i].offset, files[i].len, &info, err, sizeof(err)) < 0) {
			fprintf(stderr, "gpu-decode-bench: %s: %s\n", listing.paths[i], err);
			return -1;
		}
		struct file *fl = &files[i];
		fl->w = info.width;
		fl->h = info.height;
		fl->gpu = jh_gpu_refusal(&info, fl->len, &(struct jh_limits){0}) == NULL;
		tf_plan_sample(&chain, SEED, 0, i, fl->w, fl->h, &fl->plan);
		/* Whole images, as the daemon decodes them: a region of interest
		 * was no faster on the engines, and nvJPEG 13.0's differs from a
		 * whole decode at the image's right and bottom edges. */
		fl->rx = fl->ry = 0;
		fl->rw = fl->w;
		fl->rh = fl->h;
		fl->f = 8 / (uint32_t)jd_pick_scale(fl->plan.w, fl->plan.h, fl->plan.out_w, fl->plan.out_h);
		fl->bytes = (((uint64_t)fl->w * fl->h * 3 + 255) & ~(uint64_t)255) +
			    (((uint64_t)((fl->w + fl->f - 1) / fl->f) * ((fl->h + fl->f - 1) / fl->f) * 3 +
			      255) & ~(uint64_t)255);
	}
	n_files = listing.n;
	return 0;
}

/* One host thread of the GPU path: its own decoder, stream and buffers. */
struct lane {
	int index, n_lanes;
	uint32_t batch;
	double seconds;
	size_t check;          /* > 0: one pass over the first `check` GPU files, uint8 NHWC */
	const struct imgk_format *fmt;
	uint8_t *out_host;     /* check: the outputs, check x row bytes */
	/* results */
	uint64_t images;
	double wall_s, cpu_s;
	int rc;
	char why[512];
};

static void *lane_main(void *arg)
{
	struct lane *ln = arg;
	struct nvjd *d = NULL;
	cudaStream_t stream = NULL;
	uint8_t *dec = NULL, *scratch = NULL, *out = NULL;
	struct imgk_item *items = NULL, *items_dev = NULL;
	struct imgk_shrink *shrink = NULL, *shrink_dev = NULL;
	struct nvjd_image *imgs = calloc(ln->batch, sizeof(*imgs));
	size_t *mine = calloc(n_files, sizeof(*mine)), n_mine = 0;
	uint64_t row = imgk_row_bytes(ln->fmt);
	cudaSetDevice(0);
	for (size_t i = (size_t)ln->index; i < n_files; i += (size_t)ln->n_lanes)
		if (files[i].gpu)
			mine[n_mine++] = i;
	if (ln->check && n_mine > ln->check)
		n_mine = ln->check;
	ln->rc = nvjd_open(0, ln->batch, NVJD_SMOOTH_UPSAMPLING, &d, ln->why, sizeof(ln->why));
	if (ln->rc == -ENOTSUP && strstr(ln->why, "upsampling"))
		ln->rc = nvjd_open(0, ln->batch, 0, &d, ln->why, sizeof(ln->why));
	if (ln->rc < 0 || !imgs || n_mine == 0)
		goto out;
	/* Sizes: the largest batch's regions and scratch, over the files this lane decodes. */
	uint64_t dec_bytes = 0, scratch_bytes = 0;
	items = calloc(ln->batch, sizeof(*items));
	for (size_t s = 0; s < n_mine; s += ln->batch) {
		uint32_t n = (uint32_t)(n_mine - s < ln->batch ? n_mine - s : ln->batch);
		uint64_t bytes = 0, sb = 0;
		for (uint32_t k = 0; k < n; k++) {
			const struct file *f = &files[mine[s + k]];
			uint32_t sw = (f->w + f->f - 1) / f->f, sh = (f->h + f->f - 1) / f->f;
			bytes += f->bytes;
			items[k] = (struct imgk_item){.src = blob /* any non-NULL: sizing only */,
						      .src_w = sw, .src_h = sh, .src_pitch = sw * 3u,
						      .img_w = sw, .img_h = sh, .sx = 1.0 / f->f,
						      .sy = 1.0 / f->f, .x = f->plan.x, .y = f->plan.y,
						      .w = f->plan.w, .h = f->plan.h, .flip = f->plan.flip,
						      .dst_offset = k * row};
		}
		if (imgk_plan(items, n, ln->fmt, row * ln->batch, &sb) < 0) {
			ln->rc = -EINVAL;
			snprintf(ln->why, sizeof(ln->why), "imgk_plan refused a batch");
			goto out;
		}
		dec_bytes = bytes > dec_bytes ? bytes : dec_bytes;
		scratch_bytes = sb > scratch_bytes ? sb : scratch_bytes;
	}
	free(items);
	items = NULL;
	if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaMalloc((void **)&dec, dec_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&scratch, scratch_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&out, row * ln->batch) != cudaSuccess ||
	    cudaMalloc((void **)&items_dev, sizeof(*items_dev) * ln->batch) != cudaSuccess ||
	    cudaHostAlloc((void **)&items, sizeof(*items) * ln->batch, 0) != cudaSuccess ||
	    cudaMalloc((void **)&shrink_dev, sizeof(*shrink_dev) * ln->batch) != cudaSuccess ||
	    cudaHostAlloc((void **)&shrink, sizeof(*shrink) * ln->batch, 0) != cudaSuccess) {
		ln->rc = -ENOMEM;
		snprintf(ln->why, sizeof(ln->why), "device or pinned allocation failed");
		goto out;
	}
	double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	size_t next = 0;
	for (;;) {
		uint32_t n = (uint32_t)(n_mine - next < ln->batch ? n_mine - next : ln->batch);
		uint64_t at = 0;
		for (uint32_t k = 0; k < n; k++) {
			const struct file *f = &files[mine[next + k]];
			imgs[k] = (struct nvjd_image){.data = blob + f->offset, .len = f->len,
						      .dst = dec + at,
						      .pitch = f->rw * 3u, .dst_bytes = (size_t)f->rw * f->rh * 3};
			at += f->bytes;
		}
		int rc = nvjd_decode(d, imgs, n, stream);
		if (rc < 0) {
			ln->rc = rc;
			snprintf(ln->why, sizeof(ln->why), "nvjd_decode: %s", imgs[0].err);
			goto out;
		}
		uint32_t m = 0, n_shrink = 0;
		for (uint32_t k = 0; k < n; k++) {
			const struct file *f = &files[mine[next + k]];
			if (imgs[k].status != 0) {
				ln->rc = imgs[k].status;
				snprintf(ln->why, sizeof(ln->why), "%s: %s", listing.paths[mine[next + k]],
					 imgs[k].err);
				goto out;
			}
			uint32_t sw = (f->w + f->f - 1) / f->f, sh = (f->h + f->f - 1) / f->f;
			uint8_t *small = imgs[k].dst + (((uint64_t)f->w * f->h * 3 + 255) & ~(uint64_t)255);
			if (f->f > 1)
				shrink[n_shrink++] = (struct imgk_shrink){
					.src = imgs[k].dst, .src_pitch = imgs[k].pitch, .src_w = f->w,
					.src_h = f->h, .dst = small, .dst_pitch = sw * 3u, .f = f->f};
			items[m++] = (struct imgk_item){.src = f->f > 1 ? small : imgs[k].dst,
							.src_pitch = sw * 3u, .src_w = sw, .src_h = sh,
							.img_w = sw, .img_h = sh, .sx = 1.0 / f->f,
							.sy = 1.0 / f->f, .x = f->plan.x, .y = f->plan.y,
							.w = f->plan.w, .h = f->plan.h, .flip = f->plan.flip,
							.dst_offset = k * row};
		}
		uint64_t sb = 0;
		cudaError_t ce = cudaSuccess;
		if (imgk_plan(items, m, ln->fmt, row * ln->batch, &sb) < 0 || sb > scratch_bytes ||
		    cudaMemcpyAsync(shrink_dev, shrink, sizeof(*shrink) * n_shrink,
				    cudaMemcpyHostToDevice, stream) != cudaSuccess ||
		    imgk_shrink_launch(shrink_dev, n_shrink, stream, &ce) < 0 ||
		    cudaMemcpyAsync(items_dev, items, sizeof(*items) * m, cudaMemcpyHostToDevice,
				    stream) != cudaSuccess ||
		    imgk_launch(items_dev, m, ln->fmt, scratch, scratch_bytes, out, row * ln->batch, stream,
				&ce) < 0) {
			ln->rc = -EIO;
			snprintf(ln->why, sizeof(ln->why), "the kernel: %s", cudaGetErrorString(ce));
			goto out;
		}
		if (ln->check)
			cudaMemcpyAsync(ln->out_host + next * row, out, m * row, cudaMemcpyDeviceToHost,
					stream);
		if (cudaStreamSynchronize(stream) != cudaSuccess) {
			ln->rc = -EIO;
			snprintf(ln->why, sizeof(ln->why), "the stream failed");
			goto out;
		}
		ln->images += m;
		next += n;
		if (next >= n_mine) {
			if (ln->check)
				break;
			next = 0;
		}
		if (!ln->check && now_s(CLOCK_MONOTONIC) - t0 >= ln->seconds)
			break;
	}
	ln->wall_s = now_s(CLOCK_MONOTONIC) - t0;
	ln->cpu_s = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
out:
	nvjd_close(d);
	if (stream)
		cudaStreamDestroy(stream);
	cudaFree(dec);
	cudaFree(scratch);
	cudaFree(out);
	cudaFree(items_dev);
	cudaFreeHost(items);
	cudaFree(shrink_dev);
	cudaFreeHost(shrink);
	free(imgs);
	free(mine);
	return NULL;
}

/* The CPU path for the same samples: images/s on this one thread; with
 * ref, also the uint8 NHWC rows of the first n GPU files into ref. */
static double cpu_path(const struct imgk_format *f, double seconds, uint8_t *ref, size_t n,
		       const char *transform)
{
	struct arena_image_params p = {.seed = SEED, .max_pixels = UINT64_MAX, .out_h = f->out_h,
				       .out_w = f->out_w, .layout = f->layout, .dtype = f->dtype};
	for (int c = 0; c < 3; c++) {
		p.mean[c] = f->mean[c];
		p.std[c] = f->std[c];
	}
	snprintf(p.transform, sizeof(p.transform), "%s", transform);
	struct image_sampler s = {0};
	uint64_t row = 0;
	if (image_sampler_init(&s, &p, &row) < 0)
		return -1;
	uint64_t images = 0;
	double t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	if (ref) {
		for (size_t i = 0, k = 0; i < n_files && k < n; i++) {
			if (!files[i].gpu)
				continue;
			if (image_sample(&s, blob + files[i].offset, files[i].len, 0, i, ref + k * row) < 0)
				return -1;
			k++;
		}
	} else {
		uint8_t *buf = malloc(row);
		for (size_t i = 0; now_s(CLOCK_THREAD_CPUTIME_ID) - t0 < seconds; i = (i + 1) % n_files) {
			if (image_sample(&s, blob + files[i].offset, files[i].len, 0, i, buf) < 0)
				return -1;
			images++;
		}
		free(buf);
	}
	double rate = (double)images / (now_s(CLOCK_THREAD_CPUTIME_ID) - t0);
	image_sampler_free(&s);
	return rate;
}

static int run_lanes(int n, uint32_t batch, double seconds, const struct imgk_format *f,
		     size_t check, uint8_t *out_host, struct lane *res)
{
	pthread_t t[64];
	struct lane ln[64];
	for (int i = 0; i < n; i++) {
		ln[i] = (struct lane){.index = i, .n_lanes = n, .batch = batch, .seconds = seconds,
				      .check = check, .fmt = f, .out_host = out_host};
		pthread_create(&t[i], NULL, lane_main, &ln[i]);
	}
	*res = (struct lane){0};
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		if (ln[i].rc < 0) {
			*res = ln[i];
			return ln[i].rc;
		}
		res->images += ln[i].images;
		res->cpu_s += ln[i].cpu_s;
		res->wall_s = ln[i].wall_s > res->wall_s ? ln[i].wall_s : res->wall_s;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *threads = "1,2,4", *dtype = "float16", *layout = "nchw";
	const char *transform = "random_resized_crop(224) hflip(0.5)";
	uint32_t batch = 256;
	double seconds = 3, cpu_seconds = 3;
	size_t check = 500;
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--dir")) dir = v;
		else if (!strcmp(k, "--batch")) batch = (uint32_t)atoi(v);
		else if (!strcmp(k, "--threads")) threads = v;
		else if (!strcmp(k, "--seconds")) seconds = atof(v);
		else if (!strcmp(k, "--cpu-seconds")) cpu_seconds = atof(v);
		else if (!strcmp(k, "--check")) check = (size_t)atol(v);
		else if (!strcmp(k, "--transform")) transform = v;
		else if (!strcmp(k, "--dtype")) dtype = v;
		else if (!strcmp(k, "--layout")) layout = v;
		else if (!strcmp(k, "--library")) library = v;
		else {
			fprintf(stderr, "gpu-decode-bench: unknown option %s\n", k);
			return 1;
		}
	}
	if (!dir || batch == 0 || batch > NVJD_MAX_BATCH) {
		fprintf(stderr, "usage: loaderd-gpu-decode-bench --dir ROOT [--batch 1..%d] [--threads 1,2,4]"
			" [--seconds S] [--cpu-seconds S] [--check N] [--transform T] [--dtype D]"
			" [--layout L] [--library PATH]\n", NVJD_MAX_BATCH);
		return 1;
	}
	char err[512];
	if (tf_parse(transform, &chain, err, sizeof(err)) < 0) {
		fprintf(stderr, "gpu-decode-bench: --transform: %s\n", err);
		return 1;
	}
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
		printf("gpu-decode-bench: skipped: no GPU\n");
		return EXIT_SKIP;
	}
	if (nvjd_load(library, err, sizeof(err)) < 0) {
		printf("gpu-decode-bench: skipped: %s\n", err);
		return EXIT_SKIP;
	}
	fmt = (struct imgk_format){.out_w = chain.out_w, .out_h = chain.out_h,
				   .layout = strcmp(layout, "nhwc") == 0,
				   .dtype = !strcmp(dtype, "uint8") ? PROTO_DTYPE_UINT8 :
					    !strcmp(dtype, "float32") ? PROTO_DTYPE_FLOAT32 :
					    PROTO_DTYPE_FLOAT16,
				   .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}};
	if (fmt.dtype == PROTO_DTYPE_UINT8)
		for (int c = 0; c < 3; c++) {
			fmt.mean[c] = 0;
			fmt.std[c] = 1;
		}
	if (load(dir) < 0)
		return 1;
	size_t n_gpu = 0;
	uint64_t bytes = 0;
	for (size_t i = 0; i < n_files; i++) {
		n_gpu += files[i].gpu;
		bytes += files[i].len;
	}
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	printf("gpu: %s; files: %zu under %s, %.0f KB on average, %zu (%.1f%%) taken by the "
	       "hardware decoder\n", prop.name, n_files, dir, (double)bytes / (double)n_files / 1e3,
	       n_gpu, 100.0 * (double)n_gpu / (double)n_files);
	printf("transform: %s; output %ux%u %s %s; batch %u\n", transform, fmt.out_h, fmt.out_w,
	       dtype, layout, batch);

	/* Agreement with the CPU path: uint8 NHWC, one pass, one thread. */
	struct imgk_format u8 = {.out_w = fmt.out_w, .out_h = fmt.out_h, .layout = 1,
				 .dtype = PROTO_DTYPE_UINT8, .mean = {0, 0, 0}, .std = {1, 1, 1}};
	if (check > n_gpu)
		check = n_gpu;
	if (check > 0) {
		uint64_t row = imgk_row_bytes(&u8);
		uint8_t *gpu_out = calloc(check, row), *cpu_out = calloc(check, row);
		struct lane r;
		if (run_lanes(1, batch, 0, &u8, check, gpu_out, &r) < 0) {
			fprintf(stderr, "gpu-decode-bench: %s\n", r.why);
			return r.rc == -ENOTSUP ? EXIT_SKIP : 1;
		}
		if (cpu_path(&u8, 0, cpu_out, check, transform) < 0) {
			fprintf(stderr, "gpu-decode-bench: the CPU path failed\n");
			return 1;
		}
		double sum_mad = 0, max_mad = 0;
		int max_diff = 0;
		uint64_t equal = 0;
		for (size_t k = 0; k < check; k++) {
			uint64_t s = 0;
			for (uint64_t j = 0; j < row; j++) {
				int dlt = abs((int)gpu_out[k * row + j] - (int)cpu_out[k * row + j]);
				s += (uint64_t)dlt;
				equal += dlt == 0;
				max_diff = dlt > max_diff ? dlt : max_diff;
			}
			double mad = (double)s / (double)row;
			sum_mad += mad;
			max_mad = mad > max_mad ? mad : max_mad;
		}
		printf("agreement with the CPU path, %zu images, uint8: mean absolute difference %.3f "
		       "levels (largest of one image %.3f), largest difference %d, %.1f%% of values "
		       "equal\n", check, sum_mad / (double)check, max_mad, max_diff,
		       100.0 * (double)equal / ((double)check * (double)row));
		free(gpu_out);
		free(cpu_out);
	}

	double cpu_rate = cpu_path(&fmt, cpu_seconds, NULL, 0, transform);
	printf("CPU path (libjpeg-turbo region decode at the DCT scale, resize, conversion), one "
	       "core: %.0f images/s\n", cpu_rate);
	for (const char *p = threads; *p;) {
		int n = atoi(p);
		if (n < 1 || n > 64)
			break;
		struct lane r;
		if (run_lanes(n, batch, seconds, &fmt, 0, NULL, &r) < 0) {
			fprintf(stderr, "gpu-decode-bench: %s\n", r.why);
			return r.rc == -ENOTSUP ? EXIT_SKIP : 1;
		}
		double rate = (double)r.images / r.wall_s;
		printf("GPU path, %d host thread%s: %.0f images/s (the CPU path on %.1f cores), "
		       "%.1f us of CPU per image\n", n, n == 1 ? "" : "s", rate, rate / cpu_rate,
		       r.cpu_s / (double)r.images * 1e6);
		const char *comma = strchr(p, ',');
		if (!comma)
			break;
		p = comma + 1;
	}
	return 0;
}
