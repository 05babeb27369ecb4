/* SPDX-License-Identifier: Apache-2.0 */
/* listenfd: the socket systemd passes (listenfd.h). */
#include "daemon/listenfd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/regfile.h"

#define LISTENFD_FIRST 3 /* SD_LISTEN_FDS_START */

static const char *listenfd_family(int family)
{
	switch (family) {
	case AF_UNIX: return "AF_UNIX";
	case AF_INET: return "AF_INET";
	case AF_INET6: return "AF_INET6";
	case AF_NETLINK: return "AF_NETLINK";
	default: return "another family";
	}
}

static const char *listenfd_type(int type)
{
	switch (type) {
	case SOCK_STREAM: return "SOCK_STREAM (ListenStream=)";
	case SOCK_DGRAM: return "SOCK_DGRAM (ListenDatagram=)";
	case SOCK_SEQPACKET: return "SOCK_SEQPACKET";
	default: return "another type";
	}
}

/* A decimal environment value: 0 and *out, or -EINVAL. */
static int listenfd_env_number(const char *name, long *out)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return -ENOENT;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < 0)
		return -EINVAL;
	*out = v;
	return 0;
}

static int listenfd_check(int fd, char *path, size_t path_cap, char *err, size_t err_cap)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return errtext(err, err_cap, -errno, "descriptor %d: %s", fd, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return errtext(err, err_cap, -ENOTSOCK, "descriptor %d is not a socket (%s)", fd,
			       regfile_kind(st.st_mode));
	int family = 0, type = 0, listening = 0;
	socklen_t len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) < 0 ||
	    (len = sizeof(int), getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len)) < 0 ||
	    (len = sizeof(int), getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len)) < 0)
		return errtext(err, err_cap, -errno, "descriptor %d: getsockopt: %s", fd,
			       strerror(errno));
	if (family != AF_UNIX || type != SOCK_SEQPACKET)
		return errtext(err, err_cap, -EPROTOTYPE, "descriptor %d is an %s %s socket; loaderd "
			       "serves an AF_UNIX SOCK_SEQPACKET one (ListenSequentialPacket= in "
			       "the .socket unit)", fd, listenfd_family(family), listenfd_type(type));
	if (!listening)
		return errtext(err, err_cap, -EINVAL, "descriptor %d is a socket that does not listen "
			       "(Accept=yes in the .socket unit passes connections: loaderd needs "
			       "Accept=no)", fd);
	struct sockaddr_un addr;
	len = sizeof(addr);
	memset(&addr, 0, sizeof(addr));
	if (getsockname(fd, (struct sockaddr *)&addr, &len) < 0)
		return errtext(err, err_cap, -errno, "descriptor %d: getsockname: %s", fd,
			       strerror(errno));
	if (len <= offsetof(struct sockaddr_un, sun_path) || addr.sun_path[0] == '\0')
		return errtext(err, err_cap, -EINVAL, "descriptor %d is an unnamed or abstract "
			       "socket; loaderd serves one bound to a path", fd);
	size_t n = strnlen(addr.sun_path, sizeof(addr.sun_path));
	if (n >= path_cap)
		return errtext(err, err_cap, -ENAMETOOLONG, "descriptor %d: its path is too long", fd);
	memcpy(path, addr.sun_path, n);
	path[n] = '\0';
	return 0;
}

int listenfd_take(int *fd, char *path, size_t path_cap, char *err, size_t err_cap)
{
	long pid = 0, n = 0;
	int pid_rc = listenfd_env_number("LISTEN_PID", &pid);
	int n_rc = listenfd_env_number("LISTEN_FDS", &n);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (pid_rc == -ENOENT && n_rc == -ENOENT)
		return 0;
	if (pid_rc < 0 || n_rc < 0)
		return errtext(err, err_cap, -EINVAL, "$LISTEN_PID and $LISTEN_FDS must both be "
			       "set, to decimal numbers");
	if (pid != (long)getpid())
		return 0; /* meant for another process (a wrapper's) */
	if (n == 0)
		return 0;
	if (n != 1)
		return errtext(err, err_cap, -E2BIG, "systemd passed %ld sockets; loaderd takes "
			       "one (one ListenSequentialPacket= in the .socket unit)", n);
	int rc = listenfd_check(LISTENFD_FIRST, path, path_cap, err, err_cap);
	if (rc < 0)
		return rc;
	int flags = fcntl(LISTENFD_FIRST, F_GETFL);
	if (flags < 0 || fcntl(LISTENFD_FIRST, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    fcntl(LISTENFD_FIRST, F_SETFD, FD_CLOEXEC) < 0)
		return errtext(err, err_cap, -errno, "descriptor %d: fcntl: %s", LISTENFD_FIRST,
			       strerror(errno));
	*fd = LISTENFD_FIRST;
	return 1;
}
