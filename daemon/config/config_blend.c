/*
 * config_blend: a pipeline whose `source` is a weighted list of token
 * sources, "megatron:/data/web 0.7, llmc:/data/code_*.bin 0.3"
 * (docs/config.md, "Blending"): the list parsed into the pipeline's
 * members, and the end-of-section checks of a blend, which are those of
 * one source over the kinds of all its members.
 */
#include "daemon/config/config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The key-table flag of a member kind; 0 for a kind a blend cannot hold. */
static unsigned member_flag(enum source_kind kind)
{
	return kind == SOURCE_TOKENS ? CONFIG_KEY_TOKENS : kind == SOURCE_MEGATRON ?
	       CONFIG_KEY_MEGATRON : kind == SOURCE_LLMC ? CONFIG_KEY_LLMC : 0;
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
	if (!member_flag(mb->kind)) {
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

bool config_is_blend(const char *value)
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

void config_value_blend(struct config_parse *p, const struct config_key *k, const char *value)
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

void config_blend_end(struct config_parse *p)
{
	const struct config_key *keys = config_pipeline_keys;
	struct pipeline_cfg *pl = p->pipeline;
	const int *line = p->pipeline_key_line;
	unsigned kinds = CONFIG_KEY_BLEND;
	for (uint32_t m = 0; m < pl->n_members; m++)
		kinds |= member_flag(pl->members[m].kind);
	size_t bad = CONFIG_PK_COUNT;
	for (size_t k = 0; k < CONFIG_PK_COUNT && bad == CONFIG_PK_COUNT; k++)
		if (!line[k] && (keys[k].flags & CONFIG_KEY_REQUIRED) &&
		    (keys[k].flags & kinds & ~(unsigned)CONFIG_KEY_BLEND))
			bad = k;
	if (bad != CONFIG_PK_COUNT) {
		config_fail(p, pl->line, "%s missing required key \"%s\" (of its %s member)", p->label,
			    keys[bad].name, keys[bad].flags & kinds & CONFIG_KEY_TOKENS ? "tokens" :
			    keys[bad].flags & kinds & CONFIG_KEY_MEGATRON ? "megatron" : "llmc");
		return;
	}
	for (size_t k = 0; k < CONFIG_PK_COUNT; k++)
		if (line[k] && !(keys[k].flags & kinds) && (bad == CONFIG_PK_COUNT || line[k] < line[bad]))
			bad = k;
	if (bad != CONFIG_PK_COUNT) {
		config_fail(p, line[bad], "%s %s does not apply to a blend of %s sources", p->label,
			    keys[bad].name, kinds & CONFIG_KEY_MEGATRON ? "megatron" :
			    kinds & CONFIG_KEY_LLMC ? "llmc" : "tokens");
		return;
	}
	if (pl->direct) {
		config_fail(p, line[CONFIG_PK_DIRECT], "%s direct: on reads one file range per sample; a "
			    "blend reads each sample from one of its members' files", p->label);
		return;
	}
	if (!config_outputs(p, pl, line))
		return;
	if (!line[CONFIG_PK_DOCUMENT_SHUFFLE])
		pl->document_shuffle = pl->shuffle;
	/* The stored token types: token_dtype for tokens members, uint16 for
	 * llm.c's, the index's for megatron's; token_output, when not given,
	 * stays unset ("as stored"), and the members must then store the same
	 * type (checked at start, where the megatron indexes are read). */
	if (kinds & CONFIG_KEY_LLMC && !(kinds & CONFIG_KEY_TOKENS))
		pl->token_bytes = 2;
	if (!line[CONFIG_PK_TOKEN_OUTPUT])
		return;
	const struct config_token_name *out = NULL;
	for (size_t t = 0; t < CONFIG_TOKEN_TYPES_COUNT; t++)
		if (config_token_types[t].dtype == pl->token_out_dtype)
			out = &config_token_types[t];
	uint32_t widest = kinds & CONFIG_KEY_TOKENS ? pl->token_bytes : kinds & CONFIG_KEY_LLMC ? 2 : 0;
	if (out && out->bytes < widest)
		config_fail(p, line[CONFIG_PK_TOKEN_OUTPUT], "%s token_output: \"%s\" is narrower than "
			    "the %u-byte tokens of a %s member", p->label, out->name, widest,
			    kinds & CONFIG_KEY_TOKENS ? "tokens" : "llmc");
}
