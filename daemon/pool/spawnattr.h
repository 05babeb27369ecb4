/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spawnattr: what every program the pool starts with posix_spawn gets
 * (the worker zygote, the worker program's probe): an empty signal mask
 * and default handling of the signals loaderd ignores or catches, so the
 * child starts as a fresh process would; optionally a process group of
 * its own, so that a timeout can kill all of it.
 */
#ifndef LDR_DAEMON_POOL_SPAWNATTR_H
#define LDR_DAEMON_POOL_SPAWNATTR_H

#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stddef.h>

/* posix_spawnattr_init and the settings above. 0, or the positive error
 * of the call that failed (attr is then destroyed). */
static inline int pool_spawnattr_init(posix_spawnattr_t *attr, bool own_group)
{
	int rc = posix_spawnattr_init(attr);
	if (rc != 0)
		return rc;
	sigset_t none, defaults;
	sigemptyset(&none);
	sigemptyset(&defaults);
	static const int reset[] = {SIGPIPE, SIGHUP, SIGINT, SIGTERM, SIGCHLD, SIGUSR1, SIGUSR2};
	for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); i++)
		sigaddset(&defaults, reset[i]);
	short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
	if (own_group)
		flags |= POSIX_SPAWN_SETPGROUP;
	if ((rc = posix_spawnattr_setsigmask(attr, &none)) != 0 ||
	    (rc = posix_spawnattr_setsigdefault(attr, &defaults)) != 0 ||
	    (own_group && (rc = posix_spawnattr_setpgroup(attr, 0)) != 0) ||
	    (rc = posix_spawnattr_setflags(attr, flags)) != 0)
		posix_spawnattr_destroy(attr);
	return rc;
}

#endif
