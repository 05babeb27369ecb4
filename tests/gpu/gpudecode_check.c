/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpudecode_check: the GPU decoding library (gpudecode/gpudecode.h) alone,
 * linked as the client library would link it, beside the client's own
 * library (loaderd_client) and nothing of the daemon:
 *
 *   gpudecode_check --mkjpeg PATH --dir DIR [--lib LIBNVJPEG] [--device N]
 *
 * Makes a few JPEGs with the project's mkjpeg (libjpeg's compressor):
 * baseline 4:2:0, 4:4:4 and gray, which the engines take, and a
 * progressive one, which they refuse; plans each for a 64 x 64
 * random_resized_crop with flip as a worker would (image/transform.h);
 * decodes them as one batch through gd_decode_batch, and checks that each
 * image has the status it should (GPU, or CPU for the progressive one),
 * that the CPU one is byte for byte what the workers' path
 * (image/image_sample.h, libjpeg) makes, and that the GPU ones are within
 * a small mean difference of it (the two decoders' IDCTs differ).
 * Exits 77 without a GPU, without nvJPEG or without hardware engines.
 */
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include "gpudecode/gpudecode.h"
#include "image/image_sample.h"
#include "image/jpeghdr.h"
#include "loaderd.h" /* client/: the library this one goes beside */
#include "proto/proto.h"

#define SKIP 77
#define N_FILES 4
#define OUT 64

extern char **environ;

static bool make(const char *mkjpeg, const char *path, const char *const *args)
{
	const char *argv[16];
	int n = 0;
	argv[n++] = mkjpeg;
	argv[n++] = path;
	for (; *args; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	pid_t pid;
	int status = 0;
	return posix_spawn(&pid, mkjpeg, NULL, NULL, (char *const *)argv, environ) == 0 &&
	       waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = n > 0 ? malloc((size_t)n) : NULL;
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

int main(int argc, char **argv)
{
	const char *mkjpeg = NULL, *dir = NULL, *lib = NULL;
	int device = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mkjpeg"))
			mkjpeg = argv[i + 1];
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--lib"))
			lib = argv[i + 1][0] ? argv[i + 1] : NULL;
		else if (!strcmp(argv[i], "--device"))
			device = atoi(argv[i + 1]);
	}
	if (!mkjpeg || !dir) {
		fprintf(stderr, "usage: gpudecode_check --mkjpeg PATH --dir DIR [--lib LIBNVJPEG] "
				"[--device N]\n");
		return 2;
	}
	/* The client library, linked beside this one as in a training: one
	 * of its calls referenced, so that the link must resolve both */
	const char *(*client_error)(const struct ldr_client *) = ldr_error;
	printf("gpudecode_check: beside the client library (%s)\n",
	       client_error ? "linked" : "missing");
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev <= device) {
		printf("gpudecode_check: skipped: no GPU %d\n", device);
		return SKIP;
	}
	char why[512];
	if (nvjd_load(lib, why, sizeof(why)) < 0) {
		printf("gpudecode_check: skipped: %s\n", why);
		return SKIP;
	}
	struct gd_options o = {.device = device, .max_batch = N_FILES, .memory_bytes = 256ull << 20,
			       .memory_what = "the test's decoder memory"};
	struct gd *g = NULL;
	int rc = gd_open(&o, &g, why, sizeof(why));
	if (rc == -ENOTSUP || rc == -ENODEV) {
		printf("gpudecode_check: skipped: %s\n", why);
		return SKIP;
	}
	if (rc < 0) {
		fprintf(stderr, "gpudecode_check: gd_open: %s\n", why);
		return 1;
	}
	mkdir(dir, 0755);
	static const char *const kinds[N_FILES][12] = {
		{"--width", "301", "--height", "211", "--subsamp", "420", "--pattern", "photo", NULL},
		{"--width", "160", "--height", "240", "--subsamp", "444", "--pattern", "photo", NULL},
		{"--width", "257", "--height", "129", "--gray", "--pattern", "photo", NULL},
		{"--width", "200", "--height", "150", "--progressive", "--pattern", "photo", NULL},
	};
	const enum gd_status want[N_FILES] = {GD_GPU, GD_GPU, GD_GPU, GD_CPU};

	struct arena_image_params params = {.seed = 7, .max_pixels = 1u << 26, .out_h = OUT,
					    .out_w = OUT, .layout = 1, .dtype = PROTO_DTYPE_UINT8,
					    .mean = {0, 0, 0}, .std = {1, 1, 1}, .max_decode_ms = 10000};
	snprintf(params.transform, sizeof(params.transform), "random_resized_crop(%d) hflip(0.5)", OUT);
	struct image_sampler cpu;
	uint64_t row_bytes = 0;
	if (image_sampler_init(&cpu, &params, &row_bytes) < 0) {
		fprintf(stderr, "gpudecode_check: image_sampler_init failed\n");
		return 1;
	}
	struct gd_image imgs[N_FILES];
	uint8_t *jpegs[N_FILES];
	for (int i = 0; i < N_FILES; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%d.jpg", dir, i);
		size_t len = 0;
		struct jh_info info;
		char err[64];
		if (!make(mkjpeg, path, kinds[i]) || !(jpegs[i] = slurp(path, &len)) ||
		    jh_parse(jpegs[i], len, &info, err, sizeof(err)) != 0) {
			fprintf(stderr, "gpudecode_check: %s: not made or not read\n", path);
			return 1;
		}
		struct tf_plan plan;
		tf_plan_sample(&cpu.chain, params.seed, 1, (uint64_t)i, info.width, info.height, &plan);
		imgs[i] = (struct gd_image){.jpeg = jpegs[i], .len = len, .width = info.width,
					    .height = info.height, .x = plan.x, .y = plan.y,
					    .w = plan.w, .h = plan.h, .flip = plan.flip, .epoch = 1,
					    .sample = (uint64_t)i, .dst_offset = (uint64_t)i * row_bytes,
					    .luma_h = info.components == 3 ? info.h[0] : 1,
					    .luma_v = info.components == 3 ? info.v[0] : 1};
	}
	uint8_t *dst = NULL, *host = malloc(N_FILES * row_bytes), *ref = malloc(row_bytes);
	cudaStream_t stream = NULL;
	if (!host || !ref || cudaSetDevice(device) != cudaSuccess ||
	    cudaMalloc((void **)&dst, N_FILES * row_bytes) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
		fprintf(stderr, "gpudecode_check: out of memory\n");
		return 1;
	}
	struct gd_batch b = {.imgs = imgs, .n = N_FILES, .cpu = &cpu, .dst = dst,
			     .dst_bytes = N_FILES * row_bytes, .row_bytes = row_bytes,
			     .stream = stream, .stop_at_bad = true};
	rc = gd_decode_batch(g, &b, why, sizeof(why));
	if (rc < 0 || cudaMemcpyAsync(host, dst, N_FILES * row_bytes, cudaMemcpyDeviceToHost,
				      stream) != cudaSuccess ||
	    cudaStreamSynchronize(stream) != cudaSuccess) {
		fprintf(stderr, "gpudecode_check: gd_decode_batch: %d %s\n", rc, why);
		return 1;
	}
	int failures = 0;
	for (int i = 0; i < N_FILES; i++) {
		if (image_sample(&cpu, imgs[i].jpeg, imgs[i].len, 1, (uint64_t)i, ref) < 0) {
			fprintf(stderr, "gpudecode_check: image %d: the CPU path refused it\n", i);
			return 1;
		}
		double sum = 0;
		const uint8_t *got = host + (uint64_t)i * row_bytes;
		for (uint64_t k = 0; k < row_bytes; k++)
			sum += fabs((double)got[k] - ref[k]);
		double mean = sum / (double)row_bytes;
		bool ok = imgs[i].status == want[i] &&
			  (want[i] == GD_CPU ? memcmp(got, ref, row_bytes) == 0 : mean < 3.0);
		printf("gpudecode_check: image %d: status %d (want %d), mean difference %.3f%s%s\n", i,
		       (int)imgs[i].status, (int)want[i], mean, imgs[i].err[0] ? ": " : "",
		       imgs[i].err);
		failures += !ok;
	}
	printf("gpudecode_check: %llu on the engines, %llu parts\n",
	       (unsigned long long)b.stats.gpu, (unsigned long long)b.stats.parts);
	gd_close(g);
	cudaFree(dst);
	cudaStreamDestroy(stream);
	image_sampler_free(&cpu);
	for (int i = 0; i < N_FILES; i++)
		free(jpegs[i]);
	free(host);
	free(ref);
	printf("gpudecode_check: %s\n", failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}
