/*
 * transform: parse, format and plan a transform chain (transform.h).
 *
 * The parser is the edge where a pipeline's transform text enters loaderd:
 * every number is checked for syntax and range here, so the planner can
 * trust the chain. The planner follows torchvision's code step by step
 * (RandomResizedCrop.get_params, F.resize's output size, F.center_crop),
 * including Python's round-half-to-even and truncating int(); the notes at
 * each step name the torchvision line it reproduces.
 */
#include "image/transform.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

/* Longest argument text quoted back in an error message. */
#define QUOTE_MAX 40
/* Most comma-separated arguments one op takes (random_resized_crop: 4). */
#define ARGS_MAX 4
/* Longest number text accepted; "%.17g" of any double fits well within. */
#define NUMBER_MAX 40

static const double default_scale_lo = 0.08, default_scale_hi = 1.0;
static const double default_ratio_lo = 3.0 / 4.0, default_ratio_hi = 4.0 / 3.0;
static const double default_flip_p = 0.5;

/* A piece of the input text, not terminated. */
struct slice {
	const char *s;
	size_t len;
};

static int quote_len(struct slice v)
{
	return (int)(v.len < QUOTE_MAX ? v.len : QUOTE_MAX);
}

static int fail(char *err, size_t err_cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_cap, const char *fmt, ...)
{
	if (err && err_cap > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, err_cap, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static struct slice trim(struct slice v)
{
	while (v.len > 0 && is_space(v.s[0])) {
		v.s++;
		v.len--;
	}
	while (v.len > 0 && is_space(v.s[v.len - 1]))
		v.len--;
	return v;
}

static bool slice_is(struct slice v, const char *word)
{
	return v.len == strlen(word) && memcmp(v.s, word, v.len) == 0;
}

/* Sizes are plain decimal integers: no sign, no exponent, no fraction. */
static int parse_size(const char *op, struct slice v, uint32_t *out, char *err, size_t err_cap)
{
	uint64_t value = 0;
	if (v.len == 0)
		return fail(err, err_cap, "%s: empty size", op);
	for (size_t i = 0; i < v.len; i++) {
		if (!is_digit(v.s[i]))
			return fail(err, err_cap, "%s: size \"%.*s\": not a whole number", op,
				    quote_len(v), v.s);
		if (value <= TF_SIZE_MAX) /* stop growing once out of range */
			value = value * 10 + (uint64_t)(v.s[i] - '0');
	}
	if (value < 1 || value > TF_SIZE_MAX)
		return fail(err, err_cap, "%s: size \"%.*s\": must be 1..%d", op, quote_len(v),
			    v.s, TF_SIZE_MAX);
	*out = (uint32_t)value;
	return 0;
}

/* Decimal syntax only, digits[.digits][e[+-]digits], checked before strtod
 * so that "nan", "inf", hex floats and signs never get through. */
static bool decimal_syntax(struct slice v)
{
	size_t i = 0, mantissa_digits = 0;
	while (i < v.len && is_digit(v.s[i])) {
		i++;
		mantissa_digits++;
	}
	if (i < v.len && v.s[i] == '.') {
		i++;
		while (i < v.len && is_digit(v.s[i])) {
			i++;
			mantissa_digits++;
		}
	}
	if (mantissa_digits == 0)
		return false;
	if (i < v.len && (v.s[i] == 'e' || v.s[i] == 'E')) {
		i++;
		if (i < v.len && (v.s[i] == '+' || v.s[i] == '-'))
			i++;
		size_t exp_digits = 0;
		while (i < v.len && is_digit(v.s[i])) {
			i++;
			exp_digits++;
		}
		if (exp_digits == 0)
			return false;
	}
	return i == v.len;
}

/* A non-negative finite number; what names the argument in messages. */
static int parse_real(const char *op, const char *what, struct slice v, double *out,
		      char *err, size_t err_cap)
{
	char text[NUMBER_MAX + 1];
	if (v.len == 0 || v.len > NUMBER_MAX || !decimal_syntax(v))
		return fail(err, err_cap, "%s: %s \"%.*s\": not a number", op, what,
			    quote_len(v), v.s);
	memcpy(text, v.s, v.len);
	text[v.len] = '\0';
	double value = strtod(text, NULL);
	if (!isfinite(value))
		return fail(err, err_cap, "%s: %s \"%.*s\": out of range", op, what,
			    quote_len(v), v.s);
	*out = value;
	return 0;
}

/* "lo:hi" with 0 < lo <= hi (and hi <= max when max > 0). */
static int parse_range(const char *op, const char *what, struct slice v, double max,
		       double *lo, double *hi, char *err, size_t err_cap)
{
	const char *colon = memchr(v.s, ':', v.len);
	if (!colon)
		return fail(err, err_cap, "%s: %s \"%.*s\": expected low:high", op, what,
			    quote_len(v), v.s);
	struct slice a = trim((struct slice){v.s, (size_t)(colon - v.s)});
	struct slice b = trim((struct slice){colon + 1, v.len - (size_t)(colon - v.s) - 1});
	int rc = parse_real(op, what, a, lo, err, err_cap);
	if (rc == 0)
		rc = parse_real(op, what, b, hi, err, err_cap);
	if (rc < 0)
		return rc;
	if (*lo <= 0.0)
		return fail(err, err_cap, "%s: %s \"%.*s\": low bound must be above 0", op, what,
			    quote_len(v), v.s);
	if (*lo > *hi)
		return fail(err, err_cap, "%s: %s \"%.*s\": low bound above high bound", op,
			    what, quote_len(v), v.s);
	if (max > 0.0 && *hi > max)
		return fail(err, err_cap, "%s: %s \"%.*s\": high bound above %g", op, what,
			    quote_len(v), v.s, max);
	return 0;
}

static const struct {
	const char *name;
	enum tf_kind kind;
} op_names[] = {
	{"random_resized_crop", TF_RANDOM_RESIZED_CROP},
	{"resize", TF_RESIZE},
	{"center_crop", TF_CENTER_CROP},
	{"hflip", TF_HFLIP},
};

static const char *op_name(enum tf_kind kind)
{
	for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++)
		if (op_names[i].kind == kind)
			return op_names[i].name;
	return NULL;
}

/* Fills op from its arguments: positional ones first (sizes, or hflip's p),
 * then key=value ones. */
static int parse_args(const char *name, struct slice *args, unsigned nargs, struct tf_op *op,
		      char *err, size_t err_cap)
{
	struct slice positional[ARGS_MAX];
	unsigned npos = 0;
	bool seen_key = false, seen_scale = false, seen_ratio = false, seen_p = false;
	int rc;

	/* op arrives zeroed; parameters an op does not take stay 0. */
	if (op->kind == TF_RANDOM_RESIZED_CROP) {
		op->scale_lo = default_scale_lo;
		op->scale_hi = default_scale_hi;
		op->ratio_lo = default_ratio_lo;
		op->ratio_hi = default_ratio_hi;
	}
	if (op->kind == TF_HFLIP)
		op->p = default_flip_p;

	for (unsigned i = 0; i < nargs; i++) {
		const char *eq = memchr(args[i].s, '=', args[i].len);
		if (!eq) {
			if (seen_key)
				return fail(err, err_cap,
					    "%s: argument \"%.*s\": positional after key=value",
					    name, quote_len(args[i]), args[i].s);
			positional[npos++] = args[i];
			continue;
		}
		seen_key = true;
		struct slice key = trim((struct slice){args[i].s, (size_t)(eq - args[i].s)});
		struct slice value = trim(
			(struct slice){eq + 1, args[i].len - (size_t)(eq - args[i].s) - 1});
		if (op->kind == TF_RANDOM_RESIZED_CROP && slice_is(key, "scale")) {
			if (seen_scale)
				return fail(err, err_cap, "%s: scale given twice", name);
			seen_scale = true;
			rc = parse_range(name, "scale", value, 1.0, &op->scale_lo, &op->scale_hi,
					 err, err_cap);
		} else if (op->kind == TF_RANDOM_RESIZED_CROP && slice_is(key, "ratio")) {
			if (seen_ratio)
				return fail(err, err_cap, "%s: ratio given twice", name);
			seen_ratio = true;
			rc = parse_range(name, "ratio", value, 0.0, &op->ratio_lo, &op->ratio_hi,
					 err, err_cap);
		} else if (op->kind == TF_HFLIP && slice_is(key, "p")) {
			seen_p = true;
			rc = 0;
			positional[npos++] = value; /* same as hflip(value) */
		} else {
			return fail(err, err_cap, "%s: unknown argument \"%.*s\"", name,
				    quote_len(key), key.s);
		}
		if (rc < 0)
			return rc;
	}

	if (op->kind == TF_HFLIP) {
		if (npos > 1)
			return fail(err, err_cap, "%s: %s", name,
				    seen_p ? "p given twice" : "expected one probability");
		if (npos == 1) {
			rc = parse_real(name, "p", positional[0], &op->p, err, err_cap);
			if (rc < 0)
				return rc;
			if (op->p > 1.0)
				return fail(err, err_cap, "%s: p \"%.*s\": must be in 0..1", name,
					    quote_len(positional[0]), positional[0].s);
		}
		return 0;
	}

	if (npos == 0)
		return fail(err, err_cap, "%s: expected a size", name);
	if (npos > 2)
		return fail(err, err_cap, "%s: expected at most two sizes (height, width)", name);
	rc = parse_size(name, positional[0], &op->h, err, err_cap);
	if (rc < 0)
		return rc;
	if (npos == 2)
		return parse_size(name, positional[1], &op->w, err, err_cap);
	/* One number: a square, except resize where it names the shorter edge. */
	op->w = op->kind == TF_RESIZE ? 0 : op->h;
	return 0;
}

/* Parses one op starting at *pos (no leading space) into the zeroed *op;
 * advances *pos past it. */
static int parse_op(const char **pos, struct tf_op *op, char *err, size_t err_cap)
{
	const char *p = *pos;
	struct slice name = {p, 0};
	while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || is_digit(*p) || *p == '_')
		p++;
	name.len = (size_t)(p - name.s);
	if (name.len == 0) {
		struct slice rest = {p, strlen(p)};
		return fail(err, err_cap, "unexpected \"%.*s\" where an op name belongs",
			    quote_len(rest), rest.s);
	}
	const char *canonical = NULL;
	for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++) {
		if (slice_is(name, op_names[i].name)) {
			canonical = op_names[i].name;
			op->kind = op_names[i].kind;
		}
	}
	if (!canonical)
		return fail(err, err_cap,
			    "%.*s: unknown op (known: random_resized_crop, resize, center_crop, hflip)",
			    quote_len(name), name.s);
	while (is_space(*p))
		p++;
	if (*p != '(')
		return fail(err, err_cap, "%s: expected \"(\" after the name", canonical);
	const char *open = p;
	const char *close = open + 1;
	while (*close && *close != ')' && *close != '(')
		close++;
	if (*close == '(')
		return fail(err, err_cap, "%s: unexpected \"(\" inside the arguments", canonical);
	if (*close != ')')
		return fail(err, err_cap, "%s: missing \")\"", canonical);
	if (close[1] != '\0' && !is_space(close[1]))
		return fail(err, err_cap, "%s: expected a space after \")\"", canonical);

	struct slice args[ARGS_MAX];
	unsigned nargs = 0;
	struct slice inside = trim((struct slice){open + 1, (size_t)(close - open - 1)});
	if (inside.len > 0) {
		const char *a = inside.s, *end = inside.s + inside.len;
		for (;;) {
			const char *comma = memchr(a, ',', (size_t)(end - a));
			const char *stop = comma ? comma : end;
			struct slice arg = trim((struct slice){a, (size_t)(stop - a)});
			if (arg.len == 0)
				return fail(err, err_cap, "%s: empty argument", canonical);
			if (nargs == ARGS_MAX)
				return fail(err, err_cap, "%s: too many arguments", canonical);
			args[nargs++] = arg;
			if (!comma)
				break;
			a = comma + 1;
		}
	}
	*pos = close + 1;
	return parse_args(canonical, args, nargs, op, err, err_cap);
}

