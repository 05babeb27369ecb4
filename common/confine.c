/* SPDX-License-Identifier: Apache-2.0 */
/* confine: a path within a set of directories (confine.h). */
#include "common/confine.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* real (resolved) is root_real or below it. */
static int under(const char *real, const char *root_real)
{
	size_t n = strlen(root_real);
	if (n == 1) /* "/" */
		return real[0] == '/';
	return strncmp(real, root_real, n) == 0 && (real[n] == '\0' || real[n] == '/');
}

int confine_check(const char *path, const char *roots, char *real)
{
	if (!realpath(path, real))
		return -errno;
	for (const char *r = roots; *r;) {
		r += strspn(r, " \t");
		size_t n = strcspn(r, " \t");
		if (n == 0)
			break;
		char root[PATH_MAX], root_real[PATH_MAX];
		if (n < sizeof(root)) {
			memcpy(root, r, n);
			root[n] = '\0';
			if (realpath(root, root_real) && under(real, root_real))
				return 0;
		}
		r += n;
	}
	return -EACCES;
}

int confine_fd(int fd, const char *roots)
{
	char link[64], real[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, real, sizeof(real) - 1);
	if (n < 0)
		return -errno;
	real[n] = '\0';
	for (const char *r = roots; *r;) {
		r += strspn(r, " \t");
		size_t k = strcspn(r, " \t");
		if (k == 0)
			break;
		char root[PATH_MAX];
		if (k < sizeof(root)) {
			memcpy(root, r, k);
			root[k] = '\0';
			if (under(real, root))
				return 0;
		}
		r += k;
	}
	return -EACCES;
}
