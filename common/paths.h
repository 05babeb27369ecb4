/*
 * paths: where the daemon's socket lives when nobody says, shared by
 * loaderd, the client library and loaderctl so they always agree:
 * $LOADERD_SOCKET, else /run/loaderd/loaderd.sock for root, else
 * $XDG_RUNTIME_DIR/loaderd.sock.
 */
#ifndef LDR_COMMON_PATHS_H
#define LDR_COMMON_PATHS_H

#include <stddef.h>

/* 0, -ENOENT (not root and no XDG_RUNTIME_DIR), or -ENAMETOOLONG. */
int paths_default_socket(char *buf, size_t cap);

#endif
