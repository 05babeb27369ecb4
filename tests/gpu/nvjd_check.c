/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd_check: gpudecode/nvjd on a real GPU's JPEG engines, against libjpeg.
 *
 *   nvjd_check --mkjpeg PATH --dir DIR [--lib LIBNVJPEG] [--device N] [--files-only]
 *
 * --files-only makes the files and libjpeg's decodes of them and stops:
 * what can be checked without a GPU.
 * Makes its JPEGs with the project's mkjpeg (libjpeg's own compressor) in
 * DIR, and decodes each on the CPU too, with the image library's
 * jd_decode_box over the whole image at its own size (scale 8/8, libjpeg's
 * defaults), the reference. The decoder is opened with
 * NVJD_SMOOTH_UPSAMPLING, as libjpeg upsamples (without it if nvJPEG
 * refuses the flag, saying so). Checks, each printed:
 *
 *   1. full decode of baseline 4:4:4, 4:2:2, 4:2:0 and 4:4:0, gray, restart
 *      markers, odd sizes, quality 50 to 95, in one batch: status 0, the
 *      size reported by nvjd_decode and nvjd_image_info equal to libjpeg's,
 *      and per image the mean absolute difference from libjpeg's pixels
 *      <= 1.0 level (the maximum is printed); destinations are filled with
 *      0xa5 first, so an image the engines skipped shows;
 *   2. progressive, CMYK and 4:1:1 files, and a 7 x 5 one: -ENOTSUP
 *      (route to the CPU) or decoded within the same tolerance; which one
 *      is printed, with what the project's header reader predicts
 *      (image/jpeghdr.h, jh_gpu_refusal) for every file of 1 and 2;
 *   3. regions of interest (two per image: one inside, one at the
 *      bottom-right corner, odd sizes): within the same tolerance of the
 *      same crop of libjpeg's decode; the largest difference from the crop
 *      of the engines' own full decode is printed;
 *   4. one batch with, among good images, a file cut short inside its scan,
 *      one cut short in its header, bytes that are not a JPEG and a region
 *      outside its image, and a file with one entropy-coded byte changed
 *      into a marker (mkjpeg --corrupt; libjpeg rejects it too): -EBADMSG,
 *      or -ENOTSUP where nvJPEG's parser calls the damage unsupported (the
 *      image then goes to the CPU decoder, which rejects it), (-EINVAL for
 *      the region) with a message, and every good image
 *      decoded as in 1 (and the same again in a second batch, after
 *      whatever the first left behind); in the same batch a file with a
 *      byte changed that makes no marker and one whose scan is random
 *      bytes: -EBADMSG, or 0 if the engines do not report it: printed, not
 *      required (nvjd.h: what may go unreported);
 *   5. a batch of bad images only, an empty batch, and one over max_batch;
 *   6. images given with their sizes, as the daemon's workers leave them
 *      (given_w, given_h and scan_checked: nvJPEG's own parse and support
 *      check skipped), in one batch: every good image as in 1 (and
 *      byte-identical to its decode there, or printed); progressive, CMYK,
 *      4:1:1 and the 7 x 5 one decoded within tolerance or failed with a
 *      message (their call split down to them) while the good ones in the
 *      same batch still decode; a size given smaller than the file's: at
 *      most that size written; a size given larger: a failure with a
 *      message, or a decode of at most that size (printed);
 *   7. planes (NVJD_OUTPUT_YUV), every file of 1 and 2 the project's
 *      header reader gives to the GPU, given with its size and
 *      subsampling, in one batch: status 0, and its planes converted
 *      on the host by image/yuv.h (libjpeg's upsampling and conversion)
 *      within the same tolerance of libjpeg's pixels (they differ by the
 *      engines' IDCT alone); an image given without its subsampling, and
 *      one with a region: -EINVAL with a message;
 *   in every check, the 4 KiB after each destination must still hold the
 *   fill: nothing is written beyond dst_bytes;
 *   and, printed only, how far a decoder without NVJD_SMOOTH_UPSAMPLING
 *   (chroma samples repeated) is from libjpeg.
 *
 * Exit codes: 0 all passed; 1 a check failed; 2 usage; 77 skipped: no GPU,
 * nvJPEG cannot be loaded, or the GPU has no JPEG engines.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include "gpudecode/nvjd.h"
#include "image/jpeg.h"
#include "image/jpeghdr.h"
#include "image/yuv.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_SKIP 77
#define MAX_FILES 32
#define MAX_BATCH 64
#define TOLERANCE 1.0 /* mean absolute difference, levels */
#define GUARD 4096    /* bytes after each destination that must keep the fill */

extern char **environ;

enum kind {
	GOOD,  /* the engines must decode it */
	MAYBE, /* -ENOTSUP or decoded within tolerance */
	BAD,   /* -EBADMSG (or -ENOTSUP: to the CPU decoder) required */
	SHADY, /* -EBADMSG, or 0 if the engines do not notice */
};

struct file {
	const char *name;
	enum kind kind;
	const char *args[12]; /* mkjpeg arguments after the output path */
	uint8_t *data;        /* page-locked */
	size_t len;
	uint8_t *ref; /* libjpeg's RGB, w * h * 3 (GOOD, MAYBE) */
	uint32_t w, h;
	uint8_t *gpu_full; /* the engines' full decode (check 1), w * h * 3 */
};

static struct file files[] = {
	{.name = "b444",
	 .kind = GOOD,
	 .args = {"--width", "333", "--height", "251", "--subsamp", "444", "--seed", "1"}},
	{.name = "b422",
	 .kind = GOOD,
	 .args = {"--width", "320", "--height", "240", "--subsamp", "422", "--seed", "2"}},
	{.name = "b420",
	 .kind = GOOD,
	 .args = {"--width", "257", "--height", "191", "--subsamp", "420", "--seed", "3"}},
	{.name = "b440",
	 .kind = GOOD,
	 .args = {"--width", "200", "--height", "301", "--subsamp", "440", "--seed", "4"}},
	{.name = "gray",
	 .kind = GOOD,
	 .args = {"--width", "181", "--height", "97", "--gray", "--seed", "5"}},
	{.name = "rst420",
	 .kind = GOOD,
	 .args = {"--width", "640", "--height", "480", "--restart", "2", "--seed", "6"}},
	{.name = "q95",
	 .kind = GOOD,
	 .args = {"--width", "1023", "--height", "767", "--quality", "95", "--seed", "7"}},
	{.name = "q50",
	 .kind = GOOD,
	 .args = {"--width", "96", "--height", "64", "--subsamp", "444", "--quality", "50",
		  "--seed", "8"}},
	{.name = "gradient",
	 .kind = GOOD,
	 .args = {"--width", "301", "--height", "203", "--pattern", "gradient"}},
	{.name = "progressive",
	 .kind = MAYBE,
	 .args = {"--width", "300", "--height", "200", "--progressive", "--seed", "9"}},
	{.name = "cmyk",
	 .kind = MAYBE,
	 .args = {"--width", "120", "--height", "80", "--cmyk", "--seed", "10"}},
	{.name = "s411",
	 .kind = MAYBE,
	 .args = {"--width", "160", "--height", "120", "--subsamp", "411", "--seed", "11"}},
	{.name = "tiny", .kind = MAYBE, .args = {"--width", "7", "--height", "5", "--seed", "12"}},
	/* The BAD and SHADY files are made from b420's arguments below. */
	{.name = "cut_scan", .kind = BAD, .args = {NULL}},
	{.name = "cut_header", .kind = BAD, .args = {"--truncate", "200"}},
	{.name = "not_jpeg", .kind = BAD, .args = {NULL}},
	{.name = "corrupt", .kind = BAD, .args = {"--corrupt", NULL}}, /* offset: make_files */
	{.name = "flip", .kind = SHADY, .args = {"--corrupt", "1500"}},
	{.name = "noise_scan", .kind = SHADY, .args = {NULL}},
};
#define N_FILES (sizeof files / sizeof files[0])

static int failures;
static struct nvjd *dec;
static cudaStream_t stream;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("FAIL ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	failures++;
}

static bool cuda_ok(cudaError_t e, const char *call)
{
	if (e == cudaSuccess)
		return true;
	fail("%s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
	return false;
}

static struct file *file_named(const char *name)
{
	for (size_t i = 0; i < N_FILES; i++)
		if (strcmp(files[i].name, name) == 0)
			return &files[i];
	abort();
}

/* ---- making the files ------------------------------------------------------ */

static bool run_mkjpeg(const char *mkjpeg, const char *path, const char *const *args1,
		       const char *const *args2)
{
	const char *argv[32];
	size_t n = 0;
	argv[n++] = mkjpeg;
	argv[n++] = path;
	for (const char *const *a = args1; a && *a; a++)
		argv[n++] = *a;
	for (const char *const *a = args2; a && *a; a++)
		argv[n++] = *a;
	argv[n] = NULL;
	pid_t pid;
	int status = 0;
	if (posix_spawn(&pid, mkjpeg, NULL, NULL, (char *const *)argv, environ) != 0 ||
	    waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fail("%s %s ... did not make the file (status %#x)", mkjpeg, path, status);
		return false;
	}
	return true;
}

static uint8_t *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	if (!f || fstat(fileno(f), &st) != 0) {
		fail("cannot read %s", path);
		if (f)
			fclose(f);
		return NULL;
	}
	uint8_t *buf = malloc((size_t)st.st_size + 1);
	*len = fread(buf, 1, (size_t)st.st_size, f);
	fclose(f);
	return buf;
}

static bool files_only;

/* The file's bytes in page-locked memory (plain memory with --files-only). */
static bool hold(struct file *f, const uint8_t *bytes, size_t len)
{
	if (files_only)
		f->data = malloc(len ? len : 1);
	else if (!cuda_ok(cudaHostAlloc((void **)&f->data, len ? len : 1, cudaHostAllocDefault),
			  "cudaHostAlloc"))
		return false;
	memcpy(f->data, bytes, len);
	f->len = len;
	return true;
}

/* Offset of the first entropy-coded byte (after the SOS segment), or 0. */
static size_t scan_start(const uint8_t *d, size_t len)
{
	for (size_t i = 2; i + 4 <= len; i++)
		if (d[i] == 0xff && d[i + 1] == 0xda)
			return i + 2 + ((size_t)d[i + 2] << 8 | d[i + 3]);
	return 0;
}

/* An offset for mkjpeg --corrupt (which xors 0x5a into the byte that many
 * bytes into the scan) that makes a marker inside the scan: a 0xa5 (which
 * becomes 0xff) not after a 0xff, before a byte that no marker code is
 * (0x01..0xbf). In a static buffer; NULL if there is none. */
static const char *marker_offset(const struct file *f)
{
	static char text[24];
	size_t start = scan_start(f->data, f->len);
	for (size_t i = start + (f->len - start) / 3; start && i + 3 < f->len; i++)
		if (f->data[i] == 0xa5 && f->data[i - 1] != 0xff && f->data[i + 1] >= 0x01 &&
		    f->data[i + 1] <= 0xbf) {
			snprintf(text, sizeof text, "%zu", i - start);
			return text;
		}
	return NULL;
}

static bool make_files(const char *mkjpeg, const char *dir)
{
	static const char *const b420[] = {"--width", "257",    "--height", "191", "--subsamp",
					   "420",     "--seed", "3",        NULL};
	char path[4096];
	for (size_t i = 0; i < N_FILES; i++) {
		struct file *f = &files[i];
		snprintf(path, sizeof path, "%s/%s.jpg", dir, f->name);
		size_t len = 0;
		uint8_t *bytes = NULL;
		if (f->kind == GOOD || f->kind == MAYBE) {
			if (!run_mkjpeg(mkjpeg, path, f->args, NULL) ||
			    !(bytes = read_all(path, &len)))
				return false;
		} else if (f->args[0]) {
			if (strcmp(f->name, "corrupt") == 0 &&
			    !(f->args[1] = marker_offset(file_named("b420")))) {
				fail("b420.jpg has no byte that --corrupt turns into a marker");
				return false;
			}
			if (!run_mkjpeg(mkjpeg, path, b420, f->args) ||
			    !(bytes = read_all(path, &len)))
				return false;
		} else {
			/* From b420's bytes: cut inside the scan at 60%, random
			 * bytes, or its scan replaced by random bytes (no 0xff). */
			const struct file *base = file_named("b420");
			uint64_t x = 0x9e3779b97f4a7c15ull + i;
			len = strcmp(f->name, "cut_scan") == 0 ? base->len * 6 / 10 : base->len;
			bytes = malloc(len);
			memcpy(bytes, base->data, len);
			size_t from = strcmp(f->name, "not_jpeg") == 0 ? 0 : scan_start(bytes, len);
			size_t to = strcmp(f->name, "noise_scan") == 0 ? len - 2
				    : strcmp(f->name, "not_jpeg") == 0 ? len
								       : from;
			for (size_t j = from; j < to; j++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				bytes[j] = (uint8_t)(x % 255); /* never 0xff */
			}
		}
		if (!hold(f, bytes, len)) {
			free(bytes);
			return false;
		}
		free(bytes);
	}
	return true;
}

/* libjpeg's decode of every GOOD and MAYBE file (and whether libjpeg
 * rejects the corrupt one, so that it is corrupt in a way that shows). */
static bool reference_decodes(void)
{
	struct jd_scratch s = {0};
	char err[256];
	for (size_t i = 0; i < N_FILES; i++) {
		struct file *f = &files[i];
		bool damaged = strcmp(f->name, "corrupt") == 0 || strcmp(f->name, "flip") == 0;
		if (f->kind != GOOD && f->kind != MAYBE && !damaged)
			continue;
		uint32_t w = 0, h = 0;
		struct jd_image img;
		int rc = jd_header(f->data, f->len, &w, &h, err, sizeof err);
		if (rc == 0)
			rc = jd_decode_box(f->data, f->len, 0, 0, w, h, w, h, UINT64_C(1) << 30,
					   &img, &s, err, sizeof err);
		if (damaged) {
			printf("%s: libjpeg says %s\n", f->name, rc ? err : "nothing: it decodes");
			if (f->kind == BAD && rc == 0)
				fail("%s: libjpeg decodes it: not the damage meant", f->name);
			continue;
		}
		if (rc != 0 || img.w != w || img.h != h || img.x0 != 0 || img.y0 != 0) {
			fail("%s: libjpeg's decode: %s", f->name, rc ? err : "not the whole image");
			continue;
		}
		f->w = w;
		f->h = h;
		f->ref = malloc((size_t)w * h * 3);
		for (uint32_t y = 0; y < h; y++)
			memcpy(f->ref + (size_t)y * w * 3, img.rgb + y * img.stride, (size_t)w * 3);
	}
	jd_scratch_free(&s);
	return failures == 0;
}

/* ---- decoding and comparing ---------------------------------------------- */

struct job {
	struct file *f;
	uint32_t x, y, w, h; /* region, w == 0: whole */
	uint32_t given_w, given_h; /* struct nvjd_image's: 0, nvJPEG parses */
	uint8_t *dev;        /* device memory, pitch bytes a row */
	size_t pitch, bytes;
	uint8_t *host; /* what came back, out_w * 3 a row */
};

static void job_free(struct job *j)
{
	cudaFree(j->dev);
	free(j->host);
	memset(j, 0, sizeof *j);
}

/* Decodes jobs[0..n) as one batch: dst filled with 0xa5 first, the status of
 * each in imgs, the pixels of each decoded one in its host copy. -errno
 * when the batch could not be made or nvjd_decode failed as a whole. */
static int decode_jobs(struct job *jobs, struct nvjd_image *imgs, uint32_t n)
{
	memset(imgs, 0, n * sizeof *imgs);
	for (uint32_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		uint32_t w = j->w ? j->w : j->given_w ? j->given_w : (j->f->w ? j->f->w : 64),
			 h = j->w ? j->h : j->given_w ? j->given_h : (j->f->h ? j->f->h : 64);
		struct jh_info jh;
		char why[256];
		if (!j->w && !j->given_w && !j->f->w && jh_parse(j->f->data, j->f->len, &jh, why, sizeof why) == 0) {
			w = jh.width; /* a damaged file whose header still reads: room for it all */
			h = jh.height;
		}
		j->pitch = (size_t)w * 3 + 64;
		j->bytes = j->pitch * h;
		if (!cuda_ok(cudaMalloc((void **)&j->dev, j->bytes + GUARD), "cudaMalloc") ||
		    !cuda_ok(cudaMemset(j->dev, 0xa5, j->bytes + GUARD), "cudaMemset"))
			return -ENOMEM;
		imgs[i] = (struct nvjd_image){.data = j->f->data,
					      .len = j->f->len,
					      .scan_checked = j->given_w != 0,
					      .given_w = j->given_w,
					      .given_h = j->given_h,
					      .roi_x = j->x,
					      .roi_y = j->y,
					      .roi_w = j->w,
					      .roi_h = j->h,
					      .dst = j->dev,
					      .pitch = j->pitch,
					      .dst_bytes = j->bytes};
	}
	/* The fills are done before the engines may write (nvjd.h: each dst
	 * must be free when nvjd_decode is called). */
	if (!cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
		return -EIO;
	struct nvjd_stats before, after;
	nvjd_stats(dec, &before);
	int rc = nvjd_decode(dec, imgs, n, stream);
	char why[256];
	if (nvjd_wait(dec, why, sizeof why) != 0)
		fail("nvjd_wait: %s", why);
	nvjd_stats(dec, &after);
	if (n > 0 && rc == 0 && (after.calls != before.calls + 1 || after.images != before.images + n ||
				 after.check_ns <= before.check_ns))
		fail("nvjd_stats: %llu calls and %llu images after one call of %u, check_ns %llu -> "
		     "%llu", (unsigned long long)(after.calls - before.calls),
		     (unsigned long long)(after.images - before.images), n,
		     (unsigned long long)before.check_ns, (unsigned long long)after.check_ns);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t guard[GUARD];
		if (cuda_ok(cudaMemcpy(guard, jobs[i].dev + jobs[i].bytes, GUARD,
				       cudaMemcpyDeviceToHost), "cudaMemcpy") &&
		    (guard[0] != 0xa5 || memcmp(guard, guard + 1, GUARD - 1) != 0))
			fail("%s: written beyond its %zu bytes of destination", jobs[i].f->name,
			     jobs[i].bytes);
	}
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		struct job *j = &jobs[i];
		if (imgs[i].status != 0)
			continue;
		size_t row = (size_t)imgs[i].out_w * 3;
		j->host = malloc(row * imgs[i].out_h);
		cuda_ok(cudaMemcpy2D(j->host, row, j->dev, j->pitch, row, imgs[i].out_h,
				     cudaMemcpyDeviceToHost),
			"cudaMemcpy2D");
	}
	return rc;
}

