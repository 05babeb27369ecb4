/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for image/transform: the chain text round-trips through
 * tf_parse and tf_format; every malformed chain is refused with a message
 * naming the op; plans reproduce torchvision's boxes, computed here by hand
 * for the deterministic ops (Resize, CenterCrop, including padding and
 * Python's rounding) and checked against the analytic distribution of
 * RandomResizedCrop.get_params for the random one; plans depend on
 * (seed, epoch, index) only; flips mirror the crops that follow them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <errno.h>
#include <math.h>

#include <cmocka.h>

#include "image/transform.h"

/* cmocka's float assertion works in single precision; boxes need double. */
static void check_close(double got, double want, double eps, const char *what)
{
	if (!(fabs(got - want) <= eps)) {
		print_error("%s: got %.17g, want %.17g (eps %g)\n", what, got, want, eps);
		fail();
	}
}

static void parse_ok(const char *text, struct tf_chain *c)
{
	char err[256];
	int rc = tf_parse(text, c, err, sizeof(err));
	if (rc != 0) {
		print_error("tf_parse(\"%s\"): %d: %s\n", text, rc, err);
		fail();
	}
}

static void plan(const char *text, uint64_t index, uint32_t img_w, uint32_t img_h,
		 struct tf_plan *out)
{
	struct tf_chain c;
	parse_ok(text, &c);
	tf_plan_sample(&c, 42, 3, index, img_w, img_h, out);
	assert_int_equal(out->out_h, c.out_h);
	assert_int_equal(out->out_w, c.out_w);
}

/* text parses, formats as canonical, and canonical parses to the same chain. */
static void check_round_trip(const char *text, const char *canonical)
{
	struct tf_chain a, b;
	char buf[512];
	parse_ok(text, &a);
	assert_int_equal(tf_format(&a, buf, sizeof(buf)), 0);
	assert_string_equal(buf, canonical);
	parse_ok(buf, &b);
	assert_memory_equal(&a, &b, sizeof(a));
}

static void test_round_trip(void **state)
{
	struct tf_chain c;

	check_round_trip("random_resized_crop(224, scale=0.08:1, ratio=0.75:1.3333) hflip(0.5)",
			 "random_resized_crop(224, scale=0.08:1, ratio=0.75:1.3333) hflip(0.5)");
	parse_ok("random_resized_crop(224, scale=0.08:1, ratio=0.75:1.3333) hflip(0.5)", &c);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.ops[0].kind, TF_RANDOM_RESIZED_CROP);
	assert_int_equal(c.ops[0].h, 224);
	assert_int_equal(c.ops[0].w, 224);
	assert_true(c.ops[0].scale_lo == 0.08 && c.ops[0].scale_hi == 1.0);
	assert_true(c.ops[0].ratio_lo == 0.75 && c.ops[0].ratio_hi == 1.3333);
	assert_int_equal(c.ops[1].kind, TF_HFLIP);
	assert_true(c.ops[1].p == 0.5);
	assert_int_equal(c.out_h, 224);
	assert_int_equal(c.out_w, 224);

	check_round_trip("resize(256) center_crop(224)", "resize(256) center_crop(224)");
	parse_ok("resize(256) center_crop(224)", &c);
	assert_int_equal(c.ops[0].kind, TF_RESIZE);
	assert_int_equal(c.ops[0].h, 256);
	assert_int_equal(c.ops[0].w, 0);
	assert_int_equal(c.ops[1].kind, TF_CENTER_CROP);

	/* Two numbers are (height, width). */
	check_round_trip("resize(256, 320) center_crop(224, 200)",
			 "resize(256, 320) center_crop(224, 200)");
	parse_ok("resize(256, 320) center_crop(224, 200)", &c);
	assert_int_equal(c.ops[0].h, 256);
	assert_int_equal(c.ops[0].w, 320);
	assert_int_equal(c.out_h, 224);
	assert_int_equal(c.out_w, 200);

	/* Defaults are torchvision's, exactly 3/4 and 4/3, written in full. */
	check_round_trip("random_resized_crop(176)",
			 "random_resized_crop(176, scale=0.08:1, ratio=0.75:1.3333333333333333)");
	parse_ok("random_resized_crop(176)", &c);
	assert_true(c.ops[0].ratio_lo == 3.0 / 4.0 && c.ops[0].ratio_hi == 4.0 / 3.0);
	assert_true(c.ops[0].scale_lo == 0.08 && c.ops[0].scale_hi == 1.0);

	/* Spacing is free inside and between ops; hflip defaults to 0.5. */
	check_round_trip("  resize( 256 ,320 )\tcenter_crop(224,224)   hflip()  ",
			 "resize(256, 320) center_crop(224) hflip(0.5)");
	check_round_trip("random_resized_crop(160, 128, ratio = 0.5:2, scale=0.25:0.75) hflip(p=1)",
			 "random_resized_crop(160, 128, scale=0.25:0.75, ratio=0.5:2) hflip(1)");
	/* A square exact resize must not fold into the shorter-edge form. */
	check_round_trip("resize(224, 224)", "resize(224, 224)");
	check_round_trip("hflip(0) center_crop(1) hflip(1e-3) resize(65536, 1)",
			 "hflip(0) center_crop(1) hflip(0.001) resize(65536, 1)");
	/* Eight ops is the limit, not beyond it. */
	check_round_trip("hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) "
			 "hflip(0.5) center_crop(8)",
			 "hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) "
			 "hflip(0.5) center_crop(8)");
}