int tf_parse(const char *text, struct tf_chain *out, char *err, size_t err_cap)
{
	memset(out, 0, sizeof(*out));
	if (err && err_cap > 0)
		err[0] = '\0';
	if (!text)
		return fail(err, err_cap, "empty transform chain");

	const char *p = text;
	for (;;) {
		while (is_space(*p))
			p++;
		if (*p == '\0')
			break;
		struct tf_op op;
		memset(&op, 0, sizeof(op));
		int rc = parse_op(&p, &op, err, err_cap);
		if (rc < 0)
			goto reset_out;
		if (out->n == TF_OPS_MAX) {
			rc = fail(err, err_cap, "%s: too many ops (at most %d)", op_name(op.kind),
				  TF_OPS_MAX);
			goto reset_out;
		}
		out->ops[out->n++] = op;
	}
	if (out->n == 0) {
		fail(err, err_cap, "empty transform chain");
		goto reset_out;
	}

	/* The last op that sets a size decides the output size; a shorter-edge
	 * resize leaves it to the image, which a batch cannot allow. */
	const struct tf_op *last = NULL;
	for (uint32_t i = 0; i < out->n; i++)
		if (out->ops[i].kind != TF_HFLIP)
			last = &out->ops[i];
	if (!last || (last->kind == TF_RESIZE && last->w == 0)) {
		fail(err, err_cap,
		     "output size depends on the image: end the chain with center_crop, "
		     "random_resized_crop or resize(H, W)");
		goto reset_out;
	}
	out->out_h = last->h;
	out->out_w = last->w;
	return 0;

reset_out:
	memset(out, 0, sizeof(*out));
	return -EINVAL;
}

