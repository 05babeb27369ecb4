/* SPDX-License-Identifier: Apache-2.0 */
/* preflight: the checks before loaderd creates anything (preflight.h). */
#include "daemon/preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/log.h"
#include "common/regfile.h"
#include "daemon/core/progress.h"
#include "daemon/pool/workerprobe.h"

#define GROUP_BUF_MAX (1u << 20) /* getgrnam_r's buffer grows up to this */

/* "FILE:LINE: " when the file sets the [daemon] key, else "". */
static const char *preflight_where(const struct config *cfg, const char *key, char *buf, size_t cap)
{
	int line = config_key_line(cfg, NULL, key);
	if (line > 0)
		snprintf(buf, cap, "%s:%d: ", cfg->file, line);
	else
		buf[0] = '\0';
	return buf;
}

void preflight_arena_sizing(const struct config *cfg, const struct source *sources,
			    struct arena_sizing *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t slot_bytes = cfg->staging_slot_bytes > ARENA_ALIGN ? cfg->staging_slot_bytes :
			      ARENA_ALIGN;
	/* Jobs may declare pipelines and nothing sized the slots for them:
	 * room for their share, or for a batch of 256 ImageNet crops. */
	if (cfg->job_roots[0] && cfg->staging_slot_bytes == 0)
		slot_bytes = cfg->job_batch_bytes ? cfg->job_batch_bytes : PREFLIGHT_JOB_SLOT_BYTES;
	for (size_t i = 0; i < cfg->n_pipelines; i++)
		if (sources[i].slot_bytes > slot_bytes)
			slot_bytes = sources[i].slot_bytes;
	slot_bytes = arena_align(slot_bytes);
	/* Image pipelines' sample lists: entries, then shards, then paths, each
	 * aligned; then the lists of blends' members, in their entries' order. */
	uint64_t indexes_bytes = 0;
	uint32_t n_entries = (uint32_t)cfg->n_pipelines;
	for (size_t i = 0; i < cfg->n_pipelines; i++) {
		n_entries += sources[i].n_members;
		out->index_at[i] = indexes_bytes;
		indexes_bytes += source_index_bytes(&sources[i]);
	}
	for (size_t i = 0; i < cfg->n_pipelines; i++)
		for (uint32_t m = 0; m < sources[i].n_members; m++) {
			const struct source_member *mb = &sources[i].members[m];
			out->index_at[mb->arena_index] = indexes_bytes;
			indexes_bytes += source_index_bytes(&mb->src);
		}
	/* The table has an entry for every pipeline there may ever be, and
	 * the lists of pipelines added later go after those of start. */
	(void)n_entries;
	out->runtime_index_at = arena_align(indexes_bytes);
	out->plan = (struct arena_plan){
		.n_pipelines = ARENA_PIPELINES_MAX, .n_workers = cfg->max_workers,
		.n_slots = cfg->staging_slots, .slot_bytes = slot_bytes,
		.indexes_bytes = out->runtime_index_at + arena_align(cfg->runtime_index_bytes),
	};
	out->bytes = arena_plan_bytes(&out->plan);
}

int preflight_arena(const struct config *cfg, const struct arena_sizing *sz,
		    const struct memavail_paths *paths, char *err, size_t err_cap)
{
	char at[PATH_MAX + 32], what[256];
	snprintf(what, sizeof(what), "%u staging slots of %" PRIu64 " bytes (%s)%s",
		 sz->plan.n_slots, sz->plan.slot_bytes, cfg->staging_slot_bytes >=
		 sz->plan.slot_bytes ? "staging_slot_bytes" : "the largest batch",
		 sz->plan.indexes_bytes > sz->runtime_index_at ?
		 " and the sample lists (runtime_index_bytes included)" :
		 sz->plan.indexes_bytes ? " and the image file lists" : "");
	if (sz->bytes > cfg->shm_bytes)
		return errtext(err, err_cap, -ENOSPC, "%sshared memory: %s need %" PRIu64
			       " bytes, over shm_bytes = %" PRIu64 "; raise shm_bytes or lower "
			       "staging_slots or batch_size",
			       preflight_where(cfg, "shm_bytes", at, sizeof(at)), what, sz->bytes,
			       cfg->shm_bytes);
	struct memavail mem;
	memavail_read(paths, &mem);
	if (sz->bytes > mem.bytes)
		return errtext(err, err_cap, -ENOMEM, "shared memory: %s need %" PRIu64
			       " bytes, but only %" PRIu64 " bytes of memory are available (%s); "
			       "lower staging_slots or batch_size, or give loaderd more memory",
			       what, sz->bytes, mem.bytes, mem.source);
	return 0;
}

