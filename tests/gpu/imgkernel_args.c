/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for gpudecode/imgkernel's host side, which needs the CUDA toolkit
 * to build but no GPU to run: imgk_plan's checks of formats and items and
 * the scratch offsets it hands out, imgk_launch refusing bad arguments
 * before anything reaches the GPU, imgk_row_bytes, and imgk_region being
 * jd_decode_box's region rule at full size. What the kernels compute is
 * imgkernel_check's job, on a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <errno.h>
#include <math.h>

#include <cmocka.h>

#include "gpudecode/imgkernel.h"
#include "image/jpeg.h"
#include "proto/proto.h"

static const struct imgk_format format_ok = {224, 224, 1, PROTO_DTYPE_FLOAT32,
					     {0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}};

static const uint8_t pixels[3 * 16];

/* Room for item_ok's row in format_ok. */
#define DST_BYTES (8 + 224 * 224 * 3 * 4)

/* A region of 16 x 1 pixels at (4, 9) of a 20 x 10 image. */
static const struct imgk_item item_ok = {
	.src = pixels, .src_pitch = 48, .src_w = 16, .src_h = 1, .x0 = 4, .y0 = 9,
	.img_w = 20, .img_h = 10, .sx = 1, .sy = 1, .x = 6, .y = 9, .w = 10, .h = 1,
	.dst_offset = 8};

static void test_row_bytes(void **state)
{
	struct imgk_format f = format_ok;
	assert_int_equal(imgk_row_bytes(&f), 224 * 224 * 3 * 4);
	f.dtype = PROTO_DTYPE_FLOAT16;
	assert_int_equal(imgk_row_bytes(&f), 224 * 224 * 3 * 2);
	f.dtype = PROTO_DTYPE_UINT8;
	f.out_w = 7;
	assert_int_equal(imgk_row_bytes(&f), 7 * 224 * 3);
	f.dtype = PROTO_DTYPE_INT64;
	assert_int_equal(imgk_row_bytes(&f), 0);
	assert_int_equal(imgk_row_bytes(NULL), 0);
}

static void test_plan_offsets(void **state)
{
	struct imgk_item items[3] = {item_ok, item_ok, item_ok};
	items[1].src_w = 12; /* a smaller region, a smaller part */
	uint64_t bytes = 0;
	assert_int_equal(imgk_plan(items, 3, &format_ok, DST_BYTES, &bytes), 0);
	assert_int_equal(items[0].scratch_offset, 0);
	for (int i = 1; i < 3; i++) {
		assert_true(items[i].scratch_offset > items[i - 1].scratch_offset);
		assert_int_equal(items[i].scratch_offset % 256, 0);
	}
	assert_true(items[1].scratch_offset - items[0].scratch_offset >
		    items[2].scratch_offset - items[1].scratch_offset);
	/* The intermediate alone: 12 * max(out_h * src_w, src_h * out_w) bytes. */
	assert_true(bytes - items[2].scratch_offset >= 12ull * 224 * 16);
	assert_int_equal(imgk_plan(items, 0, &format_ok, 0, &bytes), 0);
	assert_int_equal(bytes, 0);
}

static void test_plan_refuses(void **state)
{
	struct imgk_item it = item_ok;
	struct imgk_format f = format_ok;
	uint64_t bytes;
	assert_int_equal(imgk_plan(NULL, 1, &f, DST_BYTES, &bytes), -EINVAL);
	assert_int_equal(imgk_plan(&it, 1, NULL, DST_BYTES, &bytes), -EINVAL);
	assert_int_equal(imgk_plan(&it, 1, &f, DST_BYTES, NULL), -EINVAL);
	assert_int_equal(imgk_plan(&it, IMGK_BATCH_MAX + 1, &f, DST_BYTES, &bytes), -EINVAL);

	struct imgk_format bad_formats[7] = {f, f, f, f, f, f, f};
	bad_formats[0].dtype = PROTO_DTYPE_INT32;
	bad_formats[1].layout = 2;
	bad_formats[2].std[1] = 0;
	bad_formats[3].mean[2] = NAN;
	bad_formats[4].out_w = 0;
	bad_formats[5].out_h = IMGK_SIZE_MAX + 1;
	bad_formats[6].std[0] = INFINITY;
	for (int i = 0; i < 7; i++) {
		print_message("format %d\n", i);
		assert_int_equal(imgk_plan(&it, 1, &bad_formats[i], DST_BYTES, &bytes), -EINVAL);
	}

	assert_int_equal(imgk_plan(&it, 1, &f, DST_BYTES, &bytes), 0);
	struct imgk_item bad[15];
	for (int i = 0; i < 15; i++)
		bad[i] = item_ok;
	bad[0].src = NULL;
	bad[1].src_pitch = 47;
	bad[2].x0 = 5; /* past the image's right edge */
	bad[3].y0 = -1;
	bad[4].src_h = 2; /* past the image's bottom edge */
	bad[5].w = 0;
	bad[6].h = -1;
	bad[7].x = NAN;
	bad[8].y = INFINITY;
	bad[9].sy = 0;
	bad[10].sx = 1e308; /* x * sx overflows */
	bad[11].reserved = 1;
	bad[12].dst_offset = 6; /* not a multiple of 4 */
	bad[13].img_w = IMGK_SIZE_MAX + 1;
	bad[14].dst_offset = 12; /* the row would end 4 bytes past dst */
	for (int i = 0; i < 15; i++) {
		print_message("item %d\n", i);
		assert_int_equal(imgk_plan(&bad[i], 1, &f, DST_BYTES, &bytes), -EINVAL);
	}
}