/* Appends to a bounded buffer, remembering whether anything was cut. */
struct builder {
	char *buf;
	size_t cap, len;
	bool truncated;
};

static void append(struct builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void append(struct builder *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->len < b->cap ? b->buf + b->len : NULL,
			  b->len < b->cap ? b->cap - b->len : 0, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= (b->len < b->cap ? b->cap - b->len : 0))
		b->truncated = true;
	if (n > 0)
		b->len += (size_t)n;
}

/* Shortest "%.Ng" text that reads back as exactly v, so format then parse
 * is the identity and defaults print as "0.08", not "0.080000000000000002". */
static void append_real(struct builder *b, double v)
{
	char text[NUMBER_MAX + 1];
	for (int digits = 1; digits <= 17; digits++) {
		snprintf(text, sizeof(text), "%.*g", digits, v);
		if (strtod(text, NULL) == v)
			break;
	}
	append(b, "%s", text);
}

static void append_sizes(struct builder *b, const struct tf_op *op)
{
	/* resize(S, S) is exact while resize(S) is the shorter edge, so only the
	 * crops may fold a square into one number. */
	if (op->w == 0 || (op->kind != TF_RESIZE && op->w == op->h))
		append(b, "%u", (unsigned)op->h);
	else
		append(b, "%u, %u", (unsigned)op->h, (unsigned)op->w);
}

