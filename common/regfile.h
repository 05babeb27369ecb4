/* SPDX-License-Identifier: Apache-2.0 */
/*
 * regfile: opening a data file that must be a regular file, in the daemon
 * and in the workers alike.
 *
 * open(2) of a FIFO blocks until a writer appears, and opening a device
 * can have side effects (a tape rewinds, a watchdog starts), so a path is
 * stat'ed first and opened only when it names a regular file (symlinks
 * followed); the open itself is O_NONBLOCK, and the type checked again on
 * the descriptor, so a file swapped for a FIFO between the two never
 * blocks either. O_NONBLOCK is then cleared: io_uring honours it even on
 * regular files (a read that would wait for the disk answers -EAGAIN).
 */
#ifndef LDR_COMMON_REGFILE_H
#define LDR_COMMON_REGFILE_H

#include <errno.h>
#include <sys/stat.h>

/* The -errno regfile_open returns for a path that exists but is not a
 * regular file. A FIFO or socket cannot seek either, hence this errno;
 * messages never print its strerror, but "not a regular file (KIND)". */
#define REGFILE_NOT_REGULAR (-ESPIPE)

/* Opens path (relative to dirfd, or AT_FDCWD) read-only and O_CLOEXEC,
 * for blocking reads. Returns the descriptor, REGFILE_NOT_REGULAR, or
 * another -errno (-ENOENT, -EACCES, ...). When st is given it receives the
 * file's stat, also with REGFILE_NOT_REGULAR (for regfile_kind). */
int regfile_open(int dirfd, const char *path, struct stat *st);

/* What a file of this mode is, for messages: "a FIFO", "a character
 * device", "a block device", "a directory", "a socket", "a regular file",
 * "a symbolic link", "a file of unknown type". */
const char *regfile_kind(mode_t mode);

#endif