/* Mean and maximum absolute difference of a w x h RGB block of a (stride
 * sa) and b (stride sb). */
static double mean_diff(const uint8_t *a, size_t sa, const uint8_t *b, size_t sb, uint32_t w,
			uint32_t h, int *max)
{
	uint64_t sum = 0;
	*max = 0;
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w * 3; x++) {
			int d = abs((int)a[y * sa + x] - (int)b[y * sb + x]);
			sum += (uint64_t)d;
			if (d > *max)
				*max = d;
		}
	return (double)sum / ((double)w * h * 3);
}

/* Checks a decoded job against libjpeg (and, for a region, against the
 * engines' own full decode); true when within tolerance. */
static bool compare(const char *what, const struct job *j, const struct nvjd_image *im)
{
	const struct file *f = j->f;
	if (im->width != f->w || im->height != f->h) {
		fail("%s %s: nvjd_decode says %u x %u, libjpeg %u x %u", what, f->name, im->width,
		     im->height, f->w, f->h);
		return false;
	}
	uint32_t w = j->w ? j->w : f->w, h = j->w ? j->h : f->h;
	if (im->out_w != w || im->out_h != h) {
		fail("%s %s: wrote %u x %u, expected %u x %u", what, f->name, im->out_w, im->out_h,
		     w, h);
		return false;
	}
	int max;
	const uint8_t *ref = f->ref + ((size_t)j->y * f->w + j->x) * 3;
	double mean = mean_diff(j->host, (size_t)w * 3, ref, (size_t)f->w * 3, w, h, &max);
	char own[64] = "";
	if (j->w && f->gpu_full) {
		int own_max;
		double own_mean = mean_diff(j->host, (size_t)w * 3,
					    f->gpu_full + ((size_t)j->y * f->w + j->x) * 3,
					    (size_t)f->w * 3, w, h, &own_max);
		snprintf(own, sizeof own, "; vs the engines' full decode mean %.3f max %d",
			 own_mean, own_max);
	}
	char region[64] = "";
	if (j->w)
		snprintf(region, sizeof region, " region (%u, %u) %u x %u", j->x, j->y, w, h);
	bool ok = mean <= TOLERANCE;
	printf("%s %s %s%s: %u x %u: vs libjpeg mean %.3f max %d%s\n", ok ? "ok  " : "FAIL", what,
	       f->name, region, f->w, f->h, mean, max, own);
	if (!ok)
		failures++;
	return ok;
}

