/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/source/imagefolder (the listing of an imagefolder
 * tree, its scan threads and its cache on disk): on a tree with nested
 * directories, a symlinked class and file, a dangling symlink, odd names
 * (spaces, UTF-8, a byte that is not UTF-8, case) and files that are not
 * JPEGs, the listing is the same (order, names, sizes, labels, other
 * images) with 1 and several scan threads, scanned and read back from the
 * cache; the order is the one torchvision's ImageFolder gives (the names
 * spelled out); the cache is refused, saying why, once a file is added,
 * removed or renamed at any depth or a class is added, and when it is
 * corrupt, truncated or of another version, each time the tree listed
 * again; a listing whose directories just changed is not cached; a warm
 * cache reads a tree of 20,000 files faster than a scan.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/source/imagefolder_impl.h"

static char tmp[256], root[PATH_MAX], cache[PATH_MAX];

static void put(const char *rel, size_t bytes)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	static const char zeros[4096];
	assert_int_equal(write(fd, zeros, bytes), (ssize_t)bytes);
	close(fd);
}

static void dir(const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	assert_int_equal(mkdir(path, 0755), 0);
}

static void link_to(const char *target, const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	assert_int_equal(symlink(target, path), 0);
}

/* Every directory's mtime 10 s back, so that a listing may be cached at
 * once (a directory changed within the last 0.1 s is not). */