int tf_format(const struct tf_chain *c, char *buf, size_t cap)
{
	struct builder b = {buf, cap, 0, false};
	if (cap > 0)
		buf[0] = '\0';
	if (c->n == 0 || c->n > TF_OPS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < c->n; i++) {
		const struct tf_op *op = &c->ops[i];
		const char *name = op_name(op->kind);
		if (!name)
			return -EINVAL;
		append(&b, "%s%s(", i ? " " : "", name);
		switch (op->kind) {
		case TF_RANDOM_RESIZED_CROP:
			append_sizes(&b, op);
			append(&b, ", scale=");
			append_real(&b, op->scale_lo);
			append(&b, ":");
			append_real(&b, op->scale_hi);
			append(&b, ", ratio=");
			append_real(&b, op->ratio_lo);
			append(&b, ":");
			append_real(&b, op->ratio_hi);
			break;
		case TF_RESIZE:
		case TF_CENTER_CROP:
			append_sizes(&b, op);
			break;
		case TF_HFLIP:
			append_real(&b, op->p);
			break;
		}
		append(&b, ")");
	}
	return b.truncated ? -ENOSPC : 0;
}

/* --- Planning ------------------------------------------------------------ */

/* xoshiro256**, seeded through splitmix64 from a hash of (seed, epoch,
 * index): one short independent stream per sample. */
