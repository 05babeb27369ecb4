/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memavail: how much memory the shared-memory arena can still take. The
 * arena is memory of the daemon's own (a sealed memfd), charged to its
 * memory cgroup, not to /dev/shm: what bounds it is the system's
 * MemAvailable and, when loaderd runs in a cgroup v2 with memory.max set
 * (a systemd MemoryMax=, a container's limit), that limit minus the
 * cgroup's memory.current, for its own cgroup and every ancestor.
 *
 * Pure reading of text files whose paths are given, so tests can point it
 * at fixtures. A file that is absent or unreadable means no limit from it
 * (a kernel without MemAvailable, cgroup v1, a cgroup without memory.max).
 */
#ifndef LDR_DAEMON_MEMAVAIL_H
#define LDR_DAEMON_MEMAVAIL_H

#include <stdint.h>

struct memavail_paths {
	const char *meminfo;     /* /proc/meminfo */
	const char *self_cgroup; /* /proc/self/cgroup */
	const char *cgroup_root; /* /sys/fs/cgroup, where the v2 hierarchy is mounted */
};

#define MEMAVAIL_SYSTEM_PATHS {"/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup"}

struct memavail {
	uint64_t bytes;   /* what may still be allocated; UINT64_MAX: no figure known */
	char source[400]; /* where that figure comes from, for messages, e.g.
			   * "MemAvailable in /proc/meminfo" or "cgroup /a/b:
			   * memory.max 1073741824 - memory.current 52428800" */
};

/* The smallest of the figures the files give. */
void memavail_read(const struct memavail_paths *paths, struct memavail *out);

#endif
