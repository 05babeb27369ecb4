/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copyteam: a few threads that share one large memcpy (pin = copy: staging
 * slot -> pinned buffer). One thread's memcpy into pinned memory measured
 * 5.6 GB/s on the H100 host, the bus 54 GB/s, so a batch's copy is cut into
 * page-aligned parts, one per thread; the caller does part 0 and returns
 * when every part is done.
 *
 * Threads: team_copy is called by one thread at a time (the pinning
 * thread); the helpers wait on `go` and report on `done`. They never call
 * CUDA.
 */
#ifndef LDR_DAEMON_COPYTEAM_H
#define LDR_DAEMON_COPYTEAM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TEAM_MIN_PART (1u << 20) /* copies under this per thread are not split */

struct team {
	pthread_t *threads;
	uint32_t n; /* helper threads; the calling GPU thread does part 0 */
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t round;
	uint32_t pending;
	bool quit;
	const uint8_t *src;
	uint8_t *dst;
	size_t part, bytes;
};

/* threads: the team's size, the caller included (1: no helper threads).
 * 0 or -ENOMEM; a helper that cannot be created makes the team smaller. */
int team_start(struct team *t, uint32_t threads);
void team_copy(struct team *t, uint8_t *dst, const uint8_t *src, size_t bytes);
void team_stop(struct team *t);

#endif
