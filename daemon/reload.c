/* SPDX-License-Identifier: Apache-2.0 */
/* reload: the configuration re-read while loaderd runs (reload.h). */
#include "daemon/reload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/pipetable.h"
#include "daemon/pool/pool.h"

/* Daemon keys a reload applies while running; every other change of one
 * takes a restart. */
static bool key_is_live(const char *key)
{
	return strcmp(key, "workers") == 0 || strcmp(key, "log_level") == 0 ||
	       strcmp(key, "min_workers") == 0 || strcmp(key, "worker_cpu_budget") == 0 ||
	       strncmp(key, "job_", 4) == 0 || strcmp(key, "max_job_pipelines") == 0;
}

/* The keys of declared pipelines (daemon/jobs.h), read at each
 * declaration: they apply to the next one. */
static void apply_job_keys(struct config *running, const struct config *next, char *text,
			   size_t cap, size_t *len);

struct restart_keys {
	struct reload *r;
	char *buf;
	size_t cap, len;
	unsigned n;
	bool pipeline_with_clients; /* a changed pipeline has clients */
};

static void note_replaced(struct reload *r, const char *pipeline)
{
	for (unsigned i = 0; i < r->n_replaced; i++)
		if (strcmp(r->replaced[i], pipeline) == 0)
			return;
	snprintf(r->replaced[r->n_replaced++], PROTO_NAME_MAX, "%s", pipeline);
}

/* config_diff callback: lists the changes that take a restart, and the
 * changed pipelines that are replaced (those without clients). Pipelines
 * added and removed apply live (reload_run). */
static void note_change(void *ctx, const char *pipeline, const char *key)
{
	struct restart_keys *rk = ctx;
	if (pipeline && (strcmp(key, "(added)") == 0 || strcmp(key, "(removed)") == 0))
		return;
	if (!pipeline && key_is_live(key))
		return;
	if (pipeline && pipetable_clients(rk->r->pt, pipeline) == 0) {
		note_replaced(rk->r, pipeline);
		return;
	}
	int n;
	if (pipeline) {
		n = snprintf(rk->buf + rk->len, rk->cap - rk->len, "%s[pipeline.%s] %s", rk->n ? ", " : "",
			     pipeline, key);
		rk->pipeline_with_clients = true;
	} else {
		n = snprintf(rk->buf + rk->len, rk->cap - rk->len, "%s[daemon] %s", rk->n ? ", " : "", key);
	}
	rk->n++;
	if (n > 0)
		rk->len = rk->len + (size_t)n < rk->cap ? rk->len + (size_t)n : rk->cap - 1;
}

/* Records and logs a refusal whose reason is in text; returns rc. */
static int refuse(struct reload_log *log, int rc, const char *text)
{
	log->refused++;
	log->last_ms = status_now_ms();
	snprintf(log->last, sizeof(log->last), "refused: %.1000s", text);
	log_error("reload refused, the running configuration is unchanged: %s", text);
	return rc;
}

static void applied(struct reload *r, const char *text)
{
	r->log.applied++;
	r->log.last_ms = status_now_ms();
	snprintf(r->log.last, sizeof(r->log.last), "applied: %.1000s", text);
	log_notice("reloaded %s: %s", r->running->file, text);
}

