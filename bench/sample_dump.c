/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-sample-dump: what the workers make of each of some JPEG files
 * under an image pipeline's transform, with the crop box and the DCT scale
 * they chose, for comparisons against another decoder (bench/fidelity.py
 * against torchvision).
 *
 *   loaderd-sample-dump --transform TEXT [--seed S] [--epoch E]
 *                       [--decode-scale fast|full] --out FILE.rgb JPEG...
 *
 * Sample i is the i-th JPEG (from 0), drawn for (seed, epoch, i) as a
 * pipeline with that seed draws its sample i, and made as
 * image_sample() makes it (image/image_sample.c: header, tf_plan_sample,
 * jd_decode_box with the pipeline's decode_scale, rs_resize_rgb with the
 * plan's flip), kept as uint8 RGB, height x width x 3, before any layout
 * or dtype. The samples are written one after another to FILE.rgb, and
 * for each a line on stdout:
 *
 *   JPEG W H x=X y=Y w=BW h=BH out=OW:OH scale=M flip=F
 *
 * W x H the image's size, (X, Y, BW, BH) the plan's box in source pixels
 * (exactly, %.17g), M the DCT scale's M of M/8 it was decoded at, F 0 or 1.
 * Exit codes: 0; 1 a file that cannot be read or decoded (the message
 * names it); 2 a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/jpeg.h"
#include "image/resize.h"
#include "image/transform.h"

#define EXIT_USAGE 2
#define SAMPLE_MAX_PIXELS (1ull << 32)
#define SAMPLE_FILE_MAX (256u << 20)
#define ERR_TEXT 256

static void usage(void)
{
	fprintf(stderr, "usage: loaderd-sample-dump --transform TEXT [--seed S] [--epoch E] "
			"[--decode-scale fast|full] --out FILE.rgb JPEG...\n");
}

/* The whole of path into a fresh buffer (*data, *len). 0 or -errno. */
static int read_file(const char *path, uint8_t **data, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	struct stat st;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto close_fd;
	}
	if (st.st_size <= 0 || (uint64_t)st.st_size > SAMPLE_FILE_MAX) {
		rc = -EFBIG;
		goto close_fd;
	}
	uint8_t *buf = malloc((size_t)st.st_size);
	if (!buf) {
		rc = -ENOMEM;
		goto close_fd;
	}
	size_t n = 0;
	while (n < (size_t)st.st_size) {
		ssize_t got = read(fd, buf + n, (size_t)st.st_size - n);
		if (got <= 0) {
			rc = got < 0 ? -errno : -EIO;
			goto free_buf;
		}
		n += (size_t)got;
	}
	*data = buf;
	*len = n;
	close(fd);
	return 0;
free_buf:
	free(buf);
close_fd:
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	const char *transform = NULL, *out_path = NULL;
	uint64_t seed = 0, epoch = 0;
	uint32_t scale = JD_SCALE_FAST;
	static const struct option opts[] = {
		{"transform", required_argument, NULL, 't'}, {"seed", required_argument, NULL, 's'},
		{"epoch", required_argument, NULL, 'e'}, {"decode-scale", required_argument, NULL, 'd'},
		{"out", required_argument, NULL, 'o'}, {NULL, 0, NULL, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 't': transform = optarg; break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'e': epoch = strtoull(optarg, NULL, 0); break;
		case 'o': out_path = optarg; break;
		case 'd':
			if (strcmp(optarg, "fast") == 0) {
				scale = JD_SCALE_FAST;
			} else if (strcmp(optarg, "full") == 0) {
				scale = JD_SCALE_FULL;
			} else {
				fprintf(stderr, "loaderd-sample-dump: --decode-scale: \"%s\" is not fast "
						"or full\n", optarg);
				return EXIT_USAGE;
			}
			break;
		default: usage(); return EXIT_USAGE;
		}
	}
	if (!transform || !out_path || optind >= argc) {
		usage();
		return EXIT_USAGE;
	}
	char err[ERR_TEXT];
	struct tf_chain chain;
	if (tf_parse(transform, &chain, err, sizeof(err)) < 0) {
		fprintf(stderr, "loaderd-sample-dump: --transform: %s\n", err);
		return EXIT_USAGE;
	}
	FILE *out = fopen(out_path, "wbe");
	if (!out) {
		fprintf(stderr, "loaderd-sample-dump: %s: %s\n", out_path, strerror(errno));
		return 1;
	}
	int status = 0;
	struct jd_scratch jd = {.scale = scale};
	struct rs_scratch rs = {0};
	uint8_t *rgb = malloc((size_t)chain.out_w * chain.out_h * 3);
	if (!rgb) {
		fprintf(stderr, "loaderd-sample-dump: out of memory\n");
		status = 1;
		goto close_out;
	}
	for (int i = optind; i < argc && status == 0; i++) {
		const char *path = argv[i];
		uint8_t *data = NULL;
		size_t len = 0;
		int rc = read_file(path, &data, &len);
		if (rc < 0) {
			fprintf(stderr, "loaderd-sample-dump: %s: %s\n", path, strerror(-rc));
			status = 1;
			break;
		}
		uint32_t w, h;
		struct tf_plan plan;
		struct jd_image img;
		rc = jd_header(data, len, &w, &h, err, sizeof(err));
		if (rc == 0) {
			tf_plan_sample(&chain, seed, epoch, (uint64_t)(i - optind), w, h, &plan);
			rc = jd_decode_box(data, len, plan.x, plan.y, plan.w, plan.h, plan.out_w,
					   plan.out_h, SAMPLE_MAX_PIXELS, &img, &jd, err, sizeof(err));
		}
		if (rc == 0) {
			rc = rs_resize_rgb(img.rgb, img.w, img.h, img.stride, plan.x * img.sx - img.x0,
					   plan.y * img.sy - img.y0, plan.w * img.sx, plan.h * img.sy,
					   rgb, plan.out_w, plan.out_h, (size_t)plan.out_w * 3, plan.flip,
					   &rs);
			if (rc < 0)
				snprintf(err, sizeof(err), "resize: %s", strerror(-rc));
		}
		free(data);
		if (rc < 0) {
			fprintf(stderr, "loaderd-sample-dump: %s: %s\n", path, err);
			status = 1;
			break;
		}
		size_t bytes = (size_t)plan.out_w * plan.out_h * 3;
		if (fwrite(rgb, 1, bytes, out) != bytes) {
			fprintf(stderr, "loaderd-sample-dump: %s: %s\n", out_path, strerror(errno));
			status = 1;
			break;
		}
		printf("%s %u %u x=%.17g y=%.17g w=%.17g h=%.17g out=%u:%u scale=%d flip=%d\n", path, w,
		       h, plan.x, plan.y, plan.w, plan.h, plan.out_w, plan.out_h,
		       (int)(img.sx * 8 + 0.5), plan.flip ? 1 : 0);
	}
	free(rgb);
close_out:
	if (fclose(out) != 0 && status == 0) {
		fprintf(stderr, "loaderd-sample-dump: %s: %s\n", out_path, strerror(errno));
		status = 1;
	}
	jd_scratch_free(&jd);
	rs_scratch_free(&rs);
	return status;
}
