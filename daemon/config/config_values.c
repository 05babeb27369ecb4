/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_values: the parser of each value type (config_impl.h's enum
 * config_value_type), which config_set_value picks by the key's entry in
 * the tables (config_keys.c). A value parser either stores the value in
 * its field or records the error (config_fail) and leaves the field as it
 * was. Most errors read "[SECTION] KEY: "VALUE" is not ..."
 * (config_bad_value). The `source` key's value, one source or a blend of
 * several, is config_source.c's.
 */
#include "daemon/config/config_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "image/transform.h"

/* Decimal digits only: no sign, no space, no base prefix. 0, -EINVAL or
 * -ERANGE (more than 64 bits). */
static int config_parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (*s == '\0')
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int config_parse_size(const char *text, uint64_t *out)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
		{"", 0}, {"K", 10}, {"KiB", 10}, {"M", 20}, {"MiB", 20},
		{"G", 30}, {"GiB", 30}, {"T", 40}, {"TiB", 40},
	};
	uint64_t v = 0;
	bool overflow = false;
	const char *s = text;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			overflow = true;
		else
			v = v * 10 + d;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s, units[i].suffix) != 0)
			continue;
		if (overflow || v > (UINT64_MAX >> units[i].shift))
			return -ERANGE;
		*out = v << units[i].shift;
		return 0;
	}
	return -EINVAL;
}

/* Stores v in the integer, enum or bool field k describes. */
static void config_store(const struct config_key *k, void *field, uint64_t v)
{
	if (k->size == sizeof(uint64_t))
		*(uint64_t *)field = v;
	else if (k->size == sizeof(uint32_t)) /* also the enums */
		*(uint32_t *)field = (uint32_t)v;
	else
		*(bool *)field = v != 0;
}

/* Stores v when parsed is true and v is in k's min..max, else records that
 * value "is not WHAT in MIN..MAX[UNIT]". */
static void config_store_in_range(struct config_parse *p, const struct config_key *k,
				  const char *value, void *field, bool parsed, uint64_t v,
				  const char *what, const char *unit)
{
	if (parsed && v >= k->min && v <= k->max)
		config_store(k, field, v);
	else
		config_bad_value(p, k, value, "is not %s in %llu..%llu%s", what,
				 (unsigned long long)k->min, (unsigned long long)k->max, unit);
}

static void config_value_uint(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	uint64_t v = 0;
	bool parsed = config_parse_u64(value, &v) == 0;
	config_store_in_range(p, k, value, field, parsed, v, "an integer", "");
}

/* workers: "auto" (0: config_finish sets the start) or an integer. */
static void config_value_uint_auto(struct config_parse *p, const struct config_key *k,
				   const char *value, void *field)
{
	if (strcmp(value, "auto") == 0) {
		config_store(k, field, 0);
		return;
	}
	uint64_t v = 0;
	bool parsed = config_parse_u64(value, &v) == 0;
	config_store_in_range(p, k, value, field, parsed, v, "an integer", " or auto");
}

/* worker_cpu_budget: cores, with an optional fraction ("12", "7.5"), in
 * k->min..k->max thousandths, or a whole percent in 1..100 ("75%"). */
static void config_value_cpu_budget(struct config_parse *p, const struct config_key *k,
				    const char *value, void *field)
{
	struct config_cpu_budget b = {0, 0};
	size_t len = strlen(value);
	const char *s = value;
	uint64_t whole = 0, milli = 0;
	unsigned digits = 0, frac_digits = 0;
	for (; *s >= '0' && *s <= '9' && digits < 9; s++, digits++)
		whole = whole * 10 + (uint64_t)(*s - '0');
	if (*s == '.' && len && value[len - 1] != '%') {
		for (s++; *s >= '0' && *s <= '9' && frac_digits < 3; s++, frac_digits++)
			milli = milli * 10 + (uint64_t)(*s - '0');
		for (unsigned i = frac_digits; i < 3; i++)
			milli *= 10;
	}
	bool percent = *s == '%' && s[1] == '\0';
	if (digits == 0 || (*s != '\0' && !percent) || (*s == '\0' && value[len - 1] == '.')) {
		config_bad_value(p, k, value, "is not a number of cores (\"12\", \"7.5\") or a "
				 "percent of the online cores (\"75%%\")");
		return;
	}
	if (percent) {
		if (whole < 1 || whole > 100) {
			config_bad_value(p, k, value, "is not a percent in 1..100");
			return;
		}
		b.percent = (double)whole;
	} else {
		uint64_t m = whole * 1000 + milli;
		if (m < k->min || m > k->max) {
			config_bad_value(p, k, value, "is not a number of cores in %.3g..%.0f",
					 (double)k->min / 1000, (double)k->max / 1000);
			return;
		}
		b.cores = (double)m / 1000;
	}
	memcpy(field, &b, sizeof(b));
}

