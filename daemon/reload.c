/* reload: the configuration re-read while loaderd runs (reload.h). */
#include "daemon/reload.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/pool/pool.h"
#include "daemon/core/status.h"

/* Keys a reload applies while running; every other change takes a restart. */
static bool key_is_live(const char *pipeline, const char *key)
{
	return !pipeline && (strcmp(key, "workers") == 0 || strcmp(key, "log_level") == 0 ||
			     strcmp(key, "min_workers") == 0 || strcmp(key, "worker_cpu_budget") == 0);
}

struct restart_keys {
	char *buf;
	size_t cap, len;
	unsigned n;
};

/* config_diff callback: lists the changes that take a restart. */
static void note_change(void *ctx, const char *pipeline, const char *key)
{
	struct restart_keys *r = ctx;
	if (key_is_live(pipeline, key))
		return;
	int n;
	if (pipeline)
		n = snprintf(r->buf + r->len, r->cap - r->len, "%s[pipeline.%s] %s", r->n ? ", " : "",
			     pipeline, key);
	else
		n = snprintf(r->buf + r->len, r->cap - r->len, "%s[daemon] %s", r->n ? ", " : "", key);
	r->n++;
	if (n > 0)
		r->len = r->len + (size_t)n < r->cap ? r->len + (size_t)n : r->cap - 1;
}

/* Records and logs a refusal whose reason is in text; returns rc. */
static int refuse(struct reload_log *log, int rc, const char *text)
{
	log->refused++;
	log->last_ms = status_now_ms();
	snprintf(log->last, sizeof(log->last), "refused: %s", text);
	log_error("reload refused, the running configuration is unchanged: %s", text);
	return rc;
}

int reload_run(struct config *running, struct pool *pool, struct reload_log *log, char *text,
	       size_t cap)
{
	if (!running->file[0]) {
		snprintf(text, cap, "loaderd was started without --config: there is no file to reload");
		return refuse(log, -ENOENT, text);
	}
	struct config *next = malloc(sizeof(*next)); /* large: the pipeline table */
	if (!next) {
		snprintf(text, cap, "out of memory");
		return refuse(log, -ENOMEM, text);
	}
	struct config_problems *problems = calloc(1, sizeof(*problems));
	if (!problems) {
		free(next);
		snprintf(text, cap, "out of memory");
		return refuse(log, -ENOMEM, text);
	}
	int rc = config_load_problems(running->file, next, problems);
	if (rc < 0) {
		/* Every problem in the log (at most CONFIG_PROBLEMS_MAX lines, an
		 * operator's request: not rate-limited); in the reply
		 * (PROTO_ERROR_TEXT_MAX) as many as fit, then "and N more". */
		log_set_ratelimit(false);
		for (unsigned i = 0; problems->n > 1 && i < problems->kept; i++)
			log_error("reload: %s", problems->text[i]);
		if (problems->n > problems->kept)
			log_error("reload: %s: and %u more problems", running->file,
				  problems->n - problems->kept);
		log_set_ratelimit(true);
		config_problems_text(problems, "; ", text, cap);
		config_problems_free(problems);
		free(problems);
		goto refused;
	}
	free(problems);

	/* A file that leaves max_workers to its default keeps the running
	 * one: the rings are reserved at start, and pool_resize names the limit. */
	if (!next->max_workers_given)
		next->max_workers = running->max_workers;
	char keys[PROTO_ERROR_TEXT_MAX - 128];
	struct restart_keys r = {.buf = keys, .cap = sizeof(keys)};
	keys[0] = '\0';
	config_diff(running, next, note_change, &r);
	if (r.n) {
		snprintf(text, cap, "%s changes %s, which %s a restart", running->file, keys,
			 r.n == 1 ? "takes" : "take");
		rc = -EOPNOTSUPP;
		goto refused;
	}

	size_t len = 0;
	text[0] = '\0';
	if (next->workers_auto) { /* the count stays the controller's, within the new bounds */
		if (!running->workers_auto)
			len += (size_t)snprintf(text, cap, "workers %u -> auto", running->workers);
		running->workers_auto = true;
	} else if (next->workers != running->workers || running->workers_auto) {
		char err[256];
		rc = pool_resize(pool, next->workers, err, sizeof(err));
		if (rc < 0) {
			snprintf(text, cap, "workers %u -> %u: %s", running->workers, next->workers, err);
			goto refused;
		}
		len += (size_t)snprintf(text, cap, "workers %s%u -> %u", running->workers_auto ?
					"auto " : "", running->workers, next->workers);
		running->workers = next->workers;
		running->workers_auto = false;
	}
	/* workers = auto's bounds: the controller reads them at its next tick */
	running->min_workers = next->min_workers;
	running->worker_cpu_budget = next->worker_cpu_budget;
	if (next->log_level != running->log_level && len < cap) {
		len += (size_t)snprintf(text + len, cap - len, "%slog_level %s -> %s", len ? ", " : "",
					log_level_name(running->log_level), log_level_name(next->log_level));
		running->log_level = next->log_level;
		log_set_level(running->log_level);
	}
	if (!text[0])
		snprintf(text, cap, "no change");
	free(next);
	log->applied++;
	log->last_ms = status_now_ms();
	snprintf(log->last, sizeof(log->last), "applied: %s", text);
	log_notice("reloaded %s: %s", running->file, text);
	return 0;
refused:
	free(next);
	return refuse(log, rc, text);
}

void reload_describe(const struct config *running, const struct reload_log *log,
		     struct status_text *t)
{
	status_printf(t, "config: %s workers %u max_workers %u reloads %u refused %u\n",
		      running->file[0] ? running->file : "(defaults)", running->workers,
		      running->max_workers, log->applied, log->refused);
	if (log->last_ms) {
		unsigned long long ago = status_now_ms() - log->last_ms;
		status_printf(t, "  last_reload %llu.%llus ago: %s\n", ago / 1000, (ago % 1000) / 100,
			      log->last);
	}
}
