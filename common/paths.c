/* SPDX-License-Identifier: Apache-2.0 */
/* paths: default socket location, the programs the daemon starts (paths.h). */
#include "common/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int paths_default_socket(char *buf, size_t cap)
{
	const char *env = getenv("LOADERD_SOCKET");
	int n;
	if (env && *env)
		n = snprintf(buf, cap, "%s", env);
	else if (geteuid() == 0)
		n = snprintf(buf, cap, "/run/loaderd/loaderd.sock");
	else if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
		n = snprintf(buf, cap, "%s/loaderd.sock", env);
	else
		return -ENOENT;
	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

int paths_client_socket(char *buf, size_t cap)
{
	const char *env = getenv("LOADERD_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;
	if (env && *env) {
		n = snprintf(buf, cap, "%s", env);
	} else if (geteuid() != 0 && xdg && *xdg) {
		struct stat st;
		n = snprintf(buf, cap, "%s/loaderd.sock", xdg);
		if (n >= 0 && (size_t)n < cap && (stat(buf, &st) < 0 || !S_ISSOCK(st.st_mode)))
			n = snprintf(buf, cap, "/run/loaderd/loaderd.sock");
	} else {
		n = snprintf(buf, cap, "/run/loaderd/loaderd.sock");
	}
	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

void paths_program_from(const char *exe, const char *name, const char *from_bin, char *buf,
			size_t cap)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", exe);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	snprintf(buf, cap, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
	if (access(buf, X_OK) == 0)
		return;
	/* Each leading "../" of from_bin goes up one directory of dir. */
	while (strncmp(from_bin, "../", 3) == 0 && (slash = strrchr(dir, '/')) && slash != dir) {
		*slash = '\0';
		from_bin += 3;
	}
	if (strcmp(dir, "/") == 0)
		dir[0] = '\0';
	snprintf(buf, cap, "%s/%s/%s", dir, from_bin, name);
}

void paths_program(const char *name, const char *from_bin, const char *libexec, char *buf,
		   size_t cap)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0 && self[0] == '/') {
		self[n] = '\0';
		paths_program_from(self, name, from_bin, buf, cap);
		return;
	}
	snprintf(buf, cap, "%s/%s", libexec, name);
}
