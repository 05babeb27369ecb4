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

/* The program `name` the daemon starts: beside the running executable
 * when it is there (a build tree, a bin-style install), else
 * LIBEXEC/loaderd/NAME. */
void paths_program(const char *name, const char *libexec, char *buf, size_t cap);

#endif