/* ---- the checks -------------------------------------------------------------- */

static void check_full(void)
{
	struct job jobs[MAX_BATCH] = {0};
	struct nvjd_image imgs[MAX_BATCH];
	uint32_t n = 0;
	for (size_t i = 0; i < N_FILES; i++)
		if (files[i].kind == GOOD || files[i].kind == MAYBE)
			jobs[n++] = (struct job){.f = &files[i]};
	int rc = decode_jobs(jobs, imgs, n);
	if (rc != 0) {
		fail("full decode: nvjd_decode returned %d (%s)", rc, imgs[0].err);
		goto free_jobs;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct file *f = jobs[i].f;
		struct nvjd_header hd;
		char err[256];
		if (nvjd_image_info(dec, f->data, f->len, &hd, err, sizeof err) != 0)
			fail("nvjd_image_info %s: %s", f->name, err);
		else if (hd.width != f->w || hd.height != f->h)
			fail("nvjd_image_info %s: %u x %u, libjpeg %u x %u", f->name, hd.width,
			     hd.height, f->w, f->h);
		else
			printf("info %s: %u x %u, %d components, %s\n", f->name, hd.width,
			       hd.height, hd.components, hd.subsampling);
		/* The project's own header reader's prediction of what the engines
		 * take (image/jpeghdr.h), against what they did: printed. */
		struct jh_info jh;
		const char *refusal = jh_parse(f->data, f->len, &jh, err, sizeof err) == 0
					      ? jh_gpu_refusal(&jh, f->len, NULL)
					      : "no header";
		bool took = imgs[i].status == 0;
		printf("%s jpeghdr %s: %s%s; nvjd %s\n", took == !refusal ? "ok  " : "note",
		       f->name, refusal ? "refuses: " : "takes it", refusal ? refusal : "",
		       took ? "decoded it" : "did not");
		if (imgs[i].status == 0) {
			if (compare("full", &jobs[i], &imgs[i]) && f->kind == GOOD) {
				f->gpu_full = jobs[i].host;
				jobs[i].host = NULL;
			}
		} else if (f->kind == MAYBE && imgs[i].status == -ENOTSUP && imgs[i].err[0]) {
			printf("ok   full %s: -ENOTSUP: %s\n", f->name, imgs[i].err);
		} else {
			fail("full %s: status %d (%s)", f->name, imgs[i].status, imgs[i].err);
		}
	}
free_jobs:
	for (uint32_t i = 0; i < n; i++)
		job_free(&jobs[i]);
}