/* Appends to text (len so far in *len), ", " between items. */
static void say(char *text, size_t cap, size_t *len, const char *fmt, ...)
{
	if (*len >= cap)
		return;
	if (*len)
		*len += (size_t)snprintf(text + *len, cap - *len, ", ");
	if (*len >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text + *len, cap - *len, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len += (size_t)n;
	if (*len >= cap)
		*len = cap - 1;
}

static bool is_replaced(const struct reload *r, const char *name)
{
	for (unsigned i = 0; i < r->n_replaced; i++)
		if (strcmp(r->replaced[i], name) == 0)
			return true;
	return false;
}

/* Applies next, whose added pipelines are opened and reserved in list (NULL: none).
 * Everything that can fail comes first; 0 or -errno with text. */
static int apply(struct reload *r, struct config *next, struct pipe_open *list, char *text,
		 size_t cap)
{
	struct config *running = r->running;
	size_t len = 0;
	text[0] = '\0';
	if (next->workers_auto) { /* the count stays the controller's, within the new bounds */
		if (!running->workers_auto)
			say(text, cap, &len, "workers %u -> auto", running->workers);
		running->workers_auto = true;
	} else if (next->workers != running->workers || running->workers_auto) {
		char err[256];
		int rc = pool_resize(r->pool, next->workers, err, sizeof(err));
		if (rc < 0) {
			snprintf(text, cap, "workers %u -> %u: %s", running->workers, next->workers, err);
			return rc;
		}
		say(text, cap, &len, "workers %s%u -> %u", running->workers_auto ? "auto " : "",
		    running->workers, next->workers);
		running->workers = next->workers;
		running->workers_auto = false;
	}
	/* workers = auto's bounds: the controller reads them at its next tick */
	running->min_workers = next->min_workers;
	running->worker_cpu_budget = next->worker_cpu_budget;
	/* Nothing fails from here on. */
	for (size_t i = 0; i < running->n_pipelines; i++) {
		const char *name = running->pipelines[i].name;
		bool gone = !config_pipeline(next, name);
		if (!gone && !is_replaced(r, name))
			continue;
		int entry = pipetable_find(r->pt, name);
		if (entry < 0)
			continue;
		char why[PROTO_ERROR_TEXT_MAX];
		snprintf(why, sizeof(why), "pipeline \"%s\" was %s by a reload of %.600s", name,
			 gone ? "removed" : "changed", running->file);
		pipetable_remove(r->pt, entry, why);
		if (gone)
			say(text, cap, &len, "pipeline %s removed", name);
	}
	for (struct pipe_open *po = list; po; po = po->next)
		say(text, cap, &len, "pipeline %s %s", po->cfg.name,
		    is_replaced(r, po->cfg.name) ? "replaced" : "added");
	if (list)
		pipetable_commit(r->pt, list);
	apply_job_keys(running, next, text, cap, &len);
	if (next->log_level != running->log_level) {
		say(text, cap, &len, "log_level %s -> %s", log_level_name(running->log_level),
		    log_level_name(next->log_level));
		running->log_level = next->log_level;
		log_set_level(running->log_level);
	}
	/* The file's view of the pipelines (the running ones are the
	 * pipetable's). */
	memcpy(running->pipelines, next->pipelines, next->n_pipelines * sizeof(next->pipelines[0]));
	running->n_pipelines = next->n_pipelines;
	if (!text[0])
		snprintf(text, cap, "no change");
	return 0;
}

static void apply_job_keys(struct config *running, const struct config *next, char *text,
			   size_t cap, size_t *len)
{
	if (strcmp(running->job_roots, next->job_roots) != 0) {
		say(text, cap, len, "job_roots \"%.200s\" -> \"%.200s\"", running->job_roots,
		    next->job_roots);
		memcpy(running->job_roots, next->job_roots, sizeof(running->job_roots));
	}
	if (running->max_job_pipelines != next->max_job_pipelines)
		say(text, cap, len, "max_job_pipelines %u -> %u", running->max_job_pipelines,
		    next->max_job_pipelines);
	if (running->job_index_bytes != next->job_index_bytes)
		say(text, cap, len, "job_index_bytes %" PRIu64 " -> %" PRIu64,
		    running->job_index_bytes, next->job_index_bytes);
	if (running->job_batch_bytes != next->job_batch_bytes)
		say(text, cap, len, "job_batch_bytes %" PRIu64 " -> %" PRIu64,
		    running->job_batch_bytes, next->job_batch_bytes);
	if (running->job_linger_ms != next->job_linger_ms)
		say(text, cap, len, "job_linger_ms %u -> %u", running->job_linger_ms,
		    next->job_linger_ms);
	running->max_job_pipelines = next->max_job_pipelines;
	running->job_index_bytes = next->job_index_bytes;
	running->job_batch_bytes = next->job_batch_bytes;
	running->job_linger_ms = next->job_linger_ms;
}

static void reload_finish(struct reload *r, struct config *next, struct pipe_open *list, int rc,
			  char *text);
static void reload_placed(void *ctx);

/* Every added pipeline of the reload under way is opened (or could not
 * be): the reload is reserved and placed, or refused. */
static void reload_opened(struct pipe_open *opened, void *ctx)
{
	struct reload *r = ctx;
	(void)opened;
	if (--r->opening > 0)
		return;
	struct pipe_open *list = r->opens;
	struct config *next = r->next;
	char text[PROTO_ERROR_TEXT_MAX];
	int rc = 0;
	r->next = NULL;
	r->opens = NULL;
	if (r->abandoned) { /* refused already (reload_run) */
		r->abandoned = false;
		pipetable_discard(r->pt, list);
		free(next);
		return;
	}
	for (struct pipe_open *po = list; po && rc == 0; po = po->next) {
		if (po->rc == 0)
			continue;
		const struct pipeline_cfg *pl = config_pipeline(next, po->cfg.name);
		int line = pl ? config_key_line(next, pl, "source") : 0;
		if (line > 0)
			snprintf(text, sizeof(text), "%.300s:%d: %.700s", next->file, line, po->err);
		else
			snprintf(text, sizeof(text), "%.1000s", po->err);
		rc = po->rc == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	for (unsigned i = 0; i < r->n_replaced && rc == 0; i++) {
		uint32_t n = pipetable_clients(r->pt, r->replaced[i]);
		if (n == 0)
			continue;
		snprintf(text, sizeof(text), "%.600s changes pipeline \"%s\", which had no client when the "
			 "reload began and has %u now, so it takes a restart", next->file,
			 r->replaced[i], n);
		rc = -EOPNOTSUPP;
	}
	if (rc == 0)
		rc = pipetable_reserve(r->pt, list, text, sizeof(text));
	/* the lists (a megatron index's block sums) copied into the arena
	 * on the pool, then reload_placed applies the reload */
	if (rc == 0 && pipetable_place(r->pt, list, reload_placed, r) == 0) {
		r->next = next;
		r->opens = list;
		return;
	}
	reload_finish(r, next, list, rc, text);
}

/* The reload's pipelines are reserved and their lists in the arena (or
 * rc < 0, text): applied, or refused; its answer given. */
static void reload_finish(struct reload *r, struct config *next, struct pipe_open *list, int rc,
			  char *text)
{
	if (rc == 0 && r->stopping) {
		snprintf(text, PROTO_ERROR_TEXT_MAX, "loaderd is stopping");
		rc = -EAGAIN;
	}
	if (rc == 0)
		rc = apply(r, next, list, text, PROTO_ERROR_TEXT_MAX);
	if (rc < 0) {
		pipetable_discard(r->pt, list);
		refuse(&r->log, rc, text);
	} else {
		applied(r, text);
	}
	free(next);
	r->done(r->ctx, rc, text);
}

static void reload_placed(void *ctx)
{
	struct reload *r = ctx;
	struct pipe_open *list = r->opens;
	struct config *next = r->next;
	char text[PROTO_ERROR_TEXT_MAX];
	r->next = NULL;
	r->opens = NULL;
	reload_finish(r, next, list, 0, text);
}

/* Opens, on the thread pool, every pipeline next adds or replaces. 0 or
 * -errno with text. */
static int open_added(struct reload *r, const struct config *next, char *text, size_t cap)
{
	for (size_t i = 0; i < next->n_pipelines; i++) {
		const struct pipeline_cfg *pl = &next->pipelines[i];
		if (config_pipeline(r->running, pl->name) && !is_replaced(r, pl->name))
			continue;
		struct pipe_open *po;
		int rc = pipetable_open(r->pt, pl, reload_opened, r, &po);
		if (rc == 0) {
			struct pipe_open **tail = &r->opens;
			while (*tail)
				tail = &(*tail)->next;
			*tail = po;
			r->opening++;
		}
		if (rc < 0) {
			snprintf(text, cap, "pipeline \"%s\": cannot start opening its data: %s", pl->name,
				 strerror(-rc));
			return rc;
		}
	}
	return 0;
}

int reload_run(struct reload *r, char *text, size_t cap)
{
	struct config *running = r->running;
	if (!running->file[0]) {
		snprintf(text, cap, "loaderd was started without --config: there is no file to reload");
		return refuse(&r->log, -ENOENT, text);
	}
	if (r->next || r->opening) {
		snprintf(text, cap, "a reload is under way (the data of the pipelines it adds is being "
			 "listed): try again once it has answered");
		return refuse(&r->log, -EBUSY, text);
	}
	struct config *next = malloc(sizeof(*next)); /* large: the pipeline table */
	if (!next) {
		snprintf(text, cap, "out of memory");
		return refuse(&r->log, -ENOMEM, text);
	}
	struct config_problems *problems = calloc(1, sizeof(*problems));
	if (!problems) {
		free(next);
		snprintf(text, cap, "out of memory");
		return refuse(&r->log, -ENOMEM, text);
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
	struct restart_keys rk = {.r = r, .buf = keys, .cap = sizeof(keys)};
	keys[0] = '\0';
	r->n_replaced = 0;
	config_diff(running, next, note_change, &rk);
	if (rk.n) {
		snprintf(text, cap, "%s changes %s, which %s a restart%s", running->file, keys,
			 rk.n == 1 ? "takes" : "take", rk.pipeline_with_clients ?
			 " while the pipeline has clients (one without is replaced)" : "");
		rc = -EOPNOTSUPP;
		goto refused;
	}
	bool adds = r->n_replaced > 0;
	for (size_t i = 0; i < next->n_pipelines && !adds; i++)
		adds = !config_pipeline(running, next->pipelines[i].name);
	if (adds) {
		rc = open_added(r, next, text, cap);
		if (rc == 0) {
			r->next = next;
			return RELOAD_PENDING;
		}
		/* what started is still running: wait for it, then refuse */
		if (r->opening) {
			r->next = next;
			r->abandoned = true;
			return refuse(&r->log, rc, text);
		}
		pipetable_discard(r->pt, r->opens);
		r->opens = NULL;
		goto refused;
	}
	rc = apply(r, next, NULL, text, cap);
	if (rc < 0)
		goto refused;
	free(next);
	applied(r, text);
	return 0;
refused:
	free(next);
	return refuse(&r->log, rc, text);
}

void reload_describe(const struct reload *r, struct status_text *t)
{
	const struct config *running = r->running;
	status_object(t, "config");
	status_field(t, "file", "config: %s", running->file[0] ? running->file : "(defaults)");
	status_field(t, "workers", " workers %u", running->workers);
	status_field(t, "max_workers", " max_workers %u", running->max_workers);
	status_field(t, "reloads", " reloads %u", r->log.applied);
	status_field(t, "refused", " refused %u\n", r->log.refused);
	if (r->log.last_ms) {
		unsigned long long ago = status_now_ms() - r->log.last_ms;
		status_object(t, "last_reload");
		status_field(t, "ago_s", "  last_reload %.1fs ago", (double)(ago / 100) / 10);
		status_field(t, "result", ": %s\n", r->log.last);
		status_close(t);
	}
	status_close(t);
}