static void test_format_bounds(void **state)
{
	struct tf_chain c;
	char buf[64];
	parse_ok("resize(256) center_crop(224)", &c); /* 28 characters */
	assert_int_equal(tf_format(&c, buf, 29), 0);
	assert_string_equal(buf, "resize(256) center_crop(224)");
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(tf_format(&c, buf, 28), -ENOSPC);
	assert_string_equal(buf, "resize(256) center_crop(224"); /* terminated prefix */
	assert_int_equal(tf_format(&c, buf, 0), -ENOSPC);

	memset(&c, 0, sizeof(c));
	assert_int_equal(tf_format(&c, buf, sizeof(buf)), -EINVAL);
}

static void test_errors(void **state)
{
	static const struct {
		const char *text, *op, *detail;
	} cases[] = {
		{"", NULL, "empty transform chain"},
		{"  \t ", NULL, "empty transform chain"},
		{"random_resized_crop(224, scale=0.5:0.2)", "random_resized_crop",
		 "scale \"0.5:0.2\": low bound above high bound"},
		{"random_resized_crop(224, scale=0:1)", "random_resized_crop", "above 0"},
		{"random_resized_crop(224, scale=0.5:1.5)", "random_resized_crop", "above 1"},
		{"random_resized_crop(224, ratio=0:1)", "random_resized_crop", "above 0"},
		{"random_resized_crop(224, ratio=2:1)", "random_resized_crop", "low bound above"},
		{"random_resized_crop(224, scale=0.5)", "random_resized_crop", "low:high"},
		{"random_resized_crop(224, scale=nan:1)", "random_resized_crop", "not a number"},
		{"random_resized_crop(224, scale=0x1p-3:1)", "random_resized_crop", "not a number"},
		{"random_resized_crop(224, scale=1e999:1)", "random_resized_crop", "out of range"},
		{"random_resized_crop(224, scale=0.1:1, scale=0.2:1)", "random_resized_crop",
		 "twice"},
		{"random_resized_crop(224, foo=1)", "random_resized_crop", "unknown argument \"foo\""},
		{"random_resized_crop(scale=0.1:1)", "random_resized_crop", "expected a size"},
		{"random_resized_crop(224, 224, 224)", "random_resized_crop", "at most two"},
		{"random_resized_crop(scale=0.1:1, 224)", "random_resized_crop", "positional"},
		{"resize(0) center_crop(1)", "resize", "size \"0\": must be 1..65536"},
		{"resize(65537, 10)", "resize", "must be 1..65536"},
		{"resize(99999999999999999999, 10)", "resize", "must be 1..65536"},
		{"resize(256, scale=0.1:1) center_crop(2)", "resize", "unknown argument"},
		{"resize(256", "resize", "missing \")\""},
		{"resize(2(56)) center_crop(2)", "resize", "\"(\""},
		{"resize 256", "resize", "expected \"(\""},
		{"resize(256)center_crop(224)", "resize", "space after"},
		{"resize(256,) center_crop(2)", "resize", "empty argument"},
		{"center_crop(22.4)", "center_crop", "not a whole number"},
		{"center_crop(-5)", "center_crop", "not a whole number"},
		{"center_crop()", "center_crop", "expected a size"},
		{"center_crop(224, p=0.5)", "center_crop", "unknown argument"},
		{"hflip(1.5) center_crop(2)", "hflip", "p \"1.5\": must be in 0..1"},
		{"hflip(-0.1) center_crop(2)", "hflip", "not a number"},
		{"hflip(0.1, 0.2) center_crop(2)", "hflip", "one probability"},
		{"hflip(0.1, p=0.2) center_crop(2)", "hflip", "twice"},
		{"hflip(1, 2, 3, 4, 5) center_crop(2)", "hflip", "too many arguments"},
		{"flip(0.5) center_crop(2)", "flip", "unknown op"},
		{"(224)", NULL, "unexpected \"(224)\""},
		{"hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) hflip(0.5) "
		 "hflip(0.5) hflip(0.5) center_crop(8)",
		 "center_crop", "too many ops (at most 8)"},
		{"resize(256)", NULL, "output size depends on the image"},
		{"hflip(0.5)", NULL, "output size depends on the image"},
		{"center_crop(224) resize(256) hflip(0.5)", NULL, "output size depends on the image"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_chain c;
		char err[256];
		memset(&c, 0xa5, sizeof(c));
		int rc = tf_parse(cases[i].text, &c, err, sizeof(err));
		if (rc != -EINVAL || (cases[i].op && strncmp(err, cases[i].op, strlen(cases[i].op))) ||
		    !strstr(err, cases[i].detail)) {
			print_error("\"%s\": rc %d, err \"%s\"\n", cases[i].text, rc, err);
			fail();
		}
		if (cases[i].op) /* "op: ...", not a longer op's name that starts alike */
			assert_int_equal(err[strlen(cases[i].op)], ':');
		assert_int_equal(c.n, 0); /* nothing half-parsed escapes */
	}

	/* The message the contract quotes, word for word. */
	struct tf_chain c;
	char err[256];
	assert_int_equal(tf_parse("random_resized_crop(224, scale=0.5:0.2)", &c, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "random_resized_crop: scale \"0.5:0.2\": low bound above high bound; "
			    "expected random_resized_crop(size [, width] [, scale=lo:hi] [, "
			    "ratio=lo:hi]), e.g. random_resized_crop(224, scale=0.08:1.0)");
	assert_int_equal(tf_parse("resize(256)", &c, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "output size depends on the image: end the chain with "
				 "center_crop, random_resized_crop or resize(H, W)");

	/* A short or absent error buffer is fine. */
	char small[8];
	memset(small, 'x', sizeof(small));
	assert_int_equal(tf_parse("resize(0)", &c, small, sizeof(small)), -EINVAL);
	assert_string_equal(small, "resize:");
	assert_int_equal(tf_parse("resize(0)", &c, NULL, 0), -EINVAL);
}

/* torchvision, by hand: Resize(256) on 500x375 gives 341x256
 * (int(256 * 500 / 375) = 341), CenterCrop(224) then crops at
 * top = round(32 / 2) = 16, left = round(117 / 2) = round(58.5) = 58. */
static void test_center_crop_matches_torchvision(void **state)
{
	struct tf_plan p;
	plan("resize(256) center_crop(224)", 0, 500, 375, &p);
	check_close(p.x, 58.0 * 500 / 341, 1e-9, "x");
	check_close(p.y, 16.0 * 375 / 256, 1e-9, "y");
	check_close(p.w, 224.0 * 500 / 341, 1e-9, "w");
	check_close(p.h, 224.0 * 375 / 256, 1e-9, "h");
	assert_int_equal(p.out_w, 224);
	assert_int_equal(p.out_h, 224);
	assert_false(p.flip);

	/* Flipped first: the crop at 58 of the mirrored image is at
	 * 341 - 58 - 224 = 59 of the unmirrored one. */
	plan("hflip(1) resize(256) center_crop(224)", 0, 500, 375, &p);
	check_close(p.x, 59.0 * 500 / 341, 1e-9, "mirrored x");
	check_close(p.y, 16.0 * 375 / 256, 1e-9, "mirrored y");
	check_close(p.w, 224.0 * 500 / 341, 1e-9, "mirrored w");
	assert_true(p.flip);
	plan("hflip(1) resize(256) hflip(1) center_crop(224)", 0, 500, 375, &p);
	check_close(p.x, 58.0 * 500 / 341, 1e-9, "twice mirrored x");
	assert_false(p.flip);

	/* Portrait: the width is the shorter edge. 375x500 -> 256x341, crop at
	 * left 16, top 58. */
	plan("resize(256) center_crop(224)", 0, 375, 500, &p);
	check_close(p.x, 16.0 * 375 / 256, 1e-9, "portrait x");
	check_close(p.y, 58.0 * 500 / 341, 1e-9, "portrait y");
	check_close(p.h, 224.0 * 500 / 341, 1e-9, "portrait h");

	/* The longer edge is truncated: int(100 * 333 / 200) = int(166.5) = 166,
	 * so a 167-wide crop is one virtual pixel wider than the image. */
	plan("resize(100) center_crop(100, 167)", 0, 333, 200, &p);
	check_close(p.x, 0.0, 1e-9, "truncated x");
	check_close(p.w, 167.0 * 333 / 166, 1e-9, "truncated w");
	check_close(p.h, 200.0, 1e-9, "truncated h");

	/* Same on the portrait side: 200x333 -> 100 wide, 166 high. */
	plan("resize(100) center_crop(167, 100)", 0, 200, 333, &p);
	check_close(p.y, 0.0, 1e-9, "truncated portrait y");
	check_close(p.h, 167.0 * 333 / 166, 1e-9, "truncated portrait h");
	check_close(p.w, 200.0, 1e-9, "truncated portrait w");

	/* Exact resize: 640x480 -> 400 wide, 300 high; crop 200 wide, 100 high
	 * at left 100, top 100; 1.6 source pixels per virtual pixel. */
	plan("resize(300, 400) center_crop(100, 200)", 0, 640, 480, &p);
	check_close(p.x, 160.0, 1e-9, "exact x");
	check_close(p.y, 160.0, 1e-9, "exact y");
	check_close(p.w, 320.0, 1e-9, "exact w");
	check_close(p.h, 160.0, 1e-9, "exact h");
	assert_int_equal(p.out_h, 100);
	assert_int_equal(p.out_w, 200);

	/* Larger than the image: torchvision pads (crop - side) // 2 before, the
	 * rest after, and crops the padded image at 0. 5x4 image, crop 8x7:
	 * 1 column before (2 after), 1 row before (2 after). */
	plan("center_crop(7, 8)", 0, 5, 4, &p);
	check_close(p.x, -1.0, 1e-12, "padded x");
	check_close(p.y, -1.0, 1e-12, "padded y");
	check_close(p.w, 8.0, 1e-12, "padded w");
	check_close(p.h, 7.0, 1e-12, "padded h");
	/* Padded along one side only; the other is cropped at round(0.5) = 0. */
	plan("center_crop(3, 8)", 0, 5, 4, &p);
	check_close(p.x, -1.0, 1e-12, "half padded x");
	check_close(p.y, 0.0, 1e-12, "half padded y");
	check_close(p.h, 3.0, 1e-12, "half padded h");
	/* round(1.5) = 2: halves go to the even neighbour. */
	plan("center_crop(1, 2)", 0, 5, 4, &p);
	check_close(p.x, 2.0, 1e-12, "half-even x");
	check_close(p.y, 2.0, 1e-12, "half-even y");
}

/*
 * Expected area fraction of RandomResizedCrop.get_params on a W x H image,
 * derived without its code. Per attempt, s ~ U(slo, shi) and
 * t = log(aspect) ~ U(log rlo, log rhi); the box fits iff s*a <= W/H and
 * s/a <= H/W (a = e^t), i.e. s <= smax(t) = min(W/(H a), a H/W). Attempts
 * are independent, so the first that fits is distributed as one attempt
 * conditioned on fitting:
 *   P(fit)    = E_t[(min(smax, shi) - slo)+] / (shi - slo)
 *   E[s | fit] = E_t[(min(smax, shi)^2 - slo^2)/2 over fitting t] /
 *                E_t[(min(smax, shi) - slo)+]
 * and with probability (1 - P(fit))^10 the fallback box's fraction is
 * taken instead. Rounding w and h to whole pixels moves the fraction by
 * about 1/side, far below the tolerance used.
 */
static double expected_area_fraction(double W, double H, double slo, double shi, double rlo,
				     double rhi, double fallback_fraction)
{
	const int steps = 200000;
	double t_lo = log(rlo), t_hi = log(rhi);
	double sum_num = 0.0, sum_den = 0.0;
	for (int i = 0; i < steps; i++) {
		double a = exp(t_lo + (i + 0.5) * (t_hi - t_lo) / steps);
		double smax = fmin(shi, fmin(W / (H * a), a * H / W));
		if (smax > slo) {
			sum_num += (smax * smax - slo * slo) / 2;
			sum_den += smax - slo;
		}
	}
	double p_fit = sum_den / steps / (shi - slo);
	double p_fallback = pow(1.0 - p_fit, 10);
	double fit_mean = sum_den > 0 ? sum_num / sum_den : 0.0;
	return (1.0 - p_fallback) * fit_mean + p_fallback * fallback_fraction;
}

/* Samples random_resized_crop(224) on W x H and checks every box against
 * the procedure's invariants and the mean area fraction against the
 * analytic value. */
static void check_random_resized_crop(uint32_t W, uint32_t H, double fallback_fraction)
{
	struct tf_chain c;
	parse_ok("random_resized_crop(224)", &c);
	const int samples = 20000;
	double sum_fraction = 0.0, sum_u = 0.0, sum_v = 0.0;
	int n_u = 0, n_v = 0;
	for (int i = 0; i < samples; i++) {
		struct tf_plan p;
		tf_plan_sample(&c, 7, 1, (uint64_t)i, W, H, &p);
		assert_int_equal(p.out_w, 224);
		assert_int_equal(p.out_h, 224);
		assert_false(p.flip);
		/* No resize before it: the box is whole pixels inside the image. */
		assert_true(p.x == floor(p.x) && p.y == floor(p.y));
		assert_true(p.w == floor(p.w) && p.h == floor(p.h));
		assert_true(p.x >= 0 && p.y >= 0 && p.w >= 1 && p.h >= 1);
		assert_true(p.x + p.w <= W && p.y + p.h <= H);
		/* w = round(sqrt(A a)), h = round(sqrt(A / a)) with A the target
		 * area: each side within half a pixel of the exact value. */
		double area = (double)W * H;
		assert_true((p.w + 0.5) * (p.h + 0.5) >= 0.08 * area);
		assert_true((p.w - 0.5) * (p.h - 0.5) <= area);
		assert_true((p.w + 0.5) / (p.h - 0.5) >= 3.0 / 4.0);
		assert_true((p.w - 0.5) / (p.h + 0.5) <= 4.0 / 3.0);
		sum_fraction += p.w * p.h / area;
		/* The offset is uniform over every position that fits. */
		if (p.w < W) {
			sum_u += p.x / (W - p.w);
			n_u++;
		}
		if (p.h < H) {
			sum_v += p.y / (H - p.h);
			n_v++;
		}
	}
	/* s spreads over about [0.08, 0.8], sd about 0.2: the mean of 20000
	 * has a standard error near 0.0015, and 0.008 is five of them. */
	double want = expected_area_fraction(W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0,
					     fallback_fraction);
	check_close(sum_fraction / samples, want, 0.008, "mean area fraction");
	assert_true(n_u > samples / 2 && n_v > samples / 2);
	check_close(sum_u / n_u, 0.5, 0.02, "mean horizontal position");
	check_close(sum_v / n_v, 0.5, 0.02, "mean vertical position");
}

static void test_random_resized_crop_distribution(void **state)
{
	/* 4:3 is the top of the ratio range: a fit is likely (p ~ 0.74) and
	 * the mean fraction is ~0.432, well below the 0.54 of an unconditioned
	 * U(0.08, 1). Fallback would be the whole image. */
	check_random_resized_crop(500, 375, 1.0);
	/* 1:2 lies outside it: fits are rarer and smaller; the fallback box
	 * is 300 wide, round(300 / 0.75) = 400 high. */
	check_random_resized_crop(300, 600, 400.0 * 300 / (300.0 * 600));
	assert_true(fabs(expected_area_fraction(500, 375, 0.08, 1, 0.75, 4.0 / 3, 1) - 0.4319) <
		    0.001);
}

static void test_random_resized_crop_formula(void **state)
{
	/* Fixed area and aspect pin the size: round(sqrt(0.5 * 160000)) =
	 * round(282.84) = 283 for every sample. */
	struct tf_chain c;
	parse_ok("random_resized_crop(64, scale=0.5:0.5, ratio=1:1)", &c);
	for (uint64_t i = 0; i < 1000; i++) {
		struct tf_plan p;
		tf_plan_sample(&c, 1, 2, i, 400, 400, &p);
		assert_true(p.w == 283.0 && p.h == 283.0);
	}

	/* A 200x200 box in a 400x400 image: both ends of randint(0, 200) are
	 * reached (each has probability 1/201 per sample). */
	parse_ok("random_resized_crop(64, scale=0.25:0.25, ratio=1:1)", &c);
	double min_x = 1e9, max_x = -1, min_y = 1e9, max_y = -1;
	for (uint64_t i = 0; i < 20000; i++) {
		struct tf_plan p;
		tf_plan_sample(&c, 1, 2, i, 400, 400, &p);
		assert_true(p.w == 200.0 && p.h == 200.0);
		min_x = fmin(min_x, p.x);
		max_x = fmax(max_x, p.x);
		min_y = fmin(min_y, p.y);
		max_y = fmax(max_y, p.y);
	}
	assert_true(min_x == 0.0 && max_x == 200.0 && min_y == 0.0 && max_y == 200.0);

	/* The aspect is log-uniform: with ratio 1/2:2 (every box fits a 400x400
	 * image at a quarter of its area) log(w/h) is uniform on +-log 2, so
	 * half the boxes are wide, half tall, and a quarter have w/h below
	 * 1/sqrt(2). A uniform aspect would make two thirds of them wide. */
	parse_ok("random_resized_crop(64, scale=0.25:0.25, ratio=0.5:2)", &c);
	int wide = 0, tall = 0, narrow = 0;
	const int samples = 20000;
	for (uint64_t i = 0; i < (uint64_t)samples; i++) {
		struct tf_plan p;
		tf_plan_sample(&c, 1, 2, i, 400, 400, &p);
		wide += p.w > p.h;
		tall += p.w < p.h;
		narrow += p.w / p.h < sqrt(0.5);
	}
	/* Binomial sd about 0.0035 of the samples; 0.02 is over five. */
	check_close((double)wide / samples, 0.5, 0.02, "wide fraction");
	check_close((double)tall / samples, 0.5, 0.02, "tall fraction");
	check_close((double)narrow / samples, 0.25, 0.02, "narrow fraction");
}

static void test_random_resized_crop_fallback(void **state)
{
	/* No attempt can fit in 1000x10: a box at most 10 high with aspect at
	 * most 4/3 covers under 0.08 of the area. in_ratio = 100 > 4/3, so
	 * h = 10, w = round(10 * 4/3) = 13, top = 0, left = (1000 - 13) // 2. */
	struct tf_chain c;
	parse_ok("random_resized_crop(32)", &c);
	for (uint64_t i = 0; i < 200; i++) {
		struct tf_plan p;
		tf_plan_sample(&c, 9, 0, i, 1000, 10, &p);
		assert_true(p.x == 493.0 && p.y == 0.0 && p.w == 13.0 && p.h == 10.0);
		/* And the transposed shape: in_ratio = 0.01 < 3/4, so w = 10,
		 * h = round(10 / 0.75) = 13, top = 493, left = 0. */
		tf_plan_sample(&c, 9, 0, i, 10, 1000, &p);
		assert_true(p.x == 0.0 && p.y == 493.0 && p.w == 10.0 && p.h == 13.0);
	}
	/* A 1x1 image: whatever the draws, the only box is the image. */
	struct tf_plan p;
	tf_plan_sample(&c, 9, 0, 0, 1, 1, &p);
	assert_true(p.x == 0.0 && p.y == 0.0 && p.w == 1.0 && p.h == 1.0);
}

static bool same_plan(const struct tf_plan *a, const struct tf_plan *b)
{
	return a->x == b->x && a->y == b->y && a->w == b->w && a->h == b->h &&
	       a->out_h == b->out_h && a->out_w == b->out_w && a->flip == b->flip;
}

static void test_determinism(void **state)
{
	struct tf_chain c;
	parse_ok("random_resized_crop(224) hflip(0.5)", &c);
	struct tf_plan a, b;
	for (uint64_t i = 0; i < 100; i++) {
		tf_plan_sample(&c, 5, 7, i, 640, 480, &a);
		tf_plan_sample(&c, 5, 7, i, 640, 480, &b);
		assert_true(same_plan(&a, &b));
		/* Another index, epoch or seed draws another box. */
		tf_plan_sample(&c, 5, 7, i + 1, 640, 480, &b);
		assert_false(same_plan(&a, &b));
		tf_plan_sample(&c, 5, 8, i, 640, 480, &b);
		assert_false(same_plan(&a, &b));
		tf_plan_sample(&c, 6, 7, i, 640, 480, &b);
		assert_false(same_plan(&a, &b));
	}
	/* Nothing but the arguments feeds it: the first plan again, last. */
	tf_plan_sample(&c, 5, 7, 0, 640, 480, &b);
	tf_plan_sample(&c, 5, 7, 0, 640, 480, &a);
	assert_true(same_plan(&a, &b));
}

static void test_hflip_rate(void **state)
{
	struct tf_chain half, never, always;
	parse_ok("hflip(0.5) center_crop(224)", &half);
	parse_ok("hflip(0) center_crop(224)", &never);
	parse_ok("hflip(1) center_crop(224)", &always);
	int flips = 0;
	for (uint64_t i = 0; i < 10000; i++) {
		struct tf_plan p;
		tf_plan_sample(&half, 3, 0, i, 300, 300, &p);
		flips += p.flip;
		tf_plan_sample(&never, 3, 0, i, 300, 300, &p);
		assert_false(p.flip);
		tf_plan_sample(&always, 3, 0, i, 300, 300, &p);
		assert_true(p.flip);
	}
	/* Binomial(10000, 0.5): sd 50; 200 is four of them. */
	assert_true(flips >= 4800 && flips <= 5200);
}

/* Flipping the image, then cropping at x, is cropping the unflipped image
 * at the mirrored x, then flipping. hflip(0) and hflip(1) draw alike, so
 * both chains see the same crop parameters. */
static void test_hflip_mirrors_crop(void **state)
{
	struct tf_chain plain, flipped, plain_cc, flipped_cc;
	parse_ok("hflip(0) random_resized_crop(256)", &plain);
	parse_ok("hflip(1) random_resized_crop(256)", &flipped);
	parse_ok("hflip(0) random_resized_crop(256) center_crop(224, 201)", &plain_cc);
	parse_ok("hflip(1) random_resized_crop(256) center_crop(224, 201)", &flipped_cc);
	int off_centre = 0;
	for (uint64_t i = 0; i < 2000; i++) {
		struct tf_plan a, b;
		tf_plan_sample(&plain, 11, 4, i, 500, 375, &a);
		tf_plan_sample(&flipped, 11, 4, i, 500, 375, &b);
		assert_false(a.flip);
		assert_true(b.flip);
		assert_true(b.x == 500.0 - a.x - a.w);
		assert_true(b.y == a.y && b.w == a.w && b.h == a.h);
		off_centre += a.x != b.x;

		/* Then a center crop of the 256x256 virtual image, 201 wide:
		 * left = round(55 / 2) = round(27.5) = 28 on the image as seen,
		 * 256 - 28 - 201 = 27 once mirrored back; top = 16. */
		struct tf_plan ac, bc;
		tf_plan_sample(&plain_cc, 11, 4, i, 500, 375, &ac);
		tf_plan_sample(&flipped_cc, 11, 4, i, 500, 375, &bc);
		double sx = a.w / 256, sy = a.h / 256;
		check_close(ac.x, a.x + 28 * sx, 1e-9, "crop after crop x");
		check_close(ac.y, a.y + 16 * sy, 1e-9, "crop after crop y");
		check_close(ac.w, 201 * sx, 1e-9, "crop after crop w");
		check_close(ac.h, 224 * sy, 1e-9, "crop after crop h");
		check_close(bc.x, b.x + 27 * sx, 1e-9, "mirrored crop after crop x");
		check_close(bc.y, ac.y, 1e-9, "mirrored crop after crop y");
		assert_int_equal(bc.out_w, 201);
		assert_int_equal(bc.out_h, 224);
		assert_true(bc.flip);
	}
	assert_true(off_centre > 1000);

	/* hflip draws whatever p is, so a p in between gives the same boxes,
	 * mirrored exactly when it flips. */
	struct tf_chain sometimes;
	parse_ok("hflip(0.3) random_resized_crop(256)", &sometimes);
	int flips = 0;
	for (uint64_t i = 0; i < 2000; i++) {
		struct tf_plan a, s;
		tf_plan_sample(&plain, 11, 4, i, 500, 375, &a);
		tf_plan_sample(&sometimes, 11, 4, i, 500, 375, &s);
		assert_true(s.x == (s.flip ? 500.0 - a.x - a.w : a.x));
		assert_true(s.y == a.y && s.w == a.w && s.h == a.h);
		flips += s.flip;
	}
	assert_true(flips > 400 && flips < 800); /* ~600 */
}

/* What a user writing torchvision's syntax, or a misspelt op, is told:
 * the op's expected form, the text to write, or the closest op. */
static void test_error_hints(void **state)
{
	(void)state;
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"RandomResizedCrop(224, scale=(0.08, 1.0))",
		 "random_resized_crop: \"RandomResizedCrop(224, scale=(0.08, 1.0))\" is torchvision's "
		 "syntax: a range is lo:hi and two sizes are height, width, without brackets; write "
		 "random_resized_crop(224, scale=0.08:1.0)"},
		{"random_resized_crop(224, scale=[0.5, 1], ratio=(0.75, 1.33))",
		 "write random_resized_crop(224, scale=0.5:1, ratio=0.75:1.33)"},
		{"Resize((256, 320))", "write resize(256, 320)"},
		{"transforms.Resize(256) center_crop(224)",
		 "resize: \"transforms.Resize(256)\" is torchvision's syntax: no module prefix, "
		 "ranges as lo:hi and two sizes as height, width; write resize(256)"},
		{"T.CenterCrop(224)", "write center_crop(224)"},
		{"Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])",
		 "Normalize: not an op of a transform chain: normalisation is the pipeline's keys: "
		 "dtype = float32, mean = R,G,B and std = R,G,B"},
		{"transforms.Normalize(mean=[0.5])", "transforms.Normalize: not an op"},
		{"center_crop(224) ToTensor()", "ToTensor: not an op of a transform chain: not needed"},
		{"Compose([Resize(256)])", "write the ops one after another"},
		{"random_resize_crop(224)", "random_resize_crop: unknown op; did you mean "
		 "random_resized_crop? (ops: random_resized_crop, resize, center_crop, hflip;"},
		{"centre_crop(224)", "did you mean center_crop?"},
		{"RandomHorizonalFlip(0.5) center_crop(2)", "did you mean hflip?"},
		{"ColorJitter(0.4)", "ColorJitter: unknown op (ops: "},
		{"random_resized_crop(224, scal=0.1:1)",
		 "random_resized_crop: unknown argument \"scal\"; did you mean scale?; expected "
		 "random_resized_crop(size [, width] [, scale=lo:hi] [, ratio=lo:hi])"},
		{"resize(256, 256, 3)", "expected resize(size) or resize(height, width)"},
		{"center_crop(a)", "expected center_crop(size) or center_crop(height, width)"},
		{"hflip(2) center_crop(2)", "expected hflip([p]), e.g. hflip(0.5)"},
		{"resize(256", "resize: missing \")\"; expected resize(size)"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_chain c;
		char err[512];
		int rc = tf_parse(cases[i].text, &c, err, sizeof(err));
		if (rc != -EINVAL || !strstr(err, cases[i].want)) {
			print_error("\"%s\": rc %d, err \"%s\", expected \"%s\"\n", cases[i].text, rc, err,
				    cases[i].want);
			fail();
		}
	}
	/* torchvision's names are aliases: the same chain as ours */
	struct tf_chain a, b;
	char err[512];
	assert_int_equal(tf_parse("RandomResizedCrop(224, scale=0.25:1) RandomHorizontalFlip(p=0.5)",
				  &a, err, sizeof(err)), 0);
	assert_int_equal(tf_parse("random_resized_crop(224, scale=0.25:1) hflip(0.5)", &b, err,
				  sizeof(err)), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(tf_parse("Resize(256) CenterCrop(224)", &a, err, sizeof(err)), 0);
	assert_int_equal(tf_parse("resize(256) center_crop(224)", &b, err, sizeof(err)), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	char text[128];
	assert_int_equal(tf_format(&a, text, sizeof(text)), 0);
	assert_string_equal(text, "resize(256) center_crop(224)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_format_bounds),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_error_hints),
		cmocka_unit_test(test_center_crop_matches_torchvision),
		cmocka_unit_test(test_random_resized_crop_distribution),
		cmocka_unit_test(test_random_resized_crop_formula),
		cmocka_unit_test(test_random_resized_crop_fallback),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_hflip_rate),
		cmocka_unit_test(test_hflip_mirrors_crop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