struct rng {
	uint64_t s[4];
};

static void rng_seed(struct rng *r, uint64_t seed, uint64_t epoch, uint64_t index)
{
	uint64_t k = hash_sample(seed, 0x7472616e73666f72ull /* "transfor" */, epoch, index);
	for (uint64_t i = 0; i < 4; i++) /* splitmix64's outputs 1..4 from k */
		r->s[i] = hash_mix64(k + i * HASH_GOLDEN);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi), torch's uniform_(lo, hi). */
static double rng_uniform(struct rng *r, double lo, double hi)
{
	return lo + (hi - lo) * rng_unit(r);
}

/* Uniform in [lo, hi] inclusive, torch.randint(lo, hi + 1). Rejects the
 * lowest 2^64 mod n draws so every residue is equally likely. */
static uint64_t rng_int(struct rng *r, uint64_t lo, uint64_t hi)
{
	uint64_t n = hi - lo + 1;
	if (n == 0) /* the whole 64-bit range */
		return rng_next(r);
	uint64_t threshold = (0 - n) % n;
	uint64_t x;
	do
		x = rng_next(r);
	while (x < threshold);
	return lo + x % n;
}

/* Python's round(): halves go to the even neighbour. Exact for any double
 * below 2^52, since x - floor(x) is then computed exactly. */
