/*
 * transform: a transform chain's text, parsed and formatted (transform.h;
 * the per-sample plan is transform_plan.c).
 *
 * The parser is the edge where a pipeline's transform text enters loaderd:
 * every number is checked for syntax and range here, so the planner can
 * trust the chain.
 */
#include "image/transform.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"

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
struct tf_slice {
	const char *s;
	size_t len;
};

static int tf_quote_len(struct tf_slice v)
{
	return (int)(v.len < QUOTE_MAX ? v.len : QUOTE_MAX);
}

static bool tf_is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

static bool tf_is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static struct tf_slice tf_trim(struct tf_slice v)
{
	while (v.len > 0 && tf_is_space(v.s[0])) {
		v.s++;
		v.len--;
	}
	while (v.len > 0 && tf_is_space(v.s[v.len - 1]))
		v.len--;
	return v;
}

static bool tf_slice_is(struct tf_slice v, const char *word)
{
	return v.len == strlen(word) && memcmp(v.s, word, v.len) == 0;
}

/* Sizes are plain decimal integers: no sign, no exponent, no fraction. */
static int tf_parse_size(const char *op, struct tf_slice v, uint32_t *out, char *err,
			 size_t err_cap)
{
	uint64_t value = 0;
	if (v.len == 0)
		return errtext(err, err_cap, -EINVAL, "%s: empty size", op);
	for (size_t i = 0; i < v.len; i++) {
		if (!tf_is_digit(v.s[i]))
			return errtext(err, err_cap, -EINVAL,
				       "%s: size \"%.*s\": not a whole number", op, tf_quote_len(v),
				       v.s);
		if (value <= TF_SIZE_MAX) /* stop growing once out of range */
			value = value * 10 + (uint64_t)(v.s[i] - '0');
	}
	if (value < 1 || value > TF_SIZE_MAX)
		return errtext(err, err_cap, -EINVAL, "%s: size \"%.*s\": must be 1..%d", op,
			       tf_quote_len(v), v.s, TF_SIZE_MAX);
	*out = (uint32_t)value;
	return 0;
}

/* Decimal syntax only, digits[.digits][e[+-]digits], checked before strtod
 * so that "nan", "inf", hex floats and signs never get through. */
