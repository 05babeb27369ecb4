/* SPDX-License-Identifier: Apache-2.0 */
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
#include "common/suggest.h"

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

/* Each op: its name, torchvision's (accepted as an alias: the same op,
 * the same arguments), and the form its arguments take, quoted in every
 * error about them. */
static const struct {
	const char *name;
	enum tf_kind kind;
	const char *torchvision;
	const char *form;
} op_names[] = {
	{"random_resized_crop", TF_RANDOM_RESIZED_CROP, "RandomResizedCrop",
	 "random_resized_crop(size [, width] [, scale=lo:hi] [, ratio=lo:hi]), e.g. "
	 "random_resized_crop(224, scale=0.08:1.0)"},
	{"resize", TF_RESIZE, "Resize", "resize(size) or resize(height, width)"},
	{"center_crop", TF_CENTER_CROP, "CenterCrop", "center_crop(size) or center_crop(height, width)"},
	{"hflip", TF_HFLIP, "RandomHorizontalFlip", "hflip([p]), e.g. hflip(0.5)"},
};
#define TF_OP_NAMES (sizeof(op_names) / sizeof(op_names[0]))

/* torchvision transforms that are no op of a chain here, and what does
 * their work instead (docs/config.md, "Image pipelines"). */
static const struct {
	const char *name;
	const char *instead;
} tf_not_ops[] = {
	{"Normalize", "normalisation is the pipeline's keys: dtype = float32, mean = R,G,B and "
		      "std = R,G,B, e.g. mean = 0.485,0.456,0.406 and std = 0.229,0.224,0.225"},
	{"ToTensor", "not needed: a batch is a tensor already (uint8, or scaled to 0..1 with "
		     "dtype = float32)"},
	{"PILToTensor", "not needed: a batch is a uint8 tensor already"},
	{"ToImage", "not needed: a batch is a uint8 tensor already"},
	{"ToDtype", "the output type is the pipeline's key dtype (uint8, float16, float32)"},
	{"ConvertImageDtype", "the output type is the pipeline's key dtype (uint8, float16, float32)"},
	{"Compose", "write the ops one after another, separated by spaces, e.g. "
		    "random_resized_crop(224) hflip(0.5)"},
};

/* Whether name is word, ignoring ASCII case and underscores
 * ("random_resized_crop" is "RandomResizedCrop"). */
static bool tf_name_like(struct tf_slice name, const char *word)
{
	size_t i = 0;
	for (const char *w = word; *w; w++) {
		if (*w == '_')
			continue;
		while (i < name.len && name.s[i] == '_')
			i++;
		if (i == name.len)
			return false;
		char a = name.s[i++], b = *w;
		if (a >= 'A' && a <= 'Z')
			a = (char)(a - 'A' + 'a');
		if (b >= 'A' && b <= 'Z')
			b = (char)(b - 'A' + 'a');
		if (a != b)
			return false;
	}
	while (i < name.len && name.s[i] == '_')
		i++;
	return i == name.len;
}

/* The message for an op name that is none of ours: what torchvision's
 * transform of that name becomes here, or the closest op, and the ops. */
static int tf_unknown_op(struct tf_slice full, struct tf_slice name, char *err, size_t err_cap)
{
	for (size_t i = 0; i < sizeof(tf_not_ops) / sizeof(tf_not_ops[0]); i++)
		if (tf_name_like(name, tf_not_ops[i].name))
			return errtext(err, err_cap, -EINVAL, "%.*s: not an op of a transform chain: %s",
				       tf_quote_len(full), full.s, tf_not_ops[i].instead);
	struct suggest sg;
	suggest_init(&sg, name.s, name.len);
	for (size_t i = 0; i < TF_OP_NAMES; i++) {
		suggest_offer(&sg, op_names[i].name);
		suggest_offer(&sg, op_names[i].torchvision);
	}
	const char *best = suggest_best(&sg);
	for (size_t i = 0; best && i < TF_OP_NAMES; i++)
		if (best == op_names[i].torchvision)
			best = op_names[i].name;
	char hint[64] = "";
	if (best)
		snprintf(hint, sizeof(hint), "; did you mean %s?", best);
	return errtext(err, err_cap, -EINVAL, "%.*s: unknown op%s (ops: random_resized_crop, resize, "
		       "center_crop, hflip; torchvision's names RandomResizedCrop, Resize, CenterCrop "
		       "and RandomHorizontalFlip are accepted for them)", tf_quote_len(full), full.s,
		       hint);
}

/* torchvision's argument text with its brackets taken out: a bracketed
 * value of a key is a range, lo:hi ("scale=(0.08, 1.0)" -> "scale=0.08:1.0"),
 * a bracketed positional argument is the two sizes ("(256, 320)" ->
 * "256, 320"). Into buf, cut to fit. */
