/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-decode-bench: how many images one thread of this machine turns
 * from JPEG bytes into pixels with loaderd's own code, with no file I/O,
 * no shared memory and no other process in the way. bench/image_bench.py
 * runs it pinned to one core beside torchvision.io.decode_jpeg on the same
 * bytes (bench/torch_image_peer.py --decode-only).
 *
 *   loaderd-decode-bench [--seconds S] [--transform TEXT] FILE...
 *
 * Every FILE is read into memory first. Then, in the calling thread, three
 * measurements, each one untimed pass over the files followed by timed
 * passes until S seconds (default 2) have gone by, at least one pass:
 *   decode            each file decoded whole, to full-size RGB, with the
 *                     decoder the workers use (image/jpeg.h: jd_decode_box
 *                     with the image's own box and size, so DCT scale 1);
 *   decode+transform  each file through the worker's per-sample code,
 *                     image_sample() (image/image_sample.h: header, the
 *                     chain's plan, region decode at a reduced DCT scale,
 *                     antialiased resize, flip, uint8 NCHW row), with TEXT
 *                     as the pipeline's transform (default
 *                     "random_resized_crop(224) hflip(0.5)"); the epoch is
 *                     the pass number, so every pass draws new crops;
 *   entropy check     each file through jd_check_entropy (image/jpeg.h), what
 *                     a worker does before it leaves a file to the GPU under
 *                     gpu_decode_check = entropy.
 * Prints on stdout
 *
 *   decode: images_per_s=X megapixels_per_s=Y     (source pixels)
 *   decode+transform: images_per_s=X
 *   entropy check: images_per_s=X
 *
 * and one line of details per measurement on stderr. Exit codes: 0; 1 a
 * file that cannot be read or decoded (the message names it); 2 a usage
 * error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "image/jpeg.h"
#include "image/transform.h"
#include "proto/proto.h"
#include "shm/layout.h"
#include "image/image_sample.h"

#define EXIT_USAGE 2
#define ERR_TEXT 256
#define MAX_SECONDS 3600.0
#define MAX_FILE_BYTES (64 << 20)
/* The config's default max_image_pixels (docs/config.md): Pillow's limit. */
#define BENCH_MAX_PIXELS 89478485u
#define DEFAULT_TRANSFORM "random_resized_crop(224) hflip(0.5)"

struct bench_opts {
	double seconds;
	const char *transform;
	char **paths;
	size_t n_paths;
};

/* One input file, whole, in memory. */
struct bench_file {
	const char *path;
	uint8_t *data;
	size_t len;
};

struct bench_result {
	uint64_t images;
	uint64_t passes;
	double source_pixels; /* width * height of every image timed */
	double seconds;
};

/* One sample of a measurement: 0, or -errno with a message in err. */
typedef int (*bench_sample_fn)(void *ctx, const struct bench_file *f, uint64_t pass,
			       uint64_t index, double *source_pixels, char *err, size_t err_cap);

static const char usage_text[] =
	"Usage: loaderd-decode-bench [--seconds S] [--transform TEXT] FILE...\n"
	"  Decodes the JPEG FILEs (read into memory first) in this thread, whole and\n"
	"  then through the worker's per-sample path, each for at least S seconds.\n"
	"  --seconds S      timed seconds per measurement (default 2)\n"
	"  --transform T    transform chain of the decode+transform line\n"
	"                   (default \"" DEFAULT_TRANSFORM "\")\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("loaderd-decode-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n", stderr);
	fputs(usage_text, stderr);
	return -1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 0; 1 after --help (usage printed); -1 after a usage error. */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
	*o = (struct bench_opts){ .seconds = 2.0, .transform = DEFAULT_TRANSFORM };
	int i = 1;
	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		const char *name = argv[i];
		if (strcmp(name, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(name, "--help") == 0) {
			fputs(usage_text, stdout);
			return 1;
		}
		if (strcmp(name, "--seconds") != 0 && strcmp(name, "--transform") != 0)
			return usage_error("unknown option '%s'", name);
		if (i + 1 >= argc)
			return usage_error("option '%s' needs a value", name);
		const char *value = argv[++i];
		if (strcmp(name, "--transform") == 0) {
			o->transform = value;
			continue;
		}
		char *end;
		errno = 0;
		o->seconds = strtod(value, &end);
		if (errno != 0 || end == value || *end != '\0' || !(o->seconds > 0) ||
		    o->seconds > MAX_SECONDS)
			return usage_error("option '--seconds': '%s' is not a number in (0, %.0f]",
					   value, MAX_SECONDS);
	}
	if (i >= argc)
		return usage_error("no FILE given");
	o->paths = argv + i;
	o->n_paths = (size_t)(argc - i);
	return 0;
}

/* Reads path, a regular file, whole into f; 0 or -errno, after a message
 * naming the file. */
