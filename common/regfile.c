/* SPDX-License-Identifier: Apache-2.0 */
/* regfile: open a regular file, never blocking in open(2) (regfile.h). */
#include "common/regfile.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int regfile_open(int dirfd, const char *path, struct stat *st)
{
	struct stat local;
	struct stat *s = st ? st : &local;
	if (fstatat(dirfd, path, s, 0) < 0)
		return -errno;
	if (!S_ISREG(s->st_mode))
		return REGFILE_NOT_REGULAR;
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -errno;
	int err = 0;
	int flags;
	if (fstat(fd, s) < 0)
		err = -errno;
	else if (!S_ISREG(s->st_mode)) /* replaced since the fstatat */
		err = REGFILE_NOT_REGULAR;
	else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
		err = -errno;
	if (err < 0) {
		close(fd);
		return err;
	}
	return fd;
}

const char *regfile_kind(mode_t mode)
{
	static const struct {
		mode_t type;
		const char *kind;
	} kinds[] = {
		{S_IFIFO, "a FIFO"},
		{S_IFCHR, "a character device"},
		{S_IFBLK, "a block device"},
		{S_IFDIR, "a directory"},
		{S_IFSOCK, "a socket"},
		{S_IFREG, "a regular file"},
		{S_IFLNK, "a symbolic link"},
	};
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if ((mode & S_IFMT) == kinds[i].type)
			return kinds[i].kind;
	return "a file of unknown type";
}