int preflight_socket_group(const struct config *cfg, char *err, size_t err_cap)
{
	if (!cfg->socket_group[0])
		return 0;
	char at[PATH_MAX + 32];
	long hint = sysconf(_SC_GETGR_R_SIZE_MAX);
	size_t cap = hint > 0 ? (size_t)hint : 4096;
	for (;;) {
		char *buf = malloc(cap);
		if (!buf)
			return errtext(err, err_cap, -ENOMEM, "out of memory");
		struct group gr, *found = NULL;
		int rc = getgrnam_r(cfg->socket_group, &gr, buf, cap, &found);
		free(buf);
		if (rc == ERANGE && cap < GROUP_BUF_MAX) {
			cap *= 2;
			continue;
		}
		if (rc == 0 && found)
			return 0;
		preflight_where(cfg, "socket_group", at, sizeof(at));
		if (rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM)
			return errtext(err, err_cap, -ENOENT,
				       "%s[daemon] socket_group: \"%s\" is not "
				       "a group on this system", at, cfg->socket_group);
		return errtext(err, err_cap, -rc, "%s[daemon] socket_group: cannot look up group "
			       "\"%s\": %s", at, cfg->socket_group, strerror(rc));
	}
}

const char *preflight_socket_where(const struct config *cfg, const char *path, char *buf,
				   size_t cap)
{
	const char *env = getenv("LOADERD_SOCKET");
	int line = config_key_line(cfg, NULL, "socket");
	if (cfg->socket[0] && line > 0)
		snprintf(buf, cap, "%s:%d: [daemon] socket: %s", cfg->file, line, path);
	else if (cfg->socket[0])
		snprintf(buf, cap, "[daemon] socket: %s", path);
	else
		snprintf(buf, cap, "socket %s (%s; socket in [daemon] names another)", path,
			 env && *env ? "from $LOADERD_SOCKET" : "the default");
	return buf;
}

/* The directory the socket (or the first directory missing on its way)
 * goes into: an existing directory the daemon may create entries in. */
static int preflight_socket_dir(const char *where, const char *path, char *err, size_t err_cap)
{
	char dir[PATH_MAX], missing[PATH_MAX] = "";
	snprintf(dir, sizeof(dir), "%s", path);
	for (;;) {
		char up[PATH_MAX];
		snprintf(up, sizeof(up), "%s", dir);
		snprintf(dir, sizeof(dir), "%s", dirname(up));
		struct stat st;
		if (stat(dir, &st) == 0) {
			if (!S_ISDIR(st.st_mode))
				return errtext(err, err_cap, -ENOTDIR, "%s: %s is not a directory (%s)",
					       where, dir, regfile_kind(st.st_mode));
			break;
		}
		/* ENOTDIR: a component above is not a directory; going up
		 * finds and names it. */
		if ((errno != ENOENT && errno != ENOTDIR) || strcmp(dir, "/") == 0 ||
		    strcmp(dir, ".") == 0)
			return errtext(err, err_cap, -errno, "%s: %s: %s", where, dir, strerror(errno));
		snprintf(missing, sizeof(missing), "%s", dir);
	}
	if (faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) < 0) {
		int code = errno;
		if (missing[0])
			return errtext(err, err_cap, -code, "%s: cannot create directory %s in %s: %s",
				       where, missing, dir, strerror(code));
		return errtext(err, err_cap, -code, "%s: cannot create the socket in %s: %s", where,
			       dir, strerror(code));
	}
	return 0;
}

