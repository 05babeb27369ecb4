/* SPDX-License-Identifier: Apache-2.0 */
/* notify: sd_notify protocol (notify.h). */
#include "daemon/notify.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/core/progress.h"

int notify_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return 0;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	size_t len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(addr.sun_path))
		return -EINVAL;
	memcpy(addr.sun_path, path, len);
	if (path[0] == '@') /* abstract namespace */
		addr.sun_path[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	/* Never blocks the loop: a receiver that has stopped reading (its queue
	 * is full) loses this notification (-EAGAIN) rather than stalling every
	 * client. systemd reads its socket at once. */
	ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL | MSG_DONTWAIT,
			   (struct sockaddr *)&addr, alen);
	int rc = n < 0 ? -errno : 0;
	close(fd);
	return rc;
}

uint64_t notify_watchdog_usec(void)
{
	const char *usec = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	if (!usec || !*usec)
		return 0;
	if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
		return 0;
	char *end;
	unsigned long long v = strtoull(usec, &end, 10);
	return (*end || v == 0) ? 0 : (uint64_t)v;
}

/* progress (daemon/core/progress.h) during start-up: to the log, and to
 * systemd with more time, so that a long scan does not hit TimeoutStartSec. */
static void on_progress(const char *text, bool done)
{
	log_info("%s", text);
	if (done)
		return;
	char state[PROGRESS_TEXT_MAX + 64];
	snprintf(state, sizeof(state), "STATUS=%s\nEXTEND_TIMEOUT_USEC=%llu", text,
		 (unsigned long long)PROGRESS_EXTEND_USEC);
	notify_send(state);
}

/* $LOADERD_PROGRESS_MS, the interval of start-up progress lines (1 to
 * 3600000 ms), in ns; 0 (the defaults) when unset or not such a number. */
static uint64_t progress_interval_env(void)
{
	const char *s = getenv("LOADERD_PROGRESS_MS");
	if (!s || !*s)
		return 0;
	char *end;
	unsigned long long ms = strtoull(s, &end, 10);
	if (*end || ms < 1 || ms > 3600000) {
		log_warning("$LOADERD_PROGRESS_MS=\"%s\": not a number of milliseconds from 1 to "
			    "3600000; progress lines keep their default interval", s);
		return 0;
	}
	return (uint64_t)ms * 1000000ull;
}

void notify_progress_start(void)
{
	progress_set_interval(progress_interval_env());
	progress_set_sink(on_progress);
}

void notify_progress_stop(void)
{
	progress_set_sink(NULL);
}
