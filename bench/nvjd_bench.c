/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-nvjd-bench: how fast gpudecode/nvjd decodes JPEGs on one GPU's
 * hardware engines, whole and as RandomResizedCrop regions, from several
 * host threads (one decoder each, as the daemon would have one per GPU
 * thread). Informational: it prints figures and asserts nothing.
 *
 *   loaderd-nvjd-bench --dir ROOT [--batch B] [--threads T] [--depth D]
 *                      [--passes P] [--device N] [--lib LIBNVJPEG] [--smooth]
 *                      [--private-handles] [--high-priority] [--contexts]
 *                      [--mode full|roi|both] [--checked scan|header]
 *                      [--start-at UNIX_SECONDS] [--yuv]
 *
 * Every *.jpg and *.jpeg under ROOT (mkjpeg --tree makes such a tree) is
 * read into page-locked memory first. Each thread opens D decoders, each
 * with its own stream and device buffers, and decodes batches of B images
 * (thread t takes batches t, t + T, ...) on its decoders in turn, P passes
 * over all images after one untimed batch per decoder; nvjd_decode waits
 * for a decoder's previous batch itself, so a thread has up to D batches
 * on the engines while it checks and submits the next (D = 1: each batch
 * waits for the one before), and the last are waited for before the clock
 * stops. Two modes, one line each:
 *
 *   nvjd_bench: mode=full|roi batch=B threads=T depth=D handles=shared|private
 *               checked=none|scan|header output=rgbi|yuv started=T0 ended=T1
 *               images=N seconds=S
 *               images_per_s=X cpu_us_per_image=C unsupported=U failed=F
 *               per_call_us: check=A wait=B submit=C
 *
 * per_call_us: the mean host time of one nvjd_decode call (B images) in
 * the decoder's checks, in waiting for its previous submission, and inside
 * nvJPEG's submission (nvjd_stats). roi decodes, per image and pass, a box as torchvision's RandomResizedCrop
 * draws it (area 8% to 100%, aspect 3/4 to 4/3, ten tries, else the
 * centre), from a fixed seed. cpu_us_per_image is the process's user and
 * system time over the images decoded. A first line names the GPU, its
 * engines and the nvJPEG loaded. --smooth opens the decoders with
 * NVJD_SMOOTH_UPSAMPLING; --private-handles with NVJD_PRIVATE_HANDLE (a
 * handle each, where the daemon's decoders of a GPU share one);
 * --checked says what a worker has checked already, as the daemon's
 * decoding does: `scan` passes each image with scan_checked (its scan's
 * markers), `header` also with its size (given_w, given_h: nvJPEG's own
 * parse and support check are skipped); the default checks everything
 * here. --start-at holds the timed passes until that wall-clock time
 * (CLOCK_REALTIME), so that several processes decode at once from the
 * same moment; the line's started= and ended= give the timed span's
 * wall-clock ends, from which their common rate is the images of all over
 * the span from the first start to the last end. --high-priority creates the decoders' streams at the GPU's greatest
 * priority (the daemon's have the default: beside a training process
 * under MPS, the greatest priority made nvJPEG slower, bench/RESULTS.md,
 * "GPU decoding beside training"); --contexts gives each thread a CUDA
 * context of its own (cuCtxCreate, through the runtime's driver entry
 * points; the decoders then have a handle each), to tell whether nvJPEG's
 * submissions go one at a time per context or per process. The first line
 * also says whether the GPU's contexts are shared through MPS (mps=1): the
 * rates beside another process's kernels differ several times between the
 * two (docs/config.md, "GPU decoding beside training: MPS"). --yuv
 * decodes to planes (NVJD_OUTPUT_YUV), with no conversion kernel of
 * nvJPEG's (needs --checked header, --mode full).
 *
 * Exit codes: 0; 1 a failure (named on stderr); 2 usage; 77 no GPU, no
 * nvJPEG, or no JPEG engines here.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/resource.h>

#include <cuda.h> /* types only: the driver's calls come from cudaGetDriverEntryPointByVersion */
#include <cuda_runtime_api.h>

#define CUDA_PROG_NAME "loaderd-nvjd-bench"
#include "tools/cuda_prog.h"

#include "gpudecode/nvjd.h"

#ifndef NVJD_BENCH_LIBRARY
#define NVJD_BENCH_LIBRARY NULL /* libnvjpeg.so.N from the search path */
#endif

#define MAX_THREADS 64
#define MAX_DEPTH 8
#define MAX_PASSES 1000
#define MAX_IMAGES 10000000

static const char synopsis[] =
	"usage: loaderd-nvjd-bench --dir ROOT [--batch B] [--threads T] [--depth D]\n"
	"                          [--passes P] [--device N] [--lib LIBNVJPEG] [--smooth]\n"
	"                          [--private-handles] [--high-priority] [--contexts]\n"
	"                          [--mode full|roi|both] [--checked scan|header]\n"
	"                          [--start-at UNIX_SECONDS] [--yuv]\n"
	"  --batch B     images per nvjd_decode call (default 256)\n"
	"  --threads T   host threads (default 1)\n"
	"  --depth D     decoders per thread, taking its batches in turn (default 2)\n"
	"  --passes P    timed passes over every image, per mode (default 3)\n";

struct image {
	size_t offset, len; /* in the page-locked buffer */
	uint32_t w, h;
	enum nvjd_planes planes; /* its chroma subsampling, for --yuv */
};

static struct {
	struct image *v;
	size_t n, cap;
	size_t bytes;
	char **paths;
} images;

struct opts {
	const char *dir, *lib;
	uint64_t batch, threads, depth, passes, device;
	bool smooth, private_handles, high_priority, contexts, yuv;
	bool full, roi; /* the modes run */
	int checked;    /* 0, 1 scan, 2 header: what the images come with */
	double start_at; /* CLOCK_REALTIME seconds; 0: at once */
};

static double wall_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleeps until CLOCK_REALTIME reaches t (seconds). */
static void sleep_until(double t)
{
	double left;
	while ((left = t - wall_now_s()) > 0) {
		struct timespec ts = {.tv_sec = (time_t)left,
				      .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
		nanosleep(&ts, NULL);
	}
}

struct worker {
	pthread_t thread;
	unsigned index;
	const struct opts *o;
	const uint8_t *pinned;
	bool roi;
	pthread_barrier_t *start;
	uint64_t decoded, unsupported, failed;
	struct nvjd_stats stats; /* of its decoders, timed passes only */
	int rc;
	char why[256];
};

static int add_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	const char *dot = strrchr(path, '.');
	if (type != FTW_F || !dot ||
	    (strcasecmp(dot, ".jpg") != 0 && strcasecmp(dot, ".jpeg") != 0))
		return 0;
	if (images.n == images.cap) {
		images.cap = images.cap ? images.cap * 2 : 1024;
		images.v = realloc(images.v, images.cap * sizeof *images.v);
		images.paths = realloc(images.paths, images.cap * sizeof *images.paths);
		if (!images.v || !images.paths)
			return -1;
	}
	images.paths[images.n] = strdup(path);
	images.v[images.n] = (struct image){.offset = images.bytes, .len = (size_t)st->st_size};
	images.bytes += (size_t)st->st_size;
	return ++images.n >= MAX_IMAGES;
}

/* Every file's bytes into one page-locked buffer. */
static uint8_t *load_files(void)
{
	uint8_t *pinned;
	if (!cuda_prog_ok(cudaHostAlloc((void **)&pinned, images.bytes ? images.bytes : 1,
					cudaHostAllocPortable),
			  "cudaHostAlloc"))
		return NULL;
	for (size_t i = 0; i < images.n; i++) {
		FILE *f = fopen(images.paths[i], "rb");
		if (!f ||
		    fread(pinned + images.v[i].offset, 1, images.v[i].len, f) != images.v[i].len) {
			fprintf(stderr, CUDA_PROG_NAME ": cannot read %s\n", images.paths[i]);
			if (f)
				fclose(f);
			return NULL;
		}
		fclose(f);
	}
	return pinned;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static double uniform(uint64_t *s, double lo, double hi)
{
	*s = mix(*s);
	return lo + (hi - lo) * (double)(*s >> 11) / 9007199254740992.0;
}

/* torchvision's RandomResizedCrop box for image im in pass `pass`. */
static void crop_box(const struct image *im, uint64_t key, struct nvjd_image *out)
{
	uint64_t s = key;
	double area = (double)im->w * im->h;
	for (int attempt = 0; attempt < 10; attempt++) {
		double target = area * uniform(&s, 0.08, 1.0);
		double ratio = exp(uniform(&s, log(3.0 / 4.0), log(4.0 / 3.0)));
		uint32_t w = (uint32_t)lround(sqrt(target * ratio)),
			 h = (uint32_t)lround(sqrt(target / ratio));
		if (w > 0 && h > 0 && w <= im->w && h <= im->h) {
			out->roi_x = (uint32_t)uniform(&s, 0, im->w - w + 1);
			out->roi_y = (uint32_t)uniform(&s, 0, im->h - h + 1);
			out->roi_x = out->roi_x > im->w - w ? im->w - w : out->roi_x;
			out->roi_y = out->roi_y > im->h - h ? im->h - h : out->roi_y;
			out->roi_w = w;
			out->roi_h = h;
			return;
		}
	}
	uint32_t side = im->w < im->h ? im->w : im->h;
	out->roi_x = (im->w - side) / 2;
	out->roi_y = (im->h - side) / 2;
	out->roi_w = out->roi_h = side;
}

/* The planes nvjd_image_info's subsampling names (nvjd.h). */
static enum nvjd_planes planes_named(const char *css)
{
	static const struct {
		const char *name;
		enum nvjd_planes planes;
	} names[] = {{"gray", NVJD_PLANES_GRAY}, {"4:4:4", NVJD_PLANES_444},
		     {"4:2:2", NVJD_PLANES_422}, {"4:2:0", NVJD_PLANES_420},
		     {"4:4:0", NVJD_PLANES_440}};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(css, names[i].name) == 0)
			return names[i].planes;
	return NVJD_PLANES_NONE;
}

/* Decodes batch b (images b * B ...) of pass `pass` on w's decoder. */
static int decode_batch(struct worker *w, struct nvjd *d, struct nvjd_image *imgs, uint8_t *dev,
			size_t slot, cudaStream_t stream, size_t b, uint64_t pass, bool count)
{
	const struct opts *o = w->o;
	uint32_t n = 0;
	for (size_t i = b * o->batch; i < images.n && n < o->batch; i++, n++) {
		const struct image *im = &images.v[i];
		imgs[n] = (struct nvjd_image){.data = w->pinned + im->offset,
					      .len = im->len,
					      .scan_checked = o->checked >= 1,
					      .given_w = o->checked >= 2 ? im->w : 0,
					      .given_h = o->checked >= 2 ? im->h : 0,
					      .planes = o->yuv ? im->planes : NVJD_PLANES_NONE,
					      .dst = dev + n * slot,
					      .pitch = (size_t)im->w * 3,
					      .dst_bytes = slot};
		if (w->roi) {
			crop_box(im, mix(i * 1000003u + pass), &imgs[n]);
			imgs[n].pitch = (size_t)imgs[n].roi_w * 3;
		}
	}
	int rc = nvjd_decode(d, imgs, n, stream);
	if (rc) {
		snprintf(w->why, sizeof w->why, "nvjd_decode: %s", imgs[0].err);
		return rc;
	}
	for (uint32_t i = 0; i < n && count; i++) {
		w->decoded += imgs[i].status == 0;
		w->unsupported += imgs[i].status == -ENOTSUP;
		w->failed += imgs[i].status != 0 && imgs[i].status != -ENOTSUP;
	}
	return 0;
}

typedef CUresult (*ctx_create_fn)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
typedef CUresult (*ctx_destroy_fn)(CUcontext);

/* --contexts: a CUDA context of the thread's own on the device, current
 * on it (nvjd keeps whatever context of the right device is current). */
static bool own_context(int device, CUcontext *ctx, char *why, size_t cap)
{
	void *create = NULL;
	enum cudaDriverEntryPointQueryResult q;
	if (cudaGetDriverEntryPointByVersion("cuCtxCreate", &create, 12050, cudaEnableDefault, &q) !=
		    cudaSuccess || !create) {
		snprintf(why, cap, "cuCtxCreate: not found in the driver");
		return false;
	}
	CUresult r = ((ctx_create_fn)create)(ctx, NULL, 0, (CUdevice)device);
	if (r != CUDA_SUCCESS)
		snprintf(why, cap, "cuCtxCreate: error %d", (int)r);
	return r == CUDA_SUCCESS;
}

static void drop_context(CUcontext ctx)
{
	void *destroy = NULL;
	enum cudaDriverEntryPointQueryResult q;
	if (ctx && cudaGetDriverEntryPointByVersion("cuCtxDestroy", &destroy, 12000, cudaEnableDefault,
						    &q) == cudaSuccess && destroy)
		((ctx_destroy_fn)destroy)(ctx);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const struct opts *o = w->o;
	char name[16];
	snprintf(name, sizeof name, "nvjd-bench-%u", w->index);
	pthread_setname_np(pthread_self(), name);

	/* decoder k of the thread: its state, stream, output and images */
	struct nvjd *d[MAX_DEPTH] = {NULL};
	cudaStream_t stream[MAX_DEPTH] = {NULL};
	uint8_t *dev[MAX_DEPTH] = {NULL};
	struct nvjd_image *imgs[MAX_DEPTH] = {NULL};
	size_t slot = 0, batches = (images.n + o->batch - 1) / o->batch;
	for (size_t i = 0; i < images.n; i++)
		if ((size_t)images.v[i].w * images.v[i].h * 3 > slot)
			slot = (size_t)images.v[i].w * images.v[i].h * 3 + 2 * NVJD_PLANE_ALIGN;
	CUcontext ctx = NULL;
	w->rc = cuda_prog_ok(cudaSetDevice((int)o->device), "cudaSetDevice") ? 0 : -EIO;
	if (w->rc == 0 && o->contexts && !own_context((int)o->device, &ctx, w->why, sizeof w->why))
		w->rc = -EIO;
	for (unsigned k = 0; k < o->depth && w->rc == 0; k++) {
		imgs[k] = calloc(o->batch, sizeof *imgs[k]);
		w->rc = -ENOMEM;
		int least = 0, greatest = 0;
		cudaDeviceGetStreamPriorityRange(&least, &greatest);
		if (imgs[k] &&
		    cuda_prog_ok(cudaStreamCreateWithPriority(&stream[k], cudaStreamNonBlocking,
							      o->high_priority ? greatest : least),
				 "cudaStreamCreateWithPriority") &&
		    cuda_prog_ok(cudaMalloc((void **)&dev[k], slot * o->batch), "cudaMalloc"))
			w->rc = nvjd_open((int)o->device, (uint32_t)o->batch,
					  (o->smooth ? NVJD_SMOOTH_UPSAMPLING : 0) |
						  (o->yuv ? NVJD_OUTPUT_YUV : 0) |
						  (o->private_handles || o->contexts ? NVJD_PRIVATE_HANDLE : 0),
					  &d[k], w->why, sizeof w->why);
		/* One untimed batch each, so that nvJPEG's buffers have grown. */
		if (w->rc == 0 && w->index < batches)
			w->rc = decode_batch(w, d[k], imgs[k], dev[k], slot, stream[k], w->index, 0,
					     false);
		if (w->rc == 0)
			w->rc = nvjd_wait(d[k], w->why, sizeof w->why);
	}
	struct nvjd_stats before[MAX_DEPTH] = {{0}};
	for (unsigned j = 0; j < o->depth && w->rc == 0; j++)
		nvjd_stats(d[j], &before[j]);
	pthread_barrier_wait(w->start); /* every thread ready: the clock starts */
	unsigned k = 0;
	for (uint64_t pass = 0; pass < o->passes && w->rc == 0; pass++)
		for (size_t b = w->index; b < batches && w->rc == 0; b += o->threads) {
			w->rc = decode_batch(w, d[k], imgs[k], dev[k], slot, stream[k], b, pass, true);
			k = (k + 1) % (unsigned)o->depth;
		}
	for (k = 0; k < o->depth; k++) {
		if (w->rc == 0 && d[k])
			w->rc = nvjd_wait(d[k], w->why, sizeof w->why);
		if (w->rc == 0 && d[k]) {
			struct nvjd_stats st;
			nvjd_stats(d[k], &st);
			w->stats.calls += st.calls - before[k].calls;
			w->stats.images += st.images - before[k].images;
			w->stats.check_ns += st.check_ns - before[k].check_ns;
			w->stats.wait_ns += st.wait_ns - before[k].wait_ns;
			w->stats.submit_ns += st.submit_ns - before[k].submit_ns;
		}
		nvjd_close(d[k]);
		cudaFree(dev[k]);
		if (stream[k])
			cudaStreamDestroy(stream[k]);
		free(imgs[k]);
	}
	drop_context(ctx);
	return NULL;
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static int run_mode(const struct opts *o, const uint8_t *pinned, bool roi)
{
	struct worker workers[MAX_THREADS];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)o->threads + 1);
	for (unsigned t = 0; t < o->threads; t++) {
		workers[t] = (struct worker){
			.index = t, .o = o, .pinned = pinned, .roi = roi, .start = &start};
		if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) != 0) {
			fprintf(stderr, CUDA_PROG_NAME ": pthread_create failed\n");
			exit(1);
		}
	}
	sleep_until(o->start_at); /* the threads are ready, waiting at the barrier */
	pthread_barrier_wait(&start);
	double t0 = cuda_prog_now_s(), c0 = cpu_seconds(), started = wall_now_s();
	uint64_t decoded = 0, unsupported = 0, failed = 0;
	struct nvjd_stats st = {0};
	int rc = 0;
	for (unsigned t = 0; t < o->threads; t++) {
		pthread_join(workers[t].thread, NULL);
		decoded += workers[t].decoded;
		unsupported += workers[t].unsupported;
		failed += workers[t].failed;
		st.calls += workers[t].stats.calls;
		st.check_ns += workers[t].stats.check_ns;
		st.wait_ns += workers[t].stats.wait_ns;
		st.submit_ns += workers[t].stats.submit_ns;
		if (workers[t].rc && !rc) {
			rc = workers[t].rc;
			fprintf(stderr, CUDA_PROG_NAME ": thread %u: %s\n", t, workers[t].why);
		}
	}
	double seconds = cuda_prog_now_s() - t0, cpu = cpu_seconds() - c0, ended = wall_now_s();
	pthread_barrier_destroy(&start);
	if (rc)
		return rc;
	printf("nvjd_bench: mode=%s batch=%" PRIu64 " threads=%" PRIu64 " depth=%" PRIu64
	       " handles=%s checked=%s output=%s started=%.6f ended=%.6f images=%" PRIu64
	       " seconds=%.3f images_per_s=%.0f cpu_us_per_image=%.1f unsupported=%" PRIu64
	       " failed=%" PRIu64 " per_call_us: check=%.0f wait=%.0f submit=%.0f\n",
	       roi ? "roi" : "full", o->batch, o->threads, o->depth,
	       o->contexts ? "context" : o->private_handles ? "private" : "shared",
	       o->checked == 2 ? "header" : o->checked == 1 ? "scan" : "none",
	       o->yuv ? "yuv" : "rgbi", started, ended,
	       decoded, seconds,
	       (double)decoded / seconds, decoded ? cpu * 1e6 / (double)decoded : 0.0, unsupported,
	       failed, st.calls ? (double)st.check_ns / (double)st.calls / 1e3 : 0.0,
	       st.calls ? (double)st.wait_ns / (double)st.calls / 1e3 : 0.0,
	       st.calls ? (double)st.submit_ns / (double)st.calls / 1e3 : 0.0);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.lib = NVJD_BENCH_LIBRARY, .batch = 256, .threads = 1, .depth = 2,
			 .passes = 3, .full = true, .roi = true};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t *num = strcmp(a, "--batch") == 0     ? &o.batch
				: strcmp(a, "--threads") == 0 ? &o.threads
				: strcmp(a, "--depth") == 0   ? &o.depth
				: strcmp(a, "--passes") == 0  ? &o.passes
				: strcmp(a, "--device") == 0  ? &o.device
							      : NULL;
		uint64_t max = num == &o.batch     ? NVJD_MAX_BATCH
			       : num == &o.threads ? MAX_THREADS
			       : num == &o.depth   ? MAX_DEPTH
			       : num == &o.passes  ? MAX_PASSES
						   : 1024;
		bool *flag = strcmp(a, "--smooth") == 0		 ? &o.smooth
			     : strcmp(a, "--private-handles") == 0 ? &o.private_handles
			     : strcmp(a, "--high-priority") == 0   ? &o.high_priority
			     : strcmp(a, "--contexts") == 0        ? &o.contexts
			     : strcmp(a, "--yuv") == 0             ? &o.yuv
								   : NULL;
		if (flag) {
			*flag = true;
			continue;
		}
		if (!v)
			return cuda_prog_usage("an option lacks its value", synopsis);
		i++;
		if (strcmp(a, "--dir") == 0) {
			o.dir = v;
		} else if (strcmp(a, "--lib") == 0) {
			o.lib = v;
		} else if (strcmp(a, "--mode") == 0 && (strcmp(v, "full") == 0 ||
						       strcmp(v, "roi") == 0 || strcmp(v, "both") == 0)) {
			o.full = strcmp(v, "roi") != 0;
			o.roi = strcmp(v, "full") != 0;
		} else if (strcmp(a, "--checked") == 0 && (strcmp(v, "scan") == 0 ||
							    strcmp(v, "header") == 0)) {
			o.checked = strcmp(v, "scan") == 0 ? 1 : 2;
		} else if (strcmp(a, "--start-at") == 0) {
			char *end;
			o.start_at = strtod(v, &end);
			if (*end || !(o.start_at >= 0))
				return cuda_prog_usage("--start-at: seconds since the epoch",
						       synopsis);
		} else if (!num || !cuda_prog_parse_u64(v, max, num) ||
			   (num != &o.device && *num == 0)) {
			return cuda_prog_usage("unknown option or value out of range", synopsis);
		}
	}
	if (!o.dir)
		return cuda_prog_usage("--dir is required", synopsis);
	if (o.yuv && (o.checked != 2 || o.roi))
		return cuda_prog_usage("--yuv needs --checked header and --mode full", synopsis);
	char text[256];
	if (nvjd_load(o.lib, text, sizeof text) != 0) {
		fprintf(stderr, CUDA_PROG_NAME ": skipped: %s\n", text);
		return CUDA_PROG_EXIT_SKIP;
	}
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess || (uint64_t)count <= o.device) {
		fprintf(stderr, CUDA_PROG_NAME ": skipped: no GPU %" PRIu64 "\n", o.device);
		return CUDA_PROG_EXIT_SKIP;
	}
	struct nvjd *probe;
	int rc = nvjd_open((int)o.device, 1, 0, &probe, text, sizeof text);
	if (rc) {
		fprintf(stderr, CUDA_PROG_NAME ": %s%s\n", rc == -ENOTSUP ? "skipped: " : "", text);
		return rc == -ENOTSUP ? CUDA_PROG_EXIT_SKIP : 1;
	}
	struct nvjd_info info;
	nvjd_info(probe, &info);
	if (nftw(o.dir, add_file, 64, FTW_PHYS) != 0 || images.n == 0) {
		fprintf(stderr, CUDA_PROG_NAME ": no JPEG files under %s\n", o.dir);
		return 1;
	}
	uint8_t *pinned = load_files();
	if (!pinned)
		return 1;
	for (size_t i = 0; i < images.n; i++) {
		struct nvjd_header h;
		if (nvjd_image_info(probe, pinned + images.v[i].offset, images.v[i].len, &h, text,
				    sizeof text) != 0) {
			fprintf(stderr, CUDA_PROG_NAME ": %s: %s\n", images.paths[i], text);
			return 1;
		}
		images.v[i].w = h.width;
		images.v[i].h = h.height;
		images.v[i].planes = planes_named(h.subsampling);
	}
	nvjd_close(probe);
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, (int)o.device);
	int mps = 0;
	cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, (int)o.device);
	nvjd_load(NULL, text, sizeof text);
	printf("nvjd_bench: gpu=\"%s\" engines=%u cores_per_engine=%u nvjpeg=\"%s\" files=%zu "
	       "bytes=%zu smooth=%d mps=%d priority=%s\n",
	       prop.name, info.engines, info.cores_per_engine, text, images.n, images.bytes,
	       o.smooth, mps != 0, o.high_priority ? "high" : "normal");
	if ((o.full && run_mode(&o, pinned, false)) || (o.roi && run_mode(&o, pinned, true)))
		return 1;
	cudaFreeHost(pinned);
	return 0;
}
