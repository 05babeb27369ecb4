/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/memavail: the memory the arena can take, read from
 * fixture copies of /proc/meminfo, /proc/self/cgroup and a cgroup v2
 * tree: MemAvailable alone; a cgroup's memory.max minus memory.current
 * when that is smaller, also an ancestor's; "max" and absent files mean no
 * limit; cgroup v1 only is ignored; malformed files are ignored, never
 * misread.
 */
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/memavail.h"

struct fixture {
	char dir[64];
	char meminfo[128], self_cgroup[128], root[128];
	struct memavail_paths paths;
};

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* A file under the fixture's cgroup root: rel like "a/b/memory.max". */
static void put_cgroup(struct fixture *fx, const char *rel, const char *text)
{
	char path[512], dir[512];
	snprintf(path, sizeof(path), "%s/%s", fx->root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	for (char *p = dir + strlen(fx->root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(dir, 0755);
		*p = '/';
	}
	put(path, text);
}

static const char *const MEMINFO =
	"MemTotal:       32000000 kB\n"
	"MemFree:         1000000 kB\n"
	"MemAvailable:   20000000 kB\n"
	"Buffers:          100000 kB\n";

/* The fixture of a process in cgroup self ("0::/a/b\n") whose cgroup dir
 * (under the root, "" for the root itself, else ending in '/') has a limit
 * and a usage, MemAvailable being MEMINFO's. */
static void put_limited(struct fixture *fx, const char *self, const char *dir, const char *max,
			const char *current)
{
	char rel[256];
	put(fx->meminfo, MEMINFO);
	put(fx->self_cgroup, self);
	snprintf(rel, sizeof(rel), "%smemory.max", dir);
	put_cgroup(fx, rel, max);
	snprintf(rel, sizeof(rel), "%smemory.current", dir);
	put_cgroup(fx, rel, current);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_memavail.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->meminfo, sizeof(fx->meminfo), "%s/meminfo", fx->dir);
	snprintf(fx->self_cgroup, sizeof(fx->self_cgroup), "%s/cgroup", fx->dir);
	snprintf(fx->root, sizeof(fx->root), "%s/sys", fx->dir);
	assert_int_equal(mkdir(fx->root, 0755), 0);
	fx->paths = (struct memavail_paths){fx->meminfo, fx->self_cgroup, fx->root};
	*state = fx;
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	assert_int_equal(nftw(fx->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(fx);
	return 0;
}

static void test_meminfo_only(void **state)
{
	struct fixture *fx = *state;
	struct memavail m;
	put(fx->meminfo, MEMINFO);
	memavail_read(&fx->paths, &m); /* no cgroup file at all */
	assert_int_equal(m.bytes, 20000000ull * 1024);
	char expect[256];
	snprintf(expect, sizeof(expect), "MemAvailable in %s", fx->meminfo);
	assert_string_equal(m.source, expect);
}

static void test_nothing_known(void **state)
{
	struct fixture *fx = *state;
	struct memavail m;
	memavail_read(&fx->paths, &m); /* no file at all */
	assert_int_equal(m.bytes, UINT64_MAX);
	assert_string_equal(m.source, "no limit known");
	/* A kernel without MemAvailable; garbage in its place. */
	put(fx->meminfo, "MemTotal: 1000 kB\nMemFree: 10 kB\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, UINT64_MAX);
	put(fx->meminfo, "MemAvailable: lots kB\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, UINT64_MAX);
	put(fx->meminfo, "MemAvailable: 100 MB\n"); /* not the unit /proc writes */
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, UINT64_MAX);
	put(fx->meminfo, "MemAvailable: 99999999999999999999 kB\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, UINT64_MAX);
}

static void test_cgroup_limit(void **state)
{
	struct fixture *fx = *state;
	struct memavail m;
	put_limited(fx, "0::/system.slice/loaderd.service\n", "system.slice/loaderd.service/",
		    "1073741824\n", "73741824\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 1000000000ull);
	char expect[512];
	snprintf(expect, sizeof(expect), "cgroup /system.slice/loaderd.service: memory.max 1073741824 "
		 "- memory.current 73741824 (%s/system.slice/loaderd.service)", fx->root);
	assert_string_equal(m.source, expect);

	/* "max" there: no limit from it, MemAvailable rules. */
	put_cgroup(fx, "system.slice/loaderd.service/memory.max", "max\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 20000000ull * 1024);

	/* An ancestor's limit counts too. */
	put_cgroup(fx, "system.slice/memory.max", "5000000\n");
	put_cgroup(fx, "system.slice/memory.current", "1000000\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 4000000);
	assert_non_null(strstr(m.source, "cgroup /system.slice: memory.max 5000000"));

	/* The smallest wins, whichever level it is at. */
	put_cgroup(fx, "system.slice/loaderd.service/memory.max", "3000000\n");
	put_cgroup(fx, "system.slice/loaderd.service/memory.current", "0\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 3000000);
	assert_non_null(strstr(m.source, "cgroup /system.slice/loaderd.service:"));

	/* Over its limit already: nothing is available. */
	put_cgroup(fx, "system.slice/loaderd.service/memory.current", "3000001\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 0);
}

/* In a container (cgroup namespace) the process's cgroup is "/", and the
 * hierarchy's root carries the container's memory.max. */
static void test_cgroup_root(void **state)
{
	struct fixture *fx = *state;
	struct memavail m;
	put_limited(fx, "0::/\n", "", "2147483648\n", "147483648\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 2000000000ull);
	assert_non_null(strstr(m.source, "cgroup /: memory.max 2147483648"));
	/* memory.current missing: the limit itself. */
	char path[256];
	snprintf(path, sizeof(path), "%s/memory.current", fx->root);
	assert_int_equal(unlink(path), 0);
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 2147483648ull);
}

static void test_cgroup_ignored(void **state)
{
	struct fixture *fx = *state;
	struct memavail m;
	put(fx->meminfo, MEMINFO);
	put_cgroup(fx, "a/memory.max", "1000\n");
	/* cgroup v1 only: no "0::" line. */
	put(fx->self_cgroup, "4:memory:/a\n1:cpu:/a\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 20000000ull * 1024);
	/* Hybrid: the v2 line comes after v1 lines; a v1 controller named
	 * like v2 files does not count. */
	put(fx->self_cgroup, "12:memory:/b\n0::/a\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 1000);
	/* A malformed memory.max is no limit, never a misread one. */
	put_cgroup(fx, "a/memory.max", "12abc\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 20000000ull * 1024);
	put_cgroup(fx, "a/memory.max", "\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 20000000ull * 1024);
	/* A cgroup path that is not absolute is not v2's. */
	put_cgroup(fx, "a/memory.max", "1000\n");
	put(fx->self_cgroup, "0::a\n");
	memavail_read(&fx->paths, &m);
	assert_int_equal(m.bytes, 20000000ull * 1024);
}

/* The real files of this machine: whatever they say, a figure and its
 * source, never a crash. */
static void test_this_machine(void **state)
{
	(void)state;
	static const struct memavail_paths sys = MEMAVAIL_SYSTEM_PATHS;
	struct memavail m;
	memavail_read(&sys, &m);
	assert_true(m.bytes > 0);
	assert_true(m.source[0] != '\0');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_meminfo_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nothing_known, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cgroup_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cgroup_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cgroup_ignored, setup, teardown),
		cmocka_unit_test(test_this_machine),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