static bool tf_decimal_syntax(struct tf_slice v)
{
	size_t i = 0, mantissa_digits = 0;
	while (i < v.len && tf_is_digit(v.s[i])) {
		i++;
		mantissa_digits++;
	}
	if (i < v.len && v.s[i] == '.') {
		i++;
		while (i < v.len && tf_is_digit(v.s[i])) {
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
		while (i < v.len && tf_is_digit(v.s[i])) {
			i++;
			exp_digits++;
		}
		if (exp_digits == 0)
			return false;
	}
	return i == v.len;
}

/* A non-negative finite number; what names the argument in messages. */
static int tf_parse_real(const char *op, const char *what, struct tf_slice v, double *out,
			 char *err, size_t err_cap)
{
	char text[NUMBER_MAX + 1];
	if (v.len == 0 || v.len > NUMBER_MAX || !tf_decimal_syntax(v))
		return errtext(err, err_cap, -EINVAL, "%s: %s \"%.*s\": not a number", op, what,
			       tf_quote_len(v), v.s);
	memcpy(text, v.s, v.len);
	text[v.len] = '\0';
	double value = strtod(text, NULL);
	if (!isfinite(value))
		return errtext(err, err_cap, -EINVAL, "%s: %s \"%.*s\": out of range", op, what,
			       tf_quote_len(v), v.s);
	*out = value;
	return 0;
}

/* "lo:hi" with 0 < lo <= hi (and hi <= max when max > 0). */
static int tf_parse_range(const char *op, const char *what, struct tf_slice v, double max,
			  double *lo, double *hi, char *err, size_t err_cap)
{
	const char *colon = memchr(v.s, ':', v.len);
	if (!colon)
		return errtext(err, err_cap, -EINVAL, "%s: %s \"%.*s\": expected low:high", op,
			       what, tf_quote_len(v), v.s);
	struct tf_slice a = tf_trim((struct tf_slice){v.s, (size_t)(colon - v.s)});
	struct tf_slice b =
		tf_trim((struct tf_slice){colon + 1, v.len - (size_t)(colon - v.s) - 1});
	int rc = tf_parse_real(op, what, a, lo, err, err_cap);
	if (rc == 0)
		rc = tf_parse_real(op, what, b, hi, err, err_cap);
	if (rc < 0)
		return rc;
	if (*lo <= 0.0)
		return errtext(err, err_cap, -EINVAL, "%s: %s \"%.*s\": low bound must be above 0",
			       op, what, tf_quote_len(v), v.s);
	if (*lo > *hi)
		return errtext(err, err_cap, -EINVAL, "%s: %s \"%.*s\": low bound above high bound",
			       op, what, tf_quote_len(v), v.s);
	if (max > 0.0 && *hi > max)
		return errtext(err, err_cap, -EINVAL, "%s: %s \"%.*s\": high bound above %g", op,
			       what, tf_quote_len(v), v.s, max);
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

static const char *tf_op_name(enum tf_kind kind)
{
	for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++)
		if (op_names[i].kind == kind)
			return op_names[i].name;
	return NULL;
}

/* Fills op from its arguments: positional ones first (sizes, or hflip's p),
 * then key=value ones. */
static int tf_parse_args(const char *name, struct tf_slice *args, unsigned nargs, struct tf_op *op,
			 char *err, size_t err_cap)
{
	struct tf_slice positional[ARGS_MAX];
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
				return errtext(err, err_cap, -EINVAL,
					       "%s: argument \"%.*s\": positional after key=value",
					       name, tf_quote_len(args[i]), args[i].s);
			positional[npos++] = args[i];
			continue;
		}
		seen_key = true;
		struct tf_slice key =
			tf_trim((struct tf_slice){args[i].s, (size_t)(eq - args[i].s)});
		struct tf_slice value = tf_trim(
			(struct tf_slice){eq + 1, args[i].len - (size_t)(eq - args[i].s) - 1});
		if (op->kind == TF_RANDOM_RESIZED_CROP && tf_slice_is(key, "scale")) {
			if (seen_scale)
				return errtext(err, err_cap, -EINVAL, "%s: scale given twice",
					       name);
			seen_scale = true;
			rc = tf_parse_range(name, "scale", value, 1.0, &op->scale_lo, &op->scale_hi,
					    err, err_cap);
		} else if (op->kind == TF_RANDOM_RESIZED_CROP && tf_slice_is(key, "ratio")) {
			if (seen_ratio)
				return errtext(err, err_cap, -EINVAL, "%s: ratio given twice",
					       name);
			seen_ratio = true;
			rc = tf_parse_range(name, "ratio", value, 0.0, &op->ratio_lo, &op->ratio_hi,
					    err, err_cap);
		} else if (op->kind == TF_HFLIP && tf_slice_is(key, "p")) {
			seen_p = true;
			rc = 0;
			positional[npos++] = value; /* same as hflip(value) */
		} else {
			return errtext(err, err_cap, -EINVAL, "%s: unknown argument \"%.*s\"", name,
				       tf_quote_len(key), key.s);
		}
		if (rc < 0)
			return rc;
	}

	if (op->kind == TF_HFLIP) {
		if (npos > 1)
			return errtext(err, err_cap, -EINVAL, "%s: %s", name,
				       seen_p ? "p given twice" : "expected one probability");
		if (npos == 1) {
			rc = tf_parse_real(name, "p", positional[0], &op->p, err, err_cap);
			if (rc < 0)
				return rc;
			if (op->p > 1.0)
				return errtext(err, err_cap, -EINVAL,
					       "%s: p \"%.*s\": must be in 0..1", name,
					       tf_quote_len(positional[0]), positional[0].s);
		}
		return 0;
	}

	if (npos == 0)
		return errtext(err, err_cap, -EINVAL, "%s: expected a size", name);
	if (npos > 2)
		return errtext(err, err_cap, -EINVAL,
			       "%s: expected at most two sizes (height, width)", name);
	rc = tf_parse_size(name, positional[0], &op->h, err, err_cap);
	if (rc < 0)
		return rc;
	if (npos == 2)
		return tf_parse_size(name, positional[1], &op->w, err, err_cap);
	/* One number: a square, except resize where it names the shorter edge. */
	op->w = op->kind == TF_RESIZE ? 0 : op->h;
	return 0;
}

/* Parses one op starting at *pos (no leading space) into the zeroed *op;
 * advances *pos past it. */
static int tf_parse_op(const char **pos, struct tf_op *op, char *err, size_t err_cap)
{
	const char *p = *pos;
	struct tf_slice name = {p, 0};
	while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || tf_is_digit(*p) || *p == '_')
		p++;
	name.len = (size_t)(p - name.s);
	if (name.len == 0) {
		struct tf_slice rest = {p, strlen(p)};
		return errtext(err, err_cap, -EINVAL,
			       "unexpected \"%.*s\" where an op name belongs", tf_quote_len(rest),
			       rest.s);
	}
	const char *canonical = NULL;
	for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++) {
		if (tf_slice_is(name, op_names[i].name)) {
			canonical = op_names[i].name;
			op->kind = op_names[i].kind;
		}
	}
	if (!canonical)
		return errtext(err, err_cap, -EINVAL, "%.*s: unknown op (known: "
			       "random_resized_crop, resize, center_crop, hflip)",
			       tf_quote_len(name), name.s);
	while (tf_is_space(*p))
		p++;
	if (*p != '(')
		return errtext(err, err_cap, -EINVAL, "%s: expected \"(\" after the name",
			       canonical);
	const char *open = p;
	const char *close = open + 1;
	while (*close && *close != ')' && *close != '(')
		close++;
	if (*close == '(')
		return errtext(err, err_cap, -EINVAL, "%s: unexpected \"(\" inside the arguments",
			       canonical);
	if (*close != ')')
		return errtext(err, err_cap, -EINVAL, "%s: missing \")\"", canonical);
	if (close[1] != '\0' && !tf_is_space(close[1]))
		return errtext(err, err_cap, -EINVAL, "%s: expected a space after \")\"",
			       canonical);

	struct tf_slice args[ARGS_MAX];
	unsigned nargs = 0;
	struct tf_slice inside = tf_trim((struct tf_slice){open + 1, (size_t)(close - open - 1)});
	if (inside.len > 0) {
		const char *a = inside.s, *end = inside.s + inside.len;
		for (;;) {
			const char *comma = memchr(a, ',', (size_t)(end - a));
			const char *stop = comma ? comma : end;
			struct tf_slice arg = tf_trim((struct tf_slice){a, (size_t)(stop - a)});
			if (arg.len == 0)
				return errtext(err, err_cap, -EINVAL, "%s: empty argument",
					       canonical);
			if (nargs == ARGS_MAX)
				return errtext(err, err_cap, -EINVAL, "%s: too many arguments",
					       canonical);
			args[nargs++] = arg;
			if (!comma)
				break;
			a = comma + 1;
		}
	}
	*pos = close + 1;
	return tf_parse_args(canonical, args, nargs, op, err, err_cap);
}