static void age(const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s%s%s", root, rel[0] ? "/" : "", rel);
	struct timespec t[2];
	clock_gettime(CLOCK_REALTIME, &t[0]);
	t[0].tv_sec -= 10;
	t[1] = t[0];
	assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static const char *const tree_dirs[] = {"", "ant", "ant/sub", "ant/sub/deep", "ant/Sub2", "bee",
					"caf\xc3\xa9", "odd \xff", "Zeta", "empty_but_nested",
					"empty_but_nested/x"};

static void age_all(void)
{
	for (size_t i = 0; i < sizeof(tree_dirs) / sizeof(tree_dirs[0]); i++)
		age(tree_dirs[i]);
}

static void make_tree(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/ldr-imagefolder-XXXXXX");
	assert_non_null(mkdtemp(tmp));
	snprintf(root, sizeof(root), "%s/root", tmp);
	snprintf(cache, sizeof(cache), "%s/cache", tmp);
	assert_int_equal(mkdir(root, 0755), 0);
	for (size_t i = 1; i < sizeof(tree_dirs) / sizeof(tree_dirs[0]); i++)
		dir(tree_dirs[i]);
	put("ant/b.jpg", 10);
	put("ant/A.JPG", 11);
	put("ant/a b.jpeg", 12);
	put("ant/notes.txt", 5);
	put("ant/pic.png", 6);
	put("ant/sub/z.jpg", 13);
	put("ant/sub/deep/y.jpg", 14);
	put("ant/Sub2/x.jpg", 15);
	put("bee/1.jpg", 16);
	put("bee/10.jpg", 17);
	put("bee/2.jpg", 18);
	link_to("/nonexistent/x.jpg", "bee/dangling.jpg");
	link_to("1.jpg", "bee/link.jpg");
	put("caf\xc3\xa9/\xc3\xa9t\xc3\xa9.jpg", 19);
	put("caf\xc3\xa9/ete.jpg", 20);
	put("odd \xff/\xfe.jpg", 21);
	put("Zeta/z.jpeg", 22);
	put("empty_but_nested/x/q.jpg", 23);
	put("stray.jpg", 1); /* a file in the root: no class */
	link_to("bee", "bee_link");
	age_all();
	age("bee_link");
}

static void rm_tree(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	assert_int_equal(system(cmd), 0);
}

static int scan(uint32_t threads, const char *cache_dir, struct image_index *ix)
{
	char err[4096];
	struct imagefolder_opts o = {.pipeline = "t", .roots = "", .cache_dir = cache_dir,
				     .threads = threads};
	int rc = imagefolder_scan(root, &o, ix, err, sizeof(err));
	if (rc < 0)
		print_message("scan: %s\n", err);
	return rc;
}

static void assert_same(const struct image_index *a, const struct image_index *b)
{
	assert_int_equal(a->n, b->n);
	assert_int_equal(a->n_classes, b->n_classes);
	assert_int_equal(a->other_images, b->other_images);
	assert_int_equal(a->n_dirs, b->n_dirs);
	assert_null(a->entries);
	assert_null(b->entries);
	for (uint64_t i = 0; i < a->n; i++) {
		char pa[PATH_MAX], pb[PATH_MAX];
		uint64_t sa, sb;
		int64_t la, lb;
		image_index_folder_sample(a, i, pa, sizeof(pa), &sa, &la);
		image_index_folder_sample(b, i, pb, sizeof(pb), &sb, &lb);
		assert_string_equal(pa, pb);
		assert_int_equal(sa, sb);
		assert_int_equal(la, lb);
	}
}

/* The order ImageFolder gives: classes by code point, a class's
 * directories by path, each directory's files by name. */
static const struct {
	const char *path;
	uint64_t bytes;
	int64_t label;
} expected[] = {
	{"Zeta/z.jpeg", 22, 0},
	{"ant/A.JPG", 11, 1}, {"ant/a b.jpeg", 12, 1}, {"ant/b.jpg", 10, 1},
	{"ant/Sub2/x.jpg", 15, 1}, {"ant/sub/z.jpg", 13, 1}, {"ant/sub/deep/y.jpg", 14, 1},
	{"bee/1.jpg", 16, 2}, {"bee/10.jpg", 17, 2}, {"bee/2.jpg", 18, 2},
	{"bee/dangling.jpg", 0, 2}, {"bee/link.jpg", 16, 2},
	{"bee_link/1.jpg", 16, 3}, {"bee_link/10.jpg", 17, 3}, {"bee_link/2.jpg", 18, 3},
	{"bee_link/dangling.jpg", 0, 3}, {"bee_link/link.jpg", 16, 3},
	{"caf\xc3\xa9/ete.jpg", 20, 4}, {"caf\xc3\xa9/\xc3\xa9t\xc3\xa9.jpg", 19, 4},
	{"empty_but_nested/x/q.jpg", 23, 5},
	{"odd \xff/\xfe.jpg", 21, 6},
};

static void test_order_threads_and_cache(void **state)
{
	(void)state;
	make_tree();
	struct image_index one, many, cold, warm;
	assert_int_equal(scan(1, NULL, &one), 0);
	size_t n = sizeof(expected) / sizeof(expected[0]);
	assert_int_equal(one.n, n);
	assert_int_equal(one.n_classes, 7);
	assert_int_equal(one.other_images, 1);
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX];
		uint64_t bytes;
		int64_t label;
		image_index_folder_sample(&one, i, path, sizeof(path), &bytes, &label);
		assert_string_equal(path, expected[i].path);
		assert_int_equal(bytes, expected[i].bytes);
		assert_int_equal(label, expected[i].label);
	}
	assert_int_equal(one.n_dirs, 10); /* the directories with samples */
	assert_int_equal(scan(5, NULL, &many), 0);
	assert_same(&one, &many);
	/* cold: scanned and written; warm: read back */
	assert_int_equal(scan(3, cache, &cold), 0);
	assert_same(&one, &cold);
	char real[PATH_MAX], file[PATH_MAX * 2];
	assert_non_null(realpath(root, real));
	imagefolder_cache_path(cache, real, file, sizeof(file));
	struct stat st;
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(scan(2, cache, &warm), 0);
	assert_same(&one, &warm);
	/* the cache's load on its own: read, not scanned */
	struct image_index loaded;
	char why[8192];
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(imagefolder_cache_load(cache, real, "", fd, &loaded, why, sizeof(why)), 0);
	assert_same(&one, &loaded);
	/* made for other job_roots: refused */
	assert_int_equal(imagefolder_cache_load(cache, real, "/elsewhere", fd, &loaded, why,
						sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "job_roots"));
	close(fd);
	image_index_free(&one);
	image_index_free(&many);
	image_index_free(&cold);
	image_index_free(&warm);
	image_index_free(&loaded);
	rm_tree();
}

