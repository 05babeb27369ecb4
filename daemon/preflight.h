/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preflight: what loaderd checks before it creates anything, the same at
 * start and for --check-config, so that a configuration that passes the
 * check does not then fail at start for one of these reasons:
 *  - the worker program answers `--probe` as a loaderd worker of this
 *    version (daemon/pool/workerprobe.h);
 *  - socket_group names a group of this system;
 *  - the socket path fits a Unix socket address, is not taken by a file
 *    that is not a socket, and its directory exists or can be made: the
 *    nearest existing ancestor is a directory the daemon may create
 *    entries in (the start makes the missing directories, server.h);
 *  - the shared-memory arena, sized for the largest batch, the staging
 *    slots, the worker rings and the image file lists, fits shm_bytes and
 *    the memory that can hold it (daemon/memavail.h).
 * The data files are checked before these, by source_open.
 *
 * preflight_run runs them all and logs each problem: it is where loaderd
 * decides that a configuration cannot start. Each single check returns 0,
 * or -errno with err naming the file and line of the key concerned when
 * the file sets it ("FILE:LINE: [daemon] KEY: ..."), in config_load's
 * style.
 */
#ifndef LDR_DAEMON_PREFLIGHT_H
#define LDR_DAEMON_PREFLIGHT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/config/config.h"
#include "daemon/memavail.h"
#include "daemon/source/source.h"
#include "shm/arena.h"

/* A staging slot's bytes at least where jobs may declare pipelines
 * (job_roots) and neither staging_slot_bytes nor job_batch_bytes says:
 * 256 rows of 224 x 224 x 3 bytes, and their labels, with room. */
#define PREFLIGHT_JOB_SLOT_BYTES (48ull << 20)

/* The arena's size for a configuration and its opened sources. */
struct arena_sizing {
	struct arena_plan plan;
	uint64_t bytes;                         /* arena_plan_bytes(&plan) */
	uint64_t index_at[ARENA_PIPELINES_MAX]; /* each image list's offset in the index area */
	uint64_t runtime_index_at; /* where runtime_index_bytes start in the index area */
};

/* Every check, in order: each pipeline's data (source_open, into
 * sources[]; its errors prefixed with the file and line of `source`), the
 * worker program, socket_group, the socket path (when not NULL: the
 * caller could not resolve it and said so), then (when the data is good)
 * the arena, sized into *sz. Logs each problem found, not only the first,
 * and returns how many: 0 when loaderd can start. */
unsigned preflight_run(const struct config *cfg, struct source *sources,
		       const char *default_program, const char *socket_path,
		       struct arena_sizing *sz);

/* A start splits preflight_run in two, so that the socket is served
 * while the data is scanned (daemon/startup.h): first, on the main
 * thread, what serving the socket needs (socket_group, and the socket
 * path when not NULL)... */
unsigned preflight_serve_checks(const struct config *cfg, const char *socket_path);
/* ...then, on start-up's thread, the rest: each pipeline's data, the
 * worker program, the arena. Each logs every problem it finds and
 * returns how many. The scan stops early, and its count means nothing,
 * when the thread's cancel flag is set (daemon/core/progress.h). */
unsigned preflight_scan(const struct config *cfg, struct source *sources,
			const char *default_program, struct arena_sizing *sz);

/* For a file with problems (config_load_problems), the checks of the
 * sections that have none, so that one run lists everything: the data of
 * each pipeline not in skip (bit i: pipeline i), and when daemon_ok the
 * worker program and socket_group (the socket path and the arena need
 * the whole file). Logs each problem; returns how many. */
unsigned preflight_sections(const struct config *cfg, uint64_t skip, bool daemon_ok,
			    struct source *sources, const char *default_program);

/* Sizes the arena for the sources (opened, their image lists in hand). */
void preflight_arena_sizing(const struct config *cfg, const struct source *sources,
			    struct arena_sizing *out);

/* The arena against shm_bytes, then against the memory paths tell of. */
int preflight_arena(const struct config *cfg, const struct arena_sizing *sz,
		    const struct memavail_paths *paths, char *err, size_t err_cap);

/* socket_group (when set) is a group getgrnam_r knows. */
int preflight_socket_group(const struct config *cfg, char *err, size_t err_cap);

/* The socket path the daemon will listen on (preflight.h's list), with
 * err as "WHERE: PATH: reason", WHERE as preflight_socket_where gives it. */
int preflight_socket(const struct config *cfg, const char *path, char *err, size_t err_cap);

/* What names the socket path in messages: "FILE:LINE: [daemon] socket:
 * PATH" when the file sets it, else "socket PATH (the default; ...)" or
 * "(from $LOADERD_SOCKET; ...)". Returns buf. */
const char *preflight_socket_where(const struct config *cfg, const char *path, char *buf,
				   size_t cap);

/* The worker program loaderd will spawn: cfg->worker_program, or
 * default_program when the file leaves it empty. */
int preflight_worker(const struct config *cfg, const char *default_program, int timeout_ms,
		     char *err, size_t err_cap);

#endif