/* The same full decodes by a decoder that repeats chroma samples (no
 * NVJD_SMOOTH_UPSAMPLING): how far that is from libjpeg, printed only. */
static void note_plain_upsampling(int device)
{
	struct nvjd *smooth = dec, *plain = NULL;
	char why[256];
	struct nvjd_info info;
	nvjd_info(dec, &info);
	if (!(info.flags & NVJD_SMOOTH_UPSAMPLING) ||
	    nvjd_open(device, MAX_BATCH, 0, &plain, why, sizeof why) != 0)
		return;
	struct job jobs[MAX_BATCH] = {0};
	struct nvjd_image imgs[MAX_BATCH];
	uint32_t n = 0;
	for (size_t i = 0; i < N_FILES; i++)
		if (files[i].kind == GOOD && files[i].ref)
			jobs[n++] = (struct job){.f = &files[i]};
	dec = plain;
	if (decode_jobs(jobs, imgs, n) == 0)
		for (uint32_t i = 0; i < n; i++) {
			const struct file *f = jobs[i].f;
			if (imgs[i].status != 0) {
				printf("note plain %s: status %d (%s)\n", f->name, imgs[i].status,
				       imgs[i].err);
				continue;
			}
			int max;
			double mean = mean_diff(jobs[i].host, (size_t)f->w * 3, f->ref,
						(size_t)f->w * 3, f->w, f->h, &max);
			printf("note plain %s: without smooth upsampling: vs libjpeg mean %.3f max "
			       "%d\n",
			       f->name, mean, max);
		}
	dec = smooth;
	for (uint32_t i = 0; i < n; i++)
		job_free(&jobs[i]);
	nvjd_close(plain);
}

