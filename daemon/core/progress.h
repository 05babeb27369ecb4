/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress: how far a long scan is (listing an image tree of millions of
 * files, reading the shards of a tar or llm.c dataset, checking a large
 * Megatron index), so that neither the operator nor systemd (whose
 * TimeoutStartSec would otherwise kill a slow start) takes a long scan for
 * a hung one, and so that `loaderctl status` shows it.
 *
 * The work counts (progress_add); what is said, and where, is the sink's
 * (daemon/notify.c: the log, and STATUS= with EXTEND_TIMEOUT_USEC= on
 * $NOTIFY_SOCKET), set for start-up and --check-config. Without a sink
 * (a reload, a job's pipeline, the unit tests, the fuzzers) counting says
 * nothing, but every scan running is listed all the same:
 * progress_describe renders them for the status, whichever thread they
 * run on.
 *
 * Threads: a scan runs on one thread (start-up's, or one of libuv's pool)
 * from progress_begin to progress_end; its scope (which pipeline) and its
 * cancel flag are that thread's (progress_scope, progress_set_cancel), so
 * scans on several threads never mix. The list of running scans is under
 * a lock, their counts atomic: progress_describe may run on any thread
 * (the loop's) while they count. The sink and the interval are set while
 * no scan runs.
 */
#ifndef LDR_DAEMON_CORE_PROGRESS_H
#define LDR_DAEMON_CORE_PROGRESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROGRESS_TEXT_MAX 600
#define PROGRESS_SCOPE_MAX 128
/* By default the first line after this much work, then one every
 * PROGRESS_EVERY_NS; progress_set_interval sets one interval for both. */
#define PROGRESS_FIRST_NS 1000000000ull
#define PROGRESS_EVERY_NS 5000000000ull
/* The start-up time each line asks systemd for, from when it is sent:
 * several intervals, so one late line never lets TimeoutStartSec strike. */
#define PROGRESS_EXTEND_USEC 60000000ull

struct status_text;

/* text: "pipeline train: listing /data/train: 1,200,000 files so far, 12 s";
 * done: the work's last line (it reported before, and has now finished). */
typedef void (*progress_sink_fn)(const char *text, bool done);

/* Where every progress line goes from now on; NULL: nowhere. */
void progress_set_sink(progress_sink_fn sink);

/* Every line, the first included, after interval_ns (0: the defaults). */
void progress_set_interval(uint64_t interval_ns);

/* The pipeline this thread's scans are for, until changed (lines then
 * start "pipeline NAME: "); NULL or "" for none. */
void progress_scope(const char *pipeline);

/* The flag that stops this thread's scans (NULL: none): once it is set,
 * progress_add returns -ECANCELED and the scan gives up. */
void progress_set_cancel(const atomic_bool *flag);

struct progress {
	char pipeline[PROGRESS_SCOPE_MAX]; /* the thread's scope at begin */
	char what[PROGRESS_TEXT_MAX / 2];  /* "listing /data/train" */
	const char *unit;                  /* "files" */
	_Atomic uint64_t count;
	uint64_t start_ns, next_ns;
	bool said;
	const atomic_bool *cancel;
	struct progress *prev, *next;      /* the running scans (progress.c) */
};

/* Starts counting units ("files", "shards", "documents") of what; the
 * scan is listed until progress_end, which every begin must meet. */
void progress_begin(struct progress *p, const char *unit, const char *what);
/* n more units done; says how far when the interval has passed. 0, or
 * -ECANCELED when this thread's cancel flag is set: stop the scan. */
int progress_add(struct progress *p, uint64_t n);
/* The work is over: a last line, only when it had said anything. */
void progress_end(struct progress *p);

/* Whether this thread's cancel flag is set. */
bool progress_cancelled(void);

/* The running scans: in JSON the array "scans", each {pipeline, what,
 * count, unit, seconds}; in text a line each, "scan: pipeline train:
 * listing /data/train: 1,200,000 files so far, 12.0 s". */
void progress_describe(struct status_text *t);
/* The first running scan's line ("" when none), for the log. */
void progress_first(char *buf, size_t cap);

#endif