int preflight_socket(const struct config *cfg, const char *path, char *err, size_t err_cap)
{
	char where[PATH_MAX + 128];
	preflight_socket_where(cfg, path, where, sizeof(where));
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return errtext(err, err_cap, -ENAMETOOLONG,
			       "%s: longer than %zu bytes (a Unix socket address)", where,
			       sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	struct stat st;
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
		return errtext(err, err_cap, -EEXIST, "%s: exists and is not a socket (%s)", where,
			       regfile_kind(st.st_mode));
	return preflight_socket_dir(where, path, err, err_cap);
}

int preflight_worker(const struct config *cfg, const char *default_program, int timeout_ms,
		     char *err, size_t err_cap)
{
	const char *program = cfg->worker_program[0] ? cfg->worker_program : default_program;
	char why[1024], at[PATH_MAX + 32];
	int rc = worker_probe(program, timeout_ms, why, sizeof(why));
	if (rc == 0)
		return 0;
	if (cfg->worker_program[0])
		return errtext(err, err_cap, rc, "%s[daemon] worker_program: %s: %s",
			       preflight_where(cfg, "worker_program", at, sizeof(at)), program,
			       why);
	return errtext(err, err_cap, rc, "worker program %s (the default; worker_program in "
		       "[daemon] names another): %s", program, why);
}

/* Each pipeline's data but those in skip (bit i: pipeline i); one line
 * per bad pipeline, naming the file and line of its source. The number of
 * problems logged. */
static unsigned preflight_open_sources(const struct config *cfg, uint64_t skip,
				       struct source *sources)
{
	unsigned found = 0;
	for (size_t i = 0; i < cfg->n_pipelines; i++) {
		const struct pipeline_cfg *pl = &cfg->pipelines[i];
		if (skip >> i & 1u)
			continue;
		char err[PATH_MAX + 256];
		progress_scope(pl->name); /* a long scan says which pipeline it is for */
		int rc = source_open(pl, &sources[i], err, sizeof(err));
		progress_scope(NULL);
		if (progress_cancelled()) /* stopping: no problem to report */
			return found + 1;
		if (rc < 0) {
			int line = config_key_line(cfg, pl, "source");
			if (cfg->file[0] && line > 0)
				log_error("%s:%d: %s", cfg->file, line, err);
			else
				log_error("%s", err);
			found++;
		}
	}
	if (found || skip)
		return found;
	uint32_t entries = source_blend_number(sources, cfg->n_pipelines);
	if (entries > ARENA_PIPELINES_MAX) {
		log_error("%s%s%u pipelines and blend members need a table entry each: at most %u",
			  cfg->file, cfg->file[0] ? ": " : "", entries, ARENA_PIPELINES_MAX);
		return 1;
	}
	return 0;
}

/* The checks of [daemon] that need no source: the worker program and the
 * socket's group. Logs each problem; returns how many. */
static unsigned preflight_daemon(const struct config *cfg, const char *default_program)
{
	char err[PATH_MAX + 2048];
	unsigned found = 0;
	if (preflight_worker(cfg, default_program, WORKER_PROBE_TIMEOUT_MS, err, sizeof(err)) < 0) {
		log_error("%s", err);
		found++;
	}
	if (preflight_socket_group(cfg, err, sizeof(err)) < 0) {
		log_error("%s", err);
		found++;
	}
	return found;
}

unsigned preflight_run(const struct config *cfg, struct source *sources,
		       const char *default_program, const char *socket_path,
		       struct arena_sizing *sz)
{
	static const struct memavail_paths mem_paths = MEMAVAIL_SYSTEM_PATHS;
	char err[PATH_MAX + 2048];
	source_set_listing(NULL, cfg->scan_threads); /* a check writes no listing cache */
	source_set_index_cache(cfg->cache_dir);      /* but primes the index cache */
	unsigned sources_found = preflight_open_sources(cfg, 0, sources), found = sources_found;
	found += preflight_daemon(cfg, default_program);
	if (socket_path && preflight_socket(cfg, socket_path, err, sizeof(err)) < 0) {
		log_error("%s", err);
		found++;
	}
	if (sources_found == 0) { /* the arena's size needs every source */
		preflight_arena_sizing(cfg, sources, sz);
		if (preflight_arena(cfg, sz, &mem_paths, err, sizeof(err)) < 0) {
			log_error("%s", err);
			found++;
		}
	}
	return found;
}

unsigned preflight_serve_checks(const struct config *cfg, const char *socket_path)
{
	char err[PATH_MAX + 2048];
	unsigned found = 0;
	if (preflight_socket_group(cfg, err, sizeof(err)) < 0) {
		log_error("%s", err);
		found++;
	}
	if (socket_path && preflight_socket(cfg, socket_path, err, sizeof(err)) < 0) {
		log_error("%s", err);
		found++;
	}
	return found;
}

unsigned preflight_scan(const struct config *cfg, struct source *sources,
			const char *default_program, struct arena_sizing *sz)
{
	static const struct memavail_paths mem_paths = MEMAVAIL_SYSTEM_PATHS;
	char err[PATH_MAX + 2048];
	source_set_listing(cfg->cache_dir, cfg->scan_threads); /* the start's scan */
	source_set_index_cache(cfg->cache_dir);
	unsigned sources_found = preflight_open_sources(cfg, 0, sources), found = sources_found;
	if (progress_cancelled())
		return found;
	if (preflight_worker(cfg, default_program, WORKER_PROBE_TIMEOUT_MS, err, sizeof(err)) < 0) {
		log_error("%s", err);
		found++;
	}
	if (sources_found == 0) {
		preflight_arena_sizing(cfg, sources, sz);
		if (preflight_arena(cfg, sz, &mem_paths, err, sizeof(err)) < 0) {
			log_error("%s", err);
			found++;
		}
	}
	return found;
}

unsigned preflight_sections(const struct config *cfg, uint64_t skip, bool daemon_ok,
			    struct source *sources, const char *default_program)
{
	source_set_index_cache(daemon_ok ? cfg->cache_dir : NULL); /* as preflight_run */
	unsigned found = preflight_open_sources(cfg, skip, sources);
	if (daemon_ok)
		found += preflight_daemon(cfg, default_program);
	return found;
}