static void check_regions(void)
{
	struct job jobs[MAX_BATCH] = {0};
	struct nvjd_image imgs[MAX_BATCH];
	uint32_t n = 0;
	for (size_t i = 0; i < N_FILES; i++) {
		struct file *f = &files[i];
		if (f->kind != GOOD || !f->ref)
			continue;
		uint32_t w = f->w / 2 + 1, h = f->h / 3 + 3;
		jobs[n++] = (struct job){.f = f, .x = f->w / 5, .y = f->h / 7, .w = w, .h = h};
		jobs[n++] = (struct job){.f = f, .x = f->w - w, .y = f->h - h, .w = w, .h = h};
	}
	int rc = decode_jobs(jobs, imgs, n);
	if (rc != 0)
		fail("regions: nvjd_decode returned %d (%s)", rc, imgs[0].err);
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		if (imgs[i].status != 0)
			fail("region of %s: status %d (%s)", jobs[i].f->name, imgs[i].status,
			     imgs[i].err);
		else
			compare("roi ", &jobs[i], &imgs[i]);
	}
	for (uint32_t i = 0; i < n; i++)
		job_free(&jobs[i]);
}

/* A batch of good and bad images: each bad one has its status, every good
 * one its pixels. */
static void check_mixed(int round)
{
	static const char *const order[] = {
		"b444",       "cut_scan", "b422",   "gray", "corrupt", "b420",        "cut_header",
		"noise_scan", "not_jpeg", "rst420", "flip", "b440",    "progressive", "outside"};
	enum { N = sizeof order / sizeof order[0] };
	struct job jobs[N] = {0};
	struct nvjd_image imgs[N];
	for (uint32_t i = 0; i < N; i++) {
		bool outside = strcmp(order[i], "outside") == 0;
		jobs[i] = (struct job){.f = file_named(outside ? "q50" : order[i])};
		if (outside) /* one column past the right edge */
			jobs[i].x = jobs[i].f->w / 2, jobs[i].y = 0,
			jobs[i].w = jobs[i].f->w / 2 + 1, jobs[i].h = 8;
	}
	int rc = decode_jobs(jobs, imgs, N);
	if (rc != 0)
		fail("mixed batch %d: nvjd_decode returned %d (%s)", round, rc, imgs[0].err);
	char what[32];
	snprintf(what, sizeof what, "mixed%d", round);
	for (uint32_t i = 0; i < N && rc == 0; i++) {
		const struct file *f = jobs[i].f;
		const struct nvjd_image *im = &imgs[i];
		bool has_text = im->err[0] != '\0';
		if (strcmp(order[i], "outside") == 0) {
			if (im->status == -EINVAL && has_text)
				printf("ok   %s outside region: -EINVAL: %s\n", what, im->err);
			else
				fail("%s outside region: status %d (%s)", what, im->status,
				     im->err);
		} else if (f->kind == GOOD) {
			if (im->status != 0)
				fail("%s %s: status %d (%s)", what, f->name, im->status, im->err);
			else if (compare(what, &jobs[i], im) && f->gpu_full &&
				 memcmp(jobs[i].host, f->gpu_full, (size_t)f->w * f->h * 3) != 0)
				printf("note %s %s: not byte-identical to its decode in check 1\n",
				       what, f->name);
		} else if (f->kind == MAYBE) {
			if (im->status == 0)
				compare(what, &jobs[i], im);
			else if (im->status != -ENOTSUP)
				fail("%s %s: status %d (%s)", what, f->name, im->status, im->err);
		} else if (f->kind == BAD) {
			/* -ENOTSUP sends it to the CPU decoder, which refuses it: as good */
			if ((im->status == -EBADMSG || im->status == -ENOTSUP) && has_text)
				printf("ok   %s %s: %s: %s\n", what, f->name,
				       im->status == -EBADMSG ? "-EBADMSG" : "-ENOTSUP", im->err);
			else
				fail("%s %s: status %d (%s), expected -EBADMSG or -ENOTSUP", what,
				     f->name, im->status, im->err);
		} else if (im->status == -EBADMSG && has_text) {
			printf("ok   %s %s: -EBADMSG: %s\n", what, f->name, im->err);
		} else if (im->status == 0) {
			printf("note %s %s: decoded without an error: the engines did not report "
			       "it\n",
			       what, f->name);
		} else {
			fail("%s %s: status %d (%s)", what, f->name, im->status, im->err);
		}
	}
	for (uint32_t i = 0; i < N; i++)
		job_free(&jobs[i]);
}