static void config_value_bool(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	static const char *const names[] = {"false", "true", "no", "yes", "off", "on", "0", "1", NULL};
	for (size_t i = 0; names[i]; i++) {
		if (strcasecmp(value, names[i]) == 0) {
			config_store(k, field, i % 2);
			return;
		}
	}
	char hint[64];
	config_bad_value(p, k, value, "is not a boolean (true/false/yes/no/on/off/1/0)%s",
			 config_did_you_mean(value, strlen(value), names, hint, sizeof(hint)));
}

static void config_value_size(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	uint64_t v = 0;
	int rc = config_parse_size(value, &v);
	if (rc == -EINVAL)
		config_bad_value(p, k, value, "is not a size (bytes, or a number followed by "
				 "K, M, G, T, KiB, MiB, GiB or TiB)");
	else
		config_store_in_range(p, k, value, field, rc == 0, v, "a size", " bytes");
}

static void config_value_mode(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	uint64_t v = 0;
	const char *s = value;
	for (; *s >= '0' && *s <= '7' && v <= k->max; s++)
		v = v * 8 + (uint64_t)(*s - '0');
	if (*value == '\0' || *s != '\0' || v > k->max)
		config_bad_value(p, k, value, "is not an octal mode in 0..0%llo",
				 (unsigned long long)k->max);
	else
		config_store(k, field, v);
}

static void config_value_string(struct config_parse *p, const struct config_key *k,
				const char *value, void *field)
{
	size_t len = strlen(value);
	if (len > k->max)
		config_bad_value(p, k, value, "is too long (%zu bytes, at most %llu)", len,
				 (unsigned long long)k->max);
	else
		memcpy(field, value, len + 1);
}

static void config_value_log_level(struct config_parse *p, const struct config_key *k,
				   const char *value, void *field)
{
	static const char *const names[] = {"error", "warning", "notice", "info", "debug", NULL};
	enum log_level level;
	char hint[64];
	if (log_level_parse(value, &level) == 0)
		config_store(k, field, level);
	else
		config_bad_value(p, k, value, "is not one of error|warning|notice|info|debug%s",
				 config_did_you_mean(value, strlen(value), names, hint, sizeof(hint)));
}

/* token_dtype (the storable names, into token_bytes) or token_output (any
 * name, into an enum proto_dtype). */
static void config_value_token(struct config_parse *p, const struct config_key *k,
			       const char *value, void *field)
{
	bool stored = k->type == CONFIG_VALUE_TOKEN_STORED;
	size_t n = stored ? CONFIG_TOKEN_TYPES_STORED : CONFIG_TOKEN_TYPES_COUNT;
	const char *names[CONFIG_TOKEN_TYPES_COUNT + 1] = {NULL};
	for (size_t i = 0; i < n; i++) {
		if (strcmp(value, config_token_types[i].name) == 0) {
			config_store(k, field, stored ? config_token_types[i].bytes :
				     config_token_types[i].dtype);
			return;
		}
		names[i] = config_token_types[i].name;
	}
	char hint[64];
	config_bad_value(p, k, value, "is not one of %s%s",
			 stored ? "uint16|uint32" : "uint16|uint32|int32|int64",
			 config_did_you_mean(value, strlen(value), names, hint, sizeof(hint)));
}

/* A transform chain: checked by tf_parse, whose message is kept. */
static void config_value_transform(struct config_parse *p, const struct config_key *k,
				   const char *value, void *field)
{
	struct tf_chain chain;
	char text[512];
	if (strlen(value) >= CONFIG_TRANSFORM_MAX)
		config_bad_value(p, k, value, "is too long (at most %d bytes)",
				 CONFIG_TRANSFORM_MAX - 1);
	else if (tf_parse(value, &chain, text, sizeof(text)) < 0)
		config_fail(p, p->lineno, "%s transform: %s", p->label, text);
	else
		memcpy(field, value, strlen(value) + 1);
}

