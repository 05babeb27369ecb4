/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock: the monotonic clock, in nanoseconds for stage timings and in
 * milliseconds for deadlines and status ages (never wall time).
 */
#ifndef LDR_COMMON_CLOCK_H
#define LDR_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_mono_ms(void)
{
	return clock_mono_ns() / 1000000ull;
}

#endif