static void check_edges(void)
{
	struct job jobs[4] = {{.f = file_named("cut_scan")},
			      {.f = file_named("not_jpeg")},
			      {.f = file_named("cut_header")}};
	struct nvjd_image imgs[4];
	int rc = decode_jobs(jobs, imgs, 3);
	bool ok = rc == 0 && imgs[0].status == -EBADMSG && imgs[1].status == -EBADMSG &&
		  imgs[2].status == -EBADMSG;
	printf("%s a batch of bad images only: %d, statuses %d %d %d\n", ok ? "ok  " : "FAIL", rc,
	       imgs[0].status, imgs[1].status, imgs[2].status);
	failures += !ok;
	for (int i = 0; i < 3; i++)
		job_free(&jobs[i]);
	rc = nvjd_decode(dec, imgs, 0, stream);
	printf("%s an empty batch: %d\n", rc == 0 ? "ok  " : "FAIL", rc);
	failures += rc != 0;
	rc = nvjd_decode(dec, imgs, MAX_BATCH + 1, stream);
	printf("%s a batch over max_batch: %d\n", rc == -EINVAL ? "ok  " : "FAIL", rc);
	failures += rc != -EINVAL;
}

/* 6: sizes given, as the daemon's workers give them. */
static void check_given(void)
{
	struct job jobs[MAX_BATCH] = {0};
	struct nvjd_image imgs[MAX_BATCH];
	uint32_t n = 0;
	for (size_t i = 0; i < N_FILES; i++) {
		struct file *f = &files[i];
		if ((f->kind == GOOD || f->kind == MAYBE) && f->ref)
			jobs[n++] = (struct job){.f = f, .given_w = f->w, .given_h = f->h};
	}
	struct file *small = file_named("b420"), *large = file_named("q50");
	uint32_t n_true = n;
	jobs[n++] = (struct job){.f = small, .given_w = small->w - 9, .given_h = small->h - 7};
	jobs[n++] = (struct job){.f = large, .given_w = large->w + 16, .given_h = large->h + 16};
	int rc = decode_jobs(jobs, imgs, n);
	if (rc != 0)
		fail("given sizes: nvjd_decode returned %d (%s)", rc, imgs[0].err);
	for (uint32_t i = 0; i < n_true && rc == 0; i++) {
		const struct file *f = jobs[i].f;
		const struct nvjd_image *im = &imgs[i];
		if (im->status == 0) {
			if (compare("given", &jobs[i], im) && f->gpu_full &&
			    memcmp(jobs[i].host, f->gpu_full, (size_t)f->w * f->h * 3) != 0)
				printf("note given %s: not byte-identical to its decode in check 1\n",
				       f->name);
		} else if (f->kind == MAYBE && im->err[0]) {
			printf("ok   given %s: %d, split down to it: %s\n", f->name, im->status,
			       im->err);
		} else {
			fail("given %s: status %d (%s)", f->name, im->status, im->err);
		}
	}
	for (uint32_t i = n_true; i < n && rc == 0; i++) {
		const struct job *j = &jobs[i];
		const struct nvjd_image *im = &imgs[i];
		const char *what = i == n_true ? "smaller" : "larger";
		if (im->status != 0 && im->err[0]) {
			printf("ok   given %s %u x %u for %s %u x %u: %d: %s\n", what, j->given_w,
			       j->given_h, j->f->name, j->f->w, j->f->h, im->status, im->err);
		} else if (im->status == 0 && im->out_w <= j->given_w && im->out_h <= j->given_h) {
			int max;
			uint32_t w = im->out_w < j->f->w ? im->out_w : j->f->w,
				 h = im->out_h < j->f->h ? im->out_h : j->f->h;
			double mean = mean_diff(j->host, (size_t)im->out_w * 3, j->f->ref,
						(size_t)j->f->w * 3, w, h, &max);
			printf("%s given %s %u x %u for %s %u x %u: wrote %u x %u, its top-left "
			       "%u x %u vs libjpeg mean %.3f max %d\n", i == n_true ? "ok  " : "note",
			       what, j->given_w, j->given_h, j->f->name, j->f->w, j->f->h,
			       im->out_w, im->out_h, w, h, mean, max);
		} else {
			fail("given %s %u x %u for %s: status %d, wrote %u x %u (%s)", what,
			     j->given_w, j->given_h, j->f->name, im->status, im->out_w, im->out_h,
			     im->err);
		}
	}
	for (uint32_t i = 0; i < n; i++)
		job_free(&jobs[i]);
}