static int load_file(const char *path, struct bench_file *f)
{
	*f = (struct bench_file){ .path = path };
	struct stat st;
	int rc;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		goto report;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto close_fd;
	}
	rc = !S_ISREG(st.st_mode) ? -EINVAL : st.st_size > MAX_FILE_BYTES ? -EFBIG : 0;
	if (rc < 0)
		goto close_fd;
	f->data = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
	if (!f->data) {
		rc = -ENOMEM;
		goto close_fd;
	}
	while (f->len < (size_t)st.st_size) {
		ssize_t n = read(fd, f->data + f->len, (size_t)st.st_size - f->len);
		if (n <= 0) {
			rc = n < 0 ? -errno : -ENODATA; /* 0: the file shrank under us */
			goto close_fd;
		}
		f->len += (size_t)n;
	}
close_fd:
	close(fd);
report:
	if (rc < 0)
		fprintf(stderr, "loaderd-decode-bench: %s: %s\n", path,
			rc == -EINVAL ? "not a regular file" :
			rc == -EFBIG ? "larger than 64 MiB" : strerror(-rc));
	return rc;
}

static void free_files(struct bench_file *files, size_t n)
{
	for (size_t i = 0; files && i < n; i++)
		free(files[i].data);
	free(files);
}

/* The files of o, loaded; NULL after a message. */
static struct bench_file *load_files(const struct bench_opts *o, uint64_t *total_bytes)
{
	struct bench_file *files = calloc(o->n_paths, sizeof(*files));
	if (!files) {
		fprintf(stderr, "loaderd-decode-bench: out of memory\n");
		return NULL;
	}
	*total_bytes = 0;
	for (size_t i = 0; i < o->n_paths; i++) {
		if (load_file(o->paths[i], &files[i]) < 0) {
			free_files(files, o->n_paths);
			return NULL;
		}
		*total_bytes += files[i].len;
	}
	return files;
}

/*
 * One untimed pass (scratch buffers grow, caches warm), then passes until
 * `seconds` have gone by. The clock is read after every image, so the
 * timed span ends within one image of the limit. 0, or -errno after a
 * message naming the file.
 */
static int run_passes(const struct bench_file *files, size_t n, double seconds,
		      bench_sample_fn fn, void *ctx, const char *what, struct bench_result *r)
{
	char err[ERR_TEXT];
	double ignored = 0;
	*r = (struct bench_result){ 0 };
	for (size_t i = 0; i < n; i++) {
		int rc = fn(ctx, &files[i], 0, i, &ignored, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "loaderd-decode-bench: %s: %s: %s\n", what, files[i].path, err);
			return rc;
		}
	}
	double start = now_s(), elapsed = 0;
	for (uint64_t pass = 1; r->passes == 0 || elapsed < seconds; pass++) {
		for (size_t i = 0; i < n && (r->passes == 0 || elapsed < seconds); i++) {
			int rc = fn(ctx, &files[i], pass, i, &r->source_pixels, err, sizeof(err));
			if (rc < 0) {
				fprintf(stderr, "loaderd-decode-bench: %s: %s: %s\n", what,
					files[i].path, err);
				return rc;
			}
			r->images++;
			elapsed = now_s() - start;
		}
		r->passes++;
	}
	r->seconds = elapsed;
	return 0;
}

/* bench_sample_fn of the decode line; ctx is a struct jd_scratch. */
static int decode_whole(void *ctx, const struct bench_file *f, uint64_t pass, uint64_t index,
			double *source_pixels, char *err, size_t err_cap)
{
	uint32_t w, h;
	int rc = jd_header(f->data, f->len, &w, &h, err, err_cap);
	if (rc < 0)
		return rc;
	struct jd_image img;
	rc = jd_decode_box(f->data, f->len, 0, 0, w, h, w, h, BENCH_MAX_PIXELS, &img, ctx, err,
			   err_cap);
	if (rc < 0)
		return rc;
	if (img.w != w || img.h != h || img.sx != 1.0) { /* the contract of a scale-1 decode */
		snprintf(err, err_cap, "decoded %" PRIu32 " x %" PRIu32 " at scale %g, not %" PRIu32
			 " x %" PRIu32 " at 1", img.w, img.h, img.sx, w, h);
		return -EPROTO;
	}
	*source_pixels += (double)w * h;
	return 0;
}

/* bench_sample_fn of the entropy check line; ctx is unused. */
static int check_whole(void *ctx, const struct bench_file *f, uint64_t pass, uint64_t index,
		       double *source_pixels, char *err, size_t err_cap)
{
	return jd_check_entropy(f->data, f->len, BENCH_MAX_PIXELS, 0, err, err_cap);
}

/* What the decode+transform line's samples need. */
struct transform_ctx {
	struct image_sampler sampler;
	uint8_t *row;
};

/* Sets up t as a worker sets up an imagefolder pipeline with this
 * transform, uint8 NCHW; 0, or -errno after a message. */
