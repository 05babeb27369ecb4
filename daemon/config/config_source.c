/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_source: the value of a pipeline's `source` key. One source
 * "KIND:PATH", its path resolved against the config file's directory and a
 * tar or llmc pattern's syntax checked (common/tarpattern.h); or a blend,
 * a weighted list of token sources, "megatron:/data/web 0.7,
 * llmc:/data/code_*.bin 0.3" (docs/config.md, "Blending"), parsed into the
 * pipeline's members. A blend's end-of-section checks are config_check.c's.
 */
#include "daemon/config/config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/suggest.h"
#include "common/tarpattern.h"

unsigned config_member_flag(enum source_kind kind)
{
	return kind == SOURCE_TOKENS ? CONFIG_KEY_TOKENS : kind == SOURCE_MEGATRON ?
	       CONFIG_KEY_MEGATRON : kind == SOURCE_LLMC ? CONFIG_KEY_LLMC : 0;
}

/* The config file's directory as an absolute path with no trailing slash
 * ("" for the root directory): the base of relative source paths. */
static int config_file_dir(const char *file, char *dir, size_t cap)
{
	size_t n = 0;
	if (*file != '/') {
		if (!getcwd(dir, cap))
			return -errno;
		n = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
	}
	dir[n] = '\0';
	const char *slash = strrchr(file, '/');
	if (!slash)
		return 0;
	int m = snprintf(dir + n, cap - n, "%s%.*s", *file == '/' ? "" : "/",
			 (int)(slash - file), file);
	return (m < 0 || (size_t)m >= cap - n) ? -ENAMETOOLONG : 0;
}

/* One source "KIND:PATH" of `source`: its kind, and its path resolved
 * against the config file's directory into path_out (cap bytes, at most
 * ARENA_PATH_MAX); a tar or llmc pattern's syntax checked. false when it
 * recorded an error. */
static bool config_source_item(struct config_parse *p, const struct config_key *k,
			       const char *value, enum source_kind *kind, char *path_out, size_t cap)
{
	const char *path = NULL;
	for (int kd = SOURCE_RAW; kd <= SOURCE_LLMC && !path; kd++) {
		const char *name = config_source_name((enum source_kind)kd);
		size_t len = strlen(name);
		if (strncmp(value, name, len) == 0 && value[len] == ':') {
			*kind = (enum source_kind)kd;
			path = value + len + 1;
		}
	}
	if (!path) {
		static const char *const kinds[] = {"raw", "tokens", "imagefolder", "tar", "megatron",
						    "llmc", NULL};
		const char *colon = strchr(value, ':');
		const char *best = colon ? suggest_among(value, (size_t)(colon - value), kinds) : NULL;
		char hint[160] = "";
		if (best)
			snprintf(hint, sizeof(hint), "; did you mean \"%s:%.100s\"?", best, colon + 1);
		else if (!colon && *value)
			snprintf(hint, sizeof(hint), "; name the kind before the path, e.g. "
				 "imagefolder:%.100s", value);
		config_bad_value(p, k, value, "is not raw:PATH, tokens:PATH, imagefolder:ROOT, "
				 "tar:PATTERN, megatron:PREFIX or llmc:PATTERN%s", hint);
		return false;
	}
	if (*path == '\0') {
		config_bad_value(p, k, value, "has an empty path");
		return false;
	}
	char dir[PATH_MAX] = "";
	int ret = 0;
	if (*path != '/')
		ret = config_file_dir(p->c->file, dir, sizeof(dir));
	if (ret != 0) {
		config_fail(p, p->lineno, "%s source: \"%s\": cannot resolve a relative path: %s",
			    p->label, value, strerror(-ret));
		return false;
	}
	size_t room = cap < ARENA_PATH_MAX ? cap : ARENA_PATH_MAX;
	int n = snprintf(path_out, room, "%s%s%s", dir, *path == '/' ? "" : "/", path);
	if (n < 0 || (size_t)n >= room) {
		config_fail(p, p->lineno, "%s source: \"%s\": the path is too long (at most %zu bytes)",
			    p->label, value, room - 1);
		return false;
	}
	/* A tar pattern's syntax is checked here, where the line is known;
	 * the shards themselves at start (daemon/source/tarshard.h). */
	char **shards, why[256];
	size_t n_shards;
	if (*kind == SOURCE_TAR || *kind == SOURCE_LLMC) {
		int rc = tar_pattern_expand(path_out, &shards, &n_shards, why, sizeof(why));
		if (rc < 0) {
			config_fail(p, p->lineno, "%s source: \"%s\": %s", p->label, value,
				    rc == -ENOMEM ? strerror(ENOMEM) : why);
			return false;
		}
		tar_pattern_free(shards, n_shards);
	}
	return true;
}

