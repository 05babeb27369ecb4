/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress: how far a long piece of start-up work is (listing an image
 * tree of millions of files, reading the shards of a tar or llm.c dataset,
 * checking a large Megatron index), said every few seconds while it runs,
 * so that neither the operator nor systemd (whose TimeoutStartSec would
 * otherwise kill a slow start) takes a long scan for a hung one.
 *
 * The work counts (progress_add); what is said, and where, is the sink's
 * (daemon/main.c: the log, and STATUS= with EXTEND_TIMEOUT_USEC= on
 * $NOTIFY_SOCKET), set for start-up and --check-config. Without a sink
 * (a reload, the unit tests, the fuzzers) counting says nothing.
 * Start-up only: one thread, no locking.
 */
#ifndef LDR_DAEMON_CORE_PROGRESS_H
#define LDR_DAEMON_CORE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#define PROGRESS_TEXT_MAX 600
/* By default the first line after this much work, then one every
 * PROGRESS_EVERY_NS; progress_set_interval sets one interval for both. */
#define PROGRESS_FIRST_NS 1000000000ull
#define PROGRESS_EVERY_NS 5000000000ull
/* The start-up time each line asks systemd for, from when it is sent:
 * several intervals, so one late line never lets TimeoutStartSec strike. */
#define PROGRESS_EXTEND_USEC 60000000ull

/* text: "pipeline train: listing /data/train: 1,200,000 files so far, 12 s";
 * done: the work's last line (it reported before, and has now finished). */
typedef void (*progress_sink_fn)(const char *text, bool done);

/* Where every progress line goes from now on; NULL: nowhere. */
void progress_set_sink(progress_sink_fn sink);

/* Every line, the first included, after interval_ns (0: the defaults). */
void progress_set_interval(uint64_t interval_ns);

/* The start of every line until changed, e.g. "pipeline train" (the
 * caller that knows which pipeline is opened sets it); "" for none. */
void progress_scope(const char *scope);

struct progress {
	char what[PROGRESS_TEXT_MAX / 2]; /* "listing /data/train" */
	const char *unit;                  /* "files" */
	uint64_t count;
	uint64_t start_ns, next_ns;
	bool said;
};

/* Starts counting units ("files", "shards", "documents") of what. */
void progress_begin(struct progress *p, const char *unit, const char *what);
/* n more units done; says how far when the interval has passed. */
void progress_add(struct progress *p, uint64_t n);
/* The work is over: a last line, only when it had said anything. */
void progress_end(struct progress *p);

#endif
