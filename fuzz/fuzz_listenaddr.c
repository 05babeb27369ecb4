/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_listenaddr: libFuzzer harness for metrics_listen's parser
 * (common/listenaddr.c). A value is refused with a reason, or accepted as
 * an absolute Unix path that fits a socket address (and is the value,
 * byte for byte), or as a loopback address (127.0.0.0/8, ::1) with a port
 * in 1..65535 that the value ends with. Any breach aborts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/listenaddr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[256];
	if (size >= sizeof(text))
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct listen_addr a;
	char why[256] = "";
	int rc = listen_addr_parse(text, &a, why, sizeof(why));
	if (rc < 0) {
		if (why[0] == '\0' || (rc != -EINVAL && rc != -ENAMETOOLONG))
			abort();
		return 0;
	}
	char port[16];
	switch (a.family) {
	case AF_UNIX:
		if (text[0] != '/' || strcmp(a.u.un.sun_path, text) != 0)
			abort();
		return 0;
	case AF_INET:
		if ((ntohl(a.u.in.sin_addr.s_addr) >> 24) != 127 || a.len != sizeof(a.u.in))
			abort();
		snprintf(port, sizeof(port), ":%u", ntohs(a.u.in.sin_port));
		break;
	case AF_INET6:
		if (!IN6_IS_ADDR_LOOPBACK(&a.u.in6.sin6_addr) || a.len != sizeof(a.u.in6))
			abort();
		snprintf(port, sizeof(port), "]:%u", ntohs(a.u.in6.sin6_port));
		break;
	default:
		abort();
	}
	size_t n = strlen(text), p = strlen(port);
	if (port[p - 1] == '0' && port[p - 2] == ':') /* port 0 is refused */
		abort();
	if (n < p || strcmp(text + n - p, port) != 0)
		abort();
	return 0;
}
