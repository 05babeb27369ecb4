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
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISREG(mode))
		return "a regular file";
	if (S_ISLNK(mode))
		return "a symbolic link";
	return "a file of unknown type";
}
