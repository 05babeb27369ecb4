/* SPDX-License-Identifier: Apache-2.0 */
/*
 * confine: whether a path lies within a set of directories, as the file
 * system resolves it (realpath: every symlink followed, every ".." taken),
 * for the data a client's declared pipeline may read (docs/config.md,
 * job_roots). The check is the caller's, not the file system's: it runs
 * as the daemon's user.
 */
#ifndef LDR_COMMON_CONFINE_H
#define LDR_COMMON_CONFINE_H

#include <stddef.h>

/*
 * path resolved into real (PATH_MAX bytes) and checked against roots
 * (absolute directories separated by spaces or tabs, each resolved too).
 * 0 when real is one of the roots or under one; -EACCES when it is under
 * none; -errno of realpath when path cannot be resolved (missing, a
 * component not a directory, a loop). On -EACCES real holds where it
 * leads.
 */
int confine_check(const char *path, const char *roots, char *real);

/*
 * Whether the file open at fd is within roots (already resolved: absolute
 * real paths separated by spaces), by the path the kernel has for it
 * (/proc/self/fd): the check of what was opened, after every symlink,
 * so a file swapped for a symlink since it was listed cannot lead out.
 * 0, -EACCES outside every root, or -errno of readlink.
 */
int confine_fd(int fd, const char *roots);

#endif
