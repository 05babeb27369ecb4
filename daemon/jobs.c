/* SPDX-License-Identifier: Apache-2.0 */
/* jobs: pipelines that training jobs declare (jobs.h). */
#include "daemon/jobs.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/confine.h"
#include "common/escape.h"
#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/pipetable.h"
#include "daemon/source/source.h"

#define JOBS_WAITERS_MAX 64 /* HELLOs held for one pipeline being made */

/* A declared pipeline being opened, and the HELLOs waiting for it. */
struct job_make {
	struct jobs *j;
	char job[CONFIG_JOB_MAX];
	char name[PROTO_NAME_MAX];
	int pid;                             /* the first to declare it */
	uint64_t waiters[JOBS_WAITERS_MAX];  /* connection ids */
	unsigned n_waiters;
	struct pipe_open *po;                /* opened and reserved, while its list is placed */
	struct job_make *next;
};

/* A declared pipeline made here, live until it lingered without clients. */
struct job_live {
	int entry;
	uint64_t idle_since_ms; /* uv_now when its last client left, 0 while it has some */
};

struct jobs {
	uv_loop_t *loop;
	const struct config *cfg;
	struct pipetable *pt;
	void (*decided)(void *ctx, uint64_t conn_id, int rc, int entry, const char *text);
	void *ctx;
	struct job_make *making;
	struct job_live live[ARENA_PIPELINES_MAX];
	unsigned n_live;
	uv_timer_t linger;
	bool timer_running;
};

static void on_linger(uv_timer_t *t);

struct jobs *jobs_create(uv_loop_t *loop, const struct config *cfg, struct pipetable *pt,
			 void (*decided)(void *ctx, uint64_t conn_id, int rc, int entry,
					 const char *text),
			 void *ctx)
{
	struct jobs *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->loop = loop;
	j->cfg = cfg;
	j->pt = pt;
	j->decided = decided;
	j->ctx = ctx;
	uv_timer_init(loop, &j->linger);
	j->linger.data = j;
	return j;
}

void jobs_stop(struct jobs *j)
{
	if (j && !uv_is_closing((uv_handle_t *)&j->linger))
		uv_close((uv_handle_t *)&j->linger, NULL);
}

void jobs_free(struct jobs *j)
{
	if (!j)
		return;
	/* opens under way hold their job_make: the loop ran them to their end */
	while (j->making) {
		struct job_make *m = j->making;
		j->making = m->next;
		free(m);
	}
	free(j);
}

/* ---- a declaration checked ---- */

/* FNV-1a over the normalized declaration: the parsed pipeline with what
 * is not the client's keys (its name, lines, job, pid, roots) cleared. */