static void tf_unbracket(struct tf_slice in, char *buf, size_t cap)
{
	size_t n = 0;
	int depth = 0;
	bool keyed = false; /* the bracket open now is a key's value */
	char prev = ',';    /* the last character other than a space */
	for (size_t i = 0; i < in.len && n + 1 < cap; i++) {
		char ch = in.s[i];
		if (ch == '(' || ch == '[') {
			if (depth++ == 0)
				keyed = prev == '=';
			continue;
		}
		if ((ch == ')' || ch == ']') && depth > 0) {
			depth--;
			continue;
		}
		if (tf_is_space(ch) && depth > 0 && keyed)
			continue;
		if (ch == ',' && depth > 0 && keyed)
			ch = ':';
		if (tf_is_space(ch) && prev == '=')
			continue;
		if (!tf_is_space(ch))
			prev = ch;
		buf[n++] = ch;
	}
	buf[n] = '\0';
}

/* Appends "; expected FORM" of op i to the message in err. */
static int tf_expected(size_t i, char *err, size_t err_cap)
{
	size_t len = err && err_cap ? strlen(err) : 0;
	if (len + 1 < err_cap)
		snprintf(err + len, err_cap - len, "; expected %s", op_names[i].form);
	return -EINVAL;
}

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
			static const char *const keys[] = {"scale", "ratio", NULL};
			const char *best = op->kind == TF_RANDOM_RESIZED_CROP ?
					   suggest_among(key.s, key.len, keys) : NULL;
			return errtext(err, err_cap, -EINVAL, "%s: unknown argument \"%.*s\"%s%s%s", name,
				       tf_quote_len(key), key.s, best ? "; did you mean " : "",
				       best ? best : "", best ? "?" : "");
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
	/* the name, with a module's prefix ("transforms.Resize") if any */
	struct tf_slice full = {p, 0};
	while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || tf_is_digit(*p) || *p == '_' ||
	       (*p == '.' && p > full.s))
		p++;
	full.len = (size_t)(p - full.s);
	struct tf_slice name = full;
	const char *dot = memrchr(full.s, '.', full.len);
	if (dot)
		name = (struct tf_slice){dot + 1, full.len - (size_t)(dot + 1 - full.s)};
	if (full.len == 0) {
		struct tf_slice rest = {p, strlen(p)};
		return errtext(err, err_cap, -EINVAL,
			       "unexpected \"%.*s\" where an op name belongs", tf_quote_len(rest),
			       rest.s);
	}
	size_t which = TF_OP_NAMES;
	for (size_t i = 0; i < TF_OP_NAMES; i++)
		if (tf_slice_is(name, op_names[i].name) || tf_slice_is(name, op_names[i].torchvision))
			which = i;
	if (which == TF_OP_NAMES)
		return tf_unknown_op(full, name, err, err_cap);
	const char *canonical = op_names[which].name;
	op->kind = op_names[which].kind;
	while (tf_is_space(*p))
		p++;
	if (*p != '(') {
		errtext(err, err_cap, -EINVAL, "%s: expected \"(\" after the name", canonical);
		return tf_expected(which, err, err_cap);
	}
	const char *open = p;
	/* The closing parenthesis, over torchvision's tuples and lists (an
	 * argument that starts with a bracket), refused below with the text
	 * to write instead; a bracket elsewhere is a plain syntax error. */
	const char *close = open + 1;
	int depth = 0;
	bool bracketed = false;
	char prev = ',';
	for (; *close && (*close != ')' || depth > 0); close++) {
		if (*close == '(' || *close == '[') {
			if (depth == 0 && prev != ',' && prev != '=')
				break;
			bracketed = true;
			depth++;
		} else if ((*close == ')' || *close == ']') && depth > 0) {
			depth--;
		}
		if (!tf_is_space(*close))
			prev = *close;
	}
	if (*close == '(' || *close == '[') {
		errtext(err, err_cap, -EINVAL, "%s: unexpected \"%c\" inside the arguments", canonical,
			*close);
		return tf_expected(which, err, err_cap);
	}
	if (*close != ')') {
		errtext(err, err_cap, -EINVAL, "%s: missing \")\"", canonical);
		return tf_expected(which, err, err_cap);
	}
	if (bracketed || dot) {
		char args[128];
		tf_unbracket((struct tf_slice){open + 1, (size_t)(close - open - 1)}, args, sizeof(args));
		size_t shown = (size_t)(close + 1 - full.s);
		return errtext(err, err_cap, -EINVAL, "%s: \"%.*s\" is torchvision's syntax: %s; "
			       "write %s(%s)", canonical, (int)(shown < 96 ? shown : 96), full.s,
			       dot ? "no module prefix, "
			       "ranges as lo:hi and two sizes as height, width" : "a range is lo:hi and "
			       "two sizes are height, width, without brackets", canonical, args);
	}
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
			if (arg.len == 0) {
				errtext(err, err_cap, -EINVAL, "%s: empty argument", canonical);
				return tf_expected(which, err, err_cap);
			}
			if (nargs == ARGS_MAX) {
				errtext(err, err_cap, -EINVAL, "%s: too many arguments", canonical);
				return tf_expected(which, err, err_cap);
			}
			args[nargs++] = arg;
			if (!comma)
				break;
			a = comma + 1;
		}
	}
	*pos = close + 1;
	if (tf_parse_args(canonical, args, nargs, op, err, err_cap) < 0)
		return tf_expected(which, err, err_cap);
	return 0;
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
