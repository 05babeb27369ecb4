/* confine: a path within a set of directories (confine.h). */
#include "common/confine.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
