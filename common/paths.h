/* SPDX-License-Identifier: Apache-2.0 */
/*
 * paths: where the daemon's socket lives when nobody says, shared by
 * loaderd, the client library and loaderctl so they always agree.
 *
 * The daemon listens on $LOADERD_SOCKET, else /run/loaderd/loaderd.sock
 * when it runs as root, else $XDG_RUNTIME_DIR/loaderd.sock (a user's own
 * daemon). A client connects to $LOADERD_SOCKET, else, when not root, to
 * its user's own daemon if $XDG_RUNTIME_DIR/loaderd.sock exists, else to
 * the system daemon at /run/loaderd/loaderd.sock (the systemd service runs
 * as its own user; training jobs run as theirs).
 *
 * Also where the daemon finds the programs it starts (loaderd-worker,
 * loaderd-decoder).
 */
#ifndef LDR_COMMON_PATHS_H
#define LDR_COMMON_PATHS_H

#include <stddef.h>

/* The daemon's default. 0, -ENOENT (not root and no XDG_RUNTIME_DIR), or
 * -ENAMETOOLONG. */
int paths_default_socket(char *buf, size_t cap);

/* A client's default. 0 or -ENAMETOOLONG. */
int paths_client_socket(char *buf, size_t cap);

/* The program `name` the daemon starts, found from the running
 * executable's directory DIR (/proc/self/exe), so that an install under
 * any prefix, moved or not, finds its own programs:
 *   DIR/NAME          when it is there (a build tree: bin/ holds them all);
 *   else DIR/FROM_BIN/NAME, FROM_BIN the programs' directory relative to
 *   the executables' ("../libexec/loaderd" in an install), whether or not
 *   it is there (the caller's check names that path).
 * Only where /proc/self/exe cannot be read: LIBEXEC/NAME, the programs'
 * directory the build was configured for. A leading "../" of FROM_BIN
 * takes a component off DIR, so the path names no "..". */
void paths_program(const char *name, const char *from_bin, const char *libexec, char *buf,
		   size_t cap);

/* paths_program's rule for an executable at `exe` (an absolute path):
 * the same result, for tests. */
void paths_program_from(const char *exe, const char *name, const char *from_bin, char *buf,
			size_t cap);

#endif