static double round_half_even(double x)
{
	double f = floor(x), frac = x - f;
	if (frac > 0.5)
		return f + 1.0;
	if (frac < 0.5)
		return f;
	return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

/*
 * Where the sample stands while the chain runs: the box in source pixels
 * that the virtual image (vw x vh, what torchvision would hold at this
 * point) covers, and whether that virtual image is mirrored.
 *
 * Virtual sizes stay below 2^49: images are below 2^32 a side, ops set
 * sizes up to 2^16, and a shorter-edge resize never raises long/short
 * above the image's 2^32 or 2^16 for op-made sizes, so products and
 * areas fit in doubles with room to spare.
 */
struct walk {
	double x, y, w, h;
	uint64_t vw, vh;
	bool flip;
};

/* Crops the virtual image at (left, top) to cw x ch, as torchvision's
 * F.crop; the virtual image becomes the crop. */
static void walk_crop(struct walk *st, int64_t left, int64_t top, uint64_t cw, uint64_t ch)
{
	double sx = st->w / (double)st->vw, sy = st->h / (double)st->vh;
	if (st->flip) /* the virtual image is mirrored: its x runs right to left */
		left = (int64_t)st->vw - left - (int64_t)cw;
	st->x += (double)left * sx;
	st->y += (double)top * sy;
	st->w = (double)cw * sx;
	st->h = (double)ch * sy;
	st->vw = cw;
	st->vh = ch;
}

/* RandomResizedCrop.get_params on a W x H image: (left, top, w, h). */
static void random_resized_box(const struct tf_op *op, uint64_t W, uint64_t H, struct rng *r,
			       int64_t *left, int64_t *top, uint64_t *w, uint64_t *h)
{
	const double area = (double)W * (double)H;
	const double log_lo = log(op->ratio_lo), log_hi = log(op->ratio_hi);

	for (int attempt = 0; attempt < 10; attempt++) {
		double target_area = area * rng_uniform(r, op->scale_lo, op->scale_hi);
		double aspect = exp(rng_uniform(r, log_lo, log_hi));
		double wd = round_half_even(sqrt(target_area * aspect));
		double hd = round_half_even(sqrt(target_area / aspect));
		if (wd > 0.0 && wd <= (double)W && hd > 0.0 && hd <= (double)H) {
			*w = (uint64_t)wd;
			*h = (uint64_t)hd;
			*top = (int64_t)rng_int(r, 0, H - *h);
			*left = (int64_t)rng_int(r, 0, W - *w);
			return;
		}
	}
	/* Fallback: the largest centred box whose aspect is clamped into the
	 * ratio range. Sides are kept in 1..W and 1..H where torchvision would
	 * fail on a zero-sized crop (a ratio far beyond the image's shape). */
	double in_ratio = (double)W / (double)H;
	uint64_t fw = W, fh = H;
	if (in_ratio < op->ratio_lo)
		fh = (uint64_t)round_half_even((double)W / op->ratio_lo);
	else if (in_ratio > op->ratio_hi)
		fw = (uint64_t)round_half_even((double)H * op->ratio_hi);
	fw = fw < 1 ? 1 : (fw > W ? W : fw);
	fh = fh < 1 ? 1 : (fh > H ? H : fh);
	*w = fw;
	*h = fh;
	*top = (int64_t)((H - fh) / 2);
	*left = (int64_t)((W - fw) / 2);
}

/* F.resize's output size for an int: the shorter edge becomes size, the
 * longer int(size * long / short), truncated. */
static void walk_resize(struct walk *st, const struct tf_op *op)
{
	if (op->w != 0) {
		st->vw = op->w;
		st->vh = op->h;
		return;
	}
	uint64_t size = op->h;
	if (st->vw <= st->vh) {
		st->vh = (uint64_t)((double)size * (double)st->vh / (double)st->vw);
		st->vw = size;
	} else {
		st->vw = (uint64_t)((double)size * (double)st->vw / (double)st->vh);
		st->vh = size;
	}
}

/* F.center_crop's offset along one side. A crop larger than the side is
 * first padded by (crop - side) // 2 before it (the rest after), and then
 * cropped at 0; otherwise the offset is int(round((side - crop) / 2.0)). */
static int64_t center_offset(uint64_t side, uint64_t crop)
{
	if (crop > side)
		return -(int64_t)((crop - side) / 2);
	return (int64_t)round_half_even((double)(side - crop) / 2.0);
}

void tf_plan_sample(const struct tf_chain *c, uint64_t seed, uint64_t epoch,
		    uint64_t index, uint32_t img_w, uint32_t img_h, struct tf_plan *out)
{
	struct rng r;
	rng_seed(&r, seed, epoch, index);
	if (img_w == 0)
		img_w = 1;
	if (img_h == 0)
		img_h = 1;
	struct walk st = {0.0, 0.0, img_w, img_h, img_w, img_h, false};

	for (uint32_t i = 0; i < c->n && i < TF_OPS_MAX; i++) {
		const struct tf_op *op = &c->ops[i];
		switch (op->kind) {
		case TF_RANDOM_RESIZED_CROP: {
			int64_t left, top;
			uint64_t w, h;
			random_resized_box(op, st.vw, st.vh, &r, &left, &top, &w, &h);
			walk_crop(&st, left, top, w, h);
			st.vw = op->w; /* then resized to the op's size */
			st.vh = op->h;
			break;
		}
		case TF_RESIZE:
			walk_resize(&st, op);
			break;
		case TF_CENTER_CROP:
			walk_crop(&st, center_offset(st.vw, op->w), center_offset(st.vh, op->h),
				  op->w, op->h);
			break;
		case TF_HFLIP:
			/* RandomHorizontalFlip draws even when p is 0 or 1, so the
			 * ops after it see the same stream whatever p is. */
			if (rng_unit(&r) < op->p)
				st.flip = !st.flip;
			break;
		}
	}
	out->x = st.x;
	out->y = st.y;
	out->w = st.w;
	out->h = st.h;
	/* tf_parse guarantees the chain ends on a fixed size, so this is
	 * c->out_h x c->out_w for every image. */
	out->out_w = (uint32_t)st.vw;
	out->out_h = (uint32_t)st.vh;
	out->flip = st.flip;
}