static int transform_init(struct transform_ctx *t, const char *text)
{
	struct arena_image_params p = { .max_pixels = BENCH_MAX_PIXELS, .layout = 0,
					.dtype = PROTO_DTYPE_UINT8, .std = { 1, 1, 1 } };
	struct tf_chain chain;
	char err[ERR_TEXT];
	memset(t, 0, sizeof(*t));
	if (strlen(text) >= sizeof(p.transform)) {
		fprintf(stderr, "loaderd-decode-bench: --transform: longer than %zu bytes\n",
			sizeof(p.transform) - 1);
		return -EINVAL;
	}
	if (tf_parse(text, &chain, err, sizeof(err)) < 0) {
		fprintf(stderr, "loaderd-decode-bench: --transform: %s\n", err);
		return -EINVAL;
	}
	memcpy(p.transform, text, strlen(text) + 1);
	p.out_h = chain.out_h;
	p.out_w = chain.out_w;
	uint64_t row_bytes;
	int rc = image_sampler_init(&t->sampler, &p, &row_bytes);
	if (rc == 0 && !(t->row = malloc(row_bytes)))
		rc = -ENOMEM;
	if (rc < 0) {
		fprintf(stderr, "loaderd-decode-bench: image_sampler_init: %s\n", strerror(-rc));
		image_sampler_free(&t->sampler);
	}
	return rc;
}

static void transform_free(struct transform_ctx *t)
{
	image_sampler_free(&t->sampler);
	free(t->row);
	t->row = NULL;
}

/* bench_sample_fn of the decode+transform line; ctx is a transform_ctx.
 * image_sample() reports only a code, so the message is its strerror. */
static int transform_one(void *ctx, const struct bench_file *f, uint64_t pass, uint64_t index,
			 double *source_pixels, char *err, size_t err_cap)
{
	struct transform_ctx *t = ctx;
	int rc = image_sample(&t->sampler, f->data, f->len, pass, index, t->row);
	if (rc < 0)
		snprintf(err, err_cap, "image_sample: %s", strerror(-rc));
	return rc;
}

static void print_details(const char *what, const struct bench_result *r, size_t n_files)
{
	fprintf(stderr, "loaderd-decode-bench: %s: %" PRIu64 " images (%" PRIu64 " passes over %zu"
		" files) in %.3f s\n", what, r->images, r->passes, n_files, r->seconds);
}

static int run_decode(const struct bench_opts *o, const struct bench_file *files)
{
	struct jd_scratch scratch = { 0 };
	struct bench_result r;
	int rc = run_passes(files, o->n_paths, o->seconds, decode_whole, &scratch, "decode", &r);
	jd_scratch_free(&scratch);
	if (rc < 0)
		return rc;
	print_details("decode", &r, o->n_paths);
	printf("decode: images_per_s=%.1f megapixels_per_s=%.2f\n", (double)r.images / r.seconds,
	       r.source_pixels / r.seconds / 1e6);
	return 0;
}

static int run_transform(const struct bench_opts *o, const struct bench_file *files,
			 struct transform_ctx *t)
{
	struct bench_result r;
	int rc = run_passes(files, o->n_paths, o->seconds, transform_one, t, "decode+transform",
			    &r);
	if (rc < 0)
		return rc;
	print_details("decode+transform", &r, o->n_paths);
	printf("decode+transform: images_per_s=%.1f\n", (double)r.images / r.seconds);
	return 0;
}

static int run_check(const struct bench_opts *o, const struct bench_file *files)
{
	struct bench_result r;
	int rc = run_passes(files, o->n_paths, o->seconds, check_whole, NULL, "entropy check", &r);
	if (rc < 0)
		return rc;
	print_details("entropy check", &r, o->n_paths);
	printf("entropy check: images_per_s=%.1f\n", (double)r.images / r.seconds);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc != 0)
		return rc > 0 ? 0 : EXIT_USAGE;
	struct transform_ctx t; /* first: a bad --transform should not cost a measurement */
	rc = transform_init(&t, o.transform);
	if (rc < 0)
		return rc == -EINVAL ? EXIT_USAGE : 1;
	uint64_t total_bytes;
	struct bench_file *files = load_files(&o, &total_bytes);
	if (!files) {
		transform_free(&t);
		return 1;
	}
	fprintf(stderr, "loaderd-decode-bench: %zu files, %" PRIu64 " bytes in memory\n", o.n_paths,
		total_bytes);
	rc = run_decode(&o, files);
	if (rc == 0)
		rc = run_transform(&o, files, &t);
	if (rc == 0)
		rc = run_check(&o, files);
	free_files(files, o.n_paths);
	transform_free(&t);
	if (rc == 0 && fflush(stdout) != 0)
		rc = -EIO;
	return rc == 0 ? 0 : 1;
}
