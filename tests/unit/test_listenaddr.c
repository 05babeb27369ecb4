/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/listenaddr: metrics_listen's values. Unix paths
 * (absolute, within a socket address), the loopback addresses and
 * localhost, each with its port; and the refusals, each with its reason:
 * an address other machines could reach, a name, a bad port, IPv6
 * without brackets, a relative path.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/listenaddr.h"

static void test_unix_path(void **state)
{
	(void)state;
	struct listen_addr a;
	char why[256];
	assert_int_equal(listen_addr_parse("/run/loaderd/metrics.sock", &a, why, sizeof(why)), 0);
	assert_int_equal(a.family, AF_UNIX);
	assert_string_equal(a.u.un.sun_path, "/run/loaderd/metrics.sock");
	char long_path[200];
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[0] = '/';
	long_path[sizeof(long_path) - 1] = '\0';
	assert_int_equal(listen_addr_parse(long_path, &a, why, sizeof(why)), -ENAMETOOLONG);
	assert_non_null(strstr(why, "longer than 107 bytes"));
	assert_int_equal(listen_addr_parse("metrics.sock", &a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "absolute Unix socket path"));
}

static void test_loopback(void **state)
{
	(void)state;
	struct listen_addr a;
	char why[256];
	assert_int_equal(listen_addr_parse("127.0.0.1:9400", &a, why, sizeof(why)), 0);
	assert_int_equal(a.family, AF_INET);
	assert_int_equal(ntohs(a.u.in.sin_port), 9400);
	assert_int_equal(ntohl(a.u.in.sin_addr.s_addr), 0x7f000001);
	assert_int_equal(listen_addr_parse("127.1.2.3:1", &a, why, sizeof(why)), 0);
	assert_int_equal(ntohl(a.u.in.sin_addr.s_addr), 0x7f010203);
	assert_int_equal(listen_addr_parse("localhost:65535", &a, why, sizeof(why)), 0);
	assert_int_equal(a.family, AF_INET);
	assert_int_equal(ntohs(a.u.in.sin_port), 65535);
	assert_int_equal(ntohl(a.u.in.sin_addr.s_addr), 0x7f000001);
	assert_int_equal(listen_addr_parse("[::1]:9400", &a, why, sizeof(why)), 0);
	assert_int_equal(a.family, AF_INET6);
	assert_true(IN6_IS_ADDR_LOOPBACK(&a.u.in6.sin6_addr));
	assert_int_equal(ntohs(a.u.in6.sin6_port), 9400);
	assert_int_equal(a.len, sizeof(struct sockaddr_in6));
}

static void refused(const char *text, const char *reason)
{
	struct listen_addr a;
	char why[256] = "";
	assert_int_equal(listen_addr_parse(text, &a, why, sizeof(why)), -EINVAL);
	if (!strstr(why, reason))
		fail_msg("%s: \"%s\" does not say \"%s\"", text, why, reason);
}

static void test_refused(void **state)
{
	(void)state;
	refused("0.0.0.0:9400", "not a loopback address");
	refused("10.1.2.3:9400", "not a loopback address");
	refused("[::]:9400", "not a loopback address");
	refused("[2001:db8::1]:9400", "not a loopback address");
	refused("[::ffff:127.0.0.1]:9400", "not a loopback address");
	refused("example.com:9400", "are not looked up");
	refused("::1:9400", "takes brackets");
	refused("127.0.0.1", "is neither");
	refused("[::1]", "no port after the address");
	refused("localhost", "is neither");
	refused("127.0.0.1:", "the port");
	refused("127.0.0.1:0", "the port");
	refused("127.0.0.1:65536", "the port");
	refused("127.0.0.1:+80", "the port");
	refused("127.0.0.1:080a", "the port");
	refused("127.0.0.1:080", "the port");
	refused("127.0.0.1:9400 ", "the port");
	refused(":9400", "are not looked up");
	refused("[::1:9400", "are not looked up");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unix_path),
		cmocka_unit_test(test_loopback),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