/* The cache refused for why, then the tree listed again (and cached
 * anew once its directories are aged). */
static void expect_stale(const char *what, int code)
{
	char real[PATH_MAX], why[8192];
	assert_non_null(realpath(root, real));
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct image_index ix;
	int rc = imagefolder_cache_load(cache, real, "", fd, &ix, why, sizeof(why));
	close(fd);
	if (rc != code)
		print_message("%s: %d (%s)\n", what, rc, why);
	assert_int_equal(rc, code);
	assert_true(why[0] != '\0');
	struct image_index fresh, again;
	assert_int_equal(scan(1, NULL, &fresh), 0);
	age_all();
	assert_int_equal(scan(2, cache, &again), 0);
	assert_same(&fresh, &again);
	image_index_free(&again);
	assert_int_equal(scan(2, cache, &again), 0); /* now from the cache */
	assert_same(&fresh, &again);
	image_index_free(&fresh);
	image_index_free(&again);
}

static void prime(void)
{
	struct image_index ix;
	assert_int_equal(scan(2, cache, &ix), 0);
	image_index_free(&ix);
}

static void test_cache_invalidated(void **state)
{
	(void)state;
	make_tree();
	char a[PATH_MAX * 2], b[PATH_MAX * 2];
	prime();
	put("ant/sub/deep/new.jpg", 3); /* added, three levels down */
	expect_stale("added", -ESTALE);
	snprintf(a, sizeof(a), "%s/bee/2.jpg", root);
	assert_int_equal(unlink(a), 0); /* removed */
	expect_stale("removed", -ESTALE);
	snprintf(a, sizeof(a), "%s/ant/Sub2/x.jpg", root);
	snprintf(b, sizeof(b), "%s/ant/Sub2/w.jpg", root);
	assert_int_equal(rename(a, b), 0); /* renamed */
	expect_stale("renamed", -ESTALE);
	dir("new_class");
	put("new_class/n.jpg", 4); /* a class added */
	age("new_class");
	expect_stale("class added", -ESTALE);
	/* a directory just changed: not cached */
	put("Zeta/fresh.jpg", 5);
	struct image_index ix;
	assert_int_equal(scan(2, cache, &ix), 0);
	image_index_free(&ix);
	char real[PATH_MAX], why[8192];
	assert_non_null(realpath(root, real));
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(imagefolder_cache_load(cache, real, "", fd, &ix, why, sizeof(why)), -ESTALE);
	close(fd);
	rm_tree();
}

