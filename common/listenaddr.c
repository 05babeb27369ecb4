/* SPDX-License-Identifier: Apache-2.0 */
/* listenaddr: metrics_listen's value into a socket address (listenaddr.h). */
#include "common/listenaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "common/errtext.h"

#define WHAT "an absolute Unix socket path, or 127.0.0.1:PORT, [::1]:PORT or localhost:PORT"

/* PORT: 1..65535, decimal digits only, no leading zero. */
static bool parse_port(const char *s, unsigned short *port)
{
	unsigned long v = 0;
	if (!*s || *s == '0' || strlen(s) > 5)
		return false;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	if (v == 0 || v > 65535)
		return false;
	*port = (unsigned short)v;
	return true;
}

static int not_loopback(const char *text, char *why, size_t cap)
{
	return errtext(why, cap, -EINVAL, "\"%.200s\" is not a loopback address: the metrics "
		       "endpoint has no authentication, so it listens only on this machine (%s)",
		       text, WHAT);
}

int listen_addr_parse(const char *text, struct listen_addr *out, char *why, size_t cap)
{
	memset(out, 0, sizeof(*out));
	if (text[0] == '/') {
		size_t n = strlen(text);
		if (n >= sizeof(out->u.un.sun_path))
			return errtext(why, cap, -ENAMETOOLONG, "the path is longer than %zu bytes (a "
				       "Unix socket address)", sizeof(out->u.un.sun_path) - 1);
		out->family = AF_UNIX;
		out->u.un.sun_family = AF_UNIX;
		memcpy(out->u.un.sun_path, text, n + 1);
		out->len = (socklen_t)sizeof(out->u.un);
		return 0;
	}
	const char *colon = strrchr(text, ':');
	const char *bracket = strrchr(text, ']');
	if (!colon || (bracket && bracket > colon)) /* none, or only inside [...] */
		return errtext(why, cap, -EINVAL, "\"%.200s\" is neither %s%s", text, WHAT,
			       colon ? " (no port after the address)" : "");
	char host[64];
	size_t hn = (size_t)(colon - text);
	if (hn >= sizeof(host))
		return errtext(why, cap, -EINVAL, "\"%.200s\" is not %s", text, WHAT);
	memcpy(host, text, hn);
	host[hn] = '\0';
	unsigned short port;
	if (!parse_port(colon + 1, &port))
		return errtext(why, cap, -EINVAL, "\"%.200s\": the port is not an integer in 1..65535",
			       text);
	if (hn >= 2 && host[0] == '[' && host[hn - 1] == ']') {
		host[hn - 1] = '\0';
		struct in6_addr a6;
		if (inet_pton(AF_INET6, host + 1, &a6) != 1)
			return errtext(why, cap, -EINVAL, "\"%.200s\" is not %s", text, WHAT);
		if (!IN6_IS_ADDR_LOOPBACK(&a6))
			return not_loopback(text, why, cap);
		out->family = AF_INET6;
		out->u.in6.sin6_family = AF_INET6;
		out->u.in6.sin6_addr = a6;
		out->u.in6.sin6_port = htons(port);
		out->len = (socklen_t)sizeof(out->u.in6);
		return 0;
	}
	struct in_addr a4;
	if (strcmp(host, "localhost") == 0) {
		a4.s_addr = htonl(INADDR_LOOPBACK);
	} else if (inet_pton(AF_INET, host, &a4) != 1) {
		struct in6_addr a6;
		if (inet_pton(AF_INET6, host, &a6) == 1)
			return errtext(why, cap, -EINVAL, "\"%.200s\": an IPv6 address takes brackets, "
				       "as [::1]:PORT", text);
		return errtext(why, cap, -EINVAL, "\"%.200s\" is not %s (names other than localhost "
			       "are not looked up)", text, WHAT);
	}
	if ((ntohl(a4.s_addr) >> 24) != 127)
		return not_loopback(text, why, cap);
	out->family = AF_INET;
	out->u.in.sin_family = AF_INET;
	out->u.in.sin_addr = a4;
	out->u.in.sin_port = htons(port);
	out->len = (socklen_t)sizeof(out->u.in);
	return 0;
}