/* The planes class of a header the GPU takes (nvjd.h), else NONE. */
static enum nvjd_planes planes_of(const struct jh_info *jh)
{
	if (jh->components == 1)
		return NVJD_PLANES_GRAY;
	switch (jh->subsamp) {
	case JH_444: return NVJD_PLANES_444;
	case JH_422: return NVJD_PLANES_422;
	case JH_420: return NVJD_PLANES_420;
	case JH_440: return NVJD_PLANES_440;
	default: return NVJD_PLANES_NONE;
	}
}

/* 7: planes, converted on the host as the daemon's kernel converts them. */
static void check_planes(int device)
{
	struct nvjd *yuv = NULL;
	char why[256];
	if (nvjd_open(device, MAX_BATCH, NVJD_OUTPUT_YUV, &yuv, why, sizeof why) != 0) {
		fail("nvjd_open with NVJD_OUTPUT_YUV: %s", why);
		return;
	}
	struct nvjd_image imgs[MAX_BATCH];
	struct file *took[MAX_BATCH];
	uint8_t *dev[MAX_BATCH] = {0};
	uint64_t bytes[MAX_BATCH];
	uint32_t n = 0;
	memset(imgs, 0, sizeof imgs);
	for (size_t i = 0; i < N_FILES; i++) {
		struct file *f = &files[i];
		struct jh_info jh;
		if (!f->ref || jh_parse(f->data, f->len, &jh, why, sizeof why) != 0 ||
		    jh_gpu_refusal(&jh, f->len, NULL) || planes_of(&jh) == NVJD_PLANES_NONE)
			continue;
		enum nvjd_planes planes = planes_of(&jh);
		bytes[n] = nvjd_planes_layout(planes, f->w, f->h, NULL, NULL);
		if (!cuda_ok(cudaMalloc((void **)&dev[n], bytes[n] + GUARD), "cudaMalloc") ||
		    !cuda_ok(cudaMemset(dev[n], 0xa5, bytes[n] + GUARD), "cudaMemset"))
			goto out;
		imgs[n] = (struct nvjd_image){.data = f->data, .len = f->len, .scan_checked = true,
					      .given_w = f->w, .given_h = f->h, .planes = planes,
					      .dst = dev[n], .pitch = f->w, .dst_bytes = bytes[n]};
		took[n++] = f;
	}
	/* Two the decoder must refuse: no subsampling given, and a region. */
	uint32_t n_good = n;
	struct file *b420 = file_named("b420");
	imgs[n] = (struct nvjd_image){.data = b420->data, .len = b420->len, .given_w = b420->w,
				      .given_h = b420->h, .dst = dev[0], .pitch = b420->w * 3,
				      .dst_bytes = bytes[0]};
	took[n++] = b420;
	imgs[n] = imgs[n - 1];
	imgs[n].planes = NVJD_PLANES_420;
	imgs[n].roi_w = imgs[n].roi_h = 16;
	took[n++] = b420;
	if (!cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
		goto out;
	int rc = nvjd_decode(yuv, imgs, n, stream);
	if (rc != 0 || nvjd_wait(yuv, why, sizeof why) != 0) {
		fail("planes: nvjd_decode returned %d (%s)", rc, imgs[0].err);
		goto out;
	}
	for (uint32_t i = n_good; i < n; i++) {
		bool ok = imgs[i].status == -EINVAL && imgs[i].err[0];
		printf("%s planes %s %s: %d: %s\n", ok ? "ok  " : "FAIL", took[i]->name,
		       i == n_good ? "without its subsampling" : "with a region", imgs[i].status,
		       imgs[i].err);
		failures += !ok;
	}
	for (uint32_t i = 0; i < n_good; i++) {
		struct file *f = took[i];
		uint8_t *host = malloc(bytes[i] + GUARD), *rgb = malloc((size_t)f->w * f->h * 3);
		if (imgs[i].status != 0 || !host || !rgb ||
		    !cuda_ok(cudaMemcpy(host, dev[i], bytes[i] + GUARD, cudaMemcpyDeviceToHost),
			     "cudaMemcpy")) {
			fail("planes %s: status %d (%s)", f->name, imgs[i].status, imgs[i].err);
			free(host);
			free(rgb);
			continue;
		}
		if (host[bytes[i]] != 0xa5 || memcmp(host + bytes[i], host + bytes[i] + 1, GUARD - 1))
			fail("planes %s: written beyond its %" PRIu64 " bytes", f->name, bytes[i]);
		uint64_t at[3], pitch[3];
		nvjd_planes_layout(imgs[i].planes, f->w, f->h, at, pitch);
		enum nvjd_planes pl = imgs[i].planes;
		struct yuv_planes p = {.plane = {host + at[0], host + at[1], host + at[2]},
				       .pitch = {pitch[0], pitch[1], pitch[2]}, .w = f->w, .h = f->h,
				       .sh = pl == NVJD_PLANES_422 || pl == NVJD_PLANES_420 ? 2 : 1,
				       .sv = pl == NVJD_PLANES_420 || pl == NVJD_PLANES_440 ? 2 : 1,
				       .gray = pl == NVJD_PLANES_GRAY};
		for (uint32_t y = 0; y < f->h; y++)
			for (uint32_t x = 0; x < f->w; x++)
				yuv_pixel(&p, 1, x, y, rgb + ((size_t)y * f->w + x) * 3);
		int max;
		double mean = mean_diff(rgb, (size_t)f->w * 3, f->ref, (size_t)f->w * 3, f->w, f->h,
					&max);
		bool ok = mean <= TOLERANCE;
		printf("%s planes %s: %u x %u: vs libjpeg mean %.3f max %d\n", ok ? "ok  " : "FAIL",
		       f->name, f->w, f->h, mean, max);
		failures += !ok;
		free(host);
		free(rgb);
	}
out:
	for (uint32_t i = 0; i < MAX_BATCH; i++)
		cudaFree(dev[i]);
	nvjd_close(yuv);
}

static int usage(const char *msg)
{
	fprintf(stderr,
		"nvjd_check: %s\nusage: nvjd_check --mkjpeg PATH --dir DIR [--lib LIBNVJPEG] "
		"[--device N] [--files-only]\n",
		msg);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	const char *mkjpeg = NULL, *dir = NULL, *lib = NULL;
	int device = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--files-only") == 0) {
			files_only = true;
			continue;
		}
		if (i + 1 >= argc)
			return usage("an option lacks its value");
		if (strcmp(argv[i], "--mkjpeg") == 0)
			mkjpeg = argv[++i];
		else if (strcmp(argv[i], "--dir") == 0)
			dir = argv[++i];
		else if (strcmp(argv[i], "--lib") == 0)
			lib = argv[++i][0] ? argv[i] : NULL;
		else if (strcmp(argv[i], "--device") == 0)
			device = atoi(argv[++i]);
		else
			return usage("unknown option");
	}
	if (!mkjpeg || !dir)
		return usage("--mkjpeg and --dir are required");
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (files_only) {
		mkdir(dir, 0755);
		if (!make_files(mkjpeg, dir) || !reference_decodes())
			return EXIT_FAIL;
		for (size_t i = 0; i < N_FILES; i++) {
			char err[160] = "";
			jh_check_scan(files[i].data, files[i].len, err, sizeof err);
			printf("%s: %zu bytes%s%s\n", files[i].name, files[i].len,
			       err[0] ? ": " : "", err);
		}
		return 0;
	}
	char text[256];
	if (nvjd_load(lib, text, sizeof text) != 0) {
		printf("nvjd_check: skipped: %s\n", text);
		return EXIT_SKIP;
	}
	printf("%s\n", text);
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
		printf("nvjd_check: skipped: no GPU %d here\n", device);
		return EXIT_SKIP;
	}
	int rc = nvjd_open(device, MAX_BATCH, NVJD_SMOOTH_UPSAMPLING, &dec, text, sizeof text);
	if (rc == -ENOTSUP) {
		printf("note nvjd_open with NVJD_SMOOTH_UPSAMPLING: %s; again without\n", text);
		rc = nvjd_open(device, MAX_BATCH, 0, &dec, text, sizeof text);
	}
	if (rc == -ENOTSUP) {
		printf("nvjd_check: skipped: %s\n", text);
		return EXIT_SKIP;
	}
	if (rc != 0) {
		printf("FAIL nvjd_open: %s\n", text);
		return EXIT_FAIL;
	}
	struct nvjd_info info;
	nvjd_info(dec, &info);
	printf("GPU %d: %u JPEG engines, %u cores each\n", info.device, info.engines,
	       info.cores_per_engine);
	mkdir(dir, 0755);
	if (!cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
		     "cudaStreamCreateWithFlags") ||
	    !make_files(mkjpeg, dir) || !reference_decodes())
		return EXIT_FAIL;

	check_full();
	note_plain_upsampling(device);
	check_regions();
	check_mixed(1);
	check_mixed(2);
	check_edges();
	check_given();
	check_planes(device);

	nvjd_close(dec);
	cudaStreamDestroy(stream);
	for (size_t i = 0; i < N_FILES; i++) {
		cudaFreeHost(files[i].data);
		free(files[i].ref);
		free(files[i].gpu_full);
	}
	printf("nvjd_check: %s (%d failure%s)\n", failures ? "FAILED" : "passed", failures,
	       failures == 1 ? "" : "s");
	return failures ? EXIT_FAIL : 0;
}