static void rewrite(const char *file, long at, const void *bytes, size_t n, off_t truncate_to)
{
	int fd = open(file, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	if (bytes)
		assert_int_equal(pwrite(fd, bytes, n, at), (ssize_t)n);
	if (truncate_to >= 0)
		assert_int_equal(ftruncate(fd, truncate_to), 0);
	close(fd);
}

static void test_cache_damaged(void **state)
{
	(void)state;
	make_tree();
	char real[PATH_MAX], file[PATH_MAX * 2];
	assert_non_null(realpath(root, real));
	imagefolder_cache_path(cache, real, file, sizeof(file));
	struct stat st;
	/* a byte of the payload flipped */
	prime();
	assert_int_equal(stat(file, &st), 0);
	rewrite(file, st.st_size / 2, "\x5a", 1, -1);
	expect_stale("corrupt", -EINVAL);
	/* truncated */
	assert_int_equal(stat(file, &st), 0);
	rewrite(file, 0, NULL, 0, st.st_size - 7);
	expect_stale("truncated", -EINVAL);
	/* another version */
	uint32_t v = IMAGEFOLDER_CACHE_VERSION + 1;
	rewrite(file, offsetof(struct cachefile_header, version), &v, sizeof(v), -1);
	expect_stale("version", -EINVAL);
	/* empty, and not a cache at all */
	rewrite(file, 0, NULL, 0, 0);
	expect_stale("empty", -EINVAL);
	rewrite(file, 0, "hello", 5, -1);
	expect_stale("not a cache", -EINVAL);
	rm_tree();
}

/* The decoder's reasons, from a good file's bytes: whole, then each
 * damage named. */
static void test_decode_reasons(void **state)
{
	(void)state;
	make_tree();
	prime();
	char real[PATH_MAX], file[PATH_MAX * 2], why[512];
	assert_non_null(realpath(root, real));
	imagefolder_cache_path(cache, real, file, sizeof(file));
	FILE *f = fopen(file, "rb");
	assert_non_null(f);
	static uint8_t buf[1 << 16];
	size_t len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	struct imagefolder_listing *l = malloc(sizeof(*l));
	assert_int_equal(imagefolder_cache_decode(buf, len, l, NULL, NULL, why, sizeof(why)), 0);
	assert_int_equal(l->ix.n, sizeof(expected) / sizeof(expected[0]));
	assert_string_equal(l->root, real);
	imagefolder_listing_free(l);
	assert_int_equal(imagefolder_cache_decode(buf, len - 1, l, NULL, NULL, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "truncated"));
	imagefolder_listing_free(l);
	buf[len - 1] ^= 1;
	assert_int_equal(imagefolder_cache_decode(buf, len, l, NULL, NULL, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "checksum"));
	imagefolder_listing_free(l);
	buf[8] = 9;
	assert_int_equal(imagefolder_cache_decode(buf, len, l, NULL, NULL, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "version 9"));
	imagefolder_listing_free(l);
	free(l);
	rm_tree();
}

static double seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* 100 classes of 200 files: the warm cache at least twice as fast as the
 * scan (best of three each; typically ten times). */
static void test_warm_cache_faster(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/ldr-imagefolder-XXXXXX");
	assert_non_null(mkdtemp(tmp));
	snprintf(root, sizeof(root), "%s/root", tmp);
	snprintf(cache, sizeof(cache), "%s/cache", tmp);
	assert_int_equal(mkdir(root, 0755), 0);
	for (int c = 0; c < 100; c++) {
		char d[64], f[160];
		snprintf(d, sizeof(d), "n%08d", c);
		dir(d);
		for (int i = 0; i < 200; i++) {
			snprintf(f, sizeof(f), "%s/%s_%d.JPEG", d, d, i);
			put(f, 0);
		}
		age(d);
	}
	age("");
	struct image_index ix;
	double scan_s = 1e9, warm_s = 1e9;
	for (int k = 0; k < 3; k++) {
		double t = seconds();
		assert_int_equal(scan(2, NULL, &ix), 0);
		t = seconds() - t;
		scan_s = t < scan_s ? t : scan_s;
		image_index_free(&ix);
	}
	prime();
	for (int k = 0; k < 3; k++) {
		char real[PATH_MAX], why[8192];
		assert_non_null(realpath(root, real));
		int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		double t = seconds();
		assert_int_equal(imagefolder_cache_load(cache, real, "", fd, &ix, why, sizeof(why)), 0);
		t = seconds() - t;
		close(fd);
		assert_int_equal(ix.n, 20000);
		warm_s = t < warm_s ? t : warm_s;
		image_index_free(&ix);
	}
	print_message("20,000 files: scan %.3f s, warm cache %.3f s\n", scan_s, warm_s);
	assert_true(warm_s * 2 < scan_s);
	rm_tree();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_threads_and_cache),
		cmocka_unit_test(test_cache_invalidated),
		cmocka_unit_test(test_cache_damaged),
		cmocka_unit_test(test_decode_reasons),
		cmocka_unit_test(test_warm_cache_faster),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