/* One "SOURCE WEIGHT" of the list (item: its text, trimmed) as member m. */
static bool blend_item(struct config_parse *p, const struct config_key *k, char *item, uint32_t m,
		       size_t *paths_used)
{
	struct pipeline_cfg *pl = p->pipeline;
	char *space = item + strlen(item);
	while (space > item && !isspace((unsigned char)space[-1]))
		space--;
	if (space == item) {
		config_fail(p, p->lineno, "%s source: member %u \"%s\" has no weight: each member of a "
			    "list is SOURCE WEIGHT, e.g. \"megatron:/data/web 0.7\"", p->label, m + 1,
			    item);
		return false;
	}
	char *weight_text = space, *end;
	errno = 0;
	double weight = strtod(weight_text, &end);
	if (end == weight_text || *end != '\0' || errno != 0 || !isfinite(weight) || !(weight > 0)) {
		config_fail(p, p->lineno, "%s source: member %u \"%s\": weight \"%s\" is not a positive "
			    "number", p->label, m + 1, item, weight_text);
		return false;
	}
	while (space > item && isspace((unsigned char)space[-1]))
		space--;
	*space = '\0';
	struct config_member *mb = &pl->members[m];
	char path[ARENA_PATH_MAX];
	if (!config_source_item(p, k, item, &mb->kind, path, sizeof(path)))
		return false;
	if (!config_member_flag(mb->kind)) {
		config_fail(p, p->lineno, "%s source: member %u \"%s\" is not a token source: a blend's "
			    "members are megatron, llmc or tokens sources", p->label, m + 1, item);
		return false;
	}
	size_t len = strlen(path) + 1;
	if (len > sizeof(pl->member_paths) - *paths_used) {
		config_fail(p, p->lineno, "%s source: the members' paths are too long together (at most "
			    "%zu bytes)", p->label, sizeof(pl->member_paths));
		return false;
	}
	mb->path_at = (uint32_t)*paths_used;
	mb->weight = weight;
	memcpy(pl->member_paths + *paths_used, path, len);
	*paths_used += len;
	return true;
}

/* The first comma of s outside braces (a tar or llmc pattern's lists), or NULL. */
static char *list_comma(const char *s)
{
	int depth = 0;
	for (; *s; s++) {
		if (*s == '{')
			depth++;
		else if (*s == '}' && depth > 0)
			depth--;
		else if (*s == ',' && depth == 0)
			return (char *)s;
	}
	return NULL;
}

/* Whether `source`'s value is a list of sources: an item after a comma
 * (outside a pattern's braces) starts with a source kind and ':'. A path
 * with a comma of its own stays one source. */
static bool config_is_blend(const char *value)
{
	for (const char *comma = list_comma(value); comma; comma = list_comma(comma + 1)) {
		const char *item = comma + 1;
		while (isspace((unsigned char)*item))
			item++;
		for (int kind = SOURCE_RAW; kind <= SOURCE_LLMC; kind++) {
			const char *name = config_source_name((enum source_kind)kind);
			size_t len = strlen(name);
			if (strncmp(item, name, len) == 0 && item[len] == ':')
				return true;
		}
	}
	return false;
}

/* `source` as a list "SOURCE WEIGHT, SOURCE WEIGHT, ...": the current
 * pipeline's members. */
static void config_value_blend(struct config_parse *p, const struct config_key *k,
			       const char *value)
{
	struct pipeline_cfg *pl = p->pipeline;
	char *text = strdup(value);
	if (!text) {
		config_fail(p, p->lineno, "%s source: %s", p->label, strerror(ENOMEM));
		return;
	}
	uint32_t n = 0;
	size_t paths_used = 0;
	bool ok = true;
	for (char *item = text, *next; ok && item; item = next) {
		next = list_comma(item);
		if (next)
			*next++ = '\0';
		while (isspace((unsigned char)*item))
			item++;
		size_t len = strlen(item);
		while (len > 0 && isspace((unsigned char)item[len - 1]))
			item[--len] = '\0';
		if (len == 0) {
			config_fail(p, p->lineno, "%s source: \"%s\": member %u is empty", p->label, value,
				    n + 1);
			ok = false;
		} else if (n == CONFIG_BLEND_MAX) {
			config_fail(p, p->lineno, "%s source: more than %u members", p->label,
				    CONFIG_BLEND_MAX);
			ok = false;
		} else {
			ok = blend_item(p, k, item, n++, &paths_used);
		}
	}
	free(text);
	if (!ok)
		return;
	pl->n_members = n;
	pl->kind = pl->members[0].kind;
	memcpy(pl->path, pl->member_paths, strlen(pl->member_paths) + 1); /* < ARENA_PATH_MAX */
}

/* "raw:PATH", "tokens:PATH", "imagefolder:ROOT", "tar:PATTERN",
 * "megatron:PREFIX" or "llmc:PATTERN", into the current pipeline's kind
 * and path; a relative PATH is taken relative to the directory of the
 * config file. A list "SOURCE WEIGHT, SOURCE WEIGHT, ..." is a blend. */
void config_value_source(struct config_parse *p, const struct config_key *k, const char *value,
			 void *field)
{
	struct pipeline_cfg *pl = p->pipeline; /* field is pl->path */
	if (config_is_blend(value)) {
		config_value_blend(p, k, value);
		return;
	}
	enum source_kind kind;
	char path[ARENA_PATH_MAX];
	if (!config_source_item(p, k, value, &kind, path, sizeof(path)))
		return;
	pl->kind = kind;
	pl->n_members = 0;
	snprintf(field, k->size, "%s", path);
}