int tf_parse(const char *text, struct tf_chain *out, char *err, size_t err_cap)
{
	memset(out, 0, sizeof(*out));
	if (err && err_cap > 0)
		err[0] = '\0';
	if (!text)
		return errtext(err, err_cap, -EINVAL, "empty transform chain");

	const char *p = text;
	for (;;) {
		while (tf_is_space(*p))
			p++;
		if (*p == '\0')
			break;
		struct tf_op op;
		memset(&op, 0, sizeof(op));
		int rc = tf_parse_op(&p, &op, err, err_cap);
		if (rc < 0)
			goto reset_out;
		if (out->n == TF_OPS_MAX) {
			rc = errtext(err, err_cap, -EINVAL, "%s: too many ops (at most %d)",
				     tf_op_name(op.kind), TF_OPS_MAX);
			goto reset_out;
		}
		out->ops[out->n++] = op;
	}
	if (out->n == 0) {
		errtext(err, err_cap, -EINVAL, "empty transform chain");
		goto reset_out;
	}

	/* The last op that sets a size decides the output size; a shorter-edge
	 * resize leaves it to the image, which a batch cannot allow. */
	const struct tf_op *last = NULL;
	for (uint32_t i = 0; i < out->n; i++)
		if (out->ops[i].kind != TF_HFLIP)
			last = &out->ops[i];
	if (!last || (last->kind == TF_RESIZE && last->w == 0)) {
		errtext(err, err_cap, -EINVAL,
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
struct tf_builder {
	char *buf;
	size_t cap, len;
	bool truncated;
};

static void tf_append(struct tf_builder *b, const char *fmt, ...) __attribute__((format(printf, 2,
											3)));

static void tf_append(struct tf_builder *b, const char *fmt, ...)
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
static void tf_append_real(struct tf_builder *b, double v)
{
	char text[NUMBER_MAX + 1];
	for (int digits = 1; digits <= 17; digits++) {
		snprintf(text, sizeof(text), "%.*g", digits, v);
		if (strtod(text, NULL) == v)
			break;
	}
	tf_append(b, "%s", text);
}

static void tf_append_sizes(struct tf_builder *b, const struct tf_op *op)
{
	/* resize(S, S) is exact while resize(S) is the shorter edge, so only the
	 * crops may fold a square into one number. */
	if (op->w == 0 || (op->kind != TF_RESIZE && op->w == op->h))
		tf_append(b, "%u", (unsigned)op->h);
	else
		tf_append(b, "%u, %u", (unsigned)op->h, (unsigned)op->w);
}

int tf_format(const struct tf_chain *c, char *buf, size_t cap)
{
	struct tf_builder b = {buf, cap, 0, false};
	if (cap > 0)
		buf[0] = '\0';
	if (c->n == 0 || c->n > TF_OPS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < c->n; i++) {
		const struct tf_op *op = &c->ops[i];
		const char *name = tf_op_name(op->kind);
		if (!name)
			return -EINVAL;
		tf_append(&b, "%s%s(", i ? " " : "", name);
		switch (op->kind) {
		case TF_RANDOM_RESIZED_CROP:
			tf_append_sizes(&b, op);
			tf_append(&b, ", scale=");
			tf_append_real(&b, op->scale_lo);
			tf_append(&b, ":");
			tf_append_real(&b, op->scale_hi);
			tf_append(&b, ", ratio=");
			tf_append_real(&b, op->ratio_lo);
			tf_append(&b, ":");
			tf_append_real(&b, op->ratio_hi);
			break;
		case TF_RESIZE:
		case TF_CENTER_CROP:
			tf_append_sizes(&b, op);
			break;
		case TF_HFLIP:
			tf_append_real(&b, op->p);
			break;
		}
		tf_append(&b, ")");
	}
	return b.truncated ? -ENOSPC : 0;
}