static uint64_t declaration_hash(const struct pipeline_cfg *pl)
{
	struct pipeline_cfg norm = *pl;
	memset(norm.name, 0, sizeof(norm.name));
	norm.line = 0;
	memset(norm.key_line, 0, sizeof(norm.key_line));
	memset(norm.job, 0, sizeof(norm.job));
	norm.declared_pid = 0;
	memset(norm.roots, 0, sizeof(norm.roots));
	const uint8_t *p = (const uint8_t *)&norm;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < sizeof(norm); i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* path (what names it: "source", "blend member 2") within job_roots. */
static int check_path(const struct jobs *j, int pid, const char *what, const char *path,
		      char *text, size_t cap)
{
	char real[PATH_MAX];
	int rc = confine_check(path, j->cfg->job_roots, real);
	if (rc == -EACCES)
		snprintf(text, cap, "declared by client pid %d: %.20s path %.300s leads to %.300s, "
			 "outside the directories jobs may read (job_roots = %.200s)", pid, what,
			 path, real, j->cfg->job_roots);
	else if (rc < 0)
		snprintf(text, cap, "declared by client pid %d: %.20s path %.700s: %.100s", pid, what,
			 path, strerror(-rc));
	return rc;
}

/* A shard pattern's directory (the part before its last '/'), which must
 * hold no pattern of its own. */
static int check_pattern(const struct jobs *j, int pid, const char *what, const char *pattern,
			 char *text, size_t cap)
{
	const char *slash = strrchr(pattern, '/');
	const char *wild = strpbrk(pattern, "{*?[");
	char dir[PATH_MAX];
	size_t n = slash ? (size_t)(slash - pattern) : 0;
	if ((wild && slash && wild < slash) || n >= sizeof(dir)) {
		snprintf(text, cap, "declared by client pid %d: %s pattern %.1000s: a declared "
			 "pipeline takes a pattern in the file name only, not in its directories",
			 pid, what, pattern);
		return -EACCES;
	}
	memcpy(dir, pattern, n);
	dir[n] = '\0';
	return check_path(j, pid, what, n ? dir : "/", text, cap);
}

static int check_source_path(const struct jobs *j, int pid, const char *what,
			     enum source_kind kind, const char *path, char *text, size_t cap)
{
	char file[PATH_MAX + 8];
	switch (kind) {
	case SOURCE_TAR:
	case SOURCE_LLMC:
		return check_pattern(j, pid, what, path, text, cap);
	case SOURCE_MEGATRON: {
		snprintf(file, sizeof(file), "%s.bin", path);
		int rc = check_path(j, pid, what, file, text, cap);
		if (rc < 0)
			return rc;
		snprintf(file, sizeof(file), "%s.idx", path);
		return check_path(j, pid, what, file, text, cap);
	}
	default:
		return check_path(j, pid, what, path, text, cap);
	}
}

/* Every path the declaration names, before anything is opened. */
static int check_paths(const struct jobs *j, const struct pipeline_cfg *pl, int pid, char *text,
		       size_t cap)
{
	if (!pl->n_members)
		return check_source_path(j, pid, "source", pl->kind, pl->path, text, cap);
	for (uint32_t m = 0; m < pl->n_members; m++) {
		char what[64];
		snprintf(what, sizeof(what), "blend member %u", m + 1);
		int rc = check_source_path(j, pid, what, pl->members[m].kind,
					   pl->member_paths + pl->members[m].path_at, text, cap);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The shards a pattern expanded to (tar, llm.c), each within job_roots
 * too: one may be a symlink that leads out. */
static int check_shards(const struct jobs *j, const struct source *src, int pid, char *text,
			size_t cap)
{
	const struct image_index *ix = &src->index;
	for (uint32_t k = 0; ix->shards && k < ix->n_shards; k++) {
		int rc = check_path(j, pid, "shard", ix->paths + ix->shards[k].path_offset, text, cap);
		if (rc < 0)
			return rc;
	}
	for (uint32_t m = 0; m < src->n_members; m++) {
		int rc = check_shards(j, &src->members[m].src, pid, text, cap);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static unsigned declared_count(const struct jobs *j)
{
	unsigned n = j->n_live;
	for (const struct job_make *m = j->making; m; m = m->next)
		n++;
	return n;
}

/* roots (job_roots) resolved, each a real path, into out (CONFIG_ROOTS_MAX
 * bytes): what the workers compare an opened file's path with. A root
 * that cannot be resolved is left out (nothing lies within it). */
static void resolve_roots(const char *roots, char *out)
{
	size_t len = 0;
	out[0] = '\0';
	for (const char *r = roots; *r;) {
		r += strspn(r, " \t");
		size_t n = strcspn(r, " \t");
		char root[PATH_MAX], real[PATH_MAX];
		if (n > 0 && n < sizeof(root)) {
			memcpy(root, r, n);
			root[n] = '\0';
			size_t k = realpath(root, real) ? strlen(real) : 0;
			if (k && len + k + 2 <= CONFIG_ROOTS_MAX) {
				if (len)
					out[len++] = ' ';
				memcpy(out + len, real, k + 1);
				len += k;
			}
		}
		r += n;
	}
}

/* ---- made: the opened pipeline reserved and committed ---- */

static void answer_all(struct job_make *m, int rc, int entry, const char *text)
{
	for (unsigned i = 0; i < m->n_waiters; i++)
		m->j->decided(m->j->ctx, m->waiters[i], rc, entry, text);
}

static void start_linger(struct jobs *j)
{
	if (j->timer_running || uv_is_closing((uv_handle_t *)&j->linger))
		return;
	uint64_t every = j->cfg->job_linger_ms / 4;
	every = every < 50 ? 50 : every > 1000 ? 1000 : every;
	uv_timer_start(&j->linger, on_linger, every, every);
	j->timer_running = true;
}

/* What the job's share allows of an opened pipeline: 0 or -ENOSPC. */
static int check_share(const struct jobs *j, const struct source *src, int pid, char *text,
		       size_t cap)
{
	uint64_t index = pipetable_index_bytes(src);
	if (index > j->cfg->job_index_bytes) {
		snprintf(text, cap, "declared by client pid %d: its sample list needs %" PRIu64 " bytes "
			 "of the index area, over a job pipeline's share, job_index_bytes = %" PRIu64
			 " in [daemon]", pid, index, j->cfg->job_index_bytes);
		return -ENOSPC;
	}
	uint64_t share = j->cfg->job_batch_bytes ? j->cfg->job_batch_bytes :
			 pipetable_slot_bytes(j->pt);
	if (src->slot_bytes > share) {
		snprintf(text, cap, "declared by client pid %d: a batch needs %" PRIu64 " bytes of a "
			 "staging slot, over a job pipeline's share, %s = %" PRIu64 "%s", pid,
			 src->slot_bytes, j->cfg->job_batch_bytes ? "job_batch_bytes" :
			 "the staging slot", share, j->cfg->job_batch_bytes ? " in [daemon]" :
			 " (staging_slot_bytes in [daemon])");
		return -ENOSPC;
	}
	return 0;
}

/* m's pipeline is placed and made live (rc 0: po reserved, its list in
 * the arena), or refused with text: its waiters are answered and m ends.
 * Till then m stays in making, so that a HELLO declaring the same
 * pipeline meanwhile waits for it rather than opening it again. */
static void make_end(struct job_make *m, struct pipe_open *po, int rc, const char *text)
{
	struct jobs *j = m->j;
	for (struct job_make **p = &j->making; *p; p = &(*p)->next)
		if (*p == m) {
			*p = m->next;
			break;
		}
	if (rc < 0) { /* the server logs each refusal */
		pipetable_discard(j->pt, po);
		answer_all(m, rc, -1, text);
	} else {
		int entry = po->entry;
		if (pipetable_commit(j->pt, po) == 1) {
			j->live[j->n_live++] = (struct job_live){.entry = entry};
			start_linger(j);
			answer_all(m, 0, entry, "");
		} else {
			answer_all(m, -ENOMEM, -1, "out of memory making the declared pipeline");
		}
	}
	free(m);
}

/* The declared pipeline's list (a megatron index's block sums) is in the
 * arena, copied on the pool. */
static void on_placed(void *ctx)
{
	struct job_make *m = ctx;
	make_end(m, m->po, 0, "");
}

static void on_made(struct pipe_open *po, void *ctx)
{
	struct job_make *m = ctx;
	struct jobs *j = m->j;
	char text[PROTO_ERROR_TEXT_MAX];
	int rc = 0;
	if (po->rc < 0) {
		snprintf(text, sizeof(text), "declared by client pid %d: %.900s", m->pid, po->err);
		rc = po->rc == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	if (rc == 0)
		rc = check_shards(j, &po->src, m->pid, text, sizeof(text));
	if (rc == 0)
		rc = check_share(j, &po->src, m->pid, text, sizeof(text));
	po->next = NULL;
	if (rc == 0)
		rc = pipetable_reserve(j->pt, po, text, sizeof(text));
	/* its list copied into the arena on the pool, never on the loop;
	 * where that cannot be queued, pipetable_commit copies it */
	if (rc == 0) {
		m->po = po;
		if (pipetable_place(j->pt, po, on_placed, m) == 0)
			return;
	}
	make_end(m, po, rc, text);
}

int jobs_declare(struct jobs *j, const struct proto_hello *hello, int pid, uint64_t conn_id,
		 int *entry, char *text, size_t cap)
{
	const struct config *cfg = j->cfg;
	if (!cfg->job_roots[0])
		return snprintf(text, cap, "client pid %d declares its pipeline, but this loaderd takes "
				"none: the operator allows it with job_roots in [daemon] of %.600s (the "
				"directories jobs may read)", pid,
				cfg->file[0] ? cfg->file : "its configuration"), -EPERM;
	struct pipeline_cfg *pl = malloc(sizeof(*pl));
	if (!pl)
		return snprintf(text, cap, "out of memory"), -ENOMEM;
	int rc = config_declare(cfg, "d.declared", hello->declaration, pid, pl, text, cap);
	if (rc < 0)
		goto free_pl;
	snprintf(pl->name, sizeof(pl->name), "d.%016" PRIx64, declaration_hash(pl));
	snprintf(pl->job, sizeof(pl->job), "%s", hello->job);
	pl->declared_pid = pid;
	resolve_roots(cfg->job_roots, pl->roots);
	*entry = pipetable_find_declared(j->pt, pl->job, pl->name);
	if (*entry >= 0) {
		rc = 0;
		goto free_pl;
	}
	for (struct job_make *m = j->making; m; m = m->next) {
		if (strcmp(m->job, pl->job) != 0 || strcmp(m->name, pl->name) != 0)
			continue;
		if (m->n_waiters == JOBS_WAITERS_MAX) {
			rc = -EBUSY;
			snprintf(text, cap, "declared by client pid %d: %d clients already wait for this "
				 "pipeline to be made", pid, JOBS_WAITERS_MAX);
			goto free_pl;
		}
		m->waiters[m->n_waiters++] = conn_id;
		rc = JOBS_PENDING;
		goto free_pl;
	}
	if (declared_count(j) >= cfg->max_job_pipelines) {
		rc = -EBUSY;
		snprintf(text, cap, "declared by client pid %d: %u declared pipelines exist already, "
			 "max_job_pipelines = %u in [daemon]", pid, declared_count(j),
			 cfg->max_job_pipelines);
		goto free_pl;
	}
	rc = check_paths(j, pl, pid, text, cap);
	if (rc < 0) {
		rc = rc == -EACCES ? -EACCES : -EINVAL;
		goto free_pl;
	}
	struct job_make *m = calloc(1, sizeof(*m));
	if (!m) {
		rc = -ENOMEM;
		snprintf(text, cap, "out of memory");
		goto free_pl;
	}
	m->j = j;
	snprintf(m->job, sizeof(m->job), "%s", pl->job);
	snprintf(m->name, sizeof(m->name), "%s", pl->name);
	m->pid = pid;
	m->waiters[m->n_waiters++] = conn_id;
	struct pipe_open *po;
	rc = pipetable_open(j->pt, pl, on_made, m, &po);
	if (rc < 0) {
		free(m);
		snprintf(text, cap, "declared by client pid %d: cannot start opening its data: %s",
			 pid, strerror(-rc));
		goto free_pl;
	}
	m->next = j->making;
	j->making = m;
	char shown[ESCAPE_SIZE(CONFIG_JOB_MAX - 1)];
	log_info("client pid %d declares pipeline %s for job %s: opening its data", pid, pl->name,
		 escape_str(pl->job, shown, sizeof(shown)));
	rc = JOBS_PENDING;
free_pl:
	free(pl);
	return rc;
}

/* ---- linger ---- */

static void on_linger(uv_timer_t *t)
{
	struct jobs *j = t->data;
	uint64_t now = uv_now(j->loop);
	for (unsigned i = 0; i < j->n_live;) {
		struct job_live *l = &j->live[i];
		if (pipetable_entry_clients(j->pt, l->entry) > 0) {
			l->idle_since_ms = 0;
		} else if (!l->idle_since_ms) {
			l->idle_since_ms = now;
		} else if (now - l->idle_since_ms >= j->cfg->job_linger_ms) {
			char why[400], job[ESCAPE_SIZE(CONFIG_JOB_MAX - 1)];
			const struct pipeline_cfg *pl = pipetable_cfg(j->pt, l->entry);
			snprintf(why, sizeof(why), "pipeline \"%s\" of job %s removed: its last client "
				 "left %" PRIu64 " ms ago (job_linger_ms = %u)", pl->name,
				 escape_str(pl->job, job, sizeof(job)), now - l->idle_since_ms,
				 j->cfg->job_linger_ms);
			pipetable_remove(j->pt, l->entry, why);
			*l = j->live[--j->n_live];
			continue;
		}
		i++;
	}
	if (j->n_live == 0) {
		uv_timer_stop(&j->linger);
		j->timer_running = false;
	}
}
