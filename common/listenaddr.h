/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listenaddr: where the daemon's metrics endpoint listens ([daemon]
 * metrics_listen): an absolute Unix socket path, or a loopback TCP
 * address, "127.0.0.1:PORT" (any 127.x.y.z), "[::1]:PORT" or
 * "localhost:PORT" (which is 127.0.0.1: no resolver is asked). The
 * endpoint has no authentication, so an address other machines could
 * reach (0.0.0.0, a host's own address, a name) is refused. Pure: no
 * I/O, no logging; fuzzed (fuzz/fuzz_listenaddr.c).
 */
#ifndef LDR_COMMON_LISTENADDR_H
#define LDR_COMMON_LISTENADDR_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

struct listen_addr {
	int family; /* AF_UNIX, AF_INET or AF_INET6 */
	union {
		struct sockaddr sa;
		struct sockaddr_un un;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} u;
	socklen_t len; /* of u's address */
};

/* Parses text (NUL-terminated) into *out. 0, or -EINVAL with why (one
 * line, saying what the value should be), -ENAMETOOLONG a Unix path
 * longer than a socket address holds. */
int listen_addr_parse(const char *text, struct listen_addr *out, char *why, size_t cap);

#endif
