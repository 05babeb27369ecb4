/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobs: pipelines that training jobs declare through the client
 * (docs/clients.md, "Declaring a pipeline") instead of naming one the
 * operator configured.
 *
 * A HELLO's declaration is the lines of a [pipeline.NAME] section, parsed
 * and checked by the configuration's own code (config_declare), then held
 * to what the operator allows in [daemon]: job_roots (empty: no
 * declarations), max_job_pipelines, job_index_bytes, job_batch_bytes.
 * Every path the source names must resolve (symlinks, "..") within a job
 * root, and an imagefolder's symlinks too (common/confine.h).
 *
 * A declared pipeline's identity is (job key, normalized declaration):
 * every rank of one job that declares the same keys shares one pipeline
 * and one sampler, as clients of a configured pipeline do; another job
 * declaring the same text gets a pipeline of its own. Its name,
 * "d.HASH", is the declaration's alone (not the job's), so that a position
 * token saved by one run resumes in a later run that declares the same
 * pipeline. The pipeline is opened on libuv's thread pool
 * (daemon/pipetable.h) while the HELLOs that wait for it are held; once
 * its last client has left it stays job_linger_ms more (ranks attaching one
 * after another, a job reattaching), then is removed.
 *
 * Runs on the loop thread.
 */
#ifndef LDR_DAEMON_JOBS_H
#define LDR_DAEMON_JOBS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config/config.h"
#include "proto/proto.h"

struct jobs;
struct pipetable;

#define JOBS_PENDING 1

/* decided(ctx, conn_id, rc, entry, text): a pending declaration is
 * decided (server_declared). */
struct jobs *jobs_create(uv_loop_t *loop, const struct config *cfg, struct pipetable *pt,
			 void (*decided)(void *ctx, uint64_t conn_id, int rc, int entry,
					 const char *text),
			 void *ctx);
/* Closes the linger timer (the loop is ending); jobs_free once the loop
 * has run its close callback. */
void jobs_stop(struct jobs *j);
void jobs_free(struct jobs *j);

/*
 * HELLO with a declaration from client pid on connection conn_id: 0 with
 * *entry when the job's pipeline exists, JOBS_PENDING when it is being
 * made (decided() follows), or -errno with text: -EPERM the operator
 * allows no declarations (names job_roots), -EINVAL a bad key or value
 * (the configuration's message, naming the key and "declared by client
 * pid N"), -EACCES a path outside job_roots (naming the path, where it
 * leads and the roots), -EBUSY max_job_pipelines reached, -ENOSPC over
 * the job's memory share (naming the figure and the key).
 */
int jobs_declare(struct jobs *j, const struct proto_hello *hello, int pid, uint64_t conn_id,
		 int *entry, char *text, size_t cap);

#endif