/* "R,G,B": three finite numbers (positive ones when k->min is 1). */
static void config_value_rgb(struct config_parse *p, const struct config_key *k, const char *value,
			     void *field)
{
	double rgb[3];
	const char *s = value;
	char *end = NULL;
	for (int c = 0; c < 3; c++) {
		rgb[c] = strtod(s, &end);
		if (end == s || !isfinite(rgb[c]) || (k->min && rgb[c] <= 0) ||
		    *end != (c < 2 ? ',' : '\0')) {
			config_bad_value(p, k, value, "is not three %snumbers R,G,B",
					 k->min ? "positive " : "");
			return;
		}
		s = end + 1;
	}
	memcpy(field, rgb, sizeof(rgb));
}

/* Megatron's --split: "A,B,C" (or "A/B/C"), one to three numbers, each
 * finite and >= 0, their sum > 0; missing ones are 0, as Megatron pads
 * them. Digits with an optional fraction only: no sign, exponent or
 * space, so that the text is what Megatron's float() would read too. */
static void config_value_split(struct config_parse *p, const struct config_key *k,
			       const char *value, void *field)
{
	double w[3] = {0, 0, 0}, sum = 0;
	char sep = strchr(value, '/') && !strchr(value, ',') ? '/' : ',';
	const char *s = value;
	int n = 0;
	for (;;) {
		size_t len = strcspn(s, sep == ',' ? "," : "/");
		size_t digits = strspn(s, "0123456789.");
		const char *dot = memchr(s, '.', len);
		if (len == 0 || digits != len || (dot && memchr(dot + 1, '.', len - (size_t)(dot + 1 - s))) ||
		    (len == 1 && *s == '.')) {
			config_bad_value(p, k, value, "is not one to three numbers A,B,C (the train, valid "
					 "and test weights, as Megatron's --split 969,30,1)");
			return;
		}
		if (n == 3) {
			config_bad_value(p, k, value, "has more than three weights (train, valid, test)");
			return;
		}
		w[n] = strtod(s, NULL);
		if (!isfinite(w[n])) {
			config_bad_value(p, k, value, "has a weight too large to be a number");
			return;
		}
		sum += w[n++];
		if (s[len] == '\0')
			break;
		s += len + 1;
	}
	if (!(sum > 0) || !isfinite(sum)) {
		config_bad_value(p, k, value, "has no weight above 0");
		return;
	}
	memcpy(field, w, sizeof(w));
}

/* One of k->choices, stored as its index. */
static void config_value_choice(struct config_parse *p, const struct config_key *k,
				const char *value, void *field)
{
	size_t n = 0;
	while (k->choices[n] && strcmp(k->choices[n], value) != 0)
		n++;
	if (k->choices[n]) {
		config_store(k, field, n);
		return;
	}
	char names[128];
	size_t len = 0;
	names[0] = '\0';
	for (n = 0; k->choices[n] && len < sizeof(names); n++)
		len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s", n ? "|" : "",
					k->choices[n]);
	char hint[64];
	config_bad_value(p, k, value, "is not one of %s%s", names,
			 config_did_you_mean(value, strlen(value), k->choices, hint, sizeof(hint)));
}

/* The parser of each value type. */
static config_value_fn *const config_value_parsers[CONFIG_VALUE_TYPES] = {
	[CONFIG_VALUE_UINT] = config_value_uint, [CONFIG_VALUE_BOOL] = config_value_bool,
	[CONFIG_VALUE_SIZE] = config_value_size, [CONFIG_VALUE_MODE] = config_value_mode,
	[CONFIG_VALUE_STRING] = config_value_string, [CONFIG_VALUE_RGB] = config_value_rgb,
	[CONFIG_VALUE_SPLIT] = config_value_split,
	[CONFIG_VALUE_UINT_AUTO] = config_value_uint_auto,
	[CONFIG_VALUE_CPU_BUDGET] = config_value_cpu_budget,
	[CONFIG_VALUE_LOG_LEVEL] = config_value_log_level, [CONFIG_VALUE_CHOICE] = config_value_choice,
	[CONFIG_VALUE_SOURCE] = config_value_source, [CONFIG_VALUE_TRANSFORM] = config_value_transform,
	[CONFIG_VALUE_TOKEN_STORED] = config_value_token,
	[CONFIG_VALUE_TOKEN_OUTPUT] = config_value_token,
};

void config_set_value(struct config_parse *p, const struct config_key *k, void *base,
		      const char *value)
{
	config_value_parsers[k->type](p, k, value, (char *)base + k->offset);
}
