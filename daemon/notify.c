/* SPDX-License-Identifier: Apache-2.0 */
/* notify: sd_notify protocol (notify.h). */
#include "daemon/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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