static void test_launch_refuses(void **state)
{
	static uint8_t buf[64] __attribute__((aligned(16)));
	struct imgk_item it = item_ok;
	struct imgk_format f = format_ok;
	cudaError_t e = cudaErrorUnknown;
	/* Nothing to do: nothing enqueued, no CUDA call. */
	assert_int_equal(imgk_launch(&it, 0, &f, NULL, 0, NULL, 0, 0, &e), 0);
	assert_int_equal(e, cudaSuccess);
	assert_int_equal(imgk_launch(&it, 1, NULL, buf, 64, buf, 64, 0, &e), -EINVAL);
	assert_int_equal(imgk_launch(NULL, 1, &f, buf, 64, buf, 64, 0, &e), -EINVAL);
	assert_int_equal(imgk_launch(&it, 1, &f, NULL, 64, buf, 64, 0, &e), -EINVAL);
	assert_int_equal(imgk_launch(&it, 1, &f, buf, 64, NULL, 64, 0, &e), -EINVAL);
	assert_int_equal(imgk_launch(&it, 1, &f, buf, 64, buf + 2, 64, 0, NULL), -EINVAL);
	assert_int_equal(imgk_launch(&it, 1, &f, buf + 4, 64, buf, 64, 0, NULL), -EINVAL);
	assert_int_equal(imgk_launch(&it, IMGK_BATCH_MAX + 1, &f, buf, 64, buf, 64, 0, &e),
			 -EINVAL);
	f.dtype = PROTO_DTYPE_UINT16;
	assert_int_equal(imgk_launch(&it, 1, &f, buf, 64, buf, 64, 0, &e), -EINVAL);
	assert_int_equal(e, cudaSuccess);
}

/* imgk_region is jd_box_range at scale 1 on both axes. */
static void check_region(uint32_t img_w, uint32_t img_h, double x, double y, double w,
			 double h, uint32_t out_w, uint32_t out_h)
{
	int32_t rx, ry;
	uint32_t rw, rh, c0, c1, r0, r1;
	imgk_region(img_w, img_h, x, y, w, h, out_w, out_h, &rx, &ry, &rw, &rh);
	jd_box_range(x, w, 1.0, out_w, img_w, &c0, &c1);
	jd_box_range(y, h, 1.0, out_h, img_h, &r0, &r1);
	assert_int_equal(rx, c0);
	assert_int_equal(rx + (int64_t)rw, c1);
	assert_int_equal(ry, r0);
	assert_int_equal(ry + (int64_t)rh, r1);
	assert_true(rw >= 1 && rh >= 1 && rx + (int64_t)rw <= img_w && ry + (int64_t)rh <= img_h);
}

static void test_region(void **state)
{
	int32_t rx, ry;
	uint32_t rw, rh;
	/* Inside: the box, rounded out, and 2 pixels (the triangle's reach
	 * at a downscale under 3x) each side. */
	imgk_region(1000, 800, 100.5, 200.25, 400, 300, 224, 224, &rx, &ry, &rw, &rh);
	assert_int_equal(rx, 98);
	assert_int_equal(rx + rw, 503);
	assert_int_equal(ry, 198);
	assert_int_equal(ry + rh, 503);
	/* A 20x downscale reaches 11 pixels past the box. */
	imgk_region(1000, 800, 100, 100, 200, 200, 10, 10, &rx, &ry, &rw, &rh);
	assert_int_equal(rx, 89);
	assert_int_equal(rx + rw, 311);
	/* Larger than the image: all of it. */
	imgk_region(1000, 800, -50, -60, 2000, 2000, 100, 100, &rx, &ry, &rw, &rh);
	assert_true(rx == 0 && ry == 0 && rw == 1000 && rh == 800);
	/* Wholly outside: the nearest edge pixel. */
	imgk_region(1000, 800, 1200, -500, 50, 50, 10, 10, &rx, &ry, &rw, &rh);
	assert_true(rx == 999 && rw == 1 && ry == 0 && rh == 1);
	imgk_region(1, 1, 0.25, 0.25, 0.5, 0.5, 512, 384, &rx, &ry, &rw, &rh);
	assert_true(rx == 0 && ry == 0 && rw == 1 && rh == 1);
	check_region(640, 480, 13.7, -20.1, 700.2, 333.3, 224, 224);
	check_region(3, 1500, -2.5, 1499.9, 0.01, 0.02, 512, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_row_bytes),
		cmocka_unit_test(test_plan_offsets),
		cmocka_unit_test(test_plan_refuses),
		cmocka_unit_test(test_launch_refuses),
		cmocka_unit_test(test_region),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
